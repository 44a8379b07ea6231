r"""The plan-over-time MIP: one model over periods × slots, built from one capacity table.

Index sets
----------
Periods ``t = 0..T-1`` (months by default), slots ``s`` (representative hours,
:mod:`planner.horizon.demand`), levels ``k = (t, s)``; the points ``i``, pools ``p`` and demand rows
``d`` of :func:`planner.optimize.prepare.prepare` on the base capacity table; device types ``y``.

Demand at a level: every rate of the table scaled, ``λ^{peak}_{k,d} = m^{peak}_k λ^{peak}_d`` and
``λ^{mean}_{k,d} = m^{mean}_k λ^{mean}_d`` with ``m_k = g_t · r_s / r_0`` (growth ``g``, the slot's
rate ``r_s``, the table's own rate ``r_0``; slots given by hand give ``r_s / r_0`` directly).
The cap ``ρ_{k,i}`` is the queueing cap of :func:`planner.optimize.prepare.utilization_caps` (the
same latency model as a single-peak plan) evaluated on a coarse grid so levels share it: at the
level's rate rounded **down** to a power of 1.5 and its burstiness rounded **up** to a power of
1.25 — a cap only rises with the rate (more servers pool better) and falls with burstiness, so
the grid errs on the safe side (at fleet scale the caps move by about a percent per step).

Fleet scale. When even the best pool needs more than :data:`INTEGER_INSTANCES_MAX` instances at the
busiest level, or the model has more than :data:`INTEGER_COUNTS_MAX` instance counts, the
model is solved in three steps (:func:`planner.horizon.solve._solve_built`): (1) the LP
relaxation, binaries included — a lower bound of the whole problem; (2) the pools and device types
the relaxation uses in a period switched on, the others off, counts still continuous; (3) counts
rounded up (``n ← ⌈n⌉``) and purchases, reservations and rentals integer. The gap reported is the
final cost against step 1's bound, so it covers both the pool choice and the rounding. Below that
size every count is integer from the start and the MIP is solved as it is.

Variables
---------
``n[k,p]`` integer instances of pool ``p`` in slot ``k``; ``x[k,i] ∈ [0,1]`` routing;
``z[t,p]``, ``u[t,y]`` binaries (pool / device type in use in period ``t``: operations cost);
per device type, where the instance allows it: ``buy[t,y]`` integer orders, in service
``lead`` periods later; ``sell[t,y]`` (only with ``resale_fraction``); ``res[t,y]`` integer
reservations started (active for ``term`` periods); ``od[k,y]`` on-demand and ``spot[k,y]``
spot devices per slot (integer).

Constraints
-----------
- ``route[k,d,phase]``  :math:`\sum_{i} x_{k,i} = 1` over the points serving ``d`` in that phase;
- ``load_c[k,p]``  :math:`\sum_{i\in p} λ^{peak}_{k,d(i)} τ_i / ρ_{k,i}\; x_{k,i} \le n_{k,p} - r\,z_{t,p}` (``r`` redundancy);
- ``kv[k,p]``  KV bytes resident at the slot's peak within the instances' KV capacity (as in a single plan);
- ``pool_on[k,p]`` :math:`n_{k,p} \le M z_{t,p}`; ``type_on[t,p]`` :math:`z_{t,p} \le u_{t,y(p)}`;
  shared architecture: :math:`\sum_y u_{t,y} \le 1`;
- ``supply[k,y]``  :math:`\sum_{p: y(p)=y} tp_p\, n_{k,p} \le O_{t,y} + R_{t,y} + od_{k,y} + a_y\, spot_{k,y}`
  with owned :math:`O_{t,y} = O^0_y + \sum_{t' \le t - lead} buy_{t',y} - \sum_{t' \le t} sell_{t',y}`
  (never falls unless resale is allowed: ``sell`` exists only then, with :math:`O \ge 0`),
  reserved :math:`R_{t,y} = \sum_{t-term < t' \le t} res_{t',y}`, spot availability ``a = 1 − interruption rate``
  (spot only with redundancy ≥ 1: an interrupted instance is one of the ``r`` spares);
- ``od_cap``, ``spot_cap`` and ``procurement[k,y]`` (all devices of a type ≤ the profile's limit);
- ``ramp[k,p]`` :math:`n_{k,p} - n_{k^-,p} \le` ramp (the previous slot of the same period, cyclic).

Cost per period (USD; ``h_s`` hours of slot ``s`` in a period, ``H = Σ h_s``; electricity ``e``, PUE ``η``)
-------------------------------------------------------------------------------------------------------
- ``ownership``   :math:`\sum_y O_{t,y}\, c^{buy}_y H` (purchase annuitised per device-hour, as a single plan
  with ``pricing: buy``; charged while owned, inside the horizon);
- ``resale_writeoff`` :math:`\sum_y sell_{t,y} (1 - f_y) P_y` (conservative: as if the sold device had its whole
  price still on the books);
- ``reserved``    :math:`\sum_y R_{t,y}\, c^{res}_y H` (commitments run on past the horizon; only the
  periods inside it are charged);
- ``on_demand``, ``spot``  :math:`\sum_{s,y} od_{k,y}\, c^{od}_y h_s` (and spot alike);
- ``power_busy``  :math:`eη \sum_s h_s \sum_i λ^{mean}_{k,d(i)} x_{k,i} (E_i + τ_i tp_i P^{host}) \cdot 3600 / 3.6\text{e}6`;
- ``power_idle``  :math:`eη/1000 \sum_s h_s [\sum_p tp_p n_{k,p} (P^{idle}+P^{host}) - \sum_i λ^{mean} x τ_i tp_i (P^{idle}+P^{host})]`
  plus, with ``owned_when_unused: idle``, owned and reserved devices outside every pool at idle power;
  powered-down devices cost only their ownership;
- ``network_nic`` and ``ops_devices`` (per-device operations and licences) pro-rated by device-hours in pools
  (:math:`h_s / 730` of a month), ``network_transfer`` per GB of KV moved;
- ``ops_pools``, ``ops_device_types``  :math:`c^{pool} \cdot months \cdot \sum_p z_{t,p}` and alike.

Objective: :math:`\sum_t δ_t \,\text{cost}_t`, ``δ_t = (1 + i)^{-t·months/12}`` at the yearly discount rate ``i``.

The baseline "size every period for its peak with owned devices" is the same model with only
buying allowed (no lead time: its fleet is in place when needed), pools held at one size through
the slots of a period and unused devices idle.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem
from planner.optimize.model import PHASE_ROLES, PHASES
from planner.optimize.prepare import (
    ARCH_ROLES,
    J_PER_KWH,
    SECONDS_PER_HOUR,
    Prepared,
    prepare,
    utilization_caps,
)
from planner.schema.capacity import CapacityTables

CAP_RATE_STEP = 1.5
"""Utilisation caps are evaluated at the slot's rate rounded down to a power of this (module docstring)."""
CAP_CV_STEP = 1.25
"""... and at its inter-arrival CV rounded up to a power of this."""
INTEGER_COUNTS_MAX = 2000
"""Most integer instance counts (levels x pools) the horizon MIP is solved with as it is; above it the
fleet-scale steps apply whatever the scale (a 24 x 24 plan of 20 instances per pool has 15,000 integer
counts: HiGHS stopped at its 60 s limit 69 % from the bound)."""
INTEGER_INSTANCES_MAX = 60
"""Largest plan scale — at the busiest level, the fewest instances one pool would need to carry all of
it — for which the horizon MIP keeps every count integer; above it the fleet-scale steps apply
(module docstring)."""
HOURS_PER_MONTH = 730.0

