"""The MIP solver backend: HiGHS through pyomo's persistent interface, and its status words.

HiGHS runs single-threaded with a fixed random seed by default (the callers pass
``solver_options={"random_seed": 0}``), so the same input gives the same plan.
"""

from __future__ import annotations

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


def make_solver() -> Any:
    from pyomo.contrib.solver.solvers.highs import Highs

    return Highs()

