"""Verdict confidence: the smallest change in prefill time, decode step time or traffic that flips
the verdict, against the performance model's error band (issue 13, Build item 7).

The cheap path (no MIP, no simulation), so that every ``planner solve`` can afford it
------------------------------------------------------------------------------------
Each architecture's plan keeps its configurations and routing; only its instance counts follow
the work. For a routed share ``r`` (rate ``λ_r`` at peak, share ``x_r``, instance-seconds per
request ``τ_r``, utilisation cap ``ρ_r``) the load it puts on its pool is ``λ_r x_r τ_r / ρ_r``
(the MIP's load constraint, :mod:`planner.optimize.model`). Under multipliers ``m_pf`` on prefill
time, ``m_dec`` on decode step time and ``m_λ`` on traffic:

    load_r(m) = m_λ · λ_r x_r τ_r / ρ_r · (φ_r m_pf + (1 − φ_r) m_dec)

with ``φ_r`` the prefill share of the point's work: 1 for prefill points, 0 for decode points and
``1 − decode_only_step_ms / mean_step_ms`` for a unified point (the extra time its chunk-carrying
steps spend on prompt chunks). A pool ``p`` with ``n_p`` instances (``k`` spares) and load
``L_p = Σ load_r`` is re-sized to

    n_p(m) = max(1, (n_p − k) + ⌈L_p(m)⌉ − ⌈L_p(1)⌉) + k,

which is ``n_p`` at ``m = 1`` (any slack the plan had — KV, integrality — is kept), and its cost
scales with its instances: ``cost_p(m) = cost_p · n_p(m) / n_p``. Costs not attributed to a pool
(per-device-type operations, the CPU pool) stay fixed. The winner at ``m`` is the cheapest plan
(ties to the cent go to the simpler architecture, as :mod:`planner.optimize.verdict` ranks them).

Search: along each dimension (the others at 1) the winner is evaluated on a geometric grid from 1
out to ``×2`` / ``×0.5`` (traffic ``×4`` / ``×0.25``); the first grid step whose winner differs is
refined by geometric bisection (the rule of ``planner sweep --crossover``,
:func:`planner.studies.sweep.crossovers`: midpoint ``√(lo·hi)`` until ``hi / lo − 1 ≤ precision``).

How accurate
------------
The bisection brackets the flip of this cost model to ±``precision`` (0.5 %). The cost model is an
approximation of re-solving: it holds the configurations, routing and utilisation caps fixed
(re-optimising can only make each plan cheaper, so both costs are upper bounds and the flip can
lie either side), ignores busy energy's growth with the work (a few % of a plan's cost) and does
not re-check latency feasibility (a slower device may need another configuration, which only
raises that plan's cost). Measured on enterprise-chat against ``--confidence exact`` (re-solves of
:func:`scaled_tables`, bisected to ±1 %), fast / exact: prefill slower ×1.071 / ×1.118, prefill
faster ×0.58 / ×0.79, decode faster ×0.75 / ×0.84, decode slower none within ×2 / ×1.47, traffic
×1.071 / ×1.230 and ×0.84 / ×0.90. So the fast path is off by up to ~20 points of multiplier, most
on the side where re-solving changes configurations and caps (the fast path holds them); both call
enterprise-chat a near thing (fast: prefill 7 % slower; exact: prefill 12 % slower, decode 16 %
faster). ``--confidence exact`` costs tens of solves (22 s CPU on enterprise-chat against ~2 s
for the solve); the fast path ~30 ms. Bucket resolution is not varied here (``planner solve
--resolution auto`` re-solves at finer bucket counts, :mod:`planner.resolution`).

Error band
----------
``robust`` compares the nearest prefill / decode flip with the performance model's validated
error for the plans' devices and engine: a per-(device, engine) band recorded with the calibration
when there is one (``error_band`` input; ``CapacityTables.meta['perf_error_band']``), else ±25 %
and the summary says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from planner.schema.plan import (
    ArchitecturePlan,
    ConfidenceDimension,
    PlanResult,
    VerdictConfidence,
    VerdictFlip,
)

DEFAULT_ERROR_BAND = 0.25
"""Relative error assumed for an uncalibrated performance model (issue 13: ±25 %)."""
PRECISION = 0.005
"""Relative width of the bisection bracket around a flip."""
PERF_RANGE = (0.5, 2.0)
TRAFFIC_RANGE = (0.25, 4.0)
GRID_STEPS = 48
"""Grid points per direction before bisection (a flip between two of them is refined)."""
SIMPLICITY = {"shared": 0, "disaggregated": 1, "hybrid": 2}

_KEY = ["service", "bucket", "role", "config"]


@dataclass(frozen=True)
class ResizedPlan:
    """One plan's pools as arrays for fast re-sizing (module docstring)."""

    architecture: str
    fixed_usd_per_month: float
    pool_cost_usd_per_month: np.ndarray
    instances: np.ndarray
    spares: int
    load_prefill: np.ndarray
    """Per pool: Σ λ x τ φ / ρ at peak (instance-equivalents)."""
    load_decode: np.ndarray

    def cost(self, m_pf: float = 1.0, m_dec: float = 1.0, m_rate: float = 1.0) -> float:
        base = self.load_prefill + self.load_decode
        load = m_rate * (m_pf * self.load_prefill + m_dec * self.load_decode)
        live = self.instances - self.spares
        n = np.maximum(1, live + np.ceil(load - 1e-9) - np.ceil(base - 1e-9)) + self.spares
        n = np.where(base > 0, n, self.instances)
        return float(self.fixed_usd_per_month + np.sum(self.pool_cost_usd_per_month * n / np.maximum(self.instances, 1)))