COST_TERMS: tuple[str, ...] = (
    "ownership", "resale_writeoff", "reserved", "on_demand", "spot", "power_busy", "power_idle",
    "network_nic", "network_transfer", "ops_pools", "ops_device_types", "ops_devices",
)


@dataclass(frozen=True)
class Acquisition:
    """How one device type can be had, with prices resolved (USD per device-hour unless named)."""

    device: str
    buy_usd_per_device_hour: float | None = None
    """Purchase annuitised at the cost of capital over the amortisation period, per device-hour."""
    purchase_usd: float = 0.0
    lead_time_periods: int = 0
    resale_fraction: float | None = None
    initial_owned: int = 0
    reserve_usd_per_hour: float | None = None
    reserve_term_periods: int = 1
    on_demand_usd_per_hour: float | None = None
    on_demand_max: int | None = None
    spot_usd_per_hour: float | None = None
    spot_availability: float = 1.0
    spot_max: int | None = None
    procurement_limit: float = math.inf


@dataclass(frozen=True)
class HorizonInputs:
    """Everything the horizon MIP reads besides the capacity table."""

    slots: pd.DataFrame
    """Columns of :data:`planner.horizon.demand.SLOT_COLUMNS`."""
    absolute: bool
    growth: np.ndarray
    """Demand multiplier per period."""
    months_per_period: float
    acquisition: dict[str, Acquisition]
    owned_when_unused: str = "powered_down"
    ramp_instances_per_slot: int | None = None
    discount_rate_per_year: float = 0.0
    redundancy: int = 0
    max_utilization: float | None = None
    shared_single_device_type: bool = True


