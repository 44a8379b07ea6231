"""The TPOT window's count (planner.pool_latency._tpot_quantile_s and its two laws), by hand and by simulation.

* ``_least_loaded_share(c, m)`` is ``E[c ⌊N/c⌋ / N]`` with ``N = 1 + Poisson(m)``: summed here term by term.
* ``_family_count_quantile`` is the total of Poisson immigrants' Borel families (by its two moments): without
  children it is the immigrants' own count; with children its quantiles are a seeded Monte-Carlo of the branching
  process's.
* ``_tpot_quantile_s`` stays between the decode step and the full chunk, grows with the quantile and never
  counts more prompts than the other ``B* − 1`` slots hold.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.pool_latency as pl


@pytest.mark.parametrize(("live", "others"), [(2, 0.5), (2, 3.0), (4, 6.0), (17, 20.0)])
def test_least_loaded_share_is_the_sum_over_the_pool_count(live: int, others: float) -> None:
    total = 0.0
    for k in range(400):  # N − 1 = k, Poisson(others)
        p = math.exp(-others + k * math.log(others) - math.lgamma(k + 1))
        n = k + 1
        total += p * live * (n // live) / n
    assert pl._least_loaded_share(live, others) == pytest.approx(total, rel=1e-9)


def test_least_loaded_share_by_hand() -> None:
    # two instances, N = 1 + Poisson(m): N = 1 → 0 (the other instance is empty), N = 2 → 1, N = 3 → 2/3
    m = 0.5
    p = [math.exp(-m) * m**k / math.factorial(k) for k in range(60)]
    by_hand = sum(pk * 2 * ((k + 1) // 2) / (k + 1) for k, pk in enumerate(p))
    assert pl._least_loaded_share(2, m) == pytest.approx(by_hand, rel=1e-9)
    assert pl._least_loaded_share(1, 3.0) == 1.0  # one instance takes every arrival
    assert pl._least_loaded_share(64, 0.0) == 0.0  # alone in the pool: the router sends the others elsewhere
    assert pl._least_loaded_share(4, 4000.0) == pytest.approx(1.0, abs=2e-3)  # many requests each: an even share


def test_family_count_without_children_is_the_immigrants_count() -> None:
    for q in (0.5, 0.9, 0.99):
        assert pl._family_count_quantile(q, 2.5, 0.0, 1.0, math.inf) == pl._count_quantile(q, 2.5, 1.0)
    assert pl._family_count_quantile(0.99, 0.0, 0.5, 1.0, 10.0) == 0.0


@pytest.mark.parametrize(("immigrants", "a"), [(0.9, 0.43), (3.0, 0.6), (12.0, 0.3)])
def test_family_count_quantiles_are_the_branching_process(immigrants: float, a: float) -> None:
    """Monte-Carlo of Poisson(immigrants) founders, each with Poisson(a) children per member, against the law."""
    rng = np.random.default_rng(7)
    draws = 40_000
    totals = np.empty(draws)
    for i in range(draws):
        alive = rng.poisson(immigrants)
        total = alive
        while alive:
            alive = int(rng.poisson(a * alive))
            total += alive
        totals[i] = total
    def cdf(n: float) -> float:
        return float((totals <= n).mean())

    for q in (0.3, 0.5, 0.7, 0.9, 0.99):
        law = pl._family_count_quantile(q, immigrants, a, 1.0, math.inf)
        # the smallest n with P(T ≤ n) ≥ q, to the sample's error
        assert cdf(law) >= q - 0.01, (q, law, cdf(law))
        assert law == 0 or cdf(law - 1) < q + 0.01, (q, law, cdf(law - 1))
    assert totals.mean() == pytest.approx(immigrants / (1.0 - a), rel=0.03)


def _load(rate: float, live: int = 1, units: float = 0.7, t_d: float = 0.013, delta: float = 0.064, ca: float = 1.0) -> dict[str, float]:
    return pl.unified_load(rate, t_d, t_d + delta, np.array([units]), np.array([1.0]),
                           pl.instance_arrival_cv(ca, live, units))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(rate=st.floats(0.05, 30.0), live=st.sampled_from([1, 2, 4, 17, 64]), units=st.floats(0.05, 2.5),
       outputs=st.floats(2.0, 400.0), batch=st.floats(1.0, 256.0))
def test_tpot_is_bounded_monotone_and_capped(rate: float, live: int, units: float, outputs: float, batch: float) -> None:
    load = _load(rate, live, units)
    if not load["share"] < 1.0:
        assert pl._tpot_quantile_s(load, 0.99, outputs, batch, live) == math.inf
        return
    t_d, delta, f_eff = load["decode_step_s"], load["delta_s"], load["units_eff"]
    vals = [pl._tpot_quantile_s(load, q, outputs, batch, live) for q in (0.5, 0.9, 0.99)]
    assert all(t_d - 1e-12 <= v <= t_d + delta + 1e-12 for v in vals)
    assert vals == sorted(vals)
    gaps = max(outputs - 1.0, 1.0)
    assert vals[-1] <= t_d + delta * min(1.0, f_eff * max(batch - 1.0, 1.0) / gaps) + 1e-12  # the other slots


def test_least_loaded_share_of_huge_pools_takes_the_normal_law() -> None:
    """A hostile pool (10¹² requests, a million instances) costs no memory beyond a few thousand floats: past 10⁵
    requests the Poisson count is its normal law, within 10⁻⁵ of the exact sum at the switch and of the asymptote
    ``1 − (c − 1)/(2 (m + 1))`` where ``m ≫ c``; an infinite count is an even share, a pool of fewer requests than
    instances none."""
    exact = pl._least_loaded_share(4, pl._LEAST_LOADED_EXACT_MAX)
    normal = pl._least_loaded_share(4, pl._LEAST_LOADED_EXACT_MAX * (1 + 1e-9))
    assert normal == pytest.approx(exact, abs=1e-5)
    assert pl._least_loaded_share(17, 1e12) == pytest.approx(1.0 - 16 / (2 * (1e12 + 1)), abs=1e-9)
    assert pl._least_loaded_share(10**6, 5e5) == 0.0
    assert pl._least_loaded_share(3, math.inf) == 1.0
