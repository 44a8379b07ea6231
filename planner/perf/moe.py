"""Mixture-of-experts models served with expert parallelism (EP) and data-parallel attention.

How the large MoE/MLA deployments run (DeepSeek's inference system, open-source week day 6, 2025:
prefill EP32, decode EP144 on H800; SGLang on 96 H100, LMSYS blog 2025-05-05: prefill EP32 on
4 nodes, decode EP72 on 9 nodes): one replica of ``G`` GPUs, possibly over several nodes, holds
the routed experts spread over all ``G`` GPUs (``EP = G``) while attention, dense layers, shared
experts and the output head run data-parallel: ``dp`` ranks of ``tp`` GPUs each (``dp x tp = G``;
``tp = 1`` in both references). Every MoE layer sends each token to the GPUs of its ``a`` experts
(dispatch) and brings the results back (combine): an all-to-all over NVLink inside a node and
over the NIC across nodes. This module is the step-time model of such a replica; the per-GPU
roofline pieces are :mod:`planner.perf.roofline`'s, with the engine's calibrated efficiencies.

Parallelism of a replica (:class:`Parallelism`), constraints as engines impose them:
``EP = dp x tp = G``; ``EP <= E + R`` (``E`` routed experts, ``R`` redundant EPLB slots,
:attr:`MoECalibration.redundant_experts`); ``tp <= devices_per_node``; a replica larger than a
node fills whole nodes. Experts per GPU ``e = ceil((E + R) / EP)``; shared experts are part of
the replicated (non-expert) weights.

Symbols (per replica; the engine's ``eta_f``, ``eta_b``, overheads as in the roofline):

==============  ============================================================================
``T``           tokens one DP rank carries in an iteration (decode batch ``B`` + prefill ``n``)
``P_ne``        per-token matmul parameters outside the routed experts (attention, dense FFN
                layers, shared experts, router, output head)
``P_e``         parameters of one routed expert (``3 d f_e``), ``L_e`` MoE layers
``a``, ``e``    experts per token; expert slots per GPU ``ceil((E + R) / EP)``
``beta``        EPLB imbalance, max / mean tokens per GPU (:attr:`MoECalibration.ep_imbalance`)
``M_half``      rows at which a GEMM reaches half its rate (roofline ``GEMM_M_HALF_TOKENS``)
``N``           nodes of the replica ``ceil(EP / devices_per_node)``
==============  ============================================================================

One iteration of a DP rank (all ranks run in lock-step: every MoE layer is a collective)::

    t_dense  = roofline of the rank's attention and P_ne GEMMs on its tp GPUs (iteration_time
               with the routed experts taken out and the MLA latent not split by tp)
    rows     = beta T a / tp                                  token-expert rows on the busiest GPU
    t_expert = L_e max(2 P_e (rows + e u M_half) / (F eta_f),   e u P_e b_w / (BW eta_b)),   u = 1 - exp(-rows/e)
    t_a2a    = L_e [ beta max(V_nic / (eta_nic NIC), V_nvl / (eta_nvl NVL)) + 2 lat ]
    t        = t_overhead + t_tp_comm + overlap(t_dense, t_expert, t_a2a)       (two-batch overlap below)

Dispatch sends each token's hidden state in fp8 (``d (1 + 4/128)`` bytes with DeepEP's 128-element
fp32 scales), combine returns it in bf16 (``2 d``). Per GPU and MoE layer ``T/tp`` tokens leave:

- decode (DeepEP low-latency kernels, pure RDMA, one message per token and expert):
  ``a (N - 1)/N`` copies per token cross the NIC, ``a / N`` stay on NVLink;
- prefill (DeepEP normal kernels, one RDMA copy per destination node, forwarded over NVLink):
  ``(N - 1)(1 - (1 - 1/N)^a)`` copies per token cross the NIC (the expected number of other nodes
  holding one of its ``a`` experts, experts placed uniformly), ``a`` copies ride NVLink.

``NIC`` is the device's ``nic_bw_gb_per_s`` per GPU (one NIC per GPU, as in HGX nodes); a profile
without it gets :data:`DEFAULT_NIC_GB_PER_S` and the output says so. ``NVL`` is the per-direction
scale-up bandwidth (half the bidirectional datasheet figure).

Two-batch overlap (TBO, DeepSeek's dual micro-batch design, SGLang ``--enable-two-batch-overlap``)
splits the iteration into two micro-batches so that one's all-to-all runs while the other
computes, stage by stage: the attention stage (``t_dense``) of one micro-batch beside the other's
combine, the MoE stage (``t_expert``) beside its dispatch::

    t_tbo = pair(C_dense, X_combine) + pair(C_expert, X_dispatch),
    pair(C, X) = max(C, X) + (1 - o) min(C, X)

with ``o`` = :attr:`MoECalibration.tbo_overlap`; ``X`` splits by bytes (dispatch ``1.03 d``,
combine ``2 d`` per copy); each ``C`` is computed at half the rows twice (smaller GEMMs, as
SGLang's breakdown shows) and, in prefill, with the SMs the normal kernels hold taken out
(``C / (1 - s)``, :attr:`MoECalibration.prefill_comm_sm_share`). Without TBO ``C + X``. The engine
runs whichever is faster (the blog: TBO loses below ~64 tokens per device, gains 25-35 % above).

Memory per GPU: ``W_ne / tp + e L_e P_e b_w + reserve + buffer + KV``; ``buffer`` = DeepEP
low-latency receive buffers, ``2 x T_max x (E + R) x 2d`` bytes (one bf16 message slot per
(expert, token) for dispatch and combine; ``T_max`` =
:attr:`MoECalibration.decode_max_tokens_per_rank`). KV: MLA caches one latent per token that is not
split by heads, so under attention TP every GPU of the rank holds the whole latent; the rank's KV
capacity is one GPU's free memory (``min(tp, H_kv)`` GPUs' for grouped-query attention).

Operating points (:func:`ep_operating_point`) per replica: prefill ``tau = t / (dp m)`` for ``m``
prompts per rank, decode ``tau = OSL t(B) / (dp B)`` for the largest per-rank batch ``B`` within
the per-token target, memory and ``T_max``. Unified (shared pool) points are infeasible: DeepEP's
normal and low-latency dispatch cannot run in one group under DP attention (the blog's
compatibility table), which is why the references disaggregate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from planner.perf.calibration import Calibration, MoECalibration
from planner.perf.roofline import (
    DEFAULT_NIC_GB_PER_S,
    RESERVE_GB,
    U_MEM,
    Efficiency,
    InstanceArrays,
    StepTime,
    instance_arrays,
    iteration_time,
    kv_bytes,
)
from planner.perf.speculative import SpecCost, itl_quantile_s, largest_batch_meeting
from planner.schema.capacity import OperatingPoint
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile
from planner.schema.speculative import SpeculativeDecoding

DEFAULT_EP_DEGREES: tuple[int, ...] = (8, 16, 32, 64, 72, 144)
"""EP replica sizes tried for MoE models when ``catalog.ep_degrees`` is not given: the sizes of the
references (prefill EP32; decode EP72 in SGLang's 96-H100 run, EP144 in DeepSeek's) and powers of two."""
DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128.0
"""FP8 dispatch: one byte per element plus an fp32 scale per 128 elements (DeepEP, DeepSeek-V3)."""
COMBINE_BYTES_PER_ELEMENT = 2.0
"""BF16 combine (DeepEP)."""
A2A_CALLS_PER_LAYER = 2.0
"""Dispatch and combine."""
MAX_DECODE_BATCH_PER_RANK = 1024
"""Hard cap on the per-rank decode batch grid (as ``points.MAX_BATCH``)."""
PREFILL_PROMPTS_PER_RANK: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
"""Prompts per rank tried by the prefill point (plus the largest the token budget and memory allow)."""


@dataclass(frozen=True)
class Parallelism:
    """Parallelism of one replica: attention ``tp`` inside each of ``dp`` data-parallel ranks, experts
    over ``ep = dp x tp`` GPUs. A TP-only replica is ``Parallelism(tp, 1, 1)``."""

    tp: int
    ep: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def is_ep(self) -> bool:
        return self.ep > 1

    def label(self) -> str:
        """``tp1·ep32·dp32`` (``tp8`` for TP only)."""
        return f"tp{self.tp}·ep{self.ep}·dp{self.dp}" if self.is_ep else f"tp{self.tp}"

    def key(self) -> str:
        """ASCII form used in config and pool names: ``tp1-ep32-dp32`` (``tp8`` for TP only)."""
        return self.label().replace("·", "-")


def experts_per_gpu(model: LLMProfile, ep: int, params: MoECalibration) -> int:
    """``ceil((E + R) / EP)`` expert slots per GPU."""
    assert model.moe is not None
    return math.ceil((model.moe.num_experts + params.redundant_for(model.moe.num_experts)) / ep)


def check_parallelism(model: LLMProfile, device: DeviceProfile, par: Parallelism, params: MoECalibration) -> str:
    """Why an EP parallelism cannot serve ``model`` on ``device`` ('' if it can)."""
    if model.moe is None:
        return f"{model.id} is dense: expert parallelism needs a mixture-of-experts model"
    slots = model.moe.num_experts + params.redundant_for(model.moe.num_experts)
    node = device.devices_per_node
    if par.ep != par.gpus:
        return f"EP {par.ep} != dp {par.dp} x tp {par.tp}: the experts are spread over every GPU of the replica"
    if par.ep > slots:
        return f"EP {par.ep} exceeds the {slots} expert slots ({model.moe.num_experts} experts + {params.redundant_for(model.moe.num_experts)} redundant)"
    if par.tp > node:
        return f"attention tp {par.tp} exceeds the {node}-device node of {device.id}"
    if par.ep > node and par.ep % node:
        return f"EP {par.ep} spans nodes but is not a multiple of the {node}-device node of {device.id}"
    return ""


def ep_parallelisms(ep_degrees: list[int] | tuple[int, ...], attention_tp: list[int] | tuple[int, ...]) -> list[Parallelism]:
    """Every (tp, ep, dp) with ``tp`` dividing ``ep`` (device and model constraints are checked per
    point by :func:`check_parallelism`)."""
    return [Parallelism(tp=t, ep=e, dp=e // t) for e in sorted(ep_degrees) for t in sorted(attention_tp) if e > 1 and e % t == 0]


@dataclass(frozen=True)
class EPReplica:
    """Constants of one EP replica (scalars; see the module docstring)."""

    par: Parallelism
    rank: InstanceArrays
    """Roofline constants of one DP rank with the routed experts taken out (``p_matmul = P_ne``)."""
    layers_moe: int
    experts_per_token: int
    experts_per_gpu: int
    expert_params: float
    expert_bytes_per_gpu: float
    hidden: int
    nodes: int
    nic_bytes_per_s: float
    nic_defaulted: bool
    nvlink_bytes_per_s: float
    weights_per_gpu_bytes: float
    buffer_bytes: float
    kv_gpus: int
    """GPUs over which one rank's KV is split (1 for MLA)."""
    params: MoECalibration


