"""A TTFT quantile of a length mixture, not of its longest request (issue 24 item 0).

A p``q`` TTFT target is a statement about the service's requests:
``P(TTFT > T) = sum_s v_s P(TTFT_s > T) <= 1 - q`` over the length classes ``s`` (shares ``v_s``).
Before, a prefill pool was held at ``t_rep + W_q <= T``: every request of a latency group charged
the prefill time ``t_rep`` of the group's representative (its longest prompt outside the
service's length tail, :mod:`planner.workload.buckets` item 2) plus the queue's ``q``-quantile
wait. For a group of short and long prompts (long-context-assistant's top group: 17k–123k-token
prompts, sub-bin prefill times 0.8…9.9 s) that plans every prompt as the longest.

The mixture condition (this module). A prefill point carries its sub-bins' TTFTs
(``ttft_mix``, :func:`planner.capacity.mix_work`: each fine sub-bin of the bucket's length mix,
:mod:`planner.workload.buckets` item 5, at its own representative prompt on the same device, never
above the bucket's own point's TTFT). With the queue's wait tail ``P(W > t)``, a request of
sub-bin ``s`` misses when ``W > T − t_s``, so the group misses with probability

    m(T) = sum_s v_s P(W > T − t_s),   P(W > t) = 1 for t < 0,  C·exp(−(cμ − λ) t / k) for t ≥ 0

(the Erlang-C / Allen–Cunneen tail of :func:`planner.queueing.wait_tail_probability`, the same
form whose quantile every cap and check uses), and the group's TTFT ``q``-quantile is the ``X``
with ``m(X) = 1 − q`` (:func:`mixture_quantile_ms`, with the decode wait and encode time of a
bucket added to its requests as before). The utilisation cap of a prefill point is the largest
``ρ`` of its latency group's queue with ``m(T) ≤ 1 − q`` (:func:`mixture_caps`).

**Never stricter than the representative rule**: every ``t_s ≤ t_rep``, so
``m(t_rep + W_q) ≤ P(W > W_q) ≤ 1 − q``: the mixture quantile is at most ``t_rep + W_q`` and the cap
at least the representative's. Both rules leave out the service's length tail set the same way
(buckets item 2: at most ``2 (1 − r)`` of requests), so the analytic guarantee is unchanged in
kind — the queueing tail is now spent over the mix instead of at its longest prompt.

**Where it does not apply.** The input tail is counted in the group that holds it, as certain misses: a
group whose tail share ``τ_g`` exceeds ``1 − q`` misses more than allowed at any load, so its cap and
its figure stay the representative rule's (``max`` / ``min`` with it). With the default
``representative_quantile`` 0.995 the service's 0.5 % input tail lies in the top of its 4 latency groups
(``τ ≈ 2 %`` of that group's requests): at a p99 target the mixture relieves the three lower groups and the
top group keeps the representative rule (long-context-assistant's b3: 14,381 ms either way; its b2 5,766 →
4,986 ms at the same pools). Counting the tail once for the service (its 0.5 % against the service's 1 %,
the groups' budgets coupled) would let the top group use it too: not built. The verify-and-tighten loop
(:mod:`planner.optimize.latency`) sizes a group that misses by the representative rule's budget (it may
over-tighten; the relax step and the refinement take back what is not needed).

**Approximations**, stated: (1) each sub-bin's requests are taken at its representative (the
longest of its 1/32 of the service, outside the tail set): conservative inside it; (2) a request's
wait is independent of its own length (FCFS: true for the wait before service); (3) the decode wait
is added at its own quantile, as before (a sum of quantiles: conservative); (4) unified (shared)
pools are not touched: their TTFT at load comes from the chunked-prefill lane model
(:func:`planner.pool_latency.unified_at_load`), which takes a bucket's prompt at its *mean* length
(``prefill_tokens`` of :func:`planner.capacity.bucket_work`; the group's mean in the caps,
:func:`planner.optimize.prepare.group_point`) behind the lane queue of the bucket mix, not per sub-bin —
its own approximation, neither the representative rule nor this one, with the pool's slot wait summed into that
law as an independent variable (:func:`planner.pool_latency.slot_sum_quantile_s`); on the examples its p99 TTFT is
above the simulator's: enterprise-chat 949 against 671 ms, long-context-assistant 7,401 against 5,540.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

from planner.workload.replay_wait import tail_params as replay_tail
from planner.workload.replay_wait import tail_quantile_s

MIX_TOLERANCE = 1e-9
"""Relative slack on ``m(T) <= 1 − q`` (rounding of the sums)."""


def mix_text(shares: Sequence[float] | np.ndarray, ttft_ms: Sequence[float] | np.ndarray) -> str:
    """The ``ttft_mix`` cell of a prefill point: JSON ``[[share, ttft_ms], ...]``, shares summing to 1."""
    w = np.asarray(shares, dtype=float)
    w = w / w.sum()
    return json.dumps([[float(a), float(b)] for a, b in zip(w, np.asarray(ttft_ms, dtype=float), strict=True)])


def parse_mix(raw: object) -> tuple[np.ndarray, np.ndarray] | None:
    """A ``ttft_mix`` cell as (shares, TTFT ms); ``None`` when absent, empty or malformed. A TTFT of ``inf`` (JSON
    ``Infinity``) is a request no target covers (the input tail, :func:`planner.capacity.ttft_mix_text`)."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        pairs = json.loads(raw)
        arr = np.asarray(pairs, dtype=float).reshape(-1, 2)
    except (ValueError, TypeError):
        return None
    if not len(arr) or not np.isfinite(arr[:, 0]).all() or np.isnan(arr[:, 1]).any() or (arr[:, 1] < 0).any() or (arr[:, 0] < 0).any():
        return None
    top = float(arr[:, 0].max())
    if not top > 0:
        return None
    shares = arr[:, 0] / top  # scaled first: a sum of shares near the float limit would overflow to inf
    return shares / shares.sum(), arr[:, 1]


