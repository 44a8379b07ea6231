"""Plans over time with a ServeGen fleet's clients as services (``horizon.demand.clients``): demand by hand,
per-service pools in one MIP, schema and CLI."""

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
from pydantic import ValidationError

from planner.cli import main
from planner.horizon.demand import client_groups, client_windows, slots_from_windows, sum_windows
from planner.horizon.inputs import split_services
from planner.horizon.model import Acquisition, HorizonInputs
from planner.horizon.solve import solve_horizon
from planner.schema.horizon import DemandProfile, TopClients

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "tests" / "data" / "servegen_horizon_clients"  # SOURCE.md there has every figure below


def _slots_of(w: pd.DataFrame) -> pd.DataFrame:
    return slots_from_windows(w, DemandProfile(servegen_fleet="x"), 730.0, "t").slots.set_index("slot")


def test_fleet_sum_of_the_fixture() -> None:
    s = _slots_of(sum_windows(client_windows(CLIENTS)))
    assert s["peak_rate_per_s"].to_dict() == pytest.approx({"h00": 5.5, "h12": 8.0})
    assert s["mean_rate_per_s"].to_dict() == pytest.approx({"h00": 4.5, "h12": 5.0})
    # window 0: a (1, cv 1), b (4, cv 2), c (0.5, cv 3): c^2 = (1 + 16 + 4.5) / 5.5
    assert s.loc["h00", "interarrival_cv"] == pytest.approx(math.sqrt(21.5 / 5.5))
    assert s["hours_per_period"].tolist() == [365.0, 365.0]


def test_each_client_is_a_service_with_its_own_slots() -> None:
    groups, notes = client_groups(client_windows(CLIENTS), "each")
    assert list(groups) == ["chunk-b", "chunk-a", "chunk-c"]  # by mean rate 2.5, 2, 0.25; chunk-d has no traffic
    assert any("chunk-d" in n and "without traffic" in n for n in notes)
    peaks = {c: _slots_of(w)["peak_rate_per_s"].to_dict() for c, w in groups.items()}
    assert peaks == {"chunk-b": {"h00": 4.0, "h12": 6.0}, "chunk-a": {"h00": 3.0, "h12": 2.0}, "chunk-c": {"h00": 0.5, "h12": 0.0}}
    # chunk-c has no rows at hour 12: those windows are 0 req/s, so its slots have the same hours as everyone's
    assert _slots_of(groups["chunk-c"])["hours_per_period"].tolist() == [365.0, 365.0]
    assert _slots_of(groups["chunk-b"]).loc["h12", "interarrival_cv"] == pytest.approx(2.0)
    # the sum of the clients' slot peaks is at least the fleet's (they do not all peak in one window)
    assert sum(p["h00"] for p in peaks.values()) == pytest.approx(7.5) and 7.5 >= 5.5


def test_top_clients_and_the_others() -> None:
    groups, notes = client_groups(client_windows(CLIENTS), TopClients(top=1))
    assert list(groups) == ["chunk-b", "others"]
    others = _slots_of(groups["others"])
    assert others["peak_rate_per_s"].to_dict() == pytest.approx({"h00": 3.5, "h12": 2.0})
    assert others["mean_rate_per_s"].to_dict() == pytest.approx({"h00": 2.5, "h12": 2.0})
    assert others.loc["h00", "interarrival_cv"] == pytest.approx(math.sqrt((3 * 1 + 0.5 * 9) / 3.5))
    assert any("'others'" in n and "chunk-b" in n for n in notes)
    # more clients asked for than have traffic: every client its own service, no 'others'
    groups, _ = client_groups(client_windows(CLIENTS), TopClients(top=10))
    assert list(groups) == ["chunk-b", "chunk-a", "chunk-c"]


def test_clients_need_a_servegen_fleet() -> None:
    with pytest.raises(ValidationError, match="servegen_fleet"):
        DemandProfile(fleet_file="x.csv", clients="each")
    with pytest.raises(ValidationError):
        DemandProfile(servegen_fleet="x", clients={"top": 0})  # type: ignore[arg-type]
    assert DemandProfile(servegen_fleet="x", clients={"top": 3}).clients == TopClients(top=3)  # type: ignore[arg-type]


