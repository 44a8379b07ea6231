"""Budget studies: for each budget, the largest traffic multiplier servable within SLO.

Traffic multiplier ``m`` scales every service's rate (``rate_multiplier = base × m``).
``C(m)`` is the cheapest plan's monthly total over the instance's architectures, with the
SLO enforced by the MIP (utilisation caps from the queueing model, TTFT/TPOT masks). A
budget ``B`` serves ``m`` when ``C(m) ≤ B`` — the same answer as a feasibility solve with
the budget constraint on, but the unconstrained minimum also gives the frontier's cost.

Search per budget: bracket by doubling/halving from ``m = 1`` (``2^-20`` up to the planning bound),
then bisect on ``log m`` until ``high/low − 1 ≤ rel_tol``; ``m_max`` is the low end (served).
``C`` is non-decreasing in ``m`` up to the queueing caps' pooling effect, so the result
is monotone in the budget (tested).

The planning bound: no service's planned peak above
:data:`planner.schema.common.MAX_PEAK_RATE_PER_S` (10,000 req/s, what ``planner solve`` accepts), so
``m ≤ m_bound = 10,000 / max_s peak_s``; a budget that covers ``C(m_bound)`` is reported at ``m_bound``
with a note, not searched further (it doubled up to ``2^20``: enterprise-chat's ``--budgets 1e8`` ran
for more than 8 minutes, every probe with a peak simulation of the whole fleet).

Each probe first solves without the peak simulation (:func:`planner.studies.sweep.solve_scenario`,
``simulate=False``): the analytic cost ``C_a(m) ≤ C(m)`` (the simulated loop only tightens caps, which
never lowers the optimum; up to the MIP's relative gap ``g``, the one asked or the one a time-limited solve
reached), so when every architecture's ``C_a (1 − g)`` is above ``B`` the probe is "not served" without
simulating (every architecture's: the verdict prefers plans that meet, and a cheaper architecture that misses
analytically may meet after the simulated loop's rounds). Only probes the analytic plan affords
simulate, which is what ``planner solve`` would run at that traffic; a budget the analytic plan at ``m_bound``
fits is tried there first (one simulated probe at the bound instead of one at every doubling).
Measured (enterprise-chat, base peak 6.35 req/s, 2 cores): one probe with the simulation at ×16 4 s,
×256 65 s, ×1024 378 s (the simulation of ~1 M requests is most of it); ``m_bound`` = ×1,575.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from planner.optimize.resolve import ArchitectureSummary, winner_of
from planner.schema.common import MAX_PEAK_RATE_PER_S
from planner.studies.search import largest_passing_multiplier
from planner.studies.source import TableSource
from planner.studies.sweep import solve_scenario

HEADROOM = 64.0


FLOOR = 2.0**-20
"""Smallest multiplier searched."""


@dataclass
class _Eval:
    m: float
    total: float
    winner: str | None
    summary: ArchitectureSummary | None
    lower_usd_per_month: float = math.inf
    """A lower bound of any architecture's cost at ``m`` once the peak simulation tightens it (module docstring):
    ``min_a C_a (1 − g_a)`` over the feasible architectures, ``g_a`` the larger of the MIP gap asked and the one
    reached (a solve stopped by its time limit is further from its optimum). Not the winner's total: the verdict
    prefers plans that meet their targets, and a cheaper architecture that misses analytically may meet after the
    simulated loop's rounds."""


def bound_multiplier(source: TableSource) -> float:
    """``m_bound``: the multiplier of the base table's rates at which the busiest service's planned peak reaches
    :data:`planner.schema.common.MAX_PEAK_RATE_PER_S` (at least 1: the base passed the schema)."""
    peaks = source.base_tables.demand.groupby("service")["rate_peak_per_s"].sum()
    top = float(peaks.max()) if len(peaks) else 0.0
    return max(1.0, MAX_PEAK_RATE_PER_S / top) if top > 0 else 2.0**20


