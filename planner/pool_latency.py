"""The analytic latency of a plan's pools at peak: shared by the optimiser and the verification.

:mod:`planner.optimize.latency` (the verify-and-tighten factors), :mod:`planner.optimize.extract`
(the plan's latency predictions) and :mod:`planner.verify` (analytic against simulated) all read
their predictions from here, so verification does not depend on the optimiser (issue 27) and every
view of a plan quotes one analytic number.

1. :func:`pool_latency` — per pool ``p`` a G/G/c queue at peak with ``c = (n_p − k)·B_p``
   servers (``B_p`` the load-weighted batch, 1 for prefill), arrival rate
   ``λ_p = Σ λ_peak x``, mean service ``s_p = busy_p / (n_p − k) · c / λ_p`` and
   the arrival-weighted arrival CV and the service-time CV of the mixture of its points (buckets of
   different lengths in one queue: ``c_s² = E[S²]/E[S]² − 1``). Every pool (prefill, decode, unified) sees
   the service's arrivals thinned to its share ``P``: ``c_a² = P·c² + 1 − P`` (:func:`_thinned_cv2`),
   and a decode slot is held for the bucket's mean output at the point's step, ``s = o_mean·TPOT``
   (:func:`decode_hold_s`; the plan's utilisation keeps τ at the representative lengths).
   Its wait quantile ``W_p`` (:func:`planner.queueing.wait_quantile_s`)
   at the service's TTFT quantile. A unified pool adds the chunked-prefill lane wait of its bucket
   mix over its live instances behind a least-loaded router (:func:`lane_wait_quantile_ms`,
   :func:`planner.queueing.least_loaded_lane_wait_quantile_s`), which replaces the lane wait each
   unified point priced for its bucket alone (``lane_wait_ms``, inside its ``ttft_ms``).
2. :func:`bucket_latency` — per (service, bucket): ``TTFT = max ttft_ms_i + W_{p(i)}`` over
   its routed prefill / unified points, plus the worst slot wait of its decode pools; TPOT (or
   ITL, the service's per-token metric) the worst routed point. Given the plan's pool sizes, a
   unified point is taken **at the load its pool carries** (step 3) instead of its full batch.
3. :func:`unified_at_load` — a unified pool's TTFT, TPOT and ITL at the load that arrives: the
   fixed point of its arrivals, iteration time and chunked-prefill work (the maths is in the
   section comment *Latency at the load that arrives* below, :func:`unified_load`); the
   operating point's batch is the cap (its slot wait, step 1). Disaggregated pools are already
   at the load that arrives in step 1. :func:`plan_latency_quantiles` gives the same model at any
   quantile (p50 / p99 against the simulator: ``benchmarks/bench_latency_at_load.py``).

Before step 3 a unified point's full-batch latency was charged whatever the load: one A100,
Llama-3.1-8B, 1,000 / 200 tokens at 4 req/s (utilisation 0.48) was predicted at TTFT p99 852 ms
and TPOT p99 267 ms against 571 / 130 ms simulated; now 573 / 133 ms.

Chunked-prefill lane of a unified pool (:func:`lane_wait_quantile_ms`). Inside each unified
instance, admitted prompts queue for the one prefill lane (a chunk of ``q`` tokens per
iteration, :mod:`planner.perf.points`). A unified operating point prices that wait for its
bucket alone at its full load on one instance (``lane_wait_ms``, M/D/1, included in its
``ttft_ms``); a pool mixing buckets replaces it by the lane wait of the mix at the pool's actual
peak load over its ``c = n − k`` live instances, each instance's lane one server (the queue's
parameters and the least-loaded router's three terms: :mod:`planner.optimize.extract`'s docstring).
Fed by a replayed log, the lanes also wait the log's bursts at their utilisation
(:mod:`planner.workload.replay_wait`): the pool's slot wait is the larger of the two, and its tail joins
the points' TTFT law (:func:`unified_slot_tails`, :func:`slot_sum_quantile_s`), in the check, the caps
(:func:`planner.optimize.prepare.unified_caps_at_load`) and the tightening alike.

Measured pools (every routed point from a measured capacity file) add no wait: a measured rate
is what one instance sustains within the SLO, its own queueing included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from planner.inline_encode import fold_inline_encode
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




def ttft_prompt_ratio(points: pd.DataFrame) -> np.ndarray:
    """Per point: the new tokens of the prompt whose TTFT a unified point checks (``prefill_tokens_rep``, the bucket's
    representative) over the new tokens its lane work is priced at (``prefill_tokens``, the length mix's mean,
    :func:`planner.capacity.bucket_work`), at least 1; 1 where either is missing. A unified point's own TTFT at the
    load that arrives counts the representative's chunks, as its full-batch ``ttft_ms`` does, while the lane's load
    is the mix's mean: with the mean prompt's chunks long-context-assistant's top bucket (12 % of its prompts
    112,878 tokens, 84 chunk iterations against 30 for its mean) was predicted at 8.7 s against 14.1 s simulated."""
    n = len(points)
    if "prefill_tokens_rep" not in points.columns or "prefill_tokens" not in points.columns:
        return np.ones(n)
    rep = pd.to_numeric(points["prefill_tokens_rep"], errors="coerce").to_numpy(float)
    mean = pd.to_numeric(points["prefill_tokens"], errors="coerce").to_numpy(float)
    ok = np.isfinite(rep) & np.isfinite(mean) & (mean > 0)
    ratio = np.ones(n)
    ratio[ok] = np.maximum(rep[ok] / mean[ok], 1.0)
    return ratio


POOL_LATENCY_COLUMNS: tuple[str, ...] = (
    "pool", "role", "instances", "servers", "arrival_rate_per_s", "mean_service_s", "utilization_peak",
    "service_cv", "arrival_cv", "quantile", "wait_ms",
    "lane_utilization", "lane_mean_service_s", "lane_service_cv", "lane_arrival_cv", "lane_wait_ms",
    "lane_instance_arrival_cv", "lane_wait_random_s", "lane_wait_pooled_s", "lane_wait_balanced_s", "lane_wait_residual_s",
    "slot_peakedness", "slot_drain_service_s", "replay_wait_ms", "replay_pw", "replay_theta_per_s",
)
"""Columns of :func:`pool_latency`: per pool the G/G/c queue at peak and its wait quantile (ms)
(``wait_ms``: the wait for a server / batch slot; for a pool fed by a replayed log the larger of that and the wait
its bursts cause, ``replay_wait_ms`` — a prefill pool's servers at its utilisation, a unified pool's chunked-prefill
lanes at theirs (``lane_utilization``) —, whose exponential tail is ``replay_pw``, ``replay_theta_per_s``
(:mod:`planner.workload.replay_wait`; a unified pool's tail then joins its points' TTFT law as the slot wait's,
:func:`unified_slot_tails`); a decode pool's slots held for its mean hold at its slots over its share of the service
(:func:`replay_slot_wait_ms`, ``replay_wait_ms`` only), ``nan`` elsewhere); for unified pools also the chunked-prefill
lanes of its live instances (:func:`lane_wait_quantile_ms`: per-lane
utilisation, the service mixture's mean and CV, the pool's and one lane's arrival CV, the wait
and its four terms;
``nan`` for other roles or when the points carry no lane columns)."""

_LAT_COLS = ("pool", "role", "rate_peak_per_s", "instance_seconds_per_request", "max_batch", "service_time_cv",
             "interarrival_cv", "ttft_quantile")


def pool_latency(points: pd.DataFrame, share: np.ndarray, instances: Mapping[str, int], redundancy: int,
                 quantile: float | None = None) -> pd.DataFrame:
    """Per pool: predicted wait quantile at peak for the actual pool size (module docstring, step 1);
    at the services' TTFT quantile (the largest routed to the pool), or at ``quantile`` when given.

    ``points`` are operating-point rows (capacity-table columns plus ``pool``, ``rate_peak_per_s``,
    ``interarrival_cv``, ``ttft_quantile``), ``share`` their routing shares, ``instances`` the
    provisioned instances per pool name. Pools without routed traffic are left out; a pool
    with no surviving instance (``n ≤ k``) or at utilisation ≥ 1 has an infinite wait. An inline encode in a prefill
    pool rides in its host row (:func:`planner.inline_encode.fold_inline_encode`).
    """
    points, share = fold_inline_encode(points, share)
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
    # a decode slot is held for the request's output at the point's step: the bucket's mean output
    # (as the optimiser's KV holding ``kv_hold_s``), not τ·B*, which prices the bucket's
    # representative (tail) output — 2,000 tokens against a mean of 385 in N5's bucket b3, a
    # 75 s holding time where the simulator holds ~15 s (decode_hold_s)
    s_pt = np.where(pts["role"].to_numpy(str) == "decode", decode_hold_s(points.loc[sel], s_pt), s_pt)
    cv_pt = pts["service_time_cv"].to_numpy(float)
    frame = pd.DataFrame({
        "pool": pts["pool"].to_numpy(str), "role": pts["role"].to_numpy(str), "arr": lam, "busy": lam * tau,
        "busy_b": lam * tau * batch, "s1": lam * s_pt, "s2": lam * s_pt**2 * (1.0 + cv_pt**2),
        "ca": lam * pts["interarrival_cv"].to_numpy(float), "ca2": lam * _thinned_cv2(points, sel, np.asarray(share, dtype=float)),
        "q": pts["ttft_quantile"].to_numpy(float),
        "lane_s": lane_s, "measured": ~np.isnan(points.loc[sel, "utilization_cap"].to_numpy(float)) if "utilization_cap" in points.columns
        else np.zeros(len(pts), dtype=bool),
    })
    agg = frame.groupby("pool", sort=True).agg(role=("role", "first"), arr=("arr", "sum"), busy=("busy", "sum"),
                                                busy_b=("busy_b", "sum"), s1=("s1", "sum"), s2=("s2", "sum"), ca=("ca", "sum"),
                                                ca2=("ca2", "sum"), q=("q", "max"),
                                                measured=("measured", "all"))
    if quantile is not None:
        agg["q"] = float(quantile)
    lanes_of = _lane_points(points, share) if (agg["role"] == "unified").any() else None
    replay = replay_curves(points, sel) if agg["role"].isin(["prefill", "unified"]).any() else None
    slot_replay = replay_slots(points, np.asarray(share, dtype=float)) if (agg["role"] == "decode").any() else {}
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
        # every pool sees its share of its services' arrivals (_thinned_cv2); a unified pool carrying
        # its whole service keeps the service's CV (P = 1)
        ca = math.sqrt(float(r["ca2"]) / arr) if arr > 0 else 1.0  # a pool carrying nothing (a level at zero traffic): no queue
        servers = max(1, int(n_eff * b)) if n_eff > 0 else 0
        service_s = busy / n_eff * servers / arr if n_eff > 0 and arr > 0 else 0.0
        peaked, drain_s = 1.0, service_s
        if r["role"] == "decode" and arr > 0:
            service_s = drain_s = s1 / arr  # the mean slot holding time (decode_hold_s); the plan's utilisation stays busy / n
        elif r["role"] == "unified" and lanes_of is not None and n_eff > 0 and service_s > 0:
            hold_s, peaked = unified_slot_queue(points, lanes_of, pool, n_eff)
            service_s = min(service_s, hold_s)
        util = busy / n_eff if n_eff > 0 else math.inf
        if n_eff <= 0:
            wait = math.inf
        elif r["measured"]:
            wait = 0.0  # measured capacity: queueing inside the measured rate (planner.optimize.extract.measured_pools)
        elif service_s > 0:
            wait = slot_wait_ms({"quantile": float(r["q"]), "arrival_rate_per_s": arr, "servers": servers, "mean_service_s": service_s,
                                 "service_cv": cs, "arrival_cv": ca, "slot_peakedness": peaked, "slot_drain_service_s": drain_s})
        else:
            wait = 0.0
        lane_wait, lane = math.nan, dict[str, float]()
        if r["role"] == "unified":
            g = frame[frame["pool"] == pool]
            lane_wait, lane = lane_wait_quantile_ms(float(r["q"]), g["arr"].to_numpy(float), g["lane_s"].to_numpy(float), n_eff, ca)
        replay_ms, replay_pw, replay_theta = math.nan, math.nan, math.nan
        # the log's bursts: a prefill pool's servers at its utilisation, a unified pool's chunked-prefill lanes at theirs
        burst_u = util if r["role"] == "prefill" else float(lane.get("lane_utilization", math.nan))
        if replay is not None and pool in replay and n_eff > 0 and not r["measured"] and not math.isnan(burst_u):
            replay_ms, replay_pw, replay_theta = replay_wait_at(replay[pool], burst_u, float(r["q"]), lanes=r["role"] == "unified")
            wait = max(wait, replay_ms)
        elif pool in slot_replay and n_eff > 0 and not r["measured"] and service_s > 0:
            # a decode pool's slots under the log's bursts (planner.workload.replay_wait.replay_slot_table)
            replay_ms = replay_slot_wait_ms(slot_replay[pool], servers, service_s, float(r["q"]))
            wait = max(wait, replay_ms)
        rows.append({"pool": str(pool), "role": str(r["role"]), "instances": n, "servers": servers, "arrival_rate_per_s": arr,
                     "mean_service_s": service_s, "utilization_peak": util, "service_cv": cs, "arrival_cv": ca,
                     "quantile": float(r["q"]), "wait_ms": wait, "lane_wait_ms": lane_wait,
                     **{k: lane.get(k, math.nan) for k in LANE_INFO_KEYS},
                     "slot_peakedness": peaked, "slot_drain_service_s": drain_s,
                     "replay_wait_ms": replay_ms, "replay_pw": replay_pw, "replay_theta_per_s": replay_theta})
    return pd.DataFrame(rows, columns=list(POOL_LATENCY_COLUMNS))


def service_peak_rates(points: pd.DataFrame) -> dict[str, float]:
    """Per service of ``points``: its peak rate, the sum over its distinct (service, bucket) rows (a bucket's rate is
    repeated on every point that serves it)."""
    keys = points[["service", "bucket", "rate_peak_per_s"]].drop_duplicates(["service", "bucket"])
    return {str(k): float(v) for k, v in keys.groupby(keys["service"].astype(str))["rate_peak_per_s"].sum().items()}


def replay_by_row(points: pd.DataFrame, mask: np.ndarray, rate_rows: np.ndarray, *,
                  slots: bool = False) -> dict[int, tuple[np.ndarray, float]]:
    """Per row position of ``mask`` whose service replays a log: its replayed-burst wait curve
    (:mod:`planner.workload.replay_wait`; with ``slots``, its decode slot table, :func:`replay_wait.replay_slot_table`;
    a unified row whose service replays none, the renewal stream's curve, :func:`replay_wait.renewal_curve`)
    and the service's peak rate, the sum over the distinct (service, bucket) rows of ``rate_rows`` (the bursts are the
    service's, whatever share of them a pool carries)."""
    from planner.workload.replay_wait import (
        RENEWAL_WAIT_COLUMN,
        REPLAY_SLOT_COLUMN,
        REPLAY_WAIT_COLUMN,
        parse_curve,
        parse_slot_table,
    )

    column, parse = (REPLAY_SLOT_COLUMN, parse_slot_table) if slots else (REPLAY_WAIT_COLUMN, parse_curve)
    if not mask.any():
        return {}
    text = points[column].astype(str).to_numpy() if column in points.columns else np.full(len(points), "", dtype=object)
    if not slots and RENEWAL_WAIT_COLUMN in points.columns:
        # a shared pool's lanes: the renewal stream's curve where no log is replayed (replay_wait.renewal_curve)
        lanes = (points["role"].astype(str).to_numpy() == "unified") & (text == "")
        text = np.where(lanes, points[RENEWAL_WAIT_COLUMN].astype(str).to_numpy(), text)
    on = mask & (text != "")
    if not on.any():
        return {}
    rate = service_peak_rates(points.loc[rate_rows])
    svc = points["service"].astype(str).to_numpy()
    out: dict[int, tuple[np.ndarray, float]] = {}
    for i in np.flatnonzero(on):
        curve = parse(str(text[i]))
        if curve is not None and float(rate.get(svc[i], 0.0)) > 0:
            out[int(i)] = (curve, float(rate[svc[i]]))
    return out


def replay_curves(points: pd.DataFrame, sel: np.ndarray) -> dict[str, list[tuple[np.ndarray, float]]] | None:
    """Per prefill or unified pool among the routed rows ``sel``: the replayed-burst wait curves of the services it
    serves, each with the service's routed peak rate (:func:`replay_by_row`); None when no point carries a curve."""
    rows = replay_by_row(points, sel & np.isin(points["role"].astype(str).to_numpy(), ("prefill", "unified")), sel)
    pool = points["pool"].astype(str).to_numpy()
    svc = points["service"].astype(str).to_numpy()
    out: dict[str, list[tuple[np.ndarray, float]]] = {}
    seen: set[tuple[str, str]] = set()
    for i, got in rows.items():
        if (pool[i], svc[i]) not in seen:
            seen.add((pool[i], svc[i]))
            out.setdefault(pool[i], []).append(got)
    return out or None


def replay_slots(points: pd.DataFrame, share: np.ndarray) -> dict[str, list[tuple[np.ndarray, float, float]]]:
    """Per decode pool routed by ``share``: ``(slot table, the service's peak rate, the pool's arrivals from it per s)``
    of every service it serves whose log the peak simulation replays (:func:`replay_by_row` with ``slots``: the
    rate summed over the service's distinct buckets)."""
    x = np.asarray(share, dtype=float)
    rows = replay_by_row(points, (x > 0) & (points["role"].astype(str).to_numpy() == "decode"), np.ones(len(points), dtype=bool),
                         slots=True)
    if not rows:
        return {}
    svc = points["service"].astype(str).to_numpy()
    pool = points["pool"].astype(str).to_numpy()
    arr = points["rate_peak_per_s"].to_numpy(float) * x
    got: dict[tuple[str, str], list[Any]] = {}
    for i, (table, r) in rows.items():
        key = (pool[i], svc[i])
        if key in got:
            got[key][2] += float(arr[i])
        else:
            got[key] = [table, r, float(arr[i])]
    out: dict[str, list[tuple[np.ndarray, float, float]]] = {}
    for (p, _s), (table, r, a) in got.items():
        out.setdefault(p, []).append((table, r, a))
    return out


def replay_slot_wait_ms(tables: list[tuple[np.ndarray, float, float]], servers: float, hold_s: float, quantile: float) -> float:
    """A decode pool's slot wait (ms) at ``quantile`` under its services' replayed bursts (:func:`replay_slots`): the
    longest over its services, each read at the pool's slots over its share of the service ``c / p`` (a thinned burst
    of ``k`` arrivals takes ``k p`` of the pool's slots) and the pool's mean hold."""
    from planner.workload.replay_wait import slot_wait_quantile_s

    worst = 0.0
    for table, rate, arr in tables:
        if arr > 0 and servers >= 1:
            worst = max(worst, slot_wait_quantile_s(table, servers * rate / arr, hold_s, rate, quantile) * 1e3)
    return worst


def replay_wait_at(curves: list[tuple[np.ndarray, float]], utilization: float, quantile: float,
                   *, lanes: bool = False) -> tuple[float, float, float]:
    """``(wait ms at quantile, C, θ per s)`` of a prefill pool at ``utilization`` fed by the bursts of its services
    (:func:`replay_curves`): the service whose bursts make it wait longest (a pool carrying two services' bursts sees
    them interleaved, which the larger of the two bounds from below). ``lanes``: a shared pool's chunked-prefill lanes,
    whose own law prices their queue under Poisson arrivals — the bursts' backlog beyond a Poisson stream's
    (:func:`planner.workload.replay_wait.beyond_poisson_wait_s`), added to the TTFT at load (:func:`burst_sets_wait`),
    with no tail (``C``, ``θ`` nan)."""
    from planner.workload import replay_wait as rw

    best = (0.0, 0.0, math.inf)
    for curve, rate in curves:
        if lanes:
            w = rw.beyond_poisson_wait_s(curve, utilization, rate, quantile) * 1e3
            if w >= best[0]:
                best = (w, math.nan, math.nan)
            continue
        w = rw.wait_quantile_s(curve, utilization, rate, quantile) * 1e3
        if w >= best[0]:
            c, theta = rw.tail_params(curve, utilization, rate, quantile)
            best = (w, c, theta)
    return best


def pool_waits(points: pd.DataFrame, share: np.ndarray, instances: Mapping[str, int], redundancy: int,
               quantile: float | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, float], dict[str, float]]:
    """What :func:`bucket_latency` takes from :func:`pool_latency`: its rows by pool name (``pool_rows``), the
    unified pools' lane waits (``lanes_ms``, ms) and every wait a pool adds, slot + lane (``waits_ms``, ms)."""
    rows = {str(r["pool"]): {str(a): b for a, b in r.items()}
            for r in pool_latency(points, share, instances, redundancy, quantile=quantile).to_dict("records")}
    lanes = {p: float(r["lane_wait_ms"]) for p, r in rows.items() if not math.isnan(float(r["lane_wait_ms"]))}
    return rows, lanes, {p: float(r["wait_ms"]) + lanes.get(p, 0.0) for p, r in rows.items()}


def decode_hold_s(pts: pd.DataFrame, full_batch_hold_s: np.ndarray) -> np.ndarray:
    """Mean slot holding time (s) of decode points: ``output_tokens_mean × tpot_ms / 1e3`` (the step
    at the point's full batch, an upper bound on a smaller batch's); ``full_batch_hold_s`` (τ·B*)
    where a table lacks those columns or they are not finite and positive."""
    if "output_tokens_mean" not in pts.columns or "tpot_ms" not in pts.columns:
        return full_batch_hold_s
    hold = pd.to_numeric(pts["output_tokens_mean"], errors="coerce").to_numpy(float) * pd.to_numeric(pts["tpot_ms"], errors="coerce").to_numpy(float) / 1e3
    ok = np.isfinite(hold) & (hold > 0)
    return np.where(ok, np.minimum(np.where(ok, hold, 0.0), full_batch_hold_s), full_batch_hold_s)


