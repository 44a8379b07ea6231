"""Review of the utilisation caps and of ``planner check`` (caps review).

1. ``options.max_utilization`` is a hard upper bound on every pool's cap: relaxing over-tight prefill caps
   (:func:`planner.optimize.latency.relax_factors`, step 4b of :mod:`planner.optimize.tighten`) only loosens the
   queueing-derived part up to it. enterprise-chat at ``max_utilization = 0.3`` had its prefill pool relaxed to a
   cap of 0.743 and running at 0.471 (0.471 at ``0.01`` too), and ``planner check`` called that plan valid.
2. ``planner check`` recomputes what a plan's own figures fix: the simulated share of requests over a target, the
   verdict's reasons, ``proven``; ``meets_targets`` written to plan.json (dropped on reading) through
   :func:`planner.optimize.check.stated_derived_problems`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from planner.cli import main

INSTANCE = str(Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml")


def _solve(tmp: Path, *extra: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--json", "-q", "--no-cache", "--out", str(tmp), *extra])
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads((tmp / "plan.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """enterprise-chat solved with ``options.max_utilization = 0.3`` (the finding's command)."""
    return _solve(tmp_path_factory.mktemp("mu03"), "--set", "options.max_utilization=0.3")


@pytest.fixture(scope="module")
def plain(solved_example: Any) -> dict[str, Any]:
    solved = solved_example("enterprise-chat")
    assert solved.exit_code == 0, solved.output
    data: dict[str, Any] = solved.plan_data()
    return data


def _check(tmp_path: Path, data: dict[str, Any], *extra: str) -> Any:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return CliRunner().invoke(main, ["check", str(path), *extra])


# --- 1. options.max_utilization bounds every pool ----------------------------------------------------------


def _assert_within(data: dict[str, Any], cap: float) -> None:
    for arch, plan in data["architectures"].items():
        for pool in plan["pools"]:
            assert pool["utilization_cap"] <= cap * (1 + 1e-9), (arch, pool["name"], pool["utilization_cap"])
            assert pool["utilization_peak"] <= cap * (1 + 1e-9), (arch, pool["name"], pool["utilization_peak"])
    for rec in data["capacity"]["utilization_caps"]:
        assert "rho" not in rec or rec["rho"] <= cap * (1 + 1e-9), rec


def test_max_utilization_bounds_the_relaxed_prefill_pool(capped: dict[str, Any], tmp_path: Path) -> None:
    """The finding: prefill:mi300x/tp1 ran at 0.471 under a cap of 0.743 with max_utilization 0.3."""
    _assert_within(capped, 0.3)
    for extra in ((), ("--no-instance",)):
        r = _check(tmp_path, capped, *extra)
        assert r.exit_code == 0, r.output


def test_a_tiny_max_utilization_holds_too(tmp_path: Path) -> None:
    """At 0.01 the prefill pool still ran at 0.471 (the relaxation lifted its caps to 0.743)."""
    _assert_within(_solve(tmp_path, "--set", "options.max_utilization=0.01"), 0.01)


def test_relax_ceiling_is_within_the_users_cap() -> None:
    from planner.optimize.latency import RELAX_CEILING, relax_ceiling

    assert relax_ceiling(None) == RELAX_CEILING
    assert relax_ceiling(0.3) == 0.3
    assert relax_ceiling(1.0) == RELAX_CEILING


def test_cap_factors_of_a_relaxed_plan_stay_within_max_utilization() -> None:
    """A sweep or a fixed plan re-applies the factors a solve recorded (``f < 1`` where relaxed) at other rates:
    the relaxed cap must not climb above options.max_utilization there either."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.optimize.resolve import apply_cap_factors, point_keys

    tables = build_capacity_tables(load_instance(INSTANCE))
    prep = prepare(tables, max_utilization=0.3)
    assert prep.max_utilization == 0.3
    keys = point_keys(prep)
    out = apply_cap_factors(prep, {k: 0.1 for k in keys})  # every cap "relaxed" tenfold
    rho = out.points["rho"].to_numpy(float)
    assert rho.max() <= 0.3 + 1e-12
    assert (rho >= prep.points["rho"].to_numpy(float) - 1e-12).all()  # relaxing never lowers a cap
    tightened = apply_cap_factors(prep, {k: 2.0 for k in keys})
    assert tightened.points["rho"].to_numpy(float) == pytest.approx(prep.points["rho"].to_numpy(float) / 2.0)


def _relaxed_like_before(data: dict[str, Any], rho: float) -> tuple[dict[str, Any], str]:
    """``data`` as the solve wrote it before the fix: the disaggregated prefill pool's caps relaxed to ``rho``
    (above the user's 0.3), recorded in capacity.utilization_caps, the pool's numbers consistent with them."""
    d = copy.deepcopy(data)
    plan = d["architectures"]["disaggregated"]
    pool = next(p for p in plan["pools"] if p["role"] == "prefill")
    routed = [r for r in plan["routing"] if r["pool"] == pool["name"]]
    base = {(p["service"], p["bucket"], p["role"], p["config"]): p["rho"] for p in d["capacity"]["points"]}
    d["capacity"]["utilization_caps"] = [
        c for c in d["capacity"]["utilization_caps"]
        if not ("rho" in c and c["architecture"] == "disaggregated" and c["role"] == "prefill")]
    for r in routed:
        q = base[(r["service"], r["bucket"], r["role"], r["config"])]
        d["capacity"]["utilization_caps"].append({"architecture": "disaggregated", "service": r["service"], "bucket": r["bucket"],
                                                  "role": r["role"], "config": r["config"], "rho": rho, "rho_queueing": q,
                                                  "tightening_factor": q / rho})
    pool["utilization_cap"] = rho  # busy / load with every routed point at the same cap
    return d, pool["name"]


@pytest.mark.parametrize("extra", [("--instance", INSTANCE), ("--no-instance",), ("--no-instance", "drop-overrides")])
def test_check_flags_a_pool_above_max_utilization(capped: dict[str, Any], tmp_path: Path, extra: tuple[str, ...]) -> None:
    """`planner check` called the finding's plan valid: it must recompute the caps against options.max_utilization
    (from the instance, else the plan's overrides, else its caps note)."""
    data, pool = _relaxed_like_before(capped, 0.743)
    args = tuple(a for a in extra if a != "drop-overrides")
    if "drop-overrides" in extra:  # the option set in the YAML, not by --set: the caps note states it
        data["overrides"] = {}
        assert any("bounded by options.max_utilization = 0.3" in n for n in data["notes"])
    r = _check(tmp_path, data, *args)
    assert r.exit_code == 1, r.output
    assert f"max_utilization[{pool}]: utilisation cap 0.743" in r.output, r.output
    assert "is above options.max_utilization = 0.3" in r.output


def test_check_allows_a_relaxed_cap_without_max_utilization(plain: dict[str, Any], tmp_path: Path) -> None:
    """Without the option a relaxed prefill cap up to RELAX_CEILING stays valid (what 4b does by design)."""
    if not any(p["role"] == "prefill" for p in plain["architectures"]["disaggregated"]["pools"]):
        pytest.skip("no prefill pool")
    data, _pool = _relaxed_like_before(plain, 0.9)
    r = _check(tmp_path, data, "--no-instance")
    assert "max_utilization" not in r.output, r.output


# --- 2. figures check recomputes --------------------------------------------------------------------------


def _sim_service(d: dict[str, Any]) -> dict[str, Any]:
    svc: dict[str, Any] = d["architectures"][d["verdict"]["winner"]]["simulation"]["services"][0]
    return svc


@pytest.mark.parametrize("share, expect", [
    (0.5, "exceeds the 0.01 its p99 target allows, yet ttft_met is true"),
    (0.0042, "is not a count of its"),
    (1.5, "is not a share in [0, 1]"),
])
def test_check_flags_an_edited_over_target_share(plain: dict[str, Any], tmp_path: Path, share: float, expect: str) -> None:
    d = copy.deepcopy(plain)
    svc = _sim_service(d)
    assert svc["ttft_met"] and svc["unfinished"] == 0 and svc["ttft_quantile"] == 0.99
    svc["ttft_over_target_share"] = share
    r = _check(tmp_path, d, "--no-instance")
    assert r.exit_code == 1, r.output
    assert "ttft_over_target_share" in r.output and expect in r.output, r.output


def test_check_flags_a_missed_quantile_with_a_small_share(plain: dict[str, Any], tmp_path: Path) -> None:
    """A simulated p99 TTFT twice the target with no request over it: the two figures contradict each other."""
    d = copy.deepcopy(plain)
    svc = _sim_service(d)
    svc["ttft_sim_ms"] = 2 * svc["ttft_target_ms"]
    svc["ttft_met"] = False
    d["architectures"][d["verdict"]["winner"]]["simulation"]["met"] = False
    r = _check(tmp_path, d, "--no-instance")
    assert r.exit_code == 1
    assert "is within the 0.01 its p99 target allows, yet the simulated quantile" in r.output, r.output


def test_recorded_shares_of_the_example_are_consistent(plain: dict[str, Any]) -> None:
    from planner.optimize.check import _check_over_target
    from planner.schema.plan import PlanResult

    result = PlanResult.model_validate(plain)
    for plan in result.architectures.values():
        assert plan.simulation is not None
        for s in plan.simulation.services:
            assert _check_over_target(s) == []


@pytest.mark.parametrize("edit, expect", [
    (lambda r: r.__setitem__(0, r[0].replace("$", "$1", 1)), "verdict: reason 1 says"),
    (lambda r: r.__setitem__(0, "Disaggregated wins: it is cheaper."), "verdict: reason 1 says"),
    (lambda r: r.pop(), "is missing"),
    (lambda r: r.append("Shared is proven best by 99 %."), "is not one the plans' figures give"),
])
def test_check_flags_an_edited_verdict_reason(plain: dict[str, Any], tmp_path: Path, edit: Any, expect: str) -> None:
    d = copy.deepcopy(plain)
    edit(d["verdict"]["reasons"])
    r = _check(tmp_path, d, "--no-instance")
    assert r.exit_code == 1, r.output
    assert expect in r.output, r.output


def test_check_flags_an_edited_proven(plain: dict[str, Any], tmp_path: Path) -> None:
    d = copy.deepcopy(plain)
    d["verdict"]["proven"] = not d["verdict"]["proven"]
    r = _check(tmp_path, d, "--no-instance")
    assert r.exit_code == 1 and "verdict: proven" in r.output, r.output


def test_verdict_of_is_make_verdict(plain: dict[str, Any]) -> None:
    """The check rebuilds the verdict from the plans and the snapshot's mean rate: the very verdict solve wrote."""
    from planner.optimize.verdict import verdict_of
    from planner.schema.plan import PlanResult

    result = PlanResult.model_validate(plain)
    rate = float(pd.DataFrame(plain["capacity"]["demand"])["rate_mean_per_s"].sum())  # as prepare's demand frame sums it
    again = verdict_of(result.architectures, rate)
    assert again.model_dump() == result.verdict.model_dump()


def test_stated_meets_targets_is_compared(plain: dict[str, Any]) -> None:
    """``meets_targets`` is dropped on reading (recomputed): the JSON's own value is compared by
    :func:`planner.optimize.check.stated_derived_problems` (for a caller holding the file's JSON)."""
    from planner.optimize.check import stated_derived_problems
    from planner.schema.plan import PlanResult

    assert stated_derived_problems(plain, PlanResult.model_validate(plain)) == []
    d = copy.deepcopy(plain)
    win = d["verdict"]["winner"]
    d["architectures"][win]["meets_targets"] = not d["architectures"][win]["meets_targets"]
    problems = stated_derived_problems(d, PlanResult.model_validate(d))
    assert len(problems) == 1 and problems[0].startswith(f"{win}: meets_targets = ")


def test_planner_check_flags_an_edited_meets_targets(plain: dict[str, Any], tmp_path: Path) -> None:
    """Reading a plan recomputes meets_targets, so check_plan never saw an edited one: `planner check` compares
    the file's stated value with the recomputed one (stated_derived_problems)."""
    d = copy.deepcopy(plain)
    loser = next(a for a in d["architectures"] if a != d["verdict"]["winner"])
    d["architectures"][loser]["meets_targets"] = not d["architectures"][loser]["meets_targets"]
    r = _check(tmp_path, d, "--no-instance")
    assert r.exit_code == 1 and "meets_targets" in r.output, r.output
