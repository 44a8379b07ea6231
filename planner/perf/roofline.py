"""Roofline step times, memory fit and tensor-parallel communication (DESIGN §3).

Everything here is vectorised: an :class:`InstanceArrays` holds the constants of one or many
instances (model x device x tp x precision) as numpy arrays that broadcast together, so the
closed-loop predictor and the calibration fit evaluate hundreds of configurations per call.

Symbols (per instance of ``tp`` devices holding one replica):

==============  ============================================================================
``P``           parameters in per-token matmuls (``params_active_matmul``; input embedding out)
``A``           attention FLOPs per (query, key) pair, ``2 L H_q (d_qk + d_v)`` = ``4 L H_q d_h``
                (split into full-attention and sliding-window layers)
``W_s``         weight bytes read every step whatever the batch (all but routed experts and the
                input-embedding table, of which only the batch's rows are read)
``W_e``         routed-expert weight bytes (MoE; 0 dense); a fraction ``1-(1-a/E)^T`` is read for
                ``T`` tokens in the step
``k``           KV bytes per token (all layers); sliding-window layers cap at their window
``F``, ``BW``   dense peak FLOP/s at the compute precision, peak memory bytes/s (one device);
                ``F`` (and ``F_bf16`` for attention) times the device's measured GEMM efficiency
                relative to H100 SXM, ``g[p]`` (``DeviceProfile.gemm_efficiency_factor``, 1 unless
                measured; ``M_half`` keeps the datasheet ratio)
``eta_F, eta_B`` achieved fractions of ``F`` and ``BW`` (calibrated, :mod:`planner.perf.calibration`)
==============  ============================================================================

One engine iteration carries ``B`` decode sequences at context ``c`` plus ``n`` prefill
tokens in ``m`` equal prompts (or chunks of prompts; ``m = 1`` by default) of ``n/m`` tokens,
each with ``h`` tokens before it (cached prefix, or earlier chunks of the same prompt). GEMMs
and attention kernels run one after the other, so each has its own roofline and the times add::

    t_gemm = max(2 (P (B + n + M_half) - P_head (n - m)) / (tp F eta_F),  (W_s + W_e (1 - (1 - a/E)^(B+n))) / (tp BW eta_B))
    t_attn = max(A (B c + n (n/m + 2h) / 2) / (tp F_bf16 eta_F),  r_kv (B kv(c) + m kv(n/m + h)) / (min(tp, H_kv) BW eta_B))
    t      = t_gemm + t_attn + t_comm + t_overhead
    t_comm = 2 L * allreduce((B + n) d b_act)              (two all-reduces per layer, Megatron TP)
    allreduce(m) = 2 (tp-1)/tp * m / (eta_link link) + 2 lat + o_ar   (within the NVLink domain engines use
                   one-shot/two-shot custom all-reduces: a fixed number of steps; across nodes a
                   ring of 2 (tp-1) steps)
    t_overhead = o_layer * L + o_seq * (B + m [n > 0]) + o_step

``P (B + n + M_half)`` is ``2 P T / eta_F(T)`` with the row-dependent GEMM efficiency
``eta_F(T) = eta_f T / (T + M_half)``, ``M_half = 64 F / F_bf16`` (:data:`GEMM_M_HALF_TOKENS`):
small decode GEMMs do not reach the tensor-core rate, and fp8/fp4 GEMMs need proportionally more
rows before their higher peak shows. The output head ``P_head = V d`` runs for every decode token
but only for the last token of each of the ``m`` prompts. ``r_kv`` is
:data:`KV_DEQUANT_READ_FACTOR` for an fp8/fp4 KV cache (dequantisation in the attention kernel),
1 for bf16.

Sliding-window layers cap the pairs at the window (``causal_pairs``). Attention runs in bf16
(``F_bf16``) whatever the weight precision; fp8/fp4 GEMMs use the datasheet low-precision peak
(scaled by :data:`LOW_PRECISION_GEMM_GAIN`, and reached only at ``T >> M_half`` rows). ``o_layer`` (launches and small kernels per layer),
``o_seq`` (host time per running sequence: scheduling, sampling — not divided by tp) and
``o_ar`` (software latency per all-reduce) and ``eta_link`` (achieved fraction of the datasheet
link bandwidth in an all-reduce) are engine properties fitted by
:mod:`planner.perf.fit`; ``o_step`` is a fixed per-iteration cost (0 unless a user sets it: on
the H100 data it cannot be told apart from ``o_layer`` within one model).

``link`` is the scale-up bandwidth per direction (half the bidirectional figure); a TP group
larger than ``devices_per_node`` crosses nodes and its ring runs at the NIC bandwidth. A device
without a scale-up link (``scaleup_bw_gb_per_s_bidir`` unset: PCIe cards with no NVLink bridge)
runs its TP all-reduces over PCIe (``pcie_bw_gb_per_s``) as a ring of ``2 (tp-1)`` steps inside the
node too: the engines' one-shot / two-shot all-reduce kernels need NVLink peer access, and NCCL
over PCIe rings (aiconfigurator plans a PCIe-only H100 node the same way: ``h100_pcie.yaml``
``intra_node_bw`` = PCIe Gen5 x16, 64 GB/s per direction).

**Hybrid state-space models** (Nemotron-H: Mamba-2, attention and MLP blocks;
:class:`planner.schema.llm.HybridConfig`). The Mamba-2 in/out projections and the MLP blocks are
weight GEMMs inside ``P``; attention, ``A`` and ``k`` count the ``L_A`` attention blocks only. Each
sequence holds a fixed state ``S`` (conv window + SSM state over the ``L_M`` Mamba-2 blocks,
:meth:`~planner.schema.llm.LLMProfile.ssm_state_bytes_per_sequence`, heads split over ``tp``) that
every iteration reads and writes once per sequence it advances (decode sequences and prompt chunks
alike), and the scan and convolution add their FLOPs per token::

    t_attn = max((A pairs + f_dec B + f_pre n) / (tp F_bf16 eta_F),  (r_kv KV_read + 2 S (B + m [n > 0])) / (... BW eta_B))

with ``f_dec``, ``f_pre`` the per-token scan FLOPs of a decode step and of a chunked (SSD) prefill
(:meth:`~planner.schema.llm.LLMProfile.ssm_flops_per_token`; about 1 % of the GEMM FLOPs). ``S``
is counted once in a sequence's memory (:func:`kv_bytes` adds it to the KV at any context). The
layer count of the communication and overhead terms is ``L/2`` for a hybrid (one mixer and one
all-reduce per block: two blocks are one transformer layer's two all-reduces, and take its
fitted ``o_layer``). Approximations: the SSD kernel's fp32 chunk states (about ``16 H P N / Q``
bytes per prompt token per block, 164 kB for Nemotron-Nano) are left out (prefill is compute
bound: its GEMMs take about 8x that traffic's time on H100); vLLM pads attention pages of a
hybrid to the Mamba state's page size (page sizes, not totals, are not modelled); a model
without Mamba blocks gets ``S = f = 0`` and the same figures as before to the bit.

Memory fit per device: ``W/tp + reserve + KV <= M u_mem``. KV is split over ``min(tp, H_kv)``
devices (heads are replicated when ``tp > H_kv``); an MLA latent is not split at all (``H_kv`` counts as 1:
under TP every rank keeps the whole latent cache, the reason wide-EP deployments use DP attention). ``M`` is the memory the driver reports, not the
datasheet's decimal gigabytes: :func:`device_memory_bytes` (round 9 of ``planner/perf/README.md``).
Engines size their KV pool each their own way (:func:`engine_kv_pool_bytes`: vLLM a fraction of ``M``,
TensorRT-LLM a fraction of what is free after the weights, SGLang ``M`` minus a reserve by device
class), and allocate it in blocks (:func:`blocks_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from planner.schema.common import PRECISION_BYTES
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile

ACT_BYTES = 2.0
"""Activation bytes per element in the all-reduce (bf16 activations in every engine we model)."""
DEFAULT_LINK_LATENCY_US = 3.0
"""Latency of one collective step when a profile gives none, us (aiconfigurator's
``mem_empirical_constant_latency`` 3 us; NVLink steps are a few us)."""
DEFAULT_NIC_GB_PER_S = 25.0
"""Per-device NIC bandwidth assumed when a profile gives none (200 Gb/s), GB/s."""
LOW_PRECISION_GEMM_GAIN = 1.0
"""Share of the datasheet low-precision speed-up (fp8/fp4 over bf16 dense peak) the GEMMs
realise, before ``eta_f``: ``F = F_bf16 (1 + g (F_p / F_bf16 - 1))``. 1.0 = the datasheet
figure. On the shipped H100 rows ``g = 0.5`` trades TTFT for TPOT fidelity (see README); we
keep the datasheet value rather than tune a constant to one device's rows."""
GEMM_M_HALF_TOKENS = 64.0
"""Rows at which a bf16 GEMM reaches half its sustained rate: ``eta_F(M) = eta_f M / (M + M_half)``
with ``M_half = 64 F / F_bf16`` (round 4). 64 = the row count of one Hopper warpgroup MMA tile
(``wgmma`` m64): a GEMM with fewer rows still runs a full tile, and a tile's load latency is fixed,
so a precision that multiplies faster needs proportionally more rows to amortise it (fp8: 128,
fp4: 256). Not fitted; 48-96 give the same out-of-sample errors within 1.5 points (README)."""
KV_DEQUANT_READ_FACTOR = 1.34
"""Time of reading a low-precision (fp8/fp4) KV cache in attention, per byte, relative to a bf16
byte: dequantisation in the attention kernel makes an fp8 KV read cost 0.67 of the bf16 read of
the same tokens, not 0.5 (TensorRT-LLM XQA on H100, Llama-3.1-8B batch 64: 40 us fp8 vs 60 us
fp16 per kernel, NVIDIA/TensorRT-LLM issue 2372). 1.34 = 0.67 / 0.5. Capacity uses the true bytes."""
U_MEM = 0.90
"""Share of device memory the engine may use (vLLM ``gpu_memory_utilization`` default 0.9)."""
RESERVE_GB = 3.0
"""Per-device memory held for activations, CUDA graphs and the runtime, GB (a typical vLLM /
TensorRT-LLM footprint at 8k-token batches; state-of-the-art engines report 2-5 GB)."""
GIB = float(2**30)
DRIVER_VISIBLE_SHARE = 0.9956
"""Share of the nominal HBM capacity the driver reports. Datasheet "GB" of HBM devices are binary
(GiB: 80 GB = five 16 GiB stacks); NVML reports H100 80 GB as 81,559 MiB (79.65 GiB = 85.52e9 B) and
H200 141 GB as 143,771 MiB (140.40 GiB = 150.75e9 B): 0.9956 and 0.9957 of the nominal GiB
(thundergolfer.com/blog/nvidia-gpu-memory-capacity, NVML figures per GPU). Engines size their KV pool
from what the driver reports (``torch.cuda.mem_get_info``), so the decimal reading lost 7 % of it."""


