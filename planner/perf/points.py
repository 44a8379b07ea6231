"""Operating points per role — the contract with the optimiser (DESIGN §3,
:class:`planner.schema.capacity.OperatingPoint`).

For one (model, device, tp, precisions, length bucket, SLO):

**prefill** (disaggregated prompt pool). ``n = ISL (1 - s)`` new tokens after ``h = ISL s``
cached ones (``s`` = cached prefix share). Prompts are batched up to the engine's token budget
``Q``: ``m = max(1, floor(Q / n))`` prompts share one iteration (the weights are streamed once for
all of them); a prompt longer than ``Q`` runs in ``k = ceil(n / Q)`` chunks. ::

    instance_seconds_per_request = t_iter(m prompts) / m
    ttft = t_iter(m prompts) + ISL k_tok / link + t_dec(1, ISL) + ttft_overhead
    kv_transfer_bytes_per_request = kv(ISL)

(the first decode step is estimated on the same device type and tp; ``link`` is
``kv_link_gb_per_s`` or the NIC bandwidth of the ``tp`` devices). Feasible iff one prompt's KV
fits next to the weights and ``ttft <= target``.

**decode** (disaggregated generation pool). Mean context ``c = ISL + OSL/2``; KV admission at the
peak ``ISL + OSL``. ``B*`` = the largest batch with ``t_dec(B, c) <= TPOT target`` and ``B <=
B_mem`` (capped at :data:`MAX_BATCH`). ::

    instance_seconds_per_request = OSL t_dec(B*) / B*,   tpot = t_dec(B*)

**unified** (shared pool, continuous batching with chunked prefill, Sarathi-Serve). An iteration
carries ``B`` decode sequences and, when a prompt is waiting, a prefill chunk of ``q`` tokens.

- *Chunk cap*: the token budget is set by the TPOT target (Sarathi-Serve sizes it from the
  time-between-tokens SLO): ``q_max(B)`` = the largest chunk with ``t_it(B, q) <= TPOT`` (and
  ``<= Q - B``). The TPOT target is applied to every iteration: with a p99 target over token
  intervals, any chunk share above 1% of iterations puts the chunk iteration at the quantile.
- *Chunk attention*: chunk ``j`` attends over the ``j q`` tokens of earlier chunks (plus the
  cached prefix): the chunk is costed at its mean position ``h = cached + (n - q)/2``, so the
  ``n/q`` chunks carry exactly the unchunked ``n (n + 2 cached)/2`` pairs, and each chunk rereads
  the prompt's KV so far (``kv(q + h)``) and pays a weight read and the per-iteration overheads.
  ``q > n``: ``q/n`` whole prompts share the iteration.
- *Prefill lane*: prompts are chunked first-come-first-served, one lane of ``q_max`` tokens per
  iteration. Requests finish at ``B/OSL`` per iteration and must be admitted as fast, so a share
  ``u = B n / (OSL q_max)`` of iterations carries a chunk (``u < 1``). The decode-only iterations
  take ``t_dec(B)``::

      t_mean = u t_it(B, q_max) + (1 - u) t_dec(B)
      instance_seconds_per_request = OSL t_mean / B,    tpot = t_it(B, q_max)

- *TTFT waits for the lane*: the lane of one instance is an M/D/1 queue (Poisson arrivals at
  ``B/(OSL t_mean)`` per s, service ``S = n t_it / q_max`` per prompt, utilisation
  ``rho = u t_it / t_mean``); its :data:`LANE_WAIT_QUANTILE` wait (:func:`lane_wait_quantile_s`,
  the formula of :func:`planner.queueing.wait_quantile_s`) is part of the point's TTFT::

      ttft = W_q(rho, S) + ceil(n / q_max) t_it(B, q_max) + ttft_overhead

  Assumption: a request is dispatched to one engine on arrival and waits in that engine's own
  queue (vLLM, SGLang, TensorRT-LLM, behind a router); a disaggregated prefill pool is costed by
  the optimiser as one pooled queue (a global prefill queue, as in Dynamo or Mooncake). The wait
  is taken at the point's full rate; the optimiser loads an instance at most that much.
  ``detail`` carries the lane's inputs (``prefill_tokens`` ``n``, ``prefill_chunk_tokens``
  ``q_max``, ``lane_service_ms`` ``S``, ``lane_wait_ms``, ``decode_only_step_ms``,
  ``mean_step_ms``) so that a pool mixing several buckets can price the lane wait of the mix
  (:func:`planner.optimize.extract.lane_wait_quantile_ms`) and the simulator can run the same
  chunk (:mod:`planner.simulate.adapter`).
- *Memory*: ``B`` sequences at their peak ``ISL + OSL`` plus the prompt being chunked fit the KV.

``B*`` = the batch with the highest throughput ``B / (OSL t_mean)`` among those meeting TPOT,
TTFT (target) and memory. Both directions of interference are costed: decode iterations carrying
a chunk are longer (up to the TPOT cap), and the prefill lane is limited by that cap.

Energy per request = P x tp x instance_seconds_per_request, ``P`` the device power at the
iteration's roofline shares and rows (:mod:`planner.perf.power`; a unified point uses its
chunk-carrying iteration, which slightly overstates the decode-only iterations' power). ``service_time_cv`` is 0:
within a length bucket every request's service time is the same deterministic function of its
(representative) lengths; the bucket's length spread is carried by the buckets themselves.
``bound`` names the dominant term: ``memory_capacity`` when KV capacity limits the batch,
else the larger of compute / memory-bandwidth time, or ``communication`` when the TP
all-reduces exceed both.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from planner.perf.calibration import (
    PUBLISHED_DEFAULT,
    Calibration,
    EngineCalibration,
    load_calibration,
)
from planner.perf.power import InstancePower, instance_power_w
from planner.perf.roofline import (
    Efficiency,
    InstanceArrays,
    StepTime,
    instance_arrays,
    iteration_time,
    kv_bytes,
    kv_capacity_bytes,
    max_batch,
)
from planner.schema.capacity import OperatingPoint
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile

MAX_BATCH = 1024
"""Largest decode batch considered (engines cap ``max_batch_size`` near here)."""
LANE_WAIT_QUANTILE = 0.99
"""Quantile of the prefill-lane wait included in a unified point's TTFT (the example SLOs are
p99; conservative for a lower TTFT quantile). The point does not see the service's quantile."""

