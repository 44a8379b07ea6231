"""`planner solve` and `planner check`: exit codes, outputs, diagnosis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

INSTANCE = str(Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml")


@pytest.fixture(scope="module")
def solved(solved_example) -> tuple[Path, dict]:
    """``planner solve enterprise-chat.yaml --json --out DIR`` (the session's solve, tests/conftest.py)."""
    s = solved_example("enterprise-chat")
    assert s.exit_code == 0, s.output
    return s.out_dir, s.json()


def test_solve_json_has_verdict_costs_and_solver(solved: tuple[Path, dict]) -> None:
    out, data = solved
    assert data["verdict"]["winner"] in ("shared", "disaggregated")
    assert data["verdict"]["reasons"] and isinstance(data["verdict"]["margin_usd_per_month"], float)
    for arch in ("shared", "disaggregated"):
        plan = data["architectures"][arch]
        assert plan["pools"] and plan["solver"]["status"] == "optimal"
        assert plan["solver"]["gap"] is not None and plan["solver"]["time_s"] >= 0
        terms = {k: v for k, v in plan["costs"].items() if k not in ("total_usd_per_month", "idle_capacity_usd_per_month")}
        assert sum(terms.values()) == pytest.approx(plan["costs"]["total_usd_per_month"])
    assert {p.name for p in out.iterdir()} >= {"plan.json", "costs.csv", "pools.csv", "report.md"}


def test_check_accepts_the_plan_and_rejects_tampering(solved: tuple[Path, dict], tmp_path: Path) -> None:
    out, data = solved
    r = CliRunner().invoke(main, ["check", str(out / "plan.json")])
    assert r.exit_code == 0, r.output
    assert "valid" in r.output
    winner = data["verdict"]["winner"]
    for pool in data["architectures"][winner]["pools"]:
        pool["instances"] = 0
        pool["devices"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["check", str(bad)])
    assert r.exit_code == 1
    assert f"{winner}: load[" in r.output


def test_terminal_summary_lists_pools_costs_and_status() -> None:
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--architectures", "shared"])
    assert r.exit_code == 0, r.output
    for word in ("VERDICT", "unified:", "util_peak", "TTFT pred", "equipment", "USD per 1M tokens", "Wh per 1k tokens", "solver optimal"):
        assert word in r.output


def test_infeasible_tpot_is_diagnosed_with_exit_3() -> None:
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--set", "services.chat.slo.tpot.target_ms=1"])
    assert r.exit_code == 3
    assert "chat/" in r.output and "slo_tpot" in r.output and "raise the TPOT target" in r.output


def test_a_lane_bound_shared_pool_is_diagnosed_as_such(tmp_path: Path, latency_bench) -> None:  # noqa: ANN001
    """8,000-token prompts with 5-token outputs on one A100 (the latency grid's instance, benchmarks/
    bench_latency_at_load.py, shared only): the prompt prefills in ~0.7 s, but at any full batch the outputs free a slot
    so often that the chunked-prefill lane is ~94 % busy and its wait breaks the 20 s TTFT target. The diagnosis says
    that (not "the fastest prefill takes 26,566 ms", as before) and names the way out."""
    f = tmp_path / "lane-bound.yaml"
    lengths = "        - {input_tokens: 8000, output_tokens: 5, weight: 1.0}"
    f.write_text(latency_bench.INSTANCE.replace("LENGTHS", lengths).replace("ARCH", "shared"), encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(f), "--no-cache"])
    assert r.exit_code == 3, r.output
    assert "slo_ttft" in r.output and "fastest prefill" not in r.output
    assert "the prompt's own iterations take" in r.output and "lane, not the slots, is full" in r.output
    assert "plan this service disaggregated" in r.output


def test_bad_arguments_exit_2() -> None:
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--architectures", "mesh"])
    assert r.exit_code == 2 and "unknown architecture" in r.output
    r = CliRunner().invoke(main, ["check", "/nonexistent/plan.json"])
    assert r.exit_code == 2


def test_measured_capacity_file_replaces_points(tmp_path: Path) -> None:
    from planner.capacity import build_capacity_tables, read_measured_capacity
    from planner.instance import load_instance

    tables = build_capacity_tables(load_instance(INSTANCE))
    rows = ["service,bucket,device,tp,max_rate_per_s,ttft_ms,tpot_ms"]
    for b in tables.demand["bucket"]:
        rows.append(f"chat,{b},h100-sxm,2,0.5,900,40")
    f = tmp_path / "measured.csv"
    f.write_text("\n".join(rows) + "\n")
    t2 = read_measured_capacity(f, tables)
    m = t2.points[t2.points["source"] == "measured:measured.csv"]
    assert len(m) == len(tables.demand)
    assert (m["instance_seconds_per_request"] == 2.0).all() and (m["utilization_cap"] == 1.0).all()
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--architectures", "shared", "--capacity", str(f), "--json"])
    assert r.exit_code == 0, r.output
    f.write_text("service,bucket,device,tp,max_rate_per_s\nchat,nope,h100-sxm,2,1\n")
    r = CliRunner().invoke(main, ["solve", INSTANCE, "--capacity", str(f)])
    assert r.exit_code == 2 and "unknown (service, bucket)" in r.output


