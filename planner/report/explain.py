"""Plain-words explanations of a plan that a table alone leaves open (report layer, from the plan only).

A **lightly used pool** (mean utilisation below :data:`LOW_UTILIZATION`) raises the question why
it is there at all. From the plan's own figures:

- *minimum pool*: every instance is redundancy (``instances <= redundancy + 1`` with the load of
  less than one instance): N+k keeps at least ``k + 1`` instances whatever the load;
- *top-up pool*: another pool of the same role and model carries most of the same buckets and
  one more instance of it would cost more than this whole pool (``cost per instance`` of the
  other pool ``= its cost / its instances``): the MIP rounds the big pool down and puts the
  remainder on a cheaper, smaller instance;
- otherwise the pool carries buckets no other pool serves (named).

A **saturated pool** (peak utilisation at or above :data:`HIGH_UTILIZATION`) raises the opposite
question: how much traffic above the forecast it absorbs. A pool of ``n`` instances at peak
utilisation ``rho = sum(lambda tau) / n`` saturates (``rho = 1``: its queue grows without bound) at
``1 / rho`` times the forecast peak, so its headroom is ``1 / rho - 1`` of the traffic (the plan's own
``utilization_peak``; DESIGN §3's definition). The queueing model lets a pool run this close to 1
when its wait quantile still meets the target (many servers, a long TTFT target); the sentence says
so, and that a queue this close to saturation settles slowly (its relaxation time grows like
``1 / (1 - rho)^2``, Whitt, "Planning queueing simulations", Management Science 1989), so a peak
simulation of a few minutes says little about its tail (deepseek-v3-wide-ep's prefill pool at 0.999:
simulated p99 TTFT 2.4 s against 9.6 s analytic). ``options.max_utilization`` sets headroom.
"""

from __future__ import annotations

from planner.schema.plan import ArchitecturePlan

LOW_UTILIZATION = 0.10
"""Mean utilisation under which a pool gets an explanation."""
HIGH_UTILIZATION = 0.95
"""Peak utilisation at or above which a pool's headroom is stated (module docstring)."""


def _usd(x: float) -> str:
    return f"${x:,.0f}"


def pool_explanations(plan: ArchitecturePlan) -> list[str]:
    """One sentence per lightly used pool of ``plan`` (module docstring)."""
    out: list[str] = []
    buckets: dict[str, dict[str, float]] = {}
    for r in plan.routing:
        buckets.setdefault(r.pool, {})
        buckets[r.pool][f"{r.service}/{r.bucket}"] = buckets[r.pool].get(f"{r.service}/{r.bucket}", 0.0) + r.share
    for p in plan.pools:
        if p.instances > 0 and p.utilization_peak >= HIGH_UTILIZATION:
            out.append(saturation_explanation(p.name, p.instances, p.config, p.utilization_peak))
        if p.instances <= 0 or p.utilization_mean >= LOW_UTILIZATION:
            continue
        mine = buckets.get(p.name, {})
        carried = ", ".join(f"{share:.1%} of {b}" for b, share in sorted(mine.items()))
        head = (f"{p.name} ({p.instances}x {p.config}, {_usd(p.cost_usd_per_month)}/month) runs at {p.utilization_mean:.0%} "
                f"of its capacity at mean load; it carries {carried or 'no routed traffic'}")
        if p.redundancy > 0 and p.instances <= p.redundancy + 1 and p.busy_instances_peak < 1:
            out.append(f"{head}: a minimum pool — with redundancy N+{p.redundancy} a pool keeps {p.redundancy + 1} instances however little it carries.")
            continue
        siblings = [q for q in plan.pools if q.name != p.name and q.role == p.role and q.model == p.model and q.instances > 0
                    and set(buckets.get(q.name, {})) & set(mine)]
        if siblings:
            big = max(siblings, key=lambda q: q.instances)
            per_instance = big.cost_usd_per_month / big.instances
            if per_instance > p.cost_usd_per_month:
                out.append(f"{head}: a top-up pool — the {big.instances} instances of {big.name} carry the rest, and one more of them "
                           f"({big.tp} devices, about {_usd(per_instance)}/month) would cost more than this smaller pool.")
                continue
        out.append(f"{head}: the cheapest way found to serve that traffic within its latency targets.")
    return out


def saturation_explanation(name: str, instances: int, config: str, utilization_peak: float) -> str:
    """The headroom sentence of a pool at or above :data:`HIGH_UTILIZATION` at peak (module docstring)."""
    headroom = 1.0 / utilization_peak - 1.0 if utilization_peak > 0 else float("inf")
    return (f"{name} ({instances}x {config}) runs at {utilization_peak:.1%} of its capacity at the forecast peak: the queueing model "
            f"meets the targets there, but traffic {headroom:.1%} above the forecast saturates it with the plan's routing held (the "
            f"plan as a whole may carry more by re-routing to its other pools: `planner evaluate PLAN.json` gives its headroom; a "
            f"queue this close to saturation also settles slowly, so a short peak simulation says little about its tail); set "
            f"options.max_utilization (e.g. 0.9) for headroom.")