_INST_CACHE: dict[tuple[int, int, int, str, str], tuple[LLMProfile, DeviceProfile, InstanceArrays]] = {}
_CAL_CACHE: dict[str, Calibration | None] = {}


def _instance(model: LLMProfile, device: DeviceProfile, tp: int, wp: str, kvp: str) -> InstanceArrays:
    key = (id(model), id(device), tp, wp, kvp)
    hit = _INST_CACHE.get(key)
    if hit is None or hit[0] is not model or hit[1] is not device:
        if len(_INST_CACHE) > 4096:
            _INST_CACHE.clear()
        hit = (model, device, instance_arrays(model, device, tp, wp, kvp))
        _INST_CACHE[key] = hit
    return hit[2]


def engine_calibration(engine: str, calibration: Calibration | None | Literal["auto"] = "auto") -> tuple[EngineCalibration, str]:
    """The efficiencies for ``engine`` and the ``source`` label (shipped calibration by default)."""
    if calibration == "auto":
        if "auto" not in _CAL_CACHE:
            _CAL_CACHE["auto"] = load_calibration(None)
        calibration = _CAL_CACHE["auto"]
    if calibration is None:
        return PUBLISHED_DEFAULT, "roofline"
    return calibration.for_engine(engine)


def efficiency_of(cal: EngineCalibration) -> Efficiency:
    return Efficiency(cal.eta_f, cal.eta_b, cal.step_overhead_ms * 1e-3, cal.layer_overhead_us * 1e-6,
                      cal.seq_overhead_us * 1e-6, cal.allreduce_overhead_us * 1e-6, cal.eta_link)


