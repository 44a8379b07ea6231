"""From capacity tables to the flat, sparse index sets and coefficients the MIP is built from.

Everything here is plain pandas/numpy over the tidy tables of
:mod:`planner.schema.capacity`; the pyomo build (:mod:`planner.optimize.model`) then walks
precomputed arrays and never looks anything up in a DataFrame.

Optional columns the optimiser understands beyond the contract:

- ``demand.model`` — model group of the service (one set of weights per instance, e.g.
  ``llama-3.1-70b@bf16``). Instances of different groups are different pools. Absent: one group.
- ``points.kv_capacity_bytes`` — KV bytes one instance can hold (decode/unified). Absent (or NaN,
  as in measured rows, which carry their KV limit inside the measured rate): the
  KV constraint is implied by ``max_batch`` and is not built.
- ``points.utilization_cap`` — a utilisation cap supplied with the table (measured files).
  Absent: computed from the queueing model (:func:`utilization_caps`).

Utilisation caps (DESIGN §6). A pool is a G/G/c queue (:mod:`planner.queueing`). For a point
``i = (s, b, r, c)``, the waiting-time quantile must fit the latency left over by the
operating point itself:

- prefill / unified: ``budget_i = ttft_target - ttft_ms_i`` (TTFT without queueing);
- decode: ``budget_i = min(tpot_target, itl_target)`` — a new sequence waits at most one token
  time for a slot (stated assumption: decode admission must not visibly delay the first token;
  the slot wait is counted in the TTFT, :mod:`planner.optimize.extract`), at that target's
  quantile level (0.99 for a mean target: conservative). Where KV memory, not the target, sets
  the point's batch (``bound`` ``memory_capacity``) the token time is the point's own step
  ``tpot_ms_i`` (at most the target): a looser per-token target does not change such a point,
  so it must not loosen its admission either. With the target as the budget there,
  long-context-assistant's disaggregated plan cost $413,378/month at an ITL target of 3 s and
  $439,172 at 10 s (identical capacity tables; the looser admission loaded the decode pools harder
  and the peak simulation tightened them ×4; issue 13 item 6).

A decode point whose service replays a log (the peak simulation replays its busiest windows) is also held within
the slot wait the log's bursts cause (:func:`_decode_replay_caps`, :mod:`planner.workload.replay_wait`'s slot table):
its slots are held for the bucket's mean output at the point's step, request ``i`` served when request ``i − c``
leaves, at any pool size (a pool carrying a share ``p`` of the service is read at ``c / p`` slots). G/G/c alone
admitted code-completion-8b's H100 tp1 decode points at 82 % busy, 2 instances whose 310 slots the peak simulation
saw wait 272–282 ms p99 when a burst of 185 requests arrived within ~37 ms; now 36–38 %, 3 instances.

Servers: prefill ``c = n`` instances, service ``s = tau``; decode/unified ``c = n * B`` slots
with holding time ``s = tau * B`` (continuous batching). ``n`` is unknown before solving, so
the cap uses a nominal pool, the one the bucket's latency group needs on the point's (role, config),
``n0 = max(1, ceil(sum_b lambda_peak_b * tau_b))`` over the buckets of the group (:func:`group_busy`; each
bucket its own group up to 4 buckets, :func:`planner.workload.buckets.latency_groups`) — conservative
as far as pooling groups only adds servers; issue 24 item 0: the bucket's own ``lambda_peak * tau`` halved
with each split of a bucket, so the caps, and cost, moved with the bucket count. The queue's service time
is the group's rate-weighted mixture (:func:`group_service`), and a unified point's cap at load is priced
at its group's mean work, prompt and lane time (:func:`group_point`), so at 8 or 16 buckets a bucket gets
the cap of the 4-bucket bucket it nests in. ``rho_i = max_utilization(...)``, further bounded by
``options.max_utilization`` when the instance sets one.

A prefill point whose table carries its sub-bins' TTFTs (``points.ttft_mix``, a log's buckets) is held at
its latency group's length mix instead of its representative (issue 24 item 0, :mod:`planner.ttft_mixture`):
``rho_i`` is the largest utilisation of the same queue with ``sum_s v_s P(W > T - t_s) <= 1 - q`` over the
group's sub-bins (:func:`group_ttft_mixes`; the service's input tail counted as misses), at least the
representative's cap. The analytic check (:func:`planner.pool_latency.bucket_latency` with the pools' rows)
reports the same mixture's quantile.

Stated assumption, and the limit of this: a group's buckets share one pool of the config. The optimiser
may still route part of a group to another configuration (a smaller pool than the cap assumed); the
plan's latency check and the peak simulation (:mod:`planner.optimize.tighten`) catch it and tighten, which
is where the remaining dependence of cost on the bucket count comes from (``benchmarks/bench_buckets.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.schema.capacity import (
    BURST_TABLE_COLUMNS,
    DEMAND_LATENCY_COLUMNS,
    LATENCY_GROUP_COLUMN,
    LENGTH_MIX_COLUMN,
    TTFT_MIX_COLUMN,
    CapacityTables,
)

ROLES: tuple[str, ...] = ("prefill", "decode", "unified")
ARCH_ROLES: dict[str, frozenset[str]] = {
    "shared": frozenset({"unified"}),
    "disaggregated": frozenset({"prefill", "decode"}),
    "hybrid": frozenset({"prefill", "decode", "unified"}),
}
"""Architectures as restrictions of one model: which roles may carry traffic."""

ENCODE_HOST: dict[str, str] = {"encode": "encode", "encode_prefill": "prefill", "encode_unified": "unified"}
"""Encode-phase roles (:mod:`planner.capacity_encode`) -> the role of the pool their load goes to: a
separate ``encode`` pool, or the prefill / unified pool that prefills the request (inline encode)."""


def pool_key(role: str, config: str, model: str) -> str:
    return f"{role}:{config}:{model}"


@dataclass
class Prepared:
    """Sparse index sets and coefficients of one capacity table (see module docstring)."""

    tables: CapacityTables
    demand: pd.DataFrame
    """Demand rows with an integer index ``d`` and ``model``."""
    points: pd.DataFrame
    """Feasible points with ``d`` (demand row), ``pool`` (key), ``rho`` and coefficients."""
    pools: pd.DataFrame
    """One row per pool: pool, role, config, device, tp, model, n_max, kv_capacity_bytes, sends_kv."""
    device_types: list[str]
    procurement: dict[str, float]
    caps_method: str
    infeasible_points: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Points the table marks infeasible (kept for the diagnosis)."""
    tool: Any = None
    """Tool execution phase (:class:`planner.agents.prep.ToolPrep`) when the tables carry agents."""
    max_utilization: float | None = None
    """``options.max_utilization`` the caps were bounded by (None: not set): a hard upper bound on every
    cap, which relaxing over-tight caps must keep (:func:`planner.optimize.latency.relax_ceiling`)."""

    @property
    def hours(self) -> float:
        return float(self.tables.costs.hours_per_month)


def _model_column(demand: pd.DataFrame) -> pd.Series:
    if "model" in demand.columns:
        return demand["model"].astype(str)
    return pd.Series("default", index=demand.index)


