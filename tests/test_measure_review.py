"""Review of the measurement inputs (calibrate, validate-perf, convert-measurements): options that
contradict a file, impossible numbers in our CSV, in-sample figures, the data copy, unknown
precisions, leave-one-device-out, nothing predicted, and the vLLM run checks. One test per finding."""

from __future__ import annotations

import csv
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "tests" / "data" / "benchmarks"
DATA_COPY = ROOT / "models" / "calibration" / "h100_dense.measurements.csv"
SILICON_H100 = ROOT / "models" / "measured" / "silicon_h100_dense.csv"
SILICON_H200 = ROOT / "models" / "measured" / "silicon_h200_dense.csv"


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


def base_rows(n: int = 12) -> list[dict[str, str]]:
    """``n`` shipped H100 rows of qwen3-32b on vLLM, in our format."""
    with DATA_COPY.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["model"] == "qwen3-32b" and r["engine"] == "vllm"]
    return rows[:n]


def write_csv(path: Path, rows: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> Path:
    fields = [k for k in rows[0] if k not in drop]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def vllm_json(path: Path, **changes: Any) -> Path:
    doc = json.loads((BENCH / "vllm_bench_serve_closed.json").read_text(encoding="utf-8"))
    doc.update(changes)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# 1. options fill what a file does not say; one that contradicts it is an error
def test_options_that_contradict_a_benchmark_file_are_an_error_naming_each_file(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    code, _, err = run("convert-measurements", str(BENCH / "vllm_bench_serve_open.json"), str(BENCH / "vllm_bench_serve_closed.json"),
                       "--device", "h100-sxm", "--engine", "vllm", "--tp", "1", "--concurrency", "8", "--model", "llama-3.1-8b", "-o", str(out))
    assert code == 2 and not out.exists(), err
    for needle in ("vllm_bench_serve_open.json: load: the file records load an open loop at 2 req/s, but --concurrency 8",
                   "vllm_bench_serve_closed.json: load: the file records load a closed loop of 32 users, but --concurrency 8",
                   "vllm_bench_serve_closed.json: tensor-parallel degree: the file records tensor-parallel degree 4, but --tp 1"):
        assert needle in err, err


def test_model_option_against_a_files_model_replaces_it_with_a_warning_per_file(tmp_path: Path) -> None:
    """--model names the checkpoint a client's model name stands for (a served-model-name alias, a config.json): legitimate, said per file."""
    out = tmp_path / "x.csv"
    code, _, err = run("convert-measurements", str(BENCH / "vllm_bench_serve_closed.json"), "--device", "h100-sxm", "--engine", "vllm",
                       "--model", "llama-3.1-8b", "-o", str(out))
    assert code == 0, err
    assert "warning: vllm_bench_serve_closed.json: --model llama-3.1-8b replaces the file's model 'Qwen/Qwen3-32B' (qwen3-32b)" in err


def test_device_option_against_a_silicon_file_is_an_error() -> None:
    code, _, err = run("validate-perf", str(SILICON_H200), "--device", "h100-sxm")
    assert code == 2 and "the file records device 'h200-sxm', but --device h100-sxm was given" in err and "lines 2, 3" in err, err


def test_an_option_that_agrees_with_the_file_is_fine_and_the_client_backend_is_replaced_with_a_warning() -> None:
    code, out, err = run("validate-perf", str(BENCH / "vllm_bench_serve_closed.json"), str(BENCH / "sglang_bench_serving.jsonl"),
                         "--device", "h100-sxm", "--engine", "vllm", "--model", "qwen3-32b", "--tp", "4", "--json")
    assert code == 0, err
    assert "warning: sglang_bench_serving.jsonl: --engine vllm replaces the file's engine 'sglang'" in err


def test_options_fill_the_columns_our_csv_lacks(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "notp.csv", base_rows(), drop=("tp",))
    code, out, err = run("validate-perf", str(path), "--tp", "2", "--json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["predicted"] == 12 and all(r["tp"] == 2 for r in json.loads(out)["rows"])


def test_an_option_against_a_column_of_our_csv_is_an_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "rows.csv", base_rows())
    code, _, err = run("validate-perf", str(path), "--engine", "sglang")
    assert code == 2 and "rows.csv: lines 2, 3, 4, 5, 6 and 7 more: engine: the file records engine 'vllm', but --engine sglang" in err, err


# 2. calibrate: no MAPE figures for an engine without rows
def test_calibrate_says_no_rows_for_engines_without_rows(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "base.csv", base_rows())
    code, out, err = run("calibrate", str(path), "-o", str(tmp_path / "base.yaml"))
    assert code == 0, err
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.split() and ln.split()[0] in ("trtllm", "sglang", "vllm", "default")}
    assert lines["trtllm"].rstrip().endswith("no rows      no rows") and lines["sglang"].rstrip().endswith("no rows      no rows")
    assert "no rows" not in lines["vllm"] and "no rows" not in lines["default"]


# 3. in sample
def test_validate_perf_says_in_sample_on_the_calibrations_own_file() -> None:
    code, out, err = run("validate-perf", str(SILICON_H100))
    assert code == 0, err
    assert "in sample: the calibration h100_dense was fitted on" in out and "— in sample" in out
    code, out, _ = run("validate-perf", str(SILICON_H100), "--json")
    s = json.loads(out)["summary"]
    assert s["in_sample"] is True and s["in_sample_files"] == [str(SILICON_H100)]


def test_validate_perf_on_other_rows_is_not_in_sample(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "rows.csv", base_rows())
    code, out, _ = run("validate-perf", str(path), "--json")
    assert code == 0 and json.loads(out)["summary"]["in_sample"] is False


# 4. impossible numbers in our CSV
@pytest.mark.parametrize(("column", "value", "reason"), [
    ("ttft_ms", "-154.2", "ttft_ms not in (0, 86,400,000] ms"),
    ("ttft_ms", "0", "ttft_ms not in (0, 86,400,000] ms"),
    ("tpot_ms", "inf", "tpot_ms not in (0, 86,400,000] ms"),
    ("ttft_ms", "1e308", "ttft_ms not in (0, 86,400,000] ms"),
    ("isl", "inf", "isl not in (0, 10,000,000] tokens"),
    ("isl", "1e30", "isl not in (0, 10,000,000] tokens"),
])
def test_out_of_bounds_rows_are_skipped_and_counted(tmp_path: Path, column: str, value: str, reason: str) -> None:
    rows = base_rows()
    for r in rows[:3]:
        r[column] = value
    path = write_csv(tmp_path / "bad.csv", rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run("validate-perf", str(path), "--json")
    assert code == 0, err
    res = json.loads(out)
    s = res["summary"]
    assert (s["rows"], s["predicted"], s["not_predicted"]) == (12, 9, 3)
    assert s["mape_ttft_rows"] == 9 and s["mape_tpot_rows"] == 9
    assert [r["reason"] for r in res["rows"] if r.get("reason")] == [reason] * 3
    assert all(r["ttft_error_pct"] is None for r in res["rows"] if r.get("reason"))
    code, out, _ = run("validate-perf", str(path))
    assert "12 rows, 9 predicted, 3 not" in out and "over 9 rows" in out and f"not predicted (3 rows): {reason}" in out


def test_out_of_bounds_rows_are_not_fitted(tmp_path: Path) -> None:
    rows = base_rows()
    rows[0]["ttft_ms"] = "1e308"
    path = write_csv(tmp_path / "huge.csv", rows)
    code, out, err = run("calibrate", str(path), "-o", str(tmp_path / "c.yaml"), "--json")
    assert code == 0, err
    assert json.loads(out)["fit"]["rows_used"] == 11


def test_a_file_whose_every_row_is_out_of_bounds_is_one_error(tmp_path: Path) -> None:
    rows = base_rows(3)
    for r in rows:
        r["ttft_ms"] = "-1"
    code, _, err = run("validate-perf", str(write_csv(tmp_path / "neg.csv", rows)))
    assert code == 2 and "no row has usable numbers: ttft_ms not in (0, 86,400,000] ms (3 rows)" in err, err


# 5. the data copy
def test_calibrate_never_writes_its_data_copy_onto_its_input(tmp_path: Path) -> None:
    src = write_csv(tmp_path / "s.measurements.csv", base_rows())
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    code, out, err = run("calibrate", str(src), "-o", str(tmp_path / "s.yaml"))
    assert code == 0, err
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before and "the input itself, no copy written" in out
    code, _, err = run("calibrate", str(src), "-o", str(src))
    assert code == 2 and "is an input file" in err and hashlib.sha256(src.read_bytes()).hexdigest() == before


def test_a_failed_calibrate_leaves_no_copy_and_keeps_an_existing_file(tmp_path: Path) -> None:
    src = write_csv(tmp_path / "one.csv", base_rows(1))
    keep = tmp_path / "one.measurements.csv"
    keep.write_text("old\n", encoding="utf-8")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    code, _, err = run("calibrate", str(src), "-o", str(tmp_path / "one.yaml"))
    assert code == 2 and keep.read_text(encoding="utf-8") == "old\n", err
    code, _, _ = run("calibrate", str(src), "-o", str(fresh / "one.yaml"))
    assert code == 2 and list(fresh.iterdir()) == []


# 6. precisions the roofline does not know
def test_fp16_rows_are_skipped_with_their_reason(tmp_path: Path) -> None:
    rows = base_rows(2)
    rows[0]["precision"] = "fp16"
    path = write_csv(tmp_path / "fp16.csv", rows, drop=("kv_precision", "kv_precision_source"))
    code, out, err = run("validate-perf", str(path))
    assert code == 0, err
    assert "2 rows, 1 predicted, 1 not" in out and "unknown precision 'fp16'" in out


def test_an_awq_checkpoint_is_a_reason_not_an_internal_error(tmp_path: Path) -> None:
    path = vllm_json(tmp_path / "awq.json", model_id="Qwen/Qwen3-32B-AWQ")
    code, _, err = run("validate-perf", str(path), "--device", "h100-sxm", "--engine", "vllm")
    assert code == 2 and "internal error" not in err and "unknown precision 'int4'" in err, err


def test_calibrate_skips_fp16_rows(tmp_path: Path) -> None:
    rows = base_rows()
    rows[0]["precision"] = "fp16"
    path = write_csv(tmp_path / "fp16.csv", rows, drop=("kv_precision", "kv_precision_source"))
    code, out, err = run("calibrate", str(path), "-o", str(tmp_path / "c.yaml"), "--json")
    assert code == 0, err
    assert json.loads(out)["fit"]["rows_skipped"] == 1


# 7. leave one device out; the fewest rows a fit takes
def test_leave_one_device_out_skips_and_names_a_device_it_cannot_fit_without(tmp_path: Path) -> None:
    rows = base_rows()
    h200 = dict(rows[0], device="h200-sxm", id="h200")
    path = write_csv(tmp_path / "lodo.csv", [*rows, h200])
    code, out, err = run("validate-perf", str(path), "--leave-one-device-out")
    assert code == 0, err
    assert "held-out device h100-sxm skipped (12 rows not predicted)" in out and "the fit needs at least 3" in out
    assert "h200-sxm         all" in out


def test_calibrate_on_too_few_rows_says_the_minimum(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "single.csv", base_rows(1))
    code, _, err = run("calibrate", str(path), "-o", str(tmp_path / "s.yaml"))
    assert code == 2 and "single.csv: too few usable rows to calibrate on: 1 predictable row" in err and "at least 3" in err, err


# 8. nothing predicted; names in our CSV
def test_validate_perf_of_a_header_only_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "header.csv"
    path.write_text(DATA_COPY.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    code, _, err = run("validate-perf", str(path))
    assert code == 2 and "no rows to predict" in err, err


def test_validate_perf_with_no_row_predicted_is_an_error_with_the_reasons(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "notp.csv", base_rows(), drop=("tp",))
    code, _, err = run("validate-perf", str(path))
    assert code == 2 and "none of the 12 rows predicted: agg row needs tp and concurrency (12 rows)" in err, err


def test_our_csv_resolves_gpu_and_checkpoint_names(tmp_path: Path) -> None:
    rows = [dict(r, device="NVIDIA H100 80GB HBM3", model="Qwen/Qwen3-32B") for r in base_rows()]
    code, out, err = run("validate-perf", str(write_csv(tmp_path / "hf.csv", rows)), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["summary"]["predicted"] == 12 and {(r["device"], r["model"]) for r in res["rows"]} == {("h100-sxm", "qwen3-32b")}


# 9. vLLM run checks, repeats, hints
@pytest.mark.parametrize(("changes", "needle"), [
    ({"max_concurrency": -5}, "the concurrency -5 is not a whole number of users"),
    ({"max_concurrency": 32.7}, "the concurrency 32.7 is not a whole number of users"),
    ({"request_rate": -2}, "the request rate -2 req/s is not a rate"),
    ({"request_rate": 0}, "the request rate 0 req/s is not a rate"),
    ({"completed": 1, "failed": 319, "total_input_tokens": 1024, "total_output_tokens": 1024}, "319 of 320 requests failed"),
])
def test_impossible_vllm_runs_are_an_error(tmp_path: Path, changes: dict[str, Any], needle: str) -> None:
    path = vllm_json(tmp_path / "run.json", **changes)
    code, _, err = run("validate-perf", str(path), "--device", "h100-sxm", "--engine", "vllm")
    assert code == 2 and needle in err, err


def test_a_few_failed_requests_are_noted(tmp_path: Path) -> None:
    doc = json.loads((BENCH / "vllm_bench_serve_closed.json").read_text(encoding="utf-8"))
    path = vllm_json(tmp_path / "run.json", failed=3, completed=doc["completed"] - 3)
    code, _, err = run("validate-perf", str(path), "--device", "h100-sxm", "--engine", "vllm")
    assert code == 0 and "run.json: 3 of 320 requests failed" in err, err


def test_repeated_files_and_rows_are_noted(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "rows.csv", base_rows(4))
    code, _, err = run("validate-perf", str(path), str(path))
    assert code == 0 and "is given 2 times" in err and "4 rows repeat another row" in err, err


def test_an_energy_file_points_to_validate_energy() -> None:
    code, _, err = run("validate-perf", str(ROOT / "models" / "measured" / "measured_energy.csv"))
    assert code == 2 and "planner validate-energy" in err, err


def test_a_semicolon_csv_gets_a_separator_hint(tmp_path: Path) -> None:
    path = tmp_path / "semi.csv"
    path.write_text(DATA_COPY.read_text(encoding="utf-8").replace(",", ";"), encoding="utf-8")
    code, _, err = run("validate-perf", str(path))
    assert code == 2 and "separated by semicolons" in err, err


def test_errors_about_several_files_name_the_files_not_the_command_line(tmp_path: Path) -> None:
    one = write_csv(tmp_path / "one.csv", base_rows(1))
    code, _, err = run("calibrate", str(one), str(one), "-o", str(tmp_path / "two.yaml"))
    assert code == 2 and f"error: {one}, {one}: too few usable rows" in err and "<command line>" not in err, err
    assert not (tmp_path / "two.measurements.csv").exists()
    notp = write_csv(tmp_path / "notp.csv", base_rows(2), drop=("tp",))
    code, _, err = run("validate-perf", str(notp), str(notp))
    assert code == 2 and f"{notp}, {notp}: none of the 4 rows predicted" in err and "<command line>" not in err, err
