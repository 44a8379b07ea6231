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
``types_max`` most device types; ``budget`` USD/month; with ``mutable_rates`` also ``load_coef[i]``
(:math:`\tau_i / \rho_i`) and ``big_m[p]`` (:math:`N_p`).

Constraints (name grammar ``kind[key]``; see :func:`constraint_names`)
---------------------------------------------------------------------
- ``route[s|b|phase]``  :math:`\sum_{i \in I_{d,phase}} x_i = 1` — every bucket fully routed in each phase
  (the ``encode`` phase only for rows with encoder work: roles ``encode`` — a separate encode pool — or
  ``encode_prefill`` / ``encode_unified`` — the same work riding in the prefill / unified pool);
- ``encode_host[s|b|pool]`` :math:`x_e \le \sum_{i \in I_{d(e),prefill} \cap I_{p(e)}} x_i` — an inline
  encode point ``e`` (whose load sits in the prefill / unified pool ``p(e)``) encodes only requests that pool
  prefills; its load, energy and idle-power terms enter through ``x_e`` like any point's. A separate encode
  pool's embeddings (β_e bytes per request) are priced in ``transfer`` and its instances carry NICs;
- ``group_route[s|b~b0|phase|pool]`` :math:`\sum_{i \in I_{d,phase} \cap I_p} x_i = \sum_{i \in I_{d_0,phase} \cap I_p} x_i`
  — the buckets of one latency group (demand column ``latency_group``,
  :func:`planner.workload.buckets.latency_groups`: above 4 buckets, the input-length quarter a bucket
  nests in) split alike over the pools, ``d_0`` the group's first bucket. Their caps are priced as the
  group's mixture sharing one pool (:func:`planner.optimize.prepare.group_busy`); a pool carrying only
  part of a group would queue another mixture than its cap assumes (issue 24 item 0: a spare instance
  taking 4.6 % of the top bucket of 16, then tightened ×4). Up to 4 buckets every bucket is its own
  group and nothing is tied;
- ``load[p]``           :math:`\sum_{i \in I_p} \lambda^{peak}_{d(i)} \tau_i / \rho_i \, x_i \le n_p - k z_p`
  — peak load within the utilisation cap with ``k`` instances lost (τ instance-seconds per
  request, ρ the queueing cap of :mod:`planner.optimize.prepare`);
