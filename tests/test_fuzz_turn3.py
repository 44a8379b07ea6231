"""The fuzz reproducers of issue 24 (``tests/data/fuzz_turn3/SOURCE.md``): every one ends in a clean result or one
``error:`` line with exit 2 naming the file and the fix, never an internal error, a traceback or a silently wrong
answer. One test per class of failure (internal error on bad numbers, on bad encodings, calibrate-moe input checks,
horizon inputs, silently wrong answers, multi-line errors)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "fuzz_turn3"


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


def assert_one_error_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("error:") and err.count("error:") == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


VLLM = ("validate-perf", "--device", "h100-sxm", "--engine", "vllm")


@pytest.mark.parametrize(("name", "words"), [
    ("imp_tp_inf.vllm.json", ("tensor-parallel degree 'inf'",)),        # I1
    ("imp_tp_nan.vllm.json", ("tensor-parallel degree",)),              # I1
    ("imp_tokens_inf.vllm.json", ("input tokens per request inf",)),    # I2
    ("imp_completed_nan.vllm.json", ("per request nan",)),              # I2
    ("imp_model_id_number.vllm.json", ("model is 5, not a name", "--model")),  # I4
    ("imp_negative_ttft.vllm.json", ("TTFT -5.0 ms",)),                 # N3
])
def test_benchmark_file_with_impossible_numbers_is_one_error(name: str, words: tuple[str, ...]) -> None:
    code, _out, err = run(VLLM[0], str(DATA / name), *VLLM[1:])
    assert_one_error_line(code, err, name, *words)


def test_negative_ttft_is_never_written_by_convert_measurements(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    code, _out, err = run("convert-measurements", str(DATA / "imp_negative_ttft.vllm.json"), "--device", "h100-sxm",
                          "--engine", "vllm", "-o", str(out))
    assert_one_error_line(code, err, "TTFT")
    assert not out.exists()


def test_an_infinite_concurrency_cap_is_no_cap() -> None:
    """I3: ``max_concurrency: inf`` with ``request_rate: inf`` is a single burst (set aside), not int(inf)."""
    code, out, err = run(VLLM[0], str(DATA / "imp_max_concurrency_inf.vllm.json"), *VLLM[1:], "--json")
    assert code == 0, err
    assert "single-burst" in err and json.loads(out)["rows"] == []


@pytest.mark.parametrize("name", ["imp_non_utf8.vllm.json", "energy_non_utf8.csv"])
def test_a_file_that_is_not_utf8_is_one_error(name: str) -> None:
    """I5, I10: a 0xff byte is an exit-2 error naming the file and the byte, not UnicodeDecodeError."""
    cmd = ("validate-energy", str(DATA / name)) if name.startswith("energy") else (VLLM[0], str(DATA / name), *VLLM[1:])
    code, _out, err = run(*cmd)
    assert_one_error_line(code, err, name, "not UTF-8", "save the file as UTF-8")


def test_aiperf_csv_not_utf8_is_one_error() -> None:
    """I7."""
    code, _out, err = run("validate-perf", str(DATA / "imp_non_utf8.aiperf.csv"), "--device", "h100-sxm", "--engine", "trtllm",
                          "--tp", "2", "--model", "llama-3.1-8b", "--concurrency", "16")
    assert_one_error_line(code, err, "imp_non_utf8.aiperf.csv", "not UTF-8")


def test_utf16_benchmark_file_is_read_like_its_utf8_twin(tmp_path: Path) -> None:
    """I6: a UTF-16 file (byte-order mark) is decoded, and gives the same row as the same JSON in UTF-8."""
    utf8 = tmp_path / "same.vllm.json"
    utf8.write_text((DATA / "imp_utf16.vllm.json").read_text(encoding="utf-16"), encoding="utf-8")
    rows = []
    for path in (DATA / "imp_utf16.vllm.json", utf8):
        code, out, err = run(VLLM[0], str(path), *VLLM[1:], "--json")
        assert code == 0, err
        rows.append({k: v for k, v in json.loads(out)["rows"][0].items() if k not in ("id", "source")})
    assert rows[0] == rows[1] and rows[0]["ttft_ms"] > 0


def test_json_nested_too_deeply_is_one_error(tmp_path: Path) -> None:
    """I8: 100,000 nested lists: exit 2, not RecursionError."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code, _out, err = run(VLLM[0], str(deep), *VLLM[1:])
    assert_one_error_line(code, err, "deep.json", "nested too deeply")


@pytest.mark.parametrize(("name", "column"), [("energy_input_tokens_inf.csv", "input_tokens"),
                                               ("energy_batch_cap_nan.csv", "batch_cap_max_num_seqs"),
                                               ("energy_output_tokens_neg_inf.csv", "output_tokens")])
