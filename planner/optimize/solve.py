"""Solve wrapper: prepare → build once → restrict and solve each architecture → extract →
verify and tighten → verdict.

Phases are timed separately (``SolverInfo.build_s``, ``time_s`` — HiGHS's own time —
``extract_s``). One built model serves every architecture: architectures are restrictions
(fixed variables, one mutable parameter) re-solved through pyomo's persistent HiGHS
interface (:mod:`pyomo.contrib.solver.solvers.highs`). HiGHS runs single-threaded with a
fixed random seed by default, so the same input gives the same plan.

Verify and tighten (DESIGN §6, issue 7)
---------------------------------------
The utilisation caps ``ρ_i`` are set before solving from a nominal pool of one bucket
(:mod:`planner.optimize.prepare`). After the MIP the plan's actual pools are checked:

1. :func:`pool_latency` — per pool ``p`` a G/G/c queue at peak with ``c = (n_p − k)·B_p``
   servers (``B_p`` the load-weighted batch, 1 for prefill), arrival rate
   ``λ_p = Σ λ_peak x``, mean service ``s_p = busy_p / (n_p − k) · c / λ_p`` and
   the arrival-weighted arrival CV and the service-time CV of the mixture of its points (buckets of
   different lengths in one queue: ``c_s² = E[S²]/E[S]² − 1``); its wait quantile ``W_p`` (:func:`planner.queueing.wait_quantile_s`)
   at the service's TTFT quantile. Same formulas as :mod:`planner.optimize.extract`. A unified
   pool adds the chunked-prefill lane wait of its bucket mix over its live instances behind a
   least-loaded router (:func:`planner.optimize.extract.lane_wait_quantile_ms`,
   :func:`planner.queueing.least_loaded_lane_wait_quantile_s`), which replaces the lane wait each
   unified point priced for its bucket alone (``lane_wait_ms``, inside its ``ttft_ms``).
2. :func:`bucket_latency` — per (service, bucket): ``TTFT = max ttft_ms_i + W_{p(i)}`` over
   its routed prefill / unified points, plus the worst slot wait of its decode pools; TPOT
   the worst routed operating point (at most the target by the feasibility mask).
3. Where a bucket misses its TTFT target ``T``, the queueing budget ``T − ttft_ms`` is split
   over the pools it waits in, in proportion to their current waits; each such pool gets
   the largest utilisation ``ρ*_p`` meeting its share at its current size
   (:func:`planner.queueing.max_utilization`; for a unified pool with a lane, the largest
   scale ``s`` of its arrivals at which slot wait + lane wait fit, by bisection, and
   ``u_p / ρ*_p = 1/s``), and every point of the pool has its cap
   divided by ``f_p = max(1.05, u_p / ρ*_p)`` (``u_p`` its peak utilisation; at least 5%
   per round so each round makes progress; at most ×4). The MIP is rebuilt with the
   tighter caps and re-solved.
4. Stop when every bucket meets its targets, or after ``SolveSettings.verify_rounds`` extra
   rounds (the plan then reports the miss). ``SolverInfo.rounds`` counts the solves.
5. With ``SolveSettings.simulation_check`` (``planner solve`` when ``options.verify``): the plan
   that passes the analytic check is simulated at peak (:func:`planner.verify.simulate_plan`,
   bursts replayed from the log). Each service missing a quantile names a pool
   (``SimulatedService.miss_pool``); that pool's caps are divided by the simulated/target
   ratio ``f_p = clamp(sim_q / T, 1.05, 4)`` (largest over the services naming it) and the MIP is
   re-solved, at most ``simulation_rounds`` times. A pool named again in a later round gets
   ``f_p ** (k + 1)`` on its ``k``-th repeat (clamped the same way): a miss that a modest cap does not
   fix — e.g. a one-instance pool whose tail is service time more than queueing — is pushed
   off the pool instead of being chased in equal small steps until the rounds run out. The final plan carries its last check
   (``ArchitecturePlan.simulation``): met, or which pool misses and by how much. Seeded, so the
   same input gives the same plan.

Points whose cap came with the table (measured capacity, ``utilization_cap`` given) are
not re-checked: a measured rate already includes queueing at the SLO. The tightened caps
of each architecture are recorded in ``CapacitySnapshot.utilization_caps`` (so that
``planner check`` verifies the load constraint with the caps actually used).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from planner.optimize.diagnose import diagnose_routability, diagnose_solver_infeasible
from planner.optimize.energy_report import energy_report, with_emissions
from planner.optimize.extract import (
    build_pools_routing_latency,
    cost_breakdown,
    energy_kwh_per_month,
    model_costs,
    point_power_arrays,
    solution_arrays,
    tokens_per_month,
    with_tool_phase,
)
from planner.optimize.model import Built, build_model, constraint_name, restrict
from planner.optimize.prepare import ARCH_ROLES, J_PER_KWH, SECONDS_PER_HOUR, Prepared, prepare
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
    verify_rounds: int = 4
    """Extra solve rounds the latency check may spend tightening caps (0: no check)."""
    simulation_check: Callable[[PlanResult, str], Any] | None = None
    """Optional discrete-event check of an architecture's plan (``(result, architecture) ->
    SimulationCheck``, e.g. :func:`planner.verify.simulate_plan`); a miss tightens the named pool
    and re-solves (module docstring, step 5)."""
    simulation_rounds: int = 6
    """Extra solve rounds the simulated check may spend tightening caps."""


@dataclass
class SolveOutcome:
    result: PlanResult
    prepared: Prepared
    built: Built | None
    """The model built from the tables (before any latency tightening)."""
    built_by_architecture: dict[str, Built] = field(default_factory=dict)
    """The model each architecture's final plan was solved on (a rebuilt one when the latency check tightened caps)."""


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
        diag2 = diagnose_solver_infeasible(built, architecture, settings) if status == "infeasible" else []
        return ArchitecturePlan(architecture=architecture, feasible=False, solver=info, diagnosis=diag2)
    t1 = time.perf_counter()
    res.solution_loader.load_vars()
    x, n, _z, _u = solution_arrays(built)
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


