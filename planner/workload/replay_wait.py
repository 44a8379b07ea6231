"""The queueing wait a log's own bursts cause at a pool's utilisation (issue 24 item 3).

Why. A pool is priced as a G/G/c queue whose arrivals have the log's inter-arrival CV
(:mod:`planner.queueing`): Erlang C decides whether a request waits and the CV only scales how long.
At many servers and moderate load Erlang C is ~0 whatever the CV, while a replayed log's bursts —
code-completion-8b's Azure code trace holds 185 requests in 3 s of a 3 req/s log — arrive faster than
the pool drains: its 38-instance prefill pool at 36 % utilisation waited p99 0 ms analytic against
208 ms simulated (the peak simulation replays the same bursts, :mod:`planner.simulate.arrivals`).

The model. The peak simulation plays a log's *peak-like* windows (those with at least
:data:`PEAK_LIKE_SHARE` of the busiest window's count) end to end, each time-scaled to the planned
peak rate ``λ`` (:func:`peak_window_times`). Over those arrivals a pool of ``c`` servers of mean
service ``s`` at utilisation ``u = λ s / c`` is taken as one work-conserving server of speed ``c``
(a fluid pool): the backlog an arrival finds, in seconds,

    V_n = max(0, V_{n−1} + s / c − (t_n − t_{n−1})),

is its wait. With ``x_n = λ (t_n − t_{n−1})`` (gaps in mean gaps) this is ``λ V_n = max(0, λ V_{n−1}
+ u − x_n)``: the normalised wait depends on ``u`` and the log's burst shape only — not on ``c``,
``s`` or ``λ`` apart. So one curve per log (:func:`replay_wait_curve`: quantiles of ``λ V`` over
:data:`U_GRID`, computed once from the arrivals at rate 1) gives every pool's wait as ``Q_q(u) / λ``,
``λ`` the service's peak rate. Random thinning (a pool carrying some buckets, or a share of them)
keeps the burst shape: at the same ``u`` the wait is the same in seconds.

How approximate (``/tmp``-free check: the exact FCFS ``c``-server queue with deterministic service
over the same replayed arrivals). code-completion's log at 241 req/s, ``s`` = 57.3 ms: ``c`` = 38
(u 0.36) p99 199 ms fluid against 195 exact and 208 simulated (the simulator's prefill pool, service
CV 0.74); ``c`` = 30 (u 0.46) 351 against 344; ``c`` = 50 (u 0.28) 94 against 87; thinned to a half
(``c`` = 19) 217 against 209, to a quarter (``c`` = 10) 241 against 233. The fluid pool ignores that a
request needs a server of its own for ``s``: for a Poisson log it is M/D/1 at speed ``c``, far below
Erlang C's wait near saturation at small ``c``, so a pool's wait is the larger of the two
(:mod:`planner.pool_latency`), never their sum. It is the prefill pool's model (one request per
server, ``s`` short against a burst), and a unified pool's chunked-prefill lanes' (one prompt at a time
per instance, held ``lane_service_ms``; ``u`` the lanes' utilisation): code-completion's shared plan on
13 / 14 / 15 H100 tp4 waits p99 240 / 196 / 163 ms by the curve against the lanes' own model's 51 / 48 /
48 ms, and its top latency group's p99 TTFT came out 294 / 281 / 274 ms analytic against 513 / 462 /
420 ms simulated (two seeds' mean); with the bursts 534 / 397 / 364 ms (+4 / −14 / −13 %; every group
−18 % to +7 %: the fluid pools the lanes, while least-loaded lanes wait longer, the simulator's lane wait
p99 321 / 257 / 235 ms). A decode pool's slots hold a request for its whole generation, many times a
burst's length, and are not priced by it: :func:`replay_slot_table` is their model (the same replay, the FCFS queue of
``c`` slots each held for the mean output).

A shared pool's lanes (2026-12-07): their own queue law prices them under Poisson arrivals, so what the bursts add is
the backlog beyond a Poisson stream's at the same utilisation (:func:`beyond_poisson_wait_s`, against
:func:`poisson_curve`), added to the TTFT at load (:func:`planner.pool_latency.burst_sets_wait`): code-completion's
shared plan on 13 / 14 / 15 H100 tp4, top group 530 / 473 / 434 ms against 511 / 465 / 424 simulated (the whole
backlog as an independent tail: 442 ms at 13, a pass where the simulator misses). Where the peak simulation replays no
log it draws gamma renewal arrivals; :func:`renewal_curve` tabulates that stream for the lanes.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np

# the demand's burst-table columns, named in the schema (its plan validator reads them) and re-exported here
from planner.schema.capacity import RENEWAL_WAIT_COLUMN as RENEWAL_WAIT_COLUMN
from planner.schema.capacity import REPLAY_SLOT_COLUMN as REPLAY_SLOT_COLUMN
from planner.schema.capacity import REPLAY_WAIT_COLUMN as REPLAY_WAIT_COLUMN

PEAK_LIKE_SHARE = 0.5
"""Windows replayed at peak: those with at least this share of the busiest window's count."""

