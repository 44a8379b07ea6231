"""Speculative decoding: the decode step that verifies ``k + 1`` tokens and pays the draft.

Symbols as :mod:`planner.perf.roofline`. A service option (:class:`planner.schema.speculative.
SpeculativeDecoding`): method, ``k`` proposed tokens, acceptance rates ``a_i``, tokens verified per
sequence ``V`` (``k + 1`` for a chain, more for a draft tree).

**Tokens per step.** ``E = 1 + sum_{i=1..k} prod_{j<=i} a_j`` per sequence (the accepted prefix
plus the token the target samples after it).

**Verify step** at batch ``B``, mean context ``c``: one target iteration over ``T = B V`` tokens that
reads the weights once (``W_read(T)``, MoE experts touched by ``T`` tokens) and each sequence's KV
once (the ``V`` queries of a sequence share it), computes ``2 P_mm (T + M_half)`` GEMM FLOPs (every
verified token needs its logits) and ``V`` times the attention pairs of a decode step::

    t_verify(B) = max(GEMM_c, GEMM_m) + max(ATT_c, ATT_m) + t_comm(T) + t_step + L t_layer + B t_seq

With ``V = 1`` this is exactly :func:`planner.perf.roofline.iteration_time`'s decode step (a test
checks it). At small ``B`` the step is bandwidth-bound, so verifying ``V`` tokens costs little more
than one; once ``B V`` tokens make the GEMMs compute-bound, ``t_verify`` grows ``V``-fold and
speculation stops paying.

**Draft** (``k`` sequential passes per step, each over ``B w`` tokens, ``w = (V - 1)/k`` candidates per
pass):

- ``mtp`` / ``eagle``: one decoder layer shaped like the target's plus the output head (DeepSeek-V3's
  MTP module is one transformer block sharing the embedding and head; an EAGLE head is one decoder
  layer on the target's features): ``1/L`` of the target's layer GEMMs, attention and all-reduces,
  the head's ``P_head`` GEMM in full, and one layer's launch overhead (the passes run inside the
  engine step, so the step and per-sequence overheads are not paid again);
- ``draft_model``: the catalog draft model's decode iteration on the same devices, less the step
  overhead;
- ``ngram``: prompt lookup on the host, 0.

``t_spec(B) = t_verify(B) + k t_draft(B)``; per token ``t_spec / E``.

**Latency** (DESIGN §3 definitions). Tokens arrive in bursts of ``E`` on average: per request,
TPOT = ``t_spec / E`` (its mean gap); ITL counts every gap, ``E - 1`` of each burst's gaps are ~0 and
one is ``t_spec``, so the ITL ``p`` quantile is ``t_spec`` when ``p > 1 - 1/E`` (always at p90/p99 for
``E < 10``) and the mean ITL is ``t_spec / E``. Acceptance is taken at its mean: the spread of
per-request TPOT from random acceptance is not modelled (it widens the TPOT tail a little).

**Memory.** ``mtp`` / ``eagle``: the draft layer's weights ``W / L`` and KV ``k_tok / L`` per token;
``draft_model``: the draft's weights and its KV per token. The point's batch limit ``B_mem`` and its
KV bytes per request include them, and a speculative row's pool KV capacity
(``kv_capacity_bytes``, which the optimiser's KV constraint reads; a pool takes the smallest of its
rows') is the instance's less the draft's weights, ``W_draft / tp`` per device
(:func:`spec_kv_capacity_bytes`; ``detail["spec_kv_capacity_bytes"]``).

**Choice.** The plain point and the speculative one are both costed; the one with fewer
instance-seconds per request among those meeting the targets is the operating point (the capacity
table's row records which: ``spec_method`` empty = plain). This choice is made per (service,
bucket, config, role) before the optimiser, which therefore sees the cheaper of the two for each row.

**Shared (unified) pools** (:func:`planner.perf.points._unified_point` with a :class:`SpecCost`): every
iteration verifies ``V`` tokens per decoding sequence beside the prefill chunk it carries
(:func:`spec_chunk_step`; not mixed: :func:`spec_stall_step`) and runs the ``k`` draft passes over the
decoding sequences; it yields ``E`` tokens per sequence, so requests finish at ``B E / OSL`` per
iteration (lane share ``u = B E n / (OSL q)``), ``instance_seconds_per_request = OSL t_mean / (B E)``,
a request spans ``(OSL - 1)/E`` iterations ``K`` of which carry a chunk (per-request TPOT =
their mean / ``E``, :func:`planner.queueing.tpot_quantile_s` over ``1 + (OSL - 1)/E`` outputs) and
the chunk-carrying iterations still make the ITL tail (:func:`burst_itl_quantile_s`). The chunk
choice, lane wait and TTFT are those of the plain unified point with these step times.

**Expert-parallel replicas** (:func:`ep_speculative_decode_point`, decode pools; ``draft_model`` is
not modelled there and decodes plain): the verify iteration carries ``B V`` tokens per DP rank, so
the rank's GEMM rows, the busiest GPU's expert rows and the dispatch/combine volume scale with
``B V`` (:func:`planner.perf.moe.ep_iteration_time` with ``tokens_per_seq``) while each sequence's KV
is read once; the MTP draft pass is one MoE layer's share of an EP iteration plus the output head
(:func:`ep_draft_pass_s`); the draft's weights are ``W_gpu / L`` per GPU and the verify tokens must
fit DeepEP's low-latency buffers (``B V <= T_max`` per rank). Unified EP points stay infeasible
(:mod:`planner.perf.moe`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.perf.roofline import (
    Efficiency,
    InstanceArrays,
    StepTime,
    causal_pairs,
    comm_s,
    iteration_time,
    kv_bytes,
    kv_capacity_bytes,
    kv_split,
    weights_read_bytes,
)
from planner.schema.common import PRECISION_BYTES

if TYPE_CHECKING:
    from planner.schema.llm import LLMProfile
    from planner.schema.speculative import SpeculativeDecoding

SPEC_POINT_COLUMNS: tuple[str, ...] = (
    "spec_method", "spec_tokens", "spec_draft_model", "spec_tokens_per_step", "spec_step_ms",
    "plain_instance_seconds_per_request", "spec_breakeven_batch",
)
"""Capacity-table columns of a speculative point (``spec_method`` '' and NaN numbers on a plain one)."""


@dataclass(frozen=True)
class SpecCost:
    """The inputs of the speculative step of one (model, instance)."""

    k: int
    verify_tokens: int
    tokens_per_step: float
    method: str
    draft_inst: InstanceArrays | None = None
    """Instance of the draft model (``draft_model``)."""
    draft_weight_bytes: float = 0.0
    """Draft weights held by the instance (all devices)."""
    draft_kv_share: float = 0.0
    """Draft KV bytes per target KV byte of a sequence."""
    weight_bytes_per_param: float = 2.0


def spec_cost(spec: SpeculativeDecoding, model: LLMProfile, inst: InstanceArrays, weight_precision: str,
              draft: LLMProfile | None = None, draft_inst: InstanceArrays | None = None,
              kv_precision: str = "bf16") -> SpecCost:
    """Draft sizes and tokens per step of ``spec`` for ``model`` (module docstring)."""
    k = spec.num_speculative_tokens
    v = spec.verify_tokens or k + 1
    layers = float(model.num_layers)
    w_draft, kv_share = 0.0, 0.0
    if spec.method in ("mtp", "eagle"):
        w_draft = float(model.weight_bytes(weight_precision)) / layers
        kv_share = 1.0 / layers
    elif spec.method == "draft_model" and draft is not None:
        w_draft = float(draft.weight_bytes(weight_precision))
        kv_share = float(draft.kv_bytes_per_token(kv_precision)) / max(float(model.kv_bytes_per_token(kv_precision)), 1e-9)
    return SpecCost(k=k, verify_tokens=v, tokens_per_step=spec.tokens_per_step(), method=spec.method,
                    draft_inst=draft_inst, draft_weight_bytes=w_draft, draft_kv_share=kv_share,
                    weight_bytes_per_param=PRECISION_BYTES[weight_precision])


def verify_step(inst: InstanceArrays, eff: Efficiency, batch: Any, context: Any, tokens_per_seq: float,
                prefill_tokens: Any = 0.0, prefill_cached: Any = 0.0, prefill_prompts: Any = 1.0) -> StepTime:
    """The target iteration verifying ``tokens_per_seq`` tokens of each of ``batch`` sequences (module
    docstring), plus ``prefill_tokens`` prompt tokens as :func:`planner.perf.roofline.iteration_time`
    counts them (a unified pool's chunk: its GEMM rows, attention pairs, KV read and logits of each
    prompt's last token only). With ``tokens_per_seq`` 1 it is ``iteration_time`` exactly."""
    b = np.asarray(batch, dtype=float)
    c = np.asarray(context, dtype=float)
    n = np.asarray(prefill_tokens, dtype=float)
    h = np.asarray(prefill_cached, dtype=float)
    m = np.maximum(np.asarray(prefill_prompts, dtype=float), 1.0)
    per = n / m
    v = float(tokens_per_seq)
    tokens = b * v + n
    lm_rows = np.where(n > 0, np.minimum(m, n), 0.0)
    m_half = inst.gemm_m_half
    gemm_c = 2.0 * (inst.p_matmul * (tokens + m_half) - inst.p_lm_head * (n - lm_rows)) / (inst.tp * inst.flops_peak * eff.eta_f)
    gemm_m = weights_read_bytes(inst, tokens) / (inst.tp * inst.bw_bytes_per_s * eff.eta_b)
    pairs_full = v * b * c + n * (per + 2.0 * h) / 2.0
    pairs_win = v * b * np.minimum(c, inst.window_tokens) + m * causal_pairs(per, h, inst.window_tokens)
    attn_flops = inst.attn_pair_flops * pairs_full + inst.attn_pair_flops_window * pairs_win
    attn_c = attn_flops / (inst.tp * inst.attn_flops_peak * eff.eta_f)
    kv_read = b * kv_bytes(inst, c) + np.where(n > 0, m * kv_bytes(inst, per + h), 0.0)
    attn_m = kv_read * inst.kv_read_scale / (kv_split(inst) * inst.bw_bytes_per_s * eff.eta_b)
    t_x = comm_s(inst, tokens, eff.allreduce_overhead_s, eff.eta_link)
    seqs = b + np.where(n > 0, m, 0.0)
    t_o = np.asarray(eff.step_overhead_s + eff.layer_overhead_s * inst.layers + eff.seq_overhead_s * seqs, dtype=float)
    total = np.maximum(gemm_c, gemm_m) + np.maximum(attn_c, attn_m) + t_x + t_o
    return StepTime(total, gemm_c + attn_c, gemm_m + attn_m, t_x, np.broadcast_to(t_o, total.shape))


def draft_pass_s(cost: SpecCost, inst: InstanceArrays, eff: Efficiency, batch: Any, context: Any) -> np.ndarray:
    """Seconds of one draft pass over ``batch`` sequences (module docstring, per method)."""
    b = np.asarray(batch, dtype=float)
    c = np.asarray(context, dtype=float)
    width = max(1.0, (cost.verify_tokens - 1) / cost.k)
    tokens = b * width
    if cost.method == "ngram":
        return np.zeros_like(b * c)
    if cost.method == "draft_model" and cost.draft_inst is not None:
        step = iteration_time(cost.draft_inst, eff, decode_batch=tokens, decode_context=c)
        return np.asarray(step.total_s - eff.step_overhead_s, dtype=float)
    layers = inst.layers
    p_layer = (inst.p_matmul - inst.p_lm_head) / layers
    m_half = inst.gemm_m_half
    gemm_c = 2.0 * (p_layer + inst.p_lm_head) * (tokens + m_half) / (inst.tp * inst.flops_peak * eff.eta_f)
    w_bytes = weights_read_bytes(inst, tokens) / layers + inst.p_lm_head * cost.weight_bytes_per_param
    gemm_m = w_bytes / (inst.tp * inst.bw_bytes_per_s * eff.eta_b)
    attn_c = (inst.attn_pair_flops * tokens * c) / layers / (inst.tp * inst.attn_flops_peak * eff.eta_f)
    attn_m = b * kv_bytes(inst, c) / layers * inst.kv_read_scale / (kv_split(inst) * inst.bw_bytes_per_s * eff.eta_b)
    t_x = comm_s(inst, tokens, eff.allreduce_overhead_s, eff.eta_link) / layers
    return np.asarray(np.maximum(gemm_c, gemm_m) + np.maximum(attn_c, attn_m) + t_x + eff.layer_overhead_s, dtype=float)


def spec_step(cost: SpecCost, inst: InstanceArrays, eff: Efficiency, batch: Any, context: Any) -> tuple[np.ndarray, StepTime]:
    """``t_spec(B) = t_verify(B) + k t_draft(B)`` and the verify step (for its roofline shares)."""
    ver = verify_step(inst, eff, batch, context, cost.verify_tokens)
    return ver.total_s + cost.k * draft_pass_s(cost, inst, eff, batch, context), ver


def spec_chunk_step(cost: SpecCost, inst: InstanceArrays, eff: Efficiency, batch: Any, context: Any, q: Any, n_new: float,
                    cached: float) -> StepTime:
    """A unified iteration with speculation: ``batch`` sequences verify ``V`` tokens each beside a
    prefill chunk of ``q`` tokens (placed as :func:`planner.perf.points._chunk_step` places it:
    ``q <= n`` one chunk at its mean position, ``q > n`` ``q/n`` whole prompts), then the ``k`` draft
    passes over the decoding sequences (the chunk's prompt is not drafted for). The roofline shares
    are the verify iteration's; ``total_s`` includes the draft."""
    qq = np.asarray(q, dtype=float)
    several = qq > n_new
    m = np.where(several, qq / n_new, 1.0)
    h = np.where(several, cached, cached + (n_new - np.minimum(qq, n_new)) / 2.0)
    ver = verify_step(inst, eff, batch, context, cost.verify_tokens, prefill_tokens=qq, prefill_cached=h, prefill_prompts=m)
    draft = cost.k * draft_pass_s(cost, inst, eff, batch, context)
    return StepTime(ver.total_s + draft, ver.compute_s, ver.memory_s, ver.comm_s, ver.overhead_s)


def spec_stall_step(cost: SpecCost, inst: InstanceArrays, eff: Efficiency, batch: Any, context: Any, q: Any, n_new: float,
                    cached: float) -> StepTime:
    """A prefill-priority (not mixed) engine with speculation: the verify + draft step followed by
    a prefill-only iteration of ``q`` tokens that stalls it (as :func:`planner.perf.points._stall_step`)."""
    t_spec, ver = spec_step(cost, inst, eff, batch, context)
    qq = np.asarray(q, dtype=float)
    several = qq > n_new
    m = np.where(several, qq / n_new, 1.0)
    h = np.where(several, cached, cached + (n_new - np.minimum(qq, n_new)) / 2.0)
    pre = iteration_time(inst, eff, prefill_tokens=qq, prefill_cached=h, prefill_prompts=m)
    parts = np.broadcast_arrays(t_spec + pre.total_s, ver.compute_s + pre.compute_s, ver.memory_s + pre.memory_s,
                                ver.comm_s + pre.comm_s, ver.overhead_s + pre.overhead_s)
    return StepTime(*parts)


def burst_itl_quantile_s(quantile: float | None, chunk_share: Any, t_chunk_s: Any, t_plain_s: Any, tokens_per_step: float) -> np.ndarray:
    """ITL of a unified instance whose iterations yield ``E`` tokens per sequence: of every ``E``
    gaps one is the iteration (a chunk-carrying one with probability ``u``) and ``E - 1`` are ~0, so
    the gaps are ``t_chunk`` with share ``u/E``, ``t_plain`` with share ``(1 - u)/E`` and 0 with
    share ``1 - 1/E``. The ``p`` quantile is ``t_chunk`` when ``u/E > 1 - p``, else ``t_plain`` when
    ``1/E > 1 - p``, else 0; the mean is ``(u t_chunk + (1 - u) t_plain) / E``. With ``E = 1`` this
    is :func:`planner.queueing.itl_quantile_s`."""
    u = np.clip(np.asarray(chunk_share, dtype=float), 0.0, 1.0)
    tc, tp = np.asarray(t_chunk_s, dtype=float), np.asarray(t_plain_s, dtype=float)
    e = float(tokens_per_step)
    if quantile is None:
        return (u * tc + (1.0 - u) * tp) / e
    return np.where(u / e > 1.0 - quantile, tc, np.where(1.0 / e > 1.0 - quantile, tp, 0.0))


def spec_kv_capacity_bytes(cost: SpecCost, inst: InstanceArrays) -> float:
    """KV bytes the instance holds next to the target's and the draft's weights:
    ``kv_capacity_bytes - W_draft / tp x min(tp, H_kv)`` (the draft's weights are split like the target's)."""
    return float(kv_capacity_bytes(inst)) - cost.draft_weight_bytes / float(inst.tp) * float(kv_split(inst))


def spec_batch_limit(cost: SpecCost, inst: InstanceArrays, peak_context: float, cap: int) -> int:
    """Largest batch whose KV (target + draft) fits next to the target's and the draft's weights."""
    room = spec_kv_capacity_bytes(cost, inst)
    per_seq = float(kv_bytes(inst, peak_context)) * (1.0 + cost.draft_kv_share)
    if room <= 0 or per_seq <= 0:
        return 0
    return int(min(cap, math.floor(room / per_seq)))


def itl_quantile_s(t_spec: float, tokens_per_step: float, quantile: float | None) -> float:
    """The ITL statistic of bursts of ``E`` tokens every ``t_spec`` (module docstring)."""
    if quantile is None or quantile != quantile:
        return t_spec / tokens_per_step
    return t_spec if quantile > 1.0 - 1.0 / tokens_per_step else 0.0


def speedup(cost: SpecCost, inst: InstanceArrays, eff: Efficiency, batch: Any, context: Any) -> np.ndarray:
    """Decode tokens per second with speculation over without, at the same batch: ``E t_dec(B) / t_spec(B)``."""
    t_plain = iteration_time(inst, eff, decode_batch=batch, decode_context=context).total_s
    t_spec, _ = spec_step(cost, inst, eff, batch, context)
    return np.asarray(cost.tokens_per_step * t_plain / t_spec, dtype=float)


def breakeven_batch(cost: SpecCost, inst: InstanceArrays, eff: Efficiency, context: float, b_max: int) -> int:
    """Largest batch (up to ``b_max``) at which speculation still yields more tokens per second; 0 if none."""
    batches = np.arange(1, max(1, b_max) + 1, dtype=float)
    ok = speedup(cost, inst, eff, batches, context) > 1.0
    return int(batches[np.nonzero(ok)[0].max()]) if ok.any() else 0


def spec_columns(spec: SpeculativeDecoding | None, detail: dict[str, float]) -> dict[str, Any]:
    """The :data:`SPEC_POINT_COLUMNS` of a capacity row (a plain row when ``detail`` has no speculative step)."""
    chosen = spec is not None and "spec_tokens_per_step" in detail
    nan = math.nan
    return {
        "spec_method": spec.method if chosen and spec is not None else "",
        "spec_tokens": int(spec.num_speculative_tokens) if chosen and spec is not None else 0,
        "spec_draft_model": spec.draft_model if chosen and spec is not None else "",
        "spec_tokens_per_step": float(detail.get("spec_tokens_per_step", nan)),
        "spec_step_ms": float(detail.get("spec_step_ms", nan)),
        "plain_instance_seconds_per_request": float(detail.get("plain_instance_seconds_per_request", nan)),
        "spec_breakeven_batch": float(detail.get("spec_breakeven_batch", nan)),
    }


def find_draft(catalog_models: Mapping[str, LLMProfile], models: Mapping[str, LLMProfile], file: str, service: str,
               spec: SpeculativeDecoding) -> LLMProfile | None:
    """The profile of a ``draft_model`` draft (None for another method): the catalog's model of that id, else the
    instance's own (``models``, by id); an InputError naming ``services.<service>.speculative.draft_model`` of
    ``file`` when neither has it."""
    if spec.method != "draft_model":
        return None
    draft = catalog_models.get(spec.draft_model) or models.get(spec.draft_model)
    if draft is None:
        from planner.errors import InputError, Problem

        raise InputError(Problem(file, f"services.{service}.speculative.draft_model",
                                 f"unknown draft model {spec.draft_model!r}",
                                 f"use a catalog model id ({', '.join(sorted(catalog_models)[:12])}...) or method eagle / ngram"))
    return draft


def draft_profile(resolved: Any, service: str, spec: SpeculativeDecoding) -> LLMProfile | None:
    """The catalog profile of a ``draft_model`` draft of a resolved instance (:class:`planner.instance.ResolvedInstance`:
    its ``catalog``, ``models`` and ``path``); an InputError naming the field when it is unknown (:func:`find_draft`)."""
    if spec.method != "draft_model":
        return None
    catalog_models = getattr(getattr(resolved, "catalog", None), "models", {}) or {}
    return find_draft(catalog_models, resolved.models, str(getattr(resolved, "path", "") or ""), service, spec)


def gain_phrase(lo_pct: int, hi_pct: int) -> str:
    """The range ``lo_pct``..``hi_pct`` of savings (%, negative = costs more) in instance-seconds per
    request against plain decoding, in words: "12–67 % fewer", "5–92 % more", or across zero
    "from 92 % more to 67 % fewer" (never a signed "-92-67 % fewer")."""
    tail = "instance-seconds per request than plain"
    lo, hi = min(lo_pct, hi_pct), max(lo_pct, hi_pct)
    if lo == hi == 0:
        return "as many instance-seconds per request as plain"
    if lo >= 0:
        return f"{hi if lo == hi else f'{lo}–{hi}'} % fewer {tail}"
    if hi <= 0:
        return f"{-lo if lo == hi else f'{-hi}–{-lo}'} % more {tail}"
    return f"from {-lo} % more to {hi} % fewer {tail}"


def speculation_notes(inst: Any, points: Any) -> list[str]:
    """One plain-language line per service with speculative decoding: where it was chosen, what it
    gains, and where it stops paying (compute-bound batches)."""
    out = []
    for name, svc in inst.services.items():
        spec = svc.speculative
        if spec is None:
            continue
        dec = points[(points["service"] == name) & points["role"].isin(["decode", "unified"]) & points["feasible"].astype(bool)]
        if dec.empty:
            continue
        chosen = dec[dec["spec_method"].astype(str) != ""]
        e = spec.tokens_per_step()
        line = (f"services.{name}.speculative ({spec.method}, k={spec.num_speculative_tokens}, {e:.2f} tokens per verify step): "
                f"chosen for {len(chosen)} of {len(dec)} feasible decode and unified points")
        if not chosen.empty:
            gain = 1.0 - (chosen["instance_seconds_per_request"] / chosen["plain_instance_seconds_per_request"]).replace([np.inf], np.nan)
            if gain.notna().any():
                line += ", " + gain_phrase(round(100 * float(gain.min())), round(100 * float(gain.max())))
        be = dec["spec_breakeven_batch"].dropna()
        if not be.empty:
            lo, hi = int(be.min()), int(be.max())
            if hi <= 0:
                line += "; it pays at no batch on any config (the verify step is compute-bound from batch 1: plain decoding is faster)"
            else:
                where = (f"up to batch {hi} on the best config" + (", on some configs not at all" if lo == 0 else f", {lo} on the worst"))
                line += (f"; it pays while the verify step stays bandwidth-bound: {where} "
                         "(larger, compute-bound batches decode faster without it)")
        if spec.method == "draft_model":
            line += "; expert-parallel replicas are costed without a draft model (planner/perf/speculative.py)"
        out.append(line)
    return out


def largest_batch_meeting(t_spec: np.ndarray, tokens_per_step: float, *, osl: float, tpot_limit_s: float, itl_limit_s: float,
                          e2e_limit_s: float, itl_quantile: float | None) -> int | None:
    """Index of the largest batch whose speculative step ``t_spec`` (per batch, ascending) meets the per-token
    targets: TPOT ``t / E``, the burst ITL quantile (:func:`itl_quantile_s`) and the decode part of E2E
    ``(OSL - 1) t / E``; None when no batch does. Shared by the TP and the expert-parallel decode points."""
    tpot = t_spec / tokens_per_step
    itl = np.array([itl_quantile_s(float(t), tokens_per_step, itl_quantile) for t in t_spec])
    ok = (tpot <= tpot_limit_s) & (itl <= itl_limit_s) & ((osl - 1.0) * tpot <= e2e_limit_s)
    return int(np.nonzero(ok)[0].max()) if ok.any() else None


def speculative_decode_point(plain: Any, cost: SpecCost, inst: InstanceArrays, eff: Efficiency, *, isl: float, osl: float,
                             tpot_limit_s: float, itl_limit_s: float, itl_quantile: float | None, e2e_limit_s: float,
                             power_w: Any, source: str, max_batch: int) -> Any:
    """The cheaper of ``plain`` (the plain decode :class:`~planner.schema.capacity.OperatingPoint`) and the
    speculative decode point meeting the same targets (module docstring); the returned point's
    ``detail`` says which (``spec_tokens_per_step`` present = speculative)."""
    from planner.schema.capacity import OperatingPoint

    peak, ctx = isl + osl, isl + osl / 2.0
    e = cost.tokens_per_step
    b_mem = spec_batch_limit(cost, inst, peak, max_batch)
    plain_s = float(plain.instance_seconds_per_request) if plain.feasible else math.inf
    if b_mem < 1:
        plain.detail["spec_rejected"] = 1.0  # the draft's weights and KV leave no room
        return plain
    batches = np.arange(1, b_mem + 1, dtype=float)
    t_spec, ver = spec_step(cost, inst, eff, batches, ctx)
    i = largest_batch_meeting(t_spec, e, osl=osl, tpot_limit_s=tpot_limit_s, itl_limit_s=itl_limit_s, e2e_limit_s=e2e_limit_s,
                              itl_quantile=itl_quantile)
    if i is None:
        plain.detail["spec_rejected"] = 2.0  # no batch meets the per-token targets with a speculative step
        return plain
    b_star, t_star = int(batches[i]), float(t_spec[i])
    seconds = osl * t_star / (e * b_star)
    breakeven = breakeven_batch(cost, inst, eff, ctx, max(b_mem, int(plain.max_batch or 1)))
    if seconds >= plain_s:
        plain.detail.update({"spec_rejected": 3.0, "spec_instance_seconds_per_request": seconds, "spec_breakeven_batch": float(breakeven)})
        return plain
    kv_req = float(kv_bytes(inst, peak)) * (1.0 + cost.draft_kv_share)
    bound = "memory_capacity" if b_star == b_mem and b_mem < max_batch else (
        "compute" if float(ver.compute_s[i]) >= float(ver.memory_s[i]) else "memory_bandwidth")
    detail = {"step_ms": 1e3 * t_star, "spec_step_ms": 1e3 * t_star, "batch": float(b_star), "batch_memory_limit": float(b_mem),
              "compute_ms": 1e3 * float(ver.compute_s[i]), "memory_ms": 1e3 * float(ver.memory_s[i]),
              "comm_ms": 1e3 * float(ver.comm_s[i]), "overhead_ms": 1e3 * float(ver.overhead_s[i]),
              "itl_ms": 1e3 * itl_quantile_s(t_star, e, itl_quantile), "spec_tokens_per_step": e,
              "plain_instance_seconds_per_request": plain_s, "spec_breakeven_batch": float(breakeven),
              "spec_kv_capacity_bytes": spec_kv_capacity_bytes(cost, inst)}
    energy = power_w(float(ver.compute_s[i]), float(ver.memory_s[i]), t_star, float(b_star)) * seconds
    return OperatingPoint(feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star,
                          kv_bytes_per_request=kv_req, kv_transfer_bytes_per_request=0.0, energy_j_per_request=energy,
                          ttft_ms=0.0, tpot_ms=1e3 * t_star / e, source=source, detail=detail)
