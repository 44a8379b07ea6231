"""Solve an instance end to end: capacity tables → optimiser with the verify-and-tighten loop →
discrete-event check at peak.

Above both :mod:`planner.optimize` and :mod:`planner.verify`: it hands the loop
(:mod:`planner.optimize.tighten`) the simulated check of :mod:`planner.verify` as a callable, so
neither of those imports the other (one-way flow).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.optimize.settings import SolveSettings, settings_from_instance
from planner.optimize.solve import SolveOutcome, solve_tables
from planner.progress import stage
from planner.schema.plan import PlanResult

__all__ = ["PeakSimulationCheck", "instance_settings", "resolution_overrides", "settings_from_instance", "solve_instance"]


@dataclass(frozen=True)
class PeakSimulationCheck:
    """The discrete-event check at peak ``planner solve`` runs on every plan (issue 7):
    :func:`planner.verify.simulate_plan` with the instance's replayed arrivals. A value, not a
    closure, so studies can send it to worker processes with their settings."""

    arrivals: Any
    """Per service: :class:`planner.verify.PeakArrivals` (:func:`planner.verify.peak_arrivals_from_instance`)."""

    def __call__(self, result: PlanResult, architecture: str) -> Any:
        from planner.verify import simulate_plan

        key = _simulation_key(result, architecture, self._arrivals_digest())
        hit = _SIMULATED.get(key)
        if hit is not None:
            return hit
        with stage(f"simulate {architecture} at peak"):
            check = simulate_plan(result, architecture, arrivals=self.arrivals)
        if len(_SIMULATED) >= _SIMULATED_MAX:
            _SIMULATED.clear()
        _SIMULATED[key] = check
        return check

    def _arrivals_digest(self) -> str:
        """SHA-256 of the replayed arrivals (computed once per check object)."""
        digest = self.__dict__.get("_digest")
        if digest is None:
            h = hashlib.sha256()
            for name in sorted(self.arrivals or {}):
                a = self.arrivals[name]
                h.update(name.encode())
                h.update(np.ascontiguousarray(a.arrival_s, dtype=float).tobytes())
                h.update(repr((float(a.window_s), str(a.source))).encode())
            digest = h.hexdigest()
            object.__setattr__(self, "_digest", digest)  # frozen dataclass: a cache, not a field
        return str(digest)


_SIMULATED: dict[str, Any] = {}
"""Per process: peak-simulation checks by :func:`_simulation_key` (issue 27, sweep speed). A sweep asks
the same plan again at another electricity price (the price changes the costs, not the plan, and the
simulation reads no cost), and the verify-and-tighten loop of both paths (analytic, relaxed) often
reaches the same plan: the seeded simulation of equal inputs gives an equal check, so it is run once."""
_SIMULATED_MAX = 4096


_NOT_SIMULATED_POINT_KEYS = frozenset({"rho", "load_peak_coef"})
"""Columns of the snapshot's points that the verify-and-tighten loop changes (the utilisation cap
``rho`` the optimiser applied and the load coefficient ``rate x tau / rho`` it implies,
:func:`planner.optimize.tighten.tighten_prepared`) and that the simulation does not read
(:mod:`planner.verify`, :mod:`planner.simulate`, :func:`planner.pool_latency.pool_latency` read
neither, nor the pools' ``utilization_cap``): a round that tightens a cap and gets the same plan back
is not simulated again (issue 27, code-completion-8b: 2 of its 17 peak simulations)."""


def _simulation_key(result: PlanResult, architecture: str, arrivals_digest: str) -> str:
    """SHA-256 of everything :func:`planner.verify.simulate_plan` reads from ``result`` for ``architecture``:
    the plan's pools (but their cost and cap), routing and analytic latency, and the capacity snapshot's
    demand, points (but the caps the optimiser applied, :data:`_NOT_SIMULATED_POINT_KEYS`), configs and
    redundancy; with the arrivals' digest. Costs, prices, caps and solver figures are left out: the
    simulation does not read them."""
    plan = result.architectures[architecture]
    cap = result.capacity
    parts = {
        "architecture": architecture,
        "feasible": plan.feasible,
        "pools": [p.model_dump(mode="json", exclude={"cost_usd_per_month", "utilization_cap"}) for p in plan.pools],
        "routing": [r.model_dump(mode="json") for r in plan.routing],
        "latency": [lp.model_dump(mode="json") for lp in plan.latency],
        "demand": cap.demand, "configs": cap.configs, "redundancy": cap.redundancy,
        "points": [{k: v for k, v in row.items() if k not in _NOT_SIMULATED_POINT_KEYS} for row in cap.points],
        "arrivals": arrivals_digest,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def traffic_tables_of(resolved: Any, capacity_file: str | None, capacity_only: bool, cache: bool) -> Callable[[float], Any]:
    """``m -> `` the capacity tables of ``resolved`` with every service's ``traffic.rate_multiplier`` × ``m`` (the
    measured file applied as the solve applied it): what ``planner solve --set ...rate_multiplier`` builds, for the
    verdict confidence's traffic dimension (:func:`planner.optimize.resolve.confidence_winner`)."""
    def at(m: float) -> Any:
        return instance_tables(scaled_traffic(resolved, m), capacity_file, capacity_only, cache)

    return at


