"""Monotone costs (issue 13, item 6): more traffic never lowers an architecture's reported cost,
a looser latency target never raises it. Random small capacity tables (hypothesis) on the
analytic path (MIP, tail-latency check and tightening; no peak simulation)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from planner.optimize import SolveSettings, solve_tables
from planner.optimize.resolve import scale_rates
from planner.optimize.synthetic import synthetic_tables
from planner.schema.capacity import CapacityTables

_S = SolveSettings(confidence="off")


def _totals(tables: CapacityTables) -> dict[str, float | None]:
    r = solve_tables(tables, _S).result
    return {a: (p.costs.total_usd_per_month if p.feasible and p.costs else None) for a, p in r.architectures.items()}


def _never_lower(before: dict[str, float | None], after: dict[str, float | None]) -> list[str]:
    """Architectures whose cost dropped (a plan that becomes infeasible is not a drop)."""
    return [a for a, c in after.items() if c is not None and before.get(a) is not None and c < before[a] * (1 - 1e-6)]  # type: ignore[operator]


@settings(max_examples=8, deadline=None, derandomize=True)  # reproducible in CI
@given(seed=st.integers(0, 10_000), scale=st.floats(0.3, 6.0), grow=st.floats(1.05, 2.5))
def test_more_traffic_never_costs_less(seed: int, scale: float, grow: float) -> None:
    t = synthetic_tables(services=1, buckets=2, devices=2, tps=(1, 2), seed=seed, rate_scale=scale)
    base = _totals(t)
    more = _totals(scale_rates(t, {"svc0": grow}))
    assert not _never_lower(base, more), (base, more)


@settings(max_examples=8, deadline=None, derandomize=True)  # reproducible in CI (a random run found seed 598 below)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.3, 6.0), loosen=st.floats(1.1, 3.0))
@example(seed=598, scale=4.5, loosen=2.0)  # shared $87,301 -> $91,699 before the analytic refine (planner.optimize.tighten step 6)
def test_a_looser_ttft_target_never_costs_more(seed: int, scale: float, loosen: float) -> None:
    t = synthetic_tables(services=1, buckets=2, devices=2, tps=(1, 2), seed=seed, rate_scale=scale)
    tight = _totals(t)
    loose_demand = t.demand.assign(ttft_target_ms=t.demand["ttft_target_ms"] * loosen)
    loose = _totals(replace(t, demand=loose_demand))
    assert not _never_lower(loose, tight), (tight, loose)  # tight must cost at least as much as loose


@pytest.mark.slow
def test_code_completion_costs_grow_with_traffic() -> None:
    """The example where more traffic cost less: at rate ×1 the prefill caps of a one-server nominal
    pool under the log's bursts (CV 4.7) were a few per cent, and 32 prefill instances ran at 1-2 %
    (disaggregated $141,149 against $108,502 at ×1.5). The relax step (planner.optimize.latency.relax_factors)
    raises such caps to what the pool's actual size needs; every plan still meets in simulation."""
    from pathlib import Path

    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    path = Path(__file__).resolve().parents[1] / "instances" / "code-completion-8b.yaml"
    totals = []
    for m in (1.0, 1.5):
        r = load_instance(path, {"services.code.traffic.rate_multiplier": m})
        res = solve_instance(r, replace(settings_from_instance(r.instance), confidence="off")).result
        assert all(p.simulation is not None and p.simulation.met for p in res.architectures.values() if p.feasible)
        totals.append(_totals_of(res))
    assert not _never_lower(totals[0], totals[1]), totals


