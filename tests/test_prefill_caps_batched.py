"""Queued prefill points finished together (issue 27, start-up): :func:`planner.perf.points.operating_point_stage`
returns a queued prefill point as a :class:`~planner.perf.points.PendingPrefill` and
:func:`~planner.perf.points.finish_prefill_points` bisects the utilisation caps of many in one
:func:`planner.queueing.max_utilization_many` call (what :func:`planner.capacity.build_capacity_tables`
does). Every point must equal the one :func:`planner.perf.operating_point` gives alone, exactly."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from planner.catalog import load_catalog
from planner.perf import operating_point
from planner.perf.points import PendingPrefill, finish_prefill_points, operating_point_stage
from planner.schema.capacity import OperatingPoint

CAT = load_catalog(Path(__file__).parent / "data" / "perf_catalog")
H100 = CAT.devices["h100-sxm"]


def _cases() -> list[tuple[object, int, dict[str, object]]]:
    """Prefill points over models, TP, prompt lengths, rates (none, a trickle, heavy), arrival CVs and
    TTFT targets (generous, tight, none), shuffled so neighbours in the batch differ."""
    out = []
    for model, tp, isl, rate, cv, ttft in itertools.product(("llama-3.1-8b", "llama-3.1-70b"), (1, 4), (300.0, 3000.0),
                                                            (None, 0.5, 400.0), (1.0, 2.5), (200.0, 2000.0, None)):
        kw: dict[str, object] = dict(role="prefill", weight_precision="bf16", kv_precision="bf16", input_tokens=isl,
                                     output_tokens=200.0, cached_prefix_share=0.25, ttft_target_ms=ttft, tpot_target_ms=None,
                                     rate_per_s=rate, interarrival_cv=cv)
        out.append((CAT.models[model], tp, kw))
    order = np.random.default_rng(7).permutation(len(out))
    return [out[i] for i in order]


def test_batched_prefill_points_equal_the_one_at_a_time_points() -> None:
    cases = _cases()
    staged = [operating_point_stage(m, H100, tp, **kw) for m, tp, kw in cases]  # type: ignore[arg-type]
    pending = [s for s in staged if isinstance(s, PendingPrefill)]
    # the mix the test needs: queued points to batch, and points finished at once (unqueued or infeasible)
    assert len(pending) >= 20 and sum(isinstance(s, OperatingPoint) for s in staged) >= 20
    assert all(s.servers.size >= 1 for s in pending)
    done = iter(finish_prefill_points(pending))
    batched = [s if isinstance(s, OperatingPoint) else next(done) for s in staged]
    alone = [operating_point(m, H100, tp, **kw) for m, tp, kw in cases]  # type: ignore[arg-type]
    for b, a in zip(batched, alone, strict=True):
        assert b.detail.keys() == a.detail.keys()
        nan_eq = all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(b.detail.values(), a.detail.values(), strict=True))
        assert nan_eq and (b.feasible, b.reason, b.instance_seconds_per_request, b.ttft_ms, b.energy_j_per_request) == \
            (a.feasible, a.reason, a.instance_seconds_per_request, a.ttft_ms, a.energy_j_per_request)
    # the queue mattered: some queued points' caps bind (below the ceiling) and the batch choice differs from unqueued
    caps = [op.detail["utilization_cap_at_batch"] for op in batched if op.feasible and not math.isnan(op.detail["utilization_cap_at_batch"])]
    assert caps and min(caps) < 0.9


def test_no_pending_points_is_no_call() -> None:
    assert finish_prefill_points([]) == []
