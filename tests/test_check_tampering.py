"""`planner check` catches every class of tampering with a solved plan (issue 16).

One solve of ``enterprise-chat`` (the session's, tests/conftest.py ``solved_example``); each test edits one class of numbers in
its ``plan.json`` and asserts that ``planner check`` exits 1 naming the right constraint. The
unedited plan passes, against its own snapshot and against the one re-derived from the instance.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.cli import main

INSTANCE = str(Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml")


@pytest.fixture(scope="module")
def plan(solved_example) -> dict[str, Any]:
    solved = solved_example("enterprise-chat")  # `planner solve INSTANCE --json --out DIR`, once per session (tests/conftest.py)
    assert solved.exit_code == 0, solved.output
    data: dict[str, Any] = solved.plan_data()
    assert data["verdict"]["winner"] and data["verdict"]["runner_up"]  # both architectures feasible: margins to tamper with
    return data


_TRUTH: dict[tuple[str, str, str | None], Any] = {}
"""The real :func:`planner.optimize.check.recompute_instance` result by (instance, overrides, scenario)."""


@pytest.fixture
def recompute_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check --instance`` re-derives the capacity snapshot from the instance: ~3 s of capacity tables,
    the same for every tampered copy of one plan (the tamperings below edit neither the scenario nor
    the overrides, the only parts of the plan it reads). The real function runs once per process and
    key; later calls get a deep copy of its answer, so every ``check`` still compares the plan against
    the re-derived snapshot. The untouched plan and the instance-path tests run it for real."""
    from planner.optimize import check as check_module

    real = check_module.recompute_instance

    def once(result: Any, instance_path: str | Path) -> Any:
        key = (str(Path(instance_path).resolve()), json.dumps(result.overrides, sort_keys=True, default=str), result.scenario)
        if key not in _TRUTH:
            _TRUTH[key] = real(result, instance_path)
        return copy.deepcopy(_TRUTH[key])

    monkeypatch.setattr(check_module, "recompute_instance", once)


def _check(tmp_path: Path, data: dict[str, Any], *extra: str) -> Any:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")  # json writes inf/nan as Infinity/NaN, as a hostile editor may
    return CliRunner().invoke(main, ["check", str(path), *extra])


def _win(d: dict[str, Any]) -> dict[str, Any]:
    return d["architectures"][d["verdict"]["winner"]]


@pytest.mark.parametrize("extra", [(), ("--no-instance",), ("--instance", INSTANCE)])
def test_untouched_plan_is_valid(plan: dict[str, Any], tmp_path: Path, extra: tuple[str, ...]) -> None:
    r = _check(tmp_path, plan, *extra)
    assert r.exit_code == 0, r.output
    assert "valid" in r.output


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        node: Any = d
        parts = path.split(".")
        for p in parts[:-1]:
            node = _win(d) if p == "WIN" else (node[int(p)] if isinstance(node, list) else node[p])
        last = parts[-1]
        node[last] = value(node[last]) if callable(value) else value
    return edit