def test_html_option_writes_a_self_contained_report(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["solve", INSTANCE, "--html", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert "<svg" in text and "wins" in text
    assert f"wrote {out}" in res.output


def test_robust_option_plans_devices_once_for_the_scenarios() -> None:
    res = CliRunner().invoke(main, ["solve", INSTANCE, "--robust", "--robust-scenario", "base", "--robust-scenario", "growth-2x", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data, "robust JSON is empty"
    text = json.dumps(data)
    assert "growth-2x" in text and "base" in text


def test_robust_only_options_are_checked() -> None:
    res = CliRunner().invoke(main, ["solve", INSTANCE, "--robust-scenario", "base"])
    assert res.exit_code == 2
    assert "--robust-scenario" in res.output and "needs --robust" in res.output
    res = CliRunner().invoke(main, ["solve", INSTANCE, "--robust", "--html", "x.html"])
    assert res.exit_code == 2 and "not supported with --robust" in res.output


def test_a_set_path_a_scenario_also_sets_is_noted(tmp_path: Path) -> None:
    """`--scenario growth-2x --set services.chat.traffic.rate_multiplier=0.5` plans at 0.5 (the --set value replaces
    the scenario's 2.0); the plan says so in a note instead of only naming the scenario (issue 24 item 4)."""
    from planner.overrides import replaced_by_set

    assert replaced_by_set("g", {"a.b": 2.0, "c": 1}, {"a.b": 0.5, "d": 3}) == [
        "--set a.b=0.5 replaces scenario g's a.b: 2.0 (the scenario's other overrides apply)"]
    assert replaced_by_set("g", {"a.b": 2.0}, {"a.b": 2.0}) == []
    example = Path(__file__).resolve().parents[1] / "instances" / "enterprise-chat.yaml"
    r = CliRunner().invoke(main, ["solve", str(example), "--scenario", "growth-2x", "--set", "services.chat.traffic.rate_multiplier=0.5",
                                  "--confidence", "off", "--json", "-q"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any(n.startswith("--set services.chat.traffic.rate_multiplier=0.5 replaces scenario growth-2x's") for n in notes)


def test_a_set_multiplier_the_instance_writes_is_noted_as_replaced() -> None:
    """`--set services.vqa.traffic.rate_multiplier=1.1` on multimodal-image (which writes `rate_multiplier: 20`) plans
    1.1x the log's rate, 0.055x the instance's traffic; read as "traffic x1.1" that is another deployment, so `solve`,
    the studies and `horizon` say what the value replaced and what to give for a factor."""
    from planner.overrides import multipliers_replaced

    raw = {"services": {"a": {"traffic": {"rate_multiplier": 20, "rate_per_s": 3}}}, "costs": {"pue": 1.5}}
    assert multipliers_replaced(raw, {"services.a.traffic.rate_multiplier": [1.1]}) == [
        "--set services.a.traffic.rate_multiplier=1.1 replaces the instance's 20, it does not multiply it (x0.055 of the "
        "instance's value); for x1.1 of it give services.a.traffic.rate_multiplier=22"]
    assert multipliers_replaced(raw, {"services.a.traffic.rate_multiplier": [10, 40]}) == [
        "--set services.a.traffic.rate_multiplier=10,40 replaces the instance's 20, it does not multiply it (x0.5 to x2 of "
        "the instance's value); for factors on it give their products with 20"]
    # the instance's own value, a field it does not write, a field that is not a multiplier: nothing to say
    assert multipliers_replaced(raw, {"services.a.traffic.rate_multiplier": [20]}) == []
    assert multipliers_replaced({"services": {"a": {"traffic": {}}}}, {"services.a.traffic.rate_multiplier": [2]}) == []
    assert multipliers_replaced(raw, {"services.a.traffic.rate_per_s": [6], "costs.pue": [1.2]}) == []
    example = str(Path(__file__).resolve().parent.parent / "instances" / "multimodal-image.yaml")
    r = CliRunner().invoke(main, ["solve", example, "--set", "services.vqa.traffic.rate_multiplier=1", "--confidence", "off",
                                  "--architectures", "shared", "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert [n for n in json.loads(r.stdout)["notes"] if "rate_multiplier" in n] == [
        "--set services.vqa.traffic.rate_multiplier=1 replaces the instance's 20, it does not multiply it (x0.05 of the "
        "instance's value); for x1 of it give services.vqa.traffic.rate_multiplier=20"]
    r = CliRunner().invoke(main, ["sweep", example, "--set", "services.vqa.traffic.rate_multiplier=1,2"])
    assert r.exit_code == 0, r.output
    assert ("note: --set services.vqa.traffic.rate_multiplier=1,2 replaces the instance's 20, it does not multiply it "
            "(x0.05 to x0.1 of the instance's value)") in r.output
    r = CliRunner().invoke(main, ["horizon", example, "--set", "services.vqa.traffic.rate_multiplier=2"])
    assert r.exit_code == 2 and "no horizon section" in r.output  # the note comes first, from the instance as read
    assert "note: --set services.vqa.traffic.rate_multiplier=2 replaces the instance's 20" in r.output