def ep_replica(model: LLMProfile, device: DeviceProfile, par: Parallelism, weight_precision: str, kv_precision: str,
               params: MoECalibration) -> EPReplica:
    """Constants of a replica; ``ValueError`` naming the constraint it breaks or a missing device figure."""
    why = check_parallelism(model, device, par, params)
    if why:
        raise ValueError(why)
    assert model.moe is not None
    base = instance_arrays(model, device, par.tp, weight_precision, kv_precision)
    l_moe = model.moe_layers()
    p_e = float(model.expert_params_per_layer())
    routed_active = float(l_moe * model.moe.experts_per_token) * p_e
    w_routed = model.weight_bytes_routed_experts(weight_precision)
    w_ne = model.weight_bytes(weight_precision) - w_routed
    bytes_per_expert_param = w_routed / max(model.params_routed_experts(), 1)
    e_gpu = experts_per_gpu(model, par.ep, params)
    expert_bytes = e_gpu * l_moe * p_e * bytes_per_expert_param
    mla = model.mla is not None
    kv_gpus = 1 if mla else min(par.tp, model.num_kv_heads)
    # the rank: P_ne GEMMs, non-expert weights read every step; W/tp = per-GPU non-expert share
    rank = replace(base, p_matmul=np.asarray(float(model.params_active_matmul()) - routed_active),
                   w_expert_bytes=np.asarray(0.0), expert_frac=np.asarray(0.0),
                   w_shared_bytes=np.asarray(float(base.w_shared_bytes)),
                   weight_bytes=np.asarray(float(w_ne)), kv_heads=np.asarray(float(kv_gpus)))
    node = device.devices_per_node
    nic_gb = device.nic_bw_gb_per_s
    t_max = params.decode_max_tokens_per_rank
    slots = model.moe.num_experts + params.redundant_for(model.moe.num_experts)
    buffer = 2.0 * t_max * slots * 2.0 * model.hidden_size
    return EPReplica(
        par=par, rank=rank, layers_moe=l_moe, experts_per_token=model.moe.experts_per_token, experts_per_gpu=e_gpu,
        expert_params=p_e, expert_bytes_per_gpu=expert_bytes, hidden=model.hidden_size, nodes=math.ceil(par.ep / node),
        nic_bytes_per_s=(nic_gb if nic_gb else DEFAULT_NIC_GB_PER_S) * 1e9, nic_defaulted=not nic_gb,
        nvlink_bytes_per_s=(device.scaleup_bw_gb_per_s_bidir or 0.0) / 2.0 * 1e9 or (device.pcie_bw_gb_per_s or DEFAULT_NIC_GB_PER_S) * 1e9,
        weights_per_gpu_bytes=float(w_ne) / par.tp + expert_bytes, buffer_bytes=buffer, kv_gpus=kv_gpus, params=params,
    )


# --- memory ---------------------------------------------------------------------------------
def kv_capacity_per_rank_bytes(rep: EPReplica, u_mem: float = U_MEM, reserve_gb: float = RESERVE_GB) -> float:
    """KV bytes one DP rank holds: ``(M u_mem - W_gpu - reserve - buffer) x kv_gpus`` (negative: the weights do not fit)."""
    free = float(rep.rank.memory_bytes) * u_mem - rep.weights_per_gpu_bytes - reserve_gb * 1e9 - rep.buffer_bytes
    return free * rep.kv_gpus


