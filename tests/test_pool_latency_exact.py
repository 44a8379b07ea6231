"""Shortcuts of planner.pool_latency's numerical kernels give the same numbers, bit for bit (issue 27).

The kernels the cap pricing and the plan's latency call thousands of times take shortcuts that must
not move an answer: ``_jsq_ahead_pmf`` sums its windows as rows of one array; ``_ttft_quantile_s``
builds its (K', u, M) grid only over the weights ``_weighted_quantile`` keeps; ``_long_ttft_quantile_s``
takes a one-lane mixture's sum as its term. Each is checked here against the plain computation it
replaces (the oracles below: the former loop / grid / mixture path), with ``==``, on loads spread
over utilisations, prompt sizes, arrival CVs and instance counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_pool_latency_chain import _count_pmfs_reference

import planner.pool_latency as pl


def _short_loads() -> list[tuple[dict[str, float], float, float]]:
    """(load, quantile, units) of prompts within one lane iteration (f < 1), as unified_at_utilization_many forms them."""
    out = []
    rng = np.random.default_rng(7)
    for _ in range(12):
        f = float(rng.uniform(0.02, 0.9))
        t_d = float(rng.uniform(0.01, 0.05))
        t_c = t_d * float(rng.uniform(1.5, 6.0))
        share = float(rng.uniform(0.05, 0.9))
        rate = share / (f * (t_c - t_d))
        cv = float(rng.choice([0.3, 1.0, 2.5]))
        load = pl.unified_load(rate, t_d, t_c, np.array([f]), np.ones(1), cv)
        out.append((load, float(rng.choice([0.5, 0.9, 0.99])), f))
    return out


def _full_grid_ttft_s(load: dict[str, float], quantile: float, units: float) -> float:
    """_ttft_quantile_s over the whole (K', u, M) grid (its form before the kept box)."""
    t_d, delta, f_eff = load["decode_step_s"], load["delta_s"], load["units_eff"]
    lam_u = load["rate_per_s"] * load["units_mean"] / f_eff
    pk = pl._lane_count_pmf(load)
    kk = np.arange(len(pk), dtype=float)
    t_prev = t_d + delta * np.minimum(1.0, f_eff * kk)
    wk = pk * t_prev / float((pk * t_prev).sum())
    ca2 = load["arrival_cv"] ** 2
    mmax = int(max(8.0, pl._count_quantile(1.0 - 1e-6, lam_u * float(t_prev[-1]), max(ca2, 1.0))))
    m = np.arange(mmax + 1, dtype=float)
    pm = pl._count_pmfs(lam_u * t_prev, ca2, mmax)
    carry = np.maximum(f_eff * kk - 1.0, 0.0)[:, None, None]
    u = pl._U_GRID[None, :, None]
    before = carry + f_eff * (1.0 - u) * m[None, None, :] + units
    total = carry + f_eff * m[None, None, :] + units
    j = np.maximum(1.0, np.ceil(before - 1e-9))
    vals = u * t_prev[:, None, None] + (j - 1.0) * (t_d + delta) + t_d + delta * np.minimum(1.0, total - (j - 1.0))
    wts = wk[:, None, None] * (np.ones_like(pl._U_GRID) / len(pl._U_GRID))[None, :, None] * pm[:, None, :]
    return pl._weighted_quantile(vals.ravel(), wts.ravel(), quantile)


@pytest.mark.parametrize("case", range(12))
def test_short_prompt_ttft_on_the_kept_box_is_the_full_grid_quantile(case: int) -> None:
    load, q, units = _short_loads()[case]
    got = pl._ttft_quantile_s(load, q, units)
    assert math.isfinite(got)
    assert got == _full_grid_ttft_s(load, q, units)


def _ahead_by_loop(rho: float, batch: float, live: int) -> np.ndarray:
    """_jsq_ahead_pmf with its window sums taken one k at a time (its former loop)."""
    rho = min(max(rho, 0.0), 1.0 - 1e-9)
    kl = int(math.ceil(math.log(1e-12) / math.log(rho))) + 1
    p_l = (1.0 - rho) * rho ** np.arange(kl + 1, dtype=float)
    p_l[-1] += max(0.0, 1.0 - p_l.sum())
    kmax = int(batch + 12.0 * math.sqrt(batch) + 14.0)
    pn = pl._count_pmf(batch, 1.0 / math.sqrt(live), kmax)
    px = np.convolve(pn, p_l)
    tail = np.clip(1.0 - np.cumsum(px), 0.0, 1.0)
    pmin = np.clip((px + tail) ** live - tail**live, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(px > 1e-300, pmin / px, 0.0)
    out = np.zeros(kl + 1)
    for k in range(kl + 1):
        out[k] = p_l[k] * float((pn * per[k:k + kmax + 1]).sum())
    return out / out.sum()


@pytest.mark.parametrize("rho", [0.05, 0.4, 0.85, 0.97])
@pytest.mark.parametrize("batch,live", [(0.3, 2), (6.0, 4), (28.0, 17), (140.0, 64)])
def test_jsq_ahead_window_sums_are_the_loop_over_k(rho: float, batch: float, live: int) -> None:
    got = pl._jsq_ahead_pmf(rho, batch, live)
    assert got.shape == (int(math.ceil(math.log(1e-12) / math.log(rho))) + 2,)
    assert np.array_equal(got, _ahead_by_loop(rho, batch, live))


@pytest.mark.parametrize("rho_l", [0.2, 0.6, 0.9])
@pytest.mark.parametrize("live", [2, 5, 17])
@pytest.mark.parametrize("units", [1.0, 2.6, 7.3])
def test_long_prompt_ttft_one_lane_shortcut_is_the_mixture_path(rho_l: float, live: int, units: float) -> None:
    """One lane service time (the cap pricing's case) skips the mixture's weighted sum; the same lane
    service listed twice at half weight each goes through it (0.5 x + 0.5 x = x exactly): the same TTFT."""
    t_d, t_c = 0.02, 0.09
    lane_s = units * t_c
    rate = rho_l / lane_s
    load = pl.unified_load(rate, t_d, t_c, np.array([units]), np.ones(1), 1.0 / math.sqrt(live))
    batch = rate * 300.0 * load["mean_step_s"]
    one = pl._long_ttft_quantile_s(load, 0.99, units, np.array([lane_s]), np.ones(1), live, batch)
    two = pl._long_ttft_quantile_s(load, 0.99, units, np.array([lane_s, lane_s]), np.array([3.0, 3.0]), live, batch)
    assert math.isfinite(one) and one > lane_s
    assert one == two


def _long_loads() -> list[tuple[dict[str, float], float, float, float, int, float]]:
    """(load, quantile, units, lane service s, instances, batch) of prompts longer than the lane (f ≥ 1),
    as unified_at_utilization_many forms them: one and several instances, light to heavy lanes."""
    out = []
    for rho_l, live, units in ((0.2, 2, 1.0), (0.6, 5, 2.6), (0.9, 17, 7.3), (0.5, 1, 3.4), (0.85, 64, 1.7), (0.3, 1, 1.2)):
        t_d, t_c = 0.02, 0.09
        lane_s = units * t_c
        rate = rho_l / lane_s
        load = pl.unified_load(rate, t_d, t_c, np.array([units]), np.ones(1), 1.0 / math.sqrt(live))
        for q in (0.5, 0.99):
            out.append((load, q, units, lane_s, live, rate * 300.0 * load["mean_step_s"]))
    return out


def _bisection_one_midpoint_at_a_time(law: pl._LongTtftLaw, quantile: float) -> float:
    """_long_ttft_quantile_s's bisection as it was: the CDF at one midpoint per step."""
    lo, hi = law.lo, law.hi
    while float(law.cdf_many(np.array([hi]))[0]) < quantile:
        hi = lo + 2.0 * (hi - lo)
        if hi > 1e7:
            return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if float(law.cdf_many(np.array([mid]))[0]) < quantile:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-5 * hi:
            break
    return hi


@pytest.mark.parametrize("case", range(12))
def test_long_prompt_bisection_with_lookahead_takes_the_one_midpoint_steps(case: int) -> None:
    """The bisection prices _LOOKAHEAD halvings' midpoints per CDF call: the same answer as one midpoint a call,
    and the CDF of a row in a batch is the CDF of that row alone."""
    load, q, units, lane_s, live, batch = _long_loads()[case]
    law = pl._long_ttft_law(load, units, np.array([lane_s]), np.ones(1), live, batch)
    assert law is not None
    got = pl._long_ttft_quantile_s(load, q, units, np.array([lane_s]), np.ones(1), live, batch)
    assert math.isfinite(got)
    assert got == _bisection_one_midpoint_at_a_time(law, q)
    xs = np.linspace(law.lo, 3.0 * got, 7)
    assert np.array_equal(law.cdf_many(xs), np.array([law.cdf_many(np.array([x]))[0] for x in xs]))
    f = law.cdf_many(np.linspace(0.0, 3.0 * got, 400))
    assert law.monotone == (live > 1) and (not law.monotone or bool(np.all(np.diff(f) >= 0.0)))


_OFFSETS = (-0.1, -1e-3, -1e-6, -2e-5, -1e-9, -1e-15, 0.0, 1e-15, 1e-9, 2e-5, 1e-6, 1e-3, 0.1)
"""Relative offsets of a TTFT budget from the quantile itself: far, within the shortcuts' margins, and exactly at it."""


@pytest.mark.parametrize("case", range(12))
def test_short_prompt_ttft_verdict_is_the_quantiles(case: int) -> None:
    """_ttft_quantile_meets gives meets(_ttft_quantile_s) for budgets on both sides of the quantile, the
    budget equal to the quantile (the sorted fall-back) included; a wait in front as the cap pricing adds."""
    load, q, units = _short_loads()[case]
    value = pl._ttft_quantile_s(load, q, units)
    for wait_ms in (0.0, 37.5):
        for rel in _OFFSETS:
            target = wait_ms + 1e3 * value * (1.0 + rel)

            def meets(v: np.ndarray, target: float = target, wait_ms: float = wait_ms) -> np.ndarray:
                return np.asarray(wait_ms + 1e3 * v <= target)

            assert pl._ttft_quantile_meets(load, q, units, meets) == bool(meets(np.array([value]))[0]), (rel, wait_ms)


@pytest.mark.parametrize("case", range(12))
def test_long_prompt_ttft_verdict_is_the_quantiles(case: int) -> None:
    """_long_ttft_quantile_meets gives meets(_long_ttft_quantile_s) on both sides of the quantile and at it, and
    with a threshold hint that is off (the shortcut must then not decide wrongly)."""
    load, q, units, lane_s, live, batch = _long_loads()[case]
    args = (load, q, units, np.array([lane_s]), np.ones(1), live, batch)
    value = pl._long_ttft_quantile_s(*args)
    for rel in _OFFSETS:
        budget = value * (1.0 + rel)

        def meets(v: np.ndarray, budget: float = budget) -> np.ndarray:
            return np.asarray(v <= budget)

        want = bool(meets(np.array([value]))[0])
        assert pl._long_ttft_quantile_meets(*args, meets, budget) == want, rel
        assert pl._long_ttft_quantile_meets(*args, meets, budget * 1.5) == want, rel
        assert pl._long_ttft_quantile_meets(*args, meets, budget * 0.5) == want, rel


@pytest.mark.parametrize("dispersion", [1.0, 1.0 + 1e-10, 0.999, 0.5, 1.0 / math.sqrt(17), 1e-9, 1.7, 44.0])
def test_count_pmf_one_row_is_the_stacked_rows(dispersion: float) -> None:
    """``_count_pmf`` (one mean, 1-D arrays: the kernels' most called function) and ``_count_pmfs`` give the former
    computation's numbers (``tests/test_pool_latency_chain.py``'s reference), bit for bit, from an empty mean to far tails, Poisson, binomial and negative binomial."""
    rng = np.random.default_rng(11)
    means = np.concatenate([[0.0, 1e-6, 0.5, 3.0, 3.0000001], rng.lognormal(1.5, 2.0, size=40)])
    for kmax in (1, 7, 64, 401):
        stacked = pl._count_pmfs(means, dispersion, kmax)
        np.testing.assert_array_equal(stacked, _count_pmfs_reference(means, dispersion, kmax))
        for j, m in enumerate(means):
            np.testing.assert_array_equal(pl._count_pmf(float(m), dispersion, kmax), stacked[j])
