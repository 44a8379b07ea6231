"""A unified pool's TTFT with its slot wait: the quantile of the sum ``W + T`` of the slot wait (Erlang-C tail
``P(W > t) = C e^{−θ t}``) and the TTFT at load ``T``, taken as independent (issue 24 item 3;
:func:`planner.pool_latency.slot_sum_quantile_s`), and the caps' verdict on the same rule
(:func:`planner.pool_latency.unified_ttft_meets`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.pool_latency import (
    TtftLaw,
    _slot_allowed,
    slot_sum_miss,
    slot_sum_quantile_s,
    unified_load,
    unified_ttft_meets,
    unified_ttft_s,
)
from planner.ttft_mixture import MIX_TOLERANCE


def _law(values: list[float], weights: list[float], beyond: float = 0.0) -> TtftLaw:
    return TtftLaw(np.array(values, dtype=float), np.array(weights, dtype=float), beyond)


def _w_q(c: float, theta: float, q: float) -> float:
    return max(0.0, math.log(c / (1.0 - q)) / theta) if c > 1.0 - q else 0.0


def _t_q(law: TtftLaw, q: float) -> float:
    order = np.argsort(law.values)
    cum = np.cumsum(law.weights[order])
    return float(law.values[order][min(int(np.searchsorted(cum, q)), len(cum) - 1)])


def test_two_point_law_by_hand() -> None:
    """T = 1 s or 3 s (½ each), C = ½, θ = 1/s, q = 0.9: below 3 s half the requests miss; above it
    m(x) = ½·½ (e^{−(x−1)} + e^{−(x−3)}) = ¼ e^{−x} (e + e³) = 0.1, x = ln(¼ (e + e³) / 0.1) = 4.0432 s, against
    the sum of the quantiles T_q + W_q = 3 + ln 5 = 4.609 s."""
    law = _law([1.0, 3.0], [0.5, 0.5])
    x = slot_sum_quantile_s(law, (0.5, 1.0), 0.9)
    exact = math.log(0.25 * (math.e + math.e**3) / (0.1 * (1.0 + MIX_TOLERANCE)))
    assert x == pytest.approx(exact, rel=1e-12)
    assert x == pytest.approx(4.0432187, abs=1e-6)
    assert slot_sum_miss(x, law, (0.5, 1.0)) == pytest.approx(_slot_allowed(0.9), rel=1e-12)
    assert _t_q(law, 0.9) + _w_q(0.5, 1.0, 0.9) == pytest.approx(3.0 + math.log(5.0))


def test_one_point_law_is_the_sum_of_quantiles() -> None:
    """A deterministic T = t: W + T's quantile is t + W_q, the former rule (up to the 10⁻⁹ tolerance)."""
    law = _law([2.0], [1.0])
    for c, theta, q in ((0.5, 1.0, 0.99), (0.9, 0.2, 0.9), (0.02, 3.0, 0.99)):
        assert slot_sum_quantile_s(law, (c, theta), q) == pytest.approx(2.0 + _w_q(c, theta, q), abs=1e-8)


def test_an_atom_at_the_answer() -> None:
    """At x = 1 s: the 5 % at 2 s miss, the 95 % at 1 s miss with their slot wait's P(W > 0) = C = 1 %: 5.95 %
    ≤ 10 %, and below 1 s everyone misses: X = 1 s exactly (a jump of m)."""
    assert slot_sum_quantile_s(_law([1.0, 2.0], [0.95, 0.05]), (0.01, 10.0), 0.9) == 1.0


def test_sure_misses_past_the_law() -> None:
    """The law's ``beyond`` mass is a miss at every x: 5 % past it with q = 0.9 leaves 5 % to the slot wait."""
    law = _law([1.0], [0.95], beyond=0.05)
    x = slot_sum_quantile_s(law, (0.5, 1.0), 0.9)
    assert x == pytest.approx(1.0 + math.log(0.95 * 0.5 / (0.1 * (1.0 + MIX_TOLERANCE) - 0.05)), rel=1e-12)
    assert slot_sum_quantile_s(_law([1.0], [0.85], beyond=0.15), (0.5, 1.0), 0.9) == math.inf


def test_the_sum_can_exceed_the_sum_of_quantiles() -> None:
    """What does not hold: X ≤ W_q + T_q. With C ≤ 1 − q (W_q = 0) the waits below the quantile count:
    T = 1 s (90 %) or 2 s (10 %), C = 5 %, q = 0.9: at 1 s the 10 % at 2 s and 4.5 % at 1 s miss, so X = 2 s
    against W_q + T_q = 0 + 1 s. And with C > 1 − q when T has an atom at its quantile: T = 1 s (99 %) or 11 s
    (1 %), C = ½, θ = 1/s, q = 0.99: X = 11 s against W_q + T_q = ln 50 + 1 = 4.9 s."""
    assert slot_sum_quantile_s(_law([1.0, 2.0], [0.9, 0.1]), (0.05, 1.0), 0.9) == 2.0
    law = _law([1.0, 11.0], [0.99, 0.01])
    assert _w_q(0.5, 1.0, 0.99) + _t_q(law, 0.99) == pytest.approx(math.log(50.0) + 1.0)
    assert slot_sum_quantile_s(law, (0.5, 1.0), 0.99) == 11.0


