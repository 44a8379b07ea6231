"""Closed-loop benchmark semantics: ``N`` users, fixed ISL/OSL, each user sends its next
request the moment its previous one ends (how the measured CSVs are taken).

Model (vectorised over rows; symbols of :mod:`planner.perf.roofline`):

1. **Slots.** The KV pool admits ``B_max`` sequences (:func:`engine_slots`: the pool each engine
   sizes (:func:`planner.perf.roofline.engine_kv_pool_bytes`), whole KV blocks per sequence, and
   the admission footprint — ``ISL + OSL`` reserved by TensorRT-LLM, the mean ``ISL + OSL/2`` by
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
3. **TTFT** (mean over the benchmark's ``R = REQUESTS_PER_USER x N`` requests, the first wave
   included). *First wave*: all ``D`` prompts arrive at ``t = 0`` and run in passes of up to
   ``budget`` prompt tokens; the ``k``-th completes in pass ``ceil(k ISL / budget)``, so its mean
   is ``t_wave x mean_k ceil(k ISL / budget)`` (:func:`staircase_mean`; ``t_wave`` = one pass of
   ``D ISL / ceil(D ISL / budget)`` prompt tokens). *Steady state* (the other ``R - D``
   requests): half a pass of arrival misalignment (the residual of the pass in flight) + the
   own prefill — mixed prefill: ``ceil(ISL/q) - 1`` full chunk passes and one pass carrying the
   remainder chunk ``ISL - (n_ch - 1) q``; separate prefill (SGLang): prefill-first batches put
   every prompt that is waiting into the next batches and pause decode, so the first wave stays in
   step for the whole run (the ``D`` requests finish in the same decode iterations and come back
   together) and every cycle repeats the first-wave staircase (with a harness's fitted ``cohort_exponent`` below 1,
   the staircase of a cohort of ``D ** cohort_exponent``; round 9). Then ``TTFT = (D first + (R - D)
   steady)/R + ttft_overhead + slot wait (N - D) T_cyc / D`` (Little's law, closed loop).
   ``REQUESTS_PER_USER = 10``: aiconfigurator's benchmark runners send ``10 x concurrency``
   requests per run (genai-perf ``--request-count``, SGLang ``bench_serving`` ``--num-prompts``);
   the shipped rows do not record their own count, so this is the documented convention, not a
   fit. ``admit_share x T_cyc / D`` is added when a user sets it (not fitted).
4. **TPOT** (separate prefill) = ``(T_cyc - TTFT_steady) / (OSL - 1)``: the prefill pauses a
   request's decode sees, spread over its tokens; never below ``t_dec(D)``.
5. **Preemption** (``kv_preempt``: vLLM; round 10 of ``planner/perf/README.md``). vLLM's V1 scheduler
   admits a waiting prompt as soon as the pool has blocks for it and, when a running request needs a
   block the pool does not have, preempts the most recently admitted one (its KV is dropped and
   recomputed later). A request therefore waits partly before its first token (for blocks for its
   prompt) and partly after (stalled between output tokens), and the client counts the second part
   in TPOT. With the slot wait ``W = (N - D) T_cyc / D`` (the same Little's-law total), the share
   ``s = ISL / (ISL + OSL)`` — the prompt's part of the request's peak footprint — goes to TTFT and
   ``(1 - s) W / (OSL - 1)`` is added to TPOT; TTFT + (OSL - 1) TPOT is unchanged. ``s`` is a stated
   approximation, not derived from the scheduler's dynamics: on the three KV-limited H100 rows the
   measured share before the first token is 0.28 (1k in / 8k out) and 0.33 / 0.85 (8k / 1k at 32 / 64
   users) against 0.11 and 0.89. TensorRT-LLM (``GUARANTEED_NO_EVICT`` reserves the peak) and SGLang
   (admission reserves the expected growth) keep the whole wait before the first token.

Mixed-prefill engines are not treated as fully locked (locking TensorRT-LLM made out-of-sample
TTFT 64.7 %), but not as lone prompts either: prompts prefilled in the same pass decode in the
same iterations, finish together and come back together, so the steady state has **cohorts** of
mean size ``g = D ** cohort_exponent`` (fitted per engine; round 8 of ``planner/perf/README.md``).
A cohort member's steady TTFT adds ``staircase_mean(g, ISL/q) t_pass(g) − t_pass(1)``
(:func:`_cohort_extra`: the cohort's prompts in passes of up to ``q`` tokens beside the average
decode batch, minus a lone prompt's passes; linear between integer ``g``). Work per cycle and so
TPOT are unchanged. This is a closed-loop (benchmark) effect: the planner's open-loop operating
points (:mod:`planner.perf.points`) do not use it.
Disaggregated rows: prefill workers serve ``N`` users' prompts (an M/D/1-like queue on the
prefill pool at the decode-limited request rate), decode workers run the batch
``decode_batch`` at ``c``; TTFT adds the KV transfer over the NIC.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.perf.roofline import (
    RESERVE_GB,
    Efficiency,
    InstanceArrays,
    blocks_tokens,
    engine_kv_pool_bytes,
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
    admit_share: np.ndarray
    ttft_overhead_s: np.ndarray
    mixed: np.ndarray
    budget_tokens: np.ndarray
    kv_share_of_free: np.ndarray | bool = False
    kv_reserve_peak: np.ndarray | bool = False
    kv_preempt: np.ndarray | bool = False
    eta_link: np.ndarray | float = 1.0
    cohort_exponent: np.ndarray | float = 0.0
    memory_fraction: np.ndarray | float = 0.9
    """NaN = SGLang's automatic reserve (:func:`planner.perf.roofline.engine_kv_pool_bytes`)."""
    workspace_gb: np.ndarray | float = RESERVE_GB
    kv_block_tokens: np.ndarray | float = 1.0

    def efficiency(self) -> Efficiency:
        return Efficiency(self.eta_f, self.eta_b, self.step_overhead_s, self.layer_overhead_s, self.seq_overhead_s, self.allreduce_overhead_s,
                          self.eta_link)


