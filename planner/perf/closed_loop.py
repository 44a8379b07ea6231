"""Closed-loop benchmark semantics: ``N`` users, fixed ISL/OSL, each user sends its next
request the moment its previous one ends (how the measured CSVs are taken).

Model (vectorised over rows; symbols of :mod:`planner.perf.roofline`):

1. **Slots.** The KV pool admits ``B_max`` sequences (:func:`engine_slots`: per-engine pool size
   and admission footprint — ``ISL + OSL`` reserved by TensorRT-LLM, the mean ``ISL + OSL/2`` by
   vLLM/SGLang; a row is infeasible when one sequence at the peak ``ISL + OSL`` does not fit); the engine
   runs ``D = min(N, B_max)`` requests, the other ``N - D`` users queue for a slot.
2. **One cycle** of a slot serves one request: its prompt (``ISL`` tokens, ``n_ch =
   ceil(ISL / q)`` chunks of ``q = budget - D`` tokens at most) and ``OSL - 1`` decode steps.
   - *mixed prefill* (TensorRT-LLM, vLLM): every iteration carries the decode batch and, on
     average, ``p = D ISL / I`` prompt tokens, ``I = OSL - 1 + n_ch`` iterations per cycle; the
     decode batch averages ``D (OSL-1) / I`` at mean context ``c = ISL + OSL/2``; the averaged
     prompt chunk attends over ``h = (ISL - p)/2`` earlier tokens so that the attention pairs
     per cycle equal ``D ISL^2 / 2`` exactly. ``TPOT = t_it``; ``T_cyc = I t_it``.
   - *separate prefill* (SGLang default): prompts run in prefill-only iterations of up to
     ``budget`` tokens (``K = ceil(D ISL / budget)`` per cycle), decode pauses meanwhile;
     ``T_cyc = T_pf + (OSL - 1) t_dec(D)``.
3. **TTFT** = own prefill (``n_ch`` iterations, or one prefill iteration) + waiting behind
   ``sync_share x (D - 1)/2`` other prompts, each costing ``s_p`` (the prefill's share of a
   cycle per request, ``(T_cyc - (OSL-1) t_dec(D)) / D``) + half an iteration of arrival
   misalignment + ``admit_share x T_cyc / D`` (admission at iteration/batch boundaries: some
   engines admit a new request only once another slot frees, so it waits a share of the
   inter-completion time ``T_cyc / D``) + a fixed ``ttft_overhead`` (API server, tokeniser) +
   the slot wait ``(N - D) T_cyc / D`` (Little's law, closed loop).
4. **TPOT** (separate prefill) = ``(T_cyc - TTFT_in_cycle) / (OSL - 1)``: the prefill pauses a
   request's decode sees, spread over its tokens; never below ``t_dec(D)``.

``sync_share`` (fitted per engine) carries what an analytic model of the loop cannot know:
whether a benchmark's users stay in step (all prompts arrive together) or spread out.
Disaggregated rows: prefill workers serve ``N`` users' prompts (an M/D/1-like queue on the
prefill pool at the decode-limited request rate), decode workers run the batch
``decode_batch`` at ``c``; TTFT adds the KV transfer over the NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.perf.roofline import (
    RESERVE_GB,
    U_MEM,
    Efficiency,
    InstanceArrays,
    iteration_time,
    kv_bytes,
    kv_split,
    max_batch,
)


@dataclass(frozen=True)
class EngineArrays:
    """Per-row engine parameters (from :class:`planner.perf.calibration.EngineCalibration`)."""

    eta_f: np.ndarray
    eta_b: np.ndarray
    step_overhead_s: np.ndarray
    layer_overhead_s: np.ndarray
    seq_overhead_s: np.ndarray
    allreduce_overhead_s: np.ndarray
    sync_share: np.ndarray
    admit_share: np.ndarray
    ttft_overhead_s: np.ndarray
    mixed: np.ndarray
    budget_tokens: np.ndarray
    kv_share_of_free: np.ndarray | bool = False
    kv_reserve_peak: np.ndarray | bool = False

    def efficiency(self) -> Efficiency:
        return Efficiency(self.eta_f, self.eta_b, self.step_overhead_s, self.layer_overhead_s, self.seq_overhead_s, self.allreduce_overhead_s)


@dataclass(frozen=True)
class LoopResult:
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    feasible: np.ndarray
    max_batch: np.ndarray
    running: np.ndarray
    t_decode_s: np.ndarray
    cycle_s: np.ndarray


def engine_slots(inst: InstanceArrays, eng: EngineArrays, isl: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Requests the engine runs at once, by KV capacity (step 1 of the module docstring)::

        pool per device = U_MEM (M - W/tp - reserve)      kv_share_of_free (TensorRT-LLM)
                        = U_MEM M - W/tp - reserve        otherwise (vLLM, SGLang)
        slots = floor(pool min(tp, H_kv) / kv(L)),  L = ISL + OSL (kv_reserve_peak) else ISL + OSL/2
    """
    per_dev_used = inst.weight_bytes / inst.tp + RESERVE_GB * 1e9
    pool = np.where(eng.kv_share_of_free, U_MEM * (inst.memory_bytes - per_dev_used), U_MEM * inst.memory_bytes - per_dev_used)
    cap = np.maximum(pool, 0.0) * kv_split(inst)
    held = np.where(eng.kv_reserve_peak, isl + osl, isl + osl / 2.0)
    return np.where(pool > 0, np.floor(cap / np.maximum(kv_bytes(inst, held), 1.0)), 0.0)


