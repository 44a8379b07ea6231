"""Solve one architecture on a built model and extract its plan (pools, routing, latency, costs).

Architectures are restrictions of one built model (fixed variables, one mutable parameter,
:func:`planner.optimize.model.restrict`) re-solved through pyomo's persistent HiGHS interface.
Phases are timed separately (``SolverInfo.build_s``, ``time_s`` — HiGHS's own time —
``extract_s``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from planner.optimize.diagnose import diagnose_routability, diagnose_solver_infeasible
from planner.optimize.energy_report import energy_report
from planner.optimize.extract import (
    build_pools_routing_latency,
    cost_breakdown,
    energy_kwh_per_month,
    point_power_arrays,
    solution_arrays,
    tokens_per_month,
    with_tool_phase,
)
from planner.optimize.highs import solve_persistent, solver_status
from planner.optimize.model import Built, constraint_name, restrict
from planner.optimize.settings import SolveSettings
from planner.optimize.trace import record
from planner.schema.plan import ArchitecturePlan, BindingConstraint, SolverInfo
from planner.units import J_PER_KWH, SECONDS_PER_HOUR


def _binding(built: Built, tol: float = 1e-6) -> list[BindingConstraint]:
    import pyomo.core as pe  # pyomo.environ less its plug-ins (planner.optimize.highs.import_pyomo)

    m = built.model
    out: list[BindingConstraint] = []
    # A pool with no instances and no share routed to it has load and KV bodies of exactly 0, which
    # the test below never calls binding: only the pools the plan uses are evaluated (pyomo walks each
    # body term by term: 1.4 s of the 97 k-variable fleet solve's extraction when every pool was).
    n_on = np.array([(m.n[p].value or 0.0) > 0 for p in range(len(built.pool_names))], dtype=bool)
    x_val = np.array([m.x[i].value or 0.0 for i in range(len(built.point_pool))], dtype=float)
    routed = np.bincount(built.point_pool, weights=np.abs(x_val), minlength=len(built.pool_names)) > 0
    used = n_on | routed
    for kind, comp in (("load", m.load_c), ("kv", m.kv), ("procurement", m.procurement)):
        for idx in comp:
            if kind != "procurement" and not used[idx]:
                continue
            c = comp[idx]
            if not c.active:
                continue
            body = pe.value(c.body)
            ub = pe.value(c.upper)
            if ub is None:
                continue
            scale = max(1.0, abs(ub))
            if body >= ub - tol * scale and abs(body) > tol:
                out.append(BindingConstraint(name=constraint_name(built, kind, idx), kind=kind,
                                             detail=f"at its bound ({body:.6g} of {ub:.6g})"))
    if m.budget_c.active:
        body = pe.value(m.budget_c.body)
        ub = pe.value(m.budget_c.upper)
        if ub is not None and body >= ub * (1 - 1e-6):
            out.append(BindingConstraint(name="budget", kind="budget", detail=f"cost {body:,.0f} of budget {ub:,.0f} USD/month"))
    # the one-device-type restriction of a shared plan is at its bound whenever a type is used; whether it costs the
    # plan anything takes another solve (mixed_types_objective_usd), so it is not listed here
    return out


def mixed_types_objective_usd(built: Built, solver: Any, settings: SolveSettings, *, time_limit_s: float | None = None) -> float | None:
    """The cost (USD/month) of the best shared plan found with every device type allowed on the same model: the same
    capacity table and utilisation caps, the same solver settings; the incumbent's objective, a plan that exists (not
    the solver's bound), neither extracted nor checked for latency. What holding a shared plan to one device type
    (``options.shared_single_device_type``) costs is the shared plan's objective minus this. ``None`` when the
    solve ends without a solution. ``time_limit_s``: the solve's own limit (default the settings'); stopped
    there, its best plan so far is what it returns. The model's variable values are left as
    they were (the solution is not loaded). The model must be restricted to the shared architecture already (as its
    shared solve left it): only its device-type count changes, and is set back (restricting a model walks every
    routing variable: ~1 s each way on a fleet-scale model). Before this, every shared plan over a catalog of several
    device types listed "a shared plan uses one device type only, so it cannot mix devices" under what limits it,
    while on the four examples a shared plan wins, allowing a mix gives the same plan and cost
    (``planner solve instances/<x>.yaml --set options.shared_single_device_type=false``)."""
    built.model.types_max.set_value(max(1, len(built.prep.device_types)))
    try:
        res = solve_persistent(solver, built.model, time_limit=settings.time_limit_s if time_limit_s is None else time_limit_s,
                               rel_gap=settings.mip_gap, threads=settings.threads,
                               load_solutions=False, raise_exception_on_nonoptimal_result=False, solver_options={"random_seed": 0})
    finally:
        built.model.types_max.set_value(1 if settings.shared_single_device_type else max(1, len(built.prep.device_types)))
    if getattr(res.solution_status, "name", "") not in ("optimal", "feasible") or res.incumbent_objective is None:
        return None
    return float(res.incumbent_objective)


def solve_architecture(built: Built, solver: Any, architecture: str, settings: SolveSettings) -> ArchitecturePlan:
    """Restrict the built model to one architecture, solve it, extract the plan."""
    diag = diagnose_routability(built.prep, architecture)
    if diag:
        return ArchitecturePlan(architecture=architecture, feasible=False,
                                solver=SolverInfo(status="infeasible", termination="pre-solve: a bucket has no usable operating point",
                                                  time_limit_s=settings.time_limit_s, mip_gap=settings.mip_gap),
                                diagnosis=diag)
    restrict(built, architecture, shared_single_device_type=settings.shared_single_device_type)
    t0 = time.perf_counter()
    res = solve_persistent(solver, built.model, time_limit=settings.time_limit_s, rel_gap=settings.mip_gap, threads=settings.threads,
                           load_solutions=False, raise_exception_on_nonoptimal_result=False,
                           solver_options={"random_seed": 0})
    wall = time.perf_counter() - t0
    return plan_from_results(built, res, wall, architecture, settings)


def plan_from_results(built: Built, res: Any, wall: float, architecture: str, settings: SolveSettings) -> ArchitecturePlan:
    """The plan of a solve of ``built`` restricted to ``architecture`` (``res``: pyomo's results, ``wall``
    the solve call's seconds): what :func:`solve_architecture` returns, for callers that solved already
    (:mod:`planner.optimize.resolve`'s lean summaries hand a plan that misses on to the tightening loop)."""
    highs_s = float(getattr(res.timing_info, "highs_time", wall) or wall)
    has_solution = getattr(res.solution_status, "name", "") in ("optimal", "feasible")
    status = solver_status(res.termination_condition, has_solution)
    obj = res.incumbent_objective
    bound = res.objective_bound
    gap = None
    if obj is not None and bound is not None and abs(obj) > 1e-9:
        gap = max(0.0, (obj - bound) / abs(obj))
    info = SolverInfo(status=status, termination=getattr(res.termination_condition, "name", str(res.termination_condition)),
                      objective_usd_per_month=obj, bound_usd_per_month=bound, gap=gap, time_s=highs_s,
                      build_s=built.build_s + max(0.0, wall - highs_s), time_limit_s=settings.time_limit_s, mip_gap=settings.mip_gap,
                      variables=built.model.nvariables(), constraints=built.model.nconstraints())
    if not has_solution:
        record(architecture, status)
        diag2 = diagnose_solver_infeasible(built, architecture, settings) if status == "infeasible" else []
        return ArchitecturePlan(architecture=architecture, feasible=False, solver=info, diagnosis=diag2)
    t1 = time.perf_counter()
    res.solution_loader.load_vars()
    x, n, _z, _u = solution_arrays(built)
    record(architecture, status, x, n)
    prep = built.prep
    costs = cost_breakdown(prep.tables.costs, prep.tables.configs, prep.points, x, prep.pools, n, redundancy=settings.redundancy)
    pools, routing, latency = build_pools_routing_latency(built, x, n, settings.redundancy)
    costs, tool_phase, latency = with_tool_phase(built, x, n, costs, latency, settings.redundancy)  # planner.agents (issue 6)
    pool_cost = _pool_costs(built, x, n, costs)
    pools = [p.model_copy(update={"cost_usd_per_month": pool_cost.get(p.name, 0.0)}) for p in pools]
    tokens = tokens_per_month(built, x)
    kwh = energy_kwh_per_month(built, costs)
    binding = _binding(built)
    extract_s = time.perf_counter() - t1
    info = info.model_copy(update={"extract_s": extract_s})
    return ArchitecturePlan(
        architecture=architecture, feasible=True, pools=pools, routing=routing, latency=latency, costs=costs,
        tokens_per_month=tokens, usd_per_million_tokens=costs.total_usd_per_month / tokens * 1e6 if tokens > 0 else None,
        energy_wh_per_1k_tokens=kwh * 1e3 / tokens * 1e3 if tokens > 0 else None,
        power_kw_mean=kwh / prep.hours, solver=info, binding=binding, tool_phase=tool_phase,
        energy=energy_report(built, x, n, tokens, kwh),  # by pool and phase, idle, emissions (issue 20)
    )


def _pool_costs(built: Built, x: Any, n: Any, total: Any) -> dict[str, float]:
    """Cost attributable to each pool: every term of :func:`cost_breakdown` restricted to the pool's
    instances and the points routed to it, minus the per-device-type fixed cost (shared between
    pools, attributed to none). Vectorised: per-point terms are summed per pool with ``bincount``.
    """
    prep = built.prep
    c = prep.tables.costs
    pools = prep.pools
    pts = prep.points
    n_pool = len(pools)
    if n_pool == 0:
        return {}
    H = float(c.hours_per_month)
    kwh_price = float(c.electricity_usd_per_kwh) * float(c.pue)
    cfg = prep.tables.configs.drop_duplicates("config").set_index("config")
    pc = cfg.reindex(pools["config"].to_numpy())
    n = np.asarray(n, dtype=float)
    dev = n * pools["tp"].to_numpy(float)
    eq = pc["equipment_usd_per_device_hour"].to_numpy(float)
    idle_w = pc["idle_power_w"].to_numpy(float) + pc["host_power_w"].to_numpy(float)
    per_dev_month = pc["ops_usd_per_device_month"].to_numpy(float) + pc["license_usd_per_device_month"].to_numpy(float)
    sends = pools["sends_kv"].to_numpy(bool)
    pp = built.point_pool
    lam, tau, ptp, host, pidle, busy_j = point_power_arrays(pts, cfg, x)
    is_pf = pts["role"].to_numpy(str) == "prefill"
    kvtx = np.where(is_pf, pts["kv_transfer_bytes_per_request"].to_numpy(float), 0.0)
    busy = np.bincount(pp, weights=lam * busy_j, minlength=n_pool) * SECONDS_PER_HOUR * H / J_PER_KWH * kwh_price
    busy_dev_kw = np.bincount(pp, weights=lam * tau * ptp * (pidle + host), minlength=n_pool) / 1e3
    idle = kwh_price * H * (dev * idle_w / 1e3 - busy_dev_kw)
    transfer = np.bincount(pp, weights=lam * kvtx, minlength=n_pool) / 1e9 * SECONDS_PER_HOUR * H * float(c.transfer_usd_per_gb)
    per_pool = (dev * eq * H + busy + idle + np.where(sends, dev * float(c.nic_usd_per_device_month), 0.0) + transfer
                + float(c.ops_usd_per_pool_month) * (n > 0) + dev * per_dev_month)
    names = built.pool_names
    return {names[p]: float(per_pool[p]) for p in range(n_pool) if n[p] > 0}


