"""A latency group's buckets split alike over the pools (``group_route``, planner.optimize.model;
issue 24 item 0). Above 4 buckets each bucket's caps are priced as the mixture of the input-length
quarter it nests in sharing one pool (planner.optimize.prepare.group_busy); the MIP ties their routing
shares so no pool carries only part of a group (code-completion-8b at 16 buckets had a one-instance
tp1 pool carrying 4.6 % of the top bucket alone, then tightened x4)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from test_bucket_work import _instance


@pytest.mark.parametrize("architecture", ["shared", "disaggregated"])
def test_group_buckets_share_their_routing(tmp_path: Path, architecture: str) -> None:
    import yaml

    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.model import build_model, constraint_name
    from planner.optimize.prepare import prepare
    from planner.optimize.solve import make_solver, solve_architecture
    from planner.schema.capacity import LATENCY_GROUP_COLUMN
    from planner.studies.source import settings_for

    path = _instance(tmp_path, seed=3, n=1500, rho=0.5)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["catalog"] = {"devices": ["h100-sxm", "l40s"], "pricing": "rent", "tp_degrees": [1, 2]}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    resolved = load_instance(path, {"services.chat.traffic.buckets": 8})
    tables = build_capacity_tables(resolved)
    groups = tables.demand.groupby(LATENCY_GROUP_COLUMN)["bucket"].nunique()
    assert (groups == 2).all() and len(groups) == 4  # 8 buckets nest in the 4 quarters
    settings = settings_for(resolved)
    built = build_model(prepare(tables, max_utilization=settings.max_utilization), redundancy=settings.redundancy)
    assert built.group_ties and constraint_name(built, "group_route", 0).startswith("group_route[chat|")
    plan = solve_architecture(built, make_solver(), architecture, settings)
    assert plan.feasible
    pts = built.prep.points
    share: dict[tuple[object, str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for i, (d, pool, role, g) in enumerate(zip(pts["d"], pts["pool"], pts["role"], pts[LATENCY_GROUP_COLUMN], strict=True)):
        share[(g, str(pool), str(role))][int(d)] += float(built.model.x[i].value or 0.0)
    by_group = tables.demand.assign(d=range(len(tables.demand))).groupby(LATENCY_GROUP_COLUMN)["d"].apply(list)
    for (g, pool, role), per_d in share.items():
        values = [per_d.get(d, 0.0) for d in by_group[g]]
        assert max(values) - min(values) < 1e-6, (g, pool, role, values)
