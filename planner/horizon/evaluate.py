"""Regret of a procurement schedule under another growth path.

A schedule's commitments are its purchases (orders per period and device) and its reservations
(starts per period and device): decided in advance, they cannot follow the traffic. Under another
growth path the commitments are held at the schedule's values and everything that can adapt —
on-demand and spot rentals per slot, pool sizes, routing, resale where allowed — is re-optimised:

    cost_held(g)     = min over rentals and pools, commitments fixed, demand grown by g
    cost_replanned(g) = the horizon plan made knowing g
    regret(g)        = cost_held(g) − cost_replanned(g)  (≥ 0 for exact solves; at fleet scale both are
                                                          heuristic and a negative value is the re-plan's shortfall)

The re-planned plan is itself a way of running the held commitments whenever its purchases and reservations
are the schedule's (always so at the schedule's own growth): ``cost_held`` is then the cheaper of the held
solve and the re-plan. Without that, at fleet scale the held solve (whose LP relaxation, with the commitments
fixed, routes differently before its counts are rounded up) found a plan $965 (0.02 %) dearer than the plan
itself at its own 5 %/month on ``fleet-horizon``, a "regret" that was only the rounding heuristic's spread; the
spread between two heuristic solves is bounded by their gaps (``replanned_gap``, ``held_gap``).

Both are present values over the horizon; the regret is what not knowing ``g`` cost. A held
schedule can be infeasible under ``g`` when the rentals it would need are capped; that is said.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from planner.horizon.model import HorizonInputs
from planner.horizon.solve import model_for, solve_architecture, solve_horizon
from planner.schema.capacity import CapacityTables


@dataclass
class GrowthRegret:
    label: str
    growth: np.ndarray
    held_usd: float | None
    replanned_usd: float | None
    status: str
    replanned_gap: float | None = None
    """Gap of the re-planned solve: at fleet scale the plans are heuristic (planner.horizon.solve), and a
    negative regret — the held schedule cheaper than the re-planned one — measures that, not a gain."""
    held_gap: float | None = None
    """Gap of the held solve (against its own bound)."""

    @property
    def regret_usd(self) -> float | None:
        """held − re-planned; not clipped at 0 (a negative value is the re-planned solve's shortfall)."""
        if self.held_usd is None or self.replanned_usd is None:
            return None
        return self.held_usd - self.replanned_usd


COMMITMENTS: tuple[str, ...] = ("bought", "reserved_started")
"""The schedule's columns that a held schedule keeps (purchases and reservations)."""


def _commitments(schedule: pd.DataFrame | None) -> dict[tuple[int, str, str], float]:
    """(period, device, column) → value, zeros left out."""
    if schedule is None or not len(schedule):
        return {}
    out: dict[tuple[int, str, str], float] = {}
    for col in COMMITMENTS:
        if col not in schedule.columns:
            continue
        for t, y, v in zip(schedule["period"], schedule["device"], schedule[col], strict=True):
            if float(v) != 0.0:
                out[(int(t), str(y), col)] = float(v)
    return out


def same_commitments(a: pd.DataFrame | None, b: pd.DataFrame | None) -> bool:
    """The two schedules buy and reserve the same devices in the same periods."""
    return _commitments(a) == _commitments(b)


def hold_schedule(tables: CapacityTables, inputs: HorizonInputs, architecture: str, schedule: pd.DataFrame, *,
                  time_limit_s: float = 60.0, mip_gap: float = 1e-3) -> tuple[float | None, str]:
    """Cost of ``schedule``'s purchases and reservations under ``inputs`` (rentals and pools re-optimised)."""
    held, status, _gap = _hold(tables, inputs, architecture, schedule, time_limit_s=time_limit_s, mip_gap=mip_gap)
    return held, status


def _hold(tables: CapacityTables, inputs: HorizonInputs, architecture: str, schedule: pd.DataFrame, *,
          time_limit_s: float, mip_gap: float) -> tuple[float | None, str, float | None]:
    hb = model_for(tables, inputs, architecture)
    T = hb.levels.periods
    sched = schedule.set_index(["period", "device"])
    fix = {}
    for block, names, column in (("buy", hb.buy_y, "bought"), ("res", hb.res_y, "reserved_started")):
        if names:
            fix[block] = np.array([[float(sched[column].get((t, y), 0)) for y in names] for t in range(T)])
    sol, _ = solve_architecture(hb, architecture, time_limit_s, mip_gap, fix=fix)
    return (sol.objective if sol.ok else None), sol.status, (sol.gap if sol.ok else None)


def growth_regret(tables: CapacityTables, inputs: HorizonInputs, architecture: str, schedule: pd.DataFrame,
                  paths: dict[str, np.ndarray], *, time_limit_s: float = 60.0, mip_gap: float = 1e-3) -> list[GrowthRegret]:
    """For each named growth path: the schedule held, the plan re-made, and the regret (module docstring). The paths
    are independent (each builds its own models and solves them from a fresh HiGHS): dealt over the usable cores
    (:func:`planner.forked.fork_each`), the same rows as one after another."""
    from planner.forked import fork_each

    def one(item: tuple[str, np.ndarray]) -> GrowthRegret:
        label, growth = item
        other = replace(inputs, growth=np.asarray(growth, dtype=float))
        held, status, held_gap = _hold(tables, other, architecture, schedule, time_limit_s=time_limit_s, mip_gap=mip_gap)
        again = solve_horizon(tables, other, (architecture,), time_limit_s=time_limit_s, mip_gap=mip_gap, baseline=False)
        re = again.architectures[architecture]
        if (re.feasible and re.total_usd is not None and same_commitments(schedule, re.schedule)
                and (held is None or re.total_usd < held)):
            # the re-plan holds the same commitments: it is one way of running the held schedule (module docstring)
            held, held_gap = re.total_usd, re.gap
            status = f"{status}; the re-plan holds the same purchases and reservations and is cheaper: taken as the held cost"
        return GrowthRegret(label, np.asarray(growth, dtype=float), held, re.total_usd, status, re.gap, held_gap)

    return fork_each(one, list(paths.items()))


def growth_monte_carlo(tables: CapacityTables, inputs: HorizonInputs, architecture: str, schedule: pd.DataFrame,
                       monthly_rates: np.ndarray, *, time_limit_s: float = 60.0, mip_gap: float = 1e-3) -> pd.DataFrame:
    """One row per drawn monthly growth rate: the schedule held, the plan re-made, the regret (module docstring)."""
    from planner.horizon.demand import growth_multipliers
    from planner.schema.horizon import Growth

    periods = len(inputs.growth)
    paths = {f"{i}": growth_multipliers(Growth(monthly_rate=float(r)), periods, inputs.months_per_period)
             for i, r in enumerate(monthly_rates)}
    out = growth_regret(tables, inputs, architecture, schedule, paths, time_limit_s=time_limit_s, mip_gap=mip_gap)
    return pd.DataFrame({"monthly_rate": np.asarray(monthly_rates, dtype=float),
                         "held_usd": [g.held_usd for g in out], "replanned_usd": [g.replanned_usd for g in out],
                         "replanned_gap": [g.replanned_gap for g in out],
                         "regret_usd": [g.regret_usd for g in out], "status": [g.status for g in out]})


def yearly_costs(costs: pd.DataFrame, months_per_period: float) -> pd.Series:
    """Undiscounted cost of each year of the horizon (periods grouped by 12 months; a last partial year as is)."""
    per = costs.groupby("period")["usd"].sum()
    year = (per.index.to_numpy() * months_per_period // 12).astype(int)
    return per.groupby(year).sum()


def largest_growth_within_budget(tables: CapacityTables, inputs: HorizonInputs, architecture: str, budget_usd_per_year: float, *,
                                 low: float = -0.2, high: float = 0.5, steps: int = 8, time_limit_s: float = 60.0,
                                 mip_gap: float = 1e-3) -> tuple[float | None, float | None, list[tuple[float, float | None]]]:
    """The largest compound monthly growth whose plan costs at most ``budget_usd_per_year`` in every year of
    the horizon, by bisection on the rate (more growth never costs less: checked at the bracket's ends).

    Returns (rate, that plan's costliest year, every probe as (rate, costliest year or None if no plan)).
    ``rate`` is None when even ``low`` does not fit the budget."""
    from planner.horizon.demand import growth_multipliers
    from planner.schema.horizon import Growth

    periods = len(inputs.growth)
    probes: list[tuple[float, float | None]] = []

    def worst_year(rate: float) -> float | None:
        g = growth_multipliers(Growth(monthly_rate=rate), periods, inputs.months_per_period)
        res = solve_horizon(tables, replace(inputs, growth=g), (architecture,), time_limit_s=time_limit_s, mip_gap=mip_gap,
                            baseline=False).architectures[architecture]
        cost = float(yearly_costs(res.costs, inputs.months_per_period).max()) if res.feasible else None
        probes.append((rate, cost))
        return cost

    def fits(rate: float) -> bool:
        c = worst_year(rate)
        return c is not None and c <= budget_usd_per_year

    if not fits(low):
        return None, None, probes
    if fits(high):
        return high, probes[-1][1], probes
    lo, hi = low, high
    for _ in range(steps):
        mid = (lo + hi) / 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    best = max((p for p in probes if p[0] == lo), key=lambda p: p[0])
    return lo, best[1], probes
