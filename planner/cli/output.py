"""Printing helpers shared by commands: JSON, aligned tables, progress and verbosity.

Verbosity (-1 quiet, 0 normal, 1+ verbose) and ``--debug`` live in the click context's
``meta`` (set by the global options of :mod:`planner.cli`). Progress bars go to stderr, and
only when stderr is a terminal and the command is not ``--quiet``: piped output stays clean.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

JSON_SCHEMA_VERSION = "1"
"""Version of the JSON the study and characterize commands print (``plan.json`` has its own,
:class:`planner.schema.plan.PlanResult.schema_version`). Raised when a key changes meaning or goes."""

VERBOSITY_KEY = "planner.verbosity"
DEBUG_KEY = "planner.debug"


def verbosity() -> int:
    """-1 with ``-q``, 0 by default, the count of ``-v`` otherwise (0 outside a click command)."""
    ctx = click.get_current_context(silent=True)
    return int(ctx.meta.get(VERBOSITY_KEY, 0)) if ctx is not None else 0


def note(message: str) -> None:
    """A side remark on stderr (a warning, 'wrote FILE'); silent with ``-q``."""
    if verbosity() >= 0:
        click.echo(message, err=True)


def info(message: str) -> None:
    """A step report on stderr, shown with ``-v`` only."""
    if verbosity() >= 1:
        click.echo(message, err=True)


@contextmanager
def step(label: str) -> Iterator[None]:
    """A step without a count (bisection, tornado): on a terminal, ``label …`` on stderr while it
    runs; with ``-v`` (terminal or not) ``label: 1.23 s`` when it ends; nothing with ``-q``."""
    shown = verbosity() >= 0 and sys.stderr.isatty()
    if shown:
        click.echo(f"{label} …", err=True, nl=False)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if shown:
            click.echo("\r\033[K", err=True, nl=False)
        info(f"{label}: {time.perf_counter() - t0:.2f} s")


class _NoBar:
    """Stands in for a progress bar when none is shown."""

    def update(self, n_steps: int, current_item: Any = None) -> None:
        return None

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def progress(length: int, label: str) -> Any:
    """A click progress bar over ``length`` steps on stderr; a no-op bar when stderr is not a
    terminal or with ``-q``. Use as ``with progress(n, "…") as bar: … bar.update(1)``."""
    if verbosity() < 0 or not sys.stderr.isatty():
        return _NoBar()
    return click.progressbar(length=length, label=label, file=sys.stderr, show_eta=True, show_pos=True)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def to_json(data: Any) -> str:
    return json.dumps(_clean(data), indent=2, sort_keys=False, default=str)


def echo_json(data: Any) -> None:
    click.echo(to_json(data))


def versioned(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with ``schema_version`` as its first key."""
    return {"schema_version": JSON_SCHEMA_VERSION, **payload}


def fmt(value: Any, digits: int = 3) -> str:
    """Round for reading: significant digits for floats, thousands separators for big numbers."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align_right: bool = True) -> str:
    """An aligned plain-text table; numbers right-aligned."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) if rows else False for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        out = []
        for i, v in enumerate(values):
            out.append(v.rjust(widths[i]) if (numeric[i] and align_right) else v.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), sep] + [line(r) for r in cells])
