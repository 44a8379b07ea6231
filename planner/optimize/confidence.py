"""Verdict confidence: where, along prefill time, decode step time and traffic, the verdict changes,
against the performance model's error band (issue 13 item 7, issue 24 item 2).

Found by solving
----------------
Every evaluation is a re-solve by the path ``planner sweep`` takes for a scenario
(:func:`planner.optimize.resolve.confidence_winner`: :func:`planner.optimize.resolve.summarize`
with ``planner solve``'s settings — the analytic check and tightening, and the peak simulation with
its tightening when the instance's ``options.verify`` is on), so a statement "traffic ×1.19 flips it"
is what ``planner solve`` itself gives at that change. The changes searched (:func:`scaled_tables`):

- ``prefill_time`` ×m: every prefill point's instance-seconds and own TTFT ×m (a unified point's
  instance-seconds by its prefill share, ``φ m + (1 − φ)``);
- ``decode_step_time`` ×m: decode points' instance-seconds ×m (a unified point's by ``1 − φ``);
- ``traffic`` ×m: every service's mean and peak rates ×m (``rate_multiplier``; the operating points do
  not change, so the built model is re-used and only its rate parameters and caps are updated).

Search, per dimension and in both directions: the winner on the grid :data:`GRID` (and its inverses;
traffic :data:`TRAFFIC_GRID`), then every pair of neighbouring grid points with different winners is
bisected geometrically (midpoint ``√(lo·hi)``, as ``planner sweep --crossover`` does,
:func:`planner.studies.sweep.crossovers`) until ``hi / lo − 1 ≤`` :data:`PRECISION`. Every change
found is recorded (``VerdictFlip.changes``), not only the nearest: the winner can flip and flip back
(enterprise-chat's traffic: disaggregated up to ×1.18, shared ×1.19–×1.29, disaggregated again from
×1.30). How approximate: the change nearest ×1 on each side is bracketed to ±1 % (:data:`PRECISION`),
the others to ±2 % (:data:`FAR_PRECISION`: each bisection step is a solve); a window narrower than
the grid step (10 % at ×1.1, ×1.5 at the ends of the traffic range) can be missed, and the method
says so.

Cost: tens of solves. Each is memoised on its multipliers; traffic re-uses one built model; a perf
multiplier builds a model for its scaled table.

Error band
----------
``robust`` compares the nearest prefill / decode change with the performance model's validated
error for the plans' devices and engine: a per-(device, engine) band recorded with the calibration
when there is one (``error_band`` input; ``CapacityTables.meta['perf_error_band']``), else ±25 %
and the summary says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from planner.schema.plan import (
    ConfidenceDimension,
    PlanResult,
    VerdictConfidence,
    VerdictFlip,
    WinnerChange,
)

DEFAULT_ERROR_BAND = 0.25
"""Relative error assumed for an uncalibrated performance model (issue 13: ±25 %)."""
PRECISION = 0.01
"""Relative width of the bisection bracket around the change of winner nearest ×1 on each side."""
FAR_PRECISION = 0.02
"""Relative width of the bracket around the other changes (listed, bisected less: each step is a solve)."""
GRID: tuple[float, ...] = (1.1, 1.25, 1.5, 2.0)
"""Multipliers above 1 tried for prefill and decode time (and their inverses), before bisecting."""
TRAFFIC_GRID: tuple[float, ...] = (1.1, 1.25, 1.5, 2.0, 3.0, 4.0)
"""Traffic multipliers above 1 tried (and their inverses)."""

WinnerAt = Callable[[float, float, float], str]
"""``(m_prefill, m_decode, m_traffic) -> winning architecture``: a re-solve."""


def bisect_flip(winner: Callable[[float], str], lo: float, hi: float, w_lo: str, precision: float = PRECISION,
                max_iter: int = 40) -> tuple[float, float, str]:
    """Geometric bisection between ``lo`` (where ``w_lo`` wins) and ``hi`` (where another wins), as
    :func:`planner.studies.sweep.crossovers` bisects: returns ``(lo, hi, winner at hi)`` with
    ``hi / lo − 1 ≤ precision`` (``lo`` and ``hi`` may be given in either order)."""
    w_hi = winner(hi)
    it = 0
    while abs(hi / lo - 1.0) > precision and it < max_iter:
        mid = math.sqrt(lo * hi)
        w = winner(mid)
        if w == w_lo:
            lo = mid
        else:
            hi, w_hi = mid, w
        it += 1
    return lo, hi, w_hi


def changes_along(winner: Callable[[float], str], grid: tuple[float, ...], precision: float = PRECISION,
                  far_precision: float = FAR_PRECISION) -> list[WinnerChange]:
    """Every change of winner along one dimension: ``winner`` on ``1``, ``grid`` and the inverses of
    ``grid``; each neighbouring pair with different winners bisected (:func:`bisect_flip`): the change
    nearest 1 on each side to ``precision``, the others to ``far_precision``. In increasing multiplier."""
    points = sorted({1.0, *grid, *(1.0 / g for g in grid)})
    wins = [winner(m) for m in points]
    pairs = [(k, k + 1) for k in range(len(points) - 1) if wins[k] != wins[k + 1]]
    above = [p for p in pairs if points[p[0]] >= 1.0]
    below = [p for p in pairs if points[p[1]] <= 1.0]
    nearest = {above[0] if above else None, below[-1] if below else None}
    out: list[WinnerChange] = []
    for a, b in pairs:
        if points[b] <= 1.0:  # below 1: bisect from the side nearer 1, where the base winner's neighbour wins
            hi, lo, w_lo = bisect_flip(winner, points[b], points[a], wins[b], precision if (a, b) in nearest else far_precision)
            out.append(WinnerChange(low=lo, high=hi, winner_low=w_lo, winner_high=wins[b]))
        else:
            lo, hi, w_hi = bisect_flip(winner, points[a], points[b], wins[a], precision if (a, b) in nearest else far_precision)
            out.append(WinnerChange(low=lo, high=hi, winner_low=wins[a], winner_high=w_hi))
    return out


def nearest_changes(changes: list[WinnerChange]) -> tuple[float | None, str | None, float | None, str | None]:
    """(multiplier above 1 where the base winner first stops winning, who wins there, the same below 1, who wins there)."""
    up = next(((c.high, c.winner_high) for c in changes if c.low >= 1.0), (None, None))
    down = next(((c.low, c.winner_low) for c in reversed(changes) if c.high <= 1.0), (None, None))
    return up[0], up[1], down[0], down[1]


def segments_text(changes: list[WinnerChange], low: float, high: float) -> str:
    """"disaggregated up to ×1.18, shared ×1.19–×1.29, disaggregated from ×1.30": who wins where."""
    if not changes:
        return ""
    parts = [f"{changes[0].winner_low} up to ×{_x(changes[0].low)}"]
    for a, b in zip(changes, changes[1:], strict=False):
        parts.append(f"{a.winner_high} ×{_x(a.high)}–×{_x(b.low)}")
    parts.append(f"{changes[-1].winner_high} from ×{_x(changes[-1].high)}")
    return ", ".join(parts) + f" (searched ×{_x(low)}–×{_x(high)})"


def _x(m: float) -> str:
    return f"{m:.3g}" if m < 10 else f"{m:,.0f}"


def error_band_for(result: PlanResult, bands: Mapping[str, float] | None,
                   sources: Mapping[str, str] | None = None) -> tuple[float, str]:
    """The band (± share) for the devices of the feasible plans, and where it comes from.

    ``bands``: per device (or ``device/engine``) the validated relative error; the widest over the
    plans' devices is used. ``sources``: per key, how that band was validated and on how many rows
    (:func:`planner.perf.calibration.error_band`), quoted beside it; a band whose source says "not
    validated" makes the whole quote "not validated". Without one: :data:`DEFAULT_ERROR_BAND`, and the
    source says so."""
    devices = sorted({p.device for a in result.architectures.values() if a.feasible for p in a.pools})
    found = {d: float(v) for d, v in (bands or {}).items() if d in devices or d.split("/")[0] in devices}
    if found and all(any(k == d or k.split("/")[0] == d for k in found) for d in devices):
        worst = max(found.values())
        if sources is None:
            return worst, "validated error of the calibration (" + ", ".join(f"{k} ±{100 * v:.0f} %" for k, v in sorted(found.items())) + ")"
        label = ("error band of the performance model, not validated" if any(str(sources.get(k, "")).startswith("not validated") for k in found)
                 else "out-of-sample error of the calibration")
        return worst, f"{label} (" + "; ".join(f"{k} ±{100 * v:.0f} %: {sources.get(k, 'source not recorded')}" for k, v in sorted(found.items())) + ")"
    return DEFAULT_ERROR_BAND, (f"±{100 * DEFAULT_ERROR_BAND:.0f} % assumed: no validated error band recorded for "
                                + (", ".join(devices) or "these devices"))


def scaled_tables(tables: Any, m_pf: float = 1.0, m_dec: float = 1.0, m_rate: float = 1.0) -> Any:
    """``tables`` (:class:`~planner.schema.capacity.CapacityTables`) with prefill time ×``m_pf``, decode
    step time ×``m_dec`` and traffic ×``m_λ``: each point's instance-seconds by ``φ m_pf + (1 − φ)
    m_dec`` (module docstring); a prefill point's own TTFT (its service time) by ``m_pf``, and it
    becomes infeasible past its service's TTFT target. The exact search re-solves these tables
    (utilisation caps recomputed from the scaled service times by :func:`planner.optimize.prepare.prepare`).

    Not rescaled: decode and unified points' TPOT and a unified point's TTFT. Their batch or chunk
    was chosen to meet the targets; a slower device would run a smaller batch or chunk (more
    instance-seconds, which this scaling under-counts) rather than miss — marking them infeasible
    instead makes every plan infeasible at the first percent (measured on enterprise-chat)."""
    from dataclasses import replace

    pts = tables.points.copy()
    role = pts["role"].astype(str).to_numpy()
    col = {c: (pts[c].astype(float).to_numpy() if c in pts.columns else np.full(len(pts), np.nan))
           for c in ("mean_step_ms", "decode_only_step_ms")}
    with np.errstate(divide="ignore", invalid="ignore"):
        phi_u = np.clip(1.0 - col["decode_only_step_ms"] / col["mean_step_ms"], 0.0, 1.0)
    phi = np.where(role == "prefill", 1.0, np.where(role == "decode", 0.0, np.nan_to_num(phi_u, nan=0.5)))
    pts["instance_seconds_per_request"] = pts["instance_seconds_per_request"].astype(float) * (phi * m_pf + (1 - phi) * m_dec)
    pts["ttft_ms"] = pts["ttft_ms"].astype(float) * np.where(role == "prefill", m_pf, 1.0)
    targets = tables.demand.set_index(["service", "bucket"])["ttft_target_ms"]
    t = targets.reindex(pd.MultiIndex.from_arrays([pts["service"], pts["bucket"]])).to_numpy(float)
    late = (pts["ttft_ms"].to_numpy(float) > t) & (role == "prefill")
    pts["feasible"] = pts["feasible"].astype(bool) & ~late
    demand = tables.demand.copy()
    for c in ("rate_mean_per_s", "rate_peak_per_s"):  # as planner.optimize.resolve.scale_rates, every service
        demand[c] = demand[c].astype(float) * float(m_rate)
    return replace(tables, points=pts, demand=demand)


def _pct(m: float) -> str:
    return f"{100 * abs(m - 1):.0f} %"


_WORDS = {"prefill_time": "prefill", "decode_step_time": "decode steps", "traffic": "traffic"}


def verdict_confidence(result: PlanResult, exact: WinnerAt, *, error_bands: Mapping[str, float] | None = None,
                       band_sources: Mapping[str, str] | None = None, parallel: bool = False) -> VerdictConfidence:
    """How robust ``result``'s verdict is (module docstring): ``exact`` is the re-solve
    (:func:`planner.optimize.resolve.confidence_winner`), evaluated on the grids and bisected. ``parallel``: the
    dimensions searched on two cores (:func:`planner.forked.fork_map`; traffic, the longest grid, here, prefill and
    decode time on the other): the same changes when every evaluation is independent of the ones before it, as
    :func:`~planner.optimize.resolve.confidence_winner`'s are (a fresh model per multiplier)."""
    v = result.verdict
    band, source = error_band_for(result, error_bands, band_sources)
    buckets: dict[str, int] = {}
    for d in result.capacity.demand:
        buckets[str(d["service"])] = buckets.get(str(d["service"]), 0) + 1
    method = ("re-solving, as planner sweep does, the capacity table with prefill time, decode step time or traffic scaled "
              "(planner.optimize.confidence.scaled_tables; the analytic check, the peak simulation when options.verify, "
              f"and their tightening run at each point); grid ×{', ×'.join(f'{g:g}' for g in GRID)} and inverses "
              f"(traffic ×{', ×'.join(f'{g:g}' for g in TRAFFIC_GRID)} and inverses), every step whose winner differs "
              f"bisected to ±{100 * PRECISION:g} % (the change nearest ×1 on each side; the others to ±{100 * FAR_PRECISION:g} %); "
              "a window narrower than a grid step can be missed")
    from planner.optimize.verdict import meets_in_simulation

    ok = [a for a in result.architectures.values() if a.feasible and a.costs is not None and meets_in_simulation(a)]
    if v is None or v.winner is None or len(ok) < 2 or v.winner not in {a.architecture for a in ok}:
        why = "only one architecture has a plan that meets its targets" if v is not None and v.winner else "no feasible plan"
        return VerdictConfidence(robust=None, summary=f"not assessed: {why}", error_band=band, error_band_source=source,
                                 method=method, buckets=buckets)
    base = exact(1.0, 1.0, 1.0)
    if base != v.winner:
        return VerdictConfidence(robust=None, summary=f"not assessed: re-solving ranks {base} first (the verdict names {v.winner}; "
                                 "a tie within the solver's gap)", error_band=band, error_band_source=source, method=method,
                                 buckets=buckets)
    dims: list[tuple[ConfidenceDimension, Callable[[float], str], tuple[float, ...]]] = [
        ("prefill_time", lambda m: exact(m, 1.0, 1.0), GRID),
        ("decode_step_time", lambda m: exact(1.0, m, 1.0), GRID),
        ("traffic", lambda m: exact(1.0, 1.0, m), TRAFFIC_GRID),
    ]
    if parallel:
        from planner.forked import fork_map

        halves = [dims[2:], dims[:2]]
        found = fork_map(lambda half: [changes_along(fn, grid) for _, fn, grid in half], halves)
        along = {name: ch for half, res in zip(halves, found, strict=True) for (name, _, _), ch in zip(half, res, strict=True)}
    else:
        along = {name: changes_along(fn, grid) for name, fn, grid in dims}
    flips: list[VerdictFlip] = []
    for name, _fn, grid in dims:
        changes = along[name]
        up, w_up, down, w_down = nearest_changes(changes)
        near = min((m for m in (up, down) if m is not None), key=lambda m: abs(math.log(m)), default=None)
        after = w_up if near is not None and near == up else w_down
        within = name != "traffic" and near is not None and abs(near - 1.0) <= band
        low, high = 1.0 / grid[-1], grid[-1]
        flips.append(VerdictFlip(dimension=name, slower_or_more=up, faster_or_less=down, winner_after=after,
                                 searched_low=low, searched_high=high, precision=PRECISION, within_error=within,
                                 changes=changes, note=segments_text(changes, low, high)))
    near_perf = [f for f in flips if f.dimension != "traffic" and f.within_error]
    robust = not near_perf
    if robust:
        summary = f"robust: no flip within ±{100 * band:.0f} % prefill or decode time ({source})"
    else:
        parts = []
        for f in sorted(near_perf, key=lambda f: min(abs(math.log(m)) for m in (f.slower_or_more, f.faster_or_less) if m is not None)):
            cands = [(m, "slower" if m > 1 else "faster") for m in (f.slower_or_more, f.faster_or_less) if m is not None and abs(m - 1) <= band]
            m, word = min(cands, key=lambda c: abs(math.log(c[0])))
            parts.append(f"{_WORDS[f.dimension]} {_pct(m)} {word}")
        summary = f"near thing: flips to {near_perf[0].winner_after} if " + " or ".join(parts) + f" (error band ±{100 * band:.0f} %: {source})"
    for f in flips:
        if f.dimension == "traffic" and not f.changes:
            summary += f"; no traffic flip within ×{_x(f.searched_low)}–×{_x(f.searched_high)}"
        elif f.changes and (f.dimension == "traffic" or f in near_perf or len(f.changes) > 1):
            summary += f"; {_WORDS[f.dimension]}: {f.note}"
    return VerdictConfidence(robust=robust, summary=summary, error_band=band, error_band_source=source, flips=flips, method=method,
                             buckets=buckets)
