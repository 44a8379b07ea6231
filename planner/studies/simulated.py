"""A held plan simulated at another scenario's traffic: ``planner evaluate --simulate``.

``planner evaluate`` judges a held plan under each scenario analytically ("SLO met" under the caps, "as routed"
at the held sizes, :mod:`planner.studies.evaluate`). This module adds the discrete-event view of the plan as
deployed: its pools, its own routing shares and its operating points held, the scenario's arrival rates, the
peak simulation :mod:`planner.verify` runs for ``planner solve`` (the same run length, request count and
interval rule; a timestamped log's busiest windows replayed, time-scaled to the scenario's peak rate).

What a scenario may change for the figure to mean that: the rates only. Per (service, bucket) the scenario's
demand row must equal the plan's in every column that sets a latency (lengths, targets and quantiles,
inter-arrival CV, length mix) — a scenario that moves the lengths or targets asks about requests the plan's
operating points were not priced for, and gets no simulated figure, with the column named. Each bucket's
``rate_peak_per_s`` and ``rate_mean_per_s`` in the plan's capacity snapshot (its points and demand) are then
multiplied by the scenario's over the plan's (:func:`scaled_to`), and the plan is simulated at peak
(:func:`planner.verify.simulate_plan`). At the plan's own traffic the factors are 1 and the figure is the plan's
own peak simulation (seed 0; tested).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from planner.schema.plan import E2E_MISS, PlanResult

#: Demand columns a scenario must leave as the plan had them for its simulation to be the plan's.
HELD_COLUMNS = ("input_tokens_mean", "output_tokens_mean", "input_tokens_rep", "output_tokens_rep", "interarrival_cv",
                "ttft_quantile", "ttft_target_ms", "tpot_quantile", "tpot_target_ms", "itl_quantile", "itl_target_ms",
                "token_metric", "length_mix")


def _same(a: Any, b: Any) -> bool:
    """Equal as the snapshot stores them: floats to 1e-9 relative (NaN equals NaN), anything else as text."""
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y))


def rate_factors(result: PlanResult, demand: pd.DataFrame) -> tuple[dict[tuple[str, str], tuple[float, float]] | None, str]:
    """Per (service, bucket) of the plan: (peak, mean) rate of ``demand`` over the plan's, or ``None`` and why
    when ``demand`` is not the plan's demand at other rates (module docstring)."""
    plan = {(str(d["service"]), str(d["bucket"])): d for d in result.capacity.demand}
    other = {(str(r["service"]), str(r["bucket"])): r for r in demand.to_dict("records")}
    if set(plan) != set(other):
        missing = sorted(set(plan) ^ set(other))
        shown = ", ".join(f"{s}/{b}" for s, b in missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return None, f"not simulated: the scenario's buckets are not the plan's ({shown})"
    factors: dict[tuple[str, str], tuple[float, float]] = {}
    for key, d in plan.items():
        r = other[key]
        changed = [c for c in HELD_COLUMNS if c in d and c in r and not _same(d[c], r[c])]
        if changed:
            return None, (f"not simulated: the scenario changes {key[0]}/{key[1]}'s {', '.join(changed)} (only rates are "
                          "re-simulated against the plan's operating points)")
        f = []
        for col in ("rate_peak_per_s", "rate_mean_per_s"):
            base, new = float(d[col]), float(r[col])
            if not (math.isfinite(base) and math.isfinite(new) and base > 0 and new >= 0):
                return None, f"not simulated: {key[0]}/{key[1]}'s {col} is {new!r} against the plan's {base!r}"
            f.append(new / base)
        factors[key] = (f[0], f[1])
    return factors, ""


def scaled_to(result: PlanResult, factors: Mapping[tuple[str, str], tuple[float, float]]) -> PlanResult:
    """``result`` with each (service, bucket)'s peak and mean rates multiplied by its factors in the capacity
    snapshot's points and demand (pools, routing and operating points unchanged)."""
    def scale(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            fp, fm = factors.get((str(row.get("service")), str(row.get("bucket"))), (1.0, 1.0))
            new = dict(row)
            if "rate_peak_per_s" in new:
                new["rate_peak_per_s"] = float(new["rate_peak_per_s"]) * fp
            if "rate_mean_per_s" in new:
                new["rate_mean_per_s"] = float(new["rate_mean_per_s"]) * fm
            out.append(new)
        return out

    cap = result.capacity
    return result.model_copy(update={"capacity": cap.model_copy(update={"points": scale(cap.points), "demand": scale(cap.demand)})})


def latency_detail(service: str, ttft: str, ttft_target_ms: float, tok: str, tok_target_ms: float, *,
                   ttft_missed: bool, tok_missed: bool) -> str:
    """``"<service>: TTFT <ttft>/<target> ms, per-token <tok>/<target> ms"`` with "(missed)" after each metric that
    misses its target — not after the line, where it followed the per-token figure when only TTFT missed
    (``evaluate`` at ×3: "TTFT inf/2,000 ms, per-token 60.0/60 ms (missed)")."""
    return (f"{service}: TTFT {ttft}/{ttft_target_ms:,.0f} ms{' (missed)' if ttft_missed else ''}, "
            f"per-token {tok}/{tok_target_ms:,.0f} ms{' (missed)' if tok_missed else ''}")


def simulate_held(result: PlanResult, architecture: str, demand: pd.DataFrame, arrivals: Mapping[str, Any] | None
                  ) -> tuple[bool | None, str]:
    """(every service meets its targets in the peak simulation, a per-service detail) for the plan's
    ``architecture`` held at ``demand``'s rates; ``None`` and why when the scenario is not a change of rates
    (module docstring) or the plan cannot be simulated."""
    from planner.verify import simulate_plan

    factors, why = rate_factors(result, demand)
    if factors is None:
        return None, why
    if any(fp == 0.0 for fp, _ in factors.values()):
        return None, "not simulated: a bucket's peak rate is 0 in this scenario"
    try:
        check = simulate_plan(scaled_to(result, factors), architecture, arrivals=arrivals)
    except (ArithmeticError, ValueError, MemoryError) as exc:  # absurd rates (a fuzzed ×1e12): no figure, said so
        return None, f"not simulated ({type(exc).__name__}: {exc})"
    parts = []
    for s in check.services:
        ttft = "—" if s.ttft_sim_ms is None else f"{s.ttft_sim_ms:,.0f}"
        tok = "—" if s.tpot_sim_ms is None else f"{s.tpot_sim_ms:,.1f}"
        parts.append(latency_detail(str(s.service), ttft, float(s.ttft_target_ms), tok, float(s.tpot_target_ms),
                                    ttft_missed=not s.ttft_met, tok_missed=not s.tpot_met)
                     + (f", {s.unfinished} unfinished" if s.unfinished else ""))
    # an end-to-end target missed fails `met` with TTFT and per-token met: say it, or the line reads met where it is not
    parts += [f.split(": ", 1)[-1] for f in check.findings if E2E_MISS in f]
    return bool(check.met), "; ".join(parts)
