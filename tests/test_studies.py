"""Studies: sweeps equal individual solves, crossovers bracket the flip, budgets are monotone, --set errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from planner.optimize import SolveSettings, solve_tables
from planner.optimize.resolve import scale_rates
from planner.optimize.synthetic import synthetic_tables
from planner.schema.distributions import parse_distribution
from planner.studies.budget import budget_frontier
from planner.studies.source import TableSource
from planner.studies.spec import expand, parse_sets
from planner.studies.sweep import crossovers, run_sweep

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "instances" / "enterprise-chat.yaml"
MINIMAL = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
RATE = "services.svc0.traffic.rate_multiplier"


@pytest.fixture(scope="module")
def source() -> TableSource:
    return TableSource.from_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=1), SolveSettings())


def test_sweep_rows_equal_fresh_solves_on_tables(source: TableSource) -> None:
    study = expand(parse_sets([f"{RATE}=0.5,2,16", "costs.electricity_usd_per_kwh=0.05,0.3"]))
    rows = run_sweep(source, study, jobs=1)
    assert len(rows) == 6 * 2 and rows["model_reused"].all()
    for sc in study:
        t = scale_rates(source.base_tables, {"svc0": sc.overrides[RATE]})
        t = type(t)(demand=t.demand, points=t.points, configs=t.configs,
                    costs=type(t.costs)(**{**vars(t.costs), "electricity_usd_per_kwh": sc.overrides["costs.electricity_usd_per_kwh"]}), meta=t.meta)
        fresh = solve_tables(t, SolveSettings()).result
        mine = rows[rows["scenario"] == sc.name].set_index("architecture")
        assert mine["winner"].iat[0] == fresh.verdict.winner
        for arch, plan in fresh.architectures.items():
            assert plan.costs is not None
            assert mine.loc[arch, "total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)
            for term, value in plan.costs.terms().items():
                assert mine.loc[arch, term] == pytest.approx(value, rel=1e-4, abs=1e-6)


def test_crossover_brackets_the_verdict_change(source: TableSource) -> None:
    study = expand(parse_sets([f"{RATE}=1,64"]))
    rows = run_sweep(source, study, jobs=1)
    winners = rows.drop_duplicates("scenario")["winner"].tolist()
    assert winners[0] != winners[1], "test instance must flip between 1x and 64x"
    cross = crossovers(source, rows, RATE, rel_tol=0.01, headroom=64)
    assert len(cross) == 1
    r = cross.iloc[0]
    assert 1 <= r["low"] < r["high"] <= 64 and r["high"] / r["low"] - 1 <= 0.01 + 1e-12
    for m, expected in ((r["low"], r["winner_low"]), (r["high"], r["winner_high"])):
        fresh = solve_tables(scale_rates(source.base_tables, {"svc0": m}), SolveSettings()).result
        assert fresh.verdict.winner == expected
    assert r["winner_low"] != r["winner_high"]


def test_budget_results_are_monotone(source: TableSource) -> None:
    base = solve_tables(source.base_tables, SolveSettings()).result
    cheapest = min(p.costs.total_usd_per_month for p in base.architectures.values() if p.costs)
    frame = budget_frontier(source, [cheapest * f for f in (0.9, 1.0, 2.0, 4.0)], rel_tol=0.02)
    m = frame["max_traffic_multiplier"].to_numpy(float)
    assert np.all(np.diff(m) >= 0)
    assert m[1] >= 1.0 and m[3] > m[1]
    served = frame.dropna(subset=["total_usd_per_month"])
    assert (served["total_usd_per_month"] <= served["budget_usd_per_month"] * (1 + 1e-9)).all()


def test_distributions_and_monte_carlo_are_seeded() -> None:
    d = parse_distribution("lognormal(2, 0.5)")
    draws = d.sample(np.random.default_rng(0), 20000)
    assert draws.mean() == pytest.approx(2.0, rel=0.02) and draws.std() == pytest.approx(0.5, rel=0.05)
    spec = parse_sets([f"{RATE}=dist:growth(0.5,0.1,2)"])
    a, b = expand(spec, monte_carlo=5, seed=3), expand(spec, monte_carlo=5, seed=3)
    assert [s.overrides for s in a] == [s.overrides for s in b]
    assert all(1.2 < s.overrides[RATE] < 3.5 for s in a)
    with pytest.raises(ValueError, match="takes 3 numbers"):
        parse_distribution("triangular(1,2)")


def test_grid_is_a_cartesian_product() -> None:
    study = expand(parse_sets(["a.x=1,2,3", "b.y=4,5", "c.z=7"]))
    assert len(study) == 6 and all(s.overrides["c.z"] == 7 for s in study)
    assert {(s.overrides["a.x"], s.overrides["b.y"]) for s in study} == {(i, j) for i in (1, 2, 3) for j in (4, 5)}


def test_a_named_base_whose_value_the_study_replaces_says_so() -> None:
    """A --set path that a named scenario also sets replaces the scenario's value (the study's value wins); the
    scenario's name says so, since "growth-2x rate_multiplier=0.5" ran at 0.5 like "base rate_multiplier=0.5", not at
    2 x 0.5 (issue 24 item 4). A base that sets other paths keeps its plain name."""
    bases = {"base": {}, "growth-2x": {"a.rate_multiplier": 2.0}, "cheap-power": {"c.price": 0.05}}
    study = expand(parse_sets(["a.rate_multiplier=0.5,1"]), bases=bases)
    names = {s.name: s.overrides for s in study}
    assert names["growth-2x (its rate_multiplier replaced) rate_multiplier=0.5"] == {"a.rate_multiplier": 0.5}
    assert names["cheap-power rate_multiplier=1"] == {"c.price": 0.05, "a.rate_multiplier": 1.0}
    assert "base rate_multiplier=0.5" in names and len(names) == 6
    fixed = expand(parse_sets(["a.rate_multiplier=3"]), bases={"growth-2x": {"a.rate_multiplier": 2.0}})
    assert [s.name for s in fixed] == ["growth-2x (its rate_multiplier replaced)"] and fixed[0].overrides == {"a.rate_multiplier": 3.0}


@pytest.mark.slow
def test_instance_sweep_equals_individual_solves() -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.studies.source import settings_for

    resolved = load_instance(EXAMPLE)
    src = TableSource.from_instance(resolved)
    study = expand(parse_sets(["services.chat.traffic.rate_multiplier=0.5,3"]))
    rows = run_sweep(src, study, jobs=1)
    for sc in study:
        r = load_instance(EXAMPLE, sc.overrides)
        fresh = solve_tables(build_capacity_tables(r), settings_for(r)).result
        mine = rows[rows["scenario"] == sc.name].set_index("architecture")
        assert mine["winner"].iat[0] == fresh.verdict.winner
        for arch, plan in fresh.architectures.items():
            if plan.costs is not None:
                # the same pools; the cost within 5e-4: a unified point's batch is chosen at its service's rate
                # (planner.optimize.resolve.scale_rates keeps the base table's), which moves busy power only
                # (enterprise-chat x0.25-x3: at most +0.02 % of the total, the sweep's side the dearer)
                assert mine.loc[arch, "devices"] == sum(p.devices for p in plan.pools)
                assert mine.loc[arch, "equipment_usd_per_month"] == pytest.approx(plan.costs.equipment_usd_per_month, rel=1e-9)
                assert mine.loc[arch, "total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=5e-4)


@pytest.mark.parametrize(("arg", "needle"), [
    ("services.chat.traffic.rate_mult=2", "valid there: buckets, columns"),
    ("services.chatt.traffic.rate_multiplier=2", "valid there: chat"),
    ("costz.pue=1.2", "valid there: calibration, catalog, costs"),
    ("services.chat.traffic.rate_multiplier=-1,2", "rate_multiplier"),
    ("costs.pue=dist:weird(1)", "unknown distribution"),
])
def test_bad_set_gives_exit_2_naming_path(arg: str, needle: str) -> None:
    from planner.cli import main

    inst = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
    res = CliRunner().invoke(main, ["sweep", str(inst), "--set", arg])
    assert res.exit_code == 2, res.output
    assert needle in res.output and arg.split("=")[0] in res.output


def test_dask_local_cluster_gives_identical_rows(source: TableSource) -> None:
    pytest.importorskip("distributed")
    study = expand(parse_sets([f"{RATE}=0.5,4"]))
    local = run_sweep(source, study, jobs=1)
    dask = run_sweep(source, study, jobs=1, executor="local-dask", chunk_size=1)
    cols = ["scenario", "architecture", "total_usd_per_month", "winner", "device_mix", "pools"]
    assert local[cols].equals(dask[cols])


# --- evaluate: a fixed plan under other traffic --------------------------------------------------

def _plan_and_rows(source: TableSource, multipliers: str) -> tuple[object, object]:
    from planner.studies.evaluate import evaluate_plan
    from planner.studies.fixed import FixedPlan

    result = solve_tables(source.base_tables, SolveSettings()).result
    fixed = FixedPlan.from_result(result)
    return result, evaluate_plan(source, fixed, expand(parse_sets([f"{RATE}={multipliers}"])), rel_tol=0.005)


def test_fixed_plan_at_its_own_traffic_has_zero_regret_and_matches_the_solve(source: TableSource) -> None:
    result, rows = _plan_and_rows(source, "1,0.5")
    plan = result.architectures[result.verdict.winner]  # type: ignore[index]
    assert plan.costs is not None
    own = rows.iloc[0]
    assert own["carries_load"] and own["slo_met"] and own["slo_attainment"] == 1.0
    assert own["fixed_total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)
    assert own["optimal_total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)
    assert abs(own["regret_usd_per_month"]) <= 1e-4 * plan.costs.total_usd_per_month
    assert own["headroom_multiplier"] >= 1.0
    # At half the traffic the same devices cost at least the re-optimised plan: regret >= 0.
    half = rows.iloc[1]
    assert half["regret_usd_per_month"] >= -1e-4 * half["optimal_total_usd_per_month"]


def test_headroom_is_monotone_and_brackets_what_the_pools_carry(source: TableSource) -> None:
    _, rows = _plan_and_rows(source, "0.5,1,2")
    h = rows["headroom_multiplier"].to_numpy(float)
    assert np.all(np.diff(h) <= 1e-9) and h[0] > h[-1]
    assert rows["saturates_first"].str.len().gt(0).all()
    m, head = 1.0, float(rows.iloc[1]["headroom_multiplier"])
    _, beyond = _plan_and_rows(source, f"{m * head * 0.99:.6g},{m * head * 1.03:.6g}")
    assert bool(beyond.iloc[0]["carries_load"]) and not bool(beyond.iloc[1]["carries_load"])
    assert beyond.iloc[1]["regret_usd_per_month"] is None or np.isnan(beyond.iloc[1]["regret_usd_per_month"])
    assert not bool(beyond.iloc[1]["slo_met"])


# --- robust planning -------------------------------------------------------------------------------

def test_robust_with_one_scenario_equals_solve(source: TableSource) -> None:
    from planner.studies.robust import solve_robust

    fresh = solve_tables(source.base_tables, SolveSettings()).result
    for objective in ("expected", "worst"):
        res = solve_robust([("base", source.base_tables)], SolveSettings(), objective=objective)  # type: ignore[arg-type]
        assert res.winner == fresh.verdict.winner
        for arch, plan in fresh.architectures.items():
            assert plan.costs is not None
            ra = res.architectures[arch]
            assert ra.objective_usd_per_month == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)
            held = ra.plans["base"]
            assert held.costs is not None
            assert held.costs.total_usd_per_month == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)


def test_robust_with_two_scenarios_costs_at_least_each_optimum(source: TableSource) -> None:
    from planner.studies.robust import solve_robust

    scen = [("low", scale_rates(source.base_tables, {"svc0": 1.0})), ("high", scale_rates(source.base_tables, {"svc0": 16.0}))]
    optimum = {name: solve_tables(t, SolveSettings()).result for name, t in scen}
    worst = solve_robust(scen, SolveSettings(), objective="worst")
    expected = solve_robust(scen, SolveSettings(), objective="expected", weights=[3, 1])
    assert expected.weights == [0.75, 0.25]
    for arch in SolveSettings().architectures:
        best = {name: r.architectures[arch].costs.total_usd_per_month for name, r in optimum.items()}  # type: ignore[union-attr]
        for res in (worst, expected):
            ra = res.architectures[arch]
            assert ra.feasible
            for name, plan in ra.plans.items():
                assert plan.feasible and plan.costs is not None
                assert plan.costs.total_usd_per_month >= best[name] * (1 - 1e-4)
                assert all(lat.ttft_met and lat.tpot_met for lat in plan.latency)
        assert worst.architectures[arch].objective_usd_per_month >= max(best.values()) * (1 - 1e-4)
        held = {n: p.costs.total_usd_per_month for n, p in expected.architectures[arch].plans.items()}  # type: ignore[union-attr]
        assert expected.architectures[arch].objective_usd_per_month == pytest.approx(0.75 * held["low"] + 0.25 * held["high"], rel=1e-4)
    # the devices bought once carry the busier scenario: at least as many as its own optimum needs
    w = worst.winner
    assert w is not None
    assert sum(worst.architectures[w].devices.values()) >= sum(p.devices for p in optimum["high"].architectures[w].pools)


def test_robust_rejects_mismatched_pools(source: TableSource) -> None:
    from planner.studies.robust import solve_robust

    other = synthetic_tables(services=1, buckets=2, devices=3, seed=1)
    with pytest.raises(ValueError, match="different candidate pools"):
        solve_robust([("a", source.base_tables), ("b", other)], SolveSettings())


# --- forecasts in the instance ---------------------------------------------------------------------

def _with_forecasts(tmp_path: Path, forecasts: dict[str, str]) -> Path:
    import yaml

    data = yaml.safe_load(MINIMAL.read_text(encoding="utf-8"))
    data["forecasts"] = forecasts
    out = tmp_path / "fc.yaml"
    out.write_text(yaml.safe_dump(data), encoding="utf-8")
    return out


def test_forecasts_are_validated_at_load(tmp_path: Path) -> None:
    from planner.errors import InputError
    from planner.instance import load_instance

    ok = load_instance(_with_forecasts(tmp_path, {"services.chat.traffic.rate_multiplier": "dist:growth(0.5,0.2,2)"}))
    assert ok.instance.forecasts == {"services.chat.traffic.rate_multiplier": "dist:growth(0.5,0.2,2)"}
    with pytest.raises(InputError, match="valid there: chat"):
        load_instance(_with_forecasts(tmp_path, {"services.chatt.traffic.rate_multiplier": "dist:normal(1,0.1)"}))
    with pytest.raises(InputError, match="takes 3 numbers"):
        load_instance(_with_forecasts(tmp_path, {"costs.pue": "dist:triangular(1,2)"}))


def test_monte_carlo_draws_the_instance_forecasts_unless_set_gives_one() -> None:
    from planner.studies.spec import with_forecasts

    fc = {"services.chat.traffic.rate_multiplier": "dist:uniform(2,3)", "costs.pue": "normal(1.3,0.01)"}
    spec = with_forecasts(parse_sets(["costs.pue=1.2"]), fc, monte_carlo=4)
    study = expand(spec, monte_carlo=4, seed=1)
    assert len(study) == 4 and all(s.overrides["costs.pue"] == 1.2 for s in study)
    assert all(2 <= s.overrides["services.chat.traffic.rate_multiplier"] <= 3 for s in study)
    given = parse_sets(["costs.pue=dist:uniform(1.1,1.2)"])
    assert with_forecasts(given, fc, monte_carlo=4) is given
    assert with_forecasts(parse_sets([]), fc, monte_carlo=0).distributions == {}


def test_monte_carlo_with_nothing_to_draw_is_exit_2() -> None:
    from planner.cli import main

    res = CliRunner().invoke(main, ["sweep", str(MINIMAL), "--monte-carlo", "3"])
    assert res.exit_code == 2 and "nothing to draw" in res.output


# --- CLI -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_evaluate_and_solve_robust(tmp_path: Path) -> None:
    import json

    from planner.cli import main

    runner = CliRunner()
    assert runner.invoke(main, ["solve", str(MINIMAL), "--out", str(tmp_path / "p")]).exit_code == 0
    plan = tmp_path / "p" / "plan.json"
    res = runner.invoke(main, ["evaluate", str(plan), "--instance", str(MINIMAL), "--set", "services.chat.traffic.rate_multiplier=1,8", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    rows = out["rows"]
    assert rows[0]["carries_load"] and abs(rows[0]["regret_usd_per_month"]) <= 1e-4 * rows[0]["optimal_total_usd_per_month"]
    assert not rows[1]["carries_load"] and rows[1]["headroom_multiplier"] < 1
    bad = runner.invoke(main, ["evaluate", str(tmp_path / "missing.json")])
    assert bad.exit_code == 2 and "does not exist" in bad.output
    res = runner.invoke(main, ["solve-robust", str(MINIMAL), "--scenario", "base", "--scenario", "growth", "--objective", "worst"])
    assert res.exit_code == 0, res.output
    assert "worst" in res.output and "growth" in res.output
    res = runner.invoke(main, ["solve-robust", str(MINIMAL), "--scenario", "nope"])
    assert res.exit_code == 2 and "nope" in res.output


@pytest.mark.slow
def test_sweep_row_is_the_latency_checked_plan_when_the_first_solution_misses() -> None:
    # long-document-nvidia's first shared solution fails the analytic p99 check (prefill lanes of
    # 121k-token prompts); `planner solve` tightens caps and re-solves, and a sweep must report
    # that plan, not the unchecked first solution (one scenario: the instance itself, its own PUE)
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.model import build_model
    from planner.optimize.prepare import prepare
    from planner.optimize.solve import make_solver, solve_architecture, tighten_factors
    from planner.studies.source import settings_for

    path = ROOT / "instances" / "long-document-nvidia.yaml"
    # TTFT p99 target 20 s instead of 30 s: the first shared solution misses (issue 24 moved the premise: with
    # the unified point chosen by tau/rho and the service-wide length tail, at the instance's own 30 s target and
    # at traffic x3.7 the first shared solution already passes; checked at x2, x3.7, x5 and x8)
    # (and 10 s since the shared caps are priced at the load that arrives: at 20 s the first solution passes too)
    # (and 3.5 s since buckets pay their mean work, issue 24 item 0: at 10 s, 8 s, 5 s and 4 s the first solution passes)
    # (and 4 s with the shared-pool latency model of planner.pool_latency (JSQ): at 3.5 s the first shared solution
    # passes, at 4 s it misses; here the sweep's disaggregated row once read $265,937 against solve's $175,545, its
    # re-solved model handing HiGHS a permuted LP: tests/test_resolve_same_lp.py)
    # (and 8 s since a unified point's fixed TTFT overhead is the engine's own, 2026-12-07: at 4 s the first solution
    # misses but its checked plan keeps its pools, 1 tp2 + 5 tp4 + 4 tp8 B200, $159,413 against $159,408; at 8 s the
    # first, 1 tp1 + 9 tp4 at $110,416, misses and the checked plan is 1 tp2 + 8 tp4 at $102,062)
    # (and 10 s since a renewal stream's bursts are priced as a replayed log's, planner.workload.replay_wait.renewal_curve,
    # and a shared pool's bursts add their backlog beyond a Poisson stream's, 2026-12-07: the caps price them; at 6, 7, 8
    # and 12 s the first solution meets, at 10 s the first, 1 tp1 + 9 tp4 at $110,422, misses)
    # options.verify off: a sweep row equal to the simulated solve's plan is tests/test_one_path.py's
    resolved = load_instance(path, {"services.assistant.slo.ttft.target_ms": 10000, "options.verify": False})
    tables, settings = build_capacity_tables(resolved), settings_for(resolved)
    built = build_model(prepare(tables, max_utilization=settings.max_utilization), redundancy=settings.redundancy,
                        budget_usd_per_month=settings.budget_usd_per_month)
    first = solve_architecture(built, make_solver(), "shared", settings)
    assert tighten_factors(built.prep, first, settings.redundancy)[0], "the premise: the first shared plan misses"
    fresh = solve_tables(tables, settings).result
    rows = run_sweep(TableSource.from_instance(resolved), expand(parse_sets(["costs.pue=1.54"])), jobs=1).set_index("architecture")
    for arch, plan in fresh.architectures.items():
        assert plan.costs is not None
        assert rows.loc[arch, "total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)
    # the checked plan, not the first solution: other pools at another cost. Since 2026-12-06 a shared pool's caps are
    # relaxed to the pool the plan buys (planner.optimize.latency._unified_instances_needed) and its slot is held for the
    # iteration at its load: the checked plan is 1 tp2 + 5 tp8 B200 at $124,570 against the first's 1 tp2 + 7 tp4 + 3 tp8
    # at $159,383 (before: +0.02 %, $159,414, the tightened first solution); at 8 s since 2026-12-07, above
    checked = fresh.architectures["shared"]
    assert {p.name: p.instances for p in checked.pools} != {p.name: p.instances for p in first.pools}
    assert first.costs is not None
    assert abs(rows.loc["shared", "total_usd_per_month"] / first.costs.total_usd_per_month - 1) > 1.5e-4


def test_budget_stops_at_the_planning_bound_with_a_note() -> None:
    """A budget far above any plan is reported at the bound where the busiest service's planned peak reaches
    MAX_PEAK_RATE_PER_S (what planner solve accepts), not doubled to 2^20 with a simulation at every step."""
    from planner.schema.common import MAX_PEAK_RATE_PER_S
    from planner.studies.budget import bound_multiplier

    src = TableSource.from_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=1), SolveSettings())
    bound = bound_multiplier(src)
    peak = float(src.base_tables.demand["rate_peak_per_s"].sum())
    assert bound == pytest.approx(MAX_PEAK_RATE_PER_S / peak)
    frame = budget_frontier(src, [1e12], rel_tol=0.02)
    row = frame.iloc[0]
    assert row["max_traffic_multiplier"] == pytest.approx(bound)
    assert "planning bound" in row["note"] and row["total_usd_per_month"] <= 1e12


def test_budget_skips_the_simulation_only_where_the_analytic_plan_is_over_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analytic cost bounds the simulated one from below, so a probe it prices over the budget is not simulated;
    the answer is the search's with every probe simulated (here a stand-in simulated cost: analytic x1.3)."""
    from planner.studies import budget as mod

    src = TableSource.from_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=1), SolveSettings())
    simulated: list[float] = []
    priced: list[float] = []
    analytic = mod._evaluate

    def fake(source: TableSource, m: float, cache: dict, *, simulate: bool = True) -> mod._Eval:  # type: ignore[type-arg]
        ev = analytic(source, m, {}, simulate=False)
        if not simulate:
            priced.append(m)
            return ev
        simulated.append(m)
        return mod._Eval(m=m, total=ev.total * 1.3, winner=ev.winner, summary=ev.summary)

    monkeypatch.setattr(mod, "_evaluate", fake)
    budget = 1.3 * analytic(src, 4.0, {}, simulate=False).total
    m, ev = mod.max_multiplier(src, budget, rel_tol=0.02)
    assert ev is not None and ev.total <= budget and m >= 4.0 / 1.03
    assert all(analytic(src, x, {}, simulate=False).lower_usd_per_month <= budget for x in simulated)
    assert set(priced) - set(simulated)  # the probes above the threshold were priced analytically only
    # the lower bound is every architecture's, below the winner's total
    ev4 = analytic(src, 4.0, {}, simulate=False)
    assert ev4.lower_usd_per_month <= ev4.total

    def full_ok(x: float) -> bool:
        return 1.3 * analytic(src, x, {}, simulate=False).total <= budget

    from planner.studies.search import largest_passing_multiplier
    assert m == largest_passing_multiplier(full_ok, cap=mod.bound_multiplier(src), rel_tol=0.02, floor=mod.FLOOR, exact_cap=True)


def test_budgets_on_two_cores_give_the_one_process_frontier(monkeypatch: pytest.MonkeyPatch) -> None:
    """budget_frontier alternates the budgets between this process and a forked child, each with its own probe
    cache: the rows of one process, and the progress callback told of every budget (the child's on arrival)."""
    import planner.forked

    src = TableSource.from_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=1), SolveSettings())
    base = solve_tables(src.base_tables, SolveSettings()).result
    cheapest = min(p.costs.total_usd_per_month for p in base.architectures.values() if p.costs)
    budgets = [cheapest * f for f in (4.0, 0.9, 2.0)]
    ticks: list[int] = []
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 2)
    two = budget_frontier(src, budgets, rel_tol=0.02, progress=ticks.append)
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 1)
    one = budget_frontier(src, budgets, rel_tol=0.02)
    import pandas as pd

    pd.testing.assert_frame_equal(two, one)
    assert sum(ticks) == len(budgets) and list(two["budget_usd_per_month"]) == sorted(budgets)