def _group_keys(points: pd.DataFrame, strings: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list[str]] | None:
    """The latency-group keys of each point, ``(copy, service, latency_group, role, config)``, or ``None``
    without a ``latency_group`` column. ``copy`` counts the repeats of a (service, bucket, role, config):
    a caller may stack scaled copies of one table in one call (:mod:`planner.horizon.model` prices every
    rate level at once), and a group must not mix them; it is counted over ``points`` (the frame passed in).
    ``strings``: :func:`group_key_strings` of ``points``, row for row, when the caller has it (:func:`utilization_caps`
    computes it once for its three group functions and passes the rows of each)."""
    if LATENCY_GROUP_COLUMN not in points.columns or "service" not in points.columns or not len(points):
        return None
    text = group_key_strings(points) if strings is None else strings
    keys = [c for c in ("service", LATENCY_GROUP_COLUMN, "role", "config") if c in points.columns]
    frame = text[keys].copy()
    ident = [c for c in ("service", "bucket", "role", "config") if c in points.columns]
    frame["_copy"] = text[ident].groupby(ident, sort=False).cumcount().to_numpy()
    return frame, [*frame.columns[:-1], "_copy"]


def group_key_strings(points: pd.DataFrame) -> pd.DataFrame:
    """The columns :func:`_group_keys` groups on (service, latency_group, bucket, role, config, where present)
    as strings, index-aligned with ``points``."""
    cols = [c for c in ("service", LATENCY_GROUP_COLUMN, "bucket", "role", "config") if c in points.columns]
    return points[cols].astype(str)


def _rows(strings: pd.DataFrame | None, mask: np.ndarray) -> pd.DataFrame | None:
    return None if strings is None else strings.loc[mask]


def group_busy(points: pd.DataFrame, strings: pd.DataFrame | None = None) -> np.ndarray:
    """Per point: the busy instances ``sum_b lambda_peak_b * tau_b`` of its latency group on its (role, config),
    summed over the buckets of its service in the same ``latency_group`` (the demand column,
    :func:`planner.workload.buckets.latency_groups`; issue 24 item 0); without that column the bucket's own.

    Why: a bucket's own ``lambda_b tau_b`` halves when the bucket is split, which lowered every cap
    (Erlang-C caps rise with the server count) and raised cost with the bucket count. A latency group is
    the bin of a fixed 4-bucket resolution the bucket nests in, so its load is the same at 4, 8 and 16
    buckets (work priced at the mix, :func:`planner.capacity.bucket_work`, sums alike): the caps are those
    of the 4-bucket table. Stated assumption, as before at 4 buckets: the group's buckets share a pool of
    that config. The whole service's load (tried first) let the optimiser split a service's buckets over
    small pools each capped as if it held the service (long-context-assistant's shared plan: the latency
    check then cut those caps ×4 round after round, $128k at 4 buckets against $71k)."""
    busy = points["rate_peak_per_s"].to_numpy(float) * points["instance_seconds_per_request"].to_numpy(float)
    grouped = _group_keys(points, strings)
    if grouped is None:
        return busy
    frame, keys = grouped
    total = frame.assign(_busy=busy).groupby(keys, sort=False)["_busy"].transform("sum").to_numpy(float)
    return np.maximum(busy, total)


def group_service(points: pd.DataFrame, service_s: np.ndarray, service_cv: np.ndarray,
                  strings: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per point: the mean service time and its CV in its latency group's queue on its (role, config)
    (:func:`group_busy`'s groups; the point's own without a ``latency_group`` column).

    The group's buckets share one queue, so they wait alike: the queue serves the rate-weighted mixture
    of their service times, ``E[S] = sum_i p_i s_i``, ``E[S^2] = sum_i p_i s_i^2 (1 + cv_i^2)``,
    ``p_i = lambda_i / sum lambda`` (the law of total variance: at 8 or 16 buckets this is the 4-bucket
    bucket's own mean and CV, its mix's sub-bins being the same, :func:`planner.capacity.mix_work`).
    Before, each bucket's queue had its own service time, so the top bucket of 16 (prompts of the top
    1/16 of lengths) got a lower cap than the top bucket of 4 at the same servers and budget."""
    s = np.asarray(service_s, dtype=float)
    cv = np.nan_to_num(np.asarray(service_cv, dtype=float), nan=0.0)
    grouped = _group_keys(points, strings)
    if grouped is None:
        return s, cv
    lam = points["rate_peak_per_s"].to_numpy(float)
    frame, keys = grouped
    frame = frame.assign(_w=lam, _m1=lam * s, _m2=lam * s**2 * (1.0 + cv**2))
    sums = frame.groupby(keys, sort=False)[["_w", "_m1", "_m2"]].transform("sum")
    w = sums["_w"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        m1 = np.where(w > 0, sums["_m1"].to_numpy(float) / w, s)
        m2 = np.where(w > 0, sums["_m2"].to_numpy(float) / w, s**2 * (1.0 + cv**2))
        cv_g = np.where(m1 > 0, np.sqrt(np.maximum(m2 / m1**2 - 1.0, 0.0)), cv)
    ok = np.isfinite(m1) & (m1 > 0) & np.isfinite(cv_g)
    return np.where(ok, m1, s), np.where(ok, cv_g, cv)


GROUP_MEAN_COLUMNS: tuple[str, ...] = ("instance_seconds_per_request", "prefill_tokens", "lane_service_ms")
"""The work columns of a unified point that :func:`group_point` replaces by its latency group's rate-weighted mean."""


def group_point(points: pd.DataFrame, strings: pd.DataFrame | None = None) -> pd.DataFrame:
    """The points as their latency group's queue sees them: :data:`GROUP_MEAN_COLUMNS` replaced by the
    group's rate-weighted means on the (role, config) (:func:`group_busy`'s groups; unchanged without a
    ``latency_group`` column or where a column is missing or not finite).

    Why: a unified point's cap at load (:func:`unified_caps_at_load`) models one pool of identical
    requests, each instance at ``ρ / τ`` requests/s of ``prefill_tokens``-token prompts holding the lane
    ``lane_service_ms``. For a bucket alone that made the top bucket of 16 (its prompts the top 1/16 of
    lengths, lane-bound) a pool of only such prompts, capped far below the top bucket of 4 that contains
    it. The group's means are its mixture's (``sum λ τ / sum λ`` is the per-instance rate at ``ρ``,
    ``sum λ n / sum λ`` the lane's units per prompt, ``sum λ S / sum λ`` its utilisation per request):
    at 8 or 16 buckets the 4-bucket bucket's own columns, up to the fine sub-bins' rounding."""
    grouped = _group_keys(points, strings)
    if grouped is None:
        return points
    cols = [c for c in GROUP_MEAN_COLUMNS if c in points.columns]
    lam = points["rate_peak_per_s"].to_numpy(float)
    out = points.copy()
    frame, keys = grouped
    for c in cols:
        v = pd.to_numeric(points[c], errors="coerce").to_numpy(float)
        ok = np.isfinite(v)
        frame["_v"] = np.where(ok, lam * v, 0.0)
        frame["_n"] = np.where(ok, lam, 0.0)
        sums = frame.groupby(keys, sort=False)[["_v", "_n"]].transform("sum")
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = sums["_v"].to_numpy(float) / sums["_n"].to_numpy(float)
        out[c] = np.where(ok & np.isfinite(mean), mean, v)
    return out