def _thinned_cv2(points: pd.DataFrame, sel: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per routed point (rows ``sel`` of ``points``, shares ``x[sel]``): the squared arrival CV its
    pool sees from the point's service, ``P·c² + 1 − P``.

    A pool receives a fraction ``P = λ_{pool,svc} / Λ_svc`` of its service's peak arrivals
    (``Λ_svc = Σ_buckets rate_peak_per_s``: the buckets split the service's peak by weight): the
    length buckets split arrivals independently of their times, and the router sends each to a
    configuration with probability its routing share. Thinning a renewal stream of CV ``c`` with
    probability ``P`` gives a renewal stream of intervals ``Σ_{j≤N} X_j``, ``N ~ Geometric(P)``:
    ``E = E[X]/P``, ``Var = Var[X]/P + E[X]²(1−P)/P²``, so ``c_P² = P·c² + 1 − P`` (exact; the
    bursts of a CV-3 service spread over many pools reach each one nearly Poisson). The pool's
    ``c_a²`` is the arrival-weighted mean of its services' thinned ``c_P²`` (superposition of
    independent streams, Whitt's QNA). Random routing is the conservative case: a round-robin
    or least-loaded router splits more evenly still. Before this, a decode pool taking 4.6 % of a
    CV-2.9 service was charged the service's CV 2.9 (``c_a² = 8.6`` instead of 1.36): on
    ``fuzz-turn3/solve_disagg_ttft_missed_ops0.yaml`` a 122 s slot wait in a pool the simulator
    never queued (N5).
    """
    pts = points.loc[sel]
    lam = pts["rate_peak_per_s"].to_numpy(float) * x[sel]
    svc = pts["service"].astype(str).to_numpy()
    pools = pts["pool"].astype(str).to_numpy()
    first = points.drop_duplicates(["service", "bucket"])
    total = first.groupby(first["service"].astype(str))["rate_peak_per_s"].sum().to_dict()
    frac = pd.Series(lam).groupby([pools, svc]).transform("sum").to_numpy(float)
    peak = np.array([float(total.get(s, 0.0)) for s in svc])
    p = np.clip(np.divide(frac, peak, out=np.ones_like(frac), where=peak > 0), 0.0, 1.0)
    c2 = pts["interarrival_cv"].to_numpy(float) ** 2
    return p * c2 + 1.0 - p


def bucket_latency(points: pd.DataFrame, share: np.ndarray, waits_ms: Mapping[str, float],
                   lanes_ms: Mapping[str, float] | None = None, *, instances: Mapping[str, int] | None = None,
                   redundancy: int = 0, ttft_quantile: float | None = None, token_quantile: float | None = None,
                   pool_rows: Mapping[str, Mapping[Any, Any]] | None = None) -> pd.DataFrame:
    """Per (service, bucket): predicted TTFT and per-token quantiles at peak (module docstring, step 2).

    Columns: service, bucket, ttft_predicted_ms, ttft_target_ms, ttft_service_ms (the worst
    routed operating point's own TTFT; a unified point's at load without the slot wait summed into it,
    ``ttft_own_at_load_ms`` of :func:`unified_at_load`), tpot_predicted_ms, tpot_target_ms (the service's per-token
    metric: TPOT, or ITL when it targets ITL), pools (those it waits in), met. ``waits_ms`` per
    pool: every wait the pool adds (slot + lane); ``lanes_ms``: the pools whose lane wait of the mix
    is in ``waits_ms`` — their unified points' own ``lane_wait_ms`` is taken out of ``ttft_ms`` (it
    is replaced, not added).

    With ``instances`` (the plan's pool sizes): unified points are taken at the load their pool
    carries (:func:`unified_at_load`): TTFT, TPOT and ITL of the batch that actually arrives, not
    of the point's full batch; a pool whose prompts fit one lane iteration has its lane queue in
    that TTFT (its lane wait in ``waits_ms`` is then not added). ``ttft_quantile`` /
    ``token_quantile``: levels other than the services' own (unified points; the waits are the caller's).

    With ``pool_rows`` (:func:`pool_latency`'s rows by pool name) and ``instances``: a unified pool's slot wait is
    inside its points' TTFT at load, the quantile of the sum of the two (:func:`unified_ttft_s`,
    :func:`slot_sum_quantile_s`), not added as its own quantile. With ``pool_rows``: the TTFT of a bucket served by prefill
    and decode pools is the quantile of its latency group's length mix (:func:`_mixture_ttft`,
    :mod:`planner.ttft_mixture`), never above the representative rule's ``ttft_ms + W``. An inline encode in a prefill
    pool rides in its host row (:func:`planner.inline_encode.fold_inline_encode`): its time is in the host's TTFT.
    """
    points, share = fold_inline_encode(points, share)
    x = np.asarray(share, dtype=float)
    sel = x > 0
    pts = points.loc[sel]
    _svc, own = lane_columns(points)
    lanes = lanes_ms or {}
    pools_all = pts["pool"].astype(str).to_numpy()
    roles_all = pts["role"].to_numpy(str)
    replaced = np.array([p in lanes and not math.isnan(float(lanes[p])) for p in pools_all], dtype=bool)
    replaced &= roles_all == "unified"
    ttft_all = pts["ttft_ms"].to_numpy(float) - np.where(replaced, np.nan_to_num(own[sel]), 0.0)
    tpot_all = pts["tpot_ms"].to_numpy(float)
    # ITL of a point: its itl_ms (unified points), else its step (decode: every gap is one step)
    itl = pts["itl_ms"].to_numpy(float) if "itl_ms" in pts.columns else np.full(len(pts), np.nan)
    itl_all = np.where(np.isnan(itl), tpot_all, itl)
    no_lane: set[str] = set()
    no_slot: set[str] = set()  # unified pools whose slot wait (and lane) is inside the TTFT at load: no wait to add
    own_all = ttft_all  # each point's own TTFT (ttft_service_ms): without a slot wait summed into it
    if instances is not None:
        tails = unified_slot_tails(pool_rows) if pool_rows is not None else None
        bursty = bursty_pools(pool_rows) if pool_rows is not None else frozenset()
        at = unified_at_load(points, x, instances, redundancy, ttft_quantile, token_quantile, slot_tails=tails,
                             bursty=bursty).loc[sel]
        hit = at["ttft_at_load_ms"].notna().to_numpy()
        own_all = np.where(hit, at["ttft_own_at_load_ms"].to_numpy(float), ttft_all)
        ttft_all = np.where(hit, at["ttft_at_load_ms"].to_numpy(float), ttft_all)
        tpot_all = np.where(hit, at["tpot_at_load_ms"].to_numpy(float), tpot_all)
        itl_all = np.where(hit, at["itl_at_load_ms"].to_numpy(float), itl_all)
        no_lane = set(pools_all[hit & at["lane_in_ttft"].to_numpy(bool)])
        no_slot = set(pools_all[hit & at["slot_in_ttft"].to_numpy(bool)])
    # per (service, bucket), in order of first appearance (as groupby(sort=False)); numpy per group
    metric_all = pts["token_metric"].astype(str).to_numpy() if "token_metric" in pts.columns else None
    ttft_t_all = pts["ttft_target_ms"].to_numpy(float)
    tpot_t_all = pd.to_numeric(pts["tpot_target_ms"], errors="coerce").fillna(math.inf).to_numpy(float)
    itl_t_all = (pd.to_numeric(pts["itl_target_ms"], errors="coerce").fillna(math.inf).to_numpy(float)
                 if "itl_target_ms" in pts.columns else tpot_t_all)
    svc_all, bucket_all = pts["service"].to_numpy(), pts["bucket"].to_numpy()
    codes, _uniq = pd.factorize(pd.MultiIndex.from_arrays([pts["service"], pts["bucket"]]), sort=False)
    rows: list[dict[str, Any]] = []
    mixable: dict[int, tuple[np.ndarray, float]] = {}  # bucket row -> (its prefill points' positions in pts, decode wait + encode)
    for k in range(int(codes.max()) + 1 if len(codes) else 0):
        at_k = np.flatnonzero(codes == k)
        j0 = int(at_k[0])
        svc, bucket = svc_all[j0], bucket_all[j0]
        roles = roles_all[at_k]
        pools = pools_all[at_k]
        first = np.isin(roles, ("prefill", "unified"))
        dec = roles == "decode"
        w = np.array([0.0 if p in no_slot else
                      float(waits_ms.get(p, 0.0)) - (float(lanes.get(p, 0.0)) if p in no_lane and p in lanes else 0.0) for p in pools])
        w = np.where(np.isnan(w), math.inf, w)  # a saturated lane: inf - inf (its wait taken out of an infinite total) is no wait to spare
        ttft_pt = ttft_all[at_k]
        t_first = float(np.max(ttft_pt[first] + w[first])) if first.any() else 0.0
        t_dec = float(np.max(w[dec])) if dec.any() else 0.0
        dec_roles = np.isin(roles, ("decode", "unified"))
        itl_metric = metric_all is not None and str(metric_all[j0]) == "itl"
        tok = (itl_all if itl_metric else tpot_all)[at_k]
        tpot = float(np.max(tok[dec_roles])) if dec_roles.any() else 0.0
        ttft_t = float(ttft_t_all[j0])
        tpot_t = float((itl_t_all if itl_metric else tpot_t_all)[j0])
        # encode phase (multimodal rows, planner.capacity_encode): a separate encode pool adds its wait +
        # encode + embedding transfer; inline, the encode time adds to the host pool's prefill (whose wait
        # is already in t_first)
        enc = np.isin(roles, ("encode", "encode_prefill", "encode_unified"))
        t_enc = float(np.max(np.where(roles[enc] == "encode", ttft_pt[enc] + w[enc], ttft_pt[enc]))) if enc.any() else 0.0
        ttft = t_first + t_dec + t_enc
        if first.any() and bool(np.all(np.isin(roles, ("prefill", "decode")))):
            mixable[len(rows)] = (at_k[first], t_dec + t_enc)
        rows.append({"service": str(svc), "bucket": str(bucket), "ttft_predicted_ms": ttft, "ttft_target_ms": ttft_t,
                     "ttft_service_ms": float(np.max(own_all[at_k][first])) if first.any() else 0.0,
                     "tpot_predicted_ms": tpot, "tpot_target_ms": tpot_t, "pools": sorted(set(pools.tolist())),
                     "met": bool(ttft <= ttft_t * (1 + 1e-6) and tpot <= tpot_t * (1 + 1e-6))})
    if pool_rows is not None and mixable:
        _mixture_ttft(rows, mixable, pts, x[sel], pool_rows, waits_ms, ttft_quantile)
    return pd.DataFrame(rows, columns=["service", "bucket", "ttft_predicted_ms", "ttft_target_ms", "ttft_service_ms",
                                       "tpot_predicted_ms", "tpot_target_ms", "pools", "met"])


def pool_wait_tails(names: Iterable[str], pools: Mapping[str, Mapping[str, Any]], waits_ms: Mapping[str, float]
                    ) -> dict[str, tuple[float, float]]:
    """Per pool of ``names``: ``(P(W > 0), θ per ms)`` of its wait's tail ``P(W > t) = P(W > 0) e^{−θ t}``
    (:func:`planner.ttft_mixture.queue_tail_params`) from its :func:`pool_latency` row; ``(1, 0)`` — every request
    waits without end — for a pool with no live instance or an infinite wait."""
    from planner.ttft_mixture import queue_tail_params

    tails: dict[str, tuple[float, float]] = {}
    for p in names:
        r = pools.get(p)
        if r is None or not math.isfinite(float(waits_ms.get(p, math.inf))) or int(r["servers"]) < 1 or not float(r["mean_service_s"]) > 0:
            tails[p] = (1.0, 0.0)  # no live instance or a full pool: every request waits without end
            continue
        if burst_sets_wait(r) and math.isfinite(float(r.get("replay_pw", math.nan))):
            # the log's bursts set the wait, with a tail (pool_latency; a shared pool's lanes have none: burst_sets_wait)
            tails[p] = (float(r["replay_pw"]), float(r["replay_theta_per_s"]) / 1e3)
            continue
        pw, theta = queue_tail_params(np.array([float(r["servers"])]), np.array([float(r["arrival_rate_per_s"])]),
                                      np.array([float(r["mean_service_s"])]), np.array([float(r["service_cv"])]),
                                      np.array([float(r["arrival_cv"])]), *slot_queue_shape(r))
        tails[p] = (float(pw[0]), float(theta[0]) / 1e3)
    return tails


def _mixture_ttft(rows: list[dict[str, Any]], mixable: Mapping[int, tuple[np.ndarray, float]], pts: pd.DataFrame, x: np.ndarray,
                  pools: Mapping[str, Mapping[Any, Any]], waits_ms: Mapping[str, float], ttft_quantile: float | None) -> None:
    """Replace (in ``rows``, :func:`bucket_latency`'s) the TTFT of the buckets served by prefill and decode pools
    with the quantile of their latency group's length mix (:mod:`planner.ttft_mixture`).

    Per (service, latency group; the bucket itself without a ``latency_group`` column): the requests are
    the sub-bins (``ttft_mix``) of each bucket's routed prefill points, weighted ``λ_peak x v_s``, each
    at ``t_s`` plus its bucket's decode wait and encode time, waiting in its prefill pool (the pool's
    Erlang-C / Allen–Cunneen tail at its actual size, :func:`pool_latency`'s row); the group's TTFT is
    the ``q``-quantile ``X`` of that mixture (:func:`planner.ttft_mixture.mixture_quantile_ms`), and
    each bucket reports ``min(its representative figure, X)``. A group of which a routed prefill point
    has no mix (hand-written buckets, measured rows) keeps the representative rule."""
    from planner.schema.capacity import LATENCY_GROUP_COLUMN, TTFT_MIX_COLUMN
    from planner.ttft_mixture import mixture_quantile_ms, parse_mix

    if TTFT_MIX_COLUMN not in pts.columns:
        return
    raw = pts[TTFT_MIX_COLUMN].to_numpy(object)
    group = pts[LATENCY_GROUP_COLUMN].astype(str).to_numpy() if LATENCY_GROUP_COLUMN in pts.columns else pts["bucket"].astype(str).to_numpy()
    lam = pts["rate_peak_per_s"].to_numpy(float) * x
    quant = pts["ttft_quantile"].to_numpy(float)
    pool_of = pts["pool"].astype(str).to_numpy()
    tails = pool_wait_tails(set(pool_of[np.concatenate([idx for idx, _e in mixable.values()])].tolist()), pools, waits_ms)
    by_group: dict[tuple[str, str], list[int]] = {}
    for k, (idx, _extra) in mixable.items():
        by_group.setdefault((str(rows[k]["service"]), str(group[int(idx[0])])), []).append(k)
    for members in by_group.values():
        w, t, c, d = [], [], [], []
        whole = True
        for k in members:
            idx, extra = mixable[k]
            for j in idx:
                mix = parse_mix(raw[j])
                if mix is None:
                    whole = False
                    break
                c_j, decay_j = tails[str(pool_of[j])]
                w.append(lam[j] * mix[0])
                t.append(mix[1] + extra)
                c.append(np.full(len(mix[0]), c_j))
                d.append(np.full(len(mix[0]), decay_j))
            if not whole:
                break
        weights = np.concatenate(w) if whole and w else np.zeros(0)
        if not whole or not weights.size or not weights.sum() > 0:
            continue
        j0 = int(mixable[members[0]][0][0])
        q = float(ttft_quantile) if ttft_quantile is not None else float(quant[j0])
        upper = max(float(rows[k]["ttft_predicted_ms"]) for k in members)
        level = mixture_quantile_ms(q, weights, np.concatenate(t), np.concatenate(c), np.concatenate(d), upper_ms=upper)
        for k in members:
            r = rows[k]
            r["ttft_predicted_ms"] = min(float(r["ttft_predicted_ms"]), level)
            r["met"] = bool(r["ttft_predicted_ms"] <= float(r["ttft_target_ms"]) * (1 + 1e-6)
                            and float(r["tpot_predicted_ms"]) <= float(r["tpot_target_ms"]) * (1 + 1e-6))


def plan_shares(plan: ArchitecturePlan, points: pd.DataFrame) -> np.ndarray:
    """Routing shares of ``plan`` aligned with the rows of ``points`` (keys service, bucket, role, config)."""
    x = np.zeros(len(points))
    if not plan.routing or not len(points):
        return x
    # one string key per point, built column-wise (a Python dict over every point's tuple cost 0.35 s
    # a call on the 96 k-point fleet table); the plan's few routing rows are looked up in it
    sep = "\x00"
    key = (points["service"].astype(str) + sep + points["bucket"].astype(str) + sep + points["role"].astype(str)
           + sep + points["config"].astype(str))
    index = pd.Index(key.to_numpy(dtype=object))
    wanted = [sep.join((r.service, r.bucket, str(r.role), r.config)) for r in plan.routing]
    if index.is_unique:
        pos = index.get_indexer(wanted)
    else:  # duplicate keys (not in a capacity table): the last such row
        last = {k: j for j, k in enumerate(index)}
        pos = np.array([last.get(k, -1) for k in wanted], dtype=int)
    for j, r in zip(pos.tolist(), plan.routing, strict=True):
        if j >= 0:
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


# ---------------------------------------------------------------------------------------------
# Latency at the load that arrives (issue 24 item 3)
# ---------------------------------------------------------------------------------------------
#
# An operating point is priced at its full batch ``B*``: its TPOT / ITL / TTFT are what a request
# sees when the instance carries the point's full rate. A plan loads its instances less (its
# utilisation, at most the cap), and a continuous-batching engine batches what actually arrives
# (vLLM, SGLang; :mod:`planner.simulate` does the same), so the latency of a unified (chunked
# prefill) instance is a fixed point of its arrivals, its iteration time and the prompt work those
# iterations carry. Per unified pool with ``c = n − k`` live instances behind a least-loaded router,
# per instance ``λ = λ_pool / c`` requests/s. In units of the lane (one unit = the full chunk ``q``
# of prompt tokens one iteration carries), a bucket-``b`` prompt is ``f_b = n_b / q_b`` units; the
# pool's decode-only step ``t_d`` and full-chunk iteration ``t_c`` are the λ-weighted means of its
# points (``decode_only_step_ms``, ``step_ms``; the simulator's adapter uses the same means). An
# iteration carrying ``x ≤ 1`` units takes ``t_d + δ x``, ``δ = t_c − t_d`` (linear in its prompt
# tokens, as the roofline iteration and the simulator's). Then:
#
# * fixed point: prompt work arrives at ``λ f̄`` units/s, each unit costs ``δ`` seconds, so a share
#   ``a = λ f̄ δ`` of the instance's time goes to prompt tokens and the mean iteration is
#   ``t̄ = t_d + δ λ f̄ t̄  ⇒  t̄ = t_d / (1 − a)`` (``a ≥ 1``: the lane cannot keep up, latency ∞).
#   Little's law gives the decode batch ``B = λ o t̄`` (``o`` the mean output); the operating point's
#   batch is the cap (the pool's slot wait, :func:`pool_latency`, charges what queues beyond it, with
#   the slot held ``o · t_mean`` of the point's full batch: holding it the fixed point's ``o · t̄``
#   instead put the p99 TTFT at 95 % utilisation at −68 % of the simulator's, the full batch +48 %
#   — near saturation bursts lengthen the iterations and so the holding, which Erlang C does not
#   see — and the conservative side is kept).
#   The step time is the point's at every batch — the capacity table carries it only at ``B*``,
#   and the simulator runs the same (an upper bound on a smaller batch's step).
# * prompt units in one iteration ``K`` (those that arrived during the previous one): given the
#   previous iteration's ``K'``, ``K ~ Poisson(λ (t_d + δ f K'))``, a branching process with
#   immigration (``f = f_eff = E[f²]/E[f]``, the size-biased prompt): mean ``λ t̄`` prompts,
#   dispersion ``Var/E = c_a² / (1 − a²)`` for one iteration, ``c_a² / (1 − a)²`` for the sum over
#   a long window (each prompt lengthens the iterations that admit the next ones); ``c_a`` the
#   arrival CV of one instance (:func:`instance_arrival_cv`: a least-loaded router feeds it about
#   every ``c``-th arrival of the pool, ``c_a² = min(c_a,pool, 1)² / c``, when prompts outlast a lane
#   iteration, ``f̄ ≥ 1``; shorter prompts' instances see the pool's ``min(c_a,pool, 1)``). Counts are negative-binomial with that mean and
#   dispersion above 1, Poisson at 1, binomial below (:func:`_count_law`).
# * ITL (every gap; a gap is one iteration): ``t_d + δ min(1, f_eff K_p)``, ``K_p`` the ``p``
#   quantile of ``K``; prompts longer than the lane (``f̄ ≥ 1``) each fill ``⌊f̄⌋`` whole chunks
#   (``t_c``) and one partial chunk (``t_d + δ (f̄ − ⌊f̄⌋)``), shares ``λ t̄ ⌊f̄⌋`` and ``λ t̄`` of
#   the iterations; the rest take ``t_d``; the quantile of that three-level mix, the chunk shares
#   of the gaps weighted by the batch of the instance a least-loaded router picks against the mean
#   (:func:`_chosen_batch_ratio`: a prompt goes to the instance with the fewest sequences).
# * TPOT of a bucket with ``o`` outputs (the mean of its ``o − 1`` gaps):
#   ``t_d + δ min(1, f_eff N_p / (o − 1))`` per gap, ``N`` the prompts that join the request's
#   instance after it (the lane is FCFS: those queued behind it at its first token and those arriving
#   during its decode), each chunk lengthening the window for more; behind ``c`` instances at the share
#   of arrivals the least-loaded router sends to its instance; at most the slots free when its window
#   opens and those freed during it (the pool's slots per instance, :func:`pool_slots`; :func:`_tpot_quantile_s`).
# * TTFT of a bucket prompt of ``f_b`` units that fits one iteration's lane (``f̄ < 1``): it
#   arrives during an iteration of length ``T(K') = t_d + δ min(1, f_eff K')`` (length-biased:
#   weight ``T P(K')``, ``K'`` the prompts pending at its start from the lane's embedded chain with
#   the excess over a chunk carried, :func:`_lane_count_pmf`), waits its residual ``u T`` (``u``
#   uniform), then the carried excess and the ``M`` prompts that arrived during that iteration
#   before it (mean ``λ T``, dispersion ``c_a²``) go first: ``⌈X⌉`` more iterations, all full but
#   the last (:func:`_ttft_quantile_s`), its quantile taken numerically over (K', u, M). Behind ``c > 1``
#   instances the least-loaded router sends a prompt to an instance whose iteration mostly just began after a
#   departure (``u`` given ``K'``: :func:`_hole_age_law`), and an instance's arrivals follow its departures,
#   ``λ (T/c + (1 − 1/c) t̄)`` per iteration (:func:`_routed_span_s`, in ``K'``'s chain and in ``M``). Prompts
#   longer than the lane (``f̄ ≥ 1``) queue for it in their instance: an M/G/1 lane (service
#   ``f_b t_c``) behind the least-loaded router: one instance an M/G/1 lane; over ``c > 1``
#   instances the prompts already in the chosen instance's lane (:func:`_jsq_ahead_pmf`: the
#   router picks the smallest in-flight count, which sees the lane's queue) and the wait behind
#   them, the residual of the one in progress and the whole of the others; plus their own
#   ``⌈f_b⌉`` iterations with the last one filled by newcomers (:func:`_long_ttft_quantile_s`);
#   the lane queue is then inside the at-load TTFT and the pool's ``lane_wait_ms``
#   (:func:`pool_latency`, the pooled least-loaded model) is reported but not added. Before
#   :func:`_jsq_ahead_pmf` the wait given a busy lane was the isolated M/G/1's: pessimistic behind
#   many instances (+170 % at 85 % over 17 instances).
#
# Disaggregated pools already run at the load that arrives: the prefill pool is a G/G/c queue of
# the routed rate, one prompt per server, and a decode step is the point's at its batch. A
# sequence joins a running decode batch at the next step boundary: the decode admission adds the
# residual of the step in progress, ``u t_step`` at quantile ``u`` (simulator and engines alike).
# What is left approximate, measured by ``python benchmarks/bench_latency_at_load.py`` against
# the simulator (replicated seeds): see that script's table.

_U_GRID = (np.arange(48) + 0.5) / 48.0
"""Midpoints of the residual share ``u`` of the iteration in progress (TTFT quantile, numeric)."""


def _count_pmfs(means: np.ndarray, dispersion: float, kmax: int) -> np.ndarray:
    """pmfs on ``0..kmax`` (one row per mean) of a count with that mean and ``Var = dispersion ·
    mean``: Poisson at dispersion 1, negative binomial above (``r = mean / (dispersion − 1)``,
    ``p = 1/dispersion``), binomial below (``n = ⌈mean / (1 − dispersion)⌉``, ``p = mean / n``:
    arrivals more regular than Poisson, e.g. one instance's share behind a least-loaded router).
    The mass above ``kmax`` is put on ``kmax``. By the ratio recurrences ``P(k+1)/P(k)`` in logs
    (vectorised; no scipy.stats import on the solve path)."""
    mu = np.atleast_1d(np.asarray(means, dtype=float))[:, None]
    out = _log_pmf_exp(mu, np.arange(kmax, dtype=float)[None, :], dispersion, (mu.shape[0], kmax + 1))
    out[~np.isfinite(out)] = 0.0
    zero = mu[:, 0] <= 0
    if zero.any():
        out[zero] = 0.0
        out[zero, 0] = 1.0
    total = out.sum(axis=1)
    full = (mu[:, 0] > 0) & ~(total > 0)  # p = 1 binomial: all mass at n
    if full.any():
        n_at = np.minimum(np.ceil(mu[full, 0]).astype(int), kmax)
        out[full] = 0.0
        out[np.flatnonzero(full), n_at] = 1.0
        total = out.sum(axis=1)
    out[:, -1] += np.maximum(0.0, 1.0 - total)
    return out


def _log_pmf_exp(mu: np.ndarray, k: np.ndarray, dispersion: float, shape: tuple[int, ...]) -> np.ndarray:
    """:func:`_count_pmfs`'s pmf before its clean-up, of the means ``mu`` (one per row, on the last axis broadcast
    against ``k = 0..kmax−1``): ``log P(0)``, then ``log P(0)`` + the running sum of the ratios ``log P(k+1)/P(k)``
    along the last axis, exponentiated; written in place in an array of ``shape`` (the same sums as a concatenation).
    Element-wise expressions and sums along the last axis, so a row is the same number in any stack."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if abs(dispersion - 1.0) <= 1e-9:
            log0 = -mu
            ratio = np.log(mu) - np.log(k + 1.0)
        elif dispersion > 1.0:
            r, q = mu / (dispersion - 1.0), 1.0 - 1.0 / dispersion
            log0 = r * math.log(1.0 / dispersion)
            ratio = np.log(k + r) - np.log(k + 1.0) + math.log(q)
        else:
            n = np.maximum(1.0, np.ceil(mu / max(1.0 - dispersion, 1e-9) - 1e-9))
            p = np.minimum(mu / n, 1.0)
            log0 = n * np.log1p(-p)
            ratio = np.where(k < n, np.log(np.maximum(n - k, 0.0)) - np.log(k + 1.0) + np.log(p) - np.log1p(-p), -np.inf)
        out = np.empty(shape)
        out[..., :1] = log0
        np.cumsum(ratio, axis=-1, out=out[..., 1:])
        out[..., 1:] += log0
        np.exp(out, out=out)
    return out


def _count_pmfs_repeated(means: np.ndarray, dispersion: float, kmax: int) -> np.ndarray:
    """:func:`_count_pmfs` of ``means`` with many equal entries, each distinct mean computed once: its rows are
    computed independently (element-wise expressions and sums along each row), so the same numbers. The
    lane's arrival means ``λ T(K)`` take only ``⌈1/f_eff⌉ + 1`` values (``T(K)`` is flat once a chunk is full)."""
    flat = np.asarray(means, dtype=float).ravel()
    uniq, where = np.unique(flat, return_inverse=True)
    return _count_pmfs(uniq, dispersion, kmax)[where.ravel()]


def _count_pmf(mean: float, dispersion: float, kmax: int) -> np.ndarray:
    """One row of :func:`_count_pmfs`: the same expressions on one-dimensional arrays (a third fewer numpy calls; the
    mean kept a one-element array so that every ufunc runs the loop it runs there: the same numbers bit for bit,
    ``tests/test_pool_latency_exact.py``)."""
    mu = np.array([float(mean)])
    out = _log_pmf_exp(mu, np.arange(kmax, dtype=float), dispersion, (kmax + 1,))
    out[~np.isfinite(out)] = 0.0
    if mu[0] <= 0:
        out[:] = 0.0
        out[0] = 1.0
    total = out.sum()
    if mu[0] > 0 and not total > 0:  # p = 1 binomial: all mass at n
        out[:] = 0.0
        out[min(math.ceil(mu[0]), kmax)] = 1.0
        total = out.sum()
    out[-1] += max(0.0, 1.0 - total)
    return out


@lru_cache(maxsize=65536)
def _count_quantile(quantile: float, mean: float, dispersion: float, cap: float = math.inf) -> float:
    """Smallest ``k`` with ``P(K ≤ k) ≥ quantile`` (:func:`_count_pmf`'s law), or ``cap`` when that ``k`` is above
    it (callers that take ``min(k, cap)`` pass their cap: the law is then evaluated on ``0..⌈cap⌉`` only, so near
    saturation, where the dispersion ``c_a²/(1 − a)²`` grows without bound, memory follows the cap, not the load —
    a pool at ``a = 1 − 10⁻⁸`` asked for 16 GiB). Memoised on its values (the cap bisection and the horizon's periods
    ask the same counts again)."""
    if mean <= 0:
        return 0.0
    limit = int(math.ceil(cap)) + 1 if math.isfinite(cap) else None
    kmax = int(mean + 12.0 * math.sqrt(max(dispersion, 1e-9) * mean) + 12.0)
    if limit is not None:
        kmax = min(kmax, limit)
    while True:
        pmf = _count_pmf(mean, dispersion, kmax)
        c = np.cumsum(pmf[:-1])
        hit = np.flatnonzero(c >= quantile - 1e-12)
        if hit.size:
            return float(hit[0])
        if limit is not None and kmax >= limit:
            return float(cap)
        kmax = kmax * 2 if limit is None else min(kmax * 2, limit)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, quantile: float) -> float:
    keep = weights > 1e-12 * float(weights.max())  # the grid's negligible corners do not move a quantile
    values, weights = values[keep], weights[keep]
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    c = np.cumsum(w)
    return float(v[min(int(np.searchsorted(c, quantile * c[-1])), len(v) - 1)])


