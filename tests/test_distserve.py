"""DistServe's motivating example on the planner's own performance model (issue 13, acceptance).

DistServe (Zhong et al., OSDI '24, §2, Figure 1): OPT-13B, one A100-80GB per instance, 512 input /
64 output tokens, Poisson arrivals, TTFT P90 <= 0.4 s, TPOT P90 <= 0.04 s (per-request TPOT). They
measured a colocated (vLLM) GPU at 1.6 req/s within the SLO, a prefill-only GPU at 5.6 and a
decode-only GPU at 10: 2 prefill + 1 decode = 3.3 req/s per GPU, about 2x. The instance is
tests/data/instances/distserve_opt13b.yaml (synthetic fixed-length traffic given by rate).

The colocated baseline DistServe measured is vLLM without chunked prefill (a vLLM 0.2-0.3 branch,
launched by its artifact with --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95):
prefill-priority scheduling, each prefill iteration stalls the decode batch. The instance says so
through its calibration file (tests/data/instances/distserve_vllm_baseline.calibration.yaml:
engine vllm, ``mixed_prefill: false``, the shipped vllm efficiencies and overheads, generated from
planner/models/calibration/h100_dense.yaml by tests/data/instances/distserve_baseline_calibration.py
and checked equal to it below), and the unified
point models that engine (planner.perf.points, *Not mixed*).

What the planner's model says (``planner solve`` on that file, ``--set
services.chat.traffic.rate_per_s=10|30``): per GPU, prefill 12.5 req/s unqueued (8.9 within the
TTFT P90 on one GPU), decode 26 req/s (batch 67 at 39.9 ms), colocated 5.4 req/s without
chunked prefill (6.5 with it: the interference model costs the stalls, but they are not what
separates the model from the paper). Plans: 3 shared vs 3 disaggregated GPUs at 10 req/s, 7 vs 5
at 30 (6 vs 5 for a few hours of 2026-12-06, while a shared pool's slot queue took its slots as independent at the
at-load hold; since then the busy-slot count moves with the prefill share — one iteration serves every slot,
``planner.pool_latency.unified_slot_queue`` — and the queue drains at the full-batch hold): a ratio of 1.0-1.4, not
1.6-2.6. (Issue 24 item 7: the calibration file had been copied
before two refits of the shipped vllm fit; with that copy the figures were prefill 12.8 / 9.3,
decode 29 req/s at batch 74, colocated 6.25 (7.3) and 6 vs 5 GPUs at 30 req/s. The refits lowered
eta_b 0.970 -> 0.931 and moved the per-iteration time from the all-reduce to the per-layer
overhead (allreduce 34.5 -> 0 us, layer 0 -> 67.4 us), which slows the decode step of a one-GPU
instance, so the decode batch within 40 ms and the colocated rate both fall.)

Why the model disagrees with DistServe's measurements: its testbed (2023 kernels, vLLM with Ray
workers) was much slower per phase than the shipped calibration (2025 engines on H100): decode-only
10 req/s at TPOT P90 40 ms means about 25 sequences in flight at a 40 ms step, where the model's step
at batch 25 is about 20 ms; prefill-only 5.6 req/s within TTFT P90 0.4 s against the model's 8.9.
The colocated rate is very sensitive to the decode step's share of the TPOT target (a 512-token
prefill stall of 80-170 ms must fit in what the step leaves of 40 ms), so the published ratio is a
property of that testbed's speed: scaling every efficiency and overhead of the calibration by one
slowdown factor k, the phase figures imply k = 1.4 (prefill) but k = 1.6 (decode), and the
colocated/disaggregated ratio moves from 1.2 (k = 1) to 2.1 (k = 1.6) to 3.5 (k = 2). Fitting the
testbed's extra time as a per-iteration overhead (eta_f 0.54, step 16 ms) reproduces both phase
figures and predicts 0.87 colocated req/s (ratio about 4); as per-sequence host time (eta_f 0.45,
566 us per sequence) it predicts 3.25 (ratio about 1.1); DistServe measured 1.6 (these with the
regenerated calibration; the pre-refit copy gave k = 1.4 / 2.0, ratios 1.1 / 2.0 / 3.1 at
k = 1 / 2 / 2.2, and 0.9 / 3.6 colocated req/s). The two phase figures
cannot tell those apart, so reaching the published band would mean choosing that knob: the strict
xfail below records the gap and fails if it closes. These figures: ``python
benchmarks/bench_distserve_testbed.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.catalog import load_catalog
from planner.instance import load_instance
from planner.optimize.solve import settings_from_instance
from planner.perf.calibration import load_calibration
from planner.perf.points import operating_point
from planner.perf.roofline import iteration_time
from planner.schema.capacity import OperatingPoint
from planner.solve_instance import solve_instance

INSTANCE = Path(__file__).resolve().parent / "data" / "instances" / "distserve_opt13b.yaml"


def _devices(rate: float) -> dict[str, int]:
    r = load_instance(INSTANCE, {"services.chat.traffic.rate_per_s": rate})
    out = solve_instance(r, settings_from_instance(r.instance)).result
    assert all(p.feasible for p in out.architectures.values()), {a: p.diagnosis for a, p in out.architectures.items()}
    return {a: sum(pl.devices for pl in p.pools) for a, p in out.architectures.items()}


@pytest.fixture(scope="module")
def devices() -> dict[float, dict[str, int]]:
    return {rate: _devices(rate) for rate in (10.0, 30.0)}


def test_disaggregated_is_feasible_and_wins_at_30_req_s(devices: dict[float, dict[str, int]]) -> None:
    d = devices[30.0]
    assert d["disaggregated"] < d["shared"], d


def test_model_figures(devices: dict[float, dict[str, int]]) -> None:
    """The figures in the module docstring (a change in the model shows here)."""
    assert devices[10.0] == {"shared": 3, "disaggregated": 3}
    assert devices[30.0] == {"shared": 7, "disaggregated": 5}


@pytest.mark.xfail(strict=True, reason="the model's colocated GPU (vLLM without chunked prefill, shipped efficiencies) "
                   "sustains 5.4 req/s against DistServe's measured 1.6: its testbed was slower per phase; see the module docstring")
@pytest.mark.parametrize("rate", [10.0, 30.0])
def test_published_ratio(devices: dict[float, dict[str, int]], rate: float) -> None:
    d = devices[rate]
    assert 1.6 <= d["shared"] / d["disaggregated"] <= 2.6, d


def _points(mixed: bool) -> tuple[OperatingPoint, float, float]:
    """DistServe's unified point with and without mixed prefill, and the decode-only step and the
    prefill iteration of its chosen batch and chunk (the stall), from the roofline directly."""
    from planner.perf.points import _instance, efficiency_of

    cal = load_calibration(INSTANCE.parent / "distserve_vllm_baseline.calibration.yaml")
    assert cal is not None
    eng = cal.engines["vllm"].model_copy(update={"mixed_prefill": mixed})
    cal = cal.model_copy(update={"engines": {"vllm": eng}})
    cat = load_catalog()
    model, dev = cat.models["opt-13b"], cat.devices["a100-sxm-80gb"]
    op = operating_point(model, dev, 1, role="unified", weight_precision="bf16", kv_precision="bf16", input_tokens=512,
                         output_tokens=64, ttft_target_ms=400, tpot_target_ms=40, ttft_quantile=0.9, tpot_quantile=0.9,
                         engine="vllm", calibration=cal)
    inst, eff = _instance(model, dev, 1, "bf16", "bf16"), efficiency_of(eng)
    q = op.detail["prefill_chunk_tokens"]
    dec = float(iteration_time(inst, eff, decode_batch=float(op.max_batch), decode_context=512 + 32).total_s)
    pre = float(iteration_time(inst, eff, prefill_tokens=q, prefill_prompts=max(q / 512, 1.0)).total_s)
    return op, dec, pre


def test_prefill_stalls_the_decode_batch_without_mixed_prefill() -> None:
    """Without mixed prefill the chunk-carrying iteration is the decode step plus a prefill-only
    iteration of whole prompts (times add, each with its overheads); the per-request TPOT P90 still
    meets its target with the stalls; and the colocated GPU serves less than with chunked prefill."""
    op, dec, pre = _points(False)
    assert op.feasible, op.reason
    assert op.detail["prefill_chunk_tokens"] % 512 == 0
    assert op.detail["decode_only_step_ms"] == pytest.approx(1e3 * dec, rel=1e-9)
    assert op.detail["step_ms"] == pytest.approx(1e3 * (dec + pre), rel=1e-9)
    assert op.tpot_ms <= 40.0
    assert op.tpot_ms > op.detail["decode_only_step_ms"]          # the stalls are in the TPOT
    mixed, _dec, _pre = _points(True)
    assert mixed.instance_seconds_per_request < op.instance_seconds_per_request


def test_baseline_calibration_is_the_shipped_vllm_fit() -> None:
    """The baseline engine's efficiencies and overheads are the shipped vllm fit (issue 24 item 7: the
    old copy predated two refits). A refit of planner/models/calibration/h100_dense.yaml fails this
    until the file is regenerated (``python tests/data/instances/distserve_baseline_calibration.py``)
    and the figures above re-derived."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("distserve_baseline_calibration",
                                                  INSTANCE.parent / "distserve_baseline_calibration.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (INSTANCE.parent / "distserve_vllm_baseline.calibration.yaml").read_text(encoding="utf-8") == gen.render()