def _bound(step: StepTime, i: int | tuple[()] = ()) -> str:
    return str(step.bound()[i])


def _infeasible(reason: str, bound: str, source: str, **kw: float) -> OperatingPoint:
    return OperatingPoint(
        feasible=False, reason=reason, bound=bound, instance_seconds_per_request=math.inf, max_batch=0,
        kv_bytes_per_request=kw.get("kv", 0.0), kv_transfer_bytes_per_request=kw.get("kv_transfer", 0.0),
        energy_j_per_request=math.inf, ttft_ms=kw.get("ttft", math.inf), tpot_ms=kw.get("tpot", math.inf), source=source,
    )


def operating_point(
    model: LLMProfile,
    device: DeviceProfile,
    tp: int,
    *,
    role: Literal["prefill", "decode", "unified"],
    weight_precision: str,
    kv_precision: str,
    input_tokens: float,
    output_tokens: float,
    cached_prefix_share: float = 0.0,
    ttft_target_ms: float | None,
    tpot_target_ms: float | None,
    engine: str = "default",
    kv_link_gb_per_s: float | None = None,
    calibration: Calibration | None | Literal["auto"] = "auto",
) -> OperatingPoint:
    """The operating point of one role; see the module docstring for the model of each role."""
    cal, source = engine_calibration(engine, calibration)
    try:
        inst = _instance(model, device, tp, weight_precision, kv_precision)
    except ValueError as exc:
        return _infeasible(str(exc), "memory_capacity", source)
    eff = efficiency_of(cal)
    isl = float(input_tokens)
    osl = max(float(output_tokens), 1.0)
    share = min(max(cached_prefix_share, 0.0), 1.0)
    n_new = max(isl * (1.0 - share), 1.0)
    cached = isl - n_new if share > 0 else 0.0
    power_w = instance_power_w(device, tp)  # W of the instance at an iteration's roofline times (planner.perf.power)
    overhead_ms = cal.ttft_overhead_ms
    budget = float(cal.prefill_token_budget)

    if role == "prefill":
        if max_batch(inst, isl) < 1:
            return _infeasible(f"weights ({model.weight_bytes(weight_precision) / 1e9:.0f} GB) and one {isl:.0f}-token prompt's KV do not fit {tp} x {device.memory_gb} GB", "memory_capacity", source)
        m = max(1.0, math.floor(budget / n_new))
        m = min(m, float(max_batch(inst, isl)))
        k = math.ceil(n_new / budget)
        chunk = n_new / k
        # m whole prompts in one iteration (k = 1), or one prompt in k chunks at their mean position
        h_eff = cached if m > 1 else cached + (n_new - chunk) / 2.0
        step = iteration_time(inst, eff, prefill_tokens=m * chunk, prefill_cached=h_eff, prefill_prompts=m)
        t_batch = k * float(step.total_s)
        kv_req = float(kv_bytes(inst, isl))
        link = (kv_link_gb_per_s if kv_link_gb_per_s else (device.nic_bw_gb_per_s or 25.0) * tp) * 1e9
        t_xfer = kv_req / link
        t_first = float(iteration_time(inst, eff, decode_batch=1.0, decode_context=isl).total_s)
        ttft = 1e3 * (t_batch + t_xfer + t_first) + overhead_ms
        seconds = t_batch / m
        ok = ttft_target_ms is None or ttft <= ttft_target_ms
        return OperatingPoint(
            feasible=ok, reason="" if ok else f"TTFT {ttft:.0f} ms > target {ttft_target_ms:.0f} ms even unqueued",
            bound=_bound(step), instance_seconds_per_request=seconds, max_batch=1, kv_bytes_per_request=kv_req,
            kv_transfer_bytes_per_request=kv_req, energy_j_per_request=power_w(float(step.compute_s), float(step.memory_s), float(step.total_s), m * chunk) * seconds, ttft_ms=ttft, tpot_ms=0.0,
            source=source,
            detail={"prefill_ms": 1e3 * t_batch, "prompts_per_batch": m, "chunks": float(k), "transfer_ms": 1e3 * t_xfer,
                    "first_step_ms": 1e3 * t_first, "ttft_overhead_ms": overhead_ms, "compute_ms": 1e3 * float(step.compute_s) * k,
                    "memory_ms": 1e3 * float(step.memory_s) * k, "comm_ms": 1e3 * float(step.comm_s) * k},
        )

    peak = isl + osl
    ctx = isl + osl / 2.0
    b_mem = int(min(float(max_batch(inst, peak)), MAX_BATCH))
    kv_req = float(kv_bytes(inst, peak))
    if b_mem < 1:
        return _infeasible(
            f"weights ({model.weight_bytes(weight_precision) / 1e9:.0f} GB at {weight_precision}) and one {peak:.0f}-token sequence's KV do not fit {tp} x {device.memory_gb} GB",
            "memory_capacity", source, kv=kv_req)
    batches = np.arange(1, b_mem + 1, dtype=float)
    if role == "unified":
        return _unified_point(inst, eff, batches, isl=isl, osl=osl, n_new=n_new, cached=cached, ctx=ctx, b_mem=b_mem,
                              budget=budget, kv_req=kv_req, power_w=power_w, overhead_ms=overhead_ms, source=source,
                              ttft_target_ms=ttft_target_ms, tpot_target_ms=tpot_target_ms)
    step = iteration_time(inst, eff, decode_batch=batches, decode_context=ctx)
    t = step.total_s
    ok_tpot = t <= (tpot_target_ms / 1e3 if tpot_target_ms is not None else np.inf)
    if not ok_tpot.any():
        return _infeasible(f"TPOT {1e3 * float(t[0]):.1f} ms at batch 1 > target {tpot_target_ms} ms", _bound(step, 0), source,
                           kv=kv_req, tpot=1e3 * float(t[0]))
    i = int(np.nonzero(ok_tpot)[0].max())
    b_star = int(batches[i])
    t_star = float(t[i])
    bound = "memory_capacity" if b_star == b_mem and b_mem < MAX_BATCH else _bound(step, i)
    seconds = osl * t_star / b_star
    detail = {"step_ms": 1e3 * t_star, "batch": float(b_star), "batch_memory_limit": float(b_mem),
              "compute_ms": 1e3 * float(step.compute_s[i]), "memory_ms": 1e3 * float(step.memory_s[i]),
              "comm_ms": 1e3 * float(step.comm_s[i]), "overhead_ms": 1e3 * float(step.overhead_s[i])}
    return OperatingPoint(
        feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star,
        kv_bytes_per_request=kv_req, kv_transfer_bytes_per_request=0.0,
        energy_j_per_request=power_w(float(step.compute_s[i]), float(step.memory_s[i]), t_star, float(b_star)) * seconds,
        ttft_ms=0.0, tpot_ms=1e3 * t_star, source=source, detail=detail,
    )


