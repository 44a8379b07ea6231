"""Shared low-level reading: CSV/JSONL/Parquet into Arrow, and value coercion that marks bad values.

Reading is vectorised (pyarrow's multithreaded CSV/JSON readers): memory holds the columns
and nothing per row in Python, which is what lets a 10-million-row log fit in a few GB.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from planner.errors import InputError, Problem
from planner.workload.log import BadRow, TimestampKind

MAX_JSON_DEPTH = 64
"""Deepest nesting of a JSON line the readers accept (a request object needs 2 or 3)."""


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    """``(line number, object)`` for each non-blank line of a JSON Lines file (1-based).

    A line that is not JSON, not a JSON object, or nested too deeply for the parser, comes back
    as a :class:`BadRow` naming the line and the reason, so each reader applies its own
    ``--on-bad-row`` policy. Streams: one line in memory at a time. A UTF-8 byte-order mark is
    skipped.
    """
    import json

    with path.open("r", encoding="utf-8-sig", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield n, BadRow(line=n, reason=f"not JSON ({exc.msg}): {line.strip()[:60]!r}")
                continue
            except RecursionError:
                yield n, BadRow(line=n, reason="JSON nested too deeply to read")
                continue
            except ValueError as exc:  # e.g. an integer literal with more digits than Python converts
                yield n, BadRow(line=n, reason=f"not usable JSON ({str(exc)[:80]})")
                continue
            if not isinstance(obj, dict):
                yield n, BadRow(line=n, reason="not a JSON object")
                continue
            yield n, obj


def json_depth_bound(path: Path, chunk_bytes: int = 1 << 24) -> int:
    """An upper bound on the nesting depth of any line: its count of ``{`` and ``[`` bytes.

    Brackets inside strings only raise the bound, so a file under :data:`MAX_JSON_DEPTH` is
    safe for pyarrow's JSON reader (which crashes the process on very deep nesting). Reads
    the file in chunks (memory bounded by ``chunk_bytes``), vectorised.
    """
    best = carry = 0
    with path.open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            a = np.frombuffer(chunk, dtype=np.uint8)
            opens = np.flatnonzero((a == 0x7B) | (a == 0x5B))
            nl = np.flatnonzero(a == 0x0A)
            # opens per line: those before each newline, minus those before the previous one
            per = np.diff(np.searchsorted(opens, nl), prepend=0)
            if per.size:
                per[0] += carry
                best = max(best, int(per.max()))
                carry = int(opens.size - np.searchsorted(opens, nl[-1]))
            else:
                carry += int(opens.size)
                best = max(best, carry)
    return max(best, carry)


def json_lines_are_objects(path: Path, chunk_bytes: int = 1 << 24) -> bool:
    """Whether every line that is not blank starts (after white space) with ``{``.

    pyarrow's JSON reader crashes the process (a segmentation fault, pyarrow 17–21) on a block of
    the file whose rows are all ``null``: a file that is the four bytes ``null``, or 1 MB of
    objects followed by 1 MB of ``null`` lines. Files whose every line opens an object are what it
    is given; the rest go to the line-by-line read, which reports such lines as bad rows. Reads the
    file in chunks cut at line ends (memory bounded by ``chunk_bytes`` plus one line), vectorised.
    """
    space = np.zeros(256, dtype=bool)
    space[[0x20, 0x09, 0x0D, 0x0A, 0x0C, 0x0B]] = True
    rest = b""
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(chunk_bytes)
            data = rest + chunk
            if chunk:
                cut = data.rfind(b"\n") + 1
                data, rest = data[:cut], data[cut:]
                if not data:
                    continue
            if not data:
                return True
            a = np.frombuffer(data, dtype=np.uint8)
            starts = np.concatenate([[0], np.flatnonzero(a == 0x0A) + 1])
            ends = np.append(starts[1:] - 1, len(a))         # each line's newline (or the data's end)
            solid = np.flatnonzero(~space[a])                 # bytes that are not white space
            if not len(solid):                                # only blank lines
                if not chunk:
                    return True
                continue
            j = np.searchsorted(solid, starts)
            first = np.where(j < len(solid), solid[np.minimum(j, len(solid) - 1)], len(a))
            filled = first < ends                             # the line is not blank
            if bool((a[first[filled]] != 0x7B).any()):
                return False
            if not chunk:
                return True


TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass
class RawTable:
    table: pa.Table
    invalid: list[BadRow]
    """Rows the parser rejected (wrong number of fields, broken JSON)."""
    first_data_line: int
    """1-based file line of the first data row."""
    notes: list[str] = field(default_factory=list)
    """What the reader did that the user should know (e.g. unusable block-id lists)."""

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
        # never raise here: pyarrow calls this from C and would only print the exception ("ignored")
        try:
            rejected.append(row.text or "")
        except (UnicodeDecodeError, ValueError):
            rejected.append(f"<row {row.number} is not UTF-8 text>" if row.number is not None else "<a row that is not UTF-8 text>")
        return "skip"

    if path.stat().st_size == 0:
        raise InputError(Problem(file=str(path), path="", message="the file is empty", fix="give a log with a header and at least one request row"))
    read_opts = pcsv.ReadOptions(autogenerate_column_names=not header and column_names is None, column_names=column_names)
    convert = pcsv.ConvertOptions(column_types={c: pa.string() for c in (as_text or [])}, strings_can_be_null=True)
    # A rejected row that is not UTF-8 fails inside pyarrow's own wrapper, before ``handler`` runs
    # (it decodes the row's text to build ``InvalidRow``); pyarrow can only print such an exception
    # ("Exception ignored in ...") and then stops with a parse error. Catch it here instead, so the
    # user sees one line that says what is wrong with the file.
    undecodable: list[BaseException] = []
    previous_hook = sys.unraisablehook

    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, UnicodeDecodeError):
            undecodable.append(info.exc_value)
        else:
            previous_hook(info)

    sys.unraisablehook = unraisable
    try:
        table = pcsv.read_csv(path, read_options=read_opts, parse_options=pcsv.ParseOptions(invalid_row_handler=handler), convert_options=convert)
        table = table.rename_columns([c.strip() for c in table.column_names])
    except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        if undecodable:
            raise InputError(Problem(file=str(path), path="", message=f"a row with the wrong number of fields is not UTF-8 text ({str(exc).splitlines()[0][:120]})",
                                     fix="save the log as UTF-8 and give every row the header's fields")) from None
        raise InputError(Problem(file=str(path), path="", message=f"cannot read as CSV: {str(exc).splitlines()[0][:160]}", fix="check the file is a comma-separated log with a header row")) from None
    except UnicodeDecodeError:
        raise InputError(Problem(file=str(path), path="", message="is not UTF-8 text (in its header row)", fix="save the log as UTF-8")) from None
    finally:
        sys.unraisablehook = previous_hook
    for i, name in enumerate(table.column_names):  # cells that are not UTF-8 come back as bytes: text with U+FFFD
        if pa.types.is_binary(table.schema.field(i).type) or pa.types.is_large_binary(table.schema.field(i).type):
            table = table.set_column(i, name, pa.array(text_series(table.column(i)).map(lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else v), type=pa.string()))
    invalid: list[BadRow] = []
    if rejected:
        lines = _locate_lines(path, rejected)
        invalid = [BadRow(line=lines.get(t), reason=f"wrong number of fields: {t[:80]!r}") for t in rejected]
    return RawTable(table=table, invalid=invalid, first_data_line=2 if header else 1)


def _scalar_ok(typ: pa.DataType) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)
                or pa.types.is_timestamp(typ) or pa.types.is_null(typ) or pa.types.is_boolean(typ))


def _ids_ok(typ: pa.DataType) -> bool:
    return bool((pa.types.is_list(typ) or pa.types.is_large_list(typ)) and pa.types.is_integer(typ.value_type))


def read_jsonl(path: Path, scalars: list[str] | None = None, ids: list[str] | None = None) -> RawTable:
    """Read the fields ``scalars`` (numbers, strings or times) and ``ids`` (lists of block ids)
    of a JSON Lines file; ``None`` scalars = every top-level field.

    Fast path: pyarrow's multithreaded reader, used only when no line can nest deeper than
    :data:`MAX_JSON_DEPTH` (:func:`json_depth_bound`), every line opens an object
    (:func:`json_lines_are_objects`: pyarrow crashes on a block of ``null`` rows) and every wanted
    field has one usable type.
    Otherwise a streaming line-by-line read (:func:`_jsonl_fields`) that keeps only the wanted
    fields, with their line numbers: a value of the wrong type (``true``, a list, an object)
    becomes a text marker such as ``'<list>'`` that the checks report as a bad value, numbers
    written as text stay text (read as numbers later), other fields are never looked at.
    """
    import pyarrow.json as pjson

    if path.stat().st_size == 0:
        raise InputError(Problem(file=str(path), path="", message="the file is empty", fix="give a JSON Lines log with one request object per line"))
    ids = list(ids or [])
    with path.open("rb") as fh:
        bom = fh.read(3) == b"\xef\xbb\xbf"
    if not bom and json_depth_bound(path) <= MAX_JSON_DEPTH and json_lines_are_objects(path):
        try:
            table = pjson.read_json(path)
        except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            table = None
        if table is not None:
            try:
                names = set(table.column_names)
            except UnicodeDecodeError:  # a key that is not UTF-8: the line-by-line read replaces it
                return _jsonl_fields(path, scalars, ids)
            wanted_scalars = [c for c in (scalars if scalars is not None else table.column_names) if c in names and c not in ids]
            usable = all(_scalar_ok(table.schema.field(c).type) for c in wanted_scalars) and all(
                _ids_ok(table.schema.field(c).type) for c in ids if c in names)
            if usable:
                keep = wanted_scalars + [c for c in ids if c in names]
                return RawTable(table=table.select(keep), invalid=[], first_data_line=1)
    return _jsonl_fields(path, scalars, ids)


def _marker(value: object) -> str:
    if isinstance(value, bool):
        return f"<{str(value).lower()}>"
    if isinstance(value, list):
        return "<list>"
    if isinstance(value, dict):
        return "<object>"
    return f"<{type(value).__name__}>"


def _scalar_column(values: list[object]) -> pa.Array:
    """Floats when every value is a number or missing; otherwise text (numbers as their JSON
    text, wrong types as a marker) for the checks to read and quote."""
    if all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            if v is not None:
                try:
                    out[i] = float(v)  # type: ignore[arg-type]
                except OverflowError:  # an integer beyond float range
                    out[i] = math.inf if v > 0 else -math.inf  # type: ignore[operator]
        return pa.array(out, mask=np.array([v is None for v in values], dtype=bool))
    text = [None if v is None else v if isinstance(v, str) else _marker(v) if isinstance(v, bool | list | dict) else str(v) for v in values]
    return pa.array(text, type=pa.string())


def _jsonl_fields(path: Path, scalars: list[str] | None, ids: list[str]) -> RawTable:
    """Streaming read of the wanted fields (see :func:`read_jsonl`); memory holds those fields only."""
    invalid: list[BadRow] = []
    line_rows: list[int] = []
    columns: dict[str, list[object]] = {}
    id_lists: dict[str, list[list[int]]] = {c: [] for c in ids}
    intern: dict[object, int] = {}
    seen_ids: set[str] = set()
    odd_ids: dict[str, int] = {}
    for n, obj in json_lines(path):
        if isinstance(obj, BadRow):
            invalid.append(obj)
            continue
        row = len(line_rows)
        line_rows.append(n)
        names = scalars if scalars is not None else [k for k in obj if k not in id_lists]
        for name in names:
            if name in id_lists:
                continue
            col = columns.get(name)
            if col is None:
                col = columns[name] = [None] * row
            col.append(obj.get(name))
        for col in columns.values():  # fields this line lacks
            if len(col) < row + 1:
                col.append(None)
        for name, lists in id_lists.items():
            value = obj.get(name)
            if name in obj:
                seen_ids.add(name)
            block: list[int] = []
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, bool) or not isinstance(item, int | str):
                        block = []
                        break
                    block.append(intern.setdefault(item, len(intern)))
            if name in obj and value is not None and (not isinstance(value, list) or (value and not block)):
                odd_ids[name] = odd_ids.get(name, 0) + 1
            lists.append(block)
    raw_notes = [f"{count} row(s) have a {name} that is not a list of block ids: no prefix reuse is counted for them"
                 for name, count in odd_ids.items()]
    arrays: dict[str, pa.Array] = {}
    for name, values in columns.items():
        if scalars is not None and all(v is None for v in values):
            continue  # a wanted field no line has: reported as a missing column
        arrays[name] = _scalar_column(values)
    for name, lists in id_lists.items():
        if name in seen_ids:
            arrays[name] = pa.array(lists, type=pa.list_(pa.int64()))
    table = pa.table(arrays) if arrays else pa.table({})
    raw = RawTable(table=table, invalid=invalid, first_data_line=1, notes=raw_notes)
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


def text_series(col: pa.ChunkedArray | pa.Array) -> pd.Series:
    """A column as Python objects (text stays text); bytes that are not UTF-8 are replaced
    (U+FFFD), never a decode error."""
    try:
        return pd.Series(col.to_pandas(), dtype="object")
    except (pa.ArrowException, UnicodeDecodeError):
        values = col.cast(pa.binary()).to_pylist() if (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) else col.to_pylist()
        return pd.Series([v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values], dtype="object")


def to_float(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pd.Series | None]:
    """Numbers as float64 with NaN for missing/unparsable values; the text kept only when some failed.

    Numbers written as text (``"123"``) are read as numbers; ``true``/``false`` are not numbers
    (NaN, quoted as such). Infinite values stay infinite: :func:`planner.workload.log.finish_log`
    reports them.
    """
    if pa.types.is_boolean(col.type):
        text = text_series(col).map(lambda v: None if v is None else str(v).lower())
        return np.full(len(col), np.nan), text
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        arr = col.to_numpy(zero_copy_only=False)
        return np.asarray(arr, dtype=np.float64), None
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_null(col.type)):
        text = pd.Series([None if v is None else f"<{col.type}>" for v in col.to_pylist()], dtype="object")
        return np.full(len(col), np.nan), text
    text = text_series(col)
    num = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return num, (text if np.isnan(num).any() else None)


@dataclass
class Times:
    seconds: np.ndarray
    """Seconds from the smallest valid time (NaN where unparsable or not finite)."""
    kind: TimestampKind
    quantum_s: float | None
    text: pd.Series | None
    notes: list[str] = field(default_factory=list)


EPOCH_UNIT_THRESHOLDS: tuple[tuple[float, str], ...] = ((1e17, "ns"), (1e14, "us"), (1e11, "ms"))
"""Numeric times whose median is at least this are epoch times in that unit when no unit is
given: 1e11 s would be the year 5138, while 1e11 ms is 1973 and 1.7e12 ms is 2023."""
MAX_TIME_S = 1e12
"""A numeric time beyond this many seconds (about 31,700 years) is not a time: the row is bad."""
_EXACT_INT = 2.0**53
"""Largest magnitude at which every integer is a float64 (the gcd quantum needs exact values)."""
_ZONED = r"(?:[zZ]|[+-]\d{2}:?\d{2})\s*$"


def _gcd_step(ints: np.ndarray) -> int:
    """Greatest common divisor of all differences: the finest step the timestamps can express."""
    if len(ints) < 2:
        return 0
    return int(np.gcd.reduce(np.abs(np.diff(ints))))


def detect_time_unit(values: np.ndarray) -> tuple[str, str | None]:
    """The unit of numeric times given without one: seconds, unless the values are epoch
    milli-, micro- or nanoseconds by their size (:data:`EPOCH_UNIT_THRESHOLDS`); with a note."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return "s", None
    mid = float(np.quantile(np.abs(finite), 0.5, method="lower"))  # an order statistic: no overflow near 1e308
    for threshold, unit in EPOCH_UNIT_THRESHOLDS:
        if mid >= threshold:
            return unit, (f"numeric timestamps (median {mid:.4g}) are epoch {unit}, not seconds: read as {unit} "
                          f"(give the unit explicitly, e.g. --columns ...,time_unit=s, to override)")
    return "s", None


def to_times(col: pa.ChunkedArray | pa.Array, unit: str | None = "s") -> Times:
    """Arrival times from a timestamp, a date-time string or a number (``unit`` for numbers;
    ``None`` = detect epoch milli/micro/nanoseconds by size, else seconds, with a note).

    Date-times with an offset or ``Z`` are *zoned*, others *naive* (wall clock of an unknown
    zone, usable for differences only); a column mixing both is read with naive values taken
    as UTC (a note says so); numbers are *relative*. Values that are not finite are invalid
    (NaN). Memory follows the number of values only.
    """
    typ = col.type
    text: pd.Series | None = None
    notes: list[str] = []
    if pa.types.is_timestamp(typ):
        kind: TimestampKind = "zoned" if typ.tz is not None else "naive"
        raw_int = col.cast(pa.int64())  # in the column's own unit: no out-of-range cast to ns
        valid = ~np.asarray(raw_int.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values = np.asarray(raw_int.to_numpy(zero_copy_only=False), dtype=np.float64)
        ints = np.asarray(raw_int.drop_null().to_numpy(zero_copy_only=False), dtype=np.int64)
        scale = TIME_UNITS_S[typ.unit]
    elif pa.types.is_integer(typ) or pa.types.is_floating(typ):
        kind = "relative"
        values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        if unit is None:
            unit, note = detect_time_unit(values)
            if note:
                notes.append(note)
        if unit not in TIME_UNITS_S:
            raise InputError(f"unknown time unit {unit!r} (use one of {', '.join(TIME_UNITS_S)})")
        scale = TIME_UNITS_S[unit]
        with np.errstate(over="ignore", invalid="ignore"):
            valid = np.isfinite(values) & (np.abs(values * scale) <= MAX_TIME_S)
        if bool(np.any(~valid & ~np.isnan(values))):  # quote the unusable numbers in messages
            text = pd.Series([None if np.isnan(v) else f"{v:g}" for v in values], dtype="object")
        vv = values[valid]
        exact = bool(np.all(np.abs(vv) < _EXACT_INT)) if vv.size else True
        ints = vv.astype(np.int64) if exact and (pa.types.is_integer(typ) or np.all(vv == np.round(vv))) else np.empty(0, dtype=np.int64)
    else:
        import pyarrow.compute as pc

        strings = col.cast(pa.string()) if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_null(typ) else None
        text = text_series(col)
        if strings is None:  # other types (lists, objects): nothing parses as a time
            text = text.map(lambda v: v if isinstance(v, str) else None)
        parsed = pd.to_datetime(text, errors="coerce", format="mixed", utc=True)
        valid = parsed.notna().to_numpy()
        zoned_mask = (np.asarray(pc.fill_null(pc.match_substring_regex(strings, _ZONED), False).to_numpy(zero_copy_only=False), dtype=bool)
                      if strings is not None else np.zeros(len(text), dtype=bool))
        n_zoned = int(np.count_nonzero(zoned_mask & valid))
        kind = "zoned" if valid.any() and n_zoned == int(valid.sum()) else "naive"
        if 0 < n_zoned < int(valid.sum()):
            notes.append(f"{n_zoned} of {int(valid.sum())} timestamps carry a time zone and the rest do not: the others were read as UTC")
        values = np.full(len(text), np.nan)
        ints = parsed[valid].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
        values[valid] = ints.astype(np.float64)
        scale = 1e-9
        if bool(valid.all()):
            text = None
    seconds = np.full(len(valid), np.nan)
    if valid.any():
        if ints.size == int(valid.sum()) and ints.size > 0:
            base = int(ints.min())
            seconds[valid] = (ints - base).astype(np.float64) * scale
        else:
            vals = values[valid]
            seconds[valid] = (vals - vals.min()) * scale
        seconds[~np.isfinite(seconds)] = np.nan
    step = _gcd_step(ints) if ints.size else 0
    quantum = step / round(1.0 / scale) if step > 0 else None
    if quantum is not None and not math.isfinite(quantum):
        quantum = None
    return Times(seconds=seconds, kind=kind, quantum_s=quantum, text=text, notes=notes)


def column(table: pa.Table, name: str) -> pa.ChunkedArray:
    return table.column(name)


LineOf = Callable[[int], "int | None"]
