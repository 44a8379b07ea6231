"""One path to an answer (issue 24, item 1): every command's view of ``planner solve``'s own plan,
at the plan's own traffic, is solve's — carries, meets, cost, zero regret.

Each example instance is solved once per session (``solved_example``, tests/conftest.py); one
:class:`~planner.studies.source.TableSource` per example serves ``evaluate``, ``sweep`` and
``budget`` (their common scenario is solved once: ``TableSource.solved``). Before the fix,
``evaluate`` held enterprise-chat's plan on caps without the verify loop's relaxation ("carries no,
headroom ×0.692") and code-completion-8b's regret was $51k against a re-optimum solved without the
peak simulation that sized solve's plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_STEMS = sorted(p.stem for p in (ROOT / "instances").glob("*.yaml") if p.stem != "fleet-horizon")
EXAMPLES = _STEMS
REL = 1e-3
"""Costs agree to the MIP gap (1e-4) with room for the held plan's LP re-routing."""
HEADROOM_TOL = 0.5
"""``evaluate_plan``'s headroom bisection tolerance in these tests (its default 0.01 bisects further): no test here
reads the headroom beyond ``>= 1.0``, which is whether the held pools carry ×1 and does not depend on the tolerance
(:func:`planner.studies.search.largest_passing_multiplier` returns at least 1 exactly when ×1 passes); the other
columns are computed apart from it."""


@pytest.fixture(scope="module")
def views(solved_example) -> Any:  # type: ignore[no-untyped-def]
    from planner.instance import load_instance
    from planner.solve_instance import plan_overrides
    from planner.studies.source import TableSource

    done: dict[str, Any] = {}

    def get(stem: str) -> Any:
        if stem not in done:
            solved = solved_example(stem)
            assert solved.exit_code == 0, solved.output
            result = solved.plan()
            resolved = load_instance(solved.instance, plan_overrides(result) or None, scenario=result.scenario)
            done[stem] = (result, TableSource.from_instance(resolved))
        return done[stem]

    return get


def _winner(result: Any) -> tuple[str, float, Any]:
    win = result.verdict.winner
    plan = result.architectures[win]
    return win, plan.costs.total_usd_per_month, plan


@pytest.mark.parametrize("stem", EXAMPLES)
def test_sweep_and_budget_at_base_traffic_are_solves_plan(stem: str, views) -> None:  # type: ignore[no-untyped-def]
    from planner.studies import budget
    from planner.studies.spec import Scenario
    from planner.studies.sweep import run_sweep

    result, source = views(stem)
    win, total, _plan = _winner(result)
    rows = run_sweep(source, [Scenario(name="base", overrides={})])
    row = rows[rows["is_winner"]].iloc[0]
    assert row["architecture"] == win
    assert row["total_usd_per_month"] == pytest.approx(total, rel=REL)
    ev = budget._evaluate(source, 1.0, {})  # the frontier's cost at ×1 of the traffic
    assert ev.winner == win and ev.total == pytest.approx(total, rel=REL)


@pytest.mark.parametrize("stem", EXAMPLES)
def test_evaluate_of_solves_plan_at_its_own_traffic(stem: str, views) -> None:  # type: ignore[no-untyped-def]
    from planner.optimize.verdict import meets_predicted
    from planner.studies.evaluate import evaluate_plan
    from planner.studies.fixed import FixedPlan
    from planner.studies.spec import Scenario

    result, source = views(stem)
    win, total, plan = _winner(result)
    row = evaluate_plan(source, FixedPlan.from_result(result), [Scenario(name="base", overrides={})], rel_tol=HEADROOM_TOL).iloc[0]
    assert bool(row["carries_load"])
    assert bool(row["slo_met"]) == meets_predicted(plan)
    # the plan as routed (its own routing held, no cap): the plan's own prediction, a tool phase's KV reloads included
    assert bool(row["latency_met_as_routed"]) == meets_predicted(plan)
    for lp in plan.latency:
        assert f"{lp.service}: TTFT {lp.ttft_predicted_ms:,.0f}/{lp.ttft_target_ms:,.0f} ms" in row["latency_as_routed_detail"]
    assert row["headroom_multiplier"] >= 1.0
    assert row["fixed_total_usd_per_month"] == pytest.approx(total, rel=REL)
    assert row["optimal_architecture"] == win
    assert row["optimal_total_usd_per_month"] == pytest.approx(total, rel=REL)
    assert abs(row["regret_usd_per_month"]) <= REL * total