def scaled_traffic(resolved: Any, m: float) -> Any:
    """``resolved`` with every service's ``traffic.rate_multiplier`` × ``m``: what ``planner solve --set
    services.<s>.traffic.rate_multiplier=…`` reads at ``m`` times the instance's traffic."""
    over = {f"services.{name}.traffic.rate_multiplier": float(svc.traffic.rate_multiplier) * m
            for name, svc in resolved.instance.services.items()}
    return resolved.with_overrides(over)


def instance_tables(resolved: Any, capacity_file: str | None, capacity_only: bool, cache: bool) -> Any:
    """The capacity tables ``planner solve`` solves for ``resolved``: through the on-disk cache (``cache``) or built,
    then a measured capacity file's rows (only them with ``capacity_only``)."""
    from planner.capacity import build_capacity_tables, read_measured_capacity

    if cache:
        from planner.capacity_cache import cached_capacity_tables

        tables = cached_capacity_tables(resolved)[0]
    else:
        tables = build_capacity_tables(resolved)
    return read_measured_capacity(capacity_file, tables, only_listed=capacity_only) if capacity_file else tables


def instance_settings(resolved: Any, settings: SolveSettings) -> tuple[SolveSettings, list[str]]:
    """``settings`` as ``planner solve`` runs them on ``resolved``: with the peak simulation wired in
    when the instance's ``options.verify`` is on (and none is set yet); and its notes. Every command
    that re-solves an instance (sweep, budget, evaluate's regret, the verdict confidence) takes its
    settings from here, so it solves what ``solve`` solves."""
    if not getattr(resolved.instance.options, "verify", False) or settings.simulation_check is not None:
        return settings, []
    from planner.verify import peak_arrivals_from_instance  # discrete-event check at peak (issue 7)

    arrivals, notes = peak_arrivals_from_instance(resolved)
    return replace(settings, simulation_check=PeakSimulationCheck(arrivals)), notes


def resolution_overrides(resolved: Any) -> dict[str, Any]:
    """``services.<s>.traffic.buckets`` of every service whose traffic is a log: the bucket counts a
    plan was solved at (``--resolution auto`` chooses them), recorded in the plan's overrides so every
    command that re-reads the instance for that plan uses them."""
    return {f"services.{n}.traffic.buckets": int(s.traffic.buckets) for n, s in resolved.instance.services.items()
            if s.traffic.trace is not None}


def plan_overrides(result: PlanResult) -> dict[str, Any]:
    """The overrides to re-read a plan's instance with, so that its capacity tables are the ones
    ``planner solve`` built: the plan's own overrides, which hold the bucket counts ``--resolution
    auto`` chose (:func:`resolution_overrides`); for a plan written before they were recorded there,
    the counts of its confidence statement when it records an adaptive resolution."""
    out = dict(result.overrides)
    conf = result.verdict.confidence
    if conf is not None and conf.resolution:
        for svc, n in conf.buckets.items():
            out.setdefault(f"services.{svc}.traffic.buckets", int(n))
    return out


