"""Plans over time (planner.horizon): hand-solvable instances, invariants, demand slots, CLI."""

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
from planner.horizon.demand import _read_window_csv, growth_multipliers, slots_from_windows
from planner.horizon.model import Acquisition, HorizonInputs
from planner.horizon.solve import solve_horizon
from planner.optimize.solve import SolveSettings, solve_tables
from planner.schema.capacity import CapacityTables
from planner.schema.horizon import DemandProfile, Growth

ROOT = Path(__file__).resolve().parent.parent
FLEET = ROOT / "instances" / "traces" / "servegen_m-large_fleet_sum.csv"


def _micro(*, price_kwh: float = 0.0, ops_pool: float = 0.0, ops_type: float = 0.0, cap: float = 0.5) -> CapacityTables:
    """One bucket, one unified tp1 configuration: 10 req/s at peak x 1 s / cap 0.5 = 20 instances."""
    return micro_tables(price_kwh=price_kwh, ops_pool=ops_pool, ops_type=ops_type, cap=cap)


def _slots(*mult: float) -> pd.DataFrame:
    h = 730.0 / len(mult)
    return pd.DataFrame([{"slot": f"s{i}", "hours_per_period": h, "peak_rate_per_s": m, "mean_rate_per_s": m, "interarrival_cv": math.nan}
                         for i, m in enumerate(mult)])


def _inputs(slots: pd.DataFrame, growth: list[float], acq: Acquisition, **kw: object) -> HorizonInputs:
    return HorizonInputs(slots=slots, absolute=False, growth=np.asarray(growth, float), months_per_period=1.0,
                         acquisition={"g": acq}, **kw)  # type: ignore[arg-type]


def _buy(hourly: float = 1.0, **kw: object) -> dict[str, object]:
    # straight-line over one year at no cost of capital: purchase / (12 x 730) per device-hour
    return {"buy_usd_per_device_hour": hourly, "purchase_usd": hourly * 12 * 730, **kw}


def test_two_periods_two_slots_buy_the_base_rent_the_burst() -> None:
    # Night needs 10 instances, day 20 (365 h each). Buying costs $1/h for every hour owned, on demand $1.5/h
    # for the hours used: own 10 (7,300) + rent 10 by day (10 x 1.5 x 365 = 5,475) = 12,775 beats owning 20
    # (14,600) and renting all (30 x 547.5 = 16,425). Per-device ops + licence $15/month pro-rated by hours in
    # pools: (10 x 365 + 20 x 365) / 730 x 15 = 225. Two flat periods: 2 x 13,000.
    acq = Acquisition("g", **_buy(), on_demand_usd_per_hour=1.5)  # type: ignore[arg-type]
    res = solve_horizon(_micro(), _inputs(_slots(0.5, 1.0), [1.0, 1.0], acq), ("shared",), baseline=True)
    a = res.architectures["shared"]
    assert a.status == "optimal"
    assert a.total_usd == pytest.approx(26_000.0)
    sch = a.schedule.set_index("period")
    assert sch["owned"].tolist() == [10, 10]
    assert sch["on_demand_peak"].tolist() == [10, 10]
    assert sch["bought"].tolist() == [10, 0]
    pools = a.pools.set_index(["period", "slot"])["instances"]
    assert pools[(0, "s0")] == 10 and pools[(0, "s1")] == 20
    costs = a.costs.groupby("term")["usd"].sum()
    assert costs["ownership"] == pytest.approx(2 * 7_300.0)
    assert costs["on_demand"] == pytest.approx(2 * 5_475.0)
    assert costs["ops_devices"] == pytest.approx(2 * 225.0)
    assert a.costs["usd"].sum() == pytest.approx(a.total_usd)
    # Baseline: own the 20-instance peak fleet all month: 20 x 730 + ops on 20 devices all hours (300) per period.
    assert a.baseline_usd == pytest.approx(2 * (14_600.0 + 300.0))


