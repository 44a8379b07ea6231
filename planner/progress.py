"""Progress of long library steps, for whoever listens (the CLI's ticker and ``-v`` timings).

The library marks its long steps with :func:`stage` (``with stage("capacity tables"): ...``);
by default nobody listens and a stage costs one list check. The command line installs a
listener (:func:`listening`, in :mod:`planner.cli`) that shows the running stage on a terminal
and, with ``-v``, prints each stage and its time. No dependency on click or on a terminal here:
library code never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Listener", "detach", "listening", "report", "stage"]

Listener = Callable[[str, str, float], None]
"""Called as ``listener(event, label, elapsed_s)``: ``event`` is ``"start"`` (elapsed 0) or ``"end"``."""

_LISTENERS: list[Listener] = []


@contextmanager
def stage(label: str) -> Iterator[None]:
    """Mark a step of the library for the listeners (start, then end with its wall time in s)."""
    if not _LISTENERS:
        yield
        return
    for listener in tuple(_LISTENERS):
        listener("start", label, 0.0)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - t0
        for listener in tuple(_LISTENERS):
            listener("end", label, elapsed)


def report(label: str, elapsed_s: float) -> None:
    """Tell the listeners of a stage that ran elsewhere (in a forked child, :mod:`planner.forked`, whose own stages
    reach no listener) and took ``elapsed_s``: its start and its end, when its result arrives here."""
    for listener in tuple(_LISTENERS):
        listener("start", label, 0.0)
    for listener in tuple(_LISTENERS):
        listener("end", label, elapsed_s)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the stages run inside this block to ``listener``."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def detach() -> None:
    """Forget every listener: for a forked child (:mod:`planner.forked`), whose stages its parent does not show, and
    which must not call a listener whose lock a thread of the parent (the CLI's ticker) may have held at the fork:
    that lock would never be released in the child."""
    _LISTENERS.clear()
