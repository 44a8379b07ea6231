"""How a fixed plan fares under other traffic: SLO attainment, headroom, first pool to saturate, regret.

For each scenario (dot-path overrides, as in sweeps) and a plan's pool sizes ``N``
(:class:`~planner.studies.fixed.FixedPlan`):

- **fixed cost and SLO attainment** — the plan is held (:mod:`planner.studies.fixed`: ``n = N``,
  routing free) and re-solved on the scenario's capacity table, with the utilisation caps the
  plan's own solve ended with (``FixedPlan.cap_factors``: each point's queueing cap, recomputed for
  the scenario's rates, divided by the factor the verify-and-tighten loop applied; issue 24 — held on
  the untightened caps, enterprise-chat's plan "could not carry" its own traffic, headroom ×0.692). Feasible means the pools
  carry the scenario's peak within every utilisation cap, KV capacity and SLO mask; the
  plan's latency is then predicted per service by :mod:`planner.queueing` for the *actual*
  pool sizes (G/G/c wait quantile at peak plus the operating point's own latency, as in
  ``planner solve``). ``slo_attainment`` is the share of services whose predicted TTFT and
  TPOT quantiles both meet their targets. So "SLO met" is a statement under the caps: "no" when the
  pools cannot carry the scenario within them, whatever the latency would be.
- **latency as routed** (:func:`latency_as_routed`) — the other view, asked of the plan as deployed: its
  pools and its own routing shares held, the scenario's traffic, and the analytic latency the plan
  reports (:func:`planner.pool_latency.pool_latency`, :func:`planner.pool_latency.bucket_latency` at the
  pools' actual sizes, no cap involved): per service the worst bucket's TTFT and per-token quantile
  against the targets. At the plan's own scenario it is the plan's own prediction (tested); beyond the
  caps it says by how much the targets are missed (``inf``: a pool past saturation), which "SLO met no"
  does not. The fixed cost can rise with traffic even though
  the devices are the same: busy power and KV transfer follow the load, and routing may
  have to move buckets to dearer pools.
- **headroom** — the largest multiplier ``h`` of every service's rate (on top of the
  scenario) that the held pools still carry: bracket by doubling/halving from 1 (between
  ``1/max_multiplier`` and ``max_multiplier``), then bisect on ``log h`` until
  ``high/low − 1 ≤ rel_tol``. Feasibility is monotone in ``h`` up to the queueing caps'
  pooling effect (a cap is computed for the nominal pool ``ceil(λτ)`` and grows slowly
  with λ), so the bisection's answer is the crossing point of a monotone test in practice.
- **saturates first** — in the held plan at ``h``, the pool(s) whose load (``Σ λτx/ρ`` over
  the surviving instances) or resident KV bytes are closest to their bound, within 2 % of
  the fullest: the pools that run out first when traffic grows uniformly.
- **regret** — fixed cost minus the cost of the best plan re-optimised for the scenario
  (cheapest architecture, :func:`planner.studies.sweep.solve_scenario`: ``planner solve``'s loop,
  the peak simulation included when ``options.verify``, so the re-optimum at the plan's own scenario
  is the plan itself); ``None`` when the
  fixed plan cannot carry the scenario (the regret is then not a cost: the plan fails).
  At the plan's own scenario the regret is 0 up to the MIP gap (tested).
- **simulated** (``planner evaluate --simulate``, :mod:`planner.studies.simulated`) — the plan as deployed (pools,
  routing, operating points held) in the peak simulation ``planner solve`` runs, at the scenario's rates; only for
  scenarios that change rates (a change of lengths or targets gets no figure, said why). At the plan's own
  scenario it is the plan's own peak simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from planner.optimize.model import Built, build_model
from planner.optimize.prepare import prepare
from planner.optimize.resolve import (
    Resolver,
    apply_cap_factors,
    scale_rates,
    structure_key,
    winner_of,
)
from planner.optimize.solve import SolveSettings
from planner.schema.capacity import CapacityTables
from planner.schema.plan import ArchitecturePlan, PlanResult, stat_label
from planner.studies.fixed import FixedPlan, carries, solve_fixed
from planner.studies.search import largest_passing_multiplier
from planner.studies.simulated import latency_detail
from planner.studies.source import TableSource
from planner.studies.spec import Scenario
from planner.studies.sweep import solve_scenario, study_headroom

MAX_MULTIPLIER = 64.0


class _Models:
    """Built models for a fixed plan, re-used across scenarios and headroom steps of one structure."""

    def __init__(self, plan: FixedPlan, max_multiplier: float) -> None:
        self.plan = plan
        self.max_multiplier = max_multiplier
        self.resolvers: dict[int, Resolver] = {}

    def built_for(self, structure: CapacityTables, tables: CapacityTables, settings: SolveSettings) -> tuple[Built, Any]:
        key = structure_key(structure)
        r = self.resolvers.get(key)
        if r is not None:
            built = r.load(tables, settings)
            if built is not None:
                return built, r.solver
        # Big-M for the plan's own counts and for rates up to max_multiplier × this table.
        r = Resolver.create(tables, settings, rate_headroom=self.max_multiplier, min_n_max=self.plan.instances,
                            cap_factors=self.plan.cap_factors)
        self.resolvers[key] = r
        built = r.load(tables, settings)
        if built is not None:
            return built, r.solver
        # The caps changed sign at these rates: a one-off model.
        from planner.optimize.solve import make_solver

        prep = apply_cap_factors(prepare(tables, max_utilization=settings.max_utilization), self.plan.cap_factors)
        prep.pools = prep.pools.assign(n_max=[max(int(v), int(self.plan.instances.get(str(p), 0)))
                                              for p, v in zip(prep.pools["pool"], prep.pools["n_max"], strict=True)])
        return build_model(prep, redundancy=settings.redundancy), make_solver()


def _scale_all(tables: CapacityTables, m: float) -> CapacityTables:
    return scale_rates(tables, {str(s): m for s in tables.demand["service"].unique()})


def headroom(models: _Models, structure: CapacityTables, tables: CapacityTables, settings: SolveSettings, *,
             rel_tol: float = 0.01) -> tuple[float, list[str]]:
    """(largest uniform rate multiplier the held pools carry, the load/KV constraints binding there)."""
    plan = models.plan
    cap = models.max_multiplier
    cache: dict[float, bool] = {}

    def ok(m: float) -> bool:
        if m not in cache:
            built, solver = models.built_for(structure, _scale_all(tables, m), settings)
            cache[m] = carries(built, solver, plan, settings)[0]
        return cache[m]

    lo = largest_passing_multiplier(ok, cap=cap, rel_tol=rel_tol)
    if lo == 0.0:
        return 0.0, []
    built, solver = models.built_for(structure, _scale_all(tables, lo), settings)
    at = solve_fixed(built, solver, plan, settings)
    return lo, _fullest(at)


def _fill(plan: ArchitecturePlan) -> dict[str, float]:
    """Per pool (labelled with what binds): load / cap (``Σ λτx/ρ`` over surviving instances) or KV bytes / capacity."""
    fill: dict[str, float] = {}
    for p in plan.pools:
        surviving = max(p.instances - p.redundancy, 0)
        load = p.utilization_peak / p.utilization_cap * p.instances / surviving if p.utilization_cap > 0 and surviving else math.inf
        kv = p.kv_bytes_peak / p.kv_capacity_bytes if p.kv_capacity_bytes > 0 else 0.0
        fill[f"{p.name} ({'KV memory' if kv > load else 'load'})"] = max(load, kv)
    return fill


def _fullest(plan: ArchitecturePlan, tol: float = 0.02) -> list[str]:
    """Pools within ``tol`` of the fullest (:func:`_fill`)."""
    fill = _fill(plan)
    if not fill:
        return []
    top = max(fill.values())
    return sorted(name for name, f in fill.items() if f >= top * (1 - tol))


def _slo(plan: ArchitecturePlan) -> tuple[bool, float | None, str]:
    if not plan.feasible:
        return False, None, "the pools cannot carry this traffic within their utilisation caps"
    met = [lat.ttft_met and lat.tpot_met for lat in plan.latency]
    detail = "; ".join(
        f"{lat.service}: ttft p{lat.ttft_quantile * 100:g} {lat.ttft_predicted_ms:.0f}/{lat.ttft_target_ms:.0f} ms, "
        f"{lat.token_metric} {stat_label(lat.tpot_quantile)} {lat.tpot_predicted_ms:.1f}/{lat.tpot_target_ms:.0f} ms" for lat in plan.latency)
    return all(met), (sum(met) / len(met) if met else None), detail


def latency_as_routed(prep: Any, plan: FixedPlan, redundancy: int) -> tuple[bool | None, str]:
    """(every service meets its TTFT and per-token targets, a per-service detail) for the held pools with the
    plan's own routing at ``prep``'s traffic (module docstring), the plan's KV reloads after tool waits added
    to the TTFT as it adds them (``FixedPlan.ttft_added_ms``). ``None`` when the plan's routing does not route
    every (service, bucket) of these tables (other bucket counts, another instance): no figure then."""
    from planner.pool_latency import bucket_latency, pool_waits

    pts = prep.points
    keys = zip(pts["service"].astype(str), pts["bucket"].astype(str), pts["role"].astype(str), pts["config"].astype(str), strict=True)
    x = np.array([plan.routing.get(k, 0.0) for k in keys], dtype=float)
    if not np.all(np.isfinite(x) & (x >= 0.0) & (x <= 1.0 + 1e-6)):
        return None, "the plan's routing shares are not shares (each must lie in [0, 1]): no latency as routed"
    routed = set(zip(pts["service"].astype(str).to_numpy()[x > 0], pts["bucket"].astype(str).to_numpy()[x > 0], strict=True))
    demand = set(zip(prep.demand["service"].astype(str), prep.demand["bucket"].astype(str), strict=True))
    if not plan.routing or not (x > 0).any() or not demand <= routed:
        missing = sorted(demand - routed)
        shown = ", ".join(f"{s}/{b}" for s, b in missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return None, (f"the plan's routing does not route {shown}: no latency as routed (the scenario's buckets or candidates are "
                      "not the plan's; evaluate at the plan's bucket counts)")
    try:
        pl, lanes, waits = pool_waits(pts, x, plan.instances, redundancy)
        by_bucket = bucket_latency(pts, x, waits, lanes, instances=plan.instances, redundancy=redundancy, pool_rows=pl)
    except (ArithmeticError, ValueError) as exc:  # pool counts past any plan (a fuzzed 1e30): no figure, said so
        return None, f"the held pools cannot be evaluated as routed ({type(exc).__name__}: {exc})"
    parts, met = [], True
    for svc, g in by_bucket.groupby("service", sort=True):
        ttft = float(g["ttft_predicted_ms"].max()) + plan.ttft_added_ms.get(str(svc), 0.0)
        tok = float(g["tpot_predicted_ms"].max())
        ttft_t, tok_t = float(g["ttft_target_ms"].iloc[0]), float(g["tpot_target_ms"].iloc[0])
        ttft_ok, tok_ok = ttft <= ttft_t * (1 + 1e-6), tok <= tok_t * (1 + 1e-6)
        met &= ttft_ok and tok_ok
        parts.append(latency_detail(str(svc), f"{ttft:,.0f}", ttft_t, f"{tok:,.1f}", tok_t, ttft_missed=not ttft_ok, tok_missed=not tok_ok))
    return bool(met), "; ".join(parts)


def _beyond(h: float, max_multiplier: float) -> str:
    """Where the headroom search stopped at its limits: ``"above"`` — every multiplier up to the largest power
    of two not above ``max_multiplier`` carried, so ``h`` is a lower bound (at ×0.01 of enterprise-chat's traffic
    its plan carries ~×145 and printed 64); ``"below"`` — even ``1 / max_multiplier`` did not carry (``h`` 0 is an
    upper bound, not a value); ``""`` inside the range (:func:`planner.studies.search.largest_passing_multiplier`)."""
    if h <= 0.0:
        return "below"
    top = 2.0 ** math.floor(math.log2(max_multiplier))  # the search's last doubling; a bisection ends below it
    return "above" if h >= top else ""


def evaluate_plan(source: TableSource, plan: FixedPlan, scenarios: list[Scenario], *, rel_tol: float = 0.01,
                  max_multiplier: float = MAX_MULTIPLIER, progress: Callable[[int], None] | None = None,
                  simulate: PlanResult | None = None, arrivals: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One row per scenario: fixed cost, SLO attainment, headroom, first pool to saturate, regret (module docstring).

    ``simulate``: the plan's result, to simulate the held plan at each scenario's rates as well
    (:func:`planner.studies.simulated.simulate_held`, ``arrivals`` the log windows to replay; columns
    ``simulated_met``, ``simulated_detail``). ``progress(1)`` is called after each scenario (a CLI progress bar)."""
    models = _Models(plan, max_multiplier)
    study_h = study_headroom(source, scenarios)
    rows: list[dict[str, Any]] = []
    for sc in scenarios:
        structure, tables, settings = source.tables_and_settings(sc.overrides, exact_rates=False)  # the plan's points, held
        built, solver = models.built_for(structure, tables, settings)
        fixed = solve_fixed(built, solver, plan, settings)
        slo_met, attainment, detail = _slo(fixed)
        routed_met, routed_detail = latency_as_routed(built.prep, plan, settings.redundancy)
        simulated: dict[str, Any] = {}
        if simulate is not None:
            from planner.studies.simulated import simulate_held

            sim_met, sim_detail = simulate_held(simulate, plan.architecture, built.prep.demand, arrivals)
            simulated = {"simulated_met": sim_met, "simulated_detail": sim_detail}
        h, saturates = headroom(models, structure, tables, settings, rel_tol=rel_tol)
        summaries, _ = solve_scenario(source, sc.overrides, headroom=study_h)
        best = winner_of(summaries)
        best_total = float(summaries[best].total_usd_per_month or math.nan) if best else None
        fixed_total = fixed.costs.total_usd_per_month if fixed.feasible and fixed.costs else None
        regret = fixed_total - best_total if fixed_total is not None and best_total is not None else None
        fill = _fill(fixed)
        util = max((f, name) for name, f in fill.items()) if fill else None
        beyond = _beyond(h, max_multiplier)
        rows.append({
            "scenario": sc.name, **sc.params, "architecture": plan.architecture, "carries_load": fixed.feasible,
            "slo_met": slo_met, "slo_attainment": attainment, "slo_detail": detail,
            "latency_met_as_routed": routed_met, "latency_as_routed_detail": routed_detail, **simulated,
            "headroom_multiplier": h, "headroom_beyond_search": beyond,
            "saturates_first": "" if beyond == "above" else ", ".join(saturates),
            "busiest_pool": util[1] if util else None, "busiest_load_of_cap": util[0] if util else None,
            "fixed_total_usd_per_month": fixed_total, "optimal_total_usd_per_month": best_total, "optimal_architecture": best,
            "optimal_device_mix": ", ".join(f"{d}:{n}" for d, n in sorted(summaries[best].devices.items())) if best else "",
            "regret_usd_per_month": regret,
            "regret_share": regret / best_total if regret is not None and best_total else None,
        })
        if progress:
            progress(1)
    return pd.DataFrame(rows)
