"""A unified pool's slot queue near saturation (issue 24 item 3): one iteration serves every slot of an
instance, so prompts that arrive stretch every slot's hold together (planner.pool_latency.unified_slot_queue).
The busy-slot count is then ``1/(1 − a)²`` times as variable as independent slots' (``a`` the prefill share),
and once every slot is busy the queue drains at the point's full-batch hold."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner.pool_latency import (
    plan_latency_quantiles,
    plan_shares,
    pool_latency,
    slot_peakedness,
    slot_wait_ms,
)
from planner.queueing import erlang_c, wait_quantile_s
from planner.ttft_mixture import queue_tail_params


def test_peakedness_by_hand() -> None:
    assert slot_peakedness(0.0) == 1.0
    assert slot_peakedness(0.5) == 4.0
    assert slot_peakedness(1.0) == 1.0 and slot_peakedness(-0.2) == 1.0  # outside [0, 1): no common mode claimed


def test_tail_with_peakedness_and_drain_by_hand() -> None:
    """c = 4 slots, a = λ s = 2, z = 2: C(2, 1) = 1/3 (B(2, 1) = 0.2, C = cB/(c − a(1 − B)) = 0.4/1.2);
    θ = (c/s_full − λ)/k with s_full = 2 s, λ = 1/s, k = (1 + 0)/2: (2 − 1)/0.5 = 2 per second."""
    pw, theta = queue_tail_params(np.array([4.0]), np.array([1.0]), np.array([2.0]), np.array([0.0]), np.array([1.0]),
                                  2.0, 2.0)
    assert float(pw[0]) == pytest.approx(1.0 / 3.0, rel=1e-9)
    assert float(pw[0]) == pytest.approx(erlang_c(2, 1.0), rel=1e-9)
    assert float(theta[0]) == pytest.approx(2.0, rel=1e-12)
    # the defaults are the plain G/G/c, unchanged
    plain_pw, plain_theta = queue_tail_params(np.array([4.0]), np.array([1.0]), np.array([2.0]), np.array([0.0]), np.array([1.0]))
    assert float(plain_pw[0]) == erlang_c(4, 2.0)
    assert float(plain_theta[0]) == pytest.approx((4 / 2.0 - 1.0) / 0.5, rel=1e-12)


def test_plain_rows_keep_the_plain_wait() -> None:
    """A row without a common mode (every decode and prefill pool) is the G/G/c wait, bit for bit."""
    row = {"quantile": 0.99, "arrival_rate_per_s": 30.0, "servers": 40, "mean_service_s": 1.2, "service_cv": 0.7,
           "arrival_cv": 1.3, "slot_peakedness": 1.0, "slot_drain_service_s": 1.2}
    assert slot_wait_ms(row) == wait_quantile_s(0.99, 30.0, 40, 1.2, 0.7, 1.3) * 1e3
    assert slot_wait_ms({k: v for k, v in row.items() if not k.startswith("slot_")}) == slot_wait_ms(row)
    # scaled arrivals: the wait at the scaled rate
    assert slot_wait_ms(row, 0.5) == wait_quantile_s(0.99, 15.0, 40, 1.2, 0.7, 1.3) * 1e3


def test_scaled_common_mode_wait_falls_with_the_load() -> None:
    row = {"quantile": 0.99, "arrival_rate_per_s": 7.94, "servers": 367, "mean_service_s": 40.7, "service_cv": 0.0,
           "arrival_cv": 1.0, "slot_peakedness": slot_peakedness(0.584), "slot_drain_service_s": 43.9}
    waits = [slot_wait_ms(row, f) for f in (1.0, 0.97, 0.9, 0.7)]
    assert waits[0] > 1000.0 and all(a >= b for a, b in zip(waits, waits[1:], strict=False)) and waits[-1] == 0.0


@pytest.fixture(scope="module")
def one_instance_at_95(tmp_path_factory: pytest.TempPathFactory, latency_bench):  # the grid's cell (conftest)
    res = latency_bench.solved_plan("shared", 1000, tmp_path_factory.mktemp("slot-common-mode"))
    return latency_bench.at_utilisation(res, "shared", 0.95)[0]


def test_one_instance_of_short_prompts_at_95_percent(one_instance_at_95) -> None:
    """The grid's one A100 of 1,000-token prompts at 95 % (benchmarks/bench_latency_at_load.py): prefill share
    0.58, z 5.8. Simulated (planner.simulate, 4,000 requests, seeds 0–3): slot wait p99 2,116 / 3,094 / 3,338 /
    1,583 ms, mean 62 / 321 / 212 / 172 ms; TTFT p99 over 45 seeds 4,088 ms (the bench's adaptive run of
    2026-12-06). Independent slots at the at-load hold put P(all busy) at 1 % and the slot wait at 0, the TTFT p99
    at 1,060 ms (−74 %)."""
    res = one_instance_at_95
    plan = res.architectures["shared"]
    pts = pd.DataFrame(res.capacity.points)
    x = plan_shares(plan, pts)
    row = pool_latency(pts, x, {p.name: p.instances for p in plan.pools}, res.capacity.redundancy).iloc[0]
    assert row["slot_peakedness"] == pytest.approx(5.78, abs=0.05)
    assert row["slot_drain_service_s"] > row["mean_service_s"]
    assert 1500.0 < row["wait_ms"] < 5000.0  # simulated p99 1,583–3,338 ms over four seeds
    independent = wait_quantile_s(0.99, float(row["arrival_rate_per_s"]), int(row["servers"]), float(row["mean_service_s"]),
                                  float(row["service_cv"]), float(row["arrival_cv"]))
    assert independent == 0.0  # what the model said before
    ttft = float(plan_latency_quantiles(res, "shared", 0.99).iloc[0]["ttft_ms"])
    assert ttft == pytest.approx(4088.0, rel=0.15)
    assert math.isfinite(ttft)


def test_ttft_prompt_ratio_by_hand() -> None:
    from planner.pool_latency import ttft_prompt_ratio

    pts = pd.DataFrame({"prefill_tokens": [30_000.0, 1_000.0, 500.0, np.nan], "prefill_tokens_rep": [90_000.0, 800.0, np.nan, 10.0]})
    assert ttft_prompt_ratio(pts).tolist() == [3.0, 1.0, 1.0, 1.0]  # the representative's chunks; never fewer than the mean's
    assert ttft_prompt_ratio(pts.drop(columns=["prefill_tokens_rep"])).tolist() == [1.0] * 4  # older tables: as before


def test_a_unified_points_own_ttft_at_load_counts_its_representative_prompt() -> None:
    """long-context-assistant's top bucket: an eighth of its prompts are 112,878 tokens; its unified points price the
    lane at the mix's mean new tokens (prefill_tokens) but the TTFT checks the representative (prefill_tokens_rep,
    the point's own ttft prompt), as the full-batch ttft_ms does. At load the own chunks are the representative's:
    the TTFT rises by at least the extra chunk iterations at the decode-only step."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.pool_latency import unified_at_load

    root = Path(__file__).resolve().parents[1]
    tables = build_capacity_tables(load_instance(root / "instances" / "long-context-assistant.yaml"))
    pts = tables.points.merge(tables.demand[["service", "bucket", "rate_peak_per_s", "interarrival_cv", "ttft_quantile",
                                             "ttft_target_ms", "tpot_quantile", "tpot_target_ms", "output_tokens_mean",
                                             "input_tokens_mean", "token_metric"]], on=["service", "bucket"])
    pick = (pts["role"] == "unified") & (pts["config"].astype(str).str.contains("mi300x/tp4")) & pts["feasible"].astype(bool)
    pts = pts[pick].reset_index(drop=True).assign(pool="u")
    top = int(np.argmax(pts["prefill_tokens"].to_numpy(float)))
    rep, mean = float(pts.loc[top, "prefill_tokens_rep"]), float(pts.loc[top, "prefill_tokens"])
    assert rep > 2.0 * mean  # 112,878-token representative against the mix's mean
    share = np.full(len(pts), 1.0 / len(pts))
    with_rep = unified_at_load(pts, share, {"u": 16}, 0)
    # the same points had their representative been the mean prompt (their ttft_ms then counts the mean's chunks)
    q, step = pts["prefill_chunk_tokens"].to_numpy(float), pts["step_ms"].to_numpy(float)
    fewer = (np.ceil(pts["prefill_tokens_rep"].to_numpy(float) / q) - np.ceil(pts["prefill_tokens"].to_numpy(float) / q)) * step
    without = unified_at_load(pts.assign(prefill_tokens_rep=pts["prefill_tokens"], ttft_ms=pts["ttft_ms"] - fewer), share, {"u": 16}, 0)
    extra_s = (rep - mean) / float(pts.loc[top, "prefill_chunk_tokens"]) * float(pts.loc[top, "decode_only_step_ms"]) / 1e3
    gained_ms = float(with_rep.loc[top, "ttft_at_load_ms"]) - float(without.loc[top, "ttft_at_load_ms"])
    assert gained_ms >= 1e3 * extra_s