# --- step time --------------------------------------------------------------------------------
@dataclass(frozen=True)
class EPStep:
    """One EP iteration, seconds (arrays over the batch grid)."""

    total_s: np.ndarray
    dense_s: np.ndarray
    """Attention and non-expert GEMMs of the rank (its roofline)."""
    expert_s: np.ndarray
    """Routed-expert GEMMs on the busiest GPU."""
    a2a_s: np.ndarray
    """Dispatch + combine over all MoE layers, not overlapped."""
    overhead_s: np.ndarray
    tbo: np.ndarray
    """True where two-batch overlap is the faster schedule."""
    compute_s: np.ndarray
    """Compute-bound share (roofline compute times), for power."""
    memory_s: np.ndarray

    def exposed_a2a_s(self) -> np.ndarray:
        """All-to-all time not hidden behind compute."""
        return np.maximum(self.total_s - self.overhead_s - self.dense_s - self.expert_s, 0.0)


def a2a_s(rep: EPReplica, tokens_per_rank: Any, mode: Literal["normal", "low_latency"]) -> np.ndarray:
    """Dispatch + combine time of one iteration over all MoE layers (module docstring)."""
    t = np.asarray(tokens_per_rank, dtype=float) / rep.par.tp
    a = float(rep.experts_per_token)
    n = float(rep.nodes)
    if mode == "low_latency":
        remote = a * (n - 1.0) / n
        local = a / n
    else:
        remote = (n - 1.0) * (1.0 - (1.0 - 1.0 / n) ** a)
        local = a
    per_copy = rep.hidden * (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)
    p = rep.params
    nic = t * remote * per_copy / (p.a2a_efficiency * rep.nic_bytes_per_s)
    nvl = t * local * per_copy / (p.a2a_nvlink_efficiency * rep.nvlink_bytes_per_s)
    lat = A2A_CALLS_PER_LAYER * p.a2a_latency_us * 1e-6
    return np.where(t > 0, rep.layers_moe * (p.ep_imbalance * np.maximum(nic, nvl) + lat), 0.0)


