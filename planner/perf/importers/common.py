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

import contextlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem
from planner.perf.measurements import (  # noqa: F401  (the bounds are re-exported: the importers' and the CSV reader's)
    MAX_CONCURRENCY,
    MAX_LATENCY_MS,
    MAX_TOKENS_PER_REQUEST,
    silicon_kv_precision,
)
from planner.perf.names import device_id, model_ref
from planner.textio import loads_json, read_text

LOADS = ("closed", "open", "burst")
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

    A value given here fills what a file does not say; what a file records wins, and an option
    that contradicts it is an error (:func:`summary_row`, :func:`apply_given`)."""

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


MAX_FAILED_SHARE = 0.1
"""Largest share of a run's requests that may have failed: a run's latency means cover its completed
requests only, and beyond a tenth failed the survivors are no longer the run that was asked for
(319 of 320 failed left one request's latency as the run's)."""


def run_load(path: Path, request_rate: float | None, max_concurrency: float | None, *, where: str = "") -> tuple[tuple[str, int | None, float | None], list[Problem]]:
    """:func:`load_of` of the values a file records, with the problems of impossible ones: a finite
    request rate must be above 0 (``-2`` or ``0`` req/s is no rate a benchmark ran at; only ``inf``
    means "no rate"), and a finite concurrency cap a whole number from 1 to :data:`MAX_CONCURRENCY`
    (``-5`` or ``32.7`` users are not a run; they are not read as "no cap" nor truncated)."""
    problems: list[Problem] = []
    at = f"{where}: " if where else ""
    if request_rate is not None and math.isfinite(request_rate) and request_rate <= 0:
        problems.append(Problem(str(path), f"{at}request_rate", f"the request rate {request_rate:g} req/s is not a rate (above 0, or inf for none)",
                                "give the file the tool wrote, unchanged"))
        request_rate = None
    if max_concurrency is not None and math.isfinite(max_concurrency) and not (max_concurrency == int(max_concurrency) and 1 <= max_concurrency <= MAX_CONCURRENCY):
        problems.append(Problem(str(path), f"{at}max_concurrency", f"the concurrency {max_concurrency:g} is not a whole number of users from 1 to {MAX_CONCURRENCY:,}",
                                "give the file the tool wrote, unchanged (or state the run's concurrency with --concurrency N when the file does not)"))
        max_concurrency = None
    return load_of(request_rate, max_concurrency), problems


def failed_requests(path: Path, completed: float | None, failed: float | None, *, where: str = "") -> tuple[list[Problem], list[str]]:
    """``(problems, notes)`` of a run's failed requests: more than :data:`MAX_FAILED_SHARE` of the
    requests failed -> an error; fewer, but some -> a note (the means cover the completed ones)."""
    if not failed or failed <= 0 or not math.isfinite(failed):
        return [], []
    done = completed if completed is not None and math.isfinite(completed) and completed > 0 else 0.0
    share = failed / (failed + done)
    at = f"{where}: " if where else ""
    if share > MAX_FAILED_SHARE:
        return [Problem(str(path), f"{at}failed", f"{failed:g} of {failed + done:g} requests failed ({share:.0%}, more than {MAX_FAILED_SHARE:.0%}): "
                        "the latency means cover the completed ones only", "rerun the benchmark until the requests complete")], []
    return [], [f"note: {path.name}{' ' + where if where else ''}: {failed:g} of {failed + done:g} requests failed ({share:.1%}); "
                "the means cover the completed ones"]


def bench_serving_figures(path: Path, rec: dict[str, Any], *, where: str = "") -> dict[str, Any]:
    """The figures of one run of the ``bench_serving`` summary vLLM's ``bench serve`` and SGLang's
    ``bench_serving`` both write (the same keys: ``mean_ttft_ms``, ``mean_tpot_ms``, ``total_input_tokens``,
    ``total_output_tokens``, ``completed``, ``failed``, ``request_rate``, ``max_concurrency``), as
    :func:`summary_row` keywords: mean latencies, mean lengths per completed request, the load
    (:func:`run_load`) and the problems and notes of impossible loads and failed requests (:func:`failed_requests`)."""
    done = number(rec.get("completed")) or 0.0
    load, problems = run_load(path, number(rec.get("request_rate")), number(rec.get("max_concurrency")), where=where)
    failed, notes = failed_requests(path, number(rec.get("completed")), number(rec.get("failed")), where=where)
    return {"ttft_ms": number(rec.get("mean_ttft_ms")), "tpot_ms": number(rec.get("mean_tpot_ms")),
            "isl": (number(rec.get("total_input_tokens")) or 0.0) / done if done else None,
            "osl": (number(rec.get("total_output_tokens")) or 0.0) / done if done else None,
            "load": load, "problems": problems + failed, "notes": notes}


def engine_name(name: Any) -> str | None:
    return ENGINE_NAMES.get(str(name).strip().lower()) if name else None


def _missing(path: Path, tool: str, what: str, option: str, example: str) -> Problem:
    return Problem(str(path), what, f"the {tool} result does not say the {what}", f"give {option} (e.g. {option} {example})")


def contradiction(path: Path, field: str, recorded: Any, option: str, given: Any, *, where: str = "") -> Problem:
    """The problem of a command-line option that contradicts what a file records: the options state
    what a file does *not* say; the file's value wins, and a different one is an error."""
    at = f"{where}: " if where else ""
    return Problem(str(path), f"{at}{field}", f"the file records {field} {recorded}, but {option} {given} was given",
                   f"drop {option} (it is for files that do not say the {field}), or give the file of a run with {option} {given}")