@dataclass(frozen=True)
class InstanceArrays:
    """Per-instance constants as broadcastable arrays (see the module docstring for symbols)."""

    tp: np.ndarray
    layers: np.ndarray
    hidden: np.ndarray
    kv_heads: np.ndarray
    p_matmul: np.ndarray
    p_lm_head: np.ndarray
    """Parameters of the output head (``V d``), inside ``p_matmul``: computed for every decode
    token but only for the last token of each prompt (engines take logits only where they sample)."""
    attn_pair_flops: np.ndarray
    """Attention FLOPs per (query, key) pair over the full-attention layers."""
    attn_pair_flops_window: np.ndarray
    """Attention FLOPs per (query, key) pair over the sliding-window layers (0 when none)."""
    w_shared_bytes: np.ndarray
    w_expert_bytes: np.ndarray
    expert_frac: np.ndarray
    """``a/E`` (0 for dense models)."""
    kv_full_per_token: np.ndarray
    """KV bytes per token over full-attention layers."""
    kv_window_per_token: np.ndarray
    """KV bytes per token over sliding-window layers."""
    window_tokens: np.ndarray
    """Sliding window (inf when none)."""
    kv_read_scale: np.ndarray
    """Read-time factor per KV byte (:data:`KV_DEQUANT_READ_FACTOR` below bf16, else 1)."""
    weight_bytes: np.ndarray
    flops_peak: np.ndarray
    attn_flops_peak: np.ndarray
    """Dense bf16 peak FLOP/s: attention (QK^T, AV) runs in bf16 whatever the weight precision."""
    bw_bytes_per_s: np.ndarray
    link_bytes_per_s: np.ndarray
    link_latency_s: np.ndarray
    memory_bytes: np.ndarray
    node_size: np.ndarray
    """Devices per scale-up domain (a larger TP group crosses nodes)."""
    ring_in_node: np.ndarray
    """1 when the devices have no scale-up link (PCIe cards without NVLink: TP all-reduces run as a
    ring of ``2 (tp-1)`` steps over PCIe even inside a node), else 0 (one-shot / two-shot kernels)."""
    gemm_m_half: np.ndarray
    """``M_half``: GEMM rows at which the matmuls reach half their sustained rate,
    ``GEMM_M_HALF_TOKENS F / F_bf16`` (:func:`gemm_m_half_rows`)."""
    state_bytes: Any = 0.0
    """Fixed per-sequence state of a hybrid's Mamba-2 blocks in the KV pool's units (bytes over
    ``min(tp, H_kv)`` devices: ``S min(tp, H_kv) / tp``, the state's heads split over ``tp``); 0 otherwise."""
    ssm_flops_decode: Any = 0.0
    """Scan + conv FLOPs per decode token over the Mamba-2 blocks (0 without them)."""
    ssm_flops_prefill: Any = 0.0
    """Scan + conv FLOPs per prompt token (chunked SSD) over the Mamba-2 blocks (0 without them)."""

    def take(self, index: Any) -> InstanceArrays:
        return InstanceArrays(**{f.name: np.asarray(getattr(self, f.name))[index] for f in fields(self)})

    @staticmethod
    def stack(items: list[InstanceArrays]) -> InstanceArrays:
        return InstanceArrays(**{f.name: np.array([float(getattr(i, f.name)) for i in items]) for f in fields(InstanceArrays)})


