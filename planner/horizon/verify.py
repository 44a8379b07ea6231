"""Per-slot verification of a plan over time: the busiest slots replayed in the peak simulator.

The horizon MIP (:mod:`planner.horizon.model`) sizes every slot's pools with the same queueing caps as a
single-peak plan. This module checks the ``K`` busiest slots of a solved plan, each at its busiest period
(by the whole demand's peak rate; with growth, the last period) — the way ``planner solve`` checks its one peak
(:func:`planner.verify.simulate_plan`):

1. the capacity table at the level: every demand row's peak and mean rates times its multipliers at that
   level (``m_peak_d``, ``m_mean_d``: growth × the service's slot), and its inter-arrival CV the slot's (the
   busiest window's CV; a service given by hand keeps its own);
2. the level's pools and routing from the horizon solution (instances ``n[k, p]`` — spares included — and
   shares ``x[k, i]``), turned into a single-peak plan by the same extraction ``planner solve`` uses
   (:func:`planner.optimize.extract.build_pools_routing_latency`): its analytic TTFT / TPOT per service
   at the level's rates (the caps recomputed at the exact rate, not the MIP's grid);
3. that plan simulated at the level's peak rate (``simulate_plan``: a gamma renewal at the peak rate with
   the slot's CV — ServeGen's windows carry a rate and a CV, not timestamps — adaptive length, seeded).

Each row reports per service the analytic and simulated TTFT / per-token figure (TPOT, or ITL when the service
targets ITL: ``token_metric``) at their SLO quantiles, and met or missed for each: ``analytic_met`` and ``met`` (simulated). Cost: one simulation per checked level (3-6 s each on the example; ``wall_s``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from planner.horizon.model import HorizonBuilt
from planner.schema.capacity import CapacityTables

DEFAULT_VERIFY_SLOTS = 3
"""Levels checked by default (the busiest three)."""

COLUMNS: tuple[str, ...] = (
    "period", "slot", "service", "peak_rate_per_s", "ttft_quantile", "ttft_target_ms", "ttft_analytic_ms", "ttft_sim_ms",
    "tpot_quantile", "tpot_target_ms", "tpot_analytic_ms", "tpot_sim_ms", "token_metric", "analytic_met", "met", "wall_s", "note",
)
"""``tpot_*`` hold the service's per-token metric (``token_metric``: ``tpot``, or ``itl`` when the service targets ITL);
``analytic_met``: the analytic TTFT and per-token figures within their targets; ``met``: the simulated ones."""


@dataclass(frozen=True)
class SlotCheck:
    rows: pd.DataFrame
    """Columns :data:`COLUMNS`, one row per (checked level, service)."""
    method: str


def busiest_levels(hb: HorizonBuilt, count: int) -> list[int]:
    """The ``count`` busiest slots, each at its busiest period: levels by whole-demand peak multiplier, largest first
    (earlier level first on ties), one per slot of the day."""
    m = hb.levels.m_peak
    S = len(hb.levels.slot_names)
    out: list[int] = []
    seen: set[int] = set()
    for k in np.lexsort((np.arange(m.size), -m)):
        if int(k) % S not in seen:
            seen.add(int(k) % S)
            out.append(int(k))
        if len(out) >= count:
            break
    return out


def slot_cvs(hb: HorizonBuilt, k: int, services: np.ndarray, given: np.ndarray) -> np.ndarray:
    """Per row of ``services``: the inter-arrival CV at level ``k`` — its slot's (the busiest window's) for a service
    whose slots carry one, else the row's own ``given`` CV (a service given by hand)."""
    name = hb.levels.slot_names[k % len(hb.levels.slot_names)]
    inputs = hb.inputs
    out = np.asarray(given, dtype=float).copy()
    for svc in pd.unique(services):
        src = inputs.service_slots.get(svc) if inputs.service_slots is not None else inputs.slots
        if src is None:
            continue
        cv = float(src.set_index(src["slot"].astype(str))["interarrival_cv"].astype(float)[name])
        if math.isfinite(cv):
            out[services == svc] = cv
    return out


def level_tables(hb: HorizonBuilt, k: int) -> CapacityTables:
    """The capacity table at level ``k`` (module docstring, step 1)."""
    tables = hb.prep.tables
    dem = hb.prep.demand.drop(columns=["d"]).copy()
    dem["rate_peak_per_s"] = dem["rate_peak_per_s"].to_numpy(float) * hb.levels.m_peak_d[k]
    dem["rate_mean_per_s"] = dem["rate_mean_per_s"].to_numpy(float) * hb.levels.m_mean_d[k]
    dem["interarrival_cv"] = slot_cvs(hb, k, dem["service"].astype(str).to_numpy(), dem["interarrival_cv"].to_numpy(float))
    if "model" in tables.demand.columns:
        dem["model"] = tables.demand["model"].to_numpy()
    return CapacityTables(demand=dem, points=tables.points, configs=tables.configs, costs=tables.costs, meta=dict(tables.meta))


