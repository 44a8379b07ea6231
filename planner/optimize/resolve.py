r"""Re-solving a built model for scenarios that change only rates, prices or the budget.

A sweep asks the same question of many capacity tables that differ only in the demand
rates (traffic growth), the electricity price or the budget. Building the pyomo model is
the expensive step (STYLE §12), so :class:`Resolver` builds it once and, for each scenario,
only updates mutable parameters that pyomo's persistent HiGHS interface pushes to the
solver as coefficient changes:

- ``lam_peak[d]``, ``lam_mean[d]`` — the scenario's rates (requests/s);
- ``load_coef[i]`` — ``τ_i / ρ_i``, instance-seconds per request over the utilisation cap of
  point ``i``. The cap comes from the queueing model with a nominal pool ``n0 = ceil(λ_peak τ)``
  (:func:`planner.optimize.prepare.utilization_caps`), so it depends on the rate: it is
  recomputed for every scenario exactly as a fresh solve would. The ``load[p]`` constraint
  :math:`\sum_{i \in I_p} \lambda^{peak}_{d(i)} (\tau_i / \rho_i) x_i \le n_p - k z_p` is
  :func:`planner.optimize.model.build_model`'s own (``mutable_rates=True``), in its place, and each
  coefficient evaluates to the float a fresh build computes, so HiGHS is handed the very LP of
  a fresh build — the same rows and columns in the same order, bit for bit (issue 24 item 1: when
  the Resolver rebuilt ``load`` and ``pool_on`` at the end of the model, with ``λ·τ·(1/ρ)``, the
  solution moved in its last bits and a knife-edge latency check sent a sweep's tightening loop
  to another plan than ``planner solve``'s; ``tests/test_resolve_same_lp.py``);
- ``price`` (USD/kWh) and ``budget`` (USD/month; the ``budget`` constraint is switched on
  or off).

The integer bound ``N_p`` (big-M of ``pool_on[p]``, and the upper bound of ``n[p]``) is
computed by :func:`planner.optimize.prepare.prepare` from the rates; the Resolver makes it
a mutable parameter ``big_m[p]`` (:func:`build_model`'s, ``mutable_rates=True``) and sets it (and the bound of ``n[p]``) per scenario to
exactly what a fresh build would use, so the re-solved model *is* the fresh model (a loose
big-M would leave the optimum unchanged but weaken the LP relaxation: measured 2-3x slower
HiGHS on the example instance). ``min_n_max`` puts a floor under it for held plans
(:mod:`planner.studies.fixed`). A scenario falls back to a full rebuild
(:func:`planner.optimize.solve.solve_tables`) when

- its points, configs, non-rate demand columns or non-price cost scalars differ from the
  base table (a length multiplier or a device change alters the capacity table itself), or
- a different set of points has a positive cap (ρ > 0), or
- the table has a tool phase (``tables.agents``: its coefficients and the CPU pool's
  big-M are built from the rates, so every scenario is built afresh).

Caps ρ are memoised by the peak-rate vector (a price-only scenario re-uses them exactly).

The result is the same :class:`~planner.schema.plan.PlanResult` a fresh
``solve_tables`` gives, up to the MIP gap (ties between equal-cost plans may break
differently); ``SolveOutcome.result.notes`` says which path was taken.

The lean summaries of sweeps (:func:`summarize`) run the same analytic tail-latency check as
``planner solve`` (:func:`planner.optimize.latency.tighten_factors`) on every solution; one that
misses is re-solved on the full path (caps tightened, at most ``SolveSettings.verify_rounds``
rounds; each tightened model is this Resolver's second model with the tightened caps set in place,
:meth:`Resolver.remodel`, the LP a rebuild gives), so a sweep row is the plan ``solve_tables`` returns. When
the settings carry the peak simulation (``SolveSettings.simulation_check``: ``planner solve`` wires
it in when the instance's ``options.verify`` is on, and so do studies, through
:func:`planner.solve_instance.instance_settings`), every architecture takes the full loop
(:func:`planner.optimize.tighten.solve_verified`: solve, analytic check, peak simulation, tighten),
so a study's row at the plan's own scenario is the plan ``planner solve`` wrote, and a plan that
misses in simulation ranks after those that meet, as in the verdict (:func:`winner_of`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from planner.optimize.architecture import solve_architecture
from planner.optimize.highs import make_solver, solve_persistent, solver_status
from planner.optimize.model import COST_EXPRESSIONS, Built, build_model, restrict
from planner.optimize.prepare import (
    ARCH_ROLES,
    Prepared,
    encode_split_ttft,
    pool_n_max,
    prepare,
    utilization_caps,
)
from planner.optimize.reparam import InPlaceModel, point_keys, set_parameters
from planner.optimize.settings import SolveSettings
from planner.optimize.solve import SolveOutcome, solve_tables
from planner.optimize.tighten import Remodel, user_max_utilization
from planner.optimize.verdict import make_verdict
from planner.schema.capacity import CapacityTables
from planner.schema.plan import ArchitecturePlan, CapacitySnapshot, PlanResult

RATE_COLUMNS: tuple[str, ...] = ("rate_mean_per_s", "rate_peak_per_s")
_PRICE_FIELD = "electricity_usd_per_kwh"


def same_structure(a: CapacityTables, b: CapacityTables) -> bool:
    """True when ``b`` differs from ``a`` only in demand rates and the electricity price."""
    # the same frame object is equal to itself (a rate or price patch keeps the base's points and configs)
    if a.points is not b.points and not a.points.equals(b.points):
        return False
    if a.configs is not b.configs and not a.configs.equals(b.configs):
        return False
    da = a.demand.drop(columns=list(RATE_COLUMNS))
    db = b.demand.drop(columns=list(RATE_COLUMNS))
    if not da.equals(db):
        return False
    ca = {k: v for k, v in vars(a.costs).items() if k != _PRICE_FIELD}
    cb = {k: v for k, v in vars(b.costs).items() if k != _PRICE_FIELD}
    return ca == cb


def scale_rates(tables: CapacityTables, multipliers: dict[str, float]) -> CapacityTables:
    """Tables with each named service's mean and peak rates multiplied (``{service: m}``).

    This is what ``services.<s>.traffic.rate_multiplier`` does to the capacity table's demand rows. The
    operating points are kept as built. Approximation: ``planner.capacity`` chooses a prefill point's batch
    at its latency group's rate and a unified point's batch with the lane wait of its service's rate, so a
    table rebuilt at the new rate can hold a slightly different point; on enterprise-chat at x0.25-x3 the
    plans are the same and the totals differ by at most 0.02 % (busy power), the patched table's the dearer
    (``tests/test_studies.py::test_instance_sweep_equals_individual_solves``).
    """
    demand = tables.demand.copy()
    for svc, mult in multipliers.items():
        sel = demand["service"] == svc
        if not bool(sel.any()):
            raise ValueError(f"no service {svc!r} in the capacity table (services: {', '.join(sorted(demand['service'].unique()))})")
        for col in RATE_COLUMNS:
            demand.loc[sel, col] = demand.loc[sel, col].astype(float) * float(mult)
    return replace(tables, demand=demand)


def with_price(tables: CapacityTables, electricity_usd_per_kwh: float) -> CapacityTables:
    return replace(tables, costs=replace(tables.costs, electricity_usd_per_kwh=float(electricity_usd_per_kwh)))


CapFactors = dict[tuple[str, str, str, str], float]
"""Per point (service, bucket, role, config): the factor ``f`` a solve divided its queueing cap by
(``CapacitySnapshot.utilization_caps[*].tightening_factor``; below 1 when the cap was relaxed)."""


def cap_factors_of(caps: list[dict[str, Any]], architecture: str) -> CapFactors:
    """The per-point cap factors a plan's verify-and-tighten loop applied to ``architecture``
    (records of ``CapacitySnapshot.utilization_caps``; notes are skipped)."""
    out: CapFactors = {}
    for c in caps:
        if c.get("architecture") != architecture or "tightening_factor" not in c:
            continue
        out[(str(c["service"]), str(c["bucket"]), str(c["role"]), str(c["config"]))] = float(c["tightening_factor"])
    return out


def apply_cap_factors(prep: Prepared, factors: CapFactors | None) -> Prepared:
    """``prep`` with each named point's cap divided by its factor: ``ρ = min(ρ_queueing / f, 1)`` (a relaxed
    cap, ``f < 1``, at most ``options.max_utilization`` when set, :attr:`Prepared.max_utilization`), the
    load coefficient ``λ τ / ρ`` and the pools' big-M recomputed (:func:`planner.optimize.prepare.pool_n_max`). This is the
    model a plan's final solve used (:func:`planner.optimize.tighten.solve_verified` records
    ``f = ρ_queueing / ρ`` per point), at any rates: ``ρ_queueing`` follows the rates as
    :func:`prepare` computes it, the factor is held."""
    if not factors:
        return prep
    pts = prep.points
    f = np.array([factors.get(k, 1.0) for k in point_keys(prep)], dtype=float)
    if np.all(f == 1.0):
        return prep
    # a relaxed cap (f < 1) never above options.max_utilization, whatever the rates (planner.optimize.latency.relax_ceiling)
    user = getattr(prep, "max_utilization", None)
    top = 1.0 if user is None else min(1.0, float(user))
    rho = np.minimum(pts["rho"].to_numpy(float) / f, np.maximum(pts["rho"].to_numpy(float), top))
    pts = pts.assign(rho=rho, load_peak_coef=pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / rho)
    pools = prep.pools.assign(n_max=np.maximum(prep.pools["n_max"].to_numpy(int), pool_n_max(pts, prep.pools)))
    tool = prep.tool
    if tool is not None:
        from planner.agents.prep import refresh_caps

        tool = refresh_caps(tool, pts)  # reload/recompute load coefficients carry 1/rho too
    return replace(prep, points=pts, pools=pools, tool=tool)


@dataclass
class Resolver:
    """One built model, re-solved for many scenarios of the same capacity-table structure."""

    base: CapacityTables
    settings: SolveSettings
    built: Built
    solver: Any
    keys: list[tuple[str, str, str, str]]
    envelope_n_max: np.ndarray
    """Per pool: the big-M the model was built with (without redundancy)."""
    stats: dict[str, int] = field(default_factory=lambda: {"resolved": 0, "rebuilt": 0})
    _routable: int = 0
    """Feasible points of the base table before caps (equal to the model's points when no cap is 0)."""
    _caps: dict[bytes, tuple[np.ndarray, str]] = field(default_factory=dict)
    """Caps ρ by the bytes of the peak-rate vector: the queueing caps depend only on the rates
    (every other input is the base table's), so equal rates give equal caps (exact memo)."""
    _unroutable: dict[str, bool] = field(default_factory=dict)
    """Per architecture: a bucket has no usable point (depends only on the point set, fixed here)."""
    min_n_max: np.ndarray | None = None
    """Per pool: a floor on the big-M (a held plan's counts), or None."""
    reusable: bool = True
    """False when the table has a tool phase (its coefficients and CPU big-M are built from the rates): always rebuild."""
    cap_factors: CapFactors | None = None
    """Per point: the factor a held plan's solve divided its cap by (:func:`apply_cap_factors`), or None."""
    _in_place: InPlaceModel | None = None
    """The second model of this structure, for the tightening rounds (:meth:`remodel`)."""

    @classmethod
    def create(cls, tables: CapacityTables, settings: SolveSettings, *, rate_headroom: float = 1.0,
               min_n_max: dict[str, int] | None = None, cap_factors: CapFactors | None = None) -> Resolver:
        """Build the model for ``tables`` with big-M sized for rates up to ``rate_headroom`` × the base.

        ``min_n_max`` (pool name -> instances) raises the big-M of named pools to at least
        that many instances (a fixed plan evaluated at lower traffic keeps its pool sizes).
        ``cap_factors``: the caps a plan's own solve ended with (:func:`apply_cap_factors`), for
        every scenario this resolver loads.
        """
        from planner.optimize.highs import import_pyomo

        import_pyomo()  # not scipy.stats with it (planner.optimize.highs.import_pyomo)

        t0 = time.perf_counter()
        raw = prepare(tables, max_utilization=settings.max_utilization)
        # the caps prepare() just computed, for the base rates: reprepare() at these rates re-uses them
        caps_seed = {raw.points["rate_peak_per_s"].to_numpy(float).tobytes(): (raw.points["rho"].to_numpy(float).copy(), raw.caps_method)}
        prep = apply_cap_factors(raw, cap_factors)
        pools = prep.pools.copy()
        headroom = max(1.0, float(rate_headroom))
        # n_max = ceil(Σ_d max_i λτ/ρ) + 1: scaling every rate by h scales the sum by h
        # (ρ only grows with the nominal pool size, so this over-estimates, as a big-M must).
        pools["n_max"] = [int(math.ceil((int(v) - 1) * headroom)) + 1 for v in pools["n_max"]]
        if min_n_max:
            pools["n_max"] = [max(int(v), int(min_n_max.get(str(name), 0))) for name, v in zip(pools["pool"], pools["n_max"], strict=True)]
        prep.pools = pools
        budget = settings.budget_usd_per_month
        built = build_model(prep, redundancy=settings.redundancy, budget_usd_per_month=budget, mutable_rates=True)
        built.build_s = time.perf_counter() - t0
        feasible = tables.points["feasible"].astype(bool) & (tables.points["instance_seconds_per_request"] > 0)
        routable = int(tables.points[feasible].merge(tables.demand[["service", "bucket"]], on=["service", "bucket"]).shape[0])
        floor = None
        if min_n_max:
            floor = np.array([int(min_n_max.get(str(name), 0)) for name in pools["pool"]], dtype=int)
        return cls(base=tables, settings=settings, built=built, solver=make_solver(), keys=point_keys(prep),
                   envelope_n_max=pools["n_max"].to_numpy(int), _routable=routable, min_n_max=floor,
                   reusable=getattr(prep, "tool", None) is None, cap_factors=cap_factors, _caps=caps_seed)

    def reprepare(self, tables: CapacityTables) -> Prepared | None:
        """:func:`prepare` for a table of the base's structure, recomputing only what rates change.

        Updates the demand rates, the caps ρ (the queueing model, as :func:`prepare` computes
        them), the load and KV coefficients and the per-pool big-M. Returns None when a
        point's cap changes sign (it would enter or leave the model): rebuild then.
        """
        base = self.built.prep
        if not self.reusable:
            return None
        if len(base.points) != self._routable:
            return None  # the base dropped points with a zero cap; let prepare() decide each time
        demand = base.demand.copy()
        for col in RATE_COLUMNS:
            demand[col] = tables.demand[col].astype(float).to_numpy()
        pts = base.points.copy()
        d = pts["d"].to_numpy(int)
        for col in RATE_COLUMNS:
            pts[col] = demand[col].to_numpy(float)[d]
        rates_key = pts["rate_peak_per_s"].to_numpy(float).tobytes()
        if rates_key not in self._caps:
            if len(self._caps) > 4096:
                self._caps.clear()
            # the same caps prepare() computes: multimodal rows split the TTFT slack with the encode stage
            self._caps[rates_key] = utilization_caps(encode_split_ttft(pts, demand), max_utilization=self.settings.max_utilization)
        rho, method = self._caps[rates_key]
        rho = rho.copy()
        if np.any(rho <= 0):
            return None
        pts["rho"] = rho
        pts["load_peak_coef"] = pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / pts["rho"]
        pts["load_mean_coef"] = pts["rate_mean_per_s"] * pts["instance_seconds_per_request"]
        pts["kv_peak_coef"] = pts["rate_peak_per_s"] * pts["kv_bytes_per_request"] * pts["kv_hold_s"]
        pools = base.pools.copy()
        n_max = pool_n_max(pts, pools)
        pools["n_max"] = n_max
        return apply_cap_factors(Prepared(tables=tables, demand=demand, points=pts, pools=pools, device_types=base.device_types,
                                          procurement=base.procurement, caps_method=method, infeasible_points=base.infeasible_points,
                                          max_utilization=self.settings.max_utilization),
                                 self.cap_factors)

    def fits(self, prep: Prepared) -> bool:
        """Can ``prep`` (same structure as the base) be solved by updating parameters?"""
        return point_keys(prep) == self.keys

    def load(self, tables: CapacityTables, settings: SolveSettings | None = None) -> Built | None:
        """Set the built model's parameters to ``tables`` (same structure); None when it needs a rebuild."""
        s = settings or self.settings
        prep = self.reprepare(tables) if same_structure(self.base, tables) else None
        if prep is None or not self.fits(prep):
            return None
        self._update(prep, tables, s)
        return self.built

    def solve(self, tables: CapacityTables, settings: SolveSettings | None = None, *, instance_name: str = "tables",
              scenario: str | None = None, overrides: dict[str, Any] | None = None) -> SolveOutcome:
        """Solve ``tables`` (by re-solving the built model when possible, else from scratch)."""
        s = settings or self.settings
        if (s.redundancy, s.max_utilization, s.shared_single_device_type) != (
                self.settings.redundancy, self.settings.max_utilization, self.settings.shared_single_device_type):
            raise ValueError("a Resolver re-solves only scenarios with the same redundancy, max_utilization and shared_single_device_type")
        prep = self.reprepare(tables) if same_structure(self.base, tables) else None
        if prep is None or not self.fits(prep):
            self.stats["rebuilt"] += 1
            out = solve_tables(tables, s, instance_name=instance_name, scenario=scenario, overrides=overrides)
            out.result.notes.append("studies: model rebuilt for this scenario (capacity table differs from the base)")
            return out
        self.stats["resolved"] += 1
        t0 = time.perf_counter()
        self._update(prep, tables, s)
        update_s = time.perf_counter() - t0
        plans: dict[str, ArchitecturePlan] = {}
        for arch in s.architectures:
            if arch not in ARCH_ROLES:
                raise ValueError(f"unknown architecture {arch!r}")
            plans[arch] = solve_architecture(self.built, self.solver, arch, s)
        result = assemble_result(plans, self.built.prep, tables, s, instance_name=instance_name, scenario=scenario,
                                 overrides=overrides)
        result.notes.append(f"studies: re-solved the built model with updated rates/price/budget ({update_s:.3f} s to update)")
        return SolveOutcome(result=result, prepared=self.built.prep, built=self.built)

    def _update(self, prep: Prepared, tables: CapacityTables, s: SolveSettings) -> None:
        n_max = prep.pools["n_max"].to_numpy(int)
        if self.min_n_max is not None:
            n_max = np.maximum(n_max, self.min_n_max)
            prep.pools = prep.pools.assign(n_max=n_max)
        set_parameters(self.built, prep, tables, s)

    def remodel(self, s: SolveSettings) -> Callable[[Prepared], tuple[Built, Any] | None]:
        """The model of a tightened or relaxed ``prep`` (:func:`planner.optimize.tighten.solve_verified`'s
        ``remodel``): a second built model of this structure, kept per Resolver, with the prep's rates, caps,
        big-M, price and ``s``'s budget set in place (issue 27: the rebuild and the hand-over to HiGHS were
        ~10 % of a sweep). It is the LP :func:`build_model` would build from ``prep``, bit for bit (same
        rows and columns, the same coefficients: ``tests/test_resolve_same_lp.py``); None (build it) when
        ``prep`` is not of this structure or the table has a tool phase. Each call returns a new
        :class:`Built` holding ``prep``, over the one shared pyomo model: the loop solves a model right
        after loading it and reads only the prep of earlier ones."""

        if self._in_place is None:
            self._in_place = InPlaceModel(self.built.prep, self.settings.redundancy, self.settings.budget_usd_per_month)
        models = self._in_place

        def load(prep: Prepared) -> tuple[Built, Any] | None:
            return models.load(prep, s) if self.reusable else None

        return load


def assemble_result(plans: dict[str, ArchitecturePlan], prep: Prepared, tables: CapacityTables, settings: SolveSettings, *,
                    instance_name: str, scenario: str | None, overrides: dict[str, Any] | None) -> PlanResult:
    """The :class:`PlanResult` of solved architecture plans (as :func:`solve_tables` assembles it)."""
    verdict = make_verdict(plans, prep)
    key = prep.points.set_index(["service", "bucket", "role", "config"])["i"]
    used = sorted({int(key.loc[(r.service, r.bucket, r.role, r.config)]) for p in plans.values() for r in p.routing})
    pts_cols = [c for c in prep.points.columns if c != "i"]
    snapshot = CapacitySnapshot(
        demand=prep.demand.drop(columns=["d"]).to_dict("records"),
        points=prep.points.loc[used, pts_cols].to_dict("records"),
        configs=tables.configs.to_dict("records"),
        costs={k: float(v) for k, v in vars(tables.costs).items()},
        redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month, utilization_caps=[],
        max_utilization=prep.max_utilization,
    )
    notes = list(settings.extra_notes) + [f"utilisation caps: {prep.caps_method}"]
    for arch, plan in plans.items():
        if plan.solver.status == "time_limit":
            notes.append(f"{arch}: stopped at the time limit ({settings.time_limit_s:g} s) with gap {plan.solver.gap or 0:.2%}; the plan is not proven optimal")
    return PlanResult(instance=instance_name, scenario=scenario, overrides=overrides or {}, architectures=plans,
                      verdict=verdict, capacity=snapshot, notes=notes)


SIMPLICITY: dict[str, int] = {"shared": 0, "disaggregated": 1, "hybrid": 2}
"""Tie-break of :func:`planner.optimize.verdict.make_verdict`: equal cost (to the cent) goes to the simpler."""


@dataclass(frozen=True)
class ArchitectureSummary:
    """What a sweep row needs from one solved architecture (no per-pool cost attribution)."""

    architecture: str
    feasible: bool
    status: str
    costs: dict[str, float]
    """Cost terms (:data:`planner.schema.plan.COST_TERMS`) as the solver's expressions evaluate them."""
    total_usd_per_month: float | None
    instances: dict[str, int]
    """Pool name -> instances (pools with at least one)."""
    devices: dict[str, int]
    """Device id -> devices over all pools."""
    tokens_per_month: float
    usd_per_million_tokens: float | None
    energy_wh_per_1k_tokens: float | None
    solve_s: float
    gap: float | None
    meets_targets: bool = True
    """The plan meets its targets as predicted and, when it was simulated at peak, in the simulation
    (:func:`planner.optimize.verdict.meets_targets`); the verdict ranks plans that miss last."""


def winner_of(summaries: dict[str, ArchitectureSummary]) -> str | None:
    """The cheapest feasible architecture, as the verdict picks it: plans that meet their targets
    first (:func:`planner.optimize.verdict.make_verdict`), then totals within
    :data:`planner.optimize.verdict.TIE_REL_TOL` (or half a cent) of the cheapest tie, and the tie
    goes to fewer devices, then fewer pools, then the simpler architecture."""
    from planner.optimize.verdict import TIE_REL_TOL

    ok = [s for s in summaries.values() if s.feasible and s.total_usd_per_month is not None]
    if not ok:
        return None
    if any(s.meets_targets for s in ok):
        ok = [s for s in ok if s.meets_targets]
    best = min(float(s.total_usd_per_month or 0.0) for s in ok)
    tied = [s for s in ok if float(s.total_usd_per_month or 0.0) - best <= max(TIE_REL_TOL * abs(best), 0.005)]
    return min(tied, key=lambda s: (sum(s.devices.values()), len(s.instances), SIMPLICITY[s.architecture])).architecture


def _lean_architecture(built: Built, solver: Any, architecture: str, settings: SolveSettings,
                       unroutable: dict[str, bool] | None = None, remodel: Remodel | None = None) -> ArchitectureSummary:
    from planner.optimize.diagnose import diagnose_routability
    from planner.optimize.extract import (
        energy_kwh_per_month,
        model_costs,
        solution_arrays,
        tokens_per_month,
    )
    from planner.optimize.trace import record

    empty = ArchitectureSummary(architecture=architecture, feasible=False, status="infeasible", costs={}, total_usd_per_month=None,
                                instances={}, devices={}, tokens_per_month=0.0, usd_per_million_tokens=None,
                                energy_wh_per_1k_tokens=None, solve_s=0.0, gap=None)
    if unroutable is None or architecture not in unroutable:
        bad = bool(diagnose_routability(built.prep, architecture))
        if unroutable is not None:
            unroutable[architecture] = bad
    else:
        bad = unroutable[architecture]
    if bad:
        return empty
    if settings.simulation_check is not None:
        # `planner solve` simulates every plan at peak and tightens the pools that miss: so does a study
        # (the same loop, planner.optimize.tighten.solve_verified), so its row is solve's plan
        return _verified_summary(built, solver, architecture, settings, remodel=remodel)
    restrict(built, architecture, shared_single_device_type=settings.shared_single_device_type)
    t0 = time.perf_counter()
    res = solve_persistent(solver, built.model, time_limit=settings.time_limit_s, rel_gap=settings.mip_gap, threads=settings.threads,
                           load_solutions=False, raise_exception_on_nonoptimal_result=False, solver_options={"random_seed": 0})
    wall = time.perf_counter() - t0
    has_solution = getattr(res.solution_status, "name", "") in ("optimal", "feasible")
    status = solver_status(res.termination_condition, has_solution)
    if not has_solution:
        record(architecture, status)
        return replace(empty, status=status, solve_s=wall)
    res.solution_loader.load_vars()
    x, n, _z, _u = solution_arrays(built)
    record(architecture, status, x, n)
    costs = model_costs(built)
    total = float(sum(costs.values()))
    pools = built.prep.pools
    instances = {str(pools["pool"].iat[p]): int(n[p]) for p in range(len(pools)) if n[p] > 0}
    devices: dict[str, int] = {}
    for p in range(len(pools)):
        if n[p] > 0:
            dev = str(pools["device"].iat[p])
            devices[dev] = devices.get(dev, 0) + int(n[p]) * int(pools["tp"].to_numpy(int)[p])
    tokens = tokens_per_month(built, x)
    kwh = energy_kwh_per_month(built)  # facility energy incl. the tool phase; independent of the price
    obj, bound = res.incumbent_objective, res.objective_bound
    gap = max(0.0, (obj - bound) / abs(obj)) if obj is not None and bound is not None and abs(obj) > 1e-9 else None
    full, meets = _latency_check(built, x, n, architecture, settings)
    if (settings.verify_rounds > 0 or settings.relax) and full:
        # the lean plan fails the analytic tail-latency check (or has caps the loop relaxes): take the
        # full path (tightened caps, Resolver.remodel's models) so a study reports the plan `planner solve` would give;
        # it starts from this solution (not solved again)
        from planner.optimize.architecture import plan_from_results

        return _verified_summary(built, solver, architecture, settings, plan_from_results(built, res, wall, architecture, settings),
                                 remodel=remodel)
    return ArchitectureSummary(architecture=architecture, feasible=True, status=status, costs=costs, total_usd_per_month=total,
                               instances=instances, devices=devices, tokens_per_month=tokens,
                               usd_per_million_tokens=total / tokens * 1e6 if tokens > 0 else None,
                               energy_wh_per_1k_tokens=kwh * 1e3 / tokens * 1e3 if tokens > 0 else None, solve_s=wall, gap=gap,
                               meets_targets=meets)


def _latency_check(built: Built, x: np.ndarray, n: np.ndarray, architecture: str, settings: SolveSettings) -> tuple[bool, bool]:
    """(``planner solve`` would take the full loop, the plan meets its predicted targets).

    The first is True when the solution fails the analytic tail-latency check of ``planner solve``
    (:func:`planner.optimize.latency.tighten_factors` names a pool to tighten), or has caps the
    full loop would relax: either way ``planner solve`` takes the full path, and so does a sweep.
    The second is what the verdict ranks by (:func:`planner.optimize.verdict.meets_predicted`)."""
    from planner.optimize.extract import build_pools_routing_latency
    from planner.optimize.latency import relax_ceiling, relax_factors, tighten_factors
    from planner.schema.plan import SolverInfo

    pools, routing, latency = build_pools_routing_latency(built, x, n, settings.redundancy)
    plan = ArchitecturePlan(architecture=architecture, feasible=True, pools=pools, routing=routing, latency=latency,
                            solver=SolverInfo(status="optimal"))
    from planner.optimize.verdict import meets_predicted

    meets = meets_predicted(plan)
    factors, _buckets = tighten_factors(built.prep, plan, settings.redundancy)
    if factors:
        return True, meets
    # caps far tighter than the pools need: the full loop relaxes them (planner.optimize.latency.relax_factors)
    top = relax_ceiling(user_max_utilization(built.prep, settings))  # as the full loop relaxes: within options.max_utilization
    return bool(settings.relax and relax_factors(built.prep, plan, settings.redundancy, ceiling=top)), meets


def _verified_summary(built: Built, solver: Any, architecture: str, settings: SolveSettings,
                      first: ArchitecturePlan | None = None, remodel: Remodel | None = None) -> ArchitectureSummary:
    """The summary of :func:`planner.optimize.tighten.solve_verified`'s plan (solve — unless ``first`` is
    the plan of ``built`` already —, check, tighten)."""
    from planner.optimize.tighten import solve_verified
    from planner.optimize.verdict import meets_targets

    plan, _final, _caps = solve_verified(built, solver, architecture, settings, first=first, remodel=remodel)
    devices: dict[str, int] = {}
    for p in plan.pools:
        devices[p.device] = devices.get(p.device, 0) + p.devices
    costs = {t: float(getattr(plan.costs, t)) for t in COST_EXPRESSIONS} if plan.costs else {}
    total = plan.costs.total_usd_per_month if plan.costs else None
    return ArchitectureSummary(architecture=architecture, feasible=plan.feasible, status=plan.solver.status, costs=costs,
                               total_usd_per_month=total, instances={p.name: p.instances for p in plan.pools if p.instances > 0},
                               devices=devices, tokens_per_month=plan.tokens_per_month, usd_per_million_tokens=plan.usd_per_million_tokens,
                               energy_wh_per_1k_tokens=plan.energy_wh_per_1k_tokens, solve_s=plan.solver.time_s, gap=plan.solver.gap,
                               meets_targets=meets_targets(plan) if plan.feasible else False)


def summarize(resolver: Resolver, tables: CapacityTables, settings: SolveSettings | None = None) -> tuple[dict[str, ArchitectureSummary], bool]:
    """Solve every architecture of ``settings`` for ``tables`` and summarise (the fast path of sweeps).

    Returns the summaries and whether the built model was re-used (False: the table's
    structure differs from the resolver's and a fresh Resolver was built for it — callers
    that cache resolvers by structure should use :func:`structure_key`).
    """
    s = settings or resolver.settings
    prep = resolver.reprepare(tables) if same_structure(resolver.base, tables) else None
    reused = prep is not None and resolver.fits(prep)
    if reused:
        assert prep is not None
        resolver._update(prep, tables, s)
        resolver.stats["resolved"] += 1
        target = resolver
    else:
        target = Resolver.create(tables, s)
        resolver.stats["rebuilt"] += 1
    remodel = target.remodel(s)
    return {a: _lean_architecture(target.built, target.solver, a, s, target._unroutable, remodel) for a in s.architectures}, reused


def structure_key(tables: CapacityTables) -> int:
    """A hash of everything but rates and the electricity price: equal keys can share one Resolver."""
    parts = [pd.util.hash_pandas_object(tables.points, index=False).to_numpy(),
             pd.util.hash_pandas_object(tables.configs, index=False).to_numpy(),
             pd.util.hash_pandas_object(tables.demand.drop(columns=list(RATE_COLUMNS)), index=False).to_numpy()]
    costs = tuple(sorted((k, v) for k, v in vars(tables.costs).items() if k != _PRICE_FIELD))
    return hash((tuple(int(v) for p in parts for v in p), costs))


TRAFFIC_HEADROOM = 4.0
"""Big-M headroom of the confidence search's traffic model: its largest multiplier (:data:`planner.optimize.confidence.TRAFFIC_GRID`)."""


def confidence_winner(tables: CapacityTables, settings: SolveSettings,
                      traffic_tables: Callable[[float], CapacityTables] | None = None) -> Any:
    """``(m_prefill, m_decode, m_traffic) -> winner``: the verdict confidence's re-solve
    (:mod:`planner.optimize.confidence`), by the path a sweep takes for a scenario (:func:`summarize`,
    :func:`winner_of`) with ``settings`` as ``planner solve`` ran them (the peak simulation included
    when they carry it). A traffic multiplier solves ``traffic_tables(m)`` — the instance's table built at
    every service's rate × ``m``, what ``planner solve --set ...rate_multiplier`` solves (the rate selects the
    operating points, :mod:`planner.studies.source`); without it (tables alone) the table's rates are scaled
    and one built model is re-used, an approximation. A perf multiplier builds the model of its scaled table
    (:func:`planner.optimize.confidence.scaled_tables`). Memoised on the multipliers."""
    from planner.optimize.confidence import TRAFFIC_GRID, scaled_tables

    plain = replace(settings, confidence="off", extra_notes=())
    services = [str(s) for s in tables.demand["service"].unique()]
    memo: dict[tuple[float, float, float], str] = {}
    state: dict[str, Resolver] = {}

    def winner(m_pf: float, m_dec: float, m_rate: float) -> str:
        key = (round(m_pf, 9), round(m_dec, 9), round(m_rate, 9))
        if key not in memo:
            if key[:2] == (1.0, 1.0) and traffic_tables is not None and key[2] != 1.0:
                t = traffic_tables(key[2])
                r = Resolver.create(t, plain)
            elif key[:2] == (1.0, 1.0):
                if "traffic" not in state:
                    state["traffic"] = Resolver.create(tables, plain, rate_headroom=max(TRAFFIC_GRID))
                r = state["traffic"]
                t = tables if key[2] == 1.0 else scale_rates(tables, dict.fromkeys(services, m_rate))
            else:
                t = scaled_tables(tables, m_pf, m_dec, m_rate)
                r = Resolver.create(t, plain)
            summaries, _ = summarize(r, t, plain)
            memo[key] = winner_of(summaries) or "none"
        return memo[key]
    return winner


def with_confidence(result: PlanResult, tables: CapacityTables, settings: SolveSettings,
                    traffic_tables: Callable[[float], CapacityTables] | None = None) -> PlanResult:
    """``result`` with its verdict's confidence (:func:`planner.optimize.confidence.verdict_confidence`,
    re-solving by :func:`confidence_winner`, ``traffic_tables`` its tables at other traffic), unless
    ``settings.confidence == "off"``."""
    from collections.abc import Mapping

    from planner.optimize.confidence import verdict_confidence

    if settings.confidence == "off" or result.verdict is None:
        return result
    bands = tables.meta.get("perf_error_band")
    srcs = tables.meta.get("perf_error_band_source")
    # the dimensions on two cores, unless HiGHS runs threads of its own: a fork copies a scheduler without its threads
    conf = verdict_confidence(result, confidence_winner(tables, settings, traffic_tables), error_bands=bands if isinstance(bands, Mapping) else None,
                              band_sources=srcs if isinstance(srcs, Mapping) else None, parallel=settings.threads == 1)
    return result.model_copy(update={"verdict": result.verdict.model_copy(update={"confidence": conf})})
