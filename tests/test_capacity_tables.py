"""Capacity tables from an instance: contract columns, feasibility masks, measured capacity files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from planner.capacity import (
    MEASURED_COLUMNS,
    build_capacity_tables,
    equipment_usd_per_device_hour,
    measured_capacity_frame,
    read_measured_capacity,
)
from planner.cli import main
from planner.errors import InputError
from planner.instance import load_instance
from planner.schema.capacity import (
    CONFIG_COLUMNS,
    CONFIG_PARALLELISM_COLUMN,
    DEMAND_COLUMNS,
    POINT_COLUMNS,
    POINT_KV_CAPACITY_COLUMN,
    POINT_OPTIONAL_COLUMNS,
    TTFT_MIX_COLUMN,
    CapacityTables,
)

INSTANCE = str(Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml")


@pytest.fixture(scope="module")
def tables() -> CapacityTables:
    return build_capacity_tables(load_instance(INSTANCE))


def test_contract_columns_and_shape(tables: CapacityTables) -> None:
    tables.check_columns()
    assert set(DEMAND_COLUMNS) <= set(tables.demand.columns)
    from planner.perf.speculative import SPEC_POINT_COLUMNS

    assert list(tables.points.columns) == [*POINT_COLUMNS, *POINT_OPTIONAL_COLUMNS, POINT_KV_CAPACITY_COLUMN, *SPEC_POINT_COLUMNS,
                                           TTFT_MIX_COLUMN] and list(tables.configs.columns) == [*CONFIG_COLUMNS, CONFIG_PARALLELISM_COLUMN]
    # one point per (demand row, config, role); configs = devices x tp degrees within the scale-up domain
    assert len(tables.points) == len(tables.demand) * len(tables.configs) * 3
    assert not tables.points.duplicated(["service", "bucket", "role", "config"]).any()
    assert tables.demand["weight"].sum() == pytest.approx(1.0)
    # bucket rates split the service rate by weight; the peak is never below the mean
    assert (tables.demand["rate_peak_per_s"] >= tables.demand["rate_mean_per_s"] - 1e-12).all()
    ok = tables.points[tables.points["feasible"]]
    assert (ok["reason"] == "").all() and (ok["instance_seconds_per_request"] > 0).all()
    assert (tables.points.loc[~tables.points["feasible"], "reason"] != "").all()
    assert (tables.points.loc[tables.points["role"] != "prefill", "kv_transfer_bytes_per_request"] == 0).all()


def test_70b_bf16_does_not_fit_one_80gb_device() -> None:
    t = build_capacity_tables(load_instance(INSTANCE, {"services.chat.weight_precision": "bf16"}))
    p = t.points[t.points["config"] == "h100-sxm/tp1"]
    assert len(p) and not p["feasible"].any()
    assert p["reason"].str.contains("do not fit").all() and p["reason"].str.contains("80").all()
    # 141 GB of bf16 weights: the 192 GB MI300X holds them on one device
    mi = t.points[(t.points["config"] == "mi300x/tp1") & (t.points["role"] == "prefill")]
    assert mi["feasible"].any()


def test_tpot_target_below_the_fastest_step_is_infeasible_with_a_reason() -> None:
    t = build_capacity_tables(load_instance(INSTANCE, {"services.chat.slo.tpot.target_ms": 1}))
    steps = t.points[t.points["role"].isin(["decode", "unified"])]
    assert not steps["feasible"].any()
    fits = steps[~steps["reason"].str.contains("do not fit")]
    assert len(fits) and fits["reason"].str.contains(r"TPOT [\d.]+ ms at batch 1 > target 1(?:\.0)? ms", regex=True).all()
    # prefill is not bound by TPOT
    assert t.points.loc[t.points["role"] == "prefill", "feasible"].any()


def test_rental_and_annuity_prices() -> None:
    from planner.catalog import load_catalog

    dev = next(iter(load_catalog().devices.values()))
    if dev.purchase_usd is not None:
        # straight line at r = 0; annuity P r / (1 - (1 + r)^-Y) per year, over 12 x 730 hours
        flat = equipment_usd_per_device_hour(dev, "buy", 730.0, years=4, rate=0.0)
        assert flat == pytest.approx(dev.purchase_usd / 4 / (12 * 730))
        ann = equipment_usd_per_device_hour(dev, "buy", 730.0, years=4, rate=0.08)
        assert ann == pytest.approx(dev.purchase_usd * 0.08 / (1 - 1.08 ** -4) / (12 * 730))
        assert ann > flat


def test_measured_file_round_trips(tables: CapacityTables, tmp_path: Path) -> None:
    frame = measured_capacity_frame(tables)
    assert list(frame.columns) == list(MEASURED_COLUMNS) and len(frame) == int(tables.points["feasible"].sum())
    f = tmp_path / "measured.csv"
    frame.to_csv(f, index=False)
    back = read_measured_capacity(f, tables)
    m = back.points[back.points["source"] == "measured:measured.csv"]
    assert len(m) == len(frame)
    assert len(back.points) == len(tables.points)  # replaced, not added
    key = ["service", "bucket", "role", "config"]
    a = tables.points[tables.points["feasible"]].set_index(key).sort_index()
    b = m.set_index(key).sort_index()
    assert (a.index == b.index).all()
    for col in ("instance_seconds_per_request", "energy_j_per_request", "ttft_ms", "tpot_ms", "kv_transfer_bytes_per_request"):
        np.testing.assert_allclose(b[col].to_numpy(float), a[col].to_numpy(float), rtol=1e-9, err_msg=col)
    assert (b["max_batch"].to_numpy(int) == a["max_batch"].to_numpy(int)).all()
    assert (b["utilization_cap"] == 1.0).all() and b["feasible"].all()


def test_measured_latency_above_target_marks_the_point_infeasible(tables: CapacityTables, tmp_path: Path) -> None:
    b = tables.demand["bucket"].iat[0]
    f = tmp_path / "m.csv"
    f.write_text(f"service,bucket,device,tp,max_rate_per_s,ttft_ms,tpot_ms\nchat,{b},h100-sxm,2,1.0,2500,40\n")
    p = read_measured_capacity(f, tables).points
    row = p[(p["bucket"] == b) & (p["config"] == "h100-sxm/tp2") & (p["role"] == "unified")]
    assert len(row) == 1 and not bool(row["feasible"].iat[0]) and "2500 ms > target 2000 ms" in row["reason"].iat[0]
    # energy defaults to busy power x tp / rate: 490 W x 2 / 1 req/s
    assert row["energy_j_per_request"].iat[0] == pytest.approx(2 * float(tables.configs.set_index("config").at["h100-sxm/tp2", "busy_power_w"]))


@pytest.mark.parametrize(("content", "message"), [
    ("service,bucket,device,tp\nchat,b,h100-sxm,1\n", "missing columns: max_rate_per_s"),
    ("service,bucket,device,tp,max_rate_per_s\nchat,{b},h100-sxm,1,0\n", "max_rate_per_s must be > 0"),
    ("service,bucket,device,tp,max_rate_per_s\nchat,{b},tpu-v9,1,1\n", "device 'tpu-v9' is not a candidate"),
    ("service,bucket,device,tp,max_rate_per_s,role\nchat,{b},h100-sxm,1,1,verify\n", "unknown role 'verify'"),
    ("service,bucket,device,tp,max_rate_per_s\ncode,{b},h100-sxm,1,1\n", "unknown (service, bucket)"),
])
def test_bad_measured_files_exit_2(tables: CapacityTables, tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(content.format(b=tables.demand["bucket"].iat[0]))
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_measured_capacity(f, tables)
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--capacity", str(f)])
    assert r.exit_code == 2 and message in r.output and "bad.csv" in r.output and "Traceback" not in r.output


def test_missing_measured_file_exits_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--capacity", str(tmp_path / "none.csv")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_measured_rows_are_not_rechecked_by_the_latency_loop(tables: CapacityTables) -> None:
    from planner.optimize import SolveSettings, solve_tables

    frame = measured_capacity_frame(tables)
    keep = frame[(frame["role"] == "unified") & (frame["device"] == "h100-sxm") & (frame["tp"] == 2)]
    pts = tables.points.copy()
    pts["utilization_cap"] = np.nan
    t2 = CapacityTables(demand=tables.demand, points=pts, configs=tables.configs, costs=tables.costs)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "m.csv"
        keep.to_csv(f, index=False)
        t3 = read_measured_capacity(f, t2)
    only = t3.points[t3.points["source"].str.startswith("measured")]
    t4 = CapacityTables(demand=t3.demand, points=only.reset_index(drop=True), configs=t3.configs, costs=t3.costs)
    plan = solve_tables(t4, SolveSettings(architectures=("shared",))).result.architectures["shared"]
    assert plan.feasible and plan.solver.rounds == 1
    assert all(p.utilization_cap == pytest.approx(1.0) for p in plan.pools)


def test_demand_cv_is_the_within_window_cv_of_the_peak_window(tables: CapacityTables) -> None:
    """The plan sizes for the busiest 60 s, so the demand carries the CV inside 60 s windows
    (Azure conversation: 1.02); the whole-log CV (1.06) is kept next to it."""
    from planner.capacity import peak_interarrival_cv
    from planner.schema.workload import ArrivalStats

    d = tables.demand
    assert np.allclose(d["interarrival_cv"].round(2), 1.02) and np.allclose(d["interarrival_cv_whole_log"].round(2), 1.06)
    a = ArrivalStats(requests=10, duration_s=600.0, rate_mean_per_s=1.0, interarrival_cv=14.65,
                     interarrival_cv_within={"1s": 1.34, "60s": 4.72}, timestamps="naive")
    assert peak_interarrival_cv(a, "60s")[0] == 4.72 and "whole log 14.7" in peak_interarrival_cv(a, "60s")[1]
    assert peak_interarrival_cv(a, "1s")[0] == 1.34
    assert peak_interarrival_cv(a, "60s", 2.0) == (2.0, "")  # traffic.interarrival_cv wins
    cv, note = peak_interarrival_cv(a, "600s")  # not measured at that window: the whole-log CV, said so
    assert cv == 14.65 and "whole-log" in note


def test_unified_points_carry_their_prefill_lane(tables: CapacityTables) -> None:
    """Unified rows carry the lane of planner.perf.points (chunk, new tokens, lane time = n/q x
    step); other roles leave the lane columns empty."""
    p = tables.points
    uni = p[(p["role"] == "unified") & p["feasible"]]
    assert len(uni) > 0
    assert np.allclose(uni["lane_service_ms"], uni["prefill_tokens"] / uni["prefill_chunk_tokens"] * uni["step_ms"], rtol=1e-9)
    # per-request TPOT lies between the decode-only step and the chunk step (DESIGN §3)
    assert ((uni["tpot_ms"] <= uni["step_ms"] + 1e-9) & (uni["tpot_ms"] >= uni["decode_only_step_ms"] - 1e-9)).all()
    assert (uni["decode_only_step_ms"] < uni["step_ms"]).all()
    assert ((uni["mean_step_ms"] >= uni["decode_only_step_ms"]) & (uni["mean_step_ms"] <= uni["step_ms"] + 1e-9)).all()
    assert (uni["lane_wait_ms"] < uni["ttft_ms"]).all()
    assert p.loc[p["role"] != "unified", "prefill_chunk_tokens"].isna().all()