def make_solver() -> Any:
    from pyomo.contrib.solver.solvers.highs import Highs

    return Highs()


# --- verify and tighten (module docstring) -------------------------------------------------

POOL_LATENCY_COLUMNS: tuple[str, ...] = (
    "pool", "role", "instances", "servers", "arrival_rate_per_s", "mean_service_s", "utilization_peak",
    "service_cv", "arrival_cv", "quantile", "wait_ms",
    "lane_utilization", "lane_mean_service_s", "lane_service_cv", "lane_arrival_cv", "lane_wait_ms",
    "lane_instance_arrival_cv", "lane_wait_random_s", "lane_wait_pooled_s", "lane_wait_balanced_s", "lane_wait_residual_s",
)
"""Columns of :func:`pool_latency`: per pool the G/G/c queue at peak and its wait quantile (ms)
(``wait_ms``: the wait for a server / batch slot); for unified pools also the chunked-prefill
lanes of its live instances (:func:`planner.optimize.extract.lane_wait_quantile_ms`: per-lane
utilisation, the service mixture's mean and CV, the pool's and one lane's arrival CV, the wait
and its four terms;
``nan`` for other roles or when the points carry no lane columns)."""

_LAT_COLS = ("pool", "role", "rate_peak_per_s", "instance_seconds_per_request", "max_batch", "service_time_cv",
             "interarrival_cv", "ttft_quantile")


