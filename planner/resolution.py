"""Length-bucket resolution chosen adaptively (issue 13, Build item 5: stable in resolution).

A service whose traffic is a log is planned over ``traffic.buckets`` length buckets
(:mod:`planner.workload`); each bucket is sized for a conservative representative length, so
the plan's cost — and on close calls the verdict — moves with the bucket count
(code-completion-8b: 4 buckets → disaggregated by 18 %, 8 → shared by 23 %, as issue 13 found).
``planner solve --resolution auto`` refines until the winner's cost settles:

    b₀ = traffic.buckets;  b_{k+1} = min(cap, 2 b_k)

Doubling keeps the bins nested (:mod:`planner.workload.buckets`: the edges of ``b`` buckets are
edges of ``2b``), and the representatives come from one service-wide tail set, so each
refinement only lowers representatives (issue 24 item 0; the earlier ``b + max(2, ⌊b/2⌋)``
steps, 4 → 6 → 9 → 13 → 16, moved edges and could raise them). The cap (16) reached from 4
is 4 → 8 → 16.

solving each resolution on the cheap path (capacity table, MIP, analytic check and tightening;
no peak simulation, no confidence), and stops at the first ``b_k`` whose winner is the previous
resolution's winner and whose cost moved by less than ``tolerance`` (2 %) from it, or at the cap
(:data:`MAX_BUCKETS`; the report then says the cost had not settled). The instance is then
solved in full at the chosen resolution. Every count tried is recorded
(``Verdict.confidence.resolution``), and the bucket count nearest the chosen one whose winner
differs is the verdict's flip in resolution. Services given by ``rate_per_s`` + ``lengths`` or a
``profile`` keep their buckets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import islice
from typing import Any

from planner.optimize.settings import SolveSettings
from planner.optimize.solve import solve_tables
from planner.schema.plan import ResolutionStep, VerdictFlip

MAX_BUCKETS = 16
TOLERANCE = 0.02


def next_buckets(n: int, cap: int = MAX_BUCKETS) -> int:
    return min(cap, 2 * n)


def _step(resolved: Any, settings: SolveSettings, buckets: dict[str, int], capacity_file: str | None) -> ResolutionStep:
    from planner.capacity import build_capacity_tables, read_measured_capacity

    tables = build_capacity_tables(resolved)
    if capacity_file:
        tables = read_measured_capacity(capacity_file, tables)
    res = solve_tables(tables, settings).result
    totals = {a: p.costs.total_usd_per_month for a, p in res.architectures.items() if p.feasible and p.costs is not None}
    w = res.verdict.winner
    return ResolutionStep(buckets=dict(buckets), winner=w, winner_usd_per_month=totals.get(w) if w else None, totals_usd_per_month=totals)


NO_LOG = "resolution fixed: no service's traffic is a log (buckets come from the instance or a profile)"


def _logged(resolved: Any) -> dict[str, int]:
    """Bucket counts of the services whose traffic is a log (the only ones a resolution changes)."""
    return {str(n): int(s.traffic.buckets) for n, s in resolved.instance.services.items() if s.traffic.trace is not None}


def _refinements(resolved: Any, settings: SolveSettings, capacity_file: str | None, cap: int) -> Iterator[tuple[Any, ResolutionStep]]:
    """The instance and its step (:func:`_step` on the cheap path: no peak simulation, no confidence) at the logged
    services' own counts, then at each nested doubling (:func:`next_buckets`) up to ``cap``; solved as consumed."""
    plain = replace(settings, simulation_check=None, confidence="off", extra_notes=())
    buckets = _logged(resolved)
    cur = resolved
    while True:
        yield cur, _step(cur, plain, buckets, capacity_file)
        if max(buckets.values()) >= cap:
            return
        buckets = {s: next_buckets(n, cap) for s, n in buckets.items()}
        cur = resolved.with_overrides({f"services.{s}.traffic.buckets": n for s, n in buckets.items()})


