"""Erlang-B / Erlang-C stay exact where they were and bounded in time and memory for any load (issue 16:
``peak_rate_per_s=1e300`` overflowed, ``max_utilization=1e-9`` tried to allocate 1.36 TiB)."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.queueing import erlang_b, erlang_c, max_utilization, wait_quantile_s


def _recursion(c: int, a: float) -> float:
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(65, 20_000), st.floats(0.01, 3.0))
def test_windowed_sum_matches_the_exact_recursion(c: int, rho: float) -> None:
    a = c * rho
    exact = _recursion(c, a)
    assert erlang_b(c, a) == pytest.approx(exact, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("c", "a"), [(10**12, 0.5e12), (10**12, 0.9999999e12), (10**12, 2e12), (10**15, 1e15 - 1e7),
                                      (10**18, 1.0000001e18), (10**9, 1e300), (10**300, 1e300), (2, 1e300)])
def test_huge_loads_are_bounded_and_in_range(c: int, a: float) -> None:
    t0 = time.perf_counter()
    b = erlang_b(c, a)
    assert 0.0 <= b <= 1.0 and math.isfinite(b)
    assert 0.0 <= erlang_c(c, a) <= 1.0
    assert time.perf_counter() - t0 < 1.0


def test_asymptotic_branch_agrees_with_the_limits() -> None:
    assert erlang_b(10**12, 2e12) == pytest.approx(0.5, rel=1e-6)  # a >> c: B -> 1 - c/a
    # near saturation: B ~ phi(beta) / (sqrt(a) Phi(beta)), beta = (c - a)/sqrt(a) = 0.1
    beta, a = 0.1, 1e12
    phi = math.exp(-beta**2 / 2) / math.sqrt(2 * math.pi)
    big_phi = 0.5 * math.erfc(-beta / math.sqrt(2))
    assert erlang_b(int(a + beta * math.sqrt(a)), a) == pytest.approx(phi / big_phi / math.sqrt(a), rel=1e-4)


def test_wait_quantile_and_caps_never_allocate_by_value() -> None:
    t0 = time.perf_counter()
    assert wait_quantile_s(0.99, 1e300, 10**300, 1.0) == math.inf or wait_quantile_s(0.99, 1e300, 10**300, 1.0) >= 0
    assert 0.0 < max_utilization(10**9, 1.0, 0.99, 0.5) <= 0.999
    assert max_utilization(187_238_765_300, 1.0, 0.99, 1.0) <= 0.999  # the pool size max_utilization=1e-9 once implied
    assert time.perf_counter() - t0 < 2.0
