"""Statistics by hand: arrivals, resolution detection, buckets; and a property test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.workload.arrivals import arrival_stats, detect_resolution
from planner.workload.buckets import bin_edges, length_buckets
from planner.workload.characterize import characterize_file, characterize_log
from planner.workload.log import RequestLog, finish_log
from planner.workload.readers.mooncake import leading_seen_blocks


def test_arrival_stats_by_hand() -> None:
    # arrivals at 0, 0.5, 0.9, 1.2, 61.0 s
    t = np.array([0.0, 0.5, 0.9, 1.2, 61.0])
    a = arrival_stats(t, "relative", 0.1, peak_quantile=0.5)
    assert a is not None
    assert a.requests == 5 and a.duration_s == 61.0
    assert a.rate_mean_per_s == pytest.approx(5 / 61)
    # 1 s windows aligned to the first arrival: [0,1) holds 3, [1,2) holds 1, [61,62) holds 1
    assert a.rate_peak_per_s["1s"] == 3.0
    assert a.empty_windows["1s"] == 62 - 3
    # 60 s windows: [0,60) holds 4, [60,120) holds 1
    assert a.rate_peak_per_s["60s"] == pytest.approx(4 / 60)
    assert a.rate_quantile_per_s["60s"] == pytest.approx((4 / 60 + 1 / 60) / 2)
    gaps = np.diff(t)
    assert a.interarrival_cv == pytest.approx(gaps.std() / gaps.mean())
    assert a.notes and "less than one 600s window" in a.notes[0]


def test_resolution_detection_bucketed_and_fine() -> None:
    rng = np.random.default_rng(1)
    fine = np.sort(rng.uniform(0, 100, 500))
    res, bucketed = detect_resolution(fine, 1e-6)
    assert not bucketed and res == 1e-6
    snapped = np.floor(fine / 3.0) * 3.0
    res, bucketed = detect_resolution(snapped, 1e-3)
    assert bucketed and res == pytest.approx(3.0)
    a = arrival_stats(snapped, "relative", 1e-3)
    assert a is not None and a.timestamps == "bucketed" and a.unreliable_peak_windows == ["1s"]


def test_leading_seen_blocks() -> None:
    # r0: [1,2,3]; r1: [1,2,9] -> 2 leading seen; r2: [9,1] -> 9 seen (r1), 1 seen -> 2; r3: [5,1] -> 0 (5 new)
    ids = np.array([1, 2, 3, 1, 2, 9, 9, 1, 5, 1])
    offsets = np.array([0, 3, 6, 8, 10])
    assert leading_seen_blocks(offsets, ids).tolist() == [0, 2, 2, 0]


def test_buckets_rule_by_hand() -> None:
    inp = np.arange(1, 101, dtype=float)  # 1..100
    out = np.full(100, 10.0)
    out[99] = 1000.0
    buckets, notes = length_buckets(inp, out, 4, representative_quantile=0.995)
    assert notes == []
    assert [b.weight for b in buckets] == [0.25, 0.25, 0.25, 0.25]
    # edges at input quantiles 25.75, 50.5, 75.25 -> bins 1..25, 26..50, 51..75, 76..100
    assert [b.name for b in buckets] == ["b0_in1-25", "b1_in26-50", "b2_in51-75", "b3_in76-100"]
    # the service's tail set: input > its 0.995-quantile 99.505 or output > 509.95 -> only request 100
    # (input 100, output 1000); each representative is the maximum of the bucket's other requests
    assert buckets[0].input_tokens == 25.0
    assert buckets[3].input_tokens == 99.0
    assert buckets[3].input_tokens_mean == pytest.approx(88.0)
    # the 1000-token output is in the service's tail: it pulls the mean up, not the representative
    assert buckets[3].output_tokens == 10.0
    assert buckets[3].output_tokens_mean == pytest.approx((24 * 10 + 1000) / 25)
    assert buckets[0].output_tokens == 10.0


def test_buckets_representatives_cover_the_tail() -> None:
    rng = np.random.default_rng(7)
    inp = rng.lognormal(7, 1, 20000)
    out = rng.lognormal(5, 1, 20000)
    buckets, _ = length_buckets(inp, out, 4)
    which = np.searchsorted(bin_edges(inp, 4), inp, side="left")
    exceed = 0
    for j, b in enumerate(buckets):
        m = which == j
        exceed += np.count_nonzero((inp[m] > b.input_tokens) | (out[m] > b.output_tokens))
    # union bound over the service's tail set: at most 2 * (1 - 0.995) = 1 % of requests exceed their representatives
    assert exceed / len(inp) <= 0.01 + 1e-9


def test_buckets_merge_repeated_lengths() -> None:
    inp = np.array([5.0] * 90 + [7.0] * 10)
    buckets, notes = length_buckets(inp, np.ones(100), 4)
    assert len(buckets) == 2 and notes
    assert sum(b.weight for b in buckets) == pytest.approx(1.0)


def _log(t: np.ndarray, i: np.ndarray, o: np.ndarray) -> RequestLog:
    import pandas as pd

    df = pd.DataFrame({"input_tokens": i.astype(float), "output_tokens": o.astype(float), "arrival_s": t.astype(float)})
    return finish_log(RequestLog(source="mem", format="generic", frame=df, timestamps="relative", time_quantum_s=1e-3), None, None, "error")


rows = st.lists(
    st.tuples(st.integers(0, 200_000), st.integers(0, 5000), st.integers(1, 2000)),
    min_size=3,
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(rows, st.randoms(use_true_random=False))
def test_shuffled_or_duplicated_logs_are_consistent(data: list[tuple[int, int, int]], rnd) -> None:  # type: ignore[no-untyped-def]
    arr = np.array(data, dtype=float)
    t, i, o = arr[:, 0] / 1000.0, arr[:, 1], arr[:, 2]
    if t.max() == t.min():
        return
    base = characterize_log(_log(t, i, o))["default"]
    perm = list(range(len(t)))
    rnd.shuffle(perm)
    shuffled = characterize_log(_log(t[perm], i[perm], o[perm]))["default"]
    # shuffling changes nothing but the note that rows were sorted
    assert shuffled.input_tokens == base.input_tokens and shuffled.output_tokens == base.output_tokens
    assert shuffled.arrivals.rate_peak_per_s == base.arrivals.rate_peak_per_s
    assert shuffled.arrivals.interarrival_cv == pytest.approx(base.arrivals.interarrival_cv)
    assert [b.weight for b in shuffled.buckets] == [b.weight for b in base.buckets]
    # every row twice: counts and peaks double, mean rate doubles, means and maxima unchanged,
    # quantiles stay between the neighbouring order statistics of the original
    dup = characterize_log(_log(np.repeat(t, 2), np.repeat(i, 2), np.repeat(o, 2)))["default"]
    assert dup.requests == 2 * base.requests
    assert dup.arrivals.rate_mean_per_s == pytest.approx(2 * base.arrivals.rate_mean_per_s)
    for k, v in base.arrivals.rate_peak_per_s.items():
        assert dup.arrivals.rate_peak_per_s[k] == pytest.approx(2 * v)
    for name, x in (("input", i), ("output", o)):
        b, d = getattr(base, f"{name}_tokens"), getattr(dup, f"{name}_tokens")
        assert d.mean == pytest.approx(b.mean) and d.max == b.max
        for q, level in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            lo, hi = np.quantile(x, level, method="lower"), np.quantile(x, level, method="higher")
            assert lo - 1e-9 <= getattr(d, q) <= hi + 1e-9
    assert sum(b.weight for b in dup.buckets) == pytest.approx(1.0)


def test_unsorted_log_is_sorted_and_said(tmp_path: Path) -> None:
    p = tmp_path / "u.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:02.0,10,1\n2023-11-16 18:00:00.0,20,2\n2023-11-16 18:00:01.0,30,3\n")
    from planner.workload import characterize_path

    c = characterize_path(p)["default"]
    assert c.arrivals.duration_s == pytest.approx(2.0)
    assert any("not in order" in n for n in c.notes)


def test_within_window_cv_by_hand() -> None:
    from planner.workload.arrivals import within_window_cv

    # window [0,10): gaps 1,3 (mean 2: normalised 0.5, 1.5)
    t = np.array([0.0, 1.0, 4.0, 10.0, 12.0, 14.0, 16.0, 19.0])
    # second window gaps 2,2,2,3 (mean 2.25); the 4 -> 10 gap spans two windows and is left out
    dev = [(0.5 - 1) ** 2, (1.5 - 1) ** 2] + [(2 / 2.25 - 1) ** 2] * 3 + [(3 / 2.25 - 1) ** 2]
    expected = math.sqrt(sum(dev) / ((2 - 1) + (4 - 1)))
    assert within_window_cv(t, 10.0, min_gaps=2) == pytest.approx(expected, rel=1e-12)
    # a window below min_gaps is left out: only the second window counts
    dev2 = [(2 / 2.25 - 1) ** 2] * 3 + [(3 / 2.25 - 1) ** 2]
    assert within_window_cv(t, 10.0, min_gaps=3) == pytest.approx(math.sqrt(sum(dev2) / 3), rel=1e-12)
    assert math.isnan(within_window_cv(t, 10.0, min_gaps=5))


def test_within_window_cv_removes_rate_changes_between_windows() -> None:
    from planner.workload.arrivals import within_window_cv

    # Poisson at 1/s for 600 s, then at 20/s for 600 s: whole-log CV well above 1, inside 60 s windows ~1
    rng = np.random.default_rng(5)
    slow = np.cumsum(rng.exponential(1.0, 2000))
    slow = slow[slow < 600]
    fast = 600 + np.cumsum(rng.exponential(1 / 20, 30000))
    fast = fast[fast < 1200]
    t = np.concatenate([slow, fast])
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() > 1.5
    assert within_window_cv(t, 60.0) == pytest.approx(1.0, abs=0.05)


def test_within_window_cv_on_shipped_traces() -> None:
    """Hand-checked values: Azure code is bursty inside minutes (CV 4.72, 14.65 over the log);
    Azure conversation and the Poisson-generated Mooncake synthetic trace are ~1."""
    root = Path(__file__).resolve().parents[1] / "instances" / "traces"
    code = characterize_file(root / "azure2023_code_min00-20.csv")["default"].arrivals
    assert code is not None
    assert round(code.interarrival_cv, 2) == 14.65 and round(code.interarrival_cv_within["60s"], 2) == 4.72
    assert round(code.interarrival_cv_within["1s"], 2) == 1.34
    conv = characterize_file(root / "azure2023_conv_min00-20.csv")["default"].arrivals
    assert conv is not None and round(conv.interarrival_cv_within["60s"], 2) == 1.02
    synth = Path(__file__).resolve().parent / "data" / "mooncake_synthetic_min00-08.jsonl"
    a = characterize_file(synth)["default"].arrivals
    assert a is not None and a.interarrival_cv_within["60s"] == pytest.approx(1.0, abs=0.03)


def test_servegen_within_window_cv_pools_the_window_cvs() -> None:
    """ServeGen gives a CV per 600 s window: pooled by gap count (rate x 600 s), the square root of
    the rate-weighted mean of CV², for every window key; the whole-log field stays the median."""
    from planner.workload.characterize import characterize_servegen
    from planner.workload.readers import read_trace

    path = Path(__file__).resolve().parent / "data" / "servegen_reason_deepseek-r1_chunk-48-trace.csv"
    agg = read_trace(path)
    w = agg.windows
    active = (w["family"].astype(str).str.len() > 0) & (w["rate_rps"] > 0)
    rate, cv = w.loc[active, "rate_rps"].to_numpy(float), w.loc[active, "cv"].to_numpy(float)
    a = characterize_servegen(agg).arrivals
    expected = math.sqrt(float((rate * cv**2).sum() / rate.sum()))
    assert set(a.interarrival_cv_within) == {"1s", "60s", "600s"}
    assert all(v == pytest.approx(expected, rel=1e-12) for v in a.interarrival_cv_within.values())
    assert a.interarrival_cv == pytest.approx(float(np.median(cv)), rel=1e-12)
