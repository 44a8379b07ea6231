"""Measured capacity end to end: no queueing on top of a measured rate, the peak simulation of
measured pools, ``--capacity-only``, declared devices and their errors, ``sweep --capacity``,
and crossovers that honour ``--scenario`` and ``--set``.

The DistServe rates (OSDI '24, §2) are in ``tests/data/measured/`` (SOURCE.md there).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "measured"
DISTSERVE = DATA / "distserve-measured.yaml"
CAPACITY = DATA / "capacity.csv"
MELANGE = ROOT / "tests" / "data" / "melange" / "melange-toy.yaml"
MELANGE_CAPACITY = ROOT / "tests" / "data" / "melange" / "capacity.csv"
RATE = "services.chat.traffic.rate_multiplier"


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _gpus(plan: dict[str, Any]) -> int:
    return sum(int(p["devices"]) for p in plan["pools"])


def test_wait_quantile_of_a_full_pool_is_infinite_not_a_crash() -> None:
    """λ = c/s exactly, but λ·s rounds just below c: the drain c/s − λ is 0 (ZeroDivisionError before)."""
    from planner.queueing import wait_quantile_s

    servers, service_s = 2, 3.2512352162722364
    lam = servers / service_s
    assert lam * service_s < servers and servers / service_s - lam == 0.0
    assert wait_quantile_s(0.9, lam, servers, service_s) == math.inf


@pytest.mark.parametrize("rate", [10, 30])
def test_distserve_measured_rates_with_the_peak_simulation(rate: int) -> None:
    """DistServe's measured rates: disaggregated wins with ~2x fewer GPUs (the paper: 3.3 vs 1.6 req/s per GPU);
    the peak simulation runs on measured pools (verify on) and they meet their targets."""
    out = _run("solve", str(DISTSERVE), "--capacity", str(CAPACITY), "--capacity-only", "--json",
               "--set", f"services.chat.traffic.rate_per_s={rate}", "--set", "options.verify=true")
    assert out.exit_code == 0, out.output
    res = json.loads(out.output)
    assert res["verdict"]["winner"] == "disaggregated"
    shared, disagg = res["architectures"]["shared"], res["architectures"]["disaggregated"]
    assert _gpus(shared) == math.ceil(rate / 1.6)
    assert _gpus(disagg) == math.ceil(rate / 5.6) + math.ceil(rate / 10)
    assert 1.6 <= _gpus(shared) / _gpus(disagg) <= 2.6
    for plan in (shared, disagg):
        sim = plan["simulation"]
        assert sim is not None and sim["met"], sim
        assert plan["solver"]["rounds"] == 1  # a measured pool is not queued a second time, so never tightened


def test_melange_with_verify_keeps_the_full_pool() -> None:
    """At 20 req/s the A100 is at exactly 100 % of its measured rate; the simulation does not re-queue it."""
    raw = yaml.safe_load(MELANGE.read_text())
    assert raw["options"]["verify"] is False
    out = _run("solve", str(MELANGE), "--capacity", str(MELANGE_CAPACITY), "--json", "--set", "options.verify=true",
               "--set", "services.chat.traffic.rate_per_s=20")
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)["architectures"]["shared"]
    assert {p["device"]: p["devices"] for p in plan["pools"]} == {"a10g": 2, "a100": 1}
    assert plan["simulation"]["met"]
    # no cap tightened (its solves beyond the first: step 8's tries without each pool, neither cheaper)
    assert not [c for c in json.loads(out.output)["capacity"]["utilization_caps"] if c.get("architecture") == "shared" and "note" not in c]
    assert "shared: the latency check re-solved" in out.output and "kept every utilisation cap" in out.output


def test_capacity_only_limits_candidates_to_the_file(tmp_path: Path) -> None:
    """A file without the colocated rate: without --capacity-only the modelled points stay candidates;
    with it only the file's rows are, so the shared pool has no operating point and disaggregated wins."""
    from planner.capacity import build_capacity_tables, read_measured_capacity
    from planner.instance import load_instance

    lines = CAPACITY.read_text().splitlines()
    f = tmp_path / "disagg.csv"
    f.write_text("\n".join([lines[0], *[ln for ln in lines[1:] if ",unified," not in ln]]) + "\n")
    base = build_capacity_tables(load_instance(DISTSERVE))
    mixed = read_measured_capacity(f, base).points
    only = read_measured_capacity(f, base, only_listed=True).points
    assert (mixed["feasible"] & (mixed["bound"] != "measured")).any()
    assert set(only.loc[only["feasible"], "bound"]) == {"measured"} and int(only["feasible"].sum()) == 2
    out = _run("solve", str(DISTSERVE), "--capacity", str(f), "--capacity-only", "--json", "--set", "services.chat.traffic.rate_per_s=10")
    assert out.exit_code == 0, out.output
    res = json.loads(out.output)
    assert not res["architectures"]["shared"]["feasible"] and res["verdict"]["winner"] == "disaggregated"
    assert _run("solve", str(DISTSERVE), "--capacity-only").exit_code == 2


def _melange_variant(tmp_path: Path, edit: Any) -> Path:
    raw = yaml.safe_load(MELANGE.read_text())
    edit(raw)
    f = tmp_path / "inst.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda r: r["catalog"]["declared_devices"].pop("a10g"), "unknown device 'a10g'"),
    (lambda r: r["catalog"]["declared_devices"]["a10g"].update(memory_gb=24), "memory_gb"),
    (lambda r: r["catalog"]["declared_devices"]["a10g"].pop("rental_usd_per_hour"), "declared device a10g has no rental_usd_per_hour"),
    (lambda r: r["catalog"]["declared_devices"].update({"l40s": {"rental_usd_per_hour": 1.0, "source": "x"}}), "declares a device that is not a candidate"),
    (lambda r: (r["catalog"]["devices"].append("l40s"), r["catalog"]["declared_devices"].update({"l40s": {"rental_usd_per_hour": 1.0, "source": "x"}})),
     "l40s is a catalog device"),
])
def test_declared_device_errors_exit_2(tmp_path: Path, edit: Any, needle: str) -> None:
    out = _run("solve", str(_melange_variant(tmp_path, edit)), "--capacity", str(MELANGE_CAPACITY))
    assert out.exit_code == 2, out.output
    assert needle in out.output and "Traceback" not in out.output