def gemm_m_half_rows(flops_peak: float, bf16_peak: float) -> float:
    """GEMM rows at which a weight GEMM reaches half its sustained rate (``M_half`` of
    ``eta_F(M) = eta_f M / (M + M_half)``): ``GEMM_M_HALF_TOKENS F / F_bf16`` (fp8 on Hopper 128
    rows, fp4 on Blackwell 256). The one place every step-time model (dense, expert-parallel,
    speculative) takes it from.

    Tried for issue 25 and not shipped: the ridge rule ``GEMM_M_HALF_TOKENS (F / F_bf16) (b_w / 2)``
    (a GEMM leaves weight streaming at ``M* = F b_w / (2 BW)``, the same rows for bf16 and fp8 on one
    device, so fp8/fp4 would need 64 rows, not 128/256). With the H100 calibration refitted on
    ``silicon_h100_dense.csv`` it moved TensorRT-LLM's FP8 Hopper throughput tables from -22 % to
    -20 % mean (``benchmarks/bench_trtllm_perf_overview.py``) and the H100 -> H200 transfer TPOT
    from 27.9 % to 24.7 % (TTFT 61.1 -> 61.2 %), but the MLPerf goodput pooled error from 19.5 %
    to 19.8 % (B200 Interactive fp4 more optimistic, +26 %) and TensorRT-LLM's H100 TPOT fit from
    9.7 % to 11.4 % in sample (16.6 -> 20.0 % leave one model out): the H100 fp8 rows prefer the
    scaled rule, as round 4 found (``planner/perf/README.md``)."""
    return GEMM_M_HALF_TOKENS * flops_peak / bf16_peak


