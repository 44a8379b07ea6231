"""An LLM profile (:class:`planner.schema.llm.LLMProfile`) derived from a Hugging Face ``config.json``.

:func:`profile_from_config` reads the fields the planner's model uses and nothing else:

=============================  ================================================================
profile field                  config keys (first present wins; ``text_config`` read if nested)
=============================  ================================================================
``num_layers``                 ``num_hidden_layers``
``hidden_size``                ``hidden_size``
``num_attention_heads``        ``num_attention_heads``
``num_kv_heads``               ``num_key_value_heads`` (absent: = heads, MHA); MLA: = heads
``head_dim``                   ``head_dim``, else ``hidden_size / num_attention_heads``; MLA: ``v_head_dim``
``ffn_size``                   ``intermediate_size_mlp`` (Llama-4 dense), ``ff_intermediate_size`` (Phi-3-small),
                               ``intermediate_size``
``ffn_gated``                  false for ``starcoder2`` / ``opt`` / ``gpt_bigcode`` (two-matrix MLP)
``vocab_size``                 ``vocab_size``
``tie_word_embeddings``        ``tie_word_embeddings``, else the architecture's default (:data:`TIED_BY_DEFAULT`)
``attention_bias``             ``attention_bias``, ``qkv_bias``, ``use_bias`` (StarCoder2), ``bias``
``qk_norm``                    ``use_qk_norm``, or an architecture with q/k norms (:data:`QK_NORM_TYPES`)
``attention_sinks``            ``gpt_oss``
MoE                            experts ``num_local_experts`` / ``num_experts`` / ``n_routed_experts``;
                               top-k ``num_experts_per_tok``; expert size ``moe_intermediate_size``,
                               else ``intermediate_size``; shared experts ``n_shared_experts``, or
                               ``shared_expert_intermediate_size / moe_intermediate_size`` (Qwen-MoE),
                               or one of ``intermediate_size`` (Llama-4); leading dense layers
                               ``first_k_dense_replace``, or a leading block of ``mlp_only_layers``;
                               MoE every ``interleave_moe_layer_step``-th layer (Llama-4 Maverick: 2),
                               or every ``decoder_sparse_step``-th (Qwen-MoE): ``L // step`` MoE layers;
                               router bias: DeepSeek ``noaux_tc`` correction bias, ``use_routing_bias``, gpt-oss
MLA                            ``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``
sliding window                 ``layer_types`` (count of ``sliding_attention`` / ``chunked_attention``);
                               else Gemma-2 every other layer, Gemma-3 all but every
                               ``sliding_window_pattern``-th, Llama-4 chunked attention in all but every
                               4th layer (window = ``attention_chunk_size``), or every layer when
                               ``sliding_window`` is set and ``use_sliding_window`` is not false
``max_context_tokens``         ``max_position_embeddings``
(any key above)                absent from a Gemma-3 text config: the config class default (:data:`ARCHITECTURE_DEFAULTS`)
``native_weight_precision``    ``quantization_config.quant_method`` (fp8, mxfp4, ...), else bf16
hybrid (``nemotron_h``)        ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-`` MLP: block counts),
                               ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``,
                               ``conv_kernel``, ``chunk_size``, ``use_conv_bias``, ``mamba_proj_bias``
                               (other spellings: :data:`HYBRID_KEY_ALIASES`), ``mamba_ssm_cache_dtype``
                               (``float32``: an fp32 SSM state); MLP two-matrix (squared ReLU)
=============================  ================================================================

Approximations, all below 0.1 % of the parameter count: Gemma's four norms per layer are
counted as two, MLP biases (StarCoder2) and LayerNorm biases are not counted, and Qwen2's
q/k/v biases carry an output bias too. Llama-4's chunked attention (each query sees the keys of
its own 8,192-token chunk) is modelled as a sliding window of the chunk size, an upper bound
on its KV and attention work (a query sees on average half a chunk).

Phi-3-small (``phi3small``, :data:`BLOCK_SPARSE_EXACT_UP_TO`): every other layer
(``dense_attention_every_n_layers`` 2) uses block-sparse attention, each query block seeing the last
``blocksparse_num_local_blocks`` blocks of ``blocksparse_block_size`` tokens (16 x 64 = 1,024
tokens) and every ``blocksparse_vert_stride``-th (8th) block before them. Up to 1,024 tokens of
context that is every earlier token, so the layer is dense attention and the profile counts it as
such; beyond, the profile is an upper bound on the attention FLOPs and KV reads of those layers (at
8,192 tokens a block-sparse layer reads 30 of 128 blocks, 23 %: half the layers' attention
overstated up to 4.3x). Its KV memory is exact at any length: vLLM writes every token's K and V
to its paged cache and the block-sparse kernel skips blocks only when reading (the strided blocks
reach back to the start). LayerNorm instead of RMSNorm and the
q/k/v/output and MLP biases of its vLLM implementation are below 0.1 % of the parameters (not counted).

Nemotron-H (``nemotron_h``) hybrids are modelled block by block (:func:`_hybrid`,
:class:`planner.schema.llm.HybridConfig`: Mamba-2 blocks with a fixed per-sequence state, attention
blocks with KV, MLP blocks); a MoE block (``E``) in the pattern is an error naming it.

What it cannot model is an error naming the missing piece (:class:`UnsupportedArchitecture`):
other linear-attention and state-space layers (Mamba-1, Jamba, Falcon-H1, Zamba, Bamba, Gated DeltaNet,
lightning attention, RWKV),
vision / audio towers (a ``vision_config`` or ``audio_config``: their prompt tokens and encoder
work are not in the model), indexer-sparse attention (DeepSeek-V3.2), and
any ``model_type`` not in :data:`SUPPORTED_TYPES`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import InputError, Problem
from planner.schema.llm import LLMProfile

SUPPORTED_TYPES: frozenset[str] = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
    "kimi_k2", "gemma", "gemma2", "gemma3_text", "phi3", "starcoder2", "gpt_oss", "llama4_text", "minimax_m2",
    "opt", "mimo", "glm4_moe", "olmo2", "granite", "cohere", "ernie4_5", "phi3small", "nemotron_h",
})
"""``model_type`` values whose layers are decoder-only attention + (gated) FFN or MoE, and the
Nemotron-H hybrids of attention, MLP and Mamba-2 blocks (:func:`_hybrid`)."""

HYBRID_TYPES: dict[str, str] = {
    "mamba": "state-space (Mamba) layers", "mamba2": "state-space (Mamba-2) layers",
    "jamba": "state-space (Mamba) layers mixed with attention",
    "falcon_h1": "state-space (Mamba-2) heads beside attention", "zamba": "state-space (Mamba) layers", "zamba2": "state-space (Mamba-2) layers",
    "granitemoehybrid": "state-space (Mamba-2) layers mixed with attention", "bamba": "state-space (Mamba-2) layers",
    "qwen3_next": "linear-attention (Gated DeltaNet) layers", "qwen3_5": "linear-attention (Gated DeltaNet) layers",
    "qwen3_5_moe": "linear-attention (Gated DeltaNet) layers",
    "minimax": "linear (lightning) attention layers", "minimax_m1": "linear (lightning) attention layers",
    "rwkv": "RWKV recurrent layers", "rwkv5": "RWKV recurrent layers", "rwkv6": "RWKV recurrent layers",
    "recurrent_gemma": "recurrent (RG-LRU) layers", "lfm2": "short-convolution layers", "kimi_linear": "linear (Kimi Delta) attention layers",
    "deepseek_v32": "sparse attention with a lightning indexer",
}
"""``model_type`` -> the layer kind the planner cannot model."""

TIED_BY_DEFAULT: frozenset[str] = frozenset({"gemma", "gemma2", "gemma3_text", "starcoder2", "opt", "gpt_bigcode", "phi3small"})
"""Architectures whose config class ties the output head to the embedding unless it says otherwise
(``transformers`` defaults; Llama, Mistral, Qwen, DeepSeek and gpt-oss default to untied). Phi-3-small's
published config has no ``tie_word_embeddings`` key, so ``PretrainedConfig``'s default (tied) applies; vLLM's
``Phi3SmallForCausalLM`` declares ``_tied_weights_keys = ["lm_head.weight"]`` and shares the embedding when the
config ties it (vllm/model_executor/models/phi3_small.py)."""

BLOCK_SPARSE_EXACT_UP_TO: dict[str, tuple[str, str]] = {"phi3small": ("blocksparse_block_size", "blocksparse_num_local_blocks")}
"""Block-sparse architectures modelled as dense attention (module docstring): the config keys whose product
is the context (tokens) up to which their sparse layers attend to every earlier token, i.e. are exact."""

ARCHITECTURE_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "head_dim": 256, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "sliding_window": 4096, "sliding_window_pattern": 6},
    "nemotron_h": {"vocab_size": 131_072, "head_dim": 128, "num_key_value_heads": 8, "ssm_state_size": 128, "mamba_num_heads": 128,
                   "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128},
}
"""Keys a published config may omit because its config class supplies them: the ``__init__`` defaults
of ``transformers`` ``Gemma3TextConfig`` (src/transformers/models/gemma3/configuration_gemma3.py at
commit 008f5c8c29be84d4721dc6d1e0fcd72300580be4). Gemma 3's own ``config.json`` files (12B, 27B) leave
``vocab_size`` and ``max_position_embeddings`` out of their ``text_config``; a key present in the
config always wins. ``nemotron_h``: the ``__init__`` defaults of ``NemotronHConfig``
(``configuration_nemotron_h.py`` shipped with NVIDIA's Nemotron-H checkpoints, Apache-2.0:
``vocab_size`` 131072, ``head_dim`` 128, ``num_key_value_heads`` 8, ``ssm_state_size`` 128,
``mamba_num_heads`` 128, ``mamba_head_dim`` 64, ``mamba_n_groups`` 8, ``mamba_d_conv`` 4,
``mamba_chunk_size`` 128; ``mamba_conv_bias`` true and ``mamba_proj_bias`` false in :func:`_hybrid`)."""

QK_NORM_TYPES: frozenset[str] = frozenset({"qwen3", "qwen3_moe", "gemma3_text", "olmo2"})
NON_GATED_TYPES: frozenset[str] = frozenset({"starcoder2", "opt", "gpt_bigcode", "nemotron_h"})
"""Two-matrix MLPs (Nemotron-H: up, squared ReLU, down; ``NemotronHMLP`` in transformers and vLLM)."""

HYBRID_PATTERN_KINDS: dict[str, str] = {"M": "mamba", "*": "attention", "-": "mlp"}
"""Characters of a Nemotron-H ``hybrid_override_pattern`` the planner models (``E``, a MoE block, is not)."""

HYBRID_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "ssm_state_size": ("mamba_state_dim", "mamba_d_state"), "n_groups": ("mamba_num_groups", "mamba_n_groups"),
    "conv_kernel": ("mamba_d_conv",), "chunk_size": ("mamba_chunk_size",), "use_conv_bias": ("mamba_conv_bias",),
}
"""Other spellings of the Mamba-2 keys (the ``NemotronHConfig`` constructor's argument names, Megatron's)."""

QUANT_METHODS: dict[str, str] = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4", "modelopt_fp4": "fp4"}
"""``quantization_config.quant_method`` -> weight precision of the checkpoint."""


class UnsupportedArchitecture(InputError):
    """A config the planner cannot turn into a profile; the message names the missing piece."""


def _fail(source: str, field: str, message: str, fix: str) -> UnsupportedArchitecture:
    return UnsupportedArchitecture(Problem(source, field, message, fix))


def _int(cfg: dict[str, Any], key: str, source: str, *, default: int | None = None, minimum: int = 1) -> int:
    """A whole number from ``minimum`` to 10⁸, else one error naming the field."""
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum \
            or value != int(value) or value > 10**8:
        what = "a positive whole number" if minimum == 1 else f"a whole number {minimum} or more"
        raise _fail(source, key, f"needs {what}, got {value!r}", "give the model's config.json as published")
    return int(value)


def _count(cfg: dict[str, Any], key: str, source: str) -> int:
    """A whole number ≥ 0 (a missing or null value is 0), else one error naming the field."""
    return 0 if cfg.get(key) is None else _int(cfg, key, source, minimum=0)


def _layer_kinds(cfg: dict[str, Any], source: str) -> list[str]:
    kinds = cfg.get("layer_types")
    if kinds is None:
        return []
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise _fail(source, "layer_types", "must be a list of layer kind names", "give the model's config.json as published")
    return kinds


def _text_config(cfg: dict[str, Any], source: str, text_only: bool) -> dict[str, Any]:
    for tower in ("vision_config", "audio_config", "vision_tower", "mm_vision_tower", "visual", "speech_config"):
        if cfg.get(tower) and not text_only:
            what = "audio" if "audio" in tower or "speech" in tower else "vision"
            raise _fail(source, tower, f"has a {what} tower: its encoder work and the prompt's {what} tokens are not modelled",
                        "plan a text-only checkpoint of the model (a language-model config without the tower)")
    inner = cfg.get("text_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in cfg.items() if k not in {"text_config", "vision_config", "audio_config"}}
        merged.update(inner)
        return merged
    return cfg


def _sliding(cfg: dict[str, Any], mtype: str, layers: int, source: str) -> tuple[int | None, int]:
    """(window tokens, layers that use it): module table."""
    kinds = _layer_kinds(cfg, source)
    window = cfg.get("sliding_window")
    chunk = cfg.get("attention_chunk_size")
    if kinds:
        if len(kinds) != layers:
            raise _fail(source, "layer_types", f"lists {len(kinds)} layers, num_hidden_layers is {layers}", "give the model's config.json as published")
        unknown = sorted({k for k in kinds if k not in {"full_attention", "sliding_attention", "chunked_attention"}})
        if unknown:
            raise _fail(source, "layer_types", f"has layer kinds the planner cannot model: {', '.join(unknown)} (linear-attention or state-space layers)",
                        "plan a model whose layers are all full, sliding-window or chunked attention")
        n_sw = sum(k == "sliding_attention" for k in kinds)
        n_ch = sum(k == "chunked_attention" for k in kinds)
        if n_sw and n_ch:
            raise _fail(source, "layer_types", "mixes sliding-window and chunked layers", "not modelled")
        if n_ch:
            return _int(cfg, "attention_chunk_size", source), n_ch
        if n_sw:
            return _int(cfg, "sliding_window", source), n_sw
        return None, 0
    if mtype == "llama4_text" and chunk:
        step = int(cfg.get("no_rope_layer_interval", 4) or 4)
        return _int(cfg, "attention_chunk_size", source), layers - layers // step
    if window is None or cfg.get("use_sliding_window") is False:
        return None, 0
    w = _int(cfg, "sliding_window", source)
    if mtype == "gemma2":
        return w, (layers + 1) // 2  # layers 0, 2, 4, ... are local (transformers Gemma2)
    if mtype == "gemma3_text":
        pattern = _int(cfg, "sliding_window_pattern", source, default=6)
        return w, layers - layers // pattern
    if mtype in {"mistral", "mixtral", "phi3", "starcoder2", "qwen2"}:
        return (w, layers) if w < _int(cfg, "max_position_embeddings", source, default=w + 1) else (None, 0)
    return None, 0


def _precision(cfg: dict[str, Any]) -> tuple[str, str]:
    """(native weight precision, quantized scope)."""
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        if method in QUANT_METHODS:
            prec = QUANT_METHODS[method]
            skip = quant.get("modules_to_not_convert") or []
            skip = skip if isinstance(skip, (list, tuple)) else [skip]  # a list of module names; a lone name read as one
            scope = "experts" if prec == "fp4" and any("attn" in str(m) for m in skip) else "linear"
            return prec, scope
    return "bf16", "linear"


def _moe(cfg: dict[str, Any], mtype: str, layers: int, source: str) -> dict[str, Any] | None:
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if not experts:
        return None
    e = _int({"e": experts}, "e", source)
    size = _int(cfg, "moe_intermediate_size" if cfg.get("moe_intermediate_size") else "intermediate_size", source)
    shared = _count(cfg, "n_shared_experts", source)
    shared_size = _count(cfg, "shared_expert_intermediate_size", source)
    if shared_size:
        if shared_size % size:
            raise _fail(source, "shared_expert_intermediate_size", f"{shared_size} is not a whole number of experts of {size}",
                        "not modelled: shared experts must have the routed experts' size")
        shared = shared_size // size
    if mtype == "llama4_text":
        shared = 1
    first_dense = _count(cfg, "first_k_dense_replace", source)
    dense_only = cfg.get("mlp_only_layers") or []
    if not isinstance(dense_only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense_only):
        raise _fail(source, "mlp_only_layers", f"must be a list of layer numbers, got {dense_only!r}"[:200], "give the model's config.json as published")
    if dense_only:
        if sorted(dense_only) != list(range(len(dense_only))):
            raise _fail(source, "mlp_only_layers", "dense layers interleaved with MoE layers are not modelled", "not modelled")
        first_dense = len(dense_only)
    step = 1
    if cfg.get("moe_layer_freq") not in (None, 0, 1):
        raise _fail(source, "moe_layer_freq", f"is {cfg.get('moe_layer_freq')}: MoE layers at every n-th layer after the dense ones "
                    "(DeepSeek numbering) are not modelled", "not modelled")
    for key in ("decoder_sparse_step", "interleave_moe_layer_step"):
        value = cfg.get(key)
        if value not in (None, 0, 1):
            step = _int(cfg, key, source)  # MoE layers: (i + 1) % step == 0, L // step of them
            if dense_only:
                raise _fail(source, key, f"is {value} beside mlp_only_layers: this layer pattern is not modelled", "not modelled")
    if first_dense > layers:
        raise _fail(source, "first_k_dense_replace", f"{first_dense} exceeds num_hidden_layers {layers}", "give the model's config.json as published")
    router_bias = mtype == "gpt_oss" or cfg.get("topk_method") == "noaux_tc" or bool(cfg.get("use_routing_bias"))
    return {"num_experts": e, "experts_per_token": _int(cfg, "num_experts_per_tok", source), "num_shared_experts": shared,
            "expert_ffn_size": size, "first_dense_layers": first_dense, "moe_layer_step": step, "expert_bias": mtype == "gpt_oss",
            "router_bias": router_bias}


def _hybrid(cfg: dict[str, Any], layers: int, source: str) -> dict[str, Any]:
    """The block kinds and Mamba-2 mixer of a Nemotron-H config (``hybrid_override_pattern``: one
    character per block, ``M`` Mamba-2, ``*`` attention, ``-`` MLP). A MoE block (``E``, Nemotron 3)
    or any other character is an error naming it."""
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise _fail(source, "hybrid_override_pattern", "is missing: a Nemotron-H config names each block's kind there",
                    "give the model's config.json as published")
    if len(pattern) != layers:
        raise _fail(source, "hybrid_override_pattern", f"has {len(pattern)} blocks, num_hidden_layers is {layers}",
                    "give the model's config.json as published")
    unknown = sorted(set(pattern) - set(HYBRID_PATTERN_KINDS))
    if unknown:
        what = "mixture-of-experts blocks" if unknown == ["E"] else "block kinds"
        raise _fail(source, "hybrid_override_pattern", f"has {what} {', '.join(repr(u) for u in unknown)} the planner cannot model "
                    "(it models M Mamba-2, * attention and - MLP blocks)", "plan a hybrid of Mamba-2, attention and MLP blocks only")
    counts = {k: pattern.count(ch) for ch, k in HYBRID_PATTERN_KINDS.items()}
    for kind in ("attention", "mamba"):
        if not counts[kind]:
            raise _fail(source, "hybrid_override_pattern", f"has no {kind} block: not a hybrid the planner models",
                        "plan a hybrid with at least one Mamba-2 and one attention block")
    bias = cfg.get("use_conv_bias", True)
    proj = cfg.get("mamba_proj_bias", cfg.get("use_bias", False))
    mamba = {"num_heads": _int(cfg, "mamba_num_heads", source), "head_dim": _int(cfg, "mamba_head_dim", source),
             "state_size": _int(cfg, "ssm_state_size", source), "n_groups": _int(cfg, "n_groups", source),
             "conv_kernel": _int(cfg, "conv_kernel", source), "chunk_size": _int(cfg, "chunk_size", source),
             "conv_bias": bool(bias), "proj_bias": bool(proj)}
    if mamba["num_heads"] % mamba["n_groups"]:
        raise _fail(source, "n_groups", f"{mamba['n_groups']} does not divide mamba_num_heads {mamba['num_heads']}", "give the model's config.json as published")
    state = str(cfg.get("mamba_ssm_cache_dtype", "auto")).lower()
    return {"attention_layers": counts["attention"], "mamba_layers": counts["mamba"], "mlp_layers": counts["mlp"], "mamba": mamba,
            "ssm_state_dtype": "fp32" if state in {"float32", "fp32"} else "bf16", "pattern": pattern}


def _sparse_note(cfg: dict[str, Any], mtype: str, layers: int, source: str) -> str:
    """The approximation note of a block-sparse architecture counted dense (module docstring), '' otherwise."""
    if mtype not in BLOCK_SPARSE_EXACT_UP_TO:
        return ""
    block, local = (_int(cfg, key, source) for key in BLOCK_SPARSE_EXACT_UP_TO[mtype])
    every = _int(cfg, "dense_attention_every_n_layers", source)
    sparse = layers - layers // every
    return (f"; {sparse} of {layers} layers use block-sparse attention ({local} local blocks of {block} tokens + every "
            f"{cfg.get('blocksparse_vert_stride')}-th older block), counted as dense attention: exact up to {local * block} "
            "tokens of context, an upper bound on those layers' attention FLOPs and KV reads beyond (KV memory exact)")


def config_key_names(cfg: dict[str, Any], ffn_key: str) -> dict[str, str]:
    """Profile field -> the ``config.json`` key it is read from (module docstring's table), for the keys
    whose names differ, with the spelling this config uses (``num_local_experts``, ``num_experts`` or
    ``n_routed_experts``). Errors of the profile's own checks name these keys, not the profile's fields."""
    experts = next((k for k in ("num_local_experts", "num_experts", "n_routed_experts") if cfg.get(k)), "num_local_experts")
    dense = "mlp_only_layers" if cfg.get("mlp_only_layers") else "first_k_dense_replace"
    return {
        "moe.num_experts": experts, "moe.experts_per_token": "num_experts_per_tok",
        "moe.expert_ffn_size": "moe_intermediate_size" if cfg.get("moe_intermediate_size") else "intermediate_size",
        "moe.first_dense_layers": dense, "moe.num_shared_experts": "n_shared_experts",
        "num_layers": "num_hidden_layers", "num_kv_heads": "num_key_value_heads", "ffn_size": ffn_key,
        "max_context_tokens": "max_position_embeddings", "native_weight_precision": "quantization_config.quant_method",
    }


def in_config_terms(text: str, names: dict[str, str]) -> str:
    """``text`` (a profile check's message or field path) with each profile field named by its config key
    (:func:`config_key_names`; longest names first, whole words only) and pydantic's ``Value error, `` prefix dropped."""
    import re

    out = text.removeprefix("Value error, ")
    for field in sorted(names, key=len, reverse=True):
        out = re.sub(rf"(?<![\w.]){re.escape(field)}(?![\w])", names[field], out)
    return out


def profile_from_config(cfg: Any, *, source: str, hf_id: str = "", model_id: str = "", text_only: bool = False) -> LLMProfile:
    """The profile of the model a ``config.json`` (already parsed) describes (module docstring).

    ``source`` names the file in errors and in the profile's ``sources``; ``text_only`` reads the
    language model of a config with a vision tower (the tower's weights are then not counted)."""
    if not isinstance(cfg, dict):
        raise _fail(source, "", "is not a JSON object", "give the model's config.json")
    outer_type = str(cfg.get("model_type", ""))
    if outer_type in HYBRID_TYPES:
        raise _fail(source, "model_type", f"{outer_type!r} has {HYBRID_TYPES[outer_type]}, which the planner cannot model",
                    "plan a decoder-only attention model")
    c = _text_config(cfg, source, text_only)
    mtype = str(c.get("model_type", outer_type))
    if mtype == "llama4":
        mtype = "llama4_text"
    if mtype in HYBRID_TYPES:
        raise _fail(source, "model_type", f"{mtype!r} has {HYBRID_TYPES[mtype]}, which the planner cannot model", "plan a decoder-only attention model")
    for key, what in (("hybrid_override_pattern", "state-space (Mamba) layers"), ("linear_attn_config", "linear-attention layers"),
                      ("full_attention_interval", "linear-attention layers between the full-attention ones"), ("ssm_cfg", "state-space layers"),
                      ("index_topk", "sparse attention with a lightning indexer")):
        if key in c and not (mtype == "nemotron_h" and key == "hybrid_override_pattern"):
            raise _fail(source, key, f"the model has {what}, which the planner cannot model", "plan a decoder-only attention model")
    if mtype not in SUPPORTED_TYPES:
        raise _fail(source, "model_type", f"unknown architecture {mtype or '(none)'!r}",
                    f"the planner reads configs of: {', '.join(sorted(SUPPORTED_TYPES))}; for another decoder-only model write a profile YAML (models/llm/README.md)")
    if mtype == "nemotron_h":
        c = dict(c)
        for key, aliases in HYBRID_KEY_ALIASES.items():
            given = [a for a in aliases if a in c]
            if key not in c and given:
                c[key] = c[given[0]]
        c.pop("layer_types", None)  # newer exports list the blocks' cache kinds; the pattern says the same
    c = {**ARCHITECTURE_DEFAULTS.get(mtype, {}), **c}
    layers = _int(c, "num_hidden_layers", source)
    d = _int(c, "hidden_size", source)
    hq = _int(c, "num_attention_heads", source)
    mla = None
    if c.get("kv_lora_rank"):
        mla = {"kv_lora_rank": _int(c, "kv_lora_rank", source), "q_lora_rank": _int(c, "q_lora_rank", source) if c.get("q_lora_rank") else None,
               "qk_nope_head_dim": _int(c, "qk_nope_head_dim", source), "qk_rope_head_dim": _int(c, "qk_rope_head_dim", source),
               "v_head_dim": _int(c, "v_head_dim", source)}
        hkv, head_dim = hq, mla["v_head_dim"]
    else:
        hkv = _int(c, "num_key_value_heads", source, default=hq)
        head_dim = _int(c, "head_dim", source) if c.get("head_dim") else d // hq
        if hq % hkv:
            raise _fail(source, "num_key_value_heads", f"{hkv} does not divide num_attention_heads {hq}", "give the model's config.json as published")
    hybrid = _hybrid(c, layers, source) if mtype == "nemotron_h" else None
    moe = None if hybrid else _moe(c, mtype, layers, source)  # Nemotron-H MoE blocks are 'E' in the pattern (_hybrid)
    ffn_key = "intermediate_size_mlp" if c.get("intermediate_size_mlp") else (
        "ffn_dim" if mtype == "opt" else "ff_intermediate_size" if mtype == "phi3small" else "intermediate_size")
    ffn = _int(c, ffn_key, source, default=moe["expert_ffn_size"] if moe else None)
    window, window_layers = (None, 0) if hybrid else _sliding(c, mtype, layers, source)
    weight, scope = _precision(cfg)
    tied = c.get("tie_word_embeddings", cfg.get("tie_word_embeddings", mtype in TIED_BY_DEFAULT))
    bias = bool(c.get("attention_bias") or c.get("qkv_bias") or c.get("use_bias") or c.get("bias") or mtype in {"qwen2", "qwen2_moe"})
    name = hf_id or str(cfg.get("_name_or_path") or "") or source
    data: dict[str, Any] = {
        "id": model_id or name.split("/")[-1].lower(),
        "name": name,
        "hf_id": hf_id or str(cfg.get("_name_or_path") or ""),
        "num_layers": layers, "hidden_size": d, "num_attention_heads": hq, "num_kv_heads": hkv, "head_dim": head_dim,
        "ffn_size": ffn, "ffn_gated": mtype not in NON_GATED_TYPES,
        "vocab_size": _int(c, "vocab_size", source), "tie_word_embeddings": bool(tied),
        "attention_bias": bias, "qk_norm": bool(c.get("use_qk_norm", mtype in QK_NORM_TYPES)),
        "attention_sinks": mtype == "gpt_oss",
        "moe": moe, "mla": mla, "hybrid": hybrid,
        "sliding_window": window, "sliding_window_layers": window_layers,
        "max_context_tokens": _int(c, "max_position_embeddings", source),
        "native_weight_precision": weight,
        "supported_weight_precisions": [weight] + (["fp8"] if weight == "bf16" else ["bf16"] if weight == "fp8" else []),
        "supported_kv_precisions": ["bf16", "fp8"],
        "quantized_scope": scope,
        "sources": {"architecture": f"derived from {source} by planner.hf_config.profile_from_config",
                    "supported_weight_precisions": ("the config's checkpoint precision; fp8 from a bf16 checkpoint is quantised when loaded "
                                                    "(vLLM/SGLang --quantization fp8), bf16 from an fp8 one by up-casting")},
        "notes": "derived from a config.json; no published parameter count checked" + _sparse_note(c, mtype, layers, source),
    }
    try:
        return LLMProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        names = config_key_names(c, ffn_key)
        raise _fail(source, in_config_terms(".".join(str(p) for p in first["loc"]), names), in_config_terms(str(first["msg"]), names),
                    "give the model's config.json as published") from None


def read_config(path: str | Path) -> dict[str, Any]:
    """A ``config.json`` as a dict; a missing, unreadable or non-JSON file is one :class:`InputError`."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise InputError(Problem(str(p), "", "file does not exist", "check the path to the config.json")) from None
    except IsADirectoryError:
        raise InputError(Problem(str(p), "", "is a directory", "give the config.json file inside it")) from None
    except UnicodeDecodeError:
        raise InputError(Problem(str(p), "", "is not UTF-8 text", "give the model's config.json")) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(Problem(repr(str(p)) if "\0" in str(p) else str(p), "", f"cannot be read ({why})", "check the path and permissions")) from None
    try:
        data = json.loads(text)  # Infinity/NaN parse (published configs use them, e.g. Mamba time-step limits);
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:  # the fields read must be finite (_int)
        raise InputError(Problem(str(p), "", f"is not valid JSON ({exc})", "give the model's config.json as published")) from None
    if not isinstance(data, dict):
        raise InputError(Problem(str(p), "", "is not a JSON object", "give the model's config.json"))
    return data


def profile_from_file(path: str | Path, *, hf_id: str = "", model_id: str = "", text_only: bool = False) -> LLMProfile:
    """:func:`profile_from_config` of a ``config.json`` file."""
    return profile_from_config(read_config(path), source=str(path), hf_id=hf_id, model_id=model_id, text_only=text_only)
