"""Round 9 of the performance model: engine KV pools, per-harness closed-loop parameters,
deterministic refit of the shipped calibration, error bands, leave-one-device-out."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.catalog import load_catalog
from planner.perf import operating_point
from planner.perf.calibration import (
    NO_CALIBRATION_BAND_REL,
    UNCALIBRATED_BAND_REL,
    Calibration,
    ErrorBand,
    FitRecord,
    HarnessCalibration,
    error_band,
    load_calibration,
)
from planner.perf.closed_loop import predict_agg
from planner.perf.fit import (
    ENGINE_SCHEDULERS,
    FITTED,
    canonical_order,
    fit_calibration,
    leave_one_device_out,
)
from planner.perf.measurements import convert_silicon, read_measurements, silicon_harness
from planner.perf.roofline import (
    GIB,
    blocks_tokens,
    device_memory_bytes,
    engine_kv_pool_bytes,
    instance_arrays,
    sglang_reserved_bytes,
)
from planner.perf.validate import engine_arrays, mape, predict_prepared, prepare_rows, validate

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "models" / "measured" / "silicon_h200_dense.csv"
SHIPPED = ROOT / "models" / "calibration" / "h100_dense.yaml"
DATA_COPY = ROOT / "models" / "calibration" / "h100_dense.measurements.csv"
CAT = load_catalog()


def test_device_memory_is_what_the_driver_reports() -> None:
    # NVML: H100 80 GB -> 81,559 MiB, H200 141 GB -> 143,771 MiB (within 0.01 %)
    assert float(device_memory_bytes(80)) == pytest.approx(81_559 * 2**20, rel=1e-4)
    assert float(device_memory_bytes(141)) == pytest.approx(143_771 * 2**20, rel=2e-4)


def test_sglang_reserve_by_device_class() -> None:
    assert float(sglang_reserved_bytes(device_memory_bytes(80), 1)) == 10.0 * GIB   # 9.5 + 1/2
    assert float(sglang_reserved_bytes(device_memory_bytes(141), 2)) == 13.0 * GIB  # 12 + 2/2
    assert float(sglang_reserved_bytes(device_memory_bytes(180), 8)) == 32.0 * GIB


def test_block_rounding() -> None:
    assert blocks_tokens(17, 16).tolist() == 32.0
    assert blocks_tokens(32, 32).tolist() == 32.0
    assert blocks_tokens(9, 1).tolist() == 9.0


def test_engine_pools_by_hand() -> None:
    """Llama-3.1-70B fp8 on one H200: each engine's rule, worked out by hand."""
    inst = instance_arrays(CAT.models["llama-3.1-70b"], CAT.devices["h200-sxm"], 1, "fp8", "bf16")
    m = 141 * GIB * 0.9956
    w = CAT.models["llama-3.1-70b"].weight_bytes("fp8")
    vllm = float(engine_kv_pool_bytes(inst, 0.9, 3.0, False))
    trt = float(engine_kv_pool_bytes(inst, 0.9, 3.0, True))
    sgl = float(engine_kv_pool_bytes(inst, np.nan, 0.0, False))
    assert vllm == pytest.approx(0.9 * m - w - 3e9)
    assert trt == pytest.approx(0.9 * (m - w - 3e9))
    assert sgl == pytest.approx(m - (12.5 * GIB) - w)
    assert trt > vllm  # 10 % of the weights' share is not given away by the free-memory rule


def _h200_rows() -> list[dict]:
    return convert_silicon(H200, {m.hf_id: m.id for m in CAT.models.values()})


def _pick(rows: list[dict], **kw: object) -> dict:
    hits = [r for r in rows if all(r.get(k) == v for k, v in kw.items())]
    assert len(hits) == 1, kw
    return hits[0]


