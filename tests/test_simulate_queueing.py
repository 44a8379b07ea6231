"""The simulator against exact queueing results, with replications and confidence bounds.

Each check runs ``R`` independent replications (fixed seeds), takes the replication means
and asserts the exact value lies within ``Z`` standard errors (plus the histogram's bin
resolution for tail probabilities). Service times: prompts of geometric length with mean
1000 tokens at 1 ms/token — exponential to within a coefficient of variation of
``sqrt(1 − 1/1000)``; deterministic service for M/D/1.
"""

from __future__ import annotations

import math

import numpy as np

from planner import queueing as q
from planner.simulate import PoolSpec, ServiceRoute, SimConfig, simulate, synthetic_requests

R = 6
Z = 4.0
N_REQ = 12_000
MS_PER_TOKEN = 1e-3


def _geometric_tokens(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).geometric(1 / 1000, 50_000)


def _check_mmc(servers: int, rho: float, t_tail: float) -> None:
    tokens = _geometric_tokens(99)
    s = float(tokens.mean()) * MS_PER_TOKEN
    rate = rho * servers / s
    means, tails = [], []
    for seed in range(R):
        duration = N_REQ / rate
        pools = [PoolSpec("pf", "prefill", servers, prefill_time_s=lambda n: n * MS_PER_TOKEN),
                 PoolSpec("dec", "decode", 1, prefill_time_s=lambda n: 0.0,
                          step_time_s=lambda b: 1e-6, max_batch=4 * N_REQ)]
        routes = [ServiceRoute("s", prefill="pf", decode="dec")]
        stream = synthetic_requests(rate, duration, input_tokens=tokens,
                                    output_tokens=np.ones_like(tokens), seed=seed)
        res = simulate(pools, routes, stream, SimConfig(warmup_s=0.1 * duration))
        w = res.pools["pf"].wait
        means.append(w.mean)
        tails.append(_share_above(res, t_tail))
    exact_mean = q.mean_wait_s(rate, servers, s)
    exact_tail = q.wait_tail_probability(t_tail, rate, servers, s)
    m, se = float(np.mean(means)), float(np.std(means, ddof=1) / math.sqrt(R))
    assert abs(m - exact_mean) <= Z * se, (m, se, exact_mean)
    tm, tse = float(np.mean(tails)), float(np.std(tails, ddof=1) / math.sqrt(R))
    assert abs(tm - exact_tail) <= Z * tse + 0.003, (tm, tse, exact_tail)


def _share_above(res, t: float) -> float:  # type: ignore[no-untyped-def]
    return res.share_above("pool", "pf", "wait", t)


def test_mm1_mean_wait_and_tail() -> None:
    _check_mmc(1, 0.7, 2.0)


def test_mmc_mean_wait_and_tail() -> None:
    _check_mmc(3, 0.8, 0.5)


def test_md1_mean_wait_pollaczek_khinchine() -> None:
    tokens = np.full(10, 1000)
    s = 1.0
    rho = 0.8
    rate = rho / s
    means = []
    for seed in range(R):
        duration = N_REQ / rate
        pools = [PoolSpec("pf", "prefill", 1, prefill_time_s=lambda n: n * MS_PER_TOKEN),
                 PoolSpec("dec", "decode", 1, prefill_time_s=lambda n: 0.0,
                          step_time_s=lambda b: 1e-6, max_batch=4 * N_REQ)]
        routes = [ServiceRoute("s", prefill="pf", decode="dec")]
        stream = synthetic_requests(rate, duration, input_tokens=tokens,
                                    output_tokens=np.ones_like(tokens), seed=100 + seed)
        res = simulate(pools, routes, stream, SimConfig(warmup_s=0.1 * duration))
        means.append(res.pools["pf"].wait.mean)
    exact = rho * s / (2 * (1 - rho))  # Pollaczek–Khinchine, cs = 0
    assert exact == q.mean_wait_s(rate, 1, s, service_cv=0.0)
    m, se = float(np.mean(means)), float(np.std(means, ddof=1) / math.sqrt(R))
    assert abs(m - exact) <= Z * se, (m, se, exact)


def test_decode_pool_is_mmc_with_slots_as_servers() -> None:
    # 2 instances x 4 slots = 8 servers; a constant step time makes a sequence's slot time
    # output_tokens x step: exponential when output lengths are geometric (mean 200).
    step = 0.005
    out = np.random.default_rng(7).geometric(1 / 200, 50_000)
    s = float(out.mean()) * step
    c = 8
    rho = 0.8
    rate = rho * c / s
    means, pws = [], []
    for seed in range(R):
        duration = N_REQ / rate
        pools = [PoolSpec("dec", "decode", 2, prefill_time_s=lambda n: 0.0,
                          step_time_s=lambda b: step, max_batch=4)]
        routes = [ServiceRoute("s", decode="dec")]
        stream = synthetic_requests(rate, duration, input_tokens=np.ones_like(out),
                                    output_tokens=out, seed=200 + seed)
        res = simulate(pools, routes, stream, SimConfig(warmup_s=0.1 * duration))
        means.append(res.pools["dec"].wait.mean)
        pws.append(res.share_above("pool", "dec", "wait", step))  # joins wait < 1 step for a boundary
    exact_mean = q.mean_wait_s(rate, c, s)
    exact_pw = q.erlang_c(c, rate * s)
    # joining at the next step boundary adds ~step/2 to every wait: within tolerance below
    m, se = float(np.mean(means)), float(np.std(means, ddof=1) / math.sqrt(R))
    assert abs(m - exact_mean) <= Z * se + step, (m, se, exact_mean)
    pm, pse = float(np.mean(pws)), float(np.std(pws, ddof=1) / math.sqrt(R))
    # P(W > one step) is a hair below P(W > 0)
    assert abs(pm - exact_pw * math.exp(-(c / s - rate) * step)) <= Z * pse + 0.01, (pm, exact_pw)