def choose_resolution(resolved: Any, settings: SolveSettings, *, tolerance: float = TOLERANCE, cap: int = MAX_BUCKETS,
                      capacity_file: str | None = None) -> tuple[Any, list[ResolutionStep], str]:
    """The instance at the chosen bucket counts, the steps tried and one sentence saying why it stopped."""
    if not _logged(resolved):
        return resolved, [], NO_LOG
    steps: list[ResolutionStep] = []
    cur = resolved
    why = f"stopped at the cap of {cap} buckets before the cost settled"
    for inst, step in _refinements(resolved, settings, capacity_file, cap):
        prev = steps[-1] if steps else None
        steps.append(step)
        cur = inst
        if prev is not None and step.winner == prev.winner and step.winner_usd_per_month and prev.winner_usd_per_month:
            moved = abs(step.winner_usd_per_month / prev.winner_usd_per_month - 1.0)
            if moved < tolerance:
                why = f"the winner's cost moved {100 * moved:.1f} % (< {100 * tolerance:g} %) from the previous resolution"
                break
    return cur, steps, why


def check_resolution(resolved: Any, settings: SolveSettings, *, capacity_file: str | None = None,
                     refinements: int = 2, cap: int = MAX_BUCKETS) -> tuple[list[ResolutionStep], str]:
    """The bucket-resolution part of ``--confidence exact`` at a fixed resolution (issue 24 item 0: "bucket
    resolution is part of the confidence statement"): the instance on the cheap path (as
    :func:`choose_resolution` solves each count: MIP, analytic check and tightening, no peak simulation) at
    its own counts ``b`` and at ``2b``, ``4b`` (nested refinements, at most ``cap``), and one sentence: the
    largest move of the winner's cost from the plan's own count, and whether the winner changes. The plan
    itself is not changed. Returns ``([], why)`` when no service's traffic is a log."""
    if not _logged(resolved):
        return [], NO_LOG
    steps = [step for _inst, step in islice(_refinements(resolved, settings, capacity_file, cap), refinements + 1)]
    base = steps[0]
    moves = [abs(s.winner_usd_per_month / base.winner_usd_per_month - 1.0) for s in steps[1:]
             if s.winner == base.winner and s.winner_usd_per_month and base.winner_usd_per_month]
    same = all(s.winner == base.winner for s in steps[1:])
    if len(steps) == 1:
        why = f"resolution fixed at the cap of {cap} buckets; no finer count checked"
    elif same:
        why = (f"resolution fixed; at finer counts (analytic, no peak simulation) the winner is the same and its cost moves "
               f"{100 * max(moves, default=0.0):.1f} %")
    else:
        why = "resolution fixed; at a finer count (analytic, no peak simulation) the winner changes"
    return steps, why


def resolution_flip(steps: list[ResolutionStep], final_winner: str | None, why: str, *, chosen: int = -1) -> VerdictFlip:
    """The bucket-resolution entry of the verdict's confidence: the tried count nearest the chosen one
    (``steps[chosen]``: the last for ``--resolution auto``, the first for :func:`check_resolution`) whose
    winner differs (``slower_or_more`` holds that count), and the path in ``note``."""
    path = " → ".join(
        "/".join(str(n) for n in s.buckets.values()) + f" {s.winner or 'none'} ${s.winner_usd_per_month or 0:,.0f}" for s in steps)
    flip = None
    at = chosen % len(steps) if steps else 0
    for s in sorted((s for i, s in enumerate(steps) if i != at), key=lambda s: abs(max(s.buckets.values()) - max(steps[at].buckets.values()))):
        if s.winner != final_winner:
            flip = float(max(s.buckets.values()))
            break
    note = f"bucket resolution: {path}; {why}" + (f"; the verdict differs at {flip:g} buckets" if flip is not None else "")
    return VerdictFlip(dimension="bucket_resolution", slower_or_more=flip, winner_after=None, note=note,
                       searched_low=float(min(min(s.buckets.values()) for s in steps)) if steps else 1.0,
                       searched_high=float(max(max(s.buckets.values()) for s in steps)) if steps else 1.0)
