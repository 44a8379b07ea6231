"""KV-cache precision of a measured run whose file does not record it (issue 25, item 5).

Each measurement row carries ``kv_precision`` and ``kv_precision_source``:

=================  =====================================================================
source             meaning
=================  =====================================================================
``stated``         the file, or the user on the command line (``--kv-precision``)
``checkpoint``     the checkpoint's name states it (``-FP8-KV``; :mod:`planner.perf.names`)
``default``        the checkpoint's published default on that engine
                   (:func:`published_default_kv`); the file says nothing
``inferred``       the default cannot be what ran: the measured concurrency and TTFT need
                   a smaller KV type (:func:`infer_kv`)
=================  =====================================================================

**Published default** (:func:`published_default_kv`): TensorRT-LLM takes the KV dtype from the
checkpoint's quantisation config, and NVIDIA's ModelOpt FP8 / NVFP4 checkpoints quantise the KV
cache to FP8: 24 of the 27 ``hf_quant_config.json`` files shipped in aiconfigurator's
``model_configs/`` (github.com/ai-dynamo/aiconfigurator, commit 095f58a5) say
``"kv_cache_quant_algo": "FP8"`` (the other three: ``null``). So TensorRT-LLM with fp8 or fp4
weights -> fp8 KV; every other engine and precision -> the activation dtype, bf16 (vLLM and
SGLang ``kv_cache_dtype=auto``).

**Inference** (:func:`infer_kv`), for a closed-loop ``agg`` row whose KV comes from the default
and that has a measured TTFT and TPOT. With ``S(k)`` the sequences whose KV fits the instance at
KV type ``k`` when each holds its mean footprint ``ISL + OSL/2`` tokens
(:func:`planner.perf.roofline.max_batch`: ``(M u_mem - W/tp - reserve) min(tp, H_kv)`` over
``kv(ISL + OSL/2)``; engines that admit on current usage, as vLLM does, hold about that many, and
no engine holds more), ``C`` users can only all be served at once if
``S(k) >= C``; otherwise the other ``C - S`` wait for a slot, each slot turning over once per
request, which takes at least ``OSL x TPOT`` once admitted, so in the closed loop the wait is at
least::

    wait(k) >= (C / S(k) - 1) x OSL x TPOT_measured

A measured TTFT below half of that bound rules ``k`` out: the run held more sequences than ``k``
allows. The inferred type is then the widest narrower type (``bf16 -> fp8 -> fp4``; fp4 only
where the device has fp4 tensor cores and the engine is TensorRT-LLM) that is not ruled out;
if every type is ruled out, the narrowest. A row without TTFT/TPOT, or a row whose default is
not ruled out, keeps its default (marked ``default``). The factor one half leaves room for
measured TPOT varying with the batch and for the engine's admission rules; the runs it
corrects sit 40-386x below the bound (issue 25).
"""

from __future__ import annotations

import math
from typing import Any

from planner.catalog import Catalog
from planner.perf.roofline import instance_arrays, max_batch

KV_SOURCES: tuple[str, ...] = ("stated", "checkpoint", "default", "inferred")
NARROWER: dict[str, tuple[str, ...]] = {"bf16": ("fp8", "fp4"), "fp8": ("fp4",), "fp4": (), "int8": ("fp4",)}
RULED_OUT_FRACTION = 0.1
"""A measured TTFT below this share of the queueing bound rules the KV type out (module docstring)."""


def published_default_kv(engine: str, weight_precision: str) -> str:
    """The KV type a checkpoint of ``weight_precision`` runs with by default on ``engine`` (module docstring)."""
    quantised = weight_precision.strip().lower().startswith(("fp8", "fp4", "nvfp4", "mxfp4"))
    return "fp8" if engine.strip().lower() == "trtllm" and quantised else "bf16"


def queue_bound_ms(slots: float, users: float, osl: float, tpot_ms: float) -> float:
    """Least mean wait for a slot in a closed loop of ``users`` with ``slots`` (module docstring)."""
    if slots >= users:
        return 0.0
    if slots <= 0:
        return float("inf")
    return (users / slots - 1.0) * osl * tpot_ms


def _candidates(default: str, engine: str, device_peaks: dict[str, float]) -> list[str]:
    out = [default]
    for k in NARROWER.get(default, ()):
        if k == "fp4" and (engine != "trtllm" or "fp4" not in device_peaks):
            continue
        out.append(k)
    return out


def infer_kv(row: dict[str, Any], catalog: Catalog) -> tuple[str, str]:
    """``(kv_precision, kv_precision_source)`` of one row (module docstring). Rows the catalog
    cannot resolve, rows the reader skips (``skip_reason``: a number out of bounds) and rows of a
    precision the roofline does not know (``fp16``, an AWQ checkpoint's ``int4``) keep what they have:
    the predictor skips them with their reason."""
    source = str(row.get("kv_precision_source") or "stated")
    kv = str(row.get("kv_precision") or "bf16")
    if source != "default" or row.get("mode", "agg") != "agg":
        return kv, source
    users, isl, osl = row.get("concurrency"), row.get("isl"), row.get("osl")
    ttft, tpot, tp = row.get("ttft_ms"), row.get("tpot_ms"), row.get("tp")
    model = catalog.models.get(str(row.get("model")))
    device = catalog.devices.get(str(row.get("device")))
    if model is None or device is None or row.get("skip_reason") or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in (users, isl, osl, ttft, tpot, tp)):
        return kv, source
    assert isinstance(users, (int, float)) and isinstance(osl, (int, float)) and isinstance(isl, (int, float))
    assert isinstance(ttft, (int, float)) and isinstance(tpot, (int, float)) and isinstance(tp, (int, float))
    engine = str(row.get("engine") or "")
    kinds = _candidates(kv, engine, {str(k): float(v) for k, v in device.peak_tflops_dense.items()})
    ruled_out: list[str] = []
    for k in kinds:
        try:
            inst = instance_arrays(model, device, int(tp), str(row.get("precision")), k)
        except (ValueError, KeyError):  # a precision the roofline does not know (fp16, int4): the predictor gives the reason
            return kv, source
        slots = float(max_batch(inst, float(isl) + float(osl) / 2.0))
        if float(ttft) >= RULED_OUT_FRACTION * queue_bound_ms(slots, float(users), float(osl), float(tpot)):
            return k, ("default" if k == kv else "inferred")
        ruled_out.append(k)
    return ruled_out[-1], ("default" if ruled_out[-1] == kv else "inferred")


def with_inferred_kv(rows: list[dict[str, Any]], catalog: Catalog) -> list[dict[str, Any]]:
    """Copies of ``rows`` with :func:`infer_kv` applied (rows without a source are ``stated``)."""
    out = []
    for r in rows:
        kv, source = infer_kv(r, catalog)
        out.append({**r, "kv_precision": kv, "kv_precision_source": source})
    return out