def test_flat_profile_over_one_period_reproduces_the_single_peak_plan() -> None:
    # One slot = the whole month at the planned peak, on-demand price = the table's rental price: the horizon
    # plan is `planner solve`'s plan, term by term (power at a positive price included).
    t = _micro(price_kwh=0.1, ops_pool=100.0, ops_type=1000.0)
    single = solve_tables(t, SolveSettings(architectures=("shared",), verify_rounds=0)).result.architectures["shared"]
    acq = Acquisition("g", on_demand_usd_per_hour=2.0)
    res = solve_horizon(t, _inputs(_slots(1.0), [1.0], acq), ("shared",), baseline=False)  # multipliers of peak and mean
    a = res.architectures["shared"]
    assert single.costs is not None
    assert a.total_usd == pytest.approx(single.costs.total_usd_per_month, rel=1e-9)
    assert int(a.pools["instances"].sum()) == sum(p.instances for p in single.pools)


def test_rising_forecast_never_sells_and_a_falling_one_does() -> None:
    acq = Acquisition("g", **_buy(resale_fraction=0.9))  # type: ignore[arg-type]
    up = solve_horizon(_micro(), _inputs(_slots(1.0), [1.0, 1.2, 1.5], acq), ("shared",), baseline=False).architectures["shared"]
    assert up.schedule["sold"].sum() == 0
    assert up.schedule["owned"].is_monotonic_increasing
    # Falling by half: keeping 10 idle devices costs 10 x 730 a month; selling writes off 10% of 8,760 each.
    down = solve_horizon(_micro(), _inputs(_slots(1.0), [1.0, 0.5, 0.5], acq), ("shared",), baseline=False).architectures["shared"]
    assert down.schedule["sold"].sum() == 10
    assert down.schedule.set_index("period")["owned"].tolist() == [20, 10, 10]


def test_cheaper_on_demand_shifts_the_mix_toward_renting() -> None:
    # Slots of 243.3 h need 8, 14 and 20 instances. A device used in k slots costs 730 owned or od x 243.3 k
    # rented: at $3/h nothing is rented; at $1.6/h the 6 devices of the busiest slot only (k = 1); at $1.1/h
    # everything above the base of 8 (k <= 2).
    slots = _slots(0.4, 0.7, 1.0)
    shares, owned = [], []
    for od in (3.0, 1.6, 1.1):
        acq = Acquisition("g", **_buy(), on_demand_usd_per_hour=od)  # type: ignore[arg-type]
        a = solve_horizon(_micro(), _inputs(slots, [1.0], acq), ("shared",), baseline=False).architectures["shared"]
        shares.append(float(a.costs.set_index("term").loc["on_demand", "usd"]) / float(a.total_usd or 1.0))
        owned.append(int(a.schedule["owned"].iloc[0]))
    assert shares[0] < shares[1] < shares[2]
    assert owned == [20, 14, 8]


def test_longer_lead_time_orders_earlier() -> None:
    # Needs 20, 30, 40, 40 instances. Without a lead time each step is bought in the period it is needed; with a
    # one-period lead it is ordered a period earlier, and period 0 (nothing delivered yet) is rented.
    growth = [1.0, 1.5, 2.0, 2.0]
    sched = {}
    for lead in (0, 1):
        acq = Acquisition("g", **_buy(lead_time_periods=lead), on_demand_usd_per_hour=3.0)  # type: ignore[arg-type]
        a = solve_horizon(_micro(), _inputs(_slots(1.0), growth, acq), ("shared",), baseline=False).architectures["shared"]
        sched[lead] = a.schedule.set_index("period")
    assert sched[0]["bought"].tolist() == [20, 10, 10, 0]
    assert sched[1]["bought"].tolist() == [30, 10, 0, 0]
    assert sched[1]["owned"].tolist() == [0, 30, 40, 40]
    assert sched[1]["on_demand_peak"].tolist() == [20, 0, 0, 0]
    assert (np.cumsum(sched[1]["bought"]) >= np.cumsum(sched[0]["bought"])).all()


def test_reserved_commitment_holds_for_its_term() -> None:
    # Reserved at $1.2/h for 2 periods vs on demand $1.5/h: the base of 10 is reserved; the commitment cannot
    # shrink inside its term even when demand halves in period 1.
    acq = Acquisition("g", reserve_usd_per_hour=1.2, reserve_term_periods=2, on_demand_usd_per_hour=1.5)
    a = solve_horizon(_micro(), _inputs(_slots(1.0), [1.0, 0.5], acq), ("shared",), baseline=False).architectures["shared"]
    sch = a.schedule.set_index("period")
    assert sch["reserved"].tolist()[0] == sch["reserved"].tolist()[1]
    assert sch["reserved_started"].tolist()[1] == 0


