"""Independent plan checker: re-verifies a :class:`PlanResult` from its capacity snapshot alone.

No solver and no pyomo: plain arithmetic over the snapshot rows and the plan's numbers.
For every feasible architecture it checks

- ``route``: each (service, bucket) is fully routed (shares sum to 1 ± 1e-6) in each phase,
  only through roles the architecture allows;
- ``mask``: every routed operating point is in the snapshot and marked feasible, and its
  TTFT / TPOT without queueing is within the service's targets;
- ``pool``: every routed pool exists, ``devices = instances × tp``;
- ``load``: ``Σ λ_peak τ/ρ x ≤ instances − redundancy`` (1e-6 relative tolerance), with
  ``ρ`` the architecture's tightened cap where the latency check tightened it
  (``capacity.utilization_caps``), else the snapshot point's ``rho``;
- ``kv``: resident KV at peak within the surviving instances' KV capacity (when known);
- ``procurement`` and ``budget``;
- ``costs``: the terms recomputed from the snapshot equal the plan's, and sum to its total.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from planner.agents.check import check_tool_phase
from planner.optimize.extract import cost_breakdown
from planner.optimize.prepare import ARCH_ROLES
from planner.optimize.verdict import meets_in_simulation
from planner.schema.capacity import CostParams
from planner.schema.plan import COST_TERMS, TOOL_COST_TERMS, ArchitecturePlan, PlanResult

TOL = 1e-6


def check_plan(result: PlanResult) -> list[str]:
    """Violations found (empty when the plan is valid); each names architecture, constraint and item."""
    out: list[str] = []
    snap = result.capacity
    pts = pd.DataFrame(snap.points)
    demand = pd.DataFrame(snap.demand)
    configs = pd.DataFrame(snap.configs)
    costs = CostParams(**snap.costs)
    for arch, plan in result.architectures.items():
        if plan.feasible:
            caps = {(str(c["service"]), str(c["bucket"]), str(c["role"]), str(c["config"])): float(c["rho"])
                    for c in snap.utilization_caps if c.get("architecture") == arch and "rho" in c}
            arch_pts = pts
            if caps and len(pts):
                arch_pts = pts.copy()
                keys = zip(pts["service"].astype(str), pts["bucket"].astype(str), pts["role"].astype(str), pts["config"].astype(str), strict=True)
                arch_pts["rho"] = [caps.get(k, r) for k, r in zip(keys, pts["rho"].astype(float), strict=True)]
            out += [f"{arch}: {v}" for v in _check_arch(plan, arch_pts, demand, configs, costs, snap.redundancy, snap.budget_usd_per_month)]
    if result.verdict.winner is not None:
        # the verdict ranks plans that miss a target in the peak simulation after those that meet
        candidates = [p for p in result.architectures.values() if p.feasible and p.costs]
        meeting = [p for p in candidates if meets_in_simulation(p)]
        best = min(meeting or candidates, key=lambda p: p.costs.total_usd_per_month if p.costs else 0.0)
        if best.architecture != result.verdict.winner and best.costs is not None:
            other = result.architectures[result.verdict.winner].costs
            if other is None or other.total_usd_per_month > best.costs.total_usd_per_month * (1 + TOL):
                out.append(f"verdict: winner {result.verdict.winner} is not the cheapest feasible architecture ({best.architecture})")
    return out


def _check_arch(plan: ArchitecturePlan, pts: pd.DataFrame, demand: pd.DataFrame, configs: pd.DataFrame,
                costs: CostParams, k: int, budget: float | None) -> list[str]:
    out: list[str] = []
    allowed = ARCH_ROLES[plan.architecture]
    key: dict[tuple[str, str, str, str], int] = {}
    for pos, row in enumerate(pts.itertuples(index=False)):
        key[(str(row.service), str(row.bucket), str(row.role), str(row.config))] = pos
    pools = {p.name: p for p in plan.pools}
    phase_sum: dict[tuple[str, str, str], float] = defaultdict(float)
    load: dict[str, float] = defaultdict(float)
    kv: dict[str, float] = defaultdict(float)
    rows, shares = [], []
    for r in plan.routing:
        if r.share < -TOL or r.share > 1 + TOL:
            out.append(f"route[{r.service}|{r.bucket}]: share {r.share} outside [0, 1]")
        if r.role not in allowed:
            out.append(f"route[{r.service}|{r.bucket}]: role {r.role} not allowed in {plan.architecture}")
        for phase, roles in (("prefill", ("prefill", "unified")), ("decode", ("decode", "unified"))):
            if r.role in roles:
                phase_sum[(r.service, r.bucket, phase)] += r.share
        j = key.get((str(r.service), str(r.bucket), str(r.role), str(r.config)))
        if j is None:
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: routed to an operating point missing from the capacity snapshot")
            continue
        pt = pts.iloc[j]
        if not bool(pt["feasible"]) or float(pt["rho"]) <= 0:
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: operating point is infeasible ({pt['reason']})")
        if r.role in ("prefill", "unified") and float(pt["ttft_ms"]) > float(pt["ttft_target_ms"]) * (1 + TOL):
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: TTFT {float(pt['ttft_ms']):.1f} ms > target {float(pt['ttft_target_ms']):g} ms")
        if r.role in ("decode", "unified") and float(pt["tpot_ms"]) > float(pt["tpot_target_ms"]) * (1 + TOL):
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: TPOT {float(pt['tpot_ms']):.1f} ms > target {float(pt['tpot_target_ms']):g} ms")
        if (r.role in ("decode", "unified") and "itl_target_ms" in pt.index and "itl_ms" in pt.index
                and float(pt["itl_ms"]) > float(pt["itl_target_ms"]) * (1 + TOL)):
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: ITL {float(pt['itl_ms']):.1f} ms > target {float(pt['itl_target_ms']):g} ms")
        if r.pool not in pools:
            out.append(f"pool[{r.pool}]: routed to a pool the plan does not provision")
        if str(pt["pool"]) != r.pool:
            out.append(f"pool[{r.pool}]: routing names pool {r.pool}, the operating point belongs to {pt['pool']}")
        load[r.pool] += float(pt["rate_peak_per_s"]) * float(pt["instance_seconds_per_request"]) / float(pt["rho"]) * r.share if float(pt["rho"]) > 0 else float("inf")
        kv[r.pool] += float(pt["kv_peak_coef"]) * r.share
        rows.append(j)
        shares.append(r.share)
    for d in demand.itertuples(index=False):
        for phase in ("prefill", "decode"):
            s = phase_sum.get((str(d.service), str(d.bucket), phase), 0.0)
            if abs(s - 1.0) > 1e-5:
                out.append(f"route[{d.service}|{d.bucket}|{phase}]: shares sum to {s:.6f}, not 1")
    for name, p in pools.items():
        if p.devices != p.instances * p.tp:
            out.append(f"pool[{name}]: devices {p.devices} != instances {p.instances} x tp {p.tp}")
        avail = p.instances - k
        if load.get(name, 0.0) > avail * (1 + TOL) + TOL:
            out.append(f"load[{name}]: peak load {load[name]:.4f} instances (at the utilisation cap) exceeds {avail} instances after losing {k}")
        if p.kv_capacity_bytes > 0 and kv.get(name, 0.0) > p.kv_capacity_bytes * (1 + TOL):
            out.append(f"kv[{name}]: resident KV at peak {kv[name]:.3g} B exceeds capacity {p.kv_capacity_bytes:.3g} B")
        if p.instances > 0 and p.instances < k + 1:
            out.append(f"pool_min[{name}]: {p.instances} instances cannot survive the loss of {k}")
    per_device: dict[str, int] = defaultdict(int)
    for p in pools.values():
        per_device[p.device] += p.devices
    for dev, used in per_device.items():
        lim = configs.loc[configs["device"] == dev, "procurement_limit"].astype(float).min()
        if np.isfinite(lim) and used > lim:
            out.append(f"procurement[{dev}]: {used} devices exceed the limit {lim:g}")
    if plan.costs is None:
        return out + ["costs: a feasible plan without costs"]
    total_terms = sum(plan.costs.terms().values())
    if abs(total_terms - plan.costs.total_usd_per_month) > 1e-6 * max(1.0, abs(plan.costs.total_usd_per_month)):
        out.append(f"costs: terms sum to {total_terms:.2f}, total says {plan.costs.total_usd_per_month:.2f}")
    if budget is not None and plan.costs.total_usd_per_month > budget * (1 + TOL):
        out.append(f"budget: total {plan.costs.total_usd_per_month:,.2f} exceeds the budget {budget:,.2f}")
    pool_df = pd.DataFrame([{"pool": p.name, "tp": p.tp, "config": p.config, "device": p.device, "sends_kv": p.sends_kv} for p in pools.values()],
                           columns=["pool", "tp", "config", "device", "sends_kv"])
    n = np.array([p.instances for p in pools.values()], dtype=int)
    sub = pts.iloc[rows].reset_index(drop=True) if rows else pts.iloc[0:0]
    again = cost_breakdown(costs, configs, sub, np.array(shares, dtype=float), pool_df, n, redundancy=k)
    out += check_tool_phase(plan)  # tool-phase terms and constraints (planner.agents)
    for t in COST_TERMS:
        if t in TOOL_COST_TERMS:
            continue
        a, b = getattr(again, t), getattr(plan.costs, t)
        if abs(a - b) > 1e-4 * max(1.0, abs(b)):
            out.append(f"costs: {t} recomputes to {a:,.2f}, plan says {b:,.2f}")
    if plan.solver.objective_usd_per_month is not None and abs(plan.solver.objective_usd_per_month - plan.costs.total_usd_per_month) > 1e-4 * max(1.0, plan.costs.total_usd_per_month):
        out.append(f"costs: total {plan.costs.total_usd_per_month:,.2f} differs from the solver objective {plan.solver.objective_usd_per_month:,.2f}")
    return out