def test_energy_row_with_non_finite_number_is_set_aside_with_its_reason(name: str, column: str) -> None:
    """I9: the row is skipped and the column named; the same row unchanged is predicted."""
    code, out, err = run("validate-energy", str(DATA / name))
    assert code == 0 and "internal error" not in err, err
    assert "0 predicted, 1 skipped" in out and f"{column} " in out and "not in (0, " in out
    code, out, err = run("validate-energy", str(DATA / "energy_one_row_ok.csv"))
    assert code == 0 and "1 predicted, 0 skipped" in out, err


@pytest.mark.parametrize(("name", "words"), [
    ("moe_precision_fp3.csv", ("row 2", "unknown precision 'fp3'")),          # I11
    ("moe_kv_precision_fp3.csv", ("row 2", "unknown kv_precision 'fp3'")),    # I12
    ("moe_cpu_device.csv", ("row 2", "xeon6-6980p")),                         # I13
    ("moe_batch_1e308.csv", ("row 2", "batch_per_rank 1e+308")),              # N2
    ("moe_header_only.csv", ("no measured rows",)),                           # N4
])
def test_calibrate_moe_bad_rows_are_one_error_and_nothing_written(tmp_path: Path, name: str, words: tuple[str, ...]) -> None:
    out = tmp_path / "moe.yaml"
    code, _out, err = run("calibrate-moe", str(DATA / name), "--calibration", "none", "-o", str(out), "--json")
    assert_one_error_line(code, err, *words)
    assert not out.exists()


def test_calibrate_moe_to_a_missing_folder_is_one_error(tmp_path: Path) -> None:
    """I14: checked before the fit, so nothing is computed for nothing."""
    code, _out, err = run("calibrate-moe", str(DATA / "moe_base.csv"), "--calibration", "none", "-o", str(tmp_path / "no" / "y.yaml"))
    assert_one_error_line(code, err, "--output", "does not exist")


def test_horizon_fleet_file_in_utf16(tmp_path: Path) -> None:
    """I15: a UTF-16 fleet file reads as its UTF-8 twin; a 0xff byte is an exit-2 error."""
    from planner.horizon.demand import _read_window_csv

    text = "window_start_s,rate_rps,cv\n0,1.5,1.1\n600,2.0,0.9\n"
    (tmp_path / "u16.csv").write_text(text, encoding="utf-16")
    (tmp_path / "u8.csv").write_text(text, encoding="utf-8")
    a, b = _read_window_csv(tmp_path / "u16.csv"), _read_window_csv(tmp_path / "u8.csv")
    assert a.equals(b) and a["rate_rps"].tolist() == [1.5, 2.0]
    (tmp_path / "bad.csv").write_bytes(b"0,1.5\n600,\xff\n")
    from planner.errors import InputError

    with pytest.raises(InputError, match="not UTF-8"):
        _read_window_csv(tmp_path / "bad.csv")


def test_horizon_growth_draws_outside_the_schema_fail_before_the_solve() -> None:
    """I16: exit 2 in about a second (the draws are checked before anything is solved)."""
    code, _out, err = run("horizon", str(ROOT / "instances" / "fleet-horizon.yaml"), "--no-baseline", "--monte-carlo", "3",
                          "--growth-dist", "normal(0.05,10)", "--seed", "1")
    assert_one_error_line(code, err, "--growth-dist", "3 of 3 draws", "(-0.5, 1]")


def test_horizon_rate_scale_below_the_solver_tolerance_is_rejected() -> None:
    """N6: 1e-12 gave 0 devices for non-zero demand; the bound says why."""
    from pydantic import ValidationError

    from planner.schema.horizon import DemandProfile

    with pytest.raises(ValidationError, match="greater than or equal to 0.000001"):
        DemandProfile(fleet_file="x.csv", rate_scale=1e-12)
    assert DemandProfile(fleet_file="x.csv", rate_scale=1e-6).rate_scale == 1e-6


