"""The one fitting routine (planner/perf/lsq.py) and what it reports: parameters on a bound, parameters
without effect, Jacobian rank; its use by `planner calibrate` (warnings, "not validated" error bands) and
`calibrate-moe` (vectorised prediction equal to the per-row one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.perf.calibration import NO_CALIBRATION_BAND_REL, MoECalibration, error_band
from planner.perf.fit import fit_calibration
from planner.perf.lsq import fit_least_squares
from planner.perf.measurements import read_measurements
from planner.perf.moe import (
    Parallelism,
    ep_iteration_time,
    ep_replica,
    fit_moe_calibration,
    predict_moe_rows,
)
from planner.perf.points import efficiency_of, engine_calibration

CAT = load_catalog()
DATA = Path(__file__).resolve().parents[1] / "models" / "calibration" / "h100_dense.measurements.csv"


def test_a_parameter_pushed_past_its_bound_is_named() -> None:
    sol = fit_least_squares(lambda x: x - np.array([2.0, -1.0, 0.5]), [0.5, 0.5, 0.1], names=["a", "b", "c"],
                            lower=[0.0, 0.0, 0.0], upper=[1.0, 1.0, 1.0])
    assert sol.x == pytest.approx([1.0, 0.0, 0.5], abs=1e-6)
    assert sol.at_bound == ("a (upper 1)", "b (lower 0)")
    assert sol.rank == 3 and sol.undetermined == ()


def test_interior_linear_fit_recovers_the_solution_without_warnings() -> None:
    a = np.array([[1.0, 2.0], [3.0, 1.0], [0.5, -1.0], [2.0, 2.0]])
    truth = np.array([0.3, 1.7])
    sol = fit_least_squares(lambda x: a @ x - a @ truth, [1.0, 1.0], names=["p", "q"], lower=[-10.0, -np.inf], upper=[10.0, np.inf])
    assert sol.x == pytest.approx(truth, rel=1e-6)
    assert sol.at_bound == () and sol.rank == 2


def test_parameters_the_residuals_cannot_tell_apart_lower_the_rank() -> None:
    # only p + q matters, and r has no effect at all
    sol = fit_least_squares(lambda x: np.array([x[0] + x[1] - 1.0, 2.0 * (x[0] + x[1]) - 2.0]), [0.2, 0.2, 0.5],
                            names=["p", "q", "r"], lower=[-5.0, -5.0, -5.0], upper=[5.0, 5.0, 5.0])
    assert sol.rank == 1 and sol.undetermined == ("r",)


def test_calibrate_on_three_rows_warns_and_is_not_validated() -> None:
    """Issue 25 item 6: three rows fitted seven parameters and plans quoted 'validated error ±14 %'."""
    rows = [r for r in read_measurements(DATA) if r["engine"] == "vllm"][:3]
    cal = fit_calibration(rows, CAT, name="three", data_file="", out_of_sample=True)
    assert cal.fit is not None
    assert any("determine only" in w for w in cal.fit.warnings), cal.fit.warnings
    assert cal.fit.error_bands == []  # one model: nothing to hold out
    t, p, src = error_band("h100-sxm", "vllm", cal)
    assert (t, p) == (NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL) and src.startswith("not validated")


def test_calibrate_cli_prints_the_warnings(tmp_path: Path) -> None:
    lines = DATA.read_text().splitlines()
    vllm = [ln for ln in lines[1:] if ",vllm," in ln][:3]
    data = tmp_path / "three.csv"
    data.write_text("\n".join([lines[0], *vllm]) + "\n")
    res = CliRunner().invoke(main, ["calibrate", str(data), "-o", str(tmp_path / "three.yaml")])
    assert res.exit_code == 0, res.output
    assert "warning: engine default (3 rows): the rows determine only" in res.output
    assert "warning: error not validated" in res.output
    assert "warnings:" in (tmp_path / "three.yaml").read_text()


def _moe_rows() -> list[dict]:
    rows = []
    for ep, role, batches in ((32, "prefill", (1, 4, 8)), (72, "decode", (16, 64, 256)), (8, "decode", (8, 32))):
        for b in batches:
            rows.append({"model": "deepseek-v3", "device": "h100-sxm", "tp": 1, "ep": ep, "dp": ep, "precision": "fp8",
                         "kv_precision": "bf16", "engine": "sglang", "role": role, "isl": 2000.0 + 10 * b, "osl": 100.0,
                         "batch_per_rank": float(b), "step_ms": 0.0})
    return rows


def test_moe_prediction_by_group_equals_the_per_row_step_model() -> None:
    rows = _moe_rows()
    params = MoECalibration()
    got = predict_moe_rows(rows, CAT.models, CAT.devices, params, None)
    eff = efficiency_of(engine_calibration("sglang", None)[0])
    for r, g in zip(rows, got, strict=True):
        rep = ep_replica(CAT.models["deepseek-v3"], CAT.devices["h100-sxm"], Parallelism(1, r["ep"], r["dp"]), "fp8", "bf16", params)
        b = r["batch_per_rank"]
        st = (ep_iteration_time(rep, eff, decode_batch=b, decode_context=r["isl"] + r["osl"] / 2.0) if r["role"] == "decode"
              else ep_iteration_time(rep, eff, prefill_tokens=b * r["isl"], prefill_prompts=b))
        assert g == pytest.approx(1e3 * float(st.total_s), rel=1e-12)


def test_calibrate_moe_recovers_parameters_and_names_a_bound() -> None:
    rows = _moe_rows()
    truth = MoECalibration(ep_imbalance=1.3, a2a_efficiency=0.6)
    for r, t in zip(rows, predict_moe_rows(rows, CAT.models, CAT.devices, truth, None), strict=True):
        r["step_ms"] = float(t)
    fitted = fit_moe_calibration(rows, CAT.models, CAT.devices, None)
    assert fitted.ep_imbalance == pytest.approx(1.3, rel=1e-3) and fitted.a2a_efficiency == pytest.approx(0.6, rel=1e-3)
    assert "on a bound" not in fitted.source
    fast = MoECalibration(ep_imbalance=1.0, a2a_efficiency=1.0)
    for r, t in zip(rows, predict_moe_rows(rows, CAT.models, CAT.devices, fast, None), strict=True):
        r["step_ms"] = 0.8 * float(t)  # faster than any allowed parameters can make it
    pinned = fit_moe_calibration(rows, CAT.models, CAT.devices, None)
    assert "on a bound" in pinned.source and "ep_imbalance (lower 1)" in pinned.source
