"""Users' benchmark results as input: one module per tool's output format, auto-detected
(:mod:`.detect`), all normalised to the rows of our measurements table
(:mod:`planner.perf.measurements`), with the column ``load`` saying whether a run was a closed
loop (fixed concurrency), an open loop (request rate) or a single burst (:mod:`.common`).

=============  ===============================================================  ==============
format         file                                                             module
=============  ===============================================================  ==============
planner        our measurements CSV                                             measurements
silicon        aiconfigurator ``silicon_*.csv``                                 silicon
vllm           ``vllm bench serve --save-result`` JSON                          vllm
sglang         ``python -m sglang.bench_serving --output-file`` JSONL           sglang
aiperf         AIPerf ``profile_export_aiperf.json|csv``, GenAI-Perf            aiperf
               ``profile_export_genai_perf.json|csv`` (``genai-perf`` alias)
llmperf        LLMPerf ``*_summary.json``                                       llmperf
=============  ===============================================================  ==============

Names in the files (systems, GPUs, checkpoints) map to catalog ids through :mod:`.names`;
whatever does not map is kept, counted and named (:func:`unmapped_lines`), never dropped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.catalog import Catalog
from planner.errors import InputError, Problem
from planner.perf.importers import aiperf, llmperf, sglang, silicon, vllm
from planner.perf.importers.common import RunContext, apply_given, given_columns
from planner.perf.importers.detect import FORMATS, detect_format
from planner.perf.measurements import COLUMNS, PRECISIONS, read_measurements
from planner.schema.llm import LLMProfile

__all__ = ["FORMATS", "ImportResult", "RunContext", "detect_format", "read_benchmarks", "unmapped_lines"]


@dataclass
class ImportResult:
    """Rows of every file (in order), the format each file was read as, and what was set aside."""

    rows: list[dict[str, Any]]
    """Closed-loop rows: what the predictor and the fit take."""
    formats: dict[str, str]
    set_aside: dict[str, int] = field(default_factory=dict)
    """Rows not closed-loop, by ``load`` (``open``, ``burst``)."""
    precision_assumed: int = 0
    """Rows whose precision neither the file, the checkpoint name nor ``--precision`` stated (taken as bf16)."""
    all_rows: list[dict[str, Any]] = field(default_factory=list)
    """Every row read, closed-loop or not (what ``convert-measurements`` writes)."""
    models: dict[str, LLMProfile] = field(default_factory=dict)
    """Profiles derived from a ``config.json`` for ``--model`` (not in the catalog; the caller adds
    them with :meth:`planner.catalog.Catalog.with_models`)."""
    notes: list[str] = field(default_factory=list)
    """Warnings and notes about the inputs, one line each (options that replaced a file's value, failed
    requests, files given twice, repeated rows)."""


def context_for(catalog: Catalog, **given: Any) -> RunContext:
    """A :class:`RunContext` with the catalog's ids and the user's values."""
    return RunContext(device_ids=frozenset(catalog.devices), hf_ids={m.hf_id: m.id for m in catalog.models.values()}, **given)


def read_file(path: str | Path, fmt: str, ctx: RunContext) -> tuple[list[dict[str, Any]], str]:
    """Rows of one file and the format it was read as (``fmt`` ``auto`` detects it)."""
    p = Path(path)
    name = detect_format(p) if fmt == "auto" else ("aiperf" if fmt == "genai-perf" else fmt)
    if name == "planner":
        rows = apply_given(read_measurements(p, supplied=given_columns(ctx)), ctx, p)
    elif name == "silicon":
        rows = silicon.read(p, ctx)
    elif name == "aiperf" and p.suffix.lower() == ".csv":
        rows = aiperf.read_csv(p, ctx)
    else:
        mod = {"vllm": vllm, "sglang": sglang, "aiperf": aiperf, "llmperf": llmperf}[name]
        rows = mod.read(p, ctx)
    return rows, name


def repeats(paths: list[str] | tuple[str, ...], rows: list[dict[str, Any]]) -> list[str]:
    """Notes on inputs counted twice: a file given more than once (its rows count each time) and rows
    that repeat another row's every column but ``id`` (the same run, or a copy of it)."""
    out = []
    seen = Counter(str(Path(p).resolve()) for p in paths)
    for p in dict.fromkeys(paths):
        if seen.get(str(Path(p).resolve()), 0) > 1:
            out.append(f"note: {p} is given {seen[str(Path(p).resolve())]} times: its rows are counted each time")
            seen[str(Path(p).resolve())] = 0
    keys = Counter(tuple(str(r.get(k)) for k in COLUMNS if k != "id") for r in rows)
    extra = sum(n - 1 for n in keys.values() if n > 1)
    if extra:
        out.append(f"note: {extra} row{'' if extra == 1 else 's'} repeat{'s' if extra == 1 else ''} another row (every column but id): "
                   "counted each time, they weigh that run more in MAPE and the fit")
    return out


def read_benchmarks(paths: list[str] | tuple[str, ...], fmt: str, ctx: RunContext) -> ImportResult:
    """Every file's rows, closed-loop rows apart from the rest; the rows' notes collected, once each."""
    rows: list[dict[str, Any]] = []
    formats: dict[str, str] = {}
    problems: list[Problem] = []
    for path in paths:
        try:
            got, name = read_file(path, fmt, ctx)
        except InputError as exc:  # every file's problems at once (an option contradicting two files names both)
            problems.extend(exc.problems)
            continue
        formats[str(path)] = name
        rows.extend(got)
    if problems:
        raise InputError(problems[:50])
    assumed = sum(1 for r in rows if r.pop("precision_assumed", False))
    notes: dict[str, None] = {}
    for r in rows:
        r.setdefault("load", "closed")
        notes.update(dict.fromkeys(r.pop("notes", None) or []))
    closed = [r for r in rows if r["load"] == "closed"]
    aside = Counter(str(r["load"]) for r in rows if r["load"] != "closed")
    return ImportResult(closed, formats, dict(aside), assumed, rows, notes=[*notes, *repeats(paths, rows)])


def unmapped_lines(rows: list[dict[str, Any]], catalog: Catalog) -> list[str]:
    """One warning line naming the rows whose device, model or precision is not in the catalog
    (``[]`` when every row maps)."""
    bad: Counter[str] = Counter()
    n_bad = 0
    for r in rows:
        why = []
        if r.get("device") not in catalog.devices:
            why.append(f"device {r.get('device')!r}")
        if r.get("model") not in catalog.models:
            why.append(f"model {r.get('model')!r}")
        if r.get("precision") not in PRECISIONS:
            why.append(f"precision {r.get('precision')!r}")
        if why:
            n_bad += 1
            bad.update(why)
    if not n_bad:
        return []
    names = ", ".join(f"{k} ({v} row{'' if v == 1 else 's'})" for k, v in sorted(bad.items(), key=lambda x: (-x[1], x[0])))
    return [f"warning: {n_bad} of {len(rows)} rows do not map to the catalog and cannot be predicted: {names}"]
