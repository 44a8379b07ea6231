"""CLI of the performance model: estimate, calibrate, validate-perf, convert-measurements; and the
regression of validate-perf on the shipped H100 measurements (achieved MAPE as the bound)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "perf_catalog"
SILICON = ROOT / "models" / "measured" / "silicon_h100_dense.csv"
CAL = ROOT / "models" / "calibration" / "h100_dense.yaml"
ENV = {"PLANNER_MODELS_DIR": str(FIXTURES)}


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), env=ENV)
    return res.exit_code, res.stdout, res.stderr


def test_estimate_json_fields() -> None:
    code, out, _ = run("estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "4", "--isl", "1024", "--osl", "256",
                       "--concurrency", "32", "--engine", "vllm", "--calibration", str(CAL), "--json")
    assert code == 0
    r = json.loads(out)
    assert r["source"] == "calibrated:vllm"
    assert r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["max_batch"] >= 32
    # what the driver reports for an 80 GB H100: 81,559 MiB (round 9 of planner/perf/README.md)
    assert r["memory_used_gb_per_device"] + r["memory_free_gb_per_device"] == pytest.approx(81_559 * 2**20 / 1e9, rel=1e-3)
    assert r["bound"] in {"compute", "memory_bandwidth", "memory_capacity", "communication"}


def test_estimate_text() -> None:
    code, out, _ = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "512", "--osl", "128", "--concurrency", "8")
    assert code == 0 and "tpot_ms" in out and "bound" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "nope", "--device", "h100-sxm", "--tp", "1"], "unknown model 'nope'"),
        (["--model", "llama-3.1-8b", "--device", "nope", "--tp", "1"], "unknown device 'nope'"),
        (["--model", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "1"], "use --tp 2 or more"),  # 2 x 85.5e9 B reported (round 9)
        (["--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--tpot-ms", "0.5"], "TPOT target 0.5 ms is impossible"),
        (["--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--ttft-ms", "1"], "TTFT target 1.0 ms is impossible"),
    ],
)
def test_estimate_errors(args: list[str], needle: str) -> None:
    code, _, err = run("estimate", *args, "--isl", "1024", "--osl", "128", "--concurrency", "4")
    assert code == 2 and needle in err and "Traceback" not in err


def test_estimate_model_too_big_even_at_largest_tp(tmp_path: Path) -> None:
    code, _, err = run("estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "1", "--isl", "2000000", "--osl", "128",
                       "--concurrency", "1", "--precision", "bf16")
    assert code == 2 and "even at tp 8" in err


def test_validate_perf_regression_on_shipped_data() -> None:
    code, out, _ = run("validate-perf", str(SILICON), "--from-format", "silicon", "--calibration", str(CAL), "--json")
    assert code == 0
    r = json.loads(out)
    rows = r["rows"]
    assert len(rows) == 584 and [x["id"] for x in rows[:2]] == [
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1",
        "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp4_epnone_2"]
    assert all(("pred_ttft_ms" in x and "pred_tpot_ms" in x) for x in rows)
    s = r["summary"]
    assert s["not_predicted"] == 0
    # achieved in-sample MAPE with the shipped calibration (see benchmarks/bench_perf_fidelity.py)
    assert s["mape_tpot_pct"] <= 9.5  # 9.0 (round 10; 8.9 round 8: link efficiency and closed-loop cohorts)
    assert s["mape_ttft_pct"] <= 21.5  # 21.0 (round 10: vLLM preemption split, engine-version overheads; 23.5 round 8)
    assert {(g["model"], g["engine"]) for g in s["per_group"]} == {
        ("llama-3.1-70b", "vllm"), ("llama-3.1-8b", "trtllm"), ("qwen3-32b", "sglang"), ("qwen3-32b", "trtllm"), ("qwen3-32b", "vllm")}


def test_validate_perf_keeps_unpredictable_rows_with_a_reason(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(
        "device,model,engine,precision,tp,concurrency,isl,osl,ttft_ms,tpot_ms\n"
        "h100-sxm,llama-3.1-8b,vllm,bf16,1,8,1024,128,150,8\n"
        "h100-sxm,unknown-model,vllm,bf16,1,8,1024,128,150,8\n"
        "h100-sxm,llama-3.1-70b,vllm,bf16,1,8,1024,128,150,8\n"
    )
    code, out, _ = run("validate-perf", str(csv), "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[0]["pred_tpot_ms"] > 0 and "reason" not in rows[0]
    assert rows[1]["pred_ttft_ms"] is None and "unknown model" in rows[1]["reason"]
    assert rows[2]["pred_ttft_ms"] is None and "do not fit" in rows[2]["reason"]


def test_validate_perf_bad_csv_is_exit_2(tmp_path: Path) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text("device,model\nh100-sxm,x\n")
    code, _, err = run("validate-perf", str(csv))
    assert code == 2 and "missing column" in err
    code, _, err = run("validate-perf", str(SILICON), "--from-format", "planner")
    assert code == 2 and "--from-format silicon" in err


@pytest.mark.slow
def test_calibrate_writes_file_and_data_copy(tmp_path: Path) -> None:
    out = tmp_path / "cal.yaml"
    code, stdout, _ = run("calibrate", str(SILICON), "--from-format", "silicon", "--name", "t", "-o", str(out))
    assert code == 0, stdout
    assert out.exists() and (tmp_path / "cal.measurements.csv").exists()
    from planner.perf.calibration import load_calibration

    cal = load_calibration(out)
    assert cal is not None and cal.fit is not None
    assert set(cal.engines) == {"default", "trtllm", "vllm", "sglang"}
    assert cal.fit.rows_used == 584 and len(cal.fit.data_sha256) == 64
    # the fit itself reaches the shipped in-sample error (23.5 / 8.9 % at round 8, 27.3 / 9.5 % at round 7; the squared
    # log-ratio objective of round 6 gave 31.3 / 12.1 %, so this fails if the objective regresses)
    assert cal.fit.mape_ttft_pct["all"] <= 24.0 and cal.fit.mape_tpot_pct["all"] <= 9.5
    # the copied rows round-trip through our format
    code, out2, _ = run("validate-perf", str(tmp_path / "cal.measurements.csv"), "--calibration", str(out), "--json")
    assert code == 0 and json.loads(out2)["summary"]["predicted"] == 584


def test_convert_measurements(tmp_path: Path) -> None:
    out = tmp_path / "conv.csv"
    code, _, _ = run("convert-measurements", str(SILICON), "-o", str(out))
    assert code == 0
    text = out.read_text().splitlines()
    assert text[0].startswith("id,device,model,engine,precision")
    assert ",h100-sxm,qwen3-32b,sglang,bf16," in text[1]


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_estimate_running_batch_within_max_batch(engine: str) -> None:
    """Above the KV capacity the running batch is the engine's slot count, which `max_batch` states (issue 24 item 4:
    vLLM's 400 running requests were printed beside a max_batch of 368, the slots at every request's peak context,
    now `max_batch_at_peak_context`); the memory in use is that of the slots the engine holds, so it fits the device."""
    code, out, _ = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "1000", "--osl", "200",
                       "--concurrency", "1024", "--engine", engine, "--json")
    assert code == 0
    r = json.loads(out)
    assert r["running_batch"] == r["max_batch"] and r["bound"] == "memory_capacity"
    assert r["max_batch_at_peak_context"] <= r["max_batch"]
    assert (r["max_batch_at_peak_context"] == r["max_batch"]) == (engine == "trtllm")  # TensorRT-LLM reserves the peak
    assert r["memory_free_gb_per_device"] > 0


def test_estimate_says_whether_its_targets_are_met() -> None:
    """A target below the benchmark harness's TTFT overhead is a miss of the benchmark's figure, said as such, not
    "impossible" on every device (the engine's prefill alone decides that); a missed target is said, not silent."""
    code, out, _ = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "1024", "--osl", "256",
                       "--concurrency", "8", "--calibration", str(CAL), "--json")
    r = json.loads(out)
    assert code == 0 and r["ttft_target_met"] is None
    between = (r["ttft_without_harness_ms"] + r["ttft_ms"]) / 2  # above the engine's TTFT, below the benchmark's
    code, out, _ = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "1024", "--osl", "256",
                       "--concurrency", "8", "--calibration", str(CAL), "--ttft-ms", f"{between:.3f}", "--tpot-ms", "1000")
    assert code == 0
    assert f"against the target {float(f'{between:.3f}'):g} ms: MISSED (met without the benchmark harness's terms" in out
    assert "TPOT" in out and "against the target 1000 ms: met" in out
    code, out, _ = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "1024", "--osl", "256",
                       "--concurrency", "8", "--calibration", str(CAL), "--ttft-ms", "1e6", "--json")
    r = json.loads(out)
    assert r["ttft_target_met"] is True and r["ttft_target_met_without_harness"] is True and r["tpot_target_met"] is None


