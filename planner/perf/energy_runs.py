"""Measured serving-energy runs (the ML.ENERGY CSV format) and their prediction.

The file is read as shipped (``models/measured/measured_energy.csv``, columns described in
``models/measured/SOURCE_energy.md``); only rows with ``record_type = serving_steady_state`` are
predictable: one vLLM server on ``gpu_count`` GPUs, ``--max-num-seqs = batch_cap_max_num_seqs``,
every request submitted at t = 0, energy and throughput taken in the steady state while the
running batch sits at the cap.

**Throughput** (:func:`predict_runs`): the steady state is the closed loop of
:func:`planner.perf.closed_loop.predict_agg` with ``N = cap`` users (a finished request is
replaced at once by a waiting one), on the instance of the row's GPUs, with the row's engine
calibration (``vllm`` of the shipped latency fit). The engine runs ``D = min(cap, slots)``
sequences; a slot's cycle ``T_cyc`` serves one request of ``OSL`` output tokens, prefill of the
next prompt included (chunked prefill: every iteration carries ``p = D ISL / I`` prompt tokens
beside the decode batch), so::

    output tokens/s = D OSL / T_cyc

**Power**: the mean iteration of that cycle (``D (OSL-1)/I`` decode sequences at context ``ISL +
OSL/2`` plus ``p`` prompt tokens) gives the roofline's compute / memory / total times and so the
load ``L`` of :mod:`planner.perf.power`; ``J per output token = P(L) x gpu_count / (tokens/s)``.

Configuration mapping (stated, not fitted):

- **Model**: the Hugging Face id maps to a catalog model of the same architecture
  (:data:`MODEL_MAP`: e.g. ``Qwen3-30B-A3B-Instruct-2507`` and ``Qwen3-Coder-30B-A3B-Instruct``
  share ``qwen3-30b-a3b``'s layer and expert shapes; ``Llama-3.3-70B`` is ``llama-3.1-70b``'s).
  Models the catalog lacks (gemma-3, Llama-4, Nemotron-H hybrids, Qwen3-14B, vision-language
  models) are skipped with that reason.
- **Precision**: ``bfloat16`` -> bf16, ``fp8`` -> fp8, ``mxfp4`` -> fp4; KV cache bf16 (vLLM's
  default ``kv_cache_dtype=auto`` keeps the activation dtype).
- **Parallelism**: the instance spans all ``gpu_count`` GPUs with ``tp = gpu_count``. The
  expert-parallel MoE runs (``tensor_parallel = 1``, ``expert_parallel = gpu_count``: 68 of the
  v3.0 H100 runs the catalog covers) are skipped by default: the planner's roofline has no
  expert-parallel model (attention data-parallel, all-to-all dispatch), and approximating them as
  TP over-predicts their throughput by 1.2-2x for the fp8 Qwen3-235B runs (out of sample J/token
  21.7 % and tokens/s 19.6 % with them, against 12.7 % and 11.1 % without; ``planner/perf/README.md``).
  ``expert_parallel_as_tp=True`` includes them with that approximation.
- **Input length**: not recorded in the v3.0 files; per task the assumed mean prompt length
  :data:`TASK_INPUT_TOKENS` (chat template and system prompt included). The multimodal tasks
  (image/video tokens unknown) are skipped.
- **GPU**: ``H100-SXM5-80GB`` -> ``h100-sxm``; ``A100-SXM4-40GB`` -> ``a100-sxm-80gb`` with
  ``memory_gb = 40`` (same chip and TDP, 40 GB part).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.errors import InputError
from planner.perf.calibration import Calibration, EngineCalibration
from planner.perf.closed_loop import EngineArrays, predict_agg
from planner.perf.roofline import InstanceArrays, instance_arrays, iteration_time
from planner.perf.validate import engine_arrays
from planner.textio import text_stream

REQUIRED_COLUMNS: tuple[str, ...] = (
    "source", "record_type", "task", "gpu", "gpu_count", "tensor_parallel", "model", "engine", "precision",
    "batch_cap_max_num_seqs", "input_tokens", "output_tokens", "output_throughput_tok_per_s",
    "energy_j_per_output_token", "avg_power_w_per_gpu",
)
"""Columns a measurement file must carry (the ML.ENERGY export's names)."""

MODEL_MAP: dict[str, str] = {
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen3-30b-a3b",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8": "qwen3-235b-a22b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-405B-Instruct-FP8": "llama-3.1-405b",
    "meta-llama/Meta-Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
}
"""Hugging Face id -> catalog model of the same architecture (fine-tunes, instruct/thinking
variants and fp8 re-quantisations share the shapes; the catalog id names the base)."""

GPU_MAP: dict[str, tuple[str, float | None]] = {
    "H100-SXM5-80GB": ("h100-sxm", None),
    "A100-SXM4-40GB": ("a100-sxm-80gb", 40.0),
}
"""Measured GPU name -> (catalog device, memory override in GB or None)."""

PRECISION_MAP: dict[str, str] = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "mxfp4": "fp4", "fp4": "fp4",
                                 "model default (not stated)": "bf16"}