def test_servegen_trace_cut_to_three_columns_counts_its_windows() -> None:
    """N1: the windows with traffic are active (they were all 'empty' with the CV falling back to 1.0)."""
    code, out, err = run("characterize", str(DATA / "servegen_3col" / "servegen_multimodal_mm-image_chunk-5-trace.csv"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["empty_windows"]["600s"] == 0 and doc["interarrival_cv"] != 1.0
    assert any("3 of ServeGen's 6 columns" in n for n in doc["notes"])


def test_a_name_with_a_newline_stays_on_one_error_line() -> None:
    """C1."""
    code, _out, err = run("check-instance", str(DATA / "check_instance_newline_device.yaml"))
    assert code == 2 and "internal error" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "'line\\nbreak'" in err


def test_a_feasible_plan_that_misses_a_target_says_so(solved_example: Any) -> None:
    """N5: plan.json marked disaggregated ``feasible: true`` with ``ttft_met: false`` and nothing else; every plan now
    carries ``meets_targets``, recomputed from its own flags on reading (an edited value cannot stand)."""
    from planner.schema.plan import PlanResult

    solved = solved_example("enterprise-chat")
    data = solved.plan_data()
    assert all(a["meets_targets"] is True for a in data["architectures"].values())
    arch = data["verdict"]["winner"]
    data["architectures"][arch]["latency"][0]["ttft_met"] = False
    data["architectures"][arch]["meets_targets"] = True  # a stale or edited value is ignored
    plan = PlanResult.model_validate(data).architectures[arch]
    assert plan.feasible and not plan.meets_targets
    assert plan.model_dump(mode="json")["meets_targets"] is False


# --- found by benchmarks/fuzz_readers.py (5,000 inputs, seed 7) ------------------------------------------------

BENCH = ROOT / "tests" / "data" / "benchmarks"


@pytest.mark.parametrize("telemetry", [{"endpoints": 1.5}, {"endpoints": {"h:1": {"gpus": "x"}}}, {"endpoints": {"h:1": {"gpus": {"g": {"gpu_name": 7}}}}}])
def test_aiperf_telemetry_of_the_wrong_shape_names_no_gpu(tmp_path: Path, telemetry: dict[str, Any]) -> None:
    """An edited telemetry block (a number or string where a mapping was) was an AttributeError; now the GPU is
    simply not named by the file, and the user is asked for --device."""
    doc = json.loads((BENCH / "profile_export_aiperf.json").read_text(encoding="utf-8"))
    doc["telemetry_data"] = telemetry
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, _out, err = run("validate-perf", str(path), "--engine", "trtllm", "--tp", "4")
    assert_one_error_line(code, err, "does not say the device", "--device")


def test_absurd_lengths_and_latencies_are_one_error_not_an_overflow(tmp_path: Path) -> None:
    """1e308 tokens per request overflowed the predictor (a RuntimeWarning and inf); the bounds say why."""
    import csv

    with (BENCH / "profile_export_genai_perf.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    hit = 0
    for r in rows:
        if r and r[0].strip().lower() in ("input sequence length", "time to first token (ms)"):
            r[1], hit = "1e308", hit + 1
    assert hit == 2
    path = tmp_path / "genai.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _out, err = run("validate-perf", str(path), "--device", "h100-sxm", "--engine", "vllm", "--model", "llama-3.1-8b",
                              "--tp", "8", "--concurrency", "1")
    assert_one_error_line(code, err, "1e+308", "10,000,000")


def test_energy_row_with_an_absurd_number_is_set_aside_without_overflow(tmp_path: Path) -> None:
    """Found by benchmarks/fuzz_readers.py (seed 11): output_tokens 1e308 overflowed the roofline (RuntimeWarning)."""
    import csv

    with (DATA / "energy_one_row_ok.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    rows[0]["output_tokens"] = "1e308"
    path = tmp_path / "runs.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run("validate-energy", str(path))
    assert code == 0 and "0 predicted, 1 skipped" in out and "output_tokens 1e+308 not in (0, 1e+07]" in out, (out, err)


@pytest.mark.parametrize("command", ["validate-energy", "validate-perf"])
def test_a_csv_field_over_the_csv_limit_is_one_error(tmp_path: Path, command: str) -> None:
    """Found by benchmarks/fuzz_readers.py (seed 23): csv.Error 'field larger than field limit' was an internal error."""
    path = tmp_path / "runs.csv"
    head = (DATA / "energy_one_row_ok.csv").read_text(encoding="utf-8").splitlines()[0] if command == "validate-energy" \
        else "device,model,engine,precision,isl,osl"
    path.write_text(head + "\n" + "x" * 200_000 + "\n", encoding="utf-8")
    args = [command, str(path)] + ([] if command == "validate-energy" else ["--device", "h100-sxm", "--engine", "vllm"])
    code, _out, err = run(*args)
    assert_one_error_line(code, err, "runs.csv", "not a readable CSV", "field limit")


@pytest.mark.parametrize("row", ["0,1e308,1.0", "1e300,5,1.0", "0,5,1e9"])
def test_fleet_rows_out_of_range_are_one_error_without_numpy_warnings(tmp_path: Path, row: str) -> None:
    """'numpy RuntimeWarnings leak to stderr on huge rates' (fuzz-turn3, also seen): a fleet file's rate, start and CV
    are bounded as the ServeGen reader bounds them, and the row is named."""
    from planner.errors import InputError
    from planner.horizon.demand import _read_window_csv

    path = tmp_path / "fleet.csv"
    path.write_text("window_start_s,rate_rps,cv\n600,3,1.1\n" + row + "\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="line 3: .*out of range"):
            _read_window_csv(path)
