"""The instance a least-loaded router sends a short prompt to (planner.pool_latency._hole_age_law, _routed_span_s):
its iteration has mostly just begun after a departure, and its arrivals follow its departures. Hand-solved cases,
the one-instance limit (the law before the router was modelled), and properties over random lane states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.pool_latency as pl

EDGES = np.arange(len(pl._U_GRID) + 1) / len(pl._U_GRID)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_two_instances_of_one_state_by_hand(p: float) -> None:
    """One state (every iteration ``T``), two instances: the picked instance's age ``x`` has density
    ``2 (p/T)(1 − p x/T)`` (the eligible one that began last) plus ``(1 − p)²/T`` (none eligible: any), so in
    ``u = 1 − x/T`` the density is ``2p (1 − p (1 − u)) + (1 − p)²`` and a cell ``[a, b]`` holds
    ``(2p (1 − p) + (1 − p)²)(b − a) + p² (b² − a²)``."""
    law = pl._hole_age_law(np.array([0.2]), np.array([1.0]), p, 2)[0]
    a, b = EDGES[:-1], EDGES[1:]
    want = (2 * p * (1 - p) + (1 - p) ** 2) * (b - a) + p * p * (b * b - a * a)
    assert law == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert law.sum() == pytest.approx(1.0, rel=1e-12)


def test_two_states_by_hand() -> None:
    """Two states, ``T = 1`` and ``2`` with weights ``w`` and ``1 − w``, three instances: ``G(x) = 1 − p (w x +
    (1 − w) x/2)`` below 1 and ``1 − p (w + (1 − w) x/2)`` from 1 to 2; the picked instance in the long state at age
    ``x`` has density ``3 (p/2) G(x)²``: its share of ages in ``[1, 2)`` (``u < 1/2``) integrated by the trapezoid rule
    on a fine grid, against the law's cells."""
    w, p, c = 0.4, 0.7, 3
    law = pl._hole_age_law(np.array([1.0, 2.0]), np.array([w, 1 - w]), p, c)

    def g(x: np.ndarray) -> np.ndarray:
        return np.where(x < 1, 1 - p * (w * x + (1 - w) * x / 2), 1 - p * (w + (1 - w) * x / 2))

    x = np.linspace(0.0, 2.0, 400_001)
    dens = c * (p / 2) * g(x) ** (c - 1)
    hole = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(x))])
    total = hole[-1] + (1 - p) ** c  # the hole's mass in that state and the none-eligible share (uniform in u)
    old_half = (np.interp(2.0, x, hole) - np.interp(1.0, x, hole) + (1 - p) ** c / 2) / total
    assert law[1, : len(pl._U_GRID) // 2].sum() == pytest.approx(old_half, rel=1e-6)


def test_one_instance_is_uniform_and_the_span_the_clocks() -> None:
    t = np.array([0.05, 0.1, 0.3])
    law = pl._hole_age_law(t, np.array([0.2, 0.3, 0.5]), 0.6, 1)
    assert law == pytest.approx(np.full(law.shape, 1 / len(pl._U_GRID)), rel=1e-12)
    assert np.array_equal(pl._routed_span_s(t, 0.12, 1), t)
    many = pl._routed_span_s(t, 0.12, 10**6)
    assert many == pytest.approx(np.full(3, 0.12), rel=1e-5)


def test_the_picked_iteration_is_younger_behind_more_instances() -> None:
    """The median share left rises with the instances: 0.51 / 0.74 / 0.93 / 0.99 behind 1 / 4 / 17 / 64 (the
    simulator's 0.53 / 0.69–0.73 / 0.90–0.92 / 0.96–0.98, benchmarks/bench_router_lane.py --iterations, 1,000-token
    prompts; the model leaves out that an arrival may find the youngest instance's holes taken)."""
    t = np.array([0.054, 0.1, 0.15, 0.2])
    pk = np.array([0.3, 0.3, 0.2, 0.2])
    wk = pk * t / (pk * t).sum()
    medians = []
    for c in (1, 4, 17, 64):
        mix = (wk[:, None] * pl._hole_age_law(t, wk, -math.expm1(-1.0), c)).sum(axis=0)
        medians.append(float(pl._U_GRID[np.searchsorted(np.cumsum(mix), 0.5)]))
    assert medians == sorted(medians) and medians[0] == pytest.approx(0.5, abs=0.02) and medians[-1] > 0.95


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 2.0), st.floats(0.0, 1.0)), min_size=1, max_size=12),
       st.floats(0.0, 1.0), st.integers(1, 200))
