"""The MIP on hand-made capacity tables: exact micro-answers, brute force, cost invariants, checker."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from micro_tables import micro_tables

from planner.optimize import SolveSettings, check_plan, solve_tables
from planner.optimize.extract import cost_breakdown
from planner.optimize.prepare import ARCH_ROLES, prepare
from planner.optimize.solve import check_costs_match_model
from planner.optimize.synthetic import synthetic_tables
from planner.schema.capacity import CapacityTables
from planner.schema.plan import COST_TERMS


def _micro(rate_peak: float = 10.0, tau: float = 1.0, cap: float = 0.5, *, ops_pool: float = 100.0, ops_type: float = 1000.0,
           price_kwh: float = 0.0, limit: float = math.inf) -> CapacityTables:
    return micro_tables(rate_peak=rate_peak, tau=tau, cap=cap, price_kwh=price_kwh, ops_pool=ops_pool, ops_type=ops_type, limit=limit)


def test_micro_instance_exact_count_and_cost() -> None:
    # load = 10 req/s x 1 s / 0.5 = 20 instances; equipment 20 x $2/h x 730 h = 29,200;
    # ops per device 20 x (10 + 5) = 300; pool 100; device type 1000; no power (price 0); no NIC (unified).
    res = solve_tables(_micro(), SolveSettings(architectures=("shared",))).result
    plan = res.architectures["shared"]
    assert plan.solver.status == "optimal"
    assert [(p.role, p.instances, p.devices) for p in plan.pools] == [("unified", 20, 20)]
    assert plan.costs is not None
    assert plan.costs.equipment_usd_per_month == pytest.approx(29_200.0)
    assert plan.costs.total_usd_per_month == pytest.approx(29_200.0 + 300.0 + 100.0 + 1000.0)
    assert plan.pools[0].utilization_peak == pytest.approx(0.5)
    assert plan.pools[0].utilization_mean == pytest.approx(0.25)


def test_micro_power_terms_never_double_count() -> None:
    # price 0.10 $/kWh, PUE 1.5, 20 instances, mean 5 req/s x 1 s busy = 5 busy devices on average.
    # busy: 5 req/s x (500 J + 1 s x 50 W host) x 3600 x 730 / 3.6e6 kWh x 0.15 $/kWh
    # idle: (20 devices x 150 W - 5 busy x 150 W) x 730 h / 1000 x 0.15
    res = solve_tables(_micro(price_kwh=0.10), SolveSettings(architectures=("shared",))).result
    c = res.architectures["shared"].costs
    assert c is not None
    busy = 5 * 550 * 3600 * 730 / 3.6e6 * 0.15
    idle = (20 * 150 - 5 * 150) * 730 / 1000 * 0.15
    assert c.power_busy_usd_per_month == pytest.approx(busy)
    assert c.power_idle_usd_per_month == pytest.approx(idle)
    # Provisioned device time is split into busy and idle exactly once:
    assert c.power_busy_usd_per_month + c.power_idle_usd_per_month == pytest.approx(
        (5 * 500 * 3600 / 3.6e6 + 20 * 150 / 1000 - 5 * 100 / 1000) * 730 * 0.15)


def test_redundancy_adds_k_instances() -> None:
    res = solve_tables(_micro(), SolveSettings(architectures=("shared",), redundancy=2)).result
    assert res.architectures["shared"].pools[0].instances == 22
    assert check_plan(res) == []


def test_budget_and_procurement_infeasibility_is_diagnosed() -> None:
    res = solve_tables(_micro(), SolveSettings(architectures=("shared",), budget_usd_per_month=10_000.0)).result
    plan = res.architectures["shared"]
    assert not plan.feasible and plan.solver.status == "infeasible"
    assert plan.diagnosis[0].constraint == "budget"
    assert "30,600" in plan.diagnosis[0].message
    res = solve_tables(_micro(limit=12), SolveSettings(architectures=("shared",))).result
    d = res.architectures["shared"].diagnosis[0]
    assert d.constraint == "procurement[g]" and "needs 20" in d.message
    assert res.verdict.winner is None


def test_missing_role_is_diagnosed_before_solving() -> None:
    res = solve_tables(_micro(), SolveSettings(architectures=("disaggregated",))).result
    plan = res.architectures["disaggregated"]
    assert not plan.feasible
    assert plan.diagnosis[0].service == "chat" and plan.diagnosis[0].bucket == "b0"


def test_tpot_target_below_fastest_step_is_named() -> None:
    t = _micro()
    pts = t.points.copy()
    pts.loc[:, "feasible"] = False
    pts.loc[:, "reason"] = "tpot 20 ms > target"
    t2 = CapacityTables(demand=t.demand.assign(tpot_target_ms=10.0), points=pts, configs=t.configs, costs=t.costs)
    d = solve_tables(t2, SolveSettings(architectures=("shared",))).result.architectures["shared"].diagnosis[0]
    assert d.constraint == "slo_tpot" and "20.0 ms" in d.message


@pytest.mark.parametrize("seed", range(4))
def test_cost_terms_sum_to_objective_and_match_model(seed: int) -> None:
    t = synthetic_tables(services=2, buckets=2, devices=2, tps=(1, 2), seed=seed, rate_scale=5)
    for arch in ("shared", "disaggregated"):
        out = solve_tables(t, SolveSettings(architectures=(arch,), mip_gap=0.0))
        plan = out.result.architectures[arch]
        assert plan.costs is not None and plan.solver.objective_usd_per_month is not None
        assert sum(plan.costs.terms().values()) == pytest.approx(plan.costs.total_usd_per_month, rel=1e-9)
        assert plan.costs.total_usd_per_month == pytest.approx(plan.solver.objective_usd_per_month, rel=1e-6)
        diffs = check_costs_match_model(out.built_by_architecture[arch], plan)
        assert all(abs(v) < 1e-4 * max(1.0, plan.costs.total_usd_per_month) for v in diffs.values()), diffs
        assert check_plan(out.result) == []
        assert plan.costs.idle_capacity_usd_per_month <= plan.costs.equipment_usd_per_month + plan.costs.power_idle_usd_per_month + 1e-6


def _brute_force(tables: CapacityTables, arch: str) -> float:
    """Enumerate every instance-count vector; for each, the routing LP solved directly with highspy.

    The cost is ``Σ_p (a_p n_p + c_pool [n_p > 0]) + c_type · #types + Σ_i coef_i x_i`` (every
    n-dependent term is linear in the device count), so all vectors are priced at once with
    numpy and visited cheapest first; the routing LP runs only while the n-part alone is
    below the best total found (the x-part is non-negative).
    """
    import highspy

    prep = prepare(tables)
    allowed = ARCH_ROLES[arch]
    pools = prep.pools[prep.pools["role"].isin(allowed)].reset_index(drop=True)
    pts = prep.points[prep.points["role"].isin(allowed)].reset_index(drop=True)
    pidx = {p: j for j, p in enumerate(pools["pool"])}
    pp = np.array([pidx[p] for p in pts["pool"]])
    zero_x = np.zeros(len(pts))
    zero_n = np.zeros(len(pools), dtype=int)
    base0 = cost_breakdown(tables.costs, tables.configs, pts, zero_x, pools, zero_n).total_usd_per_month
    coef = np.array([cost_breakdown(tables.costs, tables.configs, pts, np.eye(len(pts))[i], pools, zero_n).total_usd_per_month - base0 for i in range(len(pts))])
    fixed_pool, fixed_type = tables.costs.ops_usd_per_pool_month, tables.costs.ops_usd_per_device_type_month
    lin = np.array([cost_breakdown(tables.costs, tables.configs, pts, zero_x, pools, np.eye(len(pools), dtype=int)[j]).total_usd_per_month
                    - base0 - fixed_pool - fixed_type for j in range(len(pools))])
    grid = np.array(list(itertools.product(*[range(0, int(m) + 1) for m in pools["n_max"]])), dtype=int).reshape(-1, len(pools))
    devs = sorted(set(pools["device"]))
    on_type = np.stack([(grid[:, (pools["device"] == d).to_numpy()] > 0).any(axis=1) for d in devs], axis=1)
    if arch == "shared":
        grid, on_type = grid[on_type.sum(axis=1) <= 1], on_type[on_type.sum(axis=1) <= 1]
    base = base0 + grid @ lin + fixed_pool * (grid > 0).sum(axis=1) + fixed_type * on_type.sum(axis=1)
    load = (pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / pts["rho"]).to_numpy()
    route_rows = []
    for d in prep.demand["d"]:
        for roles in (("prefill", "unified"), ("decode", "unified")):
            idx = [i for i in range(len(pts)) if pts["d"].iat[i] == d and pts["role"].iat[i] in roles]
            if not idx:
                return math.inf  # a bucket without any point in the architecture
            route_rows.append(np.array(idx, dtype=np.int32))
    best = math.inf
    for k in np.argsort(base, kind="stable"):
        if base[k] >= best:
            break
        n = grid[k]
        h = highspy.Highs()
        h.silent()
        h.addVars(len(pts), np.zeros(len(pts)), np.array([1.0 if n[pp[i]] > 0 else 0.0 for i in range(len(pts))]))
        h.changeColsCost(len(pts), np.arange(len(pts), dtype=np.int32), coef)
        for idx in route_rows:
            h.addRow(1.0, 1.0, len(idx), idx, np.ones(len(idx)))
        for j in range(len(pools)):
            idx = np.nonzero(pp == j)[0].astype(np.int32)
            if len(idx):
                h.addRow(-highspy.kHighsInf, float(n[j]), len(idx), idx, load[idx])
        h.run()
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            best = min(best, float(base[k]) + h.getInfo().objective_function_value)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_brute_force_equals_mip(seed: int) -> None:
    t = synthetic_tables(services=1, buckets=2, devices=2, tps=(1,), seed=100 + seed, rate_scale=0.25)
    for arch in ("shared", "disaggregated"):
        # verify_rounds=0, relax=False: the MIP alone, on the caps brute force uses (the latency loop and the relaxing
        # of over-tight caps, which a shared pool now gets too, are tested on their own)
        res = solve_tables(t, SolveSettings(architectures=(arch,), mip_gap=0.0, verify_rounds=0, relax=False)).result
        plan = res.architectures[arch]
        brute = _brute_force(t, arch)
        if math.isinf(brute):
            assert not plan.feasible
            continue
        assert plan.costs is not None
        assert plan.costs.total_usd_per_month == pytest.approx(brute, rel=1e-6, abs=1e-3)
        assert check_plan(res) == []


def test_same_input_same_plan() -> None:
    t = synthetic_tables(services=2, buckets=3, devices=3, tps=(1, 2), seed=7, rate_scale=10)
    a = solve_tables(t, SolveSettings(architectures=("shared", "disaggregated", "hybrid"))).result
    b = solve_tables(t, SolveSettings(architectures=("shared", "disaggregated", "hybrid"))).result
    strip = {"time_s", "build_s", "extract_s"}
    for arch in a.architectures:
        pa, pb = a.architectures[arch], b.architectures[arch]
        assert pa.model_dump(exclude={"solver": strip}) == pb.model_dump(exclude={"solver": strip})


def test_hybrid_never_costs_more_than_either_restriction() -> None:
    t = synthetic_tables(services=2, buckets=3, devices=2, tps=(1, 2), seed=3, rate_scale=8)
    res = solve_tables(t, SolveSettings(architectures=("shared", "disaggregated", "hybrid"), mip_gap=0.0)).result
    tot = {a: p.costs.total_usd_per_month for a, p in res.architectures.items() if p.costs}
    assert tot["hybrid"] <= min(tot["shared"], tot["disaggregated"]) * (1 + 1e-6)
    assert res.verdict.winner is not None and res.verdict.reasons


def test_checker_catches_tampering() -> None:
    t = synthetic_tables(services=1, buckets=2, devices=2, tps=(1,), seed=5, rate_scale=3)
    res = solve_tables(t, SolveSettings(architectures=("disaggregated",))).result
    plan = res.architectures["disaggregated"]
    pools = [p.model_copy(update={"instances": 0, "devices": 0}) for p in plan.pools]
    bad = res.model_copy(update={"architectures": {"disaggregated": plan.model_copy(update={"pools": pools})}})
    problems = check_plan(bad)
    assert any(v.startswith("disaggregated: load[") for v in problems)
    routing = plan.routing[1:]
    bad2 = res.model_copy(update={"architectures": {"disaggregated": plan.model_copy(update={"routing": routing})}})
    assert any("route[" in v for v in check_plan(bad2))
    assert plan.costs is not None
    costs = plan.costs.model_copy(update={"equipment_usd_per_month": plan.costs.equipment_usd_per_month - 1.0})
    bad3 = res.model_copy(update={"architectures": {"disaggregated": plan.model_copy(update={"costs": costs})}})
    assert any("costs:" in v for v in check_plan(bad3))


def test_time_limited_plan_is_never_called_optimal() -> None:
    t = synthetic_tables(services=5, buckets=4, devices=6, tps=(1, 2, 4), seed=11, rate_scale=30)
    res = solve_tables(t, SolveSettings(architectures=("hybrid",), time_limit_s=0.01, mip_gap=0.0)).result
    plan = res.architectures["hybrid"]
    assert plan.solver.status != "optimal" or (plan.solver.gap is not None and plan.solver.gap <= 1e-9)
    if plan.solver.status == "time_limit":
        assert not res.verdict.proven and any("time limit" in n for n in res.notes)


def test_cost_terms_constant_lists_every_expression() -> None:
    from planner.optimize.model import COST_EXPRESSIONS

    assert tuple(COST_EXPRESSIONS) == COST_TERMS


def test_a_plan_that_misses_in_simulation_ranks_after_one_that_meets() -> None:
    """The verdict prefers plans that meet their targets in the peak simulation, and says why."""
    from planner.optimize.verdict import make_verdict
    from planner.schema.plan import SimulationCheck

    tables = synthetic_tables(services=1, buckets=2, devices=2, seed=3)
    out = solve_tables(tables, SolveSettings(architectures=("shared", "disaggregated")))
    plans = dict(out.result.architectures)
    assert all(p.feasible for p in plans.values())
    cheap = min(plans.values(), key=lambda p: p.costs.total_usd_per_month if p.costs else 0.0)
    other = next(a for a in plans if a != cheap.architecture)

    def check(met: bool) -> SimulationCheck:
        return SimulationCheck(seed=0, duration_s=10.0, warmup_s=1.0, requests=100, measured_requests=90, wall_s=0.01,
                               ci_level=0.95, met=met, findings=[] if met else ["pool X: p99 TTFT +40%"])

    plans[cheap.architecture] = cheap.model_copy(update={"simulation": check(False)})
    plans[other] = plans[other].model_copy(update={"simulation": check(True)})
    verdict = make_verdict(plans, out.prepared)
    assert verdict.winner == other
    assert verdict.margin_usd_per_month < 0
    assert any("misses its latency targets in the discrete-event simulation" in r and "pool X" in r for r in verdict.reasons)
    assert "cheaper but misses" in verdict.reasons[0]
    # both missing: cost decides again, and the verdict says so
    plans[other] = plans[other].model_copy(update={"simulation": check(False)})
    verdict = make_verdict(plans, out.prepared)
    assert verdict.winner == cheap.architecture
    assert any(r.startswith("No plan meets its targets in simulation") for r in verdict.reasons)