def override_note(path: Path, field: str, recorded: Any, option: str, given: Any, count: int = 1) -> str:
    """The warning of a legitimate override (one line per file): ``option`` replaces what the file records."""
    rows = f" in {count} rows" if count != 1 else ""
    return f"warning: {path.name}: {option} {given} replaces the file's {field} {recorded}{rows}"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def given_load(path: Path, ctx: RunContext, load: tuple[str, int | None, float | None], *, where: str = "") -> tuple[tuple[str, int | None, float | None], list[Problem]]:
    """The run's load: the file's; ``--concurrency`` / ``--request-rate`` only where the file records
    neither a concurrency cap nor a rate (a burst as far as the file says). An option that
    contradicts the file's closed or open loop is a problem (:func:`contradiction`)."""
    kind, conc, rate = load
    if ctx.concurrency is None and ctx.request_rate_per_s is None:
        return load, []
    if conc is None and rate is None:
        return load_of(ctx.request_rate_per_s, ctx.concurrency), []
    recorded = f"a closed loop of {conc} users" if kind == "closed" else f"an open loop at {rate:g} req/s" + (f" capped at {conc} users" if conc else "")
    problems = []
    if ctx.concurrency is not None and (conc is None or conc != ctx.concurrency):
        problems.append(contradiction(path, "load", recorded, "--concurrency", ctx.concurrency, where=where))
    if ctx.request_rate_per_s is not None and (rate is None or not _same(rate, ctx.request_rate_per_s)):
        problems.append(contradiction(path, "load", recorded, "--request-rate", f"{ctx.request_rate_per_s:g}", where=where))
    return load, problems


