"""Regret of a procurement schedule under another growth path.

A schedule's commitments are its purchases (orders per period and device) and its reservations
(starts per period and device): decided in advance, they cannot follow the traffic. Under another
growth path the commitments are held at the schedule's values and everything that can adapt —
on-demand and spot rentals per slot, pool sizes, routing, resale where allowed — is re-optimised:

    cost_held(g)     = min over rentals and pools, commitments fixed, demand grown by g
    cost_replanned(g) = the horizon plan made knowing g
    regret(g)        = cost_held(g) − cost_replanned(g)  ≥ 0

Both are present values over the horizon; the regret is what not knowing ``g`` cost. A held
schedule can be infeasible under ``g`` when the rentals it would need are capped; that is said.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from planner.horizon.model import HorizonInputs, build_horizon, restrict_horizon
from planner.horizon.solve import _solve_built, solve_horizon
from planner.schema.capacity import CapacityTables


@dataclass
class GrowthRegret:
    label: str
    growth: np.ndarray
    held_usd: float | None
    replanned_usd: float | None
    status: str

    @property
    def regret_usd(self) -> float | None:
        if self.held_usd is None or self.replanned_usd is None:
            return None
        return max(0.0, self.held_usd - self.replanned_usd)


def hold_schedule(tables: CapacityTables, inputs: HorizonInputs, architecture: str, schedule: pd.DataFrame, *,
                  time_limit_s: float = 60.0, mip_gap: float = 1e-3) -> tuple[float | None, str]:
    """Cost of ``schedule``'s purchases and reservations under ``inputs`` (rentals and pools re-optimised)."""
    hb = build_horizon(tables, inputs)
    restrict_horizon(hb, architecture)
    m = hb.model
    for t, y, bought, started in zip(schedule["period"].astype(int), schedule["device"].astype(str),
                                     schedule["bought"].astype(int), schedule["reserved_started"].astype(int), strict=True):
        if (t, y) in m.buy:
            m.buy[t, y].fix(int(bought))
        if (t, y) in m.res:
            m.res[t, y].fix(int(started))
    sol = _solve_built(hb, time_limit_s, mip_gap)
    return sol.objective if sol.ok else None, sol.status


def growth_regret(tables: CapacityTables, inputs: HorizonInputs, architecture: str, schedule: pd.DataFrame,
                  paths: dict[str, np.ndarray], *, time_limit_s: float = 60.0, mip_gap: float = 1e-3) -> list[GrowthRegret]:
    """For each named growth path: the schedule held, the plan re-made, and the regret (module docstring)."""
    out = []
    for label, growth in paths.items():
        other = replace(inputs, growth=np.asarray(growth, dtype=float))
        held, status = hold_schedule(tables, other, architecture, schedule, time_limit_s=time_limit_s, mip_gap=mip_gap)
        again = solve_horizon(tables, other, (architecture,), time_limit_s=time_limit_s, mip_gap=mip_gap, baseline=False)
        out.append(GrowthRegret(label, np.asarray(growth, dtype=float), held, again.architectures[architecture].total_usd, status))
    return out