@dataclass
class Levels:
    """Per level k = (t, s): multipliers, hours, caps."""

    periods: int
    slot_names: list[str]
    hours: np.ndarray
    """Hours of each slot in a period (length S)."""
    m_peak: np.ndarray
    """(K,) peak multiplier (rounded up to the grid)."""
    m_mean: np.ndarray
    rho: np.ndarray
    """(K, n_points) utilisation caps; 0 = the point cannot meet its targets at that level."""
    notes: list[str] = field(default_factory=list)


@dataclass
class HorizonBuilt:
    model: Any
    prep: Prepared
    levels: Levels
    inputs: HorizonInputs
    devices: list[str]
    integer: bool = True
    """Counts integer from the start (False: continuous, rounded up by :func:`planner.horizon.solve.solve_horizon`)."""
    build_s: float = 0.0


def _service_reference(prep: Prepared) -> tuple[float, float]:
    dem = prep.demand
    return float(dem["rate_peak_per_s"].sum()), float(dem["rate_mean_per_s"].sum())


def _grid_down(v: np.ndarray, step: float) -> np.ndarray:
    return step ** np.floor(np.log(np.maximum(v, 1e-12)) / math.log(step) + 1e-9)


def _grid_up(v: np.ndarray, step: float) -> np.ndarray:
    return step ** np.ceil(np.log(np.maximum(v, 1e-12)) / math.log(step) - 1e-9)


