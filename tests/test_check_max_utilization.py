"""``planner check`` without the instance reads ``options.max_utilization`` from the plan's structured record
(``capacity.max_utilization``, written by :func:`planner.optimize.solve.solve_tables`); the caps note's text is
only the fallback for plans written before that record (:func:`planner.optimize.check.user_max_utilization`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from micro_tables import micro_tables

from planner.optimize import SolveSettings, solve_tables
from planner.optimize.check import TOL, check_plan, user_max_utilization
from planner.schema.plan import PlanResult

NOTE = "bounded by options.max_utilization = "


@pytest.fixture(scope="module")
def capped() -> dict[str, Any]:
    """The micro table (supplied cap 0.5) solved with ``max_utilization = 0.3``, as plan.json holds it."""
    res = solve_tables(micro_tables(), SolveSettings(architectures=("shared",), max_utilization=0.3, confidence="off")).result
    data: dict[str, Any] = json.loads(res.model_dump_json())
    return data


def _with_note(data: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    d = json.loads(json.dumps(data))
    assert any(old in n for n in d["notes"]), d["notes"]
    d["notes"] = [n.replace(old, new) for n in d["notes"]]
    return d


def _raise_rho(data: dict[str, Any], rho: float) -> dict[str, Any]:
    d = json.loads(json.dumps(data))
    for p in d["capacity"]["points"]:
        p["rho"] = rho
    return d


def test_solve_records_max_utilization_in_the_snapshot(capped: dict[str, Any]) -> None:
    assert capped["capacity"]["max_utilization"] == 0.3
    assert any(NOTE + "0.3" in n for n in capped["notes"])
    assert check_plan(PlanResult.model_validate(capped)) == []


def test_an_edited_note_does_not_move_the_bound_the_record_states(capped: dict[str, Any]) -> None:
    edited = _with_note(capped, NOTE + "0.3", NOTE + "0.9")
    assert user_max_utilization(PlanResult.model_validate(edited), None) == (0.3, TOL)
    assert check_plan(PlanResult.model_validate(edited)) == []  # the plan itself is untouched
    over = PlanResult.model_validate(_raise_rho(edited, 0.5))
    assert any("rho 0.5 is above options.max_utilization = 0.3" in v for v in check_plan(over)), check_plan(over)


def test_a_note_without_a_number_does_not_drop_the_bound(capped: dict[str, Any]) -> None:
    edited = _with_note(capped, NOTE + "0.3", "bounded by nothing")
    assert user_max_utilization(PlanResult.model_validate(edited), None) == (0.3, TOL)


def test_a_plan_written_before_the_record_falls_back_to_the_note(capped: dict[str, Any]) -> None:
    old = json.loads(json.dumps(capped))
    del old["capacity"]["max_utilization"]  # an older plan.json: the key is absent and still reads
    result = PlanResult.model_validate(old)
    assert result.capacity.max_utilization is None
    assert user_max_utilization(result, None) == (0.3, 1e-5)
    over = PlanResult.model_validate(_raise_rho(old, 0.5))
    assert any("is above options.max_utilization = 0.3" in v for v in check_plan(over))


def test_without_the_option_no_bound(capped: dict[str, Any]) -> None:
    res = solve_tables(micro_tables(), SolveSettings(architectures=("shared",), confidence="off")).result
    assert res.capacity.max_utilization is None
    assert user_max_utilization(res, None) == (None, TOL)