def group_ttft_mixes(points: pd.DataFrame, strings: pd.DataFrame | None = None) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per (prefill) point: its latency group's TTFT mix on its (role, config) as (shares, TTFT ms) —
    the sub-bins of every bucket of the group (:func:`group_busy`'s groups), each bucket's shares
    weighted by its peak rate; the point's own mix without a ``latency_group`` column; ``None`` where
    a member of the group has no mix (:data:`planner.schema.capacity.TTFT_MIX_COLUMN`, hand-written
    buckets, a measured row). The group's sub-bins are the same fine sub-bins at 4, 8 and 16 buckets
    (:mod:`planner.workload.buckets` item 5), so its mix, and the cap it gives, is too."""
    from planner.ttft_mixture import parse_mix

    cache: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}
    parsed = []
    for raw in points[TTFT_MIX_COLUMN].tolist():
        key = raw if isinstance(raw, str) else ""
        if key not in cache:
            cache[key] = parse_mix(key)
        parsed.append(cache[key])
    grouped = _group_keys(points, strings)
    if grouped is None:
        return parsed
    lam = points["rate_peak_per_s"].to_numpy(float)
    frame, keys = grouped
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(points)
    for idx in frame.groupby(keys, sort=False).indices.values():
        parts = [parsed[i] for i in idx]
        if any(p is None for p in parts):
            continue
        if len(idx) == 1:
            out[int(idx[0])] = parts[0]
            continue
        w = lam[idx]
        w = w if np.isfinite(w).all() and w.sum() > 0 else np.ones(len(idx))
        v = np.concatenate([wi * p[0] for wi, p in zip(w, parts, strict=True) if p is not None])
        t = np.concatenate([p[1] for p in parts if p is not None])
        mix = (v / v.sum(), t)
        for i in idx:
            out[int(i)] = mix
    return out


def utilization_caps(points: pd.DataFrame, *, max_utilization: float | None = None,
                     previous: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """Per point: the utilisation cap rho (see module docstring). ``points`` carries demand columns.

    The caps are :func:`planner.queueing.max_utilization` of each point, computed for all points at
    once by :func:`planner.queueing.max_utilization_many` (the same bisection, vectorised over
    points, each distinct row evaluated once). ``previous`` (per point, ``-1`` where none): the row of the same
    point one rate step lower, for :func:`unified_caps_at_load`'s search by rate step (a horizon's levels)."""
    from planner.pool_latency import replay_by_row
    from planner.queueing import max_utilization_many

    method = "planner.queueing.max_utilization (Erlang-C / Allen-Cunneen G/G/c wait quantile), nominal pool n0 = ceil(sum over the bucket's latency group of lambda_peak*tau) on the point's (role, config)"
    role = points["role"].to_numpy(str)
    tau = points["instance_seconds_per_request"].to_numpy(float)
    batch = np.maximum(points["max_batch"].to_numpy(float), 1.0)
    ttft_ms = points["ttft_ms"].to_numpy(float)
    ttft_t = points["ttft_target_ms"].to_numpy(float)
    tpot_t = points["tpot_target_ms"].to_numpy(float)
    ttft_q = points["ttft_quantile"].to_numpy(float)
    tpot_q = points["tpot_quantile"].to_numpy(float)
    if "itl_target_ms" in points.columns:  # the tighter per-token target sets the admission budget
        itl_t = points["itl_target_ms"].to_numpy(float)
        tpot_q = np.where(itl_t < tpot_t, points["itl_quantile"].to_numpy(float), tpot_q)
        tpot_t = np.minimum(tpot_t, itl_t)
    tpot_q = np.where(np.isnan(tpot_q), 0.99, tpot_q)  # a mean target: the p99 admission wait
    decode = role == "decode"
    step_ms = points["tpot_ms"].to_numpy(float)
    own = (points["bound"].astype(str).to_numpy() == "memory_capacity") & np.isfinite(step_ms) & (step_ms > 0)
    token_ms = np.where(own, np.minimum(step_ms, tpot_t), tpot_t)  # one token time: the target, or the step it does not bind
    budget_s = np.where(decode, token_ms / 1e3, (ttft_t - ttft_ms) / 1e3)
    q = np.where(decode, tpot_q, ttft_q)
    b = np.where(role != "prefill", batch, 1.0)
    # the group keys' strings once for the three group functions (each counts its copies over its own rows)
    strings = group_key_strings(points) if LATENCY_GROUP_COLUMN in points.columns and "service" in points.columns else None
    busy_group = group_busy(points, strings)  # the latency group's load on the (role, config): the same at 4, 8, 16 buckets
    n0 = np.maximum(1.0, np.ceil(busy_group - 1e-9))
    servers = (n0 * b).astype(np.int64)
    own_s = tau * b
    given = points["utilization_cap"].to_numpy(float) if "utilization_cap" in points.columns else np.full(len(points), np.nan)
    todo = np.isnan(given) & (own_s > 0)
    # the group's queue: its mixture of service times (group_service), over the modelled points only
    service_s, service_cv = own_s.copy(), points["service_time_cv"].to_numpy(float).copy()
    if todo.any():
        service_s[todo], service_cv[todo] = group_service(points.loc[todo], own_s[todo], service_cv[todo], _rows(strings, todo))
    rho = np.where(np.isnan(given), 0.0, given)  # supplied with the table: a measured rate already includes queueing
    if todo.any():
        rho[todo] = max_utilization_many(servers[todo], service_s[todo], q[todo], budget_s[todo],
                                         service_cv[todo], points["interarrival_cv"].to_numpy(float)[todo])
    # the service's peak rate over every bucket of the table (planner.pool_latency.replay_by_row)
    replay = replay_by_row(points, todo & (role == "prefill"), np.ones(len(points), dtype=bool))
    if replay:
        from planner.workload.replay_wait import max_utilization as replay_cap

        for i, (curve, rate) in replay.items():
            rho[i] = min(rho[i], replay_cap(curve, rate, float(q[i]), float(budget_s[i])))
        method += ("; prefill points fed by a replayed log also within the wait its bursts cause at the cap "
                   "(planner.workload.replay_wait: the fluid backlog over the log's replayed peak-like windows)")
    decode_bursts = _decode_replay_caps(points, todo & decode, tau * b, q, budget_s)
    if decode_bursts:
        for i, cap in decode_bursts.items():
            rho[i] = min(rho[i], cap)
        method += ("; decode points fed by a replayed log also within the slot wait its bursts cause at the cap "
                   "(planner.workload.replay_wait.replay_slot_table: c slots held for the mean output, request i served when "
                   "request i - c leaves)")
    unified = todo & (role == "unified")
    if unified.any():
        bursts = replay_by_row(points, unified, np.ones(len(points), dtype=bool))
        at_load = unified_caps_at_load(group_point(points.loc[unified], _rows(strings, unified)), busy_group[unified], batch[unified], service_s[unified], q[unified],
                                       service_cv[unified],
                                       points["interarrival_cv"].to_numpy(float)[unified], guess=rho[unified],
                                       slot_busy=n0[unified], previous=None if previous is None else _subset_links(previous, unified),
                                       replay=[bursts.get(int(i)) for i in np.flatnonzero(unified)] if bursts else None)
        priced = ~np.isnan(at_load)
        if priced.any():
            rho[np.flatnonzero(unified)[priced]] = at_load[priced]
            method += ("; unified points at the load that arrives (planner.pool_latency.unified_at_utilization_many: "
                       "the quantile of slot wait + TTFT, taken as independent, and the per-token quantile at the cap's load)")
            if bursts:
                method += ("; unified points fed by a replayed log: the slot wait at least the wait its bursts cause in the "
                           "chunked-prefill lanes at the cap (planner.workload.replay_wait)")
    prefill_mix = todo & (role == "prefill") & (TTFT_MIX_COLUMN in points.columns)
    if prefill_mix.any():  # a prefill point's TTFT quantile is its latency group's length mix's (planner.ttft_mixture)
        from planner.queueing import UTILIZATION_CEILING
        from planner.ttft_mixture import mixture_caps

        mixes = group_ttft_mixes(points.loc[prefill_mix], _rows(strings, prefill_mix))
        has = np.array([m is not None for m in mixes], dtype=bool)
        if has.any():
            idx = np.flatnonzero(prefill_mix)[has]
            at_mix = mixture_caps(servers[idx].astype(float), service_s[idx], service_cv[idx],
                                  points["interarrival_cv"].to_numpy(float)[idx], q[idx], ttft_t[idx] / 1e3,
                                  [(m[0], m[1] / 1e3) for m, h in zip(mixes, has, strict=True) if h and m is not None],
                                  ceiling=UTILIZATION_CEILING, replay=[replay.get(int(i)) for i in idx] if replay else None)
            rho[idx] = np.maximum(rho[idx], at_mix)
            method += ("; prefill points at their latency group's length mix (planner.ttft_mixture: sum_s v_s P(W > T - t_s) <= 1 - q "
                       "over the sub-bins' TTFTs, the input tail as misses; never below the representative's cap, which a group "
                       "holding more than 1 - q of input-tail requests keeps)")
    if not np.all(np.isnan(given)):
        method += "; caps supplied with the capacity table where given (measured rows: 1.0)"
    if max_utilization is not None:
        rho = np.minimum(rho, max_utilization)
        method += f"; bounded by options.max_utilization = {max_utilization:g}"
    return rho, method


def _decode_replay_caps(points: pd.DataFrame, mask: np.ndarray, full_batch_hold_s: np.ndarray, quantile: np.ndarray,
                        budget_s: np.ndarray) -> dict[int, float]:
    """Per decode point of ``mask`` whose service replays a log: the largest utilisation (busy / n) at which the slot
    wait its bursts cause stays within the point's admission budget (:func:`planner.workload.replay_wait.max_slot_occupancy`,
    any pool size: a pool carrying a share ``p`` of the service is read at ``c / p`` slots). The slots are held for the
    mean output at the point's step (:func:`planner.pool_latency.decode_hold_s`, as the check prices them), so the
    slot occupancy is ``ρ h / (τ B)``."""
    from planner.pool_latency import decode_hold_s, replay_by_row
    from planner.workload.replay_wait import max_slot_occupancy

    fed = replay_by_row(points, mask, np.ones(len(points), dtype=bool), slots=True)
    if not fed:
        return {}
    rows = np.array(sorted(fed), dtype=int)
    hold = decode_hold_s(points.iloc[rows], full_batch_hold_s[rows])
    out: dict[int, float] = {}
    seen: dict[tuple[int, float, float, float, float], float] = {}  # one parsed table per text (its lru cache): keyed by identity
    for k, i in enumerate(rows):
        table, r = fed[int(i)]
        h = float(hold[k])
        if not (h > 0 and full_batch_hold_s[i] > 0):
            continue
        key = (id(table), r, h, float(quantile[i]), float(budget_s[i]))
        if key not in seen:
            seen[key] = max_slot_occupancy(table, h, r, float(quantile[i]), float(budget_s[i]))
        out[int(i)] = seen[key] * float(full_batch_hold_s[i]) / h
    return out


def _subset_links(previous: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``previous`` (row indices, ``-1`` none) restated over the rows of ``mask``: a link to a row outside it is ``-1``."""
    pos = np.full(len(mask) + 1, -1)
    pos[np.flatnonzero(mask)] = np.arange(int(mask.sum()))
    prev = np.asarray(previous, dtype=int)[mask]
    return pos[np.where(prev >= 0, prev, len(mask))]