def instance_arrays(model: LLMProfile, device: DeviceProfile, tp: int, weight_precision: str, kv_precision: str) -> InstanceArrays:
    """Constants of one instance (0-d arrays). Raises ``ValueError`` naming a missing device figure."""
    missing = [f for f in ("memory_gb", "memory_bandwidth_gb_per_s") if getattr(device, f) is None]
    # matmuls run at the weights' precision when the device has tensor cores for it (W8A8,
    # W4A4); otherwise peak_flops falls back to the next wider precision (weight-only quant.)
    flops = device.peak_flops(weight_precision)
    bf16_peak = device.peak_flops("bf16")
    if flops is not None and bf16_peak and flops > bf16_peak:
        flops = bf16_peak * (1.0 + LOW_PRECISION_GEMM_GAIN * (flops / bf16_peak - 1.0))
    if flops is None:
        missing.append("peak_tflops_dense")
    if missing:
        raise ValueError(f"device {device.id!r} lacks {', '.join(missing)}")
    b_w = PRECISION_BYTES[weight_precision]
    emb_in = model.vocab_size * model.hidden_size * b_w
    w_total = model.weight_bytes(weight_precision)
    w_expert = model.params_routed_experts() * b_w
    # the input-embedding table is not streamed, only the batch's rows (negligible);
    # a tied table is read in full as the LM head.
    w_shared = w_total - w_expert - (0.0 if model.tie_word_embeddings else emb_in)
    frac = model.moe.experts_per_token / model.moe.num_experts if model.moe else 0.0
    k_all = model.kv_bytes_per_token(kv_precision)
    per_layer = k_all / model.num_layers
    k_win = per_layer * model.sliding_window_layers if model.sliding_window else 0.0
    window = float(model.sliding_window) if model.sliding_window else np.inf
    a_pair = model.attention_flops_per_pair()
    a_win = a_pair * model.sliding_window_layers / model.num_layers if model.sliding_window else 0.0
    attn_peak = device.peak_flops("bf16") or flops or 0.0
    # M_half from the datasheet ratio (the tile argument); the sustained rates then take the
    # device's measured GEMM efficiency relative to the reference device (H100 SXM, on whose rows
    # eta_f is fitted): F_p x g[p] for the GEMMs, F_bf16 x g[bf16] for attention (1 unless measured)
    m_half = gemm_m_half_rows(flops, attn_peak) if flops is not None else 0.0
    if flops is not None:
        flops *= device.gemm_factor(weight_precision)
    attn_peak *= device.gemm_factor("bf16")
    ring = 0.0
    if tp <= device.devices_per_node:
        link = (device.scaleup_bw_gb_per_s_bidir or 0.0) / 2.0 * 1e9
        if link <= 0:  # no scale-up link: TP runs over PCIe/NIC, an NCCL ring
            link = (device.pcie_bw_gb_per_s or device.nic_bw_gb_per_s or DEFAULT_NIC_GB_PER_S) * 1e9
            ring = 1.0
        lat = (device.scaleup_latency_us if device.scaleup_latency_us is not None else DEFAULT_LINK_LATENCY_US) * 1e-6
    else:
        link = (device.nic_bw_gb_per_s or DEFAULT_NIC_GB_PER_S) * 1e9
        lat = 4.0 * DEFAULT_LINK_LATENCY_US * 1e-6  # a network hop: ~20 us per ring step
    assert device.memory_gb is not None and device.memory_bandwidth_gb_per_s is not None and flops is not None
    values = dict(
        tp=tp, layers=model.transformer_layer_equivalents(), hidden=model.hidden_size, kv_heads=1 if model.mla else model.num_kv_heads,  # MLA: one latent, not split by TP
        p_matmul=model.params_active_matmul(), p_lm_head=model.vocab_size * model.hidden_size, attn_pair_flops=a_pair - a_win, attn_pair_flops_window=a_win,
        w_shared_bytes=w_shared, w_expert_bytes=w_expert, expert_frac=frac,
        kv_read_scale=KV_DEQUANT_READ_FACTOR if PRECISION_BYTES[kv_precision] < PRECISION_BYTES["bf16"] else 1.0,
        kv_full_per_token=k_all - k_win, kv_window_per_token=k_win, window_tokens=window,
        weight_bytes=w_total, flops_peak=flops, attn_flops_peak=attn_peak, bw_bytes_per_s=device.memory_bandwidth_gb_per_s * 1e9,
        link_bytes_per_s=link, link_latency_s=lat, memory_bytes=device_memory_bytes(device.memory_gb),
        node_size=device.devices_per_node, ring_in_node=ring, gemm_m_half=m_half,
        state_bytes=model.ssm_state_bytes_per_sequence() * min(tp, 1 if model.mla else model.num_kv_heads) / tp,
        ssm_flops_decode=model.ssm_flops_per_token(prefill=False), ssm_flops_prefill=model.ssm_flops_per_token(prefill=True),
    )
    return InstanceArrays(**{k: np.asarray(float(v)) for k, v in values.items()})


