"""What the fuzz campaigns (``fuzz_{readers,logs,horizon,plans}.py``) share: a per-input time limit and
one in-process CLI run classified the same way everywhere.

Outcome classes (the campaign's verdict per input):

- ``hang``: the input ran past its time limit (a SIGALRM raises :class:`Timeout`, a ``BaseException`` so
  neither the CLI's error boundary nor ``CliRunner`` catches it);
- ``crash``: an exception escaped the CLI (``CliRunner`` caught it);
- ``internal``: the CLI printed "internal error" or a traceback, or exited 1 where 1 is not a verdict;
- ``warning``: a Python warning was raised (a numeric accident the code did not handle);
- ``error`` / ``bad-error``: exit 2 (or 3 where allowed) with exactly one ``error:`` line first, or not;
- ``ok``: exit 0 (each campaign then checks the output for silently wrong answers);
- ``exit-N``: any other exit code.
"""

from __future__ import annotations

import signal
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


class Timeout(BaseException):
    """Raised by the alarm of :func:`time_limit` (not an ``Exception``: nothing in the CLI catches it)."""


def _alarm(_signum: int, _frame: object) -> None:
    raise Timeout


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise :class:`Timeout` in the body after ``seconds`` of wall time (SIGALRM; main thread, POSIX)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Run:
    """One classified CLI run: ``outcome`` (module docstring), ``detail`` (message or first error lines),
    ``stdout`` (only for ``ok``), ``seconds`` of wall time."""

    outcome: str
    detail: str
    stdout: str
    seconds: float


def run_cli(args: list[str], timeout_s: int, *, exit1_is: str | None = None, refusals: tuple[int, ...] = (2, 3),
            exit3_ok: bool = False) -> Run:
    """Run ``planner <args>`` in-process under :func:`time_limit` and classify it (module docstring).

    ``exit1_is`` names the outcome of exit 1 when 1 is a verdict of the command (``check``'s
    "violations"); otherwise exit 1 is ``internal``. ``refusals``: the exit codes of a refusal that
    must carry one ``error:`` line; ``exit3_ok``: exit 3 is a clean refusal (e.g. an infeasible
    instance), classified ``error`` whatever its text."""
    from click.testing import CliRunner

    from planner.cli import main

    t0 = time.perf_counter()
    caught: list[Any] = []
    try:
        with time_limit(timeout_s), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = CliRunner().invoke(main, args, catch_exceptions=True)
    except Timeout:
        return Run("hang", f"over {timeout_s} s", "", time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return Run("crash", f"{type(res.exception).__name__}: {res.exception}"[:300], "", dt)
    if "internal error" in err or "Traceback" in err or (res.exit_code == 1 and exit1_is is None):
        return Run("internal", err.strip()[:300], "", dt)
    if caught:
        return Run("warning", f"{caught[0].category.__name__}: {caught[0].message}"[:300], "", dt)
    if res.exit_code == 1 and exit1_is is not None:
        return Run(exit1_is, "", "", dt)
    if res.exit_code in refusals:
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        # one error, after at most the command's own note: / warning: lines (what it noted while reading the input)
        first = next((ln for ln in err.splitlines() if not ln.startswith(("note:", "warning:"))), "")
        ok = (exit3_ok and res.exit_code == 3) or (first.startswith("error:") and len(lines) == 1)
        return Run("error" if ok else "bad-error", err.strip()[:300], "", dt)
    if res.exit_code == 0:
        return Run("ok", "", res.stdout, dt)
    return Run(f"exit-{res.exit_code}", err.strip()[:300], "", dt)
