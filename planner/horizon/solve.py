"""Solve the horizon MIP per architecture, extract the procurement schedule, compare with the owned-peak baseline.

Outputs (tidy DataFrames, one row per ...):

- ``schedule``: (period, device) — ``bought`` (orders placed), ``delivered``, ``owned``, ``sold``,
  ``reserved`` (active), ``reserved_started``, ``on_demand_peak`` / ``spot_peak`` (most in any slot),
  ``in_pools_peak`` (devices serving in the busiest slot);
- ``pools``: (period, slot, pool) — instances, devices, peak utilisation (busy instances at the slot's
  peak over instances);
- ``costs``: (period, term) — USD in the period and its present value;
- ``slots``: (period, slot) — demand multipliers, devices in pools, on demand, spot, owned unused.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.horizon.model import (
    COST_TERMS,
    INTEGER_COUNTS_MAX,
    INTEGER_INSTANCES_MAX,
    HorizonBuilt,
    HorizonInputs,
    build_horizon,
    restrict_horizon,
)
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
    """Owned-peak baseline: only buying, each period's pools sized for its busiest slot, unused devices idle."""


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
        order = {"shared": 0, "disaggregated": 1, "hybrid": 2}
        return min(ok, key=lambda a: (round(float(a.total_usd or 0.0), 2), order.get(a.architecture, 9))).architecture


def _solver() -> Any:
    from pyomo.contrib.solver.solvers.highs import Highs

    return Highs()


@dataclass
class _Solved:
    ok: bool
    status: str
    objective: float | None = None
    gap: float | None = None
    wall_s: float = 0.0
    highs_s: float = 0.0


def _solve(m: Any, time_limit_s: float, mip_gap: float) -> _Solved:
    t0 = time.perf_counter()
    res = _solver().solve(m, time_limit=time_limit_s, rel_gap=mip_gap, threads=1, load_solutions=False,
                          raise_exception_on_nonoptimal_result=False, solver_options={"random_seed": 0})
    wall = time.perf_counter() - t0
    highs = float(getattr(res.timing_info, "highs_time", 0.0) or 0.0)
    sol = getattr(res.solution_status, "name", "")
    term = getattr(res.termination_condition, "name", str(res.termination_condition))
    if sol not in ("optimal", "feasible"):
        return _Solved(False, "infeasible" if "infeasible" in term.lower() else term, wall_s=wall, highs_s=highs)
    res.solution_loader.load_vars()
    obj, bound = res.incumbent_objective, res.objective_bound
    gap = max(0.0, (obj - bound) / abs(obj)) if obj is not None and bound is not None and abs(obj) > 1e-9 else None
    status = "optimal" if sol == "optimal" else f"feasible ({term}; best plan found, not proven optimal)"
    return _Solved(True, status, float(obj) if obj is not None else None, gap, wall, highs)


def _val(v: Any) -> float:
    x = v.value
    return float(x) if x is not None else 0.0