@pytest.mark.parametrize(
    ("kw", "most"),
    [
        # issue 14: predicted 32x and 38x too slow when the model ran out of KV and the engine did not
        (dict(engine="trtllm", tp=2, concurrency=128, isl=1024, osl=8192), 1.5),
        (dict(engine="vllm", tp=1, concurrency=32, isl=1024, osl=8192), 1.5),
        # the engine does run out here (TTFT 79.5 s vs 0.45 s at 32 users): GUARANTEED_NO_EVICT slots
        (dict(engine="trtllm", tp=1, concurrency=64, isl=1024, osl=8192), 2.5),
    ],
)
def test_kv_limited_h200_rows(kw: dict, most: float) -> None:
    rows = _h200_rows()
    row = _pick(rows, model="llama-3.1-70b", **kw)
    out = validate([row], CAT, load_calibration(SHIPPED))["rows"][0]
    ratio = out["pred_ttft_ms"] / row["ttft_ms"]
    assert 1 / most <= ratio <= most, (row["ttft_ms"], out["pred_ttft_ms"])


def test_silicon_harness_names() -> None:
    src = "source_file=/Users/x/projects/aic-auto-gap-analysis/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=160"
    assert silicon_harness(src) == "aic-auto-gap-analysis/sglang/0.5.6.post2"
    assert silicon_harness("source_file=2026-04-06.csv") == "2026-04-06"
    assert silicon_harness("") == ""
    rows = _h200_rows()
    assert {r["harness"] for r in rows} == {"2026-04-06", "aic-auto-gap-analysis/sglang/0.5.6.post2", "aic-auto-gap-analysis/vllm/0.12.0"}


def _numbers(obj: object, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_numbers(v, f"{prefix}{k}."))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix] = float(obj)
    return out


def test_refit_reproduces_shipped_calibration(tmp_path: Path) -> None:
    """`planner calibrate` on the shipped data copy lands at the shipped h100_dense.yaml's optimum.

    The file was written by the hand-written Levenberg-Marquardt loop (stopped on a 1e-5 relative gain),
    which did not reproduce it bit for bit even on its own commit (eta_f 0.5854 vs 0.5890 at b4b3758):
    the summed absolute log-ratio is flat and piecewise in the cohort exponent and overheads, so a stop
    rule on a relative gain lands anywhere along a flat valley. The shared bounded least-squares routine
    (planner.perf.lsq) solves the same objective; measured on this data: efficiencies within 1 %,
    in-sample MAPE within 0.05 points per engine, overheads and cohort exponents moving up to 23 %
    along that valley. So the test checks what the data determine: each engine's eta_f and eta_b
    within 1.5 % and the in-sample TTFT / TPOT MAPE within 0.5 points of the shipped record."""
    shipped = yaml.safe_load(SHIPPED.read_text())
    rows = read_measurements(DATA_COPY)
    cal = fit_calibration(rows, CAT, name=shipped["name"], data_file=DATA_COPY)
    refit = cal.model_dump(mode="json", exclude_none=True)
    a = _numbers({"engines": shipped["engines"], "harnesses": shipped.get("harnesses", {})})
    b = _numbers({"engines": refit["engines"], "harnesses": refit.get("harnesses", {})})
    assert a.keys() == b.keys()
    for k in a:
        if k.endswith((".eta_f.", ".eta_b.")):
            assert b[k] == pytest.approx(a[k], rel=0.015), k
    for key in ("mape_ttft_pct", "mape_tpot_pct"):
        for e, v in shipped["fit"][key].items():
            assert refit["fit"][key][e] == pytest.approx(v, abs=0.5), (key, e)


def test_fit_does_not_depend_on_row_order() -> None:
    rows = [r for r in read_measurements(DATA_COPY) if r["model"] == "llama-3.1-70b"]
    order = canonical_order(rows)
    assert canonical_order([rows[i] for i in order]) == list(range(len(rows)))
    a = fit_calibration(rows, CAT, name="a", data_file="")
    b = fit_calibration(rows[::-1], CAT, name="a", data_file="")
    assert a.model_dump() == b.model_dump()