def pool_latency(points: pd.DataFrame, share: np.ndarray, instances: Mapping[str, int], redundancy: int) -> pd.DataFrame:
    """Per pool: predicted wait quantile at peak for the actual pool size (module docstring, step 1).

    ``points`` are operating-point rows (capacity-table columns plus ``pool``, ``rate_peak_per_s``,
    ``interarrival_cv``, ``ttft_quantile``), ``share`` their routing shares, ``instances`` the
    provisioned instances per pool name. Pools without routed traffic are left out; a pool
    with no surviving instance (``n ≤ k``) or at utilisation ≥ 1 has an infinite wait.
    """
    from planner.optimize.extract import LANE_INFO_KEYS, _lane_columns, lane_wait_quantile_ms
    from planner.queueing import wait_quantile_s

    x = np.asarray(share, dtype=float)
    sel = x > 0
    lane_s_all, _own = _lane_columns(points)
    pts = points.loc[sel, list(_LAT_COLS)]
    lane_s = lane_s_all[sel]
    x = x[sel]
    if not len(pts):
        return pd.DataFrame(columns=list(POOL_LATENCY_COLUMNS))
    lam = pts["rate_peak_per_s"].to_numpy(float) * x
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    batch = np.maximum(pts["max_batch"].to_numpy(float), 1.0)
    # service time of one server (slot) per point: τ for prefill, the slot holding time τ·B* otherwise;
    # the pool's service-time CV is that of the mixture over its points (buckets of different
    # lengths share one queue): c_s² = Σλ s²(1 + c_i²) / (Σλ s)² · Σλ − 1
    s_pt = tau * np.where(pts["role"].to_numpy(str) == "prefill", 1.0, batch)
    cv_pt = pts["service_time_cv"].to_numpy(float)
    frame = pd.DataFrame({
        "pool": pts["pool"].to_numpy(str), "role": pts["role"].to_numpy(str), "arr": lam, "busy": lam * tau,
        "busy_b": lam * tau * batch, "s1": lam * s_pt, "s2": lam * s_pt**2 * (1.0 + cv_pt**2),
        "ca": lam * pts["interarrival_cv"].to_numpy(float), "q": pts["ttft_quantile"].to_numpy(float),
        "lane_s": lane_s, "measured": ~np.isnan(points.loc[sel, "utilization_cap"].to_numpy(float)) if "utilization_cap" in points.columns
        else np.zeros(len(pts), dtype=bool),
    })
    agg = frame.groupby("pool", sort=True).agg(role=("role", "first"), arr=("arr", "sum"), busy=("busy", "sum"),
                                                busy_b=("busy_b", "sum"), s1=("s1", "sum"), s2=("s2", "sum"), ca=("ca", "sum"), q=("q", "max"),
                                                measured=("measured", "all"))
    rows = []
    recs: list[dict[Any, Any]] = agg.reset_index().to_dict("records")
    for r in recs:
        pool = str(r["pool"])
        n = int(instances.get(pool, 0))
        n_eff = max(n - redundancy, 0)
        b = 1.0 if r["role"] == "prefill" else (r["busy_b"] / r["busy"] if r["busy"] > 0 else 1.0)
        arr, busy = float(r["arr"]), float(r["busy"])
        s1 = float(r["s1"])
        cs = math.sqrt(max(0.0, float(r["s2"]) * arr / s1**2 - 1.0)) if s1 > 0 else 0.0
        ca = float(r["ca"]) / arr
        servers = max(1, int(n_eff * b)) if n_eff > 0 else 0
        service_s = busy / n_eff * servers / arr if n_eff > 0 and arr > 0 else 0.0
        util = busy / n_eff if n_eff > 0 else math.inf
        if n_eff <= 0:
            wait = math.inf
        elif r["measured"]:
            wait = 0.0  # measured capacity: queueing inside the measured rate (planner.optimize.extract.measured_pools)
        elif service_s > 0:
            wait = wait_quantile_s(float(r["q"]), arr, servers, service_s, cs, ca) * 1e3
        else:
            wait = 0.0
        lane_wait, lane = math.nan, dict[str, float]()
        if r["role"] == "unified":
            g = frame[frame["pool"] == pool]
            lane_wait, lane = lane_wait_quantile_ms(float(r["q"]), g["arr"].to_numpy(float), g["lane_s"].to_numpy(float), n_eff, ca)
        rows.append({"pool": str(pool), "role": str(r["role"]), "instances": n, "servers": servers, "arrival_rate_per_s": arr,
                     "mean_service_s": service_s, "utilization_peak": util, "service_cv": cs, "arrival_cv": ca,
                     "quantile": float(r["q"]), "wait_ms": wait, "lane_wait_ms": lane_wait,
                     **{k: lane.get(k, math.nan) for k in LANE_INFO_KEYS}})
    return pd.DataFrame(rows, columns=list(POOL_LATENCY_COLUMNS))