def level_plan(hb: HorizonBuilt, v: np.ndarray, k: int, architecture: str) -> object:
    """A single-peak plan (:class:`planner.schema.plan.PlanResult`) of level ``k``'s pools and routing (module docstring, step 2)."""
    from planner.optimize.extract import build_pools_routing_latency, cost_breakdown
    from planner.optimize.model import Built
    from planner.optimize.prepare import prepare
    from planner.optimize.verdict import make_verdict
    from planner.schema.plan import ArchitecturePlan, CapacitySnapshot, PlanResult, SolverInfo

    red = int(hb.inputs.redundancy)
    prep = prepare(level_tables(hb, k), max_utilization=hb.inputs.max_utilization)
    key = ["service", "bucket", "role", "config"]
    base = hb.prep.points[key].astype(str).agg("|".join, axis=1)
    share = pd.Series(v[hb.block("x")][k], index=base.to_numpy()).groupby(level=0).sum()
    here = prep.points[key].astype(str).agg("|".join, axis=1)
    x = here.map(share).fillna(0.0).to_numpy(float).copy()
    x[x < 1e-6] = 0.0
    lost = float(share.sum()) - float(x.sum())
    if lost > 1e-6:  # a routed point the exact-rate caps rule out: the check would under-load the pools
        raise ValueError(f"{lost:.3g} of the level's routing shares have no usable operating point at the level's exact rate")
    n_h = pd.Series(np.rint(v[hb.block("n")][k]).astype(int), index=hb.prep.pools["pool"].astype(str).to_numpy())
    n = prep.pools["pool"].astype(str).map(n_h).fillna(0).to_numpy(int).copy()
    pool_pos = {p: j for j, p in enumerate(prep.pools["pool"])}
    built = Built(model=None, prep=prep, pool_names=prep.pools["pool"].tolist(),
                  point_pool=np.array([pool_pos[p] for p in prep.points["pool"]], dtype=int), route_keys=[],
                  n_max=prep.pools["n_max"].to_numpy(int))
    pools, routing, latency = build_pools_routing_latency(built, x, n, red)
    costs = cost_breakdown(prep.tables.costs, prep.tables.configs, prep.points, x, prep.pools, n, redundancy=red)
    plan = ArchitecturePlan(architecture=architecture, feasible=True, pools=pools, routing=routing, latency=latency, costs=costs,
                            solver=SolverInfo(status="optimal", termination="horizon plan (level taken from the horizon MIP)"))
    used = np.flatnonzero(x > 0)
    snapshot = CapacitySnapshot(demand=prep.demand.drop(columns=["d"]).to_dict("records"),
                                points=prep.points.loc[used, [c for c in prep.points.columns if c != "i"]].to_dict("records"),
                                configs=prep.tables.configs.to_dict("records"),
                                costs={kk: float(vv) for kk, vv in vars(prep.tables.costs).items()}, redundancy=red)
    return PlanResult(instance=f"level {k}", architectures={architecture: plan}, verdict=make_verdict({architecture: plan}, prep),
                      capacity=snapshot)


def verify_slots(hb: HorizonBuilt, v: np.ndarray, architecture: str, count: int = DEFAULT_VERIFY_SLOTS, *,
                 seed: int = 0) -> SlotCheck:
    """Simulate the ``count`` busiest levels of a solved plan over time (module docstring)."""
    from planner.schema.plan import PlanResult
    from planner.verify import simulate_plan

    sim_arch = architecture if architecture in ("shared", "disaggregated", "hybrid") else "hybrid"
    S = len(hb.levels.slot_names)
    rows: list[dict[str, object]] = []
    for k in busiest_levels(hb, count):
        t0 = time.perf_counter()
        rate = hb.prep.demand.assign(r=hb.prep.demand["rate_peak_per_s"].to_numpy(float) * hb.levels.m_peak_d[k]).groupby("service")["r"].sum()
        try:
            result = level_plan(hb, v, k, sim_arch)
        except ValueError as exc:  # said in the row, not raised: the rest of the plan is still reported
            rows.extend({"period": k // S, "slot": hb.levels.slot_names[k % S], "service": str(svc), "peak_rate_per_s": float(r),
                         "met": None, "wall_s": time.perf_counter() - t0, "note": f"not checked: {exc}"} for svc, r in rate.items())
            continue
        assert isinstance(result, PlanResult)
        plan = result.architectures[sim_arch]
        analytic = {lp.service: lp for lp in plan.latency}
        try:
            check = simulate_plan(result, sim_arch, seed=seed)
            sims = {s.service: s for s in check.services}
            note = "; ".join(check.findings)
        except (ValueError, KeyError, NotImplementedError) as exc:  # a plan the simulator cannot represent: said, not raised
            sims, note = {}, f"not simulated: {exc}"
        wall = time.perf_counter() - t0
        for svc in sorted(analytic):
            a = analytic[svc]
            s = sims.get(svc)
            rows.append({"period": k // S, "slot": hb.levels.slot_names[k % S], "service": svc, "peak_rate_per_s": float(rate.get(svc, 0.0)),
                         "ttft_quantile": a.ttft_quantile, "ttft_target_ms": a.ttft_target_ms, "ttft_analytic_ms": a.ttft_predicted_ms,
                         "ttft_sim_ms": s.ttft_sim_ms if s else None, "tpot_quantile": a.tpot_quantile, "tpot_target_ms": a.tpot_target_ms,
                         "tpot_analytic_ms": a.tpot_predicted_ms, "tpot_sim_ms": s.tpot_sim_ms if s else None,
                         "token_metric": a.token_metric, "analytic_met": bool(a.ttft_met and a.tpot_met),
                         "met": bool(s.ttft_met and s.tpot_met) if s else None, "wall_s": wall, "note": note})
    method = (f"the {count} busiest slots by peak demand (each at its busiest period), each level's pools and routing from the horizon MIP "
              "simulated at that level's peak rate with the slot's inter-arrival CV (gamma renewal; planner.verify.simulate_plan, seed "
              f"{seed}); analytic figures by the single-peak extraction at the level's exact rates (planner.horizon.verify)")
    return SlotCheck(pd.DataFrame(rows, columns=list(COLUMNS)), method)
