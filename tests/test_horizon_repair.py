"""Every level of a plan over time checked analytically and topped up where it misses (planner.horizon.repair); the
per-slot check's table says what is met analytically and in simulation and labels the targeted per-token metric; a
per-slot plan dearer than a pure plan it contains says so."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from micro_tables import micro_tables

from planner.horizon.model import Acquisition, HorizonInputs, build_horizon
from planner.horizon.repair import level_latency, level_points, repair_levels
from planner.horizon.report import slot_check_lines
from planner.horizon.solve import (
    HorizonArchitecture,
    _note_dearer_per_slot,
    extract,
    solve_architecture,
)


def _modelled(cap: float):  # type: ignore[no-untyped-def]
    """Micro table (10 req/s at peak, 1 s per request) over 2 periods x 2 slots, its cap ``cap`` in the MIP, but its
    points priced by the queueing model (no measured cap) in the analytic check: a cap of 0.99 is far too loose for
    a pool of ~11 instances."""
    slots = pd.DataFrame([{"slot": f"s{i}", "hours_per_period": 365.0, "peak_rate_per_s": m, "mean_rate_per_s": m / 2,
                           "interarrival_cv": math.nan} for i, m in enumerate([0.5, 1.0])])
    inputs = HorizonInputs(slots=slots, absolute=False, growth=np.asarray([1.0, 1.2]), months_per_period=1.0,
                           acquisition={"g": Acquisition("g", on_demand_usd_per_hour=2.0)})
    hb = build_horizon(micro_tables(cap=cap), inputs)
    hb.prep.points["utilization_cap"] = np.nan
    return hb


def test_repair_tops_up_only_the_levels_that_miss_to_the_fewest_instances_that_meet() -> None:
    hb = _modelled(0.5)
    sol, _ = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    assert sol.values is not None
    v = sol.values.copy()
    n = hb.block("n")
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    x1 = v[hb.block("x")][1]
    # level 1 (10 req/s, 1 s each): 12 instances miss the 1,000 ms p99 TTFT, 13 meet
    assert not level_latency(level_points(hb, 1), names, x1, np.array([12]), 0)[0]["met"].all()
    assert level_latency(level_points(hb, 1), names, x1, np.array([13]), 0)[0]["met"].all()
    v[n[1]] = 10  # at 100 %: an infinite wait
    rep = repair_levels(hb, v)
    assert rep.n[:, 0].tolist() == [10, 13, 12, 24]  # levels 0, 2 (half the rate) and 3 (the MIP's 24) untouched
    assert (rep.levels_repaired, rep.instances_added, rep.unfixed, rep.checked) == (1, 3, [], 4)


def test_solve_repairs_a_plan_whose_caps_are_too_loose_and_pays_for_it() -> None:
    hb = _modelled(0.99)
    raw, _ = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    sol, _ = solve_architecture(hb, "shared", 60, 1e-3)
    assert raw.values is not None and sol.values is not None and sol.objective is not None and raw.objective is not None
    assert np.rint(raw.values[hb.block("n")][:, 0]).tolist() == [6, 11, 7, 13]
    n = np.rint(sol.values[hb.block("n")][:, 0]).astype(int)
    assert n.tolist() == [8, 13, 9, 15]  # the fewest that meet at each level's rate (in steps of one instance)
    assert sol.objective > raw.objective and sol.bound == raw.bound  # the gap stays against the first solve's bound
    assert "4 of 4 level(s) missed" in sol.note and "topped up" in sol.note
    schedule, _pools, _costs, _slots = extract(hb, sol.values)
    assert schedule["in_pools_peak"].tolist() == [13, 15]
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    for k in range(4):
        assert level_latency(level_points(hb, k), names, sol.values[hb.block("x")][k], n[k:k + 1], 0)[0]["met"].all()
    ok, _ = solve_architecture(_modelled(0.5), "shared", 60, 1e-3)
    assert ok.note == "every level checked analytically: all 4 meet their latency targets"


def _checks(analytic_met: list[bool], met: list[bool]) -> HorizonArchitecture:
    rows = [{"period": 23, "slot": s, "service": "chat", "peak_rate_per_s": 1791.0, "ttft_quantile": 0.99, "ttft_target_ms": 2000.0,
             "ttft_analytic_ms": a_ms, "ttft_sim_ms": 1252.0, "tpot_quantile": 0.99, "tpot_target_ms": 60.0, "tpot_analytic_ms": 59.8,
             "tpot_sim_ms": 59.8, "token_metric": "itl", "analytic_met": a, "met": m, "wall_s": 1.0, "note": ""}
            for s, a_ms, a, m in zip(["h22", "h18"], [2617.0, 924.0], analytic_met, met, strict=True)]
    return HorizonArchitecture("disaggregated", True, "optimal", 1.0, slot_checks=pd.DataFrame(rows), verify_s=2.0)


def test_slot_check_says_which_judgement_and_labels_the_targeted_metric() -> None:
    head, tab = slot_check_lines(_checks([False, True], [True, True]))[:2]
    assert "every checked slot meets its targets in simulation; 1 service-slot(s) MISS analytically (period 23 h22)" in head
    assert "ITL p99 ms analytic / sim" in tab and "TPOT" not in tab and "TTFT p99 ms analytic / sim" in tab
    h22 = next(line for line in tab.splitlines() if " h22 " in line)
    assert "2,617 / 1,252" in h22 and "MISSED" in h22 and h22.rstrip().endswith("met")
    head = slot_check_lines(_checks([True, True], [True, True]))[0]
    assert head.endswith("every checked slot meets its targets in simulation and analytically")


def test_a_per_slot_plan_dearer_than_a_pure_plan_it_contains_says_so() -> None:
    archs = {"shared": HorizonArchitecture("shared", True, "optimal", 5_835_917.0),
             "disaggregated": HorizonArchitecture("disaggregated", True, "optimal", 4_364_037.0),
             "shared/disaggregated per slot": HorizonArchitecture("shared/disaggregated per slot", True, "optimal", 4_403_305.0, gap=0.0531)}
    _note_dearer_per_slot(archs)
    (note,) = archs["shared/disaggregated per slot"].notes
    assert "costs $39,268 (0.9 %) more than the pure disaggregated plan, which it contains" in note and "stopped short of it (within its gap to the bound, gap 5.3% against its LP bound" in note
    assert not archs["shared"].notes and not archs["disaggregated"].notes
    archs["shared/disaggregated per slot"] = HorizonArchitecture("shared/disaggregated per slot", True, "optimal", 4_300_000.0)
    _note_dearer_per_slot(archs)
    assert not archs["shared/disaggregated per slot"].notes


def test_a_level_instances_cannot_fix_is_not_topped_up_and_the_note_counts_it() -> None:
    """A miss with no wait left to cut (unqueued TTFT 1,001 ms against 1,000) gets no instance: none is paid for nothing."""
    hb = _modelled(0.5)
    hb.prep.points["ttft_ms"] = 1001.0
    raw, _ = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    assert raw.values is not None
    rep = repair_levels(hb, raw.values)
    assert (rep.levels_repaired, rep.instances_added, len(rep.unfixed)) == (0, 0, 4)
    assert (rep.n == np.rint(raw.values[hb.block("n")]).astype(int)).all()
    sol, _ = solve_architecture(hb, "shared", 60, 1e-3)
    assert sol.objective == raw.objective
    assert "4 of 4 level(s) miss" in sol.note and "instances do not fix them" in sol.note and "no wait to cut" in sol.note


def test_a_ramp_limit_raises_the_neighbouring_levels_instead_of_failing_the_top_up() -> None:
    """Counts held exactly break a ramp row between slots: the re-solve takes them as lower bounds instead."""
    slots = pd.DataFrame([{"slot": f"s{i}", "hours_per_period": 365.0, "peak_rate_per_s": m, "mean_rate_per_s": m / 2,
                           "interarrival_cv": math.nan} for i, m in enumerate([0.5, 1.0])])
    inputs = HorizonInputs(slots=slots, absolute=False, growth=np.asarray([1.0, 1.2]), months_per_period=1.0,
                           acquisition={"g": Acquisition("g", on_demand_usd_per_hour=2.0)}, ramp_instances_per_slot=1.0)
    hb = build_horizon(micro_tables(cap=0.99), inputs)
    hb.prep.points["utilization_cap"] = np.nan
    raw, _ = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    assert raw.values is not None and raw.objective is not None
    rep = repair_levels(hb, raw.values)
    assert rep.instances_added > 0
    sol, _ = solve_architecture(hb, "shared", 60, 1e-3)
    assert sol.values is not None and sol.objective is not None and sol.objective > raw.objective
    n = np.rint(sol.values[hb.block("n")][:, 0]).astype(int)
    assert (n >= rep.n[:, 0]).all() and (np.abs(np.diff(n)) <= 1).all()
    assert "neighbouring levels raised" in sol.note and "failed" not in sol.note


def test_the_html_report_shows_each_plans_notes() -> None:
    from planner.horizon.solve import solve_horizon
    from planner.report.horizon_html import render

    slots = pd.DataFrame([{"slot": f"s{i}", "hours_per_period": 365.0, "peak_rate_per_s": m, "mean_rate_per_s": m / 2,
                           "interarrival_cv": math.nan} for i, m in enumerate([0.5, 1.0])])
    inputs = HorizonInputs(slots=slots, absolute=False, growth=np.asarray([1.0, 1.2]), months_per_period=1.0,
                           acquisition={"g": Acquisition("g", on_demand_usd_per_hour=2.0)})
    res = solve_horizon(micro_tables(cap=0.5), inputs, ("shared",), baseline=False)
    notes = res.architectures["shared"].notes
    assert notes and "every level checked analytically" in notes[0]
    assert html_escape(notes[0]) in render(res, "micro", "req/s")


def html_escape(s: str) -> str:
    import html

    return html.escape(s)


def test_a_level_at_zero_traffic_is_checked_without_error() -> None:
    """fuzz_horizon --seed 2705 input 9: a slot whose rate is 0 while its routing share is not divided by the pool's
    zero arrival rate (ZeroDivisionError in pool_latency); a pool carrying nothing has no queue and meets."""
    hb = _modelled(0.5)
    sol, _ = solve_architecture(hb, "shared", 60, 1e-3, repair=False)
    assert sol.values is not None
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    pts = level_points(hb, 1)
    pts["rate_peak_per_s"] = 0.0
    pts["rate_mean_per_s"] = 0.0
    bl, waits = level_latency(pts, names, sol.values[hb.block("x")][1], np.array([13]), 0)
    assert bl["met"].all() and all(w == 0.0 for w in waits.values())


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)  # type: ignore[arg-type]
        return fa == fb or (math.isnan(fa) and math.isnan(fb))
    return a == b


def test_the_array_check_of_a_level_is_the_latency_model_to_the_bit(tmp_path: Path) -> None:
    """repair's array path (_LevelModel / _Level, built for speed) against level_latency (pool_latency and
    bucket_latency, what every view prices), on a small enterprise-chat horizon (H100 tp2/tp4, both architectures),
    at every level and at instance counts around the plan's: every bucket's figures and every pool's wait equal.
    A change to the latency model that the array path does not follow fails here."""
    import yaml

    from planner.capacity import build_capacity_tables
    from planner.horizon.inputs import horizon_inputs
    from planner.horizon.repair import _LevelModel
    from planner.instance import load_instance

    root = Path(__file__).resolve().parent.parent
    src = yaml.safe_load((root / "instances" / "enterprise-chat.yaml").read_text())
    src["services"]["chat"]["traffic"]["trace"] = str(root / "instances" / "traces" / "azure2023_conv_min00-20.csv")
    src["catalog"]["devices"] = ["h100-sxm"]
    src["catalog"]["tp_degrees"] = [2, 4]
    src["scenarios"] = {}
    src["horizon"] = {"periods": 2, "growth": {"monthly_rate": 0.1},
                      "demand": {"slots": [{"name": "night", "hours_per_period": 365, "peak_multiplier": 0.5},
                                           {"name": "day", "hours_per_period": 365, "peak_multiplier": 1.0}]},
                      "acquisition": {"h100-sxm": {"buy": {"lead_time_periods": 0, "source": "profile"}, "on_demand": {"source": "profile"}}}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(src))
    resolved = load_instance(tmp_path / "h.yaml")
    hb = build_horizon(build_capacity_tables(resolved), horizon_inputs(resolved))
    model = _LevelModel.of(hb)
    assert model is not None
    names = hb.prep.pools["pool"].astype(str).to_numpy()
    red = int(hb.inputs.redundancy)
    rng = np.random.default_rng(0)
    compared = 0
    for arch in ("shared", "disaggregated"):
        sol, _ = solve_architecture(hb, arch, 60, 1e-3, repair=False)
        assert sol.values is not None
        x_all = np.asarray(sol.values[hb.block("x")], dtype=float).copy()
        x_all[x_all < 1e-6] = 0.0
        n_all = np.rint(sol.values[hb.block("n")]).astype(int)
        for k in range(hb.levels.m_peak.size):
            routed = x_all[k] > 0
            if not routed.any():
                continue
            pts = level_points(hb, k).loc[routed].reset_index(drop=True)
            lv = model.level(k, np.flatnonzero(routed), x_all[k][routed])
            for n in (n_all[k], np.maximum(0, (n_all[k] * rng.uniform(0.3, 1.0, n_all[k].size)).astype(int)),
                      n_all[k] + rng.integers(0, 5, n_all[k].size), np.maximum(0, n_all[k] - rng.integers(0, 3, n_all[k].size))):
                bl, w_ref = level_latency(pts, names, x_all[k][routed], n, red)
                recs, w_arr = lv.latency(names, n, red)
                assert set(w_ref) == set(w_arr) and all(_same(w_ref[p], w_arr[p]) for p in w_ref)
                assert len(recs) == len(bl)
                for a, b in zip(bl.to_dict("records"), recs, strict=True):
                    for c in ("service", "bucket", "ttft_predicted_ms", "ttft_target_ms", "tpot_predicted_ms", "tpot_target_ms", "pools", "met"):
                        assert _same(a[c], b[c]), (arch, k, c, a[c], b[c])
                compared += 1
    assert compared >= 16
