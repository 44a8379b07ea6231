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

**unified** (shared pool, continuous batching with chunked prefill). In steady state an
iteration carries ``B`` decode sequences and a prompt chunk ``q``; requests finish at ``B/OSL``
per iteration and prompts must be admitted at the same rate, so ``q = B n / OSL`` (capped at
``Q - B``). ``B*`` = the largest batch with ``t_it(B, q) <= TPOT target`` (the prefill chunk
inflates every iteration: this is the interference disaggregation removes) and
``B + prompts in flight`` fitting KV. ::

    instance_seconds_per_request = OSL t_it(B*) / B*
    ttft = ceil(n / q) t_it + ttft_overhead           (the prompt spans several iterations)

Energy per request = busy power x tp x instance_seconds_per_request. ``service_time_cv`` is 0:
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
from planner.perf.roofline import (
    Efficiency,
    InstanceArrays,
    StepTime,
    instance_arrays,
    iteration_time,
    kv_bytes,
    max_batch,
)
from planner.schema.capacity import OperatingPoint
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile

MAX_BATCH = 1024
"""Largest decode batch considered (engines cap ``max_batch_size`` near here)."""

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
                      cal.seq_overhead_us * 1e-6, cal.allreduce_overhead_us * 1e-6)


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
    power_w = (device.busy_power_w or 0.0) * tp
    overhead_ms = cal.ttft_overhead_ms
    budget = float(cal.prefill_token_budget)

    if role == "prefill":
        if max_batch(inst, isl) < 1:
            return _infeasible(f"weights ({model.weight_bytes(weight_precision) / 1e9:.0f} GB) and one {isl:.0f}-token prompt's KV do not fit {tp} x {device.memory_gb} GB", "memory_capacity", source)
        m = max(1.0, math.floor(budget / n_new))
        m = min(m, float(max_batch(inst, isl)))
        k = math.ceil(n_new / budget)
        chunk = n_new / k
        # m prompts in one iteration (attention pairs exact: m n (n + 2h) / 2), or k chunks of one
        total = m * chunk
        h_eff = ((chunk + 2.0 * (cached + (n_new - chunk) / 2.0)) - total) / 2.0 if m > 1 else cached + (n_new - chunk) / 2.0
        step = iteration_time(inst, eff, prefill_tokens=total, prefill_cached=h_eff)
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
            kv_transfer_bytes_per_request=kv_req, energy_j_per_request=power_w * seconds, ttft_ms=ttft, tpot_ms=0.0,
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
    if role == "decode":
        step = iteration_time(inst, eff, decode_batch=batches, decode_context=ctx)
        prefill_q = np.zeros_like(batches)
    else:
        prefill_q = np.minimum(batches * n_new / osl, np.maximum(budget - batches, 1.0))
        # prompts in flight hold KV too: at q = B n / OSL about one prompt (rate B/OSL per
        # iteration x n/q iterations each) is being chunked while B sequences decode
        fits = batches + 1.0 <= b_mem
        step = iteration_time(inst, eff, decode_batch=batches, decode_context=ctx, prefill_tokens=prefill_q,
                              prefill_cached=cached + (n_new - np.minimum(prefill_q, n_new)) / 2.0)
    t = step.total_s
    ok_tpot = t <= (tpot_target_ms / 1e3 if tpot_target_ms is not None else np.inf)
    if role == "unified":
        ok_tpot = ok_tpot & fits
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
    if role == "decode":
        return OperatingPoint(
            feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star,
            kv_bytes_per_request=kv_req, kv_transfer_bytes_per_request=0.0, energy_j_per_request=power_w * seconds,
            ttft_ms=0.0, tpot_ms=1e3 * t_star, source=source, detail=detail,
        )
    q = float(prefill_q[i])
    iters = math.ceil(n_new / max(q, 1.0))
    ttft = 1e3 * iters * t_star + overhead_ms
    ok = ttft_target_ms is None or ttft <= ttft_target_ms
    detail.update({"prefill_chunk_tokens": q, "ttft_iterations": float(iters), "ttft_overhead_ms": overhead_ms})
    return OperatingPoint(
        feasible=ok, reason="" if ok else f"TTFT {ttft:.0f} ms > target {ttft_target_ms:.0f} ms: the prompt needs {iters} iterations of {1e3 * t_star:.1f} ms",
        bound=bound, instance_seconds_per_request=seconds, max_batch=b_star, kv_bytes_per_request=kv_req,
        kv_transfer_bytes_per_request=0.0, energy_j_per_request=power_w * seconds, ttft_ms=ttft, tpot_ms=1e3 * t_star,
        source=source, detail=detail,
    )
