"""The analytic tail-latency check of a solved plan, and the cap factors that would fix a miss (DESIGN §6, issue 7).

The utilisation caps ``ρ_i`` are set before solving from a nominal pool of one bucket
(:mod:`planner.optimize.prepare`). After the MIP the plan's actual pools are checked:


1. :func:`planner.pool_latency.pool_latency` — per pool the predicted waits at peak for the
   plan's actual pool sizes (the maths is in :mod:`planner.pool_latency`, shared with
   :mod:`planner.verify`, which must not depend on the optimiser).
2. :func:`planner.pool_latency.bucket_latency` — per (service, bucket) the predicted TTFT and TPOT.
3. Where a bucket misses its TTFT target ``T``, the queueing budget ``T − ttft_ms`` is split
   over the pools it waits in, in proportion to their current waits; each such pool gets
   the largest utilisation ``ρ*_p`` meeting its share at its current size
   (:func:`planner.queueing.max_utilization`; for a unified pool with a lane, the largest
   scale ``s`` of its arrivals at which slot wait + lane wait fit, by bisection, and
   ``u_p / ρ*_p = 1/s``), and every point of the pool has its cap
   divided by ``f_p = max(1.05, u_p / ρ*_p)`` (``u_p`` its peak utilisation; at least 5%
   per round so each round makes progress; at most ×4) (:func:`tighten_factors`).
   A bucket split over several pools of one phase names only the pools without whose share it would meet
   (:func:`_culprits`), when there are such pools and not all of them are: the bucket's room then goes to those.
   long-document-nvidia's shared plan at traffic ×4.6 had b200/tp2 tightened ×4 with tp1 for the long-prompt
   bucket's 33.5 s own TTFT on tp1 ($106,351 against $102,230 at ×4.8; now $100,674); code-completion-8b's
   shared plan at ×0.95 had h100 tp4 (8 instances, every bucket meeting on it) tightened ×4 with a
   one-instance tp2 pool holding part of the longest bucket, and ended at 82 tp1 instances, $175,228 against
   $87,909 at ×1.

Points whose cap came with the table (measured capacity, ``utilization_cap`` given) are
not re-checked: a measured rate already includes queueing at the SLO. The loop that applies
the factors and re-solves is :mod:`planner.optimize.tighten`; the discrete-event check
(:mod:`planner.verify`) compares its simulated waits with :func:`predicted_pool_quantiles`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from planner.inline_encode import fold_inline_encode
from planner.optimize.memo import frame_key
from planner.optimize.prepare import Prepared
from planner.pool_latency import (
    POOL_LATENCY_COLUMNS,
    bucket_latency,
    lane_columns,
    lane_wait_quantile_ms,
    plan_shares,
    pool_latency,
    pool_waits,
    predicted_pool_quantiles,
)
from planner.schema.plan import ArchitecturePlan

__all__ = ["POOL_LATENCY_COLUMNS", "RELAX_CEILING", "bucket_latency", "plan_shares", "pool_latency", "predicted_pool_quantiles",
           "relax_ceiling", "relax_factors", "tighten_factors"]


_MEMO: dict[tuple[Any, ...], Any] = {}
"""Last results of :func:`tighten_factors` / :func:`relax_factors` (at most :data:`_MEMO_SIZE`)."""
_MEMO_SIZE = 64
_LOCK = threading.Lock()
"""Guards the memo (a Dask worker may run study chunks on several threads)."""


def _fingerprint(pts: pd.DataFrame) -> Any:
    """The points' content (:func:`planner.optimize.memo.frame_key`: every column's bytes, or its cells'
    ``repr``, digested; ~3 ms for 144 rows x 60 columns, against 20-70 ms for the check), each call — a
    frame changed in place is a different key; a frame with a cell of no plain type shares nothing."""
    return frame_key(pts)


def _memo_key(kind: str, prep: Prepared, plan: ArchitecturePlan, *args: Any) -> tuple[Any, ...]:
    """What the check reads: the points (by content), the plan's routing shares and pool sizes, and
    the options.

    The verify-and-tighten loop asks the same question of the same (points, plan) two or three times
    (:func:`planner.optimize.tighten.solve_verified`: the loop's last check, the check before refining,
    the check before relaxing), a sweep's lean check (:mod:`planner.optimize.resolve`) asks it once
    more of the same solution, and scenarios of a sweep that differ only in the electricity price
    mostly give the same plans (the check does not read the price): the answer is computed once."""
    return (kind, _fingerprint(prep.points),
            tuple((r.service, r.bucket, str(r.role), r.config, float(r.share)) for r in plan.routing),
            tuple((p.name, int(p.instances)) for p in plan.pools), *args)


def _memo_get(key: tuple[Any, ...]) -> Any:
    with _LOCK:
        return _MEMO.get(key)


def _memo_put(key: tuple[Any, ...], value: Any) -> None:
    with _LOCK:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = value


def tighten_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, min_step: float = 1.05,
                    max_step: float = 4.0) -> tuple[dict[str, float], pd.DataFrame]:
    """Per pool to tighten: the factor dividing its caps (module docstring, step 3); and the bucket table.

    Empty when every bucket meets its targets (or only pools with caps supplied by the table
    are involved, which are not re-checked). Memoised on its inputs (:func:`_memo_key`); callers get
    their own copies.
    """
    key = _memo_key("tighten", prep, plan, int(redundancy), float(min_step), float(max_step))
    hit = _memo_get(key)
    if hit is None:
        hit = _tighten_factors(prep, plan, redundancy, min_step=min_step, max_step=max_step)
        _memo_put(key, hit)
    return dict(hit[0]), hit[1].copy()


def _finite_ms(*values: Any) -> bool:
    """Whether every predicted latency is a finite number (``None`` / NaN / inf: not)."""
    return all(v is not None and math.isfinite(float(v)) for v in values)


def _tighten_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, min_step: float,
                     max_step: float) -> tuple[dict[str, float], pd.DataFrame]:
    from planner.pool_latency import replay_curves, replay_slots
    from planner.queueing import max_utilization
    from planner.workload.replay_wait import max_slot_occupancy
    from planner.workload.replay_wait import max_utilization as replay_cap

    # an inline encode rides in its host's row (planner.inline_encode), as in pool_waits and bucket_latency: the lane
    # service times read below must be the host's with the tower, and no encode row (no lane columns: a NaN lane
    # service made the bisection of _max_load_scale fail at every load, so a per-token miss of multimodal-image's
    # 4 H100 at rate x1.15 tightened their caps x4 and bought 16 L40S for 15,277 where 5 H100 at 14,967 meet)
    pts, x = fold_inline_encode(prep.points, plan_shares(plan, prep.points))
    inst = {p.name: p.instances for p in plan.pools}
    pl, lanes, waits = pool_waits(pts, x, inst, redundancy)
    buckets = bucket_latency(pts, x, waits, lanes, instances=inst, redundancy=redundancy, pool_rows=pl)
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
        if not involved and not _finite_ms(br["ttft_predicted_ms"], br["tpot_predicted_ms"]):
            # overloaded at the load that arrives (a unified pool's lane share >= 1: TTFT and TPOT
            # infinite) with no queue wait to budget: the per-bucket caps admitted a mix its pool cannot
            # carry; tighten every pool of the bucket by the largest step
            involved, total = [str(p) for p in br["pools"] if p not in fixed], math.inf
        if len(involved) > 1 and math.isfinite(total):
            # the bucket split over pools of one phase: the pools without whose share it would meet are the
            # ones it must leave or that must wait less, not every pool on its path
            culprits = _culprits(pts, x, waits, lanes, inst, redundancy, pl, involved, br)
            if culprits and len(culprits) < len(involved):
                involved, total = culprits, sum(float(waits[p]) for p in culprits)
        if room <= 0 or not involved or not math.isfinite(total):
            # no queueing room at all, or an overloaded pool: tighten every involved pool by the largest step
            for p in involved:
                budget[p] = min(budget.get(p, math.inf), 0.0)
            continue
        for p in involved:
            budget[p] = min(budget.get(p, math.inf), room * float(waits[p]) / total)
    factors: dict[str, float] = {}
    replay = replay_curves(pts, x > 0) if budget else None
    slots = replay_slots(pts, x) if budget else {}
    for p, b_ms in budget.items():
        row = pl[p]
        servers = int(row["servers"])
        # the queue's own utilisation λ·s/c: the plan's busy / n except for decode pools, whose slot
        # wait holds a slot for the mean output (pool_latency.decode_hold_s); the cap scales both alike
        util = (float(row["arrival_rate_per_s"]) * float(row["mean_service_s"]) / servers if servers >= 1
                else float(row["utilization_peak"]))
        if b_ms <= 0 or servers < 1 or not math.isfinite(util):
            factors[p] = max_step
            continue
        if p in lanes:
            on_p = (pts["pool"].astype(str).to_numpy() == p) & (x > 0)
            lane_s, _own = lane_columns(pts)  # per point: lane service time (s)
            scale = _max_load_scale(row, b_ms, pts["rate_peak_per_s"].to_numpy(float)[on_p] * x[on_p], lane_s[on_p],
                                    max(int(row["instances"]) - redundancy, 0), (replay or {}).get(p))
            f = 1.0 / scale if scale > 0 else max_step
        else:
            rho_star = max_utilization(servers, float(row["mean_service_s"]), float(row["quantile"]), b_ms / 1e3,
                                       service_cv=float(row["service_cv"]), arrival_cv=float(row["arrival_cv"]))
            for curve, rate in (replay or {}).get(p, []) if row["role"] == "prefill" else []:  # within its bursts' wait (pool_latency)
                rho_star = min(rho_star, replay_cap(curve, rate, float(row["quantile"]), b_ms / 1e3))
            for table, rate, _arr in slots.get(p, []) if row["role"] == "decode" else []:  # a decode pool's slots under them
                rho_star = min(rho_star, max_slot_occupancy(table, float(row["mean_service_s"]), rate, float(row["quantile"]), b_ms / 1e3))
            f = util / rho_star if rho_star > 0 else max_step
        factors[p] = float(min(max_step, max(min_step, f)))
    return factors, buckets


def _culprits(pts: pd.DataFrame, x: np.ndarray, waits: Mapping[str, float], lanes: Mapping[str, float],
              inst: Mapping[str, int], redundancy: int, pool_rows: Mapping[str, Mapping[Any, Any]], involved: list[str],
              bucket: Mapping[str, Any]) -> list[str]:
    """The pools of ``involved`` without whose share of ``bucket`` it would meet its targets: the bucket's shares on
    the pool set to zero, :func:`bucket_latency` re-run (the pools' waits and loads as they are). Only a pool
    sharing its phase with another pool on the bucket's path is a candidate (the bucket still has a route)."""
    on_bucket = (pts["service"].astype(str).to_numpy() == str(bucket["service"])) & (pts["bucket"].astype(str).to_numpy() == str(bucket["bucket"]))
    pool_of = pts["pool"].astype(str).to_numpy()
    role = {p: str(pool_rows[p]["role"]) for p in map(str, bucket["pools"]) if p in pool_rows}
    out = []
    for p in involved:
        if sum(1 for q, r in role.items() if r == role.get(p) and q != p) < 1:
            continue
        b = bucket_latency(pts, np.where(on_bucket & (pool_of == p), 0.0, x), waits, lanes, instances=inst,
                           redundancy=redundancy, pool_rows=pool_rows)
        hit = b[(b["service"].astype(str) == str(bucket["service"])) & (b["bucket"].astype(str) == str(bucket["bucket"]))]
        if len(hit) and bool(hit["met"].all()):
            out.append(p)
    return out


def _max_load_scale(row: Mapping[str, Any], budget_ms: float, lane_rates_per_s: np.ndarray, lane_service_s: np.ndarray,
                    live_instances: int, replay: list[tuple[np.ndarray, float]] | None = None, tolerance: float = 1e-4) -> float:
    """Largest factor ``s ≤ 1`` on a unified pool's peak arrivals (same size) with slot wait + lane
    wait ≤ ``budget_ms`` (:func:`pool_latency` row; the lane's routed rates and service times of
    its points); bisection, both waits grow with the load. With ``replay`` (the pool's services' replayed-burst
    curves, :func:`planner.pool_latency.replay_curves`) the slot wait is the larger of it and the wait the log's
    bursts cause at the lanes' utilisation, as :func:`pool_latency` takes it (the curve read at the services' own
    rates: a cap spreads the same bursts over more lanes)."""
    from planner.pool_latency import replay_wait_at, slot_wait_ms

    q = float(row["quantile"])
    servers = int(row["servers"])
    ca = float(row["arrival_cv"])

    def total_ms(f: float) -> float:
        lane, info = lane_wait_quantile_ms(q, f * lane_rates_per_s, lane_service_s, live_instances, ca)
        slot = slot_wait_ms(row, f)
        u_lane = float(info.get("lane_utilization", math.nan))
        if replay and not math.isnan(u_lane):
            slot = max(slot, replay_wait_at(replay, u_lane, q, lanes=True)[0])
        return slot + lane

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
"""Highest utilisation cap a relaxed prefill or unified pool gets (:func:`relax_factors`; :mod:`planner.optimize.check`)."""


def relax_ceiling(max_utilization: float | None) -> float:
    """The highest cap relaxing may give a point: :data:`RELAX_CEILING`, and never above the instance's
    ``options.max_utilization`` — the user's cap is a hard upper bound on every pool's cap, relaxing only
    loosens the queueing-derived part up to it (enterprise-chat at ``max_utilization = 0.3`` had its prefill
    pool relaxed to a cap of 0.743 and running at 0.471)."""
    return RELAX_CEILING if max_utilization is None else min(RELAX_CEILING, float(max_utilization))


def relax_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, below: float = 0.8,
                  ceiling: float = RELAX_CEILING) -> dict[str, float]:
    """Per prefill or unified pool whose caps are tighter than its actual size needs: a factor ``f < 1``
    dividing its caps (raising them), from the wait the pool may add at its current size.

    The caps ``ρ_i`` come from a nominal pool of one bucket, ``n0 = ⌈λ_peak τ⌉`` servers
    (:func:`planner.optimize.prepare.utilization_caps`): at low rates ``n0 = 1`` and a bursty log
    (within-window CV 4.7 on the Azure code trace) gives caps of a few per cent, while the plan's
    pool, sized by those caps, has tens of servers whose real wait is far below the budget — and
    more traffic (a larger ``n0``, higher caps) then costs less (issue 13, *not monotone*). For a
    prefill pool ``p`` whose buckets all meet their TTFT: the budget is its current wait plus the
    smallest slack ``target − predicted`` of those buckets; ``ρ*_p`` the largest utilisation
    meeting it at the pool's current servers (:func:`planner.queueing.max_utilization`, at most
    ``ceiling``; callers pass :func:`relax_ceiling`, which keeps it within ``options.max_utilization``);
    ``f_p = u_p / ρ*_p`` when below ``below`` (else the pool is left alone). That budget charges every
    bucket's slack to every pool on its path at once; when it leaves the pool alone, ``ρ*_p`` is instead the
    largest utilisation at which every bucket through ``p`` still meets with the other pools' waits as they are
    (:func:`_pool_meets_up_to`: the TTFT of a bucket split over two prefill pools is their length mix's quantile,
    which the smaller, slower pool can hold near the target while the larger one has room). A unified pool whose
    buckets all meet: ``f = n*/n``, ``n*`` the fewest instances at which they still do
    (:func:`_unified_instances_needed`), whenever ``n* < n`` (the count is exact, so no ``below`` margin).
    long-document-nvidia's disaggregated plan at traffic ×1.2: 12 + 1 prefill instances (b200 tp1 at 46 %, tp2
    at 54 % with an 18 s wait) were kept at $53,085 against $40,320 at ×1.3; relaxed, 10 tp1 at $40,286.
    Shrinking the pool lowers ``ρ*`` again: the loop re-checks and tightens
    (:func:`planner.optimize.tighten.solve_verified` keeps the relaxed plan only when it passes
    and costs less). Memoised on its inputs as :func:`tighten_factors` is."""
    key = _memo_key("relax", prep, plan, int(redundancy), float(below), float(ceiling))
    hit = _memo_get(key)
    if hit is None:
        hit = _relax_factors(prep, plan, redundancy, below=below, ceiling=ceiling)
        _memo_put(key, hit)
    return dict(hit)