- ``kv[p]``             :math:`\sum_{i \in I_p} \lambda^{peak}_{d(i)} \kappa_i h_i x_i \le K_p (n_p - k z_p)`
  — KV bytes resident at peak (κ KV bytes per request, h its decode residence
  ``out_mean · TPOT``, Little's law) fit the KV capacity ``K_p`` of the surviving instances;
- ``pool_on[p]``        :math:`n_p \le N_p z_p` and ``pool_min[p]`` :math:`n_p \ge (k+1) z_p`;
- ``route_on[p]``       :math:`\sum_{i \in I_p} x_i \le |I_p| z_p` — traffic goes only to a pool that exists (so
  has at least ``k+1`` instances), however small its load: without it a load below the solver's
  feasibility tolerance (a rate of 1e-9 req/s) would be routed to a pool of 0 instances. The
  per-point form :math:`x_i \le z_{p(i)}` has the same integer solutions and a tighter LP relaxation
  (HiGHS on the 97 k-variable fleet instance: disaggregated 12.4 -> 5.6 s CPU, shared 4.3 -> 6.5 s),
  but it moves which of several equal-cost plans HiGHS returns, and a sweep's re-solve (its model
  built once with the study's rate headroom) then tightened its way to another plan than ``solve``
  ($412,956 vs $417,702 on long-document-nvidia at a 3.5 s TTFT target,
  ``tests/test_studies.py``); kept aggregate (issue 24 item 1 before issue 27's solver time);
- ``type_on[p]``        :math:`z_p \le u_{t(p)}`;  ``types_max``: :math:`\sum_t u_t \le U`;
- ``procurement[t]``    :math:`\sum_{p: t(p)=t} tp_p n_p \le L_t`;
- ``budget``            total cost :math:`\le B` (only when a budget is given).

Tool execution phase (built only when the tables carry agents; :mod:`planner.agents.prep`)
------------------------------------------------------------------------------------------
Waits ``w = (d, t)``; hold entries ``(w, i)`` on decode-phase points, prefill-phase entries
``(w, j)``; CPU server types ``c``. Variables ``hold[w,i], off[w,j], rec[w,j] ∈ [0, 1]``,
``kv_tier_gb ≥ 0``, ``n_cpu[c]`` integer, ``z_cpu[c]`` binary.

- ``tool_balance[w]``  :math:`\sum_i hold_{w,i} + \sum_j (off_{w,j} + rec_{w,j}) = 1` — every wait gets a policy;
- ``tool_hold_route[w|i]`` :math:`hold_{w,i} \le x_i`; ``tool_next_route[w|j]`` :math:`off_{w,j} + rec_{w,j} \le x_j`
  — KV is held where the request decodes, reloaded / recomputed where the next turn prefills;
- ``kv[p]`` gains :math:`\sum \lambda^{peak}_d κ^{hold}_w hold_{w,i}` (sessions in wait × KV per session × tail);
- ``load[p]`` gains :math:`\sum \lambda^{peak}_d (ℓ^{rl}_{w,j} off_{w,j} + ℓ^{rc}_{w,j} rec_{w,j})`;
- ``kv_tier_need``  :math:`kv\_tier\_gb \ge \sum \lambda^{peak}_d γ_w off_{w,j}` (≤ ``max_gb``);
- ``cpu_cores``     :math:`\sum_c C_c u^{cpu} (n^{cpu}_c - k z^{cpu}_c) \ge \sum_d \lambda^{peak}_d σ_d`
  (σ CPU core-seconds per LLM call: tokenisation + tool calls with retries);
- ``cpu_tier_memory`` (tier in CPU memory) :math:`\sum_c M_c u^{mem} (n^{cpu}_c - k z^{cpu}_c) \ge kv\_tier\_gb`;
- ``cpu_on[c]``, ``cpu_min[c]``, ``cpu_procurement[c]`` as for GPU pools.

Cost terms: ``cpu_pool`` :math:`\sum_c n^{cpu}_c (c^{eq}_c H + c^{ops}_c + c^{lic}_c + e η (P^{idle}_c + P^{host}_c) H/1000) + c^{pool} \sum_c z^{cpu}_c + e η H/1000 \, π \sum_d \lambda^{mean}_d σ_d`
(π the largest busy-minus-idle power per core over the candidates: conservative);
``kv_tier`` :math:`p^{GB} kv\_tier\_gb` (priced tier only); ``tool_state_energy``
:math:`e η \, 3600 H / 3.6e6 \sum \lambda^{mean}_d (e^{rl}_{w,j} off_{w,j} + e^{rc}_{w,j} rec_{w,j})`.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.optimize.prepare import Prepared
from planner.units import J_PER_KWH, SECONDS_PER_HOUR

PHASES: tuple[str, ...] = ("prefill", "decode", "encode")
PHASE_ROLES: dict[str, tuple[str, ...]] = {"prefill": ("prefill", "unified"), "decode": ("decode", "unified"),
                                           "encode": ("encode", "encode_prefill", "encode_unified")}
"""Roles that serve each phase. The encode phase exists only for demand rows with encoder work (points of
the encode roles, :mod:`planner.capacity_encode`): a text-only table builds exactly the two-phase model."""


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
    group_ties: list[tuple[list[int], list[int], tuple[int, int, str, int]]] = field(default_factory=list)
    """``group_route`` pairs (:func:`_group_ties`): points of a bucket, of its group's first bucket, and ``(d, d0, phase, pool)``."""


def _finite(v: float) -> bool:
    return v is not None and math.isfinite(v)


def build_model(prep: Prepared, *, redundancy: int = 0, budget_usd_per_month: float | None = None,
                max_device_types: int | None = None, mutable_rates: bool = False) -> Built:
    """Build the MIP from precomputed index sets (quicksum over flat arrays, no DataFrame lookups).

    ``mutable_rates``: make ``lam_peak``, ``lam_mean``, ``price``, ``load_coef`` (``tau/rho``) and
    ``big_m`` mutable parameters, so a :class:`planner.optimize.resolve.Resolver` can change them and
    re-solve (the same rows and columns in the same order as the constant model). Otherwise they are
    plain numbers and every coefficient is a constant: pyomo's persistent HiGHS interface then
    loads the model without evaluating an expression per coefficient (issue 27: on the 97 k-variable
    fleet instance that evaluation was 15 of the 24 s spent handing the model to HiGHS)."""
    import pyomo.core as pe  # pyomo.environ less its plug-ins (planner.optimize.highs.import_pyomo)

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
    m.lam_peak = pe.Param(m.D, initialize=dict(enumerate(dem["rate_peak_per_s"].astype(float))), mutable=mutable_rates)
    m.lam_mean = pe.Param(m.D, initialize=dict(enumerate(dem["rate_mean_per_s"].astype(float))), mutable=mutable_rates)
    m.price = pe.Param(initialize=float(costs.electricity_usd_per_kwh), mutable=mutable_rates)
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
    for i, p in enumerate(point_pool.tolist()):
        pts_of_pool[p].append(i)
    route: dict[tuple[int, str], list[int]] = {}
    phases_of_role = {r: [ph for ph in PHASES if r in PHASE_ROLES[ph]] for r in set(role_of.tolist())}
    for i, (d, r) in enumerate(zip(d_of.tolist(), role_of.tolist(), strict=True)):
        for phase in phases_of_role[r]:
            route.setdefault((d, phase), []).append(i)
    route_keys = sorted(route)

    # --- constraints -----------------------------------------------------------------------
    x = [m.x[i] for i in range(n_pts)]
    m.route = pe.Constraint(route_keys, rule=lambda _m, d, ph: pe.quicksum(x[i] for i in route[(d, ph)]) == 1)
    # Inline encode (module docstring, encode_host): only for requests the host pool prefills.
    hosted = _encode_hosts(d_of, role_of, point_pool)
    m.encode_host = pe.Constraint(sorted(hosted), rule=lambda _m, e: x[e] <= pe.quicksum(x[i] for i in hosted[e]))
    # Latency groups (module docstring, group_route): a group's buckets split alike over the pools.
    tied = _group_ties(pts, d_of, role_of, point_pool, phases_of_role)
    m.group_route = pe.Constraint(range(len(tied)), rule=lambda _m, t: pe.quicksum(x[i] for i in tied[t][0])
                                  == pe.quicksum(x[i] for i in tied[t][1]))

    # --- tool execution phase (planner.agents): variables, and their terms in load / kv ---
    tool_load, tool_kv = build_tool_phase(m, prep, redundancy)

    # Python floats/ints for the rules below: indexing numpy arrays element by element in a
    # Python loop costs a numpy scalar per access (the build walks every point several times).
    d_l = d_of.tolist()
    load_coef = (tau / rho).tolist()
    lam_peak = [m.lam_peak[d] for d in range(len(prep.demand))]
    lam_mean = [m.lam_mean[d] for d in range(len(prep.demand))]

    if mutable_rates:
        # a re-solved model (planner.optimize.resolve.Resolver) sets tau/rho and the big-M per scenario; the
        # constraints keep their place and each coefficient evaluates to the same float as a fresh build
        # (lam * (tau/rho), -N_p), so HiGHS gets the very matrix of a fresh build (issue 24 item 1)
        m.load_coef = pe.Param(m.I, initialize=dict(enumerate(load_coef)), mutable=True)
        m.big_m = pe.Param(m.P, initialize=dict(enumerate(float(v) for v in n_max)), mutable=True)
        load_c: list[Any] = [m.load_coef[i] for i in range(n_pts)]
        big_m: list[Any] = [m.big_m[p] for p in range(n_pool)]
    else:
        load_c, big_m = load_coef, [int(v) for v in n_max]

    def load_rule(_m: Any, p: int) -> Any:
        return (pe.quicksum(lam_peak[d_l[i]] * load_c[i] * x[i] for i in pts_of_pool[p])
                + pe.quicksum(tool_load.get(p, [])) <= _m.n[p] - _m.k * _m.z[p])

    m.load_c = pe.Constraint(m.P, rule=load_rule)

    kvcap = pools["kv_capacity_bytes"].to_numpy(float)
    kv_pools = [p for p in range(n_pool) if kvcap[p] > 0 and pools["role"].iat[p] != "prefill"]
    kv_pc_l = kv_pc.tolist()
    m.kv = pe.Constraint(kv_pools, rule=lambda _m, p: pe.quicksum(
        lam_peak[d_l[i]] * (kv_pc_l[i] / float(kvcap[p])) * x[i] for i in pts_of_pool[p] if kv_pc_l[i] != 0.0)  # no 0 terms (inline encode)
        + pe.quicksum(t / float(kvcap[p]) for t in tool_kv.get(p, [])) <= _m.n[p] - _m.k * _m.z[p])
    m.pool_on = pe.Constraint(m.P, rule=lambda _m, p: _m.n[p] <= big_m[p] * _m.z[p])
    m.pool_min = pe.Constraint(m.P, rule=lambda _m, p: _m.n[p] >= (_m.k + 1) * _m.z[p])
    m.route_on = pe.Constraint([p for p in range(n_pool) if pts_of_pool[p]], rule=lambda _m, p: pe.quicksum(
        _m.x[i] for i in pts_of_pool[p]) <= len(pts_of_pool[p]) * _m.z[p])
    dev_of_pool = pools["device"].tolist()
    m.type_on = pe.Constraint(m.P, rule=lambda _m, p: _m.z[p] <= _m.u[dev_of_pool[p]])
    m.types_max_c = pe.Constraint(expr=pe.quicksum(m.u[t] for t in m.T) <= m.types_max)
    tp_pool = pools["tp"].to_numpy(int)
    limited = [t for t in prep.device_types if t in prep.procurement]
    m.procurement = pe.Constraint(limited, rule=lambda _m, t: pe.quicksum(
        int(tp_pool[p]) * _m.n[p] for p in range(n_pool) if dev_of_pool[p] == t) <= float(prep.procurement[t]))

    # --- cost terms (one Expression each; they sum to the objective) -----------------------
    pool_cfg = pools["config"].astype(str)

    def cfg_col(col: str) -> list[float]:
        return pool_cfg.map(cfg[col]).astype(float).tolist()

    cfg_cache: dict[str, list[float]] = {}

    def cfg_val(p: int, col: str) -> float:
        if col not in cfg_cache:
            cfg_cache[col] = cfg_col(col)
        return cfg_cache[col][p]

    dev_hours = [float(tp_pool[p]) * H for p in range(n_pool)]
    kwh_factor = m.price * float(costs.pue)
    m.cost_equipment = pe.Expression(expr=pe.quicksum(dev_hours[p] * cfg_val(p, "equipment_usd_per_device_hour") * m.n[p] for p in range(n_pool)))
    busy_j = energy + tau * tp_pt * host_pt  # J per request: devices + host share while busy
    busy_coef = (busy_j * SECONDS_PER_HOUR * H / J_PER_KWH).tolist()
    m.cost_power_busy = pe.Expression(expr=kwh_factor * pe.quicksum(
        lam_mean[d_l[i]] * busy_coef[i] * x[i] for i in range(n_pts)))
    idle_w_pool = [cfg_val(p, "idle_power_w") + cfg_val(p, "host_power_w") for p in range(n_pool)]
    idle_coef = (tau * tp_pt * (idle_pt + host_pt) * H / 1e3).tolist()
    m.cost_power_idle = pe.Expression(expr=kwh_factor * (
        pe.quicksum(dev_hours[p] * idle_w_pool[p] / 1e3 * m.n[p] for p in range(n_pool))
        - pe.quicksum(lam_mean[d_l[i]] * idle_coef[i] * x[i] for i in range(n_pts))))
    sends = pools["sends_kv"].to_numpy(bool)
    m.cost_network_nic = pe.Expression(expr=pe.quicksum(
        float(tp_pool[p]) * float(costs.nic_usd_per_device_month) * m.n[p] for p in range(n_pool) if sends[p]))
    m.cost_network_transfer = pe.Expression(expr=pe.quicksum(
        m.lam_mean[d_of[i]] * float(kvtx[i] / 1e9 * SECONDS_PER_HOUR * H * costs.transfer_usd_per_gb) * m.x[i]
        for i in range(n_pts) if role_of[i] in ("prefill", "encode") and kvtx[i] > 0 and costs.transfer_usd_per_gb > 0))
    m.cost_ops_pools = pe.Expression(expr=float(costs.ops_usd_per_pool_month) * pe.quicksum(m.z[p] for p in range(n_pool)))
    m.cost_ops_device_types = pe.Expression(expr=float(costs.ops_usd_per_device_type_month) * pe.quicksum(m.u[t] for t in m.T))
    m.cost_ops_devices = pe.Expression(expr=pe.quicksum(float(tp_pool[p]) * cfg_val(p, "ops_usd_per_device_month") * m.n[p] for p in range(n_pool)))
    m.cost_licenses = pe.Expression(expr=pe.quicksum(float(tp_pool[p]) * cfg_val(p, "license_usd_per_device_month") * m.n[p] for p in range(n_pool)))
    m.cost_total = pe.Expression(expr=m.cost_equipment + m.cost_power_busy + m.cost_power_idle + m.cost_network_nic
                                 + m.cost_network_transfer + m.cost_ops_pools + m.cost_ops_device_types
                                 + m.cost_ops_devices + m.cost_licenses
                                 + m.cost_cpu_pool + m.cost_kv_tier + m.cost_tool_energy)
    m.budget_c = pe.Constraint(expr=m.cost_total <= m.budget)
    if not budget_usd_per_month:
        m.budget_c.deactivate()
    m.objective = pe.Objective(expr=m.cost_total, sense=pe.minimize)
    return Built(model=m, prep=prep, pool_names=pool_names, point_pool=point_pool, route_keys=route_keys, n_max=n_max,
                 group_ties=tied)


def _group_ties(pts: Any, d_of: np.ndarray, role_of: np.ndarray, point_pool: np.ndarray,
                phases_of_role: dict[str, list[str]]) -> list[tuple[list[int], list[int], tuple[int, int, str, int]]]:
    """``group_route`` pairs: for every bucket ``d`` of a latency group with more than one bucket, its
    points on pool ``p`` in phase ``ph`` against the group's first bucket's (``(points of d, points of the
    first, (d, first, ph, p))``). Buckets without a ``latency_group`` column, or alone in their group, are
    free (no pair)."""
    from planner.schema.capacity import LATENCY_GROUP_COLUMN

    if LATENCY_GROUP_COLUMN not in pts.columns or "service" not in pts.columns or not len(pts):
        return []
    group_of_d: dict[int, tuple[str, str]] = {}
    for d, svc, g in zip(d_of.tolist(), pts["service"].astype(str).tolist(), pts[LATENCY_GROUP_COLUMN].tolist(), strict=True):
        group_of_d.setdefault(d, (svc, str(g)))
    members: dict[tuple[str, str], list[int]] = {}
    for d in sorted(group_of_d):
        members.setdefault(group_of_d[d], []).append(d)
    first = {d: ds[0] for ds in members.values() if len(ds) > 1 for d in ds}
    if not first:
        return []
    share: dict[tuple[int, str, int], list[int]] = {}
    for i, (d, r, p) in enumerate(zip(d_of.tolist(), role_of.tolist(), point_pool.tolist(), strict=True)):
        if d in first:
            for ph in phases_of_role[r]:
                share.setdefault((d, ph, p), []).append(i)
    slots: dict[int, set[tuple[str, int]]] = {}
    for d, ph, p in share:
        slots.setdefault(d, set()).add((ph, p))
    # every (phase, pool) either bucket uses: a side without points there is an empty sum (share 0)
    return [(share.get((d, ph, p), []), share.get((f, ph, p), []), (d, f, ph, p))
            for d, f in sorted(first.items()) if d != f
            for ph, p in sorted(slots.get(d, set()) | slots.get(f, set()))]


def _encode_hosts(d_of: np.ndarray, role_of: np.ndarray, point_pool: np.ndarray) -> dict[int, list[int]]:
    """Per inline encode point ``e`` (roles ``encode_prefill`` / ``encode_unified``): the prefill-phase
    points of the same demand row in the same pool (possibly none: then ``x_e = 0``)."""
    inline = [e for e, r in enumerate(role_of.tolist()) if r in ("encode_prefill", "encode_unified")]
    if not inline:
        return {}
    by_key: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(role_of.tolist()):
        if r in PHASE_ROLES["prefill"]:
            by_key.setdefault((int(d_of[i]), int(point_pool[i])), []).append(i)
    return {e: by_key.get((int(d_of[e]), int(point_pool[e])), []) for e in inline}


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
    "cpu_pool_usd_per_month": "cost_cpu_pool",
    "kv_tier_usd_per_month": "cost_kv_tier",
    "tool_state_energy_usd_per_month": "cost_tool_energy",
}
"""Cost term (plan schema) -> pyomo Expression name."""


def constraint_name(built: Built, kind: str, index: Any) -> str:
    """Readable constraint name by the grammar ``kind[key]``."""
    prep = built.prep
    if kind == "route":
        d, phase = index
        row = prep.demand.iloc[d]
        return f"route[{row['service']}|{row['bucket']}|{phase}]"
    if kind == "encode_host":
        r = prep.points.iloc[int(index)]
        return f"encode_host[{r['service']}|{r['bucket']}|{r['pool']}]"
    if kind == "group_route":
        d, f, phase, pool = built.group_ties[int(index)][2]
        row, first = prep.demand.iloc[d], prep.demand.iloc[f]
        return f"group_route[{row['service']}|{row['bucket']}~{first['bucket']}|{phase}|{built.pool_names[pool]}]"
    if kind in ("load", "kv", "pool_on", "pool_min", "type_on"):
        return f"{kind}[{built.pool_names[index]}]"
    if kind.startswith("tool_") or kind.startswith("cpu_") or kind.startswith("kv_tier"):
        return tool_constraint_name(built, kind, index)
    if kind == "procurement":
        return f"procurement[{index}]"
    return kind


def restrict(built: Built, architecture: str, *, shared_single_device_type: bool = True) -> int:
    """Restrict the model to an architecture: fix shares of roles it does not use to 0.

    Returns the number of routable points left. Re-solving after another ``restrict`` reuses
    the built model (the persistent solver sees only bound/fix changes).
    """
    from planner.optimize.prepare import ARCH_ROLES, ENCODE_HOST

    m = built.model
    allowed = ARCH_ROLES[architecture] | {"encode"}  # a separate encode pool is an option of every architecture
    roles = built.prep.points["role"].to_numpy(str)
    left = 0
    # Bounds, not fixes: the persistent HiGHS interface then only changes column bounds.
    for i in range(len(roles)):
        if ENCODE_HOST.get(roles[i], roles[i]) in allowed:  # inline encode: allowed where its host pool is
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


# --- tool execution phase (planner.agents) ------------------------------------------------
def build_tool_phase(m: Any, prep: Prepared, redundancy: int) -> tuple[dict[int, list[Any]], dict[int, list[Any]]]:
    """Add the tool-phase variables, constraints and cost expressions (module docstring).

    Returns, per pool position, the extra terms of its ``load`` constraint (instances) and of
    its ``kv`` constraint (bytes). Without agents only the three cost expressions (0) are added.
    """
    import pyomo.core as pe  # pyomo.environ less its plug-ins (planner.optimize.highs.import_pyomo)

    tool = prep.tool
    if tool is None or (len(tool.waits) == 0 and len(tool.cpu_servers) == 0):
        m.cost_cpu_pool = pe.Expression(expr=0.0)
        m.cost_kv_tier = pe.Expression(expr=0.0)
        m.cost_tool_energy = pe.Expression(expr=0.0)
        return {}, {}
    pts = prep.points
    costs = prep.tables.costs
    H = float(costs.hours_per_month)
    pool_pos = {p: j for j, p in enumerate(prep.pools["pool"])}
    pool_of_pt = [pool_pos[p] for p in pts["pool"]]
    d_of_pt = pts["d"].to_numpy(int)
    waits = tool.waits
    d_of_w = waits["d"].to_numpy(int) if len(waits) else np.zeros(0, dtype=int)
    pf = tool.pf
    params = tool.params

    m.TW = pe.RangeSet(0, len(waits) - 1) if len(waits) else pe.Set(initialize=[])
    m.THOLD = pe.RangeSet(0, len(tool.hold) - 1) if tool.hold else pe.Set(initialize=[])
    m.TPF = pe.RangeSet(0, len(pf) - 1) if len(pf) else pe.Set(initialize=[])
    m.hold = pe.Var(m.THOLD, bounds=(0.0, 1.0))
    off_ok = pf["off_ok"].to_numpy(bool)
    rec_ok = pf["rec_ok"].to_numpy(bool)
    m.toff = pe.Var(m.TPF, bounds=lambda _m, r: (0.0, 1.0 if off_ok[r] else 0.0))
    m.trec = pe.Var(m.TPF, bounds=lambda _m, r: (0.0, 1.0 if rec_ok[r] else 0.0))
    holds_of_w: list[list[int]] = [[] for _ in range(len(waits))]
    for h, (w, _i, _k) in enumerate(tool.hold):
        holds_of_w[w].append(h)
    pf_w = pf["w"].to_numpy(int)
    pf_j = pf["j"].to_numpy(int)
    pfs_of_w: list[list[int]] = [[] for _ in range(len(waits))]
    for r in range(len(pf)):
        pfs_of_w[pf_w[r]].append(r)
    m.tool_balance = pe.Constraint(m.TW, rule=lambda _m, w: pe.quicksum(_m.hold[h] for h in holds_of_w[w])
                                   + pe.quicksum(_m.toff[r] + _m.trec[r] for r in pfs_of_w[w]) == 1)
    m.tool_hold_route = pe.Constraint(m.THOLD, rule=lambda _m, h: _m.hold[h] <= _m.x[tool.hold[h][1]])
    m.tool_next_route = pe.Constraint(m.TPF, rule=lambda _m, r: _m.toff[r] + _m.trec[r] <= _m.x[int(pf_j[r])])

    tool_kv: dict[int, list[Any]] = {}
    for h, (w, i, k) in enumerate(tool.hold):
        tool_kv.setdefault(pool_of_pt[i], []).append(m.lam_peak[int(d_of_w[w])] * float(k) * m.hold[h])
    tool_load: dict[int, list[Any]] = {}
    rl = pf["rl_load"].to_numpy(float)
    rc = pf["rc_load"].to_numpy(float)
    for r in range(len(pf)):
        j = int(pf_j[r])
        lam = m.lam_peak[int(d_of_pt[j])]
        if off_ok[r] and rl[r] > 0:
            tool_load.setdefault(pool_of_pt[j], []).append(lam * float(rl[r]) * m.toff[r])
        if rec_ok[r] and rc[r] > 0:
            tool_load.setdefault(pool_of_pt[j], []).append(lam * float(rc[r]) * m.trec[r])

    # KV tier: capacity for the offloaded sessions in wait at peak.
    gb_coef = waits["tier_gb_coef"].to_numpy(float) if len(waits) else np.zeros(0)
    m.kv_tier_gb = pe.Var(domain=pe.NonNegativeReals, bounds=(0.0, params.tier_max_gb))
    m.kv_tier_need = pe.Constraint(expr=m.kv_tier_gb >= pe.quicksum(
        m.lam_peak[int(d_of_w[pf_w[r]])] * float(gb_coef[pf_w[r]]) * m.toff[r] for r in range(len(pf)) if off_ok[r]))

    # CPU pool: cores for tool calls and tokenisation; memory for the tier when it lives there.
    srv = tool.cpu_servers
    m.C = pe.RangeSet(0, len(srv) - 1) if len(srv) else pe.Set(initialize=[])
    nmax_cpu = [int(v) + int(redundancy) for v in tool.cpu_n_max]
    m.n_cpu = pe.Var(m.C, domain=pe.NonNegativeIntegers, bounds=lambda _m, c: (0, nmax_cpu[c]))
    m.z_cpu = pe.Var(m.C, domain=pe.Binary)
    cores = srv["cores"].to_numpy(float) if len(srv) else np.zeros(0)
    mem = srv["memory_gb"].to_numpy(float) if len(srv) else np.zeros(0)
    sigma = tool.cpu_s_per_request
    ucap = float(params.cpu_utilization_cap)
    if len(srv):
        m.cpu_cores = pe.Constraint(expr=pe.quicksum(float(cores[c] * ucap) * (m.n_cpu[c] - m.k * m.z_cpu[c]) for c in m.C)
                                    >= pe.quicksum(m.lam_peak[d] * float(sigma[d]) for d in range(len(sigma)) if sigma[d] > 0))
        if params.tier_usd_per_gb_month is None:
            m.cpu_tier_memory = pe.Constraint(expr=pe.quicksum(float(mem[c] * params.tier_memory_utilization) * (m.n_cpu[c] - m.k * m.z_cpu[c]) for c in m.C)
                                              >= m.kv_tier_gb)
        m.cpu_on = pe.Constraint(m.C, rule=lambda _m, c: _m.n_cpu[c] <= nmax_cpu[c] * _m.z_cpu[c])
        m.cpu_min = pe.Constraint(m.C, rule=lambda _m, c: _m.n_cpu[c] >= (_m.k + 1) * _m.z_cpu[c])
        lim = srv["procurement_limit"].to_numpy(float)
        m.cpu_procurement = pe.Constraint([c for c in range(len(srv)) if math.isfinite(lim[c])],
                                          rule=lambda _m, c: _m.n_cpu[c] <= float(lim[c]))
    elif params.tier_usd_per_gb_month is None:
        m.kv_tier_gb.setub(0.0)
    kwh = m.price * float(costs.pue)
    if len(srv):
        fixed = [float(r.equipment_usd_per_server_hour) * H + float(r.ops_usd_per_server_month) + float(r.license_usd_per_server_month)
                 for r in srv.itertuples(index=False)]
        idle_kw = [(float(r.idle_power_w) + float(r.host_power_w)) / 1e3 * H for r in srv.itertuples(index=False)]
        per_core_w = max(max(float(r.busy_power_w) - float(r.idle_power_w), 0.0) / float(r.cores) if float(r.cores) > 0 else 0.0
                         for r in srv.itertuples(index=False))
        m.cost_cpu_pool = pe.Expression(expr=pe.quicksum((fixed[c] + kwh * idle_kw[c]) * m.n_cpu[c] for c in m.C)
                                        + float(costs.ops_usd_per_pool_month) * pe.quicksum(m.z_cpu[c] for c in m.C)
                                        + kwh * (per_core_w * H / 1e3) * pe.quicksum(m.lam_mean[d] * float(sigma[d]) for d in range(len(sigma)) if sigma[d] > 0))
    else:
        m.cost_cpu_pool = pe.Expression(expr=0.0)
    price_gb = params.tier_usd_per_gb_month
    m.cost_kv_tier = pe.Expression(expr=float(price_gb) * m.kv_tier_gb if price_gb is not None else 0.0)
    e_rl = pf["rl_energy_j"].to_numpy(float)
    e_rc = pf["rc_energy_j"].to_numpy(float)
    f = SECONDS_PER_HOUR * H / J_PER_KWH
    m.cost_tool_energy = pe.Expression(expr=kwh * pe.quicksum(
        m.lam_mean[int(d_of_pt[int(pf_j[r])])] * f * (float(e_rl[r]) * m.toff[r] + float(e_rc[r]) * m.trec[r])
        for r in range(len(pf)) if (off_ok[r] and e_rl[r] > 0) or (rec_ok[r] and e_rc[r] > 0)))
    return tool_load, tool_kv


def tool_constraint_name(built: Built, kind: str, index: Any) -> str:
    """Names of tool-phase constraints: ``tool_balance[service|bucket|tool]``, ``cpu_on[server]`` ..."""
    tool = built.prep.tool
    if tool is None:
        return kind
    if kind == "tool_balance":
        r = tool.waits.iloc[int(index)]
        return f"tool_balance[{r['service']}|{r['bucket']}|{r['tool']}]"
    if kind in ("cpu_on", "cpu_min", "cpu_procurement"):
        return f"{kind}[{tool.cpu_servers['server'].iat[int(index)]}]"
    return kind