@dataclass(frozen=True)
class Efficiency:
    """Achieved-efficiency factors and overheads of one engine (arrays broadcast per row)."""

    eta_f: Any
    """Achieved fraction of dense peak FLOP/s."""
    eta_b: Any
    """Achieved fraction of peak memory bandwidth."""
    step_overhead_s: Any
    """Fixed time per engine iteration (scheduling, sampling, launch), s."""
    layer_overhead_s: Any
    """Extra time per layer per iteration (kernel launches, small ops), s."""
    seq_overhead_s: Any = 0.0
    """Host time per sequence in an iteration (scheduler bookkeeping, sampling, detokenising;
    not divided by tp), s."""
    allreduce_overhead_s: Any = 0.0
    """Software latency of one all-reduce on top of the link hops (kernel launch, sync), s."""
    eta_link: Any = 1.0
    """Achieved fraction of the datasheet scale-up link bandwidth in a TP all-reduce."""


# --- bytes --------------------------------------------------------------------------------
def attention_kv_bytes(inst: InstanceArrays, context: Any) -> np.ndarray:
    """KV bytes of one sequence of ``context`` tokens over the attention layers (sliding-window layers capped)."""
    c = np.asarray(context, dtype=float)
    return inst.kv_full_per_token * c + inst.kv_window_per_token * np.minimum(c, inst.window_tokens)


