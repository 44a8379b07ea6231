"""The owned-peak baseline checked at every level like the plans (planner.horizon.baseline): a period whose slot misses
gets its held pools raised to the most any of its slots needs, and the baseline is re-priced; a baseline that meets
is left as it was."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from micro_tables import micro_tables

import planner.horizon.solve as horizon_solve
from planner.horizon.baseline import check_baseline, period_peak_counts
from planner.horizon.model import Acquisition, HorizonBuilt, HorizonInputs, build_horizon
from planner.horizon.repair import level_latency, level_points
from planner.horizon.report import summary_lines, to_document
from planner.horizon.solve import (
    baseline_note,
    checked_baseline,
    extract,
    solve_architecture,
    solve_horizon,
)

DEVICE_PERIOD_USD = 730.0 * 1.0 + 10.0 + 5.0
"""One owned device for one period of the micro horizon: 730 h at $1/device-hour bought, $10 + $5 a month of
operations and licence (electricity free, no discount)."""


def _inputs() -> HorizonInputs:
    """2 periods (growth 1, 1.2) x 2 slots of 365 h (half and all of the table's 10 req/s), device ``g`` bought at
    $1/device-hour with no lead time."""
    slots = pd.DataFrame([{"slot": f"s{i}", "hours_per_period": 365.0, "peak_rate_per_s": m, "mean_rate_per_s": m / 2,
                           "interarrival_cv": math.nan} for i, m in enumerate([0.5, 1.0])])
    return HorizonInputs(slots=slots, absolute=False, growth=np.asarray([1.0, 1.2]), months_per_period=1.0,
                         acquisition={"g": Acquisition("g", buy_usd_per_device_hour=1.0, on_demand_usd_per_hour=2.0)})


def _baseline_model(cap: float) -> HorizonBuilt:
    """The owned-peak baseline's model of the micro table (1 s per request, p99 TTFT target 1,000 ms) with cap ``cap``
    in the MIP, its points priced by the queueing model (no measured cap) in the analytic check."""
    hb = build_horizon(micro_tables(cap=cap), _inputs(), static_pools=True, buy_only=True)
    hb.prep.points["utilization_cap"] = np.nan
    return hb


def _fewest_that_meet(hb: HorizonBuilt, x: np.ndarray, k: int) -> int:
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    pts = level_points(hb, k)
    return next(n for n in range(1, 100) if level_latency(pts, names, x[k], np.array([n]), 0)[0]["met"].all())


def test_period_peak_counts_hold_each_pool_at_its_periods_largest_count() -> None:
    n = np.array([[3, 0], [5, 1], [4, 2], [2, 2]])  # 2 periods x 2 slots, 2 pools
    assert period_peak_counts(n, 2).tolist() == [[5, 1], [5, 1], [4, 2], [4, 2]]
    assert period_peak_counts(n, 1).tolist() == n.tolist()


def test_a_baseline_that_misses_a_slot_has_its_periods_pool_raised_to_that_slots_need_and_is_repriced() -> None:
    hb = _baseline_model(0.99)
    sol, b = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    assert sol.values is not None and sol.objective is not None
    n0 = np.rint(sol.values[hb.block("n")][:, 0]).astype(int)
    # a cap of 0.99: each period's pool at its busy slot's 10 and 12 req/s over 0.99 (held through the period)
    assert n0.tolist() == [11, 11, 13, 13]
    assert sol.objective == pytest.approx((11 + 13) * DEVICE_PERIOD_USD)
    x = sol.values[hb.block("x")]
    need = [_fewest_that_meet(hb, x, k) for k in range(4)]
    assert need == [8, 13, 9, 15]  # the quiet slots meet at 11 and 13; the busy ones need 13 and 15 for p99 ≤ 1 s

    chk = check_baseline(hb, sol.values)
    assert chk.n[:, 0].tolist() == [13, 13, 15, 15]  # each period's pool at the largest need of its slots, in both slots
    assert (chk.levels_checked, chk.levels_missed, chk.missed, chk.unfixed, chk.periods_raised, chk.instances_added) == (
        4, 2, (1, 3), [], 2, 4)

    raised, chk = checked_baseline(hb, b, sol, 60, 1e-3)
    assert raised.values is not None and raised.objective is not None
    assert np.rint(raised.values[hb.block("n")][:, 0]).tolist() == [13, 13, 15, 15]
    assert chk.usd_before == pytest.approx((11 + 13) * DEVICE_PERIOD_USD)  # $17,880
    assert chk.usd_after == pytest.approx((13 + 15) * DEVICE_PERIOD_USD) == raised.objective  # $20,860
    assert raised.bound == sol.bound
    schedule, _pools, _costs, _slots = extract(hb, raised.values)
    assert schedule["bought"].tolist() == [13, 2] and schedule["owned"].tolist() == [13, 15]
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    n = np.rint(raised.values[hb.block("n")]).astype(int)
    for k in range(4):  # after: every level meets
        assert level_latency(level_points(hb, k), names, raised.values[hb.block("x")][k], n[k], 0)[0]["met"].all()
    note = baseline_note(chk, ["s0", "s1"])
    assert "2 of 4 level(s) missed their latency targets at its pool sizes (period 0 s1, period 1 s1)" in note
    assert "2 period(s)' held pools raised to the most any of their slots needs (+4 instances)" in note
    assert "$17,880 → $20,860 present value (+$2,980)" in note


def test_a_baseline_that_meets_everywhere_is_unchanged_to_the_bit() -> None:
    hb = _baseline_model(0.5)
    sol, b = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    assert sol.values is not None and sol.objective is not None
    assert np.rint(sol.values[hb.block("n")][:, 0]).tolist() == [20, 20, 24, 24]  # well above 13 and 15
    checked, chk = checked_baseline(hb, b, sol, 60, 1e-3)
    assert checked is sol  # the same solution: no re-solve
    assert chk.usd_after == chk.usd_before == sol.objective  # bit-identical
    assert (chk.levels_missed, chk.periods_raised, chk.instances_added, chk.raised) == (0, 0, 0, False)
    assert (chk.n == np.rint(sol.values[hb.block("n")]).astype(int)).all()
    assert baseline_note(chk, ["s0", "s1"]) == ("the owned-peak baseline the saving is measured against, checked analytically at every "
                                  "level: all 4 meet their latency targets (its cost unchanged)")


def _priced_by_queueing(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`solve_horizon`'s models with their points priced by the queueing model in the analytic check (the
    plan's and the baseline's share the prepared points)."""
    real = horizon_solve.build_horizon

    def build(*args, **kwargs):  # type: ignore[no-untyped-def]
        hb = real(*args, **kwargs)
        hb.prep.points["utilization_cap"] = np.nan
        return hb

    monkeypatch.setattr(horizon_solve, "build_horizon", build)


def test_solve_horizon_reports_the_baseline_check_in_notes_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    _priced_by_queueing(monkeypatch)
    res = solve_horizon(micro_tables(cap=0.99), _inputs(), ("shared",))
    a = res.architectures["shared"]
    assert a.baseline_check is not None and a.baseline_usd is not None
    assert a.baseline_check.usd_before == pytest.approx((11 + 13) * DEVICE_PERIOD_USD)
    assert a.baseline_usd == a.baseline_check.usd_after == pytest.approx((13 + 15) * DEVICE_PERIOD_USD)
    assert any(n.startswith("the owned-peak baseline the saving is measured against") and "2 of 4 level(s) missed" in n
               for n in a.notes)
    assert not any("not checked per level" in n for n in a.notes)
    doc = to_document(res, "micro")["architectures"]["shared"]
    assert doc["baseline_owned_peak_usd"] == a.baseline_usd
    assert doc["baseline_check"].pop("check_s") > 0
    assert doc["baseline_check"] == {"levels_checked": 4, "levels_missed": 2, "missed_levels": [1, 3], "levels_unfixed": 0,
                                     "periods_raised": 2,
                                     "instances_added": 4, "usd_present_value_before": pytest.approx(17_880.0),
                                     "usd_present_value_after": pytest.approx(20_860.0), "resolve_failed": None}
    assert any("$17,880 → $20,860" in line for line in summary_lines(res, "micro"))


def test_solve_horizon_with_a_baseline_that_meets_says_so_in_one_line() -> None:
    res = solve_horizon(micro_tables(cap=0.5), _inputs(), ("shared",))  # measured caps: every level meets
    a = res.architectures["shared"]
    assert a.baseline_check is not None and a.baseline_usd == a.baseline_check.usd_before
    lines = [n for n in a.notes if "owned-peak baseline" in n]
    assert lines == ["the owned-peak baseline the saving is measured against, checked analytically at every level: all 4 "
                     "meet their latency targets (its cost unchanged)"]
    assert to_document(res, "micro")["architectures"]["shared"]["baseline_check"]["levels_missed"] == 0
