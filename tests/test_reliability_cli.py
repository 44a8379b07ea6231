"""Every reproducer of issue 16 (instances) through the CLI: exit 2 naming the field and the fix,
exit 3 with a diagnosis, or exit 0 with a plan that `planner check` accepts — never an internal error."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
CHAT = str(ROOT / "instances" / "enterprise-chat.yaml")
AGENT = str(ROOT / "instances" / "agentic-assistant.yaml")
LONG = str(ROOT / "instances" / "long-context-assistant.yaml")


def _solve(instance: str, *sets: str, out: Path | None = None) -> Result:
    args = ["solve", instance]
    for s in sets:
        args += ["--set", s]
    if out is not None:
        args += ["--out", str(out)]
    return CliRunner().invoke(main, args)


def _clean(r: Result) -> None:
    assert "internal error" not in r.output and "Traceback" not in r.output, r.output
    assert "Warning" not in r.stderr, r.stderr  # no raw numpy / runtime warnings


BAD_INPUT = [
    (CHAT, "catalog.devices=[h100-sxm,h100-sxm]", "catalog.devices", "list each value once"),
    (CHAT, "catalog.tp_degrees=[2,2]", "catalog.tp_degrees", "list each value once"),
    (AGENT, "catalog.tp_degrees=[]", "catalog.tp_degrees", "at least 1 item"),
    (AGENT, "options.max_utilization=0", "options.max_utilization", "100x the peak load"),
    (CHAT, "options.max_utilization=1e-9", "options.max_utilization", "100x the peak load"),
    (CHAT, "services.chat.traffic.peak_rate_per_s=1e300", "services.chat.traffic.peak_rate_per_s", "replicate the plan"),
    (CHAT, "services.chat.traffic.peak_rate_per_s=1e7", "services.chat.traffic.peak_rate_per_s", "replicate the plan"),
    (CHAT, "services.chat.traffic.rate_multiplier=1e7", "services.chat.traffic.rate_multiplier", "rate_per_s / peak_rate_per_s"),
    (CHAT, "services.chat.traffic.buckets=1000", "services.chat.traffic.buckets", "4-8 are typical"),
    (CHAT, "options.redundancy=1000000000", "options.redundancy", "max_utilization for headroom"),
    (AGENT, "services.agent.tool_overrides.Bash.cpu_seconds_per_call=1e20", "cpu_seconds_per_call", "core-hour"),
    (CHAT, "costs.electricity_usd_per_kwh=1e300", "costs.electricity_usd_per_kwh", "realistic value"),
]


@pytest.mark.parametrize(("instance", "edit", "field", "fix"), BAD_INPUT, ids=[e for _i, e, _f, _x in BAD_INPUT])
def test_bad_values_exit_2_naming_field_and_fix(instance: str, edit: str, field: str, fix: str) -> None:
    t0 = time.perf_counter()
    r = _solve(instance, edit)
    _clean(r)
    assert r.exit_code == 2, r.output
    assert field in r.stderr and "(fix: " in r.stderr and fix in r.stderr, r.stderr
    assert time.perf_counter() - t0 < 30  # fails fast: no solve is attempted


def test_duplicate_yaml_key_names_key_and_lines(tmp_path: Path) -> None:
    text = Path(CHAT).read_text(encoding="utf-8").replace("name: enterprise-chat", "name: enterprise-chat\nname: again", 1)
    path = tmp_path / "dup.yaml"
    path.write_text(text, encoding="utf-8")
    r = CliRunner().invoke(main, ["check-instance", str(path)])
    assert r.exit_code == 2, r.output
    assert "key 'name' appears twice (lines" in r.stderr and "(fix: " in r.stderr


def test_duplicate_json_key_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"name": "a", "name": "b"}', encoding="utf-8")
    r = CliRunner().invoke(main, ["check-instance", str(path)])
    assert r.exit_code == 2 and "appears twice" in r.stderr


def test_agentic_without_any_operating_point_is_infeasible_with_a_diagnosis() -> None:
    r = _solve(AGENT, "catalog.tp_degrees=[16]")  # above every candidate's devices_per_node
    _clean(r)
    assert r.exit_code == 3, r.output
    assert "infeasible:" in r.stderr and "no operating point" in r.stderr and "to make it feasible" in r.stderr


def _plan_checks(out: Path) -> dict:
    r = CliRunner().invoke(main, ["check", str(out / "plan.json")])
    assert r.exit_code == 0, r.output
    data: dict = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    return data


def test_a_trickle_of_traffic_still_gets_a_pool(tmp_path: Path) -> None:
    """rate_multiplier=1e-9 once gave $0/month and 0 devices: a routed pool now has an instance. Its log holds
    simultaneous arrivals, whose replayed-burst wait is ∝ the utilisation at a trickle: the caps that keep it within
    the budget are ∝ the rate (~10⁻⁸), which the caps' searches gave as 0 — every prefill point dropped (no
    disaggregated plan) and, once the unified lanes waited their bursts too, every unified point."""
    r = _solve(CHAT, "services.chat.traffic.rate_multiplier=1e-9", out=tmp_path)
    _clean(r)
    assert r.exit_code == 0, r.output
    data = _plan_checks(tmp_path)
    win = data["architectures"][data["verdict"]["winner"]]
    assert sum(p["devices"] for p in win["pools"]) >= 1 and win["costs"]["total_usd_per_month"] > 0
    assert all(p["instances"] >= 1 for p in win["pools"])
    assert all(a["feasible"] for a in data["architectures"].values())


@pytest.mark.slow
def test_cpu_servers_without_tools_solve(tmp_path: Path) -> None:
    r = _solve(CHAT, "catalog.cpu_servers=[xeon6-6980p]", "catalog.device_overrides.xeon6-6980p.rental_usd_per_hour=2.6", out=tmp_path)
    _clean(r)
    assert r.exit_code == 0, r.output
    _plan_checks(tmp_path)


@pytest.mark.slow
def test_winner_meets_its_predicted_targets(tmp_path: Path) -> None:
    """TPOT target 1e7 ms once left the cheaper plan winning with a predicted TTFT 100x its target."""
    r = _solve(LONG, "services.assistant.slo.tpot.target_ms=1e7", out=tmp_path)
    _clean(r)
    assert r.exit_code == 0, r.output
    data = _plan_checks(tmp_path)
    win = data["architectures"][data["verdict"]["winner"]]
    assert all(lp["ttft_met"] and lp["tpot_met"] for lp in win["latency"])


@pytest.mark.slow
def test_a_solve_cut_by_its_time_limit_says_so_with_the_best_plan(tmp_path: Path) -> None:
    """--time-limit far below what the MIP needs: the best plan found is kept, marked time_limit with its gap,
    and the notes and the verdict say it is not proven optimal (or, with no plan at all, exit 4)."""
    r = CliRunner().invoke(main, ["solve", str(ROOT / "instances" / "code-completion-8b.yaml"), "--time-limit", "0.05", "--out", str(tmp_path)])
    _clean(r)
    assert r.exit_code in (0, 4), r.output
    if r.exit_code == 4:
        assert "raise --time-limit" in r.stderr
        return
    data = _plan_checks(tmp_path)
    cut = [a for a, p in data["architectures"].items() if p["solver"]["status"] == "time_limit"]
    if cut:
        assert data["verdict"]["proven"] is False
        assert any("not proven optimal" in n for n in data["notes"])
        assert any("time limit" in line for line in r.output.splitlines())
        for a in cut:
            assert data["architectures"][a]["feasible"] and data["architectures"][a]["solver"]["gap"] is not None
