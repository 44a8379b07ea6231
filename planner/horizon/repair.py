"""Every level of a solved plan over time checked analytically, and pools topped up where a level misses.

The horizon MIP (:mod:`planner.horizon.model`) sizes pools with per-point utilisation caps, each computed for a
pool that carries the point's **whole** rate at the level (on a coarse grid, on the safe side). That holds when
a bucket is routed to one pool; when the MIP splits a bucket between pools (e.g. 85 % of the long prompts to an
H100 prefill pool and 15 % to a 23-instance H200 one) the smaller pool has far fewer servers than its cap
assumed, pools worse, and its wait quantile can exceed the target at the cap (fleet-horizon's disaggregated
plan: 39 of 576 levels missed TTFT analytically, h22 of month 23 at 2,617 ms against 2,000 ms, month 19's h10
at 21 s). ``planner solve`` catches such misses with its verify-and-tighten loop
(:mod:`planner.optimize.tighten`); over a horizon a re-solve per miss is too slow, so each level is repaired
on its own:

1. per level ``k`` the plan's routing ``x[k]`` and instances ``n[k]`` are priced by the one analytic model every
   view uses (:func:`planner.pool_latency.pool_latency` and :func:`planner.pool_latency.bucket_latency`, as
   :func:`planner.optimize.extract.build_pools_routing_latency` does), at the level's exact peak rates and the
   slot's inter-arrival CV (:func:`level_points`);
2. while a bucket misses its TTFT target, the pool on its path with the largest wait gets more instances
   (``+max(1, ⌈n/50⌉)`` a step; more instances only shorten a wait); a per-token miss, or a TTFT miss with no
   wait left to cut, is not fixable by instances and is left to the report;
3. the repaired counts and the routing are fixed and the purchases, reservations and rentals re-solved
   (:func:`planner.horizon.solve.solve_architecture`), so the schedule pays for the added instances.

Cost: ~17 ms per level unloaded, the levels split over the usable cores (fleet-horizon's 576 levels: ~12 s per plan on
the 2-core VM under load), plus one more HiGHS run when something was added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from planner.horizon.model import HorizonBuilt

STEP_SHARE = 0.02
"""Instances added to a missing pool per step: ``max(1, ⌈STEP_SHARE · n⌉)``."""
MAX_STEPS = 200
"""Most top-up steps per level (a level still missing after them is reported, not repaired further)."""


@dataclass(frozen=True)
class Repair:
    n: np.ndarray
    """(K, P) instances after the top-up."""
    levels_repaired: int
    instances_added: int
    unfixed: list[tuple[int, str]]
    """(level, why) of the levels still missing after the top-up."""
    checked: int
    repaired_and_unfixed: int = 0
    """Levels topped up (some bucket fixed) that still miss for another bucket."""


def level_points(hb: HorizonBuilt, k: int) -> pd.DataFrame:
    """The prepared points at level ``k``: peak and mean rates times the level's multipliers of their demand row,
    inter-arrival CV the slot's (the busiest window's; a service given by hand keeps its own)."""
    pts = hb.prep.points.copy()
    d = pts["d"].to_numpy(int)
    pts["rate_peak_per_s"] = pts["rate_peak_per_s"].to_numpy(float) * hb.levels.m_peak_d[k, d]
    if "rate_mean_per_s" in pts.columns:
        pts["rate_mean_per_s"] = pts["rate_mean_per_s"].to_numpy(float) * hb.levels.m_mean_d[k, d]
    S = len(hb.levels.slot_names)
    name = hb.levels.slot_names[k % S]
    inputs = hb.inputs
    for svc in pts["service"].astype(str).unique():
        src = inputs.service_slots.get(svc) if inputs.service_slots is not None else inputs.slots
        if src is None:
            continue
        cv = float(src.set_index(src["slot"].astype(str))["interarrival_cv"].astype(float)[name])
        if math.isfinite(cv):
            pts.loc[pts["service"].astype(str) == svc, "interarrival_cv"] = cv
    return pts


def level_latency(pts: pd.DataFrame, pool_names: np.ndarray, x: np.ndarray, n: np.ndarray,
                  redundancy: int) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per (service, bucket) the analytic TTFT / per-token quantiles of one level (module docstring, step 1), and
    each pool's wait (slot + lane, ms)."""
    from planner.pool_latency import bucket_latency, pool_latency

    live = {str(pool_names[p]): int(n[p]) for p in range(len(pool_names)) if n[p] > 0}
    rows = {str(r["pool"]): r for r in pool_latency(pts, x, live, redundancy).to_dict("records")}

    def lane(r: Any) -> float:
        v = r.get("lane_wait_ms", math.nan)
        return math.nan if v is None else float(v)

    waits = {p: float(r["wait_ms"]) + (0.0 if math.isnan(lane(r)) else lane(r)) for p, r in rows.items()}
    lanes = {p: lane(r) for p, r in rows.items() if not math.isnan(lane(r))}
    return bucket_latency(pts, x, waits, lanes, instances=live, redundancy=redundancy, pool_rows=rows), waits


