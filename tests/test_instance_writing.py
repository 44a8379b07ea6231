"""Writing an instance: a log scaled to a target rate, cost defaults that say where they come from,
the default weight precision noted, limits and small pools explained in plain words."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.capacity import build_capacity_tables
from planner.instance import load_instance
from planner.optimize.verdict import plain_limit
from planner.report.explain import pool_explanations
from planner.schema.instance import Costs, Service
from planner.schema.plan import ArchitecturePlan, PoolPlan, RoutingShare, SolverInfo
from planner.workload import service_profile

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "instances" / "traces" / "azure2023_conv_min00-20.csv"


def _instance(tmp_path: Path, traffic: dict, **extra: object) -> Path:
    data = {"name": "t", "services": {"chat": {"model": "llama-3.1-8b", "slo": {"ttft": {"quantile": 0.99, "target_ms": 2000},
                                                                              "tpot": {"quantile": 0.9, "target_ms": 50}},
                                               "traffic": traffic}},
            "catalog": {"devices": ["h100-sxm"], "tp_degrees": [1]}, **extra}
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_trace_scaled_to_a_target_rate_keeps_its_shape(tmp_path: Path) -> None:
    plain = service_profile(load_instance(_instance(tmp_path, {"trace": str(TRACE)})), "chat")
    scaled = service_profile(load_instance(_instance(tmp_path, {"trace": str(TRACE), "rate_per_s": 20.0})), "chat")
    k = 20.0 / plain.arrivals.rate_mean_per_s
    assert scaled.arrivals.rate_mean_per_s == pytest.approx(20.0)
    for w, v in plain.arrivals.rate_peak_per_s.items():
        assert scaled.arrivals.rate_peak_per_s[w] == pytest.approx(v * k)
    assert scaled.arrivals.interarrival_cv == pytest.approx(plain.arrivals.interarrival_cv)
    assert [b.input_tokens for b in scaled.buckets] == [b.input_tokens for b in plain.buckets]
    assert any("log scaled to traffic.rate_per_s = 20/s" in n for n in scaled.arrivals.notes)


def test_lengths_with_a_trace_are_refused(tmp_path: Path) -> None:
    from planner.errors import InputError

    with pytest.raises(InputError, match="lengths"):
        load_instance(_instance(tmp_path, {"trace": str(TRACE), "rate_per_s": 2.0,
                                           "lengths": [{"input_tokens": 10, "output_tokens": 10, "weight": 1.0}]}))


def test_cost_defaults_are_sourced_and_noted(tmp_path: Path) -> None:
    c = Costs()
    assert (c.electricity_usd_per_kwh, c.pue, c.ops_usd_per_pool_month, c.ops_usd_per_device_type_month,
            c.network.nic_usd_per_device_month) == (0.0806, 1.54, 1500.0, 3000.0, 40.0)
    from planner.schema.common import json_schema

    props = json_schema(Costs)["properties"]  # the field docstrings, as `planner schema` publishes them
    for name in ("electricity_usd_per_kwh", "pue", "ops_usd_per_pool_month", "ops_usd_per_device_type_month"):
        doc = props[name].get("description", "")
        assert "Default" in doc and any(w in doc for w in ("EIA", "Uptime", "assumption")), name
    tables = build_capacity_tables(load_instance(_instance(tmp_path, {"trace": str(TRACE)})))
    notes = "\n".join(tables.meta["notes"])  # type: ignore[arg-type]
    for key in ("costs.electricity_usd_per_kwh", "costs.pue", "costs.ops_usd_per_pool_month", "costs.ops_usd_per_device_type_month",
                "costs.network.nic_usd_per_device_month", "services.chat.weight_precision not given: bf16"):
        assert key in notes
    given = build_capacity_tables(load_instance(_instance(tmp_path, {"trace": str(TRACE)}, costs={"pue": 1.2})))
    assert not any(n.startswith("costs.pue") for n in given.meta["notes"])  # type: ignore[union-attr]
    assert "bf16" in json_schema(Service)["properties"]["weight_precision"].get("description", "")


def test_limits_in_plain_words() -> None:
    assert plain_limit("types_max", "device_types", "a mix of device types would cost 10 USD/month less") == (
        "a shared plan uses one device type only (options.shared_single_device_type): a mix of device types would cost 10 USD/month less")
    assert plain_limit("load[unified:h100-sxm/tp2:llama-3.1-70b@fp8]", "load").startswith("the h100-sxm/tp2 unified pool is exactly as full")
    assert "KV-cache memory" in plain_limit("kv[decode:mi300x/tp1:m]", "kv")


def _pool(name: str, instances: int, tp: int, util: float, cost: float, redundancy: int = 0) -> PoolPlan:
    role, config, model = name.split(":")
    return PoolPlan(name=name, role=role, device=config.split("/")[0], tp=tp, config=config, model=model, instances=instances,
                    devices=instances * tp, redundancy=redundancy, busy_instances_mean=util * instances, busy_instances_peak=util * instances,
                    utilization_mean=util, utilization_peak=util, utilization_cap=0.9, cost_usd_per_month=cost)


def _share(pool: str, share: float) -> RoutingShare:
    return RoutingShare(service="s", bucket="b0", role="unified", config=pool.split(":")[1], pool=pool, share=share,
                        rate_peak_per_s=share, rate_mean_per_s=share)


def test_small_pools_are_explained() -> None:
    big, small = "unified:h200-sxm/tp4:m", "unified:h200-sxm/tp2:m"
    plan = ArchitecturePlan(architecture="shared", feasible=True, solver=SolverInfo(status="optimal"), pools=[_pool(big, 43, 4, 0.5, 43 * 6843.0), _pool(small, 1, 2, 0.03, 4876.0)],
                            routing=[_share(big, 0.999), _share(small, 0.001)])
    (why,) = pool_explanations(plan)
    assert "top-up pool" in why and "0.1% of s/b0" in why and "$6,843/month" in why
    lone = ArchitecturePlan(architecture="shared", feasible=True, solver=SolverInfo(status="optimal"), pools=[_pool(small, 2, 2, 0.03, 9752.0, redundancy=1)],
                            routing=[_share(small, 1.0)])
    (why,) = pool_explanations(lone)
    assert "minimum pool" in why and "N+1" in why


def test_saturated_pools_state_their_headroom() -> None:
    """A pool at 99.9 % of its capacity at peak gets one sentence with its headroom (1/0.999 - 1 = 0.1 %); one
    at 50 % gets none (planner.report.explain, HIGH_UTILIZATION)."""
    hot, calm = "prefill:h200-sxm/tp8:m", "decode:h200-sxm/tp8:m"
    plan = ArchitecturePlan(architecture="disaggregated", feasible=True, solver=SolverInfo(status="optimal"),
                            pools=[_pool(hot, 2, 8, 0.999, 2 * 50000.0), _pool(calm, 3, 8, 0.5, 3 * 50000.0)],
                            routing=[_share(hot, 1.0), _share(calm, 1.0)])
    (why,) = pool_explanations(plan)
    assert why.startswith(hot) and "99.9% of its capacity at the forecast peak" in why and "traffic 0.1% above the forecast saturates it" in why
    assert "options.max_utilization" in why
    assert pool_explanations(plan.model_copy(update={"pools": [_pool(hot, 2, 8, 0.94, 1.0), _pool(calm, 3, 8, 0.5, 1.0)]})) == []


def test_per_device_comparison_names_the_best_and_why_others_lost() -> None:
    from click.testing import CliRunner

    from planner.cli import main

    minimal = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
    r = CliRunner().invoke(main, ["solve", str(minimal), "--compare-devices", "--json"])
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(r.stdout)
    rows = data["per_device"]
    assert {row["device"] for row in rows} == {"h100-sxm", "l40s"}
    first = rows[0]
    assert first["held_back"] == "the best plan" and first["more_than_best_usd_per_month"] == pytest.approx(0.0, abs=0.01)
    for row in rows[1:]:
        assert row["total_usd_per_month"] is None or row["total_usd_per_month"] >= first["total_usd_per_month"]
        assert row["held_back"].startswith(("pays more for", "no feasible plan", "slightly dearer"))


def test_per_device_solves_on_two_cores_give_the_one_process_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """device_comparison solves the devices alternately here and in a forked child: the rows of one process, and
    the progress callback told of every device (the child's on arrival)."""
    import planner.forked
    from planner.instance import load_instance
    from planner.studies.devices import device_comparison
    from planner.studies.source import TableSource

    source = TableSource.from_instance(load_instance(ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml", {}))
    ticks: list[int] = []
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 2)
    two = device_comparison(source, progress=ticks.append)
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 1)
    one = device_comparison(source)
    import pandas as pd

    pd.testing.assert_frame_equal(two, one)
    assert sum(ticks) == len(two) == 2
