"""LLM architecture profiles and the quantities derived from them.

A profile lives in ``models/llm/<id>.yaml``. Parameter counts are **computed** from the
architecture (:meth:`LLMProfile.params_total`, :meth:`LLMProfile.params_active`) and checked
against the published totals (``published_params_total_b``) by the tests
(``tests/test_catalog_models.py``; the table is in ``models/llm/README.md``).

Symbols (DESIGN §3): layers ``L``, query heads ``H_q``, KV heads ``H_kv``, head dim ``d_h``,
hidden size ``d``, FFN size ``f``, vocabulary ``V``; experts ``E`` of which ``a`` are active,
expert FFN size ``f_e``; sliding window ``w``.

Parameter count of one decoder layer (gated SwiGLU FFN unless ``ffn_gated: false``, RMSNorm, no
biases unless stated):

==========================  ===================================================================
attention (GQA)             ``d·H_q·d_h + 2·d·H_kv·d_h + H_q·d_h·d``
  + ``attention_bias``      ``H_q·d_h + 2·H_kv·d_h + d`` (q, k, v and output biases; gpt-oss)
  + ``qk_norm``             ``2·d_h`` (per-head RMSNorm weights on q and k; Qwen3)
  + ``attention_sinks``     ``H_q`` (one learned sink logit per head; gpt-oss)
attention (MLA)             ``d·r_q + r_q + r_q·H_q·(d_nope+d_rope)``  (q down, norm, up)
                            ``+ d·(r_kv+d_rope) + r_kv + r_kv·H_q·(d_nope+d_v) + H_q·d_v·d``
dense FFN                   ``3·d·f`` (gated: gate, up, down); ``2·d·f`` with ``ffn_gated: false``
                            (up, activation, down: OPT's ReLU MLP, GPT-2's GELU MLP)
routed expert               ``3·d·f_e`` (+ ``2·f_e + d`` with ``moe.expert_bias``)
router                      ``d·E`` (+ ``E`` with ``moe.router_bias``: gpt-oss bias,
                            DeepSeek-V3 ``e_score_correction_bias``)
norms                       ``2·d`` per layer, ``d`` final
==========================  ===================================================================

Embeddings ``V·d``, plus an output head ``V·d`` unless tied.

**Hybrid (Nemotron-H) models** (``hybrid``): the ``L`` decoder blocks each hold one mixer behind
one RMSNorm (``d``): ``L_A`` attention blocks (GQA as above, no FFN), ``L_F`` MLP blocks (the dense
FFN alone; Nemotron-H's squared-ReLU MLP is two matrices, ``ffn_gated: false``) and ``L_M`` Mamba-2
blocks of ``H`` heads of ``P`` channels (``d_in = H·P``), ``G`` groups, state size ``N``, conv kernel ``K``
(``conv_dim = d_in + 2·G·N``):

==========================  ===================================================================
Mamba-2 in_proj             ``d·(2·d_in + 2·G·N + H)``  (z, x, B, C and dt in one GEMM)
conv1d (depthwise)          ``conv_dim·K`` + ``conv_dim`` with ``conv_bias``
dt bias, A_log, D           ``3·H``
gated RMSNorm               ``d_in``
out_proj                    ``d_in·d``  (+ ``d`` with ``proj_bias``; in_proj then + its width)
==========================  ===================================================================

Total ``V·d (1 or 2) + d + L·d + L_A·attn + L_F·ffn + L_M·mamba``. Per sequence a Mamba-2 block
keeps a fixed state, not one per token: the SSM state ``H·P·N`` and the conv window
``(K-1)·conv_dim`` values (:meth:`LLMProfile.ssm_state_bytes_per_sequence`); only the ``L_A``
attention blocks hold KV.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from planner.schema.common import PRECISION_BYTES, PosFloat, PosInt, Precision, StrictModel

QuantScope = Literal["linear", "experts"]

FP4_BLOCK_SCALE_BYTES_PER_PARAM: float = 1.0 / 32.0
"""MXFP4 stores one 8-bit (E8M0) scale per block of 32 values: +1/32 byte per parameter
(4.25 bits per value in all). NVFP4 uses one FP8 scale per 16 values (+1/16 byte); we use the
MXFP4 figure, the format gpt-oss is published in; the difference is ~6% of fp4 weight bytes."""


class MoEConfig(StrictModel):
    """Mixture-of-experts feed-forward layers."""

    num_experts: PosInt
    """Routed experts per MoE layer, ``E``."""
    experts_per_token: PosInt
    """Routed experts active per token, ``a``."""
    num_shared_experts: int = 0
    """Always-active shared experts per MoE layer (each of size ``expert_ffn_size``)."""
    expert_ffn_size: PosInt
    """Intermediate size of one expert (``moe_intermediate_size``), ``f_e``."""
    first_dense_layers: int = 0
    """Leading layers that use a dense FFN of size ``ffn_size`` instead of experts."""
    moe_layer_step: PosInt = 1
    """Of the layers after the leading dense ones, every ``moe_layer_step``-th is MoE and the others
    have a dense FFN of size ``ffn_size`` (Llama-4 Maverick: 2, MoE and dense layers alternate;
    ``interleave_moe_layer_step`` in its config). Only the counts enter the model: MoE layers
    ``L_e = (L - first_dense_layers) // moe_layer_step``."""
    expert_bias: bool = False
    """Experts carry biases on their projections (gpt-oss: ``2·f_e + d`` per expert)."""
    router_bias: bool = False
    """The router carries one bias per expert (gpt-oss router bias, DeepSeek-V3 score correction)."""


