"""The geometric multiplier search shared by budget studies and plan headroom."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.studies.search import largest_passing_multiplier


@given(threshold=st.floats(min_value=1 / 900, max_value=900), rel_tol=st.sampled_from([0.1, 0.01, 0.001]))
def test_brackets_the_threshold_within_the_tolerance(threshold: float, rel_tol: float) -> None:
    calls: list[float] = []

    def ok(m: float) -> bool:
        calls.append(m)
        return m <= threshold

    m = largest_passing_multiplier(ok, cap=1024.0, rel_tol=rel_tol)
    assert m <= threshold
    assert m * (1 + rel_tol) ** 1.01 >= threshold
    assert m in calls and ok(m)


def test_extremes() -> None:
    assert largest_passing_multiplier(lambda m: True, cap=64.0, rel_tol=0.01) == 64.0
    assert largest_passing_multiplier(lambda m: False, cap=64.0, rel_tol=0.01) == 0.0
    assert largest_passing_multiplier(lambda m: m <= 1.0, cap=64.0, rel_tol=0.01) == pytest.approx(1.0, rel=0.011)


def test_sweep_summary_energy_matches_the_full_plan_and_ignores_the_price() -> None:
    """The sweep fast path reports the same facility energy per token as a full solve, also at a zero price."""
    from planner.optimize import SolveSettings, solve_tables
    from planner.optimize.resolve import Resolver, summarize, with_price
    from planner.optimize.synthetic import synthetic_tables

    tables = synthetic_tables(services=1, buckets=2, devices=2, seed=5)
    settings = SolveSettings(architectures=("shared", "disaggregated"))
    full = solve_tables(tables, settings).result
    resolver = Resolver.create(tables, settings)
    for price in (tables.costs.electricity_usd_per_kwh, 0.0):
        summaries, _ = summarize(resolver, with_price(tables, price), settings)
        for arch, summary in summaries.items():
            expected = full.architectures[arch].energy_wh_per_1k_tokens
            assert expected is not None and expected > 0
            assert summary.energy_wh_per_1k_tokens == pytest.approx(expected, rel=1e-6)


def test_exact_cap_returns_a_cap_that_is_not_a_power_of_two() -> None:
    # a planning bound of x700: passing everywhere gives 700 (not 512); a threshold between 512 and 700 is bisected
    assert largest_passing_multiplier(lambda m: True, cap=700.0, rel_tol=0.01, exact_cap=True) == 700.0
    assert largest_passing_multiplier(lambda m: True, cap=700.0, rel_tol=0.01) == 512.0
    m = largest_passing_multiplier(lambda m: m <= 650.0, cap=700.0, rel_tol=0.01, exact_cap=True)
    assert 650.0 / 1.0101 <= m <= 650.0


def test_floor_is_separate_from_the_cap() -> None:
    # a cap of x3 must not make the search give up at 1/3: the floor is its own bound
    m = largest_passing_multiplier(lambda m: m <= 0.01, cap=3.0, rel_tol=0.01, floor=2.0**-20, exact_cap=True)
    assert 0.01 / 1.0101 <= m <= 0.01
    assert largest_passing_multiplier(lambda m: m <= 0.01, cap=3.0, rel_tol=0.01) == 0.0