@pytest.mark.slow
def test_code_completion_shared_costs_grow_from_its_own_traffic_to_x1_05(solved_example) -> None:
    """The example's own traffic (the session's ``planner solve``) against ×1.05 of it: the shared plan at ×1 ended at
    14 H100 tp4 ($121,166) where ×1.05 found 27 tp2 ($116,991) — the loops tighten the configuration a miss names and
    never return to one they left — until their step 8 re-solved a shared plan's one tightened pool without its
    configuration (planner.optimize.tighten._by_tightening; ×1 now 27 tp2, $116,979). Both meet in simulation."""
    from pathlib import Path

    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    base = solved_example("code-completion-8b")
    assert base.exit_code == 0, base.output
    archs = base.json()["architectures"]
    assert all(a["simulation"]["met"] for a in archs.values() if a["feasible"])
    at_1 = {n: (a["costs"]["total_usd_per_month"] if a["feasible"] and a.get("costs") else None) for n, a in archs.items()}
    path = Path(__file__).resolve().parents[1] / "instances" / "code-completion-8b.yaml"
    own = load_instance(path).instance.services["code"].traffic.rate_multiplier
    r = load_instance(path, {"services.code.traffic.rate_multiplier": 1.05 * own})
    res = solve_instance(r, replace(settings_from_instance(r.instance), confidence="off")).result
    assert all(p.simulation is not None and p.simulation.met for p in res.architectures.values() if p.feasible)
    assert not _never_lower(at_1, _totals_of(res)), (at_1, _totals_of(res))


@pytest.mark.slow
def test_multimodal_shared_at_x1_15_costs_no_more_than_at_x1_2() -> None:
    """multimodal-image's shared plan at rate ×1.15 and ×1.2 of its own (rate_multiplier 23 and 24): the analytic
    tightening read the lane service of an inline ``encode_unified`` row (no lane columns: NaN) beside its host's, so
    the bisection of the pool's load scale failed at every load and a per-token miss of 4 H100 (TPOT 55.9 against
    50 ms) tightened their caps ×4: 16 L40S at $15,277 where ×1.2 buys 5 H100 at $14,967. The tightening now reads the
    points with the tower folded into its host (planner.optimize.latency._tighten_factors)."""
    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    path = Path(__file__).resolve().parents[1] / "instances" / "multimodal-image.yaml"
    costs, caps = {}, {}
    for m in (23.0, 24.0):
        r = load_instance(path, {"services.vqa.traffic.rate_multiplier": m})
        s = replace(settings_from_instance(r.instance), confidence="off", architectures=("shared",))
        res = solve_instance(r, s).result
        plan = res.architectures["shared"]
        assert plan.feasible and plan.costs is not None and plan.simulation is not None and plan.simulation.met
        costs[m] = plan.costs.total_usd_per_month
        caps[m] = [c for c in (res.capacity.utilization_caps or []) if "tightening_factor" in c]
    assert costs[23.0] <= costs[24.0] + 0.005, costs
    assert all(float(c["tightening_factor"]) < 4.0 for c in caps[23.0]), caps[23.0]


def _totals_of(res: object) -> dict[str, float | None]:
    return {a: (p.costs.total_usd_per_month if p.feasible and p.costs else None) for a, p in res.architectures.items()}  # type: ignore[attr-defined]


@pytest.mark.slow
def test_long_document_disaggregated_costs_grow_from_x1_2_to_x1_3() -> None:
    """The relax step charged a bucket's slack to every pool on its path: at ×1.2 the long-prompt bucket
    was split between a 12-instance b200/tp1 prefill pool (46 %) and a one-instance tp2 pool with an 18 s
    wait, so the tp1 pool was left at its tight caps and the plan cost $53,085 where ×1.3 costs $40,320
    (one tp1 pool of 10). Relaxed by the pool's own room (planner.optimize.latency._pool_meets_up_to), ×1.2
    costs no more than ×1.3, and both plans meet in simulation."""
    from pathlib import Path

    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    path = Path(__file__).resolve().parents[1] / "instances" / "long-document-nvidia.yaml"
    totals = []
    for m in (1.2, 1.3):
        r = load_instance(path, {"services.assistant.traffic.rate_multiplier": m})
        s = replace(settings_from_instance(r.instance), confidence="off", architectures=("disaggregated",))
        res = solve_instance(r, s).result
        plan = res.architectures["disaggregated"]
        assert plan.feasible and plan.simulation is not None and plan.simulation.met
        totals.append(_totals_of(res))
    assert not _never_lower(totals[0], totals[1]), totals