def _evaluate(source: TableSource, m: float, cache: dict[tuple[float, bool], _Eval], *, simulate: bool = True) -> _Eval:
    key = (m, simulate and source.settings.simulation_check is not None)
    if key not in cache:
        over = {f"services.{s}.traffic.rate_multiplier": base * m for s, base in source.base_rate_multiplier.items()}
        # the base table's rates scaled (its operating points held): a table built per probe took enterprise-chat's
        # two-budget search from seconds to 6.5 minutes; at ×1 it is solve's plan (tested)
        summaries, _ = solve_scenario(source, over, headroom=HEADROOM, exact_rates=False, simulate=key[1])
        w = winner_of(summaries)
        total = float(summaries[w].total_usd_per_month or math.inf) if w else math.inf
        gap0 = max(float(source.settings.mip_gap), 0.0)
        lower = min((float(a.total_usd_per_month) * (1.0 - min(1.0, max(gap0, float(a.gap or 0.0))))
                     for a in summaries.values() if a.feasible and a.total_usd_per_month is not None), default=math.inf)
        cache[key] = _Eval(m=m, total=total, winner=w, summary=summaries[w] if w else None, lower_usd_per_month=lower)
    return cache[key]


def max_multiplier(source: TableSource, budget_usd_per_month: float, *, rel_tol: float = 0.01,
                   cache: dict[tuple[float, bool], _Eval] | None = None) -> tuple[float, _Eval | None]:
    """Largest ``m ≤ m_bound`` with ``C(m) ≤ budget`` (0 and None when even ``2^-20`` is over budget); a probe
    the analytic plan does not afford is not simulated (module docstring)."""
    cache = {} if cache is None else cache

    def ok(m: float) -> bool:
        if _evaluate(source, m, cache, simulate=False).lower_usd_per_month > budget_usd_per_month:
            return False  # no architecture's simulated plan can fit: not simulated
        return _evaluate(source, m, cache).total <= budget_usd_per_month

    bound = bound_multiplier(source)
    if _evaluate(source, bound, cache, simulate=False).lower_usd_per_month <= budget_usd_per_month and ok(bound):
        m = bound  # the budget covers the bound: one probe there, not a doubling with a simulation at every step
    else:
        m = largest_passing_multiplier(ok, cap=bound, rel_tol=rel_tol, floor=FLOOR, exact_cap=True)
    return (m, _evaluate(source, m, cache)) if m > 0 else (0.0, None)  # cached: the probe that passed


def budget_frontier(source: TableSource, budgets: list[float], *, rel_tol: float = 0.01,
                    progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """One row per budget: the largest multiplier, its cost, winner and device mix (the cost–traffic frontier).

    The budgets are dealt over the usable cores (:func:`planner.forked.fork_each`; a probe is a pure function of its
    multiplier, so each process's own probe cache gives the rows of one process). ``progress(1)`` is called after
    each budget (a CLI progress bar; a child's when its rows arrive)."""
    from planner.forked import fork_each

    ordered = sorted(budgets)
    cache: dict[tuple[float, bool], _Eval] = {}
    found = fork_each(lambda b: max_multiplier(source, b, rel_tol=rel_tol, cache=cache), ordered,
                      done=(lambda *_: progress(1)) if progress else None)
    rows = []
    bound = bound_multiplier(source)
    for b, (m, ev) in zip(ordered, found, strict=True):
        s = ev.summary if ev else None
        note = "" if ev else "the budget does not cover the fixed costs of any plan at 1e-6 of the traffic"
        if ev and m >= bound:
            note = (f"the budget covers the planning bound (x{bound:,.4g}: the busiest service's peak at "
                    f"{MAX_PEAK_RATE_PER_S:,.0f} req/s, what planner solve accepts); not searched further: plan a share "
                    "of the traffic and replicate the plan")
        rows.append({
            "budget_usd_per_month": b, "max_traffic_multiplier": m,
            "total_usd_per_month": ev.total if ev else None, "winner": ev.winner if ev else None,
            "devices": sum(s.devices.values()) if s else 0,
            "device_mix": ", ".join(f"{d}:{n}" for d, n in sorted(s.devices.items())) if s else "",
            "pools": ", ".join(f"{p}x{n}" for p, n in sorted(s.instances.items())) if s else "",
            "usd_per_million_tokens": s.usd_per_million_tokens if s else None,
            "note": note,
        })
    return pd.DataFrame(rows)
