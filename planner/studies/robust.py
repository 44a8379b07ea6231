r"""Robust planning: one set of devices for several traffic scenarios, routing per scenario.

Two-stage formulation (devices are bought before the traffic is known; routing adapts).
For scenarios :math:`k = 1..K` with capacity tables :math:`T_k` and weights :math:`w_k`
(:math:`\sum_k w_k = 1`), the model of :func:`planner.optimize.model.build_model` is built
once per scenario (block ``scenario[k]``, every constraint of a normal solve: routing,
load within the caps of that scenario, KV memory, redundancy, procurement, budget) and the
blocks are tied by first-stage variables over the pools :math:`p`:

.. math::

    n^{(k)}_p = N_p,\qquad z^{(k)}_p = Z_p \qquad \forall k, p

(``N`` integer instances, ``Z`` binary "pool exists"; the device-type binaries follow
from ``z ≤ u``). Each block's ``cost_total`` splits into first-stage terms that depend on
``N, Z`` only — equipment, NICs, per-device operations and licences, pool and device-type
operations, and the provisioned part of idle power — and second-stage terms that depend on
the scenario's routing ``x^{(k)}`` — busy power, KV transfer and the busy-time credit of
idle power. Objectives:

- ``expected`` (default): :math:`\min \sum_k w_k\, C_k(N, x^{(k)})` — first-stage cost once
  (it is the same in every block when prices agree; with different electricity prices the
  idle power is itself an expectation) plus the expected second-stage cost;
- ``worst``: :math:`\min t` subject to :math:`t \ge C_k(N, x^{(k)})\ \forall k` — the
  worst-case monthly total.

The big-M of each pool (``pool_on``) is the largest over the scenarios, so the shared
``N`` may reach what the busiest scenario needs. After the joint solve the pools are held
at ``N`` (:mod:`planner.studies.fixed`) and each scenario is re-solved for its best routing:
given ``N`` the problem separates by scenario, so this returns the joint optimum's routing
cost per scenario and a full :class:`~planner.schema.plan.ArchitecturePlan` (pools,
costs, latency at that scenario's peak) for each.

Tool-phase CPU servers (``n_cpu``, when the instance has agents) are linked the same way in
the joint solve; the per-scenario re-solve holds the accelerator pools only (CPU servers
are then re-sized per scenario, which can only lower each scenario's cost).

Invariants (tested): with one scenario the robust plan costs what ``solve`` gives; with
several, in every scenario it costs at least that scenario's own optimum.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from planner.optimize.model import Built, build_model, restrict
from planner.optimize.prepare import ARCH_ROLES, prepare
from planner.optimize.solve import SolveSettings, make_solver
from planner.schema.capacity import CapacityTables
from planner.schema.plan import ArchitecturePlan
from planner.studies.fixed import FixedPlan, solve_fixed

Objective = Literal["expected", "worst"]


@dataclass
class RobustArchitecture:
    """One architecture's robust plan: shared pool sizes and, per scenario, the held plan."""

    architecture: str
    feasible: bool
    status: str
    objective_usd_per_month: float | None
    """Expected (or worst-case) monthly total of the joint solve."""
    instances: dict[str, int] = field(default_factory=dict)
    """Pool name -> instances, bought once for every scenario."""
    plans: dict[str, ArchitecturePlan] = field(default_factory=dict)
    """Scenario name -> the plan with the pools held (routing, costs, latency of that scenario)."""
    gap: float | None = None
    time_s: float = 0.0

    @property
    def devices(self) -> dict[str, int]:
        return FixedPlan(self.architecture, self.instances).devices


@dataclass
class RobustResult:
    objective: Objective
    scenarios: list[str]
    weights: list[float]
    architectures: dict[str, RobustArchitecture]
    build_s: float = 0.0

    @property
    def winner(self) -> str | None:
        from planner.optimize.resolve import SIMPLICITY

        ok = [a for a in self.architectures.values() if a.feasible and a.objective_usd_per_month is not None]
        if not ok:
            return None
        return min(ok, key=lambda a: (round(float(a.objective_usd_per_month or 0.0), 2), SIMPLICITY[a.architecture])).architecture


def _status(res: Any) -> tuple[bool, str]:
    from planner.optimize.solve import _status as status_of

    has = getattr(res.solution_status, "name", "") in ("optimal", "feasible")
    return has, status_of(res.termination_condition, has)


