"""Solve the horizon MIP per architecture, extract the procurement schedule, compare with the owned-peak baseline.

Outputs (tidy DataFrames, one row per ...):

- ``schedule``: (period, device) — ``bought`` (orders placed), ``delivered``, ``owned``, ``sold``,
  ``reserved`` (active), ``reserved_started``, ``on_demand_peak`` / ``spot_peak`` (most in any slot),
  ``in_pools_peak`` (devices serving in the busiest slot);
- ``pools``: (period, slot, pool) — the services it can serve (comma-separated; one for a client-service's
  own pools), instances, devices, peak utilisation (busy instances at the slot's peak over instances);
- ``costs``: (period, term) — USD in the period and its present value;
- ``slots``: (period, slot, device) — demand multipliers, devices in pools, on demand, spot, owned unused; a
  per-slot plan adds ``carried_by`` (the architecture carrying the slot).

Each plan is solved on one sparse model (:mod:`planner.horizon.lp`) that HiGHS keeps between solves: the
architectures and the fleet-scale steps differ only in bounds (:func:`planner.horizon.model.architecture_bounds`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem
from planner.horizon.baseline import BaselineCheck, check_baseline
from planner.horizon.lp import Bounds, Solution, solve
from planner.horizon.model import (
    COST_TERMS,
    INTEGER_COUNTS_MAX,
    INTEGER_INSTANCES_MAX,
    HorizonBuilt,
    HorizonInputs,
    architecture_bounds,
    build_horizon,
)
from planner.optimize.prepare import ARCH_ROLES
from planner.progress import stage
from planner.schema.capacity import CapacityTables


@dataclass
class HorizonArchitecture:
    architecture: str
    feasible: bool
    status: str
    total_usd: float | None = None
    """Present value of every period's cost (the objective)."""
    gap: float | None = None
    solve_s: float = 0.0
    """Wall time of the solver calls (model hand-over to HiGHS included)."""
    highs_s: float = 0.0
    """HiGHS's own run time (the part of ``solve_s`` spent inside the solver)."""
    extract_s: float = 0.0
    schedule: pd.DataFrame = field(default_factory=pd.DataFrame)
    pools: pd.DataFrame = field(default_factory=pd.DataFrame)
    costs: pd.DataFrame = field(default_factory=pd.DataFrame)
    slots: pd.DataFrame = field(default_factory=pd.DataFrame)
    baseline_usd: float | None = None
    """Owned-peak baseline: only buying, each period's pools sized for its busiest slot, unused devices idle; checked
    at every level and its periods' pools raised where a slot misses (:mod:`planner.horizon.baseline`)."""
    baseline_check: BaselineCheck | None = None
    """What the check of every level of that baseline found (its cost before and after the raise)."""
    slot_checks: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per-slot verification (:mod:`planner.horizon.verify`): the busiest levels simulated; empty when not run."""
    slot_checks_method: str = ""
    verify_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    """Notes on this plan (the analytic check of every level, :mod:`planner.horizon.repair`; a per-slot plan dearer than
    a pure plan it contains)."""


@dataclass
class HorizonResult:
    architectures: dict[str, HorizonArchitecture]
    levels: int
    periods: int
    slots: list[str]
    build_s: float
    notes: list[str]
    size: dict[str, int]

    @property
    def winner(self) -> str | None:
        ok = [a for a in self.architectures.values() if a.feasible and a.total_usd is not None]
        if not ok:
            return None
        order = {"shared": 0, "disaggregated": 1, "hybrid": 2}  # then a per-slot plan
        return min(ok, key=lambda a: (round(float(a.total_usd or 0.0), 2), order.get(a.architecture, 9))).architecture


def extract(hb: HorizonBuilt, v: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Schedule, pools, costs and slots of a solution ``v`` (one value per column; module docstring)."""
    lv, prep = hb.levels, hb.prep
    T, S = lv.periods, len(lv.slot_names)
    K = T * S
    pools, pts = prep.pools, prep.points
    Y = len(hb.devices)
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    lam = prep.demand["rate_peak_per_s"].to_numpy(float)[pts["d"].to_numpy(int)]
    pool_of = pts["pool"].map({p: j for j, p in enumerate(pools["pool"])}).to_numpy(int)
    acq = hb.inputs.acquisition
    y_pos = {y: j for j, y in enumerate(hb.devices)}
    y_of_pool = np.array([y_pos[y] for y in pools["device"]], dtype=int)
    tp_pool = pools["tp"].to_numpy(int)
    n = np.rint(v[hb.block("n")]).astype(int)                      # (K, P)
    x = v[hb.block("x")]                                            # (K, I)
    P = n.shape[1]
    busy = (lam[None, :] * lv.m_peak_d[:, pts["d"].to_numpy(int)] * tau[None, :] * x) @ np.eye(P)[pool_of]  # busy instances per pool at the peak
    kk, pp = np.nonzero(n > 0)
    slot_names = np.asarray(lv.slot_names, dtype=object)
    served = pts.groupby("pool")["service"].agg(lambda v: ", ".join(sorted(set(map(str, v)))))
    pool_svc = pools["pool"].map(served).astype(str).to_numpy()
    pool_df = pd.DataFrame({"period": kk // S, "slot": slot_names[kk % S], "pool": pools["pool"].astype(str).to_numpy()[pp],
                            "services": pool_svc[pp],
                            "instances": n[kk, pp], "devices": n[kk, pp] * tp_pool[pp], "utilization_peak": busy[kk, pp] / n[kk, pp]})
    used = (n * tp_pool[None, :]) @ np.eye(Y, dtype=int)[y_of_pool]  # devices in pools per type

    def per_type(block: str, names: list[str]) -> np.ndarray:
        out = np.zeros((K, Y), dtype=int)
        if names:
            out[:, [y_pos[y] for y in names]] = np.rint(v[hb.block(block)]).astype(int)
        return out

    od, sp_ = per_type("od", hb.od_y), per_type("spot", hb.spot_y)
    owned = hb.owned.value(v).reshape(T, Y)
    reserved = hb.reserved.value(v).reshape(T, Y)
    avail_spot = np.array([acq[y].spot_availability for y in hb.devices])
    held = (owned + reserved)[np.arange(K) // S]
    unused = np.maximum(0.0, held - np.maximum(0, used - od - sp_ * avail_spot[None, :]))
    kY = np.repeat(np.arange(K), Y)
    slots = pd.DataFrame({"period": kY // S, "slot": slot_names[kY % S], "device": np.tile(np.asarray(hb.devices, dtype=object), K),
                          "peak_multiplier": lv.m_peak[kY], "mean_multiplier": lv.m_mean[kY], "in_pools": used.ravel(),
                          "on_demand": od.ravel(), "spot": sp_.ravel(), "owned_or_reserved_unused": unused.ravel()})

    def per_period(block: str, names: list[str]) -> np.ndarray:
        out = np.zeros((T, Y), dtype=int)
        if names:
            out[:, [y_pos[y] for y in names]] = np.rint(v[hb.block(block)]).astype(int)
        return out

    bought, sold, started = per_period("buy", hb.buy_y), per_period("sell", hb.sell_y), per_period("res", hb.res_y)
    lead = np.array([acq[y].lead_time_periods for y in hb.devices], dtype=int)
    tY = np.repeat(np.arange(T), Y)
    yy = np.tile(np.arange(Y), T)
    src = tY - lead[yy]
    delivered = np.where(src >= 0, bought[np.maximum(src, 0), yy], 0)
    peak = lambda a: a.reshape(T, S, Y).max(axis=1).ravel()  # noqa: E731 - most in any slot of the period
    schedule = pd.DataFrame({"period": tY, "device": np.tile(np.asarray(hb.devices, dtype=object), T), "bought": bought.ravel(),
                             "delivered": delivered, "owned": np.rint(owned).astype(int).ravel(), "sold": sold.ravel(),
                             "reserved": np.rint(reserved).astype(int).ravel(), "reserved_started": started.ravel(),
                             "on_demand_peak": peak(od), "spot_peak": peak(sp_), "in_pools_peak": peak(used)})
    rows = []
    for term in COST_TERMS:
        usd = hb.costs[term].value(v)
        rows.append(pd.DataFrame({"period": np.arange(T), "term": term, "usd": usd, "usd_present_value": usd * hb.discount}))
    costs = pd.concat(rows).sort_values("period", kind="stable").reset_index(drop=True)  # terms in COST_TERMS order
    return schedule, pool_df, costs, slots


def _solve_built(hb: HorizonBuilt, b: Bounds, time_limit_s: float, mip_gap: float) -> Solution:
    """Solve under bounds ``b``. A continuous (fleet-scale) model goes in three steps (model docstring), each a
    HiGHS run on the same matrix with its own bounds: (1) the LP relaxation (binaries too: its objective is a lower
    bound of the whole problem); (2) the pools and device types the relaxation uses fixed on and the rest off
    (and, in a per-slot plan, each slot's architecture: ``w`` rounded), counts continuous; (3) counts rounded up and fixed, purchases, reservations and rentals integer. The gap
    reported is against step 1's bound."""
    if hb.integer:
        return solve(hb.lp, b, time_limit_s=time_limit_s, mip_gap=mip_gap)
    z, u = hb.block("z"), hb.block("u")
    relaxed_b = b.copy()
    relaxed_b.integer[:] = 0
    relaxed = solve(hb.lp, relaxed_b, time_limit_s=time_limit_s, mip_gap=mip_gap)
    wall, highs = relaxed.wall_s, relaxed.highs_s
    if not relaxed.ok or relaxed.values is None:
        return relaxed
    vals = relaxed.values
    z_on = (vals[z] > 1e-6).astype(float)
    types_max = int(round(float(b.row_ub[hb.lp.families["types_max"]][0])))
    dev_pool = hb.prep.pools["device"].tolist()
    u_on = np.zeros(u.shape)
    for t in range(hb.levels.periods):
        keep = set(hb.devices)
        if types_max < len(hb.devices):
            # at most types_max device types per period: keep the types the relaxation leans on most
            weight = {y: sum(float(vals[z[t, p]]) for p in range(len(dev_pool)) if dev_pool[p] == y) for y in hb.devices}
            keep = set(sorted(weight, key=lambda y: -weight[y])[:types_max])
            z_on[t] *= np.array([y in keep for y in dev_pool], dtype=float)
        u_on[t] = [1.0 if y in keep and any(z_on[t, p] for p in range(len(dev_pool)) if dev_pool[p] == y) else 0.0
                   for y in hb.devices]
    fixed_b = relaxed_b.copy()
    fixed_b.col_lb[z], fixed_b.col_ub[z] = z_on, np.minimum(z_on, b.col_ub[z])
    fixed_b.col_lb[u], fixed_b.col_ub[u] = u_on, u_on
    w = hb.block("w")
    if w.size and hb.switching is not None:
        # per-slot plan: each slot goes to the architecture the relaxation leans on (w rounded); a pool whose
        # architecture carries no slot of a period is off in that period
        w_on = (vals[w] >= 0.5).astype(float)
        fixed_b.col_lb[w], fixed_b.col_ub[w] = w_on, w_on
        S = len(hb.levels.slot_names)
        carries = {0: (w_on.reshape(-1, S) < 0.5).any(axis=1), 1: (w_on.reshape(-1, S) > 0.5).any(axis=1)}  # per period
        ra, rb = ARCH_ROLES[hb.switching[0]], ARCH_ROLES[hb.switching[1]]
        for p, role in enumerate(hb.prep.pools["role"].astype(str)):
            side = 0 if role in ra and role not in rb else 1 if role in rb and role not in ra else -1
            if side >= 0:
                off = ~carries[side]
                fixed_b.col_lb[z[off, p]] = 0.0
                fixed_b.col_ub[z[off, p]] = 0.0
        dev_on = np.array([[fixed_b.col_ub[z[t, p]] > 0 for p in range(len(dev_pool))] for t in range(hb.levels.periods)])
        for j, y in enumerate(hb.devices):  # a device type with no pool left on is off
            mine = np.array([d == y for d in dev_pool])
            u_y = (dev_on[:, mine].any(axis=1) & (u_on[:, j] > 0)).astype(float)
            fixed_b.col_lb[u[:, j]], fixed_b.col_ub[u[:, j]] = u_y, u_y
    fixed = solve(hb.lp, fixed_b, time_limit_s=time_limit_s, mip_gap=mip_gap)  # an LP: n continuous, pools chosen
    wall, highs = wall + fixed.wall_s, highs + fixed.highs_s
    final = fixed
    if fixed.ok and fixed.values is not None:
        final_b = fixed_b.copy()
        n = hb.block("n")
        n_up = np.ceil(fixed.values[n] - 1e-6)
        final_b.col_lb[n], final_b.col_ub[n] = n_up, n_up
        for name in ("buy", "sell", "res", "od", "spot"):
            final_b.integer[hb.block(name)] = 1
        final = solve(hb.lp, final_b, time_limit_s=time_limit_s, mip_gap=mip_gap)
        wall, highs = wall + final.wall_s, highs + final.highs_s
    if not final.ok:
        return Solution(False, f"rounding the fleet-scale solution failed: {final.status}", wall_s=wall, highs_s=highs)
    return Solution(True, f"{final.status} (fleet scale: pools from the LP relaxation, counts rounded up; the gap is "
                    "against the relaxation's bound)", final.values, final.objective, relaxed.objective, wall, highs)


def solve_architecture(hb: HorizonBuilt, architecture: str, time_limit_s: float, mip_gap: float,
                       fix: dict[str, np.ndarray] | None = None, *, repair: bool = True) -> tuple[Solution, Bounds]:
    """Solve ``hb`` for one architecture; ``fix`` holds variable blocks at given values (e.g. a schedule's purchases).
    With ``repair`` every level is then checked analytically and the pools of a level that misses its latency targets
    topped up (:mod:`planner.horizon.repair`). The owned-peak baseline is solved without it (its pools are held through
    a period: a top-up of one level would break ``static``) and checked by :func:`checked_baseline` instead, which
    raises a period's held pools to the most any of its slots needs."""
    b = architecture_bounds(hb, architecture)
    for name, val in (fix or {}).items():
        col = hb.block(name)
        b.col_lb[col] = val
        b.col_ub[col] = val
    with stage(f"solve {architecture} over the horizon"):
        sol = _solve_built(hb, b, time_limit_s, mip_gap)
    if repair and sol.ok and sol.values is not None:
        with stage(f"check every level of {architecture} analytically"):
            sol = _repaired(hb, b, sol, time_limit_s, mip_gap)
    return sol, b


def _repaired(hb: HorizonBuilt, b: Bounds, sol: Solution, time_limit_s: float, mip_gap: float) -> Solution:
    """``sol`` with the pools of every level that misses its latency targets analytically topped up
    (:func:`planner.horizon.repair.repair_levels`) and the purchases, reservations and rentals re-solved with the
    routing fixed and those counts (pinned; when that is infeasible — a ramp or static-pool row ties a level to its
    neighbours — as lower bounds, the counts integer, so the neighbours can rise); the gap stays against the first
    solve's bound."""
    from planner.horizon.repair import repair_levels

    assert sol.values is not None
    rep = repair_levels(hb, sol.values)
    S = len(hb.levels.slot_names)

    def level(k: int) -> str:
        return f"period {k // S} {hb.levels.slot_names[k % S]}"

    unfixed = ""
    if rep.unfixed:
        listed = "; ".join(f"{level(k)}: {why}" for k, why in rep.unfixed[:3])
        more = f" and {len(rep.unfixed) - 3} more" if len(rep.unfixed) > 3 else ""
        unfixed = f"; {len(rep.unfixed)} level(s) still miss ({listed}{more})"
    missed = rep.levels_repaired + len(rep.unfixed) - rep.repaired_and_unfixed
    if rep.instances_added == 0:
        return replace(sol, note=f"every level checked analytically: all {rep.checked} meet their latency targets" if not unfixed
                       else f"every level checked analytically: {missed} of {rep.checked} level(s) miss their latency targets"
                            f"{unfixed}; instances do not fix them")
    rb, over = _routing_held(hb, b, sol.values, rep.n)
    n = hb.block("n")
    pinned = rb.copy()
    pinned.col_lb[n], pinned.col_ub[n] = rep.n, rep.n
    again = solve(hb.lp, pinned, time_limit_s=time_limit_s, mip_gap=mip_gap)
    wall, highs = sol.wall_s + again.wall_s, sol.highs_s + again.highs_s
    how = ""
    if not again.ok or again.values is None or again.objective is None:
        # the counts as lower bounds (never below the top-up), integer, up to their bounds plus the top-up's overage
        rb.col_lb[n] = rep.n
        rb.col_ub[n] = np.maximum(b.col_ub[n], rep.n) + over
        rb.integer[n] = 1
        again = solve(hb.lp, rb, time_limit_s=time_limit_s, mip_gap=mip_gap)
        wall, highs = wall + again.wall_s, highs + again.highs_s
        how = " (their neighbouring levels raised with them: the counts held exactly were infeasible)"
    if not again.ok or again.values is None or again.objective is None:
        return replace(sol, wall_s=wall, highs_s=highs,
                       note=f"every level checked analytically: {missed} of {rep.checked} level(s) miss their latency targets and "
                            f"topping up their pools failed ({again.status}); the plan shown is not topped up{unfixed}")
    return Solution(True, sol.status, again.values, again.objective, sol.bound, wall, highs,
                    note=f"every level checked analytically: {missed} of {rep.checked} level(s) missed their latency "
                         f"targets at the MIP's pool sizes (a pool with fewer instances than its utilisation caps assumed, e.g. a bucket "
                         f"split between pools); {rep.levels_repaired} topped up ({rep.instances_added:,} instances added over those "
                         f"levels){how}, +${again.objective - (sol.objective or 0.0):,.0f} present value{unfixed}")


def _routing_held(hb: HorizonBuilt, b: Bounds, v: np.ndarray, n_new: np.ndarray) -> tuple[Bounds, np.ndarray]:
    """Bounds ``b`` with the routing ``x`` and the switches ``z``, ``u``, ``w`` of the solution ``v`` fixed, for a
    re-solve at the instance counts ``n_new`` (K, P) (the counts themselves left to the caller): the big-M of
    ``pool_on[k,p]`` (``n − M z ≤ 0``, ``M`` the column's default upper bound, sized from the MIP's caps) raised by
    ``over = max(0, n_new − M)``, which is returned too; at fleet scale, as step 3 of :func:`_solve_built`, only the
    purchases, sales, reservations and rentals integer."""
    rb = b.copy()
    n, x = hb.block("n"), hb.block("x")
    over = np.maximum(0.0, n_new - hb.bounds.col_ub[n])
    rows = hb.lp.families["pool_on"]
    rb.row_ub[rows] = rb.row_ub[rows] + over.ravel()
    rb.col_lb[x], rb.col_ub[x] = v[x], v[x]
    for name in ("z", "u", "w"):
        col = hb.block(name)
        if col.size:
            val = np.rint(v[col])
            rb.col_lb[col], rb.col_ub[col] = val, val
    if not hb.integer:
        rb.integer[:] = 0
        for name in ("buy", "sell", "res", "od", "spot"):
            rb.integer[hb.block(name)] = 1
    return rb, over


def checked_baseline(hb: HorizonBuilt, b: Bounds, sol: Solution, time_limit_s: float, mip_gap: float,
                     found: BaselineCheck | None = None) -> tuple[Solution, BaselineCheck]:
    """The owned-peak baseline ``sol`` (solved on ``hb``, static pools, under bounds ``b``) checked at every level
    (:func:`planner.horizon.baseline.check_baseline`) and, where a level misses, re-solved with each period's pools
    pinned at ``N[t,p] = max_s n*[t·S+s,p]`` (the most any of its slots needs) and the routing held
    (:func:`_routing_held`): the purchases re-solved to pay for them. Unchanged (the same :class:`Solution`) when
    nothing is raised; when the re-solve fails, the baseline as solved with ``failed`` saying why. ``usd_before`` /
    ``usd_after`` are the present values before and after; the re-solve's time is added to ``wall_s`` / ``highs_s``
    and the gap stays against the first solve's bound. ``found``: the check of ``sol`` already run (by
    :func:`solve_horizon`, alongside the plans), else it is run here."""
    assert sol.values is not None
    chk = found if found is not None else check_baseline(hb, sol.values)
    chk = replace(chk, usd_before=sol.objective, usd_after=sol.objective)
    if not chk.raised:
        return sol, chk
    rb, _over = _routing_held(hb, b, sol.values, chk.n)
    n = hb.block("n")
    rb.col_lb[n], rb.col_ub[n] = chk.n, chk.n
    again = solve(hb.lp, rb, time_limit_s=time_limit_s, mip_gap=mip_gap)
    wall, highs = sol.wall_s + again.wall_s, sol.highs_s + again.highs_s
    if not again.ok or again.values is None or again.objective is None:
        return replace(sol, wall_s=wall, highs_s=highs), replace(chk, failed=again.status)
    return (Solution(True, sol.status, again.values, again.objective, sol.bound, wall, highs, note=sol.note),
            replace(chk, usd_after=again.objective))


def baseline_note(chk: BaselineCheck, slot_names: list[str], architecture: str | None = None) -> str:
    """One line on the owned-peak baseline's check for the plan's notes, naming up to three of the levels that missed
    (``slot_names`` the horizon's slots; ``architecture``: named when the plan is per slot, whose baseline is the
    better of its pair's)."""
    who = f"the owned-peak baseline ({architecture})" if architecture else "the owned-peak baseline"
    head = f"{who} the saving is measured against, checked analytically at every level:"
    if chk.levels_missed == 0:
        return f"{head} all {chk.levels_checked} meet their latency targets (its cost unchanged)"
    S = len(slot_names)
    at = ", ".join(f"period {k // S} {slot_names[k % S]}" for k in chk.missed[:3])
    more = f" and {len(chk.missed) - 3} more" if len(chk.missed) > 3 else ""
    level = f"{chk.levels_missed} of {chk.levels_checked} level(s) missed their latency targets at its pool sizes ({at}{more})"
    unfixed = ""
    if chk.unfixed:
        why = "; ".join(f"period {k // S} {slot_names[k % S]}: {w}" for k, w in chk.unfixed[:3])
        unfixed = f"; {len(chk.unfixed)} level(s) still miss ({why}{' and more' if len(chk.unfixed) > 3 else ''})"
    if not chk.raised:
        return f"{head} {level}; instances do not fix them, its cost unchanged{unfixed}"
    raised = (f"{chk.periods_raised} period(s)' held pools raised to the most any of their slots needs "
              f"(+{chk.instances_added:,} instance{'s' if chk.instances_added != 1 else ''})")
    if chk.failed:
        return f"{head} {level}; re-solving with {raised} failed ({chk.failed}): the saving is against the unchecked baseline{unfixed}"
    before, after = float(chk.usd_before or 0.0), float(chk.usd_after or 0.0)
    return (f"{head} {level}; {raised}: ${before:,.0f} → ${after:,.0f} present value (+${after - before:,.0f}), "
            f"the saving is against the raised baseline{unfixed}")


def solve_horizon(tables: CapacityTables, inputs: HorizonInputs, architectures: tuple[str, ...], *, time_limit_s: float = 60.0,
                  mip_gap: float = 1e-3, baseline: bool = True, verify_slots: int = 0) -> HorizonResult:
    """Plan every architecture over the horizon; with ``baseline``, also the owned-peak plan for the saving, checked at
    every level like the plans (:func:`checked_baseline`; one per architecture, shared by the plans that need it); with
    ``verify_slots`` > 0, simulate that many of each plan's busiest levels (:mod:`planner.horizon.verify`).
    An entry ``"A/B per slot"`` (:func:`switching_name` of ``inputs.per_slot_architecture``) is the per-slot plan:
    one MIP with both architectures' pools and a binary per slot choosing which carries its traffic (model docstring)."""
    from planner.forked import fork_each

    with stage("build the horizon model"):
        hb = build_horizon(tables, inputs)
    build_s = hb.build_s
    # the plain architectures are independent: one per core (planner.forked), each from a fresh HiGHS so that its plan
    # does not depend on which was solved before it in the same process
    plain = [a for a in architectures if a in ARCH_ROLES]
    with stage(f"plan {', '.join(plain)} over the horizon" + (" (one per core)" if len(plain) > 1 else "")):
        solved = dict(zip(plain, fork_each(lambda a: _plan(hb, a, time_limit_s, mip_gap, verify_slots, fresh=True), plain),
                          strict=True))
    archs: dict[str, HorizonArchitecture] = {}
    pairs: dict[str, tuple[str, ...]] = {}
    for arch in architectures:
        if arch in solved:
            archs[arch], pairs[arch] = solved[arch], (arch,)
            continue
        model = build_horizon(tables, inputs, switching=per_slot_pair(inputs, arch), integer=hb.integer, like=hb)
        build_s += model.build_s
        archs[arch], pairs[arch] = _plan(model, arch, time_limit_s, mip_gap, verify_slots), model.switching or (arch,)
    wanted = list(dict.fromkeys(a for arch in architectures if baseline and archs[arch].feasible for a in pairs[arch]))
    if wanted:  # each baseline solved and checked once (in parallel, fresh HiGHS each), its time counted on the first plan using it
        base_hb = build_horizon(tables, inputs, static_pools=True, buy_only=True, integer=hb.integer, like=hb)
        build_s += base_hb.build_s
        with stage(f"owned-peak baseline{'s' if len(wanted) > 1 else ''} of {', '.join(wanted)}"
                   + (" (one per core)" if len(wanted) > 1 else "")):
            bases = dict(zip(wanted, fork_each(lambda a: _owned_peak_baseline(base_hb, a, time_limit_s, mip_gap), wanted),
                             strict=True))
        counted: set[str] = set()
        for arch in architectures:
            ha = archs[arch]
            if not ha.feasible:
                continue
            best: tuple[str, Solution, BaselineCheck | None] | None = None
            for a in pairs[arch]:  # a per-slot plan's baseline: the better of its two, owned at peak
                base, base_chk = bases[a]
                if a not in counted:
                    counted.add(a)
                    ha.solve_s += base.wall_s
                    ha.highs_s += base.highs_s
                if base.ok and (best is None or (base.objective or 0.0) < (best[1].objective or 0.0)):
                    best = (a, base, base_chk)
            if best is not None:
                ha.baseline_usd, ha.baseline_check = best[1].objective, best[2]
                if best[2] is not None:
                    ha.notes.append(baseline_note(best[2], hb.levels.slot_names, best[0] if len(pairs[arch]) > 1 else None))
    _note_dearer_per_slot(archs)
    notes = list(hb.levels.notes)
    if not hb.integer:
        notes.append(f"fleet scale (the best pool above {INTEGER_INSTANCES_MAX} instances, or more than {INTEGER_COUNTS_MAX:,} "
                     "instance counts): LP relaxation, the pools it uses, counts rounded up (the gap reported is against the relaxation's bound)")
    if inputs.weight_load is not None:
        wl = inputs.weight_load
        notes.append(f"weight loading: {wl.device_gb_per_s:g} GB/s per device"
                     + (f", {wl.fleet_gb_per_s:g} GB/s for the whole weight store (the ramp limit)" if wl.fleet_gb_per_s else "")
                     + f"; loading device-hours priced at {', '.join(f'{y} ${p:.2f}/h' for y, p in wl.usd_per_device_hour.items())}"
                     + (f" ({wl.source})" if wl.source else ""))
    return HorizonResult(architectures=archs, levels=hb.levels.m_peak.size, periods=hb.levels.periods, slots=hb.levels.slot_names,
                         build_s=build_s, notes=notes, size=hb.size)


def _owned_peak_baseline(base_hb: HorizonBuilt, architecture: str, time_limit_s: float,
                         mip_gap: float) -> tuple[Solution, BaselineCheck | None]:
    """The owned-peak baseline of ``architecture`` on the static-pool model ``base_hb``: solved from a fresh HiGHS (the
    same whichever baseline was solved before), then checked at every level and raised where a slot misses
    (:func:`checked_baseline`; no check when the solve found no plan)."""
    base_hb.lp.forget_solver()
    base, base_b = solve_architecture(base_hb, architecture, time_limit_s, mip_gap, repair=False)
    if not base.ok or base.values is None:
        return base, None
    with stage(f"check every level of the {architecture} owned-peak baseline analytically"):
        t0 = time.perf_counter()
        found = replace(check_baseline(base_hb, base.values), check_s=time.perf_counter() - t0)
        return checked_baseline(base_hb, base_b, base, time_limit_s, mip_gap, found)


def _plan(model: HorizonBuilt, arch: str, time_limit_s: float, mip_gap: float, verify_slots: int, *,
          fresh: bool = False) -> HorizonArchitecture:
    """One plan of :func:`solve_horizon` (without its baseline): solved, every level checked and topped up, its tables
    extracted and, with ``verify_slots`` > 0, its busiest levels simulated. ``fresh``: from a new HiGHS instance
    (:meth:`planner.horizon.lp.LinearModel.forget_solver`), not from the basis of the model's last solve."""
    if fresh:
        model.lp.forget_solver()
    sol, _ = solve_architecture(model, arch, time_limit_s, mip_gap)
    ha = HorizonArchitecture(arch, sol.ok, sol.status, sol.objective, sol.gap, sol.wall_s, highs_s=sol.highs_s,
                             notes=[sol.note] if sol.note else [])
    if sol.ok and sol.values is not None:
        t1 = time.perf_counter()
        ha.schedule, ha.pools, ha.costs, ha.slots = extract(model, sol.values)
        if model.switching:
            ha.slots = ha.slots.merge(_slot_architecture(model, sol.values), on=["period", "slot"], how="left")
        ha.extract_s = time.perf_counter() - t1
        if verify_slots > 0:
            from planner.horizon.verify import verify_slots as check_slots

            t2 = time.perf_counter()
            chk = check_slots(model, sol.values, arch, verify_slots)
            ha.slot_checks, ha.slot_checks_method, ha.verify_s = chk.rows, chk.method, time.perf_counter() - t2
    return ha


def per_slot_pair(inputs: HorizonInputs, name: str) -> tuple[str, str]:
    """The two architectures of the per-slot plan called ``name`` (an error if the inputs have none by that name)."""
    pair = inputs.per_slot_architecture
    if pair is None or name != switching_name(pair):
        known = ", ".join(ARCH_ROLES) + (f", {switching_name(pair)}" if pair else "")
        raise InputError(Problem("", "architecture", f"unknown architecture {name!r}", f"use one of {known}"))
    return pair


def model_for(tables: CapacityTables, inputs: HorizonInputs, architecture: str) -> HorizonBuilt:
    """The model a plan of ``architecture`` is solved on (the per-slot model for a per-slot plan)."""
    if architecture in ARCH_ROLES:
        return build_horizon(tables, inputs)
    return build_horizon(tables, inputs, switching=per_slot_pair(inputs, architecture))


def switching_name(pair: tuple[str, str]) -> str:
    """Name of the per-slot plan between two architectures, e.g. ``shared/disaggregated per slot``."""
    return f"{pair[0]}/{pair[1]} per slot"


def _slot_architecture(hb: HorizonBuilt, v: np.ndarray) -> pd.DataFrame:
    """(period, slot) → ``carried_by``: the architecture that carries the slot in a per-slot plan."""
    assert hb.switching is not None
    S = len(hb.levels.slot_names)
    w = np.rint(v[hb.block("w")]).astype(int)
    k = np.arange(w.size)
    return pd.DataFrame({"period": k // S, "slot": np.asarray(hb.levels.slot_names, dtype=object)[k % S],
                         "carried_by": np.where(w == 1, hb.switching[1], hb.switching[0])})


def _note_dearer_per_slot(archs: dict[str, HorizonArchitecture]) -> None:
    """A per-slot plan contains each pure plan of its pair (every slot carried by one architecture is one of its
    choices), so costing more than one of them is the fleet-scale heuristic's shortfall (the per-slot binaries and the
    pools rounded from the LP relaxation, :func:`_solve_built`), not a property of the instance: said on the plan."""
    for name, a in archs.items():
        if name in ARCH_ROLES or not a.feasible or a.total_usd is None:
            continue
        pair = [p for p in name.removesuffix(" per slot").split("/") if p in archs]
        pure = [archs[p] for p in pair if archs[p].feasible and archs[p].total_usd is not None]
        if not pure:
            continue
        best = min(pure, key=lambda p: float(p.total_usd or 0.0))
        extra = float(a.total_usd) - float(best.total_usd or 0.0)
        if extra > 0.5:
            gap = f", gap {a.gap:.1%} against its LP bound" if a.gap is not None else ""
            a.notes.append(f"this per-slot plan costs ${extra:,.0f} ({100 * extra / float(best.total_usd or 1.0):.1f} %) more than the "
                           f"pure {best.architecture} plan, which it contains (every slot {best.architecture} is one of its choices): "
                           f"the solve stopped short of it (within its gap to the bound{gap}: the fleet-scale rounding from the LP "
                           f"relaxation, a time limit, or the levels' top-ups, which differ between the two plans), so the split is not "
                           f"shown to pay; the {best.architecture} plan is the better one")
