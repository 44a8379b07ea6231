"""One closed-loop estimate (``planner estimate``): TTFT, TPOT, throughput, memory and bound."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from planner.errors import InputError, Problem
from planner.perf.calibration import Calibration, MoECalibration
from planner.perf.closed_loop import engine_slots, held_tokens, predict_agg
from planner.perf.points import efficiency_of, engine_calibration, tp_shard_problem
from planner.perf.roofline import (
    InstanceArrays,
    instance_arrays,
    iteration_time,
    kv_bytes,
    memory_per_device_bytes,
    sglang_reserved_bytes,
)
from planner.perf.validate import engine_arrays
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile

ENGINES_WITHOUT_CALIBRATION: tuple[str, ...] = ("default", "sglang", "trtllm", "vllm")
"""Engine names ``--calibration none`` accepts: the published defaults (:data:`planner.perf.calibration.PUBLISHED_DEFAULT`)
are the same for every engine, so only the names the help lists are taken (a typo is still an error)."""


def engine_choices(calibration: Calibration | None) -> tuple[str, ...]:
    """The engines ``estimate`` can be asked for: the calibration's own ``engines`` plus ``default`` (what
    :meth:`Calibration.for_engine` falls back to); without a calibration :data:`ENGINES_WITHOUT_CALIBRATION`.
    Any other name used to fall back to ``default`` silently while the output echoed the typo."""
    if calibration is None:
        return ENGINES_WITHOUT_CALIBRATION
    return tuple(sorted({*calibration.engines, "default"}))


def check_engine(engine: str, calibration: Calibration | None | Literal["auto"]) -> None:
    """:class:`InputError` (exit 2) naming the choices when ``engine`` is not one of :func:`engine_choices`."""
    from planner.perf.points import _CAL_CACHE

    engine_calibration("default", calibration)  # loads the shipped calibration into the cache for "auto"
    cal = _CAL_CACHE.get("auto") if calibration == "auto" else calibration
    choices = engine_choices(cal if isinstance(cal, Calibration) else None)
    if engine not in choices:
        raise InputError(Problem("", "engine", f"unknown engine {engine!r}: the calibration has {', '.join(choices)}",
                                 f"use --engine {' or '.join(choices)}"))


def context_problem(model: LLMProfile, isl: int, osl: int) -> Problem | None:
    """The problem of a request longer than the model's context, else ``None``. Rule: ``ISL + OSL <=
    max_context_tokens`` (the catalog profile's field; a config.json's ``max_position_embeddings``,
    :mod:`planner.hf_config`): engines refuse a prompt plus ``max_tokens`` above the model's length
    (vLLM ``max_model_len`` defaults to the config's and rejects longer requests)."""
    limit = model.max_context_tokens
    if isl + osl <= limit:
        return None
    return Problem("", "isl", f"ISL {isl:,} + OSL {osl:,} = {isl + osl:,} tokens exceeds {model.id}'s context of {limit:,} tokens "
                   "(max_context_tokens; a config.json's max_position_embeddings)",
                   f"give --isl + --osl of at most {limit:,}, or a model with a longer context")


def target_problem(name: str, value_ms: float | None) -> Problem | None:
    """The problem of a latency target that is not a finite positive number of milliseconds (``nan`` was
    'MISSED' and ``inf`` 'met' with exit 0), else ``None``."""
    if value_ms is None or (math.isfinite(value_ms) and value_ms > 0):
        return None
    return Problem("", name, f"target {value_ms} ms is not a finite positive number of milliseconds", f"give --{name} a number > 0, e.g. 200")


def _ms(seconds: float) -> float:
    """Milliseconds of a difference of step times, with float noise below 1 ns shown as 0 (it printed 4.34e-16 ms)."""
    return 0.0 if abs(seconds) < 1e-9 else 1e3 * seconds


def little_law_tokens_per_s(users: float, osl: int, ttft_s: float, tpot_s: float) -> float:
    """Output tokens/s of ``users`` users of a closed loop each with one request in flight (Little's law):
    ``users x OSL / (TTFT + (OSL - 1) TPOT)``, from the TTFT and TPOT printed beside it (nan when that is 0)."""
    e2e_s = ttft_s + (osl - 1) * tpot_s
    return users * osl / e2e_s if e2e_s > 0 else float("nan")


def redundant_experts_of(option: int | None, calibration: Calibration | None, num_experts: int) -> tuple[int, str]:
    """Redundant EPLB expert slots of an ``estimate --ep`` replica and where the figure comes from: the
    plans' own rule (:meth:`planner.perf.calibration.MoECalibration.redundant_for`, so estimate and solve
    agree): ``--redundant-experts`` if given, else the calibration's ``moe.redundant_experts`` if it fixes
    one, else DeepSeek's share, ``round(E / 8)`` (32 for its 256 experts, 1 for Mixtral's 8)."""
    if option is not None:
        return option, "--redundant-experts"
    moe = calibration.moe if calibration is not None else MoECalibration()
    if moe.redundant_experts is not None:
        return moe.redundant_experts, f"calibration {calibration.name if calibration else ''} moe.redundant_experts".replace("  ", " ")
    return moe.redundant_for(num_experts), (f"E/8 of the {num_experts} routed experts (DeepSeek's share, 32 of 256; "
                                            "--redundant-experts N to fix it, 0: the engines' default without EPLB)")


def estimate_closed_loop(
    model: LLMProfile, device: DeviceProfile, tp: int, *, precision: str, kv_precision: str, isl: int, osl: int,
    concurrency: int, engine: str = "default", calibration: Calibration | None | Literal["auto"] = "auto",
    ttft_target_ms: float | None = None, tpot_target_ms: float | None = None,
) -> dict[str, Any]:
    """Predict a closed-loop benchmark; raise :class:`InputError` (exit 2) naming the reason when
    the model cannot run at this tp, the request exceeds the model's context (:func:`context_problem`),
    the engine is not the calibration's (:func:`check_engine`), a target is not a finite positive
    number (:func:`target_problem`), or a given SLO target cannot be met even at batch 1."""
    bad_targets = [p for p in (target_problem("ttft-ms", ttft_target_ms), target_problem("tpot-ms", tpot_target_ms)) if p]
    if bad_targets:
        raise InputError(bad_targets)
    check_engine(engine, calibration)
    too_long = context_problem(model, isl, osl)
    shard = tp_shard_problem(model, device, tp)
    if shard:
        fits = [t for t in (1, 2, 4, 8, 16) if t <= device.devices_per_node and not tp_shard_problem(model, device, t)]
        raise InputError([*([too_long] if too_long else []),
                          Problem("", "tp", shard, f"use --tp {' or '.join(map(str, fits))}" if fits else "use another model or device")])
    try:
        inst = instance_arrays(model, device, tp, precision, kv_precision)
    except ValueError as exc:
        raise InputError(Problem("", "device", str(exc), "complete the device profile or pick another device")) from exc
    cal, source = engine_calibration(engine, calibration)
    eng = engine_arrays([cal])
    peak_eng = replace(eng, kv_reserve_peak=np.array([True]))

    def peak_slots(ia: InstanceArrays) -> int:
        """Sequences at their peak ``ISL + OSL`` the engine's KV pool holds (its own pool rule)."""
        return int(engine_slots(ia, peak_eng, np.array([float(isl)]), np.array([float(osl)]))[0])

    bmax_peak = peak_slots(inst)
    if bmax_peak < 1:
        fits = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= device.devices_per_node and peak_slots(instance_arrays(model, device, t, precision, kv_precision)) >= 1]
        weights_gb = model.weight_bytes(precision) / 1e9
        context = [too_long] if too_long else []  # every problem at once (InputError's rule)
        if not fits:
            raise InputError([*context, Problem("", "model", f"{model.id} ({weights_gb:.0f} GB at {precision}) plus one {isl + osl}-token sequence "
                                                f"does not fit {device.id} even at tp {device.devices_per_node} ({device.devices_per_node} x "
                                                f"{device.memory_gb} GB)", "use a lower precision, a device with more memory, or shorter sequences")])
        raise InputError([*context, Problem("", "tp", f"{model.id} ({weights_gb:.0f} GB at {precision}) plus one {isl + osl}-token sequence "
                                            f"does not fit {tp} x {device.id} ({device.memory_gb} GB each)", f"use --tp {fits[0]} or more")])
    if too_long:
        raise InputError(too_long)
    res = predict_agg(inst, eng, np.array([float(concurrency)]), np.array([float(isl)]), np.array([float(osl)]))
    ttft = 1e3 * float(res.ttft_s[0])
    # the same closed loop with the benchmark-harness terms removed (no TTFT overhead, cohorts of one):
    # what the engine's own work and the loop's queueing give (item 8 of issue 25)
    bare = replace(eng, ttft_overhead_s=np.array([0.0]), cohort_exponent=np.array([0.0]))
    res_bare = predict_agg(inst, bare, np.array([float(concurrency)]), np.array([float(isl)]), np.array([float(osl)]))
    ttft_engine = 1e3 * float(res_bare.ttft_s[0])
    tpot = 1e3 * float(res.tpot_s[0])
    running = float(res.running[0])
    ctx = isl + osl / 2.0
    eff = efficiency_of(cal)
    step = iteration_time(inst, eff, decode_batch=running, decode_context=ctx)
    t1 = 1e3 * float(iteration_time(inst, eff, decode_batch=1.0, decode_context=ctx).total_s)
    if tpot_target_ms is not None and t1 > tpot_target_ms:
        raise InputError(Problem("", "tpot-ms", f"TPOT target {tpot_target_ms} ms is impossible: one decode step at batch 1 takes {t1:.1f} ms "
                                 f"on {tp} x {device.id}", "raise the target, use a larger tp, a lower precision or a faster device"))
    prefill_work = 1e3 * float(iteration_time(inst, eff, prefill_tokens=float(isl)).total_s)
    prefill_alone = prefill_work + cal.ttft_overhead_ms
    # impossible only when the engine's own prefill misses it: the harness's TTFT overhead is a property of the
    # benchmark that measured the engine (it never reaches a plan), so a target below it is a miss of the
    # benchmark's figure (said in the output), not a device that cannot serve it (every device and tp "failed")
    if ttft_target_ms is not None and prefill_work > ttft_target_ms:
        raise InputError(Problem("", "ttft-ms", f"TTFT target {ttft_target_ms} ms is impossible: the engine's prefill of the {isl}-token prompt "
                                 f"alone takes {prefill_work:.1f} ms on {tp} x {device.id}", "raise the target, use a larger tp or a faster device"))
    # the KV the running requests hold, by the engine's own pool rule (it was the peak for every engine: a vLLM
    # closed loop at 400 running requests was shown holding more KV than its 368 peak slots)
    held = float(np.asarray(held_tokens(eng, np.array([float(isl)]), np.array([float(osl)]))).ravel()[0])
    kv_total = running * float(kv_bytes(inst, held))
    reserve_gb = (float(sglang_reserved_bytes(inst.memory_bytes, tp)) / 1e9 if cal.memory_fraction is None else cal.workspace_gb)
    used = float(memory_per_device_bytes(inst, kv_total, reserve_gb=reserve_gb)) / 1e9
    # output tokens/s by Little's law over the closed loop, from the figures printed beside it: each of the
    # ``concurrency`` users has one request in flight for TTFT + (OSL - 1) TPOT (its slot wait inside TTFT), as the
    # benchmark counts it. It was running x OSL / the engine's iteration cycle, which leaves out the harness's TTFT
    # overhead and cohorts: up to 5x the figure the printed TTFT and TPOT allow at a 2-token output.
    out_tok_per_s = little_law_tokens_per_s(concurrency, osl, ttft / 1e3, tpot / 1e3)
    out_tok_per_s_engine = little_law_tokens_per_s(concurrency, osl, ttft_engine / 1e3, float(res_bare.tpot_s[0]))
    bound = "memory_capacity" if concurrency > int(res.max_batch[0]) else str(step.bound()[()])
    return {
        "model": model.id, "device": device.id, "tp": tp, "precision": precision, "kv_precision": kv_precision,
        "isl": isl, "osl": osl, "concurrency": concurrency, "engine": engine, "source": source,
        "ttft_ms": ttft, "tpot_ms": tpot,
        "output_tokens_per_s_per_device": out_tok_per_s / tp,
        "output_tokens_per_s_per_device_without_harness": out_tok_per_s_engine / tp,
        "memory_used_gb_per_device": used,
        "memory_free_gb_per_device": float(inst.memory_bytes) / 1e9 - used,
        "memory_reserve_gb_per_device": reserve_gb,
        "max_batch": int(res.max_batch[0]),
        "max_batch_at_peak_context": bmax_peak,
        "running_batch": int(running),
        "bound": bound,
        "decode_step_ms": 1e3 * float(step.total_s),
        "decode_step_components_ms": {"compute": 1e3 * float(step.compute_s), "memory": 1e3 * float(step.memory_s),
                                      "communication": 1e3 * float(step.comm_s), "overhead": 1e3 * float(step.overhead_s)},
        "prefill_alone_ms": prefill_alone,
        "ttft_components_ms": {
            "engine_prefill": prefill_work,
            "engine_closed_loop_wait": ttft_engine - prefill_work,
            "harness_ttft_overhead": cal.ttft_overhead_ms,
            "harness_cohorts": ttft - ttft_engine - cal.ttft_overhead_ms,
        },
        "ttft_without_harness_ms": ttft_engine,
        "ttft_target_ms": ttft_target_ms, "tpot_target_ms": tpot_target_ms,
        "ttft_target_met": None if ttft_target_ms is None else bool(ttft <= ttft_target_ms),
        "ttft_target_met_without_harness": None if ttft_target_ms is None else bool(ttft_engine <= ttft_target_ms),
        "tpot_target_met": None if tpot_target_ms is None else bool(tpot <= tpot_target_ms),
        "engine_terms": engine_terms(cal),
        "harness_terms": harness_terms(cal, engine, calibration),
    }