def kv_bytes(inst: InstanceArrays, context: Any) -> np.ndarray:
    """Cache bytes one sequence of ``context`` tokens holds: its attention KV plus a hybrid's fixed
    Mamba-2 state (``inst.state_bytes``, 0 without Mamba blocks)."""
    return attention_kv_bytes(inst, context) + inst.state_bytes


def weights_read_bytes(inst: InstanceArrays, tokens: Any) -> np.ndarray:
    """``W_s + W_e (1 - (1 - a/E)^T)``: weights streamed in an iteration touching ``T`` tokens."""
    t = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    touched = np.where(inst.expert_frac > 0, 1.0 - (1.0 - inst.expert_frac) ** t, 0.0)
    return inst.w_shared_bytes + inst.w_expert_bytes * touched


def kv_split(inst: InstanceArrays) -> np.ndarray:
    """Devices over which KV is split: ``min(tp, H_kv)``."""
    return np.minimum(inst.tp, inst.kv_heads)


# --- communication ------------------------------------------------------------------------
def allreduce_s(inst: InstanceArrays, message_bytes: Any, overhead_s: Any = 0.0, eta_link: Any = 1.0) -> np.ndarray:
    """All-reduce of ``message_bytes`` over the TP group (0 for tp = 1); see the module docstring.
    ``eta_link`` is the achieved fraction of the link's datasheet bandwidth."""
    tp = inst.tp
    hops = np.where((tp <= inst.node_size) & (inst.ring_in_node == 0), 2.0, 2.0 * (tp - 1.0))
    wire = 2.0 * (tp - 1.0) / tp * np.asarray(message_bytes) / (inst.link_bytes_per_s * eta_link)
    return np.where(tp > 1, wire + hops * inst.link_latency_s + overhead_s, 0.0)


def comm_s(inst: InstanceArrays, tokens: Any, overhead_s: Any = 0.0, eta_link: Any = 1.0) -> np.ndarray:
    """Tensor-parallel communication of one iteration: 2 all-reduces per layer of ``tokens x d``."""
    return 2.0 * inst.layers * allreduce_s(inst, np.asarray(tokens, dtype=float) * inst.hidden * ACT_BYTES, overhead_s, eta_link)


def causal_pairs(n: Any, h: Any, window: Any) -> np.ndarray:
    """(query, key) pairs of ``n`` new tokens after ``h`` cached ones, each query seeing at most
    ``window`` keys (continuous form of :meth:`LLMProfile._causal_pairs`; ``inf`` = no window)."""
    n = np.asarray(n, dtype=float)
    h = np.asarray(h, dtype=float)
    full = n * (n + 2.0 * h) / 2.0
    w = np.asarray(window, dtype=float)
    wf = np.where(np.isfinite(w), w, 0.0)
    m = np.clip(wf - h, 0.0, n)
    capped = m * h + m * m / 2.0 + (n - m) * wf
    return np.where(np.isfinite(w) & (h + n > w), capped, full)


# --- step time ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StepTime:
    """Components of one iteration's time, seconds (arrays)."""

    total_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    comm_s: np.ndarray
    overhead_s: np.ndarray

    def bound(self) -> np.ndarray:
        """Dominant term per element: 'compute', 'memory_bandwidth' or 'communication'."""
        roof = np.maximum(self.compute_s, self.memory_s)
        out = np.where(self.compute_s >= self.memory_s, "compute", "memory_bandwidth")
        return np.where(self.comm_s > roof, "communication", out)


