"""Geometric search for the largest traffic multiplier that still passes a test."""

from __future__ import annotations

import math
from collections.abc import Callable


def largest_passing_multiplier(ok: Callable[[float], bool], *, cap: float, rel_tol: float,
                               floor: float | None = None, exact_cap: bool = False) -> float:
    """Largest ``m`` in ``[floor, cap]`` (``floor`` default ``1/cap``) with ``ok(m)``, for a test that passes
    below a threshold.

    Brackets the threshold by doubling (or halving) from ``m = 1``, then bisects on ``log m``
    until ``hi / lo - 1 <= rel_tol``. Returns ``cap`` when even ``cap`` passes (capped at the
    largest power of two not above it, or at ``cap`` itself with ``exact_cap``: a bound that is not a power
    of two, such as ``planner budget``'s planning bound) and ``0.0`` when even ``floor`` fails. Every value
    returned other than 0 is one ``ok`` was called with and passed.

    ``rel_tol`` must be a finite number in ``(0, 1)`` (``ValueError`` otherwise): 0 or below never
    stopped, nan stopped at once and returned the bracket's low end. The bisection also stops when
    the bracket cannot be split in floating point (a ``rel_tol`` below the float spacing).
    """
    if not (math.isfinite(rel_tol) and 0 < rel_tol < 1):
        raise ValueError(f"rel_tol must be a finite number in (0, 1), got {rel_tol!r}")
    low = 1 / cap if floor is None else floor
    if ok(1.0):
        lo = 1.0
        while lo * 2 <= cap and ok(lo * 2):
            lo *= 2
        if lo * 2 <= cap:
            hi = lo * 2
        elif not exact_cap or lo >= cap:
            return lo
        elif ok(cap):
            return cap
        else:
            hi = cap  # bisect [lo, cap]
    else:
        hi = 1.0
        while hi / 2 >= low and not ok(hi / 2):
            hi /= 2
        if hi / 2 < low:
            return 0.0
        lo = hi / 2
    while hi / lo - 1 > rel_tol:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:  # nothing left to split
            break
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