ENGINE_TERMS = ("eta_f", "eta_b", "layer_overhead_us", "seq_overhead_us", "step_overhead_ms", "eta_link", "allreduce_overhead_us",
                "mixed_prefill", "prefill_token_budget", "kv_share_of_free", "kv_reserve_peak", "kv_preempt", "memory_fraction",
                "workspace_gb", "kv_block_tokens")
"""Properties of the serving engine (:class:`EngineCalibration`): what an open-loop plan uses too."""
HARNESS_TERMS = ("ttft_overhead_ms", "cohort_exponent", "admit_share")
"""Properties of the benchmark that measured the engine (client, API server, closed-loop cohorts): a
closed-loop replay applies them; :class:`planner.perf.calibration.HarnessCalibration` per harness."""


def engine_terms(cal: Any) -> dict[str, Any]:
    """The engine's own terms, with where they come from."""
    return {**{k: getattr(cal, k) for k in ENGINE_TERMS}, "source": cal.source}


def harness_terms(cal: Any, engine: str, calibration: Calibration | None | Literal["auto"]) -> dict[str, Any]:
    """The benchmark-harness terms this estimate applies and the harnesses they were fitted on
    (the engine's ``ttft_overhead_ms`` is the lowest of its harnesses'; ``calibration.py``)."""
    from planner.perf.points import _CAL_CACHE

    file_cal = _CAL_CACHE.get("auto") if calibration == "auto" else calibration
    fitted = {name: {"ttft_overhead_ms": h.ttft_overhead_ms, "cohort_exponent": h.cohort_exponent, "rows": h.rows}
              for name, h in (getattr(file_cal, "harnesses", None) or {}).items() if engine in h.engines}
    return {**{k: getattr(cal, k) for k in HARNESS_TERMS}, "fitted_on_harnesses": fitted}