def encode_split_ttft(pts: pd.DataFrame, demand: pd.DataFrame) -> pd.DataFrame:
    """Points as the utilisation caps see them when a demand row has an encode phase (``encode_tokens_mean`` > 0).

    A multimodal request passes two queues before its first token: the encode stage (a separate encode
    pool, or inline in its prefill / unified pool) and the prefill stage. Their waits share one TTFT
    target, so each gets half of the slack left by the fastest encode ``E_d`` and the fastest prefill
    ``P_d`` (``ttft_ms`` without queueing, over the row's feasible points):

    - prefill / unified point ``i``: wait budget ``(T - ttft_i - E_d) / 2``;
    - encode point ``e`` (any encode role): wait budget ``(T - ttft_e - P_d) / 2``.

    Implemented by raising ``ttft_ms`` to ``T - budget`` in the copy given to :func:`utilization_caps`;
    the table's ``ttft_ms`` is unchanged. Rows without an encode phase (every text-only table) are
    returned as they are."""
    if "encode_tokens_mean" not in demand.columns or not len(pts):
        return pts
    enc_rows = demand.loc[demand["encode_tokens_mean"].astype(float) > 0, ["service", "bucket"]]
    if not len(enc_rows):
        return pts
    key = pd.MultiIndex.from_frame(pts[["service", "bucket"]].astype(str))
    has_enc = key.isin(pd.MultiIndex.from_frame(enc_rows.astype(str)))
    role = pts["role"].astype(str)
    is_enc = role.isin(list(ENCODE_HOST)).to_numpy()
    is_pf = role.isin(["prefill", "unified"]).to_numpy()
    ttft = pts["ttft_ms"].to_numpy(float)
    d = pts["d"].to_numpy(int)
    e_min = pd.Series(ttft[is_enc]).groupby(d[is_enc]).min()
    p_min = pd.Series(ttft[is_pf]).groupby(d[is_pf]).min()
    other = np.where(is_enc, pd.Series(d).map(p_min).to_numpy(float), pd.Series(d).map(e_min).to_numpy(float))
    target = pts["ttft_target_ms"].to_numpy(float)
    split = has_enc & (is_enc | is_pf) & np.isfinite(other)
    out = pts.copy()
    out["ttft_ms"] = np.where(split, target - (target - ttft - np.nan_to_num(other)) / 2.0, ttft)
    if TTFT_MIX_COLUMN in out.columns:  # a split budget is the representative's: no length mix for these rows
        out[TTFT_MIX_COLUMN] = np.where(split, "", out[TTFT_MIX_COLUMN].astype(object))
    return out


