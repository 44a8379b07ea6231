"""Mamba-2 hybrids (Nemotron-H, issue 25): block counts, parameters, per-sequence state and scan FLOPs
of a tiny config by hand (planner/schema/llm.py), their place in the roofline and memory sizing
(planner/perf/roofline.py), and the shipped Nemotron-Nano v2 profiles against their published totals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.hf_config import profile_from_config
from planner.perf.roofline import (
    Efficiency,
    instance_arrays,
    iteration_time,
    kv_bytes,
    max_batch,
    weights_read_bytes,
)

TINY = {
    "model_type": "nemotron_h", "num_hidden_layers": 4, "hybrid_override_pattern": "M*-M", "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 100,
    "tie_word_embeddings": False, "max_position_embeddings": 1024, "mamba_num_heads": 4, "mamba_head_dim": 8,
    "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4, "chunk_size": 16, "use_conv_bias": True, "mamba_proj_bias": False,
}
"""4 blocks: Mamba-2, attention, MLP, Mamba-2. d = 64; attention 4 x 16 (2 KV heads); MLP 128; Mamba-2 4 heads x 8
channels (d_in 32), state 16, 2 groups (conv_dim 32 + 2 x 2 x 16 = 96), kernel 4, chunk 16."""


def _tiny(**change: object):  # type: ignore[no-untyped-def]
    return profile_from_config({**TINY, **change}, source="tiny.json")


def test_tiny_hybrid_blocks_and_parameters_by_hand() -> None:
    p = _tiny()
    assert p.hybrid is not None
    assert (p.hybrid.attention_layers, p.hybrid.mamba_layers, p.hybrid.mlp_layers) == (1, 2, 1)
    assert not p.ffn_gated  # Nemotron-H MLP: up, squared ReLU, down
    # Mamba-2 mixer: in_proj 64 x (2*32 + 2*2*16 + 4) = 64 x 132 = 8448; conv 96 x 4 + 96 bias = 480;
    # dt_bias, A_log, D 3 x 4 = 12; gated norm 32; out_proj 32 x 64 = 2048
    assert p.mamba_params_per_layer() == 8448 + 480 + 12 + 32 + 2048 == 11020
    attention = 64 * 64 + 2 * 64 * 32 + 64 * 64  # q, k, v, o = 12288
    mlp = 2 * 64 * 128  # 16384
    embeddings = 2 * 100 * 64  # untied: input table and head
    norms = 4 * 64 + 64  # one per block + final
    assert p.params_total() == embeddings + norms + attention + mlp + 2 * 11020 == 63832
    assert p.kv_bytes_per_token("bf16") == 2 * 1 * 2 * 16 * 2 == 128  # the one attention block only
    assert p.attention_flops_per_pair() == 2 * 1 * 4 * (16 + 16)
    assert p.transformer_layer_equivalents() == 2.0


def test_tiny_hybrid_state_and_scan_flops_by_hand() -> None:
    p = _tiny()
    # per Mamba-2 block: SSM state H P N = 4 x 8 x 16 = 512 values, conv window (K-1) conv_dim = 3 x 96 = 288 values (bf16)
    assert p.ssm_state_bytes_per_sequence() == 2 * (512 * 2 + 288 * 2) == 3200
    fp32 = p.model_copy(update={"hybrid": p.hybrid.model_copy(update={"ssm_state_dtype": "fp32"})})  # type: ignore[union-attr]
    assert fp32.ssm_state_bytes_per_sequence() == 2 * (512 * 4 + 288 * 2) == 5248
    assert _tiny(mamba_ssm_cache_dtype="float32").hybrid.ssm_state_dtype == "fp32"  # type: ignore[union-attr]
    # decode: 6 H P N + 2 K conv_dim = 3072 + 768 per block; prefill: 2 Q (G N + H P) + 4 H P N + 2 K conv_dim
    assert p.ssm_flops_per_token(prefill=False) == 2 * (6 * 512 + 2 * 4 * 96) == 7680
    assert p.ssm_flops_per_token(prefill=True) == 2 * (2 * 16 * (2 * 16 + 32) + 4 * 512 + 2 * 4 * 96) == 9728
    # the state does not grow with the tokens: one sequence's cache = KV of its tokens + the fixed state
    n, h = 100.0, 20.0
    assert p.prefill_flops(n, h) == 2.0 * p.params_active_matmul() * n + p.attention_flops(n, h) + 9728 * n


def test_state_in_memory_sizing_and_step_time(catalog) -> None:  # noqa: ANN001
    p = _tiny()
    dev = catalog.devices["h100-sxm"]
    inst = instance_arrays(p, dev, 1, "bf16", "bf16")
    assert float(inst.state_bytes) == 3200.0 and float(inst.layers) == 2.0
    assert float(kv_bytes(inst, 1000.0)) == 128 * 1000 + 3200  # a sequence holds its KV and its fixed state
    assert float(kv_bytes(inst, 0.0)) == 3200
    cap = float(inst.memory_bytes) * 0.9 - float(inst.weight_bytes) - 3.0e9
    assert float(max_batch(inst, 1000.0)) == math.floor(cap / (128 * 1000 + 3200))
    eff = Efficiency(eta_f=1.0, eta_b=1.0, step_overhead_s=0.0, layer_overhead_s=0.0)
    b, c = 10.0, 100.0
    st = iteration_time(inst, eff, decode_batch=b, decode_context=c)
    bw = float(inst.bw_bytes_per_s)
    gemm_m = float(weights_read_bytes(inst, b)) / bw
    attn_m = (b * 128 * c + 2 * 3200 * b) / bw  # KV reads + each sequence's state read and written once
    assert float(st.memory_s) == pytest.approx(gemm_m + attn_m, rel=1e-12)
    attn_c = (256.0 * b * c + 7680 * b) / float(inst.attn_flops_peak)
    gemm_c = 2.0 * (float(inst.p_matmul) * (b + float(inst.gemm_m_half))) / float(inst.flops_peak)
    assert float(st.compute_s) == pytest.approx(gemm_c + attn_c, rel=1e-12)
    # prefill of one prompt: its state is read and written once too, the scan counted per prompt token
    sp = iteration_time(inst, eff, prefill_tokens=64.0)
    kv = 128 * 64.0
    assert float(sp.memory_s) == pytest.approx(float(weights_read_bytes(inst, 64.0)) / bw + (kv + 2 * 3200) / bw, rel=1e-12)


def test_attention_only_model_has_no_state(catalog) -> None:  # noqa: ANN001
    m = catalog.models["llama-3.1-8b"]
    inst = instance_arrays(m, catalog.devices["h100-sxm"], 2, "bf16", "bf16")
    assert float(inst.state_bytes) == 0.0 and float(inst.ssm_flops_decode) == 0.0 and float(inst.ssm_flops_prefill) == 0.0
    assert float(inst.layers) == 32.0
    assert float(kv_bytes(inst, 1000.0)) == m.kv_bytes_for_context(1000.0, "bf16")
    assert m.ssm_state_bytes_per_sequence() == 0.0 and m.mamba_params_per_layer() == 0


@pytest.mark.parametrize("model_id, published_b", [("nemotron-nano-9b-v2", 9.0), ("nemotron-nano-12b-v2", 12.31)])
def test_nemotron_nano_profiles(catalog, model_id: str, published_b: float) -> None:  # noqa: ANN001
    m = catalog.models[model_id]
    assert m.published_params_total_b == published_b
    assert abs(m.params_total_error_pct()) < 2.0  # 9B: 8.888 B (-1.2 %, the card's size class); 12B: 12.310 B (+0.00 %)
    assert m.hybrid is not None and m.hybrid.ssm_state_dtype == "fp32"
    blocks = {"nemotron-nano-9b-v2": (4, 27, 25), "nemotron-nano-12b-v2": (6, 28, 28)}[model_id]
    assert (m.hybrid.attention_layers, m.hybrid.mamba_layers, m.hybrid.mlp_layers) == blocks
    # 9B: 27 x (128 x 80 x 128 x 4 + 3 x 12,288 x 2) = 143.5 MB per sequence, KV 4 x 2 x 8 x 128 x 2 = 16 kB per token
    if model_id == "nemotron-nano-9b-v2":
        assert m.ssm_state_bytes_per_sequence() == 27 * (128 * 80 * 128 * 4 + 3 * 12288 * 2)
        assert m.kv_bytes_per_token("bf16") == 16384


def test_estimate_runs_a_hybrid_config_and_rejects_unknown_hybrids(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY), encoding="utf-8")
    args = ["--device", "h100-sxm", "--tp", "1", "--isl", "100", "--osl", "10", "--concurrency", "1"]
    res = CliRunner().invoke(main, ["estimate", "--model", str(cfg), *args])
    assert res.exit_code == 0, res.output
    for change, words in (({"hybrid_override_pattern": "M*EM"}, "mixture-of-experts blocks 'E'"),
                          ({"model_type": "zamba2"}, "state-space (Mamba-2) layers"),
                          ({"model_type": "kimi_linear"}, "linear (Kimi Delta) attention layers")):
        cfg.write_text(json.dumps({**TINY, **change}), encoding="utf-8")
        res = CliRunner().invoke(main, ["estimate", "--model", str(cfg), *args])
        assert res.exit_code == 2 and words in res.output and res.output.count("\n") == 1, res.output
        assert res.output.startswith("error:")


def test_hybrid_with_moe_or_sliding_window_is_refused() -> None:
    """The schema refuses a hybrid profile the step-time model does not cover (MoE, MLA or sliding-window blocks)."""
    from pydantic import ValidationError

    from planner.schema.llm import LLMProfile

    data = _tiny().model_dump()
    for change in ({"sliding_window": 64, "sliding_window_layers": 1},
                   {"moe": {"num_experts": 4, "experts_per_token": 1, "expert_ffn_size": 32}}):
        with pytest.raises(ValidationError, match="hybrid model with MoE, MLA or sliding-window layers is not modelled"):
            LLMProfile.model_validate({**data, **change})
    with pytest.raises(ValidationError, match="must equal num_layers"):
        LLMProfile.model_validate({**data, "num_layers": 5})


def test_decode_state_traffic_grows_with_the_batch_not_the_context(catalog) -> None:  # noqa: ANN001
    inst = instance_arrays(catalog.models["nemotron-nano-9b-v2"], catalog.devices["h100-sxm"], 1, "bf16", "bf16")
    eff = Efficiency(eta_f=1.0, eta_b=1.0, step_overhead_s=0.0, layer_overhead_s=0.0)
    t = [float(iteration_time(inst, eff, decode_batch=np.asarray(b), decode_context=np.asarray(c)).memory_s)
         for b, c in ((64, 1000), (64, 2000), (128, 1000))]
    bw = float(inst.bw_bytes_per_s)
    assert t[1] - t[0] == pytest.approx(64 * 16384 * 1000 / bw, rel=1e-9)  # more context: only the 4 attention blocks' KV
    state = 27 * (128 * 80 * 128 * 4 + 3 * 12288 * 2)
    extra = (float(weights_read_bytes(inst, 128)) - float(weights_read_bytes(inst, 64)) + 64 * 16384 * 1000 + 2 * state * 64) / bw
    assert t[2] - t[0] == pytest.approx(extra, rel=1e-9)
