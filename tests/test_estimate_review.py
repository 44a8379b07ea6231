"""`planner estimate` review findings: EP throughput by Little's law over the users that exist, the model's
context checked, the engine a calibration's, the checkpoint's precision taken, finite targets, expert
redundancy per model, config.json errors in its own keys."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.errors import InputError
from planner.hf_config import profile_from_config
from planner.perf.estimate import (
    context_problem,
    engine_choices,
    little_law_tokens_per_s,
    precision_choice,
    redundant_experts_of,
    target_problem,
)

CAT = load_catalog()
QWEN_EP = ["estimate", "--model", "qwen3-30b-a3b", "--device", "h100-sxm", "--ep", "8", "--isl", "2000", "--osl", "500",
           "--precision", "fp8", "--kv-precision", "fp8"]
MIXTRAL_CFG: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8,
    "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
}


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _config(tmp_path: Path, **change: Any) -> str:
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**MIXTRAL_CFG, **change}))
    return str(path)


# --- 1. expert parallelism: the users that exist, Little's law ---------------------------------------------
@pytest.mark.parametrize("users", [1, 9, 64])
def test_ep_throughput_is_what_the_users_ttft_and_tpot_allow(users: int) -> None:
    """One user on 8 ranks was counted as 8 (1,535 tok/s at TPOT 5.2 ms, above its 1/TPOT = 192); 9 users gave
    2,799 against 9 / 5.72 ms = 1,575. Now users x OSL / (TTFT + (OSL - 1) TPOT), and never above users / TPOT."""
    res = run(*QWEN_EP, "--concurrency", str(users), "--json")
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["users_running"] == users and r["active_ranks"] == min(users, 8)
    assert r["batch_per_rank"] == math.ceil(users / 8)
    per_replica = r["output_tokens_per_s_per_node"] * r["gpus"] / min(8, r["gpus"])
    assert per_replica == pytest.approx(users * 500 / ((r["ttft_ms"] + 499 * r["tpot_ms"]) / 1e3), rel=1e-9)
    assert per_replica <= users / (r["tpot_ms"] / 1e3)


def test_little_law_rule() -> None:
    assert little_law_tokens_per_s(1, 500, 0.127, 0.0052) == pytest.approx(500 / (0.127 + 499 * 0.0052))
    assert math.isnan(little_law_tokens_per_s(4, 1, 0.0, 0.0))


def test_ep_text_shows_the_prefill_prompts_and_one_error_line() -> None:
    text = run(*QWEN_EP, "--concurrency", "9")
    assert text.exit_code == 0 and "prefill_prompts_per_rank" in text.stdout and "not a user's TTFT" in text.stdout
    bad = run(*QWEN_EP[:6], "16", *QWEN_EP[7:], "--concurrency", "1", "--ttft-ms", "1")
    assert bad.exit_code == 2 and bad.stderr.count("error:") == 1 and bad.stderr.count("\n") == 1, bad.stderr


# --- 2. the model's context ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "isl", "limit"), [("phi-3-mini-4k", 16000, "4,096"), ("llama-3.1-8b", 200000, "131,072")])
def test_context_above_the_models_maximum_is_exit_2(model: str, isl: int, limit: str) -> None:
    res = run("estimate", "--model", model, "--device", "h100-sxm", "--tp", "1", "--isl", str(isl), "--osl", "100", "--concurrency", "1")
    assert res.exit_code == 2 and f"context of {limit} tokens" in res.stderr and "--isl + --osl of at most" in res.stderr, res.output


def test_context_of_a_config_json_is_its_max_position_embeddings(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert profile_from_config(json.loads(Path(cfg).read_text()), source=cfg).max_context_tokens == 512
    args = ["estimate", "--model", cfg, "--device", "h100-sxm", "--tp", "1", "--osl", "10", "--concurrency", "1"]
    assert run(*args, "--isl", "502").exit_code == 0
    res = run(*args, "--isl", "1000")
    assert res.exit_code == 2 and "context of 512 tokens" in res.stderr
    ep = run("estimate", "--model", cfg, "--device", "h100-sxm", "--ep", "4", "--isl", "1000", "--osl", "10", "--concurrency", "1")
    assert ep.exit_code == 2 and "context of 512 tokens" in ep.stderr


def test_context_rule_and_both_problems_at_once() -> None:
    model = CAT.models["llama-3.1-8b"]
    assert context_problem(model, 131000, 72) is None and context_problem(model, 131000, 73) is not None
    res = CliRunner().invoke(main, ["estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "1", "--isl", "2000000",
                                    "--osl", "128", "--concurrency", "1", "--precision", "bf16"])
    assert res.exit_code == 2 and "even at tp 8" in res.stderr and "context of 131,072" in res.stderr


# --- 3. the engine ---------------------------------------------------------------------------------------------
def test_unknown_engine_is_exit_2_naming_the_calibrations_engines() -> None:
    res = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "200", "--osl", "100",
              "--concurrency", "1", "--engine", "vlm")
    assert res.exit_code == 2 and "unknown engine 'vlm'" in res.stderr and "vllm" in res.stderr and "sglang" in res.stderr
    ep = run(*QWEN_EP, "--concurrency", "1", "--engine", "vlm")
    assert ep.exit_code == 2 and "unknown engine 'vlm'" in ep.stderr
    ok = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "200", "--osl", "100",
             "--concurrency", "1", "--engine", "vllm", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["source"] == "calibrated:vllm"


def test_engine_choices_are_the_calibrations() -> None:
    from planner.perf.calibration import load_calibration

    stacks = load_calibration("engine_stacks")
    assert stacks is not None and set(engine_choices(stacks)) == {*stacks.engines, "default"}
    assert "vllm" in engine_choices(None) and "vlm" not in engine_choices(None)


# --- 4. the checkpoint's precision -----------------------------------------------------------------------------
def test_fp8_checkpoint_name_is_estimated_at_fp8_and_says_so() -> None:
    args = ["estimate", "--device", "h100-sxm", "--tp", "1", "--isl", "2000", "--osl", "100", "--concurrency", "1", "--json"]
    fp8 = run(*args, "--model", "Qwen/Qwen3-8B-FP8")
    r = json.loads(fp8.stdout)
    assert fp8.exit_code == 0 and r["precision"] == "fp8" and r["precision_source"] == "the checkpoint name Qwen/Qwen3-8B-FP8"
    assert "states --precision fp8" in fp8.stderr
    bf16 = run(*args, "--model", "Qwen/Qwen3-8B")
    assert json.loads(bf16.stdout)["precision"] == "bf16" and r["memory_used_gb_per_device"] < json.loads(bf16.stdout)["memory_used_gb_per_device"]
    forced = run(*args, "--model", "Qwen/Qwen3-8B-FP8", "--precision", "bf16")
    assert json.loads(forced.stdout)["precision"] == "bf16" and "warning: --precision bf16 differs from fp8" in forced.stderr
    quiet = CliRunner().invoke(main, ["-q", *args, "--model", "Qwen/Qwen3-8B-FP8"])
    assert quiet.stderr == ""


def test_fp8_config_json_is_estimated_at_fp8(tmp_path: Path) -> None:
    cfg = _config(tmp_path, quantization_config={"quant_method": "fp8"})
    res = run("estimate", "--model", cfg, "--device", "h100-sxm", "--tp", "1", "--isl", "100", "--osl", "10", "--concurrency", "1", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["precision"] == "fp8", res.output


def test_precision_rule() -> None:
    assert precision_choice(None, None, "", "--precision")[0] == "bf16"
    assert precision_choice(None, "fp8", "name", "--precision")[:2] == ("fp8", "name")
    assert precision_choice("bf16", "fp8", "name", "--precision")[2].startswith("--precision bf16 differs from fp8")
    with pytest.raises(InputError, match="states int4"):
        precision_choice(None, "int4", "the checkpoint name x-AWQ", "--precision")


# --- 5. targets --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "value"), [("--ttft-ms", "nan"), ("--tpot-ms", "inf"), ("--tpot-ms", "0"), ("--ttft-ms", "-5")])
def test_non_finite_or_non_positive_target_is_exit_2(flag: str, value: str) -> None:
    res = run("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "1", "--isl", "200", "--osl", "100",
              "--concurrency", "1", flag, value)
    assert res.exit_code == 2 and "not a finite positive number" in res.stderr and "MISSED" not in res.output and " met" not in res.output


def test_target_rule() -> None:
    assert target_problem("ttft-ms", None) is None and target_problem("ttft-ms", 200.0) is None
    assert all(target_problem("ttft-ms", v) for v in (math.nan, math.inf, -math.inf, 0.0, -1.0))


# --- 6. expert redundancy ------------------------------------------------------------------------------------------
def test_redundancy_is_the_plans_share_of_the_experts() -> None:
    """Mixtral's 8 experts got DeepSeek's 32 redundant slots: 3 per GPU at EP 16, and EP 64 'fit 40 slots'. The rule
    (estimate and the plans alike, MoECalibration.redundant_for): E/8, DeepSeek's 32 of 256; Mixtral 1."""
    args = ["estimate", "--model", "mixtral-8x7b", "--device", "h100-sxm", "--isl", "200", "--osl", "100", "--concurrency", "1"]
    ep8 = run(*args, "--ep", "8", "--json")
    r = json.loads(ep8.stdout)
    assert ep8.exit_code == 0 and r["experts_per_gpu"] == 2 and r["redundant_experts"] == 1  # ceil(9 / 8)
    ep16 = run(*args, "--ep", "16")
    assert ep16.exit_code == 2 and "9 expert slots (8 experts + 1 redundant)" in ep16.stderr and "--redundant-experts" in ep16.stderr
    asked = run(*args, "--ep", "16", "--redundant-experts", "8", "--json")
    assert asked.exit_code == 0 and json.loads(asked.stdout)["experts_per_gpu"] == 1
    assert run(*args, "--ep", "8", "--redundant-experts", "0", "--json").exit_code == 0
    assert run(*args, "--tp", "2", "--redundant-experts", "8").exit_code == 2


