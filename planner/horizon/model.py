r"""The plan-over-time MIP: one model over periods × slots, built from one capacity table.

The model is built as one sparse matrix from numpy index arrays (:mod:`planner.horizon.lp`) and solved
by HiGHS through highspy; each constraint family below is built in :func:`build_horizon` under a
comment repeating its formula. (Built term by term in pyomo the example instance took ~80 s to
build and ~20 s to hand over; as arrays it takes ~2 s, the queueing caps included.)

Index sets
----------
Periods ``t = 0..T-1`` (months by default), slots ``s`` (representative hours,
:mod:`planner.horizon.demand`), levels ``k = (t, s)``; the points ``i``, pools ``p`` and demand rows
``d`` of :func:`planner.optimize.prepare.prepare` on the base capacity table; device types ``y``.

Demand at a level: every rate of the table scaled, ``λ^{peak}_{k,d} = m^{peak}_k λ^{peak}_d`` and
``λ^{mean}_{k,d} = m^{mean}_k λ^{mean}_d`` with ``m_k = g_t · r_s / r_0`` (growth ``g``, the slot's
rate ``r_s``, the table's own rate ``r_0``; slots given by hand give ``r_s / r_0`` directly).
The cap ``ρ_{k,i}`` is the queueing cap of :func:`planner.optimize.prepare.utilization_caps` (the
same latency model as a single-peak plan, with a multimodal row's TTFT wait budget split between its
encode and prefill stages by :func:`planner.optimize.prepare.encode_split_ttft`, as in ``solve``) evaluated on a coarse grid so levels share it: at the
level's rate rounded **down** to a power of 1.5 and its burstiness rounded **up** to a power of
1.25 — a cap only rises with the rate (more servers pool better) and falls with burstiness, so
the grid errs on the safe side (at fleet scale the caps move by about a percent per step). The grid's
unified caps are searched a rate step at a time, each from where the step below put it, and the chains
split over the usable cores (:func:`_caps_by_rate`): within the bisection's tolerance (0.002 of
utilisation) of a search from scratch, ~2 evaluations a point instead of ~10.

Fleet scale. When even the best pool needs more than :data:`INTEGER_INSTANCES_MAX` instances at the
busiest level, or the model has more than :data:`INTEGER_COUNTS_MAX` instance counts, the
model is solved in three steps (:func:`planner.horizon.solve._solve_built`), each a HiGHS run of the same matrix with its own bounds: (1) the LP
relaxation, binaries included — a lower bound of the whole problem; (2) the pools and device types
the relaxation uses in a period switched on, the others off, counts still continuous; (3) counts
rounded up (``n ← ⌈n⌉``) and purchases, reservations and rentals integer. The gap reported is the
final cost against step 1's bound, so it covers both the pool choice and the rounding. Below that
size every count is integer from the start and the MIP is solved as it is. Either way every level of the
solution is then checked by the analytic latency model and a level that misses has its pools topped up
(:mod:`planner.horizon.repair`: the caps assume a point's pool carries the point's whole rate, which a bucket
split between pools breaks).

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
- ``load[k,p]``  :math:`\sum_{i\in p} λ^{peak}_{k,d(i)} τ_i / ρ_{k,i}\; x_{k,i} \le n_{k,p} - r\,z_{t,p}` (``r`` redundancy);
- ``kv[k,p]``  KV bytes resident at the slot's peak within the instances' KV capacity (as in a single plan);
- ``pool_on[k,p]`` :math:`n_{k,p} \le M z_{t,p}`; ``type_on[t,p]`` :math:`z_{t,p} \le u_{t,y(p)}`;
  shared architecture: :math:`\sum_y u_{t,y} \le 1`;
- ``supply[k,y]``  :math:`\sum_{p: y(p)=y} tp_p\, n_{k,p} \le O_{t,y} + R_{t,y} + od_{k,y} + a_y\, spot_{k,y}`
  with owned :math:`O_{t,y} = O^0_y + \sum_{t' \le t - lead} buy_{t',y} - \sum_{t' \le t} sell_{t',y}`
  (never falls unless resale is allowed: ``sell`` exists only then, with :math:`O \ge 0`),
  reserved :math:`R_{t,y} = \sum_{t-term < t' \le t} res_{t',y}`, spot availability ``a = 1 − interruption rate``
  (spot only with redundancy ≥ 1: an interrupted instance is one of the ``r`` spares);
- ``od`` / ``spot`` upper bounds (caps) and ``procurement[k,y]`` (all devices of a type ≤ the profile's limit);
- ``ramp[k,p]`` :math:`n_{k,p} - n_{k^-,p} \le` ramp (the previous slot of the same period, cyclic: the
  day repeats), when ``ramp_instances_per_slot`` is given.

Weight loading (``horizon.weight_load``; absent: pools grow freely and at no cost). An instance that is
brought up loads one replica of its model's weights ``W`` (bytes); each of its ``tp`` devices loads
``W / tp`` at ``b`` GB/s, so it is loading for :math:`L_p = W / (tp_p\, b \cdot 10^9)` seconds.

- ``grown[k,p]`` :math:`up_{k,p} \ge n_{k,p} - n_{k^-,p}`, ``up ≥ 0`` (instances brought up at the slot's start);
- ``weight_ramp[k]`` :math:`\sum_p up_{k,p} W \le B \cdot 10^9 \cdot 3600\, \ell_s` — the weight store's total
  bandwidth ``B`` (GB/s) over one occurrence of the slot (``ℓ_s`` hours: 1 for hour-of-day slots) bounds what
  can load within the slot: the ramp limit; ``grown_slow[k,p]`` :math:`up_{k,p} = 0` if :math:`L_p > 3600\,ℓ_s`;
- cost ``weight_reload`` :math:`\sum_{s,p} (h_s / ℓ_s)\, up_{k,p}\, tp_p\, (L_p / 3600)\, c^{load}_{y(p)}`: each of the
  slot's ``h_s / ℓ_s`` occurrences in a period brings the instances up again; their devices spend ``L_p`` loading
  instead of serving, priced per device-hour (``c^{load}``: ``weight_load.usd_per_device_hour`` or the device's
  on-demand price, else its reserved price, else its owned price per hour).

Per-slot architecture (``horizon.per_slot_architecture: [A, B]``, e.g. shared at night, disaggregated at the
daily peak): one MIP with the pools of both, a binary ``w[k]`` per level (1: B carries the slot's traffic, 0: A):

- ``arch_route[k,d,phase]`` :math:`\sum_{i \in A\setminus B} x_{k,i} \le 1 - w_k`, :math:`\sum_{i \in B\setminus A} x_{k,i} \le w_k`
  over the points serving ``d`` in that phase (roles only A has, only B has);
- ``arch_spares`` spares follow the carrying architecture: ``r·z[t,p]`` in ``load`` and ``kv`` becomes
  ``r·both[k,p]`` with :math:`both_{k,p} \ge z_{t,p} - w_k` (A), :math:`both_{k,p} \ge z_{t,p} + w_k - 1` (B),
  ``both ∈ [0,1]`` (the AND of "pool on in the period" and "its architecture carries slot k");
- a switch costs through weight loading (``weight_load`` is required with a per-slot architecture): the pools
  of the architecture taking over grow, and every instance brought up pays :math:`tp_p L_p c^{load}` and counts
  against the ramp; a pool may instead stay loaded through the slots it does not carry (its devices then
  count in ``supply`` and idle power like any other).

Cost per period (USD; ``h_s`` hours of slot ``s`` in a period, ``H = Σ h_s``; electricity ``e``, PUE ``η``)
-------------------------------------------------------------------------------------------------------
- ``ownership``   :math:`\sum_y O_{t,y}\, c^{buy}_y H` (purchase annuitised per device-hour, as a single plan
  with ``pricing: buy``; charged while owned, inside the horizon);
- ``resale_writeoff`` :math:`\sum_y sell_{t,y} (1 - f_y) P_y` (conservative: as if the sold device had its whole
  price still on the books);
- ``reserved``    :math:`\sum_y R_{t,y}\, c^{res}_y H`; a reservation is paid for its whole term: the periods of a
  term that run past the horizon (``u = T .. t' + term − 1``) are charged in the last period at their value there,
  :math:`res_{t',y}\, c^{res}_y H \sum_u δ_u / δ_{T-1}` (without it, a one-period horizon paid one month of a
  12-month term);
- ``on_demand``, ``spot``  :math:`\sum_{s,y} od_{k,y}\, c^{od}_y h_s` (and spot alike);
- ``power_busy``  :math:`eη \sum_s h_s \sum_i λ^{mean}_{k,d(i)} x_{k,i} (E_i + τ_i tp_i P^{host}) \cdot 3600 / 3.6\text{e}6`;
- ``power_idle``  :math:`eη/1000 \sum_s h_s [\sum_p tp_p n_{k,p} (P^{idle}+P^{host}) - \sum_i λ^{mean} x τ_i tp_i (P^{idle}+P^{host})]`
  plus, with ``owned_when_unused: idle``, owned and reserved devices outside every pool at idle power;
  powered-down devices cost only their ownership;
- ``network_nic`` and ``ops_devices`` (per-device operations and licences) pro-rated by device-hours in pools
  (:math:`h_s / H` of a month, :math:`H` = ``costs.hours_per_month``, which also sets a period's hours and the
  hourly price of a bought device), ``network_transfer`` per GB of KV moved;
- ``ops_pools``, ``ops_device_types``  :math:`c^{pool} \cdot months \cdot \sum_p z_{t,p}` and alike;
- ``weight_reload`` (above; 0 without ``weight_load``).

Objective: :math:`\sum_t δ_t \,\text{cost}_t`, ``δ_t = (1 + i)^{-t·months/12}`` at the yearly discount rate ``i``.

The baseline "size every period for its peak with owned devices" is the same model with only
buying allowed (no lead time: its fleet is in place when needed), pools held at one size through
the slots of a period and unused devices idle; its levels are then checked like a plan's, and a period where a slot
misses has its held pools raised to the most any of its slots needs (:mod:`planner.horizon.baseline`). With a lead
time the plan cannot have that fleet in time (it rents while it waits), so it may cost more than the baseline:
reports then say it costs more, never a negative saving (:func:`planner.horizon.report.saving_text`). A buy-only baseline with the lead times would
have no plan for the first periods unless devices are owned at the start.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from planner.errors import InputError, Problem
from planner.horizon.lp import Bounds, Expr, LinearModel
from planner.optimize.model import PHASE_ROLES, PHASES
from planner.optimize.prepare import (
    ARCH_ROLES,
    Prepared,
    encode_split_ttft,
    prepare,
    utilization_caps,
)
from planner.schema.capacity import CapacityTables
from planner.units import J_PER_KWH, SECONDS_PER_HOUR

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

COST_TERMS: tuple[str, ...] = (
    "ownership", "resale_writeoff", "reserved", "on_demand", "spot", "power_busy", "power_idle",
    "network_nic", "network_transfer", "ops_pools", "ops_device_types", "ops_devices", "weight_reload",
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
    weight_load: WeightLoad | None = None
    """Weight loading: the ramp limit and the reload cost of growing pools (None: pools grow freely and at no cost)."""
    per_slot_architecture: tuple[str, str] | None = None
    """Also plan one architecture per slot, chosen between these two (e.g. shared at night, disaggregated at the peak)."""
    service_slots: dict[str, pd.DataFrame] | None = None
    """Clients as services: per service of the table its own slots (absolute rates, the same slot names and
    hours as ``slots``); None: every service follows ``slots``."""
    demand_notes: tuple[str, ...] = ()


@dataclass
class Levels:
    """Per level k = (t, s): multipliers, hours, caps."""

    periods: int
    slot_names: list[str]
    hours: np.ndarray
    """Hours of each slot in a period (length S)."""
    m_peak: np.ndarray
    """(K,) peak multiplier."""
    m_mean: np.ndarray
    """(K,) the whole demand's peak / mean rate at the level as a multiple of the table's (reports)."""
    rho: np.ndarray
    """(K, n_points) utilisation caps; 0 = the point cannot meet its targets at that level."""
    m_peak_d: np.ndarray
    """(K, D) peak multiplier of each demand row ``d`` (its service's slots; the model reads these)."""
    m_mean_d: np.ndarray
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WeightLoad:
    """Bringing instances up: every new instance loads one replica of its model's weights (module docstring,
    *Weight loading*)."""

    weight_bytes: dict[str, float]
    """Bytes of one replica of each service's model weights (an instance of TP ``tp`` holds ``W / tp`` per device)."""
    device_gb_per_s: float
    """Per device, weight store → device memory, GB/s (1e9 bytes/s)."""
    fleet_gb_per_s: float | None
    """The weight store's total bandwidth, GB/s: the ramp limit (None: only the per-device time counts)."""
    usd_per_device_hour: dict[str, float]
    """Price of one device-hour spent loading instead of serving, per device type."""
    slot_length_h: np.ndarray
    """(S,) hours of one occurrence of each slot (1 for hour-of-day slots)."""
    source: str = ""

    def reload_s(self, service: str, tp: int) -> float:
        """Seconds to load one instance: each of its ``tp`` devices loads ``W / tp`` at ``device_gb_per_s``."""
        return self.weight_bytes[service] / tp / (self.device_gb_per_s * 1e9)


@dataclass
class HorizonBuilt:
    """The horizon MIP as a sparse matrix (:class:`planner.horizon.lp.LinearModel`), its default bounds and the
    linear expressions the extraction reads (owned and reserved devices per period and type, cost per term)."""

    lp: LinearModel
    bounds: Bounds
    prep: Prepared
    levels: Levels
    inputs: HorizonInputs
    devices: list[str]
    owned: Expr
    """(T·Y,) owned devices, row ``t·Y + y``."""
    reserved: Expr
    costs: dict[str, Expr]
    """Per term of :data:`COST_TERMS`: (T,) USD in each period."""
    discount: np.ndarray
    buy_y: list[str]
    sell_y: list[str]
    res_y: list[str]
    od_y: list[str]
    spot_y: list[str]
    integer: bool = True
    """Counts integer from the start (False: continuous, rounded up by :func:`planner.horizon.solve.solve_horizon`)."""
    switching: tuple[str, str] | None = None
    """Per-slot architecture: (the architecture when ``w = 0``, the one when ``w = 1``)."""
    build_s: float = 0.0

    def block(self, name: str) -> np.ndarray:
        """Column indices of a variable block (shape of the block)."""
        return self.lp.blocks[name].col

    @property
    def size(self) -> dict[str, int]:
        return {"variables": self.lp.n_cols, "integer_variables": int(self.bounds.integer.sum()),
                "constraints": self.lp.n_rows, "nonzeros": self.lp.nonzeros}


def _grid_down(v: np.ndarray, step: float) -> np.ndarray:
    return step ** np.floor(np.log(np.maximum(v, 1e-12)) / math.log(step) + 1e-9)


def _grid_up(v: np.ndarray, step: float) -> np.ndarray:
    return step ** np.ceil(np.log(np.maximum(v, 1e-12)) / math.log(step) - 1e-9)


def without_replay(tables: CapacityTables) -> CapacityTables:
    """``tables`` without the log's replayed-burst wait curve, its slot table and the renewal stream's curve
    (:mod:`planner.workload.replay_wait`): a horizon's level
    carries its slot's rate and burstiness (``interarrival_cv`` per slot), not the log's busiest windows replayed, and
    its levels are checked analytically, not by replaying the log; so its pools are the G/G/c queues of the level.
    ``planner solve`` on the same instance (the log's rate) keeps the curve."""
    from dataclasses import replace

    from planner.schema.capacity import BURST_TABLE_COLUMNS

    drop = [c for c in BURST_TABLE_COLUMNS if c in tables.demand.columns]
    if not drop:
        return tables
    return replace(tables, demand=tables.demand.drop(columns=drop))


def _caps_by_rate(sub: pd.DataFrame, keys: list[tuple[float, float]], base_rate: np.ndarray, base_cv: np.ndarray,
                  max_utilization: float | None) -> np.ndarray:
    """Caps of the points ``sub`` at each key ``(rate multiplier, burstiness)`` (``-1``: the points' own), one row per key,
    in one vectorised call of :func:`planner.optimize.prepare.utilization_caps`.

    Each point at a key is linked to the same point at the same burstiness one rate step lower (a burstiness first
    met: at the key before it, the next lower burstiness or rate): ``previous``, so that the unified caps are searched a rate step at a time,
    each from where its chain puts it (:func:`planner.optimize.prepare.unified_caps_at_load`). A unified cap moves
    little from one ×1.5 step to the next (on the 162-client fleet at 100 %/month, most not at all), so two evaluations
    find most of them where a bisection from scratch takes ~10; every cap is still one that meets with ``ρ`` + 0.002
    missing (the bisection's tolerance), priced at its own rate."""
    n = len(sub)
    order = sorted(range(len(keys)), key=lambda j: keys[j])
    before: list[int] = []
    seen: dict[float, int] = {}  # burstiness -> the last key of that burstiness (at a lower rate)
    for r, j in enumerate(order):
        # the same burstiness one rate step lower; a burstiness first met: the key before it (lower burstiness)
        before.append(seen.get(keys[j][1], order[r - 1] if r else -1))
        seen[keys[j][1]] = j
    link = np.full(len(keys), -1)
    link[order] = before
    previous = np.where(link[:, None] >= 0, link[:, None] * n + np.arange(n)[None, :], -1).ravel()
    scaled = pd.concat([sub.assign(rate_peak_per_s=base_rate * m, interarrival_cv=np.full(n, cv) if cv >= 0 else base_cv)
                        for (m, cv) in keys], ignore_index=True)
    caps, _ = utilization_caps(scaled, max_utilization=max_utilization, previous=previous)
    return caps.reshape(len(keys), n)


def levels_for(prep: Prepared, inputs: HorizonInputs) -> Levels:
    """Multipliers and utilisation caps of every (period, slot) and demand row (module docstring)."""
    slots = inputs.slots
    S = len(slots)
    T = len(inputs.growth)
    dem = prep.demand
    svc_of_d = dem["service"].astype(str).to_numpy()
    if inputs.service_slots is None and inputs.absolute and len(np.unique(svc_of_d)) != 1:
        raise InputError(Problem("", "horizon.demand", "a demand profile read from a log gives one service's rates",
                                 "plan exactly one service, or give slots by hand (multipliers)"))
    names = slots["slot"].astype(str).tolist()
    g = np.repeat(inputs.growth, S)
    # one group per service with its own slots (clients as services), else one group for every demand row
    groups: list[tuple[np.ndarray, pd.DataFrame]] = []
    if inputs.service_slots is None:
        groups.append((np.ones(len(dem), dtype=bool), slots))
    else:
        for svc in sorted(set(svc_of_d)):
            own = inputs.service_slots.get(svc)
            if own is None:
                raise InputError(Problem("", "horizon.demand.clients", f"service {svc!r} has no slots of its own",
                                         "a split fleet plans only its client-services"))
            groups.append((svc_of_d == svc, own.set_index(own["slot"].astype(str)).loc[names].reset_index(drop=True)))
    K = T * S
    m_peak_d = np.zeros((K, len(dem)))
    m_mean_d = np.zeros((K, len(dem)))
    pts = prep.points
    pts_caps = encode_split_ttft(pts, dem)  # a multimodal row's TTFT target is shared by its encode and prefill waits, as in solve
    pt_d = pts["d"].to_numpy(int)
    n_pts = len(pts)
    rho = np.zeros((K, n_pts))
    base_rate = pts["rate_peak_per_s"].to_numpy(float)
    base_cv = pts["interarrival_cv"].to_numpy(float)
    n_evals = 0
    clamped: list[str] = []  # slots whose mean multiplier exceeds their peak one (the mean is held at the peak)
    for rows, sl in groups:
        slot_peak = sl["peak_rate_per_s"].to_numpy(float)
        slot_mean = sl["mean_rate_per_s"].to_numpy(float)
        if inputs.absolute:
            slot_peak = slot_peak / float(dem.loc[rows, "rate_peak_per_s"].sum())
            slot_mean = slot_mean / max(float(dem.loc[rows, "rate_mean_per_s"].sum()), 1e-300)
        m_peak = g * np.tile(slot_peak, T)
        m_peak_d[:, rows] = m_peak[:, None]
        m_mean_raw = g * np.tile(slot_mean, T)
        clamped += [str(n) for n, over in zip(sl["slot"], (m_mean_raw > m_peak * (1 + 1e-9)).reshape(T, -1).any(axis=0), strict=True) if over]
        m_mean_d[:, rows] = np.minimum(m_mean_raw, m_peak)[:, None]
        # Caps on a coarse grid, always on the safe side: the rate rounded DOWN (a cap only rises
        # with the rate: more servers pool better), the burstiness rounded UP.
        m_cap = _grid_down(m_peak, CAP_RATE_STEP)
        cv_slot = sl["interarrival_cv"].to_numpy(float)
        cv_cap = np.where(np.isfinite(cv_slot), _grid_up(np.where(np.isfinite(cv_slot), cv_slot, 1.0), CAP_CV_STEP), np.nan)
        mine = np.flatnonzero(rows[pt_d]) if n_pts else np.zeros(0, dtype=int)
        # one queueing evaluation per distinct (rate step, burstiness step), rate steps in increasing order (_caps_by_rate)
        keys: dict[tuple[float, float], int] = {}
        key_of = np.zeros(K, dtype=int)
        for k in range(K):
            cv = float(cv_cap[k % S])
            key = (round(float(m_cap[k]), 9), round(cv, 6) if math.isfinite(cv) else -1.0)
            key_of[k] = keys.setdefault(key, len(keys))
        n_evals += len(keys)
        if mine.size and keys:
            caps = _caps_by_rate(pts_caps.iloc[mine], list(keys), base_rate[mine], base_cv[mine], inputs.max_utilization)
            rho[:, mine] = caps[key_of]
    lam = dem["rate_peak_per_s"].to_numpy(float)
    lam_mean = dem["rate_mean_per_s"].to_numpy(float)
    m_peak_all = m_peak_d @ lam / max(float(lam.sum()), 1e-300)  # the whole demand's peak as a multiple of the table's
    m_mean_all = m_mean_d @ lam_mean / max(float(lam_mean.sum()), 1e-300)
    per = f" over {len(groups)} services" if inputs.service_slots is not None else ""
    notes = [f"{T} periods x {S} slots = {K} levels; utilisation caps from {n_evals} queueing evaluations{per} "
             f"(rate rounded down to x{CAP_RATE_STEP:g} steps, burstiness up to x{CAP_CV_STEP:g} steps: caps on the safe side)",
             *inputs.demand_notes]
    if clamped:
        names_c = sorted(set(clamped))
        notes.append(f"warning: slot(s) {', '.join(names_c[:8])}{' ...' if len(names_c) > 8 else ''} have a mean rate above their peak: "
                     "the mean is held at the peak (check mean_multiplier against peak_multiplier)")
    return Levels(periods=T, slot_names=names, hours=slots["hours_per_period"].to_numpy(float),
                  m_peak=m_peak_all, m_mean=m_mean_all, rho=rho, m_peak_d=m_peak_d, m_mean_d=m_mean_d, notes=notes)


def _n_max(prep: Prepared, lv: Levels, coef: np.ndarray, kv_pc: np.ndarray, lam_peak: np.ndarray, red: int) -> np.ndarray:
    """Big-M of ``n[k, p]``: all load the pool could be routed at level ``k`` (and the KV it could hold), plus spares."""
    pts, pools = prep.points, prep.pools
    K = lv.m_peak.size
    d_of = pts["d"].to_numpy(int)
    pool_pos = {p: j for j, p in enumerate(pools["pool"])}
    point_pool = np.array([pool_pos[p] for p in pts["pool"]], dtype=int)
    kvcap = pools["kv_capacity_bytes"].to_numpy(float)
    n_max = np.zeros((K, len(pools)), dtype=int)
    for p in range(len(pools)):
        ids = np.flatnonzero(point_pool == p)
        if not ids.size:
            continue
        sub = pd.DataFrame(coef[:, ids].T)
        sub["d"] = d_of[ids]
        need = sub.groupby("d").max().sum(axis=0).to_numpy(float)
        kv_need = np.zeros(K)
        if kvcap[p] > 0 and pools["role"].iat[p] != "prefill":
            kvs = pd.DataFrame((lam_peak[ids] * kv_pc[ids] / kvcap[p])[:, None] * lv.m_peak_d[:, d_of[ids]].T)
            kvs["d"] = d_of[ids]
            kv_need = kvs.groupby("d").max().sum(axis=0).to_numpy(float)
        n_max[:, p] = np.ceil(np.maximum(need, kv_need) + 1e-9).astype(int) + 1 + red
    return n_max


@dataclass
class _Frame:
    """The index sets and per-point / per-pool arrays every block of :func:`build_horizon` reads (module docstring's
    notation: ``T`` periods, ``S`` slots, ``K = T·S`` levels, ``n_i`` points, ``P`` pools, ``Y`` device types)."""

    tables: CapacityTables
    inputs: HorizonInputs
    prep: Prepared
    lv: Levels
    static_pools: bool
    buy_only: bool
    T: int
    S: int
    K: int
    n_i: int
    P: int
    Y: int
    devices: list[str]
    acq: dict[str, Acquisition]
    red: int
    y_pos: dict[str, int]
    pool_of: np.ndarray
    d_of: np.ndarray
    role_of: np.ndarray
    tau: np.ndarray
    tp_pt: np.ndarray
    lam_peak: np.ndarray
    lam_mean: np.ndarray
    kv_pc: np.ndarray
    host_pt: np.ndarray
    idle_pt: np.ndarray
    busy_j: np.ndarray
    kvtx: np.ndarray
    tp_pool: np.ndarray
    y_of_pool: np.ndarray
    kvcap: np.ndarray
    sends: np.ndarray
    idle_w_pool: np.ndarray
    opsdev_pool: np.ndarray
    Hp: float
    months: float
    kwh: float
    k_all: np.ndarray
    t_of_k: np.ndarray
    h_of_k: np.ndarray
    coef: np.ndarray
    """(K, n_i) instances per unit share: ``λ^peak_{k,d(i)} τ_i / ρ_{k,i}`` (0 where the point cannot serve)."""
    n_max: np.ndarray
    integer: bool
    buy_y: list[str]
    sell_y: list[str]
    res_y: list[str]
    od_y: list[str]
    spot_y: list[str]
    idle_owned: bool
    wl: WeightLoad | None
    switching: tuple[str, str] | None

    @property
    def kp(self) -> np.ndarray:
        """(K, P) row ``k·P + p``."""
        return self.k_all[:, None] * self.P + np.arange(self.P)[None, :]


@dataclass
class _Vars:
    """Column indices of the variable blocks (module docstring)."""

    n: np.ndarray
    x: np.ndarray
    z: np.ndarray
    u: np.ndarray
    buy: np.ndarray
    sell: np.ndarray
    res: np.ndarray
    od: np.ndarray
    spot: np.ndarray
    unused: np.ndarray
    up: np.ndarray
    w: np.ndarray
    both: np.ndarray


@dataclass
class _Fleet:
    """Devices as linear expressions: owned ``O[t,y]`` and reserved ``R[t,y]`` (row ``t·Y + y``), held ``O + R`` and in
    pools ``D[k,y]`` at each level (row ``k·Y + y``)."""

    owned: Expr
    reserved: Expr
    held: Expr
    in_pools: Expr


@dataclass
class _Routes:
    """The (demand row, phase) route keys: ``rj`` the key of each (key, point) pair, ``ri`` its point, ``R`` the key count."""

    rj: np.ndarray
    ri: np.ndarray
    R: int


def _frame(tables: CapacityTables, inputs: HorizonInputs, prep: Prepared, lv: Levels, *, static_pools: bool, buy_only: bool,
           integer: bool | None, switching: tuple[str, str] | None) -> _Frame:
    """Index sets, per-point and per-pool arrays, the big-M ``M_{k,p}`` (:func:`_n_max`; with a ramp or one size per
    period, the period's largest), the integer-or-relaxed choice (module docstring, "Fleet scale") and the acquisition
    channels per device type; rejects inputs the model cannot plan."""
    pts, pools = prep.points, prep.pools
    cfg = tables.configs.drop_duplicates("config").set_index("config")
    costs = tables.costs
    T, S = lv.periods, len(lv.slot_names)
    K = T * S
    n_i, P = len(pts), len(pools)  # points i, pools p
    devices = sorted(pools["device"].unique().tolist()) if P else []
    Y = len(devices)
    missing = [d for d in devices if d not in inputs.acquisition]
    if missing:
        raise InputError(Problem("", "horizon.acquisition", f"no way to get {', '.join(missing)}", "add buy / reserve / on_demand / spot for them"))
    acq = inputs.acquisition
    red = int(inputs.redundancy)
    y_pos = {y: j for j, y in enumerate(devices)}
    pool_pos = {p: j for j, p in enumerate(pools["pool"])}
    pool_of = np.array([pool_pos[p] for p in pts["pool"]], dtype=int)
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
    tp_pool = pools["tp"].to_numpy(float)
    y_of_pool = np.array([y_pos[y] for y in pools["device"]], dtype=int)
    kvcap = pools["kv_capacity_bytes"].to_numpy(float)
    sends = pools["sends_kv"].to_numpy(bool)
    pool_cfg = cfg.loc[pools["config"].tolist()]
    idle_w_pool = (pool_cfg["idle_power_w"] + pool_cfg["host_power_w"]).to_numpy(float)
    opsdev_pool = (pool_cfg["ops_usd_per_device_month"] + pool_cfg["license_usd_per_device_month"]).to_numpy(float)
    hours = lv.hours
    k_all = np.arange(K)

    with np.errstate(divide="ignore", invalid="ignore"):
        coef = np.where(lv.rho > 0, lam_peak[None, :] * lv.m_peak_d[:, d_of] * tau[None, :] / lv.rho, 0.0)
    n_max = _n_max(prep, lv, coef, kv_pc, lam_peak, red)
    ramped = S > 1 and not static_pools and (inputs.ramp_instances_per_slot is not None
                                             or (inputs.weight_load is not None and inputs.weight_load.fleet_gb_per_s is not None))
    if static_pools or ramped:  # one size through a period's slots, or a ramp: a quiet slot may hold the period's largest pool
        n_max = np.repeat(n_max.reshape(T, S, P).max(axis=1), S, axis=0)
    if integer is None:
        # the scale of the plan: at the busiest level, the fewest instances any one pool would need to carry it all
        carriers = np.where(n_max > red + 1, n_max, np.iinfo(np.int64).max)
        smallest = carriers.min(axis=1) if P else np.zeros(K, dtype=int)
        scale = int(smallest[smallest < np.iinfo(np.int64).max].max(initial=0))
        integer = scale <= INTEGER_INSTANCES_MAX and K * P <= INTEGER_COUNTS_MAX

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
    idle_owned = inputs.owned_when_unused == "idle" or static_pools
    wl = inputs.weight_load if not static_pools else None
    if switching and wl is None:
        raise InputError(Problem("", "horizon.per_slot_architecture", "a per-slot architecture needs weight loading: a switch "
                                 "reloads the weights of the pools taking over, and that is its cost", "add horizon.weight_load"))
    return _Frame(tables=tables, inputs=inputs, prep=prep, lv=lv, static_pools=static_pools, buy_only=buy_only, T=T, S=S, K=K,
                  n_i=n_i, P=P, Y=Y, devices=devices, acq=acq, red=red, y_pos=y_pos, pool_of=pool_of, d_of=d_of, role_of=role_of,
                  tau=tau, tp_pt=tp_pt, lam_peak=lam_peak, lam_mean=lam_mean, kv_pc=kv_pc, host_pt=host_pt, idle_pt=idle_pt,
                  busy_j=busy_j, kvtx=kvtx, tp_pool=tp_pool, y_of_pool=y_of_pool, kvcap=kvcap, sends=sends, idle_w_pool=idle_w_pool,
                  opsdev_pool=opsdev_pool, Hp=float(hours.sum()), months=inputs.months_per_period,
                  kwh=float(costs.electricity_usd_per_kwh) * float(costs.pue), k_all=k_all, t_of_k=k_all // S,
                  h_of_k=hours[k_all % S], coef=coef, n_max=n_max, integer=integer, buy_y=buy_y, sell_y=sell_y, res_y=res_y,
                  od_y=od_y, spot_y=spot_y, idle_owned=idle_owned, wl=wl, switching=switching)


def _variables(f: _Frame, lp: LinearModel) -> _Vars:
    """The variable blocks: counts ``n[k,p] ≤ M_{k,p}``, shares ``x[k,i] ∈ [0, 1]`` (0 where ``ρ_{k,i} = 0``), pool and
    type switches ``z[t,p]``, ``u[t,y]`` ∈ {0,1}; purchases ``buy[t,y]``, sales ``sell[t,y]``, reservations ``res[t,y]``;
    rentals ``od[k,y] ≤ od_max_y``, ``spot[k,y] ≤ spot_max_y``; idle owned devices ``unused[k,y]``; instances brought up
    ``up[k,p]``; per-slot architecture ``w[k]`` ∈ {0,1} and ``both[k,p] ∈ [0, 1]``. Blocks not in this model have no columns."""
    K, P, T, Y, acq, integer = f.K, f.P, f.T, f.Y, f.acq, f.integer

    def cap(vals: list[int | None]) -> np.ndarray:
        return np.array([np.inf if v is None else float(v) for v in vals])

    n = lp.var("n", (K, P), ub=f.n_max, integer=integer).col
    x = lp.var("x", (K, f.n_i), ub=(f.lv.rho > 0).astype(float)).col
    z = lp.var("z", (T, P), ub=1.0, integer=True).col
    u = lp.var("u", (T, Y), ub=1.0, integer=True).col
    buy = lp.var("buy", (T, len(f.buy_y)), integer=integer).col
    sell = lp.var("sell", (T, len(f.sell_y)), integer=integer).col
    res = lp.var("res", (T, len(f.res_y)), integer=integer).col
    od = lp.var("od", (K, len(f.od_y)), ub=cap([acq[y].on_demand_max for y in f.od_y])[None, :], integer=integer).col
    spot = lp.var("spot", (K, len(f.spot_y)), ub=cap([acq[y].spot_max for y in f.spot_y])[None, :], integer=integer).col
    unused = lp.var("unused", (K, Y if f.idle_owned else 0)).col
    up = lp.var("up", (K, P if f.wl is not None else 0)).col
    w = lp.var("w", (K if f.switching else 0,), ub=1.0, integer=True).col
    both = lp.var("both", (K, P if f.switching else 0), ub=1.0).col
    return _Vars(n=n, x=x, z=z, u=u, buy=buy, sell=sell, res=res, od=od, spot=spot, unused=unused, up=up, w=w, both=both)


def _fleet(f: _Frame, v: _Vars, lp: LinearModel) -> _Fleet:
    """Owned and reserved devices per period, with purchase lead times and reservation terms:
    ``O[t,y] = O0_y + Σ_{t' ≤ t − lead_y} buy[t',y] − Σ_{t' ≤ t} sell[t',y]``,
    ``R[t,y] = Σ_{t − term_y < t' ≤ t} res[t',y]`` (the baseline has its fleet in place: lead 0);
    devices in pools ``D[k,y] = Σ_{p: y(p)=y} tp_p n[k,p]``."""
    T, Y, K, P, acq, y_pos = f.T, f.Y, f.K, f.P, f.acq, f.y_pos
    tt, tq = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")  # (period t, earlier period t')
    r_o: list[np.ndarray] = []
    c_o: list[np.ndarray] = []
    v_o: list[np.ndarray] = []
    for j, y in enumerate(f.buy_y):
        lead = 0 if f.buy_only else acq[y].lead_time_periods  # the baseline has its fleet in place
        mask = tq <= tt - lead
        r_o.append(tt[mask] * Y + y_pos[y])
        c_o.append(v.buy[tq[mask], j])
        v_o.append(np.ones(mask.sum()))
    for j, y in enumerate(f.sell_y):
        mask = tq <= tt
        r_o.append(tt[mask] * Y + y_pos[y])
        c_o.append(v.sell[tq[mask], j])
        v_o.append(-np.ones(mask.sum()))
    o0 = np.tile(np.array([float(acq[y].initial_owned) for y in f.devices]), T)
    cat = np.concatenate
    owned = lp.expr(T * Y, cat(r_o) if r_o else [], cat(c_o) if c_o else [], cat(v_o) if v_o else [], o0)
    r_r, c_r = [], []
    for j, y in enumerate(f.res_y):
        mask = (tq <= tt) & (tq > tt - acq[y].reserve_term_periods)
        r_r.append(tt[mask] * Y + y_pos[y])
        c_r.append(v.res[tq[mask], j])
    reserved = lp.expr(T * Y, cat(r_r) if r_r else [], cat(c_r) if c_r else [], 1.0)
    ky = (f.t_of_k[:, None] * Y + np.arange(Y)[None, :]).ravel()  # level row k·Y + y → period row t·Y + y
    held = (owned + reserved).rows(ky)  # O + R at each level, row k·Y + y
    in_pools = lp.expr(K * Y, (f.k_all[:, None] * Y + f.y_of_pool[None, :]), v.n, np.broadcast_to(f.tp_pool, (K, P)))
    return _Fleet(owned=owned, reserved=reserved, held=held, in_pools=in_pools)


def _rented(f: _Frame, v: _Vars, lp: LinearModel, spot_weight: np.ndarray) -> Expr:
    """``od[k,y] + a_y spot[k,y]``, row ``k·Y + y`` (``a`` the spot weight per spot device type)."""
    K, Y, k_all, cat = f.K, f.Y, f.k_all, np.concatenate
    rows = cat([(k_all[:, None] * Y + np.array([f.y_pos[y] for y in f.od_y], dtype=int)[None, :]).ravel(),
                (k_all[:, None] * Y + np.array([f.y_pos[y] for y in f.spot_y], dtype=int)[None, :]).ravel()])
    return lp.expr(K * Y, rows, cat([v.od.ravel(), v.spot.ravel()]),
                   cat([np.ones(v.od.size), np.broadcast_to(spot_weight, v.spot.shape).ravel()]))


def _routing_and_capacity(f: _Frame, v: _Vars, lp: LinearModel) -> _Routes:
    """Demand routing and pool capacity: ``route``, ``load``, ``kv``, ``pool_on``, ``type_on``, ``types_max`` (formulas
    at each family); the spares ``r·z[t,p]`` (per-slot architectures: ``r·both[k,p]``) sit in ``load`` and ``kv``."""
    K, P, T, Y, k_all, t_of_k, d_of, pool_of = f.K, f.P, f.T, f.Y, f.k_all, f.t_of_k, f.d_of, f.pool_of
    n, x, z, u = v.n, v.x, v.z, v.u
    # route[k,d,phase]: Σ_{i serves d in phase} x[k,i] = 1
    pairs = [(d, ph, i) for i in range(f.n_i) for ph in PHASES if f.role_of[i] in PHASE_ROLES[ph] for d in (int(d_of[i]),)]
    keys = sorted({(d, ph) for d, ph, _ in pairs})
    key_pos = {kk: j for j, kk in enumerate(keys)}
    rj = np.array([key_pos[(d, ph)] for d, ph, _ in pairs], dtype=int)
    ri = np.array([i for _, _, i in pairs], dtype=int)
    R = len(keys)
    lp.constrain("route", lp.expr(K * R, (k_all[:, None] * R + rj[None, :]), x[:, ri], 1.0), 1.0, 1.0)
    # spares: r·z[t,p]; with per-slot architectures, r·both[k,p] (both = z[t,p] AND the pool's architecture carries slot k)
    kp = f.kp
    spares = lp.expr(K * P, kp, v.both if f.switching else z[t_of_k], float(f.red))
    minus_n = lp.expr(K * P, kp, n, -1.0)
    # load[k,p]: Σ_{i∈p} λ^peak_{k,d(i)} τ_i / ρ_{k,i} x[k,i] − n[k,p] + r·z[t,p] ≤ 0
    kk, ii = np.nonzero(f.coef > 0)
    load = lp.expr(K * P, kk * P + pool_of[ii], x[kk, ii], f.coef[kk, ii])
    lp.constrain("load", load + minus_n + spares, hi=0.0)
    # kv[k,p] (decode / unified pools with a KV capacity): Σ_{i∈p} m_k λ^peak_{d(i)} kv_i / KV_p x[k,i] − n[k,p] + r·z[t,p] ≤ 0
    kv_pool = (f.kvcap > 0) & (f.prep.pools["role"].to_numpy(str) != "prefill")
    if kv_pool.any():
        ik = np.flatnonzero(kv_pool[pool_of])
        kvc = f.lv.m_peak_d[:, d_of[ik]] * (f.lam_peak[ik] * f.kv_pc[ik] / f.kvcap[pool_of[ik]])[None, :]
        kv = lp.expr(K * P, k_all[:, None] * P + pool_of[ik][None, :], x[:, ik], kvc)
        sel = (k_all[:, None] * P + np.flatnonzero(kv_pool)[None, :]).ravel()
        lp.constrain("kv", (kv + minus_n + spares).rows(sel), hi=0.0)
    # pool_on[k,p]: n[k,p] − M_{k,p} z[t,p] ≤ 0
    lp.constrain("pool_on", lp.expr(K * P, np.stack([kp, kp]), np.stack([n, z[t_of_k]]),
                                    np.stack([np.ones((K, P)), -f.n_max.astype(float)])), hi=0.0)
    # type_on[t,p]: z[t,p] − u[t,y(p)] ≤ 0
    tpr = np.arange(T)[:, None] * P + np.arange(P)[None, :]
    lp.constrain("type_on", lp.expr(T * P, np.stack([tpr, tpr]), np.stack([z, u[:, f.y_of_pool]]),
                                    np.stack([np.ones((T, P)), -np.ones((T, P))])), hi=0.0)
    # types_max[t]: Σ_y u[t,y] ≤ types_max (the row bound, set per architecture: 1 for a shared single-type plan)
    lp.constrain("types_max", lp.expr(T, np.repeat(np.arange(T), Y), u.ravel(), 1.0), hi=float(max(1, Y)))
    return _Routes(rj=rj, ri=ri, R=R)


def _procurement(f: _Frame, v: _Vars, lp: LinearModel, fl: _Fleet) -> None:
    """Device supply: ``owned_nonneg``, ``supply`` (devices in pools against owned, reserved and rented ones with spot
    weighted by its availability) and ``procurement`` limits (formulas at each family)."""
    T, Y, K, acq, y_pos = f.T, f.Y, f.K, f.acq, f.y_pos
    # owned_nonneg[t,y] (types that can be sold): O[t,y] ≥ 0
    if f.sell_y:
        lp.constrain("owned_nonneg", fl.owned.rows((np.arange(T)[:, None] * Y + np.array([y_pos[y] for y in f.sell_y])[None, :]).ravel()), lo=0.0)
    # supply[k,y]: D[k,y] ≤ O[t,y] + R[t,y] + od[k,y] + a_y spot[k,y]
    avail = np.array([acq[y].spot_availability for y in f.spot_y])
    lp.constrain("supply", fl.in_pools - fl.held - _rented(f, v, lp, avail), hi=0.0)
    # procurement[k,y] (types with a limit): O + R + od + spot ≤ limit
    limited = [y for y in f.devices if math.isfinite(acq[y].procurement_limit)]
    if limited:
        sel = (f.k_all[:, None] * Y + np.array([y_pos[y] for y in limited])[None, :]).ravel()
        lim = np.tile(np.array([acq[y].procurement_limit for y in limited]), K)
        lp.constrain("procurement", (fl.held + _rented(f, v, lp, np.ones(len(f.spot_y)))).rows(sel), hi=lim)


def _slot_to_slot(f: _Frame, v: _Vars, lp: LinearModel) -> Expr:
    """Change between consecutive slots of a period (cyclic: the day repeats, ``k^-`` the previous slot):
    ``ramp[k,p]: n[k,p] − n[k^-,p] ≤ ramp``; the baseline's ``static[k,p]: n[k,p] − n[t·S,p] = 0`` for ``s > 0``.
    Returns the growth ``n[k,p] − n[k^-,p]`` (row ``k·P + p``) the weight loading reads."""
    K, P, S, k_all, t_of_k, n, kp = f.K, f.P, f.S, f.k_all, f.t_of_k, v.n, f.kp
    # n[k^-,p]: the previous slot of the same period (cyclic: the day repeats)
    prev = t_of_k * S + (k_all % S - 1) % S
    growth_kp = lp.expr(K * P, np.stack([kp, kp]), np.stack([n, n[prev]]), np.stack([np.ones((K, P)), -np.ones((K, P))]))
    # ramp[k,p]: n[k,p] − n[k^-,p] ≤ ramp
    if f.inputs.ramp_instances_per_slot is not None and S > 1 and not f.static_pools:
        lp.constrain("ramp", growth_kp, hi=float(f.inputs.ramp_instances_per_slot))
    # static[k,p] (baseline): n[k,p] − n[t·S,p] = 0 for s > 0
    if f.static_pools and S > 1:
        first = t_of_k * S
        sel = np.flatnonzero(k_all % S)
        st = lp.expr(K * P, np.stack([kp, kp]), np.stack([n, n[first]]), np.stack([np.ones((K, P)), -np.ones((K, P))]))
        lp.constrain("static", st.rows((sel[:, None] * P + np.arange(P)[None, :]).ravel()), 0.0, 0.0)
    return growth_kp


def _idle_owned(f: _Frame, v: _Vars, lp: LinearModel, fl: _Fleet) -> None:
    """``unused[k,y]`` (idle owned devices, priced at idle power): ``unused[k,y] − O[t,y] − R[t,y] + D[k,y] ≥ 0``."""
    if f.idle_owned:
        lp.constrain("unused", lp.expr(f.K * f.Y, np.arange(f.K * f.Y), v.unused.ravel(), 1.0) - fl.held + fl.in_pools, lo=0.0)


def _weight_loading(f: _Frame, v: _Vars, lp: LinearModel, growth_kp: Expr) -> np.ndarray:
    """Weight loading (module docstring): ``grown[k,p]: up[k,p] ≥ n[k,p] − n[k^-,p]``; ``grown_slow``: ``up = 0`` for a
    pool whose instance loads for longer than the slot; ``weight_ramp[k]: Σ_p up[k,p] W_p ≤ B · 3600 · len_s``.
    Returns ``L_p``, the hours one instance of pool ``p`` takes to load (zeros without weight loading)."""
    K, P, S, k_all, kp, wl = f.K, f.P, f.S, f.k_all, f.kp, f.wl
    load_h = np.zeros(P)
    if wl is None or S <= 1:
        return load_h
    pool_svc = _pool_services(f)
    lp.constrain("grown", lp.expr(K * P, kp, v.up, 1.0) - growth_kp, lo=0.0)
    load_h = np.array([wl.reload_s(pool_svc[p], int(f.tp_pool[p])) / 3600.0 for p in range(P)])
    too_slow = load_h[None, :] > wl.slot_length_h[k_all % S][:, None]
    if too_slow.any():  # a pool whose instance loads for longer than a slot cannot grow inside one
        lp.constrain("grown_slow", lp.expr(K * P, kp, v.up, 1.0).rows(np.flatnonzero(too_slow.ravel())), hi=0.0)
    if wl.fleet_gb_per_s is not None:
        wb = np.array([wl.weight_bytes[pool_svc[p]] for p in range(P)])
        lp.constrain("weight_ramp", lp.expr(K, np.repeat(k_all, P), v.up.ravel(), np.tile(wb, K)),
                     hi=wl.fleet_gb_per_s * 1e9 * 3600.0 * wl.slot_length_h[k_all % S])
    return load_h


def _pool_services(f: _Frame) -> list[str]:
    """The service each pool serves (pools are per service)."""
    pts = f.prep.points
    return f.prep.pools["pool"].map(pts.drop_duplicates("pool").set_index("pool")["service"]).tolist()


def _switching(f: _Frame, v: _Vars, lp: LinearModel, rt: _Routes) -> None:
    """Per-slot architecture (module docstring): ``w[k] = 1`` → B carries slot k, 0 → A.
    ``arch_route[k,d,phase]``: ``Σ_{i of roles only A has} x[k,i] ≤ 1 − w[k]``; ``Σ_{i of roles only B has} x[k,i] ≤ w[k]``;
    ``arch_spares[k,p]``: ``both[k,p] ≥ z[t,p] − w[k]`` (A's pools), ``≥ z[t,p] + w[k] − 1`` (B's): spares where the pool
    carries; pools of roles in both architectures: ``both ≥ z``."""
    if not f.switching:
        return
    K, k_all, t_of_k, x, z, w, both = f.K, f.k_all, f.t_of_k, v.x, v.z, v.w, v.both
    rj, ri, R = rt.rj, rt.ri, rt.R
    ra, rb = ARCH_ROLES[f.switching[0]], ARCH_ROLES[f.switching[1]]
    side_pt = np.array([0 if (r in ra and r not in rb) else 1 if (r in rb and r not in ra) else -1 for r in f.role_of])
    side_pool = np.array([0 if (r in ra and r not in rb) else 1 if (r in rb and r not in ra) else -1 for r in f.prep.pools["role"]])
    for side, sign in ((0, -1.0), (1, 1.0)):
        on = side_pt[ri] == side  # (route key, point) pairs of this side
        if on.any():  # A: Σ x + w ≤ 1   B: Σ x − w ≤ 0
            e = lp.expr(K * R, np.concatenate([(k_all[:, None] * R + rj[on][None, :]).ravel(), k_all[:, None].repeat(R, 1).ravel() * R
                                               + np.tile(np.arange(R), K)]),
                        np.concatenate([x[:, ri[on]].ravel(), np.repeat(w, R)]),
                        np.concatenate([np.ones(K * int(on.sum())), np.full(K * R, -sign)]))
            used = np.unique(rj[on])
            lp.constrain(f"arch_route_{side}", e.rows((k_all[:, None] * R + used[None, :]).ravel()), hi=1.0 if side == 0 else 0.0)
        pp = np.flatnonzero(side_pool == side)
        if pp.size:
            r2 = np.arange(K * pp.size).reshape(K, pp.size)
            ones = np.ones((K, pp.size))
            # A: both[k,p] − z[t,p] + w[k] ≥ 0  (both ≥ z − w);  B: both[k,p] − z[t,p] − w[k] ≥ −1  (both ≥ z + w − 1)
            e = lp.expr(K * pp.size, np.stack([r2, r2, r2]), np.stack([both[:, pp], z[t_of_k][:, pp], np.repeat(w[:, None], pp.size, 1)]),
                        np.stack([ones, -ones, -sign * ones]))
            lp.constrain(f"arch_spares_{side}", e, lo=0.0 if side == 0 else -1.0)
    pb = np.flatnonzero(side_pool == -1)
    if pb.size:  # roles in both architectures (none for shared vs disaggregated): spares whenever on
        r2 = np.arange(K * pb.size).reshape(K, pb.size)
        lp.constrain("arch_spares_any", lp.expr(K * pb.size, np.stack([r2, r2]), np.stack([both[:, pb], z[t_of_k][:, pb]]),
                                                np.stack([np.ones((K, pb.size)), -np.ones((K, pb.size))])), lo=0.0)


def _cost_terms(f: _Frame, v: _Vars, lp: LinearModel, fl: _Fleet, load_h: np.ndarray) -> dict[str, Expr]:
    """USD per period (row t) for each term of :data:`COST_TERMS`, undiscounted; the formula of each term is at its key
    (``H`` the period's hours, ``h_s`` the slot's, ``e`` USD per kWh, ``η`` the PUE)."""
    T, Y, P, n_i, t_of_k, h_of_k, acq, devices = f.T, f.Y, f.P, f.n_i, f.t_of_k, f.h_of_k, f.acq, f.devices
    n, x = v.n, v.x
    costs = f.tables.costs
    cfg = f.tables.configs.drop_duplicates("config").set_index("config")
    kwh = f.kwh

    def per_period_n(per_instance: np.ndarray) -> Expr:
        """Σ_{s,p} c_{k,p} n[k,p] into period rows (``per_instance`` (K,P) USD per instance over the slot)."""
        return lp.expr(T, np.repeat(t_of_k, P), n.ravel(), per_instance.ravel())

    def per_period_x(per_share: np.ndarray) -> Expr:
        return lp.expr(T, np.repeat(t_of_k, n_i), x.ravel(), per_share.ravel())

    def per_period_k(cols: np.ndarray, vals: np.ndarray) -> Expr:
        return lp.expr(T, np.repeat(t_of_k, cols.shape[1]), cols.ravel(), vals.ravel())

    def per_type(e: Expr, price: dict[str, float]) -> Expr:
        """Σ_y price_y e[t,y] for (T·Y)-row expressions."""
        g = sp.csr_matrix((np.ones(T * Y), (np.repeat(np.arange(T), Y), np.arange(T * Y))), shape=(T, T * Y))
        scaled = e.scale(np.tile(np.array([price.get(y, 0.0) for y in devices]), T))
        return Expr((g @ scaled.A).tocsr(), g @ scaled.c)

    buy_h = {y: float(acq[y].buy_usd_per_device_hour or 0.0) * f.Hp for y in f.buy_y}
    res_h = {y: float(acq[y].reserve_usd_per_hour or 0.0) * f.Hp for y in f.res_y}
    mm = f.lv.m_mean_d[:, f.d_of]  # (K, n_i): each point's demand row's mean multiplier
    hk = h_of_k[:, None]
    idle_share = mm * (f.lam_mean * f.tau * f.tp_pt * (f.idle_pt + f.host_pt))[None, :] * hk
    prefill_tx = (f.role_of == "prefill") & (f.kvtx > 0)
    cfg_idle = np.array([float((cfg.loc[cfg["device"] == y, "idle_power_w"] + cfg.loc[cfg["device"] == y, "host_power_w"]).iloc[0])
                         for y in devices])
    zero = lp.zero(T)
    terms: dict[str, Expr] = {
        # ownership: Σ_y O[t,y] c^buy_y H
        "ownership": per_type(fl.owned, buy_h),
        # resale_writeoff: Σ_y sell[t,y] (1 − f_y) P_y
        "resale_writeoff": lp.expr(T, np.repeat(np.arange(T), len(f.sell_y)), v.sell.ravel(),
                                   np.tile([(1.0 - float(acq[y].resale_fraction or 0.0)) * acq[y].purchase_usd for y in f.sell_y], T)),
        # reserved: Σ_y R[t,y] c^res_y H, plus in the last period the terms' months past the horizon (below)
        "reserved": per_type(fl.reserved, res_h) + _reserved_past_horizon(f, v, lp, res_h),
        # on_demand / spot: Σ_{s,y} od[k,y] c^od_y h_s
        "on_demand": per_period_k(v.od, h_of_k[:, None] * np.array([acq[y].on_demand_usd_per_hour or 0.0 for y in f.od_y])[None, :]),
        "spot": per_period_k(v.spot, h_of_k[:, None] * np.array([acq[y].spot_usd_per_hour or 0.0 for y in f.spot_y])[None, :]),
        # power_busy: eη Σ_s h_s Σ_i λ^mean_{k,d(i)} x[k,i] (E_i + τ_i tp_i P^host) · 3600 / 3.6e6
        "power_busy": per_period_x(kwh * mm * (f.lam_mean * f.busy_j)[None, :] * SECONDS_PER_HOUR * hk / J_PER_KWH),
        # power_idle: eη/1000 Σ_s h_s [Σ_p tp_p n (P^idle + P^host) − Σ_i λ^mean x τ_i tp_i (P^idle + P^host) + Σ_y unused P^idle_y]
        "power_idle": (per_period_n(kwh / 1e3 * hk * (f.tp_pool * f.idle_w_pool)[None, :]) + per_period_x(-kwh / 1e3 * idle_share)
                       + (per_period_k(v.unused, kwh / 1e3 * hk * cfg_idle[None, :]) if f.idle_owned else zero)),
        # network_nic: Σ_{s,p sends KV} h_s / H · tp_p · c^nic n[k,p]  (H = costs.hours_per_month)
        "network_nic": per_period_n(hk / float(costs.hours_per_month) * (f.tp_pool * f.sends * float(costs.nic_usd_per_device_month))[None, :]),
        # network_transfer: Σ_{s,i prefill} λ^mean x kvtx_i / 1e9 · 3600 h_s · c^GB
        "network_transfer": per_period_x(mm * (f.lam_mean * f.kvtx * prefill_tx)[None, :] / 1e9 * SECONDS_PER_HOUR * hk
                                         * float(costs.transfer_usd_per_gb)),
        # ops_pools / ops_device_types: c^pool · months · Σ_p z[t,p]; c^type · months · Σ_y u[t,y]
        "ops_pools": lp.expr(T, np.repeat(np.arange(T), P), v.z.ravel(), float(costs.ops_usd_per_pool_month) * f.months),
        "ops_device_types": lp.expr(T, np.repeat(np.arange(T), Y), v.u.ravel(), float(costs.ops_usd_per_device_type_month) * f.months),
        # ops_devices: Σ_{s,p} h_s / H · tp_p (c^ops + c^licence) n[k,p]
        "ops_devices": per_period_n(hk / float(costs.hours_per_month) * (f.tp_pool * f.opsdev_pool)[None, :]),
        # weight_reload: Σ_{s,p} (h_s / len_s) up[k,p] tp_p L_p c^load_{y(p)}  (each occurrence of the slot reloads)
        "weight_reload": zero,
    }
    wl = f.wl
    if wl is not None and f.S > 1:
        price = np.array([wl.usd_per_device_hour[devices[f.y_of_pool[p]]] for p in range(P)])
        per_up = (h_of_k / wl.slot_length_h[f.k_all % f.S])[:, None] * (f.tp_pool * load_h * price)[None, :]
        terms["weight_reload"] = per_period_k(v.up, per_up)
    return terms


def _discount(f: _Frame, periods: int) -> np.ndarray:
    """``δ_t = (1 + i)^{−t · months / 12}`` for ``t = 0..periods−1``."""
    return np.array([(1.0 + f.inputs.discount_rate_per_year) ** (-t * f.months / 12.0) for t in range(periods)])


def _reserved_past_horizon(f: _Frame, v: _Vars, lp: LinearModel, res_h: dict[str, float]) -> Expr:
    """A reservation is paid for its whole term: the periods of ``res[t',y]``'s term after the horizon,
    ``u = T .. t' + term − 1``, are charged in the last period ``T − 1`` at their value there,
    :math:`c^{res}_y H \\sum_u δ_u / δ_{T-1}` per reservation (so the objective counts each at its own discount)."""
    T = f.T
    if not f.res_y or T == 0:
        return lp.zero(T)
    longest = max(int(f.acq[y].reserve_term_periods) for y in f.res_y)
    disc = _discount(f, T + longest)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for j, y in enumerate(f.res_y):
        term = int(f.acq[y].reserve_term_periods)
        for t in range(T):
            end = t + term  # first period after the term
            if end > T:
                rows.append(T - 1)
                cols.append(int(v.res[t, j]))
                vals.append(res_h[y] * float(disc[T:end].sum()) / float(disc[T - 1]))
    return lp.expr(T, rows, cols, vals) if rows else lp.zero(T)


def _objective(f: _Frame, lp: LinearModel, terms: dict[str, Expr]) -> np.ndarray:
    """``min Σ_t δ_t Σ_term cost[t]`` with the discount ``δ_t = (1 + rate)^{−t · months / 12}``; returns ``δ``."""
    disc = _discount(f, f.T)
    total = lp.zero(f.T)
    for name in COST_TERMS:
        total = total + terms[name]
    lp.minimize(total.scale(disc))
    return disc


def build_horizon(tables: CapacityTables, inputs: HorizonInputs, *, static_pools: bool = False,
                  buy_only: bool = False, integer: bool | None = None, switching: tuple[str, str] | None = None,
                  like: HorizonBuilt | None = None) -> HorizonBuilt:
    """Build the horizon MIP (module docstring) as one sparse matrix. ``static_pools``/``buy_only`` give the
    owned-peak baseline; ``integer`` None chooses by fleet size (:data:`INTEGER_INSTANCES_MAX`); ``switching``
    = (architecture A, architecture B) adds the per-slot choice between them (module docstring); ``like`` (a model
    built from the same tables and inputs) lends its prepared table and levels (the queueing caps are the slow part).

    The blocks, in the order their rows enter the matrix: :func:`_variables`, :func:`_fleet` (owned / reserved with
    lead times and terms), :func:`_routing_and_capacity`, :func:`_procurement`, :func:`_slot_to_slot`,
    :func:`_idle_owned`, :func:`_weight_loading`, :func:`_switching`, :func:`_cost_terms`, :func:`_objective`."""
    t0 = time.perf_counter()
    if tables.agents is not None:
        raise InputError(Problem("", "services", "plans over time do not cover the tool execution phase yet",
                                 "plan agentic services with `planner solve`"))
    prep = like.prep if like is not None else prepare(without_replay(tables), max_utilization=None)
    lv = like.levels if like is not None else levels_for(prep, inputs)
    f = _frame(tables, inputs, prep, lv, static_pools=static_pools, buy_only=buy_only, integer=integer, switching=switching)
    lp = LinearModel()
    v = _variables(f, lp)
    fl = _fleet(f, v, lp)
    routes = _routing_and_capacity(f, v, lp)
    _procurement(f, v, lp, fl)
    growth_kp = _slot_to_slot(f, v, lp)
    _idle_owned(f, v, lp, fl)
    load_h = _weight_loading(f, v, lp, growth_kp)
    _switching(f, v, lp, routes)
    terms = _cost_terms(f, v, lp, fl, load_h)
    disc = _objective(f, lp, terms)
    bounds = lp.finish()
    return HorizonBuilt(lp=lp, bounds=bounds, prep=prep, levels=lv, inputs=inputs, devices=f.devices, owned=fl.owned,
                        reserved=fl.reserved, costs=terms, discount=disc, buy_y=f.buy_y, sell_y=f.sell_y, res_y=f.res_y,
                        od_y=f.od_y, spot_y=f.spot_y, integer=f.integer, switching=switching, build_s=time.perf_counter() - t0)


def architecture_bounds(hb: HorizonBuilt, architecture: str) -> Bounds:
    """Bounds that allow only the roles of ``architecture`` (a copy: the model is not touched). For a
    per-slot model (``hb.switching``), ``architecture`` is ignored: both architectures' roles stay open."""
    b = hb.bounds.copy()
    roles = hb.prep.points["role"].to_numpy(str)
    prole = hb.prep.pools["role"].to_numpy(str)
    if hb.switching:
        allowed = ARCH_ROLES[hb.switching[0]] | ARCH_ROLES[hb.switching[1]]
        single = False
    else:
        allowed = ARCH_ROLES[architecture]
        single = architecture == "shared" and hb.inputs.shared_single_device_type
    ok_pt = np.array([r in allowed for r in roles], dtype=bool)
    x = hb.block("x")
    b.col_ub[x] = np.where(ok_pt[None, :] & (hb.levels.rho > 0), 1.0, 0.0)
    ok_pool = np.array([r in allowed for r in prole], dtype=float)
    b.col_ub[hb.block("z")] = np.broadcast_to(ok_pool, hb.block("z").shape)
    b.row_ub[hb.lp.families["types_max"]] = 1.0 if single else float(max(1, len(hb.devices)))
    return b
