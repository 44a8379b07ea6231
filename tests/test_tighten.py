"""The verify-and-tighten loop tightens the phase that misses (issue 13, Build item 4).

A simulated TTFT miss is charged to the pool that adds the most to TTFT on average
(:func:`planner.verify.ttft_miss_pool`), and its factor reaches every configuration of that
phase for the buckets it serves (:func:`planner.optimize.tighten.phase_point_factors`), so the
next solve cannot dodge the tightening by moving to an alternative configuration.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner.optimize.tighten import phase_point_factors
from planner.schema.plan import ArchitecturePlan, PoolPlan, RoutingShare, SolverInfo
from planner.verify import ttft_miss_pool

DATA = Path(__file__).resolve().parent / "data" / "instances"


def test_ttft_miss_goes_to_the_largest_mean_wait() -> None:
    roles = {"decode:a": "decode", "prefill:a": "prefill"}
    assert ttft_miss_pool(["decode:a", "prefill:a"], {"decode:a": 16.0, "prefill:a": 250.0}, roles) == "prefill:a"
    assert ttft_miss_pool(["decode:a", "prefill:a"], {"decode:a": 40.0, "prefill:a": 5.0}, roles) == "decode:a"


def test_ttft_miss_without_queueing_goes_to_the_first_token_phase() -> None:
    # no pool queues (the miss is service time): the prefill phase, never decode by name order
    roles = {"decode:a": "decode", "prefill:a": "prefill"}
    assert ttft_miss_pool(["decode:a", "prefill:a"], {"decode:a": 0.0, "prefill:a": 0.0}, roles) == "prefill:a"


def test_a_near_tie_of_two_phases_goes_to_the_pool_with_fewer_instances() -> None:
    # code-completion-8b at 16 buckets (ttft_miss_pool's docstring): 37 prefill instances waiting p99 208 ms and 2
    # decode instances waiting 200 ms on one path; the third decode instance is the fix, not more prefill
    roles = {"decode:a": "decode", "prefill:a": "prefill", "prefill:b": "prefill"}
    inst = {"decode:a": 2, "prefill:a": 37, "prefill:b": 1}
    waits = {"decode:a": 200.0, "prefill:a": 208.0}
    assert ttft_miss_pool(["decode:a", "prefill:a"], waits, roles) == "prefill:a"  # without counts: the larger wait
    assert ttft_miss_pool(["decode:a", "prefill:a"], waits, roles, inst) == "decode:a"
    # outside the band (15 %): the larger wait, whatever the counts
    assert ttft_miss_pool(["decode:a", "prefill:a"], {"decode:a": 176.0, "prefill:a": 208.0}, roles, inst) == "prefill:a"
    assert ttft_miss_pool(["decode:a", "prefill:a"], {"decode:a": 177.0, "prefill:a": 208.0}, roles, inst) == "decode:a"
    # a pool of the same phase beside the named one is not in series with it: never the tie's winner
    assert ttft_miss_pool(["prefill:a", "prefill:b"], {"prefill:a": 208.0, "prefill:b": 205.0}, roles, inst) == "prefill:a"
    # no wait at all: the first-token phase, as before
    assert ttft_miss_pool(["decode:a", "prefill:a"], {"decode:a": 0.0, "prefill:a": 0.0}, roles, inst) == "prefill:a"


def test_a_repeat_escalates_only_when_the_miss_did_not_shrink() -> None:
    # long-context-assistant's relaxed disaggregated path (tighten's docstring, step 5): its tp4 prefill pool missed by
    # 7.0, 4.8, then 0.8 %; the third step is x1.05 again, not 1.05 ** 3
    from types import SimpleNamespace

    from planner.optimize.tighten import escalations, simulated_factors

    repeats, last = {"prefill:tp4": 2, "decode:tp2": 1}, {"prefill:tp4": 0.048, "decode:tp2": 0.30}
    shares = {"prefill:tp4": 0.008, "decode:tp2": 0.35}  # prefill's miss shrank, decode's grew
    assert escalations(repeats, shares, last) == {"decode:tp2": 1}
    check = SimpleNamespace(services=[SimpleNamespace(miss_pool="prefill:tp4", miss_share=0.008)])
    assert simulated_factors(check, escalations(repeats, shares, last)) == {"prefill:tp4": pytest.approx(1.05)}
    assert simulated_factors(check, repeats) == {"prefill:tp4": pytest.approx(1.05 ** 3)}
    assert escalations({"p": 1}, {}, {"p": 0.2}) == {"p": 1}  # not named now: kept as it was


def _pool(name: str, role: str, config: str) -> PoolPlan:
    return PoolPlan(name=name, role=role, config=config, device=config.split("/")[0], tp=1, model="m", instances=1, devices=1,  # type: ignore[arg-type]
                    redundancy=0, busy_instances_mean=0.5, busy_instances_peak=0.5, utilization_mean=0.5, utilization_peak=0.5,
                    utilization_cap=0.9)


def test_phase_factor_reaches_every_configuration_of_the_missing_phase() -> None:
    from types import SimpleNamespace

    pts = pd.DataFrame({
        "service": ["s"] * 5, "bucket": ["b0", "b0", "b0", "b1", "b0"],
        "role": ["prefill", "prefill", "prefill", "prefill", "decode"],
        "config": ["h/tp2", "h/tp4", "h/tp8", "h/tp2", "h/tp2"],
        "pool": ["prefill:tp2", "prefill:tp4", "prefill:tp8", "prefill:tp2", "decode:tp2"],
    })
    plan = ArchitecturePlan(
        architecture="disaggregated", feasible=True, solver=SolverInfo(status="optimal"),
        pools=[_pool("prefill:tp2", "prefill", "h/tp2"), _pool("decode:tp2", "decode", "h/tp2")],
        routing=[RoutingShare(service="s", bucket="b0", role="prefill", config="h/tp2", pool="prefill:tp2", share=1.0,  # type: ignore[arg-type]
                              rate_peak_per_s=1.0, rate_mean_per_s=1.0)])
    applied = np.array([2.0, 1.0, 1.2, 2.0, 1.0])  # tp2 prefill tightened x2 in earlier rounds, tp8 x1.2
    f = phase_point_factors(SimpleNamespace(points=pts), plan, {"prefill:tp2": 1.5}, applied)  # type: ignore[arg-type]
    # the named pool by its own miss (both buckets share its queue); b0's prefill alternatives
    # levelled up to the phase's tightest cap (x2 in all); decode untouched
    assert np.allclose(f, [1.5, 2.0, 2.0 / 1.2, 1.5, 1.0])
    assert np.allclose(phase_point_factors(SimpleNamespace(points=pts), plan, {}, applied), 1.0)  # type: ignore[arg-type]


def test_long_prompt_disaggregated_plan_is_tightened_not_dropped() -> None:
    """Issue 13's scenario: 70B, 16,000 in / 200 out, p50 targets. Before, the loop chased the
    miss across prefill configurations, gave up after 7 solves and the verdict named the shared
    plan (64 GPUs, $134,738/month) over the 10-GPU disaggregated one ($23,266 as first solved).
    Now: disaggregated, met in simulation, and the verdict's winner. (On the tightening change alone:
    12 GPUs, $27,965 against shared $101,555; with the per-request TPOT of the latency-metric work the
    file's p50 ``tpot`` target lets the shared pool carry larger chunks: $23,266 against $27,078.)"""
    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    resolved = load_instance(DATA / "long-prompt-70b.yaml")
    result = solve_instance(resolved, settings_from_instance(resolved.instance)).result
    shared, disagg = result.architectures["shared"], result.architectures["disaggregated"]
    assert disagg.feasible and disagg.simulation is not None and disagg.simulation.met, disagg.simulation
    assert shared.costs is not None and disagg.costs is not None
    assert sum(p.devices for p in disagg.pools) <= 12  # tightened where it stands, not chased across configurations
    # the verdict names the cheaper plan that meets: since the descent's merge tries the most instances that cost less
    # first (planner.optimize.tighten step 7), shared's tp2 + tp4 pools merge onto 3 H100 tp4 that meet in simulation,
    # $26,535 against disaggregated $27,467 (12 GPUs each; shared $31,179 before)
    cheaper = "shared" if shared.costs.total_usd_per_month < disagg.costs.total_usd_per_month else "disaggregated"
    assert shared.simulation is not None and shared.simulation.met
    assert result.verdict is not None and result.verdict.winner == cheaper, result.verdict.reasons


