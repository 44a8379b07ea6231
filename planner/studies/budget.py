"""Budget studies: for each budget, the largest traffic multiplier servable within SLO.

Traffic multiplier ``m`` scales every service's rate (``rate_multiplier = base × m``).
``C(m)`` is the cheapest plan's monthly total over the instance's architectures, with the
SLO enforced by the MIP (utilisation caps from the queueing model, TTFT/TPOT masks). A
budget ``B`` serves ``m`` when ``C(m) ≤ B`` — the same answer as a feasibility solve with
the budget constraint on, but the unconstrained minimum also gives the frontier's cost.

Search per budget: bracket by doubling/halving from ``m = 1`` (``2^-20 … 2^20``), then
bisect on ``log m`` until ``high/low − 1 ≤ rel_tol``; ``m_max`` is the low end (served).
``C`` is non-decreasing in ``m`` up to the queueing caps' pooling effect, so the result
is monotone in the budget (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from planner.optimize.resolve import ArchitectureSummary, winner_of
from planner.studies.search import largest_passing_multiplier
from planner.studies.source import TableSource
from planner.studies.sweep import solve_scenario

HEADROOM = 64.0


@dataclass
class _Eval:
    m: float
    total: float
    winner: str | None
    summary: ArchitectureSummary | None


def _evaluate(source: TableSource, m: float, cache: dict[float, _Eval]) -> _Eval:
    if m not in cache:
        over = {f"services.{s}.traffic.rate_multiplier": base * m for s, base in source.base_rate_multiplier.items()}
        # the base table's rates scaled (its operating points held): the search doubles the traffic up to 2^20, far past
        # the instance's planning bound (10,000 req/s), where a table built at that rate is refused, and a table per
        # probe took enterprise-chat's two-budget search from seconds to 6.5 minutes; at ×1 it is solve's plan (tested)
        summaries, _ = solve_scenario(source, over, headroom=HEADROOM, exact_rates=False)
        w = winner_of(summaries)
        total = float(summaries[w].total_usd_per_month or math.inf) if w else math.inf
        cache[m] = _Eval(m=m, total=total, winner=w, summary=summaries[w] if w else None)
    return cache[m]


def max_multiplier(source: TableSource, budget_usd_per_month: float, *, rel_tol: float = 0.01,
                   cache: dict[float, _Eval] | None = None) -> tuple[float, _Eval | None]:
    """Largest ``m`` with ``C(m) ≤ budget`` (0 and None when even ``2^-20`` is over budget)."""
    cache = {} if cache is None else cache

    def ok(m: float) -> bool:
        return _evaluate(source, m, cache).total <= budget_usd_per_month

    m = largest_passing_multiplier(ok, cap=2.0**20, rel_tol=rel_tol)
    return (m, cache[m]) if m > 0 else (0.0, None)


def budget_frontier(source: TableSource, budgets: list[float], *, rel_tol: float = 0.01,
                    progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """One row per budget: the largest multiplier, its cost, winner and device mix (the cost–traffic frontier).

    ``progress(1)`` is called after each budget (a CLI progress bar)."""
    cache: dict[float, _Eval] = {}
    rows = []
    for b in sorted(budgets):
        m, ev = max_multiplier(source, b, rel_tol=rel_tol, cache=cache)
        s = ev.summary if ev else None
        rows.append({
            "budget_usd_per_month": b, "max_traffic_multiplier": m,
            "total_usd_per_month": ev.total if ev else None, "winner": ev.winner if ev else None,
            "devices": sum(s.devices.values()) if s else 0,
            "device_mix": ", ".join(f"{d}:{n}" for d, n in sorted(s.devices.items())) if s else "",
            "pools": ", ".join(f"{p}x{n}" for p, n in sorted(s.instances.items())) if s else "",
            "usd_per_million_tokens": s.usd_per_million_tokens if s else None,
            "note": "" if ev else "the budget does not cover the fixed costs of any plan at 1e-6 of the traffic",
        })
        if progress:
            progress(1)
    return pd.DataFrame(rows)
