"""Queueing approximations against exact M/M/1, M/M/c and M/D/1 results, plus invariants."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import queueing as q


def _erlang_b_exact(c: int, a: int) -> Fraction:
    """B(c,a) = (a^c/c!) / Σ_k a^k/k!, in exact rationals."""
    terms = [Fraction(a**k, math.factorial(k)) for k in range(c + 1)]
    return terms[-1] / sum(terms)


def test_erlang_c_two_servers_hand_computed() -> None:
    # c=2, a=1: B = (1/2)/(1+1+1/2) = 1/5, C = 2·(1/5)/(2 − 1·4/5) = 1/3
    assert q.erlang_b(2, 1.0) == pytest.approx(0.2, rel=1e-12)
    assert q.erlang_c(2, 1.0) == pytest.approx(1 / 3, rel=1e-12)


@pytest.mark.parametrize("c,a", [(1, 0), (3, 2), (10, 7), (64, 50), (65, 50), (120, 100), (300, 280)])
def test_erlang_b_matches_exact_rationals(c: int, a: int) -> None:
    exact = float(_erlang_b_exact(c, a)) if a > 0 else 0.0
    assert q.erlang_b(c, float(a)) == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_erlang_c_large_pool_is_finite_and_consistent() -> None:
    # 40 000 decode slots at 97% load: no overflow, and the Halfin–Whitt regime gives a
    # moderate probability of waiting (β = (1−ρ)√c = 6 → C is tiny but positive).
    c = 40_000
    pw = q.erlang_c(c, 0.97 * c)
    assert 0.0 < pw < 1e-6
    # β = 0.5: Halfin–Whitt limit C ≈ [1 + β Φ(β)/φ(β)]^-1 ≈ 0.5 for β ≈ 0.5
    a = c - 0.5 * math.sqrt(c)
    beta = 0.5
    phi = math.exp(-beta * beta / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + math.erf(beta / math.sqrt(2)))
    hw = 1.0 / (1.0 + beta * cdf / phi)
    assert q.erlang_c(c, a) == pytest.approx(hw, rel=0.02)


def test_erlang_c_unstable_is_one() -> None:
    assert q.erlang_c(4, 4.0) == 1.0
    assert q.erlang_c(4, 9.0) == 1.0


@pytest.mark.parametrize("lam,mu", [(0.5, 1.0), (0.9, 1.0), (3.0, 4.0)])
def test_mm1_exact(lam: float, mu: float) -> None:
    rho = lam / mu
    s = 1.0 / mu
    assert q.erlang_c(1, rho) == pytest.approx(rho, rel=1e-12)
    assert q.mean_wait_s(lam, 1, s) == pytest.approx(rho / (mu - lam), rel=1e-12)
    for t in (0.0, 0.3, 2.0):
        assert q.wait_tail_probability(t, lam, 1, s) == pytest.approx(
            rho * math.exp(-(mu - lam) * t), rel=1e-12)
    # quantile inverts the tail: P(W > W_q) = 1 − q
    wq = q.wait_quantile_s(0.99, lam, 1, s)
    assert wq == pytest.approx(math.log(rho / 0.01) / (mu - lam), rel=1e-12)
    assert q.wait_tail_probability(wq, lam, 1, s) == pytest.approx(0.01, rel=1e-9)


def test_mmc_exact_two_servers() -> None:
    # c=2, λ=1, μ=1: C = 1/3, E[W] = C/(cμ−λ) = 1/3, P(W>t) = e^{−t}/3
    assert q.mean_wait_s(1.0, 2, 1.0) == pytest.approx(1 / 3, rel=1e-12)
    assert q.wait_tail_probability(1.0, 1.0, 2, 1.0) == pytest.approx(math.exp(-1) / 3, rel=1e-12)
    # the p50 is 0 because only a third of arrivals wait
    assert q.wait_quantile_s(0.5, 1.0, 2, 1.0) == 0.0
    assert q.wait_quantile_s(0.9, 1.0, 2, 1.0) == pytest.approx(math.log((1 / 3) / 0.1), rel=1e-12)


def test_md1_mean_wait_is_pollaczek_khinchine() -> None:
    # M/D/1: E[W] = ρ s / (2(1−ρ))
    lam, s = 0.8, 1.0
    rho = lam * s
    assert q.mean_wait_s(lam, 1, s, service_cv=0.0) == pytest.approx(rho * s / (2 * (1 - rho)), rel=1e-12)


def test_mg1_mean_wait_is_pollaczek_khinchine() -> None:
    # M/G/1: E[W] = λ E[S²] / (2(1−ρ)), E[S²] = s²(1 + cs²)
    lam, s, cs = 0.6, 0.5, 2.0
    rho = lam * s
    exact = lam * s * s * (1 + cs * cs) / (2 * (1 - rho))
    assert q.mean_wait_s(lam, 1, s, service_cv=cs) == pytest.approx(exact, rel=1e-12)


def test_unstable_and_idle_edges() -> None:
    assert q.mean_wait_s(2.0, 1, 1.0) == math.inf
    assert q.wait_quantile_s(0.99, 2.0, 1, 1.0) == math.inf
    assert q.mean_wait_s(0.0, 3, 1.0) == 0.0
    assert q.wait_quantile_s(0.99, 0.0, 3, 1.0) == 0.0
    with pytest.raises(ValueError):
        q.wait_quantile_s(1.0, 0.5, 1, 1.0)
    with pytest.raises(ValueError):
        q.mean_wait_s(0.5, 0, 1.0)


def test_max_utilization_inverts_wait_quantile() -> None:
    rho = q.max_utilization(4, 0.2, 0.99, 0.5)
    lam = rho * 4 / 0.2
    assert q.wait_quantile_s(0.99, lam, 4, 0.2) <= 0.5 + 1e-12
    # a hair more load breaks the budget
    assert q.wait_quantile_s(0.99, (rho + 1e-5) * 4 / 0.2, 4, 0.2) > 0.5


def test_max_utilization_mm1_closed_form() -> None:
    # M/M/1: W_q = ln(ρ/(1−q)) / (μ(1−ρ)); with μ=1, q=0.9, budget ln(5)/0.5 → ρ = 0.5
    budget = math.log(0.5 / 0.1) / 0.5
    assert q.max_utilization(1, 1.0, 0.9, budget) == pytest.approx(0.5, abs=2e-6)


def test_max_utilization_edges() -> None:
    assert q.max_utilization(2, 1.0, 0.99, -0.1) == 0.0
    # a huge budget is capped below 1
    assert q.max_utilization(2, 1.0, 0.99, 1e9) == q.UTILIZATION_CEILING
    # zero budget: only loads where fewer than 1% of arrivals wait are allowed
    rho0 = q.max_utilization(8, 1.0, 0.99, 0.0)
    assert 0.0 < rho0 < 1.0
    assert q.erlang_c(8, rho0 * 8) <= 0.01 + 1e-9


def test_decode_slots_map_to_servers() -> None:
    assert q.decode_servers(3, 64) == 192
    assert q.decode_service_s(200, 0.025) == pytest.approx(5.0)


loads = st.floats(min_value=0.01, max_value=0.98)
servers = st.integers(min_value=1, max_value=200)
cvs = st.floats(min_value=0.0, max_value=3.0)


@settings(max_examples=80, deadline=None)
@given(rho=loads, c=servers, cs=cvs, ca=cvs)
def test_more_servers_lower_wait(rho: float, c: int, cs: float, ca: float) -> None:
    # same arrival rate, one more server → lower or equal wait
    s = 1.0
    lam = rho * c / s
    w1 = q.wait_quantile_s(0.99, lam, c, s, cs, ca)
    w2 = q.wait_quantile_s(0.99, lam, c + 1, s, cs, ca)
    assert w2 <= w1 + 1e-12
    assert q.mean_wait_s(lam, c + 1, s, cs, ca) <= q.mean_wait_s(lam, c, s, cs, ca) + 1e-12
    assert q.erlang_c(c + 1, lam * s) <= q.erlang_c(c, lam * s) + 1e-12


@settings(max_examples=80, deadline=None)
@given(rho=loads, c=servers, cs=cvs, ca=cvs, bump=st.floats(min_value=1e-3, max_value=0.5))
def test_higher_load_higher_wait(rho: float, c: int, cs: float, ca: float, bump: float) -> None:
    rho2 = min(rho + bump, 0.99)
    s = 0.3
    w1 = q.wait_quantile_s(0.9, rho * c / s, c, s, cs, ca)
    w2 = q.wait_quantile_s(0.9, rho2 * c / s, c, s, cs, ca)
    assert w2 >= w1 - 1e-12
    assert q.mean_wait_s(rho2 * c / s, c, s, cs, ca) >= q.mean_wait_s(rho * c / s, c, s, cs, ca) - 1e-12


@settings(max_examples=40, deadline=None)
@given(c=st.integers(min_value=1, max_value=100), budget=st.floats(min_value=0.0, max_value=5.0),
       extra=st.floats(min_value=0.01, max_value=5.0), cs=st.floats(min_value=0.0, max_value=2.0))
def test_max_utilization_monotone(c: int, budget: float, extra: float, cs: float) -> None:
    base = q.max_utilization(c, 1.0, 0.99, budget, cs)
    assert q.max_utilization(c, 1.0, 0.99, budget + extra, cs) >= base - 2e-6
    assert q.max_utilization(c + 1, 1.0, 0.99, budget, cs) >= base - 2e-6
    assert 0.0 <= base <= q.UTILIZATION_CEILING


# --- M/D/1 exact, M/G/1 exact asymptotic tail, least-loaded lanes ---------------------------

def _md1_exact_quantile(quantile: float, rho: float, d: float = 1.0) -> float:
    lo, hi = 0.0, 200.0 * d
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if q.md1_wait_cdf(mid, rho / d, d) >= quantile:
            hi = mid
        else:
            lo = mid
    return hi


def test_md1_cdf_exact_values() -> None:
    # P(W = 0) = 1 − ρ; on [0, D) only the k = 0 term: (1 − ρ) e^{λt}
    assert q.md1_wait_cdf(0.0, 0.5, 1.0) == pytest.approx(0.5, rel=1e-12)
    assert q.md1_wait_cdf(0.7, 0.5, 1.0) == pytest.approx(0.5 * math.exp(0.35), rel=1e-12)
    # t in [D, 2D): (1 − ρ)(e^{λt} − λ(t − D) e^{λ(t − D)}), here λ = 0.5, t = 1.5
    assert q.md1_wait_cdf(1.5, 0.5, 1.0) == pytest.approx(0.5 * (math.exp(0.75) - 0.25 * math.exp(0.25)), rel=1e-12)


@pytest.mark.parametrize("rho", [0.3, 0.8])
def test_md1_cdf_mean_is_pollaczek_khinchine(rho: float) -> None:
    # E[W] = ∫ P(W > t) dt = ρD / (2(1 − ρ)); the series stays accurate far into the tail
    # (up to 30 decay lengths, where the alternating terms reach ~e^{λt} ≫ 1)
    d, h = 1.0, 0.05
    horizon = 30.0 / q.mg1_tail_decay(rho, d)[0]
    ts = [h * (i + 0.5) for i in range(int(horizon / h))]
    mean = sum(1.0 - q.md1_wait_cdf(t, rho, d) for t in ts) * h
    assert mean == pytest.approx(rho * d / (2 * (1 - rho)), rel=2e-3)


@pytest.mark.parametrize("rho", [0.05, 0.1, 0.14, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95])
def test_mg1_tail_matches_exact_md1_quantile(rho: float) -> None:
    exact = _md1_exact_quantile(0.99, rho)
    assert q.mg1_wait_quantile_s(0.99, rho, 1.0) == pytest.approx(exact, rel=0.002)
    # the Cramér–Lundberg asymptotic alone (a two-valued mixture that is nearly deterministic)
    assert q.mg1_wait_quantile_s(0.99, rho, [1.0, 1.0 + 1e-9]) == pytest.approx(exact, rel=0.1)
    assert float(q.md1_wait_quantile_s(0.99, rho, 1.0)) == pytest.approx(q.mg1_wait_quantile_s(0.99, rho, 1.0), rel=1e-9)
    # Kingman's exponential tail (wait_quantile_s with c = 1) is the pessimistic heavy-traffic limit
    assert q.wait_quantile_s(0.99, rho, 1, 1.0, 0.0, 1.0) >= exact * (1 - 1e-3)


def test_mg1_lundberg_root_and_constant() -> None:
    s, p, lam = [0.1, 0.3, 1.2], [0.5, 0.3, 0.2], 1.5
    th, g = q.mg1_tail_decay(lam, s, p)
    ee = sum(pi * math.exp(th * si) for si, pi in zip(s, p, strict=True))
    assert lam * (ee - 1.0) == pytest.approx(th, rel=1e-10)
    d1 = lam * sum(pi * si * math.exp(th * si) for si, pi in zip(s, p, strict=True)) - 1.0
    rho = lam * sum(pi * si for si, pi in zip(s, p, strict=True))
    assert g == pytest.approx((1 - rho) / d1, rel=1e-10)
    # a mixture of equal values is M/D/1; P(W > 0) never above ρ
    assert q.mg1_tail_decay(0.25, [2.0, 2.0]) == pytest.approx(q.mg1_tail_decay(0.25, 2.0))
    assert q.mg1_wait_tail_probability(0.0, lam, s, p) <= rho + 1e-12
    assert q.mg1_wait_quantile_s(0.99, 10.0, [0.1]) == math.inf
    assert q.md1_wait_quantile_s(0.99, np.array([1.0, 0.005]), 1.0).tolist() == [math.inf, 0.0]


def test_residual_wait_by_hand() -> None:
    # D = 1, ρ = 0.5: P(W > w) = 0.5 (1 − w) = 0.01 → w = 0.98
    assert q.residual_wait_quantile_s(0.99, 0.5, 1.0) == pytest.approx(0.98, rel=1e-12)
    # S ∈ {1, 3} equally likely, ρ = 0.4: 0.4 · 0.5 (3 − w) / 2 = 0.01 → w = 2.9
    assert q.residual_wait_quantile_s(0.99, 0.4, [1.0, 3.0]) == pytest.approx(2.9, rel=1e-12)
    # ... and into the lower segment: ρ = 0.4, q = 0.5: 0.4 (0.5(3 − w) + 0.5(1 − w)) / 2 = 0.5 → w < 0 → 0
    assert q.residual_wait_quantile_s(0.5, 0.4, [1.0, 3.0]) == 0.0
    assert q.residual_wait_quantile_s(0.99, 0.005, 1.0) == 0.0


@settings(max_examples=60, deadline=None)
@given(c=st.integers(1, 64), rho=st.floats(0.02, 0.97), s1=st.floats(0.01, 2.0), s2=st.floats(0.01, 2.0),
       w=st.floats(0.05, 0.95))
def test_least_loaded_lane_is_bounded_by_random_split(c: int, rho: float, s1: float, s2: float, w: float) -> None:
    svc, wts = [s1, s2], [w, 1 - w]
    mean = w * s1 + (1 - w) * s2
    lam = rho * c / mean
    got, info = q.least_loaded_lane_wait_quantile_s(0.99, lam, c, svc, wts)
    assert 0.0 <= got <= info["lane_wait_random_s"] + 1e-12
    assert info["lane_utilization"] == pytest.approx(rho)
    if c == 1:
        assert got == pytest.approx(q.mg1_wait_quantile_s(0.99, lam, svc, wts), rel=1e-12)
    more, _ = q.least_loaded_lane_wait_quantile_s(0.99, lam * 1.02, c, svc, wts) if rho * 1.02 < 1 else (math.inf, {})
    assert more >= got - 1e-12  # monotone in the load


# --- against the simulator (fixed seeds) ------------------------------------------------------

def _sim_lane(instances: int, rho: float, seed: int, n_req: int = 15_000) -> tuple[float, float, float]:
    """Unified pool, Poisson arrivals, prompts of 4 chunks (lane service S = 4 iterations of 20 ms),
    slots never short. Returns (simulated TTFT p99 − S, its 95 % upper rank bound − S, arrival rate)."""
    from planner.simulate import PoolSpec, ServiceRoute, SimConfig, simulate, synthetic_requests
    from planner.simulate.stats import quantile_interval

    t_it, chunk, k, batch = 0.02, 512, 4, 64
    svc = k * t_it
    lam = rho * instances / svc
    out = int(svc * batch * 0.4 / rho / t_it)  # slot utilisation 0.4
    pools = [PoolSpec("u", "unified", instances, prefill_time_s=lambda n: 0.0, step_time_s=lambda b: t_it,
                      max_batch=batch, chunk_tokens=chunk, iteration_time_s=lambda b, c: t_it)]
    dur = n_req / lam
    res = simulate(pools, [ServiceRoute("s", unified="u")],
                   synthetic_requests(lam, dur, input_tokens=[k * chunk], output_tokens=[out], seed=seed),
                   SimConfig(warmup_s=0.1 * dur))
    h = res.histograms["service:s:ttft"]
    lo, hi = quantile_interval(h, 0.99, 0.95)
    return h.quantile(0.99) - svc, hi - svc, lam


def test_single_lane_is_md1_in_the_simulator() -> None:
    # one instance: the lane is M/D/1; the simulated wait adds up to one iteration (20 ms) of
    # alignment to the running iteration
    for rho in (0.3, 0.7):
        w_sim, _hi, lam = _sim_lane(1, rho, seed=11)
        exact = _md1_exact_quantile(0.99, rho, 0.08)
        assert q.mg1_wait_quantile_s(0.99, lam, 0.08) == pytest.approx(exact, rel=0.01)
        assert exact - 0.01 <= w_sim <= exact + 0.02 + 0.12 * exact, (rho, w_sim, exact)


def test_least_loaded_lanes_in_the_simulator() -> None:
    # 16 instances behind the simulator's least-loaded router: far below the per-instance M/D/1
    # (random split), and the least-loaded model stays an upper bound within 10 % + alignment
    for rho in (0.3, 0.7):
        w_sim, _hi, lam = _sim_lane(16, rho, seed=5)
        model, info = q.least_loaded_lane_wait_quantile_s(0.99, lam, 16, 0.08)
        assert w_sim < 0.5 * info["lane_wait_random_s"] or rho < 0.5
        assert w_sim - 0.02 <= model <= 1.1 * w_sim, (rho, w_sim, model, info)