def test_harness_parameters_never_reach_operating_points() -> None:
    cal = load_calibration(SHIPPED)
    assert cal is not None and cal.harnesses
    bare = cal.model_copy(update={"harnesses": {}})
    noisy = cal.model_copy(update={"harnesses": {h: HarnessCalibration(ttft_overhead_ms=5000.0, cohort_exponent=1.0, layer_overhead_us=900.0,
                                                                       seq_overhead_us=900.0, engines=["vllm"]) for h in cal.harnesses}})
    kw = dict(role="unified", weight_precision="fp8", kv_precision="fp8", input_tokens=2000, output_tokens=300,
              ttft_target_ms=None, tpot_target_ms=None, engine="vllm")
    m, d = CAT.models["llama-3.1-70b"], CAT.devices["h200-sxm"]
    assert operating_point(m, d, 2, calibration=bare, **kw) == operating_point(m, d, 2, calibration=noisy, **kw)  # type: ignore[arg-type]


def test_engine_ttft_overhead_is_the_lowest_harness_value() -> None:
    cal = load_calibration(SHIPPED)
    assert cal is not None
    for engine in ("vllm", "trtllm", "sglang"):
        seen = [h.ttft_overhead_ms for h in cal.harnesses.values() if engine in h.engines and h.ttft_overhead_ms is not None]
        assert seen and cal.engines[engine].ttft_overhead_ms <= min(seen) + 1e-9


def test_error_band_calibrated_uncalibrated_and_none() -> None:
    oos = "leave one model out"
    bands = [ErrorBand(device="h100-sxm", engine="vllm", ttft_rel=0.2, tpot_rel=0.1, rows=10, how=oos),
             ErrorBand(device="h100-sxm", engine="trtllm", ttft_rel=0.3, tpot_rel=0.08, rows=10, how=oos)]
    rec = FitRecord(data_file="x", data_sha256="", rows_used=20, rows_skipped=0, engines_fitted=["vllm"], objective="",
                    mape_ttft_pct={}, mape_tpot_pct={}, error_bands=bands)
    cal = Calibration(name="t", engines={"vllm": load_calibration(SHIPPED).engines["vllm"]}, fit=rec)  # type: ignore[union-attr]
    assert error_band("h100-sxm", "vllm", cal)[:2] == (0.2, 0.1)
    t, p, src = error_band("h200-sxm", "vllm", cal)
    assert (t, p) == pytest.approx((0.2 + UNCALIBRATED_BAND_REL, 0.1 + UNCALIBRATED_BAND_REL)) and "uncalibrated" in src
    t, p, _ = error_band("h200-sxm", "sglang", cal)  # engine never calibrated: the widest of any engine
    assert (t, p) == pytest.approx((0.3 + UNCALIBRATED_BAND_REL, 0.1 + UNCALIBRATED_BAND_REL))
    assert error_band("h100-sxm", "vllm", None)[:2] == (NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL)
    # in-sample bands, or out-of-sample ones on fewer than 10 rows, are not a validation (issue 25 item 6:
    # three rows fitted and checked on themselves quoted "validated error ±14 %")
    for how, rows in (("in sample", 500), (oos, 9)):
        weak = cal.model_copy(update={"fit": rec.model_copy(update={"error_bands": [b.model_copy(update={"how": how, "rows": rows}) for b in bands]})})
        for dev in ("h100-sxm", "h200-sxm"):
            t, p, src = error_band(dev, "vllm", weak)
            assert (t, p) == (NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL) and src.startswith("not validated"), (how, dev, src)
    # the shipped file records out-of-sample (leave one model out) bands for every H100 engine it was fitted on
    shipped = load_calibration(SHIPPED)
    assert shipped is not None and shipped.fit is not None
    assert {(b.device, b.engine) for b in shipped.fit.error_bands} == {("h100-sxm", "sglang"), ("h100-sxm", "trtllm"), ("h100-sxm", "vllm")}
    assert all(b.how == "leave one model out" and b.rows >= 10 for b in shipped.fit.error_bands)
    t, p, src = error_band("h100-sxm", "trtllm", SHIPPED.as_posix())
    assert 0 < p < t < 1 and src.startswith("calibrated:") and "leave one model out" in src


