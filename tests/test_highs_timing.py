"""Solver times are each solve's own: HiGHS's run clock accumulates over the runs of one Highs object
(planner.optimize.highs.solve_persistent, issue 27)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from planner.optimize.highs import solve_persistent


class _FakePersistent:
    """pyomo's persistent HiGHS as far as the clock goes: one Highs object per model, its clock cumulative."""

    def __init__(self, run_s: float) -> None:
        self.run_s = run_s
        self._model: Any = None
        self._solver_model: Any = None
        self.clock = 0.0

    def solve(self, model: Any, **_kw: Any) -> Any:
        if model is not self._model:
            self._model, self.clock = model, 0.0
            self._solver_model = SimpleNamespace(getRunTime=lambda: self.clock)
        self.clock += self.run_s
        return SimpleNamespace(timing_info=SimpleNamespace(highs_time=self.clock))


def test_each_solve_reports_its_own_highs_time() -> None:
    solver = _FakePersistent(run_s=2.0)
    a, b = object(), object()
    assert [solve_persistent(solver, m).timing_info.highs_time for m in (a, a, a, b, b)] == [2.0, 2.0, 2.0, 2.0, 2.0]
