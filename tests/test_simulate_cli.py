"""`planner simulate` and the plan adapter, on a plan solved from synthetic capacity tables."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.schema.plan import PlanResult

INSTANCE = str(Path(__file__).resolve().parents[1] / "instances" / "enterprise-chat.yaml")


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from planner.optimize.solve import SolveSettings, solve_tables
    from planner.optimize.synthetic import synthetic_tables

    tables = synthetic_tables(services=2, buckets=2, devices=2, seed=0)
    result = solve_tables(tables, SolveSettings(architectures=("shared", "disaggregated"), time_limit_s=30)).result
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(result.model_dump_json())
    return path


def test_adapter_maps_pools_and_routes(plan_file: Path) -> None:
    from planner.simulate.adapter import plan_to_sim

    plan = PlanResult.model_validate_json(plan_file.read_text())
    sim = plan_to_sim(plan, "disaggregated")
    arch = plan.architectures["disaggregated"]
    by_name = {p.name: p for p in arch.pools}
    assert {p.name for p in sim.pools} <= set(by_name)
    for ps in sim.pools:
        assert ps.instances == by_name[ps.name].instances
        assert ps.role == by_name[ps.name].role
    for r in sim.routes:
        assert r.decode is not None and r.prefill is not None
        assert 0 < r.ttft_target_s < math.inf
    # decode step time = routed-rate-weighted planned TPOT of the points routed to the pool
    pts = {(p["service"], p["bucket"], p["role"], p["config"]): p for p in plan.capacity.points}
    for ps in (p for p in sim.pools if p.role == "decode"):
        rows = [r for r in arch.routing if r.pool == ps.name and r.share > 1e-9]
        lam = [r.rate_peak_per_s for r in rows]
        tpot = [pts[(r.service, r.bucket, r.role, r.config)]["tpot_ms"] for r in rows]
        expect = sum(a * b for a, b in zip(lam, tpot, strict=True)) / sum(lam) / 1e3
        assert ps.step_table()[1] == pytest.approx(expect, rel=1e-12)
        # batch limit: capacity-preserving B = t Σλo / Σλτ within [min B*, max B*] (adapter docstring)
        rows_pts = [pts[(r.service, r.bucket, r.role, r.config)] for r in rows]
        dem = {(d["service"], d["bucket"]): d for d in plan.capacity.demand}
        o = [dem[(r.service, r.bucket)]["output_tokens_rep"] for r in rows]
        tau = [p["instance_seconds_per_request"] for p in rows_pts]
        b = expect * sum(a * x for a, x in zip(lam, o, strict=True)) / sum(a * x for a, x in zip(lam, tau, strict=True))
        bs = [int(p["max_batch"]) for p in rows_pts]
        assert ps.max_batch == min(max(bs), max(min(bs), round(b)))


def test_simulate_cli_json_reproducible(plan_file: Path) -> None:
    args = ["simulate", INSTANCE, "--plan", str(plan_file), "--duration", "60", "--seed", "3",
            "--scenario", "peak", "--scenario", "failure", "--json"]
    r1 = CliRunner().invoke(main, args)
    assert r1.exit_code == 0, r1.output
    r2 = CliRunner().invoke(main, args)
    d1, d2 = json.loads(r1.output), json.loads(r2.output)
    for d in (d1, d2):
        for sc in d["scenarios"].values():
            sc.pop("wall_s")
    assert d1 == d2
    peak = d1["scenarios"]["peak"]
    assert peak["requests"] > 0
    for svc in peak["services"].values():
        assert svc["completed"] > 0
        assert svc["ttft"]["p50"] <= svc["ttft"]["p99"]
    assert set(d1["scenarios"]) == {"peak", "failure"}
    # common random numbers: the failure run sees the same arrivals as the peak run
    assert d1["scenarios"]["failure"]["requests"] == peak["requests"]


def test_simulate_cli_text_output(plan_file: Path) -> None:
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(plan_file), "--duration", "30",
                                  "--scenario", "normal"])
    assert r.exit_code == 0, r.output
    assert "[normal]" in r.output and "ttft p50 ms" in r.output and "kv blocked" in r.output


def test_simulate_cli_errors(tmp_path: Path, plan_file: Path) -> None:
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "file not found" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(bad)])
    assert r.exit_code == 2 and "bad.json" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(plan_file), "--architecture", "hybrid"])
    assert r.exit_code == 2 and "hybrid" in r.output
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(plan_file), "--duration", "-1"])
    assert r.exit_code == 2


def test_simulate_solves_the_instance_without_plan() -> None:
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--duration", "30", "--scenario", "peak",
                                  "--scenario", "model_swap", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["plan"].startswith("solved from")
    swap = d["scenarios"]["model_swap"]
    # the swap takes one instance offline for weight bytes / (tp x load bandwidth)
    for pool, info in d["model_swap_reload"].items():
        assert info["reload_s"] == pytest.approx(info["weight_bytes"] / info["tp"] / (info["load_gb_per_s"] * 1e9))
        assert any(o["pool"] == pool and o["end_s"] - o["start_s"] == pytest.approx(info["reload_s"]) for o in swap["outages"])


def test_simulate_reports_per_service_and_routes_by_the_plans_shares(plan_file: Path) -> None:
    """Synthetic arrivals take the by-bucket routes (every planned pool gets its share); the results
    are merged back per service: counts add up over the service's routes."""
    from planner.simulate.adapter import bucket_stream, plan_to_sim_by_bucket, service_results
    from planner.simulate.engine import simulate

    plan = PlanResult.model_validate_json(plan_file.read_text())
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(plan_file), "--duration", "30", "--scenario", "peak", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    services = {s.service for s in plan.architectures[plan.verdict.winner].latency}  # type: ignore[index]
    assert set(d["scenarios"]["peak"]["services"]) == services
    sim = plan_to_sim_by_bucket(plan)
    res = simulate(sim.pools, sim.routes, bucket_stream(sim, load="peak", duration_s=30, seed=0))
    merged = service_results(res, sim)
    for svc, g in sim.route_table.groupby("service"):
        parts = [res.services[sim.routes[i].service] for i in g.index]
        assert merged.services[str(svc)].completed == sum(p.completed for p in parts)
        assert merged.histograms[f"service:{svc}:ttft"].n == sum(res.histograms[f"service:{sim.routes[i].service}:ttft"].n for i in g.index)