def resized_plan(plan: ArchitecturePlan, points: pd.DataFrame, spares: int) -> ResizedPlan:
    """The arrays of :class:`ResizedPlan` from a plan and its capacity snapshot's points."""
    assert plan.costs is not None
    names = [p.name for p in plan.pools]
    idx = {n: j for j, n in enumerate(names)}
    cost = np.array([p.cost_usd_per_month for p in plan.pools], dtype=float)
    inst = np.array([p.instances for p in plan.pools], dtype=float)
    lpf, ldec = np.zeros(len(names)), np.zeros(len(names))
    if plan.routing and len(points):
        recs: dict[tuple[str, str, str, str], dict[str, Any]] = {
            (str(d["service"]), str(d["bucket"]), str(d["role"]), str(d["config"])): {str(k): v for k, v in d.items()}
            for d in points.to_dict("records")}
        for r in plan.routing:
            row = recs.get((r.service, r.bucket, str(r.role), r.config))
            if row is None or r.pool not in idx:
                continue
            tau, rho = float(row["instance_seconds_per_request"]), float(row["rho"])
            if not (rho > 0 and tau > 0):
                continue
            load = r.rate_peak_per_s * r.share * tau / rho
            phi = _prefill_share(str(r.role), row)
            lpf[idx[r.pool]] += load * phi
            ldec[idx[r.pool]] += load * (1.0 - phi)
    fixed = plan.costs.total_usd_per_month - float(cost.sum())
    return ResizedPlan(plan.architecture, fixed, cost, inst, spares, lpf, ldec)


def _prefill_share(role: str, row: Any) -> float:
    if role == "prefill":
        return 1.0
    if role == "decode":
        return 0.0
    mean, dec = _num(row.get("mean_step_ms")), _num(row.get("decode_only_step_ms"))
    if mean > 0 and dec > 0:
        return float(min(1.0, max(0.0, 1.0 - dec / mean)))
    return 0.5


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def winner_at(plans: list[ResizedPlan], m_pf: float = 1.0, m_dec: float = 1.0, m_rate: float = 1.0) -> str:
    """The cheapest re-sized plan (ties to the cent go to the simpler architecture)."""
    return min(plans, key=lambda p: (round(p.cost(m_pf, m_dec, m_rate), 2), SIMPLICITY.get(p.architecture, 9))).architecture


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