def solve_robust(scenarios: list[tuple[str, CapacityTables]], settings: SolveSettings, *, objective: Objective = "expected",
                 weights: list[float] | None = None) -> RobustResult:
    """Plan every architecture of ``settings`` for all ``scenarios`` at once (module docstring).

    ``scenarios``: (name, capacity table) pairs with the same candidate pools; ``weights``
    (default equal) are normalised to sum to 1 and used by the ``expected`` objective.
    """
    import pyomo.core as pe  # pyomo.environ less its plug-ins (planner.optimize.highs.import_pyomo)

    if not scenarios:
        raise ValueError("robust planning needs at least one scenario")
    if objective not in ("expected", "worst"):
        raise ValueError(f"objective must be 'expected' or 'worst', got {objective!r}")
    names = [n for n, _ in scenarios]
    if len(set(names)) != len(names):
        raise ValueError(f"scenario names must be distinct: {names}")
    w = [1.0] * len(scenarios) if weights is None else [float(v) for v in weights]
    if len(w) != len(scenarios) or not all(math.isfinite(v) and v >= 0 for v in w) or sum(w) <= 0:
        raise ValueError("weights: one finite, non-negative number per scenario, with a positive sum")
    w = [v / sum(w) for v in w]
    for arch in settings.architectures:
        if arch not in ARCH_ROLES:
            raise ValueError(f"unknown architecture {arch!r}")

    t0 = time.perf_counter()
    preps = [prepare(t, max_utilization=settings.max_utilization) for _, t in scenarios]
    pool_names = preps[0].pools["pool"].tolist()
    for (name, _), prep in zip(scenarios[1:], preps[1:], strict=True):
        if prep.pools["pool"].tolist() != pool_names:
            diff = sorted(set(pool_names) ^ set(prep.pools["pool"]))
            raise ValueError(f"scenario {name!r} has different candidate pools from {names[0]!r} ({', '.join(diff)}): "
                             "robust planning needs every pool usable in every scenario")
    n_max = [int(v) for v in np.max(np.vstack([p.pools["n_max"].to_numpy(int) for p in preps]), axis=0)] if pool_names else []
    blocks: list[Built] = []
    for prep in preps:
        prep.pools = prep.pools.assign(n_max=n_max)
        blocks.append(build_model(prep, redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month))

    m = pe.ConcreteModel(name="robust")
    m.K = pe.RangeSet(0, len(blocks) - 1)
    m.P = pe.RangeSet(0, len(pool_names) - 1) if pool_names else pe.Set(initialize=[])
    for k, b in enumerate(blocks):
        b.model.objective.deactivate()
        m.add_component(f"scenario_{k}", b.model)
    big = [n + settings.redundancy for n in n_max]
    m.N = pe.Var(m.P, domain=pe.NonNegativeIntegers, bounds=lambda _m, p: (0, big[p]))
    m.Z = pe.Var(m.P, domain=pe.Binary)
    m.link_n = pe.Constraint(m.K, m.P, rule=lambda _m, k, p: blocks[k].model.n[p] == _m.N[p])
    m.link_z = pe.Constraint(m.K, m.P, rule=lambda _m, k, p: blocks[k].model.z[p] == _m.Z[p])
    # Tool-phase CPU servers (planner.agents) are bought once too, when the model has them.
    n_cpu = len(blocks[0].model.C) if hasattr(blocks[0].model, "n_cpu") else 0
    if n_cpu:
        m.Cs = pe.RangeSet(0, n_cpu - 1)
        m.N_cpu = pe.Var(m.Cs, domain=pe.NonNegativeIntegers)
        m.link_n_cpu = pe.Constraint(m.K, m.Cs, rule=lambda _m, k, c: blocks[k].model.n_cpu[c] == _m.N_cpu[c])
    if objective == "expected":
        m.objective = pe.Objective(expr=pe.quicksum(w[k] * blocks[k].model.cost_total for k in range(len(blocks))))
    else:
        m.t = pe.Var()
        m.worst = pe.Constraint(m.K, rule=lambda _m, k: _m.t >= blocks[k].model.cost_total)
        m.objective = pe.Objective(expr=m.t)
    build_s = time.perf_counter() - t0

    solver = make_solver()
    archs: dict[str, RobustArchitecture] = {}
    for arch in settings.architectures:
        for b in blocks:
            restrict(b, arch, shared_single_device_type=settings.shared_single_device_type)
        t1 = time.perf_counter()
        res = solver.solve(m, time_limit=settings.time_limit_s, rel_gap=settings.mip_gap, threads=settings.threads,
                           load_solutions=False, raise_exception_on_nonoptimal_result=False, solver_options={"random_seed": 0})
        wall = time.perf_counter() - t1
        has, status = _status(res)
        if not has:
            archs[arch] = RobustArchitecture(arch, False, status, None, time_s=wall)
            continue
        res.solution_loader.load_vars()
        obj, bound = res.incumbent_objective, res.objective_bound
        gap = max(0.0, (obj - bound) / abs(obj)) if obj is not None and bound is not None and abs(obj) > 1e-9 else None
        counts = {pool_names[p]: round(m.N[p].value or 0.0) for p in range(len(pool_names))}
        fixed = FixedPlan(arch, {k: v for k, v in counts.items() if v > 0})
        plans: dict[str, ArchitecturePlan] = {}
        for (name, _), b in zip(scenarios, blocks, strict=True):
            b.model.objective.activate()
            try:
                plans[name] = solve_fixed(b, make_solver(), fixed, settings)
            finally:
                b.model.objective.deactivate()
        archs[arch] = RobustArchitecture(arch, True, status, float(obj) if obj is not None else None, fixed.instances, plans,
                                         gap=gap, time_s=wall)
    return RobustResult(objective=objective, scenarios=names, weights=w, architectures=archs, build_s=build_s)
