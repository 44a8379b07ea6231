"""Issue 24, the fresh fuzz campaign (``benchmarks/fuzz_{readers,logs,horizon,plans}.py``): one regression test per
class of failure it found, the N5 model fix of the disaggregated TTFT (``fuzz-turn3/solve_disagg_ttft_missed_ops0``),
and the campaign's oracles shown able to fail (an oracle that never fires finds nothing)."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.errors import InputError
from planner.horizon.demand import _read_window_csv
from planner.pool_latency import _thinned_cv2, decode_hold_s, pool_latency
from planner.queueing import wait_quantile_s

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


# --- found by benchmarks/fuzz_horizon.py (seeds 401, 403) ----------------------------------------------------


@pytest.mark.parametrize(("row", "words"), [
    ("600,1e308,2", ("line 2", "rate 1e+308")),      # accepted silently: the slots' hours-weighted mean overflowed to inf
    ("1e26,6,2", ("line 2", "window start 1e+26")),  # leaked "RuntimeWarning: invalid value encountered in cast"
    ("600,6,5000", ("line 2", "cv 5000")),
])
def test_fleet_file_fast_path_applies_the_row_readers_bounds(tmp_path: Path, row: str, words: tuple[str, ...]) -> None:
    f = tmp_path / "chunk-a-trace.csv"
    f.write_text(f"0,3,1\n{row}\n1200,4,1\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError) as exc:
            _read_window_csv(f)
    text = str(exc.value)
    assert "\n" not in text.strip() and all(w in text for w in words), text
    f.write_text("0,3,1\n600,1e7,1000\n", encoding="utf-8")  # at the bounds: read (the fast path)
    assert _read_window_csv(f)["rate_rps"].tolist() == [3.0, 1e7]


# --- found by benchmarks/fuzz_plans.py (seeds 1, 503) -------------------------------------------------------------


@pytest.mark.parametrize("command", [["check"], ["deploy", "--target", "vllm", "--out", "{tmp}/d"], ["evaluate", "--json"]])
def test_plan_nested_thousands_deep_is_one_error_line(tmp_path: Path, command: list[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("[" * 50_000 + "]" * 50_000, encoding="utf-8")
    args = [command[0], str(plan), *[a.replace("{tmp}", str(tmp_path)) for a in command[1:]]]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.stderr
    assert res.stderr.startswith("error:") and res.stderr.count("error:") == 1 and "nested too deeply" in res.stderr, res.stderr


@pytest.mark.parametrize(("table", "column", "value", "command"), [
    ("configs", "ops_usd_per_device_month", "h100-sxm", "check"),  # fuzz_plans seed 514: internal ValueError in check's cost recomputation
    ("demand", "input_tokens_rep", "2.5", "simulate"),             # fuzz_plans seed 633: internal TypeError in the simulator's adapter
    ("points", "ttft_ms", [1, 2], "deploy"), ("demand", "weight", True, "check")])
def test_text_in_a_numeric_snapshot_column_is_one_error_line(tmp_path: Path, table: str, column: str, value: object, command: str) -> None:
    import json

    inst = tmp_path / "valid_minimal.yaml"
    inst.write_text((ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    assert CliRunner().invoke(main, ["solve", str(inst), "--out", str(tmp_path / "sol"), "-q"]).exit_code == 0
    doc = json.loads((tmp_path / "sol" / "plan.json").read_text(encoding="utf-8"))
    doc["capacity"][table][0][column] = value
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps(doc), encoding="utf-8")
    args = {"check": ["check", str(plan), "--no-instance"], "simulate": ["simulate", str(inst), "--plan", str(plan), "--duration", "10"],
            "deploy": ["deploy", str(plan), "--target", "vllm", "--out", str(tmp_path / "d")]}[command]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.stderr
    assert res.stderr.startswith("error:") and res.stderr.count("error:") == 1 and f"{column} is" in res.stderr, res.stderr


def test_an_instance_path_too_long_for_the_file_system_is_not_found(tmp_path: Path) -> None:
    """fuzz_plans seed 643: deploy / evaluate stat()ed a 2,000-character instance_path: internal OSError (ENAMETOOLONG)."""
    from planner.deploy.pools import instance_services
    from planner.report.plan_io import recorded_instance
    from planner.schema.plan import PlanResult

    name = "x" * 2000
    assert instance_services(name, tmp_path / "plan.json") is None  # what deploy reads the instance with
    fake = PlanResult.model_construct(instance_path=name)
    assert recorded_instance(fake, tmp_path / "plan.json") is None


# --- N5: the disaggregated TTFT's blown-up term -----------------------------------------------------------------


def _points(**over: Any) -> pd.DataFrame:
    """Two buckets of one service (peak 4/s each, CV 3) and one decode point of bucket b1 on pool D."""
    base = {"service": ["s", "s", "s"], "bucket": ["b0", "b1", "b1"], "role": ["prefill", "prefill", "decode"],
            "pool": ["P", "P", "D"], "rate_peak_per_s": [4.0, 4.0, 4.0], "interarrival_cv": [3.0, 3.0, 3.0],
            "instance_seconds_per_request": [0.5, 0.5, 1.0], "max_batch": [1, 1, 60], "service_time_cv": [0.0, 0.0, 0.0],
            "ttft_quantile": [0.99, 0.99, 0.99], "output_tokens_mean": [400.0, 400.0, 400.0], "tpot_ms": [np.nan, np.nan, 30.0]}
    base.update(over)
    return pd.DataFrame(base)


def test_a_pool_sees_its_thinned_share_of_the_services_arrivals() -> None:
    """Thinning a renewal stream of CV c with probability P: c_P² = P·c² + 1 − P (geometric sum of intervals).
    Pool P takes all of b0 and half of b1 (P = 6/8), pool D the other half of b1 (P = 2/8); service peak 8/s."""
    pts = _points()
    x = np.array([1.0, 0.5, 0.5])
    got = _thinned_cv2(pts, x > 0, x)
    assert got == pytest.approx([0.75 * 9 + 0.25, 0.75 * 9 + 0.25, 0.25 * 9 + 0.75])
    # every arrival into one pool: the service's own CV
    assert _thinned_cv2(pts.iloc[:2], np.array([True, True]), np.array([1.0, 1.0])) == pytest.approx([9.0, 9.0])


def test_a_decode_slot_is_held_for_the_mean_output() -> None:
    """Decode pool D: 2/s into 60 slots; a slot is held o_mean · TPOT = 400 × 30 ms = 12 s (ρ = 0.4, no wait),
    not τ·B* = 60 s (the representative output's holding: ρ = 2.0, an infinite wait before the fix)."""
    pts = _points()
    x = np.array([1.0, 0.5, 0.5])
    assert decode_hold_s(pts.iloc[[2]], np.array([60.0])) == pytest.approx([12.0])
    assert decode_hold_s(pts.drop(columns=["tpot_ms"]).iloc[[2]], np.array([60.0])) == pytest.approx([60.0])  # no columns: τ·B*
    pl = pool_latency(pts, x, {"P": 4, "D": 1}, 0).set_index("pool")
    d = pl.loc["D"]
    assert d["mean_service_s"] == pytest.approx(12.0) and d["servers"] == 60
    assert d["arrival_cv"] == pytest.approx(math.sqrt(0.25 * 9 + 0.75))
    assert d["wait_ms"] == pytest.approx(1e3 * wait_quantile_s(0.99, 2.0, 60, 12.0, 0.0, math.sqrt(3.0)))
    p = pl.loc["P"]  # prefill: 6/s, τ = 0.5 s on 4 servers (ρ = 0.75), CV² = 7
    assert p["mean_service_s"] == pytest.approx(0.5) and p["arrival_cv"] == pytest.approx(math.sqrt(7.0))
    assert p["wait_ms"] == pytest.approx(1e3 * wait_quantile_s(0.99, 6.0, 4, 0.5, 0.0, math.sqrt(7.0)))


# --- the campaign's oracles fire on wrong answers -----------------------------------------------------------------


def test_the_log_oracle_flags_counts_that_do_not_add_up(tmp_path: Path) -> None:
    import json

    import fuzz_logs

    (tmp_path / "a.csv").write_text("h\n1\n2\n", encoding="utf-8")
    case = fuzz_logs.Case("azure", {}, ["{dir}/a.csv", "--json"])
    good = {"requests": 2, "buckets": [{"name": "b0", "weight": 0.5}, {"name": "b1", "weight": 0.5}],
            "input_tokens": {"mean": 2.0, "p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 3.0}}
    assert fuzz_logs.silently_wrong(case, json.dumps(good), tmp_path) == ""
    for bad in ({"requests": 5}, {"buckets": [{"name": "b0", "weight": 0.5}]},
                {"input_tokens": {"mean": 2.0, "p50": 3.0, "p90": 2.0, "p99": 3.0, "max": 3.0}}):
        assert fuzz_logs.silently_wrong(case, json.dumps({**good, **bad}), tmp_path) != "", bad


def test_the_plan_and_horizon_oracles_flag_inconsistent_answers() -> None:
    import json

    import fuzz_horizon
    import fuzz_plans

    arch = {"feasible": True, "meets_targets": True,
            "latency": [{"service": "s", "ttft_predicted_ms": 10.0, "ttft_target_ms": 20.0, "ttft_met": True,
                         "tpot_predicted_ms": 1.0, "tpot_target_ms": 2.0, "tpot_met": True}],
            "pools": [{"name": "p", "devices": 4, "instances": 2, "tp": 2, "utilization_peak": 0.5}],
            "costs": {"equipment_usd_per_month": 10.0, "power_busy_usd_per_month": 5.0, "total_usd_per_month": 15.0}}
    assert fuzz_plans.wrong_plan({"architectures": {"a": arch}}) == ""
    for path, value in ((("pools", 0, "devices"), 3), (("latency", 0, "ttft_predicted_ms"), 30.0), (("costs", "total_usd_per_month"), 99.0)):
        bad = json.loads(json.dumps(arch))
        node: Any = bad
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        assert fuzz_plans.wrong_plan({"architectures": {"a": bad}}) != "", path

    sched = [{"period": 0, "device": "h", "bought": 0, "delivered": 0, "owned": 0, "sold": 0, "reserved": 0, "on_demand_peak": 2,
              "spot_peak": 0, "in_pools_peak": 2}]
    pools = [{"period": 0, "slot": "h00", "pool": "unified:h/tp1:m", "instances": 2, "devices": 2, "utilization_peak": 0.5}]
    slots = [{"period": 0, "slot": "h00", "device": "h", "peak_multiplier": 3.0, "in_pools": 2, "on_demand": 2, "spot": 0}]
    doc = {"architectures": {"shared": {"feasible": True, "schedule": sched, "pools": pools, "slots": slots}}}
    assert fuzz_horizon.check_solve(json.dumps(doc)) == ""
    empty = {"architectures": {"shared": {"feasible": True, "schedule": sched, "pools": [],
                                          "slots": [{**slots[0], "in_pools": 0, "on_demand": 0}]}}}
    assert "no device in pools" in fuzz_horizon.check_solve(json.dumps(empty))  # N6's class: 0 devices for demand


# --- H1: horizon at growth 1.0/month (fuzz-turn3/horizon_growth_rate_1.yaml) -------------------------------------


def test_horizon_at_growth_one_per_month_sizes_millions_of_slots(tmp_path: Path) -> None:
    """Demand doubles every month for 12 months (×2,048): the last period's pool is ~70,000 TP-8 instances (~560,000
    devices; every batch slot a server of the Erlang queue, which once looped per server: > 2 min per bisection
    step; ~185,000 instances before buckets paid their mean work, issue 24 item 0). The counts must follow the demand: each period's largest slot ×(1.9 to 2.0) the previous
    one's (larger pools queue relatively less, so slightly under ×2), utilisation at most 1. Asserted on counts,
    not on time; ~2 s of CPU."""
    import json

    import yaml

    d = yaml.safe_load((ROOT / "instances" / "fleet-horizon.yaml").read_text(encoding="utf-8"))
    d["horizon"].update(periods=12, growth={"monthly_rate": 1.0})
    d["horizon"]["demand"]["fleet_file"] = str(ROOT / "instances" / "traces" / "servegen_m-large_fleet_sum.csv")
    del d["horizon"]["acquisition"]["h100-sxm"]
    d["services"]["chat"]["traffic"].update(trace=str(ROOT / "instances" / "traces" / "azure2023_conv_min00-20.csv"), buckets=2)
    d["catalog"].update(devices=["h200-sxm"], tp_degrees=[8])
    d["options"]["architectures"] = ["shared"]
    inst = tmp_path / "growth1.yaml"
    inst.write_text(yaml.safe_dump(d), encoding="utf-8")
    res = CliRunner().invoke(main, ["horizon", str(inst), "--no-baseline", "--json"])
    assert res.exit_code == 0, res.stderr
    plan = json.loads(res.stdout)["architectures"]["shared"]
    assert plan["feasible"]
    peak = [max(p["instances"] for p in plan["pools"] if p["period"] == t) for t in range(12)]
    assert all(1.9 <= b / a <= 2.0 + 1e-9 for a, b in zip(peak, peak[1:], strict=False)), peak
    assert peak[-1] >= 50_000 and sum(p["devices"] for p in plan["pools"] if p["period"] == 11 and p["slot"] == "h23") >= 400_000
    assert all(p["utilization_peak"] <= 1.0 + 1e-9 for p in plan["pools"])