def estimate_expert_parallel(
    model: LLMProfile, device: DeviceProfile, *, ep: int, dp: int, tp: int | None, precision: str, kv_precision: str, isl: int,
    osl: int, concurrency: int, engine: str = "default", calibration: Calibration | None | Literal["auto"] = "auto",
    redundant_experts: int | None = None,
) -> dict[str, Any]:
    """One expert-parallel replica (``planner estimate --ep --dp``; :mod:`planner.perf.moe`): the decode step of
    ``concurrency`` users spread over the ``dp`` attention ranks (each rank's batch capped by its KV memory
    and DeepEP's per-rank token limit), with its all-to-all time, and a prefill iteration at the per-rank
    token budget. Not a closed-loop replay: TTFT is one prompt per rank plus the first step and the engine's
    TTFT overhead (no queueing).

    Only the users that exist are counted: ``users_running = min(concurrency, dp x max_batch_per_rank)`` spread
    evenly, so the busiest rank holds ``ceil(users_running / dp)`` (``batch_per_rank``; ranks without a user
    idle, ``active_ranks`` of them busy). The step is that rank's, all ranks in lock-step (an upper bound when
    ranks are unevenly loaded: :func:`planner.perf.moe.ep_iteration_time` counts expert rows and all-to-all
    bytes as if every rank carried that batch). Output tokens/s by Little's law over the running users,
    ``users_running x OSL / (TTFT + (OSL - 1) TPOT)`` (:func:`little_law_tokens_per_s`), as the TP path: it
    was ``batch x dp / TPOT``, which counted every rank as holding a user (one user at 8x its 1/TPOT).
    Redundant expert slots: :func:`redundant_experts_of`."""
    from planner.perf.moe import (
        Parallelism,
        ep_iteration_time,
        ep_replica,
        kv_capacity_per_rank_bytes,
        moe_params,
    )
    from planner.perf.points import _CAL_CACHE

    tp_attn = tp if tp is not None else max(ep // dp, 1)
    if tp_attn * dp != ep:
        raise InputError(Problem("", "ep", f"EP {ep} must equal dp {dp} x attention tp {tp_attn}: the experts are spread over every GPU "
                                 "of the replica", f"use a --dp that divides {ep} and --tp = {ep} / dp (e.g. --dp {ep} for attention tp 1)"))
    check_engine(engine, calibration)
    too_long = context_problem(model, isl, osl)
    if too_long:
        raise InputError(too_long)
    cal, source = engine_calibration(engine, calibration)
    file_cal = _CAL_CACHE.get("auto") if calibration == "auto" else calibration
    known_cal = file_cal if isinstance(file_cal, Calibration) else None
    redundant, redundant_source = redundant_experts_of(redundant_experts, known_cal, model.moe.num_experts if model.moe else 0)
    params = moe_params(known_cal).model_copy(update={"redundant_experts": redundant})
    par = Parallelism(tp=tp_attn, ep=ep, dp=dp)
    try:
        rep = ep_replica(model, device, par, precision, kv_precision, params)
    except ValueError as exc:
        raise InputError(Problem("", "ep", str(exc), "choose another --ep / --dp / --tp (or --redundant-experts for more expert slots), "
                                 "model or device")) from exc
    eff = efficiency_of(cal)
    cap = kv_capacity_per_rank_bytes(rep)
    per_seq = float(kv_bytes(rep.rank, isl + osl))
    b_mem = int(min(max(cap, 0.0) // max(per_seq, 1.0), params.decode_max_tokens_per_rank))
    if b_mem < 1:
        raise InputError(Problem("", "ep", f"{model.id} at {par.label()} holds {rep.weights_per_gpu_bytes / 1e9:.1f} GB of weights per GPU: "
                                 f"one {isl + osl}-token sequence's KV does not fit {device.memory_gb} GB", "use a larger --ep or shorter sequences"))
    users = min(concurrency, b_mem * dp)
    batch = -(-users // dp)
    ctx = isl + osl / 2.0
    dec = ep_iteration_time(rep, eff, decode_batch=float(batch), decode_context=ctx)
    n_pre = max(1, min(params.prefill_tokens_per_rank // isl, int(cap // max(float(kv_bytes(rep.rank, isl)), 1.0))))
    pre = ep_iteration_time(rep, eff, prefill_tokens=float(n_pre * isl), prefill_prompts=float(n_pre))
    one = ep_iteration_time(rep, eff, prefill_tokens=float(isl))
    step_ms = 1e3 * float(dec.total_s)
    ttft = 1e3 * (float(one.total_s) + float(dec.total_s)) + cal.ttft_overhead_ms
    gpus = par.gpus
    per_node = min(device.devices_per_node, gpus)
    out_tok_per_s = little_law_tokens_per_s(users, osl, ttft / 1e3, step_ms / 1e3)
    return {
        "model": model.id, "device": device.id, "parallelism": par.label(), "gpus": gpus, "nodes": rep.nodes,
        "precision": precision, "kv_precision": kv_precision, "isl": isl, "osl": osl, "concurrency": concurrency, "engine": engine,
        "source": f"{source}+moe ({params.source})", "experts_per_gpu": rep.experts_per_gpu,
        "redundant_experts": redundant, "redundant_experts_source": redundant_source,
        "weights_gb_per_gpu": rep.weights_per_gpu_bytes / 1e9, "kv_capacity_gb_per_rank": max(cap, 0.0) / 1e9,
        "batch_per_rank": batch, "max_batch_per_rank": b_mem, "tpot_ms": step_ms, "ttft_ms": ttft,
        "users_running": users, "users_without_slot": concurrency - users, "active_ranks": min(users, dp),
        "decode_step_components_ms": {"attention_and_dense": 1e3 * float(dec.dense_s), "experts": 1e3 * float(dec.expert_s),
                                      "all_to_all": 1e3 * float(dec.a2a_s), "all_to_all_exposed": _ms(float(dec.exposed_a2a_s())),
                                      "overhead": 1e3 * float(dec.overhead_s)},
        "two_batch_overlap": bool(dec.tbo),
        "output_tokens_per_s_per_device": out_tok_per_s / gpus,
        "output_tokens_per_s_per_node": out_tok_per_s / gpus * per_node,
        "prefill_prompts_per_rank": n_pre, "prefill_iteration_ms": 1e3 * float(pre.total_s),
        "prefill_all_to_all_ms": 1e3 * float(pre.a2a_s), "prefill_all_to_all_exposed_ms": _ms(float(pre.exposed_a2a_s())),
        "input_tokens_per_s_per_device": n_pre * isl * dp / float(pre.total_s) / gpus,
        "input_tokens_per_s_per_node": n_pre * isl * dp / float(pre.total_s) / gpus * per_node,
        "nic_gb_per_s": rep.nic_bytes_per_s / 1e9, "nic_defaulted": rep.nic_defaulted,
    }


ESTIMATE_PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4", "int8")
"""Precisions ``estimate`` models (:data:`planner.schema.common.Precision`)."""


def precision_choice(option: str | None, checkpoint: str | None, checkpoint_source: str, flag: str) -> tuple[str, str, str]:
    """``(precision, where it comes from, warning or '')`` of the weights (``flag`` ``--precision``) or the KV
    cache (``--kv-precision``). Rule: the option when given (a warning when the checkpoint states another);
    else the checkpoint's (``checkpoint_source``: its name, :func:`planner.perf.names.model_ref`, or its
    config.json's ``quantization_config``, :mod:`planner.hf_config`); else bf16, the checkpoint's own dtype.
    A checkpoint stated in a precision the model has no figures for (int4: AWQ, GPTQ) without the option
    is an :class:`InputError`: estimating it at bf16 would overstate its memory 4x."""
    if option is not None:
        warn = (f"{flag} {option} differs from {checkpoint}, the precision {checkpoint_source} states: estimated at {option}"
                if checkpoint is not None and checkpoint != option else "")
        return option, flag, warn
    if checkpoint is None:
        return "bf16", "default (bf16: no precision stated by the checkpoint)", ""
    if checkpoint not in ESTIMATE_PRECISIONS:
        raise InputError(Problem("", flag.lstrip("-"), f"{checkpoint_source} states {checkpoint}, which the planner does not model",
                                 f"give {flag} ({', '.join(ESTIMATE_PRECISIONS)}) to estimate the model at another precision"))
    return checkpoint, checkpoint_source, ""
