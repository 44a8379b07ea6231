"""The analytic tail-latency check of a solved plan, and the cap factors that would fix a miss (DESIGN §6, issue 7).

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
   per round so each round makes progress; at most ×4) (:func:`tighten_factors`).

Points whose cap came with the table (measured capacity, ``utilization_cap`` given) are
not re-checked: a measured rate already includes queueing at the SLO. The loop that applies
the factors and re-solves is :mod:`planner.optimize.tighten`; the discrete-event check
(:mod:`planner.verify`) compares its simulated waits with :func:`predicted_pool_quantiles`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from planner.optimize.prepare import Prepared
from planner.schema.plan import ArchitecturePlan, PlanResult

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


def plan_shares(plan: ArchitecturePlan, points: pd.DataFrame) -> np.ndarray:
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
    return pool_latency(pts, plan_shares(plan, pts), {p.name: p.instances for p in plan.pools}, result.capacity.redundancy)


def tighten_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, min_step: float = 1.05,
                    max_step: float = 4.0) -> tuple[dict[str, float], pd.DataFrame]:
    """Per pool to tighten: the factor dividing its caps (module docstring, step 3); and the bucket table.

    Empty when every bucket meets its targets (or only pools with caps supplied by the table
    are involved, which are not re-checked).
    """
    from planner.optimize.extract import _lane_columns
    from planner.queueing import max_utilization

    pts = prep.points
    x = plan_shares(plan, pts)
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




RELAX_CEILING = 0.95
"""Highest utilisation cap a relaxed prefill pool gets (:func:`relax_factors`; :mod:`planner.optimize.check`)."""


def relax_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, below: float = 0.8,
                  ceiling: float = RELAX_CEILING) -> dict[str, float]:
    """Per prefill pool whose caps are far tighter than its actual size needs: a factor ``f < 1``
    dividing its caps (raising them), from the wait the pool may add at its current size.

    The caps ``ρ_i`` come from a nominal pool of one bucket, ``n0 = ⌈λ_peak τ⌉`` servers
    (:func:`planner.optimize.prepare.utilization_caps`): at low rates ``n0 = 1`` and a bursty log
    (within-window CV 4.7 on the Azure code trace) gives caps of a few per cent, while the plan's
    pool, sized by those caps, has tens of servers whose real wait is far below the budget — and
    more traffic (a larger ``n0``, higher caps) then costs less (issue 13, *not monotone*). For a
    prefill pool ``p`` whose buckets all meet their TTFT: the budget is its current wait plus the
    smallest slack ``target − predicted`` of those buckets; ``ρ*_p`` the largest utilisation
    meeting it at the pool's current servers (:func:`planner.queueing.max_utilization`, at most
    ``ceiling``); ``f_p = u_p / ρ*_p`` when below ``below`` (else the pool is left alone).
    Shrinking the pool lowers ``ρ*`` again: the loop re-checks and tightens
    (:func:`planner.optimize.tighten.solve_verified` keeps the relaxed plan only when it passes
    and costs less)."""
    from planner.queueing import max_utilization

    pts = prep.points
    x = plan_shares(plan, pts)
    inst = {p.name: p.instances for p in plan.pools}
    pl: dict[str, dict[Any, Any]] = {str(r["pool"]): r for r in pool_latency(pts, x, inst, redundancy).to_dict("records")}
    waits = {p: float(r["wait_ms"]) for p, r in pl.items()}
    buckets = bucket_latency(pts, x, waits)
    given = pts["utilization_cap"].to_numpy(float) if "utilization_cap" in pts.columns else np.full(len(pts), np.nan)
    fixed = set(pts.loc[~np.isnan(given), "pool"].astype(str))
    slack: dict[str, float] = {}
    for br in buckets.to_dict("records"):
        room = float(br["ttft_target_ms"]) - float(br["ttft_predicted_ms"])
        for p in br["pools"]:
            slack[str(p)] = min(slack.get(str(p), math.inf), room if br["met"] else -math.inf)
    out: dict[str, float] = {}
    for p, row in pl.items():
        if row["role"] != "prefill" or p in fixed or not (slack.get(p, -math.inf) > 0) or not math.isfinite(slack[p]):
            continue
        servers, util = int(row["servers"]), float(row["utilization_peak"])
        if servers < 1 or not (0 < util < 1) or float(row["mean_service_s"]) <= 0:
            continue
        budget_s = (waits[p] + slack[p]) / 1e3
        rho_star = max_utilization(servers, float(row["mean_service_s"]), float(row["quantile"]), budget_s,
                                   service_cv=float(row["service_cv"]), arrival_cv=float(row["arrival_cv"]), ceiling=ceiling)
        if rho_star > 0 and util / rho_star < below:
            out[p] = util / rho_star
    return out
