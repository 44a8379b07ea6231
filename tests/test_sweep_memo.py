"""The plan memo of sweeps (planner.optimize.memo, issue 27): a hit is the computation's answer, a
changed frame (even the same object changed in place) or solution is a miss, callers get their own copies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.optimize import SolveSettings, extract
from planner.optimize.architecture import solve_architecture
from planner.optimize.extract import build_pools_routing_latency, solution_arrays
from planner.optimize.highs import make_solver
from planner.optimize.memo import Memo, frame_key
from planner.optimize.model import build_model
from planner.optimize.prepare import prepare
from planner.optimize.synthetic import synthetic_tables


def _dump(out: tuple[list, list, list]) -> list[list[dict]]:
    return [[m.model_dump() for m in part] for part in out]


def test_pools_routing_latency_memo_is_the_computation() -> None:
    settings = SolveSettings(redundancy=1)
    built = build_model(prepare(synthetic_tables(services=2, buckets=2, devices=2, seed=5)), redundancy=1)
    plan = solve_architecture(built, make_solver(), "disaggregated", settings)
    assert plan.feasible
    x, n, _z, _u = solution_arrays(built)
    extract._PLAN_MEMO.clear()
    want = _dump(extract._pools_routing_latency(built, x, n, 1))
    first = build_pools_routing_latency(built, x, n, 1)
    assert _dump(first) == want and extract._PLAN_MEMO.misses == 1
    first[0].clear()  # a caller's copy: the next answer is unchanged
    assert _dump(build_pools_routing_latency(built, x, n, 1)) == want and extract._PLAN_MEMO.hits == 1
    # a twin frame of equal content hits (a sweep's price-only scenarios)
    twin = replace(built, prep=replace(built.prep, points=built.prep.points.copy()))
    assert _dump(build_pools_routing_latency(twin, x, n, 1)) == want and extract._PLAN_MEMO.hits == 2
    # another redundancy, or a solution one ulp away: computed
    assert _dump(build_pools_routing_latency(built, x, n, 0)) == _dump(extract._pools_routing_latency(built, x, n, 0))
    on = int(np.flatnonzero(x > 0)[0])
    x2 = x.copy()
    x2[on] = np.nextafter(x2[on], 0.0)
    build_pools_routing_latency(built, x2, n, 1)
    assert extract._PLAN_MEMO.hits == 2
    # the same frame object with its peak rates raised in place: not the memo's answer
    pts = twin.prep.points
    pts["rate_peak_per_s"] = pts["rate_peak_per_s"] * 1.5
    changed = _dump(build_pools_routing_latency(twin, x, n, 1))
    assert changed == _dump(extract._pools_routing_latency(twin, x, n, 1))
    assert changed != want


def test_memo_is_least_recently_used_and_frame_keys_follow_content() -> None:
    m = Memo(2)
    m.put("a", 1)
    m.put("b", 2)
    assert m.get("a") == 1  # "b" is now the least recently used
    m.put("c", 3)
    assert m.get("b") is None and m.get("a") == 1 and m.get("c") == 3
    df = synthetic_tables(seed=2).points
    assert frame_key(df) == frame_key(df.copy())
    other = df.copy()
    other.iloc[0, other.columns.get_loc("instance_seconds_per_request")] *= 1 + 1e-15
    assert frame_key(other) != frame_key(df)
    assert frame_key(df[df.columns[::-1]]) != frame_key(df)


def test_frame_key_is_exact_on_every_kind_of_column() -> None:
    """The digest key (issue 27: ~3x faster than pandas' row hashes) tells apart any change a cell can
    take — a string, a missing value, a sign of zero, a dtype, a row moved — and shares nothing for cells
    whose ``repr`` is not their value."""
    import pandas as pd

    df = synthetic_tables(seed=3).points
    assert frame_key(df) == frame_key(df.copy(deep=True))
    s_col = next(c for c in df.columns if df[c].dtype == object or str(df[c].dtype).startswith("str"))
    for change in (
        lambda d: d.iloc[0, d.columns.get_loc(s_col)] + "x",
        lambda d: None,
    ):
        other = df.copy()
        other.iloc[0, other.columns.get_loc(s_col)] = change(other)
        assert frame_key(other) != frame_key(df)
    zero = pd.DataFrame({"a": [0.0, 1.0]})
    assert frame_key(zero) == frame_key(pd.DataFrame({"a": [0.0, 1.0]}))
    assert frame_key(zero) != frame_key(pd.DataFrame({"a": [-0.0, 1.0]}))  # stricter than ==, never looser
    assert frame_key(zero) != frame_key(pd.DataFrame({"a": [0, 1]}))  # another dtype
    assert frame_key(zero) != frame_key(pd.DataFrame({"b": [0.0, 1.0]}))  # another column name
    assert frame_key(df) != frame_key(df.iloc[::-1])  # rows reordered
    assert frame_key(pd.DataFrame({"s": ["a\x1fb", "c"]})) != frame_key(pd.DataFrame({"s": ["a", "b\x1fc"]}))
    odd = pd.DataFrame({"o": [object(), 1]})
    assert frame_key(odd) != frame_key(odd)  # a cell of no plain type: nothing shared


def test_solution_shares_are_read_to_nine_decimals() -> None:
    """The LP's last-bit noise in a share (1.0 in one solve, 0.9999999999953 in the next) is not part of the plan
    (extract.SHARE_DECIMALS): the shares read back are the solver's rounded to 1e-9, so a sweep's identical plans
    are one memo key (a 100-scenario sweep: 47 -> 20 peak simulations, benchmarks/bench_sweep.py --profile)."""
    settings = SolveSettings(redundancy=1)
    built = build_model(prepare(synthetic_tables(services=2, buckets=2, devices=2, seed=5)), redundancy=1)
    assert solve_architecture(built, make_solver(), "disaggregated", settings).feasible
    x, n, _z, _u = solution_arrays(built)
    m = built.model
    on = int(np.flatnonzero(x > 0.5)[0])
    m.x[on].value = float(x[on]) - 4.7e-12  # the noise HiGHS leaves on a vertex
    x_noisy, n2, _z2, _u2 = solution_arrays(built)
    assert np.array_equal(x_noisy, x) and np.array_equal(n2, n)
    assert np.array_equal(x, np.round(x, extract.SHARE_DECIMALS))


def test_frame_key_from_the_blocks_is_the_column_by_column_key(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """:func:`planner.optimize.memo.frame_key` reads the columns from the frame's blocks (issue 27: ~1.7x faster on
    the example's points); the key is the one reading each column through ``DataFrame.items`` gives, on numeric,
    string, nullable, datetime and empty frames, and on frames whose blocks are split (a column added)."""
    import pandas as pd

    import planner.optimize.memo as memo

    pts = synthetic_tables(seed=4).points
    split = pts.copy()
    split["extra"] = 1.5  # a new block, not consolidated
    frames = [pts, split, pts[pts.columns[::-1]], pts.iloc[::2],
              pd.DataFrame({"n": pd.array([1, None], dtype="Int64"), "s": ["a", None], "b": [True, False],
                            "t": pd.to_datetime(["2020-01-01", "2021-01-01"])}),
              pd.DataFrame()]
    via_blocks = [frame_key(f) for f in frames]
    assert all(memo._column_arrays(f) is not None for f in frames[:4])  # (a 2-D DatetimeArray block: column by column)
    monkeypatch.setattr(memo, "_column_arrays", lambda df: None)
    assert [frame_key(f) for f in frames] == via_blocks