def extract(hb: HorizonBuilt) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Schedule, pools, costs and slots of a solved model (module docstring)."""
    import pyomo.environ as pe

    m, lv, prep = hb.model, hb.levels, hb.prep
    T, S = lv.periods, len(lv.slot_names)
    pools = prep.pools
    pts = prep.points
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    lam = prep.demand["rate_peak_per_s"].to_numpy(float)[pts["d"].to_numpy(int)]
    pool_of = pts["pool"].map({p: j for j, p in enumerate(pools["pool"])}).to_numpy(int)
    acq = hb.inputs.acquisition
    pool_dev = pools["device"].astype(str).tolist()
    pool_tp = pools["tp"].astype(int).tolist()
    pool_name = pools["pool"].astype(str).tolist()
    pool_rows, slot_rows = [], []
    for k in range(T * S):
        t, s = divmod(k, S)
        x = np.array([_val(m.x[k, i]) for i in range(len(pts))])
        busy = np.bincount(pool_of, weights=lam * lv.m_peak[k] * tau * x, minlength=len(pools)) if len(pts) else np.zeros(len(pools))
        used = dict.fromkeys(hb.devices, 0)
        for p in range(len(pools)):
            n = round(_val(m.n[k, p]))
            if n <= 0:
                continue
            used[pool_dev[p]] += n * pool_tp[p]
            pool_rows.append({"period": t, "slot": lv.slot_names[s], "pool": pool_name[p], "instances": n,
                              "devices": n * pool_tp[p], "utilization_peak": float(busy[p] / n)})
        for y in hb.devices:
            od = round(_val(m.od[k, y])) if (k, y) in m.od else 0
            sp = round(_val(m.spot[k, y])) if (k, y) in m.spot else 0
            avail = pe.value(m.owned[t, y]) + pe.value(m.reserved[t, y])
            slot_rows.append({"period": t, "slot": lv.slot_names[s], "device": y, "peak_multiplier": float(lv.m_peak[k]),
                              "mean_multiplier": float(lv.m_mean[k]), "in_pools": used[y], "on_demand": od, "spot": sp,
                              "owned_or_reserved_unused": max(0.0, float(avail) - max(0, used[y] - od - sp * acq[y].spot_availability))})
    slots = pd.DataFrame(slot_rows)
    sched_rows = []
    for t in range(T):
        for y in hb.devices:
            a = acq[y]
            bought = round(_val(m.buy[t, y])) if (t, y) in m.buy else 0
            delivered = round(_val(m.buy[t - a.lead_time_periods, y])) if (t - a.lead_time_periods, y) in m.buy else 0
            sl = slots[(slots["period"] == t) & (slots["device"] == y)]
            sched_rows.append({
                "period": t, "device": y, "bought": bought, "delivered": delivered,
                "owned": round(float(pe.value(m.owned[t, y]))),
                "sold": round(_val(m.sell[t, y])) if (t, y) in m.sell else 0,
                "reserved": round(float(pe.value(m.reserved[t, y]))),
                "reserved_started": round(_val(m.res[t, y])) if (t, y) in m.res else 0,
                "on_demand_peak": int(sl["on_demand"].max()) if len(sl) else 0,
                "spot_peak": int(sl["spot"].max()) if len(sl) else 0,
                "in_pools_peak": int(sl["in_pools"].max()) if len(sl) else 0,
            })
    cost_rows = []
    disc = m.discount
    for t in range(T):
        for term in COST_TERMS:
            v = float(pe.value(getattr(m, f"cost_{term}")[t]))
            cost_rows.append({"period": t, "term": term, "usd": v, "usd_present_value": v * float(disc[t])})
    return pd.DataFrame(sched_rows), pd.DataFrame(pool_rows, columns=["period", "slot", "pool", "instances", "devices", "utilization_peak"]), \
        pd.DataFrame(cost_rows), slots


def _solve_built(hb: HorizonBuilt, time_limit_s: float, mip_gap: float) -> _Solved:
    """Solve. A continuous (fleet-scale) model goes in three steps (model docstring): the LP relaxation
    (binaries too: its objective is a lower bound of the whole problem), the pools and device types the
    relaxation uses switched on and the rest off, then counts rounded up and purchases, reservations and
    rentals made integer. The gap reported is measured against the relaxation's bound."""
    import pyomo.environ as pe

    m = hb.model
    if hb.integer:
        return _solve(m, time_limit_s, mip_gap)
    binaries = [(v, i) for v in (m.z, m.u) for i in v if v[i].ub is None or v[i].ub > 0]
    for v, i in binaries:
        v[i].domain = pe.UnitInterval
    relaxed = _solve(m, time_limit_s, mip_gap)
    wall, highs = relaxed.wall_s, relaxed.highs_s
    if not relaxed.ok:
        for v, i in binaries:
            v[i].domain = pe.Binary
        return relaxed
    bound = relaxed.objective
    on = {(v.name, i): 1 if (v[i].value or 0.0) > 1e-6 else 0 for v, i in binaries}
    if int(pe.value(m.types_max)) < len(hb.devices):
        # at most types_max device types per period: keep the types the relaxation leans on most
        dev_pool = hb.prep.pools["device"].tolist()
        for t in range(hb.levels.periods):
            weight = {y: sum(float(m.z[t, p].value or 0.0) for p in range(len(dev_pool)) if dev_pool[p] == y) for y in hb.devices}
            keep = set(sorted(weight, key=lambda y: -weight[y])[: int(pe.value(m.types_max))])
            for p, y in enumerate(dev_pool):
                if y not in keep:
                    on[("z", (t, p))] = 0
            for y in hb.devices:
                on[("u", (t, y))] = 1 if y in keep and any(on.get(("z", (t, p)), 0) for p in range(len(dev_pool)) if dev_pool[p] == y) else 0
    for v, i in binaries:
        v[i].domain = pe.Binary
        v[i].setlb(on[(v.name, i)])
        v[i].setub(on[(v.name, i)])
    fixed = _solve(m, time_limit_s, mip_gap)  # an LP again: n continuous with the pools chosen
    wall, highs = wall + fixed.wall_s, highs + fixed.highs_s
    if fixed.ok:
        for idx in m.n:
            v = math.ceil((m.n[idx].value or 0.0) - 1e-6)
            m.n[idx].setlb(v)
            m.n[idx].setub(v)
        for var in (m.buy, m.sell, m.res, m.od, m.spot):
            for idx in var:
                var[idx].domain = pe.NonNegativeIntegers
        final = _solve(m, time_limit_s, mip_gap)
        wall, highs = wall + final.wall_s, highs + final.highs_s
    else:
        final = fixed
    for v, i in binaries:
        v[i].setlb(0)
        v[i].setub(1)
    if not final.ok:
        return _Solved(False, f"rounding the fleet-scale solution failed: {final.status}", wall_s=wall, highs_s=highs)
    obj = final.objective
    gap = max(0.0, (obj - bound) / abs(obj)) if obj is not None and bound is not None and abs(obj) > 1e-9 else None
    return _Solved(True, f"{final.status} (fleet scale: pools from the LP relaxation, counts rounded up; the gap is "
                   "against the relaxation's bound)", obj, gap, wall, highs)


