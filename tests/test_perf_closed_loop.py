"""Closed-loop TTFT pieces: the first-wave staircase (hand-computed) and its weight in the mean."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.perf.closed_loop import REQUESTS_PER_USER, staircase_mean


def test_staircase_hand_computed() -> None:
    # k-th of n prompts completes in pass ceil(k a): a = ISL / budget
    got = staircase_mean(np.array([3.0, 4.0, 2.0, 1.0]), np.array([0.5, 1 / 8, 2.0, 0.25]))
    assert got == pytest.approx([(1 + 1 + 2) / 3, 1.0, (2 + 4) / 2, 1.0])


def test_staircase_large_n_uses_mean_formula() -> None:
    # beyond the exact grid: a (n + 1)/2 + 1/2
    assert float(staircase_mean(np.array([5000.0]), np.array([0.25]))[0]) == pytest.approx(0.25 * 5001 / 2 + 0.5)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.floats(0.01, 4.0))
def test_staircase_bounds(n: int, a: float) -> None:
    # at least the mean pass a (n+1)/2 and at most one pass more; never below one pass
    got = float(staircase_mean(np.array([float(n)]), np.array([a]))[0])
    assert max(1.0, a * (n + 1) / 2) - 1e-9 <= got <= a * (n + 1) / 2 + 1.0 + 1e-9


def test_first_wave_share_is_a_tenth() -> None:
    # aiconfigurator's benchmark runners send 10 x concurrency requests per run
    assert REQUESTS_PER_USER == 10.0