def bucket_latency(points: pd.DataFrame, share: np.ndarray, waits_ms: Mapping[str, float],
                   lanes_ms: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per (service, bucket): predicted TTFT and TPOT quantiles at peak (module docstring, step 2).

    Columns: service, bucket, ttft_predicted_ms, ttft_target_ms, ttft_service_ms (the worst
    routed operating point's own TTFT), tpot_predicted_ms, tpot_target_ms, pools (those it
    waits in), met. ``waits_ms`` per pool: every wait the pool adds (slot + lane); ``lanes_ms``:
    the pools whose lane wait of the mix is in ``waits_ms`` — their unified points' own
    ``lane_wait_ms`` is taken out of ``ttft_ms`` (it is replaced, not added).
    """
    from planner.optimize.extract import _lane_columns

    x = np.asarray(share, dtype=float)
    sel = x > 0
    pts = points.loc[sel].copy()
    _svc, own = _lane_columns(points)
    lanes = lanes_ms or {}
    replaced = np.array([p in lanes and not math.isnan(float(lanes[p])) for p in pts["pool"].astype(str)], dtype=bool)
    replaced &= pts["role"].to_numpy(str) == "unified"
    pts["ttft_ms"] = pts["ttft_ms"].to_numpy(float) - np.where(replaced, np.nan_to_num(own[sel]), 0.0)
    rows = []
    for (svc, bucket), g in pts.groupby(["service", "bucket"], sort=False):
        roles = g["role"].to_numpy(str)
        pools = g["pool"].to_numpy(str)
        first = np.isin(roles, ("prefill", "unified"))
        dec = roles == "decode"
        w = np.array([float(waits_ms.get(p, 0.0)) for p in pools])
        ttft_pt = g["ttft_ms"].to_numpy(float)
        t_first = float(np.max(ttft_pt[first] + w[first])) if first.any() else 0.0
        t_dec = float(np.max(w[dec])) if dec.any() else 0.0
        dec_roles = np.isin(roles, ("decode", "unified"))
        tpot = float(np.max(g["tpot_ms"].to_numpy(float)[dec_roles])) if dec_roles.any() else 0.0
        ttft_t, tpot_t = float(g["ttft_target_ms"].to_numpy(float)[0]), float(g["tpot_target_ms"].to_numpy(float)[0])
        ttft = t_first + t_dec
        rows.append({"service": str(svc), "bucket": str(bucket), "ttft_predicted_ms": ttft, "ttft_target_ms": ttft_t,
                     "ttft_service_ms": float(np.max(ttft_pt[first])) if first.any() else 0.0,
                     "tpot_predicted_ms": tpot, "tpot_target_ms": tpot_t, "pools": sorted(set(pools.tolist())),
                     "met": bool(ttft <= ttft_t * (1 + 1e-6) and tpot <= tpot_t * (1 + 1e-6))})
    return pd.DataFrame(rows, columns=["service", "bucket", "ttft_predicted_ms", "ttft_target_ms", "ttft_service_ms",
                                       "tpot_predicted_ms", "tpot_target_ms", "pools", "met"])


def _plan_shares(plan: ArchitecturePlan, points: pd.DataFrame) -> np.ndarray:
    """Routing shares of ``plan`` aligned with the rows of ``points`` (keys service, bucket, role, config)."""
    idx = {k: j for j, k in enumerate(zip(points["service"].astype(str), points["bucket"].astype(str),
                                          points["role"].astype(str), points["config"].astype(str), strict=True))}
    x = np.zeros(len(points))
    for r in plan.routing:
        j = idx.get((r.service, r.bucket, str(r.role), r.config))
        if j is not None:
            x[j] += r.share
    return x


def predicted_pool_quantiles(result: PlanResult, architecture: str) -> pd.DataFrame:
    """Per pool of one architecture's plan: the analytic wait quantile at peak (:data:`POOL_LATENCY_COLUMNS`).

    Reads only the plan and its capacity snapshot, so it works on a ``plan.json`` too. This is
    the hook for comparing analytic with simulated tails pool by pool.
    """
    plan = result.architectures[architecture]
    pts = pd.DataFrame(result.capacity.points)
    if not plan.feasible or not len(pts):
        return pd.DataFrame(columns=list(POOL_LATENCY_COLUMNS))
    return pool_latency(pts, _plan_shares(plan, pts), {p.name: p.instances for p in plan.pools}, result.capacity.redundancy)


def tighten_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, min_step: float = 1.05,
                    max_step: float = 4.0) -> tuple[dict[str, float], pd.DataFrame]:
    """Per pool to tighten: the factor dividing its caps (module docstring, step 3); and the bucket table.

    Empty when every bucket meets its targets (or only pools with caps supplied by the table
    are involved, which are not re-checked).
    """
    from planner.optimize.extract import _lane_columns
    from planner.queueing import max_utilization

    pts = prep.points
    x = _plan_shares(plan, pts)
    inst = {p.name: p.instances for p in plan.pools}
    pl: dict[str, dict[Any, Any]] = {str(r["pool"]): r for r in pool_latency(pts, x, inst, redundancy).to_dict("records")}
    lanes = {p: float(r["lane_wait_ms"]) for p, r in pl.items() if not math.isnan(float(r["lane_wait_ms"]))}
    waits = {p: float(r["wait_ms"]) + lanes.get(p, 0.0) for p, r in pl.items()}
    buckets = bucket_latency(pts, x, waits, lanes)
    given = pts["utilization_cap"].to_numpy(float) if "utilization_cap" in pts.columns else np.full(len(pts), np.nan)
    fixed = set(pts.loc[~np.isnan(given), "pool"].astype(str))
    budget: dict[str, float] = {}
    brecs: list[dict[Any, Any]] = buckets.to_dict("records")
    for br in brecs:
        if br["met"]:
            continue
        room = float(br["ttft_target_ms"]) - float(br["ttft_service_ms"])
        involved = [str(p) for p in br["pools"] if p not in fixed and waits.get(str(p), 0.0) > 0]
        total = sum(float(waits[p]) for p in involved)
        if room <= 0 or not involved or not math.isfinite(total):
            # no queueing room at all, or an overloaded pool: tighten every involved pool by the largest step
            for p in involved:
                budget[p] = min(budget.get(p, math.inf), 0.0)
            continue
        for p in involved:
            budget[p] = min(budget.get(p, math.inf), room * float(waits[p]) / total)
    factors: dict[str, float] = {}
    for p, b_ms in budget.items():
        row = pl[p]
        util = float(row["utilization_peak"])
        servers = int(row["servers"])
        if b_ms <= 0 or servers < 1 or not math.isfinite(util):
            factors[p] = max_step
            continue
        if p in lanes:
            on_p = (pts["pool"].astype(str).to_numpy() == p) & (x > 0)
            lane_s, _own = _lane_columns(pts)  # per point: lane service time (s)
            scale = _max_load_scale(row, b_ms, pts["rate_peak_per_s"].to_numpy(float)[on_p] * x[on_p], lane_s[on_p],
                                    max(int(row["instances"]) - redundancy, 0))
            f = 1.0 / scale if scale > 0 else max_step
        else:
            rho_star = max_utilization(servers, float(row["mean_service_s"]), float(row["quantile"]), b_ms / 1e3,
                                       service_cv=float(row["service_cv"]), arrival_cv=float(row["arrival_cv"]))
            f = util / rho_star if rho_star > 0 else max_step
        factors[p] = float(min(max_step, max(min_step, f)))
    return factors, buckets


def _max_load_scale(row: Mapping[str, Any], budget_ms: float, lane_rates_per_s: np.ndarray, lane_service_s: np.ndarray,
                    live_instances: int, tolerance: float = 1e-4) -> float:
    """Largest factor ``s ≤ 1`` on a unified pool's peak arrivals (same size) with slot wait + lane
    wait ≤ ``budget_ms`` (:func:`pool_latency` row; the lane's routed rates and service times of
    its points); bisection, both waits grow with the load."""
    from planner.optimize.extract import lane_wait_quantile_ms
    from planner.queueing import wait_quantile_s

    q = float(row["quantile"])
    arr, servers, s_slot = float(row["arrival_rate_per_s"]), int(row["servers"]), float(row["mean_service_s"])
    ca = float(row["arrival_cv"])

    def total_ms(f: float) -> float:
        slot = wait_quantile_s(q, f * arr, servers, s_slot, float(row["service_cv"]), ca) if s_slot > 0 else 0.0
        lane, _info = lane_wait_quantile_ms(q, f * lane_rates_per_s, lane_service_s, live_instances, ca)
        return 1e3 * slot + lane

    if not (servers >= 1 and live_instances >= 1 and len(lane_service_s)) or total_ms(1.0) <= budget_ms:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if total_ms(mid) <= budget_ms:
            lo = mid
        else:
            hi = mid
    return lo


def tighten_prepared(prep: Prepared, factors: Mapping[str, float]) -> Prepared:
    """``prep`` with the caps of the named pools divided by their factors; load coefficients and big-M updated."""
    pts = prep.points.copy()
    f = pts["pool"].map(dict(factors)).fillna(1.0).to_numpy(float)
    pts["rho"] = pts["rho"].to_numpy(float) / f
    pts["load_peak_coef"] = pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / pts["rho"]
    pools = prep.pools.copy()
    per_d = pts.groupby(["pool", "d"])["load_peak_coef"].max().groupby(level=0).sum()
    n_load = np.ceil(per_d.reindex(pools["pool"]).fillna(0.0).to_numpy(float) + 1e-9).astype(int) + 1
    pools["n_max"] = np.maximum(pools["n_max"].to_numpy(int), n_load)
    tool = prep.tool
    if tool is not None:
        from planner.agents.prep import refresh_caps

        tool = refresh_caps(tool, pts)  # reload/recompute load coefficients carry 1/rho too
    return replace(prep, points=pts, pools=pools, tool=tool)


def _solve_tightened(cur: Built, factors: Mapping[str, float], architecture: str,
                     settings: SolveSettings) -> tuple[ArchitecturePlan, Built]:
    """Rebuild with the named pools' caps divided by their factors and solve again.

    Rebuilt rather than updated in place: the instance-count bounds (big-M) must grow with the load.
    """
    t0 = time.perf_counter()
    nxt = build_model(tighten_prepared(cur.prep, factors), redundancy=settings.redundancy,
                      budget_usd_per_month=settings.budget_usd_per_month)
    nxt.build_s = time.perf_counter() - t0
    return solve_architecture(nxt, make_solver(), architecture, settings), nxt


def _solve_verified(built: Built, solver: Any, architecture: str, settings: SolveSettings) -> tuple[ArchitecturePlan, Built, list[dict[str, Any]]]:
    """Solve one architecture, then verify tail latency and tighten caps until met (bounded rounds).

    Returns the final plan, the model it came from and the tightened caps (records for the snapshot).
    """
    plan = solve_architecture(built, solver, architecture, settings)
    base_rho = built.prep.points["rho"].to_numpy(float)
    cur, rounds = built, 1
    total_time, total_build = plan.solver.time_s, plan.solver.build_s
    history: list[str] = []

    def tighten(factors: Mapping[str, float], label: str) -> bool:
        """One more round with the named pools' caps divided; False when it leaves no plan."""
        nonlocal plan, cur, rounds, total_time, total_build
        history.append(label + ", ".join(f"{p} x1/{f:.3g}" for p, f in sorted(factors.items())))
        cand, nxt = _solve_tightened(cur, factors, architecture, settings)
        rounds += 1
        total_time += cand.solver.time_s
        total_build += cand.solver.build_s
        if not cand.feasible:
            history.append(f"round {rounds}: tighter caps leave no feasible plan ({cand.solver.status}); kept the previous plan")
            return False
        plan, cur = cand, nxt
        return True

    while plan.feasible and rounds <= settings.verify_rounds:
        factors, _buckets = tighten_factors(cur.prep, plan, settings.redundancy)
        if not factors or not tighten(factors, ""):
            break
    if settings.simulation_check is not None and plan.feasible and plan.pools:
        sim_rounds = 0
        repeats: dict[str, int] = {}
        while True:
            check = settings.simulation_check(_check_result(cur.prep, architecture, plan, settings), architecture)
            plan = plan.model_copy(update={"simulation": check})
            if check.met or sim_rounds >= settings.simulation_rounds:
                break
            factors = simulated_factors(check, repeats)
            for p in factors:
                repeats[p] = repeats.get(p, 0) + 1
            analytic, _b = tighten_factors(cur.prep, plan, settings.redundancy)  # keep the analytic check met as well
            for p, f in analytic.items():
                factors[p] = max(factors.get(p, 1.0), f)
            sim_rounds += 1
            if not factors or not tighten(factors, "simulation: "):
                break
    info = plan.solver.model_copy(update={"rounds": rounds, "time_s": total_time, "build_s": total_build})
    plan = plan.model_copy(update={"solver": info})
    caps: list[dict[str, Any]] = []
    if cur is not built:
        pts = cur.prep.points
        rho = pts["rho"].to_numpy(float)
        for i in np.nonzero(rho < base_rho * (1 - 1e-12))[0]:
            r = pts.iloc[int(i)]
            caps.append({"architecture": architecture, "service": str(r["service"]), "bucket": str(r["bucket"]),
                         "role": str(r["role"]), "config": str(r["config"]), "rho": float(rho[i]),
                         "rho_queueing": float(base_rho[i]), "tightening_factor": float(base_rho[i] / rho[i])})
    if history:
        caps_note = f"{architecture}: latency check tightened utilisation caps in {rounds - 1} round(s): " + "; ".join(history)
        if not all(lp.ttft_met and lp.tpot_met for lp in plan.latency):
            caps_note += f" — targets still missed after {rounds} solves (see the latency table)"
        caps.append({"architecture": architecture, "note": caps_note})
    return plan, cur, caps


def simulated_factors(check: Any, repeats: Mapping[str, int] | None = None, *, min_step: float = 1.05,
                      max_step: float = 4.0) -> dict[str, float]:
    """Per pool a simulated miss names: the factor dividing its caps, ``f = clamp(sim_q / target, min_step, max_step)``
    raised to ``k + 1`` for a pool already named ``k`` times (``repeats``) and clamped to ``max_step``
    again (module docstring, step 5); the largest over the services naming the pool."""
    out: dict[str, float] = {}
    for s in check.services:
        if s.miss_pool is None:
            continue
        share = s.miss_share if s.miss_share is not None else math.inf  # None: unbounded (requests never finished)
        f = min(max_step, max(min_step, 1.0 + share))
        f = float(min(max_step, f ** (1 + (repeats or {}).get(s.miss_pool, 0))))
        out[s.miss_pool] = max(out.get(s.miss_pool, 1.0), f)
    return out


def _check_result(prep: Prepared, architecture: str, plan: ArchitecturePlan, settings: SolveSettings) -> PlanResult:
    """A one-architecture :class:`PlanResult` carrying what the simulated check reads (pools, routing, snapshot)."""
    used = _used_points(plan, prep)
    pts_cols = [c for c in prep.points.columns if c not in ("i",)]
    snapshot = CapacitySnapshot(
        demand=prep.demand.drop(columns=["d"]).to_dict("records"), points=prep.points.loc[used, pts_cols].to_dict("records"),
        configs=prep.tables.configs.to_dict("records"), costs={k: float(v) for k, v in vars(prep.tables.costs).items()},
        redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
    return PlanResult(instance="check", architectures={architecture: plan}, verdict=make_verdict({architecture: plan}, prep),
                      capacity=snapshot)


def solve_tables(tables: CapacityTables, settings: SolveSettings, *, instance_name: str = "tables",
                 instance_path: str = "", scenario: str | None = None, overrides: dict[str, Any] | None = None,
                 built: Built | None = None) -> SolveOutcome:
    """Solve every requested architecture on one set of capacity tables and compare them.

    ``built``: a model already built from ``tables`` by :func:`build_model` (with the same
    redundancy and budget); it is restricted and re-solved instead of building a new one.
    Each architecture's plan is verified (and its caps tightened) as the module docstring says.
    """
    for arch in settings.architectures:
        if arch not in ARCH_ROLES:
            raise ValueError(f"unknown architecture {arch!r}")
    t0 = time.perf_counter()
    if built is None:
        prep = prepare(tables, max_utilization=settings.max_utilization)
        built = build_model(prep, redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
        built.build_s = time.perf_counter() - t0
    prep = built.prep
    solver = make_solver()
    plans: dict[str, ArchitecturePlan] = {}
    caps: list[dict[str, Any]] = []
    final_built: dict[str, Built] = {}
    for arch in settings.architectures:
        plan, used_built, arch_caps = _solve_verified(built, solver, arch, settings)
        plans[arch] = plan
        final_built[arch] = used_built
        caps += [c for c in arch_caps if "note" not in c]
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
        utilization_caps=caps,
    )
    notes = list(settings.extra_notes) + [f"utilisation caps: {prep.caps_method}"]
    for arch, plan in plans.items():
        if plan.solver.rounds > 1:
            notes.append(f"{arch}: the latency check tightened utilisation caps and re-solved ({plan.solver.rounds} solves); "
                         "tightened caps are listed in capacity.utilization_caps")
        if plan.feasible and not all(lp.ttft_met and lp.tpot_met for lp in plan.latency):
            notes.append(f"{arch}: predicted latency misses a target after {plan.solver.rounds} solve(s); see the latency table")
        if plan.solver.status == "time_limit":
            notes.append(f"{arch}: stopped at the time limit ({settings.time_limit_s:g} s) with gap {plan.solver.gap or 0:.2%}; the plan is not proven optimal")
    result = PlanResult(instance=instance_name, instance_path=instance_path, scenario=scenario, overrides=overrides or {},
                        architectures=plans, verdict=verdict, capacity=snapshot, notes=notes)
    return SolveOutcome(result=result, prepared=prep, built=built, built_by_architecture=final_built)


def _used_points(plan: ArchitecturePlan, prep: Prepared) -> list[int]:
    if not plan.routing:
        return []
    pts = prep.points
    key = dict(zip(zip(pts["service"].astype(str), pts["bucket"].astype(str), pts["role"].astype(str), pts["config"].astype(str), strict=True),
                   pts["i"].astype(int), strict=True))
    return [int(key[(r.service, r.bucket, str(r.role), r.config)]) for r in plan.routing]


def check_costs_match_model(built: Built, plan: ArchitecturePlan) -> dict[str, float]:
    """Differences between the solver's cost expressions and the recomputed terms (for tests)."""
    mc = model_costs(built)
    assert plan.costs is not None
    return {k: mc.get(k, 0.0) - v for k, v in plan.costs.terms().items()}  # a term the model lacks must be 0


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
                   overrides: dict[str, Any] | None = None, capacity_only: bool = False) -> SolveOutcome:
    """Capacity tables of an instance (optionally with measured capacity, only its rows with
    ``capacity_only``), then :func:`solve_tables`."""
    from planner.capacity import build_capacity_tables, read_measured_capacity

    tables = build_capacity_tables(resolved)
    if capacity_file:
        tables = read_measured_capacity(capacity_file, tables, only_listed=capacity_only)
    raw_notes: Any = tables.meta.get("notes", [])
    notes = tuple(str(n) for n in raw_notes) + tuple(getattr(resolved.catalog, "notes", ()))
    s = SolveSettings(**{**settings.__dict__, "extra_notes": settings.extra_notes + notes})
    sim_notes: list[str] = []
    if getattr(resolved.instance.options, "verify", False) and s.simulation_check is None:
        from planner.verify import (  # discrete-event check at peak (issue 7)
            peak_arrivals_from_instance,
            simulate_plan,
        )

        arrivals, sim_notes = peak_arrivals_from_instance(resolved)

        def check(result: PlanResult, architecture: str) -> Any:
            return simulate_plan(result, architecture, arrivals=arrivals)
        s = SolveSettings(**{**s.__dict__, "simulation_check": check})
    outcome = solve_tables(tables, s, instance_name=resolved.instance.name, instance_path=str(resolved.path), scenario=scenario, overrides=overrides)
    if getattr(resolved.instance.options, "verify", False):
        from planner.verify import verify_result

        res = verify_result(outcome.result)  # reports the checks made in the loop; simulates plans without one
        outcome.result = res.model_copy(update={"notes": list(res.notes) + sim_notes})
    outcome.result = with_emissions(outcome.result, getattr(resolved.instance.costs, "carbon_g_per_kwh", None))  # issue 20
    from planner import __version__

    outcome.result = outcome.result.model_copy(update={"planner_version": __version__,
                                                       "catalog_version": getattr(resolved.catalog, "version", "")})
    return outcome