def test_estimate_ep_says_its_ttft_has_no_queueing_and_who_gets_no_slot() -> None:
    """20,000 users over 16 ranks of 256 slots: 15,904 get none; the TTFT (one prompt per rank) does not count their
    wait, and the output says so; one node's all-to-all is not said to run over the inter-node NIC."""
    args = ["estimate", "--model", "deepseek-v3", "--device", "h200-sxm", "--precision", "fp8", "--osl", "1024"]
    res = CliRunner().invoke(main, [*args, "--ep", "16", "--isl", "1024", "--concurrency", "20000", "--json"])
    r = json.loads(res.stdout)
    assert res.exit_code == 0 and r["users_running"] == 16 * r["max_batch_per_rank"]
    assert r["users_without_slot"] == 20000 - r["users_running"]
    text = CliRunner().invoke(main, [*args, "--ep", "16", "--isl", "1024", "--concurrency", "20000"]).stdout
    assert f"{r['users_without_slot']:,} of the 20,000 users get no slot" in text and "no queueing" in text
    one_node = CliRunner().invoke(main, [*args, "--ep", "8", "--isl", "8192", "--concurrency", "64"]).stdout
    assert "within one node" in one_node and "across nodes" not in one_node and "get no slot" not in one_node


@pytest.mark.parametrize(("model", "device", "tp", "isl", "osl", "users"),
                         [("llama-3.1-8b", "h100-sxm", 1, 128, 2, 8), ("llama-3.1-70b", "h100-sxm", 4, 1024, 256, 32),
                          ("llama-3.1-8b", "h100-sxm", 1, 1000, 200, 1024)])
def test_estimate_throughput_is_what_its_ttft_and_tpot_allow(model: str, device: str, tp: int, isl: int, osl: int, users: int) -> None:
    """Little's law over the closed loop: users x OSL / (TTFT + (OSL - 1) TPOT), per device (a 2-token output was
    printed at up to 5x that: the engine's cycle left out the harness's TTFT overhead); and never above what the
    running batch can decode (running / TPOT tokens/s)."""
    code, out, _ = run("estimate", "--model", model, "--device", device, "--tp", str(tp), "--isl", str(isl), "--osl", str(osl),
                       "--concurrency", str(users), "--calibration", str(CAL), "--json")
    r = json.loads(out)
    assert code == 0
    e2e_s = (r["ttft_ms"] + (osl - 1) * r["tpot_ms"]) / 1e3
    assert r["output_tokens_per_s_per_device"] == pytest.approx(users * osl / e2e_s / tp, rel=1e-9)
    assert r["output_tokens_per_s_per_device"] <= r["output_tokens_per_s_per_device_without_harness"] * (1 + 1e-9)
    assert r["output_tokens_per_s_per_device"] * tp <= r["running_batch"] / (r["tpot_ms"] / 1e3) * (1 + 1e-6)
