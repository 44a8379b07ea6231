"""The wait a replayed log's bursts cause (planner.workload.replay_wait; issue 24 item 3).

By hand: even arrivals never wait; a burst of simultaneous arrivals waits ``k u`` mean gaps for its ``k``-th
request. Against an exact FCFS queue of ``c`` servers over the same bursty arrivals. In a plan: code-completion-8b's
38-instance prefill pool, which the G/G/c model priced at 0 ms and the peak simulation at 208 ms p99."""

from __future__ import annotations

import heapq
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.workload import replay_wait as rw

ROOT = Path(__file__).resolve().parent.parent


def test_even_arrivals_never_wait() -> None:
    t = 5.0 * np.arange(36.0)  # 12 a minute, 5 s apart across the windows' joins too: one mean gap each at rate 1
    curve = rw.replay_wait_curve(t, 60.0)
    assert curve is not None
    assert np.allclose(np.asarray(curve)[:, 1:], 0.0, atol=1e-9)


def test_a_burst_waits_its_place_in_the_burst_by_hand() -> None:
    # one 60 s window: 10 requests at once, then 10 at 30, 33, ..., 57 s. Replayed at rate 1 the window lasts 20 s
    # (x 1/3): the burst at 0, the rest at 10, 11, ..., 19 s. Normalised Lindley: the burst's k-th request finds
    # k u; the one at 10 s finds max(0, 10u - 10) = 0 (u < 1), and every later one 0 (gaps of one mean gap)
    t = np.concatenate([np.zeros(10), 30.0 + 3.0 * np.arange(10)])
    curve = np.asarray(rw.replay_wait_curve(t, 60.0))
    for row in curve:
        u = row[0]
        hand = np.concatenate([u * np.arange(10), np.zeros(10)])
        assert row[1:] == pytest.approx([float(np.quantile(hand, lv)) for lv in rw.LEVELS], abs=1e-5)


def test_a_bucketed_or_thin_log_is_not_replayed() -> None:
    assert rw.replay_wait_curve(np.repeat(np.arange(30.0), 3), 60.0) is None  # two thirds share a timestamp
    assert rw.replay_wait_curve(np.arange(10.0) * 60.0, 60.0) is None  # one arrival a window
    assert rw.replay_refusal(np.arange(10.0) * 60.0, 60.0).startswith("its busiest window")


def _fcfs_waits(times: np.ndarray, servers: int, service_s: float) -> np.ndarray:
    free = [0.0] * servers
    out = np.empty(len(times))
    for i, ti in enumerate(times):
        f = heapq.heappop(free)
        start = max(f, ti)
        out[i] = start - ti
        heapq.heappush(free, start + service_s)
    return out


@pytest.mark.parametrize("servers", [10, 40])
def test_the_fluid_pool_is_the_exact_queue_of_short_services_within_ten_percent(servers: int) -> None:
    # batch-Poisson arrivals (bursts of 1-60 requests within 0.2 s): the c-server FCFS queue of deterministic service
    # at u = 0.4 over the same replayed arrivals, against the curve's p99 (module docstring: 195 vs 199 ms on
    # code-completion's log)
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.exponential(8.0, 400))
    t = np.sort(np.concatenate([s + rng.uniform(0.0, 0.2, rng.integers(1, 61)) for s in starts]))
    window = 600.0
    curve = np.asarray(rw.replay_wait_curve(t, window))
    rate = 50.0
    u = 0.4
    service_s = u * servers / rate
    counts = np.unique(np.floor((t - t[0]) / window).astype(np.int64), return_counts=True)[1]
    total_s = float(counts[counts >= max(11, math.ceil(0.5 * counts.max()))].sum()) / rate
    times = rw.peak_window_times(t, window, rate, total_s)
    exact = float(np.quantile(_fcfs_waits(times, servers, service_s), 0.99))
    fluid = rw.wait_quantile_s(curve, u, rate, 0.99)
    assert exact > 0.5 * service_s  # a real burst wait, not noise
    assert fluid == pytest.approx(exact, rel=0.10)


