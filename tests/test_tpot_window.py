"""The TPOT window's count (planner.pool_latency._tpot_quantile_s and its two laws), by hand and by simulation.

* ``_least_loaded_share(c, m)`` is ``E[c ⌊N/c⌋ / N]`` with ``N = 1 + Poisson(m)``: summed here term by term.
* ``_family_count_quantile`` is the total of Poisson immigrants' Borel families (by its two moments): without
  children it is the immigrants' own count; with children its quantiles are a seeded Monte-Carlo of the branching
  process's.
* ``_tpot_quantile_s`` stays between the decode step and the full chunk, grows with the quantile and never
  counts more prompts than the slots free when the window opens and those freed during it (the pool's slots per
  instance, ``pool_slots``): about the other ``B* − 1`` of one output length, many more for a short answer among
  long ones.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
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
       outputs=st.floats(2.0, 400.0), slots=st.floats(1.0, 256.0), fill=st.floats(0.0, 1.5))
@example(rate=1.0, live=1, units=1.0, outputs=68.0, slots=2.0, fill=0.5)  # a fractional cap below the count's quantile
def test_tpot_is_bounded_monotone_and_capped(rate: float, live: int, units: float, outputs: float, slots: float,
                                             fill: float) -> None:
    """Between the decode step and the full chunk, non-decreasing in the quantile, and at most the slots free when the
    window opens (``slots − 1 − batch``, the batch at load ``fill · slots``) and those freed during it (departures at
    the arrival rate over the window ``(o − 1) t̄ + lead``)."""
    load = _load(rate, live, units)
    batch = fill * slots
    if not load["share"] < 1.0:
        assert pl._tpot_quantile_s(load, 0.99, outputs, slots, live, batch) == math.inf
        return
    t_d, delta, f_eff = load["decode_step_s"], load["delta_s"], load["units_eff"]
    vals = [pl._tpot_quantile_s(load, q, outputs, slots, live, batch) for q in (0.5, 0.9, 0.99)]
    assert all(t_d - 1e-12 <= v <= t_d + delta + 1e-12 for v in vals)
    assert vals == sorted(vals)
    gaps = max(outputs - 1.0, 1.0)
    window_s = gaps * load["mean_step_s"] + pl._tpot_lead_s(load, queued=live == 1)
    held = min(batch, slots - 1.0)
    cap = max((slots - 1.0 - held + min(rate * window_s, held)) * load["units_mean"] / f_eff, 1.0)
    assert vals[-1] <= t_d + delta * min(1.0, f_eff * cap / gaps) + 1e-12  # the free slots and the freed ones
    assert vals[-1] <= t_d + delta * min(1.0, f_eff * max(slots - 1.0, 1.0) / gaps) + 1e-12  # never above the other slots


def test_the_slot_cap_of_one_output_length_is_the_points_other_slots() -> None:
    """One output length near saturation: the window (lead and ``o − 1`` gaps) outlasts the lives of the requests in
    the slots, so every occupant frees its slot once (``min(λ W, B) = B``) and the cap is the point's other ``B* − 1``
    slots, the cap before 2026-12-07. 8,000-token prompts (1.4 chunks) on one instance at 3 req/s, 12 slots."""
    load = _load(3.0, 1, 1.4)
    o, slots = 40.0, 12.0
    batch = 3.0 * o * load["mean_step_s"]
    lead = pl._tpot_lead_s(load, queued=True)
    assert 3.0 * ((o - 1.0) * load["mean_step_s"] + lead) >= batch  # the window frees every occupied slot
    delta, f_eff, t_d = load["delta_s"], load["units_eff"], load["decode_step_s"]
    for q in (0.5, 0.99, 0.999999):
        got = pl._tpot_quantile_s(load, q, o, slots, 1, batch)
        assert got <= t_d + delta * min(1.0, f_eff * (slots - 1.0) / (o - 1.0)) + 1e-12
    assert pl._tpot_quantile_s(load, 0.999999, o, slots, 1, batch) == pytest.approx(
        t_d + delta * min(1.0, f_eff * (slots - 1.0) / (o - 1.0)), rel=1e-12)  # held by the slots, not the bursts


def test_a_short_answer_in_a_pool_of_long_ones_is_not_held_to_its_own_points_batch() -> None:
    """A 25-token answer's window in a pool whose instance has ~40 slots, ~13 busy (the spread-output grid's one
    instance of 8,000-token prompts at 70 %: its own point's batch is 3). Held to its point's 2 other slots the TPOT
    p99 was 88 ms against 376 simulated; with the pool's free slots it is the uncapped law's (the arrivals' bursts
    decide it, not the slots)."""
    load = pl.unified_load(0.86, 0.0347, 0.0347 + 0.3418, np.array([1.8668]), np.array([1.0]), 1.0)
    batch = 0.86 * 200.0 * load["mean_step_s"]
    pooled = pl._tpot_quantile_s(load, 0.99, 25.0, 39.0, 1, batch)
    uncapped = pl._tpot_quantile_s(load, 0.99, 25.0, math.inf, 1, batch)
    own_point = pl._tpot_quantile_s(load, 0.99, 25.0, 3.0, 1, 3.0)
    assert pooled == uncapped
    assert own_point < 0.5 * pooled


def test_pool_slots_weights_the_batches_by_busy_time() -> None:
    assert pl.pool_slots(np.array([1.0, 3.0]), np.array([2.0, 0.5]), np.array([10.0, 40.0])) == pytest.approx(
        (2.0 * 10.0 + 1.5 * 40.0) / 3.5, rel=1e-12)
    assert pl.pool_slots(np.array([0.0]), np.array([1.0]), np.array([8.0])) == math.inf
    assert pl.pool_slots(np.array([1.0]), np.array([1.0]), np.array([0.0])) == 1.0  # a batch below one slot is one


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


def test_kept_order_is_one_for_equal_lives_and_falls_with_their_spread() -> None:
    """``ξ = E[(1 − |o₁ − o₂| / w)⁺]`` by hand: equal outputs keep the router's order (1); two outputs 25 and 375 at
    equal rates over a 24-iteration window keep it only within a length (½: the pairs of one length); a window longer
    than every difference keeps ``1 − E|o₁ − o₂| / w``."""
    assert pl._kept_order((np.array([200.0]), np.array([1.0])), 30.0) == 1.0
    assert pl._kept_order((np.array([25.0, 375.0]), np.array([1.0, 1.0])), 24.0) == pytest.approx(0.5, rel=1e-12)
    assert pl._kept_order((np.array([25.0, 375.0]), np.array([1.0, 3.0])), 1000.0) == pytest.approx(
        1.0 - 2 * 0.25 * 0.75 * 350.0 / 1000.0, rel=1e-12)
    assert pl._kept_order((np.array([25.0]), np.array([0.0])), 24.0) == 1.0  # no traffic: nothing to displace


def test_spread_lives_make_a_short_windows_count_poisson_behind_the_router() -> None:
    """Behind 17 instances the count of a 25-token answer's window has the dispersion of an instance fed every 17th
    arrival when every answer is as long (``c_a²/c / (1 − a)²``), and moves toward Poisson when the pool's answers are
    spread over 25–375 tokens (their departures no longer keep the router's order): a higher TPOT p99, as simulated
    (the spread-output grid's 8,000-token prompts behind 17 instances at 70 %: 177 ms, 114 with the order kept)."""
    load = pl.unified_load(0.86, 0.0347, 0.0347 + 0.3418, np.array([1.8668]), np.array([1.0]),
                           pl.instance_arrival_cv(1.0, 17, 1.8668))
    outs = np.array([25.0, 75.0, 125.0, 175.0, 225.0, 275.0, 325.0, 375.0])
    kept = pl._tpot_quantile_s(load, 0.99, 25.0, 39.0, 17, 13.0, (np.array([25.0]), np.array([1.0])))
    plain = pl._tpot_quantile_s(load, 0.99, 25.0, 39.0, 17, 13.0)
    spread = pl._tpot_quantile_s(load, 0.99, 25.0, 39.0, 17, 13.0, (outs, np.ones(8)))
    assert kept == plain  # one length: the order kept, the law before
    assert spread > 1.3 * plain
    assert spread <= load["decode_step_s"] + load["delta_s"] + 1e-12