def test_the_law_is_a_law(states: list[tuple[float, float]], p: float, c: int) -> None:
    """Every row a pmf over the u cells (zero-weight states included), finite, whatever the states, ``p`` and ``c``."""
    t = np.array([s[0] for s in states])
    w = np.array([s[1] for s in states])
    if w.sum() <= 0:
        w = np.ones(len(w))
    law = pl._hole_age_law(t, w / w.sum(), p, c)
    assert law.shape == (len(t), len(pl._U_GRID))
    assert np.isfinite(law).all() and float(law.min()) >= -1e-15
    assert law.sum(axis=1) == pytest.approx(np.ones(len(t)), rel=1e-9)


def test_one_instances_ttft_is_the_law_without_the_router() -> None:
    """``live = 1`` prices exactly as before the router was modelled (the default): the same number."""
    load = pl.unified_load(5.8, 0.0778, 0.4837, np.array([0.18]), np.ones(1))
    pl._LANE_PMF_CACHE.clear()
    for q in (0.5, 0.99):
        assert pl._ttft_quantile_s(load, q, 0.18, 1) == pl._ttft_quantile_s(load, q, 0.18)
    # behind many instances the picked instance has just begun an iteration: its median TTFT is longer
    assert pl._ttft_quantile_s(load, 0.5, 0.18, 64) > pl._ttft_quantile_s(load, 0.5, 0.18, 1)


def test_the_router_weighs_the_picked_lane_state_by_its_in_flight_count() -> None:
    """The picked instance's lane state ``K'`` is weighted by ``r(K')`` (planner.pool_latency._jsq_tilt, Poisson decode
    counts of mean ``batch``): by hand for two states and two instances, flat at an unbounded batch (the default: the
    law before the choice), never slower than without it (``r`` falls with ``K'``), and none in a pool whose wait is
    its bursts' (``bursty``: the lanes fill together)."""
    # two instances, lanes L ∈ {0, 1} with P(L = 1) = 1/2, no decoding (batch 0): X = L; the pick is L = 1 only when
    # both are 1: P(picked L = 1) = 1/4, so r(1) = 1/2 and r(0) = 3/2
    assert pl._jsq_tilt(np.array([0.5, 0.5]), 0.0, 2, 1.0) == pytest.approx([1.5, 0.5], rel=1e-12)
    # 8,000-token prompts with 40-token answers at 30 % (benchmarks/bench_latency_at_load.py --outputs 40): an
    # instance's load at 17 instances, its decode batch 0.27
    load = pl.unified_load(0.3866, 0.01311, 0.7000, np.array([0.977]), np.ones(1))
    pl._LANE_PMF_CACHE.clear()
    for c in (4, 17):
        for q in (0.5, 0.99):
            free = pl._ttft_quantile_s(load, q, 0.977, c)
            assert pl._ttft_quantile_s(load, q, 0.977, c, math.inf) == free
            assert pl._ttft_quantile_s(load, q, 0.977, c, 0.27) <= free
            lane = (np.array([0.69]), np.ones(1))
            assert pl.unified_ttft_s(load, q, 0.977, *lane, c, 0.27, bursty=True) == free
    # few sequences decode: one prompt in a lane makes its instance the busiest, and the p99 loses the wait behind it
    # (1,372 -> 697 ms; the simulator 697)
    assert pl._ttft_quantile_s(load, 0.99, 0.977, 17, 0.27) < 0.6 * pl._ttft_quantile_s(load, 0.99, 0.977, 17)