def iteration_time(
    inst: InstanceArrays,
    eff: Efficiency,
    decode_batch: Any = 0.0,
    decode_context: Any = 0.0,
    prefill_tokens: Any = 0.0,
    prefill_cached: Any = 0.0,
    prefill_prompts: Any = 1.0,
) -> StepTime:
    """Time of one engine iteration: ``decode_batch`` sequences at ``decode_context`` tokens plus
    ``prefill_tokens`` new prompt tokens after ``prefill_cached`` cached ones (module docstring).

    ``prefill_prompts`` = ``m`` splits the prefill tokens into ``m`` equal prompts (or chunks of
    different prompts) of ``n/m`` tokens, each after ``prefill_cached`` cached tokens: attention
    pairs ``m (n/m)(n/m + 2h)/2``, KV read ``m kv(n/m + h)``, ``m`` sequences of host overhead.
    The default 1 is one prompt (or one chunk) of ``n`` tokens.

    The GEMMs and the attention kernels run one after the other, so each gets its own roofline
    and the times add (a decode batch's attention is bound by KV reads while the prefill
    tokens' GEMMs are bound by FLOPs — a single max over the totals would hide one of them)."""
    b = np.asarray(decode_batch, dtype=float)
    c = np.asarray(decode_context, dtype=float)
    n = np.asarray(prefill_tokens, dtype=float)
    h = np.asarray(prefill_cached, dtype=float)
    m = np.maximum(np.asarray(prefill_prompts, dtype=float), 1.0)
    per = n / m
    tokens = b + n
    lm_rows = np.where(n > 0, np.minimum(m, n), 0.0)  # logits only for each prompt's last token
    m_half = inst.gemm_m_half
    gemm_flops = 2.0 * (inst.p_matmul * (tokens + m_half) - inst.p_lm_head * (n - lm_rows))
    gemm_c = gemm_flops / (inst.tp * inst.flops_peak * eff.eta_f)
    gemm_m = weights_read_bytes(inst, tokens) / (inst.tp * inst.bw_bytes_per_s * eff.eta_b)
    pairs_full = b * c + n * (per + 2.0 * h) / 2.0
    pairs_win = b * np.minimum(c, inst.window_tokens) + m * causal_pairs(per, h, inst.window_tokens)
    attn_flops = inst.attn_pair_flops * pairs_full + inst.attn_pair_flops_window * pairs_win \
        + inst.ssm_flops_decode * b + inst.ssm_flops_prefill * n
    attn_c = attn_flops / (inst.tp * inst.attn_flops_peak * eff.eta_f)
    kv_read = b * attention_kv_bytes(inst, c) + np.where(n > 0, m * attention_kv_bytes(inst, per + h), 0.0)
    seqs = b + np.where(n > 0, m, 0.0)
    state_rw = 2.0 * inst.state_bytes * seqs  # each advanced sequence reads and writes its Mamba-2 state once
    attn_m = (kv_read * inst.kv_read_scale + state_rw) / (kv_split(inst) * inst.bw_bytes_per_s * eff.eta_b)
    t_c = gemm_c + attn_c
    t_m = gemm_m + attn_m
    t_x = comm_s(inst, tokens, eff.allreduce_overhead_s, eff.eta_link)
    t_o = np.asarray(eff.step_overhead_s + eff.layer_overhead_s * inst.layers + eff.seq_overhead_s * seqs, dtype=float)
    total = np.maximum(gemm_c, gemm_m) + np.maximum(attn_c, attn_m) + t_x + t_o
    return StepTime(total, t_c, t_m, t_x, np.broadcast_to(t_o, total.shape))


def prefill_time(inst: InstanceArrays, eff: Efficiency, new_tokens: Any, cached_tokens: Any = 0.0) -> StepTime:
    """One prompt of ``new_tokens`` after ``cached_tokens`` of cached prefix, in one iteration."""
    return iteration_time(inst, eff, prefill_tokens=new_tokens, prefill_cached=cached_tokens)


# --- memory -------------------------------------------------------------------------------
def kv_capacity_bytes(inst: InstanceArrays, u_mem: float = U_MEM, reserve_gb: float = RESERVE_GB) -> np.ndarray:
    """KV bytes the whole instance can hold: ``(M u_mem - W/tp - reserve) x min(tp, H_kv)``
    (negative when the weights do not fit)."""
    free_per_device = inst.memory_bytes * u_mem - inst.weight_bytes / inst.tp - reserve_gb * 1e9
    return free_per_device * kv_split(inst)


