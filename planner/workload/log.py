"""The request table every reader produces, and the checks every reader shares.

A :class:`RequestLog` is one tidy DataFrame, one row per request (one LLM call):

============================  ==========================================================
column                        meaning
============================  ==========================================================
``input_tokens``              prompt tokens (float64; counts, never negative)
``output_tokens``             generated tokens (float64)
``arrival_s`` (optional)      arrival time, seconds after the first arrival, ascending
``service`` (optional)        service name when a log holds several
``session`` (optional)        session / conversation id
``cached_tokens`` (optional)  input tokens whose KV an earlier request already built
``cache_basis_tokens``        the tokens ``cached_tokens`` is a share of (see readers)
============================  ==========================================================

Tool calls (agent logs) are a second table, one row per call: ``request`` (row position
in the request table), ``tool``, ``latency_ms``, ``is_error``, ``is_timeout``.

Readers convert raw values into numbers, marking unparsable ones as NaN; :func:`finish_log`
then reports every bad row at once (line numbers and the first examples) or drops them
(``on_bad_row="skip"``), rejects negative token counts and empty logs, and sorts
out-of-order arrivals (saying so in the notes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem

TimestampKind = Literal["naive", "zoned", "relative", "bucketed", "missing", "synthetic"]
OnBadRow = Literal["error", "skip"]
EXAMPLES_SHOWN = 5
"""How many bad rows an error message quotes."""
MAX_TOKENS = 1e8
"""A token count above this (100 million; 750 times the largest context window in the catalog)
cannot be a request: the row is bad, like a negative or non-numeric count."""
FAR_ARRIVAL_SPANS = 10.0
FAR_ARRIVAL_MIN_S = 86_400.0
"""An arrival is *far* (a bad row) when it lies more than ``max(FAR_ARRIVAL_SPANS x the span of
the 1st-99th percentile of arrivals, FAR_ARRIVAL_MIN_S)`` outside that range: e.g. one 1970
timestamp in a 20-minute log of 2023. Such a value would otherwise set the log's span (its mean
rate, its windows) by decades."""


@dataclass
class RequestLog:
    """One request log, read and checked; see the module docstring for the columns."""

    source: str
    format: str
    frame: pd.DataFrame
    timestamps: TimestampKind
    time_quantum_s: float | None = None
    """Finest step the timestamps can express (gcd of the raw differences), seconds."""
    tools: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def has_arrivals(self) -> bool:
        return "arrival_s" in self.frame.columns


@dataclass
class BadRow:
    line: int | None
    """1-based line number in the file (None when the parser cannot tell)."""
    reason: str


def bad_rows_error(path: str, bad: list[BadRow], total: int) -> InputError:
    """One error naming how many rows are bad, where, and the first few reasons."""
    lines = [b.line for b in bad if b.line is not None]
    where = ""
    if lines:
        shown = ", ".join(str(n) for n in lines[:EXAMPLES_SHOWN])
        where = f" at lines {shown}{', ...' if len(lines) > EXAMPLES_SHOWN else ''}"
    examples = "; ".join((f"line {b.line}: " if b.line is not None else "") + b.reason for b in bad[:EXAMPLES_SHOWN])
    return InputError(
        Problem(
            file=path,
            path="",
            message=f"{len(bad)} of {total} rows cannot be used{where} ({examples})",
            # every row bad: skipping them leaves nothing ("the log holds no usable request rows"), so the
            # likely cause is the reader, not the rows
            fix=("no row is usable, so skipping them leaves nothing: check that the file is read as its format says "
                 "(--format / --columns of planner characterize, or the service's traffic.log format and columns)"
                 if total > 0 and len(bad) >= total else
                 "repair those rows, or drop them: --on-bad-row skip (planner characterize / solve) or options.on_bad_row: skip in the instance"),
        )
    )


WRONG_FORMAT_FIX = "choose the right --format, or map columns with --format generic --columns time=..,input=..,output=.."
"""The fix of a log read with a format whose columns it lacks; :func:`planner.workload.readers.read_trace` replaces
it with the format auto-detection finds, when it finds another one."""


def check_columns(path: str, present: list[str], required: dict[str, str], fmt: str) -> None:
    """Raise one error listing every required column the file lacks.

    ``required`` maps a column name to what it holds (for the message).
    """
    missing = [c for c in required if c not in present]
    if missing:
        wanted = ", ".join(f"{c} ({required[c]})" for c in missing)
        has = (f"the file has: {', '.join(present)}" if present else
               f"no {fmt} field or column was found in the file at all: it is not a {fmt} log")
        fix = WRONG_FORMAT_FIX
        raise InputError(Problem(file=path, path="", message=f"missing column(s) for the {fmt} format: {wanted}; {has}", fix=fix))


def _far_arrivals(t: np.ndarray, already_bad: np.ndarray) -> tuple[np.ndarray, Callable[[int], str]]:
    """Rows whose arrival lies far outside the bulk of the log (:data:`FAR_ARRIVAL_SPANS`), and
    the reason for one row."""
    ok = np.isfinite(t) & ~already_bad
    far = np.zeros(len(t), dtype=bool)
    if int(ok.sum()) < 3:
        return far, str
    lo, hi = (float(v) for v in np.quantile(t[ok], [0.01, 0.99]))
    allowed = max(FAR_ARRIVAL_SPANS * (hi - lo), FAR_ARRIVAL_MIN_S)
    far = ok & ((t < lo - allowed) | (t > hi + allowed))

    def why(i: int) -> str:
        gap = lo - t[i] if t[i] < lo else t[i] - hi
        return (f"its arrival time lies {gap:.3g} s ({gap / 86_400 / 365.25:.3g} years) {'before' if t[i] < lo else 'after'} "
                f"the other arrivals (98 % of them within {hi - lo:.4g} s)")

    return far, why


def finish_log(
    log: RequestLog,
    raw_text: dict[str, pd.Series] | None,
    line_of: Callable[[int], int | None] | None,
    on_bad_row: OnBadRow,
    pre_bad: list[BadRow] | None = None,
) -> RequestLog:
    """Validate token counts and arrivals, handle bad rows, sort arrivals.

    ``raw_text`` holds the original text of columns (for quoting bad values) and
    ``line_of`` maps a row position to its 1-based file line; both only matter for messages.
    ``pre_bad`` are rows the parser already rejected (wrong number of fields).
    """
    df = log.frame
    bad: list[BadRow] = list(pre_bad or [])
    check = [c for c in ("input_tokens", "output_tokens", "arrival_s", "cached_tokens") if c in df.columns]
    bad_mask = np.zeros(len(df), dtype=bool)
    reasons: dict[str, np.ndarray] = {}
    for col in check:
        values = df[col].to_numpy(dtype=np.float64)
        nan = np.isnan(values) if col != "cached_tokens" else np.zeros(len(values), dtype=bool)  # no cache figure: none counted
        inf = np.isinf(values)
        tokens = col != "arrival_s"
        neg = (values < 0) if tokens else np.zeros(len(values), dtype=bool)
        huge = (values > MAX_TOKENS) & ~inf if tokens else np.zeros(len(values), dtype=bool)
        reasons[col + ":nan"] = nan
        reasons[col + ":inf"] = inf
        reasons[col + ":neg"] = neg
        reasons[col + ":huge"] = huge
        bad_mask |= nan | inf | neg | huge
    check_far: Callable[[int], str] = str
    if "arrival_s" in df.columns:
        far, far_text = _far_arrivals(df["arrival_s"].to_numpy(dtype=np.float64), bad_mask)
        reasons["arrival_s:far"] = far
        bad_mask |= far
        check_far = far_text
    n_total = len(df) + len(pre_bad or [])
    if bad_mask.any():
        idx = np.flatnonzero(bad_mask)
        for i in idx[: EXAMPLES_SHOWN * 4]:
            why = []
            for col in check:
                if reasons[col + ":nan"][i]:
                    raw = raw_text[col].iloc[i] if raw_text and col in raw_text else None
                    shown = "empty" if raw is None or (isinstance(raw, float) and np.isnan(raw)) or str(raw) == "" else repr(str(raw)[:40])
                    why.append(f"{col} is {shown}, not a {'time' if col == 'arrival_s' else 'number'}")
                elif reasons[col + ":inf"][i]:
                    why.append(f"{col} is {df[col].iloc[i]:g}, not a finite {'time' if col == 'arrival_s' else 'number'}")
                elif reasons[col + ":neg"][i]:
                    why.append(f"{col} is negative ({df[col].iloc[i]:g})")
                elif reasons[col + ":huge"][i]:
                    why.append(f"{col} is {df[col].iloc[i]:.4g}, beyond any request ({MAX_TOKENS:,.0f} tokens)")
            if "arrival_s:far" in reasons and reasons["arrival_s:far"][i]:
                why.append(check_far(int(i)))
            line = line_of(int(i)) if line_of is not None else None
            bad.append(BadRow(line=line, reason=", ".join(why)))
        # the count must cover every bad row, not only the quoted ones
        extra = len(idx) - min(len(idx), EXAMPLES_SHOWN * 4)
        bad.extend(BadRow(line=None, reason="") for _ in range(extra))
    if bad:
        if on_bad_row == "error":
            ordered = [b for b in bad if b.reason] + [b for b in bad if not b.reason]
            raise bad_rows_error(log.source, ordered, n_total)
        if bad_mask.any():
            df = df.loc[~bad_mask].reset_index(drop=True)
            if log.tools is not None:
                keep = np.flatnonzero(~bad_mask)
                new_pos = np.full(len(bad_mask), -1)
                new_pos[keep] = np.arange(len(keep))
                tools = log.tools[~bad_mask[log.tools["request"].to_numpy()]].copy()
                tools["request"] = new_pos[tools["request"].to_numpy()]
                log.tools = tools.reset_index(drop=True)
        log.notes.append(f"skipped {len(bad)} unusable row(s) of {n_total} (--on-bad-row skip)")
    if len(df) == 0:
        raise InputError(Problem(file=log.source, path="", message="the log holds no usable request rows", fix="check the file is the right one and not empty"))
    if "arrival_s" in df.columns:
        t = df["arrival_s"].to_numpy()
        if len(t) > 1 and bool(np.any(t[1:] < t[:-1])):
            inversions = int(np.count_nonzero(t[1:] < t[:-1]))
            order = np.argsort(t, kind="stable")
            df = df.iloc[order].reset_index(drop=True)
            if log.tools is not None:
                inverse = np.empty_like(order)
                inverse[order] = np.arange(len(order))
                log.tools["request"] = inverse[log.tools["request"].to_numpy()]
            log.notes.append(f"timestamps were not in order ({inversions} step(s) backwards); rows were sorted by time")
        t0 = float(df["arrival_s"].iloc[0])
        if t0 != 0.0:
            df["arrival_s"] = df["arrival_s"] - t0
    log.frame = df
    return log