U_GRID = np.array([0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8,
                   0.85, 0.9, 0.93, 0.96, 0.98])
"""Utilisations the curve is tabulated at; between them linear, above the last ``∝ 1/(1 − u)`` (heavy traffic)."""

LEVELS = (0.5, 0.9, 0.99, 0.999)
"""Quantile levels of the normalised wait the curve keeps."""

MAX_REPLAY_ARRIVALS = 50_000
"""Arrivals of the replay the curve is computed over (the busiest windows first): the peak simulation itself plays
at most 40,000 (planner.verify.MAX_REQUESTS)."""

MIN_WINDOW_ARRIVALS = 11
"""A log is replayed only when its busiest aligned window holds at least this many arrivals."""


def _sorted(arrival_s: np.ndarray) -> np.ndarray:
    """The arrivals as a sorted float array (not sorted again when they already are: a log's are)."""
    t = np.asarray(arrival_s, dtype=float)
    return t if t.size < 2 or bool(np.all(t[1:] >= t[:-1])) else np.sort(t)


def _window_runs(t: np.ndarray, window_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Occupied windows of sorted arrivals ``t`` (from ``t[0]``): their ids ``floor((t − t[0]) / w)``, the index of
    each one's first arrival and its count. One pass (the window ids of sorted arrivals never decrease), no sort."""
    idx = np.floor((t - t[0]) / window_s).astype(np.int64)
    first = np.concatenate([[0], np.flatnonzero(idx[1:] != idx[:-1]) + 1])
    counts = np.diff(np.append(first, t.size))
    return idx[first], first, counts


def peak_window_times(arrival_s: np.ndarray, window_s: float, rate_per_s: float, duration_s: float,
                      *, peak_like_share: float = PEAK_LIKE_SHARE) -> np.ndarray:
    """Arrival times in ``[0, duration_s)`` replaying a log's busiest windows at ``rate_per_s``.

    The log is cut into windows of ``window_s`` aligned to its first arrival (as
    :mod:`planner.workload.arrivals` does); the *peak-like* windows — those holding at least
    ``peak_like_share`` of the busiest window's count, at least 11 arrivals — are taken
    busiest first (ties: earlier first). Window ``j`` with ``m_j`` arrivals is time-scaled by
    ``m_j / (window_s · rate_per_s)`` so that it plays at exactly the planned rate, keeping
    its burst structure (who arrives close to whom); scaled windows are laid end to end and
    cycled until ``duration_s`` is filled. Deterministic (no randomness). Cycling repeats
    the same bursts: a run longer than the peak-like windows adds no new burst patterns.
    """
    t = _sorted(arrival_s)
    if t.size < 2 or rate_per_s <= 0 or window_s <= 0 or duration_s <= 0:
        raise ValueError("need >= 2 arrivals and positive window, rate and duration")
    t = t - t[0]
    # occupied windows only, each a slice of the sorted arrivals: memory and time follow the arrivals, not the span
    wins, first, counts = _window_runs(t, window_s)
    keep = max(MIN_WINDOW_ARRIVALS, int(math.ceil(peak_like_share * counts.max())))
    order = [int(p) for p in np.argsort(-counts, kind="stable") if counts[p] >= keep]
    if not order:
        order = [int(np.argmax(counts))]
    pieces: list[np.ndarray] = []
    start = 0.0
    while start < duration_s:
        for p in order:
            tj = t[first[p]:first[p] + counts[p]] - wins[p] * window_s
            scale = tj.size / (window_s * rate_per_s)
            pieces.append(start + tj * scale)
            start += window_s * scale
            if start >= duration_s:
                break
    out = np.concatenate(pieces)
    return out[out < duration_s]


def traffic_refusal(traffic: Any) -> str:
    """Why the peak simulation would not replay a service's log, from its traffic settings alone (``""``: it would, if
    the arrivals allow, :func:`replay_refusal`): no log, an ``interarrival_cv`` override, or a log of several
    services. The one rule :func:`planner.verify.peak_arrivals_from_instance` and the demand's curve
    (:mod:`planner.capacity`) both apply."""
    if traffic.trace is None:
        return "no log"
    if traffic.interarrival_cv is not None:
        return "traffic.interarrival_cv is given"
    if traffic.columns.get("service") or traffic.service_column_value is not None:
        return "the log holds several services"
    return ""


def replay_refusal(arrival_s: np.ndarray, window_s: float) -> str:
    """Why the peak simulation would not replay these arrivals over ``window_s`` windows (``""``: it would): more
    than half of them share a timestamp (a bucketed log: replay would make artificial bursts), or the busiest aligned
    window holds fewer than :data:`MIN_WINDOW_ARRIVALS`."""
    a = _sorted(arrival_s)
    return _refusal(a, _window_runs(a, window_s)[2] if a.size else np.zeros(0, dtype=np.int64))


def _refusal(a: np.ndarray, counts: np.ndarray) -> str:
    """:func:`replay_refusal` of sorted arrivals ``a`` whose windows hold ``counts``."""
    dup = float(np.mean(np.diff(a) == 0.0)) if a.size > 1 else 1.0
    if dup > 0.5:
        return f"{dup:.0%} of its arrivals share a timestamp (bucketed log: replay would create artificial bursts)"
    if a.size < 2 or int(counts.max()) < MIN_WINDOW_ARRIVALS:
        return f"its busiest window holds fewer than {MIN_WINDOW_ARRIVALS} arrivals"
    return ""


def replay_wait_curve(arrival_s: np.ndarray, window_s: float) -> list[list[float]] | None:
    """Rows ``[u, Q_0.5, Q_0.9, Q_0.99, Q_0.999]`` over :data:`U_GRID`: the :data:`LEVELS` quantiles of the normalised
    fluid wait ``λ V`` (module docstring) over the log's replayed peak-like windows (at most
    :data:`MAX_REPLAY_ARRIVALS` arrivals, one pass, no cycling). None when the log is not replayed
    (:func:`replay_refusal`).

    ``λ V_n = S_n − min_{k ≤ n} S_k`` with ``S_n = Σ_{i < n} (u − x_{i+1})`` (Lindley's recursion unrolled), one
    cumulative sum per ``u``: memory and time follow the arrivals, never their values or span."""
    times = _replayed_once(arrival_s, window_s)
    return None if times is None else _fluid_curve(times)


def _fluid_curve(times: np.ndarray) -> list[list[float]]:
    """:func:`replay_wait_curve`'s rows over arrivals ``times`` at rate 1 (sorted, at least two)."""
    x = np.diff(times)  # gaps in mean gaps (rate 1)
    rows = []
    for u in U_GRID:
        s = np.concatenate([[0.0], np.cumsum(u - x)])
        v = s - np.minimum.accumulate(s)
        rows.append([float(u), *(float(w) for w in np.quantile(v, LEVELS))])
    return rows


def _replayed_once(arrival_s: np.ndarray, window_s: float) -> np.ndarray | None:
    """:func:`_replay_at_rate_one` of the arrivals, or None when the log is not replayed (:func:`replay_refusal`) or
    the replay holds fewer than two arrivals."""
    a = _sorted(arrival_s)
    if a.size < 2:
        return None
    counts = _window_runs(a, window_s)[2]
    if _refusal(a, counts):
        return None
    times = _replay_at_rate_one(a, counts, window_s)
    return times if times.size >= 2 else None


def _replay_at_rate_one(a: np.ndarray, counts: np.ndarray, window_s: float) -> np.ndarray:
    """The log's peak-like windows replayed once at rate 1 (times in mean gaps), at most :data:`MAX_REPLAY_ARRIVALS`
    arrivals: what :func:`replay_wait_curve` and :func:`replay_slot_table` read."""
    keep = max(MIN_WINDOW_ARRIVALS, int(math.ceil(PEAK_LIKE_SHARE * counts.max())))
    total = int(counts[counts >= keep].sum())  # one pass over the peak-like windows: at rate 1 they last `total` s
    return peak_window_times(a, window_s, 1.0, float(min(total, MAX_REPLAY_ARRIVALS)))


def slot_waits(times: np.ndarray, slots: int, hold: float) -> np.ndarray:
    """Per arrival: its wait in the FCFS queue of ``slots`` identical slots, each request holding one for exactly
    ``hold`` (the same units as ``times``, sorted) — the reference :func:`replay_slot_table`'s model is exact against.
    With equal holds the slot that frees first for request ``i`` is request ``i − c``'s, so its start is
    ``s_i = max(t_i, s_{i−c} + h)``: within each residue class ``i mod c`` a Lindley recursion, unrolled as
    ``s_i − j h = max_{k ≤ j} (t_k − k h)`` over the class's ``j``-th member — one cumulative maximum over a
    ``(⌈n / c⌉, c)`` array; memory and time follow the arrivals."""
    t = np.asarray(times, dtype=float)
    c = max(1, int(slots))
    n = t.size
    rows = -(-n // c)
    block = np.full(rows * c, np.inf)
    block[:n] = t
    a = block.reshape(rows, c)
    j = np.arange(rows, dtype=float)[:, None] * float(hold)
    with np.errstate(invalid="ignore"):
        start = np.maximum.accumulate(a - j, axis=0) + j
    return start.reshape(-1)[:n] - t


def _slot_grid(n: int) -> np.ndarray:
    """Slot counts :func:`replay_slot_table` is tabulated at: every count to 32, then steps of ``2^{1/8}`` (9 %) up to
    ``n`` (the replay's arrivals; past them the replay's cycle gives the spacing, :func:`_spacing_at`)."""
    geo = np.round(32.0 * 2.0 ** (np.arange(1, 8 * 24) / 8.0))
    grid = np.unique(np.concatenate([np.arange(1.0, 33.0), geo]))
    return grid[grid <= max(n, 1)]


def replay_slot_table(arrival_s: np.ndarray, window_s: float) -> list[list[float]] | None:
    """Rows ``[c, g_0.5, g_0.1, g_0.01, g_0.001]``: per slot count ``c`` (:func:`_slot_grid`), the lower quantiles
    at ``1 − q`` (``q`` in :data:`LEVELS`) of the spacing ``t_i − t_{i−c}`` of the log's replayed peak-like windows
    at rate 1 (in mean gaps), and a last row ``[0, span, n, 0, 0]`` (one replay's length and arrivals). None when the
    log is not replayed (:func:`replay_refusal`), or when its replay spans under 5e-7 mean gaps (arrivals at one
    instant up to 1e-300 s apart, found by the hypothesis test: a span its text would round to 0).

    The model (a decode pool's slots, held for a whole generation, many bursts long, where the fluid pool of
    :func:`replay_wait_curve` does not apply): ``c`` slots each held ``h`` by every request, FCFS. Request ``i``
    finds its slot when request ``i − c`` leaves (:func:`slot_waits`), so it waits ``W_i = max(0, h − (t_i − t_{i−c}))``
    as long as request ``i − c`` did not wait itself — below saturation, on the replays tried, exactly the recursion's
    quantiles (code-completion-8b's log, ``c`` 256–465, ``u`` 0.18–0.93: identical to the millisecond): the wait's
    ``q``-quantile is ``max(0, h − g_{1−q}(c) / λ)``, one table per log for every hold, slot count and rate. A pool
    carrying a share ``p`` of the service (a random thinning) sees ``c`` consecutive arrivals of its own in about
    ``c / p`` of the service's (:func:`slot_wait_quantile_s`).

    How approximate against the peak simulation (its decode steps slow while a burst fills the batch, and holds
    vary with the output): code-completion-8b at 241 req/s, holds 0.7 s: 310 slots p99 410 ms against 272–282 ms
    simulated, 465 slots 0 against 25 ms (one step). The replay is played twice end to end and the spacings read
    on the second pass (the simulation cycles the same windows)."""
    once = _replayed_once(arrival_s, window_s)
    return None if once is None else _slot_table(once)


def _slot_table(once: np.ndarray) -> list[list[float]] | None:
    """:func:`replay_slot_table`'s rows over one replay ``once`` at rate 1 (sorted, at least two arrivals)."""
    n = once.size
    span = float(once[-1]) + float(np.mean(np.diff(once)))
    if not round(span, 6) > 0:
        return None  # the replay spans no time the table's text (6 decimals, curve_json) can hold: no table
    times = np.concatenate([once, once + span])
    low = [1.0 - q for q in LEVELS]
    rows = []
    for c in _slot_grid(n):
        k = int(c)
        spacing = times[n:] - times[n - k:2 * n - k]
        rows.append([float(k), *(float(v) for v in np.quantile(spacing, low))])
    rows.append([0.0, span, float(n), 0.0, 0.0])
    return rows


RENEWAL_MIN_CV = 1.0
""":func:`renewal_curve` tabulates a renewal stream whose CV is above this: a burstier stream than Poisson. What a
shared pool's lanes wait is the backlog beyond a Poisson stream's (:func:`beyond_poisson_wait_s`), ~0 near Poisson:
multimodal-image (CV 1.088) plans and predicts the same to the dollar and the millisecond with its curve as without.
Tried first with the curve on every pool and only from ``c² ≥ 2``: there the fluid pool priced its own error near
Poisson (one server of speed ``c`` queues more often than ``c`` servers), multimodal-image's 3-instance prefill pool
waiting 117 → 219 ms against 43 ms simulated."""

RENEWAL_ARRIVALS = 200_000
"""Arrivals :func:`renewal_curve` draws (0.2 s, once per CV and process).
Heavy traffic has long memory: at CV 2.94 three other seeds' p99 are 0.90–1.0 of the tabulated one at ``u`` 0.65 and
0.83–0.95 at 0.8 (medians 0.97–0.94); with 50,000 arrivals 0.87–0.99 and 0.81–0.88."""

RENEWAL_SEED = 2024
"""Seed of the gamma renewal arrivals :func:`renewal_curve` tabulates (a fixed draw: the same input, the same plan)."""


@functools.lru_cache(maxsize=64)
def renewal_curve(interarrival_cv: float) -> str:
    """The demand's :data:`RENEWAL_WAIT_COLUMN` text (:func:`curve_json`) for a service whose peak simulation draws
    renewal arrivals (:func:`traffic_refusal`, :func:`replay_refusal`: no log, an ``interarrival_cv`` override, a
    bucketed log, ...) with inter-arrival CV ``c``: :func:`replay_wait_curve`'s fluid-pool curve over
    :data:`RENEWAL_ARRIVALS` arrivals of the simulator's own law at rate 1, gamma with shape ``1/c²`` and mean 1
    (:func:`planner.simulate.arrivals.synthetic_requests`; seed :data:`RENEWAL_SEED`). ``""`` at or below
    :data:`RENEWAL_MIN_CV` or for a CV that is not a finite number.

    Read for a shared pool's chunked-prefill lanes only (:func:`planner.pool_latency.replay_by_row`): their law takes
    an instance's arrivals as Poisson at most (:func:`planner.pool_latency.instance_arrival_cv`) and the slot queue's
    Erlang C is ~0 at hundreds of slots, so nothing priced the stream's bursts there — the simulator's gamma
    arrivals of CV 2.94 (long-context-assistant's Mooncake trace, bucketed to ~3 s, so not replayed) congest its 15
    MI300X tp4 lanes: top latency group p99 TTFT 12.8 s simulated against 9.7 s analytic, and 9.8–10.0 s simulated
    with Poisson arrivals. A prefill pool's G/G/c and a decode pool's slots take the CV themselves: with the curve
    (and the slot table) on them too, long-context's and long-document's disaggregated plans, already pessimistic
    (analytic over simulated −5 % / −16 %), cost 2.4 % / 3.5 % more and went −11 % / −17 %, and long-document's
    disaggregated cost at traffic ×1.2 exceeded ×1.3's by 1.9 % (tried on 2026-12-07, not kept)."""
    cv = float(interarrival_cv)
    if not (math.isfinite(cv) and cv > RENEWAL_MIN_CV):
        return ""
    shape = 1.0 / (cv * cv)
    if not shape > 0.0:  # c beyond ~1e154 (a log's CV is at most √n of its n gaps): no stream to draw
        return ""
    gaps = np.random.default_rng(RENEWAL_SEED).gamma(shape, 1.0 / shape, RENEWAL_ARRIVALS - 1)
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    if not (np.isfinite(times[-1]) and times[-1] > 0.0):
        return ""
    return curve_json(_fluid_curve(times))


@functools.lru_cache(maxsize=1)
def poisson_curve() -> np.ndarray:
    """:func:`replay_wait_curve`'s curve of a Poisson stream (exponential gaps, :data:`RENEWAL_ARRIVALS` of them, seed
    :data:`RENEWAL_SEED`): the fluid backlog a stream without bursts leaves at each utilisation, which a shared pool's
    lane law already prices (:func:`beyond_poisson_wait_s`)."""
    gaps = np.random.default_rng(RENEWAL_SEED).exponential(1.0, RENEWAL_ARRIVALS - 1)
    curve = parse_curve(curve_json(_fluid_curve(np.concatenate([[0.0], np.cumsum(gaps)]))))
    assert curve is not None
    return curve


def beyond_poisson_wait_s(curve: np.ndarray, utilization: float, rate_per_s: float, quantile: float) -> float:
    """The ``quantile`` of the bursts' fluid backlog less a Poisson stream's at the same utilisation and rate (s, at
    least 0): :func:`wait_quantile_s` of ``curve`` minus that of :func:`poisson_curve`. A shared pool's lanes are
    priced by their own queue law under Poisson arrivals (:func:`planner.pool_latency.unified_at_load`); what the
    bursts add on top is this excess, not the whole backlog, which holds the lanes' Poisson queue a second time (the
    difference of two quantiles, not the quantile of a difference: the two backlogs are of different streams)."""
    full = wait_quantile_s(curve, utilization, rate_per_s, quantile)
    base = wait_quantile_s(poisson_curve(), utilization, rate_per_s, quantile)
    return max(0.0, full - base) if math.isfinite(base) else full


def parse_slot_table(text: object) -> np.ndarray | None:
    """A slot table (:func:`replay_slot_table`) as an array, rows ``[c, g…]`` then ``[0, span, n, 0, 0]``; None for
    an empty, missing or malformed cell."""
    return _parsed(text, slots=True) if isinstance(text, str) and text else None


def _spacing_at(table: np.ndarray, slots: float) -> np.ndarray:
    """The spacing quantiles (one per level, in mean gaps) at ``slots`` consecutive arrivals: linear between the
    table's counts; past the replay's ``n`` arrivals, ``k`` whole cycles of its ``span`` plus the spacing of the rest
    (the simulation cycles the replay); below one slot, one slot's scaled down."""
    grid, g = table[:-1, 0], table[:-1, 1:]
    span, n = float(table[-1, 1]), float(table[-1, 2])
    c = float(slots)
    if not math.isfinite(c):
        return np.full(g.shape[1], math.inf)
    cycles = 0.0
    if c > n:
        cycles = math.floor(c / n)
        c -= cycles * n
    if c < grid[0]:
        base = g[0] * (c / grid[0]) if c > 0 else np.zeros(g.shape[1])
    elif c >= grid[-1]:
        # between the last tabulated count and a whole cycle: linear towards the cycle's span
        f = 0.0 if n <= grid[-1] else (c - grid[-1]) / (n - grid[-1])
        base = (1.0 - f) * g[-1] + f * span
    else:
        base = np.array([float(np.interp(c, grid, g[:, j])) for j in range(g.shape[1])])
    return cycles * span + base


def slot_level_waits_s(table: np.ndarray, slots_eff: float, hold_s: float, rate_per_s: float) -> np.ndarray:
    """The slot wait (s) at each of :data:`LEVELS`: ``max(0, h − g_{1−q}(c) / λ)`` with ``c`` the effective slots
    (the pool's slots over its share of the service) and ``λ`` the service's peak rate."""
    if not (rate_per_s > 0 and hold_s > 0):
        return np.zeros(len(LEVELS))
    return np.maximum(0.0, hold_s - _spacing_at(table, slots_eff) / rate_per_s)


def slot_wait_quantile_s(table: np.ndarray, slots_eff: float, hold_s: float, rate_per_s: float, quantile: float) -> float:
    """The slot wait at ``quantile`` (s): exact at the table's levels (:func:`slot_level_waits_s`), linear in
    ``ln(1 − q)`` between them (an exponential tail; a step where two levels wait alike), the last two levels' slope
    past them, the first level's wait below it."""
    w = slot_level_waits_s(table, slots_eff, hold_s, rate_per_s)
    x = -np.log1p(-np.array(LEVELS))
    xq = -math.log1p(-min(max(float(quantile), 0.0), 1.0 - 1e-12))
    if xq <= x[0]:
        return float(w[0])
    if xq >= x[-1]:
        return float(w[-1] + max(0.0, w[-1] - w[-2]) * (xq - x[-1]) / (x[-1] - x[-2]))
    return float(np.interp(xq, x, w))


def slots_needed(table: np.ndarray, hold_s: float, rate_per_s: float, quantile: float, budget_s: float) -> float:
    """The fewest effective slots whose :func:`slot_wait_quantile_s` stays within ``budget_s`` (bisection on the
    slots: every spacing grows with them); ``0`` when no hold outlasts the budget."""
    def ok(c: float) -> bool:
        return slot_wait_quantile_s(table, c, hold_s, rate_per_s, quantile) <= budget_s
    if hold_s <= max(budget_s, 0.0) or ok(0.0):
        return 0.0
    lo, hi = 0.0, max(1.0, float(table[-1, 2]))
    while not ok(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e15:
            return math.inf
    while hi - lo > 1e-3 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def max_slot_occupancy(table: np.ndarray, hold_s: float, rate_per_s: float, quantile: float, budget_s: float,
                       *, ceiling: float = 0.999) -> float:
    """The largest slot occupancy ``u = p λ h / c`` of a pool carrying a share ``p`` of the service at which its slot
    wait stays within ``budget_s``: ``λ h / C`` with ``C`` the effective slots :func:`slots_needed` (the pool's ``c / p``
    must reach it), whatever the pool's size; ``ceiling`` where no slot count waits longer."""
    need = slots_needed(table, hold_s, rate_per_s, quantile, budget_s)
    if need <= 0.0:
        return ceiling
    if not math.isfinite(need):
        return 0.0
    return min(ceiling, rate_per_s * hold_s / need)


def curve_json(curve: list[list[float]] | None) -> str:
    """The demand column's text of a curve or a slot table (:func:`replay_slot_table`; ``""`` for none)."""
    return json.dumps([[round(c, 6) for c in row] for row in curve]) if curve else ""


def parse_curve(text: object) -> np.ndarray | None:
    """The curve of a demand / point cell, rows ``[u, Q at each level]`` (read-only: one parse per text is shared by
    every point and check that reads it); None for an empty or missing cell."""
    return _parsed(text, slots=False) if isinstance(text, str) and text else None


@functools.lru_cache(maxsize=128)
def _parsed(text: str, *, slots: bool) -> np.ndarray | None:
    """The read-only array of a curve's or (``slots``) a slot table's text, None when malformed: both have rows of
    ``1 + len(LEVELS)`` values, at least two; a slot table's counts rise from 1 and its last row is ``[0, span > 0,
    n ≥ 1, …]``."""
    arr = np.asarray(json.loads(text), dtype=float)
    ok = arr.ndim == 2 and arr.shape[0] >= 2 and arr.shape[1] == 1 + len(LEVELS)
    if ok and slots:
        ok = (arr[-1, 0] == 0.0 and arr[-1, 1] > 0 and arr[-1, 2] >= 1 and bool(np.all(np.diff(arr[:-1, 0]) > 0))
              and arr[0, 0] >= 1)
    if not ok:
        return None
    arr.setflags(write=False)
    return arr


def tail_quantile_s(erlang_c: float, decay_per_s: float, quantile: float) -> float:
    """The ``quantile`` of a wait whose tail is ``min(1, C e^{−θ t})`` (s): 0 when ``C ≤ 1 − q``, ``inf`` when
    ``θ = 0`` (a saturated queue)."""
    if erlang_c <= 1.0 - quantile:
        return 0.0
    if not decay_per_s > 0:
        return math.inf
    if not math.isfinite(decay_per_s):
        return 0.0
    return math.log(erlang_c / (1.0 - quantile)) / decay_per_s


def _at_u(curve: np.ndarray, u: float) -> np.ndarray:
    """The normalised wait quantiles (one per level) at utilisation ``u``: linear between grid points, ``∝ u``
    below the first, ``∝ 1/(1 − u)`` above the last (the heavy-traffic growth of any queue's wait), ``inf`` at 1."""
    grid, q = curve[:, 0], curve[:, 1:]
    if u >= 1.0:
        return np.full(q.shape[1], math.inf)
    if u <= grid[0]:
        return q[0] * max(u, 0.0) / grid[0]
    if u >= grid[-1]:
        return q[-1] * (1.0 - grid[-1]) / (1.0 - u)
    return np.array([float(np.interp(u, grid, q[:, j])) for j in range(q.shape[1])])


def tail_params(curve: np.ndarray, utilization: float, rate_per_s: float, quantile: float) -> tuple[float, float]:
    """``(C, θ per s)`` of the exponential tail ``P(W > t) = min(1, C e^{−θ t})`` through the curve's two levels around
    ``quantile`` at ``utilization`` (the service's peak ``rate_per_s``): exact at both, so at the SLO quantile when it
    is one of :data:`LEVELS`. ``(1, 0)`` at or above saturation, ``(0, inf)`` for no wait at all."""
    if not (rate_per_s > 0 and utilization < 1.0):
        return 1.0, 0.0
    w = _at_u(curve, utilization) / rate_per_s
    lv = np.array(LEVELS)
    j = int(np.clip(np.searchsorted(lv, quantile), 1, len(lv) - 1))
    (l1, l2), (w1, w2) = lv[j - 1:j + 1], w[j - 1:j + 1]
    if not math.isfinite(w2):
        return 1.0, 0.0
    if w2 <= 0.0:
        return 0.0, math.inf
    if w2 <= w1:
        return 1.0 - l2, math.inf  # the tail's mass sits at w2: no decay to fit (a step)
    theta = math.log((1.0 - l1) / (1.0 - l2)) / (w2 - w1)
    return float((1.0 - l2) * math.exp(theta * w2)), float(theta)


def wait_quantile_s(curve: np.ndarray, utilization: float, rate_per_s: float, quantile: float) -> float:
    """The wait at ``quantile`` (s) of a pool at ``utilization`` fed by the service's bursts at ``rate_per_s``
    (:func:`tail_params`' exponential through the curve; exact at the curve's levels)."""
    return tail_quantile_s(*tail_params(curve, utilization, rate_per_s, quantile), quantile)


def max_utilization(curve: np.ndarray, rate_per_s: float, quantile: float, budget_s: float, *, ceiling: float = 0.999,
                    tolerance: float = 1e-4) -> float:
    """The largest utilisation whose :func:`wait_quantile_s` stays within ``budget_s`` (bisection: the fluid wait grows
    with ``u`` on every path); 0 when the budget is negative, ``ceiling`` when the fullest pool does not wait longer.
    Below the curve's first utilisation ``u₀`` the wait is ``∝ u`` (:func:`_at_u`), so a budget it exceeds there gives
    ``u₀ · budget / wait(u₀)`` exactly, however small: a trickle of traffic whose log holds simultaneous arrivals
    (``wait ≈ k s / c`` for ``k`` at once, whatever the rate) gets the pool that clears them, not a cap of 0 (which
    dropped every prefill point of enterprise-chat at ``rate_multiplier`` 10⁻⁹)."""
    def ok(u: float) -> bool:
        return wait_quantile_s(curve, u, rate_per_s, quantile) <= budget_s
    if budget_s < 0:
        return 0.0
    u0 = float(curve[0, 0])
    at_u0 = wait_quantile_s(curve, u0, rate_per_s, quantile)
    if at_u0 > budget_s:
        return u0 * budget_s / at_u0 if math.isfinite(at_u0) else 0.0
    if ok(ceiling):
        return ceiling
    lo, hi = u0, ceiling
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
