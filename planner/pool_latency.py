"""The analytic latency of a plan's pools at peak: shared by the optimiser and the verification.

:mod:`planner.optimize.latency` (the verify-and-tighten factors), :mod:`planner.optimize.extract`
(the plan's latency predictions) and :mod:`planner.verify` (analytic against simulated) all read
their predictions from here, so verification does not depend on the optimiser (issue 27) and every
view of a plan quotes one analytic number.

1. :func:`pool_latency` — per pool ``p`` a G/G/c queue at peak with ``c = (n_p − k)·B_p``
   servers (``B_p`` the load-weighted batch, 1 for prefill), arrival rate
   ``λ_p = Σ λ_peak x``, mean service ``s_p = busy_p / (n_p − k) · c / λ_p`` and
   the arrival-weighted arrival CV and the service-time CV of the mixture of its points (buckets of
   different lengths in one queue: ``c_s² = E[S²]/E[S]² − 1``); its wait quantile ``W_p`` (:func:`planner.queueing.wait_quantile_s`)
   at the service's TTFT quantile. A unified pool adds the chunked-prefill lane wait of its bucket
   mix over its live instances behind a least-loaded router (:func:`lane_wait_quantile_ms`,
   :func:`planner.queueing.least_loaded_lane_wait_quantile_s`), which replaces the lane wait each
   unified point priced for its bucket alone (``lane_wait_ms``, inside its ``ttft_ms``).
2. :func:`bucket_latency` — per (service, bucket): ``TTFT = max ttft_ms_i + W_{p(i)}`` over
   its routed prefill / unified points, plus the worst slot wait of its decode pools; TPOT
   the worst routed operating point (at most the target by the feasibility mask).

Chunked-prefill lane of a unified pool (:func:`lane_wait_quantile_ms`). Inside each unified
instance, admitted prompts queue for the one prefill lane (a chunk of ``q`` tokens per
iteration, :mod:`planner.perf.points`). A unified operating point prices that wait for its
bucket alone at its full load on one instance (``lane_wait_ms``, M/D/1, included in its
``ttft_ms``); a pool mixing buckets replaces it by the lane wait of the mix at the pool's actual
peak load over its ``c = n − k`` live instances, each instance's lane one server (the queue's
parameters and the least-loaded router's three terms: :mod:`planner.optimize.extract`'s docstring).

Measured pools (every routed point from a measured capacity file) add no wait: a measured rate
is what one instance sustains within the SLO, its own queueing included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from planner.schema.plan import ArchitecturePlan, PlanResult


def lane_wait_quantile_ms(quantile: float, rates_per_s: np.ndarray, lane_service_s: np.ndarray,
                          live_instances: int, arrival_cv: float = 1.0) -> tuple[float, dict[str, float]]:
    """Lane-wait quantile (ms) of a unified pool mixing buckets, and its queue parameters
    (module docstring). ``rates_per_s`` routed peak rates of the pool's points,
    ``lane_service_s`` their lane service times, ``arrival_cv`` the pool's inter-arrival CV.
    ``inf`` when the lane is saturated or no instance survives; ``nan`` when a lane service
    time is unknown. The info dict carries ``lane_utilization`` (per lane), the mixture's mean
    and CV, the arrival CV and the three terms of the least-loaded model (seconds)."""
    from planner.queueing import least_loaded_lane_wait_quantile_s

    lam = np.asarray(rates_per_s, dtype=float)
    s = np.asarray(lane_service_s, dtype=float)
    total = float(lam.sum())
    info = {k: math.nan for k in LANE_INFO_KEYS}
    if total <= 0 or not len(lam):
        return 0.0, info
    if not np.all(np.isfinite(s)):
        return math.nan, info
    if live_instances < 1:
        return math.inf, info
    if float((lam * s).sum()) <= 0:
        return 0.0, {**info, "lane_utilization": 0.0}
    w, terms = least_loaded_lane_wait_quantile_s(quantile, total, int(live_instances), s, lam, arrival_cv)
    return w * 1e3, {k: float(terms.get(k, math.nan)) for k in LANE_INFO_KEYS}


LANE_INFO_KEYS: tuple[str, ...] = ("lane_utilization", "lane_mean_service_s", "lane_service_cv", "lane_arrival_cv",
                                   "lane_instance_arrival_cv", "lane_wait_random_s", "lane_wait_pooled_s",
                                   "lane_wait_balanced_s", "lane_wait_residual_s")
"""Keys of :func:`lane_wait_quantile_ms`'s info (columns of :func:`pool_latency`)."""


def lane_columns(pts: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per point: lane service time (s) and the point's own lane wait (ms); ``nan`` when absent."""
    n = len(pts)
    svc = pts["lane_service_ms"].to_numpy(float) / 1e3 if "lane_service_ms" in pts.columns else np.full(n, np.nan)
    own = pts["lane_wait_ms"].to_numpy(float) if "lane_wait_ms" in pts.columns else np.full(n, np.nan)
    return svc, own




POOL_LATENCY_COLUMNS: tuple[str, ...] = (
    "pool", "role", "instances", "servers", "arrival_rate_per_s", "mean_service_s", "utilization_peak",
    "service_cv", "arrival_cv", "quantile", "wait_ms",
    "lane_utilization", "lane_mean_service_s", "lane_service_cv", "lane_arrival_cv", "lane_wait_ms",
    "lane_instance_arrival_cv", "lane_wait_random_s", "lane_wait_pooled_s", "lane_wait_balanced_s", "lane_wait_residual_s",
)
"""Columns of :func:`pool_latency`: per pool the G/G/c queue at peak and its wait quantile (ms)
(``wait_ms``: the wait for a server / batch slot); for unified pools also the chunked-prefill
lanes of its live instances (:func:`lane_wait_quantile_ms`: per-lane
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
    from planner.queueing import wait_quantile_s

    x = np.asarray(share, dtype=float)
    sel = x > 0
    lane_s_all, _own = lane_columns(points)
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

    x = np.asarray(share, dtype=float)
    sel = x > 0
    pts = points.loc[sel].copy()
    _svc, own = lane_columns(points)
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
