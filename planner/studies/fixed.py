"""A fixed plan: pool sizes held at a plan's counts, routing free (the building block of
``planner evaluate`` and of robust planning).

Holding a plan means fixing, in a built model (:func:`planner.optimize.model.build_model`),

- ``n[p] = N_p`` for every pool of the plan and ``n[p] = 0`` for every other pool;
- ``z[p] = 1`` exactly for the pools with ``N_p > 0`` (the pool exists, its fixed operations cost is paid);

and leaving the routing shares ``x``, the device-type binaries ``u`` (forced by ``z ≤ u``) free.
What is left is the linear programme "route this scenario's traffic over these pools at least
cost within the utilisation caps, the KV memory and the SLO masks": its optimum is the cost
of the fixed plan under the scenario (equipment, idle power and operations are fixed by
``N``; busy power, KV transfer and the idle-power credit follow the routing), and it is
infeasible exactly when the pools cannot carry the scenario's peak within the caps.

The budget constraint is switched off while a plan is held: the devices are already
bought, and the question is what they cost and whether they carry the load.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.optimize.model import Built, restrict
from planner.optimize.solve import SolveSettings, solve_architecture
from planner.schema.capacity import config_devices
from planner.schema.plan import ArchitecturePlan, PlanResult


@dataclass(frozen=True)
class FixedPlan:
    """Pool sizes of one architecture's plan: pool name (``role:config:model``) -> instances."""

    architecture: str
    instances: dict[str, int]
    cap_factors: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    """Per point (service, bucket, role, config): the factor the plan's own solve divided the queueing
    cap by (tightened or relaxed by the verify-and-tighten loop; ``CapacitySnapshot.utilization_caps``).
    A held plan is evaluated with the same caps (:func:`planner.optimize.resolve.apply_cap_factors`),
    so at the plan's own scenario it carries its load exactly as ``planner solve`` sized it."""
    routing: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    """Per point (service, bucket, role, config): the plan's own routing share, for the latency of the held
    pools as deployed (:func:`planner.studies.evaluate.latency_as_routed`)."""
    ttft_added_ms: dict[str, float] = field(default_factory=dict)
    """Per service: the KV reload / recompute time after tool waits the plan adds to its TTFT
    (``LatencyPrediction.ttft_added_ms``; the tool phase's policies are held with the plan)."""

    @classmethod
    def from_result(cls, result: PlanResult, architecture: str | None = None) -> FixedPlan:
        """The pools of ``architecture`` in a solved plan (default: the verdict's winner)."""
        arch = architecture or result.verdict.winner
        if arch is None:
            raise ValueError("the plan has no feasible architecture (verdict winner is None); name one with --architecture")
        plan = result.architectures.get(arch)
        if plan is None or not plan.feasible:
            have = ", ".join(a for a, p in result.architectures.items() if p.feasible) or "none"
            raise ValueError(f"the plan has no feasible {arch!r} architecture (feasible: {have})")
        from planner.optimize.resolve import cap_factors_of

        return cls(architecture=arch, instances={p.name: int(p.instances) for p in plan.pools if p.instances > 0},
                   cap_factors=cap_factors_of(result.capacity.utilization_caps, arch),
                   routing={(r.service, r.bucket, str(r.role), r.config): float(r.share) for r in plan.routing},
                   ttft_added_ms={lp.service: float(lp.ttft_added_ms) for lp in plan.latency if lp.ttft_added_ms > 0})

    @property
    def devices(self) -> dict[str, int]:
        """Device id -> devices, from pool names ``role:device/tpK:model`` (or ``role:device/tpT-epE-dpD:model``)."""
        out: dict[str, int] = {}
        for name, n in self.instances.items():
            dev, per_instance = config_devices(name.split(":")[1])
            out[dev] = out.get(dev, 0) + n * per_instance
        return out


def pool_counts(built: Built, plan: FixedPlan) -> np.ndarray:
    """Instances per pool of ``built`` (0 for pools the plan does not have); ValueError for unknown pools."""
    pos = {name: p for p, name in enumerate(built.pool_names)}
    missing = [name for name in plan.instances if name not in pos]
    if missing:
        raise ValueError(f"pool(s) {', '.join(missing)} of the plan have no usable operating point in this scenario's capacity "
                         f"table (pools there: {', '.join(built.pool_names)})")
    counts = np.zeros(len(built.pool_names), dtype=int)
    for name, n in plan.instances.items():
        counts[pos[name]] = int(n)
    over = [built.pool_names[p] for p in range(len(counts)) if counts[p] > int(built.n_max[p])]
    if over:
        raise ValueError(f"the model was built with too small a big-M for pool(s) {', '.join(over)}; build it with min_n_max")
    return counts


@contextmanager
def held(built: Built, counts: np.ndarray) -> Iterator[None]:
    """Within the block: ``n`` and ``z`` fixed to ``counts`` and the budget off (restored afterwards)."""
    m = built.model
    had_budget = bool(m.budget_c.active)
    for p in range(len(counts)):
        m.n[p].fix(int(counts[p]))
        m.z[p].fix(1 if counts[p] > 0 else 0)
    if had_budget:
        m.budget_c.deactivate()
    try:
        yield
    finally:
        for p in range(len(counts)):
            m.n[p].unfix()
            m.z[p].unfix()
        if had_budget:
            m.budget_c.activate()


def _lean_solve(built: Built, solver: Any, architecture: str, settings: SolveSettings) -> tuple[bool, float | None]:
    restrict(built, architecture, shared_single_device_type=settings.shared_single_device_type)
    res = solver.solve(built.model, time_limit=settings.time_limit_s, rel_gap=settings.mip_gap, threads=settings.threads,
                       load_solutions=False, raise_exception_on_nonoptimal_result=False, solver_options={"random_seed": 0})
    ok = getattr(res.solution_status, "name", "") in ("optimal", "feasible")
    return ok, (float(res.incumbent_objective) if ok and res.incumbent_objective is not None else None)


def carries(built: Built, solver: Any, plan: FixedPlan, settings: SolveSettings) -> tuple[bool, float | None]:
    """Can the fixed pools carry the model's current rates within the caps? (feasible, cost USD/month)."""
    with held(built, pool_counts(built, plan)):
        return _lean_solve(built, solver, plan.architecture, settings)


def solve_fixed(built: Built, solver: Any, plan: FixedPlan, settings: SolveSettings) -> ArchitecturePlan:
    """The full :class:`ArchitecturePlan` of the held pools with the best routing (pools, costs, latency, binding).

    Infeasible (the pools cannot carry the load within the caps): ``feasible=False`` with
    status ``infeasible`` and no diagnosis (the headroom search of
    :mod:`planner.studies.evaluate` says which pool saturates first).
    """
    from planner.schema.plan import SolverInfo

    t0 = time.perf_counter()
    with held(built, pool_counts(built, plan)):
        ok, _ = _lean_solve(built, solver, plan.architecture, settings)
        if ok:
            return solve_architecture(built, solver, plan.architecture, settings)
    return ArchitecturePlan(architecture=plan.architecture, feasible=False,
                            solver=SolverInfo(status="infeasible", termination="the fixed pools cannot carry the load within the caps",
                                              time_s=time.perf_counter() - t0, time_limit_s=settings.time_limit_s, mip_gap=settings.mip_gap))
