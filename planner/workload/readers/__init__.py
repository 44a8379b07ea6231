"""Trace readers, one module per format, and format auto-detection.

``read_trace(path, format=None, columns=None, on_bad_row="error")`` returns a
:class:`~planner.workload.log.RequestLog` for request logs, or a
:class:`~planner.workload.readers.servegen.ServeGenAggregate` for ServeGen files.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from planner.errors import InputError, Problem
from planner.workload.log import WRONG_FORMAT_FIX, OnBadRow, RequestLog
from planner.workload.readers.azure import read_azure
from planner.workload.readers.generic import read_generic
from planner.workload.readers.lengths import read_lengths
from planner.workload.readers.mooncake import read_mooncake
from planner.workload.readers.servegen import ServeGenAggregate, read_servegen
from planner.workload.readers.tracelab import read_tracelab

FORMATS = ("azure", "mooncake", "lengths", "tracelab", "servegen", "generic")


def _first_line(path: Path) -> str:
    with path.open("r", encoding="utf-8-sig", errors="replace") as fh:
        for line in fh:
            if line.strip():
                return line.strip()
    return ""


def detect_format(path: Path, columns: dict[str, str] | None = None) -> str:
    """Guess the format from the file name and its first line; ``--format`` overrides."""
    name = path.name.lower()
    if name.endswith("-trace.csv") or name.endswith("-dataset.json"):
        return "servegen"
    if columns:
        return "generic"
    if path.suffix.lower() in (".parquet", ".pq"):
        return "generic"
    if not path.is_file():
        raise InputError(Problem(file=str(path), path="", message="file not found", fix="check the path"))
    if path.stat().st_size == 0:
        raise InputError(Problem(file=str(path), path="", message="the file is empty", fix="give a log with at least one request row"))
    first = _first_line(path)
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except (json.JSONDecodeError, RecursionError, ValueError):
            obj = {}
        keys = set(obj) if isinstance(obj, dict) else set()
        if {"input_tokens_total", "timing_events"} & keys:
            return "tracelab"
        if {"input_length", "output_length"} <= keys:
            return "mooncake"
    else:
        header = {c.strip().strip("\"") for c in first.split(",")}
        if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= header:
            return "azure"
        if {"num_prefill_tokens", "num_decode_tokens"} <= header:
            return "lengths"
        if {"window_start_s", "rate_rps"} <= header:  # a fleet rate file: windows, no requests
            raise InputError(Problem(
                file=str(path), path="",
                message="this is a fleet rate file (window_start_s, rate_rps per window: arrival rates over days, no per-request "
                        "lengths), not a request log that `planner characterize` or traffic.trace reads",
                fix="plan over time with it: give it as horizon.demand.fleet_file in the instance and run `planner horizon INSTANCE` "
                    "(as instances/fleet-horizon.yaml does)"))
    raise InputError(
        Problem(
            file=str(path),
            path="",
            message=f"cannot tell the log format from its first line ({first[:80]!r})",
            fix=f"pass --format ({', '.join(FORMATS)}); for other layouts use --format generic --columns time=..,input=..,output=..",
        )
    )


def read_trace(
    path: Path,
    fmt: str | None = None,
    columns: dict[str, str] | None = None,
    on_bad_row: OnBadRow = "error",
    service_column: str | None = None,
) -> RequestLog | ServeGenAggregate:
    """Read any supported log; ``service_column`` names the column that splits services."""
    if not path.is_file():
        raise InputError(Problem(file=str(path), path="", message="file not found", fix="check the path"))
    fmt = fmt or detect_format(path, columns)
    if fmt not in FORMATS:
        raise InputError(Problem(file=str(path), path="format", message=f"unknown format {fmt!r}", fix=f"use one of: {', '.join(FORMATS)}"))
    if columns and fmt != "generic":
        raise InputError(Problem(file=str(path), path="columns", message=f"a column mapping is only used by the generic reader, not {fmt!r}", fix="drop --columns or use --format generic"))
    if fmt == "servegen":
        if service_column:
            raise InputError(Problem(file=str(path), path="service_column", message="ServeGen files describe one client each; they have no service column", fix="drop the service column"))
        return read_servegen(path)
    if fmt == "generic":
        return read_generic(path, columns or {}, on_bad_row, service_column)
    reader = {"azure": read_azure, "mooncake": read_mooncake, "lengths": read_lengths, "tracelab": read_tracelab}[fmt]
    try:
        return reader(path, on_bad_row, service_column)
    except InputError as exc:
        if not any(p.fix == WRONG_FORMAT_FIX for p in exc.problems):
            raise
        fix = _format_fix(path, fmt)
        raise InputError([dataclasses.replace(p, fix=fix) if p.fix == WRONG_FORMAT_FIX else p for p in exc.problems]) from None


def _format_fix(path: Path, fmt: str) -> str:
    """The fix of a log read with the wrong format: the format auto-detection finds, when it finds another one."""
    try:
        guess = detect_format(path)
    except InputError as exc:  # e.g. a fleet rate file, which is no request log in any format
        if exc.problems and "fleet rate file" in exc.problems[0].message:
            return f"it is a fleet rate file, not a request log: {exc.problems[0].fix}"
        return WRONG_FORMAT_FIX
    except (OSError, ValueError):
        return WRONG_FORMAT_FIX
    return f"the file looks like the {guess} format: use --format {guess}, or drop --format to detect it" if guess != fmt else WRONG_FORMAT_FIX


__all__ = ["FORMATS", "RequestLog", "ServeGenAggregate", "detect_format", "read_trace"]