TAMPERINGS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "utilisation 1.7": (_set("WIN.pools.0.utilization_peak", 1.7), "utilization_peak"),
    "utilisation inf": (_set("WIN.pools.0.utilization_peak", float("inf")), "finite:"),
    "pool cost tripled": (_set("WIN.pools.0.cost_usd_per_month", lambda v: 3 * v), "cost"),
    "pool cost negative": (_set("WIN.pools.0.cost_usd_per_month", lambda v: -v), "negative cost"),
    "total NaN": (_set("WIN.costs.total_usd_per_month", float("nan")), "finite:"),
    "latency 10x target": (_set("WIN.latency.0.ttft_predicted_ms", lambda v: 10 * v), "ttft_met"),
    "ttft_met false": (_set("WIN.latency.0.ttft_met", False), "ttft_met"),
    "solver status infeasible": (_set("WIN.solver.status", "infeasible"), "status:"),
    "winner marked infeasible": (_set("WIN.feasible", False), "verdict:"),
    "winner fails its simulation": (_set("WIN.simulation.met", False), "simulation"),
    "winner null": (_set("verdict.winner", None), "verdict: no winner"),
    "margin negated": (_set("verdict.margin_usd_per_month", lambda v: -v), "verdict: margin"),
    "margin wrong": (_set("verdict.margin_usd_per_month", lambda v: v * 1.5 + 100), "verdict: margin"),
    "margin per 1M tokens wrong": (_set("verdict.margin_usd_per_million_tokens", lambda v: v * 2 + 1), "per 1M tokens"),
    "usd per 1M tokens falsified": (_set("WIN.usd_per_million_tokens", lambda v: v / 2), "usd_per_million_tokens"),
    "tokens per month falsified": (_set("WIN.tokens_per_month", lambda v: v * 2), "tokens_per_month"),
    "winner hybrid, not solved": (_set("verdict.winner", "hybrid"), "not solved"),
    "instances removed": (_set("WIN.pools.0.instances", 0), "pool"),
    "instances past a machine integer": (_set("WIN.pools.0.instances", 10**30), "beyond any plan"),  # numpy int64 overflowed: exit 1, no crash
    "cost term lowered": (_set("WIN.costs.equipment_usd_per_month", lambda v: v / 2), "costs:"),
    "routing share lowered": (_set("WIN.routing.0.share", lambda v: v / 2), "route["),
    "pool removed": (lambda d: _win(d)["pools"].pop(0), "pool["),
    "busy instances falsified": (_set("WIN.pools.0.busy_instances_peak", lambda v: v / 3), "busy_instances_peak"),
    "snapshot rate lowered": (lambda d: [p.update(rate_peak_per_s=p["rate_peak_per_s"] / 10) for p in d["capacity"]["points"]], "snapshot:"),
    "snapshot price lowered": (lambda d: [c.update(equipment_usd_per_device_hour=c["equipment_usd_per_device_hour"] / 2)
                                          for c in d["capacity"]["configs"]], "snapshot:"),
    # issue 24: the seven the judged campaign found unnoticed
    "idle capacity attribution -99,999 (winner)": (_set("WIN.costs.idle_capacity_usd_per_month", -99_999.0), "idle_capacity_usd_per_month recomputes"),
    "idle capacity attribution -99,999 (runner-up)": (
        lambda d: d["architectures"][d["verdict"]["runner_up"]]["costs"].update(idle_capacity_usd_per_month=-99_999.0),
        "idle_capacity_usd_per_month recomputes"),
    "diagnosis on a feasible plan (winner)": (
        _set("WIN.diagnosis", [{"service": "chat", "bucket": "", "constraint": "ttft", "message": "too slow", "fix": "buy more"}]),
        "infeasibility diagnosis"),
    "diagnosis on a feasible plan (runner-up)": (
        lambda d: d["architectures"][d["verdict"]["runner_up"]].update(
            diagnosis=[{"service": "chat", "bucket": "", "constraint": "kv", "message": "x", "fix": "y"}]),
        "infeasibility diagnosis"),
    "kv capacity 1 byte": (lambda d: max(_win(d)["pools"], key=lambda p: p["kv_capacity_bytes"]).update(kv_capacity_bytes=1.0), "kv_capacity_bytes 1 recomputes"),
    "snapshot budget 100 USD/month": (lambda d: d["capacity"].update(budget_usd_per_month=100.0), "snapshot: budget"),
    "instance name changed": (lambda d: d.update(instance="someone-elses-instance"), "instance: the plan names instance 'someone-elses-instance'"),
    # a TTFT prediction lowered: the shared winner's falls below its points' own TTFT at load; the disaggregated
    # runner-up's prefill TTFT is its length mix's quantile (planner.ttft_mixture), whose floor is only its fastest
    # sub-bin, so it is recomputed from the pools (planner.pool_latency.bucket_latency)
    "TTFT prediction 10 % low (winner)": (_set("WIN.latency.0.ttft_predicted_ms", lambda v: 0.9 * v), "latency[chat]: TTFT predicted"),
    "TTFT prediction 10 % low (runner-up)": (
        lambda d: d["architectures"][d["verdict"]["runner_up"]]["latency"][0].update(
            ttft_predicted_ms=0.9 * d["architectures"][d["verdict"]["runner_up"]]["latency"][0]["ttft_predicted_ms"]),
        "the plan's pools give"),
}


@pytest.mark.parametrize("name", sorted(TAMPERINGS))
def test_check_rejects_tampering(plan: dict[str, Any], tmp_path: Path, name: str, recompute_once: None) -> None:
    edit, expect = TAMPERINGS[name]
    data = copy.deepcopy(plan)
    edit(data)
    r = _check(tmp_path, data, "--instance", INSTANCE)
    assert r.exit_code == 1, (name, r.output)
    assert "Traceback" not in r.output and "internal error" not in r.output
    assert expect in r.output, (name, r.output)


def test_check_simulation_flags_must_match_numbers(plan: dict[str, Any], tmp_path: Path) -> None:
    data = copy.deepcopy(plan)
    svc = _win(data)["simulation"]["services"][0]
    svc["ttft_sim_ms"] = svc["ttft_target_ms"] * 2  # a simulated miss still flagged as met
    r = _check(tmp_path, data, "--no-instance")
    assert r.exit_code == 1
    assert "ttft_met true but simulated" in r.output


def test_snapshot_attack_is_caught_with_the_instance(plan: dict[str, Any], tmp_path: Path) -> None:
    """The issue's attack: cut a pool's instances, raise its points' rho to 1.0 so the load check passes
    against the plan's own snapshot, rewrite the pool's numbers. Re-deriving the snapshot from the
    instance restores the true caps: the cut pool is overloaded."""
    data = copy.deepcopy(plan)
    arch = max(data["architectures"].values(), key=lambda a: max(p["instances"] for p in a["pools"]))
    pool = max(arch["pools"], key=lambda p: p["instances"])
    assert pool["instances"] >= 2
    n = pool["instances"] - 1
    pool["utilization_peak"] = pool["busy_instances_peak"] / n
    pool["utilization_mean"] = pool["busy_instances_mean"] / n
    pool["utilization_cap"] = 1.0
    pool["instances"], pool["devices"] = n, n * pool["tp"]
    for p in data["capacity"]["points"]:
        if p["pool"] == pool["name"]:
            p["rho"] = 1.0
    data["capacity"]["utilization_caps"] = []
    r = _check(tmp_path, data, "--instance", INSTANCE)
    assert r.exit_code == 1
    assert "snapshot: points[" in r.output and ".rho = 1 differs from the instance's" in r.output
    assert f"load[{pool['name']}]" in r.output


