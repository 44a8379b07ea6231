"""Solve wrapper: prepare → build once → restrict and solve each architecture → extract → verdict.

Phases are timed separately (``SolverInfo.build_s``, ``time_s`` — HiGHS's own time —
``extract_s``). One built model serves every architecture: architectures are restrictions
(fixed variables, one mutable parameter) re-solved through pyomo's persistent HiGHS
interface (:mod:`pyomo.contrib.solver.solvers.highs`). HiGHS runs single-threaded with a
fixed random seed by default, so the same input gives the same plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from planner.optimize.diagnose import diagnose_routability, diagnose_solver_infeasible
from planner.optimize.extract import (
    build_pools_routing_latency,
    cost_breakdown,
    energy_kwh_per_month,
    model_costs,
    solution_arrays,
    tokens_per_month,
)
from planner.optimize.model import Built, build_model, constraint_name, restrict
from planner.optimize.prepare import ARCH_ROLES, Prepared, prepare
from planner.optimize.verdict import make_verdict
from planner.schema.capacity import CapacityTables
from planner.schema.plan import (
    ArchitecturePlan,
    BindingConstraint,
    CapacitySnapshot,
    PlanResult,
    SolverInfo,
)


@dataclass(frozen=True)
class SolveSettings:
    """Everything besides the capacity tables that shapes the MIP."""

    architectures: tuple[str, ...] = ("shared", "disaggregated")
    redundancy: int = 0
    budget_usd_per_month: float | None = None
    max_utilization: float | None = None
    shared_single_device_type: bool = True
    time_limit_s: float = 60.0
    mip_gap: float = 1e-4
    threads: int = 1
    extra_notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass
class SolveOutcome:
    result: PlanResult
    prepared: Prepared
    built: Built | None


def _status(term: Any, has_solution: bool) -> str:
    name = getattr(term, "name", str(term))
    if name == "convergenceCriteriaSatisfied":
        return "optimal"
    if name in ("provenInfeasible", "locallyInfeasible", "infeasibleOrUnbounded"):
        return "infeasible"
    if name == "maxTimeLimit":
        return "time_limit" if has_solution else "error"
    return "feasible" if has_solution else "error"


def _binding(built: Built, tol: float = 1e-6) -> list[BindingConstraint]:
    import pyomo.environ as pe

    m = built.model
    out: list[BindingConstraint] = []
    for kind, comp in (("load", m.load_c), ("kv", m.kv), ("procurement", m.procurement)):
        for idx in comp:
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
    if pe.value(m.types_max) <= 1 and sum(round(m.u[t].value or 0) for t in m.T) >= 1 and len(built.prep.device_types) > 1:
        out.append(BindingConstraint(name="types_max", kind="device_types", detail="shared pool restricted to one device type"))
    return out


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
    res = solver.solve(built.model, time_limit=settings.time_limit_s, rel_gap=settings.mip_gap, threads=settings.threads,
                       load_solutions=False, raise_exception_on_nonoptimal_result=False,
                       solver_options={"random_seed": 0})
    wall = time.perf_counter() - t0
    highs_s = float(getattr(res.timing_info, "highs_time", wall) or wall)
    has_solution = getattr(res.solution_status, "name", "") in ("optimal", "feasible")
    status = _status(res.termination_condition, has_solution)
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
        diag2 = diagnose_solver_infeasible(built, architecture, settings) if status == "infeasible" else []
        return ArchitecturePlan(architecture=architecture, feasible=False, solver=info, diagnosis=diag2)
    t1 = time.perf_counter()
    res.solution_loader.load_vars()
    x, n, _z, _u = solution_arrays(built)
    prep = built.prep
    costs = cost_breakdown(prep.tables.costs, prep.tables.configs, prep.points, x, prep.pools, n, redundancy=settings.redundancy)
    pools, routing, latency = build_pools_routing_latency(built, x, n, settings.redundancy)
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
        power_kw_mean=kwh / prep.hours, solver=info, binding=binding,
    )


def _pool_costs(built: Built, x: Any, n: Any, total: Any) -> dict[str, float]:
    """Cost attributable to each pool: the cost terms recomputed with only that pool's instances and routes."""
    import numpy as np

    prep = built.prep
    out: dict[str, float] = {}
    for p, name in enumerate(built.pool_names):
        if n[p] <= 0:
            continue
        only_n = np.zeros_like(n)
        only_n[p] = n[p]
        sel = built.point_pool == p
        c = cost_breakdown(prep.tables.costs, prep.tables.configs, prep.points[sel], x[sel], prep.pools, only_n)
        # Device-type fixed cost is shared between pools; attribute it to none.
        out[name] = c.total_usd_per_month - c.ops_device_types_usd_per_month
    return out


