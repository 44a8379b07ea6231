"""The owned-peak baseline checked at every level, and its periods' pools raised where a slot misses.

The baseline the saving is measured against (:mod:`planner.horizon.model`: only buying, no lead time, every pool
held at one size through the slots of a period, ``static[k,p]: n[k,p] = n[t·S,p]``) is sized by the same
utilisation caps as the plan, so it can miss a latency target at a level for the same reason (a bucket split
between pools, :mod:`planner.horizon.repair`). It is checked the same way:

1. every level ``k = (t, s)`` of the baseline is priced by the plan's analytic level check and, where a bucket
   misses, the pool with the largest wait on its path grows until it meets
   (:func:`planner.horizon.repair.repair_levels`): ``n*[k,p] ≥ n[k,p]``, the fewest instances (in the check's
   steps) that meet at slot ``s``, ``n*[k] = n[k]`` where the level meets;
2. a baseline pool is held through its period, so a fix in one slot is a fix for the period: the period's count
   is the largest any of its slots needs,

   .. math:: N_{t,p} = \\max_{s} n^*_{t·S+s,\\,p} \\;\\ge\\; n_{t·S,p}

   (equal where no slot of ``t`` misses), held in every slot of ``t``. A slot that met at ``n[k]`` still meets at
   ``N ≥ n[k]`` (more instances only shorten a wait), and a slot that needed ``n*[k]`` gets at least that;
3. the counts ``N`` and the routing are fixed and the purchases re-solved
   (:func:`planner.horizon.solve.checked_baseline`), so the baseline pays for the devices the raised pools hold.

A baseline that meets at every level is left as it was (same solution, same cost to the bit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.horizon.model import HorizonBuilt


@dataclass(frozen=True)
class BaselineCheck:
    """What the analytic check of every level found in an owned-peak baseline (module docstring)."""

    n: np.ndarray
    """(K, P) instances after the raise: ``N[t(k), p]`` (the baseline's own counts where its period met)."""
    levels_checked: int
    levels_missed: int
    """Levels where some bucket missed its TTFT or per-token target at the baseline's counts."""
    missed: tuple[int, ...]
    """The levels ``k = t·S + s`` that missed, ascending."""
    unfixed: list[tuple[int, str]]
    """(level, why) of the levels instances do not fix (a per-token target, a TTFT with no wait left to cut)."""
    periods_raised: int
    """Periods whose held pools grow."""
    instances_added: int
    """Instances added to the held pools, summed over the raised periods: ``Σ_{t,p} (N[t,p] − n[t·S,p])``."""
    usd_before: float | None = None
    """Present value of the baseline as solved (unchecked); set by :func:`planner.horizon.solve.checked_baseline`."""
    usd_after: float | None = None
    """Present value after the raise and the re-solve (``usd_before`` when nothing was raised or the re-solve failed)."""
    failed: str = ""
    """Why the raised baseline could not be re-solved ("" when it was, or when nothing was raised)."""
    check_s: float = 0.0
    """Wall time of the check (the level check and the raise, without the re-solve)."""

    @property
    def raised(self) -> bool:
        return self.instances_added > 0


def period_peak_counts(n_levels: np.ndarray, slots: int) -> np.ndarray:
    """``N[k,p] = max_{s'} n[t(k)·S + s', p]``: each pool at the largest count any slot of its period has, in every
    slot of that period (``n_levels`` (K, P) with ``K = T·S``, levels in period-major order)."""
    K, P = n_levels.shape
    per_period = n_levels.reshape(K // slots, slots, P).max(axis=1)
    return np.repeat(per_period, slots, axis=0)


def check_baseline(hb: HorizonBuilt, v: np.ndarray) -> BaselineCheck:
    """Check every level of the owned-peak baseline ``v`` (solved on ``hb``, a model with static pools) and raise each
    period's pools to the most any of its slots needs to meet (module docstring, steps 1–2)."""
    from planner.horizon.repair import repair_levels

    S = len(hb.levels.slot_names)
    n0 = np.rint(v[hb.block("n")]).astype(int)
    rep = repair_levels(hb, v)
    n_raised = np.maximum(period_peak_counts(rep.n, S), n0)
    missed = sorted(set(np.flatnonzero((rep.n != n0).any(axis=1)).tolist()) | {k for k, _why in rep.unfixed})
    added_kp = n_raised - n0
    per_period = added_kp.reshape(-1, S, added_kp.shape[1])[:, 0, :]  # held through the period: one slot counts it
    return BaselineCheck(n=n_raised, levels_checked=rep.checked, levels_missed=len(missed), missed=tuple(missed),
                         unfixed=list(rep.unfixed),
                         periods_raised=int((per_period > 0).any(axis=1).sum()), instances_added=int(per_period.sum()))