def test_tail_params_are_exact_at_the_levels_and_the_cap_inverts_the_wait() -> None:
    t = np.concatenate([np.zeros(10), 30.0 + 3.0 * np.arange(10)])
    curve = np.asarray(rw.replay_wait_curve(t, 60.0))
    row = curve[np.searchsorted(curve[:, 0], 0.5)]
    assert row[0] == pytest.approx(0.5)
    for lv, q in zip(rw.LEVELS[1:], row[2:], strict=True):  # at u on the grid: the level's quantile / rate
        assert rw.wait_quantile_s(curve, 0.5, 4.0, lv) == pytest.approx(q / 4.0, rel=1e-9)
    budget = rw.wait_quantile_s(curve, 0.37, 4.0, 0.99)
    assert rw.max_utilization(curve, 4.0, 0.99, budget) == pytest.approx(0.37, abs=2e-4)
    assert rw.max_utilization(curve, 4.0, 0.99, -1.0) == 0.0
    assert rw.wait_quantile_s(curve, 1.0, 4.0, 0.99) == math.inf
    # ten arrivals at once wait ∝ u below the grid: at a trickle (4e-9/s) the cap is tiny, exact, and not 0
    tiny = rw.max_utilization(curve, 4e-9, 0.99, 0.5)
    assert 0.0 < tiny < float(curve[0, 0]) and rw.wait_quantile_s(curve, tiny, 4e-9, 0.99) == pytest.approx(0.5, rel=1e-9)


