"""Shared pieces of the benchmark importers: what the user states on the command line
(:class:`RunContext`), the closed/open-loop rule, engine names, and the one function that turns
a run's summary figures into a row of our measurements table (:func:`summary_row`).

Closed or open loop (column ``load``):

- ``closed``: a fixed number of users, each sending its next request when the previous one
  ends (vLLM/SGLang ``--max-concurrency N`` with the default ``--request-rate inf``; AIPerf /
  GenAI-Perf ``--concurrency N``; LLMPerf ``--num-concurrent-requests N``). ``concurrency`` = N.
  This is what :mod:`planner.perf.closed_loop` predicts.
- ``open``: requests arrive at a set rate (``--request-rate R``, Poisson by default), whether or
  not earlier ones have finished; ``request_rate_per_s`` = R, ``concurrency`` = the cap if one
  was set. The closed-loop predictor does not model these rows; ``calibrate`` and
  ``validate-perf`` set them aside and say how many.
- ``burst``: every request sent at t = 0 with no concurrency cap (``--request-rate inf`` and no
  ``--max-concurrency``): one wave, neither of the above; set aside the same way.

KV precision, when neither the user, the file nor the checkpoint name states it: the rule of
:func:`planner.perf.measurements.silicon_kv_precision` (TensorRT-LLM with fp8 weights -> fp8 KV,
as ModelOpt FP8 checkpoints carry FP8 KV scales; otherwise the activation dtype, bf16).

Lengths: an imported run's ``isl`` / ``osl`` are the run's mean input / output tokens per
request, rounded (the closed-loop model takes fixed lengths; a run with spread-out lengths is
predicted at its means).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem
from planner.perf.measurements import silicon_kv_precision
from planner.perf.names import device_id, model_ref
from planner.textio import loads_json, read_text

LOADS = ("closed", "open", "burst")
MAX_TOKENS_PER_REQUEST = 10_000_000.0
"""Upper bound of a run's mean input or output tokens per request (10M: far above any context window); beyond it
a value is a typo or a corrupted file, and it overflows the predictor (1e308 tokens gave inf and NaN)."""
MAX_LATENCY_MS = 86_400_000.0
"""Upper bound of a run's mean TTFT or TPOT: one day."""
MAX_CONCURRENCY = 1_000_000
"""Upper bound of a closed-loop run's concurrency (a million users of one server is a typo)."""
ENGINE_NAMES: dict[str, str] = {
    "vllm": "vllm", "vllm-chat": "vllm",
    "sglang": "sglang", "sglang-native": "sglang", "sglang-oai": "sglang", "sglang-oai-chat": "sglang",
    "trt": "trtllm", "trtllm": "trtllm", "tensorrt-llm": "trtllm", "tensorrtllm": "trtllm", "tensorrt_llm": "trtllm",
}
"""Backend / endpoint names in benchmark files -> our engine names. Generic client names
(``openai``, ``openai-chat``, ``openai-completions``) say nothing about the server: the user
names the engine (``--engine``)."""


@dataclass(frozen=True)
class RunContext:
    """What the user states about the runs in a file (command-line options); ``None``: not given.

    A value given here wins over what the file says."""

    device: str | None = None
    model: str | None = None
    engine: str | None = None
    precision: str | None = None
    kv_precision: str | None = None
    tp: int | None = None
    concurrency: int | None = None
    request_rate_per_s: float | None = None
    device_ids: frozenset[str] = frozenset()
    """Catalog device ids (names that are ids map to themselves)."""
    hf_ids: dict[str, str] = field(default_factory=dict)
    """Catalog ``hf_id`` -> model id."""


def load_records(path: Path) -> list[dict[str, Any]]:
    """A JSON object, a JSON list of objects, or JSON Lines (one object per line)."""
    text = read_text(path)
    try:
        data = loads_json(text, path)
    except json.JSONDecodeError:
        data = None
        records = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = loads_json(line, path)
            except json.JSONDecodeError as exc:
                raise InputError(Problem(str(path), f"line {i}", f"not JSON: {exc.msg}", "give the file the benchmark tool wrote, unchanged")) from exc
            records.append(rec)
        data = records
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(Problem(str(path), "", "expected a JSON object, a list of objects or JSON Lines", "give the file the benchmark tool wrote"))
    return data


