"""Generic reader: CSV, JSON Lines or Parquet with a column mapping.

The mapping names which column holds what: ``time``, ``input``, ``output`` (required:
``input`` and ``output``), ``service``, ``session``, ``cached`` (input tokens served from a
prefix cache), the multimodal ``image_tokens`` / ``audio_tokens`` / ``video_tokens`` and ``*_count``
(encode phase, :mod:`planner.perf.encoder`) and ``time_unit`` (``s``, ``ms``, ``us``, ``ns`` for numeric times). Without a
unit, numeric times are seconds unless their size says epoch milli-, micro- or nanoseconds
(:func:`planner.workload.readers._table.detect_time_unit`, with a note). Times may be date-time
strings (naive or zoned, or a mix: naive read as UTC, with a note), Arrow timestamps, or numbers.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from planner.errors import InputError, Problem
from planner.workload.log import OnBadRow, RequestLog, check_columns, finish_log
from planner.workload.readers._table import (
    RawTable,
    read_csv,
    read_jsonl,
    read_parquet,
    text_series,
    to_float,
    to_times,
)

MAPPING_KEYS = {
    "time": "arrival time",
    "input": "input (prompt) tokens",
    "output": "output (generated) tokens",
    "service": "service name",
    "session": "session id",
    "cached": "input tokens served from a prefix cache",
    "time_unit": "unit of numeric times: s, ms, us or ns",
    "image_tokens": "image input tokens (encoder output, also counted in input)",
    "audio_tokens": "audio input tokens (encoder output, also counted in input)",
    "video_tokens": "video input tokens (encoder output, also counted in input)",
    "image_count": "images per request",
    "audio_count": "audio clips per request",
    "video_count": "videos per request",
}
MODALITY_KEYS: tuple[str, ...] = ("image_tokens", "audio_tokens", "video_tokens", "image_count", "audio_count", "video_count")
"""Optional multimodal columns: kept under these names (missing values read as 0), summarised by
:func:`planner.workload.characterize.log_modalities` for the encode phase."""


def parse_columns(text: str) -> dict[str, str]:
    """``time=ts,input=prompt_tokens,...`` into a mapping; unknown keys are errors."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise InputError(Problem(file="", path="--columns", message=f"{part!r} is not key=column", fix="write --columns time=ts,input=prompt,output=completion"))
        key, value = (s.strip() for s in part.split("=", 1))
        out[key] = value
    check_mapping(out, "", "--columns")
    return out


def check_mapping(mapping: dict[str, str], file: str, where: str) -> None:
    unknown = [k for k in mapping if k not in MAPPING_KEYS]
    if unknown:
        raise InputError(Problem(file=file, path=where, message=f"unknown column key(s) {', '.join(unknown)}", fix=f"use: {', '.join(MAPPING_KEYS)}"))


def read_raw(path: Path, fields: list[str] | None = None) -> RawTable:
    """The file as an Arrow table; for JSON Lines only ``fields`` are read (all when None)."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return read_jsonl(path, fields)
    if suffix in (".parquet", ".pq"):
        return read_parquet(path)
    return read_csv(path)


def log_from_table(
    raw: RawTable,
    path: Path,
    mapping: dict[str, str],
    fmt: str,
    on_bad_row: OnBadRow,
    *,
    keep: list[str] | None = None,
) -> RequestLog:
    """Build a :class:`RequestLog` from an Arrow table and a column mapping.

    ``keep`` names numeric columns a format reader computed itself (kept under their name).
    """
    table = raw.table
    present = list(table.column_names)
    wanted = {mapping[k]: MAPPING_KEYS[k] for k in ("time", "input", "output", "service", "session", "cached", *MODALITY_KEYS) if k in mapping}
    check_columns(str(path), present, wanted, fmt)
    frame: dict[str, object] = {}
    text: dict[str, pd.Series] = {}
    for key, name in (("input", "input_tokens"), ("output", "output_tokens"), ("cached", "cached_tokens")):
        if key in mapping:
            values, raw_text = to_float(table.column(mapping[key]))
            frame[name] = values
            if raw_text is not None:
                text[name] = raw_text
    if "cached" in mapping:
        frame["cache_basis_tokens"] = frame["input_tokens"]
    for key in MODALITY_KEYS:
        if key in mapping:
            frame[key] = to_float(table.column(mapping[key]))[0]
    for name in keep or []:
        frame[name] = to_float(table.column(name))[0]
    kind = "missing"
    quantum = None
    time_notes: list[str] = []
    if "time" in mapping:
        times = to_times(table.column(mapping["time"]), mapping.get("time_unit"))
        frame["arrival_s"] = times.seconds
        kind, quantum = times.kind, times.quantum_s
        time_notes = times.notes
        if times.text is not None:
            text["arrival_s"] = times.text
    for key in ("service", "session"):
        if key in mapping:
            col = text_series(table.column(mapping[key]))
            frame[key] = col.astype("string").fillna("").astype(object).to_numpy()
    df = pd.DataFrame(frame)
    log = RequestLog(source=str(path), format=fmt, frame=df, timestamps=kind, time_quantum_s=quantum)  # type: ignore[arg-type]
    log.notes.extend(time_notes + raw.notes)
    if kind == "missing":
        log.notes.append("the log has no timestamps: arrival rates cannot be measured from it")
    return finish_log(log, text, raw.line_of, on_bad_row, raw.invalid)


def read_generic(path: Path, mapping: dict[str, str], on_bad_row: OnBadRow, service_column: str | None = None) -> RequestLog:
    if service_column:
        mapping = {**mapping, "service": service_column}
    check_mapping(mapping, str(path), "columns")
    missing = [k for k in ("input", "output") if k not in mapping]
    if missing:
        raise InputError(
            Problem(
                file=str(path),
                path="columns",
                message=f"the generic reader needs a column mapping with {' and '.join(missing)}",
                fix="pass --columns time=..,input=..,output=.. (and service=.., session=.. if present)",
            )
        )
    fields = [mapping[k] for k in ("time", "input", "output", "service", "session", "cached", *MODALITY_KEYS) if k in mapping]
    return log_from_table(read_raw(path, fields), path, mapping, "generic", on_bad_row)