"""Measured precision -> planner precision (v2 rows state none: the 2024 checkpoints are bf16)."""

TASK_INPUT_TOKENS: dict[str, float] = {
    "lm-arena-chat": 250.0,
    "gpqa": 300.0,
    "sourcegraph-fim": 2000.0,
    "llm-chat": 250.0,
    "llm-code": 250.0,
}
"""Assumed mean prompt tokens per task (the files do not record them). Chat: LMArena / ShareGPT
first turns are short (a few hundred tokens with template and system prompt); GPQA: one
multiple-choice question with four options (~200-300 tokens) and the template; Sourcegraph FIM:
code context before and after the cursor (~2k tokens assumed). The chat and GPQA runs are decode
dominated (OSL 350-9,500), so their prediction barely moves with this; the FIM runs (OSL ~250) do."""

EP_REASON = "expert-parallel run (attention data-parallel, experts over the GPUs): the roofline models tensor parallelism only"
"""Why expert-parallel runs are skipped by default."""

ENGINE_MAP: dict[str, str] = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "tensorrt-llm": "trtllm"}


def stack_of(row: dict[str, Any]) -> str:
    """The serving stack of a row, ``<engine>-<version>`` (e.g. ``vllm-0.11.1``): each stack gets
    its own throughput calibration (per-step costs differ between engine versions)."""
    name = ENGINE_MAP.get(str(row.get("engine", "")).strip().lower(), str(row.get("engine", "")).strip().lower() or "default")
    version = str(row.get("engine_version", "")).strip()
    return f"{name}-{version}" if version else name


ROW_MAXIMA: dict[str, float] = {"input_tokens": 1e7, "output_tokens": 1e7, "batch_cap_max_num_seqs": 1e6, "gpu_count": 4096.0,
                                 "output_throughput_tok_per_s": 1e9, "energy_j_per_output_token": 1e6, "avg_power_w_per_gpu": 1e5}
"""Upper bounds of a run's numbers, far above any real one (10M-token requests, a million sequences in a batch,
100 kW per GPU): beyond them a value is a typo, and 1e308 overflowed the roofline (a RuntimeWarning and NaN)."""


def _num(text: str | None) -> float | None:
    if text is None or str(text).strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


def read_energy_runs(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an ML.ENERGY-format CSV as dicts (strings as in the file). Raises ``InputError``
    naming the file and the missing columns."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: file does not exist (check the path)")
    with text_stream(p) as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{p}: missing column(s) {', '.join(missing)} (the ML.ENERGY export format is expected; "
                             f"see models/measured/SOURCE_energy.md)")
        return [dict(r) for r in reader]


@dataclass
class RunConfig:
    """One predictable run, resolved against the catalog."""

    index: int
    device: str
    model: str
    tp: int
    gpu_count: int
    precision: str
    cap: float
    isl: float
    osl: float
    engine: str
    """Serving stack (:func:`stack_of`), the key of its throughput calibration."""
    meas_tok_per_s: float
    meas_j_per_tok: float
    meas_power_w_per_gpu: float


