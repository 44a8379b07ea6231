"""Shared low-level reading: CSV/JSONL/Parquet into Arrow, and value coercion that marks bad values.

Reading is vectorised (pyarrow's multithreaded CSV/JSON readers): memory holds the columns
and nothing per row in Python, which is what lets a 10-million-row log fit in a few GB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from planner.errors import InputError, Problem
from planner.workload.log import BadRow, TimestampKind


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    """``(line number, object)`` for each non-blank line of a JSON Lines file (1-based).

    A line that is not JSON, or not a JSON object, comes back as a :class:`BadRow` naming the
    line and the reason, so each reader applies its own ``--on-bad-row`` policy.
    """
    import json

    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield n, BadRow(line=n, reason=f"not JSON ({exc.msg}): {line.strip()[:60]!r}")
                continue
            if not isinstance(obj, dict):
                yield n, BadRow(line=n, reason="not a JSON object")
                continue
            yield n, obj

TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass
class RawTable:
    table: pa.Table
    invalid: list[BadRow]
    """Rows the parser rejected (wrong number of fields, broken JSON)."""
    first_data_line: int
    """1-based file line of the first data row."""

    def line_of(self, row: int) -> int | None:
        """File line of a parsed row position, accounting for rejected rows before it."""
        line = row + self.first_data_line
        known = sorted(b.line for b in self.invalid if b.line is not None)
        if len(known) != len(self.invalid):
            return None if self.invalid else line
        for rejected in known:
            if rejected <= line:
                line += 1
        return line


def _locate_lines(path: Path, texts: list[str]) -> dict[str, int]:
    """Line numbers of rejected rows (the parser reports their text, not their position)."""
    wanted = set(texts)
    found: dict[str, int] = {}
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            text = line.rstrip("\r\n")
            if text in wanted and text not in found:
                found[text] = n
                if len(found) == len(wanted):
                    break
    return found


def read_csv(path: Path, *, header: bool = True, column_names: list[str] | None = None, as_text: list[str] | None = None) -> RawTable:
    """Read a CSV with pyarrow; rows with the wrong number of fields are collected, not fatal."""
    import pyarrow.csv as pcsv

    rejected: list[str] = []

    def handler(row: pcsv.InvalidRow) -> str:
        rejected.append(row.text or "")
        return "skip"

    if path.stat().st_size == 0:
        raise InputError(Problem(file=str(path), path="", message="the file is empty", fix="give a log with a header and at least one request row"))
    read_opts = pcsv.ReadOptions(autogenerate_column_names=not header and column_names is None, column_names=column_names)
    convert = pcsv.ConvertOptions(column_types={c: pa.string() for c in (as_text or [])}, strings_can_be_null=True)
    try:
        table = pcsv.read_csv(path, read_options=read_opts, parse_options=pcsv.ParseOptions(invalid_row_handler=handler), convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        raise InputError(Problem(file=str(path), path="", message=f"cannot read as CSV: {str(exc).splitlines()[0]}", fix="check the file is a comma-separated log with a header row")) from None
    table = table.rename_columns([c.strip() for c in table.column_names])
    invalid: list[BadRow] = []
    if rejected:
        lines = _locate_lines(path, rejected)
        invalid = [BadRow(line=lines.get(t), reason=f"wrong number of fields: {t[:80]!r}") for t in rejected]
    return RawTable(table=table, invalid=invalid, first_data_line=2 if header else 1)


def read_jsonl(path: Path) -> RawTable:
    """Read JSON Lines with pyarrow; on a broken line, fall back to a line-by-line read that names it."""
    import pyarrow.json as pjson

    if path.stat().st_size == 0:
        raise InputError(Problem(file=str(path), path="", message="the file is empty", fix="give a JSON Lines log with one request object per line"))
    try:
        table = pjson.read_json(path)
        return RawTable(table=table, invalid=[], first_data_line=1)
    except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError):
        pass
    rows: list[dict[str, object]] = []
    invalid: list[BadRow] = []
    line_rows: list[int] = []
    for n, obj in json_lines(path):
        if isinstance(obj, BadRow):
            invalid.append(obj)
            continue
        rows.append(obj)
        line_rows.append(n)
    table = pa.Table.from_pylist(rows) if rows else pa.table({})
    raw = RawTable(table=table, invalid=invalid, first_data_line=1)
    mapping = np.asarray(line_rows)
    raw.line_of = lambda row: int(mapping[row]) if row < len(mapping) else None  # type: ignore[method-assign]
    return raw


def read_parquet(path: Path) -> RawTable:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(Problem(file=str(path), path="", message=f"cannot read as Parquet: {exc}", fix="check the file")) from None
    return RawTable(table=table, invalid=[], first_data_line=1)


def to_float(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pd.Series | None]:
    """Numbers as float64 with NaN for missing/unparsable values; the text kept only when some failed."""
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type):
        arr = col.to_numpy(zero_copy_only=False)
        return np.asarray(arr, dtype=np.float64), None
    text = pd.Series(col.to_pandas(), dtype="object")
    num = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return num, (text if np.isnan(num).any() else None)


@dataclass
class Times:
    seconds: np.ndarray
    """Seconds from the smallest valid time (NaN where unparsable)."""
    kind: TimestampKind
    quantum_s: float | None
    text: pd.Series | None


def _gcd_step(ints: np.ndarray) -> int:
    """Greatest common divisor of all differences: the finest step the timestamps can express."""
    if len(ints) < 2:
        return 0
    return int(np.gcd.reduce(np.abs(np.diff(ints))))


def to_times(col: pa.ChunkedArray | pa.Array, unit: str = "s") -> Times:
    """Arrival times from a timestamp, a date-time string or a number (``unit`` for numbers).

    Date-times with an offset or ``Z`` are *zoned*, others *naive* (wall clock of an unknown
    zone, usable for differences only); numbers are *relative*.
    """
    typ = col.type
    text: pd.Series | None = None
    if pa.types.is_timestamp(typ):
        kind: TimestampKind = "zoned" if typ.tz is not None else "naive"
        ns = col.cast(pa.timestamp("ns", tz=typ.tz)).cast(pa.int64()).to_numpy(zero_copy_only=False)
        valid = ~np.isnan(ns) if ns.dtype.kind == "f" else np.ones(len(ns), dtype=bool)
        ints = ns[valid].astype(np.int64) if ns.dtype.kind == "f" else ns
        scale = 1e-9
    elif pa.types.is_integer(typ) or pa.types.is_floating(typ):
        kind = "relative"
        values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        if unit not in TIME_UNITS_S:
            raise InputError(f"unknown time unit {unit!r} (use one of {', '.join(TIME_UNITS_S)})")
        scale = TIME_UNITS_S[unit]
        valid = ~np.isnan(values)
        vv = values[valid]
        if pa.types.is_integer(typ) or np.all(vv == np.round(vv)):
            ints = vv.astype(np.int64)
        else:
            ints = np.empty(0, dtype=np.int64)
        ns = values
    else:
        text = pd.Series(col.to_pandas(), dtype="object")
        parsed = pd.to_datetime(text, errors="coerce", format="mixed")
        zoned = getattr(parsed.dtype, "tz", None) is not None
        if not zoned and parsed.isna().all():
            parsed_utc = pd.to_datetime(text, errors="coerce", format="mixed", utc=True)
            if parsed_utc.notna().any():
                parsed, zoned = parsed_utc, True
        kind = "zoned" if zoned else "naive"
        valid = parsed.notna().to_numpy()
        ns = np.where(valid, parsed.to_numpy(dtype="datetime64[ns]").astype(np.int64) if not zoned else parsed.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype(np.int64), 0).astype(np.float64)
        ns[~valid] = np.nan
        ints = ns[valid].astype(np.int64)
        scale = 1e-9
        if bool(valid.all()):
            text = None
    seconds = np.full(len(valid), np.nan)
    if valid.any():
        vals = np.asarray(ns, dtype=np.float64)[valid] if ns.dtype.kind == "f" else ns[valid].astype(np.float64)
        if ints.size == valid.sum() and ints.size > 0:
            base = int(ints.min())
            seconds[valid] = (ints - base).astype(np.float64) * scale
        else:
            seconds[valid] = (vals - vals.min()) * scale
    step = _gcd_step(ints) if ints.size else 0
    quantum = step / round(1.0 / scale) if step > 0 else None
    if quantum is not None and not math.isfinite(quantum):
        quantum = None
    return Times(seconds=seconds, kind=kind, quantum_s=quantum, text=text)


def column(table: pa.Table, name: str) -> pa.ChunkedArray:
    return table.column(name)


def noop_line(_: int) -> int | None:
    return None


LineOf = Callable[[int], "int | None"]