def summary_row(path: Path, tool: str, ctx: RunContext, *, index: int | None = None, ttft_ms: float | None, tpot_ms: float | None,
                isl: float | None, osl: float | None, load: tuple[str, int | None, float | None],
                device: str | None = None, model: str | None = None, engine: str | None = None, tp: Any = None,
                precision: str | None = None, kv_precision: str | None = None, problems: list[Problem] | None = None,
                notes: list[str] | None = None) -> dict[str, Any]:
    """One row of the measurements table from a run's summary figures. What the file records wins;
    what it does not say comes from ``ctx``; an option that contradicts the file's device,
    tensor-parallel degree or load is an error (:func:`contradiction`). ``--model``, ``--engine``,
    ``--precision`` and ``--kv-precision`` against the file's value replace it with a warning naming
    the file (:func:`override_note`): a client's model name is whatever the server was asked to serve
    under (vLLM's ``--served-model-name``; ``--model PATH/config.json`` names the checkpoint behind
    it), its backend name an API more than a server, and a server may quantise on load. What neither says and the model needs is one exit-2 error with ``problems`` (found by the
    importer). ``notes`` (warnings, one line per file) travel in the row's ``notes`` key."""
    problems = list(problems or [])
    notes = list(notes or [])
    where = f"run {index}" if index is not None else ""
    at = f"{where}: " if where else ""
    names: dict[str, Any] = {"device": device, "model": model, "engine": engine}
    for what, name in names.items():
        if name is not None and not isinstance(name, str):
            problems.append(Problem(str(path), f"{at}{what}", f"the {tool} result's {what} is {name!r}, not a name",
                                    f"give the file the tool wrote, or state it with --{what}"))
            names[what] = None
    device, model, engine = names["device"], names["model"], names["engine"]
    tp_file: int | None = None
    if tp is not None:
        tp_num = number(tp)
        if tp_num is not None and not (math.isfinite(tp_num) and tp_num == int(tp_num) and 1 <= tp_num <= 4096):
            problems.append(Problem(str(path), f"{at}tp", f"the tensor-parallel degree {tp!r} is not a whole number from 1 to 4096",
                                    "give the file the tool wrote, or state it with --tp (e.g. --tp 1) when the file does not say"))
        elif tp_num is not None:
            tp_file = int(tp_num)
    for what, value in (("TTFT", ttft_ms), ("TPOT", tpot_ms)):
        if value is not None and not (math.isfinite(value) and 0 < value <= MAX_LATENCY_MS):
            problems.append(Problem(str(path), f"{at}{what}", f"the mean {what} {value} ms is not a time in (0, {MAX_LATENCY_MS:,.0f}] ms",
                                    "give the file the tool wrote, unchanged (a run with failed requests has no latency to use)"))
    for what, value in (("input tokens", isl), ("output tokens", osl)):
        if value is not None and not (math.isfinite(value) and 0 < value <= MAX_TOKENS_PER_REQUEST):
            problems.append(Problem(str(path), f"{at}lengths", f"the mean {what} per request {value} is not a number in (0, {MAX_TOKENS_PER_REQUEST:,.0f}]",
                                    "give the summary file the tool wrote, unchanged (check its completed and token counts)"))
            isl, osl = (None, osl) if what == "input tokens" else (isl, None)
    file_dev = (device_id(device, ctx.device_ids) or device.strip()) if device else None
    if file_dev and ctx.device and file_dev != ctx.device:
        problems.append(contradiction(path, "device", f"{device!r} ({file_dev})" if device != file_dev else repr(device), "--device", ctx.device, where=where))
    dev = file_dev or ctx.device
    if not dev:
        problems.append(_missing(path, tool, "device", "--device", "h100-sxm"))
    file_ref = model_ref(model, ctx.hf_ids) if model else None
    use_given = ctx.model is not None and (file_ref is None or file_ref.model_id != ctx.model)
    if use_given and file_ref is not None:
        named = f"{model!r} ({file_ref.model_id})" if file_ref.model_id else f"{model!r} (not a catalog name)"
        notes.append(override_note(path, "model", named, "--model", ctx.model))
    ref = model_ref(ctx.model, ctx.hf_ids) if use_given and ctx.model else file_ref
    model_name = ctx.model if use_given else model
    if ref is None:
        problems.append(_missing(path, tool, "model", "--model", "llama-3.1-8b"))
    file_eng = engine_name(engine)
    if file_eng and ctx.engine and file_eng != ctx.engine:
        notes.append(override_note(path, "engine", f"{engine!r} ({file_eng}, the client's backend)", "--engine", ctx.engine))
    eng = ctx.engine or file_eng
    if not eng:
        problems.append(_missing(path, tool, "engine", "--engine", "vllm"))
    if tp_file is not None and ctx.tp is not None and tp_file != ctx.tp:
        problems.append(contradiction(path, "tensor-parallel degree", tp_file, "--tp", ctx.tp, where=where))
    tp_value = tp_file or ctx.tp
    if not tp_value and not any(pr.path.endswith("tp") for pr in problems):
        problems.append(_missing(path, tool, "tensor-parallel degree", "--tp", "1"))
    (kind, conc, rate), load_problems = given_load(path, ctx, load, where=where)
    problems.extend(load_problems)
    if conc is not None and conc > MAX_CONCURRENCY:
        problems.append(Problem(str(path), f"{at}concurrency", f"concurrency {conc:,} is above {MAX_CONCURRENCY:,}",
                                "give the file the tool wrote, or state the run's concurrency with --concurrency N"))
    if (isl is None or osl is None) and not any(pr.path.endswith("lengths") for pr in problems):
        problems.append(Problem(str(path), f"{at}lengths", f"the {tool} result has no mean input/output tokens per request", "give the summary file the tool wrote"))
    if problems:
        raise InputError(problems)
    assert ref is not None
    file_precision = precision or ref.weight_precision
    if ctx.precision and file_precision and ctx.precision != file_precision:
        notes.append(override_note(path, "precision", file_precision, "--precision", ctx.precision))
    file_kv = kv_precision or ref.kv_precision
    if ctx.kv_precision and file_kv and ctx.kv_precision != file_kv:
        notes.append(override_note(path, "KV precision", file_kv, "--kv-precision", ctx.kv_precision))
    stated = ctx.precision or file_precision
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
        "notes": notes,
    }