def test_a_unified_points_fixed_ttft_overhead_is_the_engines_whatever_its_bucket() -> None:
    """The fixed part of a unified point's TTFT beyond its lane (what the analytic TTFT at load and the simulator add
    to every request) is the calibration's engine overhead: ``ttft_ms − lane_wait_ms − ⌈n_rep / q⌉ step_ms`` with the
    representative prompt ``n_rep`` the point's ``ttft_ms`` counts. With the length mix's mean prompt in its place the
    chunks between the mean and the representative were counted twice (3.3 s for long-context-assistant's 17k–123k
    bucket at four buckets; issue 24). By hand: 700 ms = 150 wait + ⌈1,000 / 100⌉ · 50 + 50."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.perf.instance_calibration import instance_calibration
    from planner.pool_latency import unified_ttft_overhead_ms

    hand = pd.DataFrame({"ttft_ms": [700.0, 700.0], "lane_wait_ms": [150.0, 150.0], "prefill_tokens": [400.0, 400.0],
                         "prefill_tokens_rep": [1000.0, np.nan], "prefill_chunk_tokens": [100.0, 100.0], "step_ms": [50.0, 50.0]})
    assert unified_ttft_overhead_ms(hand).tolist() == [50.0, 350.0]  # no representative: the mean's chunks, as before
    root = Path(__file__).resolve().parents[1]
    resolved = load_instance(root / "instances" / "long-context-assistant.yaml")
    pts = build_capacity_tables(resolved).points
    unified = pts[(pts["role"] == "unified") & pts["feasible"].astype(bool)]
    assert unified["bucket"].nunique() == 4 and len(unified) > 30
    cal, _ref = instance_calibration(resolved)
    assert cal is not None
    expected = cal.for_engine(next(iter(resolved.instance.services.values())).engine)[0].ttft_overhead_ms
    assert 0.0 < expected < 200.0
    assert unified_ttft_overhead_ms(unified) == pytest.approx(np.full(len(unified), expected), rel=1e-9)
