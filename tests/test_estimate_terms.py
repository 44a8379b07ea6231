"""`planner estimate` names the engine terms and the benchmark-harness terms it applies, separately, and
splits TTFT into them (issue 25 item 8)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.perf.estimate import ENGINE_TERMS, HARNESS_TERMS, estimate_closed_loop


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "vllm"])
def test_ttft_splits_into_engine_and_harness_terms(engine: str) -> None:
    cat = load_catalog()
    r = estimate_closed_loop(cat.models["llama-3.1-8b"], cat.devices["h100-sxm"], 1, precision="bf16", kv_precision="bf16",
                             isl=1000, osl=200, concurrency=8, engine=engine)
    comp = r["ttft_components_ms"]
    assert sum(comp.values()) == pytest.approx(r["ttft_ms"], rel=1e-9)
    assert comp["engine_prefill"] > 0 and comp["harness_ttft_overhead"] == r["harness_terms"]["ttft_overhead_ms"]
    assert r["ttft_without_harness_ms"] == pytest.approx(comp["engine_prefill"] + comp["engine_closed_loop_wait"])
    assert r["ttft_without_harness_ms"] <= r["ttft_ms"]
    assert set(ENGINE_TERMS) <= set(r["engine_terms"]) and set(HARNESS_TERMS) <= set(r["harness_terms"])
    assert not set(ENGINE_TERMS) & set(HARNESS_TERMS)
    fitted = r["harness_terms"]["fitted_on_harnesses"]
    assert fitted and all(h["rows"] > 0 for h in fitted.values())  # the shipped calibration names its harnesses


def test_cli_prints_both_lists() -> None:
    res = CliRunner().invoke(main, ["estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "1000",
                                    "--osl", "200", "--concurrency", "8", "--engine", "trtllm"])
    assert res.exit_code == 0, res.output
    assert "engine terms: eta_f" in res.output and "benchmark-harness terms: ttft_overhead_ms" in res.output
    assert "aic-auto-gap-analysis/trtllm" in res.output and "without the harness terms" in res.output
    js = CliRunner().invoke(main, ["estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "1000",
                                   "--osl", "200", "--concurrency", "8", "--engine", "vllm", "--json"])
    data = json.loads(js.output)
    assert data["harness_terms"]["ttft_overhead_ms"] < data["ttft_ms"]
