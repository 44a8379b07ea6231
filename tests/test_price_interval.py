"""A sweep's electricity prices solved by intervals (planner.studies.price_interval, issue 27): the ends of a
price range solved, the prices between interpolated where both ends' verify-and-tighten loops saw the same MIP
solutions, bisected where they did not; the rows are those of solving every price."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner.optimize.resolve import ArchitectureSummary
from planner.studies.price_interval import interpolated, solve_by_intervals

ROOT = Path(__file__).resolve().parent.parent


def _summary(total: float, pools: dict[str, int], power: float) -> ArchitectureSummary:
    return ArchitectureSummary(architecture="shared", feasible=True, status="optimal",
                               costs={"equipment_usd_per_month": total - power, "power_busy_usd_per_month": power},
                               total_usd_per_month=total, instances=pools, devices={"d": sum(pools.values())},
                               tokens_per_month=1e9, usd_per_million_tokens=total / 1e3, energy_wh_per_1k_tokens=1.0,
                               solve_s=0.5, gap=1e-5)


def test_ends_solved_middle_interpolated_and_a_change_of_path_bisected() -> None:
    """Prices 0.0 … 0.6: plan A (1,000 + 2,000 p) below 0.4, plan B (900 + 2,500 p) from 0.4 on. The loop's trace
    names the plan. Solved: the ends, then the middles of the intervals whose ends differ, down to neighbours;
    every other price interpolated, equal to the plan's cost at its price."""
    prices = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    solved: list[int] = []

    def solve(k: int):  # type: ignore[no-untyped-def]
        solved.append(k)
        p = prices[k]
        if p < 0.4:
            return {"shared": _summary(1000 + 2000 * p, {"A": 2}, 2000 * p)}, True, [("shared", "optimal", b"A")]
        return {"shared": _summary(900 + 2500 * p, {"B": 3}, 2500 * p)}, True, [("shared", "optimal", b"B")]

    out = solve_by_intervals(prices, solve)
    assert sorted(solved) == [0, 3, 4, 6]  # the ends; 3 (middle of 0..6, ends differ); 4 (of 3..6); 1, 2 and 5 interpolated
    for k, (summaries, reused) in enumerate(out):
        s = summaries["shared"]
        want = 1000 + 2000 * prices[k] if prices[k] < 0.4 else 900 + 2500 * prices[k]
        assert reused and s.total_usd_per_month == pytest.approx(want, rel=1e-12)
        assert s.instances == ({"A": 2} if prices[k] < 0.4 else {"B": 3})
        assert s.costs["power_busy_usd_per_month"] + s.costs["equipment_usd_per_month"] == pytest.approx(want, rel=1e-12)
        assert s.solve_s == (0.5 if k in solved else 0.0)


def test_a_price_answered_by_a_memo_is_not_a_known_path() -> None:
    """An empty trace (nothing solved: a memo answered) says nothing about the loop's path: every price is solved."""
    prices = [0.1, 0.2, 0.3, 0.4]
    solved: list[int] = []

    def solve(k: int):  # type: ignore[no-untyped-def]
        solved.append(k)
        return {"shared": _summary(1000 + prices[k], {"A": 1}, prices[k])}, True, []

    solve_by_intervals(prices, solve)
    assert sorted(solved) == [0, 1, 2, 3]


def test_interpolated_gap_is_the_larger_of_the_ends() -> None:
    a = ({"shared": _summary(1000.0, {"A": 1}, 100.0)}, True, [("x",)])
    b = ({"shared": replace(_summary(1200.0, {"A": 1}, 300.0), gap=3e-5)}, True, [("x",)])
    mid = interpolated(a, b, 0.1, 0.3, 0.2)["shared"]
    assert mid.total_usd_per_month == pytest.approx(1100.0) and mid.costs["power_busy_usd_per_month"] == pytest.approx(200.0)
    assert mid.gap == 3e-5 and mid.usd_per_million_tokens == pytest.approx(1100.0 / 1e3)


@pytest.mark.slow
def test_sweep_over_prices_equals_solving_every_price() -> None:
    """enterprise-chat at ×2 traffic over five prices: the sweep's rows (ends solved, the middle interpolated) against
    each price solved on its own (the same pools, totals to 1e-12); a budget turns the intervals off."""
    from planner.instance import load_instance
    from planner.studies.price_interval import price_groups
    from planner.studies.source import TableSource
    from planner.studies.spec import expand, parse_sets
    from planner.studies.sweep import run_sweep, solve_scenario

    resolved = load_instance(ROOT / "instances" / "enterprise-chat.yaml")
    study = expand(parse_sets(["services.chat.traffic.rate_multiplier=2", "costs.electricity_usd_per_kwh=0.05,0.1,0.15,0.2,0.3"]))
    src = TableSource.from_instance(resolved)
    rows = run_sweep(src, study, jobs=1)
    assert (rows["solve_s"] == 0).sum() >= 2  # interior prices interpolated
    for sc in study:
        alone = TableSource.from_instance(resolved)  # no shared memo: a real solve of this price
        summaries, _ = solve_scenario(alone, sc.overrides)
        mine = rows[rows["scenario"] == sc.name].set_index("architecture")
        for arch, s in summaries.items():
            assert mine.loc[arch, "pools"] == ", ".join(f"{p}x{n}" for p, n in sorted(s.instances.items()))
            assert mine.loc[arch, "total_usd_per_month"] == pytest.approx(s.total_usd_per_month, rel=1e-12)
    with_budget = expand(parse_sets(["costs.electricity_usd_per_kwh=0.05,0.1,0.15", "options.budget_usd_per_month=50000"]))
    assert price_groups(src, with_budget) == [[0], [1], [2]]
