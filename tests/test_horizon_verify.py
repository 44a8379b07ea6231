"""Per-slot verification of plans over time (planner.horizon.verify) and `planner solve` on a horizon instance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from micro_tables import micro_tables

from planner.cli import main
from planner.horizon.model import Acquisition, HorizonInputs, build_horizon
from planner.horizon.verify import busiest_levels, level_tables

ROOT = Path(__file__).resolve().parent.parent


def _inputs(mult: list[float], growth: list[float], cv: float = math.nan) -> HorizonInputs:
    h = 730.0 / len(mult)
    slots = pd.DataFrame([{"slot": f"s{i}", "hours_per_period": h, "peak_rate_per_s": m, "mean_rate_per_s": m / 2, "interarrival_cv": cv}
                          for i, m in enumerate(mult)])
    return HorizonInputs(slots=slots, absolute=False, growth=np.asarray(growth, float), months_per_period=1.0,
                         acquisition={"g": Acquisition("g", on_demand_usd_per_hour=2.0)})


def test_busiest_slots_each_at_its_busiest_period() -> None:
    hb = build_horizon(micro_tables(), _inputs([0.5, 1.0, 0.8], [1.0, 1.2]))
    # levels k = t * 3 + s: the busiest is (1, s1) = 4, then (1, s2) = 5 — not (0, s1), the same slot a period earlier
    assert busiest_levels(hb, 2) == [4, 5]
    assert busiest_levels(hb, 10) == [4, 5, 3]  # at most one level per slot


def test_level_table_scales_rates_and_takes_the_slots_burstiness() -> None:
    hb = build_horizon(micro_tables(), _inputs([0.5, 1.0], [1.0, 2.0], cv=3.0))
    t = level_tables(hb, 3)  # period 1, slot s1: 10 req/s x 2 x 1.0 at peak, 5 x 2 x 0.5 mean
    assert t.demand["rate_peak_per_s"].tolist() == pytest.approx([20.0])
    assert t.demand["rate_mean_per_s"].tolist() == pytest.approx([5.0])
    assert t.demand["interarrival_cv"].tolist() == pytest.approx([3.0])


SMALL = {"periods": 2, "growth": {"monthly_rate": 0.1},
         "demand": {"slots": [{"name": "night", "hours_per_period": 365, "peak_multiplier": 0.5},
                              {"name": "day", "hours_per_period": 365, "peak_multiplier": 1.0}]},
         "acquisition": {"h100-sxm": {"buy": {"lead_time_periods": 0, "source": "profile"}, "on_demand": {"source": "profile"}}}}


def _instance(tmp_path: Path) -> Path:
    src = yaml.safe_load((ROOT / "instances" / "enterprise-chat.yaml").read_text())
    src["services"]["chat"]["traffic"]["trace"] = str(ROOT / "instances" / "traces" / "azure2023_conv_min00-20.csv")
    src["catalog"]["devices"] = ["h100-sxm"]
    src["catalog"]["tp_degrees"] = [2, 4]
    src["scenarios"] = {}
    src["horizon"] = SMALL
    p = tmp_path / "h.yaml"
    p.write_text(yaml.safe_dump(src))
    return p


def test_cli_verify_simulates_the_busiest_slot(tmp_path: Path) -> None:
    inst = _instance(tmp_path)
    r = CliRunner().invoke(main, ["horizon", str(inst), "--architectures", "shared", "--no-baseline", "--verify", "--verify-slots", "1",
                                  "--json"])
    assert r.exit_code == 0, r.output
    a = json.loads(r.stdout)["architectures"]["shared"]
    (row,) = a["slot_checks"]
    assert (row["period"], row["slot"], row["service"]) == (1, "day", "chat")  # growth: period 1's day slot is the busiest
    assert row["ttft_analytic_ms"] > 0 and row["ttft_sim_ms"] > 0 and row["tpot_sim_ms"] > 0
    assert row["met"] == (row["ttft_sim_ms"] <= row["ttft_target_ms"] and row["tpot_sim_ms"] <= row["tpot_target_ms"])
    assert "busiest slots" in a["slot_checks_method"]
    r = CliRunner().invoke(main, ["horizon", str(inst), "--architectures", "shared", "--no-baseline", "--verify", "--verify-slots", "1",
                                  "--out", str(tmp_path / "out"), "--html", str(tmp_path / "h.html")])
    assert r.exit_code == 0, r.output
    assert "per-slot check (1 busiest slot(s) simulated" in r.output and "TTFT p99 ms analytic / sim" in r.output
    assert (tmp_path / "out" / "slot_checks.csv").exists()
    page = (tmp_path / "h.html").read_text()
    assert "Per-slot check" in page
    # the per-token columns are named after the metric the service targets, and both verdicts have a column
    assert f"<th>{row['token_metric'].upper()} analytic ms</th>" in page and "<th>analytic</th><th>simulated</th>" in page
    r = CliRunner().invoke(main, ["horizon", str(inst), "--verify-slots", "0"])
    assert r.exit_code == 2 and "--verify-slots" in r.output


def test_cli_solve_on_a_horizon_instance_points_at_planner_horizon(tmp_path: Path) -> None:
    inst = _instance(tmp_path)
    r = CliRunner().invoke(main, ["solve", str(inst), "--architectures", "shared", "--confidence", "off", "--json"])
    assert r.exit_code == 0, r.output
    assert f"planner horizon {inst}" in r.stderr and "single-peak plan" in r.stderr
    assert json.loads(r.stdout)["verdict"]["winner"] == "shared"  # stdout stays one JSON document
