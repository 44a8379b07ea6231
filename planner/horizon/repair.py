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

Cost: the level's inputs are read once per call (:class:`_LevelModel`) and each level priced in arrays, the same
computation as :func:`level_latency` bit for bit (section comment *The level check in arrays*): fleet-horizon's levels
~1.8 ms CPU each (disaggregated) and ~6.5 ms (unified, most of it the long prompts' TTFT quantile at load) on the
2-core VM under load, against ~26 ms through :func:`level_latency`'s DataFrames; the levels split over the usable
cores; plus one more HiGHS run when something was added.
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
    from planner.horizon.verify import slot_cvs

    pts["interarrival_cv"] = slot_cvs(hb, k, pts["service"].astype(str).to_numpy(), pts["interarrival_cv"].to_numpy(float))
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
    levels are independent: dealt over the usable cores (:func:`planner.forked.fork_each`)."""
    from planner.forked import fork_each

    K = hb.levels.m_peak.size
    x_all = np.asarray(v[hb.block("x")], dtype=float).copy()
    x_all[x_all < 1e-6] = 0.0
    n_all = np.rint(v[hb.block("n")]).astype(int)
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    red = int(hb.inputs.redundancy)
    todo = [k for k in range(K) if (x_all[k] > 0).any()]
    model = _LevelModel.of(hb)
    done = fork_each(lambda k: _repair_level(hb, k, x_all[k], n_all[k], names, red, model), todo)
    n_new = n_all.copy()
    repaired = added = both = 0
    unfixed: list[tuple[int, str]] = []
    for k, n, why in sorted(done, key=lambda r: r[0]):
        if why:
            unfixed.append((k, why))
        if (n != n_all[k]).any():
            repaired += 1
            both += bool(why)
            added += int((n - n_all[k]).sum())
            n_new[k] = n
    return Repair(n=n_new, levels_repaired=repaired, instances_added=added, unfixed=unfixed, checked=K, repaired_and_unfixed=both)


def _repair_level(hb: HorizonBuilt, k: int, x: np.ndarray, n0: np.ndarray, names: np.ndarray,
                  red: int, model: _LevelModel | None = None) -> tuple[int, np.ndarray, str]:
    """Level ``k``: the instances after the top-up (module docstring, step 2) and why it still misses ("" if it meets).
    With ``model`` (:class:`_LevelModel`) the level is priced by its array form of the same computation."""
    pos = {p: j for j, p in enumerate(names)}
    routed = x > 0  # the routed points alone (the unrouted carry nothing)
    x_k = x[routed]
    level: _Level | None = None
    pts = pd.DataFrame()
    if model is not None:
        level = model.level(k, np.flatnonzero(routed), x_k)
    else:
        pts = level_points(hb, k).loc[routed].reset_index(drop=True)
    n = n0.copy()
    why = f"still missing after {MAX_STEPS} top-up steps"
    first: set[tuple[str, str]] | None = None
    missing: set[tuple[str, str]] = set()
    for _ in range(MAX_STEPS):
        miss_recs: list[Any]
        if level is not None:
            recs, waits = level.latency(names, n, red)
            miss_recs = [r for r in recs if not r["met"]]
        else:
            bl, waits = level_latency(pts, names, x_k, n, red)
            miss = bl[~bl["met"].astype(bool)]
            miss_recs = miss.to_dict("records")
        if not miss_recs:
            return k, n, ""
        missing = {(str(r["service"]), str(r["bucket"])) for r in miss_recs}
        first = missing if first is None else first
        grow: set[int] = set()
        why = "a per-token target missed (instances do not shorten a step)"
        for r in miss_recs:
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


# ---------------------------------------------------------------------------------------------
# The level check in arrays
# ---------------------------------------------------------------------------------------------
#
# :func:`level_latency` of a level's routed points, 4–10 rows on fleet-horizon, cost ~17 ms, nearly all of it pandas
# (copies, groupbys, record dicts) around ~1–4 ms of queueing maths. :class:`_LevelModel` reads every per-point
# input once per :func:`repair_levels` call (what does not depend on the level: roles, pools, service times, the
# decode holding, the unified points' lane units, outputs and fixed overhead, the parsed TTFT mixes, the targets; and
# per slot the inter-arrival CV) and :meth:`_Level.latency` runs the same computation as :func:`level_latency` →
# :func:`planner.pool_latency.pool_latency` + :func:`planner.pool_latency.bucket_latency` (with
# :func:`~planner.pool_latency.unified_at_load` and :func:`~planner.pool_latency._mixture_ttft`) on those arrays: the
# same element-wise expressions in the same order, the same queueing functions on the same arguments, so the same
# numbers bit for bit. The one thing pandas adds to the numbers is how a groupby sums (``_group_sums``: pandas 3.1
# takes ``np.add.reduceat`` when the rows are sorted by group and hold no NaN, else its Kahan loop); that is checked
# against pandas itself once per process (``_pandas_sums_match``) and, should it differ (another pandas), or should
# the points carry what the array form does not model (encode roles), the check falls back to
# :func:`level_latency` itself.

_ROLES = ("prefill", "decode", "unified")
_LANE_NEED = ("prefill_tokens", "prefill_chunk_tokens", "decode_only_step_ms", "step_ms", "mean_step_ms", "lane_wait_ms",
              "lane_service_ms")


def _kahan(vals: np.ndarray) -> float:
    """pandas' cython ``group_sum`` of one group: Kahan, NaN skipped, a non-finite compensation reset."""
    s = c = 0.0
    for v in vals.tolist():
        if v != v:
            continue
        y = v - c
        t = s + y
        c = t - s - y
        if not math.isfinite(c):
            c = 0.0
        s = t
    return s


def _group_sums(vals: np.ndarray, ids: np.ndarray, groups: int) -> np.ndarray:
    """``Series(vals).groupby(keys).sum()`` as pandas computes it, ``ids`` the rows' group numbers in the sorted keys:
    ``np.add.reduceat`` over the runs when ``ids`` never decrease and ``vals`` holds no NaN, else Kahan per group."""
    if ids.size and bool(np.all(ids[1:] >= ids[:-1])) and not np.isnan(vals).any():
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        out = np.zeros(groups)
        out[ids[starts]] = np.add.reduceat(vals, starts)
        return out
    return np.array([_kahan(vals[ids == g]) for g in range(groups)], dtype=float)


_SUMS_OK: list[bool] = []


def _pandas_sums_match() -> bool:
    """Whether :func:`_group_sums` is pandas' groupby sum here (sorted and unsorted groups, with and without NaN,
    values whose sum depends on the order and the compensation), as ``pool_latency`` and ``_thinned_cv2`` take it."""
    if not _SUMS_OK:
        rng = np.random.default_rng(20261206)
        ok = True
        for i in range(64):
            m = 3 + i % 7
            vals = rng.standard_normal(m) * 10.0 ** rng.integers(-8, 8, m)
            if i % 4 == 3:
                vals[i % m] = math.nan
            keys = rng.integers(0, 3, m)
            if i % 2:
                keys = np.sort(keys)
            names = np.array([f"p{j}" for j in keys])
            uniq = sorted(set(names.tolist()))
            ids = np.array([uniq.index(str(p)) for p in names])
            frame = pd.DataFrame({"pool": names, "v": vals})
            agg = frame.groupby("pool", sort=True).agg(v=("v", "sum"))["v"].to_numpy(float)
            tr = pd.Series(vals).groupby([names, np.full(m, "s")]).transform("sum").to_numpy(float)
            mine = _group_sums(vals, ids, len(uniq))
            ok &= bool(np.array_equal(agg, mine, equal_nan=True) and np.array_equal(tr, mine[ids], equal_nan=True))
        _SUMS_OK.append(ok)
    return _SUMS_OK[0]


def _sorted_ids(keys: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Group numbers of ``keys`` in their sorted distinct values (a groupby with ``sort=True``), and those values."""
    uniq = sorted(set(keys))
    at = {u: j for j, u in enumerate(uniq)}
    return np.array([at[u] for u in keys], dtype=np.intp), uniq


class _LevelModel:
    """The points' per-point inputs of :func:`level_latency`, read once (section comment above)."""

    def __init__(self, hb: HorizonBuilt) -> None:
        from planner.pool_latency import (
            lane_columns,
            lane_mixes,
            ttft_prompt_ratio,
            unified_ttft_overhead_ms,
        )
        from planner.schema.capacity import LATENCY_GROUP_COLUMN, TTFT_MIX_COLUMN, quantile_level
        from planner.ttft_mixture import parse_mix

        self.hb = hb
        pts = hb.prep.points
        self.pts = pts
        n = len(pts)
        cols = set(pts.columns)
        self.d = pts["d"].to_numpy(int)
        self.rate = pts["rate_peak_per_s"].to_numpy(float)
        self.cv = pts["interarrival_cv"].to_numpy(float)
        self.service = pts["service"].astype(str).to_numpy()
        self.bucket_raw = pts["bucket"].to_numpy()
        self.service_raw = pts["service"].to_numpy()
        self.bucket = pts["bucket"].astype(str).to_numpy()
        self.pool = pts["pool"].astype(str).to_numpy()
        self.pool_np = pts["pool"].to_numpy(str)
        self.role = pts["role"].to_numpy(str)
        self.tau = pts["instance_seconds_per_request"].to_numpy(float)
        self.max_batch = pts["max_batch"].to_numpy(float)
        self.stcv = pts["service_time_cv"].to_numpy(float)
        self.ttft_q = pts["ttft_quantile"].to_numpy(float)
        self.lane_s, self.own = lane_columns(pts)
        self.measured = ~np.isnan(pts["utilization_cap"].to_numpy(float)) if "utilization_cap" in cols else np.zeros(n, dtype=bool)
        # decode_hold_s, element-wise
        self.hold: np.ndarray | None = None
        if "output_tokens_mean" in cols and "tpot_ms" in cols:
            self.hold = (pd.to_numeric(pts["output_tokens_mean"], errors="coerce").to_numpy(float)
                         * pd.to_numeric(pts["tpot_ms"], errors="coerce").to_numpy(float) / 1e3)
        # bucket_latency's columns
        self.ttft_ms = pts["ttft_ms"].to_numpy(float)
        self.tpot_ms = pts["tpot_ms"].to_numpy(float)
        itl = pts["itl_ms"].to_numpy(float) if "itl_ms" in cols else np.full(n, np.nan)
        self.itl_ms = np.where(np.isnan(itl), self.tpot_ms, itl)
        self.metric = pts["token_metric"].astype(str).to_numpy() if "token_metric" in cols else None
        self.ttft_t = pts["ttft_target_ms"].to_numpy(float)
        self.tpot_t = pd.to_numeric(pts["tpot_target_ms"], errors="coerce").fillna(math.inf).to_numpy(float)
        self.itl_t = (pd.to_numeric(pts["itl_target_ms"], errors="coerce").fillna(math.inf).to_numpy(float)
                      if "itl_target_ms" in cols else self.tpot_t)
        # unified_at_load's (_lane_points) per-point inputs
        self.lane_cols = all(c in cols for c in _LANE_NEED)
        if self.lane_cols:
            vals = pts[list(_LANE_NEED)].to_numpy(float)
            self.lane_ok = (self.role == "unified") & np.all(np.isfinite(vals), axis=1) & (vals[:, 1] >= 1)
            if "utilization_cap" in cols:
                self.lane_ok &= np.isnan(pts["utilization_cap"].to_numpy(float))
            self.units = vals[:, 0] / vals[:, 1]
            self.units_ttft_ratio = ttft_prompt_ratio(pts)
            self.mixes = lane_mixes(pts)
            self.new_tokens = vals[:, 0]
            self.out_mean = (pd.to_numeric(pts["output_tokens_mean"], errors="coerce").to_numpy(float)
                             if "output_tokens_mean" in cols else None)
            self.t_dec_ms, self.t_chunk_ms = vals[:, 2], vals[:, 3]
            self.overhead_s = unified_ttft_overhead_ms(pts) / 1e3
            with np.errstate(divide="ignore", invalid="ignore"):
                self.outputs = self.tau * self.max_batch / (vals[:, 4] / 1e3)
            level_cols = {m: pts[f"{m}_quantile"].to_numpy() for m in ("tpot", "itl") if f"{m}_quantile" in cols}
            metric_of = pts["token_metric"].astype(str).to_numpy() if "token_metric" in cols else None
            self.token_level: list[float | None] = []
            for i in range(n):
                metric = str(metric_of[i]) if metric_of is not None else "tpot"
                self.token_level.append(quantile_level(level_cols[metric][i] if metric in level_cols else 0.99)
                                        if self.lane_ok[i] else None)
        # _mixture_ttft's
        self.mix: list[tuple[np.ndarray, np.ndarray] | None] | None = None
        if TTFT_MIX_COLUMN in cols:
            self.mix = [parse_mix(r) for r in pts[TTFT_MIX_COLUMN].to_numpy(object)]
            self.group = (pts[LATENCY_GROUP_COLUMN].astype(str).to_numpy() if LATENCY_GROUP_COLUMN in cols
                          else pts["bucket"].astype(str).to_numpy())
        self._cv_by_slot: dict[str, np.ndarray] = {}

    @staticmethod
    def of(hb: HorizonBuilt) -> _LevelModel | None:
        """The model of ``hb``'s points, or None where the array form does not apply (roles other than prefill, decode
        and unified; a column :func:`level_latency` needs missing; pandas summing otherwise than modelled): the level
        check then runs :func:`level_latency` itself."""
        pts = hb.prep.points
        need = ("d", "service", "bucket", "role", "pool", "rate_peak_per_s", "interarrival_cv", "instance_seconds_per_request",
                "max_batch", "service_time_cv", "ttft_quantile", "ttft_ms", "tpot_ms", "ttft_target_ms", "tpot_target_ms")
        if any(c not in pts.columns for c in need) or not len(pts):
            return None
        if not np.isin(pts["role"].to_numpy(str), _ROLES).all() or not _pandas_sums_match():
            return None
        return _LevelModel(hb)

    def slot_cv(self, k: int) -> np.ndarray:
        """Per point: the inter-arrival CV at level ``k`` (:func:`level_points`: the slot's, per service)."""
        from planner.horizon.verify import slot_cvs

        name = self.hb.levels.slot_names[k % len(self.hb.levels.slot_names)]
        got = self._cv_by_slot.get(name)
        if got is None:
            got = self._cv_by_slot[name] = slot_cvs(self.hb, k, self.service, self.cv)
        return got

    def level(self, k: int, idx: np.ndarray, x: np.ndarray) -> _Level:
        """Level ``k``'s routed points ``idx`` (ascending) with their shares ``x`` (all > 0)."""
        rate = self.rate[idx] * self.hb.levels.m_peak_d[k, self.d[idx]]
        return _Level(self, idx, x, rate, self.slot_cv(k)[idx])


class _Level:
    """One level's routed points: :func:`level_latency` of them at any instance counts (:meth:`latency`)."""

    def __init__(self, m: _LevelModel, idx: np.ndarray, x: np.ndarray, rate: np.ndarray, cv: np.ndarray) -> None:
        self.m, self.idx, self.x, self.rate, self.cv = m, idx, np.asarray(x, dtype=float), rate, cv
        self._loads: dict[tuple[bytes, int], tuple[dict[str, float], float, np.ndarray]] = {}
        self.lam = rate * self.x
        self.pool = m.pool_np[idx]
        self.pool_ids, self.pools = _sorted_ids(self.pool.tolist())
        self.role = m.role[idx]
        # pool_latency's per-point terms (independent of the instances)
        lam = self.lam
        tau = m.tau[idx]
        batch = np.maximum(m.max_batch[idx], 1.0)
        s_pt = tau * np.where(self.role == "prefill", 1.0, batch)
        if m.hold is not None:
            hold = m.hold[idx]
            ok = np.isfinite(hold) & (hold > 0)
            held = np.where(ok, np.minimum(np.where(ok, hold, 0.0), s_pt), s_pt)
        else:
            held = s_pt
        s_pt = np.where(self.role == "decode", held, s_pt)
        cv_pt = m.stcv[idx]
        terms = {"arr": lam, "busy": lam * tau, "busy_b": lam * tau * batch, "s1": lam * s_pt,
                 "s2": lam * s_pt**2 * (1.0 + cv_pt**2), "ca": lam * cv, "ca2": lam * self._thinned_cv2()}
        G = len(self.pools)
        self.sums = {c: _group_sums(v, self.pool_ids, G) for c, v in terms.items()}
        q = m.ttft_q[idx]
        self.q = [float(np.nanmax(q[self.pool_ids == g])) if not np.isnan(q[self.pool_ids == g]).all() else math.nan
                  for g in range(G)]
        self.measured = [bool(m.measured[idx][self.pool_ids == g].all()) for g in range(G)]
        self.first_role = [str(self.role[int(np.flatnonzero(self.pool_ids == g)[0])]) for g in range(G)]
        self.lane_s = m.lane_s[idx]
        # bucket_latency's (service, bucket) groups in order of first appearance
        keys = list(zip(m.service_raw[idx].tolist(), m.bucket_raw[idx].tolist(), strict=True))
        order: dict[Any, list[int]] = {}
        for j, key in enumerate(keys):
            order.setdefault(key, []).append(j)
        self.groups = [np.array(v, dtype=np.intp) for v in order.values()]

    def _thinned_cv2(self) -> np.ndarray:
        """:func:`planner.pool_latency._thinned_cv2` of the routed points."""
        m, idx = self.m, self.idx
        svc = m.service[idx]
        seen: set[tuple[Any, Any]] = set()
        first: list[int] = []
        for j, key in enumerate(zip(m.service_raw[idx].tolist(), m.bucket_raw[idx].tolist(), strict=True)):
            if key not in seen:
                seen.add(key)
                first.append(j)
        f = np.array(first, dtype=np.intp)
        sid, suniq = _sorted_ids(svc[f].tolist())
        tot = _group_sums(self.rate[f], sid, len(suniq))
        total = {s: float(tot[j]) for j, s in enumerate(suniq)}
        pid, puniq = _sorted_ids(list(zip(m.pool[idx].tolist(), svc.tolist(), strict=True)))
        frac = _group_sums(self.lam, pid, len(puniq))[pid]
        peak = np.array([float(total.get(s, 0.0)) for s in svc])
        p = np.clip(np.divide(frac, peak, out=np.ones_like(frac), where=peak > 0), 0.0, 1.0)
        c2 = self.cv ** 2
        return p * c2 + 1.0 - p

    def _pool_rows(self, live: dict[str, int], redundancy: int) -> dict[str, dict[str, Any]]:
        """:func:`planner.pool_latency.pool_latency`'s rows by pool (the columns the level check reads)."""
        from planner.pool_latency import lane_wait_quantile_ms, slot_wait_ms

        rows: dict[str, dict[str, Any]] = {}
        sums = self.sums
        for g, pool in enumerate(self.pools):
            role = self.first_role[g]
            n = int(live.get(pool, 0))
            n_eff = max(n - redundancy, 0)
            busy_b, busy = float(sums["busy_b"][g]), float(sums["busy"][g])
            b = 1.0 if role == "prefill" else (busy_b / busy if busy > 0 else 1.0)
            arr = float(sums["arr"][g])
            s1 = float(sums["s1"][g])
            cs = math.sqrt(max(0.0, float(sums["s2"][g]) * arr / s1**2 - 1.0)) if s1 > 0 else 0.0
            ca = math.sqrt(float(sums["ca2"][g]) / arr) if arr > 0 else 1.0
            servers = max(1, int(n_eff * b)) if n_eff > 0 else 0
            service_s = busy / n_eff * servers / arr if n_eff > 0 and arr > 0 else 0.0
            peaked, drain_s = 1.0, service_s
            if role == "decode" and arr > 0:
                service_s = drain_s = s1 / arr
            elif role == "unified" and n_eff > 0 and service_s > 0 and self.m.lane_cols:
                hold_s, peaked = self._slot_queue(pool, n_eff)
                service_s = min(service_s, hold_s)
            if n_eff <= 0:
                wait = math.inf
            elif self.measured[g]:
                wait = 0.0
            elif service_s > 0:
                wait = slot_wait_ms({"quantile": float(self.q[g]), "arrival_rate_per_s": arr, "servers": servers,
                                     "mean_service_s": service_s, "service_cv": cs, "arrival_cv": ca,
                                     "slot_peakedness": peaked, "slot_drain_service_s": drain_s})
            else:
                wait = 0.0
            lane_wait = math.nan
            if role == "unified":
                on = self.pool_ids == g
                lane_wait, _lane = lane_wait_quantile_ms(float(self.q[g]), self.lam[on], self.lane_s[on], n_eff, ca)
            rows[pool] = {"pool": pool, "role": role, "instances": n, "servers": servers, "arrival_rate_per_s": arr,
                          "mean_service_s": service_s, "service_cv": cs, "arrival_cv": ca, "quantile": float(self.q[g]),
                          "wait_ms": float(wait), "lane_wait_ms": float(lane_wait), "slot_peakedness": peaked,
                          "slot_drain_service_s": drain_s}
        return rows

    def _pool_load(self, on: np.ndarray, live_n: int) -> tuple[dict[str, float], float, np.ndarray]:
        """:func:`planner.pool_latency._pool_load` of the routed points ``on`` (traffic and ``live_n ≥ 1`` given);
        memoised per (points, live instances): the level check asks the same pool at the same count for its slot
        hold and for its latency at load, and again at every candidate count of the other pools."""
        key = (on.tobytes(), int(live_n))
        hit = self._loads.get(key)
        if hit is None:
            hit = self._loads[key] = self._pool_load_of(on, live_n)
        return hit

    def _pool_load_of(self, on: np.ndarray, live_n: int) -> tuple[dict[str, float], float, np.ndarray]:
        from planner.pool_latency import (
            instance_arrival_cv,
            lane_chunk_step_s,
            pool_lane_units,
            unified_load,
        )

        m, idx = self.m, self.idx
        w, units = self.lam[on], m.units[idx][on]
        ca = instance_arrival_cv(float((w * self.cv[on]).sum() / w.sum()), live_n, float((w * units).sum() / w.sum()))
        t_dec = float((w * m.t_dec_ms[idx][on]).sum() / w.sum()) / 1e3
        t_chunk = lane_chunk_step_s(w, units, m.t_chunk_ms[idx][on])
        u_pool = pool_lane_units(w, units, m.new_tokens[idx][on])
        load = unified_load(float(w.sum()) / live_n, t_dec, t_chunk, u_pool, w, ca)
        return load, float((w * m.outputs[idx][on]).sum() / w.sum()), u_pool

    def _slot_queue(self, pool: str, live_n: int) -> tuple[float, float]:
        """:func:`planner.pool_latency.unified_slot_queue` of ``pool`` on ``live_n`` live instances: (hold s, peakedness)."""
        from planner.pool_latency import slot_hold_s, slot_peakedness

        m, idx = self.m, self.idx
        on = m.lane_ok[idx] & (self.pool == pool)
        if not on.any() or self.lam[on].sum() <= 0:
            return math.inf, 1.0
        load = self._pool_load(on, live_n)[0]
        outputs = m.outputs[idx][on]
        hold = slot_hold_s(load["mean_step_s"], self.lam[on], outputs, m.out_mean[idx][on] if m.out_mean is not None else outputs)
        return hold, slot_peakedness(load["share"])

    def _at_load(self, live: dict[str, int], redundancy: int, pool_rows: dict[str, dict[str, Any]]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:func:`planner.pool_latency.unified_at_load`'s ``ttft_at_load_ms``, ``tpot_at_load_ms``, ``itl_at_load_ms``,
        ``lane_in_ttft`` and ``slot_in_ttft`` of the routed points, with the slot tails of ``pool_rows``
        (:func:`planner.pool_latency.unified_slot_tails`, as :func:`planner.pool_latency.bucket_latency`)."""
        from planner.pool_latency import (
            _chosen_batch_ratio,
            _itl_quantile_s,
            _tpot_quantile_s,
            bursty_pools,
            lane_service_mixture,
            pool_slots,
            slot_tail_applies,
            unified_slot_tails,
            unified_ttft_s,
        )

        m, idx = self.m, self.idx
        n = len(idx)
        ttft_at, tpot_at, itl_at = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        lane_in = np.zeros(n, dtype=bool)
        slot_in = np.zeros(n, dtype=bool)
        if not m.lane_cols:
            return ttft_at, tpot_at, itl_at, lane_in, slot_in
        ok = m.lane_ok[idx]
        if not ok.any():
            return ttft_at, tpot_at, itl_at, lane_in, slot_in
        tails = unified_slot_tails(pool_rows)
        bursty = bursty_pools(pool_rows)
        lam, pools, outputs = self.lam, self.pool, m.outputs[idx]
        overhead_s, batch_all = m.overhead_s[idx], m.max_batch[idx]
        for pool in sorted(set(pools[ok])):
            on = ok & (pools == pool)
            live_n = max(int(live.get(pool, 0)) - redundancy, 0)
            w = lam[on]
            if live_n < 1 or w.sum() <= 0:
                continue
            load, o_mean, u_pool = self._pool_load(on, live_n)
            rate_i = load["rate_per_s"]
            tail = tails.get(str(pool))
            lane_on, lane_w = lane_service_mixture(u_pool * (load["decode_step_s"] + load["delta_s"]), w,
                                                   [m.mixes[int(idx[j])] for j in np.flatnonzero(on)])
            slots = pool_slots(w, m.tau[idx][on], batch_all[on])
            batch = rate_i * o_mean * load["mean_step_s"]  # an instance's decode batch at load (Little)
            lives = (outputs[on], w)
            for i, units_i in zip(np.flatnonzero(on), (u_pool * m.units_ttft_ratio[idx][on]).tolist(), strict=True):
                tq = float(m.ttft_q[idx[i]])
                lvl = m.token_level[int(idx[i])]
                ttft_s = unified_ttft_s(load, tq, units_i, lane_on, lane_w, live_n, batch, tail, bursty=str(pool) in bursty)
                slot_in[i] = slot_tail_applies(tail)
                tpot = _tpot_quantile_s(load, lvl, float(outputs[i]), slots, live_n, batch, lives)
                itl = load["mean_step_s"] if lvl is None else _itl_quantile_s(
                    load, lvl, _chosen_batch_ratio(batch, live_n))
                ttft_at[i] = 1e3 * (ttft_s + overhead_s[i])
                lane_in[i] = True
                tpot_at[i] = 1e3 * tpot
                itl_at[i] = 1e3 * itl
        return ttft_at, tpot_at, itl_at, lane_in, slot_in

    def latency(self, pool_names: np.ndarray, n: np.ndarray, redundancy: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """:func:`level_latency` of these points at the instances ``n``: its rows as records, and the pools' waits."""
        live = {str(pool_names[p]): int(n[p]) for p in range(len(pool_names)) if n[p] > 0}
        rows = self._pool_rows(live, redundancy)
        waits = {p: float(r["wait_ms"]) + (0.0 if math.isnan(r["lane_wait_ms"]) else float(r["lane_wait_ms"]))
                 for p, r in rows.items()}
        lanes = {p: float(r["lane_wait_ms"]) for p, r in rows.items() if not math.isnan(r["lane_wait_ms"])}
        return self._buckets(waits, lanes, live, redundancy, rows), waits

    def _buckets(self, waits_ms: dict[str, float], lanes: dict[str, float], live: dict[str, int], redundancy: int,
                 pool_rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """:func:`planner.pool_latency.bucket_latency`'s rows (with the instances and the pool rows)."""
        m, idx = self.m, self.idx
        pools_all, roles_all = self.pool, self.role
        replaced = np.array([p in lanes and not math.isnan(float(lanes[p])) for p in pools_all.tolist()], dtype=bool)
        replaced &= roles_all == "unified"
        ttft_all = m.ttft_ms[idx] - np.where(replaced, np.nan_to_num(m.own[idx]), 0.0)
        tpot_all = m.tpot_ms[idx]
        itl_all = m.itl_ms[idx]
        ttft_at, tpot_at, itl_at, lane_in, slot_in = self._at_load(live, redundancy, pool_rows)
        hit = ~np.isnan(ttft_at)
        ttft_all = np.where(hit, ttft_at, ttft_all)
        tpot_all = np.where(hit, tpot_at, tpot_all)
        itl_all = np.where(hit, itl_at, itl_all)
        no_lane = set(pools_all[hit & lane_in].tolist())
        no_slot = set(pools_all[hit & slot_in].tolist())
        metric_all = m.metric[idx] if m.metric is not None else None
        ttft_t_all, tpot_t_all, itl_t_all = m.ttft_t[idx], m.tpot_t[idx], m.itl_t[idx]
        svc_all, bucket_all = m.service_raw[idx], m.bucket_raw[idx]
        rows: list[dict[str, Any]] = []
        mixable: dict[int, tuple[np.ndarray, float]] = {}
        for at_k in self.groups:
            j0 = int(at_k[0])
            svc, bucket = svc_all[j0], bucket_all[j0]
            roles = roles_all[at_k]
            pools = pools_all[at_k]
            first = np.isin(roles, ("prefill", "unified"))
            dec = roles == "decode"
            w = np.array([0.0 if p in no_slot else
                          float(waits_ms.get(p, 0.0)) - (float(lanes.get(p, 0.0)) if p in no_lane and p in lanes else 0.0)
                          for p in pools.tolist()])
            w = np.where(np.isnan(w), math.inf, w)
            ttft_pt = ttft_all[at_k]
            t_first = float(np.max(ttft_pt[first] + w[first])) if first.any() else 0.0
            t_dec = float(np.max(w[dec])) if dec.any() else 0.0
            dec_roles = np.isin(roles, ("decode", "unified"))
            itl_metric = metric_all is not None and str(metric_all[j0]) == "itl"
            tok = (itl_all if itl_metric else tpot_all)[at_k]
            tpot = float(np.max(tok[dec_roles])) if dec_roles.any() else 0.0
            ttft_t = float(ttft_t_all[j0])
            tpot_t = float((itl_t_all if itl_metric else tpot_t_all)[j0])
            ttft = t_first + t_dec + 0.0  # no encode roles here (_LevelModel.of): t_enc = 0
            if first.any() and bool(np.all(np.isin(roles, ("prefill", "decode")))):
                mixable[len(rows)] = (at_k[first], t_dec + 0.0)
            rows.append({"service": str(svc), "bucket": str(bucket), "ttft_predicted_ms": ttft, "ttft_target_ms": ttft_t,
                         "tpot_predicted_ms": tpot, "tpot_target_ms": tpot_t, "pools": sorted(set(pools.tolist())),
                         "met": bool(ttft <= ttft_t * (1 + 1e-6) and tpot <= tpot_t * (1 + 1e-6))})
        if mixable:
            self._mixture(rows, mixable, pool_rows, waits_ms)
        return rows

    def _mixture(self, rows: list[dict[str, Any]], mixable: dict[int, tuple[np.ndarray, float]],
                 pools: dict[str, dict[str, Any]], waits_ms: dict[str, float]) -> None:
        """:func:`planner.pool_latency._mixture_ttft` on these points."""
        from planner.pool_latency import pool_wait_tails
        from planner.ttft_mixture import mixture_quantile_ms

        m, idx = self.m, self.idx
        if m.mix is None:
            return
        group = m.group[idx]
        lam = self.lam
        quant = m.ttft_q[idx]
        pool_of = self.pool
        tails = pool_wait_tails(set(pool_of[np.concatenate([i for i, _e in mixable.values()])].tolist()), pools, waits_ms)
        by_group: dict[tuple[str, str], list[int]] = {}
        for k, (at, _extra) in mixable.items():
            by_group.setdefault((str(rows[k]["service"]), str(group[int(at[0])])), []).append(k)
        for members in by_group.values():
            w, t, c, d = [], [], [], []
            whole = True
            for k in members:
                at, extra = mixable[k]
                for j in at:
                    mix = m.mix[int(idx[j])]
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
            q = float(quant[j0])
            upper = max(float(rows[k]["ttft_predicted_ms"]) for k in members)
            level = mixture_quantile_ms(q, weights, np.concatenate(t), np.concatenate(c), np.concatenate(d), upper_ms=upper)
            for k in members:
                r = rows[k]
                r["ttft_predicted_ms"] = min(float(r["ttft_predicted_ms"]), level)
                r["met"] = bool(r["ttft_predicted_ms"] <= float(r["ttft_target_ms"]) * (1 + 1e-6)
                                and float(r["tpot_predicted_ms"]) <= float(r["tpot_target_ms"]) * (1 + 1e-6))