def make_solver() -> Any:
    from pyomo.contrib.solver.solvers.highs import Highs

    return Highs()


def solve_tables(tables: CapacityTables, settings: SolveSettings, *, instance_name: str = "tables",
                 instance_path: str = "", scenario: str | None = None, overrides: dict[str, Any] | None = None) -> SolveOutcome:
    """Solve every requested architecture on one set of capacity tables and compare them."""
    for arch in settings.architectures:
        if arch not in ARCH_ROLES:
            raise ValueError(f"unknown architecture {arch!r}")
    t0 = time.perf_counter()
    prep = prepare(tables, max_utilization=settings.max_utilization)
    built = build_model(prep, redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
    built.build_s = time.perf_counter() - t0
    solver = make_solver()
    plans: dict[str, ArchitecturePlan] = {}
    for arch in settings.architectures:
        plans[arch] = solve_architecture(built, solver, arch, settings)
        built.build_s = 0.0  # the build is paid once; later architectures only re-solve
    verdict = make_verdict(plans, prep)
    used = sorted({i for plan in plans.values() for i in _used_points(plan, prep)})
    pts_cols = [c for c in prep.points.columns if c not in ("i",)]
    snapshot = CapacitySnapshot(
        demand=prep.demand.drop(columns=["d"]).to_dict("records"),
        points=prep.points.loc[used, pts_cols].to_dict("records"),
        configs=tables.configs.to_dict("records"),
        costs={k: float(v) for k, v in vars(tables.costs).items()},
        redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month,
        utilization_caps=[],
    )
    notes = list(settings.extra_notes) + [f"utilisation caps: {prep.caps_method}"]
    for arch, plan in plans.items():
        if plan.solver.status == "time_limit":
            notes.append(f"{arch}: stopped at the time limit ({settings.time_limit_s:g} s) with gap {plan.solver.gap or 0:.2%}; the plan is not proven optimal")
    result = PlanResult(instance=instance_name, instance_path=instance_path, scenario=scenario, overrides=overrides or {},
                        architectures=plans, verdict=verdict, capacity=snapshot, notes=notes)
    return SolveOutcome(result=result, prepared=prep, built=built)


def _used_points(plan: ArchitecturePlan, prep: Prepared) -> list[int]:
    if not plan.routing:
        return []
    key = prep.points.set_index(["service", "bucket", "role", "config"])["i"]
    return [int(key.loc[(r.service, r.bucket, r.role, r.config)]) for r in plan.routing]


def check_costs_match_model(built: Built, plan: ArchitecturePlan) -> dict[str, float]:
    """Differences between the solver's cost expressions and the recomputed terms (for tests)."""
    mc = model_costs(built)
    assert plan.costs is not None
    return {k: mc[k] - v for k, v in plan.costs.terms().items()}


def settings_from_instance(instance: Any, *, architectures: tuple[str, ...] | None = None, time_limit_s: float | None = None,
                           mip_gap: float | None = None) -> SolveSettings:
    """Solve settings from an instance's ``options``; command-line values win."""
    o = instance.options
    return SolveSettings(
        architectures=tuple(architectures or o.architectures), redundancy=o.redundancy, budget_usd_per_month=o.budget_usd_per_month,
        max_utilization=o.max_utilization, shared_single_device_type=o.shared_single_device_type,
        time_limit_s=time_limit_s if time_limit_s is not None else o.solver.time_limit_s,
        mip_gap=mip_gap if mip_gap is not None else o.solver.mip_gap, threads=o.solver.threads,
    )


def solve_instance(resolved: Any, settings: SolveSettings, *, capacity_file: str | None = None, scenario: str | None = None,
                   overrides: dict[str, Any] | None = None) -> SolveOutcome:
    """Capacity tables of an instance (optionally with measured capacity), then :func:`solve_tables`."""
    from planner.capacity import build_capacity_tables, read_measured_capacity

    tables = build_capacity_tables(resolved)
    if capacity_file:
        tables = read_measured_capacity(capacity_file, tables)
    raw_notes: Any = tables.meta.get("notes", [])
    notes = tuple(str(n) for n in raw_notes)
    s = SolveSettings(**{**settings.__dict__, "extra_notes": settings.extra_notes + notes})
    return solve_tables(tables, s, instance_name=resolved.instance.name, instance_path=str(resolved.path), scenario=scenario, overrides=overrides)
