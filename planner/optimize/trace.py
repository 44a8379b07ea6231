"""A record of the MIP solutions one piece of work saw, for a sweep's price intervals (issue 27).

A sweep asks the verify-and-tighten loop the same question at many electricity prices. Within
:func:`recording`, every MIP solve of the loop (and of a sweep's lean first solve) appends its
architecture, status and solution (instances, routing shares to 1e-9) to a list; two prices whose lists
are equal took the same path through the loop (:mod:`planner.studies.price_interval` says why every price
between them then takes it too). Thread-local: a Dask worker may run chunks on several threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

_LOCAL = threading.local()


@contextmanager
def recording() -> Iterator[list[tuple[Any, ...]]]:
    """Collect :func:`record` calls made inside the block (nested blocks collect their own)."""
    prev = getattr(_LOCAL, "log", None)
    log: list[tuple[Any, ...]] = []
    _LOCAL.log = log
    try:
        yield log
    finally:
        _LOCAL.log = prev


def record(architecture: str, status: str, x: np.ndarray | None = None, n: np.ndarray | None = None) -> None:
    """One MIP solve's result (nothing outside :func:`recording`)."""
    log = getattr(_LOCAL, "log", None)
    if log is None:
        return
    sol = b"" if x is None or n is None else np.round(np.asarray(x, float), 9).tobytes() + np.rint(np.asarray(n, float)).tobytes()
    log.append((architecture, status, sol))
