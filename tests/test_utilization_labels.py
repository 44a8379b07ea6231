"""What a pool's utilisation is, said where it is shown (issue 24 item 4).

The planned utilisation is ``busy instances / instances``: the share of what the instances serve at the operating
point's batch within the targets. The verdict called it "busy X% of the time", and the reports set it beside a
simulated slot occupancy as if the two were one quantity: the example shared pools read 0.55-0.92 planned against
0.30-0.80 simulated while their per-token latency sat at its target in both."""

from __future__ import annotations

import math
from typing import Any

from planner.schema.plan import UTILIZATION_NOTE
from planner.simulate.results import PoolResult
from planner.simulate.stats import LogHistogram, Summary


def _pool(role: str, util: float, slots: float, lane: float = math.nan) -> PoolResult:
    return PoolResult(name=f"{role}:x", role=role, instances=2, wait=Summary.of(LogHistogram()), utilization=util, slot_utilization=slots,
                      kv_utilization=0.1, preemptions=0, kv_blocked_admissions=0, rejected=0, recompute_s=0.0, queue_max=0,
                      lane_utilization=lane)


def test_the_simulated_figure_beside_the_plan_by_role() -> None:
    assert _pool("prefill", 0.7, math.nan).plan_comparable_utilization == 0.7
    assert _pool("decode", 0.99, 0.4).plan_comparable_utilization == 0.4
    assert _pool("unified", 0.99, 0.3, lane=0.6).plan_comparable_utilization == 0.6  # a lane-bound pool: its lane
    assert _pool("unified", 0.99, 0.5, lane=0.2).plan_comparable_utilization == 0.5


def test_the_lane_busy_share_is_measured_in_unified_pools(solved_example: Any) -> None:
    """long-context-assistant's shared pools (prompts up to 123k tokens, chunked; 14 tp4 + 2 tp1 MI300X since a
    unified point's own TTFT at load counts its bucket's representative prompt, 14 tp4 since the descent merges shared
    pools, planner.optimize.tighten step 7): each lane runs chunks part of the
    time, never more than the instance iterates; the plan's simulated utilisation is the larger of slots and lane."""
    from planner.simulate.adapter import bucket_stream, plan_to_sim_by_bucket
    from planner.simulate.engine import simulate

    plan = solved_example("long-context-assistant").plan()
    sim = plan_to_sim_by_bucket(plan, "shared")
    res = simulate(sim.pools, sim.routes, bucket_stream(sim, load="peak", duration_s=60, seed=0))
    assert res.pools
    for pool in res.pools.values():
        assert pool.role == "unified" and 0.0 < pool.lane_utilization <= pool.utilization + 1e-9
        assert pool.plan_comparable_utilization == max(pool.slot_utilization, pool.lane_utilization)
    shown = {p.pool: p.utilization_sim for p in plan.architectures["shared"].simulation.pools}
    assert set(shown) == set(res.pools) and all(0.0 < v <= 1.0 for v in shown.values())


def test_the_verdict_and_the_reports_say_what_utilisation_is(solved_example: Any) -> None:
    from planner.report.html import render_html

    plan = solved_example("enterprise-chat").plan()
    said = [r for r in plan.verdict.reasons if "mean load" in r]
    assert said and all("of its capacity at mean load" in r and "of the time" not in r for r in said)
    html = render_html(plan=plan)
    assert UTILIZATION_NOTE.split(" what ")[0] in html and "sim-util-note-shared" in html
