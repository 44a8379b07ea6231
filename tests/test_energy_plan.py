"""Energy in the plan (planner.optimize.energy_report): by pool and phase, busy + idle = facility,
emissions at a grid carbon intensity, and the verdict naming energy when it decides."""

from __future__ import annotations

import pytest
from micro_tables import micro_tables

from planner.optimize import SolveSettings, solve_tables
from planner.optimize.energy_report import with_emissions
from planner.optimize.synthetic import synthetic_tables
from planner.optimize.verdict import energy_reasons
from planner.schema.capacity import CapacityTables


def _micro() -> CapacityTables:
    """One unified pool: 10 req/s peak (5 mean), 1 s per request, 500 J per request, cap 0.5 -> 20 devices."""
    return micro_tables(price_kwh=0.1, ops_pool=100.0, ops_type=1000.0)


def test_micro_energy_by_pool_and_emissions_by_hand() -> None:
    res = solve_tables(_micro(), SolveSettings(architectures=("shared",))).result
    plan = res.architectures["shared"]
    e = plan.energy
    assert e is not None
    # busy: PUE 1.5 x 5 req/s x (500 J + 1 s x 50 W host) x 730 h x 3600 s / 3.6e6 J/kWh
    busy = 1.5 * 5 * 550 * 730 / 1000
    # idle: PUE 1.5 x 730 h / 1000 x (20 devices x 150 W - 5 busy devices x 150 W)
    idle = 1.5 * 730 / 1000 * (20 * 150 - 5 * 150)
    assert e.busy_kwh_per_month == pytest.approx(busy)
    assert e.idle_kwh_per_month == pytest.approx(idle)
    assert e.facility_kwh_per_month == pytest.approx(busy + idle)
    assert e.tool_phase_kwh_per_month == pytest.approx(0.0, abs=1e-6)
    assert [(p.role, p.busy_kwh_per_month, p.idle_kwh_per_month) for p in e.pools] == [("unified", pytest.approx(busy), pytest.approx(idle))]
    tokens = 5 * 1100 * 3600 * 730
    assert plan.energy_wh_per_1k_tokens == pytest.approx((busy + idle) * 1e6 / tokens)
    assert e.pools[0].wh_per_1k_tokens == pytest.approx(plan.energy_wh_per_1k_tokens)
    assert e.emissions_kg_per_month is None
    out = with_emissions(res, 400.0).architectures["shared"].energy
    assert out is not None
    assert out.emissions_kg_per_month == pytest.approx((busy + idle) * 0.4)
    assert out.emissions_g_per_million_tokens == pytest.approx((busy + idle) * 400 / tokens * 1e6)


@pytest.mark.parametrize("seed", range(3))
def test_energy_terms_sum_to_the_plan_energy(seed: int) -> None:
    """Pools' busy + idle (+ tool phase) = facility kWh; pools' Wh/1k tokens add up to the plan's."""
    t = synthetic_tables(services=2, buckets=2, devices=2, tps=(1, 2), seed=seed, rate_scale=5)
    for arch in ("shared", "disaggregated"):
        plan = solve_tables(t, SolveSettings(architectures=(arch,), mip_gap=0.0)).result.architectures[arch]
        e = plan.energy
        assert e is not None and plan.energy_wh_per_1k_tokens is not None
        assert sum(p.busy_kwh_per_month + p.idle_kwh_per_month for p in e.pools) + e.tool_phase_kwh_per_month == pytest.approx(
            e.facility_kwh_per_month, rel=1e-9)
        assert sum(p.wh_per_1k_tokens or 0.0 for p in e.pools) == pytest.approx(plan.energy_wh_per_1k_tokens, rel=1e-9)
        assert all(p.idle_kwh_per_month >= -1e-9 and p.busy_kwh_per_month >= 0 for p in e.pools)
        assert e.facility_kwh_per_month == pytest.approx(plan.power_kw_mean * 730.0, rel=1e-9)


def test_verdict_names_energy_only_when_it_decides() -> None:
    plan = solve_tables(_micro(), SolveSettings(architectures=("shared",))).result.architectures["shared"]
    diffs = {"power_busy_usd_per_month": 80.0, "power_idle_usd_per_month": 30.0, "equipment_usd_per_month": -10.0}
    decided = energy_reasons(plan, plan, 100.0, diffs)
    assert len(decided) == 1 and decided[0].startswith("Energy decides: shared saves $110/month")
    assert energy_reasons(plan, plan, 120.0, diffs) == []
    assert energy_reasons(plan, plan, -5.0, diffs) == []