@pytest.mark.slow
def test_agentic_simulation_uses_every_planned_pool(solved_example) -> None:  # type: ignore[no-untyped-def]
    """A shared plan with two unified pools of one service (tp2 and tp4): both carry traffic at peak,
    and no pool is said to be missing from the instance. Was agentic-assistant's shared plan (2 tp2 +
    168 tp4 GPUs); with the round-10 perf calibration it is one tp4 pool (172 GPUs), so the case became
    code-completion-8b's shared plan; since buckets pay their mean work (issue 24 item 0) its shipped
    4 buckets fit one tp4 pool, so the case became code-completion-8b at 16 buckets (12 tp2 + 7 tp4 H100s);
    since a prompt waits behind what a least-loaded router leaves ahead of it (issue 24 item 3) that is one
    tp2 pool (30 instances), so the case was long-context-assistant as shipped (19 tp2 + 2 tp4 MI300X); since a
    shared bucket's work is priced per fine length sub-bin (issue 24 item 0, planner.capacity.bucket_work) that is
    one tp2 pool (24 instances) and agentic-assistant's shared plan was two again (5 tp2 + 18 tp4 H200); since each
    board's measured GEMM efficiency (issue 25) that is one tp4 pool (21 H200) and no shipped example's shared plan
    has two pools; code-completion-8b at 8 buckets (1 tp1 + 10 tp4 H100) was until every simulated tightening step was
    refined (one tp4 pool since), so the case is code-completion-8b at 1/20 of its traffic (rate_multiplier 1.03
    instead of 20: 1 tp2 + 1 tp4 H100, the integer rounding of ~1.5 tp4 instances), solved to a plan file and
    simulated with --plan --architecture shared. (Since the analytic tightening charges a missed bucket to the pools
    it would meet without, agentic-assistant's shipped shared plan has two pools again: 17 tp2 + 12 tp4 H200.) Since
    the simulated lane does the prefill work its points priced (2026-12-06) code-completion-8b at 1/20 of its traffic
    is one tp4 pool, so the case is agentic-assistant as shipped (16 tp2 + 12 tp4 H200).

    The plan is the session's ``planner solve instances/agentic-assistant.yaml --out DIR`` (``solved_example``,
    tests/conftest.py): this test solved the same instance again with ``--no-cache`` into a folder of its own
    (the same plan file; 6-7 s of an idle 2-core VM, a full solve with its peak simulations)."""
    solved = solved_example("agentic-assistant")
    assert solved.exit_code == 0, solved.output
    path = str(solved.instance)
    r = CliRunner().invoke(main, ["simulate", path, "--plan", str(solved.out_dir / "plan.json"), "--architecture", "shared",
                                  "--duration", "120", "--scenario", "peak", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    pools = d["scenarios"]["peak"]["pools"]
    assert len(pools) >= 2 and all(p["utilization"] > 0 for p in pools.values()), pools.keys()
    assert not any("not in" in n for n in d["notes"])


@pytest.mark.parametrize("architecture", ["shared", "disaggregated"])
def test_adapter_shared_routing_join_matches_unshared(plan_file: Path, architecture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_to_sim_by_bucket builds the routing ⋈ points join once and hands it to plan_to_sim's
    body and to the bucket routes (issue 27): the inputs must be those of a join built afresh
    for each reader, the join must come back unmodified, and the points frame verify reuses is
    ``pd.DataFrame(plan.capacity.points)``."""
    import pandas as pd

    import planner.simulate.adapter as adapter

    plan = PlanResult.model_validate_json(plan_file.read_text())
    shared = adapter.plan_to_sim_by_bucket(plan, architecture)
    points, routed, encode = adapter._routed_points(plan, architecture)
    before = routed.copy(deep=True)
    base = adapter._plan_to_sim(plan, architecture, (points, routed, encode))
    pd.testing.assert_frame_equal(routed, before)  # the body does not write into the shared join
    assert base.points is not None and shared.base.points is not None
    pd.testing.assert_frame_equal(shared.base.points, pd.DataFrame(plan.capacity.points))

    real = adapter._routed_points
    monkeypatch.setattr(adapter, "_routed_points",
                        lambda p, a: tuple(x.copy(deep=True) if isinstance(x, pd.DataFrame) else x for x in real(p, a)))
    fresh = adapter.plan_to_sim_by_bucket(plan, architecture)
    assert shared.routes == fresh.routes
    assert _specs(shared.base.pools) == _specs(fresh.base.pools) and shared.base.routes == fresh.base.routes
    pd.testing.assert_frame_equal(shared.route_table, fresh.route_table)
    assert _specs(shared.base.pools) == _specs(adapter.plan_to_sim(plan, architecture).pools)


def _specs(pools: list[Any]) -> list[dict[str, Any]]:
    """PoolSpec fields, a callable one (time per prompt length, or per batch and chunk) by its values at a few arguments."""
    import dataclasses
    import inspect

    def value(v: Any) -> Any:
        if not callable(v):
            return v
        n_args = len(inspect.signature(v).parameters)
        return [v(*([n] * n_args)) for n in (1, 100, 4096)]

    return [{f.name: value(getattr(p, f.name)) for f in dataclasses.fields(p)} for p in pools]


def test_the_lengths_the_run_says_it_draws_are_the_ones_it_draws(plan_file: Path) -> None:
    """`simulate` and the plan's simulation method name the lengths the synthetic run draws (issue 24 item 4): each
    bucket's length mix where the routes carry one, the representatives where they do not (it said "representative
    lengths" while drawing the mix). By hand on route tables, then on the command's output."""
    import pandas as pd

    from planner.simulate.adapter import _route_mix, lengths_drawn, plan_to_sim_by_bucket

    mixed = {"length_mix": json.dumps([[0.5, 1000.0, 100.0], [0.5, 4000.0, 300.0]])}
    plain = {"length_mix": ""}
    both = pd.DataFrame({"length_mix": [_route_mix(mixed, 4000, 300), _route_mix(plain, 400, 50)]})
    assert lengths_drawn(both.iloc[:1]) == "each request's lengths drawn from its bucket's length mix, the sub-bins its work was priced at"
    assert lengths_drawn(both.iloc[1:]) == "each bucket's representative lengths"
    assert "or its bucket's representative lengths where the bucket has none" in lengths_drawn(both)
    plan = PlanResult.model_validate_json(plan_file.read_text())
    sim = plan_to_sim_by_bucket(plan)
    r = CliRunner().invoke(main, ["simulate", INSTANCE, "--plan", str(plan_file), "--duration", "10", "--scenario", "peak", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["arrivals"].endswith(f"({lengths_drawn(sim.route_table)})")


def test_the_plans_simulation_method_names_the_length_mix(solved_example: Any) -> None:
    """enterprise-chat's buckets carry length mixes, so its plans' peak-simulation method says the run drew them."""
    plan = solved_example("enterprise-chat").plan()
    for arch in plan.architectures.values():
        assert arch.simulation is not None
        assert "lengths drawn from its bucket's length mix" in arch.simulation.method
        assert "representative lengths" not in arch.simulation.method