def test_redundancy_rule_and_deepseeks_figure() -> None:
    from planner.perf.calibration import Calibration, MoECalibration

    assert redundant_experts_of(None, None, 256)[0] == 32 and redundant_experts_of(None, None, 8)[0] == 1
    assert redundant_experts_of(5, None, 256) == (5, "--redundant-experts")
    stated = Calibration.model_validate({"name": "x", "engines": {}, "moe": {"redundant_experts": 16}})
    assert redundant_experts_of(None, stated, 256)[0] == 16
    assert MoECalibration().redundant_for(128) == 16 and MoECalibration(redundant_experts=0).redundant_for(256) == 0
    ds = run("estimate", "--model", "deepseek-v3", "--device", "h100-sxm", "--ep", "32", "--precision", "fp8", "--isl", "2000",
             "--osl", "100", "--concurrency", "64", "--json")
    assert ds.exit_code == 0 and json.loads(ds.stdout)["experts_per_gpu"] == 9  # (256 + 32) / 32, as the plans


# --- 7. config.json errors in its own keys --------------------------------------------------------------------------
def test_config_error_names_the_config_keys(tmp_path: Path) -> None:
    res = run("estimate", "--model", _config(tmp_path, num_experts_per_tok=8), "--device", "h100-sxm", "--tp", "1", "--isl", "100",
              "--osl", "10", "--concurrency", "1")
    assert res.exit_code == 2 and "num_experts_per_tok exceeds num_local_experts" in res.stderr, res.stderr
    assert "Value error" not in res.stderr and "moe." not in res.stderr
    other = {k: v for k, v in {**MIXTRAL_CFG, "num_experts_per_tok": 8}.items() if k != "num_local_experts"}
    with pytest.raises(InputError, match="num_experts_per_tok exceeds n_routed_experts"):
        profile_from_config({**other, "n_routed_experts": 4}, source="cfg.json")


def test_a_config_whose_modules_to_not_convert_is_not_a_list_is_read() -> None:
    """Fuzzed (benchmarks/fuzz_readers.py --seed 1602, input 1106): quantization_config.modules_to_not_convert as a
    number made `estimate --model config.json` an internal error ('float' object is not iterable)."""
    from planner.hf_config import _precision

    assert _precision({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": 1.5}})[0] == "fp4"
    assert _precision({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": "model.layers.0.self_attn"}}) == ("fp4", "experts")
