"""A held plan simulated at other traffic (``planner evaluate --simulate``, :mod:`planner.studies.simulated`), and a
saved plan's peak simulation run again giving the plan's own figures (issue 24: one answer everywhere)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from click.testing import CliRunner

from planner.cli import main


@pytest.fixture(scope="module")
def chat(solved_example):  # type: ignore[no-untyped-def]
    from planner.instance import load_instance
    from planner.verify import peak_arrivals_from_instance

    ex = solved_example("enterprise-chat")
    assert ex.exit_code == 0, ex.output
    arrivals, _ = peak_arrivals_from_instance(load_instance(ex.instance))
    return ex, ex.plan(), arrivals


def test_a_saved_plan_simulated_again_gives_its_own_check(chat) -> None:  # type: ignore[no-untyped-def]
    """The run length reads the plan's routed points only: before, the snapshot's every candidate set it, and the
    shared plan re-simulated ran 514 s (p99 TTFT 682 ms) against the 508 s (671 ms) ``planner solve`` stored."""
    from planner.verify import simulate_plan

    _, result, arrivals = chat
    for name, plan in result.architectures.items():
        assert plan.simulation is not None
        again = simulate_plan(result, name, arrivals=arrivals)
        assert again.duration_s == plan.simulation.duration_s
        assert [(s.ttft_sim_ms, s.tpot_sim_ms) for s in again.services] == [(s.ttft_sim_ms, s.tpot_sim_ms) for s in plan.simulation.services]
        assert again.met == plan.simulation.met


def test_held_plan_at_its_own_traffic_is_its_peak_simulation(chat) -> None:  # type: ignore[no-untyped-def]
    from planner.studies.simulated import simulate_held

    _, result, arrivals = chat
    name = "shared"
    plan = result.architectures[name]
    met, detail = simulate_held(result, name, pd.DataFrame(result.capacity.demand), arrivals)
    assert met is plan.simulation.met is True
    s = plan.simulation.services[0]
    assert f"TTFT {s.ttft_sim_ms:,.0f}/{s.ttft_target_ms:,.0f} ms" in detail


def test_rates_are_scaled_and_nothing_else(chat) -> None:  # type: ignore[no-untyped-def]
    from planner.studies.simulated import rate_factors, scaled_to

    _, result, _ = chat
    demand = pd.DataFrame(result.capacity.demand)
    demand["rate_peak_per_s"] *= 2.0
    demand["rate_mean_per_s"] *= 3.0
    factors, why = rate_factors(result, demand)
    assert why == "" and factors is not None
    assert all(f == pytest.approx((2.0, 3.0)) for f in factors.values())
    scaled = scaled_to(result, factors)
    for before, after in zip(result.capacity.points, scaled.capacity.points, strict=True):
        assert after["rate_peak_per_s"] == pytest.approx(2.0 * before["rate_peak_per_s"])
        assert after["rate_mean_per_s"] == pytest.approx(3.0 * before["rate_mean_per_s"])
        assert {k: v for k, v in after.items() if not k.startswith("rate_")} == {k: v for k, v in before.items() if not k.startswith("rate_")}
    assert scaled.architectures == result.architectures


def test_a_scenario_that_changes_lengths_or_buckets_is_not_simulated(chat) -> None:  # type: ignore[no-untyped-def]
    from planner.studies.simulated import rate_factors, simulate_held

    _, result, arrivals = chat
    longer = pd.DataFrame(result.capacity.demand)
    longer.loc[0, "input_tokens_mean"] = float(longer.loc[0, "input_tokens_mean"]) * 2
    factors, why = rate_factors(result, longer)
    assert factors is None and "input_tokens_mean" in why and "not simulated" in why
    fewer = pd.DataFrame(result.capacity.demand).iloc[1:]
    met, why = simulate_held(result, "shared", fewer, arrivals)
    assert met is None and "buckets are not the plan's" in why
    zero = pd.DataFrame(result.capacity.demand)
    zero["rate_peak_per_s"] = 0.0
    zero["rate_mean_per_s"] = 0.0
    met, why = simulate_held(result, "shared", zero, arrivals)
    assert met is None and "peak rate is 0" in why
    bad = pd.DataFrame(result.capacity.demand)
    bad.loc[0, "rate_peak_per_s"] = math.inf
    assert rate_factors(result, bad)[0] is None


def test_evaluate_simulate_cli(chat) -> None:  # type: ignore[no-untyped-def]
    ex, _, _ = chat
    r = CliRunner().invoke(main, ["evaluate", str(ex.out_dir / "plan.json"), "--instance", str(ex.instance), "--simulate",
                                  "--set", "services.chat.traffic.rate_multiplier=1,3"])
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if line.startswith("scenario"))
    assert "simulated" in header
    rows = {line.split()[0]: line.split() for line in r.output.splitlines() if line.startswith("rate_multiplier=")}
    assert rows["rate_multiplier=1"][1:5] == ["yes", "yes", "yes", "yes"]  # carries, SLO met, as routed, simulated
    assert rows["rate_multiplier=3"][4] == "no"
    assert "rate_multiplier=3: simulated: chat: TTFT" in r.output


def test_an_end_to_end_miss_is_named_in_the_held_plans_line(chat, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`met` also fails on an E2E target (planner.verify), which the line's TTFT / per-token tags do not cover: the
    finding is appended, so a "not met" line always says what missed."""
    import planner.verify as verify
    from planner.schema.plan import E2E_MISS
    from planner.studies.simulated import simulate_held

    _, result, arrivals = chat
    real = verify.simulate_plan

    def with_e2e_miss(res, arch, arrivals=None):  # type: ignore[no-untyped-def]
        check = real(res, arch, arrivals=arrivals)
        finding = f"{arch}: chat misses its p99 {E2E_MISS} at peak: 9,999 ms vs 5,000 ms"
        return check.model_copy(update={"met": False, "findings": [*check.findings, finding]})

    monkeypatch.setattr(verify, "simulate_plan", with_e2e_miss)
    met, detail = simulate_held(result, "shared", pd.DataFrame(result.capacity.demand), arrivals)
    assert met is False and "(missed)" not in detail
    assert detail.endswith(f"chat misses its p99 {E2E_MISS} at peak: 9,999 ms vs 5,000 ms")