def max_batch(inst: InstanceArrays, peak_context: Any, u_mem: float = U_MEM, reserve_gb: float = RESERVE_GB) -> np.ndarray:
    """Largest number of sequences of ``peak_context`` tokens whose KV fits (0 if none)."""
    cap = kv_capacity_bytes(inst, u_mem, reserve_gb)
    per_seq = kv_bytes(inst, peak_context)
    return np.where(cap > 0, np.floor(np.maximum(cap, 0.0) / np.maximum(per_seq, 1.0)), 0.0)


def memory_per_device_bytes(inst: InstanceArrays, kv_total_bytes: Any, reserve_gb: float = RESERVE_GB) -> np.ndarray:
    """Memory one device holds: ``W/tp + reserve + KV / min(tp, H_kv)``."""
    return inst.weight_bytes / inst.tp + reserve_gb * 1e9 + np.asarray(kv_total_bytes) / kv_split(inst)


def device_memory_bytes(memory_gb: Any) -> Any:
    """Bytes the driver reports for a device of ``memory_gb`` nominal (binary) gigabytes:
    ``memory_gb x 2^30 x`` :data:`DRIVER_VISIBLE_SHARE`."""
    return np.asarray(memory_gb, dtype=float) * GIB * DRIVER_VISIBLE_SHARE


SGLANG_RESERVE_GIB = ((90.0, 9.5, 0.5), (160.0, 12.0, 0.5), (float("inf"), 32.0, 0.0))
"""SGLang's automatic ``mem_fraction_static`` (``server_args.py``, 0.4.9-0.5.x): the static pool
(weights + KV) is ``M - reserved`` with ``reserved = a + b tp`` GiB by device memory class —
below 90 GiB (H100, A100) ``9.5 + tp/2``; below 160 GiB (H200, H20) ``12 + tp/2``; larger (B200,
MI300) 32. Rows: (class upper bound GiB, a, b)."""


def sglang_reserved_bytes(memory_bytes: Any, tp: Any) -> np.ndarray:
    """Per-device memory SGLang keeps outside its static pool (:data:`SGLANG_RESERVE_GIB`)."""
    gib = np.asarray(memory_bytes, dtype=float) / GIB
    tp = np.asarray(tp, dtype=float)
    out = np.full(np.broadcast(gib, tp).shape, SGLANG_RESERVE_GIB[-1][1])
    for bound, a, b in reversed(SGLANG_RESERVE_GIB):
        out = np.where(gib < bound, a + b * tp, out)
    return out * GIB


def engine_kv_pool_bytes(inst: InstanceArrays, memory_fraction: Any, workspace_gb: Any, share_of_free: Any) -> np.ndarray:
    """KV pool of one device as the engine sizes it (negative when the weights do not fit)::

        share_of_free (TensorRT-LLM):  f (M - W/tp - workspace)            free_gpu_memory_fraction f = 0.9
        otherwise (vLLM):              f M - W/tp - workspace              gpu_memory_utilization f = 0.9
        f = NaN (SGLang automatic):    M - reserved(M, tp) - W/tp          mem_fraction_static = 1 - reserved/M

    ``workspace`` = activations of the largest batch, CUDA graphs, communication buffers (GB, per
    device; the engine measures it in a profiling pass before it sizes the pool)."""
    m = inst.memory_bytes
    w = inst.weight_bytes / inst.tp
    ws = np.asarray(workspace_gb, dtype=float) * 1e9
    f = np.asarray(memory_fraction, dtype=float)
    auto = np.isnan(f)
    f_ = np.where(auto, 1.0, f)
    pool = np.where(share_of_free, f_ * (m - w - ws), f_ * m - w - ws)
    return np.where(auto, m - sglang_reserved_bytes(m, inst.tp) - w, pool)


def blocks_tokens(tokens: Any, block_tokens: Any) -> np.ndarray:
    """Tokens a sequence of ``tokens`` holds in the pool: rounded up to whole blocks (vLLM 16,
    TensorRT-LLM 32, SGLang 1 token per page by default)."""
    b = np.maximum(np.asarray(block_tokens, dtype=float), 1.0)
    return np.ceil(np.asarray(tokens, dtype=float) / b) * b
