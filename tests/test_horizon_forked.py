"""solve_horizon plans its architectures (and their baselines) one per core (planner.forked): the result is the one a
single core gives, each from a fresh HiGHS (planner.horizon.lp.LinearModel.forget_solver), and a forked child never
calls the parent's progress listeners (planner.progress.detach)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from micro_tables import micro_tables

import planner.forked
from planner.horizon.model import Acquisition, HorizonInputs
from planner.horizon.solve import solve_horizon
from planner.progress import listening, stage


def _inputs() -> HorizonInputs:
    slots = pd.DataFrame([{"slot": f"s{i}", "hours_per_period": 365.0, "peak_rate_per_s": m, "mean_rate_per_s": m / 2,
                           "interarrival_cv": math.nan} for i, m in enumerate([0.5, 1.0])])
    return HorizonInputs(slots=slots, absolute=False, growth=np.asarray([1.0, 1.3]), months_per_period=1.0,
                         acquisition={"g": Acquisition("g", buy_usd_per_device_hour=1.0, on_demand_usd_per_hour=2.0)})


def _summary(res: object) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for name, a in res.architectures.items():  # type: ignore[attr-defined]
        out[name] = (a.feasible, a.status, a.total_usd, a.baseline_usd, tuple(a.notes), a.pools.to_csv(), a.schedule.to_csv())
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork_map computes in-process without fork")
def test_forked_architectures_give_the_single_core_result_and_never_call_the_parents_listeners(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 2)
    log = tmp_path / "calls.txt"

    def listener(event: str, label: str, elapsed_s: float) -> None:  # a file: a child's call would show here too
        with log.open("a") as f:
            f.write(f"{os.getpid()} {event} {label}\n")

    with listening(listener):
        forked = solve_horizon(micro_tables(cap=0.5), _inputs(), ("shared", "disaggregated"))
        with stage("probe"):
            pass
    calls = log.read_text().splitlines()
    assert any("solve shared" in c for c in calls)
    assert {c.split()[0] for c in calls} == {str(os.getpid())}  # the forked children's stages never reach a listener
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 1)
    single = solve_horizon(micro_tables(cap=0.5), _inputs(), ("shared", "disaggregated"))
    reordered = solve_horizon(micro_tables(cap=0.5), _inputs(), ("disaggregated", "shared"))
    assert _summary(forked) == _summary(single) == {k: _summary(reordered)[k] for k in ("shared", "disaggregated")}
    shared = forked.architectures["shared"]
    assert shared.feasible and shared.baseline_usd is not None and shared.total_usd is not None
    assert not forked.architectures["disaggregated"].feasible  # the micro table has no prefill / decode points


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork_map computes in-process without fork")
def test_growth_regret_paths_one_per_core_give_the_single_core_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.horizon.evaluate import growth_regret

    tables, inputs = micro_tables(cap=0.5), _inputs()
    schedule = solve_horizon(tables, inputs, ("shared",), baseline=False).architectures["shared"].schedule
    paths = {"flat": np.array([1.0, 1.0]), "up": np.array([1.0, 1.6]), "down": np.array([1.0, 0.7])}

    def rows() -> list[tuple[str, tuple[float, ...], float | None, float, str]]:
        return [(g.label, tuple(g.growth), g.held_usd, float(g.replanned_usd or 0.0), g.status) for g in
                growth_regret(tables, inputs, "shared", schedule, paths)]

    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 2)
    forked = rows()
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 1)
    assert forked == rows()
    assert [r[0] for r in forked] == ["flat", "up", "down"] and all(r[2] is not None for r in forked)
    assert forked[1][3] > forked[0][3]  # more traffic, a dearer re-plan