def solve_instance(resolved: Any, settings: SolveSettings, *, capacity_file: str | None = None, scenario: str | None = None,
                   overrides: dict[str, Any] | None = None, resolution: str = "fixed", capacity_only: bool = False, cache: bool = False) -> SolveOutcome:
    """Capacity tables of an instance (optionally with measured capacity, only its rows with
    ``capacity_only``), then :func:`solve_tables`.

    ``resolution="auto"``: the length-bucket counts are chosen first (:mod:`planner.resolution`) and
    the instance is solved at them; the counts tried go into the verdict's confidence. ``"fixed"``: the
    instance's counts; with ``settings.confidence == "exact"`` the confidence also states the finer nested
    counts (:func:`planner.resolution.check_resolution`). ``"chosen"``: counts an ``auto`` solve chose (no
    second resolution check).

    ``cache``: the capacity tables and the optimiser's prepared tables (utilisation caps, pool
    bounds) come through the on-disk cache (:mod:`planner.capacity_cache`, keyed on everything
    they are computed from); the CLI's default."""
    if resolution == "auto":
        from planner.resolution import choose_resolution, resolution_flip

        chosen, steps, why = choose_resolution(resolved, settings, capacity_file=capacity_file)
        # the chosen counts go into the plan's overrides: evaluate, check and studies re-read the instance with them
        outcome = solve_instance(chosen, settings, capacity_file=capacity_file, scenario=scenario, resolution="chosen",
                                 overrides={**(overrides or {}), **resolution_overrides(chosen)}, capacity_only=capacity_only, cache=cache)
        res = outcome.result
        conf = res.verdict.confidence
        if steps and conf is None:  # --confidence off: the resolution is still stated
            from planner.schema.plan import VerdictConfidence

            buckets: dict[str, int] = {}
            for d in res.capacity.demand:
                buckets[str(d["service"])] = buckets.get(str(d["service"]), 0) + 1
            conf = VerdictConfidence(robust=None, summary="prefill, decode and traffic changes not assessed (planner solve --confidence exact)",
                                     buckets=buckets)
        if steps and conf is not None:
            flip = resolution_flip(steps, res.verdict.winner, why)
            conf = conf.model_copy(update={"flips": [*conf.flips, flip], "resolution": steps, "summary": f"{conf.summary}; {flip.note}"})
            res = res.model_copy(update={"verdict": res.verdict.model_copy(update={"confidence": conf})})
        outcome.result = res.model_copy(update={"notes": [*res.notes, f"resolution: {why}"]})
        return outcome
    from planner.optimize.highs import import_pyomo

    import_pyomo()  # before the capacity tables' queueing imports scipy (see import_pyomo)

    prepared = None
    with stage("capacity tables"):
        tables = instance_tables(resolved, capacity_file, capacity_only, cache)
        if cache and not capacity_file:  # measured rows change the tables: those are prepared afresh
            from planner.capacity_cache import cached_prepared

            prepared, _status = cached_prepared(resolved, tables, settings.max_utilization)
    raw_notes: Any = tables.meta.get("notes", [])
    notes = tuple(str(n) for n in raw_notes) + tuple(getattr(resolved.catalog, "notes", ()))
    s = SolveSettings(**{**settings.__dict__, "extra_notes": settings.extra_notes + notes})
    s, sim_notes = instance_settings(resolved, s)
    outcome = solve_tables(tables, s, instance_name=resolved.instance.name, instance_path=str(Path(resolved.path).resolve()), scenario=scenario, overrides=overrides,
                           prepared=prepared)
    from planner.optimize.resolve import with_confidence

    outcome.result = with_confidence(outcome.result, tables, s, traffic_tables_of(resolved, capacity_file, capacity_only, cache)
                                     if s.confidence != "off" else None)  # re-solves as a sweep does (planner.optimize.confidence)
    conf = outcome.result.verdict.confidence
    if resolution == "fixed" and settings.confidence == "exact" and conf is not None and not conf.resolution:
        # the bucket resolution is part of the confidence statement (issue 24 item 0): finer nested counts on the cheap path
        from planner.resolution import check_resolution, resolution_flip

        with stage("confidence: bucket resolution"):
            steps, why = check_resolution(resolved, settings, capacity_file=capacity_file)
        if len(steps) > 1:
            flip = resolution_flip(steps, outcome.result.verdict.winner, why, chosen=0)
            conf = conf.model_copy(update={"flips": [*conf.flips, flip], "resolution": steps, "summary": f"{conf.summary}; {flip.note}"})
            outcome.result = outcome.result.model_copy(update={"verdict": outcome.result.verdict.model_copy(update={"confidence": conf})})
    if getattr(resolved.instance.options, "verify", False):
        with stage("verify"):
            res = verified(outcome.result)  # reports the checks made in the loop; simulates plans without one
        outcome.result = res.model_copy(update={"notes": list(res.notes) + sim_notes})
    from planner import __version__
    from planner.optimize.energy_report import with_emissions

    outcome.result = with_emissions(outcome.result, getattr(resolved.instance.costs, "carbon_g_per_kwh", None))  # issue 20
    outcome.result = outcome.result.model_copy(update={"planner_version": __version__,
                                                       "catalog_version": getattr(resolved.catalog, "version", "")})
    return outcome


def verified(result: PlanResult, **kwargs: Any) -> PlanResult:
    """:func:`planner.verify.verify_result` (every feasible plan simulated at peak, notes) with the verdict rebuilt
    when a plan was simulated there for the first time: a plan that misses in simulation ranks last and the verdict
    says so (:func:`planner.optimize.verdict.verdict_of`, what `planner check` recomputes); the verdict's confidence
    statement is kept (it is about re-solving, not about these simulations). ``kwargs`` go to ``verify_result``."""
    import pandas as pd

    from planner.optimize.verdict import verdict_of
    from planner.verify import verify_result

    res = verify_result(result, **kwargs)
    if all(res.architectures[n].simulation is p.simulation for n, p in result.architectures.items()):
        return res
    rate = float(pd.DataFrame(res.capacity.demand)["rate_mean_per_s"].sum()) if res.capacity.demand else 0.0
    return res.model_copy(update={"verdict": verdict_of(res.architectures, rate).model_copy(update={"confidence": res.verdict.confidence})})
