"""Tool phase end to end: the agentic example instance, bad tool profiles (exit 2), Poisson tail."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from planner.agents.economics import poisson_quantile, tail_factor
from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
AGENTIC = ROOT / "instances" / "agentic-assistant.yaml"


def test_agentic_example_plans_cpu_pool_kv_tier_and_gpu_pools(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["solve", str(AGENTIC), "--architectures", "disaggregated", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = res.output
    for text in ("tool phase", "agent/WebSearch", "break-even wait", "CPU pool", "KV tier", "cpu_pool", "decode:", "prefill:"):
        assert text in out
    chk = CliRunner().invoke(main, ["check", str(tmp_path / "plan.json")])
    assert chk.exit_code == 0, chk.output
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "### Tool phase" in md


def _agent_instance(tmp_path: Path, tools: dict, overrides: dict | None = None) -> Path:
    data = {
        "name": "bad-tools",
        "services": {"a": {"model": "llama-3.1-8b", "slo": {"ttft": {"target_ms": 2000}, "tpot": {"target_ms": 50}},
                           "traffic": {"rate_per_s": 5, "lengths": [{"input_tokens": 2000, "output_tokens": 200, "weight": 1.0}]},
                           "tools": tools, **({"tool_overrides": overrides} if overrides else {})}},
        "catalog": {"devices": ["h100-sxm"], "tp_degrees": [1]},
        "costs": {"electricity_usd_per_kwh": 0.1, "pue": 1.3, "ops_usd_per_pool_month": 0, "ops_usd_per_device_type_month": 0,
                  "network": {"nic_usd_per_device_month": 0}},
        "options": {"architectures": ["shared"]},
    }
    p = tmp_path / "inst.yaml"
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


GOOD = {"calls_per_request": 0.5, "latency": {"mean_ms": 900, "p50_ms": 500, "p90_ms": 2000, "p99_ms": 5000}}


@pytest.mark.parametrize("tools, overrides, needle", [
    ({"search": {**GOOD, "latency": {**GOOD["latency"], "p50_ms": -5}}}, None, "p50_ms"),
    ({"search": {**GOOD, "latency": {**GOOD["latency"], "p90_ms": 100}}}, None, "ordered"),
    ({"search": GOOD}, {"websearch": {"cpu_seconds_per_call": 0.1, "source": "x"}}, "referenced but not defined"),
    ({"search": {**GOOD, "cpu_seconds_per_call": 0.1}}, None, "catalog.cpu_servers"),
])
def test_bad_tool_profiles_are_clear_input_errors(tmp_path: Path, tools: dict, overrides: dict | None, needle: str) -> None:
    res = CliRunner().invoke(main, ["solve", str(_agent_instance(tmp_path, tools, overrides))])
    assert res.exit_code == 2, res.output
    assert needle in res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "Traceback" not in res.output


def test_poisson_quantile_exact_small_and_normal_large() -> None:
    # P(N <= 4 | mean 2) = 0.947, P(N <= 5) = 0.983 -> the 0.95 quantile is 5.
    assert poisson_quantile(0.95, 2.0) == 5.0
    assert poisson_quantile(0.5, 0.0) == 0.0
    m = 1e6  # normal approximation: m + 2.326 sqrt(m) (+ tiny correction)
    assert poisson_quantile(0.99, m) == pytest.approx(m + 2.3263 * 1e3, abs=3)
    assert tail_factor(None, 10.0) == 1.0 and tail_factor(0.99, 100.0) == pytest.approx(124 / 100)
    assert math.isclose(tail_factor(0.99, 1e8), 1.0, rel_tol=1e-3)


def test_report_states_every_tool_phase_item_and_that_accelerators_would_not_help(tmp_path: Path) -> None:
    # 0.5 calls per LLM call x 60 s mean wait = 30 s of tool wait per LLM call, against ~2 s of LLM time (8B, 200 output tokens).
    slow = {"search": {"calls_per_request": 0.5, "timeout_share": 0.02, "retry_share": 0.05,
                       "latency": {"mean_ms": 60000, "p50_ms": 40000, "p90_ms": 120000, "p99_ms": 200000}}}
    res = CliRunner().invoke(main, ["solve", str(_agent_instance(tmp_path, slow)), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    for text, where in ((res.output, "terminal"), (md, "report.md")):
        # latency quantiles, timeout / retry share, KV per session, sessions in wait, reload time, policy, alternatives' costs
        for needle in ("a/search", "40,000", "120,000", "200,000", "2%", "5%", "KV", "sessions in wait" if where == "report.md" else "in wait",
                       "reload ms", "hold USD/month", "offload USD/month", "recompute USD/month", "break-even wait",
                       "tool waiting dominates", "More accelerators would not help", "faster tools", "in parallel", "caching tool results"):
            assert needle in text, f"{needle!r} missing from the {where}"
    # wait with retries = 60 s x 1.05 = 63 s; 0.5 calls per LLM call -> 31.5 s of tool wait per LLM call
    assert "31.5 s of tool wait per LLM call" in md
