"""LLM profiles: computed parameter counts against published totals, and hand-computed
KV bytes, weight bytes and FLOPs (models/llm/*.yaml, planner/schema/llm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schema.llm import LLMProfile
from planner.validation import load_model

ROOT = Path(__file__).resolve().parent.parent
LLM_DIR = ROOT / "models" / "llm"
EXPECTED_IDS = {
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-2-70b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "deepseek-v3",
    "mixtral-8x7b",
    "opt-13b",  # issue 13: DistServe's model (non-gated FFN)
    # issue 25: derived from their config.json (planner/hf_config.py, tests/test_hf_config.py)
    "gemma-2b", "gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "codellama-7b", "mistral-7b-v0.3", "starcoder2-7b",
    "qwen3-0.6b", "qwen3-1.7b", "qwen3-coder-480b-a35b", "llama-4-scout-17b-16e", "mixtral-8x22b", "kimi-k2",
    "phi-3-mini-4k", "codellama-13b", "codellama-34b", "llama-4-maverick-17b-128e",
    "qwen2.5-vl-7b",  # issue 26: the language model of a vision-language model (its tower: models/encoders/)
    "phi-3-medium-4k", "qwen3-14b", "mistral-nemo-12b",
    # issue 25 (validate-energy coverage): configs found in public repositories (models/llm/configs/SOURCE.md)
    "gemma-7b", "starcoder2-3b", "starcoder2-15b", "codellama-70b", "mistral-large-2407", "gemma-3-12b", "gemma-3-27b",
    "nemotron-nano-9b-v2", "nemotron-nano-12b-v2",  # Mamba-2 hybrids (Nemotron-H): planner/schema/llm.py HybridConfig
}
MOE_IDS = {"qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "mixtral-8x7b",
           "qwen3-coder-480b-a35b", "llama-4-scout-17b-16e", "mixtral-8x22b", "kimi-k2", "llama-4-maverick-17b-128e"}


def _profiles() -> dict[str, LLMProfile]:
    return {p.stem: load_model(LLMProfile, p) for p in sorted(LLM_DIR.glob("*.yaml"))}


PROFILES = _profiles()


def test_every_issue_model_has_a_profile_named_after_its_id() -> None:
    assert set(PROFILES) == EXPECTED_IDS
    for stem, profile in PROFILES.items():
        assert profile.id == stem


@pytest.mark.parametrize("model_id", sorted(EXPECTED_IDS))
def test_computed_total_within_2pct_of_published(model_id: str) -> None:
    m = PROFILES[model_id]
    assert abs(m.params_total() / (m.published_params_total_b * 1e9) - 1.0) < 0.02
    assert abs(m.params_total_error_pct()) < 2.0


@pytest.mark.parametrize("model_id", sorted(MOE_IDS))
def test_computed_active_within_2pct_of_published(model_id: str) -> None:
    m = PROFILES[model_id]
    assert m.kind == "moe"
    assert m.published_params_active_b is not None
    assert abs(m.params_active_published_basis() / (m.published_params_active_b * 1e9) - 1.0) < 0.02
    err = m.params_active_error_pct()
    assert err is not None and abs(err) < 2.0


@pytest.mark.parametrize("model_id", sorted(EXPECTED_IDS))
def test_count_invariants(model_id: str) -> None:
    m = PROFILES[model_id]
    assert m.params_total() == m.params_non_expert() + m.params_routed_experts()
    assert 0 < m.params_active_matmul() <= m.params_active() <= m.params_total()
    # the input embedding is a lookup, left out of matmuls, unless it is also the (tied) output head (OPT)
    assert (m.params_active_matmul() == m.params_active()) == m.tie_word_embeddings
    if m.kind == "dense":
        assert m.params_active() == m.params_total()
        assert m.params_routed_experts() == 0
    else:
        assert m.params_active() < m.params_total()
    assert m.native_weight_precision in m.supported_weight_precisions
    assert {"architecture", "published_params_total_b"} <= set(m.sources)


def test_llama_3_1_8b_total_by_hand() -> None:
    # embeddings + head 2·V·d, per layer attention d·(32+2·8+32)·128 + FFN 3·d·f + 2 norms, final norm
    d, v, f, layers = 4096, 128256, 14336, 32
    attn = d * 32 * 128 + 2 * d * 8 * 128 + 32 * 128 * d
    expected = 2 * v * d + layers * (attn + 3 * d * f + 2 * d) + d
    assert expected == 8_030_261_248
    assert PROFILES["llama-3.1-8b"].params_total() == expected


def test_qwen3_qk_norm_adds_two_head_dims_per_layer() -> None:
    m = PROFILES["qwen3-8b"]
    without = m.model_copy(update={"qk_norm": False})
    assert m.params_total() - without.params_total() == 36 * 2 * 128


def test_gpt_oss_biases_and_sinks() -> None:
    m = PROFILES["gpt-oss-20b"]
    d, fe, e, hq, hkv, dh, layers = 2880, 2880, 32, 64, 8, 64, 24
    plain = m.model_copy(update={"attention_bias": False, "attention_sinks": False, "moe": m.moe.model_copy(update={"expert_bias": False, "router_bias": False})})  # type: ignore[union-attr]
    extra = layers * ((hq * dh + 2 * hkv * dh + d) + hq + e * (2 * fe + d) + e)
    assert m.params_total() - plain.params_total() == extra


def test_llama_3_1_70b_kv_bytes_per_token_bf16() -> None:
    # 2 (K and V) · 80 layers · 8 KV heads · 128 dims · 2 bytes
    assert PROFILES["llama-3.1-70b"].kv_bytes_per_token("bf16") == 2 * 80 * 8 * 128 * 2 == 327_680
    assert PROFILES["llama-3.1-70b"].kv_bytes_per_token("fp8") == 163_840


def test_llama_3_1_70b_bf16_weights_exceed_one_80gb_device() -> None:
    w = PROFILES["llama-3.1-70b"].weight_bytes("bf16")
    assert w == 2 * 70_553_706_496
    assert 140e9 < w < 142e9
    assert w > 80e9  # needs tensor parallelism (or fp8) on an 80 GB device
    assert PROFILES["llama-3.1-70b"].weight_bytes("fp8") < 80e9


def test_deepseek_v3_mla_kv_is_the_latent() -> None:
    m = PROFILES["deepseek-v3"]
    for precision, b in (("bf16", 2), ("fp8", 1)):
        assert m.kv_bytes_per_token(precision) == 61 * (512 + 64) * b
    # a standard-attention cache of the same heads would be ~57x larger
    assert 2 * 61 * 128 * 128 * 2 / m.kv_bytes_per_token("bf16") > 50


def test_gpt_oss_sliding_window_caps_kv() -> None:
    m = PROFILES["gpt-oss-120b"]
    per_layer_token = 2 * 8 * 64 * 2  # K and V, 8 KV heads, 64 dims, bf16
    assert m.kv_bytes_per_token("bf16") == 36 * per_layer_token
    # below the window every layer holds every token
    assert m.kv_bytes_for_context(100, "bf16") == 36 * 100 * per_layer_token
    # 18 full layers hold 10,000 tokens, 18 sliding layers only 128
    assert m.kv_bytes_for_context(10_000, "bf16") == per_layer_token * (18 * 10_000 + 18 * 128)
    # a dense-attention model is never capped
    llama = PROFILES["llama-3.1-8b"]
    assert llama.kv_bytes_for_context(10_000, "bf16") == 10_000 * llama.kv_bytes_per_token("bf16")


def test_gpt_oss_fp4_weights_match_published_checkpoint() -> None:
    # model card: 60.8 GiB (120b) and 12.8 GiB (20b) checkpoints, MXFP4 experts + bf16 rest
    assert PROFILES["gpt-oss-120b"].weight_bytes("fp4") / 2**30 == pytest.approx(60.8, rel=0.01)
    assert PROFILES["gpt-oss-20b"].weight_bytes("fp4") / 2**30 == pytest.approx(12.8, rel=0.01)
    m = PROFILES["gpt-oss-120b"]
    assert m.weight_bytes_routed_experts("fp4") + m.weight_bytes_non_expert("fp4") == pytest.approx(m.weight_bytes("fp4"))
    assert m.weight_bytes_non_expert("fp4") == pytest.approx(2.0 * m.params_non_expert())


def test_fp8_keeps_embeddings_in_bf16() -> None:
    m = PROFILES["llama-3.1-8b"]
    emb = 2 * 128256 * 4096
    assert m.weight_bytes("fp8") == (m.params_total() - emb) * 1 + emb * 2


def test_prefill_flops_hand_value_llama_8b() -> None:
    m = PROFILES["llama-3.1-8b"]
    matmul = 8_030_261_248 - 128256 * 4096  # input embedding is a lookup
    per_pair = 4 * 32 * 32 * 128  # QK^T and AV, 2 FLOPs per multiply-add
    assert m.attention_flops_per_pair() == per_pair
    n = 1000
    assert m.prefill_flops(n) == 2 * matmul * n + per_pair * n * n / 2
    assert m.prefill_flops(n, 500) == 2 * matmul * n + per_pair * n * (n + 2 * 500) / 2
    assert m.prefill_flops(n) == pytest.approx(1.5271993344e13)


def test_prefill_flops_gpt_oss_caps_sliding_layers() -> None:
    m = PROFILES["gpt-oss-20b"]
    per_layer_pair = 2 * 64 * (64 + 64)
    n = 1000
    full_pairs = n * n / 2
    window_pairs = 128 * 128 / 2 + (n - 128) * 128  # first 128 tokens grow, the rest see 128 keys
    expected_attn = per_layer_pair * (12 * full_pairs + 12 * window_pairs)
    assert m.attention_flops(n) == expected_attn
    assert m.prefill_flops(n) == 2 * m.params_active_matmul() * n + expected_attn
    # with a cache longer than the window, every sliding query sees exactly 128 keys
    assert m.attention_flops(10, 5000) == per_layer_pair * (12 * 10 * (10 + 10_000) / 2 + 12 * 10 * 128)


def test_mla_attention_uses_qk_192_and_v_128() -> None:
    m = PROFILES["deepseek-v3"]
    assert (m.qk_head_dim, m.v_head_dim) == (192, 128)
    assert m.attention_flops_per_pair() == 2 * 61 * 128 * (192 + 128)


@settings(max_examples=60, deadline=None)
@given(n=st.floats(1, 200_000), h=st.floats(0, 200_000))
def test_sliding_window_attention_never_exceeds_full(n: float, h: float) -> None:
    swa = PROFILES["gpt-oss-120b"]
    full = swa.model_copy(update={"sliding_window_layers": 0, "sliding_window": None})
    a_swa, a_full = swa.attention_flops(n, h), full.attention_flops(n, h)
    assert 0 < a_swa <= a_full * (1 + 1e-12)
    # the sliding half contributes at most n·w pairs per layer
    per_layer_pair = swa.attention_flops_per_pair() / 36
    assert a_swa - a_full / 2 <= per_layer_pair * 18 * n * 128 * (1 + 1e-9)
    # splitting a prefill into two chunks costs the same attention as one pass
    half = n / 2
    assert swa.attention_flops(half, h) + swa.attention_flops(half, h + half) == pytest.approx(a_swa, rel=1e-9)


def test_cli_catalog_models_json_reports_every_model_within_2pct() -> None:
    from planner.cli import main

    result = CliRunner().invoke(main, ["catalog", "models", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in json.loads(result.output)["models"]}
    assert set(rows) == EXPECTED_IDS
    for model_id, row in rows.items():
        m = PROFILES[model_id]
        assert row["params_total_computed"] == m.params_total()
        assert row["params_active_computed"] == m.params_active()
        assert abs(row["params_total_error_pct"]) < 2.0, model_id
        if model_id in MOE_IDS:
            assert row["params_active_error_pct"] is not None and abs(row["params_active_error_pct"]) < 2.0, model_id
        else:
            assert row["params_active_error_pct"] is None
    assert rows["llama-3.1-70b"]["kv_bytes_per_token_bf16"] == 327_680


def test_cli_catalog_models_table() -> None:
    from planner.cli import main

    result = CliRunner().invoke(main, ["catalog", "models"])
    assert result.exit_code == 0, result.output
    for model_id in EXPECTED_IDS:
        assert model_id in result.output
