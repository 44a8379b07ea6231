"""Review of the energy fit and check: bounds reported in their own units, a fit without a curve refused,
rows predicted on something other than what they state made visible, J per token checked against
power x GPUs / tokens/s."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.perf.energy_check import validate_energy
from planner.perf.energy_runs import (
    APPROX_PARALLEL,
    APPROX_PRECISION,
    JTOK_REASON,
    JTOK_RTOL,
    read_energy_runs,
    resolve_runs,
)
from planner.perf.power import load_power_calibration
from planner.perf.power_fit import MIN_ROWS_PER_DEVICE, fit_power_report

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "models" / "measured" / "measured_energy.csv"


def _base_rows() -> list[dict[str, str]]:
    """The shipped file's first 12 rows: v3.0 GPQA runs on H100 (Qwen3-14B, Qwen3-235B-A22B bf16 and FP8)."""
    with MEASURED.open(encoding="utf-8-sig", newline="") as fh:
        return [dict(r) for _, r in zip(range(12), csv.DictReader(fh), strict=False)]


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _calibrate(csv_path: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["calibrate-energy", str(csv_path), "-o", str(out), *extra])
    return res.exit_code, res.stdout, res.stderr


# --- item 1: parameters on a bound are printed, in the parameter's own units ----------------------


def test_shipped_fit_prints_bounds_in_microseconds(shipped_energy_fit) -> None:  # noqa: ANN001 - fixture
    """The vllm-0.5.4 throughput fit ends on eta_b's and allreduce_overhead_us's upper bounds: printed
    as `planner calibrate` prints fit warnings, the bound in µs (200), not the solver's scaled 2.
    (``calibrate-energy MEASURED``: the session's one run, tests/conftest.py.)"""
    code, err, out = shipped_energy_fit.exit_code, shipped_energy_fit.stderr, shipped_energy_fit.out
    assert code == 0, err
    assert ("warning: throughput measured_energy.csv vllm-0.5.4 (314 runs): eta_b (upper 1), allreduce_overhead_us (upper 200) "
            "ended on a bound") in err
    cal = load_power_calibration(out)
    assert cal is not None
    assert "allreduce_overhead_us (upper 200)" in cal.engines["vllm-0.5.4"].source
    assert "(upper 2)" not in cal.engines["vllm-0.5.4"].source


def test_shipped_numbers_are_what_the_fit_writes(shipped_energy_fit) -> None:  # noqa: ANN001 - fixture
    """Hard constraint: models/calibration/power.yaml's numbers are what calibrate-energy writes today
    (only the source/description strings may differ; its numbers to 2e-3 relative, the fit's drift across scipy / BLAS
    versions). (``calibrate-energy MEASURED``: the session's one run.)"""
    out = shipped_energy_fit.out
    assert shipped_energy_fit.exit_code == 0
    fresh, shipped = load_power_calibration(out), load_power_calibration(ROOT / "models" / "calibration" / "power.yaml")
    assert fresh is not None and shipped is not None

    def numbers(cal):  # noqa: ANN001, ANN202 - a PowerCalibration
        d = cal.model_dump(mode="json")
        for c in (*d["curves"].values(), *d["engines"].values()):
            c.pop("source")
        return {k: v for k, v in d.items() if k not in ("description", "data_file")}

    def flat(d, at=""):  # noqa: ANN001, ANN202 - {path: leaf}: numbers compared to the fit's precision, the rest exactly
        if isinstance(d, dict):
            return {k: v for key, sub in d.items() for k, v in flat(sub, f"{at}/{key}").items()}
        if isinstance(d, list):
            return {k: v for i, sub in enumerate(d) for k, v in flat(sub, f"{at}/{i}").items()}
        return {at: d}

    got, want = flat(numbers(fresh)), flat(numbers(shipped))
    assert got.keys() == want.keys()
    floats = [k for k, v in want.items() if isinstance(v, float)]
    assert {k: v for k, v in got.items() if k not in floats} == {k: v for k, v in want.items() if k not in floats}
    # the robust least-squares fit's digits move with scipy / BLAS along the curves' flat directions (scipy 1.17.1 on
    # 2026-12-07: the A100 curve's max_frac 0.82878 against 0.82893 shipped, w_compute / w_bandwidth alike, 7e-4 relative
    # at most; the engines' terms 1e-8); a change of the fit or of the data moves them by far more than 2e-3
    assert {k: got[k] for k in floats} == pytest.approx({k: want[k] for k in floats}, rel=2e-3, abs=1e-9)


def test_power_curve_on_its_lower_bound_is_a_warning(tmp_path: Path) -> None:
    """mxfp4 runs of a dense model (the reviewer's en_fp4.csv): w_compute ends at its lower bound 0."""
    rows = [dict(r, precision="mxfp4") for r in _base_rows()]
    code, _out, err = _calibrate(_write(tmp_path / "fp4.csv", rows), tmp_path / "o.yaml")
    assert code == 0, err
    assert "warning: power curve h100-sxm (9 vllm-0.11.1 runs): w_compute (lower 0) ended on a bound" in err