def unified_load(rate_per_s: float, decode_step_s: float, chunk_step_s: float, prompt_units: np.ndarray,
                 weights: np.ndarray, arrival_cv: float = 1.0) -> dict[str, float]:
    """The fixed point of one unified instance at ``rate_per_s`` (section comment above):
    ``share`` ``a``, ``mean_step_s`` ``t̄``, ``prompts_per_iteration`` ``λ t̄``, ``units_mean``
    ``f̄``, ``units_eff`` ``f_eff``, ``delta_s`` ``δ``, ``decode_step_s`` ``t_d``, ``rate_per_s`` and
    ``arrival_cv``. ``prompt_units`` ``f_b = n_b / q_b`` with ``weights`` (routed rates)."""
    f = np.asarray(prompt_units, dtype=float)
    w = np.asarray(weights, dtype=float)
    w = w / w.sum() if w.sum() > 0 else np.full(len(f), 1.0 / max(len(f), 1))
    f_mean = float((w * f).sum())
    f_eff = float((w * f**2).sum() / f_mean) if f_mean > 0 else 0.0
    delta = max(chunk_step_s - decode_step_s, 0.0)
    a = rate_per_s * f_mean * delta
    t_mean = decode_step_s / (1.0 - a) if a < 1.0 else math.inf
    return {"rate_per_s": rate_per_s, "share": a, "mean_step_s": t_mean, "prompts_per_iteration": rate_per_s * t_mean,
            "units_mean": f_mean, "units_eff": f_eff, "delta_s": delta, "decode_step_s": decode_step_s,
            "arrival_cv": arrival_cv}


@lru_cache(maxsize=65536)
def _chosen_batch_ratio(batch: float, live: int) -> float:
    """``E[N_chosen] / B``: the decoding sequences of the instance a least-loaded router picks for a
    prompt, against the mean ``B`` (``live`` instances, each ``N_j`` with mean ``B`` and dispersion
    ``Var/E = 1/√c``, binomial, independently: the router keeps the counts closer than independent
    Poisson counts, the law :func:`_jsq_ahead_pmf` calibrated on the simulator; the chosen count is
    their minimum, ``E = Σ_{x≥0} P(N > x)^c``). The chunk iterations of that prompt interrupt that
    many sequences, so their share of all gaps (ITL) is this ratio times their share of iterations:
    8,000-token prompts over 4 instances at 10 % utilisation (``B`` 1.2) interrupt 0.39 sequences
    on average (0.24 with independent Poisson counts), not 1.2 — the ITL p99 is the decode step, as
    simulated, not the partial chunk (+413 % before the ratio). With independent Poisson counts
    the minimum of 17 or 64 counts was too small: ITL p99 of 8,000-token prompts at 30 % over 17 /
    64 instances −56 / −91 % against the simulator (the decode step instead of the partial chunk);
    with ``1/√c`` within 1 % (``benchmarks/bench_latency_at_load.py``). 1 for one instance. Memoised on its values."""
    b = max(float(batch), 0.0)
    c = int(live)
    if c <= 1 or b <= 0.0 or not math.isfinite(b):  # a saturated lane (infinite step): its TTFT is inf already
        return 1.0
    if b > _ROUTER_BATCH_MAX:
        return 1.0  # the minimum of the counts is within 1 % of B (their spread √(B/√c) ≪ B) and the law has ~B entries
    kmax = int(b + 12.0 * math.sqrt(b) + 14.0)
    tail = np.clip(1.0 - np.cumsum(_count_pmf(b, 1.0 / math.sqrt(c), kmax)), 0.0, 1.0)
    return float(min(1.0, (tail ** c).sum() / b))


_ROUTER_BATCH_MAX = 1e5
"""Decode batches above which the router's laws (:func:`_chosen_batch_ratio`, :func:`_jsq_tilt`) take the router as
blind to the lanes (ratio 1, no tilt): their arrays have ~``B`` entries, so memory follows the inputs' size, not their
values (an instance near saturation has a batch of 10⁹ and more)."""

_GEOMETRIC_LANE_MAX = 4096
"""Entries of :func:`_geometric_lane_pmf` at most (its 10⁻¹² tail needs more only above ρ 0.9933)."""


def _geometric_lane_pmf(rho: float) -> np.ndarray:
    """``P(L = k) = (1 − ρ) ρ^k``, ``0 < ρ < 1``, up to its 10⁻¹² tail or :data:`_GEOMETRIC_LANE_MAX` entries, the mass
    beyond on the last: at ρ 1 − 10⁻⁹ (the clamp of :func:`_jsq_ahead_pmf`) the tail alone asked 2.8·10¹⁰ entries,
    206 GiB — found on 2026-12-07 when a change tried then counted the lane in :func:`_chosen_batch_ratio` and the deepseek
    example's solve reached it; the same law below ρ 0.9933."""
    kl = min(int(math.ceil(math.log(1e-12) / math.log(rho))) + 1, _GEOMETRIC_LANE_MAX)
    pl = (1.0 - rho) * rho ** np.arange(kl + 1, dtype=float)
    pl[-1] += max(0.0, 1.0 - pl.sum())
    return pl


def _itl_quantile_s(load: Mapping[str, float], quantile: float, batch_ratio: float = 1.0) -> float:
    a, t_d, delta, f_eff = load["share"], load["decode_step_s"], load["delta_s"], load["units_eff"]
    if not a < 1.0:
        return math.inf
    if f_eff <= 0 or delta <= 0:
        return t_d
    f_bar = load["units_mean"]
    if f_bar >= 1.0:
        # prompts longer than the lane: each fills ⌊f̄⌋ whole chunks and one partial chunk of
        # f̄ − ⌊f̄⌋; per iteration those are shares λ t̄ ⌊f̄⌋ and λ t̄ of all iterations, of the gaps
        # that times the chosen instance's batch against the mean (batch_ratio, _chosen_batch_ratio)
        full, part = math.floor(f_bar), f_bar - math.floor(f_bar)
        levels = [(t_d + delta, load["prompts_per_iteration"] * full * batch_ratio)]
        if part > 1e-9:
            levels.append((t_d + delta * part, load["prompts_per_iteration"] * batch_ratio))
        tail = 0.0
        for t, share in sorted(levels, reverse=True):
            tail += share
            if tail > 1.0 - quantile:
                return t
        return t_d
    disp = load["arrival_cv"] ** 2 / (1.0 - a * a)
    k = _count_quantile(quantile, load["prompts_per_iteration"] * load["units_mean"] / f_eff, disp, math.ceil(1.0 / f_eff))
    return t_d + delta * min(1.0, f_eff * k)