@dataclass(frozen=True)
class LoopResult:
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    feasible: np.ndarray
    max_batch: np.ndarray
    running: np.ndarray
    t_decode_s: np.ndarray
    cycle_s: np.ndarray


def held_tokens(eng: EngineArrays, isl: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Tokens of KV a running request holds by the engine's pool rule: its peak ``ISL + OSL`` where the engine
    reserves it (``kv_reserve_peak``), else its mean ``ISL + OSL/2`` over its life."""
    return np.where(eng.kv_reserve_peak, isl + osl, isl + osl / 2.0)


def engine_slots(inst: InstanceArrays, eng: EngineArrays, isl: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Requests the engine runs at once, by KV capacity (step 1 of the module docstring)::

        pool per device = engine_kv_pool_bytes(...)      (vLLM / TensorRT-LLM / SGLang rules)
        slots = floor(pool min(tp, H_kv) / kv(blocks(L))),  L = ISL + OSL (kv_reserve_peak) else ISL + OSL/2

    ``blocks(L)`` rounds up to whole KV blocks of ``kv_block_tokens``; the mean footprint of a
    request admitted on current usage holds on average half a block more than its tokens, which
    the rounding of the mean approximates."""
    pool = engine_kv_pool_bytes(inst, eng.memory_fraction, eng.workspace_gb, eng.kv_share_of_free)
    cap = np.maximum(pool, 0.0) * kv_split(inst)
    per_seq = kv_bytes(inst, blocks_tokens(held_tokens(eng, isl, osl), eng.kv_block_tokens))
    return np.where(pool > 0, np.floor(cap / np.maximum(per_seq, 1.0)), 0.0)


REQUESTS_PER_USER = 10.0
"""Requests per user in one benchmark run (aiconfigurator's genai-perf / bench_serving runners:
``10 x concurrency``); the first wave is ``1 / REQUESTS_PER_USER`` of the measured requests."""


def staircase_mean(n: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Mean over ``k = 1..n`` of ``ceil(k a)`` (the pass in which the ``k``-th of ``n`` simultaneous
    prompts completes when each pass takes ``1/a`` prompts). Exact up to ``n = 4096``; beyond, the
    mean ``a (n + 1)/2 + 1/2`` (the ceiling adds half a pass on average)."""
    n = np.asarray(n, dtype=float)
    a = np.broadcast_to(np.asarray(a, dtype=float), n.shape)
    if n.size == 0:
        return np.zeros(n.shape)
    # rows repeat a few (n, a) pairs: evaluate each distinct pair once
    keys, inverse = np.unique(n.ravel() + 1j * a.ravel(), return_inverse=True)
    nu, au = keys.real, keys.imag
    kmax = int(min(max(float(np.max(nu, initial=1.0)), 1.0), 4096.0))
    k = np.arange(1, kmax + 1, dtype=float)
    grid = np.ceil(np.outer(au, k) - 1e-9) * (k[None, :] <= nu.reshape(-1, 1))
    exact = grid.sum(axis=1) / np.maximum(nu, 1.0)
    out = np.where(nu > 4096, au * (nu + 1.0) / 2.0 + 0.5, exact)
    return out[inverse.ravel()].reshape(n.shape)


def _staircase_frac(g: np.ndarray, a: np.ndarray) -> np.ndarray:
    """:func:`staircase_mean` at a fractional ``g`` (linear between the integers around it)."""
    lo = np.floor(g)
    hi = np.ceil(g)
    s_lo = staircase_mean(np.maximum(lo, 1.0), a)
    s_hi = staircase_mean(np.maximum(hi, 1.0), a)
    return s_lo + (g - lo) * (s_hi - s_lo)


def _cohort_pass(inst: InstanceArrays, eff: Efficiency, g: np.ndarray, d_avg: np.ndarray, ctx: np.ndarray, isl: np.ndarray,
                 q: np.ndarray) -> np.ndarray:
    """Mean time to the last own pass for a member of a cohort of ``g`` prompts that arrive
    together and are prefilled in passes of up to ``q`` prompt tokens beside the decode batch."""
    tokens = g * isl
    chunk = tokens / np.ceil(tokens / q)
    t_pass = iteration_time(inst, eff, decode_batch=d_avg, decode_context=ctx, prefill_tokens=chunk,
                            prefill_cached=(isl - np.minimum(chunk, isl)) / 2.0, prefill_prompts=np.maximum(chunk / isl, 1.0)).total_s
    return _staircase_frac(g, isl / q) * t_pass


def _cohort_extra(inst: InstanceArrays, eff: Efficiency, d: np.ndarray, d_avg: np.ndarray, ctx: np.ndarray, isl: np.ndarray,
                  q: np.ndarray, exponent: np.ndarray | float) -> np.ndarray:
    """Extra steady-state TTFT of a mixed-prefill engine when completions come back in cohorts of
    ``g = D ** exponent`` requests: the cohort's passes minus a lone prompt's passes (0 at g = 1)."""
    g = np.clip(d ** np.asarray(exponent, dtype=float), 1.0, d)
    one = np.ones_like(g)
    return np.maximum(_cohort_pass(inst, eff, g, d_avg, ctx, isl, q) - _cohort_pass(inst, eff, one, d_avg, ctx, isl, q), 0.0)


def predict_agg(inst: InstanceArrays, eng: EngineArrays, users: np.ndarray, isl: np.ndarray, osl: np.ndarray) -> LoopResult:
    """Mean TTFT and TPOT of an aggregated (one pool) closed-loop benchmark; see module docstring."""
    eff = eng.efficiency()
    n_users = np.asarray(users, dtype=float)
    isl = np.asarray(isl, dtype=float)
    osl = np.asarray(osl, dtype=float)
    bmax = engine_slots(inst, eng, isl, osl)
    peak_one = engine_slots(inst, replace(eng, kv_reserve_peak=np.ones_like(np.asarray(eng.kv_reserve_peak, dtype=bool))), isl, osl)
    feasible = peak_one >= 1
    ctx = isl + osl / 2.0
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
    last = isl - (n_ch - 1.0) * q  # the final chunk is the remainder, not a full budget
    t_last = iteration_time(inst, eff, decode_batch=d_avg, decode_context=ctx, prefill_tokens=last, prefill_cached=isl - last).total_s
    own_mixed = (n_ch - 1.0) * np.maximum(t_own, t_it) + np.maximum(t_last, t_it)
    own_mixed = own_mixed + _cohort_extra(inst, eff, d, d_avg, ctx, isl, q, eng.cohort_exponent)

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
    # first wave: all D prompts arrive at t = 0 and run in passes of up to `budget` prompt tokens;
    # the k-th completes in pass ceil(k ISL / budget)
    wave_tokens = d * isl
    chunk_w = wave_tokens / np.ceil(wave_tokens / eng.budget_tokens)
    t_wave = iteration_time(inst, eff, prefill_tokens=chunk_w, prefill_cached=(isl - np.minimum(chunk_w, isl)) / 2.0,
                            prefill_prompts=np.maximum(chunk_w / isl, 1.0)).total_s
    first = staircase_mean(d, isl / eng.budget_tokens) * t_wave
    # steady state: mixed prefill -> own chunks after half a pass; separate prefill -> the cohort
    # stays in step (prefill-first batches), so every cycle repeats the first wave's staircase
    # (a cohort of g = D ** cohort_exponent requests: g = D, the whole batch, for SGLang's default
    # cohort_exponent 1; a harness whose runs do not stay in step fits a smaller one)
    g_sep = np.clip(d ** np.asarray(eng.cohort_exponent, dtype=float), 1.0, d)
    tok_g = g_sep * isl
    chunk_g = tok_g / np.ceil(tok_g / eng.budget_tokens)
    t_chunk_g = iteration_time(inst, eff, prefill_tokens=chunk_g, prefill_cached=(isl - np.minimum(chunk_g, isl)) / 2.0).total_s
    own = np.where(mixed, own_mixed, np.maximum(_staircase_frac(g_sep, isl / eng.budget_tokens) * t_chunk_g, own_sep))
    align = 0.5 * np.where(mixed, t_it, t_dec)
    steady = own + align + eng.admit_share * cycle / d
    w_share = np.minimum(d / (REQUESTS_PER_USER * n_users), 1.0)
    in_cycle = steady + eng.ttft_overhead_s
    slot_wait = np.maximum(n_users - d, 0.0) * cycle / d
    # an engine that preempts (vLLM) admits a prompt once its blocks fit and evicts running requests
    # as they grow: the share ISL / (ISL + OSL) of the wait (the prompt's part of the footprint) comes
    # before the first token, the rest as stalls between output tokens (round 10)
    pre = np.where(eng.kv_preempt, isl / (isl + osl), 1.0)
    ttft = w_share * first + (1.0 - w_share) * steady + eng.ttft_overhead_s + pre * slot_wait
    tpot = np.where(mixed, t_it, np.maximum((cycle - in_cycle) / steps, t_dec)) + (1.0 - pre) * slot_wait / steps
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