def test_power_above_tdp_ends_on_max_frac_bound(tmp_path: Path) -> None:
    """5 kW per 700 W GPU (J per token consistent with it): f_max (``max_frac``) stops at its 1.1 bound."""
    rows = [dict(r, avg_power_w_per_gpu="5000",
                 energy_j_per_output_token=repr(5000 * float(r["gpu_count"]) / float(r["output_throughput_tok_per_s"])))
            for r in _base_rows()]
    code, _out, err = _calibrate(_write(tmp_path / "hot.csv", rows), tmp_path / "o.yaml")
    assert code == 0, err
    assert "max_frac (upper 1.1) ended on a bound" in err


def test_json_output_carries_warnings_and_notes(tmp_path: Path) -> None:
    rows = [dict(r, precision="mxfp4") for r in _base_rows()]
    res = CliRunner().invoke(main, ["calibrate-energy", str(_write(tmp_path / "fp4.csv", rows)), "-o",
                                                    str(tmp_path / "o.yaml"), "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert any("w_compute (lower 0)" in w for w in data["warnings"])
    assert any(APPROX_PRECISION in n for n in data["notes"])


# --- item 2: a fit without a curve writes nothing and exits 2 ---------------------------------------


def test_no_predictable_run_exits_2_naming_the_skips(tmp_path: Path) -> None:
    rows = [dict(r, gpu="H900-SXM") for r in _base_rows()]
    out = tmp_path / "e0.yaml"
    code, stdout, err = _calibrate(_write(tmp_path / "unk.csv", rows), out)
    assert code == 2
    assert "no predictable run, nothing written" in err and "12 rows: GPU has no catalog device" in err
    assert not out.exists() and "Traceback" not in stdout + err


def test_into_catalog_never_replaces_the_shipped_file_with_an_empty_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--into-catalog writes the power file of the calibration folder; with no curve it is left as it was."""
    import planner.perf.power as power

    target = tmp_path / "power.yaml"
    target.write_text("kept\n", encoding="utf-8")
    monkeypatch.setattr(power, "power_file", lambda: target)
    rows = [dict(r, gpu="H900-SXM") for r in _base_rows()]
    res = CliRunner().invoke(main, ["calibrate-energy", str(_write(tmp_path / "unk.csv", rows)), "--into-catalog"])
    assert res.exit_code == 2 and target.read_text(encoding="utf-8") == "kept\n"


@pytest.mark.parametrize("n", [1, MIN_ROWS_PER_DEVICE - 1])
def test_too_few_runs_for_a_curve_exits_2(tmp_path: Path, n: int) -> None:
    """Rule: fewer than MIN_ROWS_PER_DEVICE (8) predictable runs on every (device, stack): no curve, error, nothing written."""
    out = tmp_path / "o.yaml"
    code, _stdout, err = _calibrate(_write(tmp_path / "few.csv", _base_rows()[:n]), out)
    assert code == 2 and not out.exists()
    assert f"{n} predictable run" in err and f"fewer than the {MIN_ROWS_PER_DEVICE} a curve needs" in err


def test_enough_runs_write_with_a_warning_for_a_small_device(tmp_path: Path) -> None:
    """A curve on 8 H100 runs is written; 3 runs of another stack on the same GPU get no curve, with a warning."""
    rows = _base_rows()[:8] + [dict(r, engine_version="0.10.0") for r in _base_rows()[:3]]
    out = tmp_path / "o.yaml"
    code, _stdout, err = _calibrate(_write(tmp_path / "mix.csv", rows), out)
    assert code == 0, err
    assert out.exists()
    assert "power curve h100-sxm vllm-0.10.0: 3 predictable runs, fewer than the 8 a curve needs" in err
    assert "the rows determine only 3 of the 4 fitted parameters" in err  # 3 runs cannot fix 4 throughput parameters


# --- item 3: what a row states and what is predicted ------------------------------------------------


def test_pipeline_parallel_rows_are_flagged_and_counted(catalog) -> None:  # noqa: ANN001 - fixture
    """The 17 shipped tp 8 x pp 2 runs on 16 GPUs are predicted as tp 16: each row says so, the summary counts them."""
    res = validate_energy(read_energy_runs(MEASURED), catalog, load_power_calibration())
    flagged = [o for o in res["rows"] if o["approximation"]]
    assert len(flagged) == 17
    assert all(o["approximation"].startswith(APPROX_PARALLEL) and "pipeline_parallel 2" in o["approximation"]
               and "predicted as tp 16" in o["approximation"] for o in flagged)
    assert res["summary"]["approximated_by_kind"] == {APPROX_PARALLEL: 17}


def test_validate_energy_text_counts_approximations() -> None:
    res = CliRunner().invoke(main, ["validate-energy", str(MEASURED)])
    assert res.exit_code == 0, res.output
    assert f"approximated (17 rows): {APPROX_PARALLEL}" in res.output


def test_calibrate_energy_notes_the_fitted_approximations(shipped_energy_fit) -> None:  # noqa: ANN001 - fixture
    code, err = shipped_energy_fit.exit_code, shipped_energy_fit.stderr  # calibrate-energy MEASURED: the session's one run
    assert code == 0
    assert f"note: 17 of 588 fitted runs approximated, {APPROX_PARALLEL}" in err


def test_unsupported_precision_is_flagged(catalog, tmp_path: Path) -> None:  # noqa: ANN001
    rows = [dict(r, precision="mxfp4") for r in _base_rows()[:4]]
    res = validate_energy(read_energy_runs(_write(tmp_path / "fp4.csv", rows)), catalog, load_power_calibration())
    assert all(o["approximation"].startswith(APPROX_PRECISION) and "predicted at bf16" in o["approximation"] for o in res["rows"])
    assert res["summary"]["approximated_by_kind"] == {APPROX_PRECISION: 4}


def _jtok_rows() -> list[dict[str, str]]:
    """J per token 100 on a run whose 483.6 W x 1 GPU / 553.3 tok/s = 0.874 J; 0.99 % off; 1.5 % off."""
    base = _base_rows()
    implied = float(base[0]["avg_power_w_per_gpu"]) / float(base[0]["output_throughput_tok_per_s"])
    return [dict(base[0], energy_j_per_output_token="100"),
            dict(base[0], energy_j_per_output_token=repr(implied * (1 + 0.99 * JTOK_RTOL))),
            dict(base[0], energy_j_per_output_token=repr(implied * (1 + 1.5 * JTOK_RTOL)))]


def test_inconsistent_j_per_token_is_skipped_by_the_fit(catalog, tmp_path: Path) -> None:  # noqa: ANN001
    """The fit skips a row beyond the 1 % tolerance, both figures named; 0.99 % off is kept."""
    path = _write(tmp_path / "j.csv", _jtok_rows())
    _cal, report = fit_power_report(read_energy_runs(path), catalog, data_file=str(path))
    assert report.fitted == 1 and len(report.skip_reasons) == 2
    bad, off = report.skip_reasons
    assert bad.startswith(JTOK_REASON) and "100 J" in bad and "0.8741 J" in bad and "+1.5 %" in off


def test_inconsistent_j_per_token_file_is_refused_by_calibrate_energy(tmp_path: Path) -> None:
    """The reviewer's en_jtok_inconsistent.csv: every J per token 100: no run to fit, exit 2 with the reason."""
    rows = [dict(r, energy_j_per_output_token="100") for r in _base_rows()]
    code, _stdout, err = _calibrate(_write(tmp_path / "j.csv", rows), tmp_path / "o.yaml")
    assert code == 2 and f"12 rows: {JTOK_REASON} (beyond 1 %)" in err


def test_inconsistent_j_per_token_is_flagged_by_validate_energy(catalog, tmp_path: Path) -> None:  # noqa: ANN001
    """validate-energy predicts such a row (tests/data/energy/runs_fixture.csv's EP row, 700 W x 2 GPUs / 200 tok/s
    = 7 J against 3.5 J, is pinned as predicted by test_energy.py) but names and counts the contradiction."""
    res = validate_energy(read_energy_runs(_write(tmp_path / "j.csv", _jtok_rows())), catalog, load_power_calibration())
    bad, ok, off = res["rows"]
    assert bad["predicted"] and bad["inconsistency"].startswith(JTOK_REASON) and not ok["inconsistency"] and off["inconsistency"]
    assert res["summary"]["inconsistent"] == {f"{JTOK_REASON} (beyond 1 %)": 2}
    text = CliRunner().invoke(main, ["validate-energy", str(tmp_path / "j.csv")]).output
    assert f"inconsistent, predicted but not fitted on (2 rows): {JTOK_REASON}" in text


def test_jtok_rule_skips_no_shipped_row(catalog) -> None:  # noqa: ANN001
    """The shipped rows agree with P x G / tokens/s within 1e-5: the rule leaves the fit set as it was."""
    rows = read_energy_runs(MEASURED)
    runs, reasons, _ = resolve_runs(rows, catalog, skip_inconsistent=True)
    assert len(runs) == 627 and not [r for r in reasons if r.startswith(JTOK_REASON)]
    assert not [r for r in runs if r.inconsistency]


def test_report_lists_skips_and_fitted_counts(catalog) -> None:  # noqa: ANN001
    cal, report = fit_power_report(read_energy_runs(MEASURED), catalog, data_file=str(MEASURED))
    assert (report.predictable, report.fitted, len(report.skip_reasons)) == (627, 588, 152)
    assert "17 of them approximated" in cal.description


def test_jtok_check_of_figures_whose_product_underflows_is_a_reason_not_a_crash() -> None:
    """Fuzzed (benchmarks/fuzz_readers.py --seed 1602, input 1851): validate-energy's J/token check divided by a
    power x GPUs / throughput that underflowed to 0 (ZeroDivisionError, an internal error)."""
    from planner.perf.energy_runs import jtok_inconsistency

    assert "not a finite positive" in jtok_inconsistency(1e-300, 1.0, 1e300, 3.5)
    assert "not a finite positive" in jtok_inconsistency(300.0, 1.0, 0.0, 3.5)
    assert jtok_inconsistency(300.0, 2.0, 200.0, 3.0) == ""
