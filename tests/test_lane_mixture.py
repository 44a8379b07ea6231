"""A unified pool's lane services spread over its buckets' length sub-bins (planner.pool_latency
lane_service_mixture): the residual of the prompt in a lane's progress has the tail of the bucket's longest prompts,
not its mean's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.pool_latency import (
    _EINSUM_SERVICES,
    _long_ttft_law,
    _mix_sizes,
    lane_mixes,
    lane_service_mixture,
)

ROOT = Path(__file__).resolve().parents[1]


def test_a_mix_is_read_as_shares_and_sizes_relative_to_its_mean() -> None:
    share, size, mean = _mix_sizes(json.dumps([[1, 100, 10], [3, 500, 20]])) or (None, None, None)
    assert share is not None and size is not None
    assert share.tolist() == [0.25, 0.75] and mean == 400.0 and size.tolist() == [0.25, 1.25]
    for bad in ("", "[]", "not json", "[[1, -5, 3]]", "[[0, 100, 1]]", '[["a", 1, 1]]', "[[1, 0, 4]]", "[[1]]", "{}", "7",
                "[[1e308, 1e308, 1], [1e308, 1e308, 1]]", "[[1, 1e400, 1]]", "[" * 100_000 + "]" * 100_000):
        assert _mix_sizes(bad) is None, bad
    pts = pd.DataFrame({"length_mix": [json.dumps([[1, 100, 10], [3, 500, 20]]), "", None]})
    got = lane_mixes(pts)
    assert got[1] is None and got[2] is None and got[0] is not None and got[0][1].tolist() == [0.25, 1.25]
    assert lane_mixes(pts.drop(columns=["length_mix"])) == [None, None, None]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 10.0), st.floats(0.001, 5.0),
                          st.one_of(st.none(), st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(1.0, 1e5)), min_size=1, max_size=8))),
                min_size=1, max_size=5))
def test_the_mixture_keeps_each_points_weight_and_mean_service(rows: list) -> None:
    """Spread over its sub-bins, a point keeps its weight and its mean lane service (the work it was priced at);
    a point without a mix keeps its one service."""
    s = np.array([r[1] for r in rows])
    w = np.array([r[0] for r in rows])
    mixes = [None if r[2] is None else _mix_sizes(json.dumps([[a, b, 1.0] for a, b in r[2]])) for r in rows]
    mixes2 = [None if m is None else (m[0], m[1]) for m in mixes]
    svc, wts = lane_service_mixture(s, w, mixes2)
    assert float(wts.sum()) == pytest.approx(float(w.sum()), rel=1e-9)
    assert float((svc * wts).sum()) == pytest.approx(float((s * w).sum()), rel=1e-9)
    if all(m is None for m in mixes2):
        assert svc.tolist() == s.tolist() and wts.tolist() == w.tolist()


def test_many_services_sum_the_residual_as_the_einsum_does() -> None:
    """Above _EINSUM_SERVICES the law's E[(S − r)⁺] comes from the sorted services' tail sums: the same CDF."""
    import planner.pool_latency as pl

    rng = np.random.default_rng(1)
    s, w = rng.uniform(0.1, 5.0, 40), rng.uniform(0.0, 1.0, 40)
    load = {"share": 0.5, "decode_step_s": 0.03, "delta_s": 0.03, "rate_per_s": 0.4, "units_eff": 0.5}
    assert len(s) > _EINSUM_SERVICES
    fast = _long_ttft_law(load, 3.0, s, w, 15, 12.0)
    keep = pl._EINSUM_SERVICES
    try:
        pl._EINSUM_SERVICES = 10_000
        direct = _long_ttft_law(load, 3.0, s, w, 15, 12.0)
    finally:
        pl._EINSUM_SERVICES = keep
    assert fast is not None and direct is not None
    xs = np.linspace(0.0, 20.0, 60)
    assert np.max(np.abs(fast.cdf_many(xs) - direct.cdf_many(xs))) < 1e-12


def test_long_context_short_prompts_wait_behind_the_buckets_longest() -> None:
    """long-context-assistant on 15 MI300X tp4 (its plan): with each bucket's mean lane service alone the analytic
    p99 TTFT of its 891–2,653-token bucket was 3.1 s and of its 17k–123k bucket 7.6 s, where the simulator, with
    Poisson arrivals (no bursts), gives 7.0–7.5 and 9.8–10.0 s (seeds 0 and 1, 2,929 s); over the sub-bins 5.3 and
    9.7 s."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.pool_latency import unified_at_load

    resolved = load_instance(ROOT / "instances" / "long-context-assistant.yaml",
                             {"catalog.devices": ["mi300x"], "catalog.tp_degrees": [4], "options.architectures": ["shared"]})
    pts = prepare(build_capacity_tables(resolved)).points
    pts = pts[pts["role"].astype(str) == "unified"].reset_index(drop=True)
    assert pts["bucket"].nunique() == 4 and len(pts) == 4
    pool = str(pts["pool"].iloc[0])
    x = np.ones(len(pts))
    mixed = unified_at_load(pts, x, {pool: 15}, 0)["ttft_at_load_ms"].to_numpy(float)
    means = unified_at_load(pts.drop(columns=["length_mix"]), x, {pool: 15}, 0)["ttft_at_load_ms"].to_numpy(float)
    # a plan whose points' mixes were tampered with (not JSON, overflowing) prices as one without them
    for bad in ("garbage", "[[1e308, 1e308, 1], [1e308, 1e308, 1]]"):
        tampered = unified_at_load(pts.assign(length_mix=bad), x, {pool: 15}, 0)["ttft_at_load_ms"].to_numpy(float)
        assert tampered.tolist() == means.tolist()
    order = np.argsort(pts["prefill_tokens"].to_numpy(float))
    short, top = int(order[0]), int(order[-1])
    assert mixed[short] > means[short] + 1500.0 and mixed[top] > means[top] + 1500.0
    assert 4500.0 < mixed[short] < 7500.0 and 8500.0 < mixed[top] < 10500.0