def nearest_flip(winner: Callable[[float], str], base_winner: str, end: float, steps: int = GRID_STEPS,
                 precision: float = PRECISION) -> tuple[float | None, str | None]:
    """The multiplier nearest 1 (towards ``end``) at which the winner differs from ``base_winner``:
    a geometric grid, then bisection of the first step that flips. ``(None, None)`` when none."""
    return _first_flip(winner, base_winner, (float(end ** (k / steps)) for k in range(1, steps + 1)), precision)


def _first_flip(winner: Callable[[float], str], base_winner: str, grid: Iterable[float],
                precision: float) -> tuple[float | None, str | None]:
    """Walk ``grid`` (multipliers moving away from 1) to the first whose winner differs from
    ``base_winner``, then bisect the step before it; ``(None, None)`` when none flips."""
    prev = 1.0
    for m in grid:
        w = winner(m)
        if w != base_winner:
            _lo, hi, w_hi = bisect_flip(winner, prev, m, base_winner, precision)
            return hi, w_hi
        prev = m
    return None, None


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


def _pct(m: float) -> str:
    return f"{100 * abs(m - 1):.0f} %"


WinnerAt = Callable[[float, float, float], str]
"""``(m_prefill, m_decode, m_traffic) -> winning architecture``: an exact evaluation (a re-solve)."""
EXACT_PRECISION = 0.01
EXACT_GRID = (1.05, 1.1, 1.25, 1.5, 2.0)
"""Multipliers (and their inverses) an exact search tries before bisecting: few, each is a re-solve."""


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


def _exact_nearest_flip(winner: Callable[[float], str], base: str, up: bool) -> tuple[float | None, str | None]:
    return _first_flip(winner, base, (g if up else 1.0 / g for g in EXACT_GRID), EXACT_PRECISION)