def number(value: Any) -> float | None:
    """A finite or infinite float from a JSON/CSV value (``"inf"``, ``Infinity``, ``"1,146.31"``); None if absent."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().replace(",", "")
    if not text or text.lower() in {"none", "null", "nan", "n/a", "na"}:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def load_of(request_rate: float | None, max_concurrency: float | None) -> tuple[str, int | None, float | None]:
    """``(load, concurrency, request_rate_per_s)`` of a run (module docstring)."""
    # an infinite or NaN cap is no cap (what vLLM's ``--max-concurrency`` unset means)
    conc = int(max_concurrency) if max_concurrency is not None and math.isfinite(max_concurrency) and max_concurrency > 0 else None
    if request_rate is not None and math.isfinite(request_rate) and request_rate > 0:
        return "open", conc, float(request_rate)
    if conc is not None:
        return "closed", conc, None
    return "burst", None, None


def engine_name(name: Any) -> str | None:
    return ENGINE_NAMES.get(str(name).strip().lower()) if name else None


def _missing(path: Path, tool: str, what: str, option: str, example: str) -> Problem:
    return Problem(str(path), what, f"the {tool} result does not say the {what}", f"give {option} (e.g. {option} {example})")


def summary_row(path: Path, tool: str, ctx: RunContext, *, index: int | None = None, ttft_ms: float | None, tpot_ms: float | None,
                isl: float | None, osl: float | None, load: tuple[str, int | None, float | None],
                device: str | None = None, model: str | None = None, engine: str | None = None, tp: Any = None,
                precision: str | None = None, kv_precision: str | None = None) -> dict[str, Any]:
    """One row of the measurements table from a run's summary figures; what the file does not
    say comes from ``ctx``; what neither says and the model needs is one exit-2 error."""
    problems: list[Problem] = []
    names: dict[str, Any] = {"device": device, "model": model, "engine": engine}
    for what, name in names.items():
        if name is not None and not isinstance(name, str):
            problems.append(Problem(str(path), what, f"the {tool} result's {what} is {name!r}, not a name",
                                    f"give the file the tool wrote, or state it with --{what}"))
            names[what] = None
    device, model, engine = names["device"], names["model"], names["engine"]
    if ctx.tp is None and tp is not None:
        tp_num = number(tp)
        if tp_num is not None and not (math.isfinite(tp_num) and tp_num == int(tp_num) and 1 <= tp_num <= 4096):
            problems.append(Problem(str(path), "tp", f"the tensor-parallel degree {tp!r} is not a whole number from 1 to 4096",
                                    "give the file the tool wrote, or state it with --tp (e.g. --tp 1)"))
            tp = None
    for what, value in (("TTFT", ttft_ms), ("TPOT", tpot_ms)):
        if value is not None and not (math.isfinite(value) and 0 < value <= MAX_LATENCY_MS):
            problems.append(Problem(str(path), what, f"the mean {what} {value} ms is not a time in (0, {MAX_LATENCY_MS:,.0f}] ms",
                                    "give the file the tool wrote, unchanged (a run with failed requests has no latency to use)"))
    for what, value in (("input tokens", isl), ("output tokens", osl)):
        if value is not None and not (math.isfinite(value) and 0 < value <= MAX_TOKENS_PER_REQUEST):
            problems.append(Problem(str(path), "lengths", f"the mean {what} per request {value} is not a number in (0, {MAX_TOKENS_PER_REQUEST:,.0f}]",
                                    "give the summary file the tool wrote, unchanged (check its completed and token counts)"))
            isl, osl = (None, osl) if what == "input tokens" else (isl, None)
    dev = ctx.device or (device_id(device, ctx.device_ids) or device.strip() if device else None)
    if not dev:
        problems.append(_missing(path, tool, "device", "--device", "h100-sxm"))
    model_name = ctx.model or model
    ref = model_ref(model_name, ctx.hf_ids) if model_name else None
    if ref is None:
        problems.append(_missing(path, tool, "model", "--model", "llama-3.1-8b"))
    eng = ctx.engine or engine_name(engine)
    if not eng:
        problems.append(_missing(path, tool, "engine", "--engine", "vllm"))
    tp_value = ctx.tp if ctx.tp is not None else (int(number(tp) or 0) or None)
    if not tp_value and not any(pr.path == "tp" for pr in problems):
        problems.append(_missing(path, tool, "tensor-parallel degree", "--tp", "1"))
    kind, conc, rate = load
    if ctx.concurrency is not None or ctx.request_rate_per_s is not None:
        kind, conc, rate = load_of(ctx.request_rate_per_s, ctx.concurrency)
    if conc is not None and conc > MAX_CONCURRENCY:
        problems.append(Problem(str(path), "concurrency", f"concurrency {conc:,} is above {MAX_CONCURRENCY:,}",
                                "give the file the tool wrote, or state the run's concurrency with --concurrency N"))
    if (isl is None or osl is None) and not any(pr.path == "lengths" for pr in problems):
        problems.append(Problem(str(path), "lengths", f"the {tool} result has no mean input/output tokens per request", "give the summary file the tool wrote"))
    if problems:
        raise InputError(problems)
    assert ref is not None
    stated = ctx.precision or precision or ref.weight_precision
    return {
        "id": f"{path.name}" + (f"#{index}" if index is not None else ""),
        "device": dev,
        "model": ref.model_id or str(model_name),
        "engine": eng,
        "precision": stated or "bf16",
        "precision_assumed": stated is None,
        "kv_precision": ctx.kv_precision or kv_precision or ref.kv_precision or silicon_kv_precision(str(eng), stated or ""),
        "kv_precision_source": "stated" if ctx.kv_precision or kv_precision else ("checkpoint" if ref.kv_precision else "default"),
        "mode": "agg",
        "load": kind,
        "tp": tp_value,
        "concurrency": conc,
        "request_rate_per_s": rate,
        "isl": max(1, round(float(isl or 1))),
        "osl": max(1, round(float(osl or 1))),
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
    }
