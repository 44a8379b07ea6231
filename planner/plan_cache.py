"""The solved plan of ``planner solve``, kept on disk and given back for the very same inputs.

``planner solve`` is deterministic: HiGHS runs single-threaded with a fixed random seed
(:mod:`planner.optimize.highs`), the peak simulation draws from fixed seeds
(:mod:`planner.verify`), and nothing else reads the clock or the machine. So the same inputs
give the same plan, apart from the solver and simulation times it records (``time_s``,
``build_s``, ``extract_s``, ``wall_s``). :func:`cached_solve` keeps the plan in the cache folder
of :mod:`planner.capacity_cache` and gives it back on a later run whose inputs are identical,
with a note saying so (those times are then the earlier run's).

The key (:func:`plan_key`) is a SHA-256 over

- :func:`planner.capacity_cache.cache_key`: the validated instance after scenario and ``--set``
  overrides, the bytes of every file it names, the catalog (version, folders, resolved device
  and model profiles), the calibration, the planner's version and the SHA-256 of its source,
  the Python, numpy and pandas versions, the ``PLANNER_*`` environment;
- the instance file's absolute path (the plan records it);
- every solve option: the :class:`planner.optimize.settings.SolveSettings` fields
  (architectures, time limit, MIP gap, threads, confidence, ...), the scenario name, the
  overrides, ``--resolution``, ``--capacity`` (its absolute path and SHA-256) and
  ``--capacity-only``;
- the versions of the solver and numerical stack the plan also depends on: highspy, pyomo,
  scipy and pydantic.

A plan is stored only when it is reproducible: no solve of the run stopped at its time limit
(:func:`planner.optimize.highs.time_limit_stops`: such a plan depends on the machine's speed)
and the solver ran on one thread. ``planner solve --no-cache`` neither reads nor writes it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from planner.capacity_cache import NO_FOLDER, cache_dir, cache_key, load_entry, store_entry
from planner.progress import stage

PLAN_FORMAT = "plan-1"
"""Layout of a plan entry: ``(PlanResult, solved-at UTC text)``."""

STACK = ("highspy", "pyomo", "scipy", "pydantic")
"""Distributions whose versions go into the key (numpy and pandas are in the tables' key)."""


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _file_sha256(path: str | None) -> list[str] | None:
    if not path:
        return None
    target = Path(path).expanduser().resolve()
    try:
        return [str(target), hashlib.sha256(target.read_bytes()).hexdigest()]
    except OSError:
        return [str(target), "unreadable"]


def plan_key(resolved: Any, settings: Any, *, capacity_file: str | None = None, capacity_only: bool = False,
             scenario: str | None = None, overrides: dict[str, Any] | None = None, resolution: str = "fixed") -> str:
    """The SHA-256 key of the plan :func:`planner.solve_instance.solve_instance` gives for these
    arguments (the module docstring lists what it covers)."""
    parts = {
        "format": PLAN_FORMAT,
        "inputs": cache_key(resolved),
        "instance_path": str(Path(resolved.path).resolve()),
        "settings": {f.name: getattr(settings, f.name) for f in fields(settings)},
        "capacity_file": _file_sha256(capacity_file),
        "capacity_only": capacity_only,
        "scenario": scenario,
        "overrides": overrides or {},
        "resolution": resolution,
        "stack": {d: _version(d) for d in STACK},
    }
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def cached_note(solved_utc: str, key: str) -> str:
    """The note a plan read from the cache carries (in the summary, ``--json`` and ``plan.json``)."""
    return (f"cache: this plan was solved at {solved_utc} UTC from identical inputs (instance, the files it names, catalog, "
            f"options, planner code and library versions; key {key[:12]}) and read back from the cache; its solver and "
            "simulation times are that run's; `planner solve --no-cache` solves again")


def cached_solve(resolved: Any, settings: Any, *, capacity_file: str | None = None, capacity_only: bool = False,
                 scenario: str | None = None, overrides: dict[str, Any] | None = None, resolution: str = "fixed",
                 directory: Path | None = None) -> tuple[Any, str]:
    """The :class:`planner.schema.plan.PlanResult` of ``solve_instance(resolved, settings, ...,
    cache=True)``, from the cache when it holds this key, and ``"hit"``, ``"miss"`` (solved and
    stored), ``"miss (not stored: …)"`` or ``"miss (not reproducible: …)"``. A hit carries
    :func:`cached_note` as its last note."""
    from planner.solve_instance import solve_instance

    def solve() -> Any:
        return solve_instance(resolved, settings, capacity_file=capacity_file, scenario=scenario, overrides=overrides,
                              resolution=resolution, capacity_only=capacity_only, cache=True).result

    folder = directory or cache_dir()
    if folder is None:
        return solve(), NO_FOLDER
    if settings.simulation_check is not None:  # a callable is not part of the key: never cached
        return solve(), "miss (not stored: a custom simulation check)"
    with stage("plan cache"):
        key = plan_key(resolved, settings, capacity_file=capacity_file, capacity_only=capacity_only, scenario=scenario,
                       overrides=overrides, resolution=resolution)
        entry = load_entry(folder, key, PLAN_FORMAT)
    if entry is not None:
        result, solved_utc = entry
        return result.model_copy(update={"notes": [*result.notes, cached_note(solved_utc, key)]}), "hit"
    from planner.optimize.highs import time_limit_stops

    stops = time_limit_stops()
    result = solve()
    if time_limit_stops() != stops:
        return result, "miss (not reproducible: a solve stopped at its time limit)"
    if settings.threads != 1:
        return result, "miss (not reproducible: the solver ran on several threads)"
    solved_utc = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    return result, store_entry(folder, key, PLAN_FORMAT, (result, solved_utc))
