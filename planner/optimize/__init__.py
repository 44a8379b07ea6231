"""The optimiser: a pyomo MIP over the capacity tables, solved with HiGHS (DESIGN §6).

Public API::

    from planner.optimize import SolveSettings, solve_tables, check_plan
    outcome = solve_tables(tables, SolveSettings(architectures=("shared", "disaggregated")))
    outcome.result            # planner.schema.plan.PlanResult
    check_plan(outcome.result)  # [] when every constraint holds

Modules: ``prepare`` (index sets, utilisation caps), ``model`` (formulation, architectures
as restrictions), ``settings`` (solve settings), ``highs`` (solver backend), ``architecture``
(solve one architecture, extract its plan), ``extract`` (plan, costs, latency), ``latency``
(analytic tail-latency check of a plan), ``tighten`` (the verify-and-tighten loop), ``solve``
(wrapper over architectures), ``verdict``, ``resolve`` (re-solving for sweeps), ``diagnose``
(infeasibility), ``check`` (independent checker), ``synthetic`` (random capacity tables for
tests and benchmarks).
"""

from __future__ import annotations

from planner.optimize.check import check_plan
from planner.optimize.solve import SolveOutcome, SolveSettings, solve_tables

__all__ = ["SolveOutcome", "SolveSettings", "check_plan", "solve_tables"]
