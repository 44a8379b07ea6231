"""A study's scenario at another rate is the table ``planner solve --set`` builds at that rate, not the base
table's rates scaled (:mod:`planner.studies.source`): the rate selects the operating points (issue 24)."""

from __future__ import annotations

import pandas as pd
import pytest

from planner.instance import load_instance
from planner.studies.source import TableSource, capacity_tables

RATE = "services.assistant.traffic.rate_multiplier"
KEYS = ["service", "bucket", "role", "config"]


@pytest.fixture(scope="module")
def source(root) -> TableSource:  # type: ignore[no-untyped-def]
    return TableSource.from_instance(load_instance(root / "instances" / "long-document-nvidia.yaml"))


def _keys(points: pd.DataFrame) -> list[tuple[str, ...]]:
    return sorted(map(tuple, points[KEYS].astype(str).to_numpy()))


def test_a_rate_scenario_is_the_table_built_at_that_rate(source: TableSource, root) -> None:  # type: ignore[no-untyped-def]
    """long-document-nvidia is solved at ×4; at ×1 its table offers other B200 configs (tp4, tp1 where ×4 has tp2),
    which the scaled ×4 table lacked: the sweep row was $34,187 against solve's $31,391."""
    base, tables, _ = source.tables_and_settings({RATE: 1})
    built = capacity_tables(load_instance(root / "instances" / "long-document-nvidia.yaml", {RATE: 1}))
    assert _keys(tables.points) == _keys(built.points)
    pd.testing.assert_frame_equal(tables.points.reset_index(drop=True), built.points.reset_index(drop=True))
    assert base is tables
    scaled = source.tables_and_settings({RATE: 1}, exact_rates=False)[1]
    assert _keys(scaled.points) == _keys(source.base_tables.points)  # held: the base's points, rates scaled
    # the case this file is about: at ×1 the points are other points (batch, work per request, feasibility)
    ours = built.points.set_index(KEYS).sort_index()
    held = scaled.points.set_index(KEYS).sort_index()
    assert not ours["max_batch"].equals(held["max_batch"]) or not ours["feasible"].equals(held["feasible"])
    assert source.tables_and_settings({RATE: 1})[1] is tables  # built once per process
    assert source.tables_and_settings({RATE: 4})[0] is source.base_tables  # the base rate: no rebuild


def test_sweep_at_another_rate_is_solves_plan(source: TableSource, root) -> None:  # type: ignore[no-untyped-def]
    from planner.solve_instance import solve_instance
    from planner.studies.source import settings_for
    from planner.studies.sweep import solve_scenario

    summaries, _ = solve_scenario(source, {RATE: 1})
    resolved = load_instance(root / "instances" / "long-document-nvidia.yaml", {RATE: 1})
    result = solve_instance(resolved, settings_for(resolved)).result
    for name, s in summaries.items():
        plan = result.architectures[name]
        assert s.total_usd_per_month == pytest.approx(plan.costs.total_usd_per_month, rel=1e-9)
        assert sum(s.devices.values()) == sum(p.devices for p in plan.pools)


def test_the_verdict_confidence_solves_the_table_built_at_each_traffic(root) -> None:  # type: ignore[no-untyped-def]
    """The confidence's traffic dimension solves what ``planner solve --set ...rate_multiplier`` solves: the table
    built at that rate (``traffic_tables_of``), not the base table's rates scaled."""
    from dataclasses import replace

    from planner.optimize.resolve import confidence_winner
    from planner.solve_instance import traffic_tables_of
    from planner.studies.source import settings_for

    path = root / "instances" / "long-document-nvidia.yaml"
    resolved = load_instance(path)
    at = traffic_tables_of(resolved, None, False, False)
    quarter = at(0.25)
    built = capacity_tables(load_instance(path, {RATE: 1}))
    pd.testing.assert_frame_equal(quarter.points.reset_index(drop=True), built.points.reset_index(drop=True))
    asked: list[float] = []

    def spy(m: float):  # type: ignore[no-untyped-def]
        asked.append(m)
        return at(m)

    settings = replace(settings_for(resolved), simulation_check=None)
    winner = confidence_winner(capacity_tables(resolved), settings, spy)
    assert winner(1.0, 1.0, 0.25) == "shared"
    assert asked == [0.25]
    winner(1.0, 1.0, 1.0)  # the base: no table built
    assert asked == [0.25]
