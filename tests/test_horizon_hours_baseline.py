"""Horizon: ``costs.hours_per_month`` sets a period's hours and a bought device's hourly price (it was fixed at
730), and the owned-peak baseline is named for what it is, never shown as a negative saving (issue 24 item 5)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from planner.horizon.report import BASELINE_NAME, saving_cell, saving_text

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("hours_per_month", [730.0, 720.0])
def test_hours_per_month_sets_the_period_and_the_buy_price(hours_per_month: float) -> None:
    from planner.horizon.inputs import horizon_inputs
    from planner.instance import load_instance
    from planner.pricing import equipment_usd_per_device_hour

    resolved = load_instance(ROOT / "instances" / "fleet-horizon.yaml", {"costs.hours_per_month": hours_per_month})
    inputs = horizon_inputs(resolved)
    months = resolved.instance.horizon.months_per_period
    assert inputs.slots["hours_per_period"].sum() == pytest.approx(hours_per_month * months, rel=1e-9)
    for dev_id, acq in inputs.acquisition.items():
        if acq.buy_usd_per_device_hour is None:
            continue
        dev = resolved.devices[dev_id].model_copy(update={"purchase_usd": acq.purchase_usd})
        hz_buy = resolved.instance.horizon.acquisition[dev_id].buy
        c = resolved.instance.costs
        want = equipment_usd_per_device_hour(dev, "buy", hours_per_month, years=hz_buy.amortization_years or c.amortization_years,
                                             rate=hz_buy.cost_of_capital_rate if hz_buy.cost_of_capital_rate is not None else c.cost_of_capital_rate)
        assert acq.buy_usd_per_device_hour == pytest.approx(want, rel=1e-12)


def test_slots_given_by_hand_must_add_up_to_the_instances_month() -> None:
    from planner.errors import InputError
    from planner.horizon.demand import slot_profile
    from planner.schema.horizon import Horizon

    hz = Horizon.model_validate({
        "periods": 2, "months_per_period": 1, "growth": {"monthly_rate": 0.0},
        "demand": {"slots": [{"name": "day", "hours_per_period": 360, "peak_multiplier": 1.0},
                             {"name": "night", "hours_per_period": 360, "peak_multiplier": 0.5}]},
        "acquisition": {"h100-sxm": {"on_demand": {}}},
    })
    assert slot_profile(hz, ROOT, 720.0).slots["hours_per_period"].sum() == 720.0
    with pytest.raises(InputError, match=r"costs.hours_per_month \(730\)"):
        slot_profile(hz, ROOT, 730.0)


def _arch(total: float, baseline: float) -> SimpleNamespace:
    return SimpleNamespace(total_usd=total, baseline_usd=baseline)


def test_a_plan_dearer_than_the_baseline_is_never_called_a_saving() -> None:
    usd = lambda v: f"${v:,.0f}"  # noqa: E731
    dearer = saving_text(_arch(75_998_064.0, 73_500_000.0), usd)
    assert dearer is not None and "saves" not in dearer and "-" not in dearer
    assert dearer.startswith("costs $2,498,064 (3.4 %) more than") and "no saving" in dearer and BASELINE_NAME in dearer
    cheaper = saving_text(_arch(70_000_000.0, 73_500_000.0), usd)
    assert cheaper == f"saves $3,500,000 (4.8 %) against {BASELINE_NAME}, $73,500,000"
    assert saving_cell(-0.034) == "none (+3.4 % cost)" and saving_cell(0.048) == "4.8 %" and saving_cell(None) == "-"


def test_a_fleet_log_shorter_than_a_day_is_said_to_be() -> None:
    import pandas as pd

    from planner.horizon.demand import slots_from_windows
    from planner.schema.horizon import DemandProfile

    prof = DemandProfile(fleet_file="x.csv")
    one = pd.DataFrame({"window_start_s": [0.0], "rate_rps": [3.0], "cv": [1.2]})
    short = slots_from_windows(one, prof, 730.0, "x.csv")
    assert any(n.startswith("warning: the log covers 0.2 hours, less than a day") for n in short.notes), short.notes
    day = pd.DataFrame({"window_start_s": [600.0 * i for i in range(144)], "rate_rps": [3.0] * 144, "cv": [1.2] * 144})
    assert not any("less than a day" in n for n in slots_from_windows(day, prof, 730.0, "x.csv").notes)
