"""A sweep's electricity prices solved by intervals (issue 27: the 1,000-scenario sweep).

Why it is exact (to the MIP gap). For one capacity table, rates and options, the electricity price enters
nothing but the objective, and linearly: every cost term is a constant or ``price x`` the plan's energy
(:mod:`planner.optimize.extract`), and no constraint, cap, latency check or simulation reads it (no budget
constraint: with ``options.budget_usd_per_month`` the price enters a constraint and this module stands
aside). So for any fixed solution ``x`` its cost ``c_x(p) = a_x + p b_x`` is linear in the price ``p``, and the
prices at which ``x`` is optimal for one model form an interval (each "``x`` no dearer than ``y``" is a linear
inequality in ``p``). The verify-and-tighten loop (:mod:`planner.optimize.tighten`) is a sequence of such
models, each fixed by the plans before it, and of decisions that compare two plans' costs, each also linear
in ``p``. When the loop, run at prices ``p_a < p_b``, sees the same sequence of MIP solutions
(:mod:`planner.optimize.trace`) and ends on the same summary, then at every ``p`` between them each of those
solutions is optimal for its model (within the MIP gap: ``c_x(p) ≤ (1 + g) V(p)`` with ``g`` the larger of the
two solves' gaps, as ``V``, the optimum, is concave in ``p``) and every decision comes out the same: the loop's
answer at ``p`` is that plan, with its costs at ``p``. Those costs are the two ends' costs interpolated in
``p`` (each term is linear in it), the status the ends', the gap the larger of theirs (a bound on the gap at
``p``). Where the sequences differ, the middle price is solved and each half is looked at again (bisection).

How approximate: a price solved directly could get another solution of equal cost (a tie) or another
solution within the gap; the interpolated row has a plan that is optimal to the same gap at that price,
not necessarily HiGHS's choice there, and its cost terms agree with a direct solve of the same plan to
floating-point rounding (~1e-12 relative). ``solve_s`` of an interpolated row is 0 (nothing solved).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from planner.optimize.resolve import ArchitectureSummary
from planner.studies.source import BUDGET_PATH, PRICE_PATH, TableSource
from planner.studies.spec import Scenario

Solved = tuple[dict[str, ArchitectureSummary], bool, list[tuple[Any, ...]]]
"""Summaries, model re-used, the trace of MIP solutions (:mod:`planner.optimize.trace`)."""


def price_groups(source: TableSource, scenarios: list[Scenario]) -> list[list[int]]:
    """Indices of ``scenarios`` that differ only in the electricity price (a patch; no budget anywhere), by
    group, each sorted by price; every other scenario is a group of its own."""
    groups: dict[str, list[int]] = {}
    alone: list[list[int]] = []
    budget_free = source.settings.budget_usd_per_month is None
    for i, sc in enumerate(scenarios):
        _structural, patches = source.split(sc.overrides)
        price = patches.get(PRICE_PATH)
        if not budget_free or BUDGET_PATH in patches or not isinstance(price, int | float) or not math.isfinite(float(price)):
            alone.append([i])
            continue
        key = repr(sorted((k, repr(v)) for k, v in sc.overrides.items() if k != PRICE_PATH))
        groups.setdefault(key, []).append(i)
    out = [sorted(g, key=lambda i: float(scenarios[i].overrides[PRICE_PATH])) for g in groups.values()]
    return out + alone


def _same_path(a: Solved, b: Solved) -> bool:
    """Whether two prices' loops saw the same MIP solutions and ended on the same plan (module docstring)."""
    sa, _ra, ta = a
    sb, _rb, tb = b
    if not ta or ta != tb or sa.keys() != sb.keys():
        return False  # an empty trace: nothing was solved (a memo answered), so the path is not known
    for arch, x in sa.items():
        y = sb[arch]
        if (x.feasible, x.status, x.instances, x.devices, x.tokens_per_month, x.energy_wh_per_1k_tokens, x.meets_targets) != \
                (y.feasible, y.status, y.instances, y.devices, y.tokens_per_month, y.energy_wh_per_1k_tokens, y.meets_targets):
            return False
        if x.feasible and (x.total_usd_per_month is None or y.total_usd_per_month is None or x.costs.keys() != y.costs.keys()):
            return False
    return True


def _lerp(u: float, v: float, t: float) -> float:
    return u if u == v else u + t * (v - u)


def interpolated(a: Solved, b: Solved, p_a: float, p_b: float, p: float) -> dict[str, ArchitectureSummary]:
    """The summaries at price ``p`` between two prices that took the same path (:func:`_same_path`)."""
    t = 0.0 if p_b == p_a else (p - p_a) / (p_b - p_a)
    out = {}
    for arch, x in a[0].items():
        y = b[0][arch]
        if not x.feasible:
            out[arch] = replace(x, solve_s=0.0)
            continue
        assert x.total_usd_per_month is not None and y.total_usd_per_month is not None
        total = _lerp(x.total_usd_per_month, y.total_usd_per_month, t)
        gap = None if x.gap is None or y.gap is None else max(x.gap, y.gap)
        out[arch] = replace(x, costs={k: _lerp(v, y.costs[k], t) for k, v in x.costs.items()}, total_usd_per_month=total,
                            usd_per_million_tokens=total / x.tokens_per_month * 1e6 if x.tokens_per_month > 0 else None,
                            solve_s=0.0, gap=gap)
    return out


def solve_by_intervals(prices: list[float], solve: Callable[[int], Solved]) -> list[tuple[dict[str, ArchitectureSummary], bool]]:
    """Summaries at every price of one group (``prices`` ascending; ``solve(k)`` runs the ``k``-th): its ends
    solved, then each interval whose ends took the same path interpolated, others split at their middle."""
    n = len(prices)
    done: dict[int, Solved] = {}

    def get(k: int) -> Solved:
        if k not in done:
            done[k] = solve(k)
        return done[k]

    out: dict[int, tuple[dict[str, ArchitectureSummary], bool]] = {}
    stack = [(0, n - 1)] if n > 1 else []
    if n == 1:
        s = get(0)
        out[0] = (s[0], s[1])
    while stack:
        i, j = stack.pop()
        a, b = get(i), get(j)
        out[i], out[j] = (a[0], a[1]), (b[0], b[1])
        if j - i < 2:
            continue
        if _same_path(a, b):
            for k in range(i + 1, j):
                out[k] = (interpolated(a, b, prices[i], prices[j], prices[k]), a[1])
            continue
        m = (i + j) // 2
        stack += [(m, j), (i, m)]
    return [out[k] for k in range(n)]