def _relax_factors(prep: Prepared, plan: ArchitecturePlan, redundancy: int, *, below: float, ceiling: float) -> dict[str, float]:
    from planner.queueing import max_utilization

    pts, x = fold_inline_encode(prep.points, plan_shares(plan, prep.points))  # as _tighten_factors
    inst = {p.name: p.instances for p in plan.pools}
    # the analytic check's own pool waits (:func:`_tighten_factors`): a unified pool's lane wait is in ``waits`` and
    # named in ``lanes``, so a bucket's slack and met are those the check sees (a prefill pool's wait is its slot wait)
    pl, lanes, waits = pool_waits(pts, x, inst, redundancy)
    buckets = bucket_latency(pts, x, waits, lanes, instances=inst, redundancy=redundancy, pool_rows=pl)
    given = pts["utilization_cap"].to_numpy(float) if "utilization_cap" in pts.columns else np.full(len(pts), np.nan)
    fixed = set(pts.loc[~np.isnan(given), "pool"].astype(str))
    slack: dict[str, float] = {}
    for br in buckets.to_dict("records"):
        room = float(br["ttft_target_ms"]) - float(br["ttft_predicted_ms"])
        for p in br["pools"]:
            slack[str(p)] = min(slack.get(str(p), math.inf), room if br["met"] else -math.inf)
    out: dict[str, float] = {}
    for p, row in pl.items():
        if p in fixed or not (slack.get(p, -math.inf) > 0) or not math.isfinite(slack[p]):
            continue
        if row["role"] == "unified":
            need = _unified_instances_needed(pts, x, inst, redundancy, p)
            if need is not None:  # any instance fewer: the count is exact, the relaxed plan is kept only when it passes and costs less
                out[p] = need / inst[p]
            continue
        if row["role"] != "prefill":
            continue
        servers, util = int(row["servers"]), float(row["utilization_peak"])
        if servers < 1 or not (0 < util < 1) or float(row["mean_service_s"]) <= 0:
            continue
        budget_s = (waits[p] + slack[p]) / 1e3
        rho_star = max_utilization(servers, float(row["mean_service_s"]), float(row["quantile"]), budget_s,
                                   service_cv=float(row["service_cv"]), arrival_cv=float(row["arrival_cv"]), ceiling=ceiling)
        if util / max(rho_star, 1e-12) >= below:  # the bucket's slack as a whole: what the pool itself may add
            rho_star = max(rho_star, _pool_meets_up_to(pts, x, inst, redundancy, pl, waits, lanes, buckets, p, util, ceiling))
        if rho_star > 0 and util / rho_star < below:
            out[p] = util / rho_star
    return out


