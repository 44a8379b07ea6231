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
from collections.abc import Callable, Iterator, Mapping, Sequence
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


def wrote(message: str) -> None:
    """A ``wrote FILE`` line (stdout, as before); silent with ``-q`` (results only)."""
    if verbosity() >= 0:
        click.echo(message)


class StageReporter:
    """Listener of :mod:`planner.progress` stages for the command line.

    On a terminal (stderr a TTY, not ``-q``) the running stages are shown on one stderr line,
    ``capacity tables › solve shared … 3 s``, refreshed every 0.5 s by a daemon thread and erased
    when they end; with ``-v`` (terminal or not) each stage prints ``label: 1.23 s`` when it ends.
    Nothing otherwise, so piped output stays clean.
    """

    def __init__(self, *, tick_s: float = 0.5) -> None:
        import threading

        self._stack: list[tuple[str, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tick_s = tick_s
        self._thread: threading.Thread | None = None
        self._shown = False

    def _live(self) -> bool:
        return verbosity() >= 0 and sys.stderr.isatty()

    def _draw(self) -> None:
        with self._lock:
            if not self._stack:
                return
            label = " › ".join(name for name, _ in self._stack)
            elapsed = time.perf_counter() - self._stack[0][1]
            sys.stderr.write(f"\r\033[K{label} … {elapsed:.0f} s")
            sys.stderr.flush()
            self._shown = True

    def _clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self._shown = False

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            self._draw()

    def __call__(self, event: str, label: str, elapsed_s: float) -> None:
        live = self._live()
        if event == "start":
            with self._lock:
                self._stack.append((label, time.perf_counter()))
            if live:
                if self._thread is None:
                    import threading

                    self._thread = threading.Thread(target=self._run, name="planner-progress", daemon=True)
                    self._thread.start()
                self._draw()
            return
        with self._lock:
            depth = len(self._stack)
            if self._stack and self._stack[-1][0] == label:
                self._stack.pop()
            if live:
                self._clear()
        if verbosity() >= 1:
            click.echo(f"{'  ' * max(depth - 1, 0)}{label}: {elapsed_s:.2f} s", err=True)
        if live and self._stack:
            self._draw()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._stack.clear()
            self._clear()


@contextmanager
def reporting_stages() -> Iterator[None]:
    """Show the library's :mod:`planner.progress` stages while the block runs (:class:`StageReporter`)."""
    from planner.progress import listening

    reporter = StageReporter()
    try:
        with listening(reporter):
            yield
    finally:
        reporter.close()


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


def sig(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, trailing zeros kept so a column reads alike
    ("19.0" beside "42.2", where :func:`fmt` gave "19"); thousands separators from 10**digits on."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(float(value)):
        return fmt(value)
    v = float(f"{float(value):.{digits}g}")  # rounded first: 9.996 -> 10.0, not "10.00"
    if v == 0:
        return "0"
    if abs(v) >= 10 ** (digits - 1):  # whole numbers are not rounded further: 1,024, not 1,020
        return f"{float(value):,.0f}"
    return f"{v:.{digits - 1 - math.floor(math.log10(abs(v)))}f}"


def fixed(value: Any, decimals: int = 1) -> str:
    """``value`` with ``decimals`` decimal places (thousands separators), for a column or line of
    percentages that should read alike ("5.0" beside "4.9", where :func:`fmt` gave "5" and "4.91")."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(float(value)):
        return fmt(value)
    return f"{float(value):,.{decimals}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align_right: bool = True,
          formats: Mapping[int, Callable[[Any], str]] | None = None) -> str:
    """An aligned plain-text table; numbers right-aligned. ``formats``: per column index, the
    formatter of its cells (:func:`sig`, :func:`fixed`; default :func:`fmt`)."""
    cells = [[(formats or {}).get(i, fmt)(v) for i, v in enumerate(row)] for row in rows]
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