def verdict_confidence(result: PlanResult, *, error_bands: Mapping[str, float] | None = None,
                       resolution_flip: VerdictFlip | None = None, exact: WinnerAt | None = None,
                       band_sources: Mapping[str, str] | None = None) -> VerdictConfidence:
    """How robust ``result``'s verdict is (module docstring). Cheap (re-sizing, ~30 ms) unless
    ``exact`` is given: then every evaluation is that function (a re-solve), on a coarser grid
    (:data:`EXACT_GRID`) bisected to ±:data:`EXACT_PRECISION`."""
    v = result.verdict
    band, source = error_band_for(result, error_bands, band_sources)
    buckets: dict[str, int] = {}
    for d in result.capacity.demand:
        buckets[str(d["service"])] = buckets.get(str(d["service"]), 0) + 1
    if exact is None:
        method = (f"re-sizing each plan's pools for scaled work with configurations and routing held "
                  f"(planner.optimize.confidence); geometric grid then bisection to ±{100 * PRECISION:g} %; "
                  "not a re-solve: the flip point is approximate (see the module docstring)")
    else:
        method = (f"re-solving the capacity table with scaled prefill / decode times and traffic (no peak simulation; "
                  f"planner.optimize.confidence.scaled_tables); grid ×{', ×'.join(f'{g:g}' for g in EXACT_GRID)} and inverses, "
                  f"then bisection to ±{100 * EXACT_PRECISION:g} %")
    from planner.optimize.verdict import meets_in_simulation

    ok = [a for a in result.architectures.values() if a.feasible and a.costs is not None and meets_in_simulation(a)]
    if v is None or v.winner is None or len(ok) < 2 or v.winner not in {a.architecture for a in ok}:
        why = "only one architecture has a plan that meets its targets" if v is not None and v.winner else "no feasible plan"
        return VerdictConfidence(robust=None, summary=f"not assessed: {why}", error_band=band, error_band_source=source,
                                 method=method, flips=[resolution_flip] if resolution_flip else [], buckets=buckets)
    pts = pd.DataFrame(result.capacity.points)
    plans = [resized_plan(a, pts, result.capacity.redundancy) for a in ok]
    base = winner_at(plans)
    flips: list[VerdictFlip] = []
    dims: list[tuple[ConfidenceDimension, Callable[[float], str], tuple[float, float]]] = [
        ("prefill_time", lambda m: winner_at(plans, m_pf=m), PERF_RANGE),
        ("decode_step_time", lambda m: winner_at(plans, m_dec=m), PERF_RANGE),
        ("traffic", lambda m: winner_at(plans, m_rate=m), TRAFFIC_RANGE),
    ]
    if exact is not None:
        ex = exact
        dims = [("prefill_time", lambda m: ex(m, 1.0, 1.0), (1 / EXACT_GRID[-1], EXACT_GRID[-1])),
                ("decode_step_time", lambda m: ex(1.0, m, 1.0), (1 / EXACT_GRID[-1], EXACT_GRID[-1])),
                ("traffic", lambda m: ex(1.0, 1.0, m), (1 / EXACT_GRID[-1], EXACT_GRID[-1]))]
        base = v.winner
    precision = PRECISION if exact is None else EXACT_PRECISION
    for name, fn, (low, high) in dims:
        if exact is None:
            up, w_up = nearest_flip(fn, base, high)
            down, w_down = nearest_flip(fn, base, low)
        else:
            up, w_up = _exact_nearest_flip(fn, base, True)
            down, w_down = _exact_nearest_flip(fn, base, False)
        near = min((m for m in (up, down) if m is not None), key=lambda m: abs(math.log(m)), default=None)
        after = w_up if near is not None and near == up else w_down
        within = name != "traffic" and near is not None and abs(near - 1.0) <= band
        flips.append(VerdictFlip(dimension=name, slower_or_more=up, faster_or_less=down, winner_after=after,
                                 searched_low=low, searched_high=high, precision=precision, within_error=within))
    if resolution_flip is not None:
        flips.append(resolution_flip)
    perf = [f for f in flips if f.dimension in ("prefill_time", "decode_step_time")]
    near_perf = [f for f in perf if f.within_error]
    if base != v.winner:
        summary = (f"not assessed: the re-sizing model ranks {base} first at the plans as solved "
                   f"(the verdict's ranking differs; see the reasons)")
        return VerdictConfidence(robust=None, summary=summary, error_band=band, error_band_source=source, flips=flips, method=method,
                                 buckets=buckets)
    robust = not near_perf
    words = {"prefill_time": "prefill", "decode_step_time": "decode steps"}
    if robust:
        summary = f"robust: no flip within ±{100 * band:.0f} % prefill or decode time ({source})"
    else:
        parts = []
        for f in sorted(near_perf, key=lambda f: min(abs(math.log(m)) for m in (f.slower_or_more, f.faster_or_less) if m is not None)):
            cands = [(m, "slower" if m > 1 else "faster") for m in (f.slower_or_more, f.faster_or_less) if m is not None and abs(m - 1) <= band]
            m, word = min(cands, key=lambda c: abs(math.log(c[0])))
            parts.append(f"{words[f.dimension]} {_pct(m)} {word}")
        summary = f"near thing: flips to {near_perf[0].winner_after} if " + " or ".join(parts) + f" (error band ±{100 * band:.0f} %: {source})"
    t = next(f for f in flips if f.dimension == "traffic")
    tm = [m for m in (t.slower_or_more, t.faster_or_less) if m is not None]
    if tm:
        m = min(tm, key=lambda x: abs(math.log(x)))
        summary += f"; traffic ×{m:.2f} flips it"
    else:
        summary += f"; no traffic flip within ×{TRAFFIC_RANGE[0]:g}–×{TRAFFIC_RANGE[1]:g}"
    if resolution_flip is not None and resolution_flip.note:
        summary += f"; {resolution_flip.note}"
    return VerdictConfidence(robust=robust, summary=summary, error_band=band, error_band_source=source, flips=flips, method=method,
                             buckets=buckets)