def test_regret_of_a_held_schedule() -> None:
    from planner.horizon.evaluate import growth_regret

    acq = Acquisition("g", **_buy(), on_demand_usd_per_hour=1.5)  # type: ignore[arg-type]
    inputs = _inputs(_slots(0.5, 1.0), [1.0, 1.0], acq)
    plan = solve_horizon(_micro(), inputs, ("shared",), baseline=False).architectures["shared"]
    out = growth_regret(_micro(), inputs, "shared", plan.schedule, {"same": np.array([1.0, 1.0]), "halves": np.array([1.0, 0.5]),
                                                                      "doubles": np.array([1.0, 2.0])})
    same, halves, doubles = out
    assert same.held_usd == pytest.approx(plan.total_usd) and same.regret_usd == pytest.approx(0.0)
    # Halving in period 1 (5 at night, 10 by day): the 10 owned cover the day and the plan made knowing it buys
    # the same 10 (5 fewer would cost 5 x 730 less ownership a period but 5 x 2 x 547.5 + 5 x 547.5 more rent):
    # no regret. Ops on 10 + 20 then 5 + 10 instances: 225 + 112.5.
    assert halves.held_usd == pytest.approx(2 * 7_300.0 + 5_475.0 + 225.0 + 112.5)
    assert halves.regret_usd == pytest.approx(0.0)
    # Doubling (20 / 40): held, the extra 10 at night and 30 by day are rented (40 x 547.5); re-planned, 10 more
    # are bought in period 1 (10 x 730) and 20 rented by day (10,950): 21,900 - 18,250 = 3,650 of regret.
    assert doubles.regret_usd == pytest.approx(3_650.0)


def test_monte_carlo_and_budget_on_growth() -> None:
    from planner.horizon.evaluate import growth_monte_carlo, largest_growth_within_budget

    acq = Acquisition("g", **_buy(), on_demand_usd_per_hour=1.5)  # type: ignore[arg-type]
    inputs = _inputs(_slots(0.5, 1.0), [1.0, 1.0], acq)
    plan = solve_horizon(_micro(), inputs, ("shared",), baseline=False).architectures["shared"]
    mc = growth_monte_carlo(_micro(), inputs, "shared", plan.schedule, np.array([0.0, 1.0]))
    assert mc["regret_usd"].tolist() == pytest.approx([0.0, 3_650.0])  # growth 100 %/month = the doubling above
    # Flat demand costs 13,000 a period = 156,000 a year of 12 one-month periods... here 2 periods: 26,000 in year 0.
    rate, worst, probes = largest_growth_within_budget(_micro(), inputs, "shared", 26_000.0, low=-0.2, high=0.5, steps=6)
    assert rate is not None and worst is not None and worst <= 26_000.0
    assert -0.01 <= rate <= 0.02  # a little growth fits only if rounding leaves room; much more does not
    assert all(c is None or c > 26_000.0 for r, c in probes if r > rate + 0.02)
    none, _, _ = largest_growth_within_budget(_micro(), inputs, "shared", 1_000.0, steps=2)
    assert none is None


def test_spot_needs_redundancy() -> None:
    from planner.errors import InputError

    acq = Acquisition("g", spot_usd_per_hour=0.5, spot_availability=0.9)
    with pytest.raises(InputError, match="spot"):
        solve_horizon(_micro(), _inputs(_slots(1.0), [1.0], acq), ("shared",), baseline=False)
    a = solve_horizon(_micro(), _inputs(_slots(1.0), [1.0], acq, redundancy=1), ("shared",), baseline=False).architectures["shared"]
    # 20 + 1 spare instances need 21 devices of capacity: 21 / 0.9 -> 24 spot devices (integer).
    assert a.schedule["spot_peak"].iloc[0] == 24