@pytest.mark.slow
def test_leave_one_device_out_on_two_devices() -> None:
    h100 = [r for r in read_measurements(DATA_COPY) if r["model"] == "llama-3.1-70b"]
    h200 = [r for r in _h200_rows() if r["model"] == "llama-3.1-70b" and r["engine"] == "vllm"]
    out = leave_one_device_out(h100 + h200, CAT)
    whole = {g["device"]: g for g in out if g["model"] == "all"}
    assert set(whole) == {"h100-sxm", "h200-sxm"}
    assert whole["h200-sxm"]["rows"] == 60 and whole["h100-sxm"]["rows"] == 45
    assert all(math.isfinite(g["mape_tpot_pct"]) for g in out)
    assert leave_one_device_out(h100, CAT) == []


def test_engine_defaults_are_documented() -> None:
    assert ENGINE_SCHEDULERS["vllm"]["memory_fraction"] == 0.9 and ENGINE_SCHEDULERS["vllm"]["kv_block_tokens"] == 16
    assert ENGINE_SCHEDULERS["trtllm"]["kv_share_of_free"] and ENGINE_SCHEDULERS["trtllm"]["kv_block_tokens"] == 32
    assert ENGINE_SCHEDULERS["sglang"]["memory_fraction"] is None


# --- round 10 ---------------------------------------------------------------------------------
def _vllm_loop(preempt: bool, users: float, isl: float, osl: float) -> tuple[float, float, float]:
    """Closed loop of Llama-3.1-70B fp8 on one H200 with vLLM's pool rule (bf16 KV): TTFT, TPOT (s), slots."""
    inst = instance_arrays(CAT.models["llama-3.1-70b"], CAT.devices["h200-sxm"], 1, "fp8", "bf16")
    cal = load_calibration(SHIPPED)
    assert cal is not None
    eng = engine_arrays([cal.engines["vllm"].model_copy(update={"kv_preempt": preempt})])
    res = predict_agg(inst, eng, np.array([users]), np.array([isl]), np.array([osl]))
    return float(res.ttft_s[0]), float(res.tpot_s[0]), float(res.max_batch[0])


@pytest.mark.parametrize(("users", "isl", "osl"), [(64, 1024, 8192), (32, 8192, 1024), (64, 8192, 1024)])
def test_preemption_splits_the_slot_wait_and_keeps_the_request_time(users: int, isl: int, osl: int) -> None:
    """vLLM (kv_preempt): the share ISL/(ISL+OSL) of the slot wait stays in TTFT, the rest is spread over the
    OSL-1 output tokens; the end-to-end time TTFT + (OSL-1) TPOT is the same as with the whole wait up front."""
    t0, p0, slots = _vllm_loop(False, users, isl, osl)
    t1, p1, _ = _vllm_loop(True, users, isl, osl)
    assert slots < users  # KV-limited: there is a wait to split
    e2e0, e2e1 = t0 + (osl - 1) * p0, t1 + (osl - 1) * p1
    assert e2e1 == pytest.approx(e2e0, rel=1e-9)
    moved = t0 - t1
    assert moved > 0
    assert (p1 - p0) * (osl - 1) == pytest.approx(moved, rel=1e-9)
    # the moved part is OSL/(ISL+OSL) of the wait; the wait is the TTFT above the unconstrained loop's
    t_free, _, _ = _vllm_loop(False, slots, isl, osl)
    assert moved / (t0 - t_free) == pytest.approx(osl / (isl + osl), rel=0.05)


def test_preemption_changes_nothing_without_a_slot_wait() -> None:
    assert _vllm_loop(True, 16, 1024, 1024)[:2] == _vllm_loop(False, 16, 1024, 1024)[:2]


def test_only_vllm_preempts_by_default() -> None:
    assert ENGINE_SCHEDULERS["vllm"]["kv_preempt"] is True
    assert not any(ENGINE_SCHEDULERS[e].get("kv_preempt", False) for e in ("trtllm", "sglang", "default"))


