"""TraceLab coding-agent rounds (JSON Lines): one LLM call ("round") per line, with its tool calls.

Per round: ``input_tokens_total`` (= ``prefix_tokens`` + ``newly_append_tokens``),
``output_tokens``, ``session_id``, ``round_index``, ``timing_events`` (ISO times) and
``tools`` (``tool_name``, ``tool_wall_latency_ms``, ``tool_internal_latency_ms``, ``is_error``).

- arrival of a round = its earliest timing event (the user message or tool result that starts it);
- cached prefix: ``cached_tokens = prefix_tokens``, basis ``input_tokens_total``;
- effective tool latency (TraceLab's convention) = internal latency when present and > 0,
  else wall latency (``result_at - emitted_at``);
- timeouts: counted only when a tool record says so (``is_timeout`` / ``timed_out``); the
  published rows have no such field, so their timeout share is 0 *as observed*, not measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem
from planner.workload.log import MAX_TOKENS, BadRow, OnBadRow, RequestLog, finish_log
from planner.workload.readers._table import json_lines

REQUIRED = ("input_tokens_total", "output_tokens")


def _num(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        return float("nan")
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range: reported as not finite
        return float("inf")
    except (TypeError, ValueError):
        return float("nan")


def read_tracelab(path: Path, on_bad_row: OnBadRow, service_column: str | None = None) -> RequestLog:
    if path.stat().st_size == 0:
        raise InputError(Problem(file=str(path), path="", message="the file is empty", fix="give a TraceLab round_trace JSON Lines file"))
    rows: list[dict[str, Any]] = []
    tool_rows: list[dict[str, Any]] = []
    invalid: list[BadRow] = []
    lines: list[int] = []
    raw_text: dict[str, list[Any]] = {"input_tokens": [], "output_tokens": [], "arrival_s": []}
    has_timeout_field = False
    for n, obj in json_lines(path):
        if isinstance(obj, BadRow):
            invalid.append(obj)
            continue
        missing = [k for k in REQUIRED if k not in obj]
        if missing and not rows and not invalid:
            raise InputError(Problem(file=str(path), path="", message=f"missing field(s) for the tracelab format: {', '.join(missing)} (line {n})", fix="choose the right --format"))
        events = obj.get("timing_events")
        events = events if isinstance(events, list) else []
        stamps = [str(e["timestamp"]) for e in events if isinstance(e, dict) and e.get("timestamp")]
        start = min(stamps) if stamps else None
        position = len(rows)
        rows.append(
            {
                "input_tokens": _num(obj.get("input_tokens_total")),
                "output_tokens": _num(obj.get("output_tokens")),
                "cached_tokens": _num(obj.get("prefix_tokens")) if obj.get("prefix_tokens") is not None else 0.0,
                "cache_basis_tokens": _num(obj.get("input_tokens_total")),
                "appended_tokens": _num(obj.get("newly_append_tokens")) if obj.get("newly_append_tokens") is not None else np.nan,
                "session": str(obj.get("session_id", "")),
                **({"service": str(obj.get(service_column, ""))} if service_column else {}),
                "start": start,
            }
        )
        raw_text["input_tokens"].append(obj.get("input_tokens_total"))
        raw_text["output_tokens"].append(obj.get("output_tokens"))
        raw_text["arrival_s"].append(start)
        lines.append(n)
        tools_field = obj.get("tools")
        for tool in tools_field if isinstance(tools_field, list) else []:
            if not isinstance(tool, dict):
                continue
            internal = _num(tool.get("tool_internal_latency_ms"))
            wall = _num(tool.get("tool_wall_latency_ms"))
            latency = internal if internal > 0 else wall
            timeout = tool.get("is_timeout", tool.get("timed_out"))
            has_timeout_field = has_timeout_field or timeout is not None
            tool_rows.append(
                {
                    "request": position,
                    "tool": str(tool.get("tool_name") or "unknown"),
                    "latency_ms": latency,
                    "is_error": bool(tool.get("is_error")),
                    "is_timeout": bool(timeout),
                }
            )
    if not rows and not invalid:
        raise InputError(Problem(file=str(path), path="", message="the file holds no rounds", fix="give a TraceLab round_trace JSON Lines file"))
    df = pd.DataFrame(rows)
    starts = pd.DatetimeIndex(pd.to_datetime(df.pop("start"), errors="coerce", utc=True, format="ISO8601")) if len(df) else pd.DatetimeIndex([], tz="UTC")
    no_start = np.asarray(starts.isna())
    ns = np.asarray(starts.tz_convert(None).as_unit("ns").asi8, dtype=np.float64)
    ns[no_start] = np.nan
    df["arrival_s"] = (ns - np.nanmin(ns)) * 1e-9 if len(df) and not np.isnan(ns).all() else ns
    tools = pd.DataFrame(tool_rows, columns=["request", "tool", "latency_ms", "is_error", "is_timeout"]).astype({"request": np.int64})
    appended = df["appended_tokens"].to_numpy(dtype=np.float64) if "appended_tokens" in df.columns else np.zeros(0)
    odd = ~np.isnan(appended) & ~((appended >= 0) & (appended <= MAX_TOKENS))
    if odd.any():  # only used for session statistics: left out there, with a note
        df["appended_tokens"] = np.where(odd, np.nan, appended)
    log = RequestLog(source=str(path), format="tracelab", frame=df, timestamps="zoned", time_quantum_s=1e-3, tools=tools)
    if odd.any():
        log.notes.append(f"{int(odd.sum())} round(s) have a newly_append_tokens that is negative, not finite or over {MAX_TOKENS:.0e}: left out of the session statistics")
    if tool_rows and not has_timeout_field:
        log.notes.append("tool records have no timeout field: timeout share is reported as 0 (not observed, not measured)")
    bad_tools = tools["latency_ms"].isna() | (tools["latency_ms"] < 0)
    if bool(bad_tools.any()):
        log.notes.append(f"{int(bad_tools.sum())} tool call(s) without a usable latency are left out of the latency statistics")
    text = {k: pd.Series(v, dtype="object") for k, v in raw_text.items()}
    mapping = np.asarray(lines)
    return finish_log(log, text, lambda i: int(mapping[i]) if i < len(mapping) else None, on_bad_row, invalid)