@pytest.mark.slow
def test_evaluate_cli_reproduces_the_plan(solved_example, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The issue's report: `planner evaluate d/plan.json` of enterprise-chat said "carries no, SLO met no, headroom ×0.692"."""
    import json

    from click.testing import CliRunner

    from planner.cli import main

    solved = solved_example("enterprise-chat")
    r = CliRunner().invoke(main, ["evaluate", str(solved.out_dir / "plan.json"), "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["rows"][0]
    assert row["carries_load"] and row["slo_met"] and row["headroom_multiplier"] > 1.0
    assert abs(row["regret_usd_per_month"]) <= REL * row["fixed_total_usd_per_month"]


def test_plan_overrides_carry_the_resolution_auto_chose() -> None:
    from planner.schema.plan import ResolutionStep, VerdictConfidence
    from planner.solve_instance import plan_overrides

    class _Plan:  # the fields plan_overrides reads
        overrides = {"services.chat.traffic.rate_multiplier": 2.0}
        verdict = type("V", (), {"confidence": VerdictConfidence(summary="x", buckets={"chat": 9},
                                                                  resolution=[ResolutionStep(buckets={"chat": 4}, winner="shared")])})()

    got = plan_overrides(_Plan())  # type: ignore[arg-type]
    assert got == {"services.chat.traffic.rate_multiplier": 2.0, "services.chat.traffic.buckets": 9}
    _Plan.overrides = {"services.chat.traffic.buckets": 6}  # recorded by solve (resolution_overrides): kept
    assert plan_overrides(_Plan()) == {"services.chat.traffic.buckets": 6}  # type: ignore[arg-type]


def test_evaluate_headroom_at_the_search_limits_is_said_as_a_bound() -> None:
    """At ×0.01 of enterprise-chat's traffic its plan carries ~×145, beyond the search's ×64: printed "64" as if the
    answer; a traffic it cannot carry at 1/64 printed "0". Now bounds, said as such (``headroom_beyond_search``)."""
    from planner.studies.evaluate import MAX_MULTIPLIER, _beyond

    assert _beyond(64.0, MAX_MULTIPLIER) == "above" and _beyond(0.0, MAX_MULTIPLIER) == "below"
    assert _beyond(1.45, MAX_MULTIPLIER) == "" and _beyond(48.6, MAX_MULTIPLIER) == "" and _beyond(32.0, MAX_MULTIPLIER) == ""


@pytest.mark.slow
def test_evaluate_cli_prints_the_search_limit_and_whole_dollars(solved_example) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from planner.cli import main

    solved = solved_example("enterprise-chat")
    r = CliRunner().invoke(main, ["evaluate", str(solved.out_dir / "plan.json"), "--set", "services.chat.traffic.rate_multiplier=0.01"])
    assert r.exit_code == 0, r.output
    assert ">=64 (search limit)" in r.stdout and "e-0" not in r.stdout


def test_evaluate_says_how_a_held_plan_misses_beyond_its_caps(views) -> None:  # type: ignore[no-untyped-def]
    """Beyond the caps "SLO met" is "no" whatever the latency; the plan as routed says what the latency is: at ×1.5
    enterprise-chat's shared plan is past its caps yet predicted within its targets, at ×3 its lane saturates."""
    from planner.studies.evaluate import evaluate_plan
    from planner.studies.fixed import FixedPlan
    from planner.studies.spec import Scenario

    result, source = views("enterprise-chat")
    held = FixedPlan.from_result(result, "shared")
    rows = evaluate_plan(source, held, [Scenario(name=f"x{m:g}", overrides={"services.chat.traffic.rate_multiplier": m})
                                        for m in (1.5, 3.0)], rel_tol=HEADROOM_TOL)
    at15, at3 = rows.iloc[0], rows.iloc[1]
    assert not at15["carries_load"] and not at15["slo_met"] and bool(at15["latency_met_as_routed"])
    assert not bool(at3["latency_met_as_routed"]) and "TTFT inf/2,000 ms" in at3["latency_as_routed_detail"]


def test_evaluate_as_routed_needs_the_plans_buckets(views) -> None:  # type: ignore[no-untyped-def]
    """At other bucket counts the plan's routing keys name other buckets: no figure "as routed", said why (it must not
    quote a service left out, nor a pool's latency without the load of the buckets it no longer routes)."""
    from planner.studies.evaluate import evaluate_plan
    from planner.studies.fixed import FixedPlan
    from planner.studies.spec import Scenario

    result, source = views("enterprise-chat")
    row = evaluate_plan(source, FixedPlan.from_result(result), [Scenario(name="k8", overrides={"services.chat.traffic.buckets": 8})],
                        rel_tol=HEADROOM_TOL).iloc[0]
    assert row["latency_met_as_routed"] is None and "does not route chat/" in row["latency_as_routed_detail"]
