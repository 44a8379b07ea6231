"""The least-loaded router's laws (planner.pool_latency): the tilt behind ``_jsq_ahead_pmf`` by hand, and their
memory bounded by their inputs' size, not their values.

* ``_jsq_tilt(P_L, B, c)`` is ``r(k) = Σ_n P(N = n) P(min = n + k) / g(n + k)``: a probability tilt
  (``Σ_k P(L = k) r(k) = 1``), never favouring a fuller lane, summed here by hand for two instances, flat where the
  decode counts hide the lane.
* ``_geometric_lane_pmf`` and ``_ROUTER_BATCH_MAX``: a lane at ρ 1 − 10⁻⁹ asked ``_jsq_ahead_pmf`` for a geometric law
  of 2.8·10¹⁰ entries (206 GiB; the deepseek example's solve reached it when a change tried this session counted the
  lane in ``_chosen_batch_ratio``), an instance of a 10¹² batch for 10¹² floats.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.pool_latency as pl


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 0.95), st.floats(0.05, 400.0), st.integers(2, 64))
def test_tilt_is_a_probability_tilt(rho: float, batch: float, live: int) -> None:
    lane = (1.0 - rho) * rho ** np.arange(40, dtype=float)
    lane /= lane.sum()
    r = pl._jsq_tilt(lane, batch, live)
    assert r.shape == lane.shape and np.all(r >= 0.0)
    assert float((lane * r).sum()) == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.diff(r[lane > 1e-9]) <= 1e-9)  # more prompts in a lane: never likelier chosen


def test_tilt_by_hand_for_two_instances() -> None:
    # c = 2, no decode counts (batch 0: N = 0), L ∈ {0, 1} with P 1/2 each: X = L. The router picks the smaller
    # (ties: either): P(chosen L = 0) = P(both 0) + P(one 0) = 1/4 + 1/2 = 3/4, so r(0) = 3/2, r(1) = 1/2
    r = pl._jsq_tilt(np.array([0.5, 0.5]), 0.0, 2)
    assert r == pytest.approx([1.5, 0.5], rel=1e-12)
    # a large batch hides the lane: the tilt is flat, and beyond the bound exactly 1
    assert pl._jsq_tilt(np.array([0.5, 0.3, 0.2]), 5_000.0, 4) == pytest.approx(np.ones(3), abs=0.05)
    assert np.array_equal(pl._jsq_tilt(np.array([0.5, 0.5]), 1e9, 4), np.ones(2))


def test_jsq_ahead_law_is_the_tilted_lane() -> None:
    rho, batch, live = 0.6, 3.0, 4
    lane = pl._geometric_lane_pmf(rho)
    want = lane * pl._jsq_tilt(lane, batch, live)
    assert np.array_equal(pl._jsq_ahead_pmf(rho, batch, live), want / want.sum())


def test_router_laws_memory_follows_the_inputs_size() -> None:
    law = pl._geometric_lane_pmf(1.0 - 1e-9)
    assert len(law) == pl._GEOMETRIC_LANE_MAX + 1 and float(law.sum()) == pytest.approx(1.0, abs=1e-12)
    below = pl._geometric_lane_pmf(0.99)  # below ρ 0.9933 the whole 10⁻¹² tail, as before the bound
    assert len(below) < pl._GEOMETRIC_LANE_MAX and float(below[-1]) < 1e-11
    ahead = pl._jsq_ahead_pmf(1.0 - 1e-9, 50.0, 8)
    assert len(ahead) == pl._GEOMETRIC_LANE_MAX + 1 and float(ahead.sum()) == pytest.approx(1.0, abs=1e-9)
    assert pl._chosen_batch_ratio(1e12, 8) == 1.0
    assert pl._chosen_batch_ratio(50.0, 8) < 1.0
