"""The MIP solver backend: HiGHS through pyomo's persistent interface, and its status words.

HiGHS runs single-threaded with a fixed random seed by default (the callers pass
``solver_options={"random_seed": 0}``), so the same input gives the same plan.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


def solver_status(term: Any, has_solution: bool) -> str:
    """Plan status (:data:`planner.schema.plan.SolveStatus`) from pyomo's termination condition.

    A time-limited run with a plan is ``time_limit``, never ``optimal``.
    """
    name = getattr(term, "name", str(term))
    if name == "convergenceCriteriaSatisfied":
        return "optimal"
    if name in ("provenInfeasible", "locallyInfeasible", "infeasibleOrUnbounded"):
        return "infeasible"
    if name == "maxTimeLimit":
        return "time_limit" if has_solution else "error"
    return "feasible" if has_solution else "error"


_status = solver_status  # kept for planner.optimize.resolve


def import_pyomo() -> Any:
    """``pyomo.core`` (what the planner models with), imported so that a later ``import scipy`` stays cheap (issue 27).

    ``pyomo.core``, not ``pyomo.environ``: ``environ`` also imports every plug-in package (GDP, DAE,
    MPEC, network, the NEOS and legacy solver interfaces, every ``pyomo.contrib`` package) that
    the planner never uses; its components (``ConcreteModel``, ``Var``, ``quicksum``, ...) are
    ``pyomo.core``'s, and the HiGHS interface (:func:`make_solver`,
    ``pyomo.contrib.solver.solvers.highs``) imports what it needs itself. Importing ``pyomo.core``
    alone saves ~0.25 s CPU of ``planner solve`` (benchmarks/bench_solve_speed.py, cold); every
    ``import pyomo.environ as pe`` of the planner is ``import pyomo.core as pe``.

    ``pyomo.common.dependencies`` registers a post-import hook on ``scipy`` that imports
    ``scipy.stats``, ``.sparse``, ``.spatial`` and ``.integrate`` as soon as anything imports
    scipy: +0.35 s on the 2-core VM (``python -X importtime``), for the planner's
    ``scipy.special`` (:mod:`planner.queueing`) that costs 0.1 s alone. Neither the planner nor
    pyomo's HiGHS interface uses those submodules, and scipy loads them lazily on attribute
    access when some pyomo plug-in does. Called before pyomo is imported, this drops the hook.
    When scipy is imported already (the capacity table's queueing caps use ``scipy.special``),
    pyomo would run the hook at once (``attempt_import`` does not defer a module in
    ``sys.modules``: +0.57 s CPU for ``scipy.stats``, 2.5 s profiled in a sweep worker); so
    ``scipy`` is hidden from ``sys.modules`` while ``pyomo.common.dependencies`` registers it,
    then put back and the hook dropped: pyomo's deferred ``scipy`` resolves to the loaded module
    (and imports those submodules) only if some pyomo code uses it. Called after pyomo was
    imported, nothing changes. Call it first in a command that will need pyomo
    (:func:`planner.optimize.solve.solve_tables` does).
    """
    import sys

    if "pyomo.common.dependencies" not in sys.modules:
        loaded = sys.modules.pop("scipy", None)
        try:
            from pyomo.common import dependencies
        finally:
            if loaded is not None:
                sys.modules["scipy"] = loaded
        hooks = getattr(getattr(dependencies, "DeferredImportCallbackFinder", None), "_callbacks", None)
        if isinstance(hooks, dict):
            hooks.pop("scipy", None)
    import pyomo.core as pe

    return pe


def solve_persistent(solver: Any, model: Any, **options: Any) -> Any:
    """``solver.solve(model, **options)`` with ``timing_info.highs_time`` this solve's own HiGHS time.

    HiGHS's ``getRunTime()`` (what pyomo reports as ``highs_time``) accumulates over every run of one
    ``Highs`` object, and the persistent interface keeps that object while the model is the same: a
    second architecture, or a sweep's re-solve, reported the time of every solve before it too (the
    fleet instance's disaggregated "HiGHS 11.7 s" was 4.5 s after shared's 7.2 s, issue 27). The clock
    is read before the solve when the object will be reused (a new model gets a new object, at 0).
    """
    before = 0.0
    inner = getattr(solver, "_solver_model", None)
    if inner is not None and getattr(solver, "_model", None) is model:
        before = float(inner.getRunTime())
    res = solver.solve(model, **options)
    total = getattr(res.timing_info, "highs_time", None)
    if total is not None:
        res.timing_info.highs_time = max(0.0, float(total) - before)
    return res


_TIME_LIMIT_STOPS = [0]
"""Solves (of solvers made by :func:`make_solver`, in this process) that stopped at their time limit."""


def time_limit_stops() -> int:
    """How many solves of this process stopped at their time limit (:func:`make_solver`'s solvers).

    A plan one of them shaped (an architecture's solve, a tightening round, a confidence re-solve,
    a diagnosis) depends on the machine's speed, so it is not reproducible: the plan cache
    (:mod:`planner.plan_cache`) compares this count before and after a solve and stores the plan
    only when it did not move."""
    return _TIME_LIMIT_STOPS[0]


@lru_cache(maxsize=1)
def _counting_highs() -> type:
    """pyomo's persistent HiGHS interface, counting the solves that stop at their time limit."""
    from pyomo.contrib.solver.solvers.highs import Highs

    class CountingHighs(Highs):
        def solve(self, model: Any, **kwds: Any) -> Any:
            res = super().solve(model, **kwds)
            if getattr(res.termination_condition, "name", "") == "maxTimeLimit":
                _TIME_LIMIT_STOPS[0] += 1
            # pyomo turns HiGHS's console log on inside its solve (captured there) and leaves it on: between
            # solves, a model update's warnings ("|Value| of 8.7e-10 supplied to Highs::changeCoeff is less
            # than 1e-09 ...") went to stdout, ahead of `planner budget --json` / `sweep --json` output, which
            # then was not JSON. Off until the next solve turns it on under its capture.
            inner = getattr(self, "_solver_model", None)
            if inner is not None:
                inner.setOptionValue("log_to_console", False)
            return res

    return CountingHighs


def make_solver() -> Any:
    """A HiGHS solver (pyomo's persistent interface) whose time-limit stops :func:`time_limit_stops` counts."""
    return _counting_highs()()