def _expert_s(rep: EPReplica, eff: Efficiency, tokens_per_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Routed-expert GEMMs of the busiest GPU: (time, compute part, memory part)."""
    rows = rep.params.ep_imbalance * tokens_per_rank * rep.experts_per_token / rep.par.tp
    e = float(rep.experts_per_gpu)
    inst = rep.rank
    m_half = float(inst.gemm_m_half)
    touched = 1.0 - np.exp(-rows / e)
    flops = 2.0 * rep.expert_params * rep.layers_moe * (rows + e * touched * m_half)
    c = flops / (float(inst.flops_peak) * eff.eta_f)
    m = rep.expert_bytes_per_gpu * touched / (float(inst.bw_bytes_per_s) * eff.eta_b)
    return np.where(rows > 0, np.maximum(c, m), 0.0), c, m


def ep_iteration_time(rep: EPReplica, eff: Efficiency, *, decode_batch: Any = 0.0, decode_context: Any = 0.0,
                      prefill_tokens: Any = 0.0, prefill_cached: Any = 0.0, prefill_prompts: Any = 1.0,
                      tokens_per_seq: float = 1.0) -> EPStep:
    """One iteration of every DP rank carrying ``decode_batch`` sequences and/or ``prefill_tokens``
    (arguments as :func:`planner.perf.roofline.iteration_time`, per rank). Prefill iterations use
    DeepEP's normal kernels, decode iterations its low-latency kernels. ``tokens_per_seq`` ``V > 1``
    (a speculative verify step, decode only): each sequence carries ``V`` tokens, so the rank's
    GEMM rows, the expert rows and the all-to-all volume scale with ``B V`` while each sequence's KV
    is read once (:func:`planner.perf.speculative.verify_step` for the rank's dense part)."""
    b = np.asarray(decode_batch, dtype=float)
    n = np.asarray(prefill_tokens, dtype=float)
    v = float(tokens_per_seq)
    tokens = b * v + n if v != 1.0 else b + n

    def rank_step(bb: Any, nn: Any, mm: Any) -> StepTime:
        if v == 1.0:
            return iteration_time(rep.rank, eff, decode_batch=bb, decode_context=decode_context, prefill_tokens=nn,
                                  prefill_cached=prefill_cached, prefill_prompts=mm)
        from planner.perf.speculative import verify_step

        return verify_step(rep.rank, eff, bb, decode_context, v, prefill_tokens=nn, prefill_cached=prefill_cached, prefill_prompts=mm)
    mode: Literal["normal", "low_latency"] = "normal" if float(np.max(n)) > 0 else "low_latency"
    p = rep.params

    def compute(scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Dense + expert compute of the iteration run as ``1/scale`` micro-batches of ``scale`` of it."""
        st = rank_step(b * scale, n * scale, np.maximum(np.asarray(prefill_prompts, dtype=float) * scale, 1.0))
        dense = (st.total_s - st.comm_s - st.overhead_s) / scale
        ex, ex_c, ex_m = _expert_s(rep, eff, tokens * scale)
        return dense, ex / scale, st.comm_s / scale, (st.compute_s + ex_c) / scale, (st.memory_s + ex_m) / scale

    st_full = rank_step(b, n, prefill_prompts)
    overhead = np.asarray(st_full.overhead_s, dtype=float)
    x = a2a_s(rep, tokens, mode)
    d1, e1, tp1, c1, m1 = compute(1.0)
    plain = d1 + e1 + tp1 + x
    d2, e2, tp2, c2, m2 = compute(0.5)
    sm = p.prefill_comm_sm_share if mode == "normal" else 0.0
    disp = x * DISPATCH_BYTES_PER_ELEMENT / (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)

    def pair(c: np.ndarray, comm: np.ndarray) -> np.ndarray:
        return np.maximum(c, comm) + (1.0 - p.tbo_overlap) * np.minimum(c, comm)

    # attention stage of one micro-batch beside the other's combine, MoE stage beside its dispatch
    tbo_t = pair(d2 / (1.0 - sm), x - disp) + pair(e2 / (1.0 - sm), disp) + tp2
    use = tbo_t < plain
    total = np.where(use, tbo_t, plain) + overhead
    return EPStep(total_s=total, dense_s=np.where(use, d2, d1), expert_s=np.where(use, e2, e1), a2a_s=x,
                  overhead_s=np.broadcast_to(overhead, total.shape), tbo=use, compute_s=np.where(use, c2, c1),
                  memory_s=np.where(use, m2, m1))


# --- operating points -------------------------------------------------------------------------
def moe_params(calibration: Calibration | None) -> MoECalibration:
    return calibration.moe if calibration is not None else MoECalibration()


def _infeasible(reason: str, bound: str, source: str, **kw: float) -> OperatingPoint:
    from planner.perf.points import _infeasible as base

    return base(reason, bound, source, **kw)


def ep_operating_point(
    model: LLMProfile, device: DeviceProfile, par: Parallelism, *, role: Literal["prefill", "decode", "unified"],
    weight_precision: str, kv_precision: str, input_tokens: float, output_tokens: float, cached_prefix_share: float = 0.0,
    ttft_target_ms: float | None, tpot_target_ms: float | None, engine: str = "default", kv_link_gb_per_s: float | None = None,
    calibration: Calibration | None | Literal["auto"] = "auto", ttft_quantile: float = 0.99, tpot_quantile: float | None = 0.99,
    itl_target_ms: float | None = None, itl_quantile: float | None = 0.99, e2e_target_ms: float | None = None,
    e2e_quantile: float | None = 0.99, rate_per_s: float | None = None, interarrival_cv: float = 1.0,
    speculative: SpeculativeDecoding | None = None, draft_model: LLMProfile | None = None,
) -> OperatingPoint:
    """The operating point of one EP replica (module docstring); arguments as
    :func:`planner.perf.points.operating_point`. ``instance_seconds_per_request`` is replica-seconds
    (the replica of ``par.gpus`` devices is one instance) and ``max_batch`` the replica's sequences.
    ``speculative`` (decode; methods ``mtp``, ``eagle``, ``ngram`` — a ``draft_model`` draft is not
    modelled on EP replicas and decodes plain): the cheaper of the plain and the speculative decode
    point (:func:`ep_speculative_decode_point`)."""
    from planner.perf.points import (
        _CAL_CACHE,
        _inf,
        _Targets,
        efficiency_of,
        engine_calibration,
        request_tokens,
    )
    from planner.perf.power import instance_power_w
    from planner.queueing import max_utilization_many

    del tpot_quantile, e2e_quantile, draft_model  # decode: every gap is one step (mean = any quantile)
    spec_itl_q = itl_quantile  # a speculative step's bursts make the ITL quantile matter (planner.perf.speculative)
    cal, source = engine_calibration(engine, calibration)
    file_cal = _CAL_CACHE.get("auto") if calibration == "auto" else calibration
    params = moe_params(file_cal if isinstance(file_cal, Calibration) else None)
    source = f"{source}+moe"
    if role == "unified":
        return _infeasible("expert parallelism with DP attention runs prefill and decode in separate pools (DeepEP's normal and "
                           "low-latency dispatch cannot share one group; LMSYS blog 2025-05-05)", "communication", source)
    try:
        rep = ep_replica(model, device, par, weight_precision, kv_precision, params)
    except ValueError as exc:
        return _infeasible(str(exc), "memory_capacity", source)
    targets = _Targets(ttft_ms=_inf(ttft_target_ms), ttft_q=ttft_quantile, tpot_ms=_inf(tpot_target_ms), tpot_q=None,
                       itl_ms=_inf(itl_target_ms), itl_q=None, e2e_ms=_inf(e2e_target_ms), e2e_q=None)
    eff = efficiency_of(cal)
    isl, osl, n_new, cached = request_tokens(input_tokens, output_tokens, cached_prefix_share)
    power = instance_power_w(device, par.gpus)
    cap = kv_capacity_per_rank_bytes(rep)
    nic_note = {"nic_defaulted": 1.0} if rep.nic_defaulted else {}
    common = {"gpus": float(par.gpus), "ep": float(par.ep), "dp": float(par.dp), "tp_attention": float(par.tp),
              "experts_per_gpu": float(rep.experts_per_gpu), "nodes": float(rep.nodes), **nic_note}
    if role == "prefill":
        kv_one = float(kv_bytes(rep.rank, isl))
        if cap < kv_one:
            return _infeasible(f"weights ({rep.weights_per_gpu_bytes / 1e9:.0f} GB per GPU at {par.label()}) and one {isl:.0f}-token "
                               f"prompt's KV do not fit {device.memory_gb} GB", "memory_capacity", source)
        m_max = max(1, min(int(params.prefill_tokens_per_rank // n_new), int(cap // max(kv_one, 1.0))))
        ms = np.array(sorted({*(float(v) for v in PREFILL_PROMPTS_PER_RANK if v < m_max), float(m_max)}))
        step = ep_iteration_time(rep, eff, prefill_tokens=ms * n_new, prefill_cached=cached, prefill_prompts=ms)
        link = (kv_link_gb_per_s * par.tp if kv_link_gb_per_s else rep.nic_bytes_per_s / 1e9 * par.tp) * 1e9
        t_xfer = kv_one / link
        first = float(ep_iteration_time(rep, eff, decode_batch=1.0, decode_context=isl).total_s)
        ttft = 1e3 * (step.total_s + t_xfer + first) + cal.ttft_overhead_ms
        seconds = step.total_s / (ms * par.dp)
        ok = ttft <= min(targets.ttft_ms, targets.e2e_ms)
        if not ok.any():
            return _infeasible(f"TTFT {ttft[0]:.0f} ms > target {min(targets.ttft_ms, targets.e2e_ms):.0f} ms even unqueued at one prompt "
                               f"per rank ({par.label()})", "compute", source, kv=kv_one, kv_transfer=kv_one, ttft=float(ttft[0]))
        cost = np.where(ok, seconds, np.inf)
        rate = float(rate_per_s or 0.0)
        if rate > 0 and math.isfinite(targets.ttft_ms):
            caps = np.ones_like(seconds)
            # one replica serves dp x m prompts per iteration of t: a batch server of service time t
            j = np.nonzero(ok)[0]
            n0 = np.maximum(1.0, np.ceil(rate * seconds[j]))
            caps[j] = max_utilization_many(n0, seconds[j], targets.ttft_q, (targets.ttft_ms - ttft[j]) / 1e3,
                                           service_cv=0.0, arrival_cv=interarrival_cv)
            queued = np.where(ok & (caps > 0), seconds / np.maximum(caps, 1e-12), np.inf)
            if np.isfinite(queued).any():
                cost = queued
        i = int(np.argmin(cost))
        m = float(ms[i])
        t = float(step.total_s[i])
        comp, mem = float(step.compute_s[i]), float(step.memory_s[i])
        bound = "communication" if float(step.exposed_a2a_s()[i]) > 0.25 * t else ("compute" if comp >= mem else "memory_bandwidth")
        return OperatingPoint(
            feasible=True, reason="", bound=bound, instance_seconds_per_request=float(seconds[i]), max_batch=1,
            kv_bytes_per_request=kv_one, kv_transfer_bytes_per_request=kv_one, ttft_ms=float(ttft[i]), tpot_ms=0.0,
            energy_j_per_request=power(comp, mem, t, m * n_new) * float(seconds[i]), source=source,
            detail={**common, "prefill_ms": 1e3 * t, "prompts_per_batch": m, "prompts_per_rank": m, "transfer_ms": 1e3 * t_xfer,
                    "first_step_ms": 1e3 * first, "ttft_overhead_ms": cal.ttft_overhead_ms,
                    "a2a_ms": 1e3 * float(step.a2a_s[i]), "a2a_exposed_ms": 1e3 * float(step.exposed_a2a_s()[i]),
                    "expert_ms": 1e3 * float(step.expert_s[i]), "dense_ms": 1e3 * float(step.dense_s[i]),
                    "tbo": float(step.tbo[i]), "compute_ms": 1e3 * comp, "memory_ms": 1e3 * mem,
                    "comm_ms": 1e3 * float(step.a2a_s[i])},
        )
    # decode
    peak = isl + osl
    ctx = isl + osl / 2.0
    kv_req = float(kv_bytes(rep.rank, peak))
    b_mem = int(min(max(cap, 0.0) // max(kv_req, 1.0), params.decode_max_tokens_per_rank, MAX_DECODE_BATCH_PER_RANK))
    if b_mem < 1:
        return _infeasible(f"weights ({rep.weights_per_gpu_bytes / 1e9:.0f} GB per GPU at {par.label()}) and one {peak:.0f}-token "
                           f"sequence's KV do not fit {device.memory_gb} GB", "memory_capacity", source, kv=kv_req)
    batches = np.arange(1, b_mem + 1, dtype=float)
    step = ep_iteration_time(rep, eff, decode_batch=batches, decode_context=ctx)
    t_dec = step.total_s
    limit_s = min(targets.tpot_ms, targets.itl_ms) / 1e3
    ok_dec = (t_dec <= limit_s) & ((osl - 1.0) * t_dec <= targets.e2e_ms / 1e3)
    def speculate(plain: OperatingPoint) -> OperatingPoint:
        if speculative is None or speculative.method == "draft_model":
            return plain
        from planner.perf.speculative import spec_cost

        cost = spec_cost(speculative, model, rep.rank, weight_precision, kv_precision=kv_precision)
        return ep_speculative_decode_point(plain, cost, rep, eff, isl=isl, osl=osl, tpot_limit_s=targets.tpot_ms / 1e3,
                                           itl_limit_s=targets.itl_ms / 1e3, itl_quantile=spec_itl_q,
                                           e2e_limit_s=targets.e2e_ms / 1e3, power_w=power, source=source, common=common)

    if not ok_dec.any():
        return speculate(_infeasible(f"{targets.token_label()} {1e3 * float(t_dec[0]):.1f} ms at batch 1 per rank > target "
                                     f"{targets.token_limit_ms():g} ms ({par.label()})", "communication", source, kv=kv_req,
                                     tpot=1e3 * float(t_dec[0])))
    i = int(np.nonzero(ok_dec)[0].max())
    b_star = int(batches[i])
    t_star = float(t_dec[i])
    seconds = osl * t_star / (b_star * par.dp)
    comp, mem = float(step.compute_s[i]), float(step.memory_s[i])
    if b_star == b_mem and b_mem < params.decode_max_tokens_per_rank:
        bound = "memory_capacity"
    else:
        bound = "communication" if float(step.exposed_a2a_s()[i]) > 0.25 * t_star else ("compute" if comp >= mem else "memory_bandwidth")
    return speculate(OperatingPoint(
        feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star * par.dp,
        kv_bytes_per_request=kv_req, kv_transfer_bytes_per_request=0.0,
        energy_j_per_request=power(comp, mem, t_star, float(b_star)) * seconds, ttft_ms=0.0, tpot_ms=1e3 * t_star, source=source,
        detail={**common, "step_ms": 1e3 * t_star, "batch": float(b_star * par.dp), "batch_per_rank": float(b_star),
                "batch_memory_limit": float(b_mem * par.dp), "itl_ms": 1e3 * t_star, "a2a_ms": 1e3 * float(step.a2a_s[i]),
                "a2a_exposed_ms": 1e3 * float(step.exposed_a2a_s()[i]), "expert_ms": 1e3 * float(step.expert_s[i]),
                "dense_ms": 1e3 * float(step.dense_s[i]), "tbo": float(step.tbo[i]), "compute_ms": 1e3 * comp, "memory_ms": 1e3 * mem,
                "comm_ms": 1e3 * float(step.a2a_s[i]), "overhead_ms": 1e3 * float(step.overhead_s[i])},
    ))


def replica_kv_capacity_bytes(model: LLMProfile, device: DeviceProfile, par: Parallelism, weight_precision: str, kv_precision: str,
                              params: MoECalibration) -> float:
    """KV bytes one replica holds (``dp`` ranks; 0 when the weights do not fit or the parallelism is invalid)."""
    try:
        rep = ep_replica(model, device, par, weight_precision, kv_precision, params)
    except ValueError:
        return 0.0
    return max(kv_capacity_per_rank_bytes(rep), 0.0) * par.dp


# --- calibration ------------------------------------------------------------------------------
MAX_ROW_PARALLELISM = 4096
"""Largest ep / dp / tp a measured MoE row may state (the largest published replica is DeepSeek's
EP144 decode; a bound so a hostile row cannot carry a 300-digit replica into the error message)."""

MOE_ROW_COLUMNS: tuple[str, ...] = ("model", "device", "ep", "dp", "tp", "precision", "kv_precision", "engine", "role", "isl", "osl",
                                    "batch_per_rank", "step_ms")
"""One measured expert-parallel iteration per row: the replica (``ep``, ``dp``, attention ``tp``), the role
(``decode``: a step of ``batch_per_rank`` sequences at context ``isl + osl/2``; ``prefill``: an iteration of
``batch_per_rank`` prompts of ``isl`` tokens per rank) and its measured time ``step_ms`` (decode: the ITL at that
batch; prefill: prompt tokens per rank / measured input tokens/s per GPU)."""
MOE_ROW_PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4", "int8")
"""Weight / KV precisions a measured row may name (:data:`planner.schema.common.Precision`)."""
MOE_ROW_MAXIMA: dict[str, float] = {"isl": 10_000_000.0, "osl": 10_000_000.0, "batch_per_rank": 1_000_000.0, "step_ms": 3_600_000.0}
"""Upper bounds of a measured row's numbers, far above any real run (10M-token contexts, a million sequences
per rank, an hour per iteration): a row beyond them is a typo, and one such row (batch 1e308) overflows the
model and turns the whole fit into NaN."""
FITTED_MOE_FIELDS: tuple[str, ...] = ("ep_imbalance", "a2a_efficiency")
"""The MoE parameters :func:`fit_moe_calibration` fits (the others stay at their published values)."""


def _unknown_ids(row: dict[Any, Any], models: dict[str, LLMProfile], devices: dict[str, DeviceProfile]) -> str:
    """What of a row's model and device the catalog lacks, naming each unknown one ('' if both are known)."""
    parts = [f"unknown {what} {row[what]!r}" for what, ids in (("model", models), ("device", devices)) if row[what] not in ids]
    return " and ".join(parts)


def _moe_model_ids(models: dict[str, LLMProfile]) -> list[str]:
    """Catalog models with routed experts (the ones a measured expert-parallel row can be of), sorted."""
    return sorted(m for m, p in models.items() if p.moe is not None)


def read_moe_rows(path: str, models: dict[str, LLMProfile], devices: dict[str, DeviceProfile]) -> list[dict[str, Any]]:
    """Measured expert-parallel rows (CSV with :data:`MOE_ROW_COLUMNS`); :class:`planner.errors.InputError`
    naming the row and field of every problem (unknown model or device, bad number, invalid parallelism)."""
    import pandas as pd

    from planner.errors import InputError, Problem, ProblemCollector

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(Problem(path, "", f"cannot read the CSV: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}", f"write a CSV with the columns {', '.join(MOE_ROW_COLUMNS)}")) from None
    problems = ProblemCollector(file=path)
    missing = [c for c in MOE_ROW_COLUMNS if c not in df.columns]
    if missing:
        problems.add("header", f"missing columns: {', '.join(missing)}", f"required: {', '.join(MOE_ROW_COLUMNS)}")
        problems.raise_if_any()
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(df.to_dict("records")):
        where = f"row {i + 2}"
        unknown = _unknown_ids(r, models, devices)
        if unknown:
            problems.add(where, unknown, "use the ids `planner catalog` lists")
            continue
        if models[r["model"]].moe is None:
            problems.add(where, f"model {r['model']!r} is dense (no routed experts): there is no expert parallelism to calibrate",
                         f"give rows measured on a mixture-of-experts model ({', '.join(_moe_model_ids(models)[:4])}, ...)")
            continue
        dev = devices[r["device"]]
        if dev.kind == "cpu" or not dev.peak_tflops_dense:
            problems.add(where, f"device {r['device']!r} is a {dev.kind} without dense tensor peaks (peak_tflops_dense): "
                         "the expert-parallel model is for accelerators", "give rows measured on a GPU or accelerator of the catalog")
            continue
        bad_prec = [f"{k} {r[k]!r}" for k in ("precision", "kv_precision") if r[k] not in MOE_ROW_PRECISIONS]
        if bad_prec:
            problems.add(where, f"unknown {' and '.join(bad_prec)}", f"use one of {', '.join(MOE_ROW_PRECISIONS)}")
            continue
        if r["role"] not in ("prefill", "decode"):
            problems.add(where, f"role {r['role']!r}", "use prefill or decode")
            continue
        try:
            nums = {k: float(r[k]) for k in ("ep", "dp", "tp", "isl", "osl", "batch_per_rank", "step_ms")}
        except (TypeError, ValueError):
            problems.add(where, "a numeric field is not a number", "give ep, dp, tp, isl, osl, batch_per_rank, step_ms as numbers")
            continue
        if not all(math.isfinite(v) and v > 0 for v in nums.values()):
            problems.add(where, "numeric fields must be finite and > 0", "fix the row")
            continue
        too_big = [f"{k} {nums[k]:g} > {cap:g}" for k, cap in MOE_ROW_MAXIMA.items() if nums[k] > cap]
        if too_big:
            problems.add(where, f"out of range: {', '.join(too_big)}", "fix the row (a measured iteration, not a placeholder)")
            continue
        if not all(nums[k] == int(nums[k]) and nums[k] <= MAX_ROW_PARALLELISM for k in ("ep", "dp", "tp")):
            problems.add(where, f"ep, dp and tp must be whole numbers from 1 to {MAX_ROW_PARALLELISM}",
                         "give the replica's GPU counts (ep = dp x tp)")
            continue
        par = Parallelism(tp=int(nums["tp"]), ep=int(nums["ep"]), dp=int(nums["dp"]))
        why = check_parallelism(models[r["model"]], devices[r["device"]], par, MoECalibration())
        if why:
            problems.add(where, why, "give a valid replica (ep = dp x tp)")
            continue
        rows.append({**{str(k): v for k, v in r.items()}, **nums})
    problems.raise_if_any()
    return rows


def _row_groups(rows: list[dict[str, Any]]) -> dict[tuple[str, ...], np.ndarray]:
    """Indices of ``rows`` per replica and role (model, device, tp, ep, dp, precisions, engine, role):
    the rows of one group share one :func:`ep_replica` and one vectorised :func:`ep_iteration_time`."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for k, r in enumerate(rows):
        key = tuple(str(r[f]) for f in ("model", "device", "precision", "kv_precision", "engine", "role")) + tuple(
            str(int(r[f])) for f in ("tp", "ep", "dp"))
        groups.setdefault(key, []).append(k)
    return {k: np.array(v, dtype=int) for k, v in groups.items()}


def predict_moe_rows(rows: list[dict[str, Any]], models: dict[str, LLMProfile], devices: dict[str, DeviceProfile],
                     params: MoECalibration, calibration: Calibration | None) -> np.ndarray:
    """Predicted iteration time (ms) of each measured row (:data:`MOE_ROW_COLUMNS`) under ``params``:
    one replica per (model, device, parallelism, precisions, engine, role) and one vectorised step-time
    call over that group's rows (decode: ``batch_per_rank`` sequences at context ``isl + osl/2``;
    prefill: ``batch_per_rank`` prompts of ``isl`` tokens)."""
    from planner.perf.points import efficiency_of, engine_calibration

    out = np.empty(len(rows))
    for (model, device, prec, kv, engine, role, tp, ep, dp), idx in _row_groups(rows).items():
        par = Parallelism(tp=int(tp), ep=int(ep), dp=int(dp))
        rep = ep_replica(models[model], devices[device], par, prec, kv, params)
        eff = efficiency_of(engine_calibration(engine, calibration)[0])
        b = np.array([float(rows[k]["batch_per_rank"]) for k in idx])
        isl = np.array([float(rows[k]["isl"]) for k in idx])
        osl = np.array([float(rows[k]["osl"]) for k in idx])
        st = (ep_iteration_time(rep, eff, decode_batch=b, decode_context=isl + osl / 2.0) if role == "decode"
              else ep_iteration_time(rep, eff, prefill_tokens=b * isl, prefill_prompts=b))
        out[idx] = 1e3 * np.broadcast_to(np.asarray(st.total_s, dtype=float), idx.shape)
    return out


MOE_FIT_BOUNDS = {"ep_imbalance": (1.0, 4.0), "a2a_efficiency": (0.05, 1.0)}
"""Ranges of the fitted expert-parallel fields (the schema's: an imbalance is a max/mean ratio >= 1,
an efficiency a fraction of the link's datasheet bandwidth)."""
MOE_FIT_X_SCALE = {"ep_imbalance": 1.0, "a2a_efficiency": 0.1}
"""Typical step of each fitted field for the solver (``x_scale`` of :func:`planner.perf.lsq.fit_least_squares`)."""
NO_EFFECT_RTOL = 1e-9
"""A field whose every probe value (:func:`moe_fields_without_effect`) moves no predicted time by more than
this fraction has no effect on the rows."""


def _with_fields(base: MoECalibration, names: list[str] | tuple[str, ...], x: Any) -> MoECalibration:
    """``base`` with the named fields set to ``x`` (in order)."""
    return base.model_copy(update={n: float(v) for n, v in zip(names, x, strict=True)})


def moe_fields_without_effect(rows: list[dict[str, Any]], models: dict[str, LLMProfile], devices: dict[str, DeviceProfile],
                              calibration: Calibration | None, base: MoECalibration) -> tuple[str, ...]:
    """The fields of :data:`MOE_FIT_BOUNDS` no row's predicted time depends on anywhere in their range: moved
    alone (the others at ``base``) to its lower bound, midpoint and upper bound, the field changes no prediction
    by more than :data:`NO_EFFECT_RTOL` (e.g. ``a2a_efficiency`` on rows with ep = dp = 1: no all-to-all). A fit
    cannot estimate such a field: it keeps its starting value."""
    ref = predict_moe_rows(rows, models, devices, base, calibration)
    out = []
    for name, (lo, hi) in MOE_FIT_BOUNDS.items():
        probes = (predict_moe_rows(rows, models, devices, _with_fields(base, [name], [v]), calibration) for v in (lo, 0.5 * (lo + hi), hi))
        if not any(np.any(np.abs(p / ref - 1.0) > NO_EFFECT_RTOL) for p in probes):
            out.append(name)
    return tuple(out)


def distinct_moe_configurations(rows: list[dict[str, Any]]) -> int:
    """Rows that differ in replica, role, batch or lengths: a repeat of a configuration adds a measurement of the
    same point, not an equation, so only distinct configurations count towards the fitted parameters."""
    keys = {tuple(str(r[f]) for f in ("model", "device", "precision", "kv_precision", "engine", "role"))
            + tuple(float(r[f]) for f in ("tp", "ep", "dp", "batch_per_rank", "isl", "osl")) for r in rows}
    return len(keys)


def moe_fit_fields(rows: list[dict[str, Any]], models: dict[str, LLMProfile], devices: dict[str, DeviceProfile],
                   calibration: Calibration | None, start: MoECalibration | None, fitted: MoECalibration) -> dict[str, dict[str, Any]]:
    """Per field of :data:`MOE_FIT_BOUNDS` of a fit of ``rows`` from ``start`` (:func:`fit_moe_calibration`): its
    value, whether it was fitted (not one of :func:`moe_fields_without_effect`), its bounds, whether it ended on
    one (:func:`planner.perf.lsq.on_bound`: a bound, not an estimate) and that status in words."""
    from planner.perf.lsq import on_bound

    not_fitted = moe_fields_without_effect(rows, models, devices, calibration, start or MoECalibration())
    out: dict[str, dict[str, Any]] = {}
    for n, (lo, hi) in MOE_FIT_BOUNDS.items():
        v = float(getattr(fitted, n))
        pinned = n not in not_fitted and bool(on_bound([n], np.array([v]), np.array([lo]), np.array([hi])))
        status = ("not fitted: no row depends on it, kept at its starting value" if n in not_fitted
                  else f"on a bound of [{lo:g}, {hi:g}]: not an estimate" if pinned else f"fitted within [{lo:g}, {hi:g}]")
        out[n] = {"value": v, "fitted": n not in not_fitted, "bounds": [lo, hi], "on_bound": pinned, "status": status}
    return out


def fit_moe_calibration(rows: list[dict[str, Any]], models: dict[str, LLMProfile], devices: dict[str, DeviceProfile],
                        calibration: Calibration | None, start: MoECalibration | None = None, *,
                        warnings: list[str] | None = None, file: str = "") -> MoECalibration:
    """Fit :data:`FITTED_MOE_FIELDS` on measured expert-parallel rows, as the dense fit does: least absolute
    ``log(predicted / measured)`` with the shared bounded least-squares routine (:mod:`planner.perf.lsq`,
    :data:`MOE_FIT_BOUNDS`; the engine's dense efficiencies fixed). No rows: ``start`` (the published defaults)
    unchanged.

    Rules: a field no row depends on (:func:`moe_fields_without_effect`) is not fitted: it keeps its starting
    value, and the result's ``source`` and ``warnings`` say so. Fewer distinct configurations
    (:func:`distinct_moe_configurations`) than fields left to fit: :class:`planner.errors.InputError` naming
    ``file`` (two parameters from one row are not determined by it). A fitted field on a bound, one that changed no
    residual at the solution and a Jacobian of lower rank than the fitted fields are named in ``source`` and
    ``warnings`` (the messages of ``planner calibrate``)."""
    from planner.errors import InputError, Problem
    from planner.perf.fit import lad_residuals
    from planner.perf.lsq import fit_least_squares, fit_warnings

    base = start or MoECalibration()
    if not rows:
        return base
    fixed = moe_fields_without_effect(rows, models, devices, calibration, base)
    names = [n for n in MOE_FIT_BOUNDS if n not in fixed]
    configs = distinct_moe_configurations(rows)
    if configs < max(len(names), 1):
        why = (f"{configs} distinct measured configuration{'s' if configs != 1 else ''} ({len(rows)} rows) for {len(names)} fitted "
               f"parameters ({', '.join(names)}): the rows do not determine them" if names
               else f"no row's predicted time depends on {' or '.join(MOE_FIT_BOUNDS)}: nothing to fit")
        raise InputError(Problem(file, "rows", why, "give at least as many distinct expert-parallel iterations as parameters "
                                 "(batch sizes, lengths, EP degrees; decode and prefill)"))
    measured = np.array([float(r["step_ms"]) for r in rows])

    def resid(x: np.ndarray) -> np.ndarray:
        pred = predict_moe_rows(rows, models, devices, _with_fields(base, names, x), calibration)
        return lad_residuals(np.log(pred / measured))

    sol = fit_least_squares(resid, [float(getattr(base, n)) for n in names], names=names,
                            lower=[MOE_FIT_BOUNDS[n][0] for n in names], upper=[MOE_FIT_BOUNDS[n][1] for n in names],
                            diff_step=1e-4, x_scale=[MOE_FIT_X_SCALE[n] for n in names])
    fitted = _with_fields(base, names, sol.x)
    mean_abs = float(np.mean(np.abs(np.log(predict_moe_rows(rows, models, devices, fitted, calibration) / measured))))
    kept = f"not fitted (no row depends on it; kept at its starting value): {', '.join(f'{n} {getattr(base, n):g}' for n in fixed)}"
    notes = ([kept] if fixed else []) + ([f"on a bound (not an estimate): {', '.join(sol.at_bound)}"] if sol.at_bound else [])
    if warnings is not None:
        warnings.extend([f"calibrate-moe: {kept}"] if fixed else [])
        warnings.extend(fit_warnings(f"calibrate-moe ({len(rows)} rows)", sol, len(names)))
    return fitted.model_copy(update={"source": "; ".join([f"fit: {len(rows)} expert-parallel rows, mean |log(pred/meas)| {mean_abs:.4f}", *notes])})


__all__ = ["DEFAULT_EP_DEGREES", "FITTED_MOE_FIELDS", "MOE_ROW_COLUMNS", "distinct_moe_configurations", "fit_moe_calibration", "moe_fields_without_effect", "moe_fit_fields", "predict_moe_rows", "read_moe_rows", "EPReplica", "EPStep", "Parallelism", "a2a_s", "check_parallelism",
           "ep_iteration_time", "ep_operating_point", "ep_parallelisms", "ep_replica", "experts_per_gpu", "kv_capacity_per_rank_bytes",
           "replica_kv_capacity_bytes"]


# --- speculative decoding on expert-parallel replicas (planner.perf.speculative: the TP-only maths) ---
def ep_draft_weight_bytes_per_gpu(cost: SpecCost, rep: EPReplica) -> float:
    """Draft weights one GPU of an EP replica holds: an MTP / EAGLE layer is one layer's share of the
    GPU's weights, ``W_gpu / L`` (non-expert share on every rank, expert share spread like the
    target's experts); ``ngram`` 0."""
    if cost.method not in ("mtp", "eagle"):
        return 0.0
    return rep.weights_per_gpu_bytes / float(rep.rank.layers)


def ep_draft_pass_s(cost: SpecCost, rep: EPReplica, eff: Efficiency, batch: Any, context: Any) -> np.ndarray:
    """One draft pass on every DP rank of an EP replica over ``batch`` sequences (``w`` candidates each).

    ``mtp`` (DeepSeek-V3: the MTP module is one transformer block with an MoE FFN, sharing the
    embedding and output head): ``1/L`` of the rank's dense time plus ``1/L_e`` of the expert and
    exposed all-to-all time of an EP iteration over ``B w`` tokens, plus the output head's GEMM in
    full and one layer's launch overhead. ``eagle`` (a dense decoder layer on the target's
    features): the same without the MoE share. ``ngram``: 0."""

    b = np.asarray(batch, dtype=float)
    if cost.method == "ngram":
        return np.zeros_like(b * np.asarray(context, dtype=float))
    width = max(1.0, (cost.verify_tokens - 1) / cost.k)
    st = ep_iteration_time(rep, eff, decode_batch=b, decode_context=context, tokens_per_seq=width)
    inst = rep.rank
    layer = st.dense_s / float(inst.layers)
    if cost.method == "mtp":
        layer = layer + np.maximum(st.total_s - st.overhead_s - st.dense_s, 0.0) / float(rep.layers_moe)
    m_half = inst.gemm_m_half
    head_c = 2.0 * inst.p_lm_head * (b * width + m_half) / (inst.tp * inst.flops_peak * eff.eta_f)
    head_m = inst.p_lm_head * cost.weight_bytes_per_param / (inst.tp * inst.bw_bytes_per_s * eff.eta_b)
    return np.asarray(layer + np.maximum(head_c, head_m) + eff.layer_overhead_s, dtype=float)


def ep_spec_step(cost: SpecCost, rep: EPReplica, eff: Efficiency, batch: Any, context: Any) -> tuple[np.ndarray, EPStep]:
    """``t_spec(B)`` of an EP replica: the verify iteration over ``B V`` tokens per rank (expert GEMM
    rows and all-to-all volume scale with ``B V``, :func:`planner.perf.moe.ep_iteration_time`) plus
    ``k`` draft passes (:func:`ep_draft_pass_s`); and the verify iteration (its roofline shares)."""

    ver = ep_iteration_time(rep, eff, decode_batch=batch, decode_context=context, tokens_per_seq=float(cost.verify_tokens))
    return ver.total_s + cost.k * ep_draft_pass_s(cost, rep, eff, batch, context), ver


def ep_speedup(cost: SpecCost, rep: EPReplica, eff: Efficiency, batch: Any, context: Any) -> np.ndarray:
    """Decode tokens per second of an EP replica with speculation over without, at the same per-rank batch."""

    t_plain = ep_iteration_time(rep, eff, decode_batch=batch, decode_context=context).total_s
    t_spec, _ = ep_spec_step(cost, rep, eff, batch, context)
    return np.asarray(cost.tokens_per_step * t_plain / t_spec, dtype=float)


def ep_speculative_decode_point(plain: Any, cost: SpecCost, rep: EPReplica, eff: Efficiency, *, isl: float, osl: float,
                                tpot_limit_s: float, itl_limit_s: float, itl_quantile: float | None, e2e_limit_s: float,
                                power_w: Any, source: str, common: dict[str, float]) -> Any:
    """The cheaper of ``plain`` (an EP decode point, :func:`planner.perf.moe.ep_operating_point`) and the
    speculative EP decode point meeting the same targets, as :func:`speculative_decode_point`. Per
    rank: KV room = the rank's KV capacity less the draft's weights (:func:`ep_draft_weight_bytes_per_gpu`
    on each of its KV GPUs), each sequence's KV grows by the draft's share, and the ``B V`` verify
    tokens must fit DeepEP's low-latency buffers (``B V <= T_max``)."""
    from planner.schema.capacity import OperatingPoint

    dp = rep.par.dp
    peak, ctx = isl + osl, isl + osl / 2.0
    e, v = cost.tokens_per_step, float(cost.verify_tokens)
    cap = kv_capacity_per_rank_bytes(rep) - ep_draft_weight_bytes_per_gpu(cost, rep) * rep.kv_gpus
    kv_req = float(kv_bytes(rep.rank, peak)) * (1.0 + cost.draft_kv_share)
    t_max = rep.params.decode_max_tokens_per_rank
    b_mem = int(min(max(cap, 0.0) // max(kv_req, 1.0), t_max // v, MAX_DECODE_BATCH_PER_RANK))
    plain_s = float(plain.instance_seconds_per_request) if plain.feasible else math.inf
    if b_mem < 1:
        plain.detail["spec_rejected"] = 1.0
        return plain
    batches = np.arange(1, b_mem + 1, dtype=float)
    t_spec, ver = ep_spec_step(cost, rep, eff, batches, ctx)
    i = largest_batch_meeting(t_spec, e, osl=osl, tpot_limit_s=tpot_limit_s, itl_limit_s=itl_limit_s, e2e_limit_s=e2e_limit_s,
                              itl_quantile=itl_quantile)
    if i is None:
        plain.detail["spec_rejected"] = 2.0
        return plain
    b_star, t_star = int(batches[i]), float(t_spec[i])
    seconds = osl * t_star / (e * b_star * dp)
    sp = ep_speedup(cost, rep, eff, batches, ctx) > 1.0
    breakeven = float(batches[np.nonzero(sp)[0].max()]) * dp if sp.any() else 0.0  # replica sequences, as max_batch
    if seconds >= plain_s:
        plain.detail.update({"spec_rejected": 3.0, "spec_instance_seconds_per_request": seconds, "spec_breakeven_batch": breakeven})
        return plain
    comp, mem = float(ver.compute_s[i]), float(ver.memory_s[i])
    if b_star == b_mem and b_mem < t_max // v:
        bound = "memory_capacity"
    else:
        bound = "communication" if float(ver.exposed_a2a_s()[i]) > 0.25 * t_star else ("compute" if comp >= mem else "memory_bandwidth")
    detail = {**common, "step_ms": 1e3 * t_star, "spec_step_ms": 1e3 * t_star, "batch": float(b_star * dp), "batch_per_rank": float(b_star),
              "batch_memory_limit": float(b_mem * dp), "itl_ms": 1e3 * itl_quantile_s(t_star, e, itl_quantile), "a2a_ms": 1e3 * float(ver.a2a_s[i]),
              "a2a_exposed_ms": 1e3 * float(ver.exposed_a2a_s()[i]), "expert_ms": 1e3 * float(ver.expert_s[i]),
              "dense_ms": 1e3 * float(ver.dense_s[i]), "tbo": float(ver.tbo[i]), "compute_ms": 1e3 * comp, "memory_ms": 1e3 * mem,
              "comm_ms": 1e3 * float(ver.a2a_s[i]), "overhead_ms": 1e3 * float(ver.overhead_s[i]), "spec_tokens_per_step": e,
              "plain_instance_seconds_per_request": plain_s, "spec_breakeven_batch": breakeven,
              "spec_kv_capacity_bytes": max(cap, 0.0) * dp}
    return OperatingPoint(feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star * dp,
                          kv_bytes_per_request=kv_req, kv_transfer_bytes_per_request=0.0,
                          energy_j_per_request=power_w(comp, mem, t_star, float(b_star) * v) * seconds, ttft_ms=0.0,
                          tpot_ms=1e3 * t_star / e, source=source, detail=detail)
