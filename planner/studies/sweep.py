"""Sweeps: solve many scenarios fast, tidy rows, verdict crossovers by bisection, tornado.

Each worker keeps one :class:`~planner.optimize.resolve.Resolver` per capacity-table
structure (:func:`~planner.optimize.resolve.structure_key`), built from the *unpatched*
table of that structure with big-M headroom for the largest rate ratio of the study, so
every process builds the same model whatever scenarios it happens to get. Scenarios that
change only rates, the price or the budget are re-solved through the persistent HiGHS
interface; others build (and cache) a new model.

Row = one (scenario, architecture): swept parameters, cost by term, total, devices, pools,
$/1M tokens, Wh per 1k tokens, status and gap, and per scenario the winner and its margin
(runner-up total − winner total).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from planner.optimize.resolve import (
    ArchitectureSummary,
    Resolver,
    structure_key,
    summarize,
    winner_of,
)
from planner.schema.capacity import CapacityTables
from planner.schema.plan import COST_TERMS
from planner.studies.source import TableSource
from planner.studies.spec import Scenario

_RESOLVERS: dict[tuple[int, float], Resolver] = {}
"""Per process: resolvers by (structure, headroom)."""
_KEYS: dict[int, tuple[CapacityTables, int]] = {}
"""Per process: structure key by id of an unpatched table (the table is kept alive, so the id is not reused)."""


def _structure_key(tables: CapacityTables) -> int:
    hit = _KEYS.get(id(tables))
    if hit is None or hit[0] is not tables:
        if len(_KEYS) > 256:
            _KEYS.clear()
        hit = (tables, structure_key(tables))
        _KEYS[id(tables)] = hit
    return hit[1]


def solve_scenario(source: TableSource, overrides: dict[str, Any], *, headroom: float = 1.0,
                   exact_rates: bool = True, simulate: bool = True) -> tuple[dict[str, ArchitectureSummary], bool]:
    """Summaries of every architecture for one scenario (re-using this process's resolvers); ``exact_rates``
    as :meth:`planner.studies.source.TableSource.tables_and_settings`. ``simulate=False`` drops the peak
    simulation's check (and its tightening) from the settings: the analytic plan, whose cost is a lower bound of
    the simulated one (the simulated loop only tightens caps), which ``planner budget`` uses to skip simulations."""
    base, tables, settings = source.tables_and_settings(overrides, exact_rates=exact_rates)
    if not simulate:
        settings = replace(settings, simulation_check=None)
    # the same scenario asked again (only rates, price or budget patched, to equal values): its summaries
    # (the rate headroom sizes big-M only, so it does not change the optimum)
    memo = None if source.split(overrides)[0] else (
        tables.demand[["rate_mean_per_s", "rate_peak_per_s"]].to_numpy(float).tobytes(),
        float(tables.costs.electricity_usd_per_kwh), settings.budget_usd_per_month, settings.simulation_check is None)
    if memo is not None and memo in source.solved:
        return source.solved[memo]
    key = (_structure_key(base), float(headroom))
    r = _RESOLVERS.get(key)
    if r is None:
        r = Resolver.create(base, settings, rate_headroom=headroom)
        _RESOLVERS[key] = r
    out = summarize(r, tables, settings)
    if memo is not None:
        if len(source.solved) > 4096:
            source.solved.clear()
        source.solved[memo] = out
    return out


def best_total(summaries: dict[str, ArchitectureSummary]) -> float:
    w = winner_of(summaries)
    return float(summaries[w].total_usd_per_month or math.nan) if w else math.nan


def rows_for(scenario: Scenario, summaries: dict[str, ArchitectureSummary], reused: bool) -> list[dict[str, Any]]:
    winner = winner_of(summaries)
    totals = sorted(s.total_usd_per_month for s in summaries.values() if s.feasible and s.total_usd_per_month is not None)
    margin = totals[1] - totals[0] if len(totals) > 1 else 0.0
    out = []
    for arch, s in summaries.items():
        row: dict[str, Any] = {"scenario": scenario.name, **scenario.params, "architecture": arch, "feasible": s.feasible,
                               "status": s.status, "gap": s.gap, "total_usd_per_month": s.total_usd_per_month}
        for t in COST_TERMS:
            row[t] = s.costs.get(t) if s.feasible else None
        row.update({
            "devices": sum(s.devices.values()),
            "device_mix": ", ".join(f"{d}:{n}" for d, n in sorted(s.devices.items())),
            "pools": ", ".join(f"{p}x{n}" for p, n in sorted(s.instances.items())),
            "tokens_per_month": s.tokens_per_month, "usd_per_million_tokens": s.usd_per_million_tokens,
            "energy_wh_per_1k_tokens": s.energy_wh_per_1k_tokens, "winner": winner, "is_winner": arch == winner,
            "margin_usd_per_month": margin, "model_reused": reused, "solve_s": s.solve_s,
        })
        out.append(row)
    return out


def run_chunk(source: TableSource, scenarios: list[Scenario], headroom: float, order: list[int] | None = None) -> list[dict[str, Any]]:
    """Worker entry point (picklable): rows of a chunk of scenarios. Scenarios of the chunk that differ only in
    the electricity price are solved by price intervals (:mod:`planner.studies.price_interval`: the ends of
    the range, then only where two prices' verify-and-tighten loops took different paths). ``order``: each
    scenario's place in the study, carried in the rows as ``_order`` (:func:`run_sweep` sorts by it)."""
    from planner.optimize.trace import recording
    from planner.studies.price_interval import Solved, price_groups, solve_by_intervals
    from planner.studies.source import PRICE_PATH

    results: dict[int, tuple[dict[str, ArchitectureSummary], bool]] = {}
    for group in price_groups(source, scenarios):
        if len(group) < 3:
            for i in group:
                results[i] = solve_scenario(source, scenarios[i].overrides, headroom=headroom)
            continue

        def solve(k: int, group: list[int] = group) -> Solved:
            with recording() as log:
                summaries, reused = solve_scenario(source, scenarios[group[k]].overrides, headroom=headroom)
            return summaries, reused, list(log)

        prices = [float(scenarios[i].overrides[PRICE_PATH]) for i in group]
        results.update(zip(group, solve_by_intervals(prices, solve), strict=True))
    rows: list[dict[str, Any]] = []
    for i, sc in enumerate(scenarios):
        summaries, reused = results[i]
        mine = rows_for(sc, summaries, reused)
        if order is not None:
            for r in mine:
                r["_order"] = order[i]
        rows += mine
    return rows


def study_headroom(source: TableSource, scenarios: Iterable[Scenario]) -> float:
    """Largest rate ratio (scenario multiplier / base multiplier) of the study, at least 1."""
    h = 1.0
    for sc in scenarios:
        _, patches = source.split(sc.overrides)
        for r in source.rate_ratios(patches).values():
            h = max(h, r)
    return h


PRICE_PIECE = 16
"""Largest run of prices one chunk solves by intervals (a longer price range is cut into consecutive pieces
of this many, whatever the number of processes, so a row does not depend on ``jobs``)."""


def _chunks(source: TableSource, scenarios: list[Scenario], size: int) -> list[list[int]]:
    """Chunks of scenario indices: scenarios that differ only in the electricity price together, in price
    order, at most :data:`PRICE_PIECE` a chunk (:mod:`planner.studies.price_interval` solves them by
    intervals); every other scenario ``size`` at a time in study order."""
    from planner.studies.price_interval import price_groups

    chunks: list[list[int]] = []
    rest: list[int] = []
    for group in price_groups(source, scenarios):
        if len(group) < 3:
            rest += group
            continue
        pieces = math.ceil(len(group) / PRICE_PIECE)
        step = math.ceil(len(group) / pieces)
        chunks += [group[i:i + step] for i in range(0, len(group), step)]
    rest.sort()
    return chunks + [rest[i:i + size] for i in range(0, len(rest), size)]


@dataclass
class SweepResult:
    rows: pd.DataFrame
    crossovers: pd.DataFrame = field(default_factory=pd.DataFrame)
    tornado: pd.DataFrame = field(default_factory=pd.DataFrame)


def run_sweep(source: TableSource, scenarios: list[Scenario], *, jobs: int = 1, executor: str | None = None,
              progress: Callable[[int], None] | None = None, chunk_size: int | None = None) -> pd.DataFrame:
    """Solve every scenario; rows in scenario order whatever the executor.

    ``executor``: None — local processes (``jobs`` of them; 1 = in this process);
    ``"local-dask"`` — a Dask LocalCluster with ``jobs`` workers; ``"tcp://host:port"`` — an
    existing Dask scheduler (workers must be able to import ``planner`` and read the
    instance's trace files). On several processes the chunks are handed out heaviest first — by
    their largest rate ratio (:func:`study_headroom`): more traffic, larger pools, longer peak
    simulations (issue 27: ×16 simulates in ~1.5 s, ×0.4 in ~0.4 s) —, so no process is left alone
    with a heavy chunk at the end.
    """
    from planner.studies.executors import map_chunks

    headroom = study_headroom(source, scenarios)
    size = chunk_size or max(1, min(10, math.ceil(len(scenarios) / max(1, 4 * jobs))))
    chunks = _chunks(source, scenarios, size)
    # the heaviest chunks first (longest-processing-time order), so the last chunks to finish are light
    # ones and no process idles long at the end; the rows come back in scenario order whatever the order
    heavy = [study_headroom(source, [scenarios[i] for i in c]) for c in chunks]
    order = sorted(range(len(chunks)), key=lambda k: (-heavy[k], chunks[k][0])) if jobs > 1 or executor else \
        sorted(range(len(chunks)), key=lambda k: chunks[k][0])
    results = map_chunks(run_chunk, [(source, [scenarios[i] for i in chunks[k]], headroom, chunks[k]) for k in order], jobs=jobs,
                         executor=executor, progress=(lambda j: progress(len(chunks[order[j]]))) if progress else None)
    rows = [r for res in results for r in res]
    rows.sort(key=lambda r: r["_order"])  # stable: a scenario's architectures keep their order
    return pd.DataFrame(rows).drop(columns="_order", errors="ignore")


def crossovers(source: TableSource, rows: pd.DataFrame, path: str, *, base_overrides: dict[str, Any] | None = None,
               rel_tol: float = 0.01, max_iter: int = 30, headroom: float = 1.0,
               scenarios: Iterable[Scenario] | None = None) -> pd.DataFrame:
    """Where the winner flips along ``path``: bisection between grid points with different winners.

    Scenarios are grouped by everything but ``path`` — with ``scenarios`` (the study the rows
    came from) by their whole overrides: the named scenario they are based on (``--scenario``),
    every fixed ``--set`` and the other swept parameters; without, by the other swept columns
    of ``rows`` on top of ``base_overrides``. In each group the values of ``path`` are sorted;
    each adjacent pair with different winners is bisected (geometric midpoint, as multipliers are
    scale parameters) with the group's overrides and ``path`` at the midpoint, until
    ``high / low − 1 ≤ rel_tol``. The result brackets the flip: ``winner_low`` wins at ``low``,
    ``winner_high`` at ``high``; ``base`` names the scenario's base when there are several.
    """
    if path not in rows.columns:
        return pd.DataFrame()
    per = rows.drop_duplicates("scenario")
    others = [c for c in per.columns if c not in ("scenario", path) and c in _param_columns(rows)]
    by_name = {sc.name: sc for sc in scenarios} if scenarios is not None else {}
    groups: dict[str, tuple[dict[str, Any], list[tuple[float, Any]]]] = {}
    for rec in per.to_dict("records"):
        sc = by_name.get(str(rec["scenario"]))
        if sc is not None:
            context = {k: v for k, v in sc.overrides.items() if k != path}
        else:
            context = {**(base_overrides or {}), **{c: rec[c] for c in others if not _missing(rec[c])}}
            context.pop(path, None)
        key = repr(sorted(context.items(), key=lambda kv: kv[0]))
        groups.setdefault(key, (context, []))[1].append((float(rec[path]), rec["winner"]))
    bases = {sc.base for sc in by_name.values()}
    out = []
    for context, points in groups.values():
        points.sort(key=lambda t: t[0])
        fixed = {c: context[c] for c in others if c in context}
        for k in range(len(points) - 1):
            (lo, wlo), (hi, whi) = points[k], points[k + 1]
            if wlo == whi:
                continue
            it = 0
            while hi / lo - 1 > rel_tol and it < max_iter:
                mid = math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2
                summaries, _ = solve_scenario(source, {**context, path: mid}, headroom=headroom)
                w = winner_of(summaries)
                if w == wlo:
                    lo = mid
                else:
                    hi, whi = mid, w
                it += 1
            row = {**fixed, "path": path, "low": lo, "high": hi, "winner_low": wlo, "winner_high": whi, "iterations": it}
            if len(bases) > 1:
                row["base"] = next(sc.base for sc in by_name.values() if {k: v for k, v in sc.overrides.items() if k != path} == context)
            out.append(row)
    return pd.DataFrame(out)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _param_columns(rows: pd.DataFrame) -> list[str]:
    fixed = {"scenario", "architecture", "feasible", "status", "gap", "total_usd_per_month", *COST_TERMS, "devices", "device_mix", "pools",
             "tokens_per_month", "usd_per_million_tokens", "energy_wh_per_1k_tokens", "winner", "is_winner",
             "margin_usd_per_month", "model_reused", "solve_s"}
    return [c for c in rows.columns if c not in fixed]


def tornado(source: TableSource, ranges: dict[str, tuple[Any, Any]], *, base_overrides: dict[str, Any] | None = None,
            headroom: float = 1.0) -> pd.DataFrame:
    """One-at-a-time sensitivity: the cheapest plan's total at each parameter's low and high value.

    Every other parameter stays at the instance's value. Sorted by swing |high − low|.
    """
    base = dict(base_overrides or {})
    base_total = best_total(solve_scenario(source, base, headroom=headroom)[0])
    out = []
    for path, (lo, hi) in ranges.items():
        t_lo = best_total(solve_scenario(source, {**base, path: lo}, headroom=headroom)[0])
        t_hi = best_total(solve_scenario(source, {**base, path: hi}, headroom=headroom)[0])
        out.append({"path": path, "low": lo, "high": hi, "total_at_low_usd_per_month": t_lo, "total_at_high_usd_per_month": t_hi,
                    "base_total_usd_per_month": base_total, "swing_usd_per_month": abs(t_hi - t_lo)})
    df = pd.DataFrame(out)
    return df.sort_values("swing_usd_per_month", ascending=False, ignore_index=True) if len(df) else df