def _unified_instances_needed(pts: pd.DataFrame, x: np.ndarray, inst: Mapping[str, int], redundancy: int,
                              pool: str) -> int | None:
    """The fewest instances of unified pool ``pool`` at which every bucket routed through it still meets its
    targets, the routing and the other pools as they are (:func:`pool_latency` and :func:`bucket_latency` re-run at
    each count: the pool's slot queue, its chunked-prefill lane and its iteration at the load that arrives all
    follow the count; bisection on the integer count, ``redundancy + 1`` at least); None when the plan's own
    count is the least. A unified pool's caps come from the nominal pool of one latency group
    (:func:`planner.optimize.prepare.utilization_caps`); on bursty arrivals they are far below what the plan's
    pool, which merges every bucket, needs — the unified twin of the prefill relaxation above."""
    have = int(inst[pool])
    if have - redundancy <= 1:  # meets at ``have`` (every bucket through the pool meets); ``redundancy`` never does
        return None
    hi = _fewest_meeting(_meets_at(pts, x, inst, redundancy, pool), redundancy, have)
    return hi if hi < have else None


def unified_instances_meeting(pts: pd.DataFrame, x: np.ndarray, inst: Mapping[str, int], redundancy: int, pool: str,
                              most: int) -> int | None:
    """The fewest instances, at most ``most``, of unified pool ``pool`` at which every bucket routed through it (routing
    ``x``) meets its targets in the analytic check, the other pools of ``inst`` as they are (as
    :func:`_unified_instances_needed`); None when even ``most`` misses. :func:`planner.optimize.tighten` step 7 asks it
    of a routing that moves every shared pool's traffic onto one."""
    meets = _meets_at(pts, x, inst, redundancy, pool)
    if int(most) <= redundancy or not meets(int(most)):
        return None
    return _fewest_meeting(meets, redundancy, int(most))


