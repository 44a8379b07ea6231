"""The peak-simulation memo of planner.solve_instance (issue 27, sweep speed): an equal plan is simulated
once, whatever its costs or electricity price; anything the simulation reads makes a new run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import planner.solve_instance as si
import planner.verify
from planner.optimize import SolveSettings, solve_tables
from planner.optimize.synthetic import synthetic_tables
from planner.verify import PeakArrivals


@pytest.fixture(scope="module")
def result() -> Any:
    tables = synthetic_tables(services=1, buckets=2, devices=2, seed=1)
    return solve_tables(tables, SolveSettings(architectures=("disaggregated",), confidence="off")).result


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    seen: list[tuple[Any, str]] = []

    def fake(res: Any, architecture: str, **_kw: Any) -> object:
        seen.append((res, architecture))
        return object()  # a distinct check per run

    monkeypatch.setattr(planner.verify, "simulate_plan", fake)
    monkeypatch.setattr(si, "_SIMULATED", {})
    return seen


def _arrivals(shift: float = 0.0) -> dict[str, PeakArrivals]:
    return {"svc0": PeakArrivals(arrival_s=np.array([0.0, 0.5, 1.25]) + shift, window_s=60.0, source="test")}


def test_equal_plan_at_another_price_is_simulated_once(result: Any, calls: list[tuple[Any, str]]) -> None:
    check = si.PeakSimulationCheck(_arrivals())
    first = check(result, "disaggregated")
    plan = result.architectures["disaggregated"]
    pricier = result.model_copy(update={
        "capacity": result.capacity.model_copy(update={"costs": {**result.capacity.costs, "electricity_usd_per_kwh": 0.5}}),
        "architectures": {"disaggregated": plan.model_copy(update={
            "pools": [p.model_copy(update={"cost_usd_per_month": p.cost_usd_per_month * 3}) for p in plan.pools]})}})
    again = si.PeakSimulationCheck(_arrivals())(pricier, "disaggregated")  # a fresh copy of the check, as a worker unpickles it
    assert again is first and len(calls) == 1


def test_anything_the_simulation_reads_runs_it_again(result: Any, calls: list[tuple[Any, str]]) -> None:
    check = si.PeakSimulationCheck(_arrivals())
    first = check(result, "disaggregated")
    plan = result.architectures["disaggregated"]
    bigger = result.model_copy(update={"architectures": {"disaggregated": plan.model_copy(update={
        "pools": [plan.pools[0].model_copy(update={"instances": plan.pools[0].instances + 1}), *plan.pools[1:]]})}})
    assert check(bigger, "disaggregated") is not first
    assert si.PeakSimulationCheck(_arrivals(shift=0.1))(result, "disaggregated") is not first
    faster = result.model_copy(update={"capacity": result.capacity.model_copy(update={
        "demand": [{**d, "rate_peak_per_s": d["rate_peak_per_s"] * 2} for d in result.capacity.demand]})})
    assert check(faster, "disaggregated") is not first
    assert len(calls) == 4


def test_a_tightened_cap_with_the_same_plan_is_simulated_once(result: Any, calls: list[tuple[Any, str]]) -> None:
    # the verify-and-tighten loop divides caps (rho, and the load coefficient rate x tau / rho) and may get
    # the same plan back: the simulation reads neither, nor the pools' utilization_cap
    check = si.PeakSimulationCheck(_arrivals())
    first = check(result, "disaggregated")
    plan = result.architectures["disaggregated"]
    assert {"rho", "load_peak_coef"} <= set(result.capacity.points[0])
    tighter = result.model_copy(update={
        "capacity": result.capacity.model_copy(update={"points": [
            {**p, "rho": p["rho"] / 1.3, "load_peak_coef": p["load_peak_coef"] * 1.3} for p in result.capacity.points]}),
        "architectures": {"disaggregated": plan.model_copy(update={
            "pools": [p.model_copy(update={"utilization_cap": p.utilization_cap / 1.3}) for p in plan.pools]})}})
    assert check(tighter, "disaggregated") is first and len(calls) == 1
    slower = result.model_copy(update={"capacity": result.capacity.model_copy(update={"points": [
        {**p, "instance_seconds_per_request": p["instance_seconds_per_request"] * 1.3} for p in result.capacity.points]})})
    assert check(slower, "disaggregated") is not first and len(calls) == 2
