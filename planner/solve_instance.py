"""Solve an instance end to end: capacity tables → optimiser with the verify-and-tighten loop →
discrete-event check at peak.

Above both :mod:`planner.optimize` and :mod:`planner.verify`: it hands the loop
(:mod:`planner.optimize.tighten`) the simulated check of :mod:`planner.verify` as a callable, so
neither of those imports the other (one-way flow).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.optimize.settings import SolveSettings, settings_from_instance
from planner.optimize.solve import SolveOutcome, solve_tables
from planner.progress import stage
from planner.schema.plan import PlanResult

__all__ = ["settings_from_instance", "solve_instance"]


def solve_instance(resolved: Any, settings: SolveSettings, *, capacity_file: str | None = None, scenario: str | None = None,
                   overrides: dict[str, Any] | None = None, resolution: str = "fixed", capacity_only: bool = False, cache: bool = False) -> SolveOutcome:
    """Capacity tables of an instance (optionally with measured capacity, only its rows with
    ``capacity_only``), then :func:`solve_tables`.

    ``resolution="auto"``: the length-bucket counts are chosen first (:mod:`planner.resolution`) and
    the instance is solved at them; the counts tried go into the verdict's confidence.

    ``cache``: the capacity tables come through the on-disk cache
    (:mod:`planner.capacity_cache`, keyed on everything they are computed from); the CLI's default."""
    if resolution == "auto":
        from planner.resolution import choose_resolution, resolution_flip

        chosen, steps, why = choose_resolution(resolved, settings, capacity_file=capacity_file)
        outcome = solve_instance(chosen, settings, capacity_file=capacity_file, scenario=scenario, overrides=overrides,
                                 capacity_only=capacity_only, cache=cache)
        res = outcome.result
        conf = res.verdict.confidence
        if steps and conf is not None:
            flip = resolution_flip(steps, res.verdict.winner, why)
            conf = conf.model_copy(update={"flips": [*conf.flips, flip], "resolution": steps, "summary": f"{conf.summary}; {flip.note}"})
            res = res.model_copy(update={"verdict": res.verdict.model_copy(update={"confidence": conf})})
        outcome.result = res.model_copy(update={"notes": [*res.notes, f"resolution: {why}"]})
        return outcome
    from planner.capacity import build_capacity_tables, read_measured_capacity
    from planner.optimize.highs import import_pyomo

    import_pyomo()  # before the capacity tables' queueing imports scipy (see import_pyomo)

    with stage("capacity tables"):
        if cache:
            from planner.capacity_cache import cached_capacity_tables

            tables, _status = cached_capacity_tables(resolved)
        else:
            tables = build_capacity_tables(resolved)
    if capacity_file:
        tables = read_measured_capacity(capacity_file, tables, only_listed=capacity_only)
    raw_notes: Any = tables.meta.get("notes", [])
    notes = tuple(str(n) for n in raw_notes) + tuple(getattr(resolved.catalog, "notes", ()))
    s = SolveSettings(**{**settings.__dict__, "extra_notes": settings.extra_notes + notes})
    sim_notes: list[str] = []
    if getattr(resolved.instance.options, "verify", False) and s.simulation_check is None:
        from planner.verify import (  # discrete-event check at peak (issue 7)
            peak_arrivals_from_instance,
            simulate_plan,
        )

        arrivals, sim_notes = peak_arrivals_from_instance(resolved)

        def check(result: PlanResult, architecture: str) -> Any:
            with stage(f"simulate {architecture} at peak"):
                return simulate_plan(result, architecture, arrivals=arrivals)
        s = SolveSettings(**{**s.__dict__, "simulation_check": check})
    outcome = solve_tables(tables, s, instance_name=resolved.instance.name, instance_path=str(Path(resolved.path).resolve()), scenario=scenario, overrides=overrides)
    if getattr(resolved.instance.options, "verify", False):
        from planner.verify import verify_result

        with stage("verify"):
            res = verify_result(outcome.result)  # reports the checks made in the loop; simulates plans without one
        outcome.result = res.model_copy(update={"notes": list(res.notes) + sim_notes})
    from planner import __version__
    from planner.optimize.energy_report import with_emissions

    outcome.result = with_emissions(outcome.result, getattr(resolved.instance.costs, "carbon_g_per_kwh", None))  # issue 20
    outcome.result = outcome.result.model_copy(update={"planner_version": __version__,
                                                       "catalog_version": getattr(resolved.catalog, "version", "")})
    return outcome
