"""Tail-latency approximations for the planner's pools (DESIGN §3, §6).

The optimiser caps each pool's utilisation ``ρ = λ·s/c`` so that a waiting-time quantile
stays inside a budget (e.g. ``TTFT target − prefill time − transfer − first step``). This
module gives those caps and the waiting-time quantiles they come from.

Model
-----
A pool is a G/G/c queue: ``c`` identical servers, first-come-first-served, arrivals at rate
``λ`` (per second) with inter-arrival coefficient of variation ``c_a``, service times with
mean ``s`` seconds and coefficient of variation ``c_s``. Symbols:

==========  ==============================================================
``c``       servers (``servers``)
``λ``       arrival rate per second (``arrival_rate_per_s``)
``s``       mean service time in seconds (``mean_service_s``); ``μ = 1/s``
``a``       offered load in Erlangs, ``a = λ·s``
``ρ``       utilisation, ``ρ = a/c`` (must be ``< 1`` for a finite wait)
``C(c,a)``  Erlang-C probability that an arrival waits (exact for M/M/c)
``k``       variability factor ``(c_a² + c_s²)/2`` (Allen–Cunneen / Kingman)
==========  ==============================================================

Approximations, and how approximate they are:

* **Probability of waiting** ``P(W>0) ≈ C(c, a)`` — exact for M/M/c; for G/G/c the
  Erlang-C value is the usual (Allen–Cunneen) stand-in.
* **Mean wait** ``E[W] ≈ C(c,a) · k / (cμ − λ)`` — exact for M/M/c (``k = 1``) and for
  M/G/1 (Pollaczek–Khinchine, ``c = 1, c_a = 1``, e.g. M/D/1 with ``c_s = 0``); for
  G/G/c it is the Allen–Cunneen approximation, typically within ~10–20 % at moderate to
  high load and worse (optimistic) for very low ``ρ`` with highly variable service.
* **Waiting-time tail** ``P(W>t) ≈ C(c,a) · exp(−(cμ − λ)·t / k)`` — the conditional
  wait of a delayed arrival is taken as exponential with mean ``E[W]/C``; exact for
  M/M/c, and the heavy-traffic (Kingman) limit for G/G/c. Quantile ``q``:
  ``W_q = 0`` if ``C ≤ 1 − q``, else ``W_q = k/(cμ − λ) · ln(C/(1−q))``.

Batched decode instances
------------------------
A decode instance with continuous batching serves up to ``B`` sequences at once, each
holding its slot for the whole generation: ``output_tokens × TPOT`` seconds. Seen from an
arriving sequence the pool of ``n`` instances is therefore a ``c = n·B`` server system
whose "service time" is ``output_tokens × tpot_s`` (see :func:`decode_servers` and
:func:`decode_service_s`); ``c_s`` is the CV of the output-length distribution. The
approximation ignores that the step time (hence TPOT) grows with the batch — callers pass
the TPOT at the batch size ``B`` they provision, which is the conservative choice.
A prefill instance without batching is one server whose service time is the prefill time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = [
    "UTILIZATION_CEILING",
    "decode_servers",
    "decode_service_s",
    "erlang_b",
    "erlang_b_many",
    "erlang_c",
    "erlang_c_many",
    "least_loaded_lane_wait_quantile_s",
    "max_utilization",
    "max_utilization_many",
    "md1_wait_cdf",
    "md1_wait_quantile_s",
    "mean_wait_s",
    "mg1_tail_decay",
    "mg1_wait_quantile_s",
    "mg1_wait_tail_probability",
    "poisson_quantile",
    "itl_quantile_s",
    "tpot_quantile_s",
    "residual_wait_quantile_s",
    "wait_probability",
    "wait_quantile_many",
    "wait_quantile_s",
    "wait_tail_probability",
]

#: Highest utilisation :func:`max_utilization` returns: a queue at ρ → 1 has unbounded
#: waits under any perturbation of the forecast, so the cap stays strictly below 1.
UTILIZATION_CEILING = 0.999

# --- Erlang B / Erlang C: one vectorised implementation --------------------------------------
#
# ``1/B(c, a) = Σ_{j=0..c} c!/(j!·a^{c−j})``: the terms are the Poisson(a) probabilities of
# ``j = 0..c`` divided by that of ``c``, so
#
#     B(c, a) = P(N = c) / P(N ≤ c),   N ~ Poisson(a),
#
# and ``P(N ≤ c) = Q(c+1, a)``, the regularised upper incomplete gamma function
# (``scipy.special.gammaincc``: relative accuracy ~1e-15 at any size, O(1) time per element, no
# loop over servers). The numerator is evaluated in log space with Loader's saddle-point form
# (C. Loader, "Fast and accurate computation of binomial probabilities", 2000; the form R's
# ``dpois`` uses): ``log P(N = c) = −stirlerr(c) − ½·log(2πc) − bd0(c, a)``, where
# ``bd0(c, a) = c·log(c/a) + a − c`` is summed as a series when ``c ≈ a`` (no cancellation of
# two numbers of size ``c``: the absolute error stays ~1e-15 for any ``c``, where
# ``c·log a − a − lgamma(c+1)`` loses ~``c·1e-16``, i.e. 1e-10 at ``c = 10⁶``).
# Where ``Q(c+1, a)`` underflows (load far above the servers, ``a − c ≳ 37√c``), ``1/B`` is the
# continued fraction ``a·Γ(c+1, a)·e^a·a^{−(c+1)}`` (Lentz; Numerical Recipes §6.2), which
# converges in a few dozen terms there.

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_Q_UNDERFLOW = 1e-280
"""Below this ``P(N ≤ c)`` the ratio form risks subnormal numbers: the continued fraction is used."""


def _stirlerr(n: np.ndarray) -> np.ndarray:
    """``log n! − (n + ½)·log n + n − ½·log 2π`` (Stirling's error), ``n ≥ 1``."""
    from scipy.special import gammaln

    nn = np.maximum(n, 1.0)
    with np.errstate(over="ignore"):
        n2 = nn * nn
    series = (1.0 / 12 - (1.0 / 360 - (1.0 / 1260 - (1.0 / 1680 - 1.0 / (1188 * n2)) / n2) / n2) / n2) / nn
    small = np.minimum(nn, 16.0)
    direct = gammaln(small + 1.0) - (small + 0.5) * np.log(small) + small - _LOG_SQRT_2PI
    return np.where(nn > 15.0, series, direct)


def _bd0(x: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``x·log(x/μ) + μ − x`` without cancellation (Loader 2000), ``x, μ > 0``: where
    ``|v| < 0.1``, ``v = (x − μ)/(x + μ)``, the series ``(x − μ)·v + 2x·Σ_j v^(2j+1)/(2j+1)``."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out = x * np.log(x / mu) + mu - x
        v = (x - mu) / (x + mu)
        near = np.flatnonzero(np.abs(v) < 0.1)
        if near.size:
            xn, vn = x.flat[near], v.flat[near]
            total = (xn - mu.flat[near]) * vn
            ej = 2.0 * xn * vn
            v2 = vn * vn
            for j in range(1, 10):  # |v| < 0.1: term j / total < v^(2j-1) / (2j+1) < 1e-18 at j = 9
                ej = ej * v2
                total = total + ej / (2 * j + 1)
            out.flat[near] = total
    return out


def _log_pmf_head(c: np.ndarray) -> np.ndarray:
    """The part of :func:`_log_poisson_pmf_at` that depends on ``c`` only, ``−stirlerr(c) − ½·log(2πc)``
    (computed once per row by :func:`max_utilization_many`'s bisection, whose steps change ``a`` only)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -_stirlerr(c) - _LOG_SQRT_2PI - 0.5 * np.log(c)


def _log_poisson_pmf_at(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``log P(N = c)`` for ``N ~ Poisson(a)``, ``c ≥ 1``, ``a > 0`` (saddle-point form)."""
    return _log_pmf_head(c) - _bd0(c, a)


def _inverse_b_continued_fraction(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``1/B(c, a) = a·Γ(c+1, a)·e^a·a^{−(c+1)}`` by its continued fraction (modified Lentz),
    for ``a > c`` far above the servers (where it converges quickly)."""
    s = c + 1.0
    tiny = 1e-300
    b = a + 1.0 - s
    cc = np.full_like(a, 1.0 / tiny)
    d = 1.0 / b
    h = d.copy()
    for i in range(1, 2000):
        an = -i * (i - s)
        b = b + 2.0
        d = an * d + b
        d = np.where(np.abs(d) < tiny, tiny, d)
        cc = b + an / cc
        cc = np.where(np.abs(cc) < tiny, tiny, cc)
        d = 1.0 / d
        delta = d * cc
        h = h * delta
        if np.all(np.abs(delta - 1.0) < 1e-15):
            break
    return a * h


def erlang_b_many(servers: object, offered_load: object) -> np.ndarray:
    """Erlang-B ``B(c, a)`` element-wise over arrays (broadcast): ``P(N = c)/P(N ≤ c)`` with
    ``N ~ Poisson(a)`` (section comment above). ``c ≥ 1`` real (a float for huge counts),
    ``a ≥ 0`` finite; ``B = 0`` at ``a = 0``. Time and memory O(elements), whatever ``c`` and ``a``."""
    c, a = np.broadcast_arrays(np.asarray(servers, dtype=float), np.asarray(offered_load, dtype=float))
    c = np.array(c, dtype=float)
    a = np.array(a, dtype=float)
    out = np.zeros(c.shape)
    live = a > 0.0
    if not live.any():
        return out
    cl = c[live]
    out[live] = _erlang_b_live(cl, a[live], _log_pmf_head(cl))
    return out


def _erlang_b_live(c: np.ndarray, a: np.ndarray, head: np.ndarray) -> np.ndarray:
    """:func:`erlang_b_many`'s formula on arrays of one shape with ``c ≥ 1``, ``a > 0``; ``head`` is
    :func:`_log_pmf_head` of ``c``."""
    from scipy.special import gammaincc

    q = gammaincc(c + 1.0, a)  # P(N <= c)
    with np.errstate(under="ignore", divide="ignore"):
        ratio = np.exp(head - _bd0(c, a) - np.log(np.maximum(q, _Q_UNDERFLOW)))
    b = np.where(q >= _Q_UNDERFLOW, ratio, 0.0)
    far = q < _Q_UNDERFLOW
    if far.any():
        b[far] = 1.0 / _inverse_b_continued_fraction(c[far], a[far])
    return np.clip(b, 0.0, 1.0)


def _erlang_c(c: np.ndarray, a: np.ndarray, head: np.ndarray | None = None) -> np.ndarray:
    """:func:`erlang_c_many` on float arrays of one shape; ``head`` (optional) is :func:`_log_pmf_head`
    of ``c``, precomputed by a caller that evaluates the same servers at many loads."""
    stable = a < c
    live = stable & (a > 0.0)
    b = np.zeros(a.shape)
    if live.any():
        cl = c[live]
        b[live] = _erlang_b_live(cl, a[live], _log_pmf_head(cl) if head is None else head[live])
    with np.errstate(divide="ignore", invalid="ignore"):
        pw = c * b / (c - a * (1.0 - b))
    return np.where(stable, pw, 1.0)


def erlang_c_many(servers: object, offered_load: object) -> np.ndarray:
    """Erlang-C ``C(c, a) = c·B/(c − a·(1 − B))`` element-wise (broadcast); 1 where ``a ≥ c``
    (``B`` from :func:`erlang_b_many`'s formula)."""
    c, a = np.broadcast_arrays(np.asarray(servers, dtype=float), np.asarray(offered_load, dtype=float))
    return _erlang_c(c, a)


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang-B blocking probability ``B(c, a)`` for ``c`` servers and load ``a`` Erlangs
    (:func:`erlang_b_many` of one element: ``P(N = c)/P(N ≤ c)``, ``N ~ Poisson(a)``)."""
    c = int(servers)
    a = float(offered_load)
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if a < 0 or not math.isfinite(a):
        raise ValueError(f"offered_load must be finite and >= 0, got {offered_load}")
    return float(erlang_b_many(float(c), a))


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang-C probability that an arrival waits, ``C(c, a)``, for M/M/c.

    ``C = c·B / (c − a·(1 − B))`` with ``B`` the Erlang-B probability (:func:`erlang_c_many`
    of one element). Returns 1.0 when ``a ≥ c`` (unstable queue: everybody waits).
    """
    c = int(servers)
    a = float(offered_load)
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if a >= c:
        return 1.0
    return float(erlang_c_many(float(c), a))


def _check(arrival_rate_per_s: float, servers: int, mean_service_s: float,
           service_cv: float, arrival_cv: float) -> None:
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if arrival_rate_per_s < 0 or not math.isfinite(arrival_rate_per_s):
        raise ValueError(f"arrival_rate_per_s must be finite and >= 0, got {arrival_rate_per_s}")
    if mean_service_s <= 0 or not math.isfinite(mean_service_s):
        raise ValueError(f"mean_service_s must be finite and > 0, got {mean_service_s}")
    if service_cv < 0 or arrival_cv < 0:
        raise ValueError("service_cv and arrival_cv must be >= 0")


def _variability(service_cv: float, arrival_cv: float) -> float:
    return (arrival_cv**2 + service_cv**2) / 2.0


def wait_probability(arrival_rate_per_s: float, servers: int, mean_service_s: float) -> float:
    """``P(W > 0)`` ≈ Erlang-C of the pool (exact for M/M/c)."""
    _check(arrival_rate_per_s, servers, mean_service_s, 1.0, 1.0)
    return erlang_c(servers, arrival_rate_per_s * mean_service_s)


def mean_wait_s(arrival_rate_per_s: float, servers: int, mean_service_s: float,
                service_cv: float = 1.0, arrival_cv: float = 1.0) -> float:
    """Mean queueing wait ``E[W] ≈ C(c,a)·k/(cμ−λ)`` in seconds (∞ if ``ρ ≥ 1``).

    Exact for M/M/c (``k=1``) and M/G/1 (Pollaczek–Khinchine); Allen–Cunneen otherwise.
    """
    _check(arrival_rate_per_s, servers, mean_service_s, service_cv, arrival_cv)
    a = arrival_rate_per_s * mean_service_s
    if a >= servers:
        return math.inf
    if a == 0.0:
        return 0.0
    drain_per_s = servers / mean_service_s - arrival_rate_per_s  # cμ − λ
    return erlang_c(servers, a) * _variability(service_cv, arrival_cv) / drain_per_s


def wait_tail_probability(t_s: float, arrival_rate_per_s: float, servers: int,
                          mean_service_s: float, service_cv: float = 1.0,
                          arrival_cv: float = 1.0) -> float:
    """``P(W > t) ≈ C(c,a)·exp(−(cμ−λ)·t/k)``; exact for M/M/c. 1.0 if ``ρ ≥ 1``."""
    _check(arrival_rate_per_s, servers, mean_service_s, service_cv, arrival_cv)
    a = arrival_rate_per_s * mean_service_s
    if a >= servers:
        return 1.0
    if t_s < 0:
        return 1.0
    k = _variability(service_cv, arrival_cv)
    pw = erlang_c(servers, a)
    if k == 0.0:  # deterministic arrivals and service: no queueing below saturation
        return 0.0
    drain_per_s = servers / mean_service_s - arrival_rate_per_s
    return pw * math.exp(-drain_per_s * t_s / k)


def wait_quantile_many(quantile: object, arrival_rate_per_s: object, servers: object, mean_service_s: object,
                       service_cv: object = 1.0, arrival_cv: object = 1.0) -> np.ndarray:
    """:func:`wait_quantile_s` element-wise over arrays (broadcast; inputs assumed valid):
    ``0`` if ``C ≤ 1−q`` or no load, else ``k/(cμ−λ)·ln(C/(1−q))``; ∞ if ``ρ ≥ 1``."""
    q, lam, c, s, cs, ca = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                                 (quantile, arrival_rate_per_s, servers, mean_service_s, service_cv, arrival_cv)))
    return _wait_quantile(1.0 - q, lam, c, s, (ca**2 + cs**2) / 2.0)  # k: _variability


def _wait_quantile(tail: np.ndarray, lam: np.ndarray, c: np.ndarray, s: np.ndarray, k: np.ndarray,
                   head: np.ndarray | None = None) -> np.ndarray:
    """:func:`wait_quantile_many` on float arrays of one shape, with ``tail = 1 − q``, the variability
    factor ``k`` and (optional) :func:`_log_pmf_head` of ``c`` given: what stays fixed while
    :func:`max_utilization_many` bisects on the load is computed once."""
    a = lam * s
    pw = _erlang_c(c, a, head)
    drain_per_s = c / s - lam  # cμ − λ
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = k / drain_per_s * np.log(pw / tail)
    w = np.where(drain_per_s > 0.0, w, math.inf)  # a < c but λ ≥ c/s after rounding: the pool is full (ρ = 1)
    w = np.where((a == 0.0) | (pw <= tail), 0.0, w)
    return np.where(a >= c, math.inf, w)


def wait_quantile_s(quantile: float, arrival_rate_per_s: float, servers: int,
                    mean_service_s: float, service_cv: float = 1.0,
                    arrival_cv: float = 1.0) -> float:
    """Waiting-time quantile in seconds: ``0`` if ``C ≤ 1−q``, else ``k/(cμ−λ)·ln(C/(1−q))``.

    Exact for M/M/c; G/G/c via the Erlang-C / Kingman-scaled exponential tail (module
    docstring). ∞ if ``ρ ≥ 1``. (:func:`wait_quantile_many` of one element.)
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    _check(arrival_rate_per_s, servers, mean_service_s, service_cv, arrival_cv)
    if arrival_rate_per_s * mean_service_s >= servers:
        return math.inf
    return float(wait_quantile_many(quantile, arrival_rate_per_s, float(servers), mean_service_s, service_cv, arrival_cv))


def bisect_largest(ok: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray, tolerance: float) -> np.ndarray:
    """Element-wise bisection for the largest value with ``ok`` true, given ``ok(lo)`` true and ``ok(hi)`` false
    (``ok`` monotone: true up to a threshold); halves every interval together until the widest is within
    ``tolerance`` and returns the feasible end. Used by :func:`max_utilization_many` and
    :func:`planner.ttft_mixture.mixture_caps`."""
    while lo.size and float(np.max(hi - lo)) > tolerance:
        mid = 0.5 * (lo + hi)
        good = ok(mid)
        lo = np.where(good, mid, lo)
        hi = np.where(good, hi, mid)
    return lo


def max_utilization_many(servers: object, mean_service_s: object, quantile: object, wait_budget_s: object,
                         service_cv: object = 1.0, arrival_cv: object = 1.0, *, ceiling: float = UTILIZATION_CEILING,
                         tolerance: float = 1e-6) -> np.ndarray:
    """:func:`max_utilization` element-wise over arrays (broadcast; inputs assumed valid).

    The largest ``ρ = λ·s/c`` with ``wait_quantile_many(...) ≤ wait_budget_s``, by bisection on
    ``ρ`` in ``[0, ceiling]`` run for all elements at once (the wait quantile is non-decreasing
    in ``ρ``; absolute tolerance ``tolerance``; the feasible end returned); ``ceiling`` where that
    already fits, ``0`` for a negative or NaN budget. Distinct input rows are evaluated once
    (``np.unique``), so a table repeating a (servers, service, quantile, budget, CVs) row pays
    for it once. Each bisection step costs one :func:`erlang_c_many` over the distinct rows:
    O(rows × log₂(ceiling/tolerance)) ≈ 20 vectorised evaluations, independent of ``c``."""
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                   (servers, mean_service_s, quantile, wait_budget_s, service_cv, arrival_cv)))
    shape = arrays[0].shape
    flat = np.stack([x.ravel() for x in arrays], axis=1)
    out = np.zeros(flat.shape[0])
    usable = ~(np.isnan(flat[:, 3]) | (flat[:, 3] < 0))
    if not usable.any():
        return out.reshape(shape)
    rows, inverse = np.unique(flat[usable], axis=0, return_inverse=True)

    def fixed(r: np.ndarray) -> tuple[np.ndarray, ...]:
        """What a row's wait quantile needs besides the load: servers, service, ``c/s``, ``1 − q``,
        ``k``, :func:`_log_pmf_head` of ``c`` and the budget (contiguous columns)."""
        c, s, q, budget, cs, ca = (np.ascontiguousarray(x) for x in r.T)
        return c, s, c / s, 1.0 - q, (ca**2 + cs**2) / 2.0, _log_pmf_head(c), budget

    def ok(rho: np.ndarray, f: tuple[np.ndarray, ...]) -> np.ndarray:
        c, s, c_over_s, tail, k, head, budget = f
        return np.asarray(_wait_quantile(tail, rho * c_over_s, c, s, k, head) <= budget)

    caps = np.full(rows.shape[0], float(ceiling))
    todo = np.flatnonzero(~ok(caps, fixed(rows)))  # the rest already meet the budget at the ceiling
    sub = fixed(rows[todo])
    # ok(0) holds: zero load never waits
    caps[todo] = bisect_largest(lambda rho: ok(rho, sub), np.zeros(todo.size), np.full(todo.size, float(ceiling)), tolerance)
    out[usable] = caps[inverse.ravel()]
    return out.reshape(shape)


def max_utilization(servers: int, mean_service_s: float, quantile: float,
                    wait_budget_s: float, service_cv: float = 1.0,
                    arrival_cv: float = 1.0, *, ceiling: float = UTILIZATION_CEILING,
                    tolerance: float = 1e-6) -> float:
    """Largest ``ρ = λ·s/c`` with ``wait_quantile_s(quantile, ...) ≤ wait_budget_s``.

    ``wait_quantile_s`` is non-decreasing in ρ, so bisection on ρ in ``[0, ceiling]``
    (absolute tolerance ``tolerance``, returning the feasible end) finds it. Returns 0 when
    even a trickle of traffic misses the budget (a negative budget: the service time alone
    exceeds the target), and at most ``ceiling`` (< 1). (:func:`max_utilization_many` of one
    element.)
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if not 0.0 < ceiling < 1.0:
        raise ValueError(f"ceiling must be in (0, 1), got {ceiling}")
    _check(0.0, servers, mean_service_s, service_cv, arrival_cv)
    if wait_budget_s < 0 or math.isnan(wait_budget_s):
        return 0.0
    return float(max_utilization_many(float(servers), mean_service_s, quantile, wait_budget_s, service_cv, arrival_cv,
                                      ceiling=ceiling, tolerance=tolerance))


def decode_servers(instances: int, max_batch: int) -> int:
    """Servers of a continuous-batching decode pool: ``c = instances × max_batch`` slots."""
    if instances < 0 or max_batch < 1:
        raise ValueError("instances must be >= 0 and max_batch >= 1")
    return instances * max_batch


def decode_service_s(output_tokens: float, tpot_s: float) -> float:
    """Slot holding time of one sequence: ``output_tokens × tpot_s`` seconds."""
    if output_tokens <= 0 or tpot_s <= 0:
        raise ValueError("output_tokens and tpot_s must be > 0")
    return output_tokens * tpot_s


# --- M/G/1 with a discrete service-time distribution: exact asymptotic tail -----------------
#
# The Kingman-scaled exponential tail above, ``P(W>t) ≈ ρ·exp(−(1−ρ)t/(k·s))`` with
# ``k = (1 + c_s²)/2``, is the heavy-traffic limit: it is exact for M/M/1 but pessimistic for
# nearly deterministic service at moderate load (M/D/1 at ρ = 0.3: the true decay rate is
# 1.45× Kingman's, and the p99 wait ~25 % shorter). For Poisson arrivals the exact asymptotic
# is known (Cramér–Lundberg; e.g. Asmussen, *Applied Probability and Queues*, 2nd ed. 2003,
# §XIII.5; Tijms, *A First Course in Stochastic Models*, 2003, §2.5 and §9.?, who shows for
# M/D/c that it is accurate far beyond the tail):
#
#     P(W > t) ≈ γ · exp(−θ t),
#     θ > 0 the root of   λ (E[e^{θS}] − 1) = θ,
#     γ = (1 − ρ) / (λ E[S e^{θS}] − 1).
#
# With the service time a mixture of deterministic times (the chunked-prefill lane: one time
# per length bucket) both expectations are finite sums, so the formula is the M/G/1 answer for
# that mixture, not a two-moment fit. For exponential service it gives back M/M/1 exactly.

def _mix(service_s: object, weights: object | None) -> tuple[np.ndarray, np.ndarray]:
    s = np.atleast_1d(np.asarray(service_s, dtype=float))
    p = np.ones_like(s) if weights is None else np.atleast_1d(np.asarray(weights, dtype=float))
    if s.shape != p.shape or not s.size:
        raise ValueError("service_s and weights must be non-empty and of the same length")
    if np.any(~np.isfinite(s)) or np.any(s < 0) or np.any(~np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError("service times and weights must be finite and >= 0 (weights not all 0)")
    return s, p / p.sum()


def mg1_tail_decay(arrival_rate_per_s: float, service_s: object, weights: object | None = None) -> tuple[float, float]:
    """``(θ, γ)`` of the M/G/1 waiting-time tail ``P(W>t) ≈ γ e^{−θt}`` (section comment above).

    ``service_s`` are service times in seconds (one value: M/D/1), ``weights`` their
    probabilities (normalised; default equal). ``θ`` per second. Requires ``ρ = λ E[S] < 1``;
    returns ``(inf, 0)`` at zero load. ``θ`` is found by safeguarded Newton iteration on the
    convex ``φ(θ) = λ(E[e^{θS}] − 1) − θ`` (``φ(0) = 0``, ``φ'(0) = ρ − 1 < 0``), started to
    the right of the root, so it converges monotonically.
    """
    lam = float(arrival_rate_per_s)
    s, p = _mix(service_s, weights)
    if lam < 0 or not math.isfinite(lam):
        raise ValueError(f"arrival_rate_per_s must be finite and >= 0, got {arrival_rate_per_s}")
    mean = float(p @ s)
    rho = lam * mean
    if rho >= 1.0:
        raise ValueError(f"unstable queue: rho = {rho:.4g} >= 1")
    if lam == 0.0 or mean == 0.0:
        return math.inf, 0.0
    smax = float(s.max())
    pmax = float(p[s == smax].sum())

    def phi(th: float) -> tuple[float, float]:
        e = np.exp(th * s)
        return lam * (float(p @ e) - 1.0) - th, lam * float(p @ (s * e)) - 1.0

    # a start right of the root: φ(θ) ≥ λ p_max e^{θ s_max} − λ − θ > 0 there
    # (at a trickle of load the variance start is astronomically far right: exp(θ s_max) is capped at e^700,
    # which is right of the root too unless λ p_max < 700 e^-700 / s_max)
    th = min(max(2.0 * (1.0 - rho) / (lam * float(p @ s**2)), 1e-12), 700.0 / smax)
    while phi(th)[0] <= 0.0:
        th *= 2.0
        if th * smax > 700.0:  # cannot happen for rho < 1 unless p_max is ~0; guard the exp
            th = math.log((700.0 / smax + lam) / (lam * pmax)) / smax if pmax > 0 else th
            break
    for _ in range(200):
        f, df = phi(th)
        step = f / df
        th -= step
        if abs(step) <= 1e-13 * th:
            break
    f, df = phi(th)
    gamma = (1.0 - rho) / df
    return th, gamma


def mg1_wait_tail_probability(t_s: float, arrival_rate_per_s: float, service_s: object,
                              weights: object | None = None) -> float:
    """``P(W > t)`` of an M/G/1 queue with a discrete service-time mixture: ``min(ρ, γ e^{−θt})``
    (:func:`mg1_tail_decay`; ``P(W>0) = ρ`` exactly). 1.0 if ``ρ ≥ 1``."""
    s, p = _mix(service_s, weights)
    rho = float(arrival_rate_per_s) * float(p @ s)
    if rho >= 1.0 or t_s < 0:
        return 1.0
    if rho == 0.0:
        return 0.0
    th, gamma = mg1_tail_decay(arrival_rate_per_s, s, p)
    return min(rho, gamma * math.exp(-th * t_s))


def mg1_wait_quantile_s(quantile: float, arrival_rate_per_s: float, service_s: object,
                        weights: object | None = None) -> float:
    """Waiting-time quantile (s) of M/G/1 with a discrete service-time mixture.

    ``0`` if ``ρ ≤ 1 − q`` (exact: ``P(W>0) = ρ``); ``ln(q/(1−ρ))/λ`` when that is below the
    shortest service time (exact there for any service distribution: ``P(W ≤ t) = (1−ρ)e^{λt}``
    for ``t < min S``, from the Beneš series); else ``max(0, ln(γ/(1−q))/θ)`` from the
    Cramér–Lundberg asymptotic (:func:`mg1_tail_decay`); one service time (M/D/1) goes to
    :func:`md1_wait_quantile_s`, exact below ``3D``. Checked against the exact M/D/1
    distribution (:func:`md1_wait_cdf`) and the simulator in ``tests/test_queueing.py``:
    within 1 % of the exact M/D/1 p99 for ρ in [0.02, 0.96]. For a mixture the asymptotic
    is used from the shortest service time on, where it can be ~10 % off just above it
    (the M/D/1 error at ρ = 0.14 before the exact series was used). ∞ if ``ρ ≥ 1``.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    s, p = _mix(service_s, weights)
    rho = float(arrival_rate_per_s) * float(p @ s)
    if rho >= 1.0:
        return math.inf
    tail = 1.0 - quantile
    if rho <= tail:
        return 0.0
    lam = float(arrival_rate_per_s)
    if float(s.max()) == float(s.min()):  # M/D/1: exact series near the service time
        return float(md1_wait_quantile_s(quantile, rho, float(s[0])))
    # below the shortest service time the distribution is exact: P(W ≤ t) = (1 − ρ) e^{λt}
    # (Beneš: W = compound-geometric sum of equilibrium residuals, whose density is 1/E[S] there)
    t_low = math.log(quantile / (1.0 - rho)) / lam
    if t_low < float(s.min()):
        return t_low
    th, gamma = mg1_tail_decay(lam, s, p)
    return max(0.0, math.log(gamma / tail) / th)


def md1_wait_cdf(t_s: float, arrival_rate_per_s: float, service_s: float) -> float:
    """Exact ``P(W ≤ t)`` of the M/D/1 FCFS queue (Erlang 1909; Crommelin 1932)::

        P(W ≤ t) = (1 − ρ) Σ_{k=0}^{⌊t/D⌋} (λ(kD − t))^k / k! · e^{−λ(kD − t)}

    The series alternates with terms far larger than its sum (about ``e^{λt}``), so it is
    summed in :mod:`decimal` arithmetic with enough digits for the cancellation (each term is
    below ``e^{2λt}``: ``2λt/ln 10 + 30`` significant digits). Cost O(t/D) high-precision terms: an exact
    reference for tests and benchmarks, not for the optimiser's inner loops.
    """
    import decimal

    lam, d, t = float(arrival_rate_per_s), float(service_s), float(t_s)
    if d <= 0 or lam < 0:
        raise ValueError("service_s must be > 0 and arrival_rate_per_s >= 0")
    rho = lam * d
    if rho >= 1.0:
        return 0.0
    if t < 0:
        return 0.0
    ctx = decimal.Context(prec=int(2.0 * lam * t / math.log(10)) + 30)
    L, D, T = decimal.Decimal(lam), decimal.Decimal(d), decimal.Decimal(t)
    total = decimal.Decimal(0)
    fact = decimal.Decimal(1)
    for k in range(int(math.floor(t / d)) + 1):
        if k:
            fact = ctx.multiply(fact, decimal.Decimal(k))
        x = ctx.multiply(L, ctx.subtract(ctx.multiply(decimal.Decimal(k), D), T))  # λ(kD − t) ≤ 0
        xk = ctx.power(x, k) if k else decimal.Decimal(1)  # (0)^0 = 1 at t = kD
        term = ctx.divide(ctx.multiply(xk, ctx.exp(ctx.minus(x))), fact)
        total = ctx.add(total, term)
    return float(ctx.multiply(decimal.Decimal(1.0 - rho), total))


_MD1_EXACT_BELOW = 3.0
"""Below this many service times the M/D/1 quantile is solved from the exact series in floats
(at most 3 terms, each below ``e^{2ρ·3}``: no cancellation trouble)."""


def _md1_cdf_units(tau: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Exact M/D/1 ``P(W ≤ τD)`` for ``τ < 3`` (Erlang–Crommelin series, float, vectorised)."""
    total = np.zeros_like(tau)
    for k in range(int(_MD1_EXACT_BELOW)):
        x = rho * (k - tau)
        total = total + np.where(tau >= k, x**k / math.factorial(k) * np.exp(-x), 0.0)
    return (1.0 - rho) * total


def _md1_exact_units(quantile: float, rho: np.ndarray) -> np.ndarray:
    """The M/D/1 ``quantile`` in service times where it lies in ``[1, 3)`` (bisection on the exact cdf)."""
    lo, hi = np.ones_like(rho), np.full_like(rho, _MD1_EXACT_BELOW)
    for _ in range(36):  # the bracket [1, 3) halves each step: 2 / 2**36 < 3e-11 service times
        mid = 0.5 * (lo + hi)
        below = _md1_cdf_units(mid, rho) < quantile
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return hi


def md1_wait_quantile_s(quantile: float, utilization: object, service_s: object) -> np.ndarray:
    """Vectorised M/D/1 waiting-time quantile (s) over arrays of ``ρ`` and ``D`` (broadcast).

    Same formula as :func:`mg1_wait_quantile_s` with one service time: ``0`` if ``ρ ≤ 1−q``;
    ``D ln(q/(1−ρ))/ρ`` when that is below ``D`` (exact); the exact Erlang–Crommelin series
    (:func:`md1_wait_cdf`, 3 terms in floats) when the quantile lies in ``[D, 3D)``; else
    ``D ln(γ/(1−q))/x`` with ``x = θD`` the root of ``ρ(e^x − 1) = x`` and
    ``γ = (1−ρ)/(ρe^x − 1)`` (Cramér–Lundberg; within 1 % of the exact quantile there).
    ``inf`` at ``ρ ≥ 1``. The root is found by Newton's method from ``x₀ = max(2(1−ρ)/ρ, ln(2/ρ)) ·2``,
    which lies right of the root, so the iteration decreases monotonically onto it.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    rho, d = np.broadcast_arrays(np.asarray(utilization, dtype=float), np.asarray(service_s, dtype=float))
    tail = 1.0 - quantile
    ok = (rho > tail) & (rho < 1.0)
    r = np.where(ok, rho, 0.5)
    # right of the root: ρ(e^x − 1) − x > 0 for x = 2·max(2(1−ρ)/ρ, ln(2/ρ))
    x = 2.0 * np.maximum(2.0 * (1.0 - r) / r, np.log(2.0 / r))
    for _ in range(100):
        e = np.exp(x)
        step = (r * (e - 1.0) - x) / (r * e - 1.0)
        x = x - step
        if np.all(np.abs(step) <= 1e-12 * x):
            break
    gamma = (1.0 - r) / (r * np.exp(x) - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.log(quantile / (1.0 - r)) / r          # in units of D; exact while < 1
        high = np.maximum(np.log(gamma / tail) / x, 0.0)
        mid = (low >= 1.0) & (_md1_cdf_units(np.full_like(r, _MD1_EXACT_BELOW - 1e-9), r) >= quantile)
        if mid.any():  # the quantile lies in [D, 3D): exact series
            high = np.where(mid, _md1_exact_units(quantile, r), high)
        w = d * np.where(low < 1.0, low, high)
    return np.where(rho >= 1.0, np.inf, np.where(ok, w, 0.0))


# --- the chunked-prefill lane of a pool of instances behind a least-loaded router ----------

def residual_wait_quantile_s(quantile: float, utilization: float, service_s: object,
                             weights: object | None = None) -> float:
    """Quantile of the wait behind *one* job in service found with probability ``ρ``.

    ``P(W > w) = ρ · P(R > w)``, ``R`` the equilibrium residual of the service time (a
    time-stationary observer's remaining work of the job in service):
    ``P(R > w) = Σ p_i (S_i − w)⁺ / E[S]`` for a discrete mixture. Piecewise linear in ``w``,
    solved exactly. ``0`` when ``ρ ≤ 1 − q``.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    s, p = _mix(service_s, weights)
    mean = float(p @ s)
    tail = 1.0 - quantile
    rho = min(float(utilization), 1.0)
    if rho <= tail or mean <= 0:
        return 0.0
    target = tail * mean / rho  # Σ p_i (S_i − w)⁺ = target
    order = np.argsort(s)[::-1]
    ss, pp = s[order], p[order]
    cum_p, cum_ps = 0.0, 0.0
    for j in range(len(ss)):
        cum_p += float(pp[j])
        cum_ps += float(pp[j] * ss[j])
        w = (cum_ps - target) / cum_p  # Σ_{i≤j} p_i (S_i − w) = target, valid if w ∈ [S_{j+1}, S_j]
        nxt = float(ss[j + 1]) if j + 1 < len(ss) else 0.0
        if w >= nxt:
            return max(w, 0.0)
    return 0.0


def least_loaded_lane_wait_quantile_s(quantile: float, arrival_rate_per_s: float, servers: int,
                                      service_s: object, weights: object | None = None,
                                      arrival_cv: float = 1.0) -> tuple[float, dict[str, float]]:
    """Wait quantile (s) for the prefill lane of ``c = servers`` instances behind a
    least-loaded router, and the terms it was built from.

    Each instance has one lane (FCFS); a router sends each request to the instance with the
    fewest requests in flight (decoding + prefilling: vLLM / SGLang "least requests" routers,
    and :mod:`planner.simulate`). ``λ`` is the pool's arrival rate with inter-arrival CV
    ``c_a``, ``S`` the lane service-time mixture (``service_s``, ``weights``; CV ``c_s``),
    ``ρ = λE[S]/c`` the lane utilisation.

    ``W_q = min(W_random, max(W_pooled + W_residual, W_balanced))``, where

    * ``W_pooled`` — balancing in-flight counts pools the ``c`` lanes like one G/G/c queue
      (Erlang C + Allen–Cunneen, :func:`wait_quantile_s`) with arrivals no burstier than
      Poisson: ``min(c_a, 1)``. Bursts above Poisson are charged in the pool's slot wait
      (G/G/c over all batch slots with the service's ``c_a``), not again here: the
      least-loaded router spreads a burst over the instances; Allen–Cunneen with ``c_a ≈ 3–5``
      (the example traces) put the lane p99 at 2–3× the simulated one;
    * ``W_residual`` — what a count-based router cannot see: which lane is busy. A prompt lands
      on a lane with a prompt in progress with about the lane's utilisation ``ρ`` and waits
      for its residual work (:func:`residual_wait_quantile_s`);
    * ``W_balanced`` — the lane as a GI/G/1 queue fed about every ``c``-th arrival (the router
      spreads arrivals nearly in turn: inter-arrival CV² ``min(c_a, 1)²/c``, round-robin
      thinning), Kingman's tail with the mixture's
      ``c_s``: with widely spread lane times a short prompt still queues behind a long one on
      its own lane, which pooling hides; exact M/G/1 (:func:`mg1_wait_quantile_s`) for one
      instance with Poisson arrivals;
    * ``W_random`` — a router blind to load (random split) with Poisson arrivals: each lane
      M/G/1 at ``λ/c``, exact tail; no router does worse.

    Against the simulator (``python benchmarks/bench_simulate.py --lanes``: Poisson arrivals,
    ``c`` = 1–45, ``ρ`` = 0.3–0.7, equal prompts or a 1/2/4/12-chunk mix of CV 0.9; the
    simulated p99 includes up to one iteration of alignment to the running iteration) the
    model is within about −20 %…+50 %, against +13 %…+490 % for one M/G/1 per instance with
    Kingman's tail (the model before). How far the balancing reaches depends on how well
    in-flight counts track lane work; the simulator's representative output lengths make
    them track it well, and a workload with widely spread outputs lies between this model
    and ``W_random``.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if arrival_cv < 0 or not math.isfinite(arrival_cv):
        raise ValueError(f"arrival_cv must be finite and >= 0, got {arrival_cv}")
    s, p = _mix(service_s, weights)
    lam = float(arrival_rate_per_s)
    mean = float(p @ s)
    c = int(servers)
    rho = lam * mean / c
    cs = math.sqrt(max(0.0, float(p @ s**2) / mean**2 - 1.0)) if mean > 0 else 0.0
    ca_lane = min(float(arrival_cv), 1.0) / math.sqrt(c)
    info = {"lane_utilization": rho, "lane_mean_service_s": mean, "lane_service_cv": cs, "lane_arrival_cv": float(arrival_cv),
            "lane_instance_arrival_cv": ca_lane}
    terms = ("lane_wait_random_s", "lane_wait_pooled_s", "lane_wait_balanced_s", "lane_wait_residual_s")
    if lam <= 0 or mean <= 0:
        return 0.0, {**info, **dict.fromkeys(terms, 0.0)}
    if rho >= 1.0:
        return math.inf, {**info, **dict.fromkeys(terms, math.inf)}
    w_rand = mg1_wait_quantile_s(quantile, lam / c, s, p)
    w_bal = w_rand if (c == 1 and arrival_cv == 1.0) else wait_quantile_s(quantile, lam / c, 1, mean, cs, ca_lane)
    w_pool = wait_quantile_s(quantile, lam, c, mean, cs, min(float(arrival_cv), 1.0))
    w_res = residual_wait_quantile_s(quantile, rho, s, p)
    w = min(w_rand, max(w_pool + w_res, w_bal))
    return w, {**info, "lane_wait_random_s": w_rand, "lane_wait_pooled_s": w_pool, "lane_wait_balanced_s": w_bal,
               "lane_wait_residual_s": w_res}


# --- token-time metrics of a chunked-prefill (unified) instance ------------------------------
#
# Definitions (DESIGN §3, as vLLM ``bench serve``, SGLang ``bench_serving`` and DistServe use
# them): a request's **TPOT** is ``(E2E − TTFT)/(o − 1)``, the mean of its own ``s = o − 1``
# token gaps, its quantile taken over requests; **ITL** is each gap, its quantile taken over all
# gaps. In a unified instance at batch ``B`` an iteration without a prefill chunk takes
# ``t_plain``, one with a chunk ``t_chunk``; a share ``u`` of iterations carries a chunk.
#
# * ITL: every decoding sequence gets one gap per iteration, so a share ``u`` of all gaps is
#   ``t_chunk``: the ``q`` quantile is ``t_chunk`` if ``u > 1 − q``, else ``t_plain``; the mean is
#   ``u t_chunk + (1 − u) t_plain``.
# * TPOT: of a request's ``s`` gaps, ``K`` carry a chunk, ``TPOT = t_plain + (K/s)(t_chunk −
#   t_plain)``. A prompt occupies ``c = ceil(n/q)`` consecutive chunk iterations, and prompts
#   arrive (Poisson) while the request decodes, so ``K = min(c N, s)`` with
#   ``N ~ Poisson(u s / c)`` prompts (a compound Poisson count: clustering by whole prompts
#   makes it more variable than a Binomial(s, u) count of independent steps; a run cut by the
#   request's start or end is counted whole, which errs long). Its quantile is
#   ``t_plain + min(c N_q, s)/s · (t_chunk − t_plain)`` — for short outputs much above the mean
#   ``t_plain + u (t_chunk − t_plain)``, for long ones close to it. Tested against the
#   simulator (tests/test_latency_metrics.py).

def poisson_quantile(quantile: float, mean: object) -> np.ndarray:
    """Smallest ``k`` with ``P(N ≤ k) ≥ quantile`` for ``N ~ Poisson(mean)`` (vectorised; 0 for a
    mean of 0). Exact at any mean: the root ``k*`` of the continuous Poisson cdf
    (``scipy.special.pdtrik``) rounded up, then the integer below it checked with the cdf itself
    (``pdtr``) — the method of ``scipy.stats.poisson.ppf``, without importing ``scipy.stats``."""
    from scipy.special import pdtr, pdtrik

    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    mu = np.maximum(np.asarray(mean, dtype=float), 0.0)
    live = mu > 0.0
    m = np.where(live, mu, 1.0)
    k = np.maximum(np.ceil(pdtrik(quantile, m)), 0.0)
    below = np.maximum(k - 1.0, 0.0)
    k = np.where(pdtr(below, m) >= quantile, below, k)
    k = np.where(pdtr(k, m) >= quantile, k, k + 1.0)  # guard one rounding step of the root
    return np.where(live, k, 0.0)


def itl_quantile_s(quantile: float | None, chunk_share: object, t_chunk_s: object, t_plain_s: object) -> np.ndarray:
    """ITL of a unified instance (section comment above): the ``quantile`` of all token gaps, or
    their mean when ``quantile`` is ``None``. Vectorised (broadcast)."""
    u = np.clip(np.asarray(chunk_share, dtype=float), 0.0, 1.0)
    tc, tp = np.asarray(t_chunk_s, dtype=float), np.asarray(t_plain_s, dtype=float)
    if quantile is None:
        return u * tc + (1.0 - u) * tp
    return np.where(u > 1.0 - quantile, tc, tp)


def tpot_quantile_s(quantile: float | None, output_tokens: object, chunk_share: object, chunks_per_prompt: object,
                    t_chunk_s: object, t_plain_s: object) -> np.ndarray:
    """Per-request TPOT of a unified instance (section comment above): its ``quantile`` over
    requests with ``output_tokens`` tokens, or its mean when ``quantile`` is ``None``. A one-token
    output has no TPOT (``t_plain`` is returned). Vectorised (broadcast)."""
    u = np.clip(np.asarray(chunk_share, dtype=float), 0.0, 1.0)
    tc, tp = np.asarray(t_chunk_s, dtype=float), np.asarray(t_plain_s, dtype=float)
    extra = np.maximum(tc - tp, 0.0)
    if quantile is None:
        return tp + u * extra
    s = np.maximum(np.asarray(output_tokens, dtype=float) - 1.0, 1.0)
    c = np.maximum(np.asarray(chunks_per_prompt, dtype=float), 1.0)
    n_q = poisson_quantile(quantile, u * s / c)
    k = np.minimum(c * n_q, s)
    return tp + k / s * extra
