"""Re-verify the tool-phase section of a plan (no solver): shares, CPU capacity, tier, cost terms."""

from __future__ import annotations

from planner.schema.plan import ArchitecturePlan

TOL = 1e-6


def check_tool_phase(plan: ArchitecturePlan) -> list[str]:
    """Violations of the tool-phase section (empty when valid); the terms are recomputed from its numbers."""
    out: list[str] = []
    tp = plan.tool_phase
    costs = plan.costs
    if tp is None or costs is None:
        if costs is not None and (costs.cpu_pool_usd_per_month or costs.kv_tier_usd_per_month or costs.tool_state_energy_usd_per_month):
            out.append("costs: tool-phase cost terms without a tool-phase section")
        return out
    for r in tp.tools:
        s = r.hold_share + r.offload_share + r.recompute_share
        if abs(s - 1.0) > 1e-5:
            out.append(f"tool_balance[{r.service}|{r.tool}]: policy shares sum to {s:.6f}, not 1")
    inp = tp.inputs
    k = int(inp.get("redundancy", 0))
    cores = inp.get("cpu_cores_per_server", {})
    rates = inp.get("cpu_usd_per_server_month", {})
    mem = inp.get("cpu_memory_gb_per_server", {})
    cap_cores = sum(float(cores.get(c.server, 0)) * c.utilization_cap * max(c.instances - k, 0) for c in tp.cpu_pools)
    if tp.cpu_cores_peak > cap_cores * (1 + TOL) + TOL:
        out.append(f"cpu_cores: {tp.cpu_cores_peak:.3f} cores needed at peak exceed {cap_cores:.3f} (servers x cores x utilisation cap)")
    if tp.kv_tier_usd_per_gb_month is None and tp.kv_tier_gb > 0:
        cap_gb = sum(float(mem.get(c.server, 0.0)) * float(inp.get("tier_memory_utilization", 0.0)) * max(c.instances - k, 0) for c in tp.cpu_pools)
        if tp.kv_tier_gb > cap_gb * (1 + TOL) + TOL:
            out.append(f"cpu_tier_memory: KV tier {tp.kv_tier_gb:,.1f} GB exceeds the CPU pool's usable memory {cap_gb:,.1f} GB")
    cpu = sum(float(rates.get(c.server, 0.0)) * c.instances + float(inp.get("ops_usd_per_pool_month", 0.0)) for c in tp.cpu_pools if c.instances > 0)
    cpu += float(inp.get("cpu_busy_energy_usd_per_month", 0.0))
    tier = (tp.kv_tier_usd_per_gb_month or 0.0) * tp.kv_tier_gb
    again = {"cpu_pool_usd_per_month": cpu, "kv_tier_usd_per_month": tier,
             "tool_state_energy_usd_per_month": float(inp.get("tool_state_energy_usd_per_month", 0.0))}
    for t, a in again.items():
        b = float(getattr(costs, t))
        if abs(a - b) > 1e-4 * max(1.0, abs(b)):
            out.append(f"costs: {t} recomputes to {a:,.2f}, plan says {b:,.2f}")
    return out