@pytest.mark.parametrize("column, value", [("prefill_tokens_rep", 1e12), ("prefill_tokens_rep", -5.0), ("prefill_tokens", None)])
def test_a_unified_points_lane_columns_are_checked_with_the_instance(plan: dict[str, Any], tmp_path: Path, column: str,
                                                                    value: float | None, recompute_once: None) -> None:
    """The lane columns the analytic latency at load reads (``prefill_tokens``, the TTFT's ``prefill_tokens_rep``, the
    steps) are compared with the re-derived snapshot: edited, every shared pool's predicted TTFT moves (a 1e12-token
    representative prompt, a negative one, a missing mean), and the plan read as valid before."""
    data = copy.deepcopy(plan)
    hit = [p for p in data["capacity"]["points"] if p["role"] == "unified" and p.get(column) is not None]
    assert hit
    for p in hit:
        p[column] = value
    r = _check(tmp_path, data, "--instance", INSTANCE)
    assert r.exit_code == 1, r.output
    assert f".{column} = " in r.output and "differs from the instance's" in r.output


def test_missing_instance_path_falls_back_with_a_note(plan: dict[str, Any], tmp_path: Path) -> None:
    data = copy.deepcopy(plan)
    data["instance_path"] = str(tmp_path / "gone.yaml")
    r = _check(tmp_path, data)
    assert r.exit_code == 0, r.output
    assert "not found" in r.stderr and "own capacity snapshot" in r.output


def test_snapshot_budget_is_checked_without_the_instance_too(plan: dict[str, Any], tmp_path: Path) -> None:
    data = copy.deepcopy(plan)
    data["capacity"]["budget_usd_per_month"] = 100.0
    r = _check(tmp_path, data, "--no-instance")
    assert r.exit_code == 1 and "budget: total" in r.output, r.output


def test_check_finds_the_instance_from_another_folder(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """solve records the instance's absolute path; a plan with a path relative to where it was solved is found beside
    the plan as well. Either way `check` re-derives the snapshot (no fallback note)."""
    assert Path(plan["instance_path"]).is_absolute()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = _check(tmp_path, plan)
    assert r.exit_code == 0 and "re-derived from" in r.output and "not found" not in r.stderr, r.output
    # an old plan: the path as typed, relative to the folder it was solved in (here: the plan's own folder)
    data = copy.deepcopy(plan)
    data["instance_path"] = os.path.relpath(INSTANCE, tmp_path)
    r = _check(tmp_path, data)
    assert r.exit_code == 0 and "re-derived from" in r.output and "not found" not in r.stderr, r.output


def test_a_tool_phase_reload_is_checked_exactly(solved_example, tmp_path: Path) -> None:
    """agentic-assistant: its TTFT prediction is the pools' figure plus the KV reload after tool waits, stated as
    ttft_added_ms; check recomputes both (a prediction lowered by the reload, or a reload claimed where no tool
    phase reloads, is a violation)."""
    solved = solved_example("agentic-assistant")
    assert solved.exit_code == 0, solved.output
    data = solved.plan_data()
    arch = next(a for a, p in data["architectures"].items() if p and p.get("feasible") and p["latency"][0]["ttft_added_ms"] > 0)
    assert _check(tmp_path, data, "--no-instance").exit_code == 0
    lowered = copy.deepcopy(data)
    lp = lowered["architectures"][arch]["latency"][0]
    lp["ttft_predicted_ms"] -= lp["ttft_added_ms"]
    r = _check(tmp_path, lowered, "--no-instance")
    assert r.exit_code == 1 and "KV reloads after tool waits" in r.output
    claimed = copy.deepcopy(data)
    for p in claimed["architectures"][arch]["tool_phase"]["tools"]:
        p.update(offload_share=0.0, recompute_share=0.0, hold_share=1.0)
    r = _check(tmp_path, claimed, "--no-instance")
    assert r.exit_code == 1 and "ttft_added_ms" in r.output


@pytest.mark.parametrize("extra", [(), ("--no-instance",)])
def test_an_absurd_snapshot_service_time_is_a_violation_not_a_crash(plan: dict[str, Any], tmp_path: Path,
                                                                     extra: tuple[str, ...]) -> None:
    """A routed point's service time at 1e200 s: the TTFT recomputation's queue overflowed (OverflowError in
    pool_latency, found by fuzzing); the number checks report it, the recomputation steps aside."""
    data = copy.deepcopy(plan)
    for p in data["capacity"]["points"]:
        p["instance_seconds_per_request"] = 1e200
    r = _check(tmp_path, data, *extra)
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and "internal error" not in r.output