def _unfix(hb: HorizonBuilt, bounds: dict) -> None:
    import pyomo.environ as pe

    m = hb.model
    for idx, (lb, ub) in bounds.items():
        m.n[idx].setlb(lb)
        m.n[idx].setub(ub)
    if not hb.integer:
        for var in (m.buy, m.sell, m.res, m.od, m.spot):
            for idx in var:
                var[idx].domain = pe.NonNegativeReals


def _model_size(m: Any) -> dict[str, int]:
    import pyomo.environ as pe

    return {"variables": int(sum(len(v) for v in m.component_objects(ctype=pe.Var))),
            "integer_variables": int(sum(1 for v in m.component_data_objects(ctype=pe.Var) if v.is_integer() or v.is_binary())),
            "constraints": int(sum(len(c) for c in m.component_objects(ctype=pe.Constraint)))}


def solve_horizon(tables: CapacityTables, inputs: HorizonInputs, architectures: tuple[str, ...], *, time_limit_s: float = 60.0,
                  mip_gap: float = 1e-3, baseline: bool = True) -> HorizonResult:
    """Plan every architecture over the horizon; with ``baseline``, also the owned-peak plan for the saving."""
    hb = build_horizon(tables, inputs)
    m = hb.model
    size = _model_size(m)
    n_bounds = {idx: (m.n[idx].lb, m.n[idx].ub) for idx in m.n}
    archs: dict[str, HorizonArchitecture] = {}
    base_hb: HorizonBuilt | None = None
    base_bounds: dict = {}
    for arch in architectures:
        _unfix(hb, n_bounds)
        restrict_horizon(hb, arch)
        sol = _solve_built(hb, time_limit_s, mip_gap)
        ha = HorizonArchitecture(arch, sol.ok, sol.status, sol.objective, sol.gap, sol.wall_s, highs_s=sol.highs_s)
        if sol.ok:
            t1 = time.perf_counter()
            ha.schedule, ha.pools, ha.costs, ha.slots = extract(hb)
            ha.extract_s = time.perf_counter() - t1
            if baseline:
                if base_hb is None:
                    base_hb = build_horizon(tables, inputs, static_pools=True, buy_only=True, integer=hb.integer)
                    base_bounds = {idx: (base_hb.model.n[idx].lb, base_hb.model.n[idx].ub) for idx in base_hb.model.n}
                _unfix(base_hb, base_bounds)
                restrict_horizon(base_hb, arch)
                base = _solve_built(base_hb, time_limit_s, mip_gap)
                ha.baseline_usd = base.objective if base.ok else None
                ha.solve_s += base.wall_s
                ha.highs_s += base.highs_s
        archs[arch] = ha
    notes = list(hb.levels.notes)
    if not hb.integer:
        notes.append(f"fleet scale (the best pool above {INTEGER_INSTANCES_MAX} instances, or more than {INTEGER_COUNTS_MAX:,} "
                     "instance counts): LP relaxation, the pools it uses, counts rounded up (the gap reported is against the relaxation's bound)")
    return HorizonResult(architectures=archs, levels=hb.levels.m_peak.size, periods=hb.levels.periods, slots=hb.levels.slot_names,
                         build_s=hb.build_s + (base_hb.build_s if base_hb else 0.0), notes=notes, size=size)