def levels_for(prep: Prepared, inputs: HorizonInputs) -> Levels:
    """Multipliers and utilisation caps of every (period, slot) (module docstring)."""
    slots = inputs.slots
    S = len(slots)
    T = len(inputs.growth)
    ref_peak, ref_mean = _service_reference(prep)
    if inputs.absolute and len(prep.demand["service"].unique()) != 1:
        raise InputError(Problem("", "horizon.demand", "a demand profile read from a log gives one service's rates",
                                 "plan exactly one service, or give slots by hand (multipliers)"))
    slot_peak = slots["peak_rate_per_s"].to_numpy(float)
    slot_mean = slots["mean_rate_per_s"].to_numpy(float)
    if inputs.absolute:
        slot_peak = slot_peak / ref_peak
        slot_mean = slot_mean / ref_mean
    g = np.repeat(inputs.growth, S)
    m_peak = g * np.tile(slot_peak, T)
    m_mean = np.minimum(g * np.tile(slot_mean, T), m_peak)
    # Caps on a coarse grid, always on the safe side: the rate rounded DOWN (a cap only rises
    # with the rate: more servers pool better), the burstiness rounded UP.
    m_cap = _grid_down(m_peak, CAP_RATE_STEP)
    cv_slot = slots["interarrival_cv"].to_numpy(float)
    pts = prep.points
    base_rate = pts["rate_peak_per_s"].to_numpy(float)
    base_cv = pts["interarrival_cv"].to_numpy(float)
    cv_cap = np.where(np.isfinite(cv_slot), _grid_up(np.where(np.isfinite(cv_slot), cv_slot, 1.0), CAP_CV_STEP), np.nan)
    rho = np.zeros((T * S, len(pts)))
    cache: dict[tuple[float, float], np.ndarray] = {}
    for k in range(T * S):
        cv = float(cv_cap[k % S])
        key = (round(float(m_cap[k]), 9), round(cv, 6) if math.isfinite(cv) else -1.0)
        if key not in cache:
            scaled = pts.assign(rate_peak_per_s=base_rate * m_cap[k],
                                interarrival_cv=np.full(len(pts), cv) if math.isfinite(cv) else base_cv)
            cache[key], _ = utilization_caps(scaled, max_utilization=inputs.max_utilization)
        rho[k] = cache[key]
    notes = [f"{T} periods x {S} slots = {T * S} levels; utilisation caps from {len(cache)} queueing evaluations "
             f"(rate rounded down to x{CAP_RATE_STEP:g} steps, burstiness up to x{CAP_CV_STEP:g} steps: caps on the safe side)"]
    return Levels(periods=T, slot_names=slots["slot"].astype(str).tolist(), hours=slots["hours_per_period"].to_numpy(float),
                  m_peak=m_peak, m_mean=m_mean, rho=rho, notes=notes)


