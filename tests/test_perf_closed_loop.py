"""Closed-loop TTFT pieces: the first-wave staircase (hand-computed), its weight in the mean, and
the steady-state cohorts of mixed-prefill engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.perf.calibration import PUBLISHED_DEFAULT
from planner.perf.closed_loop import REQUESTS_PER_USER, predict_agg, staircase_mean
from planner.perf.points import efficiency_of
from planner.perf.roofline import InstanceArrays, instance_arrays, iteration_time
from planner.perf.validate import engine_arrays

CAT = load_catalog(Path(__file__).parent / "data" / "perf_catalog")


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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 600), st.sampled_from([0.125, 0.25, 0.5, 1.0, 1.5, 3.0])), min_size=1, max_size=30))
def test_staircase_repeated_pairs_equal_the_direct_sum(pairs: list[tuple[int, float]]) -> None:
    # rows are evaluated once per distinct (n, a); the result must equal the sum over k row by row
    n = np.array([p[0] for p in pairs], dtype=float)
    a = np.array([p[1] for p in pairs])
    direct = [np.mean([np.ceil(k * ai - 1e-9) for k in range(1, int(ni) + 1)]) for ni, ai in zip(n, a, strict=True)]
    assert staircase_mean(n, a) == pytest.approx(direct)


def _loop(exponent: float, users: float, isl: float = 2048.0, osl: float = 256.0, tp: int = 2) -> tuple[float, float]:
    inst = InstanceArrays.stack([instance_arrays(CAT.models["llama-3.1-8b"], CAT.devices["h100-sxm"], tp, "bf16", "bf16")])
    eng = engine_arrays([PUBLISHED_DEFAULT.model_copy(update={"cohort_exponent": exponent})])
    r = predict_agg(inst, eng, np.array([users]), np.array([isl]), np.array([osl]))
    return float(r.ttft_s[0]), float(r.tpot_s[0])


def test_cohort_exponent_zero_is_a_lone_prompt_and_cohorts_only_add_ttft() -> None:
    t0, p0 = _loop(0.0, 32)
    t_half, p_half = _loop(0.5, 32)
    t_all, p_all = _loop(1.0, 32)
    assert t0 < t_half < t_all
    assert p0 == p_half == p_all  # cohorts move waiting, not work: TPOT is unchanged
    # one user has no cohort whatever the exponent
    assert _loop(0.0, 1)[0] == pytest.approx(_loop(1.0, 1)[0])


def test_cohort_of_the_whole_batch_pays_the_first_wave_staircase() -> None:
    # g = D = 8 prompts of 2048 tokens, budget 8192 - 8: 8 x 2048 tokens in passes of <= 8184, the
    # k-th done in pass ceil(k 2048 / 8184) -> mean (1+1+1+2+2+2+2+3)/8 passes; lone prompt: 1 pass
    t_lone, _ = _loop(0.0, 8)
    t_all, _ = _loop(1.0, 8)
    assert t_all - t_lone > 0
    inst = instance_arrays(CAT.models["llama-3.1-8b"], CAT.devices["h100-sxm"], 2, "bf16", "bf16")
    eff = efficiency_of(PUBLISHED_DEFAULT)
    d_avg = 8 * 255 / (255 + 1)
    ctx = 2048 + 128
    chunk = 8 * 2048 / 3
    t_pass = float(iteration_time(inst, eff, decode_batch=d_avg, decode_context=ctx, prefill_tokens=chunk,
                                  prefill_cached=0.0, prefill_prompts=chunk / 2048).total_s)
    t_one = float(iteration_time(inst, eff, decode_batch=d_avg, decode_context=ctx, prefill_tokens=2048.0, prefill_cached=0.0).total_s)
    steady_extra = 14 / 8 * t_pass - t_one
    w_first = 8 / (REQUESTS_PER_USER * 8)
    assert t_all - t_lone == pytest.approx((1 - w_first) * steady_extra, rel=1e-6)