def test_fleet_file_statistics_match_the_source() -> None:
    w = _read_window_csv(FLEET)
    assert len(w) == 2016
    assert w["rate_rps"].mean() == pytest.approx(195.8, abs=0.05)
    assert w["rate_rps"].max() == pytest.approx(583.0, abs=0.05)
    assert w["rate_rps"].min() == pytest.approx(48.4, abs=0.05)
    daily = w.groupby(w["window_start_s"] // 86400)["rate_rps"].mean().round().astype(int).tolist()
    assert daily == [279, 209, 201, 175, 207, 181, 214, 242, 231, 193, 134, 126, 105, 245]


def test_slots_from_windows_take_the_busiest_window_of_each_hour() -> None:
    w = _read_window_csv(FLEET)
    prof = slots_from_windows(w, DemandProfile(fleet_file="x"), 730.0, "fleet")
    s = prof.slots
    assert len(s) == 24 and s["hours_per_period"].sum() == pytest.approx(730.0)
    assert s["peak_rate_per_s"].max() == pytest.approx(w["rate_rps"].max())
    hour = (w["window_start_s"] // 3600).astype(int) % 24
    assert s.set_index("slot")["peak_rate_per_s"]["h08"] == pytest.approx(w["rate_rps"][hour == 8].max())
    assert s.set_index("slot")["mean_rate_per_s"]["h08"] == pytest.approx(w["rate_rps"][hour == 8].mean())
    week = slots_from_windows(w, DemandProfile(fleet_file="x", grouping="hour_of_day_weekpart", day0_weekday=0), 730.0, "fleet").slots
    assert len(week) == 48
    assert week[week["slot"].str.startswith("weekend")]["hours_per_period"].sum() == pytest.approx(730.0 * 4 / 14)


def test_growth_multipliers() -> None:
    assert growth_multipliers(Growth(monthly_rate=0.05), 3, 1.0).tolist() == pytest.approx([1.0, 1.05, 1.1025])
    assert growth_multipliers(Growth(monthly_rate=0.05), 2, 3.0).tolist() == pytest.approx([1.0, 1.05 ** 3])
    with pytest.raises(ValueError):
        Growth(monthly_rate=0.05, multipliers=[1.0])


# --- CLI ------------------------------------------------------------------------------------------------

def _cli_instance(tmp_path: Path, horizon: dict[str, object], **options: object) -> Path:
    src = yaml.safe_load((ROOT / "instances" / "enterprise-chat.yaml").read_text())
    src["services"]["chat"]["traffic"]["trace"] = str(ROOT / "instances" / "traces" / "azure2023_conv_min00-20.csv")
    src["catalog"]["devices"] = ["h100-sxm"]
    src["catalog"]["tp_degrees"] = [2, 4]
    src["options"].update(options)
    src["scenarios"] = {}
    src["horizon"] = horizon
    p = tmp_path / "h.yaml"
    p.write_text(yaml.safe_dump(src))
    return p


SMALL = {"periods": 2, "growth": {"monthly_rate": 0.1},
         "demand": {"slots": [{"name": "night", "hours_per_period": 365, "peak_multiplier": 0.5},
                              {"name": "day", "hours_per_period": 365, "peak_multiplier": 1.0}]},
         "acquisition": {"h100-sxm": {"buy": {"lead_time_periods": 0, "source": "profile"},
                                      "on_demand": {"source": "profile"}}}}


def test_cli_horizon_plans_and_writes_tables(tmp_path: Path) -> None:
    inst = _cli_instance(tmp_path, SMALL)
    r = CliRunner().invoke(main, ["horizon", str(inst), "--out", str(tmp_path / "out"), "--architectures", "shared"])
    assert r.exit_code == 0, r.output
    assert "VERDICT: shared wins over the horizon" in r.output
    doc = json.loads((tmp_path / "out" / "horizon.json").read_text())
    r = CliRunner().invoke(main, ["horizon", str(inst), "--architectures", "shared", "--no-baseline", "--regret-growth", "0,0.3",
                                  "--html", str(tmp_path / "h.html")])
    page = (tmp_path / "h.html").read_text()
    assert page.count("<svg") == 2 and "devices by source per period" in page and "<script" not in page
    assert r.exit_code == 0, r.output
    assert "regret of the shared schedule" in r.output and "30 %/month" in r.output
    r = CliRunner().invoke(main, ["horizon", str(inst), "--architectures", "shared", "--no-baseline", "--monte-carlo", "3",
                                  "--growth-dist", "uniform(0,0.2)", "--budget-per-year", "1e9", "--json"])
    assert r.exit_code == 0, r.output
    doc2 = json.loads(r.output)
    assert len(doc2["monte_carlo"]["draws"]) == 3 and doc2["budget"]["largest_monthly_growth"] == pytest.approx(0.5)
    r = CliRunner().invoke(main, ["horizon", str(inst), "--monte-carlo", "3"])
    assert r.exit_code == 2 and "--growth-dist" in r.output
    r = CliRunner().invoke(main, ["horizon", str(inst), "--regret-growth", "fast"])
    assert r.exit_code == 2 and "--regret-growth" in r.output
    assert doc["schema_version"] == 1 and doc["winner"] == "shared"
    sched = pd.read_parquet(tmp_path / "out" / "schedule.parquet")
    assert set(sched.columns) >= {"period", "device", "bought", "owned", "reserved", "on_demand_peak", "architecture"}
    assert (tmp_path / "out" / "costs.csv").exists()


def test_cli_horizon_bad_input_names_the_field(tmp_path: Path) -> None:
    bad = dict(SMALL, acquisition={"h100-sxm": {"spot": {"usd_per_hour": 1.0, "interruption_rate": 0.1, "source": "x"}}})
    r = CliRunner().invoke(main, ["horizon", str(_cli_instance(tmp_path, bad))])
    assert r.exit_code == 2
    assert "horizon.acquisition.h100-sxm.spot" in r.output and "redundancy" in r.output
    missing = dict(SMALL, acquisition={"mi300x": {"on_demand": {"source": "x"}}})
    r = CliRunner().invoke(main, ["horizon", str(_cli_instance(tmp_path, missing))])
    assert r.exit_code == 2 and "horizon.acquisition" in r.output


def test_cli_horizon_infeasible_is_diagnosed(tmp_path: Path) -> None:
    capped = dict(SMALL, acquisition={"h100-sxm": {"on_demand": {"max_devices": 1, "source": "x"}}})
    r = CliRunner().invoke(main, ["horizon", str(_cli_instance(tmp_path, capped)), "--architectures", "shared", "--no-baseline"])
    assert r.exit_code == 3, r.output
    assert "on demand at most 1" in r.output and "to make it feasible" in r.output


def test_horizon_caps_split_a_multimodal_ttft_between_encode_and_prefill_as_solve_does() -> None:
    """One slot at the table's own rate: every level-0 cap is the cap ``planner solve`` uses, including the
    encode/prefill split of a multimodal row's TTFT wait (planner.optimize.prepare.encode_split_ttft)."""
    from planner.capacity import build_capacity_tables
    from planner.horizon.model import levels_for
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare

    tables = build_capacity_tables(load_instance(ROOT / "instances" / "multimodal-image.yaml"))
    prep = prepare(tables)
    enc = prep.points["role"].astype(str).str.startswith("encode") | prep.points["role"].isin(["prefill", "unified"])
    assert enc.any()
    lv = levels_for(prep, _inputs(_slots(1.0), [1.0], Acquisition("g", on_demand_usd_per_hour=2.0)))
    np.testing.assert_allclose(lv.rho[0], prep.points["rho"].to_numpy(float), rtol=1e-12, atol=0.0)


def test_cli_horizon_cost_rows_sum_to_their_total(tmp_path: Path) -> None:
    """Each period's row of the cost table sums to its "total USD": the terms not shown are an "other" column
    (fleet-horizon's shared rows were 6,000 USD short of their total: its two operations terms)."""
    inst = _cli_instance(tmp_path, SMALL)
    r = CliRunner().invoke(main, ["horizon", str(inst), "--architectures", "shared", "--no-baseline"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("period  ownership"))
    cols = lines[head].split()
    assert cols[-2:] == ["other", "total"] or cols[-3:] == ["other", "total", "USD"]
    rows = [line.split() for line in lines[head + 2:] if line[:1].strip().isdigit() or line.strip()[:1].isdigit()]
    rows = [row for row in rows if len(row) == len(cols) - 1]  # "total USD" is two words
    assert rows
    for row in rows:
        values = [float(v.replace(",", "")) for v in row[1:]]
        assert sum(values[:-1]) == pytest.approx(values[-1], abs=len(values))  # each cell rounded to the dollar
