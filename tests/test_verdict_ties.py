"""Ties: totals within TIE_REL_TOL are reported as a tie with the rule that broke it (terminal, JSON, HTML),
never with a reason that is not true (before: "misses its targets in simulation" at a margin of -1e-7)."""

from __future__ import annotations

from typing import Any

import pytest

from planner.optimize import SolveSettings, solve_tables
from planner.optimize.synthetic import synthetic_tables
from planner.optimize.verdict import _SIMPLICITY, TIE_REL_TOL, make_verdict
from planner.schema.plan import ArchitecturePlan, SimulationCheck


@pytest.fixture(scope="module")
def solved() -> Any:
    out = solve_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=3), SolveSettings(architectures=("shared", "disaggregated")))
    assert all(p.feasible for p in out.result.architectures.values())
    return out


def _with_total(plan: ArchitecturePlan, total: float) -> ArchitecturePlan:
    assert plan.costs is not None
    return plan.model_copy(update={"costs": plan.costs.model_copy(update={"total_usd_per_month": total})})


def _devices(p: ArchitecturePlan) -> int:
    return sum(x.devices for x in p.pools)


def _check(met: bool) -> SimulationCheck:
    return SimulationCheck(seed=0, duration_s=10.0, warmup_s=1.0, requests=100, measured_requests=90, wall_s=0.01,
                           ci_level=0.95, met=met, findings=[] if met else ["pool X: p99 TTFT +40%"])


@pytest.mark.parametrize("delta", [-1e-7, 0.0, 1e-7])
def test_a_tie_is_reported_with_its_rule(solved: Any, delta: float) -> None:
    plans = dict(solved.result.architectures)
    total = plans["shared"].costs.total_usd_per_month
    plans["disaggregated"] = _with_total(plans["disaggregated"], total + delta)
    v = make_verdict(plans, solved.prepared)
    expected = min(plans.values(), key=lambda p: (_devices(p), len(p.pools), _SIMPLICITY[p.architecture]))
    assert v.winner == expected.architecture and v.tie_rule is not None
    assert v.reasons[0].startswith("Tie on cost") and v.tie_rule in v.reasons[0]
    assert not any("misses" in r for r in v.reasons)
    a, b = plans["shared"], plans["disaggregated"]
    word = "fewer devices" if _devices(a) != _devices(b) else "fewer pools" if len(a.pools) != len(b.pools) else "simpler architecture"
    assert word in v.tie_rule


def test_tie_rule_order_pools_then_simplicity(solved: Any) -> None:
    plans = dict(solved.result.architectures)
    sh, dg = plans["shared"], plans["disaggregated"]
    assert len(dg.pools) >= 2
    dg = _with_total(dg.model_copy(update={"pools": [p.model_copy(update={"devices": 1}) for p in dg.pools]}), sh.costs.total_usd_per_month)
    sh = sh.model_copy(update={"pools": [sh.pools[0].model_copy(update={"devices": len(dg.pools)})]})  # same devices, one pool
    v = make_verdict({"shared": sh, "disaggregated": dg}, solved.prepared)
    assert v.winner == "shared" and v.tie_rule == f"fewer pools (1 against {len(dg.pools)})"
    v = make_verdict({"shared": dg.model_copy(update={"architecture": "shared"}), "disaggregated": dg}, solved.prepared)
    assert v.winner == "shared" and v.tie_rule is not None and "simpler architecture" in v.tie_rule


def test_outside_the_tolerance_or_a_simulated_miss_is_no_tie(solved: Any) -> None:
    plans = dict(solved.result.architectures)
    total = plans["shared"].costs.total_usd_per_month
    plans["disaggregated"] = _with_total(plans["disaggregated"], total * (1 + 100 * TIE_REL_TOL))
    v = make_verdict(plans, solved.prepared)
    assert v.tie_rule is None and v.winner == "shared" and not v.reasons[0].startswith("Tie")
    plans["disaggregated"] = _with_total(plans["disaggregated"], total)
    plans["shared"] = plans["shared"].model_copy(update={"simulation": _check(False)})
    v = make_verdict(plans, solved.prepared)
    assert v.tie_rule is None and v.winner == "disaggregated"


def test_tie_in_terminal_json_and_html(solved: Any) -> None:
    from planner.report import summary_text
    from planner.report.html import render_html

    plans = dict(solved.result.architectures)
    plans["disaggregated"] = _with_total(plans["disaggregated"], plans["shared"].costs.total_usd_per_month - 1e-7)
    result = solved.result.model_copy(update={"architectures": plans, "verdict": make_verdict(plans, solved.prepared)})
    assert "VERDICT: Tie on cost" in summary_text(result)
    assert result.model_dump(mode="json")["verdict"]["tie_rule"] == result.verdict.tie_rule
    assert "Tie on cost" in render_html(plan=result)