@pytest.mark.parametrize("seed", range(40))
def test_bounds_that_hold(seed: int) -> None:
    """What holds for every law: ``max(W_q, T_q) ≤ X`` (``W + T ≥ W`` and ``≥ T``), ``X ≤ W_q + max T`` and
    ``X ≤ W_{q'} + T_{q'}`` at ``q' = (1 + q)/2`` (``P(W + T > a + b) ≤ P(W > a) + P(T > b)``); ``X`` is the smallest
    ``x`` with ``m(x) ≤ (1 − q)(1 + 10⁻⁹)`` (``slot_sum_miss`` just below it is above that)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    values = rng.lognormal(0.0, 1.0, n) * float(rng.choice([0.01, 1.0, 50.0]))
    weights = rng.dirichlet(np.ones(n) * float(rng.choice([0.2, 1.0, 5.0])))
    law = TtftLaw(values, weights, 0.0)
    c = float(rng.choice([1e-4, 0.003, 0.05, 0.3, 0.9, 1.0]))
    theta = float(rng.lognormal(0.0, 2.0))
    q = float(rng.choice([0.5, 0.9, 0.99, 0.999]))
    x = slot_sum_quantile_s(law, (c, theta), q)
    tol = 1e-7 * (1.0 + x)
    assert max(_w_q(c, theta, q), _t_q(law, q)) <= x + tol
    assert x <= _w_q(c, theta, q) + float(values.max()) + tol
    q2 = 0.5 * (1.0 + q)
    assert x <= _w_q(c, theta, q2) + _t_q(law, q2) + tol
    allowed = _slot_allowed(q)
    assert slot_sum_miss(x, law, (c, theta)) <= allowed * (1 + 1e-9)
    assert slot_sum_miss(x - tol, law, (c, theta)) > allowed


def _long_load(rate_per_s: float) -> dict[str, float]:
    """One instance's load with 8,000-token prompts over a 2,048-token lane (f = 3.9)."""
    return unified_load(rate_per_s, 0.043, 0.35, np.array([3.9]), np.ones(1), 1.0)


@pytest.mark.parametrize(("kind", "live", "rate"), [("short", 1, 4.0), ("short", 4, 6.5), ("long", 1, 0.4), ("long", 4, 0.55),
                                                    ("long", 17, 0.6)])
def test_caps_verdict_is_the_predictions(kind: str, live: int, rate: float) -> None:
    """The caps' verdict (:func:`unified_ttft_meets`) is the prediction's quantile against the target, at targets
    just below and above it, with its early exits (a prompt longer than the lane: from the CDF at one or two points)
    and without."""
    if kind == "short":
        load = unified_load(rate, 0.040, 0.090, np.array([0.5]), np.ones(1), 1.0)
        units, lane_s = 0.5, np.array([0.05])
    else:
        load = _long_load(rate)
        units, lane_s = 3.9, np.array([3.9 * 0.35])
    batch = 20.0
    oh = 0.03
    for c, theta in ((0.4, 2.0), (0.02, 5.0), (0.95, 0.3)):
        x = unified_ttft_s(load, 0.99, units, lane_s, np.ones(1), live, batch, (c, theta))
        assert math.isfinite(x)
        for f in (0.98, 0.9999, 1.0001, 1.02, 1.5):
            target_ms = 1e3 * (x + oh) * f
            got = unified_ttft_meets(load, 0.99, units, lane_s, np.ones(1), live, batch, (c, theta), math.nan, target_ms, oh)
            assert got == (f > 1.0), (c, theta, f)


@pytest.mark.parametrize(("live", "rate"), [(4, 0.3), (4, 0.55), (17, 0.6), (64, 0.65)])
def test_early_verdicts_are_the_laws(live: int, rate: float) -> None:
    """Where :func:`planner.pool_latency._long_slot_sum_bounds` decides (the CDF at one or two points, or its block
    brackets on the law's grid), it says what :func:`slot_sum_miss` on the whole law says; over a sweep of budgets
    (down to 0.1 % of the answer around it) both of its exits are taken, and it leaves only budgets near the edge."""
    from planner.pool_latency import _long_slot_sum_bounds, _long_ttft_law, _ttft_law_points

    load = _long_load(rate)
    lane_s = np.array([3.9 * 0.35])
    batch = 20.0
    decided = {True: 0, False: 0}
    for c, theta in ((0.4, 2.0), (0.02, 5.0), (0.95, 0.3)):
        law = _ttft_law_points(load, 0.99, 3.9, lane_s, np.ones(1), live, batch)
        assert law is not None
        x = slot_sum_quantile_s(law, (c, theta), 0.99)
        long_law = _long_ttft_law(load, 3.9, lane_s, np.ones(1), live, batch)
        assert long_law is not None
        for x_s in x * np.concatenate([np.linspace(0.5, 2.0, 61), 1.0 + np.linspace(-0.02, 0.02, 41)]):
            early = _long_slot_sum_bounds(long_law, 0.99, (c, theta), float(x_s))
            if early is not None:
                decided[early] += 1
                assert early == (slot_sum_miss(float(x_s), law, (c, theta)) <= _slot_allowed(0.99))
            else:
                assert abs(x_s / x - 1.0) < 0.05, x_s / x  # undecided only near the answer
    assert decided[True] and decided[False]


def test_long_law_rows_are_one_point_cdfs() -> None:
    """A pool of several prompt lengths (lane service times): the CDF at many points, as the law prices it, is at each
    point the number the CDF at that point alone gives (the bisection's), bit for bit."""
    from planner.pool_latency import _long_ttft_law

    load = unified_load(0.5, 0.043, 0.35, np.array([3.9, 1.2, 7.5]), np.array([0.5, 0.3, 0.2]), 1.0)
    lane_s = np.array([3.9, 1.2, 7.5]) * 0.35
    for live in (4, 17):
        law = _long_ttft_law(load, 3.9, lane_s, np.array([0.5, 0.3, 0.2]), live, 20.0)
        assert law is not None
        xs = np.linspace(law.lo, 4.0 * law.hi, 257)
        many = law.cdf_many(xs)
        one = np.array([law.cdf_many(np.array([x]))[0] for x in xs])
        assert np.array_equal(many, one)
