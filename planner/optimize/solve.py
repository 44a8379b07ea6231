"""Solve wrapper: prepare → build once → per architecture the verify-and-tighten loop → verdict.

One built model serves every architecture (:mod:`planner.optimize.architecture`); each plan is
checked and its caps tightened by :mod:`planner.optimize.tighten` (the analytic check is
:mod:`planner.optimize.latency`); :mod:`planner.optimize.verdict` compares the final plans.
HiGHS runs single-threaded with a fixed random seed by default, so the same input gives the
same plan. Instances (capacity tables, the peak simulation wired in) are solved by
:func:`planner.solve_instance.solve_instance`.

The names other modules import from here (settings, the one-architecture solve, the analytic
check, the loop's pieces) are re-exported from the modules that now hold them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from planner.optimize.architecture import mixed_types_objective_usd, solve_architecture
from planner.optimize.extract import model_costs
from planner.optimize.highs import import_pyomo, make_solver, solver_status
from planner.optimize.latency import (
    POOL_LATENCY_COLUMNS,
    bucket_latency,
    pool_latency,
    predicted_pool_quantiles,
    tighten_factors,
)
from planner.optimize.model import Built, build_model
from planner.optimize.prepare import ARCH_ROLES, Prepared, prepare
from planner.optimize.reparam import InPlaceModel
from planner.optimize.settings import SolveSettings, settings_from_instance
from planner.optimize.tighten import (
    Remodel,
    simulated_factors,
    solve_verified,
    tighten_prepared,
    used_points,
)
from planner.optimize.verdict import make_verdict
from planner.progress import stage
from planner.schema.capacity import CapacityTables
from planner.schema.plan import ArchitecturePlan, BindingConstraint, CapacitySnapshot, PlanResult

__all__ = [
    "POOL_LATENCY_COLUMNS", "SolveOutcome", "SolveSettings", "bucket_latency", "check_costs_match_model", "make_solver",
    "pool_latency", "predicted_pool_quantiles", "settings_from_instance", "simulated_factors", "solve_architecture",
    "solve_tables", "solver_status", "tighten_factors", "tighten_prepared",
]

_status = solver_status  # kept for planner.studies.robust


@dataclass
class SolveOutcome:
    result: PlanResult
    prepared: Prepared
    built: Built | None
    """The model built from the tables (before any latency tightening)."""
    built_by_architecture: dict[str, Built] = field(default_factory=dict)
    """The model each architecture's final plan was solved on (another one when the latency check tightened caps:
    rebuilt, or for a small table the one model its rounds update in place, holding the values of the
    architecture's last solve, :func:`_remodel_in_place`)."""



