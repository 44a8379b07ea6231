"""Studies on a planning instance (DESIGN §7): sweeps, crossovers, tornado, budgets, fixed-plan evaluation.

Public API::

    from planner.studies.spec import parse_sets, expand, check_paths, check_values
    from planner.studies.source import TableSource
    from planner.studies.sweep import run_sweep, crossovers, tornado
    from planner.studies.budget import budget_frontier
    from planner.studies.fixed import FixedPlan, solve_fixed
    from planner.studies.evaluate import evaluate_plan
    from planner.studies.robust import solve_robust

Modules: ``spec`` (``--set`` syntax, grids, Monte Carlo), ``distributions``, ``source``
(capacity tables per scenario: patch or rebuild), ``sweep``, ``executors`` (local
processes or Dask), ``budget``, ``fixed`` (a plan's pools held, routing free), ``evaluate``
(fixed plan under other traffic: SLO, headroom, regret), ``robust`` (one device set for
several scenarios).
"""