class MLAConfig(StrictModel):
    """Multi-head latent attention (DeepSeek-V2/V3): a compressed KV latent is cached."""

    kv_lora_rank: PosInt
    """Rank of the compressed KV latent ``r_kv`` (cached per token and layer)."""
    q_lora_rank: PosInt | None = None
    """Rank of the compressed query ``r_q`` (None: a full ``d x H_q·d_qk`` query projection)."""
    qk_nope_head_dim: PosInt
    qk_rope_head_dim: PosInt
    """Decoupled RoPE key dimension (shared by all heads, cached next to the latent)."""
    v_head_dim: PosInt


class Mamba2Config(StrictModel):
    """The Mamba-2 mixer of a hybrid model's state-space blocks (Dao & Gu 2024, "Transformers are SSMs";
    config keys of ``transformers`` ``NemotronHConfig``)."""

    num_heads: PosInt
    """SSM heads ``H`` (``mamba_num_heads``)."""
    head_dim: PosInt
    """Channels per head ``P`` (``mamba_head_dim``); ``d_in = H·P``."""
    state_size: PosInt
    """State size ``N`` per channel (``ssm_state_size``)."""
    n_groups: PosInt
    """Groups sharing one ``B`` and ``C`` projection ``G`` (``n_groups``)."""
    conv_kernel: PosInt
    """Depthwise causal convolution width ``K`` (``conv_kernel``)."""
    chunk_size: PosInt = 128
    """Chunk ``Q`` of the chunked (SSD) prefill algorithm (``chunk_size``)."""
    conv_bias: bool = True
    """The convolution carries a bias per channel (``use_conv_bias``)."""
    proj_bias: bool = False
    """The in and out projections carry biases (``mamba_proj_bias``)."""

    @property
    def inner(self) -> int:
        """``d_in = H·P``."""
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels through the convolution: ``d_in + 2·G·N`` (x, B and C)."""
        return self.inner + 2 * self.n_groups * self.state_size


class HybridConfig(StrictModel):
    """Block kinds of a hybrid model whose ``num_layers`` blocks each hold one mixer (Nemotron-H
    ``hybrid_override_pattern``: ``M`` Mamba-2, ``*`` attention, ``-`` MLP)."""

    attention_layers: PosInt
    """Attention blocks ``L_A`` (the only ones holding KV)."""
    mamba_layers: PosInt
    """Mamba-2 blocks ``L_M``."""
    mlp_layers: int = 0
    """MLP blocks ``L_F`` (the dense FFN of size ``ffn_size``)."""
    mamba: Mamba2Config
    ssm_state_dtype: Literal["bf16", "fp32"] = "bf16"
    """Precision of the SSM state as served (the conv window stays bf16, :data:`SSM_STATE_BYTES`). vLLM's
    default keeps the model dtype (bf16); a config's ``mamba_ssm_cache_dtype`` ``float32`` or a profile
    says fp32 (the shipped Nemotron-Nano v2 profiles: the ML.ENERGY runs were served with
    ``--mamba-ssm-cache-dtype float32``, sources in their YAML). A serving choice, not an architecture figure."""
    pattern: str = ""
    """The config's layer pattern, as published (for the record)."""