def solve_tables(tables: CapacityTables, settings: SolveSettings, *, instance_name: str = "tables",
                 instance_path: str = "", scenario: str | None = None, overrides: dict[str, Any] | None = None,
                 built: Built | None = None, prepared: Prepared | None = None) -> SolveOutcome:
    """Solve every requested architecture on one set of capacity tables and compare them.

    ``built``: a model already built from ``tables`` by :func:`build_model` (with the same
    redundancy and budget); it is restricted and re-solved instead of building a new one.
    ``prepared``: ``prepare(tables, max_utilization=settings.max_utilization)`` computed already
    (:func:`planner.capacity_cache.cached_prepared` keeps it on disk); the model is built from it.
    Each architecture's plan is verified (and its caps tightened) as the module docstring says.
    """
    for arch in settings.architectures:
        if arch not in ARCH_ROLES:
            raise ValueError(f"unknown architecture {arch!r}")
    import_pyomo()  # before the queueing caps import scipy (planner.optimize.highs.import_pyomo)
    t0 = time.perf_counter()
    if built is None:
        with stage("build model"):
            prep = prepared if prepared is not None else prepare(tables, max_utilization=settings.max_utilization)
            built = build_model(prep, redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
        built.build_s = time.perf_counter() - t0
    prep = built.prep
    solver = make_solver()
    plans: dict[str, ArchitecturePlan] = {}
    caps: list[dict[str, Any]] = []
    final_built: dict[str, Built] = {}
    history: list[str] = []
    for arch in settings.architectures:
        with stage(f"solve {arch}"):
            plan, used_built, arch_caps = solve_verified(built, solver, arch, settings, remodel=_remodel_in_place(built, settings))
        if arch == "shared":  # on the model as the shared plan left it (a model updated in place changes with the next architecture)
            with stage("shared: one device type"):
                plan = _single_type_limit(plan, used_built, solver, settings)
        plans[arch] = plan
        final_built[arch] = used_built
        caps += [c for c in arch_caps if "note" not in c]
        history += [str(c["note"]) for c in arch_caps if "note" in c]
        built.build_s = 0.0  # the build is paid once; later architectures only re-solve
    verdict = make_verdict(plans, prep)
    used = sorted({i for plan in plans.values() for i in used_points(plan, prep)})
    pts_cols = [c for c in prep.points.columns if c not in ("i",)]
    snapshot = CapacitySnapshot(
        demand=prep.demand.drop(columns=["d"]).to_dict("records"),
        points=prep.points.loc[used, pts_cols].to_dict("records"),
        configs=tables.configs.to_dict("records"),
        costs={k: float(v) for k, v in vars(tables.costs).items()},
        redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month,
        utilization_caps=caps, max_utilization=prep.max_utilization,  # the bound the caps note states (prep.caps_method)
    )
    notes = list(settings.extra_notes) + [f"utilisation caps: {prep.caps_method}"]
    for arch, plan in plans.items():
        if plan.solver.rounds > 1:
            if any(c.get("architecture") == arch for c in caps):
                notes.append(f"{arch}: the latency check tightened utilisation caps and re-solved ({plan.solver.rounds} solves); "
                             "tightened caps are listed in capacity.utilization_caps")
            else:  # e.g. step 8's tries (planner.optimize.tighten), which change no cap of the plan kept
                notes.append(f"{arch}: the latency check re-solved ({plan.solver.rounds} solves) and kept every utilisation cap")
            notes += [h for h in history if h.startswith(f"{arch}:")]
        if plan.feasible and not all(lp.ttft_met and lp.tpot_met for lp in plan.latency):
            notes.append(f"{arch}: predicted latency misses a target after {plan.solver.rounds} solve(s); see the latency table")
        if plan.solver.status == "time_limit":
            notes.append(f"{arch}: stopped at the time limit ({settings.time_limit_s:g} s) with gap {plan.solver.gap or 0:.2%}; the plan is not proven optimal")
    result = PlanResult(instance=instance_name, instance_path=instance_path, scenario=scenario, overrides=overrides or {},
                        architectures=plans, verdict=verdict, capacity=snapshot, notes=notes)
    return SolveOutcome(result=result, prepared=prep, built=built, built_by_architecture=final_built)


MIXED_TYPES_MIN_S = 0.5
"""Seconds the one-device-type check's solve may always take (:func:`_single_type_limit`)."""
MIXED_TYPES_SHARE = 0.1
"""Beyond that, the share of the shared plan's own HiGHS time it may take."""


def _single_type_limit(plan: ArchitecturePlan, built: Built, solver: Any, settings: SolveSettings) -> ArchitecturePlan:
    """``plan`` (the shared architecture's) with the one-device-type rule among what limits it when, and only when,
    the rule costs it something: the same model solved with every device type allowed finds a plan cheaper by more
    than the MIP gap (and at least 1 USD/month; :func:`planner.optimize.architecture.mixed_types_objective_usd`).
    The rule is at its bound in every shared plan over a catalog of several types, so "at its bound" says nothing;
    the saving is what the verdict and the report quote. Unchanged without the rule, with one device type in the
    catalog, for a plan without a solution, or when the check's solve, held to a share of the shared solve's time
    (:data:`MIXED_TYPES_SHARE`, at least :data:`MIXED_TYPES_MIN_S`), finds no cheaper plan in that time: the rule is
    then not claimed to limit the plan (on the fleet-scale synthetic instance the unrestricted shared MIP took longer
    than the whole solve's budget allows)."""
    if not (plan.feasible and settings.shared_single_device_type and plan.solver.objective_usd_per_month is not None
            and len(built.prep.device_types) > 1):
        return plan
    # at most a tenth of the shared solve's own HiGHS time (0.5 s at least): the check must not cost a fleet-scale solve
    # a second MIP of its size (the mixed-type model is the harder one); a solve stopped there offers its best plan so far
    budget_s = min(settings.time_limit_s, max(MIXED_TYPES_MIN_S, MIXED_TYPES_SHARE * float(plan.solver.time_s or 0.0)))
    mixed = mixed_types_objective_usd(built, solver, settings, time_limit_s=budget_s)
    cost = float(plan.solver.objective_usd_per_month)
    if mixed is None or cost - mixed <= max(1.0, settings.mip_gap * abs(cost)):
        return plan
    limit = BindingConstraint(name="types_max", kind="device_types",
                              detail=f"a mix of device types would cost {cost - mixed:,.0f} USD/month less ({mixed:,.0f} against "
                                     f"{cost:,.0f}: the shared plan solved with options.shared_single_device_type false on the "
                                     "same utilisation caps, not checked for latency)")
    return plan.model_copy(update={"binding": [*plan.binding, limit]})


IN_PLACE_MAX_POINTS = 2000
"""Largest prepared table (points) whose tightening rounds update one model in place (:func:`_remodel_in_place`).

Measured (CPU, tables cached, plan solved again, 5 runs): ``enterprise-chat`` (144 points, 7 MIPs)
1.66 -> 1.51 s; ``code-completion-8b`` (23 MIPs) 5.18 -> 5.01 s, same plans. The in-place model has
mutable coefficients, which pyomo's persistent HiGHS interface evaluates one expression each when it
loads the model: 15 of the 24 s of the hand-over at the 97 k-variable fleet scale
(:func:`planner.optimize.model.build_model`), so a large table keeps rebuilding with constants."""


def _remodel_in_place(built: Built, settings: SolveSettings) -> Remodel | None:
    """The tightening rounds' models of one architecture (:func:`solve_verified`'s ``remodel``): one
    second model of ``built``'s structure set in place each round (:class:`planner.optimize.reparam.InPlaceModel`,
    as the studies' :meth:`planner.optimize.resolve.Resolver.remodel`; issue 27: 4 of the README example's
    7 MIPs). None (rebuild every round) above :data:`IN_PLACE_MAX_POINTS` points.

    The rounds share that model, so the :class:`Built` of a round's plan holds the variable values of
    the architecture's last solve, not necessarily its own (:attr:`SolveOutcome.built_by_architecture`)."""
    if len(built.prep.points) > IN_PLACE_MAX_POINTS:
        return None
    models = InPlaceModel(built.prep, settings.redundancy, settings.budget_usd_per_month)
    return lambda prep: models.load(prep, settings)


def check_costs_match_model(built: Built, plan: ArchitecturePlan) -> dict[str, float]:
    """Differences between the solver's cost expressions and the recomputed terms (for tests)."""
    mc = model_costs(built)
    assert plan.costs is not None
    return {k: mc.get(k, 0.0) - v for k, v in plan.costs.terms().items()}  # a term the model lacks must be 0