def build_horizon(tables: CapacityTables, inputs: HorizonInputs, *, static_pools: bool = False,
                  buy_only: bool = False, integer: bool | None = None) -> HorizonBuilt:
    """Build the horizon MIP (module docstring). ``static_pools``/``buy_only`` give the owned-peak baseline;
    ``integer`` None chooses by fleet size (:data:`INTEGER_INSTANCES_MAX`)."""
    import pyomo.environ as pe

    t0 = time.perf_counter()
    if tables.agents is not None:
        raise InputError(Problem("", "services", "plans over time do not cover the tool execution phase yet",
                                 "plan agentic services with `planner solve`"))
    prep = prepare(tables, max_utilization=None)
    lv = levels_for(prep, inputs)
    pts, pools = prep.points, prep.pools
    cfg = tables.configs.drop_duplicates("config").set_index("config")
    costs = tables.costs
    T, S = lv.periods, len(lv.slot_names)
    K = T * S
    n_pts, n_pool = len(pts), len(pools)
    devices = sorted(pools["device"].unique().tolist()) if n_pool else []
    missing = [d for d in devices if d not in inputs.acquisition]
    if missing:
        raise InputError(Problem("", "horizon.acquisition", f"no way to get {', '.join(missing)}", "add buy / reserve / on_demand / spot for them"))
    acq = inputs.acquisition
    red = int(inputs.redundancy)
    pool_pos = {p: j for j, p in enumerate(pools["pool"])}
    point_pool = np.array([pool_pos[p] for p in pts["pool"]], dtype=int)
    d_of = pts["d"].to_numpy(int)
    role_of = pts["role"].to_numpy(str)
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    tp_pt = pts["tp"].to_numpy(float)
    lam_peak = prep.demand["rate_peak_per_s"].to_numpy(float)[d_of]
    lam_mean = prep.demand["rate_mean_per_s"].to_numpy(float)[d_of]
    kv_pc = (pts["kv_bytes_per_request"] * pts["kv_hold_s"]).to_numpy(float)
    host_pt = pts["config"].map(cfg["host_power_w"]).to_numpy(float)
    idle_pt = pts["config"].map(cfg["idle_power_w"]).to_numpy(float)
    busy_j = pts["energy_j_per_request"].to_numpy(float) + tau * tp_pt * host_pt
    kvtx = pts["kv_transfer_bytes_per_request"].to_numpy(float)
    tp_pool = pools["tp"].to_numpy(int)
    dev_pool = pools["device"].tolist()
    kvcap = pools["kv_capacity_bytes"].to_numpy(float)
    sends = pools["sends_kv"].to_numpy(bool)
    pool_cfg = cfg.loc[pools["config"].tolist()]
    idle_w_pool = (pool_cfg["idle_power_w"] + pool_cfg["host_power_w"]).to_numpy(float)
    opsdev_pool = (pool_cfg["ops_usd_per_device_month"] + pool_cfg["license_usd_per_device_month"]).to_numpy(float)
    pts_of_pool: list[list[int]] = [[] for _ in range(n_pool)]
    for i, p in enumerate(point_pool):
        pts_of_pool[p].append(int(i))
    route: dict[tuple[int, str], list[int]] = {}
    for i in range(n_pts):
        for ph in PHASES:
            if role_of[i] in PHASE_ROLES[ph]:
                route.setdefault((int(d_of[i]), ph), []).append(i)
    hours = lv.hours
    Hp = float(hours.sum())
    months = inputs.months_per_period
    kwh = float(costs.electricity_usd_per_kwh) * float(costs.pue)

    # big-M per (level, pool): all routable load of the pool at that level, plus spares
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = np.where(lv.rho > 0, lam_peak[None, :] * lv.m_peak[:, None] * tau[None, :] / lv.rho, 0.0)
    n_max = np.zeros((K, n_pool), dtype=int)
    for p in range(n_pool):
        ids = pts_of_pool[p]
        if not ids:
            continue
        sub = pd.DataFrame(coef[:, ids].T)
        sub["d"] = d_of[ids]
        need = sub.groupby("d").max().sum(axis=0).to_numpy(float)
        kv_need = np.zeros(K)
        if kvcap[p] > 0 and pools["role"].iat[p] != "prefill":
            kvs = pd.DataFrame((lam_peak[ids] * kv_pc[ids] / kvcap[p])[:, None] * lv.m_peak[None, :])
            kvs["d"] = d_of[ids]
            kv_need = kvs.groupby("d").max().sum(axis=0).to_numpy(float)
        n_max[:, p] = np.ceil(np.maximum(need, kv_need) + 1e-9).astype(int) + 1 + red
    if static_pools:  # one size through a period's slots: every slot may need the period's largest
        n_max = np.repeat(n_max.reshape(T, S, n_pool).max(axis=1), S, axis=0)
    if integer is None:
        # the scale of the plan: at the busiest level, the fewest instances any one pool would need to carry it all
        carriers = np.where(n_max > red + 1, n_max, np.iinfo(np.int64).max)
        smallest = carriers.min(axis=1) if n_pool else np.zeros(K, dtype=int)
        scale = int(smallest[smallest < np.iinfo(np.int64).max].max(initial=0))
        integer = scale <= INTEGER_INSTANCES_MAX and K * n_pool <= INTEGER_COUNTS_MAX
    counts = pe.NonNegativeIntegers if integer else pe.NonNegativeReals
    m = pe.ConcreteModel(name="horizon")
    m.K = pe.RangeSet(0, K - 1)
    m.Tp = pe.RangeSet(0, T - 1)
    m.P = pe.RangeSet(0, n_pool - 1) if n_pool else pe.Set(initialize=[])
    m.I = pe.RangeSet(0, n_pts - 1) if n_pts else pe.Set(initialize=[])
    m.Y = pe.Set(initialize=devices, ordered=True)
    m.n = pe.Var(m.K, m.P, domain=counts, bounds=lambda _m, k, p: (0, int(n_max[k, p])))
    m.x = pe.Var(m.K, m.I, bounds=(0.0, 1.0))
    for k, i in zip(*np.nonzero(lv.rho <= 0), strict=True):
        m.x[int(k), int(i)].setub(0.0)
    m.z = pe.Var(m.Tp, m.P, domain=pe.Binary)
    m.u = pe.Var(m.Tp, m.Y, domain=pe.Binary)
    m.types_max = pe.Param(initialize=max(1, len(devices)), mutable=True)

    def has(y: str, what: str) -> bool:
        a = acq[y]
        if what == "buy":
            return a.buy_usd_per_device_hour is not None
        if buy_only:
            return False
        return {"reserve": a.reserve_usd_per_hour, "od": a.on_demand_usd_per_hour, "spot": a.spot_usd_per_hour}[what] is not None

    buy_y = [y for y in devices if has(y, "buy")]
    sell_y = [y for y in buy_y if acq[y].resale_fraction is not None and not buy_only]
    res_y = [y for y in devices if has(y, "reserve")]
    od_y = [y for y in devices if has(y, "od")]
    spot_y = [y for y in devices if has(y, "spot")]
    if spot_y and red < 1:
        raise InputError(Problem("", "horizon.acquisition", "spot capacity needs spare instances", "set options.redundancy >= 1 or drop spot"))
    m.buy = pe.Var(m.Tp, buy_y, domain=counts)
    m.sell = pe.Var(m.Tp, sell_y, domain=counts)
    m.res = pe.Var(m.Tp, res_y, domain=counts)
    m.od = pe.Var(m.K, od_y, domain=counts)
    m.spot = pe.Var(m.K, spot_y, domain=counts)
    for y in od_y:
        if acq[y].on_demand_max is not None:
            for k in range(K):
                m.od[k, y].setub(int(acq[y].on_demand_max or 0))
    for y in spot_y:
        if acq[y].spot_max is not None:
            for k in range(K):
                m.spot[k, y].setub(int(acq[y].spot_max or 0))

    def owned(_m: Any, t: int, y: str) -> Any:
        a = acq[y]
        e: Any = float(a.initial_owned)
        if y in buy_y:
            lead = 0 if buy_only else a.lead_time_periods  # the baseline has its fleet in place
            e = e + pe.quicksum(_m.buy[tt, y] for tt in range(0, t - lead + 1))
        if y in sell_y:
            e = e - pe.quicksum(_m.sell[tt, y] for tt in range(0, t + 1))
        return e

    m.owned = pe.Expression(m.Tp, m.Y, rule=owned)
    m.reserved = pe.Expression(m.Tp, m.Y, rule=lambda _m, t, y: pe.quicksum(
        _m.res[tt, y] for tt in range(max(0, t - acq[y].reserve_term_periods + 1), t + 1)) if y in res_y else 0.0)
    m.owned_nonneg = pe.Constraint(m.Tp, sell_y, rule=lambda _m, t, y: _m.owned[t, y] >= 0)

    # --- per-level constraints ---------------------------------------------------------------
    route_keys = sorted(route)
    m.route = pe.Constraint(m.K, route_keys, rule=lambda _m, k, d, ph: pe.quicksum(_m.x[k, i] for i in route[(d, ph)]) == 1)

    def load_rule(_m: Any, k: int, p: int) -> Any:
        t = k // S
        return pe.quicksum(float(coef[k, i]) * _m.x[k, i] for i in pts_of_pool[p] if coef[k, i] > 0) <= _m.n[k, p] - red * _m.z[t, p]

    m.load_c = pe.Constraint(m.K, m.P, rule=load_rule)
    kv_pools = [p for p in range(n_pool) if kvcap[p] > 0 and pools["role"].iat[p] != "prefill"]
    m.kv = pe.Constraint(m.K, kv_pools, rule=lambda _m, k, p: pe.quicksum(
        float(lv.m_peak[k] * lam_peak[i] * kv_pc[i] / kvcap[p]) * _m.x[k, i] for i in pts_of_pool[p]) <= _m.n[k, p] - red * _m.z[k // S, p])
    m.pool_on = pe.Constraint(m.K, m.P, rule=lambda _m, k, p: _m.n[k, p] <= int(n_max[k, p]) * _m.z[k // S, p])
    m.type_on = pe.Constraint(m.Tp, m.P, rule=lambda _m, t, p: _m.z[t, p] <= _m.u[t, dev_pool[p]])
    m.types_max_c = pe.Constraint(m.Tp, rule=lambda _m, t: pe.quicksum(_m.u[t, y] for y in devices) <= _m.types_max)
    pools_of_dev = {y: [p for p in range(n_pool) if dev_pool[p] == y] for y in devices}

    def supply_rule(_m: Any, k: int, y: str) -> Any:
        t = k // S
        avail = _m.owned[t, y] + _m.reserved[t, y]
        if y in od_y:
            avail = avail + _m.od[k, y]
        if y in spot_y:
            avail = avail + float(acq[y].spot_availability) * _m.spot[k, y]
        return pe.quicksum(int(tp_pool[p]) * _m.n[k, p] for p in pools_of_dev[y]) <= avail

    m.supply = pe.Constraint(m.K, m.Y, rule=supply_rule)
    limited = [y for y in devices if math.isfinite(acq[y].procurement_limit)]

    def total_devices(_m: Any, k: int, y: str) -> Any:
        t = k // S
        e = _m.owned[t, y] + _m.reserved[t, y]
        if y in od_y:
            e = e + _m.od[k, y]
        if y in spot_y:
            e = e + _m.spot[k, y]
        return e

    m.procurement = pe.Constraint(m.K, limited, rule=lambda _m, k, y: total_devices(_m, k, y) <= float(acq[y].procurement_limit))
    if inputs.ramp_instances_per_slot is not None and S > 1 and not static_pools:
        r = int(inputs.ramp_instances_per_slot)
        m.ramp = pe.Constraint(m.K, m.P, rule=lambda _m, k, p: _m.n[k, p] - _m.n[(k // S) * S + (k % S - 1) % S, p] <= r)
    if static_pools and S > 1:
        m.static = pe.Constraint(m.K, m.P, rule=lambda _m, k, p: _m.n[k, p] == _m.n[(k // S) * S, p]
                                 if k % S else pe.Constraint.Skip)
    idle_owned = inputs.owned_when_unused == "idle" or static_pools
    if idle_owned:
        m.unused = pe.Var(m.K, m.Y, domain=pe.NonNegativeReals)
        m.unused_c = pe.Constraint(m.K, m.Y, rule=lambda _m, k, y: _m.unused[k, y] >= _m.owned[k // S, y] + _m.reserved[k // S, y]
                                   - pe.quicksum(int(tp_pool[p]) * _m.n[k, p] for p in pools_of_dev[y]))

    # --- cost per period ------------------------------------------------------------------------
    def slot_sum(t: int, f: Any) -> Any:
        return pe.quicksum(f(t * S + s, float(hours[s])) for s in range(S))

    cfg_idle = {y: float(cfg.loc[cfg["device"] == y, "idle_power_w"].iloc[0] + cfg.loc[cfg["device"] == y, "host_power_w"].iloc[0])
                for y in devices}
    terms: dict[str, Any] = {
        "ownership": lambda _m, t: pe.quicksum(float(acq[y].buy_usd_per_device_hour or 0.0) * Hp * _m.owned[t, y] for y in devices
                                               if acq[y].buy_usd_per_device_hour is not None),
        "resale_writeoff": lambda _m, t: pe.quicksum((1.0 - float(acq[y].resale_fraction or 0.0)) * acq[y].purchase_usd * _m.sell[t, y]
                                                     for y in sell_y),
        "reserved": lambda _m, t: pe.quicksum(float(acq[y].reserve_usd_per_hour or 0.0) * Hp * _m.reserved[t, y] for y in res_y),
        "on_demand": lambda _m, t: slot_sum(t, lambda k, h: pe.quicksum(float(acq[y].on_demand_usd_per_hour or 0.0) * h * _m.od[k, y] for y in od_y)),
        "spot": lambda _m, t: slot_sum(t, lambda k, h: pe.quicksum(float(acq[y].spot_usd_per_hour or 0.0) * h * _m.spot[k, y] for y in spot_y)),
        "power_busy": lambda _m, t: kwh * slot_sum(t, lambda k, h: pe.quicksum(
            float(lv.m_mean[k] * lam_mean[i] * busy_j[i] * SECONDS_PER_HOUR * h / J_PER_KWH) * _m.x[k, i] for i in range(n_pts))),
        "power_idle": lambda _m, t: kwh / 1e3 * slot_sum(t, lambda k, h: (
            pe.quicksum(float(h * tp_pool[p] * idle_w_pool[p]) * _m.n[k, p] for p in range(n_pool))
            - pe.quicksum(float(lv.m_mean[k] * lam_mean[i] * tau[i] * tp_pt[i] * (idle_pt[i] + host_pt[i]) * h) * _m.x[k, i] for i in range(n_pts))
            + (pe.quicksum(h * cfg_idle[y] * _m.unused[k, y] for y in devices) if idle_owned else 0.0))),
        "network_nic": lambda _m, t: slot_sum(t, lambda k, h: pe.quicksum(
            float(h / HOURS_PER_MONTH * tp_pool[p] * costs.nic_usd_per_device_month) * _m.n[k, p] for p in range(n_pool) if sends[p])),
        "network_transfer": lambda _m, t: slot_sum(t, lambda k, h: pe.quicksum(
            float(lv.m_mean[k] * lam_mean[i] * kvtx[i] / 1e9 * SECONDS_PER_HOUR * h * costs.transfer_usd_per_gb) * _m.x[k, i]
            for i in range(n_pts) if role_of[i] == "prefill" and kvtx[i] > 0 and costs.transfer_usd_per_gb > 0)),
        "ops_pools": lambda _m, t: float(costs.ops_usd_per_pool_month) * months * pe.quicksum(_m.z[t, p] for p in range(n_pool)),
        "ops_device_types": lambda _m, t: float(costs.ops_usd_per_device_type_month) * months * pe.quicksum(_m.u[t, y] for y in devices),
        "ops_devices": lambda _m, t: slot_sum(t, lambda k, h: pe.quicksum(
            float(h / HOURS_PER_MONTH * tp_pool[p] * opsdev_pool[p]) * _m.n[k, p] for p in range(n_pool))),
    }
    for name, rule in terms.items():
        m.add_component(f"cost_{name}", pe.Expression(m.Tp, rule=rule))
    disc = np.array([(1.0 + inputs.discount_rate_per_year) ** (-t * months / 12.0) for t in range(T)])
    m.cost_period = pe.Expression(m.Tp, rule=lambda _m, t: pe.quicksum(getattr(_m, f"cost_{n}")[t] for n in COST_TERMS))
    m.objective = pe.Objective(expr=pe.quicksum(float(disc[t]) * m.cost_period[t] for t in range(T)), sense=pe.minimize)
    m.discount = disc
    return HorizonBuilt(model=m, prep=prep, levels=lv, inputs=inputs, devices=devices, integer=integer, build_s=time.perf_counter() - t0)


def restrict_horizon(hb: HorizonBuilt, architecture: str) -> None:
    """Allow only the roles of ``architecture`` (bounds only: the persistent solver re-solves the same model)."""
    m = hb.model
    allowed = ARCH_ROLES[architecture]
    roles = hb.prep.points["role"].to_numpy(str)
    rho = hb.levels.rho
    K = rho.shape[0]
    for k in range(K):
        for i in range(len(roles)):
            m.x[k, i].setub(1.0 if roles[i] in allowed and rho[k, i] > 0 else 0.0)
    prole = hb.prep.pools["role"].to_numpy(str)
    for p in range(len(prole)):
        for t in range(hb.levels.periods):
            m.z[t, p].setub(1 if prole[p] in allowed else 0)
    single = architecture == "shared" and hb.inputs.shared_single_device_type
    m.types_max.set_value(1 if single else max(1, len(hb.devices)))
