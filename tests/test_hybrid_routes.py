"""A hybrid plan may serve one bucket both in a shared pool and disaggregated: the simulator's routes then
pair a decode pool with the prefill pools only, a unified route prefills in its own pool, and the route
probabilities still add up to the service's traffic (a two-service hybrid solve crashed in the adapter:
"route to exactly one of a unified or a decode pool" / "a unified route has no separate prefill pool")."""

from __future__ import annotations

from pathlib import Path

import pytest

INSTANCE = Path(__file__).resolve().parents[1] / "instances" / "enterprise-chat.yaml"


def test_a_bucket_split_between_shared_and_disaggregated_routes() -> None:
    from planner.instance import load_instance
    from planner.optimize.settings import SolveSettings
    from planner.schema.plan import RoutingShare
    from planner.simulate.adapter import plan_to_sim, plan_to_sim_by_bucket
    from planner.solve_instance import solve_instance

    result = solve_instance(load_instance(INSTANCE), SolveSettings(verify_rounds=0, simulation_check=None)).result
    shared, disagg = result.architectures["shared"], result.architectures["disaggregated"]
    split = shared.routing[-1].bucket  # one bucket served half and half
    routing: list[RoutingShare] = []
    for r in shared.routing:
        routing.append(r.model_copy(update={"share": r.share * 0.5}) if r.bucket == split else r)
    for r in disagg.routing:
        if r.bucket == split:
            routing.append(r.model_copy(update={"share": r.share * 0.5}))
    hybrid = shared.model_copy(update={"architecture": "hybrid", "pools": [*shared.pools, *disagg.pools], "routing": routing})
    both = result.model_copy(update={"architectures": {**result.architectures, "hybrid": hybrid}})
    sim = plan_to_sim_by_bucket(both, "hybrid")
    table = sim.route_table
    assert table["probability"].sum() == pytest.approx(1.0)
    mine = table[table["bucket"] == split]
    unified = mine[mine["unified"].notna()]
    assert len(unified) and unified["prefill"].isna().all()
    assert unified["probability"].sum() == pytest.approx(mine["probability"].sum() / 2)
    assert (mine[mine["decode"].notna()]["prefill"].notna()).all()
    base = plan_to_sim(both, "hybrid")  # one route per service: the larger part, said so
    assert any("both in a shared pool and disaggregated" in n for n in base.notes)