def test_capacity_file_naming_an_undeclared_device_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "cap.csv"
    f.write_text(MELANGE_CAPACITY.read_text() + "chat,b0_in100_out100,h100x,1,30\n")
    out = _run("solve", str(MELANGE), "--capacity", str(f))
    assert out.exit_code == 2, out.output
    assert "device 'h100x' is not a candidate" in out.output and "catalog.declared_devices.h100x" in out.output


def test_declared_device_without_measurement_carries_no_traffic() -> None:
    out = _run("solve", str(MELANGE), "--json")
    assert out.exit_code == 3, out.output  # nothing measured, nothing modelled: infeasible, with the reason
    assert "declared device" in out.output


def _winner(scenario: str | None, overrides: dict[str, Any]) -> str | None:
    from planner.capacity import build_capacity_tables, read_measured_capacity
    from planner.instance import load_instance
    from planner.optimize import solve_tables
    from planner.studies.source import settings_for

    resolved = load_instance(DISTSERVE, overrides, scenario=scenario)
    tables = read_measured_capacity(CAPACITY, build_capacity_tables(resolved), only_listed=True)
    return solve_tables(tables, settings_for(resolved)).result.verdict.winner


@pytest.mark.parametrize(("extra", "scenario", "fixed"), [
    (["--scenario", "costly-pools"], "costly-pools", {}),
    (["--set", "costs.ops_usd_per_pool_month=5000"], None, {"costs.ops_usd_per_pool_month": 5000}),
])
def test_crossover_honours_scenario_and_fixed_sets(extra: list[str], scenario: str | None, fixed: dict[str, Any]) -> None:
    """The flip is bisected in the scenario asked for: fresh solves there agree with the bracket's winners
    (before the fix the bisection ran on the instance as written, whose flip lies elsewhere)."""
    out = _run("sweep", str(DISTSERVE), "--capacity", str(CAPACITY), "--capacity-only", "--jobs", "1", "--json",
               "--set", f"{RATE}=4,16", *extra)
    assert out.exit_code == 0, out.output
    cross = json.loads(out.stdout)["crossovers"]
    assert len(cross) == 1
    c = cross[0]
    assert c["winner_low"] == "shared" and c["winner_high"] == "disaggregated"
    assert c["high"] / c["low"] - 1 <= 0.01 + 1e-12
    assert _winner(scenario, {**fixed, RATE: c["low"]}) == "shared"
    assert _winner(scenario, {**fixed, RATE: c["high"]}) == "disaggregated"
    assert c["low"] > 8  # the instance as written flips near 3.2x: the pools' fixed cost moves it


def test_a_slow_measured_rate_is_not_a_simulated_tpot_miss(tmp_path: Path) -> None:
    """0.1 req/s per instance with 64 output tokens: instance time per token 156 ms, above the 40 ms TPOT
    target; measured within the SLO, the simulated step is capped at the target, so no miss and no tightening."""
    f = tmp_path / "slow.csv"
    f.write_text("service,bucket,device,tp,role,max_rate_per_s\nchat,b0_in512_out64,a100-sxm-80gb,1,unified,0.1\n")
    out = _run("solve", str(DISTSERVE), "--capacity", str(f), "--capacity-only", "--architectures", "shared", "--json",
               "--set", "options.verify=true")
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)["architectures"]["shared"]
    assert _gpus(plan) == 10 and plan["simulation"]["met"] and plan["solver"]["rounds"] == 1


def test_check_reads_a_plan_solved_with_measured_capacity(tmp_path: Path) -> None:
    """A measured row has no ITL (null in plan.json): `planner check` read it with float(None) and crashed."""
    out = _run("solve", str(DISTSERVE), "--capacity", str(CAPACITY), "--out", str(tmp_path / "p"), "-q")
    assert out.exit_code == 0, out.output
    for extra in ([], ["--no-instance"]):
        r = _run("check", str(tmp_path / "p" / "plan.json"), *extra)
        assert r.exit_code == 0, r.output


def test_evaluate_applies_the_measured_file_or_says_it_prices_the_model(tmp_path: Path) -> None:
    """evaluate re-derives the tables from the instance: a plan solved with --capacity read a headroom of the model
    (13.2) where the measured rate allows 1.6, without a word. With --capacity it is the measurement's; without it,
    a note says so and names the option."""
    out = _run("solve", str(DISTSERVE), "--capacity", str(CAPACITY), "--out", str(tmp_path / "p"), "-q")
    assert out.exit_code == 0, out.output
    r = _run("evaluate", str(tmp_path / "p" / "plan.json"), "--json")
    assert r.exit_code == 0, r.output
    assert "solved with measured capacity (capacity.csv)" in r.output and "pass --capacity capacity.csv" in r.output
    r = _run("evaluate", str(tmp_path / "p" / "plan.json"), "--capacity", str(CAPACITY), "--json")
    assert r.exit_code == 0, r.output
    assert "solved with measured capacity" not in r.output
    row = json.loads(r.stdout)["rows"][0]
    assert 1.0 <= row["headroom_multiplier"] < 2.0 and row["carries_load"]
    assert _run("evaluate", str(tmp_path / "p" / "plan.json"), "--capacity-only").exit_code == 2
