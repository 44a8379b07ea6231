"""LLM architecture profiles and the quantities derived from them.

A profile lives in ``models/llm/<id>.yaml``. Parameter counts are **computed** from the
architecture (:meth:`LLMProfile.params_total`, :meth:`LLMProfile.params_active`) and checked
against the published totals (``published_params_total_b``) by the tests.

Symbols (DESIGN §3): layers ``L``, query heads ``H_q``, KV heads ``H_kv``, head dim ``d_h``,
hidden size ``d``, FFN size ``f``, vocabulary ``V``; experts ``E`` of which ``a`` are active.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from planner.schema.common import PRECISION_BYTES, PosFloat, PosInt, Precision, StrictModel


class MoEConfig(StrictModel):
    """Mixture-of-experts feed-forward layers."""

    num_experts: PosInt
    """Routed experts per MoE layer, ``E``."""
    experts_per_token: PosInt
    """Routed experts active per token, ``a``."""
    num_shared_experts: int = 0
    """Always-active shared experts per MoE layer."""
    expert_ffn_size: PosInt
    """Intermediate size of one expert (``moe_intermediate_size``)."""
    first_dense_layers: int = 0
    """Leading layers that use a dense FFN of size ``ffn_size`` instead of experts."""


class MLAConfig(StrictModel):
    """Multi-head latent attention (DeepSeek-V2/V3): a compressed KV latent is cached."""

    kv_lora_rank: PosInt
    q_lora_rank: PosInt | None = None
    qk_nope_head_dim: PosInt
    qk_rope_head_dim: PosInt
    v_head_dim: PosInt


class LLMProfile(StrictModel):
    """A decoder-only transformer architecture."""

    id: str
    """Stable id used on the command line, e.g. ``llama-3.1-70b``."""
    name: str
    hf_id: str = ""
    """Hugging Face repository id of the published config."""
    num_layers: PosInt
    hidden_size: PosInt
    num_attention_heads: PosInt
    num_kv_heads: PosInt
    head_dim: PosInt
    ffn_size: PosInt
    """Dense FFN intermediate size (gated: three matrices of ``d x f``)."""
    vocab_size: PosInt
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    sliding_window: PosInt | None = None
    """Window (tokens) of sliding-window attention layers, if any."""
    sliding_window_layers: int = 0
    """How many layers use the sliding window (their KV is capped at the window)."""
    max_context_tokens: PosInt
    native_weight_precision: Precision = "bf16"
    supported_weight_precisions: list[Precision]
    supported_kv_precisions: list[Precision]
    published_params_total_b: PosFloat
    """Published total parameters, billions (checked against the computed count)."""
    published_params_active_b: PosFloat | None = None
    """Published active parameters per token for MoE models, billions."""
    sources: dict[str, str]
    """Where the architecture figures and published totals come from."""
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> LLMProfile:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError("num_attention_heads must be a multiple of num_kv_heads")
        if self.sliding_window_layers > self.num_layers:
            raise ValueError("sliding_window_layers exceeds num_layers")
        return self

    # --- parameter counts -----------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.head_dim

    def attention_params_per_layer(self) -> int:
        d, hq, hkv = self.hidden_size, self.num_attention_heads, self.num_kv_heads
        if self.mla:
            m = self.mla
            q = d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * hq * self.qk_head_dim if m.q_lora_rank else d * hq * self.qk_head_dim
            kv = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * hq * (m.qk_nope_head_dim + m.v_head_dim)
            o = hq * m.v_head_dim * d
            return q + kv + o
        dh = self.head_dim
        params = d * hq * dh + 2 * d * hkv * dh + hq * dh * d
        if self.attention_bias:
            params += hq * dh + 2 * hkv * dh + d
        return params

    def _moe_layers(self) -> int:
        return self.num_layers - self.moe.first_dense_layers if self.moe else 0

    def expert_params_per_layer(self) -> int:
        """Parameters of one routed expert (gated FFN)."""
        assert self.moe is not None
        return 3 * self.hidden_size * self.moe.expert_ffn_size

    def params_non_expert(self) -> int:
        """Everything except routed experts: embeddings, attention, dense FFNs, shared experts, norms, routers."""
        d = self.hidden_size
        emb = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        per_layer = self.attention_params_per_layer() + 2 * d  # two RMSNorms
        total = emb + d + self.num_layers * per_layer
        dense_ffn = 3 * d * self.ffn_size
        if self.moe:
            total += self.moe.first_dense_layers * dense_ffn
            shared = self.moe.num_shared_experts * self.expert_params_per_layer()
            router = d * self.moe.num_experts
            total += self._moe_layers() * (shared + router)
        else:
            total += self.num_layers * dense_ffn
        return total

    def params_routed_experts(self) -> int:
        """All routed-expert parameters (0 for dense models)."""
        if not self.moe:
            return 0
        return self._moe_layers() * self.moe.num_experts * self.expert_params_per_layer()

    def params_total(self) -> int:
        """Computed total parameters ``P``."""
        return self.params_non_expert() + self.params_routed_experts()

    def params_active(self) -> int:
        """Computed parameters touched per token ``P_act`` (= ``P`` for dense models)."""
        if not self.moe:
            return self.params_total()
        active_experts = self._moe_layers() * self.moe.experts_per_token * self.expert_params_per_layer()
        return self.params_non_expert() + active_experts

    def params_active_matmul(self) -> int:
        """Active parameters that take part in per-token matmuls (input embedding excluded)."""
        return self.params_active() - self.vocab_size * self.hidden_size

    # --- bytes ----------------------------------------------------------------------------
    def weight_bytes(self, precision: str) -> float:
        """Weights ``W = P * b_w`` in bytes (every parameter stored at ``precision``)."""
        return self.params_total() * PRECISION_BYTES[precision]

    def kv_bytes_per_token(self, kv_precision: str) -> float:
        """KV bytes per token over all full-attention layers plus sliding-window layers.

        Standard attention: ``k = 2 * L * H_kv * d_h * b_kv``; MLA caches a latent:
        ``L * (kv_lora_rank + rope_dim) * b_kv``. Sliding-window layers count here too;
        use :meth:`kv_bytes_for_context` for the capped total of a long context.
        """
        b = PRECISION_BYTES[kv_precision]
        if self.mla:
            return self.num_layers * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * b
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * b

    def kv_bytes_for_context(self, context_tokens: float, kv_precision: str) -> float:
        """KV bytes of one sequence of ``context_tokens``, sliding-window layers capped at the window."""
        per_layer_token = self.kv_bytes_per_token(kv_precision) / self.num_layers
        full_layers = self.num_layers - self.sliding_window_layers
        capped = min(context_tokens, self.sliding_window) if self.sliding_window else context_tokens
        return per_layer_token * (full_layers * context_tokens + self.sliding_window_layers * capped)

    # --- FLOPs ----------------------------------------------------------------------------
    def attention_flops_per_pair(self) -> float:
        """FLOPs of one (query token, key token) pair over all layers: ``2 * L * H_q * (d_qk + d_v)``.

        With ``d_qk = d_v = d_h`` this is the ``4 * L * H_q * d_h`` of DESIGN §3.
        """
        return 2.0 * self.num_layers * self.num_attention_heads * (self.qk_head_dim + self.v_head_dim)

    def prefill_flops(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """FLOPs to prefill ``n`` new tokens after ``h`` cached ones (causal attention).

        ``2 * P_act * n + (attention per pair) * n * (n + 2h) / 2``.
        """
        n, h = new_tokens, cached_tokens
        return 2.0 * self.params_active_matmul() * n + self.attention_flops_per_pair() * n * (n + 2.0 * h) / 2.0

    @property
    def kind(self) -> Literal["dense", "moe"]:
        return "moe" if self.moe else "dense"