def _tpot_quantile_s(load: Mapping[str, float], quantile: float | None, output_tokens: float,
                     slots: float = math.inf, live: int = 1, batch: float = 0.0,
                     lives: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """TPOT quantile (s) of a request of ``o = output_tokens`` on one of ``live`` (``c``) instances of a unified pool
    behind the least-loaded router: ``t_d + δ min(1, f_eff N / (o − 1))``, ``N`` the prompts (in ``f_eff`` units) whose
    chunks run in its ``o − 1`` gaps, at its ``quantile``.

    Which prompts: the lane is FCFS, so every prompt that joins the request's instance after the request itself does
    is prefilled after its last chunk — during its decode if it arrived during its decode or during its own time to
    first token (the *lead*, :func:`_tpot_lead_s`: the prompts queued behind it when its first token comes). Before,
    only the decode window's arrivals were counted, and the median request of 8,000-token prompts with 40-token
    outputs on one instance had no chunk in its window (13 ms against 30–82 ms simulated at 50–95 %).

    * One instance (``c = 1``): every arrival joins the lane. The immigrants are the arrivals during the lead and
      during the bare decode window ``(o − 1) t_d`` (count law of mean ``λ ((o − 1) t_d + lead)`` and dispersion
      ``c_a²``), and each prompt whose chunk runs in the window lengthens it by ``δ f`` so that more arrive: a
      Borel(``a``) family per immigrant (Poisson offspring of mean ``a = λ f̄ δ``), the total's law
      (:func:`_family_count_quantile`) of mean ``λ ((o − 1) t_d + lead) / (1 − a)`` (the window's ``(o − 1) t̄``
      included; dispersion ``(a + c_a² (1 − a)) / (1 − a)²``). The law before counted the decode window's arrivals
      only, ``λ (o − 1) t̄``: the lead's prompts, and the window they lengthen in turn, were missing.
    * Behind the router (``c > 1``): an arrival goes to the instance with the fewest requests, so it joins the
      request's instance only when that count is the least. With the pool's ``N`` requests (the request and
      ``Poisson(c λ (o t̄ + lead))`` others) spread as evenly as the router keeps them, ``⌊N/c⌋`` on the least
      loaded, the request's instance takes a share ``φ(N) = c ⌊N/c⌋ / N`` of an instance's ``λ`` (1 for one
      instance; 0 while any instance holds no request), ``φ̄`` its mean (:func:`_least_loaded_share`). Over a window
      as long as a request's life the router refills the instances in turn (it replaces the departures it sees), so
      the count is that of an instance fed nearly every ``c``-th arrival: mean ``φ̄ λ ((o − 1) t̄ + lead)``,
      dispersion ``(c_a,pool² / c) / (1 − a)²`` (:func:`instance_arrival_cv`'s ``f̄ ≥ 1`` law; prompts within one
      iteration, ``f̄ < 1``, meet the router blind to their lane at the iteration's scale, not over a life). The
      lead here is the prompt's own iterations: the router sends what arrives meanwhile to the instances with fewer
      requests. With the law before (no router share, the instance's iteration-scale ``c_a²`` in the dispersion) the
      TPOT p99 of 1,000-token prompts behind 17 / 64 instances was +36…+76 % at 40 outputs and +9…+15 % at 200.

    With spread output lengths (``lives``: the pool's points' outputs and rates) the router's order is kept only by
    the share ``ξ`` of the departures whose lives differ by less than the window (:func:`_kept_order`): that share's
    count has the dispersion above, the rest that of Poisson departures, ``ξ c_a,pool²/c / (1 − a)² + (1 − ξ)``; one
    output length gives ``ξ = 1``, the law above. Before (2026-12-07) the order was kept whatever the lengths: TPOT p99 of
    1,000-token prompts with answers spread over 25–375 tokens −4…−16 % behind 4–64 instances, of 8,000-token prompts
    −23…−47 % behind 17 / 64 (now −7…+2 % and, at 50–95 %, within ±11 % but one cell).

    A prompt joins only into a free slot, so the prompts are at most the slots free when the request arrives and those
    their occupants free during its lead and decode: ``S − 1 − B′ + min(λ W, B′)`` requests, ``B′ = min(B, S − 1)`` (in
    ``f_eff`` units: times ``f̄ / f_eff``), ``S`` the instance's slots (``slots``: the pool's slots per instance,
    :func:`pool_slots`, its points' busy-weighted batch), ``B`` its batch at load (``batch``, Little's ``λ ō t̄``),
    ``λ W`` the departures over the window ``W = (o − 1) t̄ + lead`` (departures leave at the rate requests arrive;
    each occupant once: a prompt that joins meanwhile holds its slot past the window). Near saturation the window's
    count is then held by the slots, not by the arrivals' bursts. Without a cap the p99 TPOT at 95 % utilisation was
    +40 % (8,000-token prompts) and +11 % (1,000). With one output length ``λ W ≥ B`` and the cap is the point's
    ``B* − 1`` (each other slot frees up once during the request's decode), the cap before 2026-12-07 — which, taken per
    bucket in a pool mixing output lengths, held a 25-token answer's window to its own point's 2 other slots where the
    pool's instance has ~39, ~13 of them busy: TPOT p99 of 8,000-token prompts with outputs spread over 25–375 tokens
    −40…−54 % against the simulator on one instance (``python benchmarks/bench_latency_at_load.py --only-counts
    --spread-outputs --fixed-seeds``; 88 against 376 ms in the 25-token bucket at 70 %, 377 now)."""
    a, t_d, delta, f_eff = load["share"], load["decode_step_s"], load["delta_s"], load["units_eff"]
    if not a < 1.0:
        return math.inf
    gaps = max(output_tokens - 1.0, 1.0)
    if quantile is None:
        return load["mean_step_s"]
    if f_eff <= 0 or delta <= 0:
        return t_d
    lam_units = load["rate_per_s"] * load["units_mean"] / f_eff   # prompts of f_eff units per second
    c = max(int(live), 1)
    lead = _tpot_lead_s(load, queued=c == 1)
    # the slots free when the request arrives and those their occupants free during its lead and decode (departures at
    # the arrival rate, at most once each: a prompt that joins meanwhile holds its slot past the window), in f_eff units
    other_slots = max(float(slots) - 1.0, 0.0)
    held = min(max(float(batch), 0.0), other_slots)
    freed = min(load["rate_per_s"] * (gaps * load["mean_step_s"] + lead), held)
    cap = max((other_slots - held + freed) * load["units_mean"] / f_eff, 1.0)
    if c == 1:
        n = min(_family_count_quantile(quantile, lam_units * (gaps * t_d + lead), a, load["arrival_cv"] ** 2, cap), cap)
    else:
        others = c * load["rate_per_s"] * (output_tokens * load["mean_step_s"] + lead)
        share = _least_loaded_share(c, round(others, 6))
        if share <= 0.0:
            return t_d
        # an instance fed every c-th arrival, c_a,pool² / c: the instance's own c_a² where the router spreads the prompts in
        # turn (f̄ ≥ 1, instance_arrival_cv), and c_a² − 1 + 1/c undoing its thinning where it is blind to them (f̄ < 1)
        cv2 = load["arrival_cv"] ** 2
        window_ca2 = cv2 if load["units_mean"] >= 1.0 else max(cv2 - 1.0 + 1.0 / c, 0.0)
        disp = max(window_ca2, 1e-3) / (1.0 - a) ** 2
        if window_ca2 < 1.0 and lives is not None:
            xi = _kept_order(lives, gaps + lead / load["mean_step_s"])
            disp = xi * disp + (1.0 - xi)
        mean = lam_units * share * (gaps * load["mean_step_s"] + lead)
        n = min(_count_quantile(quantile, mean, disp, cap), cap)
    return t_d + delta * min(1.0, f_eff * n / gaps)


def _kept_order(lives: tuple[np.ndarray, np.ndarray], window_steps: float) -> float:
    """``ξ = E[(1 − |o₁ − o₂| / w)⁺]``: how much of the order in which a router refilled an instance's slots its
    departures keep over a window of ``w`` iterations (``window_steps``), ``o₁, o₂`` two requests' outputs (their lives
    in iterations) drawn from ``lives = (outputs, weights)`` (the pool's points and their rates).

    Behind a least-loaded router an instance's arrivals are its departures (the router refills what it sees leave),
    and its departures are its admissions a life later. With one output length the lives are equal and the departures
    over a window keep the admissions' regularity (the count's dispersion ``c_a,pool² / c`` of an instance fed every
    ``c``-th arrival, :func:`_tpot_quantile_s`). With spread lengths each admission is displaced by its own life: a
    point process with i.i.d. displacements keeps its (short-range) covariance only between points whose displacements
    differ by less than the window, so the dispersion moves from ``d₀`` to ``1 − (1 − d₀) ξ`` — Poisson (1) for a
    window short against the lives' spread (a 25-token answer among answers of 25–375 tokens), ``d₀`` for equal
    lives (``ξ = 1``): ``Var N(w) = λ w (1 + (d₀ − 1) E[(1 − |Δ|/w)⁺])``, ``Δ`` the difference of two displacements,
    exact where the covariance before displacement lies within one inter-arrival time (the router's regularity);
    approximate otherwise, and the lives are the points' outputs, not each request's. 1 without traffic or window."""
    o = np.asarray(lives[0], dtype=float)
    w = np.asarray(lives[1], dtype=float)
    ok = np.isfinite(o) & np.isfinite(w) & (w > 0)
    if not ok.any() or not window_steps > 0:
        return 1.0
    o, w = o[ok], w[ok] / float(w[ok].sum())
    kept = np.clip(1.0 - np.abs(o[:, None] - o[None, :]) / float(window_steps), 0.0, 1.0)
    return float(w @ kept @ w)


def _tpot_lead_s(load: Mapping[str, float], queued: bool) -> float:
    """Mean time (s) from a prompt's arrival in its lane to its first token (:func:`_tpot_quantile_s`'s lead): its own
    ``⌈f̄⌉`` iterations (``⌈f̄⌉ t_d + f̄ δ``) and, with ``queued``, the lane's mean wait, M/G/1 by Kingman's
    ``(1 + c_a²)/2 · a/(1 − a) · E[S²]/(2 E[S])`` with lane service ``S = f δ`` (``E[S²]/E[S] = f_eff δ``)."""
    a, t_d, delta = load["share"], load["decode_step_s"], load["delta_s"]
    f_bar = load["units_mean"]
    own = t_d * max(math.ceil(f_bar - 1e-9), 1) + f_bar * delta
    if not queued:
        return own
    return own + (1.0 + load["arrival_cv"] ** 2) / 2.0 * a / (1.0 - a) * load["units_eff"] * delta / 2.0


def _family_count_quantile(quantile: float, immigrants: float, a: float, ca2: float, cap: float = math.inf) -> float:
    """``quantile`` of ``T``, the total of ``K`` families (``cap`` when above it): ``K`` a count of mean ``immigrants``
    and dispersion ``ca2``, each family an immigrant and its descendants, Poisson(``a``) children each (a Borel(``a``)
    size ``F``: ``E F = 1/(1 − a)``, ``Var F = a/(1 − a)³``). By its two moments, ``E T = μ/(1 − a)`` and
    ``Var T / E T = (a + c_a² (1 − a)) / (1 − a)²`` (``Var T = E K Var F + Var K (E F)²``), in :func:`_count_quantile`'s
    law: on the loads of tests/test_tpot_window.py its 30th–99th percentiles are the branching process's (a
    Monte-Carlo, to 1 % of probability), as the exact Borel–Tanner total's were (tried: at most one prompt apart
    from this law, at an O(n²) cost per quantile)."""
    if immigrants <= 0.0:
        return 0.0
    return _count_quantile(quantile, immigrants / (1.0 - a), (a + ca2 * (1.0 - a)) / (1.0 - a) ** 2, cap)


@lru_cache(maxsize=65536)
def _least_loaded_share(live: int, others: float) -> float:
    """``E[c ⌊N/c⌋ / N]``, ``N = 1 + Poisson(others)``, ``c = live`` (:func:`_tpot_quantile_s`): the mean share of an
    instance's arrivals the least-loaded router sends to a given request's instance while the request is there, with
    the pool's ``N`` requests spread as evenly as the router keeps them. Memoised."""
    c = max(int(live), 1)
    if c == 1:
        return 1.0
    if not math.isfinite(others):
        return 1.0 if others > 0 else 0.0
    if others > _LEAST_LOADED_EXACT_MAX:
        # memory follows the inputs' size, not their values: beyond 10⁵ requests the Poisson count is its normal law
        # on ±8 sd (4,001 points; the floor's step is then far finer than the spread, or the share is ~1)
        sd = math.sqrt(others)
        n = np.linspace(max(1.0, others + 1.0 - 8.0 * sd), others + 1.0 + 8.0 * sd, 4001)
        w = np.exp(-0.5 * ((n - others - 1.0) / sd) ** 2)
    else:
        hi = int(others + 12.0 * math.sqrt(max(others, 0.0)) + 24.0)
        w = _count_pmf(others, 1.0, hi + 1)[: hi + 1] if others > 0 else np.eye(1, hi + 1)[0]
        n = np.arange(hi + 1, dtype=float) + 1.0
    return float((w * c * np.floor(n / c) / n).sum() / w.sum())


_LEAST_LOADED_EXACT_MAX = 1e5
"""Pool request counts above which :func:`_least_loaded_share` takes the normal law (arrays of ~``others`` floats below)."""


def _lane_count_pmf(load: Mapping[str, float], live: int = 1) -> np.ndarray:
    """Stationary pmf of ``K``, the prompts (of ``f_eff`` units) pending in one instance's lane at
    the start of an iteration, on ``0..kmax``: the embedded chain ``K' = (K − s)⁺ + A``, ``s = 1/f_eff``
    prompts fill a chunk (the excess is carried to the next iteration, FCFS), ``A`` the arrivals
    during the iteration, mean ``λ T(K)``, ``T(K) = t_d + δ min(1, f_eff K)`` (behind ``c = live > 1`` instances
    ``λ (T(K)/c + (1 − 1/c) t̄)``: the router's arrivals follow the instance's departures, :func:`_routed_span_s`), dispersion ``c_a²``
    (:func:`_count_pmfs`); a fractional carry splits its mass between the two neighbouring counts
    (mean kept); arrivals beyond ``kmax`` are put on ``kmax`` (:func:`_lane_chains`). Before, ``K`` was
    that branching law (dispersion ``c_a²/(1 − a²)``) with the excess over a chunk dropped: the
    p99 TTFT of 1,000-token prompts at 85 % utilisation −16 % against the simulator.

    The chain is not birth–death (``A`` jumps up by any count) nor skip-free, so ``π`` is solved
    directly: ``π (P − I) = 0`` with ``Σ π = 1`` in place of the last balance equation (which the
    others imply: the rows of ``P − I`` sum to 0), one LU solve (:func:`_stationary`). It was power
    iteration ``π ← π P`` from the branching law until ``‖π P − π‖₁ < 10⁻¹⁰`` (up to 2,000 products):
    that stops ``‖π − π*‖₁ ≈ 10⁻¹⁰ / (1 − |λ₂|)`` from the fixed point (up to ~10⁻⁹ with ``|λ₂|``
    ~0.92 on the 162-client fleet's loads), which the solve reaches to rounding; every cap of the
    examples and of the horizon fleets is the same (tests/test_pool_latency_chain.py keeps the
    iteration as its reference). On slowly mixing chains (``|λ₂|`` > 0.99: a heavy, bursty lane over
    hundreds of counts) the 2,000 products ran out before that tolerance and the iteration returned a
    vector that was no stationary law (``‖πP − π‖₁`` up to 2·10⁻³, L1 up to 2.0 from the law on random
    loads; a TTFT p99 of 9.1 s where the law gives 20.0 s); the solve gives the law there too. The result is memoised on the load's values (the cap bisection and
    the horizon's periods price the same load again: 8,105 distinct of 12,321 on the 162-client fleet
    at 100 %/month). Callers get a read-only array. Solving the loads of one shape as one stack (the kernels
    below take stacks; each law the same number as alone) was measured no faster (0.67 s against 0.58 s one at a
    time over 4,107 of that fleet's loads: the work is per entry, not per call), so each load is solved alone."""
    c = max(int(live), 1)
    key = _lane_key(load) + ((float(c),) if c > 1 else ())
    hit = _LANE_PMF_CACHE.get(key)
    if hit is not None:
        return hit
    kmax, ca2 = _lane_shape(load)
    pi = _stationary(_lane_chains([load], kmax, ca2, c))
    return _remember(key, pi[0] if pi is not None else _power_iteration(load, kmax, ca2, c))


def _remember(key: tuple[float, ...], pi: np.ndarray) -> np.ndarray:
    pi = np.array(pi)
    pi.setflags(write=False)
    if len(_LANE_PMF_CACHE) >= _LANE_PMF_CACHE_SIZE:
        _LANE_PMF_CACHE.clear()
    _LANE_PMF_CACHE[key] = pi
    return pi


_LANE_KEYS = ("share", "decode_step_s", "delta_s", "units_eff", "rate_per_s", "units_mean", "arrival_cv",
              "prompts_per_iteration")
"""The values of a load :func:`_lane_count_pmf` reads (its memo's key)."""
_LANE_PMF_CACHE: dict[tuple[float, ...], np.ndarray] = {}
_LANE_PMF_CACHE_SIZE = 8192
"""Memo entries kept (each at most 801 floats: at most ~52 MB; 8,105 distinct loads, ~7 MB, on the 162-client fleet at
100 %/month); cleared when full."""


def _lane_key(load: Mapping[str, float]) -> tuple[float, ...]:
    return tuple(float(load[n]) for n in _LANE_KEYS)


def _lane_shape(load: Mapping[str, float]) -> tuple[int, float]:
    """``(kmax, c_a²)`` of :func:`_lane_count_pmf`'s chain: ``kmax`` twice the count quantile ``1 − 10⁻⁷`` of the
    branching law (dispersion ``c_a²/(1 − a)²``) plus ``s + 8``, within 16..800."""
    a, f_eff = load["share"], load["units_eff"]
    ca2 = load["arrival_cv"] ** 2
    mean0 = load["prompts_per_iteration"] * load["units_mean"] / f_eff
    s = 1.0 / f_eff
    return int(min(800.0, max(16.0, 2.0 * _count_quantile(1.0 - 1e-7, mean0, max(ca2, 1e-3) / (1.0 - a) ** 2, 400.0) + s + 8.0))), ca2


def _lane_chains(loads: list[Mapping[str, float]], kmax: int, ca2: float, live: int = 1) -> np.ndarray:
    """:func:`_lane_count_pmf`'s transition matrices ``P[K, K']`` on ``0..kmax`` of loads of one shape
    (:func:`_lane_shape`), stacked ``(load, K, K')``, by whole arrays (each entry the same expression whatever
    the stack). Row ``K`` carries ``(K − s)⁺ = ⌊·⌋ + h`` (``h`` the fraction): weight ``1 − h`` shifted by ``⌊·⌋``
    and ``h`` by ``⌊·⌋ + 1``; a row shifted by ``d`` holds ``P(A = K' − d)`` at ``K' < kmax`` and ``P(A ≥ kmax − d)``
    (the tail sum) at ``kmax``; a shift beyond ``kmax`` puts its weight on ``kmax``."""
    col = np.array([[ld["decode_step_s"], ld["delta_s"], ld["units_eff"], ld["rate_per_s"] * ld["units_mean"] / ld["units_eff"],
                     ld["mean_step_s"]] for ld in loads], dtype=float)
    t_d, delta, f_eff, lam, t_mean = (col[:, j:j + 1] for j in range(5))            # (L, 1) each
    n = kmax + 1
    k = np.arange(n, dtype=float)[None, :]
    span = _routed_span_s(t_d + delta * np.minimum(1.0, f_eff * k), t_mean, live)  # (L, K): the clock's at one instance
    arr = _count_pmfs_repeated(lam * span, ca2, kmax).reshape(len(loads), n, n)
    # padded copies: arr behind n zeros (column n + A − shift; A < 0 reads a zero) and the tail P(A ≥ m) behind a
    # 1 (column m + 1; a shift of kmax + 1 reads the 1: all of its weight on kmax)
    padded = np.zeros((len(loads), n, 2 * n))
    padded[:, :, n:] = arr
    tail = np.ones((len(loads), n, n + 1))
    tail[:, :, 1:] = np.cumsum(arr[:, :, ::-1], axis=2)[:, :, ::-1]
    carry = np.maximum(k - 1.0 / f_eff, 0.0)                                          # (L, K)
    lo = np.floor(carry).astype(int)
    hi_w = carry - lo
    trans = np.zeros((len(loads), n, n))
    for shift, wt in ((lo, 1.0 - hi_w), (lo + 1, hi_w)):
        part = np.take_along_axis(padded, n + np.arange(n)[None, None, :] - shift[:, :, None], axis=2)  # P(A = K' − shift)
        part[:, :, kmax] = np.take_along_axis(tail, kmax - shift[:, :, None] + 1, axis=2)[:, :, 0]
        trans += wt[:, :, None] * part
    return trans


def _stationary(trans: np.ndarray) -> np.ndarray | None:
    """The stationary laws ``π`` of the row-stochastic matrices ``trans`` (stacked ``(load, K, K')``):
    ``(Pᵀ − I) π = 0`` with its last equation replaced by ``Σ π = 1``, by LU (LAPACK ``gesv``); rounding's
    negative dust (``> −10⁻¹²``) set to 0 and renormalised. ``None`` where a system is singular (more than one
    closed class) or its solution is not a pmf to that rounding."""
    n = trans.shape[-1]
    lhs = np.swapaxes(trans, -1, -2) - np.eye(n)
    lhs[:, -1, :] = 1.0
    rhs = np.zeros((trans.shape[0], n, 1))
    rhs[:, -1, 0] = 1.0
    try:
        pi = np.linalg.solve(lhs, rhs)[:, :, 0]
    except np.linalg.LinAlgError:
        return None
    if not (np.all(np.isfinite(pi)) and float(pi.min()) > -1e-12):
        return None
    pi = np.maximum(pi, 0.0)
    return pi / pi.sum(axis=1, keepdims=True)


def _power_iteration(load: Mapping[str, float], kmax: int, ca2: float, live: int = 1) -> np.ndarray:
    """The former solve, kept where :func:`_stationary` finds no single law (never met on a load): ``π ← π P``
    from the branching law (dispersion ``c_a²/(1 − a²)``) until ``‖π P − π‖₁ < 10⁻¹⁰``, at most 2,000 products."""
    trans = _lane_chains([load], kmax, ca2, live)[0]
    a = load["share"]
    pi = _count_pmf(load["prompts_per_iteration"] * load["units_mean"] / load["units_eff"], max(ca2, 1e-3) / (1.0 - a * a), kmax)
    for _ in range(2000):
        nxt = pi @ trans
        done = float(np.abs(nxt - pi).sum()) < 1e-10
        pi = nxt
        if done:
            break
    return pi / pi.sum()


def _ttft_quantile_s(load: Mapping[str, float], quantile: float, units: float, live: int = 1,
                     batch: float = math.inf) -> float:
    """TTFT quantile (s, without the point's fixed overhead) of a prompt of ``units`` lane units
    that fits one iteration (section comment above): numeric over the prompts ``K`` pending at the
    start of the iteration in progress (:func:`_lane_count_pmf`, length-biased: an arrival lands in
    a long iteration more often), the residual share ``u`` and the ``M`` prompts arriving during
    it. Ahead of the prompt: the carried excess ``(f_eff K − 1)⁺`` and the ``(1 − u) M`` that came
    before it; ``X`` those and the prompt, ``j = ⌈X⌉`` iterations to its last token, the first
    ``j − 1`` full (``t_c``), the last ``t_d + δ min(1, X_all − (j − 1))`` with every arrival of
    the iteration in progress in ``X_all``: ``TTFT = u T + (j − 1) t_c + t_d + δ min(1, X_all − j + 1)``.
    ``live`` instances behind the least-loaded router: ``u`` given ``K`` from :func:`_hole_age_law`, the arrivals
    per iteration from :func:`_routed_span_s` and ``K`` weighted by the router's choice at the decode ``batch``
    (:func:`_ttft_grid`; one instance: ``u`` uniform, the clock's arrivals)."""
    grid = _ttft_grid(load, quantile, units, live, batch)
    return grid if isinstance(grid, float) else _weighted_quantile(grid[0], grid[1], quantile)


def _ttft_quantile_meets(load: Mapping[str, float], quantile: float, units: float,
                         meets: Callable[[np.ndarray], np.ndarray], live: int = 1, batch: float = math.inf) -> bool:
    """``meets(_ttft_quantile_s(load, quantile, units))``, the same verdict, mostly without sorting the grid.

    ``meets`` maps TTFT values (s, an array) to verdicts and must be monotone (true up to a threshold:
    the caller's ``wait + TTFT ≤ target``, each operation of which is monotone in floating point). The
    quantile is the value of the grid's first entry, in value order, whose cumulative weight reaches
    ``quantile`` of the total (:func:`_weighted_quantile`), so it meets iff the weight ``A`` of the
    entries that meet reaches ``q T``, ``T`` the total. Both sums are taken here in another order than
    the sorted cumulative sum's; each is within ``n ε`` of its exact value (``n`` terms, ε = 2⁻⁵³), so the
    difference ``A − q T`` can differ from the sorted one by at most ``(4n + 2) ε T`` and, when it is farther
    than ``10⁻¹⁵ (n + 1) T`` from 0, its sign is the verdict; otherwise (a weight within rounding of the
    quantile) the grid is sorted as :func:`_ttft_quantile_s` does."""
    grid = _ttft_grid(load, quantile, units, live, batch)
    if isinstance(grid, float):
        return bool(meets(np.array([grid]))[0])
    values, weights = grid
    keep = weights > 1e-12 * float(weights.max())  # as _weighted_quantile
    v, w = values[keep], weights[keep]
    ok = np.asarray(meets(v), dtype=bool)
    if not ok.any():
        return False
    if ok.all():
        return True
    total = float(w.sum())
    gap = float(w[ok].sum()) - quantile * total
    if abs(gap) > 1e-15 * (len(w) + 1) * total:
        return gap > 0
    return bool(meets(np.array([_weighted_quantile(values, weights, quantile)]))[0])


def _ttft_grid(load: Mapping[str, float], quantile: float, units: float, live: int = 1,
               batch: float = math.inf) -> float | tuple[np.ndarray, np.ndarray]:
    """:func:`_ttft_quantile_s`'s (K', u, M) grid: its values and weights (over the box it keeps), or the
    quantile itself where it is closed-form (saturated lane: ``inf``; no chunk cost: ``t_d (1 + q)``). Behind
    ``live > 1`` instances ``u`` given ``K'`` is :func:`_hole_age_law`'s (the router's instance has mostly just begun an
    iteration) and the lane's arrivals per iteration :func:`_routed_span_s`'s (in the chain of ``K'`` and in ``M``), and
    the picked instance's ``K'`` is weighted by the router's choice: its in-flight count is its decode count plus the
    ``K'`` prompts in its lane, so it is picked ``r(K')`` times as often as a random instance in that state
    (:func:`_jsq_tilt`, the decode counts independent Poisson of mean ``batch``, the instance's decode batch at load;
    nothing fitted). Where few sequences decode the router keeps prompts off busy lanes (8,000-token prompts with
    40-token answers over 17 instances at 30 %: TTFT p99 1,385 ms analytic without the weight, 710 with it, 697
    simulated); with ``batch`` infinite (the default) or large the weight is flat. One instance: ``u`` uniform, the
    arrivals the clock's, no choice."""
    a, t_d, delta, f_eff = load["share"], load["decode_step_s"], load["delta_s"], load["units_eff"]
    if not a < 1.0:
        return math.inf
    if f_eff <= 0 or delta <= 0:
        return float(t_d * (1.0 + quantile))  # the residual u t_d of the iteration in progress and one decode-only iteration
    lam_u = load["rate_per_s"] * load["units_mean"] / f_eff
    c = max(int(live), 1)
    pk = _lane_count_pmf(load, c)
    kmax = len(pk) - 1
    kk = np.arange(kmax + 1, dtype=float)
    t_prev = t_d + delta * np.minimum(1.0, f_eff * kk)
    wk = pk * t_prev / float((pk * t_prev).sum())  # length-biased: an arrival lands in a long iteration more often
    ca2 = load["arrival_cv"] ** 2
    t_arr = _routed_span_s(t_prev, load["mean_step_s"], c)                 # the arrivals an iteration gets: λ t_arr
    mmax = int(max(8.0, _count_quantile(1.0 - 1e-6, lam_u * float(t_arr.max()), max(ca2, 1.0))))
    pm = _count_pmfs_repeated(lam_u * t_arr, ca2, mmax)                     # (k, m)
    # one instance: the weight of (K', u, M) is w_K(K') / 48 · P(M | K') whatever u: the (K', M) pairs
    # _weighted_quantile drops (below 1e-12 of the largest weight) are dropped before the grid is built, which is
    # then built over the (K', M) box holding the rest only (about a third of it); the kept entries are the same
    # expressions in the same order, so the quantile is the same number. Behind the router the weight is
    # w_K(K') P(u | K') P(M | K'): a pair is dropped when even its largest u is below 1e-12 of the
    # largest pair's, which is the grid's largest weight: the same number too
    if c > 1:
        # the router's choice of lane state: an instance whose lane holds K' prompts counts K' more sequences in
        # flight (_jsq_tilt; its decode count Poisson, dispersion 1: nothing fitted here)
        picked = wk * _jsq_tilt(wk, batch, c, 1.0)
        picked_sum = float(picked.sum())
        picked = picked / picked_sum if picked_sum > 0 else wk
        wku = picked[:, None] * _hole_age_law(t_prev, wk, -math.expm1(-load["prompts_per_iteration"]), c)   # (k, u)
        w2 = wku.max(axis=1)[:, None] * pm
    else:
        w2 = wk[:, None] * (np.ones_like(_U_GRID) / len(_U_GRID))[0] * pm
    keep = w2 > 1e-12 * float(w2.max())
    ks, ms = np.flatnonzero(keep.any(axis=1)), np.flatnonzero(keep.any(axis=0))
    k_on, m_on = slice(int(ks[0]), int(ks[-1]) + 1), slice(int(ms[0]), int(ms[-1]) + 1)
    m = np.arange(mmax + 1, dtype=float)[m_on]
    carry = np.maximum(f_eff * kk[k_on] - 1.0, 0.0)[:, None, None]          # (k, 1, 1)
    u = _U_GRID[None, :, None]
    before = carry + f_eff * (1.0 - u) * m[None, None, :] + units          # (k, u, m)
    total = carry + f_eff * m[None, None, :] + units
    j = np.maximum(1.0, np.ceil(before - 1e-9))
    vals = u * t_prev[k_on, None, None] + (j - 1.0) * (t_d + delta) + t_d + delta * np.minimum(1.0, total - (j - 1.0))
    if c > 1:
        wts = wku[k_on, :, None] * pm[k_on, None, m_on]
        sel = np.broadcast_to(keep[k_on, None, m_on], vals.shape) & (wts > 0)
    else:
        wts = np.broadcast_to(w2[k_on, None, m_on], vals.shape)
        sel = np.broadcast_to(keep[k_on, None, m_on], vals.shape)
    return vals[sel], wts[sel]


def _routed_span_s(t_iter_s: np.ndarray, mean_step_s: float | np.ndarray, live: int) -> np.ndarray:
    """The span (s) whose arrivals an instance's iteration of length ``t_iter_s`` receives behind the least-loaded
    router over ``c = live`` instances: ``T / c + (1 − 1/c) t̄``. The router sends a prompt to the instance whose
    in-flight count is lowest, and a count falls only when a sequence ends, at an iteration's end (:func:`_hole_age_law`):
    an instance's arrivals follow its departures, ``λ t̄`` per iteration whatever its length (``t̄`` the mean
    iteration), not the clock's ``λ T``. One instance (``c = 1``) takes every arrival, the clock's ``T``; the share
    ``1/c`` of a prompt's routing that is not the router's choice (a random instance's) keeps the clock's. No parameter
    fitted: the long iterations of a busy lane no longer draw more prompts behind many instances, which cuts the lane's
    tail (``benchmarks/bench_router_lane.py``: the picked instance's lane 1.34 prompts against the mean 2.07 behind 64
    instances, 1,000-token prompts at 70 %). Measured without it in the chain of ``K'`` (in ``M`` only): the short
    answers' grids lose what they gained (multimodal-image's shared TTFT p99 −38 % against −2 %), while
    code-completion-8b's replayed log at 13–15 H100 tp4 agrees better (+1…+4 % against −6…−9 %,
    ``tests/test_replay_wait.py``): in a burst the arrivals outrun the departures, which this law does not see.
    ``mean_step_s`` a number, or an array broadcasting with ``t_iter_s`` (:func:`_lane_chains`' loads, one per row)."""
    t = np.asarray(t_iter_s, dtype=float)
    c = max(int(live), 1)
    if c == 1:
        return t
    return np.asarray(t / c + (1.0 - 1.0 / c) * np.asarray(mean_step_s, dtype=float), dtype=float)


def _hole_age_law(t_prev: np.ndarray, wk: np.ndarray, p: float, live: int) -> np.ndarray:
    """``P(u cell | K')``, shape ``(K', u cell)`` (each row sums to 1): the share ``u`` left of the iteration in progress
    at the instance a least-loaded router over ``c = live`` instances sends a prompt to, on the cells of
    :data:`_U_GRID`, given that instance's state ``K'`` (its iteration ``T(K') = t_prev``).

    The router picks the smallest in-flight count, and a count falls only when a sequence ends, at an iteration's
    end: the instance picked is mostly one whose iteration just began after a departure (measured: the share left of
    the picked instance's iteration has median 0.53 / 0.69–0.73 / 0.90–0.92 / 0.96–0.98 behind 1 / 4 / 17 / 64
    instances, ``benchmarks/bench_router_lane.py --iterations``). Model, no parameter fitted: each instance is,
    independently, in state ``K'`` with the length-biased law ``wk``, its iteration begun ``x`` ago (uniform on
    ``[0, T(K'))``), and *eligible* when that iteration began with a departure, probability ``p = 1 − e^{−λ t̄}`` (``λ t̄``
    sequences end per iteration on average); the router takes the eligible instance whose iteration began last, and
    any instance when none is eligible (probability ``(1 − p)^c``: ``u`` uniform). With ``G(x) = 1 − p Σ_k wk
    min(x / T_k, 1)`` the chance that another instance is not an eligible one younger than ``x``, the picked instance
    is at age ``x`` with density ``c (p / T_k) G(x)^{c−1}`` on ``x < T_k`` given its state, so the cell ``[u_a, u_b]``
    has ``(H((1 − u_a) T_k) − H((1 − u_b) T_k)) / T_k + (1 − p)^c (u_b − u_a)``, ``H(x) = ∫₀ˣ c p G^{c−1}``, exact on
    ``G``'s linear pieces (``(G(y₀)^c − G(y)^c) / s`` on a piece of slope ``−p s``), normalised per state. One instance:
    ``u`` uniform whatever ``p``; many: ``u`` tends to 1. The other instances' states have the law ``wk``; the picked
    instance's own state is weighted by the router's choice in :func:`_ttft_grid` (its in-flight count holds its lane's
    prompts), and the router's effect on the lane's arrivals is :func:`_routed_span_s`'s. Left out: an arrival that
    took the youngest instance's last free slot sends the next one to an older instance (the medians above are a little
    below the model's 0.74 / 0.93 / 0.99)."""
    c = int(live)
    t = np.asarray(t_prev, dtype=float)
    w = np.asarray(wk, dtype=float)
    taus, inv = np.unique(t, return_inverse=True)                    # G's breakpoints
    w_at = np.bincount(inv, weights=w, minlength=len(taus))
    # on piece i, [τ_{i−1}, τ_i): G(y) = 1 − p (Σ_{j<i} w_j + y s_i), s_i = Σ_{j≥i} w_j / τ_j (the states not yet
    # past their whole iteration)
    s_i = np.cumsum((w_at / taus)[::-1])[::-1]
    below = np.concatenate([[0.0], np.cumsum(w_at)[:-1]])
    starts = np.concatenate([[0.0], taus[:-1]])
    pieces = np.arange(len(taus))
    g_start = 1.0 - p * (below + starts * s_i)
    flat = s_i <= 0.0  # no weight left past this piece: G is flat there, H grows as c p G^{c−1} (y − y₀)
    s_safe = np.where(flat, 1.0, s_i)

    def h_on(i: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``H(y) − H(y₀)`` on piece ``i`` (``y₀`` its start)."""
        g = 1.0 - p * (below[i] + y * s_i[i])
        return np.where(flat[i], c * p * g_start[i] ** (c - 1) * (y - starts[i]), (g_start[i] ** c - g**c) / s_safe[i])

    h_start = np.concatenate([[0.0], np.cumsum(h_on(pieces, taus))])[:-1]  # H at each piece's start
    edges = np.arange(len(_U_GRID) + 1) / len(_U_GRID)                # the u cells' edges
    ages = ((1.0 - edges)[None, :] * t[:, None]).ravel()             # x = (1 − u) T_k
    i = pieces[np.minimum(np.searchsorted(taus, ages, side="right"), len(taus) - 1)]
    h = (h_start[i] + h_on(i, ages)).reshape(len(t), len(edges))
    law = (h[:, :-1] - h[:, 1:]) / t[:, None] + (1.0 - p) ** c * np.diff(edges)[None, :]
    total = law.sum(axis=1, keepdims=True)
    return np.asarray(np.where(total > 0, law / np.where(total > 0, total, 1.0), 1.0 / len(_U_GRID)), dtype=float)


def _jsq_busy_share(lane_utilization: float, batch: float, live: int) -> float:
    """Probability that a least-loaded router sends an arrival to an instance whose lane is busy.

    The router of the engines and of :mod:`planner.simulate` counts the sequences in flight per
    instance (decoding + prefilling) and picks the smallest count (ties: any of them). Model: each
    of the ``c = live`` instances has ``N_j ~ Poisson(B)`` decoding sequences (Little's batch of
    the fixed point, an M/G/∞ count) plus one prompt in its lane with probability ``ρ_l`` (the lane
    utilisation), independently: ``X_j = N_j + b_j``. With ``g(x) = P(X = x)``, ``G(x) = P(X > x)``
    an instance at ``x`` is chosen with probability ``Σ_k C(c−1, k) g^k G^{c−1−k} / (k + 1) =
    ((g + G)^c − G^c) / (c g)``, so ``P(chosen lane busy) = ρ_l Σ_x P(N = x − 1) ((g(x) + G(x))^c −
    G(x)^c) / g(x)``. ``ρ_l`` for one instance (random routing) or a large batch (the one prompt
    is lost in the decode counts: ``√B ≫ 1``); far below ``ρ_l`` at small batches over several
    instances (8,000-token prompts over 4 instances at 10 % utilisation: 0.014 against ρ_l 0.087)."""
    rho = min(max(float(lane_utilization), 0.0), 1.0)
    c = int(live)
    if c <= 1 or rho <= 0.0 or rho >= 1.0:
        return rho
    b = max(float(batch), 0.0)
    kmax = int(b + 12.0 * math.sqrt(b) + 14.0)
    pn = _count_pmf(b, 1.0, kmax)                          # N on 0..kmax
    px = (1.0 - rho) * pn + rho * np.concatenate([[0.0], pn[:-1]])  # X = N + Bernoulli(ρ_l)
    tail = np.clip(1.0 - np.cumsum(px), 0.0, 1.0)          # G(x) = P(X > x)
    with np.errstate(divide="ignore", invalid="ignore"):
        chosen = np.where(px > 1e-300, ((px + tail) ** c - tail**c) / px, 0.0)  # per unit mass at x, times c
    busy_at = np.concatenate([[0.0], pn[:-1]])             # P(N = x − 1)
    return float(min(rho, rho * (busy_at * chosen).sum()))


@lru_cache(maxsize=4096)  # each law has ln(10⁻¹²)/ln ρ entries: ~22 kB at ρ 0.99, ~90 MB if all were
def _jsq_ahead_pmf(lane_utilization: float, batch: float, live: int) -> np.ndarray:
    """``P(K = k)``, ``k = 0, 1, …``: the prompts already in the lane (in progress and queued) of
    the instance a least-loaded router sends a prompt to.

    The router counts the sequences in flight per instance (decoding + prefilling) and picks the
    smallest count (:func:`_jsq_busy_share`'s model, with the whole lane queue counted instead of one
    busy flag): instance ``j`` holds ``X_j = N_j + L_j``, ``N_j ~ Poisson(B)`` decoding sequences and
    ``L_j`` prompts in its lane, geometric ``P(L ≥ k) = ρ_l^k`` (M/M/1's queue, the law of one lane
    left to itself), independently over the ``c`` instances. The router keeps the decode counts
    closer together than independent Poisson counts: ``N_j`` has mean ``B`` and dispersion
    ``Var/E = 1/√c`` (binomial, :func:`_count_pmfs`) — calibrated on the simulator only
    (``benchmarks/bench_latency_at_load.py``'s instance-count grid, 8,000-token prompts over 2–64
    instances; dispersion 1 left TTFT p99 +58 % / +92 % at 85 % over 17 / 64 instances, 1/c −13 / −3 %
    but −32 % at 50 %; 1/√c +20 / +34 % and −23 / −20 %). The minimum is ``x`` with probability
    ``(g + G)^c − G^c`` (``g(x) = P(X = x)``, ``G(x) = P(X > x)``), and the chosen instance at ``x``
    holds ``L = k`` with probability ``P(N = x − k) P(L = k) / g(x)``. One instance: ``K`` is the
    geometric law itself. Many instances at a small batch: a prompt lands behind two or more others
    only when every instance's count is as high (join-the-shortest-queue's many-server limit, where
    a waiting customer waits behind one: Eschenfeldt & Gamarnik, *Join the shortest queue with many
    servers. The heavy-traffic asymptotics*, Math. Oper. Res. 43(3), 2018); a large batch hides the
    lane in the decode counts (``√B ≫ 1``) and ``K`` tends to the geometric law (random routing).
    Before this the wait given a busy lane was the isolated M/G/1's whatever ``c``: TTFT p99 +170 %
    against the simulator over 17 instances at 85 % (``benchmarks/bench_latency_at_load.py``).
    Memoised on its values; the array returned is read-only."""
    rho = min(max(float(lane_utilization), 0.0), 1.0 - 1e-9)
    c = max(int(live), 1)
    pl = _geometric_lane_pmf(rho) if rho > 0 else np.array([1.0, 0.0])
    if c <= 1 or rho <= 0.0:
        pl.setflags(write=False)
        return pl
    out = pl * _jsq_tilt(pl, batch, c)
    law = out / out.sum() if out.sum() > 0 else pl
    law.setflags(write=False)
    return law


def _jsq_tilt(lane_pmf: np.ndarray, batch: float, live: int, dispersion: float | None = None) -> np.ndarray:
    """``r(k) = P(L = k | chosen) / P(L = k)``, ``k = 0 … len(lane_pmf) − 1``: how much likelier the least-loaded
    router picks an instance with ``k`` prompts in its lane than one at random (:func:`_jsq_ahead_pmf`'s model:
    instance ``j`` holds ``X_j = N_j + L_j``, ``N_j`` of mean ``batch`` and dispersion ``1/√c``, ``L_j`` of law
    ``lane_pmf``, independently over the ``c = live`` instances; the minimum is ``x`` with probability
    ``(g + G)^c − G^c``), so ``r(k) = Σ_n P(N = n) P(min = n + k) / g(n + k)`` and ``Σ_k P(L = k) r(k) = 1``.
    ``dispersion`` of ``N`` (``Var/E``): ``1/√c`` when not given (the long prompts' law, :func:`_jsq_ahead_pmf`:
    calibrated there), 1 for independent Poisson counts (the short prompts' grid, :func:`_ttft_grid`: nothing fitted).
    Flat (1) above :data:`_ROUTER_BATCH_MAX`."""
    c = int(live)
    b = max(float(batch), 0.0)
    if not b <= _ROUTER_BATCH_MAX:
        return np.ones(len(lane_pmf))
    kmax = int(b + 12.0 * math.sqrt(b) + 14.0)
    # the router's balancing: dispersion 1/√c unless given (calibrated for the long prompts' law, _jsq_ahead_pmf)
    pn = _count_pmf(b, 1.0 / math.sqrt(c) if dispersion is None else dispersion, kmax)
    px = np.convolve(pn, lane_pmf)                         # X = N + L on 0..kmax + len − 1
    tail = np.clip(1.0 - np.cumsum(px), 0.0, 1.0)          # G(x)
    pmin = np.clip((px + tail) ** c - tail**c, 0.0, 1.0)   # P(min_j X_j = x)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(px > 1e-300, pmin / px, 0.0)        # P(min = x) / g(x)
    # row k: Σ_x P(N = x − k) P(min = x) / g(x) over x = k .. k + kmax (a window of per; each row summed
    # alone, as a 1-D sum of its own: the same number as a loop over k)
    windows = np.lib.stride_tricks.sliding_window_view(per, kmax + 1)[:len(lane_pmf)]
    return np.asarray((pn[None, :] * windows).sum(axis=1), dtype=float)


class _LongTtftLaw(NamedTuple):
    """The CDF of :func:`_long_ttft_quantile_s`'s ``W + O`` and where its bisection starts."""

    cdf_many: Callable[[np.ndarray], np.ndarray]
    lo: float
    """``min O``: the CDF is 0 below it."""
    hi: float
    monotone: bool
    """The computed CDF is non-decreasing in ``x``, in floating point: no lane wait, or several instances (every
    step of that branch is monotone in ``x`` and the terms are summed with non-negative weights); one instance's
    M/G/1 law switches formula at the shortest service time, so not claimed there."""


_EINSUM_SERVICES = 8
"""Up to this many lane services :func:`_long_ttft_law` sums ``E[(S − r)⁺]`` over them directly (one einsum); above
it (a pool's length sub-bins, :func:`lane_service_mixture`) from the sorted services' tail sums — the same sum, in
another order (equal to ~10⁻¹⁵ relative), at ``O(log j)`` per point instead of ``O(j)``."""


def _long_ttft_law(load: Mapping[str, float], units: float, lane_service_s: np.ndarray, lane_weights: np.ndarray,
                   live: int, batch: float) -> _LongTtftLaw | None:
    """:func:`_long_ttft_quantile_s`'s law (its docstring); ``None`` where the lane or the instance saturates."""
    from planner.queueing import mg1_tail_decay

    a, t_d, delta = load["share"], load["decode_step_s"], load["delta_s"]
    lam = load["rate_per_s"]
    s = np.asarray(lane_service_s, dtype=float)
    w = np.asarray(lane_weights, dtype=float)
    w = w / w.sum()
    rho = lam * float((w * s).sum())
    if not (a < 1.0 and rho < 1.0):
        return None
    t_c = t_d + delta
    whole = math.ceil(max(units, 1.0) - 1e-9)
    rest = units - (whole - 1)
    mean_m = lam * (whole - 1) * t_c
    mmax = int(max(8.0, _count_quantile(1.0 - 1e-9, mean_m, 1.0)))
    pm = _count_pmf(mean_m, 1.0, mmax)
    own = (whole - 1) * t_c + t_d + delta * np.minimum(1.0, rest + load["units_eff"] * np.arange(mmax + 1))
    # the Cramér–Lundberg decay of one instance's M/G/1 lane (cdf_many's one-instance branch only)
    th, gamma = mg1_tail_decay(lam, s, w) if rho > 0 and live <= 1 else (math.inf, 0.0)
    s_min = float(s.min())
    s_mean = float((w * s).sum())
    ahead = _jsq_ahead_pmf(rho, batch, live) if rho > 0 and live > 1 else np.array([1.0 - rho, rho])
    p_w = float(ahead[1:].sum())  # one instance: ρ_l (M/G/1: P(W > 0) = ρ)
    p_ahead = ahead[1:] / p_w if p_w > 0 else np.zeros(0)
    # the counts whose whole tail is below 10⁻¹⁷ (under a double's rounding of F, whose terms are at most 1) are left
    # out: _jsq_ahead_pmf runs to the geometric law's 10⁻¹² for one lane, but behind the router its mass ends far
    # sooner (fleet-horizon's levels: 114 counts on average, 28 above 10⁻¹⁷), and cdf_many's arrays are (x, M, k)
    if len(p_ahead):
        tail = np.cumsum(p_ahead[::-1])[::-1]
        p_ahead = p_ahead[:max(1, int(np.count_nonzero(tail > 1e-17)))]
    offsets = s_mean * np.arange(len(p_ahead))  # k E[S] behind the residual, k = 0, 1, ...
    # a mixture of many services (a pool's buckets over their length sub-bins, lane_service_mixture): E[(S − r)⁺] from
    # the sorted services' tail sums, Σ_{S_j > r} w_j S_j − r Σ_{S_j > r} w_j, in place of the (x, M, k, j) array
    many = len(s) > _EINSUM_SERVICES
    if many:
        order = np.argsort(s, kind="stable")
        s_sorted, w_sorted = s[order], w[order]
        w_tail = np.append(np.cumsum(w_sorted[::-1])[::-1], 0.0)
        ws_tail = np.append(np.cumsum((w_sorted * s_sorted)[::-1])[::-1], 0.0)

    def cdf_many(x: np.ndarray) -> np.ndarray:
        """``F`` at each of the points ``x`` (one row each; every row the number the former one-point
        form gave: the same element-wise expressions, each row's sums over its own last axis)."""
        t = x[:, None] - own[None, :]                                     # (x, M)
        idle = np.clip(t / t_d, 0.0, 1.0) if t_d > 0 else (t >= 0).astype(float)
        if rho > 0:
            tt = np.maximum(t, 0.0)
            if live > 1:
                # k prompts ahead (_jsq_ahead_pmf): the residual R of the one in progress and k − 1
                # whole prompts, P(R + (k − 1) E[S] ≤ t) with P(R > r) = E[(S − r)⁺] / E[S]
                r = tt[:, :, None] - offsets[None, None, :]                # (x, M, k)
                if many:
                    rp = np.maximum(r, 0.0)
                    at = np.searchsorted(s_sorted, rp, side="right")
                    mixed = np.maximum(ws_tail[at] - rp * w_tail[at], 0.0)
                else:
                    excess = np.maximum(s[None, None, None, :] - np.maximum(r, 0.0)[:, :, :, None], 0.0)
                    # one service time (a point alone, as the cap pricing asks): weight 1, the mixture's sum is the term;
                    # several: one einsum over every row (each entry the same sum over j, in the same order, as the
                    # per-row einsum it replaces: tests/test_slot_sum.py; the law of _ttft_law_points prices 129 rows)
                    mixed = excess[:, :, :, 0] if len(s) == 1 else np.einsum("j,xmkj->xmk", w, excess)
                resid = 1.0 - mixed / s_mean
                wait = np.where(t <= 0, 0.0, (np.where(r > 0, np.clip(resid, 0.0, 1.0), 0.0) * p_ahead[None, None, :]).sum(axis=2))
            else:
                below = (1.0 - rho) * np.expm1(np.minimum(lam * tt, 700.0)) / rho
                above = 1.0 - np.minimum(rho, gamma * np.exp(-th * tt)) / rho
                wait = np.where(t <= 0, 0.0, np.clip(np.where(tt < s_min, below, above), 0.0, 1.0))
        else:
            wait = np.zeros_like(t)
        return np.asarray((pm[None, :] * ((1.0 - p_w) * idle + p_w * wait)).sum(axis=1), dtype=float)

    return _LongTtftLaw(cdf_many, float(own.min()), float(own.max()) + t_d + 1.0, bool(rho <= 0 or live > 1))


def _long_ttft_quantile_s(load: Mapping[str, float], quantile: float, units: float, lane_service_s: np.ndarray,
                          lane_weights: np.ndarray, live: int, batch: float) -> float:
    """TTFT quantile (s, without the fixed overhead) of a prompt of ``units ≥ 1`` lane units in a
    pool whose prompts are longer than the lane (``f̄ ≥ 1``; section comment above).

    ``TTFT = W + O``. The lane of one instance is a FCFS queue of prompt tokens that every
    iteration serves up to a chunk of; busy, it runs full chunks, so a prompt holds it
    ``S_b = f_b t_c`` (``lane_service_ms``) and the lane of one instance is M/G/1 at ``λ`` (this
    instance's share; the mixture ``S_b`` by routed rate): ``P(W ≤ t) = (1 − ρ_l) e^{λt}`` below
    the shortest ``S`` (exact), ``1 − min(ρ_l, γ e^{−θt})`` above (Cramér–Lundberg,
    :func:`planner.queueing.mg1_tail_decay`) for one instance. Over ``c > 1`` instances the
    least-loaded router's choice has ``K`` prompts in its lane (:func:`_jsq_ahead_pmf`), ``P_w =
    P(K ≥ 1)``, and given ``K = k ≥ 1`` the wait is ``R + (k − 1) E[S]``, ``R`` the residual of
    the prompt in progress (``P(R > r) = E[(S − r)⁺] / E[S]``, the equilibrium excess). Own time ``O``: ``⌈f⌉ − 1`` full chunks and a last iteration with
    the remainder ``r = f − ⌈f⌉ + 1`` and the ``M`` prompts that arrived meanwhile
    (``M ~ Poisson(λ (⌈f⌉ − 1) t_c)``, each ``f_eff`` units): ``O_M = (⌈f⌉ − 1) t_c + t_d + δ
    min(1, r + f_eff M)`` — a newcomer's first chunk fills the last iteration (before, ``O`` was
    ``⌈f⌉ t_d + δ f`` whatever the load: the p50 TTFT of 8,000-token prompts at 50 % utilisation
    −28 % against the simulator). An arrival at an idle lane also waits out the decode iteration in
    progress, ``U t_d`` (``U`` uniform). The quantile of ``W + O`` by bisection on its CDF
    ``F(x) = Σ_M P(M) [(1 − P_w) P(U t_d ≤ x − O_M) + P_w P(W ≤ x − O_M | W > 0)]``."""
    law = _long_ttft_law(load, units, lane_service_s, lane_weights, live, batch)
    if law is None:
        return math.inf
    cdf_many, lo, hi = law.cdf_many, law.lo, law.hi
    while float(cdf_many(np.array([hi]))[0]) < quantile:
        hi = lo + 2.0 * (hi - lo)
        if hi > 1e7:
            return math.inf
    # Bisection to 1e-5 relative (at most 60 halvings), its next _LOOKAHEAD halvings' midpoints priced in one
    # call: node i of the tree (children 2i + 1: the lower half, 2i + 2: the upper) is the midpoint the
    # bisection reaches after those answers, computed as it computes it, so it takes the same steps.
    steps = 0
    while steps < 60:
        xs = _midpoint_tree(lo, hi, _LOOKAHEAD)
        fs = cdf_many(xs)
        node = 0
        while node < len(xs) and steps < 60:
            mid = 0.5 * (lo + hi)
            if float(fs[node]) < quantile:
                lo, node = mid, 2 * node + 2
            else:
                hi, node = mid, 2 * node + 1
            steps += 1
            if hi - lo <= 1e-5 * hi:
                return hi
    return hi


def _long_ttft_quantile_meets(load: Mapping[str, float], quantile: float, units: float, lane_service_s: np.ndarray,
                              lane_weights: np.ndarray, live: int, batch: float,
                              meets: Callable[[np.ndarray], np.ndarray], threshold_s: float) -> bool:
    """``meets(_long_ttft_quantile_s(...))``, the same verdict, mostly from the CDF at two points, without the bisection.

    ``meets`` maps TTFT values (s) to verdicts, monotone (true up to a threshold, near ``threshold_s``). The
    bisection's answer ``H`` has ``F(H) ≥ q`` (or is ``inf``), ``H ≥ min O``, and ``H − lo ≤ 10⁻⁵ H`` with
    ``lo = min O`` or ``F(lo) < q``. With a monotone computed CDF (:class:`_LongTtftLaw`):

    * ``meets(min O)`` false: ``H`` fails too;
    * ``x_a`` just above ``threshold_s`` with ``meets(x_a)`` false and ``F(x_a) < q``: every ``x ≤ x_a`` has
      ``F(x) < q``, so ``H > x_a`` and fails;
    * ``x_b`` just below it with ``meets(x_b)`` true and ``F(y) ≥ q`` at ``y = x_b (1 − 2·10⁻⁵)``: ``lo < y``
      (``F(lo) < q``, or ``lo = min O ≤ y`` as ``F = 0`` below ``min O``), so ``H ≤ lo / (1 − 10⁻⁵) < x_b``: ``H`` meets
      (provided the bisection ends on its tolerance, not its 60 halvings: ``y < 10⁶`` s and ``min O ≥ 10⁻⁵`` s).

    Otherwise (``H`` within 2·10⁻⁵ of the threshold, or no monotone CDF) the bisection is run."""
    law = _long_ttft_law(load, units, lane_service_s, lane_weights, live, batch)
    if law is None:
        return bool(meets(np.array([math.inf]))[0])
    if not bool(meets(np.array([law.lo]))[0]):
        return False
    if law.monotone and 0.0 < quantile < 1.0 and law.lo >= 1e-5 and math.isfinite(threshold_s) and threshold_s > 0:
        x_a, x_b = threshold_s * (1.0 + 1e-9), threshold_s * (1.0 - 1e-9)
        y = x_b * (1.0 - 2e-5)
        ok_a, ok_b = (bool(v) for v in meets(np.array([x_a, x_b])))
        if not ok_a and ok_b:
            f_a, f_y = (float(v) for v in law.cdf_many(np.array([x_a, y])))
            if f_a < quantile:
                return False
            if f_y >= quantile and y < 1e6:
                return True
    return bool(meets(np.array([_long_ttft_quantile_s(load, quantile, units, lane_service_s, lane_weights, live, batch)]))[0])


_LOOKAHEAD = 2
"""Halvings of :func:`_long_ttft_quantile_s`'s bisection priced per call of its CDF (``2² − 1 = 3`` midpoints: 2 measured fastest, 1 and 4 slower)."""


def _midpoint_tree(lo: float, hi: float, depth: int) -> np.ndarray:
    """The midpoints a bisection of ``[lo, hi]`` can visit in its next ``depth`` halvings, breadth first
    (node ``i``'s halves are nodes ``2i + 1`` (lower) and ``2i + 2`` (upper)), each ``0.5 * (a + b)`` of its interval."""
    xs: list[float] = []
    level = [(lo, hi)]
    for _ in range(depth):
        nxt: list[tuple[float, float]] = []
        for a, b in level:
            m = 0.5 * (a + b)
            xs.append(m)
            nxt += [(a, m), (m, b)]
        level = nxt
    return np.array(xs)


class TtftLaw(NamedTuple):
    """A unified point's at-load TTFT law (s, without the fixed overhead) as weighted points: ``values`` with
    ``weights`` (summing to ``1 − beyond``) and ``beyond``, the mass past the last value, a sure miss."""

    values: np.ndarray
    weights: np.ndarray
    beyond: float


_LAW_CELLS = 128
"""Cells of :func:`_ttft_law_points`'s law of a prompt longer than the lane: its quantile is at most one cell,
``(hi − lo) / 128``, slower than the exact law's (never faster). Measured against 512 cells: the 8 examples' plans
identical to the dollar, fleet-horizon's shared horizon plan $5,848,667 → $5,851,077 (+0.04 %),
``bench_latency_at_load.py --counts 1`` the same 140 / 144 figures within ±15 % (one instance of 8,000-token prompts
at 95 %, p50 +19 → +21 %); the horizon's run 18.3 → 14.8 s (its levels' law is most of the check)."""
_LAW_TAIL = 1e-3
""":func:`_ttft_law_points`'s law of a prompt longer than the lane stops where ``F ≥ 1 − 10⁻³ (1 − q)``: the rest
is a sure miss (at most 0.1 % of the misses a ``q`` allows)."""


def _long_law_span(law: _LongTtftLaw, quantile: float) -> tuple[float, float] | None:
    """``[lo, hi]`` of :func:`_ttft_law_points`'s cells: ``min O`` to the first ``lo + 2^k (hi₀ − lo)`` with
    ``F ≥ 1 − _LAW_TAIL (1 − q)`` (doubled as :func:`_long_ttft_quantile_s`'s bracket); ``None`` past 10⁷ s."""
    lo, hi = law.lo, law.hi
    top = 1.0 - _LAW_TAIL * (1.0 - float(quantile))
    while float(law.cdf_many(np.array([hi]))[0]) < top:
        hi = lo + 2.0 * (hi - lo)
        if hi > 1e7:
            return None
    return lo, hi


def _ttft_law_points(load: Mapping[str, float], quantile: float, units: float, lane_service_s: np.ndarray,
                     lane_weights: np.ndarray, live: int, batch: float, *, bursty: bool = False) -> TtftLaw | None:
    """The at-load TTFT law (s, without the fixed overhead) of :func:`_ttft_quantile_s` (``f̄ < 1``) or
    :func:`_long_ttft_quantile_s` (``f̄ ≥ 1``) as weighted points (:class:`TtftLaw`); ``None`` where the lane or
    the instance saturates.

    ``f̄ < 1``: the ``(K', u, M)`` grid of :func:`_ttft_grid` itself, normalised (the closed form without a chunk
    cost is the residual ``u t_d`` and one decode iteration, ``t_d (1 + u)`` on the same ``u`` grid). ``f̄ ≥ 1``: the
    CDF ``F`` of :func:`_long_ttft_law` on :data:`_LAW_CELLS` equal cells over :func:`_long_law_span` (``min O`` to
    where ``F ≥ 1 − 10⁻³ (1 − q)``), each cell's mass at its upper end (so the law is at most one cell slower:
    ``(hi − lo) / 128``, :data:`_LAW_CELLS`), the mass past ``hi`` a sure miss (``beyond``), a non-monotone CDF (one instance's M/G/1
    form, :class:`_LongTtftLaw`) by its lower envelope (the running minimum from the right: every quantile at
    least the bisection's)."""
    if load["units_mean"] < 1.0:
        grid = _ttft_grid(load, quantile, units, live, _short_batch(batch, bursty))
        if isinstance(grid, float):
            if not math.isfinite(grid):
                return None
            vals = load["decode_step_s"] * (1.0 + _U_GRID)
            return TtftLaw(vals, np.full(len(vals), 1.0 / len(vals)), 0.0)
        v, w = grid
        return TtftLaw(v, w / float(w.sum()), 0.0)
    law = _long_ttft_law(load, units, lane_service_s, lane_weights, live, batch)
    span = None if law is None else _long_law_span(law, quantile)
    if law is None or span is None:
        return None
    xs = np.linspace(span[0], span[1], _LAW_CELLS + 1)
    cdf = np.minimum.accumulate(np.clip(law.cdf_many(xs), 0.0, 1.0)[::-1])[::-1]
    mass = np.diff(cdf, prepend=0.0)
    keep = mass > 0
    return TtftLaw(xs[keep], mass[keep], max(0.0, 1.0 - float(cdf[-1])))


def slot_tail_applies(tail: tuple[float, float] | None) -> bool:
    """Whether a slot queue's tail ``(C, θ)`` (θ per second) is one the sum rule takes (:func:`slot_sum_quantile_s`):
    ``0 < C ≤ 1`` and ``0 < θ < ∞``. Otherwise the wait is degenerate and the TTFT is the at-load quantile plus
    the wait's own quantile (:func:`planner.queueing.wait_quantile_many`), the sum rule's limit: ``C = 0`` or
    ``θ = ∞`` (no wait, or a deterministic queue below saturation) add 0; a saturated queue (``θ = 0``,
    :func:`planner.ttft_mixture.queue_tail_params` gives ``(1, 0)``) adds ``∞``."""
    return tail is not None and 0.0 < tail[0] <= 1.0 and 0.0 < tail[1] < math.inf


def _slot_allowed(quantile: float) -> float:
    """The miss share a ``quantile`` allows, ``(1 − q)(1 + 10⁻⁹)`` (:data:`planner.ttft_mixture.MIX_TOLERANCE`: the
    rounding of the sums, as the prefill pools' length mix)."""
    from planner.ttft_mixture import MIX_TOLERANCE

    return (1.0 - float(quantile)) * (1.0 + MIX_TOLERANCE)


def slot_sum_miss(x_s: float, law: TtftLaw, tail: tuple[float, float]) -> float:
    """``m(x) = P(W + T > x)`` (``x`` in s): ``T`` the at-load TTFT law (weighted points ``(t_i, w_i)``, weights
    summing to 1, :func:`_ttft_law_points`), ``W`` the pool's slot wait, independent of ``T``, with the Erlang-C /
    Allen–Cunneen tail ``P(W > t) = C e^{−θ t}`` (``tail = (C, θ)``, θ per second;
    :func:`planner.ttft_mixture.queue_tail_params`), ``P(W > t) = 1`` for ``t < 0``:

        m(x) = r + Σ_i w_i P(W > x − t_i) = r + Σ_{t_i ≤ x} w_i C e^{−θ (x − t_i)} + Σ_{t_i > x} w_i

    (:func:`planner.ttft_mixture.wait_tail`). The rule of a unified point's TTFT with its slot wait: the quantile
    ``X`` is the smallest ``x`` with ``m(x) ≤ 1 − q`` (:func:`slot_sum_quantile_s`) and a point fits a TTFT budget
    ``x`` when ``m(x) ≤ 1 − q`` (:func:`unified_ttft_meets`, the utilisation caps)."""
    from planner.ttft_mixture import wait_tail

    miss = law.weights * wait_tail(float(x_s) - law.values, np.asarray(tail[0], dtype=float), np.asarray(tail[1], dtype=float))
    return float(miss.sum()) + law.beyond  # an element-wise sum, not BLAS's dot (its threads cost ms on a busy machine)


def slot_sum_quantile_s(law: TtftLaw | None, tail: tuple[float, float], quantile: float) -> float:
    """The ``quantile`` of ``W + T`` (s; :func:`slot_sum_miss`'s law and tail): the smallest ``x`` with
    ``m(x) ≤ a``, ``a = (1 − q)(1 + 10⁻⁹)`` (:func:`_slot_allowed`), in closed form; ``inf`` where the law
    saturates (``None``). The tail must apply (:func:`slot_tail_applies`).

    Over the distinct values ``t_0 < t_1 < …`` (weights ``w_k`` summed over ties), on ``[t_k, t_{k+1})``

        m(x) = S_k + C A_k e^{−θ (x − t_k)},   S_k = r + Σ_{j>k} w_j,   A_k = Σ_{j≤k} w_j e^{−θ (t_k − t_j)}

    (every value above ``x`` a miss; those at or below it miss when their slot wait exceeds ``x − t_j``), so the
    smallest ``x ≥ t_k`` with ``m(x) ≤ a`` is ``x_k = t_k + max(0, ln(C A_k / (a − S_k)) / θ)`` (``∞`` when
    ``S_k ≥ a``). For ``x ≥ t_k`` the form ``S_k + C A_k e^{−θ(x − t_k)}`` is at least ``m(x)`` (it counts every
    value above ``t_k`` a sure miss), so ``m(x_k) ≤ a`` and the answer, which lies in some ``[t_k, t_{k+1})`` where
    the form is ``m`` itself, is ``min_k x_k``. ``ln A_k`` by a running ``logaddexp`` of ``ln w_j + θ t_j`` (no
    overflow at ``θ t`` of thousands).

    Against the former rule, the sum of the two quantiles ``W_q + T_q`` (the quantile of the comonotone sum, as if
    the requests that wait longest for a slot also found the longest lane; a slot frees when some decode ends,
    unrelated to the lane the request then joins): ``max(W_q, T_q) ≤ X ≤ W_q + max T``, and ``X ≤ W_{q'} + T_{q'}``
    at ``q' = (1 + q)/2`` (``P(W + T > a + b) ≤ P(W > a) + P(T > b)``), but ``X`` is not bounded by ``W_q + T_q``
    (a quantile of a sum is not subadditive): it exceeds it when ``C < 1 − q`` (``W_q = 0``, the waits below the
    quantile the former rule dropped are counted) and may when ``T`` has an atom at its quantile; over a shared pool
    at 95 % it is far below it (8,000-token prompts, 4 instances: p99 14.3 s → 9.7 s, the simulator 8.9 s)."""
    if law is None:
        return math.inf
    c, theta = float(tail[0]), float(tail[1])
    allowed = _slot_allowed(quantile)
    t, inv = np.unique(np.asarray(law.values, dtype=float), return_inverse=True)
    w = np.bincount(inv.ravel(), weights=np.asarray(law.weights, dtype=float), minlength=len(t))
    keep = w > 0
    t, w = t[keep], w[keep]
    if not len(t):
        return math.inf
    above = np.concatenate([np.cumsum(w[::-1])[::-1][1:], [0.0]]) + law.beyond     # S_k
    log_a = np.logaddexp.accumulate(np.log(w) + theta * t) - theta * t               # ln A_k
    room = allowed - above
    with np.errstate(divide="ignore", invalid="ignore"):
        x = t + np.maximum(0.0, (math.log(c) + log_a - np.log(np.where(room > 0, room, 1.0))) / theta)
    x = np.where(room > 0, x, math.inf)
    return float(x.min())


def _short_batch(batch: float, bursty: bool) -> float:
    """The decode batch :func:`_ttft_grid` weighs the router's choice of lane state at: none (``inf``, the state's own
    law) in a pool whose wait is its bursts' (:func:`burst_sets_wait`): in a burst the lanes fill together and the
    router has no idle one to choose (code-completion-8b's shared groups on 13–15 H100 tp4 under its replayed log,
    ``tests/test_replay_wait.py``: −10…−16 % against the simulator with the choice, −5…−9 % without)."""
    return math.inf if bursty else batch


def unified_ttft_s(load: Mapping[str, float], quantile: float, units: float, lane_service_s: np.ndarray,
                   lane_weights: np.ndarray, live: int, batch: float, tail: tuple[float, float] | None = None, *,
                   bursty: bool = False) -> float:
    """A unified point's TTFT quantile at load (s, without the fixed overhead): ``inf`` where its instance
    saturates; with its pool's slot queue tail ``tail`` (``(C, θ)``, θ per second, where
    :func:`slot_tail_applies`) the quantile of the slot wait plus the at-load TTFT taken as independent
    (:func:`slot_sum_quantile_s` over :func:`_ttft_law_points`); otherwise the at-load TTFT alone
    (:func:`_ttft_quantile_s` for prompts within one lane iteration, ``f̄ < 1``; :func:`_long_ttft_quantile_s`
    else), the slot wait the caller's. The plan's prediction (:func:`unified_at_load`, the horizon's array check);
    the utilisation caps ask :func:`unified_ttft_meets`, the same rule."""
    if not load["share"] < 1.0:
        return math.inf
    if slot_tail_applies(tail) and tail is not None:
        return slot_sum_quantile_s(_ttft_law_points(load, quantile, units, lane_service_s, lane_weights, live, batch,
                                                    bursty=bursty), tail, quantile)
    if load["units_mean"] < 1.0:
        return _ttft_quantile_s(load, quantile, units, live, _short_batch(batch, bursty))
    return _long_ttft_quantile_s(load, quantile, units, lane_service_s, lane_weights, live, batch)


_BRACKET_BLOCKS = (16, 64)
""":func:`_long_slot_sum_bounds`' block counts, coarse first: each a CDF at ``blocks + 1`` points of the law's grid."""


def _long_slot_sum_bounds(law: _LongTtftLaw, quantile: float, tail: tuple[float, float], x_s: float) -> bool | None:
    """:func:`unified_ttft_meets`'s verdict ``m(x) ≤ a`` (:func:`slot_sum_miss` on :func:`_ttft_law_points`'s law of a
    prompt longer than the lane, ``law`` its :func:`_long_ttft_law`) from the CDF ``F`` at a few points, where that
    decides it; ``None`` where it does not (or the CDF is not monotone, :class:`_LongTtftLaw`). The law puts each
    cell's mass at its upper end (width ``h``) and the mass past ``hi`` beyond every ``x``, so with a monotone ``F``
    its ``P(T > y)`` lies between ``1 − F(y)`` and ``1 − F(min(y − h, hi))``:

    * ``m(x) ≥ P(T > x) ≥ 1 − F(x)``: above ``a``, a miss;
    * ``m(x) ≤ P(T > y) + C e^{−θ (x − y)}`` for ``y ≤ x`` (the values at or below ``y`` wait more than ``x − y``):
      at ``y = x − ln(2C / a)/θ`` (``C e^{−θ(x−y)} = a/2``; ``y = x`` where ``2C ≤ a``), ``1 − F(min(y − h, hi)) +
      C e^{−θ(x − y)} ≤ a (1 − 10⁻⁹)`` is a fit (the margin covers the rounding of the law's sums);
    * blocks of the law's own grid (:data:`_BRACKET_BLOCKS`: 16, then 64 blocks of ``128/16`` and ``128/64`` cells):
      the law's ``m(x) = r + F(x_0) g(x − x_0) + Σ_i (F(x_i) − F(x_{i−1})) g(x − x_i)`` (``g(d) = P(W > d)``,
      non-increasing in ``d``; :func:`planner.ttft_mixture.wait_tail`), so a block of cells ``x_{j+1} … x_k`` with
      mass ``M = F(x_k) − F(x_j)`` adds between ``M g(x − x_{j+1})`` and ``M g(x − x_k)``: the sums of the lower
      and the upper ends bracket the law's own ``m(x)`` — the same verdict as the 129-point law (the rule itself,
      not a coarser one) wherever the bracket lies wholly on one side of ``a`` (margin ``10⁻⁹ a``, the rounding of
      the two sums), from ``17`` or ``65`` CDF points instead of 129. The caps' bisection mostly prices points far
      from their verdict's edge: fleet-horizon's model build 10.7 → 4.6 s with every cap the same (at 512 cells)."""
    from planner.ttft_mixture import wait_tail

    if not law.monotone:
        return None
    allowed = _slot_allowed(quantile)
    c, theta = float(tail[0]), float(tail[1])
    if 1.0 - float(law.cdf_many(np.array([x_s]))[0]) > allowed:
        return False
    span = _long_law_span(law, quantile)
    if span is None:
        return False
    h = (span[1] - span[0]) / _LAW_CELLS
    y = x_s - max(0.0, math.log(2.0 * c / allowed) / theta)
    z = min(y - h, span[1])
    if 1.0 - float(law.cdf_many(np.array([z]))[0]) + c * math.exp(-theta * (x_s - y)) <= allowed * (1.0 - 1e-9):
        return True
    grid = np.linspace(span[0], span[1], _LAW_CELLS + 1)
    ca, ta = np.asarray(c, dtype=float), np.asarray(theta, dtype=float)
    for blocks in _BRACKET_BLOCKS:
        if _LAW_CELLS % blocks:
            continue
        step = _LAW_CELLS // blocks
        ends = grid[::step]                                                   # x_0, x_s, x_2s, … x_N (N = _LAW_CELLS)
        firsts = grid[1::step]                                                # each block's first cell, x_{j+1}: the law's own point
        f = np.clip(law.cdf_many(ends), 0.0, 1.0)                            # (not x_j + h: at x = x_{j+1} P(W > x − t) jumps)
        mass = np.diff(f)
        fixed = (1.0 - float(f[-1])) + float(f[0]) * float(wait_tail(np.array([x_s - ends[0]]), ca, ta)[0])
        low = fixed + float((mass * wait_tail(x_s - firsts, ca, ta)).sum())
        high = fixed + float((mass * wait_tail(x_s - ends[1:], ca, ta)).sum())
        if high <= allowed * (1.0 - 1e-9):
            return True
        if low > allowed * (1.0 + 1e-9):
            return False
    return None


def unified_ttft_meets(load: Mapping[str, float], quantile: float, units: float, lane_service_s: np.ndarray,
                       lane_weights: np.ndarray, live: int, batch: float, tail: tuple[float, float] | None,
                       wait_ms: float, target_ms: float, overhead_s: float, *, bursty: bool = False) -> bool:
    """Whether a unified point meets a TTFT ``target_ms`` at load: :func:`unified_ttft_s`'s rule, mostly without its
    value (the utilisation caps, :func:`planner.optimize.prepare.unified_caps_at_load`).

    With a slot tail that applies (:func:`slot_tail_applies`): ``m(x) ≤ (1 − q)(1 + 10⁻⁹)`` at ``x = target_ms/10³ −
    overhead_s`` (:func:`slot_sum_miss`; the quantile :func:`slot_sum_quantile_s` is at most ``x`` exactly then);
    ``wait_ms`` is not used. A slot wait alone past ``x`` misses (``C e^{−θ x}`` above the share allowed: every term of
    ``m(x)`` is at least that, ``t_i ≥ 0``) without the law. Otherwise ``wait_ms + 10³ (TTFT + overhead_s) ≤
    target_ms`` (the slot wait ``wait_ms`` added, 0 or ``inf`` for the degenerate tails), by
    :func:`_ttft_quantile_meets` / :func:`_long_ttft_quantile_meets` (the same verdict as the quantile's)."""
    from planner.ttft_mixture import wait_tail

    if not load["share"] < 1.0:
        return False
    if slot_tail_applies(tail) and tail is not None:
        x_s = target_ms / 1e3 - overhead_s
        if math.isnan(x_s):  # an unknown overhead or target: not a fit (as wait + nan)
            return False
        allowed = _slot_allowed(quantile)
        c, theta = float(tail[0]), float(tail[1])
        if not float(wait_tail(np.array([x_s]), np.array([c]), np.array([theta]))[0]) <= allowed:
            return False
        if load["units_mean"] >= 1.0:
            long_law = _long_ttft_law(load, units, lane_service_s, lane_weights, live, batch)
            if long_law is None:
                return False
            decided = _long_slot_sum_bounds(long_law, quantile, tail, x_s)
            if decided is not None:
                return decided
        law = _ttft_law_points(load, quantile, units, lane_service_s, lane_weights, live, batch, bursty=bursty)
        return law is not None and slot_sum_miss(x_s, law, tail) <= allowed

    def meets(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.asarray(wait_ms + (1e3 * (v + overhead_s) + 0.0) <= target_ms)

    if not wait_ms <= target_ms:  # the wait alone misses (or is nan): so does wait + ttft, ttft >= 0 or nan
        return False
    if load["units_mean"] < 1.0:
        return _ttft_quantile_meets(load, quantile, units, meets, live, _short_batch(batch, bursty))
    return _long_ttft_quantile_meets(load, quantile, units, lane_service_s, lane_weights, live, batch, meets,
                                     (target_ms - wait_ms) / 1e3 - overhead_s)


def unified_slot_tails(pool_rows: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per unified pool of ``pool_rows`` (:func:`pool_latency`'s rows by name): its slot queue's tail ``(C, θ)``,
    θ per second (:func:`pool_wait_tails`: ``(1, 0)`` for a pool with no live instance or an infinite wait), for
    :func:`unified_at_load` / :func:`unified_ttft_s`."""
    names = [p for p, r in pool_rows.items() if str(r["role"]) == "unified" and not burst_sets_wait(r)]
    tails = pool_wait_tails(names, pool_rows, {p: float(pool_rows[p]["wait_ms"]) for p in names})
    return {p: (c, 1e3 * theta_ms) for p, (c, theta_ms) in tails.items()}


def bursty_pools(pool_rows: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The unified pools of :func:`pool_latency`'s rows whose wait is their bursts' (:func:`burst_sets_wait`): their
    short prompts' TTFT takes no router choice of lane state (:func:`_short_batch`)."""
    return frozenset(p for p, r in pool_rows.items() if str(r["role"]) == "unified" and burst_sets_wait(r))


def burst_sets_wait(row: Mapping[str, Any]) -> bool:
    """Whether a :func:`pool_latency` row's wait is its bursts' (the replayed log's, or the renewal stream's, fluid
    backlog beyond a Poisson stream's at the lanes' utilisation, :func:`replay_wait_at` with ``lanes``:
    ``replay_wait_ms`` positive and at least the slot queue's): a unified pool whose wait is the bursts' has no slot
    tail (:func:`unified_slot_tails`), so its TTFT is the at-load quantile plus the bursts' quantile, added
    (comonotone), not the quantile of their independent sum (:func:`slot_sum_quantile_s`).

    Why: the fluid backlog is the lanes' own backlog in a burst, and a prompt that arrives in one waits both it and the
    congested lane its at-load law prices (which holds the lanes' Poisson queue: hence the excess over it); an Erlang
    slot wait ends when some decode ends, unrelated to the lane the request then joins (the sum rule's premise).
    Measured against the peak simulation (2026-12-07): long-context-assistant's 15 MI300X tp4 under the gamma stream of
    CV 2.94 (:func:`planner.workload.replay_wait.renewal_curve`), top latency group p99 12.8 s simulated (seed 0), 10.4 s
    with the whole backlog as an independent tail, 12.4 s with the excess added; code-completion's shared plan on 13
    H100 tp4 under its replayed log, 511 ms simulated (two seeds' mean; a miss of its 500 ms target), 442 ms with the
    independent tail (a pass), 530 ms with the excess added. Until then which of the two applied turned on the burst
    tail's fitted ``C`` (above 1: degenerate, added), a 2 s jump in long-context's prediction between two draws."""
    rep = float(row.get("replay_wait_ms", math.nan))
    return rep == rep and rep > 0 and rep >= float(row["wait_ms"])


AT_LOAD_COLUMNS = ("ttft_at_load_ms", "lane_in_ttft", "tpot_at_load_ms", "itl_at_load_ms", "lane_share", "mean_step_at_load_ms",
                   "batch_at_load", "slot_in_ttft", "ttft_own_at_load_ms")
"""Columns of :func:`unified_at_load` (aligned with the points; ``nan`` / False where not applicable)."""


@lru_cache(maxsize=4096)
def _mix_sizes(raw: str) -> tuple[np.ndarray, np.ndarray, float] | None:
    """A length mix's (``planner.capacity.length_mix``, JSON ``[[share, input, output], ...]``) shares, summing to 1,
    its input sizes relative to the share-weighted mean input, and that mean (tokens); ``None`` for an empty,
    malformed or degenerate mix (read by :func:`planner.capacity.length_mix`, which trusts its text: a plan's may be
    anything). Memoised on the text; the arrays are read-only."""
    from planner.capacity import length_mix
    from planner.schema.capacity import LENGTH_MIX_COLUMN

    try:
        rows = length_mix({LENGTH_MIX_COLUMN: raw})
        share = np.array([r[0] for r in rows], dtype=float)
        size = np.array([r[1] for r in rows], dtype=float)
    except (ValueError, TypeError, IndexError, KeyError, RecursionError):
        return None
    if not len(share) or not (np.all(np.isfinite(share)) and np.all(np.isfinite(size))) or np.any(share < 0) or np.any(size < 0):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(share.sum())
        mean = float((share * size).sum()) / total if total > 0 else 0.0
    if not (0 < total < math.inf and 0 < mean < math.inf):  # 1e308 shares or sizes overflow the sums: not a mix
        return None
    share, size = share / total, size / mean
    share.setflags(write=False)
    size.setflags(write=False)
    return share, size, mean


def lane_mixes(points: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per point: its bucket's length mix as ``(shares, sizes relative to the mix's mean)`` (:func:`_mix_sizes`), or
    ``None`` where the points carry none (older plans, hand-written tables, one-length buckets)."""
    from planner.schema.capacity import LENGTH_MIX_COLUMN

    if LENGTH_MIX_COLUMN not in points.columns:
        return [None] * len(points)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for v in points[LENGTH_MIX_COLUMN].tolist():
        mix = _mix_sizes(v) if isinstance(v, str) and v else None
        out.append(None if mix is None else (mix[0], mix[1]))
    return out


def lane_service_mixture(lane_service_s: np.ndarray, weights: np.ndarray,
                         mixes: list[tuple[np.ndarray, np.ndarray] | None]) -> tuple[np.ndarray, np.ndarray]:
    """The lane service-time mixture of a pool's points (or one point): each point's lane service ``S_b`` (the
    mean over its bucket's prompts, ``lane_service_ms`` in the pool's chunk) spread over its length mix's sub-bins,
    ``S_b n_f / n̄_b`` with weight ``w_b s_f`` (``n_f`` a sub-bin's input, ``s_f`` its share, ``n̄_b`` the mix's
    mean: the new tokens taken in proportion to the input, a cached prefix the same share of every prompt); a point
    without a mix keeps its one service. The mean is the points' own. Why: a prompt waits for the residual of the
    one in its lane's progress, and that residual's tail is the bucket's longest prompts, not its mean — with a
    bucket's mean alone long-context-assistant's 17k–123k bucket (28,430 new tokens on average, 77,671 for its
    eighth at 112,878) put every prompt's p99 TTFT at 3.1–7.6 s against 7.0–10.0 s simulated with Poisson arrivals
    (15 MI300X tp4; 5.3–9.7 s with its sub-bins). The sub-bins are the same at every bucket count
    (:mod:`planner.workload.buckets` item 5), so the mixture of a pool carrying a service's buckets is too."""
    s = np.asarray(lane_service_s, dtype=float)
    w = np.asarray(weights, dtype=float)
    if all(m is None for m in mixes):
        return s, w
    svc: list[np.ndarray] = []
    wts: list[np.ndarray] = []
    for s_b, w_b, mix in zip(s.tolist(), w.tolist(), mixes, strict=True):
        if mix is None:
            svc.append(np.array([s_b]))
            wts.append(np.array([w_b]))
        else:
            svc.append(s_b * mix[1])
            wts.append(w_b * mix[0])
    return np.concatenate(svc), np.concatenate(wts)


def _lane_points(points: pd.DataFrame, share: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The routed unified points with lane columns (modelled, not measured): mask, routed peak rate
    ``λ x``, pool, lane units ``f = n / q``, output tokens (``τ = o · mean_step / B*``, the point's
    own identity) and the fixed TTFT overhead (s); ``None`` without the lane columns."""
    need = ("prefill_tokens", "prefill_chunk_tokens", "decode_only_step_ms", "step_ms", "mean_step_ms", "lane_wait_ms", "lane_service_ms")
    if any(c not in points.columns for c in need):
        return None
    x = np.asarray(share, dtype=float)
    roles = points["role"].to_numpy(str)
    vals = points[list(need)].to_numpy(float)
    ok = (x > 0) & (roles == "unified") & np.all(np.isfinite(vals), axis=1) & (vals[:, 1] >= 1)
    if "utilization_cap" in points.columns:
        ok &= np.isnan(points["utilization_cap"].to_numpy(float))  # measured points: their latency is the measured one
    if not ok.any():
        return None
    n_new, q_b, _t_dec, _t_chunk, t_mean_pt, _lane_own, _lane_s = (vals[:, j] for j in range(7))
    overhead_s = unified_ttft_overhead_ms(points) / 1e3
    with np.errstate(divide="ignore", invalid="ignore"):
        outputs = points["instance_seconds_per_request"].to_numpy(float) * points["max_batch"].to_numpy(float) / (t_mean_pt / 1e3)
    return ok, points["rate_peak_per_s"].to_numpy(float) * x, points["pool"].to_numpy(str), n_new / q_b, outputs, overhead_s


def unified_ttft_overhead_ms(points: pd.DataFrame) -> np.ndarray:
    """Per unified point: the fixed part of its TTFT (ms) beyond the lane — the engine's TTFT
    overhead (scheduling, tokenisation: the calibration's ``ttft_overhead_ms``, inside the point's
    ``ttft_ms``, :mod:`planner.perf.points`): ``ttft_ms − lane_wait_ms − ⌈n / q⌉ · step_ms`` (one
    iteration when the prompt fits the chunk), at least 0; ``nan`` without the lane columns. ``n`` is the prompt
    whose TTFT the point checks (``prefill_tokens_rep`` where the table has it, at least ``prefill_tokens``), the
    chunks the point's ``ttft_ms`` counts (:func:`planner.perf.points` ``_evaluate``: ``W_q + ⌈n_first / q⌉ t_it +
    overhead``). The analytic TTFT at load adds it (:func:`unified_at_load`) and so does the simulator
    (:func:`planner.simulate.adapter.plan_to_sim_by_bucket`): engines' TTFT includes it.

    Until 2026-12-07 ``n`` was the length mix's mean ``prefill_tokens``, so the "overhead" also held the chunks
    between the mean prompt and the representative one: 3,275 ms for long-context-assistant's 17k–123k bucket at
    four buckets (31 chunk iterations of 60 ms for its 28,430-token mean, 86 for its representative) against the
    calibration's tens of ms. Both sides then counted those chunks twice: the analytic TTFT already prices the
    representative's chunks (:func:`ttft_prompt_ratio`) and the simulator each request's own, and the coarser the
    buckets the larger the excess (issue 24: long-context's shared cost 4.5 % apart over 4 / 8 / 16 buckets)."""
    need = ("ttft_ms", "lane_wait_ms", "prefill_tokens", "prefill_chunk_tokens", "step_ms")
    if any(c not in points.columns for c in need):
        return np.full(len(points), np.nan)
    ttft, own, n_new, q_b, t_chunk = (pd.to_numeric(points[c], errors="coerce").to_numpy(float) for c in need)
    if "prefill_tokens_rep" in points.columns:
        rep = pd.to_numeric(points["prefill_tokens_rep"], errors="coerce").to_numpy(float)
        n_new = np.where(np.isfinite(rep), np.fmax(rep, n_new), n_new)
    with np.errstate(divide="ignore", invalid="ignore"):
        chunks = np.where(q_b >= n_new, 1.0, np.ceil(n_new / q_b))
        return np.maximum(ttft - own - chunks * t_chunk, 0.0)


def instance_arrival_cv(pool_arrival_cv: float, live: int, units_mean: float) -> float:
    """The inter-arrival CV of the prompts one instance of a unified pool receives behind the
    least-loaded router, from the pool's ``pool_arrival_cv`` (``c_a``, capped at Poisson: bursts
    above it are the slot wait's), ``live`` instances (``c``) and the mean prompt ``units_mean``
    (``f̄``, prompt tokens per lane iteration).

    * Prompts within one lane iteration (``f̄ < 1``): the router picks the instance with the fewest
      in-flight requests, and those are nearly all decoding sequences (``B = λ o t̄`` per instance,
      ~100s) against the few prompts a lane takes per iteration (``λ t̄``), so the choice is blind to
      the lane's work: as far as the lane is concerned each arrival goes to an instance at random,
      probability ``P = 1/c``. Thinning a renewal stream of CV ``c_a`` with probability ``P`` gives
      ``c_P² = P c_a² + 1 − P`` (exact; the derivation at :func:`_thinned_cv2`): Poisson stays
      Poisson at any ``c``. The simulator agrees: behind 17 instances a 1,000-token prompt's TTFT p99
      is that of one instance at the same per-instance load (603 ms against 602 at 50 %;
      ``benchmarks/bench_latency_at_load.py``), where the former ``min(c_a, 1)² / c`` (an instance fed
      every ``c``-th arrival in turn) put it at −30…−42 % and the ITL p99 at −32…−58 %.
    * Prompts longer than the lane (``f̄ ≥ 1``): a prompt holds its instance's lane for ``f̄`` or more
      iterations and counts in flight all that time, so the router sees the lane's queue and spreads
      the prompts nearly in turn: ``c_a² = min(c_a, 1)² / c`` (as
      :func:`planner.queueing.least_loaded_lane_wait_quantile_s` and :func:`_jsq_ahead_pmf`).

    The bursts above Poisson are priced beside this law, not in it: the fluid backlog of the service's replayed log,
    or of the renewal stream the peak simulation draws (:func:`planner.workload.replay_wait.renewal_curve`), beyond a
    Poisson stream's, added to the TTFT at load (:func:`burst_sets_wait`)."""
    ca = min(float(pool_arrival_cv), 1.0)
    c = max(int(live), 1)
    if units_mean < 1.0:
        return math.sqrt(ca * ca / c + 1.0 - 1.0 / c)
    return ca / math.sqrt(c)


def lane_chunk_step_s(rates: np.ndarray, units: np.ndarray, step_ms: np.ndarray) -> float:
    """A unified pool's full-chunk iteration (s) over its points: their ``step_ms`` ``t_b`` weighted by the chunk
    iterations their prompts take, ``t = Σ λ_b f_b t_b / Σ λ_b f_b`` (``f_b = n_b / q_b``, ``units``), so that the
    pool's lane time ``λ f̄ (t − t_d)`` (:func:`unified_load`) is the points' own ``Σ λ_b f_b (t_b − t_d)``, as the
    simulated pool's (:func:`planner.simulate.adapter.unified_lane`). Weighted by rate alone, 8,000-token prompts
    over eight output buckets (one 8,189-token chunk of 700 ms each for the short outputs, three 2,667-token chunks
    of 241 ms for the long) gave the lane 32 % more time than the points priced: TTFT p50 +100 % against the
    simulator (``benchmarks/bench_latency_at_load.py --spread-outputs``). The rate-weighted mean when no prompt
    takes an iteration (``f_b`` all 0)."""
    w = np.asarray(rates, dtype=float)
    t = np.asarray(step_ms, dtype=float)
    wf = w * np.asarray(units, dtype=float)
    if wf.sum() > 0:
        return float((wf * t).sum() / wf.sum()) / 1e3
    return float((w * t).sum() / w.sum()) / 1e3


def pool_chunk_tokens(rates: np.ndarray, new_tokens: np.ndarray, chunk_tokens: np.ndarray) -> float:
    """The one prefill chunk of a unified pool whose points chose chunks ``q_b``: ``q = Σ λ_b n_b / Σ λ_b (n_b / q_b)``
    tokens, the chunk at which the pool's lane does the chunk iterations its points priced (:func:`pool_lane_units`
    prices every prompt in it, :func:`lane_chunk_step_s` its iteration; ``planner deploy``'s launch settings run it, and
    so does the simulator's pool, scaled to the whole prompts it prefills where a bucket has a cached prefix,
    :func:`planner.simulate.adapter.unified_lane`). ``nan`` without routed new tokens."""
    w = np.asarray(rates, dtype=float)
    n = np.asarray(new_tokens, dtype=float)
    iters = float((w * n / np.asarray(chunk_tokens, dtype=float)).sum())
    return float((w * n).sum()) / iters if iters > 0 else math.nan


def pool_lane_units(rates: np.ndarray, units: np.ndarray, new_tokens: np.ndarray) -> np.ndarray:
    """Per point of one unified pool: its prompt in the pool's chunk iterations, ``f'_b = n_b / q``, ``q = Σ λ_b n_b /
    Σ λ_b f_b`` (``f_b = n_b / q_b`` its own point's units, ``n_b`` the new prompt tokens): the engine runs one chunk
    for every prompt (the simulator's too, :func:`planner.simulate.adapter.unified_lane`), the size that does the lane
    work the points priced (``Σ λ_b f'_b = Σ λ_b f_b``). Its full-chunk iteration is :func:`lane_chunk_step_s`. Per
    point's own chunk, 8,000-token prompts of eight output buckets (one 8,189-token chunk for the short outputs,
    three of 2,667 for the long) had TTFT p50 414 ms and 1,174 ms where the simulated pool's two 4,285-token chunks
    give 752 ms to both (``benchmarks/bench_latency_at_load.py --spread-outputs``). A pool of one point, or whose new
    tokens are zero: its own units, as they are."""
    w = np.asarray(rates, dtype=float)
    f = np.asarray(units, dtype=float)
    n = np.asarray(new_tokens, dtype=float)
    wn = float((w * n).sum())
    if len(f) <= 1 or not wn > 0:
        return f.copy()
    return n * float((w * f).sum()) / wn


def _pool_load(points: pd.DataFrame, on: np.ndarray, lam: np.ndarray, units: np.ndarray, outputs: np.ndarray,
               live: int) -> tuple[dict[str, float], float, np.ndarray] | None:
    """The fixed point of one unified pool's instance (:func:`unified_load`) over its points ``on``
    (routed rates ``lam``), its λ-weighted mean output and its points' prompts in the pool's chunk iterations
    (:func:`pool_lane_units`, aligned with ``on``'s points); ``None`` without live instances or traffic.
    The instance's arrival CV: :func:`instance_arrival_cv`."""
    w = lam[on]
    if live < 1 or w.sum() <= 0:
        return None
    ca_pool = points["interarrival_cv"].to_numpy(float)[on] if "interarrival_cv" in points.columns else np.ones(int(on.sum()))
    ca = instance_arrival_cv(float((w * ca_pool).sum() / w.sum()), live, float((w * units[on]).sum() / w.sum()))
    t_dec = float((w * points["decode_only_step_ms"].to_numpy(float)[on]).sum() / w.sum()) / 1e3
    t_chunk = lane_chunk_step_s(w, units[on], points["step_ms"].to_numpy(float)[on])
    u_pool = pool_lane_units(w, units[on], points["prefill_tokens"].to_numpy(float)[on])
    load = unified_load(float(w.sum()) / live, t_dec, t_chunk, u_pool, w, ca)
    return load, float((w * outputs[on]).sum() / w.sum()), u_pool


def pool_slots(rates: np.ndarray, instance_s: np.ndarray, max_batch: np.ndarray) -> float:
    """Slots per instance of a pool serving several points: their batches ``B*`` weighted by busy time,
    ``Σ λ τ B* / Σ λ τ`` (``rates`` λ, ``instance_s`` τ: instance-seconds per request) — the slot count
    :func:`pool_latency` queues a decode or unified pool's requests on; ``inf`` without busy time."""
    busy = np.asarray(rates, dtype=float) * np.asarray(instance_s, dtype=float)
    total = float(busy.sum())
    if not total > 0:
        return math.inf
    return float((busy * np.maximum(np.asarray(max_batch, dtype=float), 1.0)).sum() / total)


def slot_queue_shape(row: Mapping[str, Any]) -> tuple[float, float]:
    """``(z, s_full)`` of a :func:`pool_latency` row (``slot_peakedness``, ``slot_drain_service_s``): ``(1, s)``
    — the plain G/G/c — for every pool but a unified one, and for rows that lack the columns."""
    z = float(row.get("slot_peakedness", 1.0))
    drain = float(row.get("slot_drain_service_s", math.nan))
    s = float(row["mean_service_s"])
    ok = math.isfinite(z) and z >= 1.0 and math.isfinite(drain) and drain > 0
    return (z, drain) if ok else (1.0, s)


def slot_wait_ms(row: Mapping[str, Any], arrival_scale: float = 1.0) -> float:
    """Wait quantile (ms) of a pool's slot (or server) queue from its :func:`pool_latency` row (``quantile``,
    ``arrival_rate_per_s``, ``servers``, ``mean_service_s``, the CVs and :func:`slot_queue_shape`), its arrivals
    scaled by ``arrival_scale`` (the verify-and-tighten loop's bisection, :mod:`planner.optimize.latency`).

    The plain G/G/c (:func:`planner.queueing.wait_quantile_s`) where the shape is ``(1, s)``. A unified pool's slot
    queue (:func:`unified_slot_queue`): ``0`` when ``C ≤ 1 − q``, else ``ln(C / (1 − q)) / θ`` with ``(C, θ)`` of
    :func:`planner.ttft_mixture.queue_tail_params` at the busy count's peakedness and the full-batch drain; ``inf``
    at or past saturation. Scaled arrivals scale the prefill share ``a = 1 − 1/√z`` with them: ``a_f = f a``,
    ``z_f = 1/(1 − a_f)²`` and the at-load hold ``s (1 − a)/(1 − a_f)`` (the iteration ``t_d/(1 − a)``, at most
    the drain hold)."""
    from planner.queueing import wait_quantile_s
    from planner.ttft_mixture import queue_tail_params

    f = float(arrival_scale)
    q, arr, servers = float(row["quantile"]), f * float(row["arrival_rate_per_s"]), int(row["servers"])
    s, cs, ca = float(row["mean_service_s"]), float(row["service_cv"]), float(row["arrival_cv"])
    if not (servers >= 1 and s > 0 and arr > 0):
        return 0.0
    z, drain = slot_queue_shape(row)
    if z == 1.0 and drain == s:
        return wait_quantile_s(q, arr, servers, s, cs, ca) * 1e3
    a = 1.0 - 1.0 / math.sqrt(z)
    z_f = slot_peakedness(f * a)
    s_f = min(s * (1.0 - a) / (1.0 - f * a), max(drain, s))
    pw, theta = queue_tail_params(np.array([float(servers)]), np.array([arr]), np.array([s_f]),
                                  np.array([cs]), np.array([ca]), z_f, drain)
    c, th, tail = float(pw[0]), float(theta[0]), 1.0 - q
    if c <= tail:
        return 0.0
    return math.log(c / tail) / th * 1e3 if th > 0 else math.inf


def unified_slot_queue(points: pd.DataFrame, lanes: tuple[np.ndarray, ...], pool: str, live: int) -> tuple[float, float]:
    """A unified pool's slot queue at the load that arrives: ``(s, z)``, the mean slot hold (s: its routed points'
    λ-weighted mean output — ``output_tokens_mean``, the bucket's mean; the point's own output where that is missing —
    times the mean iteration ``t̄`` of the pool's instance fixed point, :func:`_pool_load` on ``live`` instances,
    :func:`slot_hold_s`) and the peakedness of the busy-slot count, ``z = 1/(1 − a)²`` with ``a`` the
    instance's prefill share at that load (:func:`unified_load`'s ``share``); ``(inf, 1)`` without a fixed point.

    Why ``z``: one iteration serves every slot of an instance, and prompts that arrive stretch it for all of them.
    A request's hold is ``H = o t_d + δ f A_H`` (``A_H`` the prompts that arrive while it decodes), so the busy count
    ``N = A_H`` — about ``λH`` — moves with the arrivals twice: ``N − N̄ ≈ ξ√N̄ (1 + λδf/(1 − a)) = ξ√N̄/(1 − a)``
    (``ξ`` standard normal, ``a = λδf``), a variance ``1/(1 − a)²`` times the independent slots' ``N̄``. Erlang C
    of independent slots at the at-load hold puts ``P(all busy)`` at 1 % where the simulator has a fifth of the
    prompts wait (one A100, 1,000-token prompts at 95 %, ``a`` 0.58: ``z`` 5.8). Once every slot is busy the
    instance admits a prompt per departure and iterates at its full batch: the queue drains at the point's
    full-batch hold (``slot_drain_service_s`` of :func:`slot_wait_ms`). The hold at load replaced the full-batch
    iteration ``τ B*`` as the slot's hold (40 ms on long-document-nvidia's B200 pool, whose instances iterate in 29 ms
    at the plan's load: a p99 slot wait of 8.7 s against 15 ms simulated)."""
    ok, lam, pools, units, outputs, _overhead = lanes
    on = ok & (pools == pool)
    if not on.any():
        return math.inf, 1.0
    fixed = _pool_load(points, on, lam, units, outputs, live)
    if fixed is None:
        return math.inf, 1.0
    mean_out = pd.to_numeric(points["output_tokens_mean"], errors="coerce").to_numpy(float)[on] \
        if "output_tokens_mean" in points.columns else outputs[on]
    return slot_hold_s(fixed[0]["mean_step_s"], lam[on], outputs[on], mean_out), slot_peakedness(fixed[0]["share"])


def slot_peakedness(share: float) -> float:
    """``1/(1 − a)²`` (:func:`unified_slot_queue`) for a prefill share ``a`` in ``[0, 1)``; 1 outside."""
    a = float(share)
    return 1.0 / (1.0 - a) ** 2 if 0.0 < a < 1.0 else 1.0


def slot_hold_s(mean_step_s: float, weights: np.ndarray, outputs: np.ndarray, mean_outputs: np.ndarray) -> float:
    """``Σλ o / Σλ · t̄`` (:func:`unified_slot_queue`'s hold): ``mean_outputs`` where finite and positive, else ``outputs``;
    ``inf`` when not finite and positive (the horizon's level check calls it with its own arrays)."""
    o = np.where(np.isfinite(mean_outputs) & (mean_outputs > 0), mean_outputs, outputs)
    hold = float((weights * o).sum() / weights.sum()) * float(mean_step_s)
    return hold if math.isfinite(hold) and hold > 0 else math.inf


def unified_at_load(points: pd.DataFrame, share: np.ndarray, instances: Mapping[str, int], redundancy: int,
                    ttft_quantile: float | None = None, token_quantile: float | None = None,
                    slot_tails: Mapping[str, tuple[float, float]] | None = None,
                    bursty: Collection[str] = ()) -> pd.DataFrame:
    """Per routed unified point with lane columns: its TTFT, TPOT and ITL quantiles at the load its
    pool actually carries (section comment above), and the pool's fixed point.

    ``ttft_at_load_ms``: the point's own part of TTFT at load — the iteration in progress, its own
    iterations and the overhead; with ``lane_in_ttft`` the lane queue too (prompts within one lane,
    ``f̄ < 1``), otherwise (``f̄ ≥ 1``) the pool's lane wait (:func:`pool_latency`) is added by the
    caller. Slot waits are the caller's, except for the pools of ``slot_tails`` (pool name → the slot queue's
    ``(C, θ)``, θ per second, :func:`unified_slot_tails`) whose tail applies (:func:`slot_tail_applies`): their
    TTFT is the quantile of the sum of the slot wait and the at-load TTFT (:func:`unified_ttft_s`; ``slot_in_ttft``
    True: the caller then adds no slot wait; ``ttft_own_at_load_ms`` the TTFT at load without it, the point's own part
    that the verify-and-tighten loop budgets the waits against, :func:`planner.optimize.latency.tighten_factors`). Quantiles: the points' own (``ttft_quantile``,
    ``tpot_quantile`` / ``itl_quantile``; a mean target: the mean) unless given."""
    from planner.schema.capacity import quantile_level

    points, share = fold_inline_encode(points, share)  # an inline encode is its prompt's lane work (planner.inline_encode)
    n = len(points)
    cols: dict[str, np.ndarray] = {"ttft_at_load_ms": np.full(n, np.nan), "lane_in_ttft": np.zeros(n, dtype=bool),
                                   "tpot_at_load_ms": np.full(n, np.nan), "itl_at_load_ms": np.full(n, np.nan),
                                   "lane_share": np.full(n, np.nan), "mean_step_at_load_ms": np.full(n, np.nan),
                                   "batch_at_load": np.full(n, np.nan), "slot_in_ttft": np.zeros(n, dtype=bool),
                                   "ttft_own_at_load_ms": np.full(n, np.nan)}
    lp = _lane_points(points, share)
    if lp is None:
        return pd.DataFrame(cols, index=points.index)
    ok, lam, pools, units, outputs, overhead_s = lp
    own_ratio = ttft_prompt_ratio(points)
    mixes = lane_mixes(points)
    ttft_q = points["ttft_quantile"].to_numpy()
    metric_of = points["token_metric"].astype(str).to_numpy() if "token_metric" in points.columns else None
    level_cols = {m: points[f"{m}_quantile"].to_numpy() for m in ("tpot", "itl") if f"{m}_quantile" in points.columns}
    for pool in sorted(set(pools[ok])):
        on = ok & (pools == pool)
        live = max(int(instances.get(pool, 0)) - redundancy, 0)
        fixed = _pool_load(points, on, lam, units, outputs, live)
        if fixed is None:
            continue
        load, o_mean, u_pool = fixed
        rate_i = load["rate_per_s"]
        idx = np.flatnonzero(on)
        # in the pool's chunk (pool_lane_units): each prompt's iterations, and the lane services of its mix, spread
        # over the buckets' length sub-bins (lane_service_mixture)
        lane_on, lane_w = lane_service_mixture(u_pool * (load["decode_step_s"] + load["delta_s"]), lam[on],
                                               [mixes[j] for j in idx])
        slots = pool_slots(lam[on], points["instance_seconds_per_request"].to_numpy(float)[on],
                           points["max_batch"].to_numpy(float)[on])
        batch = rate_i * o_mean * load["mean_step_s"]  # an instance's decode batch at load (Little)
        lives = (outputs[on], lam[on])
        for i, units_i in zip(idx, (u_pool * own_ratio[on]).tolist(), strict=True):  # its own chunks: the representative's
            tq = ttft_quantile if ttft_quantile is not None else float(ttft_q[i])
            metric = str(metric_of[i]) if metric_of is not None else "tpot"
            lvl = token_quantile if token_quantile is not None else quantile_level(level_cols[metric][i] if metric in level_cols else 0.99)
            lane_in = True  # the lane queue is inside this TTFT (short prompts: _ttft_quantile_s; long: _long_ttft_quantile_s)
            tail = None if slot_tails is None else slot_tails.get(str(pool))
            slot_in = slot_tail_applies(tail)
            burst = str(pool) in bursty  # the pool's wait is its bursts' (_short_batch)
            ttft_s = unified_ttft_s(load, tq, units_i, lane_on, lane_w, live, batch, tail, bursty=burst)
            own_s = unified_ttft_s(load, tq, units_i, lane_on, lane_w, live, batch, bursty=burst) \
                if slot_in else ttft_s
            tpot = _tpot_quantile_s(load, lvl, float(outputs[i]), slots, live, batch, lives)
            itl = load["mean_step_s"] if lvl is None else _itl_quantile_s(load, lvl, _chosen_batch_ratio(batch, live))
            for c, v in zip(cols, (1e3 * (ttft_s + overhead_s[i]), lane_in, 1e3 * tpot, 1e3 * itl, load["share"],
                                   1e3 * load["mean_step_s"], batch, slot_in,
                                   1e3 * (own_s + overhead_s[i])), strict=True):
                cols[c][i] = v
    return pd.DataFrame(cols, index=points.index)


def plan_latency_quantiles(result: PlanResult, architecture: str, quantile: float) -> pd.DataFrame:
    """Per (service, bucket) of one architecture's plan: the analytic TTFT, TPOT and ITL at the
    ``quantile`` level (ms) — the same model as the plan's own prediction (:func:`pool_latency`,
    :func:`bucket_latency` with the pool sizes), at another level. Columns: service, bucket,
    ttft_ms, tpot_ms, itl_ms. For comparing with the simulator's p50 / p99
    (``benchmarks/bench_latency_at_load.py``)."""
    plan = result.architectures[architecture]
    pts = pd.DataFrame(result.capacity.points)
    cols = ["service", "bucket", "ttft_ms", "tpot_ms", "itl_ms"]
    if not plan.feasible or not len(pts):
        return pd.DataFrame(columns=cols)
    x = plan_shares(plan, pts)
    inst = {p.name: p.instances for p in plan.pools}
    k = result.capacity.redundancy
    rows, lanes, waits = pool_waits(pts, x, inst, k, quantile=quantile)
    out = []
    for metric in ("tpot", "itl"):
        p = pts.assign(token_metric=metric)
        b = bucket_latency(p, x, waits, lanes, instances=inst, redundancy=k, ttft_quantile=quantile, token_quantile=quantile,
                           pool_rows=rows)
        out.append(b.set_index(["service", "bucket"]))
    frame = out[0][["ttft_predicted_ms", "tpot_predicted_ms"]].rename(columns={"ttft_predicted_ms": "ttft_ms", "tpot_predicted_ms": "tpot_ms"})
    frame["itl_ms"] = out[1]["tpot_predicted_ms"]
    return frame.reset_index()[cols]


UNIFIED_AT_UTILIZATION_COLUMNS = ("ttft_ms", "token_ms", "token_target_ms", "lane_wait_ms", "lane_in_ttft")
"""Columns of :func:`unified_at_utilization_many` (aligned with the points; ``nan`` where not modelled)."""


def unified_at_utilization_many(points: pd.DataFrame, utilization: np.ndarray, instances: np.ndarray, *,
                                ttft: bool = True, token: bool = True,
                                ttft_budget: tuple[np.ndarray, np.ndarray] | None = None,
                                slot_tails: tuple[np.ndarray, np.ndarray] | None = None,
                                bursty: np.ndarray | None = None) -> pd.DataFrame:
    """Per unified point alone in a pool of ``instances`` live instances loaded to ``utilization``
    (``ρ = λ_pool τ / c``, each instance at ``ρ / τ`` requests/s): its TTFT and per-token quantiles
    at that load — the same model as :func:`unified_at_load` (one pool per point, its fixed point,
    counts and quantiles by the same functions) plus, for prompts longer than the lane (``f ≥ 1``),
    the lane queue of :func:`lane_wait_quantile_ms` at that load, which :func:`pool_latency` adds
    to the plan's prediction. Slot waits are the caller's (the point's batch is the cap).

    This is what :func:`planner.optimize.prepare.utilization_caps` prices a unified point's cap at
    (the load that arrives, not the full batch). Columns (:data:`UNIFIED_AT_UTILIZATION_COLUMNS`):
    ``ttft_ms`` own part of TTFT at the point's TTFT quantile, lane queue included; ``token_ms``
    the point's per-token metric (``token_metric``: TPOT or ITL) at its quantile (the mean for a
    mean target) and ``token_target_ms`` its target; ``lane_wait_ms`` the lane queue (``f ≥ 1``;
    0 when it is inside ``ttft_ms``). ``nan`` for rows that are not modelled unified points
    (other roles, measured rows, no lane columns, ``utilization ≤ 0`` or no instance).
    Cost: one fixed point and three quantiles per row (~1 ms), almost all of it the TTFT quantile.
    ``ttft=False`` prices only the per-token metric (``ttft_ms`` and ``lane_wait_ms`` ``nan``), ``token=False``
    only the TTFT (``token_ms`` ``nan``), for a caller that needs the TTFT only where the per-token target is met
    (:func:`planner.optimize.prepare.unified_caps_at_load`); each row's numbers depend on that row alone, so
    the rows and columns it does price are the same numbers either way. ``ttft_budget = (wait_ms, target_ms)``
    (per row) adds the column ``ttft_fits``: ``wait_ms + ttft_ms ≤ target_ms``, the comparison the caller would
    make, reached mostly without the TTFT's value (a wait alone over the target fails, ``ttft_ms ≥ 0``; else
    :func:`_ttft_quantile_meets`, :func:`_long_ttft_quantile_meets`: the same verdict; ``ttft_ms`` is then ``nan`` on
    the rows whose lane does not saturate), and ``modelled``: the rows whose ``ttft_ms`` is a number when priced
    (modelled unified points with a known fixed overhead). ``slot_tails = (C, θ)`` (per row, θ per second): the slot
    queue's tail of each row; where it applies (:func:`slot_tail_applies`) ``ttft_ms`` is the quantile of the slot
    wait plus the TTFT at load (:func:`unified_ttft_s`) and ``ttft_fits`` that rule's verdict against the target
    (:func:`unified_ttft_meets`; the budget's wait is then not added)."""
    rows = UnifiedRows(points)
    out = rows.at(np.arange(len(points)), utilization, instances, ttft=ttft, token=token, ttft_budget=ttft_budget,
                  slot_tails=slot_tails, bursty=bursty)
    return pd.DataFrame(out, index=points.index)


class UnifiedRows:
    """:func:`unified_at_utilization_many`'s per-point inputs, read from the points once: a caller that prices the
    same points at many utilisations (the cap searches of :func:`planner.optimize.prepare.unified_caps_at_load`)
    builds this once and calls :meth:`at` on the rows it needs; each row's numbers are the same as
    :func:`unified_at_utilization_many` of all the points gives (they depend on that row alone)."""

    def __init__(self, points: pd.DataFrame) -> None:
        from planner.schema.capacity import quantile_level

        n = self.n = len(points)
        self.tau = points["instance_seconds_per_request"].to_numpy(float) if n else np.zeros(0)
        lp = _lane_points(points.assign(rate_peak_per_s=1.0, pool=""), np.ones(n)) if n else None
        self.lane_ok = np.zeros(n, dtype=bool)
        if lp is None:
            return
        self.lane_ok, _lam, _pools, self.units, self.outputs, self.overhead_s = lp
        self.units_ttft = self.units * ttft_prompt_ratio(points)  # the TTFT's own chunks (ttft_prompt_ratio)
        self.metric = points["token_metric"].astype(str).to_numpy() if "token_metric" in points.columns else np.full(n, "tpot")
        self.ca_pt = points["interarrival_cv"].to_numpy(float) if "interarrival_cv" in points.columns else np.ones(n)
        self.t_dec = points["decode_only_step_ms"].to_numpy(float) / 1e3
        self.t_chunk = points["step_ms"].to_numpy(float) / 1e3
        self.lane_s, _own = lane_columns(points)
        self.ttft_q = points["ttft_quantile"].to_numpy(float)

        def column(name: str, default: float) -> np.ndarray:
            return pd.to_numeric(points[name], errors="coerce").to_numpy(float) if name in points.columns else np.full(n, default)

        levels = {m: column(f"{m}_quantile", 0.99) for m in ("tpot", "itl")}
        self.level = [{m: quantile_level(levels[m][i]) for m in levels} for i in range(n)]
        self.targets = {m: column(f"{m}_target_ms", math.inf) for m in ("tpot", "itl")}
        self.batch = points["max_batch"].to_numpy(float)

    def prompt_units(self) -> np.ndarray:
        """Per row: the prompt in lane iterations (``f = n / q``; ``nan`` where not modelled)."""
        return self.units if self.lane_ok.any() else np.full(self.n, np.nan)

    def modelled(self) -> np.ndarray:
        """The rows whose ``ttft_ms`` is a number (or ``inf``) when priced at a positive utilisation on an instance:
        modelled unified points with a known fixed overhead (:func:`unified_at_utilization_many`'s ``modelled``)."""
        if not self.lane_ok.any():
            return np.zeros(self.n, dtype=bool)
        return self.lane_ok & (self.tau > 0) & ~np.isnan(self.overhead_s)

    def at(self, idx: np.ndarray, utilization: np.ndarray, instances: np.ndarray, *, ttft: bool = True, token: bool = True,
           ttft_budget: tuple[np.ndarray, np.ndarray] | None = None,
           slot_tails: tuple[np.ndarray, np.ndarray] | None = None,
           bursty: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """:func:`unified_at_utilization_many`'s columns for the rows ``idx`` (aligned with ``idx``) at ``utilization``
        and ``instances`` (aligned with ``idx``, or scalars); ``ttft_budget``, ``slot_tails`` and ``bursty`` (the rows whose
        wait is their bursts': :func:`_short_batch`) aligned with ``idx``."""
        n = len(idx)
        rho = np.broadcast_to(np.asarray(utilization, dtype=float), (n,))
        live = np.broadcast_to(np.asarray(instances, dtype=float), (n,))
        out = {c: np.full(n, np.nan) for c in UNIFIED_AT_UTILIZATION_COLUMNS}
        out["lane_in_ttft"] = np.zeros(n, dtype=bool)
        if ttft_budget is not None:
            out["ttft_fits"] = np.zeros(n, dtype=bool)
            out["modelled"] = np.zeros(n, dtype=bool)
        if not n:
            return out
        tau = self.tau[idx]
        ok = self.lane_ok[idx] & np.isfinite(rho) & (rho > 0) & (live >= 1) & (tau > 0)
        for r in np.flatnonzero(ok):
            i = int(idx[r])
            c = int(live[r])
            rate_pool = float(rho[r]) * c / float(tau[r])
            units_i = float(self.units[i])
            # _pool_load of a one-point pool: a least-loaded router's share of the arrivals (instance_arrival_cv)
            load = unified_load(rate_pool / c, float(self.t_dec[i]), float(self.t_chunk[i]), self.units[i:i + 1], np.ones(1),
                                instance_arrival_cv(float(self.ca_pt[i]), c, units_i))
            m = self.metric[i] if self.metric[i] in ("tpot", "itl") else "tpot"
            lvl = self.level[i][m]
            tq = float(self.ttft_q[i])
            oh_i = float(self.overhead_s[i])
            lane_in = True  # the lane queue is inside ttft_s (as unified_at_load)
            lane_ms = 0.0
            verdict: bool | None = None
            tail = None if slot_tails is None else (float(slot_tails[0][r]), float(slot_tails[1][r]))
            batch_i = rate_pool / c * float(self.outputs[i]) * load["mean_step_s"]
            burst_r = bool(bursty[r]) if bursty is not None else False
            if not ttft:
                ttft_s, lane_ms = math.nan, math.nan
            elif ttft_budget is not None and load["share"] < 1.0:
                verdict = unified_ttft_meets(load, tq, float(self.units_ttft[i]), self.lane_s[i:i + 1], np.ones(1), c, batch_i, tail,
                                             float(ttft_budget[0][r]), float(ttft_budget[1][r]), oh_i, bursty=burst_r)
                ttft_s = math.nan
            else:
                ttft_s = unified_ttft_s(load, tq, float(self.units_ttft[i]), self.lane_s[i:i + 1], np.ones(1), c, batch_i, tail,
                                        bursty=burst_r)
            if not token:
                tok = math.nan
            elif m == "itl":
                tok = load["mean_step_s"] if lvl is None else _itl_quantile_s(
                    load, lvl, _chosen_batch_ratio(batch_i, c))
            else:
                tok = _tpot_quantile_s(load, lvl, float(self.outputs[i]), float(self.batch[i]), c, batch_i)
            tgt = float(self.targets[m][i])
            out["ttft_ms"][r] = 1e3 * (ttft_s + oh_i) + lane_ms
            out["token_ms"][r] = 1e3 * tok
            out["token_target_ms"][r] = tgt if math.isfinite(tgt) else math.inf
            out["lane_wait_ms"][r] = lane_ms
            out["lane_in_ttft"][r] = lane_in
            if ttft_budget is not None:
                out["modelled"][r] = not math.isnan(oh_i)  # ttft_s is a number or inf on these rows
                with np.errstate(invalid="ignore"):
                    out["ttft_fits"][r] = verdict if verdict is not None else bool(float(ttft_budget[0][r]) + out["ttft_ms"][r] <= float(ttft_budget[1][r]))
        return out