def predict_agg(inst: InstanceArrays, eng: EngineArrays, users: np.ndarray, isl: np.ndarray, osl: np.ndarray) -> LoopResult:
    """Mean TTFT and TPOT of an aggregated (one pool) closed-loop benchmark; see module docstring."""
    eff = eng.efficiency()
    n_users = np.asarray(users, dtype=float)
    isl = np.asarray(isl, dtype=float)
    osl = np.asarray(osl, dtype=float)
    feasible = max_batch(inst, isl + osl) >= 1
    ctx = isl + osl / 2.0
    bmax = engine_slots(inst, eng, isl, osl)
    d = np.clip(np.minimum(n_users, bmax), 1.0, None)
    steps = np.maximum(osl - 1.0, 1.0)
    t_dec = iteration_time(inst, eff, decode_batch=d, decode_context=ctx).total_s

    # mixed prefill
    q = np.maximum(eng.budget_tokens - d, 256.0)
    n_ch = np.ceil(isl / q)
    iters = steps + n_ch
    p_avg = d * isl / iters
    d_avg = d * steps / iters
    t_it = iteration_time(inst, eff, decode_batch=d_avg, decode_context=ctx, prefill_tokens=p_avg, prefill_cached=(isl - p_avg) / 2.0).total_s
    cyc_mixed = iters * t_it
    own_chunk = np.minimum(isl, q)
    t_own = iteration_time(inst, eff, decode_batch=d_avg, decode_context=ctx, prefill_tokens=own_chunk, prefill_cached=(isl - own_chunk) / 2.0).total_s
    own_mixed = n_ch * np.maximum(t_own, t_it)

    # separate prefill iterations
    total_pf = d * isl
    k = np.ceil(total_pf / eng.budget_tokens)
    chunk = total_pf / k
    t_chunk = iteration_time(inst, eff, prefill_tokens=chunk, prefill_cached=(isl - np.minimum(chunk, isl)) / 2.0).total_s
    t_pf = k * t_chunk
    cyc_sep = t_pf + steps * t_dec
    own_sep = np.maximum(np.ceil(isl / eng.budget_tokens), 1.0) * t_chunk

    mixed = eng.mixed.astype(bool)
    cycle = np.where(mixed, cyc_mixed, cyc_sep)
    own = np.where(mixed, own_mixed, own_sep)
    s_p = np.maximum(cycle - steps * t_dec, 0.0) / d
    align = 0.5 * np.where(mixed, t_it, t_dec)
    in_cycle = own + eng.sync_share * (d - 1.0) / 2.0 * s_p + align + eng.admit_share * cycle / d + eng.ttft_overhead_s
    slot_wait = np.maximum(n_users - d, 0.0) * cycle / d
    ttft = in_cycle + slot_wait
    tpot = np.where(mixed, t_it, np.maximum((cycle - in_cycle) / steps, t_dec))
    return LoopResult(ttft, tpot, feasible, bmax, d, t_dec, cycle)


def predict_disagg(
    p_inst: InstanceArrays, d_inst: InstanceArrays, eng: EngineArrays, prefill_workers: np.ndarray,
    decode_workers: np.ndarray, decode_batch: np.ndarray, isl: np.ndarray, osl: np.ndarray, link_bytes_per_s: np.ndarray,
) -> LoopResult:
    """Disaggregated closed loop: ``decode_workers x decode_batch`` users; see module docstring."""
    eff = eng.efficiency()
    isl = np.asarray(isl, dtype=float)
    osl = np.asarray(osl, dtype=float)
    steps = np.maximum(osl - 1.0, 1.0)
    bmax = max_batch(d_inst, isl + osl)
    feasible = (bmax >= 1) & (max_batch(p_inst, isl) >= 1)
    b = np.clip(np.minimum(decode_batch, bmax), 1.0, None)
    ctx = isl + osl / 2.0
    t_dec = iteration_time(d_inst, eff, decode_batch=b, decode_context=ctx).total_s
    t_pf = iteration_time(p_inst, eff, prefill_tokens=isl).total_s
    t_kv = kv_bytes(p_inst, isl) / link_bytes_per_s
    # request rate the decode side sustains, and the prefill pool's utilisation at that rate
    rate = decode_workers * b / (steps * t_dec + t_pf + t_kv)
    util = np.minimum(rate * t_pf / prefill_workers, 0.95)
    wait = util / (2.0 * (1.0 - util)) * t_pf  # M/D/1 mean wait per prefill worker
    ttft = t_pf + wait + t_kv + t_dec + eng.ttft_overhead_s
    return LoopResult(ttft, t_dec, feasible, bmax, b, t_dec, steps * t_dec + ttft)