def unified_caps_at_load(points: pd.DataFrame, busy_peak: np.ndarray, batch: np.ndarray, service_s: np.ndarray,
                         quantile: np.ndarray, service_cv: np.ndarray, arrival_cv: np.ndarray, *,
                         guess: np.ndarray | None = None, tolerance: float = 2e-3,
                         slot_busy: np.ndarray | None = None, previous: np.ndarray | None = None,
                         replay: Sequence[tuple[np.ndarray, float] | None] | None = None) -> np.ndarray:
    """Per unified point: its utilisation cap priced at the load that arrives (issue 24 item 3);
    ``nan`` where the point is not modelled (no lane columns, measured).

    The full-batch cap charges every request the operating point's own TTFT (``ttft_ms``, the
    iteration time, chunk share and lane wait of the full batch ``B*``) whatever the load. At
    utilisation ``ρ`` each instance carries up to ``ρ / τ`` requests/s (whatever else shares its
    pool) and batches what arrives, and the bucket's latency group fills ``n(ρ) = ⌈busy_peak / ρ⌉`` instances
    (``busy_peak`` the group's ``sum λ_peak τ`` on the config, :func:`group_busy`; the bucket's own ``λ_peak τ``
    when it is its own group; pooling with other groups only adds instances). The cap is the
    largest ``ρ ≤`` :data:`planner.queueing.UTILIZATION_CEILING` with, each instance at ``ρ``:

    * ``P(W_slot + TTFT_load > ttft_target) ≤ 1 − q`` — ``W_slot`` the slot wait of the nominal pool's
      ``n0 · B*`` slots held ``τ B*`` (``n0`` = ``slot_busy`` rounded up, the latency group's busy instances on the
      config from :func:`group_busy` as the full-batch cap; ``⌈λ_peak τ⌉`` when not given), with its Erlang-C tail
      ``P(W > t) = C e^{−θ t}`` (:func:`planner.ttft_mixture.queue_tail_params`), ``TTFT_load`` the point's own TTFT
      law at that load, lane queue of the ``n(ρ)`` lanes included, points ``(t_i, w_i)``; the two independent, so
      ``Σ_i w_i min(1, C e^{−θ (target − t_i)}) ≤ 1 − q`` (:func:`planner.pool_latency.unified_ttft_meets`, the rule of
      the plan's prediction :func:`planner.pool_latency.unified_ttft_s`; before, ``W_q + TTFT_q ≤ target``, the sum of
      the two quantiles). A degenerate tail (no wait: ``C = 0``; a saturated queue) adds its quantile, 0 or ``∞``.
      ``replay`` (per point, the service's replayed-burst curve and peak rate, or None; :func:`planner.pool_latency.
      replay_by_row`): where the wait the log's bursts cause in the chunked-prefill lanes at their utilisation at the
      cap, ``ρ · lane_service / τ`` (each instance carries ``ρ/τ`` requests/s, each holds its lane ``lane_service``), is
      at least the slot wait, it stands in for it (:func:`planner.pool_latency.replay_wait_at`), as the plan's check
      takes it (:func:`planner.pool_latency.pool_latency`: a unified pool's wait is the larger of the two), and its
      quantile is added to the TTFT at load, not summed with it as independent
      (:func:`planner.pool_latency.burst_sets_wait`);
    * its per-token metric at that load (TPOT or ITL quantile, the same function) ``≤`` its target;

    the prediction a plan is checked against after the solve (:func:`planner.pool_latency.bucket_latency`
    with the pool sizes). The lanes' pool grows as ``ρ`` falls: a lane-bound bucket (prompts longer
    than the lane) gets the pool whose lanes carry it, not one instance's lane (which put
    test_optimize_verify's synthetic at 3 instances where 2 meet). The slots keep ``n0``: with
    ``n(ρ)`` slots too, the MIP split low-rate buckets over pools smaller than ``n(ρ)`` and
    code-completion at rate ×1 cost more than at ×1.5 after the tightening rounds
    (tests/test_monotone.py). Latency grows with ``ρ``;
    bisection over all points at once to ``tolerance`` (bracketed first at ``guess``, the
    full-batch cap, when given), the feasible end kept (0 when even a trickle misses).

    ``previous`` (per point, ``-1`` where none): the row of the same point one rate step lower (a horizon's
    levels, :func:`planner.horizon.model.levels_for`). The points are then priced a step at a time, lowest rate
    first, each search starting where the cap is expected from its chain (:func:`_expected_cap`): priced
    there and then outward (above when it meets, below when it misses) in steps of 1, 2, 4, … ``tolerance``
    until the verdict turns, then bisected; a cap that moved less than ``tolerance`` is found in two
    evaluations, one that moved ``k`` tolerances in ~``2 log₂ k``, where a bisection from scratch takes ~10,
    and only the points still wider than ``tolerance`` are priced in each step. A point expected more than
    two tolerances below the ceiling is not priced at the ceiling first (the search's own bound keeps it
    within ``tolerance`` below). The answer keeps the bisection's guarantee (the point meets at its cap and
    misses at most ``tolerance`` above it, both priced at its own rate: the chain only says where to look),
    but it is another number within ``tolerance`` than the bisection without ``previous`` returns, which
    ``planner solve`` keeps (its caps bit for bit)."""
    from planner.pool_latency import UnifiedRows, lane_columns, replay_wait_at, slot_tail_applies
    from planner.queueing import wait_quantile_many
    from planner.ttft_mixture import queue_tail_params

    ttft_t = points["ttft_target_ms"].to_numpy(float)
    # the points fed by a replayed log, their curve and service rate, and their lane seconds per busy second (docstring):
    # found once here, so that every pricing of the caps loops over these points only
    curves: dict[int, tuple[np.ndarray, float]] = {}
    fed = np.zeros(len(points), dtype=bool)
    lane_per_work = np.full(len(points), math.nan)
    if replay is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            lane_per_work = lane_columns(points)[0] / points["instance_seconds_per_request"].to_numpy(float)
        curves = {i: got for i, got in enumerate(replay) if got is not None and math.isfinite(float(lane_per_work[i]))}
        fed[list(curves)] = True
    every = np.arange(len(points))
    slot_load = busy_peak if slot_busy is None else np.asarray(slot_busy, dtype=float)
    rows = UnifiedRows(points)

    def pool_and_slot_wait(rho: np.ndarray, on: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]:
        """The latency group's pool ``n(ρ)``, the slot wait quantile (ms) of the points ``on`` at cap ``rho``, its
        tail ``(C, θ)`` (θ per second, :func:`planner.ttft_mixture.queue_tail_params`) and whether the wait is the bursts'
        (no router choice of lane state then: :func:`planner.pool_latency.bursty_pools`)."""
        n_rho = np.maximum(1.0, np.ceil(busy_peak[on] / rho - 1e-9))  # the latency group's pool at cap ρ
        servers = np.maximum(1.0, np.ceil(slot_load[on] - 1e-9)) * batch[on]  # slots: the nominal n0, as the full-batch cap
        arrivals = rho * servers / service_s[on]
        slot_ms = 1e3 * np.asarray(wait_quantile_many(quantile[on], arrivals, servers, service_s[on],
                                                      service_cv[on], arrival_cv[on]), dtype=float)
        c_w, theta_w = queue_tail_params(servers, arrivals, service_s[on], service_cv[on], arrival_cv[on])
        burst = np.zeros(on.size, dtype=bool)
        for j in np.flatnonzero(fed[on]):  # the log's bursts in the lanes at the cap (docstring): the larger wait, its tail
            i = int(on[j])
            burst_ms = replay_wait_at([curves[i]], float(rho[j] * lane_per_work[i]), float(quantile[i]), lanes=True)[0]
            if burst_ms > 0 and burst_ms >= slot_ms[j]:
                # the bursts' wait, added to the TTFT at load (no tail: planner.pool_latency.burst_sets_wait)
                slot_ms[j], c_w[j], theta_w[j], burst[j] = burst_ms, math.nan, math.nan, True
        return n_rho, slot_ms, (c_w, theta_w), burst

    def fits(rho: np.ndarray, on: np.ndarray) -> np.ndarray:
        """Whether each modelled point ``on`` meets both targets at cap ``rho``: its TTFT with the slot wait within the
        target (:func:`planner.pool_latency.unified_ttft_meets` through
        :func:`planner.pool_latency.unified_at_utilization_many`'s ``ttft_budget`` and ``slot_tails``: the quantile of
        their sum, or ``slot + ttft_ms ≤ target`` for a degenerate slot tail) and its per-token metric at most its target.

        The TTFT is most of the cost (:func:`planner.pool_latency.unified_at_utilization_many`), so it is
        priced only where it can decide: a row whose per-token metric misses its target, or (a degenerate slot tail)
        whose slot wait alone exceeds the TTFT target, fails whatever its TTFT (``slot + own ≥ slot`` in floating
        point for ``own ≥ 0``, and a ``nan`` compares false; the sum rule's own exit for a slot wait alone past the
        target is inside :func:`planner.pool_latency.unified_ttft_meets`); the rows priced give the same numbers as
        when every row is priced (each row's depend on that row alone), so every verdict, and so every cap, is the
        same bit for bit."""
        n_rho, slot_ms, (c_w, theta_w), burst = pool_and_slot_wait(rho, on)
        bound = ttft_t[on] * (1 + 1e-6)
        good = np.zeros(on.size, dtype=bool)
        summed = np.array([slot_tail_applies((float(a), float(b))) for a, b in zip(c_w, theta_w, strict=True)], dtype=bool)
        with np.errstate(invalid="ignore"):
            cand = np.flatnonzero(summed | (slot_ms <= bound))  # the sum rule's rows: their own early exit (unified_ttft_meets)
        if cand.size:
            tok_lat = rows.at(on[cand], rho[cand], n_rho[cand], ttft=False)
            with np.errstate(invalid="ignore"):
                cand = cand[tok_lat["token_ms"] <= tok_lat["token_target_ms"] * (1 + 1e-6)]
        if cand.size:
            lat = rows.at(on[cand], rho[cand], n_rho[cand], token=False, ttft_budget=(slot_ms[cand], bound[cand]),
                          slot_tails=(c_w[cand], theta_w[cand]), bursty=burst[cand])
            good[cand] = lat["ttft_fits"]  # the TTFT rule's verdict (unified_ttft_meets), priced only where it decides
        return good

    n = len(points)
    out = np.full(n, np.nan)
    if not n:
        return out
    modelled = every[rows.modelled()]
    if previous is not None:
        # pricing effort per point, to share the chains between processes: a prompt within one lane iteration
        # (its TTFT from the lane-count grid) ~2x one longer than the lane (the CDF at two points)
        effort = np.where(rows.prompt_units() < 1.0, 2.0, 1.0)
        return _caps_by_chain(fits, modelled, np.asarray(previous, dtype=int), None if guess is None else np.asarray(guess, dtype=float),
                              tolerance, out, effort)
    _caps_bisected(fits, modelled, None if guess is None else np.asarray(guess, dtype=float), tolerance, out)
    if curves:
        _small_caps(fits, modelled[fed[modelled] & (out[modelled] == 0.0)], busy_peak, tolerance, out)
    return out