def _chunk_step(inst: InstanceArrays, eff: Efficiency, batch: np.ndarray, ctx: float, q: np.ndarray, n_new: float,
                cached: float) -> StepTime:
    """One unified iteration: ``batch`` decodes at mean context ``ctx`` plus ``q`` prefill tokens.

    ``q <= n``: one chunk of a prompt at its mean position, ``h = cached + (n - q)/2`` (chunk
    ``j`` attends over the ``j q`` tokens of earlier chunks, Sarathi-Serve; over the ``n/q``
    chunks the pairs sum to the unchunked ``n (n + 2 cached)/2``, and each chunk rereads the
    KV of the prompt so far). ``q > n``: ``q/n`` whole prompts share the iteration."""
    several = q > n_new
    m = np.where(several, q / n_new, 1.0)
    h = np.where(several, cached, cached + (n_new - np.minimum(q, n_new)) / 2.0)
    return iteration_time(inst, eff, decode_batch=batch, decode_context=ctx, prefill_tokens=q, prefill_cached=h,
                          prefill_prompts=m)


def _largest_chunk(inst: InstanceArrays, eff: Efficiency, batch: np.ndarray, ctx: float, cap: np.ndarray, n_new: float,
                   cached: float, limit_s: float) -> np.ndarray:
    """Per batch, the largest integer chunk ``q <= cap`` with ``t_it(B, q) <= limit_s`` (0 if none):
    integer bisection, valid because ``t_it`` grows with ``q``."""
    lo = np.zeros_like(batch)
    hi = np.maximum(np.floor(cap), 0.0)
    ok_hi = _chunk_step(inst, eff, batch, ctx, np.maximum(hi, 1.0), n_new, cached).total_s <= limit_s
    lo = np.where(ok_hi, hi, lo)
    active = ~ok_hi & (hi > 1.0)
    while active.any():
        mid = np.floor((lo + hi) / 2.0)
        ok = _chunk_step(inst, eff, batch, ctx, np.maximum(mid, 1.0), n_new, cached).total_s <= limit_s
        ok &= mid >= 1.0
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)
        active = hi - lo > 1.0
    return lo


