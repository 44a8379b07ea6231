"""The one-device-type rule of a shared plan is listed among what limits it only when it costs the plan something
(planner.optimize.solve._single_type_limit, issue 24 item 4): it used to be listed in every shared plan over a
catalog of several device types, "so it cannot mix devices", also where a mix gives the same plan."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from planner.optimize.solve import SolveSettings, solve_tables
from planner.optimize.synthetic import synthetic_tables
from planner.optimize.verdict import plain_limit


def _tables(crossed: bool) -> Any:
    """Two services, two device types, no per-pool or per-type operations cost. ``crossed``: each service's unified
    point is 20 times slower on the other service's device, so one type must serve one of them slowly."""
    t = synthetic_tables(services=2, buckets=1, devices=2, seed=0)
    pts = t.points.copy()
    if crossed:
        slow = (pts["role"] == "unified") & (((pts["service"] == "svc0") & (pts["device"] == "dev1"))
                                             | ((pts["service"] == "svc1") & (pts["device"] == "dev0")))
        pts.loc[slow, "instance_seconds_per_request"] *= 20.0
    costs = replace(t.costs, ops_usd_per_pool_month=0.0, ops_usd_per_device_type_month=0.0)
    return replace(t, points=pts, costs=costs)


@pytest.mark.parametrize("crossed", [True, False])
def test_the_rule_is_a_limit_exactly_when_a_mix_is_cheaper(crossed: bool) -> None:
    tables = _tables(crossed)
    one = solve_tables(tables, SolveSettings(architectures=("shared",), time_limit_s=30)).result.architectures["shared"]
    mixed = solve_tables(tables, SolveSettings(architectures=("shared",), time_limit_s=30, shared_single_device_type=False)
                         ).result.architectures["shared"]
    assert one.costs is not None and mixed.costs is not None
    saving = one.costs.total_usd_per_month - mixed.costs.total_usd_per_month
    limits = [b for b in one.binding if b.kind == "device_types"]
    if crossed:
        assert saving > 1.0 and len({p.device for p in mixed.pools}) == 2
        assert len(limits) == 1
        # the figures quoted: the plan's own objective, and a mixed plan on the same caps before any latency check,
        # so no dearer than the mixed plan the full solve returns (its check can only add devices)
        quoted = re.search(r"would cost ([\d,]+) USD/month less \(([\d,]+) against ([\d,]+):", limits[0].detail)
        assert quoted is not None
        less, mix_usd, own_usd = (float(g.replace(",", "")) for g in quoted.groups())
        assert own_usd == pytest.approx(one.solver.objective_usd_per_month, abs=0.5)
        assert mix_usd <= mixed.costs.total_usd_per_month + 0.5 and less == pytest.approx(own_usd - mix_usd, abs=1.0)
        words = plain_limit(limits[0].name, limits[0].kind, limits[0].detail)
        assert words.startswith("a shared plan uses one device type only (options.shared_single_device_type): a mix")
    else:
        assert abs(saving) <= 1.0 and limits == []


def test_the_rule_is_no_limit_on_enterprise_chat(solved_example: Any) -> None:
    """On enterprise-chat allowing a mix gives the same shared plan (measured: `planner solve instances/enterprise-chat.yaml
    --set options.shared_single_device_type=false`), so the verdict no longer says the rule limits it."""
    plan = solved_example("enterprise-chat").plan()
    assert not [b for b in plan.architectures["shared"].binding if b.kind == "device_types"]
    assert not any("cannot mix devices" in r or "one device type only" in r for r in plan.verdict.reasons)
