"""Unified points finished together (issue 27, start-up): :func:`planner.perf.points.operating_point_stage`
returns a unified point as a :class:`~planner.perf.points.PendingUnified` (its scan over (batch, chunk)
pairs, a generator waiting for the costs of each block of pairs that meet the targets) and
:func:`~planner.perf.points.finish_unified_points` runs the scans of many in lockstep, pricing the
blocks of a round with one :func:`planner.queueing.max_utilization_many` call (what
:func:`planner.capacity.build_capacity_tables` does). Every point must equal the one
:func:`planner.perf.operating_point` gives alone (one :func:`planner.perf.points._unified_costs` call
per block), exactly: every field and detail."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import planner.perf.points as points_mod
from planner.catalog import load_catalog
from planner.perf import operating_point
from planner.perf.points import PendingUnified, finish_unified_points, operating_point_stage
from planner.schema.capacity import OperatingPoint

CAT = load_catalog(Path(__file__).parent / "data" / "perf_catalog")
H100 = CAT.devices["h100-sxm"]


def _cases() -> list[tuple[object, int, dict[str, object]]]:
    """Unified points over models, TP, prompt lengths, rates (none, light, heavy), arrival CVs, TTFT
    targets (tight, generous, none) and ITL targets; a fixed random subset, shuffled so neighbours in
    the batch differ."""
    out = []
    for model, tp, isl, rate, cv, ttft, itl in itertools.product(
            ("llama-3.1-8b", "llama-3.1-70b"), (1, 4), (1500.0, 6000.0), (None, 2.0, 60.0), (1.0, 2.0), (800.0, 4000.0, None),
            (None, 40.0)):
        kw: dict[str, object] = dict(role="unified", weight_precision="bf16", kv_precision="bf16", input_tokens=isl,
                                     output_tokens=300.0, ttft_target_ms=ttft, tpot_target_ms=None, itl_target_ms=itl,
                                     rate_per_s=rate, interarrival_cv=cv)
        out.append((CAT.models[model], tp, kw))
    pick = np.random.default_rng(11).choice(len(out), size=36, replace=False)
    return [out[i] for i in pick]


def test_batched_unified_points_equal_the_one_at_a_time_points(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = _cases()
    staged = [operating_point_stage(m, H100, tp, **kw) for m, tp, kw in cases]  # type: ignore[arg-type]
    pending = [s for s in staged if isinstance(s, PendingUnified)]
    assert len(pending) >= 24  # the rest: weights and one sequence's KV do not fit (finished at once)
    rounds: list[int] = []
    many = points_mod._costs_many

    def counted(requests: list[points_mod.CostRequest]) -> list[np.ndarray]:
        rounds.append(len(requests))
        return many(requests)

    monkeypatch.setattr(points_mod, "_costs_many", counted)
    done = iter(finish_unified_points(pending))
    monkeypatch.undo()
    batched: list[OperatingPoint] = []
    for s in staged:
        op = next(done) if isinstance(s, PendingUnified) else s
        assert isinstance(op, OperatingPoint)  # a unified point is never a PendingPrefill
        batched.append(op)
    alone = [operating_point(m, H100, tp, **kw) for m, tp, kw in cases]  # type: ignore[arg-type]
    assert len(batched) == len(alone)
    for b, a in zip(batched, alone, strict=True):
        assert repr(b) == repr(a)  # every field and detail (batch, chunk, TTFT, lane wait, cost) alike
    # the mix the test needs: feasible and infeasible points, queued points priced together over several rounds
    assert sum(op.feasible for op in batched) >= 10 and sum(not op.feasible for op in batched) >= 3
    assert len(rounds) >= 2 and rounds[0] >= 10


def test_no_pending_unified_points_is_no_call() -> None:
    assert finish_unified_points([]) == []