def resolve_runs(rows: list[dict[str, Any]], catalog: Catalog, *, expert_parallel_as_tp: bool = False,
                 ) -> tuple[list[RunConfig], list[str], dict[tuple[str, str, int, str], InstanceArrays]]:
    """Each row's configuration, or the reason it cannot be predicted (``''`` when it can).
    Expert-parallel runs (``expert_parallel > 1`` with ``tensor_parallel < gpu_count``) are
    skipped unless ``expert_parallel_as_tp`` (module docstring: the roofline models TP only)."""
    runs: list[RunConfig] = []
    reasons: list[str] = []
    cache: dict[tuple[str, str, int, str], InstanceArrays] = {}
    for i, r in enumerate(rows):
        reason = ""
        if r.get("record_type") != "serving_steady_state":
            reason = f"record_type {r.get('record_type')!r} is not a steady-state serving run"
        elif r.get("gpu") not in GPU_MAP:
            reason = f"GPU {r.get('gpu')!r} has no catalog device mapped"
        elif r.get("model") not in MODEL_MAP:
            reason = f"model {r.get('model')!r} is not in the catalog"
        elif str(r.get("precision")) not in PRECISION_MAP:
            reason = f"precision {r.get('precision')!r} unknown"
        elif not expert_parallel_as_tp and (_num(r.get("expert_parallel")) or 1) > 1 \
                and (_num(r.get("tensor_parallel")) or 1) < (_num(r.get("gpu_count")) or 1):
            reason = EP_REASON
        isl = _num(r.get("input_tokens")) or TASK_INPUT_TOKENS.get(str(r.get("task")))
        osl = _num(r.get("output_tokens"))
        cap = _num(r.get("batch_cap_max_num_seqs"))
        count = _num(r.get("gpu_count"))
        meas = [_num(r.get(c)) for c in ("output_throughput_tok_per_s", "energy_j_per_output_token", "avg_power_w_per_gpu")]
        given = {"input_tokens": isl, "output_tokens": osl, "batch_cap_max_num_seqs": cap, "gpu_count": count,
                 "output_throughput_tok_per_s": meas[0], "energy_j_per_output_token": meas[1], "avg_power_w_per_gpu": meas[2]}
        bad = [f"{name} {v:g} not in (0, {ROW_MAXIMA[name]:g}]" for name, v in given.items()
               if v is not None and not (math.isfinite(v) and 0 < v <= ROW_MAXIMA[name])]
        if not reason and bad:
            reason = "; ".join(bad)
        if not reason and count is not None and (count != int(count) or count > 4096):
            reason = f"gpu_count {count:g} is not a whole number up to 4096"
        if not reason and isl is None:
            reason = f"task {r.get('task')!r}: input length not recorded (multimodal prompt tokens unknown)"
        if not reason and (not osl or not cap or not count or any(m is None or m <= 0 for m in meas)):
            reason = "missing output_tokens, batch cap, gpu_count or a measured figure"
        if not reason:
            dev_id, mem = GPU_MAP[str(r["gpu"])]
            model_id = MODEL_MAP[str(r["model"])]
            prec = PRECISION_MAP[str(r["precision"])]
            model = catalog.models.get(model_id)
            device = catalog.devices.get(dev_id)
            if model is None or device is None:
                reason = f"catalog lacks {model_id if model is None else dev_id}"
            elif prec not in model.supported_weight_precisions:
                prec = model.native_weight_precision
            if not reason:
                assert model is not None and device is not None and count is not None
                tp = int(count)
                key = (model_id, dev_id if mem is None else f"{dev_id}@{mem:g}", tp, prec)
                if key not in cache:
                    dev = device if mem is None else device.model_copy(update={"memory_gb": mem})
                    try:
                        cache[key] = instance_arrays(model, dev, tp, prec, "bf16")
                    except ValueError as exc:
                        reason = str(exc)
                if not reason:
                    assert isl is not None and osl is not None and cap is not None
                    engine = stack_of(r)
                    runs.append(RunConfig(i, key[1], model_id, tp, tp, prec, cap, float(isl), float(osl), engine,
                                          float(meas[0] or 0), float(meas[1] or 0), float(meas[2] or 0)))
        reasons.append(reason)
    return runs, reasons, cache


@dataclass(frozen=True)
class RunPrediction:
    """Per predictable run (arrays aligned with the ``runs`` list)."""

    tok_per_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    total_s: np.ndarray
    rows: np.ndarray
    """Tokens in the mean iteration (decode batch + prompt tokens)."""
    feasible: np.ndarray
    running: np.ndarray


def _engines(runs: list[RunConfig], calibration: Calibration | None) -> EngineArrays:
    from planner.perf.calibration import PUBLISHED_DEFAULT

    cals: list[EngineCalibration] = [calibration.for_engine(r.engine)[0] if calibration else PUBLISHED_DEFAULT for r in runs]
    return engine_arrays(cals)


def predict_runs(runs: list[RunConfig], insts: dict[tuple[str, str, int, str], InstanceArrays],
                 calibration: Calibration | None) -> RunPrediction:
    """Steady-state throughput and the mean iteration's roofline times per run (module docstring)."""
    if not runs:
        z = np.zeros(0)
        return RunPrediction(z, z, z, z, z, z.astype(bool), z)
    inst = InstanceArrays.stack([insts[(r.model, r.device, r.tp, r.precision)] for r in runs])
    eng = _engines(runs, calibration)
    cap = np.array([r.cap for r in runs])
    isl = np.array([r.isl for r in runs])
    osl = np.array([r.osl for r in runs])
    res = predict_agg(inst, eng, cap, isl, osl)
    d = res.running
    # the mean mixed iteration of the cycle (closed_loop.predict_agg, mixed prefill)
    steps = np.maximum(osl - 1.0, 1.0)
    q = np.maximum(eng.budget_tokens - d, 256.0)
    iters = steps + np.ceil(isl / q)
    p_avg = d * isl / iters
    d_avg = d * steps / iters
    step = iteration_time(inst, eng.efficiency(), decode_batch=d_avg, decode_context=isl + osl / 2.0, prefill_tokens=p_avg,
                          prefill_cached=(isl - p_avg) / 2.0)
    tok = d * osl / np.maximum(res.cycle_s, 1e-12)
    return RunPrediction(tok, np.asarray(step.compute_s), np.asarray(step.memory_s), np.asarray(step.total_s), d_avg + p_avg,
                         np.asarray(res.feasible, dtype=bool) & (d >= 1), d)