def test_allreduce_overhead_is_not_fitted() -> None:
    """Round 10: the H100 70B rows cannot tell a cost per all-reduce from one per layer."""
    assert "allreduce_overhead_us" not in {f[0] for f in FITTED}
    cal = load_calibration(SHIPPED)
    assert cal is not None and all(c.allreduce_overhead_us == 0.0 for c in cal.engines.values())


def test_harness_overheads_apply_to_their_own_engine_only() -> None:
    """A one-engine harness carries its engine version's per-layer / per-sequence overheads in replays; a
    row of another engine under the same harness name keeps its engine's overheads."""
    cal = load_calibration(SHIPPED)
    assert cal is not None
    h = cal.harnesses["2026-04-06"]
    assert h.engines == ["vllm"] and h.layer_overhead_us is not None and h.seq_overhead_us is not None
    rows = [r for r in _h200_rows() if r["model"] == "llama-3.1-70b" and r["tp"] == 2 and r["concurrency"] == 8 and r["osl"] == 1024
            and r["isl"] == 1024]
    assert {r["engine"] for r in rows} == {"trtllm", "vllm"}
    prep = prepare_rows(rows, CAT)
    slow = cal.model_copy(update={"harnesses": {**cal.harnesses, "2026-04-06": h.model_copy(update={"layer_overhead_us": 500.0})}})
    _, base, _, _ = predict_prepared(prep, cal)
    _, moved, _, _ = predict_prepared(prep, slow)
    for i, r in enumerate(rows):
        if r["engine"] == "vllm":
            assert moved[i] > base[i] + 80 * (500.0 - h.layer_overhead_us) * 1e-3 * 0.99  # 80 layers, ms
        else:
            assert moved[i] == base[i]


@pytest.mark.slow
def test_h100_to_h200_transfer_figures() -> None:
    """The round-10 transfer (fit on H100 only, predict the 199 H200 rows; bench_perf_fidelity.py):
    61.1 % TTFT / 27.9 % TPOT over all rows, 9.8 / 7.0 % on Llama-3.1-70B vLLM (the harness both devices
    share), measured on this branch. Bounds: the achieved figures + 1 point."""
    hf = {**{m.hf_id: m.id for m in CAT.models.values()}, "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b"}
    rows = read_measurements(DATA_COPY) + convert_silicon(H200, hf)
    dev = np.array([r["device"] for r in rows])
    cal = fit_calibration(rows, CAT, name="h100-only", data_file="", train_mask=dev == "h100-sxm")
    ttft, tpot, _, _ = predict_prepared(prepare_rows(rows, CAT), cal)
    mt = np.array([r["ttft_ms"] for r in rows], dtype=float)
    mp = np.array([r["tpot_ms"] for r in rows], dtype=float)
    h2 = dev == "h200-sxm"
    assert h2.sum() == 199
    assert mape(ttft[h2], mt[h2]) <= 62.1 and mape(tpot[h2], mp[h2]) <= 28.9
    shared = h2 & np.array([r["model"] == "llama-3.1-70b" and r["engine"] == "vllm" for r in rows])
    assert mape(ttft[shared], mt[shared]) <= 10.8 and mape(tpot[shared], mp[shared]) <= 8.0


def test_held_out_fits_on_two_cores_equal_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """leave_one_group_out_bands (and leave_one_device_out, the same pattern, held by the test above on a machine of
    two cores) fit their held-out parts alternately here and in a forked child: the bands of one process."""
    import planner.forked
    from planner.perf.fit import leave_one_group_out_bands

    h100 = [r for r in read_measurements(DATA_COPY) if r["model"] == "llama-3.1-70b"]
    h200 = [r for r in _h200_rows() if r["model"] == "llama-3.1-70b" and r["engine"] == "vllm"]
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 2)
    rows = h100[::3] + h200[::3]  # a third of each: fewer residuals per fit, the same two held-out fits
    two = leave_one_group_out_bands(rows, CAT, group="device")
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 1)
    one = leave_one_group_out_bands(rows, CAT, group="device")
    assert two and repr(two) == repr(one)  # repr: NaN errors compare equal