def lane_wait_quantile_s(quantile: float, utilization: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """Waiting-time quantile of a unified instance's prefill lane, an M/D/1 queue (Poisson
    arrivals, deterministic service ``S``): :func:`planner.queueing.md1_wait_quantile_s` —
    ``0`` if ``rho <= 1 - q``; exact ``S ln(q/(1-rho))/rho`` while below ``S``; else the
    Cramér–Lundberg tail ``S ln(γ/(1-q))/x`` (``x`` the root of ``rho(e^x - 1) = x``), within
    1 % of the exact Erlang–Crommelin quantile (Kingman's exponential tail, used before, was
    up to 34 % long at moderate load). ``inf`` at ``rho >= 1``. Vectorised over the batch grid."""
    from planner.queueing import md1_wait_quantile_s

    return md1_wait_quantile_s(quantile, utilization, service_s)


def _unified_point(inst: InstanceArrays, eff: Efficiency, batches: np.ndarray, *, isl: float, osl: float, n_new: float,
                   cached: float, ctx: float, b_mem: int, budget: float, kv_req: float, power_w: InstancePower, overhead_ms: float,
                   source: str, ttft_target_ms: float | None, tpot_target_ms: float | None) -> OperatingPoint:
    """The unified (chunked-prefill) operating point; the model is in the module docstring."""
    limit_s = tpot_target_ms / 1e3 if tpot_target_ms is not None else np.inf
    cap = np.maximum(budget - batches, 0.0)
    if np.isfinite(limit_s):
        q_max = _largest_chunk(inst, eff, batches, ctx, cap, n_new, cached, limit_s)
    else:
        q_max = np.floor(cap)
    safe_q = np.maximum(q_max, 1.0)
    busy = _chunk_step(inst, eff, batches, ctx, safe_q, n_new, cached)
    t_busy = busy.total_s
    t_idle = iteration_time(inst, eff, decode_batch=batches, decode_context=ctx).total_s
    has_lane = q_max >= 1.0
    # share of iterations carrying a chunk: prompt tokens needed per iteration / lane capacity
    u_iter = np.where(has_lane, batches * n_new / osl / safe_q, np.inf)
    t_mean = np.where(u_iter < 1.0, u_iter * t_busy + (1.0 - np.minimum(u_iter, 1.0)) * t_idle, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = batches / (osl * t_mean)                              # requests/s one instance sustains
        service = n_new / safe_q * t_busy                             # lane seconds per prompt
        rho_lane = np.where(u_iter < 1.0, rate * service, np.inf)     # = u_iter t_busy / t_mean
    wait = lane_wait_quantile_s(LANE_WAIT_QUANTILE, rho_lane, service)
    ttft_ms = 1e3 * (wait + np.ceil(n_new / safe_q) * t_busy) + overhead_ms
    # KV: B sequences at their peak plus the prompt(s) being chunked
    kv_need = batches * kv_req + np.maximum(kv_bytes(inst, isl), kv_bytes(inst, np.minimum(safe_q, n_new) + cached))
    fits = kv_need <= kv_capacity_bytes(inst)
    ok_ttft = ttft_ms <= (ttft_target_ms if ttft_target_ms is not None else np.inf)
    ok = has_lane & (rho_lane < 1.0) & fits & ok_ttft
    if not ok.any():
        if not has_lane.any():
            t1 = float(_chunk_step(inst, eff, batches[:1], ctx, np.ones(1), n_new, cached).total_s[0])
            return _infeasible(f"TPOT {1e3 * t1:.1f} ms at batch 1 > target {tpot_target_ms} ms (with a 1-token prefill chunk)",
                               _bound(busy, 0), source, kv=kv_req, tpot=1e3 * t1)
        stable = has_lane & (rho_lane < 1.0) & fits
        if not stable.any():
            return _infeasible(f"the {tpot_target_ms} ms TPOT cap leaves chunks of at most {q_max.max():.0f} tokens: too few "
                               f"to prefill {n_new:.0f}-token prompts as fast as {osl:.0f}-token outputs finish",
                               _bound(busy, 0), source, kv=kv_req, tpot=1e3 * float(t_busy[0]))
        best = float(np.min(np.where(stable, ttft_ms, np.inf)))
        return _infeasible(f"TTFT {best:.0f} ms > target {ttft_target_ms:.0f} ms: chunks of at most {q_max.max():.0f} tokens "
                           f"under the {tpot_target_ms} ms TPOT cap (prefill lane wait included)", _bound(busy, 0), source,
                           kv=kv_req, ttft=best, tpot=1e3 * float(t_busy[0]))
    i = int(np.argmax(np.where(ok, rate, -np.inf)))
    b_star = int(batches[i])
    seconds = float(1.0 / rate[i])
    bound = "memory_capacity" if i + 1 < len(batches) and not fits[i + 1] and ok_ttft[i + 1] else _bound(busy, i)
    if i + 1 == len(batches) and b_mem < MAX_BATCH:
        bound = "memory_capacity"
    iters = float(np.ceil(n_new / q_max[i]))
    detail = {"step_ms": 1e3 * float(t_busy[i]), "mean_step_ms": 1e3 * float(t_mean[i]), "decode_only_step_ms": 1e3 * float(t_idle[i]),
              "batch": float(b_star), "batch_memory_limit": float(b_mem), "prefill_chunk_tokens": float(q_max[i]),
              "prefill_tokens": float(n_new), "lane_service_ms": 1e3 * float(service[i]),
              "chunk_iteration_share": float(u_iter[i]), "lane_utilization": float(rho_lane[i]),
              "lane_wait_ms": 1e3 * float(wait[i]), "ttft_iterations": iters, "ttft_overhead_ms": overhead_ms,
              "compute_ms": 1e3 * float(busy.compute_s[i]), "memory_ms": 1e3 * float(busy.memory_s[i]),
              "comm_ms": 1e3 * float(busy.comm_s[i]), "overhead_ms": 1e3 * float(busy.overhead_s[i])}
    return OperatingPoint(
        feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star, kv_bytes_per_request=kv_req,
        kv_transfer_bytes_per_request=0.0, ttft_ms=float(ttft_ms[i]),
        energy_j_per_request=power_w(float(busy.compute_s[i]), float(busy.memory_s[i]), float(t_busy[i]), b_star + float(q_max[i])) * seconds,
        tpot_ms=1e3 * float(t_busy[i]), source=source, detail=detail,
    )