def wait_tail(t_s: np.ndarray, erlang_c: np.ndarray, decay_per_s: np.ndarray) -> np.ndarray:
    """``P(W > t)`` of the Erlang-C / Allen–Cunneen tail, broadcast: 1 for ``t < 0``; else
    ``C·exp(−θ t)`` with ``θ = (cμ − λ)/k`` (``decay_per_s``; ``inf`` for a deterministic queue, which
    never waits below saturation, and ``C = 1`` with ``θ = 0`` for a saturated one)."""
    t = np.asarray(t_s, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        tail = erlang_c * np.exp(-np.where(t > 0, decay_per_s * t, 0.0))
    tail = np.where(np.isnan(tail), 0.0, tail)
    return np.where(t < 0, 1.0, np.minimum(tail, 1.0))


def queue_tail_params(servers: np.ndarray, arrival_rate_per_s: np.ndarray, service_s: np.ndarray, service_cv: np.ndarray,
                      arrival_cv: np.ndarray, peakedness: object = 1.0, drain_service_s: object = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(C, θ)`` per queue (broadcast) for :func:`wait_tail`: Erlang C of ``a = λ s`` on ``c`` servers and
    ``θ = (c/s − λ) / k``, ``k = (c_a² + c_s²)/2`` (:func:`planner.queueing.wait_tail_probability`).

    A unified pool's slot queue (:func:`planner.pool_latency.unified_slot_queue`) passes its busy count's
    ``peakedness`` ``z`` and the slot's hold when every slot is busy, ``drain_service_s`` ``s_full``: then
    ``C = C(c/z, a/z)`` (Hayward's scaling of Erlang C to a busy count whose variance is ``z`` times its
    mean) and ``θ = (c/s_full − λ)/k``. With ``z = 1`` and ``s_full = s`` (the defaults) the plain G/G/c."""
    from planner.queueing import erlang_c_many

    c, lam, s, cs, ca, z, s_full = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                                         (servers, arrival_rate_per_s, service_s, service_cv, arrival_cv,
                                                          peakedness, service_s if drain_service_s is None else drain_service_s)))
    a = lam * s
    plain = bool(np.all(z == 1.0))
    pw = np.asarray(erlang_c_many(np.maximum(c, 1.0), a) if plain else
                    erlang_c_many(np.maximum(c / z, 1.0), np.minimum(a / z, np.maximum(c / z, 1.0))), dtype=float)
    k = (ca**2 + cs**2) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(k > 0, (c / s_full - lam) / k, math.inf)
    saturated = (a >= c) | ~(theta > 0)
    return np.where(saturated, 1.0, np.where(a > 0, pw, 0.0)), np.where(saturated, 0.0, theta)


def mixture_caps(servers: np.ndarray, service_s: np.ndarray, service_cv: np.ndarray, arrival_cv: np.ndarray,
                 quantile: np.ndarray, target_s: np.ndarray, mixes: Sequence[tuple[np.ndarray, np.ndarray]], *,
                 ceiling: float, tolerance: float = 1e-6,
                 replay: Sequence[tuple[np.ndarray, float] | None] | None = None) -> np.ndarray:
    """Per queue: the largest utilisation ``ρ = λ s / c`` (at most ``ceiling``) with
    ``sum_s v_s P(W > T − t_s) <= 1 − q`` (module docstring), by bisection on ``ρ`` for all queues at
    once (the miss share grows with ``ρ``); ``mixes[i]`` the (shares, TTFT seconds) of queue ``i``'s
    requests. 0 where even an empty queue misses (the sub-bins slower than the target alone hold more
    than ``1 − q`` of the requests). ``replay[i]``: queue ``i``'s replayed-burst wait curve and its service's peak rate
    (:mod:`planner.workload.replay_wait`), whose tail replaces the G/G/c one where its wait at ``q`` is the longer (as
    :func:`planner.pool_latency.pool_latency` takes the larger of the two)."""
    from planner.queueing import bisect_largest

    n = len(mixes)
    out = np.zeros(n)
    if not n:
        return out
    width = max(len(v) for v, _t in mixes)
    v = np.zeros((n, width))
    t = np.zeros((n, width))
    for i, (vi, ti) in enumerate(mixes):
        v[i, :len(vi)] = vi
        t[i, :len(ti)] = ti
    c = np.asarray(servers, dtype=float)
    s = np.asarray(service_s, dtype=float)
    cs = np.asarray(service_cv, dtype=float)
    ca = np.asarray(arrival_cv, dtype=float)
    allowed = (1.0 - np.asarray(quantile, dtype=float)) * (1.0 + MIX_TOLERANCE)
    slack = np.asarray(target_s, dtype=float)[:, None] - t

    def ok(rho: np.ndarray, idx: np.ndarray) -> np.ndarray:
        pw, theta = queue_tail_params(c[idx], rho * c[idx] / s[idx], s[idx], cs[idx], ca[idx])
        if replay is not None:
            pw, theta = _with_replay(pw, theta, rho, idx)
        miss = (v[idx] * wait_tail(slack[idx], pw[:, None], theta[:, None])).sum(axis=1)
        return np.asarray(miss <= allowed[idx])

    qs = np.asarray(quantile, dtype=float)

    def _with_replay(pw: np.ndarray, theta: np.ndarray, rho: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The replayed-burst tail where its wait at the queue's quantile is the longer."""
        assert replay is not None
        pw, theta = np.array(pw, dtype=float), np.array(theta, dtype=float)
        for k, i in enumerate(idx):
            got = replay[int(i)]
            if got is None:
                continue
            q_i = float(qs[i])
            cb, tb = replay_tail(got[0], float(rho[k]), got[1], q_i)
            if tail_quantile_s(cb, tb, q_i) > tail_quantile_s(float(pw[k]), float(theta[k]), q_i):
                pw[k], theta[k] = cb, tb
        return pw, theta

    usable = np.flatnonzero(np.isfinite(s) & (s > 0) & (c >= 1) & ~np.isnan(slack).any(axis=1))
    if not usable.size:
        return out
    empty = ok(np.zeros(usable.size), usable)
    usable = usable[empty]
    top = ok(np.full(usable.size, float(ceiling)), usable)
    out[usable[top]] = float(ceiling)
    todo = usable[~top]
    out[todo] = bisect_largest(lambda rho: ok(rho, todo), np.zeros(todo.size), np.full(todo.size, float(ceiling)), tolerance)
    return out


def mixture_quantile_ms(quantile: float, weights: np.ndarray, ttft_ms: np.ndarray, erlang_c: np.ndarray,
                        decay_per_ms: np.ndarray, *, upper_ms: float, tolerance_ms: float = 0.01) -> float:
    """The ``quantile`` of ``TTFT = t_j + W_{p(j)}`` over requests ``j`` with ``weights`` (module
    docstring), each with its own queue's tail ``(C_j, θ_j)`` (per ms): the smallest ``X`` with
    ``sum_j w_j P(W_j > X − t_j) <= 1 − q``, by bisection on ``[max(0, min t), upper_ms]``; ``upper_ms``
    must satisfy it (the representative rule's figure does). ``inf`` when ``upper_ms`` is not finite."""
    if not math.isfinite(upper_ms):
        return math.inf
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    t = np.asarray(ttft_ms, dtype=float)
    allowed = (1.0 - float(quantile)) * (1.0 + MIX_TOLERANCE)

    def miss(x: float) -> float:
        return float(np.dot(w, wait_tail(x - t, erlang_c, decay_per_ms)))

    if miss(upper_ms) > allowed:
        return upper_ms
    lo, hi = max(0.0, float(np.min(t))), float(upper_ms)
    if miss(lo) <= allowed:
        return lo
    while hi - lo > tolerance_ms:
        mid = 0.5 * (lo + hi)
        if miss(mid) <= allowed:
            hi = mid
        else:
            lo = mid
    return hi