def test_code_completions_prefill_pool_waits_its_bursts() -> None:
    """The shipped example's disaggregated plan before this model: 38 H100 tp1 prefill and 3 decode instances, prefill
    wait p99 0 ms analytic (Erlang C at 38 servers, 36 % busy) against 208 / 200 ms simulated (seeds 0 / 1,
    `planner simulate`); now the larger of the two models, within 10 % of the simulated."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.pool_latency import pool_waits

    resolved = load_instance(ROOT / "instances" / "code-completion-8b.yaml",
                             {"catalog.devices": ["h100-sxm"], "catalog.tp_degrees": [1]})
    pts = prepare(build_capacity_tables(resolved)).points
    x = np.where(pts["config"].astype(str) == "h100-sxm/tp1", 1.0, 0.0)
    prefill = next(p for p in pts["pool"].astype(str).unique() if p.startswith("prefill:"))
    decode = next(p for p in pts["pool"].astype(str).unique() if p.startswith("decode:"))
    rows, _lanes, waits = pool_waits(pts, x, {prefill: 38, decode: 3}, 0)
    r = rows[prefill]
    assert r["replay_wait_ms"] == pytest.approx(204.0, rel=0.10)  # 208 / 200 ms simulated
    assert waits[prefill] == r["wait_ms"] == pytest.approx(max(r["replay_wait_ms"], 0.0))
    assert rows[decode]["replay_wait_ms"] == 0.0  # 465 slots clear every burst (tests/test_replay_slots.py)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e7, allow_nan=False, allow_infinity=False), min_size=0, max_size=400),
       st.sampled_from([1.0, 60.0, 600.0]))
def test_any_arrivals_give_a_curve_that_grows_with_load_and_level(times: list[float], window: float) -> None:
    """Hostile logs (duplicates, gaps of months, a handful of arrivals): no error; a curve, when the log is replayed,
    whose waits never fall as utilisation or the quantile level rises (Lindley's backlog grows with the work each
    arrival brings, path by path), and a cap whose wait is within its budget."""
    t = np.asarray(times, dtype=float)
    curve = rw.replay_wait_curve(t, window)
    if curve is None:
        return
    c = np.asarray(curve)
    assert np.all(np.isfinite(c)) and np.all(c[:, 1:] >= 0.0)
    assert np.all(np.diff(c[:, 1:], axis=0) >= -1e-9)  # in u
    assert np.all(np.diff(c[:, 1:], axis=1) >= -1e-9)  # in the level
    waits = [rw.wait_quantile_s(c, u, 3.0, 0.99) for u in (0.1, 0.5, 0.9, 0.99)]
    assert all(b >= a - 1e-12 for a, b in zip(waits, waits[1:], strict=False))
    budget = waits[1]
    cap = rw.max_utilization(c, 3.0, 0.99, budget)
    assert 0.0 <= cap <= 0.999 and rw.wait_quantile_s(c, cap, 3.0, 0.99) <= budget + 1e-12


def test_code_completions_shared_lanes_wait_their_bursts() -> None:
    """The example's shared plan on H100 tp4 (13, 14, 15 instances): a unified pool's chunked-prefill lanes wait the
    log's bursts too (planner.pool_latency.pool_latency: the slot wait is the larger of it and the replayed-burst wait
    at the lanes' utilisation, whose tail joins the TTFT law). Without it the top group's p99 TTFT was 294 / 281 /
    274 ms analytic against 525 / 478 / 425 ms simulated (seed 0; seed 1: 501 / 446 / 415; the plan's pool resized,
    as `planner simulate` runs it) and 13 instances passed the analytic check while missing in simulation. With the
    bursts' whole fluid backlog as a tail summed with the TTFT at load as independent, the top group was 442 ms at 13
    (−14 %: a pass where the simulator misses); since 2026-12-07 the backlog beyond a Poisson stream's is added
    (planner.pool_latency.burst_sets_wait, planner.workload.replay_wait.beyond_poisson_wait_s): 530 / 473 / 434 ms, every
    group within 10 % of the two seeds' mean (+6 % at most), and 13 missed the 500 ms target as the simulator says.
    Since the router's picked iteration (planner.pool_latency._hole_age_law, _routed_span_s; 2026-12-07, night): 478 /
    433 / 398 ms, every group −5…−9 % (within the 10 % band), and 13's top group, 2.3 % over the target in simulation
    (511.5 ms), meets it analytically: a verdict within the model's error, which the solve's peak simulation decides (the
    example's plan and cost did not move). Its lane chain counts arrivals that follow departures; in the log's bursts
    they outrun them (without that chain term: +1…+4 %, but the short answers' grids lose their gain, _routed_span_s)."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.pool_latency import bucket_latency, pool_waits

    resolved = load_instance(ROOT / "instances" / "code-completion-8b.yaml",
                             {"catalog.devices": ["h100-sxm"], "catalog.tp_degrees": [4], "options.architectures": ["shared"]})
    pts = prepare(build_capacity_tables(resolved)).points
    x = np.where(pts["role"].astype(str) == "unified", 1.0, 0.0)
    pool = next(p for p in pts["pool"].astype(str).unique() if p.startswith("unified:"))
    # b0..b3 simulated, seeds 0 and 1 (since a unified point's fixed TTFT overhead is the engine's own, 2026-12-07:
    # `planner solve instances/code-completion-8b.yaml` restricted as above, its pool resized to n, the peak check's run)
    seeds = {13: ((444, 457, 467, 501), (460, 467, 472, 522)), 14: ((402, 405, 429, 456), (409, 419, 428, 474)),
             15: ((363, 373, 383, 416), (369, 382, 393, 431))}
    simulated = {n: tuple(0.5 * (a + b) for a, b in zip(*s, strict=True)) for n, s in seeds.items()}
    for n, sim in simulated.items():
        rows, lanes, waits = pool_waits(pts, x, {pool: n}, 0)
        r = rows[pool]
        assert r["replay_wait_ms"] > 3 * r["lane_wait_ms"]  # the bursts, not the lanes' own queue, set the wait
        assert r["wait_ms"] == pytest.approx(r["replay_wait_ms"])
        b = bucket_latency(pts, x, waits, lanes, instances={pool: n}, redundancy=0, pool_rows=rows)
        ttft = b["ttft_predicted_ms"].to_numpy(float)
        assert np.all(np.abs(ttft / np.array(sim) - 1.0) <= 0.10), (n, ttft)
        if n > 13:
            assert bool(b["met"].all()), (n, ttft)  # 14 and 15 meet, as in simulation