SMALL_CAP_INSTANCES = 10_000
"""The largest pool :func:`_small_caps` prices a cap for (``busy_peak / ρ``)."""


def _small_caps(fits: Callable[[np.ndarray, np.ndarray], np.ndarray], rows: np.ndarray, busy_peak: np.ndarray,
                tolerance: float, out: np.ndarray) -> None:
    """Caps below the bisection's ``tolerance`` for the points ``rows`` that missed at every cap it priced, into
    ``out``: a bisection of ``ln ρ`` (relative ``tolerance``) between ``tolerance`` and the cap at which the latency
    group fills :data:`SMALL_CAP_INSTANCES` instances; 0 where even that misses. A unified point fed by a replayed
    log waits ``∝`` its lanes' utilisation at a trickle (:func:`planner.workload.replay_wait.max_utilization`), so
    its cap is ``∝`` the rate — enterprise-chat at ``rate_multiplier`` 10⁻⁹ got 0 from the bisection and no shared
    plan."""
    floor = np.log(np.maximum(busy_peak[rows] / SMALL_CAP_INSTANCES, 1e-300)) if rows.size else np.zeros(0)
    keep = floor < math.log(tolerance)
    rows, lo = rows[keep], floor[keep]
    if not rows.size:
        return
    good = fits(np.exp(lo), rows)
    rows, lo = rows[good], lo[good]
    hi = np.full(rows.size, math.log(tolerance))
    while rows.size and float(np.max(hi - lo)) > math.log1p(tolerance):
        mid = 0.5 * (lo + hi)
        ok = fits(np.exp(mid), rows)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    out[rows] = np.exp(lo)


def _caps_bisected(fits: Callable[[np.ndarray, np.ndarray], np.ndarray], modelled: np.ndarray, guess: np.ndarray | None,
                   tolerance: float, out: np.ndarray) -> np.ndarray:
    """:func:`unified_caps_at_load`'s bisection (its docstring) of the points ``modelled``, into ``out``: every point
    priced at the ceiling, then at its ``guess``, then halved together until the widest interval is within
    ``tolerance`` (a narrower one keeps being halved meanwhile: a point's cap depends on the points priced with it)."""
    from planner.queueing import UTILIZATION_CEILING

    at_top = fits(np.full(modelled.size, UTILIZATION_CEILING), modelled)
    out[modelled[at_top]] = UTILIZATION_CEILING
    on = modelled[~at_top]
    lo, hi = np.zeros(on.size), np.full(on.size, UTILIZATION_CEILING)
    if guess is not None and on.size:
        g = np.clip(guess[on], tolerance, UTILIZATION_CEILING - tolerance)
        good = fits(g, on)
        lo, hi = np.where(good, g, lo), np.where(good, hi, g)
    while on.size and float(np.max(hi - lo)) > tolerance:
        mid = 0.5 * (lo + hi)
        good = fits(mid, on)
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    out[on] = lo
    return out


PARALLEL_ROWS = 1000
"""Points from which :func:`_caps_by_chain` splits its chains over the usable cores (:func:`planner.forked.fork_map`):
below it, a fork costs more than it saves (~0.3 ms of pricing per point and evaluation)."""


def _caps_by_chain(fits: Callable[[np.ndarray, np.ndarray], np.ndarray], modelled: np.ndarray, previous: np.ndarray,
                   guess: np.ndarray | None, tolerance: float, out: np.ndarray, effort: np.ndarray) -> np.ndarray:
    """:func:`unified_caps_at_load` with ``previous`` (its docstring): the ``modelled`` points priced one rate step at a
    time (a point's step: the length of its chain of ``previous`` rows), into ``out``. The chains' first points (step
    0) are bisected together as ``planner solve`` bisects a table's points (:func:`_caps_bisected`: a horizon at the
    table's own rate has solve's caps); after them a chain's caps depend on that chain alone, so from
    :data:`PARALLEL_ROWS` points the chains are split over the usable cores (:func:`planner.forked.fork_map`; the same
    caps, bit for bit, as one process gives), each part about the same ``effort`` (per point)."""
    from planner.forked import fork_map, usable_cores

    step = np.zeros(len(out), dtype=int)
    root = np.arange(len(out))
    linked = previous >= 0
    for _ in range(len(out)):
        nxt = np.where(linked, step[np.maximum(previous, 0)] + 1, 0)
        if np.array_equal(nxt, step):
            break
        step = nxt
        root = np.where(previous[root] >= 0, previous[root], root)
    # the chains' first points (no lower rate) all together, as planner solve prices a table's points (the same caps)
    _caps_bisected(fits, modelled[step[modelled] == 0], guess, tolerance, out)
    later = modelled[step[modelled] > 0]
    parts = _balanced(later, root[later], effort[later], usable_cores() if later.size >= PARALLEL_ROWS else 1)

    def priced(rows: np.ndarray) -> np.ndarray:
        return _caps_by_step(fits, rows, step, previous, guess, tolerance, out.copy())[rows]

    for rows, caps in zip(parts, fork_map(priced, parts), strict=True):
        out[rows] = caps
    return out