def _meets_at(pts: pd.DataFrame, x: np.ndarray, inst: Mapping[str, int], redundancy: int, pool: str) -> Callable[[int], bool]:
    """Whether every bucket routed through unified pool ``pool`` meets its targets with ``n`` instances in it, the
    routing ``x`` and the other pools of ``inst`` as they are (:func:`pool_waits` and :func:`bucket_latency` re-run at
    the count, as the analytic check, :func:`_tighten_factors`)."""
    def meets(n: int) -> bool:
        at = {**inst, pool: n}
        rows, lanes, waits = pool_waits(pts, x, at, redundancy)
        b = bucket_latency(pts, x, waits, lanes, instances=at, redundancy=redundancy, pool_rows=rows)
        through = [pool in [str(q) for q in ps] for ps in b["pools"]]
        return bool(any(through)) and bool(all(bool(m) for m, t in zip(b["met"], through, strict=True) if t))
    return meets


def _fewest_meeting(meets: Callable[[int], bool], lo: int, hi: int) -> int:
    """The fewest count in ``(lo, hi]`` that ``meets``, by bisection: ``meets(hi)`` holds, ``meets(lo)`` does not, and
    more instances never wait longer."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return hi


def _pool_meets_up_to(pts: pd.DataFrame, x: np.ndarray, inst: Mapping[str, int], redundancy: int,
                      rows: Mapping[str, Mapping[Any, Any]], waits: Mapping[str, float], lanes: Mapping[str, float],
                      buckets: pd.DataFrame, pool: str, util: float, ceiling: float, steps: int = 12) -> float:
    """The largest utilisation ``u`` in ``[util, ceiling]`` of prefill pool ``pool`` at its current servers at which
    every bucket routed through it still meets its targets, the other pools' waits as they are: the pool's arrivals
    scaled to ``u`` (its wait quantile and its wait tail in the length mix follow), :func:`bucket_latency` re-run
    (bisection, ``steps`` halvings; ``util`` when even a step above it misses). A bucket's slack is charged to
    the pool that can use it, not to every pool on its path at once. ``buckets``: :func:`bucket_latency` of the plan
    as it stands (the caller's), whose rows say which buckets wait in ``pool``; ``waits`` and ``lanes`` those of
    :func:`planner.pool_latency.pool_waits`."""
    from planner.queueing import wait_quantile_s

    row = rows[pool]
    servers, service_s = int(row["servers"]), float(row["mean_service_s"])
    through = {i for i, ps in enumerate(buckets["pools"]) if pool in [str(q) for q in ps]}

    def meets(u: float) -> bool:
        lam = u * servers / service_s
        w = wait_quantile_s(float(row["quantile"]), lam, servers, service_s, float(row["service_cv"]), float(row["arrival_cv"])) * 1e3
        at = {**rows, pool: {**row, "arrival_rate_per_s": lam, "utilization_peak": u, "wait_ms": w}}
        b = bucket_latency(pts, x, {**waits, pool: w}, lanes, instances=inst, redundancy=redundancy, pool_rows=at)
        return bool(all(bool(m) for i, m in enumerate(b["met"]) if i in through))

    lo, hi = util, ceiling
    if hi <= lo or meets(hi):
        return max(lo, hi) if hi > lo else lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo
