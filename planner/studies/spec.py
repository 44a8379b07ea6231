"""Scenario specifications: dot-path overrides, grids, Monte Carlo draws (DESIGN §7).

Syntax of ``--set PATH=VALUES`` (one option per path; ``PATH`` is a dot-path into the
instance, as in ``scenarios:``):

- ``PATH=V`` — one value (parsed as YAML: ``1.5``, ``true``, ``[h100-sxm, l40s]``);
- ``PATH=V1,V2,V3`` — a grid dimension; several grid paths make their cartesian product;
- ``PATH=dist:NAME(a,b[,c])`` — a forecast distribution, drawn ``--monte-carlo N`` times
  with ``--seed S`` (see :mod:`planner.schema.distributions` for the names).

A study is a list of :class:`Scenario` (name and overrides): for each base (the instance,
or each named scenario asked for), the grid's cartesian product, crossed with the Monte
Carlo draws when there are any. Every path is checked against the schema before anything
is solved, and each grid value is validated once: a bad path or value is an
:class:`~planner.errors.InputError` naming the path and the fields valid there (exit 2).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import InputError, Problem
from planner.overrides import parse_value
from planner.schema.distributions import Distribution, parse_distribution
from planner.schema.instance import Instance
from planner.schema.paths import valid_fields_at


@dataclass(frozen=True)
class Scenario:
    """One point of a study: a name and the dot-path overrides that define it."""

    name: str
    overrides: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    """The swept parameters only (grid and Monte Carlo paths), for the table's columns."""
    base: str = "base"
    """The named scenario of the instance it starts from (``--scenario``), or ``base``."""


@dataclass(frozen=True)
class StudySpec:
    """Parsed ``--set`` options: fixed overrides, grid dimensions, distributions."""

    fixed: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    distributions: dict[str, Distribution] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return [*self.grid, *self.distributions]


def _split_values(text: str) -> list[str]:
    """Split a grid on top-level commas (commas inside [], {} or () stay)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [v.strip() for v in out]


def _not_finite(value: Any) -> bool:
    """A value that reads as nan or +-inf: a float, or text such as ``nan``, ``inf``, ``1e999`` (YAML reads those as text)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def parse_sets(items: list[str] | tuple[str, ...], *, source: str = "--set") -> StudySpec:
    """Parse ``PATH=VALUES`` strings (see the module docstring)."""
    fixed: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    dists: dict[str, Distribution] = {}
    problems: list[Problem] = []
    for item in items:
        if "=" not in item:
            problems.append(Problem(source, item, "expected PATH=VALUES", "e.g. --set services.chat.traffic.rate_multiplier=0.5,1,2"))
            continue
        path, text = item.split("=", 1)
        path = path.strip()
        if not path or any(not p for p in path.split(".")):
            problems.append(Problem(source, path or item, "empty dot-path or empty segment", "e.g. services.chat.traffic.rate_multiplier"))
            continue
        if path in fixed or path in grid or path in dists:
            problems.append(Problem(source, path, "given twice", "give each path once, with all its values: PATH=1,2,4"))
            continue
        text = text.strip()
        if text.startswith("dist:"):
            try:
                dists[path] = parse_distribution(text[len("dist:"):])
            except ValueError as exc:
                problems.append(Problem(source, path, str(exc), "e.g. dist:lognormal(1.5,0.3); see `planner sweep --help`"))
            continue
        values = [parse_value(v) for v in _split_values(text)] if not text.startswith("[") else [parse_value(text)]
        if any(v is None or v == "" for v in values):
            problems.append(Problem(source, path, f"empty value in {text!r}", "give values separated by commas, e.g. 0.5,1,2"))
            continue
        bad = [v for v in values if _not_finite(v)]
        if bad:  # the schema's bounds read 'nan' as a number out of range ("should be <= 10000 (got 'nan')")
            problems.append(Problem(source, path, f"{bad[0]!r} is not a finite number", f"give finite numbers, e.g. {path}=0.5,1,2"))
            continue
        if len(values) == 1:
            fixed[path] = values[0]
        else:
            grid[path] = values
    if problems:
        raise InputError(problems)
    return StudySpec(fixed=fixed, grid=grid, distributions=dists)


def check_paths(raw: dict[str, Any], paths: list[str], *, file: str) -> None:
    """Every path must name a field of the instance: one error naming each bad path and the valid fields."""
    problems: list[Problem] = []
    for path in paths:
        ok, where, valid = valid_fields_at(Instance, raw, path.split("."))
        if not ok:
            bad = path.split(".")[len(where.split(".")) if where != "(top level)" else 0]
            problems.append(Problem(file, path, f"{bad!r} is not a field at {where}",
                                    f"valid there: {', '.join(valid) if valid else '(none)'}"))
    if problems:
        raise InputError(problems)


def check_values(raw: dict[str, Any], spec: StudySpec, *, file: str) -> None:
    """Validate every grid value and distribution draw range once against the schema."""
    from planner.overrides import apply_overrides
    from planner.schema.instance import Instance
    from planner.validation import validate_mapping

    problems: list[Problem] = []
    trials: list[dict[str, Any]] = [dict(spec.fixed)] if spec.fixed else []
    for path, values in spec.grid.items():
        trials += [{**spec.fixed, path: v} for v in values]
    for path, dist in spec.distributions.items():
        lo, hi = dist.support_probe()
        trials += [{**spec.fixed, path: lo}, {**spec.fixed, path: hi}]
    seen: set[str] = set()
    base = {k: v for k, v in raw.items() if k != "scenarios"}
    for trial in trials:
        try:
            validate_mapping(Instance, apply_overrides(base, trial, source=file), file)
        except InputError as exc:
            for p in exc.problems:
                key = f"{p.path}|{p.message}"
                if key not in seen:
                    seen.add(key)
                    value = ", ".join(f"{k}={v!r}" for k, v in trial.items() if k not in spec.fixed or len(trial) == len(spec.fixed))
                    problems.append(Problem(file, p.path, f"{p.message} (with {value})", p.fix))
    if problems:
        raise InputError(problems)


def expand(spec: StudySpec, *, bases: dict[str, dict[str, Any]] | None = None, monte_carlo: int = 0, seed: int = 0) -> list[Scenario]:
    """Scenarios: each base × the grid's cartesian product × the Monte Carlo draws.

    ``bases`` maps a name to overrides applied first (named scenarios of the instance);
    default: the instance itself (``{"base": {}}``). A path the study sets replaces a base's own value
    of it, and the scenario's name then says "(its LEAF replaced)". Draws use ``numpy.random.default_rng(seed)``,
    one independent stream per path in sorted order, so adding a path never changes the
    draws of another.
    """
    if spec.distributions and monte_carlo <= 0:
        raise InputError(Problem("--set", next(iter(spec.distributions)), "a distribution needs --monte-carlo N (N > 0) draws",
                                 "add --monte-carlo 100, or give grid values instead"))
    bases = bases or {"base": {}}
    grid_paths = list(spec.grid)
    combos = list(itertools.product(*(spec.grid[p] for p in grid_paths))) if grid_paths else [()]
    draws: list[dict[str, Any]] = [{}]
    if spec.distributions:
        seq = np.random.SeedSequence(seed)
        names = sorted(spec.distributions)
        streams = dict(zip(names, seq.spawn(len(names)), strict=True))
        columns = {p: spec.distributions[p].sample(np.random.default_rng(streams[p]), monte_carlo) for p in names}
        draws = [{p: float(columns[p][k]) for p in names} for k in range(monte_carlo)]
    out: list[Scenario] = []
    study_paths = set(spec.fixed) | set(grid_paths) | set(draws[0])
    for bname, boverrides in bases.items():
        # a named base whose own value of a path --set replaces is no longer that scenario: its name says so
        # ("growth-2x rate_multiplier=0.5" ran at 0.5, the same as "base rate_multiplier=0.5", not at 2 x 0.5)
        replaced = sorted(p.rsplit(".", 1)[-1] for p in boverrides if p in study_paths)
        shown = f"{bname} (its {', '.join(replaced)} replaced)" if replaced else bname
        for combo in combos:
            for k, draw in enumerate(draws):
                params = dict(zip(grid_paths, combo, strict=True)) | draw
                parts = [shown] if len(bases) > 1 or not params else []
                parts += [f"{p.rsplit('.', 1)[-1]}={v:g}" if isinstance(v, float) else f"{p.rsplit('.', 1)[-1]}={v}"
                          for p, v in zip(grid_paths, combo, strict=True)]
                if spec.distributions:
                    parts.append(f"draw{k}")
                out.append(Scenario(name=" ".join(parts) or shown, overrides={**boverrides, **spec.fixed, **params}, params=params,
                                    base=bname))
    return out


def with_forecasts(spec: StudySpec, forecasts: dict[str, str], *, monte_carlo: int) -> StudySpec:
    """``spec`` with the instance's ``forecasts`` as its distributions, when Monte Carlo draws are
    asked for and no ``--set`` gives a distribution (a path fixed or gridded by ``--set`` keeps its values)."""
    if monte_carlo <= 0 or spec.distributions or not forecasts:
        return spec
    given = set(spec.fixed) | set(spec.grid)
    dists = {p: parse_distribution(t.strip()[len("dist:"):] if t.strip().startswith("dist:") else t.strip())
             for p, t in forecasts.items() if p not in given}
    return StudySpec(fixed=dict(spec.fixed), grid=dict(spec.grid), distributions=dists)