GIVEN_FIELDS: tuple[tuple[str, str], ...] = (
    ("device", "--device"), ("model", "--model"), ("engine", "--engine"), ("precision", "--precision"),
    ("kv_precision", "--kv-precision"), ("tp", "--tp"), ("concurrency", "--concurrency"), ("request_rate_per_s", "--request-rate"))
"""Row columns a command-line option may fill, and the option."""


def given_columns(ctx: RunContext) -> list[str]:
    """The columns ``ctx`` states (a file may leave them out of its header)."""
    return [f for f, _ in GIVEN_FIELDS if getattr(ctx, f) is not None]


def _resolved_names(row: dict[str, Any], ctx: RunContext) -> None:
    """``row``'s device and model names as catalog ids where they map (:func:`planner.perf.names.resolve_device`,
    :func:`~planner.perf.names.resolve_model`: the one resolver every reader uses, e.g. ``NVIDIA H100 80GB HBM3``
    -> h100-sxm, ``Qwen/Qwen3-32B`` -> qwen3-32b); a name that maps to nothing (or to several ids) is kept."""
    from planner.perf.names import AmbiguousName, UnknownName, resolve_device, resolve_model

    device, model = row.get("device"), row.get("model")
    if device and ctx.device_ids:
        with contextlib.suppress(UnknownName, AmbiguousName):
            row["device"] = resolve_device(str(device), ctx.device_ids)
    if model and ctx.hf_ids:
        with contextlib.suppress(UnknownName, AmbiguousName):
            row["model"] = resolve_model(str(model), ctx.hf_ids)


def _lacks(row: dict[str, Any], field: str) -> bool:
    """True when ``row`` does not say ``field``: the column is missing or the cell empty (a KV precision the
    reader took as the published default; a concurrency or request rate the row's load does not use)."""
    if field == "kv_precision":
        return row.get("kv_precision_source") == "default"
    if field == "concurrency" and row.get("load", "closed") != "closed":
        return False
    if field == "request_rate_per_s" and row.get("load") != "open":
        return False
    return row.get(field) is None or row.get(field) == ""


def apply_given(rows: list[dict[str, Any]], ctx: RunContext, path: Path, *, resolve_names: bool = True) -> list[dict[str, Any]]:
    """Rows of a file with its own columns (our measurements CSV, aiconfigurator's) with the command
    line applied: names resolved to catalog ids (:func:`_resolved_names`); a value a row lacks
    (:func:`_lacks`) taken from ``ctx``; a value a row records and an option contradicts is one error
    naming the rows, the recorded value and the option (the options state what a file does not say);
    ``--model`` for a model name the catalog does not know replaces it with a warning (it names the checkpoint).
    The published-default KV precision is redone for rows whose engine or precision came from ``ctx``."""
    conflicts: dict[tuple[str, str, str], list[str]] = {}
    notes: dict[tuple[str, str], int] = {}
    for i, row in enumerate(rows, start=2):
        if resolve_names:
            _resolved_names(row, ctx)
        filled = False
        for column, option in GIVEN_FIELDS:
            given = getattr(ctx, column)
            if given is None:
                continue
            if _lacks(row, column):
                row[column] = given
                if column == "kv_precision":
                    row["kv_precision_source"] = "stated"
                filled = filled or column in ("engine", "precision")
            elif column == "model" and model_ref(str(row.get("model") or ""), ctx.hf_ids).model_id is None:
                notes.setdefault((str(row.get("model")), str(given)), 0)  # a name the catalog does not know: the option names it
                notes[(str(row.get("model")), str(given))] += 1
                row["model"] = given
            elif (column not in ("concurrency", "request_rate_per_s") or row.get("load", "closed") != "burst") and not _same(row.get(column), given):
                conflicts.setdefault((column, str(row.get(column)), f"{option} {given}"), []).append(str(i))
        if filled and row.get("kv_precision_source") == "default":
            row["kv_precision"] = silicon_kv_precision(str(row.get("engine") or ""), str(row.get("precision") or ""))
    if conflicts:
        problems = []
        for (column, recorded, opt), where in conflicts.items():
            option, given = opt.split(" ", 1)
            named = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
            problems.append(contradiction(path, column, repr(recorded), option, given, where=f"line{'' if len(where) == 1 else 's'} {named}"))
        raise InputError(problems)
    for (recorded, given), count in notes.items():
        warn = override_note(path, "model", f"{recorded!r} (not a catalog name)", "--model", given, count)
        for row in rows:
            row.setdefault("notes", []).append(warn)
    return rows