def test_relaxed_path_stops_once_it_cannot_undercut_the_plan_that_meets(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The relaxed path's simulated rounds only divide caps further, so its later plans cost at least the
    current optimum (the current plan's cost less the MIP gap when HiGHS proved it optimal): once that is no
    less than the cost of the first path's plan that meets, it cannot be kept and is not simulated on."""
    from types import SimpleNamespace

    import planner.optimize.tighten as tighten
    from planner.optimize.settings import SolveSettings

    monkeypatch.setattr(tighten, "_check_result", lambda *a, **k: None)
    monkeypatch.setattr(tighten, "tighten_factors", lambda *a, **k: ({}, set()))  # the analytic check passes
    sims: list[int] = []

    def check(_result: object, _arch: str) -> object:
        sims.append(1)
        return SimpleNamespace(met=True)

    def loop(cost: float, beat: float | None, status: str = "optimal") -> tighten._Loop:
        plan = ArchitecturePlan(architecture="shared", feasible=True, solver=SolverInfo(status=status))  # type: ignore[arg-type]
        plan = plan.model_copy(update={"costs": SimpleNamespace(total_usd_per_month=cost)})
        settings = SolveSettings(simulation_check=check, mip_gap=1e-4)
        built = SimpleNamespace(prep=None)
        lp = tighten._Loop(built=built, architecture="shared", settings=settings, plan=plan, cur=built, rounds=1,  # type: ignore[arg-type]
                           total_time=0.0, total_build=0.0, base_rho=np.ones(1))
        lp.beat_usd_per_month = beat
        return lp

    stopped = loop(100_000.0, 99_990.0)  # within the 1e-4 gap of the plan to beat: still cannot undercut it
    stopped.sim_loop()
    assert not sims and "stopped after 0 round(s)" in stopped.history[-1]
    for lp in (loop(100_000.0, 100_011.0), loop(100_000.0, None), loop(100_000.0, 50_000.0, status="time_limit")):
        lp.sim_loop()  # could still undercut it (gap), nothing to beat, or no proof of optimality: simulated
    assert len(sims) == 3


def test_a_miss_chased_across_decode_configurations_is_caught_within_the_rounds() -> None:
    """code-completion-8b at 8 length buckets, disaggregated (issue 24 item 0: every plan at 4, 8 and 16 buckets
    passes the peak simulation). The loop named prefill configurations for four rounds, then decode tp1 twice
    (the second time squared, step 5); the next solve moved the decode phase to an untightened tp2, which
    missed (p99 TTFT 749 ms simulated against 500, a 363 ms slot wait) when the 6 simulated rounds ran out.
    With 10 (``SolveSettings.simulation_rounds``) the tp2 miss gets its round and the plan meets ($112,302)."""
    from dataclasses import replace

    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    resolved = load_instance(Path(__file__).resolve().parent.parent / "instances" / "code-completion-8b.yaml",
                             {"services.code.traffic.buckets": 8, "options.architectures": ["disaggregated"]})
    settings = replace(settings_from_instance(resolved.instance), confidence="off")
    plan = solve_instance(resolved, settings).result.architectures["disaggregated"]
    assert plan.feasible and plan.simulation is not None and plan.simulation.met, plan.simulation
    assert plan.solver.rounds > 7  # the rounds beyond the old limit were needed


def test_sixteen_buckets_cost_what_four_do() -> None:
    """code-completion-8b's winning plan at 16 length buckets (issue 24 item 0) costs within 5 % of what it does at 4.
    Until 2026-12-06 the winner was shared: its tp4 pool's simulated tightening factor came out 1.144 at 8 buckets
    against 1.136 at 4, and 10 tp4 instances at 98.7 % of the tightened cap tipped into one more device ($91,493
    against $87,914) until every simulated step was refined (tighten.REFINE_MIN_STEP = the smallest simulated step,
    1.05). Since the simulated shared lane does the prefill work its points priced the winner is disaggregated,
    $93,039 at 4 and 8 buckets; at 16 the simulated tightening charged a near tie of prefill and decode waits (37
    prefill / 2 decode H100: p99 ~205 ms each) to prefill and chased it across prefill configurations to $122,315.
    A near tie now goes to the pool with fewer instances (planner.verify.ttft_miss_pool): $90,921, 37 prefill + 3
    decode, meeting in simulation. Since the prefill pool's wait counts the log's replayed bursts
    (planner.workload.replay_wait) and the simulated check holds every latency group at the p99, as the analytic one
    does: $112,107 at 16 buckets against $114,225 at 4 (1.9 %); since refining bisects four rounds, $109,988 (3.7 %).
    The simulated check itself moved with the bucket count: a route's KV-transfer delay was the point's TTFT at the
    representative less its prefill time at the bucket's length mix, so the same 41-instance plan's top latency group
    came out 541 ms p99 at 4 buckets and 490 ms at 16 (planner.simulate.adapter.plan_to_sim_by_bucket), and the draws
    went in the route table's order (``b10`` before ``b2``). Both fixed, and the phase re-solved without its most
    tightened pool (planner.optimize.tighten step 8): 3 decode + 41 prefill H100 tp1, $99,395, at 4, 8 and 16."""
    from dataclasses import replace

    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    resolved = load_instance(Path(__file__).resolve().parent.parent / "instances" / "code-completion-8b.yaml",
                             {"services.code.traffic.buckets": 16, "options.architectures": ["disaggregated"]})
    settings = replace(settings_from_instance(resolved.instance), confidence="off")
    plan = solve_instance(resolved, settings).result.architectures["disaggregated"]
    assert plan.feasible and plan.simulation is not None and plan.simulation.met, plan.simulation
    assert plan.costs is not None and plan.costs.total_usd_per_month == pytest.approx(99_395, abs=5)
    assert abs(plan.costs.total_usd_per_month / 99_395 - 1.0) <= 0.05  # the shipped 4-bucket plan (README, instances/README.md)


def test_a_plan_that_meets_in_simulation_but_misses_analytically_is_tightened(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Step 5: a simulated round can move load so that the new plan meets in simulation and misses the analytic
    check (long-context-assistant's disaggregated plan: TTFT 16.5 s analytic against 15 s, 14.9 s simulated, and
    the loop stopped there). The loop now tightens what the analytic check names and checks again; it stops once
    both pass."""
    from types import SimpleNamespace

    import pandas as pd

    import planner.optimize.tighten as tighten
    from planner.optimize.settings import SolveSettings

    monkeypatch.setattr(tighten, "_check_result", lambda *a, **k: None)
    analytic_misses = [{"prefill:x": 1.2}, {}]  # the first check misses on one pool, the next passes
    monkeypatch.setattr(tighten, "tighten_factors", lambda *a, **k: (analytic_misses.pop(0), None))
    sims: list[int] = []

    def check(_result: object, _arch: str) -> object:
        sims.append(1)
        return SimpleNamespace(met=True, services=[])

    plan = ArchitecturePlan(architecture="shared", feasible=True, solver=SolverInfo(status="optimal"))  # type: ignore[arg-type]
    pts = pd.DataFrame({"pool": ["prefill:x", "decode:y"], "service": ["s", "s"], "bucket": ["b", "b"], "role": ["prefill", "decode"],
                        "rho": [0.8, 0.8]})
    built = SimpleNamespace(prep=SimpleNamespace(points=pts))
    lp = tighten._Loop(built=built, architecture="shared", settings=SolveSettings(simulation_check=check, refine_rounds=0),  # type: ignore[arg-type]
                       plan=plan, cur=built, rounds=1, total_time=0.0, total_build=0.0, base_rho=np.full(2, 0.8))
    tightened: list[tuple[dict[str, float], list[float]]] = []

    def fake_tighten(factors, label, per_point=None):  # type: ignore[no-untyped-def]
        tightened.append((dict(factors), list(per_point)))
        return True

    monkeypatch.setattr(lp, "tighten", fake_tighten)
    lp.sim_loop()
    assert tightened == [({"prefill:x": 1.2}, [1.2, 1.0])]  # the analytic miss alone, on its pool's points
    assert len(sims) == 2 and not analytic_misses  # simulated again after the round, and both checks then pass


def test_a_bucket_past_its_target_on_one_pool_tightens_that_pool_only() -> None:
    """long-document-nvidia's shared plan at traffic ×4.6 first splits the long-prompt bucket between a
    b200/tp1 and a b200/tp2 unified pool; on tp1 its own TTFT at load is past the 30 s target, on tp2 it
    is not. Before, both pools were tightened by the largest step (×4): the tp2 plans were lost and the
    solve ended at 9 tp4 instances, $106,351, where ×4.8 costs $102,230. Only tp1 is named now."""
    from dataclasses import replace as _replace

    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.architecture import solve_architecture
    from planner.optimize.latency import tighten_factors
    from planner.optimize.prepare import prepare
    from planner.optimize.tighten import _model_of
    from planner.solve_instance import settings_from_instance

    path = Path(__file__).resolve().parents[1] / "instances" / "long-document-nvidia.yaml"
    resolved = load_instance(path, {"services.assistant.traffic.rate_multiplier": 4.6})
    settings = _replace(settings_from_instance(resolved.instance), confidence="off")
    built, solver = _model_of(prepare(build_capacity_tables(resolved)), settings, None)
    plan = solve_architecture(built, solver, "shared", settings)
    sizes = {p.name.split(":")[1]: p.instances for p in plan.pools}
    assert set(sizes) == {"b200/tp1", "b200/tp2"}, sizes  # the scenario: the long bucket split over both
    factors, buckets = tighten_factors(built.prep, plan, settings.redundancy)
    missed = buckets[~buckets["met"].astype(bool)]
    assert list(missed["bucket"]) == ["b3_in17029-123192"]
    assert float(missed["ttft_service_ms"].iloc[0]) > float(missed["ttft_target_ms"].iloc[0])  # no room at all
    assert {p.split(":")[1] for p in factors} == {"b200/tp1"}, factors


def test_a_bucket_that_meets_without_one_pools_share_tightens_that_pool_only() -> None:
    """code-completion-8b's shared plan at traffic ×0.95 (rate_multiplier 19), its h100/tp2 caps tightened ×1.42
    as the peak simulation's first round does: the longest bucket is split between 3 tp1 instances and the 8 tp4
    instances every other bucket meets on, and misses by a few tens of ms. Before, both pools had their caps
    divided by the largest step (×4), the tp4 plans were lost and the solve ended at 82 tp1 instances, $175,228
    against $87,909 at ×1 (the verdict flipped to disaggregated there). Without tp1's share the bucket meets;
    without tp4's it does not: only tp1 is named. Since a unified point's own TTFT at load counts its bucket's
    representative prompt (planner.pool_latency.ttft_prompt_ratio) the next bucket, b2, split alike, missed too (its
    own TTFT 356 ms, the rest its waits; it meets since the router's picked iteration, 2026-12-07 night), and b3's own
    TTFT on tp1 (560 ms) is over the target: still only tp1 named.
    The scenario is the table without the log's replayed-burst curve (the shared lanes' bursts, 2026-12-06 late, give
    other caps and another first plan, 5 tp1 + 11 tp4, whose b3 misses on either pool); the rule is the same."""
    from dataclasses import replace as _replace

    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.architecture import solve_architecture
    from planner.optimize.latency import tighten_factors
    from planner.optimize.prepare import prepare
    from planner.optimize.tighten import _model_of, tighten_prepared
    from planner.solve_instance import settings_from_instance

    path = Path(__file__).resolve().parents[1] / "instances" / "code-completion-8b.yaml"
    resolved = load_instance(path, {"services.code.traffic.rate_multiplier": 19})
    settings = _replace(settings_from_instance(resolved.instance), confidence="off")
    tables = build_capacity_tables(resolved)
    prep = prepare(_replace(tables, demand=tables.demand.assign(replay_wait="")))  # no bursts: the scenario as found
    tp2 = next(p for p in prep.pools["pool"] if str(p).startswith("unified:h100-sxm/tp2:"))
    built, solver = _model_of(tighten_prepared(prep, {tp2: 1.42}), settings, None)
    plan = solve_architecture(built, solver, "shared", settings)
    sizes = {p.name.split(":")[1]: p.instances for p in plan.pools}
    assert sizes == {"h100-sxm/tp1": 3, "h100-sxm/tp4": 8}, sizes  # the scenario
    factors, buckets = tighten_factors(built.prep, plan, settings.redundancy)
    missed = buckets[~buckets["met"].astype(bool)]
    # b3 misses (b2 too before the router's picked iteration, planner.pool_latency._hole_age_law: its TTFT at load is
    # now a few ms under the target), split between tp1 and tp4
    assert list(missed["bucket"]) == ["b3_in2734-7437"]
    assert all(len(p) == 2 for p in missed["pools"])
    assert {p.split(":")[1] for p in factors} == {"h100-sxm/tp1"}, factors


def test_refining_goes_on_past_a_miss_and_never_simulates_a_plan_that_missed_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Step 6 by hand. The last simulated step took a pool from 9 to 15 instances; along the exponent ``t`` of that
    step a plan has ``n(t) = 9 + ⌊6 t⌋`` instances at $10,000 each and meets in simulation from 14. Two rounds (the
    old ``refine_rounds``) tried t = 1/2 and 3/4 (12 and 13 instances, both missing) and kept 15: code-completion-8b's
    shared plan kept 15 tp4 where 14 meet (traffic ×1.05 found 14 and cost less than ×1 did). Four rounds reach
    t = 7/8 (14, meets); t = 13/16 gives 13 again, a plan that missed: not simulated a second time."""
    from types import SimpleNamespace

    import planner.optimize.tighten as tighten
    from planner.optimize.settings import SolveSettings

    def plan_of(n: int) -> ArchitecturePlan:
        return ArchitecturePlan.model_construct(
            architecture="shared", feasible=True, solver=SolverInfo(status="optimal"), routing=[], simulation=None,
            pools=[SimpleNamespace(name="unified:x", instances=n)], costs=SimpleNamespace(total_usd_per_month=10_000.0 * n))

    ts: list[float] = []

    def solve_at(_before, factors, *_a, **_k):  # type: ignore[no-untyped-def]
        t = round(float(np.log(factors[0]) / np.log(2.0)), 6)  # the step is x2 on the one point: factor 2 ** t
        ts.append(t)
        return plan_of(9 + int(6 * t)), SimpleNamespace(prep=None)

    simulated: list[int] = []

    def check(result: object, _arch: str) -> object:
        n = result.pools[0].instances  # type: ignore[attr-defined]
        simulated.append(n)
        return SimpleNamespace(met=n >= 14, services=[])

    monkeypatch.setattr(tighten, "_solve_tightened", solve_at)
    monkeypatch.setattr(tighten, "_check_result", lambda _prep, _arch, plan, _s: plan)
    monkeypatch.setattr(tighten._Loop, "_passes", lambda self, prep, plan: True)
    lp = tighten._Loop(built=None, architecture="shared", settings=SolveSettings(simulation_check=check),  # type: ignore[arg-type]
                       plan=plan_of(15), cur=None, rounds=1, total_time=0.0, total_build=0.0, base_rho=np.ones(1))  # type: ignore[arg-type]
    lp.refine(None, np.array([2.0]))  # type: ignore[arg-type]
    assert ts == [0.5, 0.75, 0.875, 0.8125]
    assert simulated == [12, 13, 14]  # 13 at t = 13/16 is not simulated again
    assert lp.plan.pools[0].instances == 14 and lp.rounds == 5


def test_descent_drops_an_instance_while_the_simulation_allows_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Step 7 by hand. One pool of 15 instances ($1,000 each) carrying 10 req/s of τ = 1 s at cap 0.7 (load 14.3);
    the simulation meets from 13 instances. Each descent raises the pool's caps so that its load fits one instance
    fewer (0.7 × 14.29 / 14 = 0.714, then × 14 / 13) and re-solves: 14 meets, 13 meets, 12 misses and is not kept —
    long-context-assistant at traffic ×0.8 kept 13 MI300X tp4 after its loop where 12 meet (×0.85 found 12)."""
    import math
    from types import SimpleNamespace

    import planner.optimize.tighten as tighten
    import planner.pool_latency as pool_latency
    from planner.optimize.settings import SolveSettings

    def plan_of(n: int, m: int = 50) -> ArchitecturePlan:
        return ArchitecturePlan.model_construct(
            architecture="shared", feasible=True, solver=SolverInfo(status="optimal"), routing=[],
            simulation=SimpleNamespace(met=n >= 13), costs=SimpleNamespace(total_usd_per_month=1_000.0 * (n + m)),
            pools=[SimpleNamespace(name="prefill:y", role="prefill", instances=m, cost_usd_per_month=1_000.0 * m),  # dearer
                   SimpleNamespace(name="unified:x", role="unified", instances=n, cost_usd_per_month=1_000.0 * n)])

    def solve(nxt, _solver, _arch, _settings):  # type: ignore[no-untyped-def]
        pts = nxt.prep.points
        n = pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / pts["rho"]
        return plan_of(math.ceil(float(n.iloc[0]) - 1e-9), math.ceil(float(n.iloc[1]) - 1e-9))

    simulated: list[int] = []

    def check(result: object, _arch: str) -> object:
        n = result.pools[1].instances  # type: ignore[attr-defined]
        simulated.append(n)
        return SimpleNamespace(met=n >= 13, services=[])

    monkeypatch.setattr(tighten, "_model_of", lambda prep, settings, remodel: (SimpleNamespace(prep=prep), None))
    monkeypatch.setattr(tighten, "solve_architecture", solve)
    monkeypatch.setattr(tighten, "_check_result", lambda _prep, _arch, plan, _s: plan)
    monkeypatch.setattr(tighten._Loop, "_passes", lambda self, prep, plan: True)
    monkeypatch.setattr(pool_latency, "plan_shares", lambda plan, pts: np.ones(len(pts)))
    pts = pd.DataFrame({"pool": ["unified:x", "prefill:y"], "rho": [0.7, 0.8], "rate_peak_per_s": [10.0, 39.5],
                        "instance_seconds_per_request": [1.0, 1.0], "utilization_cap": [np.nan, np.nan]})
    cur = SimpleNamespace(prep=SimpleNamespace(points=pts, max_utilization=None))
    monkeypatch.setattr(tighten, "replace", lambda prep, points: SimpleNamespace(points=points, max_utilization=None))
    lp = tighten._Loop(built=cur, architecture="shared", settings=SolveSettings(simulation_check=check),  # type: ignore[arg-type]
                       plan=plan_of(15), cur=cur, rounds=1, total_time=0.0, total_build=0.0, base_rho=np.array([0.7, 0.8]))  # type: ignore[arg-type]
    lp.descend()
    assert simulated == [14, 13, 12]  # the prefill pool beside it (below) is never tried
    assert lp.plan.pools[1].instances == 13 and lp.rounds == 4
    assert float(lp.cur.prep.points["rho"].iloc[0]) == pytest.approx(10.0 / 13.0)
    assert sum("descent:" in h for h in lp.history) == 2


def test_descent_moves_two_shared_pools_onto_the_dearer_when_that_costs_less(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Step 7's second move, by hand. Bucket b0 (3 req/s, τ = 1 s) on pool A at cap 0.6 (5 instances, $3,000 each),
    b1 (2.4 req/s) on the dearer pool B at cap 0.5 (5 instances, $5,000 each), $500 a pool: $41,000. One fewer in B, then in A,
    re-solve to plans the simulation rejects (it meets with 5 + 5, or with B alone from 6). Moving b0 onto B: the
    analytic check's fewest B instances (6, stubbed) within the ceiling (5.4 busy / 0.95 → 6), B's caps raised from
    0.5 to 0.9 (its load 5.4 / 0.5 = 10.8 over 6 rooms), re-solved: 6 B instances, $30,500, meeting — long-document-
    nvidia at traffic ×0.9 kept 9 B200 tp1 + 9 tp2 ($82,353) where 13 tp2 cost $78,072 and meet."""
    import math
    from types import SimpleNamespace

    import planner.optimize.latency as latency
    import planner.optimize.tighten as tighten
    import planner.pool_latency as pool_latency
    from planner.optimize.settings import SolveSettings

    cost = {"unified:A": 3_000.0, "unified:B": 5_000.0}

    def plan_of(sizes: dict[str, int]) -> ArchitecturePlan:
        total = sum(cost[p] * n for p, n in sizes.items()) + 500.0 * len(sizes)  # $500 a pool
        return ArchitecturePlan.model_construct(
            architecture="shared", feasible=True, solver=SolverInfo(status="optimal"), routing=[], simulation=SimpleNamespace(met=True),
            costs=SimpleNamespace(total_usd_per_month=total),
            pools=[SimpleNamespace(name=p, role="unified", instances=n, cost_usd_per_month=cost[p] * n) for p, n in sizes.items()])

    def solve(nxt, _solver, _arch, _settings):  # type: ignore[no-untyped-def]
        rho = nxt.prep.points["rho"].to_numpy(float)  # rows: (b0, A), (b1, A), (b0, B), (b1, B)
        options = [{"unified:A": math.ceil(3.0 / rho[0] - 1e-9), "unified:B": math.ceil(2.4 / rho[3] - 1e-9)},
                   {"unified:B": math.ceil(5.4 / rho[2] - 1e-9)}]
        return plan_of(min(options, key=lambda o: sum(cost[p] * n for p, n in o.items()) + 500.0 * len(o)))

    simulated: list[dict[str, int]] = []

    def check(result: object, _arch: str) -> object:
        sizes = {p.name: p.instances for p in result.pools}  # type: ignore[attr-defined]
        simulated.append(sizes)
        return SimpleNamespace(met=sizes == {"unified:A": 5, "unified:B": 5} or sizes.get("unified:B", 0) >= 6 and len(sizes) == 1)

    pts = pd.DataFrame({"pool": ["unified:A", "unified:A", "unified:B", "unified:B"], "service": ["s"] * 4,
                        "bucket": ["b0", "b1", "b0", "b1"], "rho": [0.6, 0.6, 0.5, 0.5], "rate_peak_per_s": [3.0, 2.4, 3.0, 2.4],
                        "instance_seconds_per_request": [1.0] * 4, "utilization_cap": [np.nan] * 4})
    monkeypatch.setattr(tighten, "_model_of", lambda prep, settings, remodel: (SimpleNamespace(prep=prep), None))
    monkeypatch.setattr(tighten, "solve_architecture", solve)
    monkeypatch.setattr(tighten, "_check_result", lambda _prep, _arch, plan, _s: plan)
    monkeypatch.setattr(tighten._Loop, "_passes", lambda self, prep, plan: True)
    monkeypatch.setattr(pool_latency, "plan_shares", lambda plan, p: np.array([1.0, 0.0, 0.0, 1.0]))
    monkeypatch.setattr(latency, "unified_instances_meeting", lambda p, x, inst, k, pool, most: 6 if pool == "unified:B" and most >= 6 else None)
    monkeypatch.setattr(tighten, "replace", lambda prep, points: SimpleNamespace(points=points, max_utilization=None))
    cur = SimpleNamespace(prep=SimpleNamespace(points=pts, max_utilization=None))
    lp = tighten._Loop(built=cur, architecture="shared", settings=SolveSettings(simulation_check=check),  # type: ignore[arg-type]
                       plan=plan_of({"unified:A": 5, "unified:B": 5}), cur=cur, rounds=1, total_time=0.0, total_build=0.0,  # type: ignore[arg-type]
                       base_rho=pts["rho"].to_numpy(float))
    lp.descend()
    # the merge tries the most B instances that cost less than the two pools first (7: $35,500 < $41,000), then
    # bisects down to the analytic check's fewest while a count meets (6)
    assert simulated == [{"unified:A": 5, "unified:B": 4}, {"unified:A": 4, "unified:B": 5}, {"unified:B": 7}, {"unified:B": 6}]
    assert {p.name: p.instances for p in lp.plan.pools} == {"unified:B": 6}
    assert lp.plan.costs is not None and lp.plan.costs.total_usd_per_month == 30_500.0
    assert list(lp.cur.prep.points["rho"]) == pytest.approx([0.6, 0.6, 0.9, 0.9])
    assert any("moved onto unified:B" in h for h in lp.history)


def test_the_pools_to_reroute_are_those_of_a_shared_phase_most_tightened_first() -> None:
    """Step 8's order (planner.optimize.tighten._by_tightening): prefill and decode pools of a phase the plan serves
    with two pools or more, by the largest ρ_base / ρ over each pool's points (untightened ones too: the try's own
    relaxation can find what the first path's did not); a prefill or decode pool alone in its phase is not a candidate,
    a shared plan's one pool only when tightened and another shared configuration is open. Closing one bounds its instances to 0 and nothing else."""
    from types import SimpleNamespace

    from planner.optimize.prepare import CLOSED_COLUMN, Prepared, pool_n_max
    from planner.optimize.tighten import _by_tightening, _closed

    pts = pd.DataFrame({"pool": ["prefill:a", "prefill:a", "prefill:b", "decode:c"], "d": [0, 1, 0, 0],
                        "role": ["prefill", "prefill", "prefill", "decode"], "rho": [0.8, 0.8, 0.6, 0.5],
                        "load_peak_coef": [1.0, 2.0, 3.0, 4.0], "kv_peak_coef": [0.0, 0.0, 0.0, 0.0]})
    base = SimpleNamespace(points=pts)
    cur = SimpleNamespace(points=pts.assign(rho=[0.8, 0.4, 0.5, 0.1]))  # a: x2 on one point, b: x1.2, c: x5
    untouched = SimpleNamespace(points=pts.assign(rho=[0.9, 0.8, 0.6, 0.1]))  # a relaxed, b at its base cap: tried too
    plan = ArchitecturePlan(architecture="disaggregated", feasible=True, solver=SolverInfo(status="optimal"),
                            pools=[_pool("prefill:a", "prefill", "h/tp1"), _pool("prefill:b", "prefill", "l/tp1"),
                                   _pool("decode:c", "decode", "h/tp1")])
    assert _by_tightening(base, cur, plan) == ["prefill:a", "prefill:b"]  # type: ignore[arg-type]
    assert _by_tightening(base, untouched, plan) == ["prefill:a", "prefill:b"]  # type: ignore[arg-type]  # a tie: by name
    alone = plan.model_copy(update={"pools": plan.pools[1:]})
    assert _by_tightening(base, cur, alone) == []  # type: ignore[arg-type]
    # a shared plan's unified pools too (code-completion-8b at traffic x1.05 ended at 17 H100 tp1 + 15 tp4 shared,
    # $166,332, where without tp1 it meets on 28 tp2, $121,148): the same order
    upts = pts.assign(pool=["unified:a", "unified:a", "unified:b", "unified:b"], role="unified")
    uplan = plan.model_copy(update={"architecture": "shared", "pools": [_pool("unified:a", "unified", "h/tp1"),
                                                                         _pool("unified:b", "unified", "h/tp4")]})
    upools = pd.DataFrame({"pool": ["unified:a", "unified:b"], "role": "unified", "n_max": [8, 8]})
    ubase = SimpleNamespace(points=upts, pools=upools)
    assert _by_tightening(ubase, SimpleNamespace(points=upts.assign(rho=[0.8, 0.4, 0.5, 0.1])),  # type: ignore[arg-type]
                          uplan) == ["unified:b", "unified:a"]  # b: x5 on one point, a: x2
    # a shared plan's one pool: closed only when its caps were tightened (x1.05 or more) and the table has another
    # shared configuration (code-completion-8b's shared plan ended at 14 H100 tp4, $121,166, where 27 tp2 meet,
    # $116,979, and x1.05 cost $116,991: more traffic for less)
    only_a = uplan.model_copy(update={"pools": uplan.pools[:1]})
    assert _by_tightening(ubase, SimpleNamespace(points=upts), only_a) == []  # type: ignore[arg-type]  # untightened
    assert _by_tightening(ubase, SimpleNamespace(points=upts.assign(rho=[0.8, 0.77, 0.6, 0.5])),  # type: ignore[arg-type]
                          only_a) == []  # x1.039: below the smallest simulated step
    assert _by_tightening(ubase, SimpleNamespace(points=upts.assign(rho=[0.8, 0.75, 0.6, 0.5])),  # type: ignore[arg-type]
                          only_a) == ["unified:a"]  # x1.067
    alone_in_table = SimpleNamespace(points=upts, pools=upools.assign(n_max=[8, 0]))  # b closed or unusable
    assert _by_tightening(alone_in_table, SimpleNamespace(points=upts.assign(rho=[0.8, 0.4, 0.5, 0.1])),  # type: ignore[arg-type]
                          only_a) == []  # nothing else to route to
    pools = pd.DataFrame({"pool": ["prefill:a", "prefill:b", "decode:c"], "kv_capacity_bytes": [0.0, 0.0, 0.0]})
    prep = Prepared(tables=None, demand=pd.DataFrame(), points=pts, pools=pools.assign(n_max=pool_n_max(pts, pools)),  # type: ignore[arg-type]
                    device_types=[], procurement={}, caps_method="")
    closed = _closed(prep, "prefill:b")
    assert closed.pools[CLOSED_COLUMN].tolist() == [False, True, False]
    assert closed.pools["n_max"].tolist() == [5, 0, 6]  # ⌈1 + 2 + 1e-9⌉ + 1, closed, ⌈4 + 1e-9⌉ + 1 (pool_n_max)
    assert closed.points is pts  # the caps, and so the capacity snapshot's records, untouched


def test_a_phase_is_re_solved_without_the_pool_its_tightening_bloated() -> None:
    """code-completion-8b's disaggregated plan at traffic ×0.8 (step 8). The loops sent its 1,402–2,733-token prompts to
    L40S, whose own prefill time leaves little of the 500 ms for queueing, and tightened the L40S pool's caps for every
    bucket on it round after round: 30 H100 + 55 L40S prefill, $119,346, where ×0.9 cost $109,512 and ×1 $117,299.
    Without L40S prefill the same traffic met on 39 H100 ($95,122), and the traffic series is monotone again
    (benchmarks/bench_monotone_traffic.py). Since the simulated KV transfer is charged at the representative
    (planner.simulate.adapter.plan_to_sim_by_bucket): 23 H100 + 46 L40S ($98,173) without the step, 36 H100 ($88,767)
    with it."""
    from dataclasses import replace

    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    overrides = {"services.code.traffic.rate_multiplier": 16, "options.architectures": ["disaggregated"]}
    resolved = load_instance(Path(__file__).resolve().parent.parent / "instances" / "code-completion-8b.yaml", overrides)
    settings = replace(settings_from_instance(resolved.instance), confidence="off")
    out = solve_instance(resolved, settings)
    plan = out.result.architectures["disaggregated"]
    assert plan.feasible and plan.simulation is not None and plan.simulation.met
    assert plan.costs is not None and plan.costs.total_usd_per_month == pytest.approx(88_767, abs=5)
    assert sorted((p.role, p.config, p.instances) for p in plan.pools) == [("decode", "h100-sxm/tp1", 3), ("prefill", "h100-sxm/tp1", 36)]
    assert any("rerouted: without prefill:l40s/tp1" in n for n in out.result.notes)
    without = solve_instance(resolved, replace(settings, reroute_tries=0)).result.architectures["disaggregated"]
    assert without.costs is not None and without.costs.total_usd_per_month > 1.1 * plan.costs.total_usd_per_month
    assert "l40s/tp1" in {p.config for p in without.pools}
