r"""The mixed-integer program (DESIGN §6), built once from :class:`Prepared` index sets.

Sets
----
``D`` demand rows (service ``s``, bucket ``b``); ``I`` feasible operating points
``i = (s, b, r, c)`` (role ``r``, configuration ``c = device/tp``, serving model group ``g(s)``);
``P`` pools ``p = (r, c, g)``; ``T`` device types; ``I_p`` points of pool ``p``;
``I_{d,phase}`` points that serve demand row ``d`` in a phase (prefill phase: roles
prefill or unified; decode phase: roles decode or unified).

Variables
---------
``n[p]`` integer instances of pool ``p`` (devices ``n·tp``); ``x[i] ∈ [0,1]`` routing share;
``z[p] ∈ {0,1}`` pool exists; ``u[t] ∈ {0,1}`` device type used.

Parameters (mutable, for re-solving a built model; redundancy ``k`` is fixed at build)
-----------------------------------------------------------------------------------
``lam_peak[d]``, ``lam_mean[d]`` request rates (1/s); ``price`` electricity (USD/kWh);
``types_max`` most device types; ``budget`` USD/month.

Constraints (name grammar ``kind[key]``; see :func:`constraint_names`)
---------------------------------------------------------------------
- ``route[s|b|phase]``  :math:`\sum_{i \in I_{d,phase}} x_i = 1` — every bucket fully routed in each phase;
- ``load[p]``           :math:`\sum_{i \in I_p} \lambda^{peak}_{d(i)} \tau_i / \rho_i \, x_i \le n_p - k z_p`
  — peak load within the utilisation cap with ``k`` instances lost (τ instance-seconds per
  request, ρ the queueing cap of :mod:`planner.optimize.prepare`);
- ``kv[p]``             :math:`\sum_{i \in I_p} \lambda^{peak}_{d(i)} \kappa_i h_i x_i \le K_p (n_p - k z_p)`
  — KV bytes resident at peak (κ KV bytes per request, h its decode residence
  ``out_mean · TPOT``, Little's law) fit the KV capacity ``K_p`` of the surviving instances;
- ``pool_on[p]``        :math:`n_p \le N_p z_p` and ``pool_min[p]`` :math:`n_p \ge (k+1) z_p`;
- ``type_on[p]``        :math:`z_p \le u_{t(p)}`;  ``types_max``: :math:`\sum_t u_t \le U`;
- ``procurement[t]``    :math:`\sum_{p: t(p)=t} tp_p n_p \le L_t`;
- ``budget``            total cost :math:`\le B` (only when a budget is given).

Objective (USD/month, ``H`` hours per month, ``e`` electricity price, PUE ``η``)
------------------------------------------------------------------------------
- equipment    :math:`\sum_p n_p\, tp_p\, c^{eq}_{t(p)} H` (rental or annuity per device-hour);
- power busy   :math:`\sum_i \lambda^{mean} x_i (E_i + \tau_i tp_i P^{host}) \cdot 3600 H / 3.6\text{e}6 \cdot e\,η`
  (``E_i`` busy energy of the tp devices per request, J);
- power idle   :math:`e\,η\,H/1000 \, [\sum_p n_p tp_p (P^{idle} + P^{host}) - \sum_i \lambda^{mean} x_i \tau_i tp_i (P^{idle}+P^{host})]`
  — idle power only on provisioned-but-unused device time (never counted twice);
- network NIC  :math:`\sum_{p\ \text{sends KV}} n_p tp_p c^{nic}`; transfer :math:`\sum_{i \in prefill} \lambda^{mean} x_i β_i/10^9 \cdot 3600 H c^{GB}`;
- operations   :math:`c^{pool}\sum_p z_p + c^{type}\sum_t u_t + \sum_p n_p tp_p (c^{ops}_{t} + c^{lic}_{t})`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.optimize.prepare import J_PER_KWH, SECONDS_PER_HOUR, Prepared

PHASES: tuple[str, ...] = ("prefill", "decode")
PHASE_ROLES: dict[str, tuple[str, ...]] = {"prefill": ("prefill", "unified"), "decode": ("decode", "unified")}


@dataclass
class Built:
    """A built pyomo model with the arrays needed to extract a plan quickly."""

    model: Any
    prep: Prepared
    pool_names: list[str]
    point_pool: np.ndarray
    """Pool position of each point."""
    route_keys: list[tuple[int, str]]
    n_max: np.ndarray
    """Upper bound (big-M) on instances of each pool."""
    build_s: float = 0.0


def _finite(v: float) -> bool:
    return v is not None and math.isfinite(v)


def build_model(prep: Prepared, *, redundancy: int = 0, budget_usd_per_month: float | None = None,
                max_device_types: int | None = None) -> Built:
    """Build the MIP from precomputed index sets (quicksum over flat arrays, no DataFrame lookups)."""
    import pyomo.environ as pe

    pts = prep.points
    pools = prep.pools
    costs = prep.tables.costs
    cfg = prep.tables.configs.drop_duplicates("config").set_index("config")
    H = costs.hours_per_month

    pool_names = pools["pool"].tolist()
    pool_pos = {p: j for j, p in enumerate(pool_names)}
    n_pool = len(pool_names)
    n_pts = len(pts)
    point_pool = np.array([pool_pos[p] for p in pts["pool"]], dtype=int) if n_pts else np.zeros(0, dtype=int)
    d_of = pts["d"].to_numpy(int)
    role_of = pts["role"].to_numpy(str)
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    rho = pts["rho"].to_numpy(float)
    tp_pt = pts["tp"].to_numpy(float)
    energy = pts["energy_j_per_request"].to_numpy(float)
    kvtx = pts["kv_transfer_bytes_per_request"].to_numpy(float)
    kv_pc = (pts["kv_bytes_per_request"] * pts["kv_hold_s"]).to_numpy(float)
    host_pt = pts["config"].map(cfg["host_power_w"]).to_numpy(float)
    idle_pt = pts["config"].map(cfg["idle_power_w"]).to_numpy(float)

    m = pe.ConcreteModel(name="planner")
    m.D = pe.RangeSet(0, len(prep.demand) - 1) if len(prep.demand) else pe.Set(initialize=[])
    m.I = pe.RangeSet(0, n_pts - 1) if n_pts else pe.Set(initialize=[])
    m.P = pe.RangeSet(0, n_pool - 1) if n_pool else pe.Set(initialize=[])
    m.T = pe.Set(initialize=prep.device_types, ordered=True)

    dem = prep.demand
    m.lam_peak = pe.Param(m.D, initialize=dict(enumerate(dem["rate_peak_per_s"].astype(float))), mutable=True)
    m.lam_mean = pe.Param(m.D, initialize=dict(enumerate(dem["rate_mean_per_s"].astype(float))), mutable=True)
    m.price = pe.Param(initialize=float(costs.electricity_usd_per_kwh), mutable=True)
    # Redundancy is a plain number: a mutable coefficient of 0 makes HiGHS warn on every update.
    m.k = pe.Param(initialize=int(redundancy), mutable=False)
    m.types_max = pe.Param(initialize=int(max_device_types if max_device_types else max(1, len(prep.device_types))), mutable=True)
    m.budget = pe.Param(initialize=float(budget_usd_per_month) if budget_usd_per_month else 0.0, mutable=True)

    n_max = pools["n_max"].to_numpy(int) + int(redundancy)  # big-M: all routable load here, plus k spares
    m.n = pe.Var(m.P, domain=pe.NonNegativeIntegers, bounds=lambda _m, p: (0, int(n_max[p])))
    m.x = pe.Var(m.I, bounds=(0.0, 1.0))
    m.z = pe.Var(m.P, domain=pe.Binary)
    m.u = pe.Var(m.T, domain=pe.Binary)

    # --- sparse index sets -----------------------------------------------------------------
    pts_of_pool: list[list[int]] = [[] for _ in range(n_pool)]
    for i, p in enumerate(point_pool):
        pts_of_pool[p].append(i)
    route: dict[tuple[int, str], list[int]] = {}
    for i in range(n_pts):
        for phase in PHASES:
            if role_of[i] in PHASE_ROLES[phase]:
                route.setdefault((int(d_of[i]), phase), []).append(i)
    route_keys = sorted(route)

    # --- constraints -----------------------------------------------------------------------
    m.route = pe.Constraint(route_keys, rule=lambda _m, d, ph: pe.quicksum(_m.x[i] for i in route[(d, ph)]) == 1)

    def load_rule(_m: Any, p: int) -> Any:
        return pe.quicksum(_m.lam_peak[d_of[i]] * float(tau[i] / rho[i]) * _m.x[i] for i in pts_of_pool[p]) <= _m.n[p] - _m.k * _m.z[p]

    m.load_c = pe.Constraint(m.P, rule=load_rule)

    kvcap = pools["kv_capacity_bytes"].to_numpy(float)
    kv_pools = [p for p in range(n_pool) if kvcap[p] > 0 and pools["role"].iat[p] != "prefill"]
    m.kv = pe.Constraint(kv_pools, rule=lambda _m, p: pe.quicksum(
        _m.lam_peak[d_of[i]] * float(kv_pc[i] / kvcap[p]) * _m.x[i] for i in pts_of_pool[p]) <= _m.n[p] - _m.k * _m.z[p])
    m.pool_on = pe.Constraint(m.P, rule=lambda _m, p: _m.n[p] <= int(n_max[p]) * _m.z[p])
    m.pool_min = pe.Constraint(m.P, rule=lambda _m, p: _m.n[p] >= (_m.k + 1) * _m.z[p])
    dev_of_pool = pools["device"].tolist()
    m.type_on = pe.Constraint(m.P, rule=lambda _m, p: _m.z[p] <= _m.u[dev_of_pool[p]])
    m.types_max_c = pe.Constraint(expr=pe.quicksum(m.u[t] for t in m.T) <= m.types_max)
    tp_pool = pools["tp"].to_numpy(int)
    limited = [t for t in prep.device_types if t in prep.procurement]
    m.procurement = pe.Constraint(limited, rule=lambda _m, t: pe.quicksum(
        int(tp_pool[p]) * _m.n[p] for p in range(n_pool) if dev_of_pool[p] == t) <= float(prep.procurement[t]))

    # --- cost terms (one Expression each; they sum to the objective) -----------------------
    def cfg_val(p: int, col: str) -> float:
        return float(cfg.at[str(pools["config"].iat[p]), col])  # type: ignore[arg-type]

    dev_hours = [float(tp_pool[p]) * H for p in range(n_pool)]
    kwh_factor = m.price * float(costs.pue)
    m.cost_equipment = pe.Expression(expr=pe.quicksum(dev_hours[p] * cfg_val(p, "equipment_usd_per_device_hour") * m.n[p] for p in range(n_pool)))
    busy_j = energy + tau * tp_pt * host_pt  # J per request: devices + host share while busy
    m.cost_power_busy = pe.Expression(expr=kwh_factor * pe.quicksum(
        m.lam_mean[d_of[i]] * float(busy_j[i] * SECONDS_PER_HOUR * H / J_PER_KWH) * m.x[i] for i in range(n_pts)))
    idle_w_pool = [cfg_val(p, "idle_power_w") + cfg_val(p, "host_power_w") for p in range(n_pool)]
    m.cost_power_idle = pe.Expression(expr=kwh_factor * (
        pe.quicksum(dev_hours[p] * idle_w_pool[p] / 1e3 * m.n[p] for p in range(n_pool))
        - pe.quicksum(m.lam_mean[d_of[i]] * float(tau[i] * tp_pt[i] * (idle_pt[i] + host_pt[i]) * H / 1e3) * m.x[i] for i in range(n_pts))))
    sends = pools["sends_kv"].to_numpy(bool)
    m.cost_network_nic = pe.Expression(expr=pe.quicksum(
        float(tp_pool[p]) * float(costs.nic_usd_per_device_month) * m.n[p] for p in range(n_pool) if sends[p]))
    m.cost_network_transfer = pe.Expression(expr=pe.quicksum(
        m.lam_mean[d_of[i]] * float(kvtx[i] / 1e9 * SECONDS_PER_HOUR * H * costs.transfer_usd_per_gb) * m.x[i]
        for i in range(n_pts) if role_of[i] == "prefill" and kvtx[i] > 0 and costs.transfer_usd_per_gb > 0))
    m.cost_ops_pools = pe.Expression(expr=float(costs.ops_usd_per_pool_month) * pe.quicksum(m.z[p] for p in range(n_pool)))
    m.cost_ops_device_types = pe.Expression(expr=float(costs.ops_usd_per_device_type_month) * pe.quicksum(m.u[t] for t in m.T))
    m.cost_ops_devices = pe.Expression(expr=pe.quicksum(float(tp_pool[p]) * cfg_val(p, "ops_usd_per_device_month") * m.n[p] for p in range(n_pool)))
    m.cost_licenses = pe.Expression(expr=pe.quicksum(float(tp_pool[p]) * cfg_val(p, "license_usd_per_device_month") * m.n[p] for p in range(n_pool)))
    m.cost_total = pe.Expression(expr=m.cost_equipment + m.cost_power_busy + m.cost_power_idle + m.cost_network_nic
                                 + m.cost_network_transfer + m.cost_ops_pools + m.cost_ops_device_types
                                 + m.cost_ops_devices + m.cost_licenses)
    m.budget_c = pe.Constraint(expr=m.cost_total <= m.budget)
    if not budget_usd_per_month:
        m.budget_c.deactivate()
    m.objective = pe.Objective(expr=m.cost_total, sense=pe.minimize)
    return Built(model=m, prep=prep, pool_names=pool_names, point_pool=point_pool, route_keys=route_keys, n_max=n_max)


COST_EXPRESSIONS: dict[str, str] = {
    "equipment_usd_per_month": "cost_equipment",
    "power_busy_usd_per_month": "cost_power_busy",
    "power_idle_usd_per_month": "cost_power_idle",
    "network_nic_usd_per_month": "cost_network_nic",
    "network_transfer_usd_per_month": "cost_network_transfer",
    "ops_pools_usd_per_month": "cost_ops_pools",
    "ops_device_types_usd_per_month": "cost_ops_device_types",
    "ops_devices_usd_per_month": "cost_ops_devices",
    "licenses_usd_per_month": "cost_licenses",
}
"""Cost term (plan schema) -> pyomo Expression name."""


def constraint_name(built: Built, kind: str, index: Any) -> str:
    """Readable constraint name by the grammar ``kind[key]``."""
    prep = built.prep
    if kind == "route":
        d, phase = index
        row = prep.demand.iloc[d]
        return f"route[{row['service']}|{row['bucket']}|{phase}]"
    if kind in ("load", "kv", "pool_on", "pool_min", "type_on"):
        return f"{kind}[{built.pool_names[index]}]"
    if kind == "procurement":
        return f"procurement[{index}]"
    return kind


def restrict(built: Built, architecture: str, *, shared_single_device_type: bool = True) -> int:
    """Restrict the model to an architecture: fix shares of roles it does not use to 0.

    Returns the number of routable points left. Re-solving after another ``restrict`` reuses
    the built model (the persistent solver sees only bound/fix changes).
    """
    from planner.optimize.prepare import ARCH_ROLES

    m = built.model
    allowed = ARCH_ROLES[architecture]
    roles = built.prep.points["role"].to_numpy(str)
    left = 0
    # Bounds, not fixes: the persistent HiGHS interface then only changes column bounds.
    for i in range(len(roles)):
        if roles[i] in allowed:
            m.x[i].setub(1.0)
            left += 1
        else:
            m.x[i].setub(0.0)
    pools_role = built.prep.pools["role"].to_numpy(str)
    n_max = built.n_max
    for p in range(len(pools_role)):
        if pools_role[p] in allowed:
            m.n[p].setub(int(n_max[p]))
            m.z[p].setub(1)
        else:
            m.n[p].setub(0)
            m.z[p].setub(0)
    single = architecture == "shared" and shared_single_device_type
    m.types_max.set_value(1 if single else max(1, len(built.prep.device_types)))
    return left