def _balanced(rows: np.ndarray, chain: np.ndarray, work: np.ndarray, bins: int) -> list[np.ndarray]:
    """``rows`` in at most ``bins`` parts, whole chains (``chain``: each row's chain) per part, the chains with most
    ``work`` (summed over their rows) first into the part with least."""
    if bins <= 1 or not rows.size:
        return [rows]
    ids, where = np.unique(chain, return_inverse=True)
    where = where.ravel()
    size = np.bincount(where, weights=work, minlength=ids.size)
    load = np.zeros(bins)
    part_of = np.zeros(ids.size, dtype=int)
    for j in np.argsort(-size, kind="stable"):
        part_of[j] = b = int(np.argmin(load))
        load[b] += float(size[j])
    which = part_of[where]
    return [rows[which == b] for b in range(bins) if (which == b).any()]


def _caps_by_step(fits: Callable[[np.ndarray, np.ndarray], np.ndarray], rows: np.ndarray, step: np.ndarray,
                  previous: np.ndarray, guess: np.ndarray | None, tolerance: float, out: np.ndarray) -> np.ndarray:
    """The caps of ``rows`` (whole chains after their first points, whose caps ``out`` holds), one rate step at a time,
    into ``out`` (:func:`_caps_by_chain`)."""
    from planner.queueing import UTILIZATION_CEILING

    for k in range(1, int(step[rows].max()) + 1 if rows.size else 0):
        on = rows[step[rows] == k]
        if not on.size:
            continue
        near = _expected_cap(out, previous, on, guess)
        # the ceiling is priced first unless the chain puts the cap more than two tolerances below it
        top = np.flatnonzero(~(near < UTILIZATION_CEILING - 2.0 * tolerance))
        if top.size:
            at_top = fits(np.full(top.size, UTILIZATION_CEILING), on[top])
            out[on[top[at_top]]] = UTILIZATION_CEILING
            keep = np.ones(on.size, dtype=bool)
            keep[top[at_top]] = False
            on, near = on[keep], near[keep]
        if on.size:
            out[on] = _caps_near(fits, on, near, None if guess is None else guess[on], tolerance)[0]
    return out


def _expected_cap(caps: np.ndarray, previous: np.ndarray, on: np.ndarray, guess: np.ndarray | None = None) -> np.ndarray:
    """Where the caps of the points ``on`` are expected from the caps of their chains one and two rate steps lower
    (``nan`` without a chain): rising caps close their distance to the ceiling ``C`` by about the same ratio every
    ×1.5 rate step (0.057, 0.041, 0.029, … below ``C`` on the 162-client fleet), so ``C − g₂²/g₁`` from the last two
    distances ``g``; else the last cap — moved, where the chain has one cap only and ``guess`` is given, by as much as
    the points' full-batch caps (``guess``) moved from that step. Only where a search starts: the cap itself is priced."""
    from planner.queueing import UTILIZATION_CEILING

    p1 = previous[on]
    last = np.where(p1 >= 0, caps[np.maximum(p1, 0)], np.nan)
    p2 = np.where(p1 >= 0, previous[np.maximum(p1, 0)], -1)
    before = np.where(p2 >= 0, caps[np.maximum(p2, 0)], np.nan)
    g1, g2 = UTILIZATION_CEILING - before, UTILIZATION_CEILING - last
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = (g2 < g1) & (g2 > 0)
        expected = np.where(rising, UTILIZATION_CEILING - g2 * np.where(rising, g2 / g1, 1.0), last)
        if guess is not None:
            one = (p1 >= 0) & (p2 < 0)
            moved = last + guess[on] - guess[np.maximum(p1, 0)]
            expected = np.where(one & np.isfinite(moved), np.clip(moved, 0.0, UTILIZATION_CEILING), expected)
        return expected


