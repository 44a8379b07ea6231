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

import numpy as np

__all__ = [
    "UTILIZATION_CEILING",
    "decode_servers",
    "decode_service_s",
    "erlang_b",
    "erlang_c",
    "max_utilization",
    "mean_wait_s",
    "wait_probability",
    "wait_quantile_s",
    "wait_tail_probability",
]

#: Highest utilisation :func:`max_utilization` returns: a queue at ρ → 1 has unbounded
#: waits under any perturbation of the forecast, so the cap stays strictly below 1.
UTILIZATION_CEILING = 0.999

# Below this many servers the Erlang-B recursion in pure Python is faster than numpy.
_SMALL_C = 64


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang-B blocking probability ``B(c, a)`` for ``c`` servers and load ``a`` Erlangs.

    Uses the recursion ``B(0)=1, B(k) = a·B(k−1) / (k + a·B(k−1))`` for small ``c`` and, for
    large ``c``, the equivalent sum ``1/B = Σ_{j=0..c} Π_{i<j} (c−i)/a`` evaluated as a
    log-sum-exp over a numpy vector (no factorials, no overflow, O(c) vectorised).
    """
    c = int(servers)
    a = float(offered_load)
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if a < 0 or not math.isfinite(a):
        raise ValueError(f"offered_load must be finite and >= 0, got {offered_load}")
    if a == 0.0:
        return 0.0
    if c <= _SMALL_C:
        b = 1.0
        for k in range(1, c + 1):
            b = a * b / (k + a * b)
        return b
    # log of the j-th term: Σ_{i<j} log((c−i)/a), j = 0..c
    logs = np.empty(c + 1)
    logs[0] = 0.0
    np.cumsum(np.log(np.arange(c, 0, -1, dtype=float)) - math.log(a), out=logs[1:])
    m = float(logs.max())
    log_inv_b = m + math.log(float(np.exp(logs - m).sum()))
    return math.exp(-log_inv_b)


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang-C probability that an arrival waits, ``C(c, a)``, for M/M/c.

    ``C = c·B / (c − a·(1 − B))`` with ``B`` the Erlang-B probability (numerically
    stable for thousands of servers). Returns 1.0 when ``a ≥ c`` (unstable queue:
    everybody waits).
    """
    c = int(servers)
    a = float(offered_load)
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if a >= c:
        return 1.0
    b = erlang_b(c, a)
    return c * b / (c - a * (1.0 - b))


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


def wait_quantile_s(quantile: float, arrival_rate_per_s: float, servers: int,
                    mean_service_s: float, service_cv: float = 1.0,
                    arrival_cv: float = 1.0) -> float:
    """Waiting-time quantile in seconds: ``0`` if ``C ≤ 1−q``, else ``k/(cμ−λ)·ln(C/(1−q))``.

    Exact for M/M/c; G/G/c via the Erlang-C / Kingman-scaled exponential tail (module
    docstring). ∞ if ``ρ ≥ 1``.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    _check(arrival_rate_per_s, servers, mean_service_s, service_cv, arrival_cv)
    a = arrival_rate_per_s * mean_service_s
    if a >= servers:
        return math.inf
    if a == 0.0:
        return 0.0
    pw = erlang_c(servers, a)
    tail = 1.0 - quantile
    if pw <= tail:
        return 0.0
    k = _variability(service_cv, arrival_cv)
    drain_per_s = servers / mean_service_s - arrival_rate_per_s
    return k / drain_per_s * math.log(pw / tail)


def max_utilization(servers: int, mean_service_s: float, quantile: float,
                    wait_budget_s: float, service_cv: float = 1.0,
                    arrival_cv: float = 1.0, *, ceiling: float = UTILIZATION_CEILING,
                    tolerance: float = 1e-6) -> float:
    """Largest ``ρ = λ·s/c`` with ``wait_quantile_s(quantile, ...) ≤ wait_budget_s``.

    ``wait_quantile_s`` is non-decreasing in ρ, so bisection on ρ in ``[0, ceiling]``
    (absolute tolerance ``tolerance``, returning the feasible end) finds it. Returns 0 when
    even a trickle of traffic misses the budget (a negative budget: the service time alone
    exceeds the target), and at most ``ceiling`` (< 1).
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if not 0.0 < ceiling < 1.0:
        raise ValueError(f"ceiling must be in (0, 1), got {ceiling}")
    _check(0.0, servers, mean_service_s, service_cv, arrival_cv)
    if wait_budget_s < 0 or math.isnan(wait_budget_s):
        return 0.0
    capacity_per_s = servers / mean_service_s

    def ok(rho: float) -> bool:
        w = wait_quantile_s(quantile, rho * capacity_per_s, servers, mean_service_s,
                            service_cv, arrival_cv)
        return w <= wait_budget_s

    if ok(ceiling):
        return ceiling
    lo, hi = 0.0, ceiling  # ok(lo) holds: zero load never waits
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


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
