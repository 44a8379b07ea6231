"""Why the planner's DistServe example (tests/test_distserve.py) does not give DistServe's published
ratio: the figures of that test's docstring (not part of the test gate; a few seconds).

DistServe (OSDI '24, §2): OPT-13B on one A100-80GB, 512 in / 64 out, TTFT P90 <= 0.4 s, TPOT P90
<= 0.04 s; measured per GPU: colocated (vLLM without chunked prefill) 1.6 req/s, prefill-only
5.6, decode-only 10. The operating points here use the test instance's calibration
(tests/data/instances/distserve_vllm_baseline.calibration.yaml: the shipped vllm efficiencies,
DistServe's baseline scheduler). Per GPU, at the targets:

- prefill: requests/s within the TTFT P90 on one GPU (``utilization_cap_at_batch / tau``);
- decode: ``1 / tau`` at the largest batch within the TPOT;
- colocated: the unified point, without mixed prefill (the baseline) and with it;
- ratio: disaggregated requests/s per GPU, ``1 / (1/prefill + 1/decode)``, over colocated.

1. The calibration as shipped, then every efficiency and overhead scaled by one slowdown ``k``
   (a slower testbed), so the phase figures can be read off: which ``k`` gives prefill 5.6 and
   which gives decode 10, and the ratio at each ``k``.
2. Two fits of the testbed to the two phase figures (two unknowns each): ``eta_f`` with a
   per-iteration overhead ``step_overhead_ms``, or with a per-sequence host time
   ``seq_overhead_us``; the colocated rate each predicts (DistServe measured 1.6).

Run: python benchmarks/bench_distserve_testbed.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.catalog import load_catalog  # noqa: E402
from planner.perf.calibration import Calibration, EngineCalibration, load_calibration  # noqa: E402
from planner.perf.points import operating_point  # noqa: E402
from planner.schema.capacity import OperatingPoint  # noqa: E402

CAL = ROOT / "tests" / "data" / "instances" / "distserve_vllm_baseline.calibration.yaml"
MEASURED = {"prefill": 5.6, "decode": 10.0, "colocated": 1.6}


def _point(eng: EngineCalibration, role: str, rate: float) -> OperatingPoint:
    cat = load_catalog()
    return operating_point(cat.models["opt-13b"], cat.devices["a100-sxm-80gb"], 1, role=role,  # type: ignore[arg-type]
                           weight_precision="bf16", kv_precision="bf16", input_tokens=512, output_tokens=64,
                           ttft_target_ms=400, tpot_target_ms=40, ttft_quantile=0.9, tpot_quantile=0.9, rate_per_s=rate,
                           engine="vllm", calibration=Calibration(name="x", engines={"vllm": eng}))


def rates(eng: EngineCalibration) -> dict[str, float]:
    p = _point(eng, "prefill", MEASURED["prefill"])
    d = _point(eng, "decode", MEASURED["decode"])
    out = {"prefill": p.detail["utilization_cap_at_batch"] / p.instance_seconds_per_request if p.feasible else 0.0,
           "decode": 1.0 / d.instance_seconds_per_request if d.feasible else 0.0}
    for mixed in (False, True):
        u = _point(eng.model_copy(update={"mixed_prefill": mixed}), "unified", MEASURED["colocated"])
        out["colocated" + ("_mixed" if mixed else "")] = 1.0 / u.instance_seconds_per_request if u.feasible else 0.0
    disagg = 1.0 / (1.0 / out["prefill"] + 1.0 / out["decode"]) if out["prefill"] and out["decode"] else 0.0
    out["ratio"] = disagg / out["colocated"] if out["colocated"] else float("inf")
    return out


def slowed(eng: EngineCalibration, k: float) -> EngineCalibration:
    return eng.model_copy(update={"eta_f": eng.eta_f / k, "eta_b": eng.eta_b / k, "seq_overhead_us": eng.seq_overhead_us * k,
                                  "layer_overhead_us": eng.layer_overhead_us * k, "step_overhead_ms": eng.step_overhead_ms * k,
                                  "allreduce_overhead_us": eng.allreduce_overhead_us * k, "ttft_overhead_ms": eng.ttft_overhead_ms * k})


def _show(label: str, r: dict[str, float]) -> None:
    print(f"{label:<34} prefill {r['prefill']:5.2f}  decode {r['decode']:5.2f}  colocated {r['colocated']:5.2f} "
          f"(chunked {r['colocated_mixed']:5.2f})  ratio {r['ratio']:5.2f}")


def main() -> None:
    from scipy.optimize import least_squares

    cal = load_calibration(CAL)
    assert cal is not None
    eng = cal.engines["vllm"]
    print("DistServe measured:                prefill  5.60  decode 10.00  colocated  1.60                  ratio  2.06")
    for k in (1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2):
        _show(f"shipped efficiencies / k, k = {k:.1f}", rates(slowed(eng, k)))
    for field, x0 in (("step_overhead_ms", 10.0), ("seq_overhead_us", 400.0)):
        def res(x: np.ndarray, field: str = field) -> list[float]:
            r = rates(eng.model_copy(update={"eta_f": float(x[0]), field: float(x[1])}))
            return [float(np.log(max(r["prefill"], 1e-9) / MEASURED["prefill"])), float(np.log(max(r["decode"], 1e-9) / MEASURED["decode"]))]
        fit = least_squares(res, [0.4, x0], bounds=([0.05, 0.0], [1.0, 5000.0]), diff_step=1e-2)
        _show(f"fit eta_f {fit.x[0]:.2f}, {field} {fit.x[1]:.3g}", rates(eng.model_copy(update={"eta_f": float(fit.x[0]), field: float(fit.x[1])})))


if __name__ == "__main__":
    main()