def _abs_slots(peaks: list[float]) -> pd.DataFrame:
    h = 730.0 / len(peaks)
    return pd.DataFrame([{"slot": f"s{i}", "hours_per_period": h, "peak_rate_per_s": p, "mean_rate_per_s": p, "interarrival_cv": 1.0}
                         for i, p in enumerate(peaks)])


def test_client_services_get_their_own_pools_in_one_mip() -> None:
    # The micro table (1 s of an instance per request, cap 0.5: 2 instances per req/s) copied into two
    # client-services. Slot 0: a 4.2 req/s -> ceil(8.4) = 9, b 6.2 -> 13; slot 1: a 10 -> 20, b 2.2 -> 5.
    # Own pools round per service: 22 and 25 devices (one pool for the sum would need 21 and 25).
    # Buying only at $1/device-hour: own 25 all month (18,250) + ops and licence $15 a device-month on the
    # devices in pools, pro-rated by hours: (22 x 365 + 25 x 365) / 730 x 15 = 352.5.
    slots = {"chat/a": _abs_slots([4.2, 10.0]), "chat/b": _abs_slots([6.2, 2.2])}
    tables = split_services(micro_tables(), "chat", slots)
    assert sorted(tables.demand["service"]) == ["chat/a", "chat/b"]
    agg = slots["chat/a"].copy()
    agg[["peak_rate_per_s", "mean_rate_per_s"]] += slots["chat/b"][["peak_rate_per_s", "mean_rate_per_s"]].to_numpy()
    acq = Acquisition("g", buy_usd_per_device_hour=1.0, purchase_usd=8760.0)
    inputs = HorizonInputs(slots=agg, absolute=True, growth=np.array([1.0]), months_per_period=1.0, acquisition={"g": acq},
                           service_slots=slots)
    a = solve_horizon(tables, inputs, ("shared",), baseline=False).architectures["shared"]
    assert a.status == "optimal"
    pools = a.pools.set_index(["slot", "services"])["instances"].to_dict()
    assert pools == {("s0", "chat/a"): 9, ("s0", "chat/b"): 13, ("s1", "chat/a"): 20, ("s1", "chat/b"): 5}
    assert a.schedule["owned"].tolist() == [25]
    assert a.total_usd == pytest.approx(18_250.0 + 352.5)
    # the slots table's demand multiplier is the whole demand's: (4.2 + 6.2) / (10 + 6.2) in slot 0
    sl = a.slots.set_index("slot")
    assert sl.loc["s0", "peak_multiplier"] == pytest.approx(10.4 / 16.2)


def _instance(tmp_path: Path, clients: object) -> Path:
    src = yaml.safe_load((ROOT / "instances" / "enterprise-chat.yaml").read_text())
    src["services"]["chat"]["traffic"]["trace"] = str(ROOT / "instances" / "traces" / "azure2023_conv_min00-20.csv")
    src["catalog"]["devices"] = ["h100-sxm"]
    src["catalog"]["tp_degrees"] = [2, 4]
    src["scenarios"] = {}
    src["horizon"] = {"periods": 2, "growth": {"monthly_rate": 0.1},
                      "demand": {"servegen_fleet": str(CLIENTS), "clients": clients},
                      "acquisition": {"h100-sxm": {"buy": {"source": "profile"}, "on_demand": {"source": "profile"}}}}
    p = tmp_path / "h.yaml"
    p.write_text(yaml.safe_dump(src))
    return p


def test_cli_top_clients_plan_per_service_pools(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["horizon", str(_instance(tmp_path, {"top": 1})), "--architectures", "shared", "--no-baseline",
                                  "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    pools = pd.DataFrame(doc["architectures"]["shared"]["pools"])
    assert set(pools["services"]) == {"chat/chunk-b", "chat/others"}
    assert any("'others'" in n for n in doc["notes"])
    r = CliRunner().invoke(main, ["horizon", str(_instance(tmp_path, "every")), "--architectures", "shared"])
    assert r.exit_code == 2 and "clients" in r.output