def repair_levels(hb: HorizonBuilt, v: np.ndarray) -> Repair:
    """Check every level of the solution ``v`` and top up the pools of the levels that miss (module docstring). The
    levels are independent: split over the usable cores (:func:`planner.forked.fork_map`)."""
    from planner.forked import fork_map, usable_cores

    K = hb.levels.m_peak.size
    x_all = np.asarray(v[hb.block("x")], dtype=float).copy()
    x_all[x_all < 1e-6] = 0.0
    n_all = np.rint(v[hb.block("n")]).astype(int)
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    red = int(hb.inputs.redundancy)
    todo = [k for k in range(K) if (x_all[k] > 0).any()]
    parts = max(1, min(usable_cores(), len(todo)))
    done = fork_map(lambda ks: [_repair_level(hb, k, x_all[k], n_all[k], names, red) for k in ks],
                    [todo[i::parts] for i in range(parts)])
    n_new = n_all.copy()
    repaired = added = both = 0
    unfixed: list[tuple[int, str]] = []
    for k, n, why in sorted((r for part in done for r in part), key=lambda r: r[0]):
        if why:
            unfixed.append((k, why))
        if (n != n_all[k]).any():
            repaired += 1
            both += bool(why)
            added += int((n - n_all[k]).sum())
            n_new[k] = n
    return Repair(n=n_new, levels_repaired=repaired, instances_added=added, unfixed=unfixed, checked=K, repaired_and_unfixed=both)


def _repair_level(hb: HorizonBuilt, k: int, x: np.ndarray, n0: np.ndarray, names: np.ndarray,
                  red: int) -> tuple[int, np.ndarray, str]:
    """Level ``k``: the instances after the top-up (module docstring, step 2) and why it still misses ("" if it meets)."""
    pos = {p: j for j, p in enumerate(names)}
    routed = x > 0  # the routed points alone (the unrouted carry nothing)
    pts = level_points(hb, k).loc[routed].reset_index(drop=True)
    x_k = x[routed]
    n = n0.copy()
    why = f"still missing after {MAX_STEPS} top-up steps"
    first: set[tuple[str, str]] | None = None
    missing: set[tuple[str, str]] = set()
    for _ in range(MAX_STEPS):
        bl, waits = level_latency(pts, names, x_k, n, red)
        miss = bl[~bl["met"].astype(bool)]
        if miss.empty:
            return k, n, ""
        missing = {(str(s), str(b)) for s, b in zip(miss["service"], miss["bucket"], strict=True)}
        first = missing if first is None else first
        grow: set[int] = set()
        why = "a per-token target missed (instances do not shorten a step)"
        for r in miss.to_dict("records"):
            rec: Any = r
            if float(rec["ttft_predicted_ms"]) <= float(rec["ttft_target_ms"]) * (1 + 1e-6):
                continue
            on_path = [str(p) for p in rec["pools"] if waits.get(str(p), 0.0) > 0]
            if not on_path:
                why = f"{rec['service']}/{rec['bucket']}: TTFT {float(rec['ttft_predicted_ms']):,.0f} ms with no wait to cut"
                continue
            grow.add(pos[max(on_path, key=lambda p: waits[p])])
        if not grow:
            break
        why = f"still missing after {MAX_STEPS} top-up steps"
        for p in grow:
            n[p] += max(1, math.ceil(STEP_SHARE * n[p]))
    # still missing: the instances added are kept only if they made some bucket meet (none is paid for nothing)
    return k, (n if first is not None and first - missing else n0.copy()), why