SSM_STATE_BYTES: dict[str, float] = {"bf16": 2.0, "fp32": 4.0}
"""Bytes per value of a Mamba-2 sequence state. vLLM keeps the conv window in the model dtype (bf16 for a
bf16 or fp8 checkpoint; ``--mamba-cache-dtype`` default ``auto``) and the SSM state in that dtype too
unless ``--mamba-ssm-cache-dtype`` says otherwise (``HybridConfig.ssm_state_dtype``; vLLM 0.11
``CacheConfig`` and ``MambaStateDtypeCalculator``); an fp8 KV cache does not change either."""


class LLMProfile(StrictModel):
    """A decoder-only transformer architecture."""

    id: str
    """Stable id used on the command line, e.g. ``llama-3.1-70b``."""
    name: str
    hf_id: str = ""
    """Hugging Face repository id of the published config."""
    num_layers: PosInt
    """Decoder layers ``L`` (DeepSeek-V3: the 61 main layers; the MTP module is not served)."""
    hidden_size: PosInt
    num_attention_heads: PosInt
    num_kv_heads: PosInt
    head_dim: PosInt
    ffn_size: PosInt
    """Dense FFN intermediate size (gated: three matrices of ``d x f``; non-gated: two)."""
    ffn_gated: bool = True
    """The dense FFN is gated (SwiGLU/GeGLU: gate, up and down matrices, ``3·d·f``); ``false``
    for a two-matrix MLP with an activation between (OPT, GPT-2, BLOOM: ``2·d·f``)."""
    vocab_size: PosInt
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    """Biases on the q, k, v and output projections."""
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys (Qwen3): ``2·d_h`` weights per layer."""
    attention_sinks: bool = False
    """A learned sink logit per query head and layer (gpt-oss)."""
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    hybrid: HybridConfig | None = None
    """Hybrid state-space model: the blocks' kinds (module docstring; ``None`` = every layer is
    attention + FFN)."""
    sliding_window: PosInt | None = None
    """Window (tokens) of sliding-window attention layers, if any."""
    sliding_window_layers: int = 0
    """How many layers use the sliding window (their KV and attention are capped at the window)."""
    max_context_tokens: PosInt
    native_weight_precision: Precision = "bf16"
    """Precision of the published checkpoint's main weights."""
    supported_weight_precisions: list[Precision]
    """Weight precisions with a published checkpoint (the model owner's or a widely used one)."""
    supported_kv_precisions: list[Precision]
    quantized_scope: QuantScope = "linear"
    """Which weights a below-bf16 precision applies to: ``linear`` (every matmul weight inside
    the decoder layers; embeddings, output head, norms stay bf16) or ``experts`` (only the routed
    experts, as in gpt-oss's MXFP4 checkpoint; attention, router, embeddings stay bf16)."""
    published_params_total_b: PosFloat | None = None
    """Published total parameters, billions (checked against the computed count). ``None`` only for
    a profile derived at run time from a ``config.json`` (:mod:`planner.hf_config`); every shipped
    profile states it (``tests/test_catalog_models.py``)."""
    published_params_active_b: PosFloat | None = None
    """Published active parameters per token for MoE models, billions."""
    published_active_excludes_embedding: bool = False
    """The publisher's active count leaves out the input embedding table (OpenAI's gpt-oss
    model card does; Qwen, DeepSeek and Mistral count it)."""
    sources: dict[str, str]
    """Where the architecture figures and published totals come from."""
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> LLMProfile:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError("num_attention_heads must be a multiple of num_kv_heads")
        if self.sliding_window_layers > self.num_layers:
            raise ValueError("sliding_window_layers exceeds num_layers")
        if self.sliding_window_layers and self.sliding_window is None:
            raise ValueError("sliding_window_layers > 0 needs sliding_window (tokens)")
        if self.moe:
            if self.moe.experts_per_token > self.moe.num_experts:
                raise ValueError("moe.experts_per_token exceeds moe.num_experts")
            if self.moe.first_dense_layers > self.num_layers:
                raise ValueError("moe.first_dense_layers exceeds num_layers")
        if self.hybrid:
            h = self.hybrid
            if h.attention_layers + h.mamba_layers + h.mlp_layers != self.num_layers:
                raise ValueError("hybrid attention_layers + mamba_layers + mlp_layers must equal num_layers")
            if self.moe or self.mla or self.sliding_window:
                raise ValueError("a hybrid model with MoE, MLA or sliding-window layers is not modelled")
        if self.native_weight_precision not in self.supported_weight_precisions:
            raise ValueError("native_weight_precision must be one of supported_weight_precisions")
        if self.published_params_active_b is not None and self.published_params_total_b is not None \
                and self.published_params_active_b > self.published_params_total_b:
            raise ValueError("published_params_active_b exceeds published_params_total_b")
        return self

    # --- parameter counts -----------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        """Query/key dimension per head (MLA: ``d_nope + d_rope``)."""
        return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.head_dim

    def attention_params_per_layer(self) -> int:
        """Attention parameters of one layer (projections, biases, q/k norms, sinks; see module table)."""
        d, hq, hkv = self.hidden_size, self.num_attention_heads, self.num_kv_heads
        if self.mla:
            m = self.mla
            if m.q_lora_rank:
                q = d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * hq * self.qk_head_dim
            else:
                q = d * hq * self.qk_head_dim
            kv = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * hq * (m.qk_nope_head_dim + m.v_head_dim)
            o = hq * m.v_head_dim * d
            return q + kv + o
        dh = self.head_dim
        params = d * hq * dh + 2 * d * hkv * dh + hq * dh * d
        if self.attention_bias:
            params += hq * dh + 2 * hkv * dh + d
        if self.qk_norm:
            params += 2 * dh
        if self.attention_sinks:
            params += hq
        return params

    def _moe_layers(self) -> int:
        return (self.num_layers - self.moe.first_dense_layers) // self.moe.moe_layer_step if self.moe else 0

    def moe_layers(self) -> int:
        """MoE layers ``L_e`` (0 for dense models); the other ``L - L_e`` layers have a dense FFN."""
        return self._moe_layers()

    def expert_params_per_layer(self) -> int:
        """Parameters of one routed expert (gated FFN ``3·d·f_e``, plus biases if any)."""
        assert self.moe is not None
        d, fe = self.hidden_size, self.moe.expert_ffn_size
        return 3 * d * fe + ((2 * fe + d) if self.moe.expert_bias else 0)

    def mamba_params_per_layer(self) -> int:
        """Parameters of one Mamba-2 mixer (module table; 0 without ``hybrid``)."""
        if not self.hybrid:
            return 0
        m, d = self.hybrid.mamba, self.hidden_size
        in_width = 2 * m.inner + 2 * m.n_groups * m.state_size + m.num_heads
        params = d * in_width + m.conv_dim * m.conv_kernel + 3 * m.num_heads + m.inner + m.inner * d
        if m.conv_bias:
            params += m.conv_dim
        if m.proj_bias:
            params += in_width + d
        return params

    def attention_layers(self) -> int:
        """Layers with attention (and KV): ``L``, or ``L_A`` of a hybrid model."""
        return self.hybrid.attention_layers if self.hybrid else self.num_layers

    def transformer_layer_equivalents(self) -> float:
        """Layers counted the way the step-time model counts transformer layers (two TP all-reduces and
        one fitted per-layer overhead each): ``L``; a hybrid's blocks hold one mixer and one all-reduce
        each, so two blocks count as one layer, ``L/2``."""
        return self.num_layers / 2.0 if self.hybrid else float(self.num_layers)

    def ssm_state_bytes_per_sequence(self) -> float:
        """Fixed state of one sequence over the Mamba-2 blocks, bytes (0 without ``hybrid``)::

            L_M (H·P·N b_ssm + (K-1)·conv_dim b_conv)     b_conv = 2 (bf16), b_ssm = SSM_STATE_BYTES[ssm_state_dtype]

        It does not grow with the tokens (the recurrence folds each token into it). Nemotron-Nano-9B-v2
        with an fp32 SSM state: 27 (1,310,720 x 4 + 3 x 12,288 x 2) = 143.5 MB per sequence."""
        if not self.hybrid:
            return 0.0
        m = self.hybrid.mamba
        ssm = m.inner * m.state_size * SSM_STATE_BYTES[self.hybrid.ssm_state_dtype]
        conv = (m.conv_kernel - 1) * m.conv_dim * SSM_STATE_BYTES["bf16"]
        return float(self.hybrid.mamba_layers) * (ssm + conv)

    def ssm_flops_per_token(self, prefill: bool) -> float:
        """Scan and convolution FLOPs of one token over the Mamba-2 blocks (0 without ``hybrid``).
        The in/out projections are GEMMs, counted in :meth:`params_active_matmul`. Per block::

            decode (recurrent step):  6 H P N + 2 K conv_dim
                  h <- exp(dt A) h + dt x B^T  (3 H P N: decay, outer product, add),  y = h C + D x  (2 H P N + ...)
                  rounded up to 6 H P N; the depthwise conv 2 K conv_dim
            prefill (chunked SSD, chunk Q):  2 Q (G N + H P) + 4 H P N + 2 K conv_dim
                  intra-chunk C B^T per group (Q x Q x N) and its product with x per head (Q x Q x P),
                  per token 2 Q (G N + H P) (computed full, not halved for causality, as the kernel does);
                  chunk state B^T x and output C h: 2 H P N each

        Nemotron-Nano-9B-v2: 0.16 / 0.22 GFLOP per token over 27 blocks, 1 % of its 17.8 GFLOP of GEMMs."""
        if not self.hybrid:
            return 0.0
        m = self.hybrid.mamba
        hpn = m.inner * m.state_size
        conv = 2.0 * m.conv_kernel * m.conv_dim
        per = (2.0 * m.chunk_size * (m.n_groups * m.state_size + m.inner) + 4.0 * hpn + conv) if prefill else 6.0 * hpn + conv
        return float(self.hybrid.mamba_layers) * per

    def _embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def params_non_expert(self) -> int:
        """Everything except routed experts: embeddings, attention, dense FFNs, shared experts, norms, routers."""
        d = self.hidden_size
        dense_ffn = (3 if self.ffn_gated else 2) * d * self.ffn_size
        if self.hybrid:  # one mixer and one RMSNorm per block (module docstring)
            h = self.hybrid
            return (self._embedding_params() + d + self.num_layers * d + h.attention_layers * self.attention_params_per_layer()
                    + h.mlp_layers * dense_ffn + h.mamba_layers * self.mamba_params_per_layer())
        per_layer = self.attention_params_per_layer() + 2 * d  # two RMSNorms
        total = self._embedding_params() + d + self.num_layers * per_layer
        if self.moe:
            total += (self.num_layers - self._moe_layers()) * dense_ffn
            shared = self.moe.num_shared_experts * self.expert_params_per_layer()
            router = d * self.moe.num_experts + (self.moe.num_experts if self.moe.router_bias else 0)
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
        """Computed parameters touched per token ``P_act`` (= ``P`` for dense models).

        Counts the input embedding and output head like the published totals do.
        """
        if not self.moe:
            return self.params_total()
        active_experts = self._moe_layers() * self.moe.experts_per_token * self.expert_params_per_layer()
        return self.params_non_expert() + active_experts

    def params_active_matmul(self) -> int:
        """Active parameters that take part in per-token matmuls: ``P_act`` minus the input
        embedding (a table lookup). With tied embeddings the one matrix is the output head, so
        nothing is subtracted. Norm weights and biases (< 0.01 %) are left in."""
        if self.tie_word_embeddings:
            return self.params_active()
        return self.params_active() - self.vocab_size * self.hidden_size

    def params_active_published_basis(self) -> int:
        """Computed active parameters counted the way the publisher counts them."""
        if self.published_active_excludes_embedding and not self.tie_word_embeddings:
            return self.params_active() - self.vocab_size * self.hidden_size
        return self.params_active()

    def params_total_error_pct(self) -> float | None:
        """Computed total against the published total, percent (positive: computed is larger)."""
        if self.published_params_total_b is None:
            return None
        return 100.0 * (self.params_total() / (self.published_params_total_b * 1e9) - 1.0)

    def params_active_error_pct(self) -> float | None:
        """Computed active (publisher's basis) against the published active count, percent."""
        if self.published_params_active_b is None:
            return None
        return 100.0 * (self.params_active_published_basis() / (self.published_params_active_b * 1e9) - 1.0)

    # --- bytes ----------------------------------------------------------------------------
    def _params_quantizable(self) -> int:
        """Parameters stored at a below-bf16 weight precision (see ``quantized_scope``)."""
        if self.quantized_scope == "experts":
            return self.params_routed_experts()
        return self.params_total() - self._embedding_params()

    def weight_bytes_routed_experts(self, precision: str) -> float:
        """Bytes of all routed-expert weights at ``precision`` (0 for dense models)."""
        return self.params_routed_experts() * self._bytes_per_quantized_param(precision)

    def weight_bytes_non_expert(self, precision: str) -> float:
        """Bytes of every weight that is not a routed expert (read every decode step)."""
        return self.weight_bytes(precision) - self.weight_bytes_routed_experts(precision)

    @staticmethod
    def _bytes_per_quantized_param(precision: str) -> float:
        b = PRECISION_BYTES[precision]
        return b + (FP4_BLOCK_SCALE_BYTES_PER_PARAM if precision == "fp4" else 0.0)

    def weight_bytes(self, precision: str) -> float:
        """Weights ``W`` in bytes when served at ``precision``.

        ``bf16``: ``W = 2·P``. Below bf16, only the weights in ``quantized_scope`` take the
        precision's bytes (fp4 adds its block scales, +1/32 byte per value); the rest stays
        bf16, as in published fp8/fp4 checkpoints: ``W = b_w·P_q + 2·(P − P_q)``. fp8/int8
        per-channel or 128x128-block scales add < 0.1 % and are ignored. gpt-oss-120b at fp4
        gives 65.2 GB against a 60.8 GiB (65.3 GB) published checkpoint.
        """
        b = PRECISION_BYTES[precision]
        if b >= PRECISION_BYTES["bf16"]:
            return self.params_total() * b
        quantized = self._params_quantizable()
        return quantized * self._bytes_per_quantized_param(precision) + (self.params_total() - quantized) * PRECISION_BYTES["bf16"]

    def kv_bytes_per_token(self, kv_precision: str) -> float:
        """KV bytes per token over all layers (sliding-window layers included, uncapped).

        Standard attention: ``k = 2 · L · H_kv · d_h · b_kv``; MLA caches a latent:
        ``L · (kv_lora_rank + rope_dim) · b_kv``. Use :meth:`kv_bytes_for_context` for the
        total of one sequence, with sliding-window layers capped at the window.
        """
        b = PRECISION_BYTES[kv_precision]
        if self.mla:
            return self.num_layers * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * b
        return 2 * self.attention_layers() * self.num_kv_heads * self.head_dim * b

    def kv_bytes_for_context(self, context_tokens: float, kv_precision: str) -> float:
        """KV bytes of one sequence of ``context_tokens``: ``k/L · (L_full·c + L_sw·min(c, w))``."""
        per_layer_token = self.kv_bytes_per_token(kv_precision) / self.attention_layers()
        full_layers = self.attention_layers() - self.sliding_window_layers
        capped = min(context_tokens, self.sliding_window) if self.sliding_window else context_tokens
        return per_layer_token * (full_layers * context_tokens + self.sliding_window_layers * capped)

    # --- FLOPs ----------------------------------------------------------------------------
    def attention_flops_per_pair(self) -> float:
        """FLOPs of one (query token, key token) pair over all layers: ``2 · L · H_q · (d_qk + d_v)``.

        With ``d_qk = d_v = d_h`` this is the ``4 · L · H_q · d_h`` of DESIGN §3 (QKᵀ and AV,
        one multiply-add = 2 FLOPs each). MLA counts the un-absorbed (prefill) form.
        """
        return 2.0 * self.attention_layers() * self.num_attention_heads * (self.qk_head_dim + self.v_head_dim)

    @staticmethod
    def _causal_pairs(n: float, h: float, window: float | None) -> float:
        """(query, key) pairs of ``n`` new tokens after ``h`` cached ones, continuous form.

        Full causal attention: ``∫₀ⁿ (h + x) dx = n·(n + 2h)/2``. With a window ``w`` each
        query sees ``min(h + x, w)`` keys: ``n·w`` if ``h ≥ w``; else the first ``m = w − h``
        new tokens contribute ``m·h + m²/2`` and the rest ``(n − m)·w``. The continuous form
        undercounts the exact sum by ``n/2`` pairs (under 0.1 % for n ≥ 1000).
        """
        if window is None or h + n <= window:
            return n * (n + 2.0 * h) / 2.0
        if h >= window:
            return n * window
        m = window - h
        return m * h + m * m / 2.0 + (n - m) * window

    def attention_flops(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """Attention-score FLOPs (QKᵀ and AV) for ``n`` new tokens after ``h`` cached ones.

        ``per_pair/L · (L_full · pairs(n, h) + L_sw · pairs_w(n, h))``; a decode step of one
        token at context ``c`` is ``attention_flops(1, c)`` ≈ ``per_pair · c``.
        """
        per_layer_pair = self.attention_flops_per_pair() / self.attention_layers()
        full_layers = self.attention_layers() - self.sliding_window_layers
        pairs = full_layers * self._causal_pairs(new_tokens, cached_tokens, None)
        if self.sliding_window_layers:
            pairs += self.sliding_window_layers * self._causal_pairs(new_tokens, cached_tokens, self.sliding_window)
        return per_layer_pair * pairs

    def prefill_flops(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """FLOPs to prefill ``n`` new tokens after ``h`` cached ones (causal attention).

        ``2 · P_act,matmul · n + per_pair · n · (n + 2h) / 2`` (DESIGN §3), with sliding-window
        layers capped at their window (:meth:`attention_flops`).
        """
        return 2.0 * self.params_active_matmul() * new_tokens + self.attention_flops(new_tokens, cached_tokens) \
            + self.ssm_flops_per_token(prefill=True) * new_tokens

    @property
    def kind(self) -> Literal["dense", "moe"]:
        return "moe" if self.moe else "dense"
