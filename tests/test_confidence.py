"""Verdict confidence (issue 13, item 7): the smallest change that flips the verdict, by the
re-sizing model of :mod:`planner.optimize.confidence` (hand-solvable plans), and end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.optimize.confidence import (
    PRECISION,
    ResizedPlan,
    bisect_flip,
    error_band_for,
    nearest_flip,
    verdict_confidence,
    winner_at,
)


def _plans() -> list[ResizedPlan]:
    # disaggregated: prefill pool 1 x $1000 at load 0.9, decode pool 1 x $1000 at load 0.5 -> $2000
    disagg = ResizedPlan("disaggregated", 0.0, np.array([1000.0, 1000.0]), np.array([1.0, 1.0]), 0,
                         np.array([0.9, 0.0]), np.array([0.0, 0.5]))
    # shared: one pool 2 x $1050 at load 0.8 (prefill part) + 0.6 (decode part) -> $2100
    shared = ResizedPlan("shared", 0.0, np.array([2100.0]), np.array([2.0]), 0, np.array([0.8]), np.array([0.6]))
    return [disagg, shared]


def test_resized_costs_by_hand() -> None:
    d, s = _plans()
    assert d.cost() == 2000.0 and s.cost() == 2100.0
    assert d.cost(m_pf=1.2) == 3000.0  # prefill load 1.08 needs a second instance
    assert s.cost(m_pf=1.2) == 2100.0  # 0.96 + 0.6 still fits two
    assert s.cost(m_pf=0.5) == 1050.0  # 0.4 + 0.6 fits one
    assert d.cost(m_rate=0.1) == 2000.0  # never below one instance per pool
    assert winner_at(_plans()) == "disaggregated"


def test_prefill_flip_is_found_where_the_hand_calculation_puts_it() -> None:
    plans = _plans()
    up, after = nearest_flip(lambda m: winner_at(plans, m_pf=m), "disaggregated", 2.0)
    assert after == "shared"
    assert up is not None and abs(up / (1 / 0.9) - 1) <= PRECISION  # 0.9 m > 1
    down, _ = nearest_flip(lambda m: winner_at(plans, m_pf=m), "disaggregated", 0.5)
    assert down is not None and abs(down / 0.5 - 1) <= PRECISION  # 0.8 m + 0.6 <= 1 only at m = 0.5
    # decode: disaggregated's decode pool has room up to 2x; shared's 0.8 + 0.6 m <= 2 up to 2x too
    assert nearest_flip(lambda m: winner_at(plans, m_dec=m), "disaggregated", 2.0) == (None, None)


def test_bisection_brackets_to_the_precision() -> None:
    lo, hi, w = bisect_flip(lambda m: "a" if m < math.pi else "b", 1.0, 4.0, "a", precision=1e-4)
    assert w == "b" and lo < math.pi <= hi and hi / lo - 1 <= 1e-4


def test_error_band_defaults_to_25_percent_and_says_so() -> None:
    from types import SimpleNamespace

    pool = SimpleNamespace(device="h100-sxm")
    result = SimpleNamespace(architectures={"shared": SimpleNamespace(feasible=True, pools=[pool])})
    band, source = error_band_for(result, None)  # type: ignore[arg-type]
    assert band == 0.25 and "assumed" in source and "h100-sxm" in source
    band, source = error_band_for(result, {"h100-sxm/vllm": 0.12})  # type: ignore[arg-type]
    assert band == 0.12 and "validated" in source


@pytest.fixture(scope="module")
def solved():  # type: ignore[no-untyped-def]
    from planner.optimize import SolveSettings, solve_tables
    from planner.optimize.synthetic import synthetic_tables

    t = synthetic_tables(services=1, buckets=2, devices=2, tps=(1, 2), seed=3, rate_scale=4)
    return solve_tables(t, SolveSettings(verify_rounds=0)).result


def test_every_solved_verdict_states_its_confidence(solved) -> None:  # type: ignore[no-untyped-def]
    c = solved.verdict.confidence
    assert c is not None
    assert c.summary.startswith(("robust", "near thing", "not assessed"))
    assert {f.dimension for f in c.flips} >= {"prefill_time", "decode_step_time", "traffic"}
    if c.robust is False:
        assert any(f.within_error for f in c.flips)
    again = type(solved).model_validate_json(solved.model_dump_json())  # JSON round trip
    assert again.verdict.confidence == c


def test_a_near_thing_is_named_with_the_flip(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import planner.optimize.confidence as conf

    plans = {p.architecture: p for p in _plans()}
    monkeypatch.setattr(conf, "resized_plan", lambda a, pts, k: plans[a.architecture])
    arch = {a: SimpleNamespace(architecture=a, feasible=True, costs=object(), simulation=None, pools=[SimpleNamespace(device="d")])
            for a in plans}
    result = SimpleNamespace(verdict=SimpleNamespace(winner="disaggregated"), architectures=arch,
                             capacity=SimpleNamespace(points=[], redundancy=0, demand=[]))
    c = verdict_confidence(result)  # type: ignore[arg-type]
    assert c.robust is False
    assert c.summary.startswith("near thing: flips to shared if prefill 11 % slower"), c.summary
    assert "±25 % assumed" in c.summary


def test_scaled_tables_scale_the_work_of_each_phase() -> None:
    from planner.optimize.confidence import scaled_tables
    from planner.optimize.synthetic import synthetic_tables

    t = synthetic_tables(services=1, buckets=2, devices=1, tps=(1,), seed=1)
    s = scaled_tables(t, m_pf=1.5, m_dec=2.0, m_rate=3.0)
    role = t.points["role"].to_numpy(str)
    ratio = s.points["instance_seconds_per_request"].to_numpy(float) / t.points["instance_seconds_per_request"].to_numpy(float)
    assert np.allclose(ratio[role == "prefill"], 1.5) and np.allclose(ratio[role == "decode"], 2.0)
    assert np.all((ratio[role == "unified"] >= 1.5 - 1e-9) & (ratio[role == "unified"] <= 2.0 + 1e-9))
    assert np.allclose(s.demand["rate_peak_per_s"], 3.0 * t.demand["rate_peak_per_s"])
    # a prefill point slower than its TTFT target is no longer feasible
    slow = scaled_tables(t, m_pf=1e4)
    assert not slow.points.loc[slow.points["role"] == "prefill", "feasible"].any()


def test_exact_confidence_re_solves_and_agrees_at_one(solved) -> None:  # type: ignore[no-untyped-def]
    calls: list[tuple[float, float, float]] = []

    def exact(m_pf: float, m_dec: float, m_rate: float) -> str:
        calls.append((m_pf, m_dec, m_rate))
        return str(solved.verdict.winner) if m_pf < 1.3 else "other"

    c = verdict_confidence(solved, exact=exact)
    if c.robust is None:
        pytest.skip("synthetic instance has one architecture meeting its targets")
    pf = next(f for f in c.flips if f.dimension == "prefill_time")
    assert pf.slower_or_more is not None and abs(pf.slower_or_more / 1.3 - 1) <= 0.011
    assert pf.faster_or_less is None and "re-solving" in c.method
    assert len(calls) < 60


def test_cli_states_confidence_and_can_turn_it_off() -> None:
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from planner.cli import main

    inst = str(Path(__file__).resolve().parent / "data" / "instances" / "valid_minimal.yaml")
    r = CliRunner().invoke(main, ["solve", inst, "--set", "options.verify=false"])
    assert r.exit_code == 0, r.output
    assert "CONFIDENCE: " in r.output
    r = CliRunner().invoke(main, ["solve", inst, "--set", "options.verify=false", "--confidence", "off", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["verdict"]["confidence"] is None
    r = CliRunner().invoke(main, ["solve", inst, "--confidence", "sometimes"])
    assert r.exit_code == 2 and "sometimes" in r.output