def _caps_near(fits: Callable[[np.ndarray, np.ndarray], np.ndarray], on: np.ndarray, near: np.ndarray,
               guess: np.ndarray | None, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`unified_caps_at_load`'s search from where each cap is expected (``near``, ``nan``: unknown, then from
    ``guess`` as the bisection), its docstring: per point of ``on``, ``(lo, hi)`` with ``hi − lo ≤ tolerance``, the point
    priced meeting at ``lo`` (or ``lo`` = 0, never priced) and missing at ``hi`` (or ``hi`` = the ceiling, never priced
    here); ``lo`` is the cap. Each step prices only the points whose interval is still wider than ``tolerance``.
    ``fits(rho, rows)`` prices ``rows`` (indices into the points) at ``rho``."""
    from planner.queueing import UTILIZATION_CEILING

    lo, hi = np.zeros(on.size), np.full(on.size, UTILIZATION_CEILING)

    def probe(x: np.ndarray, at: np.ndarray) -> np.ndarray:
        good = fits(x, on[at])
        lo[at[good]], hi[at[~good]] = x[good], x[~good]
        return good

    step = tolerance * (1.0 - 1e-9)  # a neighbour one tolerance away closes the interval despite rounding
    has = np.isfinite(near) & (near > 0)
    at = np.flatnonzero(has)
    if at.size:
        up = probe(np.clip(near[at], step, UTILIZATION_CEILING - step), at)
        # outward from there in steps of 1, 2, 4, ... tolerances while the verdict holds (a cap that moved k
        # tolerances costs ~2 log2 k evaluations), then the bisection of the last step
        width = np.full(at.size, step)
        while at.size:
            x = np.where(up, lo[at] + width, hi[at] - width)
            inside = (x > lo[at]) & (x < hi[at])
            at, up, width, x = at[inside], up[inside], width[inside], x[inside]
            if not at.size:
                break
            held = probe(x, at) == up
            at, up, width = at[held], up[held], 2.0 * width[held]
    at = np.flatnonzero(~has)
    if guess is not None and at.size:
        probe(np.clip(guess[at], tolerance, UTILIZATION_CEILING - tolerance), at)
    while True:
        at = np.flatnonzero(hi - lo > tolerance)
        if not at.size:
            return lo, hi
        probe(0.5 * (lo[at] + hi[at]), at)


def pool_n_max(points: pd.DataFrame, pools: pd.DataFrame) -> np.ndarray:
    """Big-M of each pool (the upper bound of its instance count ``n_p``; row order of ``pools``).

    Every routable point of the pool sent there at share 1, plus one instance of slack:

    ``N_p = max(⌈Σ_{d,e} max_{i ∈ I_p(d,e)} λ^peak_d τ_i / ρ_i⌉, ⌈Σ_d max_{i ∈ I_p(d)} λ^peak_d κ_i h_i / K_p⌉) + 1``

    with ``I_p(d, e)`` the points of pool ``p`` serving demand row ``d``, split by ``e`` = inline
    encode (roles ``encode_prefill`` / ``encode_unified``) or not: an inline encode point's load adds to
    its bucket's prefill / unified load in the same pool, so one maximum is taken per ``(d, e)`` and they
    are summed. The KV term (``kv_peak_coef = λ^peak κ h``, bytes) counts only where the pool's KV
    capacity ``K_p = pools.kv_capacity_bytes`` is positive (NaN / 0: a measured row, no KV constraint).
    Procurement limits are constraints, not bounds (the diagnosis relaxes them). ``points`` needs
    ``pool``, ``d``, ``role``, ``load_peak_coef``, ``kv_peak_coef``; a pool without points gets 2 (⌈1e-9⌉ + 1).

    The one definition :func:`prepare` and the sweeps' re-preparation
    (:meth:`planner.optimize.resolve.Resolver.reprepare`, :func:`planner.optimize.resolve.apply_cap_factors`)
    use: the two had drifted apart once (the multimodal example's shared pools got a smaller big-M in
    the sweep than in ``solve``, and a dearer re-optimum)."""
    inline = points["role"].isin(["encode_prefill", "encode_unified"]).rename("inline")
    per_d = points.groupby([points["pool"], points["d"], inline])["load_peak_coef"].max().groupby(level=0).sum()
    n_load = np.ceil(per_d.reindex(pools["pool"]).fillna(0.0).to_numpy(float) + 1e-9)
    kvcap = np.nan_to_num(pools["kv_capacity_bytes"].to_numpy(float), nan=0.0)
    kv = points.groupby(["pool", "d"])["kv_peak_coef"].max().groupby(level=0).sum().reindex(pools["pool"]).fillna(0.0).to_numpy(float)
    with np.errstate(invalid="ignore"):
        n_kv = np.where(kvcap > 0, np.ceil(kv / np.where(kvcap > 0, kvcap, 1.0) + 1e-9), 0.0)
    n = (np.maximum(n_load, n_kv) + 1).astype(int)
    if CLOSED_COLUMN in pools.columns:  # a configuration the loop's reroute closed (planner.optimize.tighten, step 8)
        n = np.where(pools[CLOSED_COLUMN].to_numpy(bool), 0, n)
    return n


CLOSED_COLUMN = "closed"
"""Optional ``pools`` column: True for a pool whose instances are bounded to 0 (its big-M, :func:`pool_n_max`)."""


def prepare(tables: CapacityTables, *, max_utilization: float | None = None) -> Prepared:
    """Index the feasible points, attach demand, compute caps and per-pool bounds."""
    tables.check_columns()
    demand = tables.demand.reset_index(drop=True).copy()
    demand["d"] = np.arange(len(demand))
    demand["model"] = _model_column(demand)
    keyed = demand[["service", "bucket", "d", "model", "rate_peak_per_s", "rate_mean_per_s",
                    "input_tokens_mean", "output_tokens_mean", "interarrival_cv",
                    "ttft_quantile", "ttft_target_ms", "tpot_quantile", "tpot_target_ms",
                    *[c for c in (*DEMAND_LATENCY_COLUMNS, LATENCY_GROUP_COLUMN, *BURST_TABLE_COLUMNS, LENGTH_MIX_COLUMN)
                      if c in tables.demand.columns]]]
    pts = tables.points.merge(keyed, on=["service", "bucket"], how="inner", validate="many_to_one")
    feasible_mask = pts["feasible"].astype(bool) & (pts["instance_seconds_per_request"] > 0)
    infeasible = pts[~feasible_mask].reset_index(drop=True)
    pts = pts[feasible_mask].reset_index(drop=True)
    rho, method = utilization_caps(encode_split_ttft(pts, tables.demand), max_utilization=max_utilization)
    pts["rho"] = rho
    pts = pts[pts["rho"] > 0].reset_index(drop=True)
    pts["pool"] = [pool_key(ENCODE_HOST.get(r, r), c, m) for r, c, m in zip(pts["role"], pts["config"], pts["model"], strict=True)]
    # Peak instance-load coefficient per unit share: lambda_peak * tau / rho (instances).
    pts["load_peak_coef"] = pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / pts["rho"]
    pts["load_mean_coef"] = pts["rate_mean_per_s"] * pts["instance_seconds_per_request"]
    # KV residence: a request holds kv_bytes for its decode time out_mean * TPOT, the MEAN TPOT (Little's
    # law: sequences held = rate x mean residence). A unified point's ``tpot_ms`` is its TPOT at the
    # target's quantile (p99: the chunk-carrying steps' tail), ``tpot_mean_ms`` its mean; using the
    # quantile held ~5-10 % more KV than the point's own batch carries (issue 25 item 2).
    tpot_mean = pts["tpot_mean_ms"].to_numpy(float) if "tpot_mean_ms" in pts.columns else np.full(len(pts), np.nan)
    tpot_hold = np.where(np.isfinite(tpot_mean) & (tpot_mean > 0), np.minimum(tpot_mean, pts["tpot_ms"].to_numpy(float)),
                         pts["tpot_ms"].to_numpy(float))
    pts["kv_hold_s"] = np.where(pts["role"].isin(["prefill", *ENCODE_HOST]), 0.0, pts["output_tokens_mean"] * tpot_hold / 1e3)
    pts["kv_peak_coef"] = pts["rate_peak_per_s"] * pts["kv_bytes_per_request"] * pts["kv_hold_s"]
    pts["i"] = np.arange(len(pts))

    rows = []
    has_kvcap = "kv_capacity_bytes" in pts.columns
    for pool, grp in pts.groupby("pool", sort=True):
        first = grp.iloc[0]
        role = str(pool).split(":", 1)[0]
        own = grp[~grp["role"].isin(list(ENCODE_HOST))] if len(grp) else grp  # inline encode rows hold no KV
        kvcap = float(np.nan_to_num(own["kv_capacity_bytes"].min(), nan=0.0)) if has_kvcap and len(own) else 0.0  # NaN: a measured row
        rows.append({
            "pool": pool, "role": role, "config": str(first["config"]), "device": str(first["device"]), "tp": int(first["tp"]),
            "model": str(first["model"]), "n_max": 0, "kv_capacity_bytes": kvcap,
            "sends_kv": role in ("prefill", "decode", "encode"),  # an encode pool sends embeddings
        })
    pools = pd.DataFrame(rows, columns=["pool", "role", "config", "device", "tp", "model", "n_max", "kv_capacity_bytes", "sends_kv"])
    pools["n_max"] = pool_n_max(pts, pools)
    device_types = sorted(pools["device"].unique().tolist()) if len(pools) else []
    procurement: dict[str, float] = {}
    if len(tables.configs):
        for dev, grp in tables.configs.groupby("device"):
            lim = float(grp["procurement_limit"].min())
            if math.isfinite(lim):
                procurement[str(dev)] = lim
    prepared = Prepared(tables=tables, demand=demand, points=pts, pools=pools, device_types=device_types,
                        procurement=procurement, caps_method=method, infeasible_points=infeasible,
                        max_utilization=None if max_utilization is None else float(max_utilization))
    # --- tool execution phase (planner.agents): KV policies during tool waits, CPU pool, KV tier ---
    if tables.agents is not None:
        from planner.agents.prep import prepare_tool_phase

        prepared.tool = prepare_tool_phase(prepared, tables.agents)
    return prepared
