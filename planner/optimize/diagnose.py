"""Infeasibility diagnosis: which service, bucket and constraint, and what would make it feasible.

Two stages:

1. **Routability** (before solving): every (service, bucket) needs, in each phase, at least
   one operating point the architecture may use that is feasible and leaves room for
   queueing. When none exists the diagnosis compares the targets with the best the table
   offers: the model does not fit any candidate; the TTFT target is below the fastest
   prefill of the bucket's representative prompt; the TPOT target is below the fastest
   decode step.
   Agent services add one check per tool wait: some KV policy (hold, offload, recompute) must
   be usable, else ``tool_balance`` cannot hold (:func:`planner.agents.diagnose.tool_routability`:
   offload whose reload breaks the TTFT target, recompute too slow, hold not allowed...).
2. **Solver infeasible** although every bucket is routable: the budget, procurement or
   tool-phase limits (CPU-server procurement, KV-tier capacity) are too tight. The model is
   re-solved with each relaxed (then all together) to say how much more would be needed and,
   for the tool phase, which service and tool need it.
"""

from __future__ import annotations

import math
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from planner.optimize.prepare import ARCH_ROLES, Prepared
from planner.schema.capacity import LANE_BOUND_MARK
from planner.schema.plan import DiagnosisItem

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.optimize.model import Built
    from planner.optimize.settings import SolveSettings

PHASE_ROLES = {"prefill": ("prefill", "unified"), "decode": ("decode", "unified")}


def _all_points(prep: Prepared) -> pd.DataFrame:
    frames = [f for f in (prep.points, prep.infeasible_points) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else prep.points


def diagnose_routability(prep: Prepared, architecture: str) -> list[DiagnosisItem]:
    allowed = ARCH_ROLES[architecture]
    usable = prep.points[prep.points["role"].isin(allowed)]
    have = set(zip(usable["d"], usable["role"], strict=True))
    # feasible and infeasible points together, concatenated on the first diagnosis only (issue 27: every
    # solve of the tightening loop asks, and a routable table never needs them)
    everything = cache(partial(_all_points, prep))

    out: list[DiagnosisItem] = []
    for _, row in prep.demand.iterrows():
        d = int(row["d"])
        svc, bucket = str(row["service"]), str(row["bucket"])
        for phase in ("prefill", "decode"):
            roles = [r for r in PHASE_ROLES[phase] if r in allowed]
            if any((d, r) in have for r in roles):
                continue
            pts = everything()
            cand = pts[(pts["service"] == svc) & (pts["bucket"] == bucket) & pts["role"].isin(roles)]
            out.append(_explain(svc, bucket, phase, architecture, row, cand))
            break  # one diagnosis per bucket is enough
        else:
            item = _encode_routability(prep, row, d, allowed, architecture, everything)
            if item is not None:
                out.append(item)
    if prep.tool is not None:
        from planner.agents.diagnose import tool_routability

        bad = {(o.service, o.bucket) for o in out}
        dem = prep.demand
        unroutable = {int(d) for s, b, d in zip(dem["service"], dem["bucket"], dem["d"], strict=True) if (str(s), str(b)) in bad}
        out += [item.model_copy(update={"message": f"{architecture}: {item.message}"})
                for item in tool_routability(prep, allowed, skip_d=unroutable)]
    return out


def _encode_routability(prep: Prepared, row: Any, d: int, allowed: frozenset[str], architecture: str,
                        everything: Callable[[], pd.DataFrame]) -> DiagnosisItem | None:
    """A bucket with encoder work (``encode_tokens_mean`` > 0) needs a usable encode-phase point
    (``everything``: every point, feasible or not, asked for only when it has none)."""
    from planner.optimize.prepare import ENCODE_HOST

    if float(row.get("encode_tokens_mean", 0.0) or 0.0) <= 0:
        return None
    ok = {r for r, host in ENCODE_HOST.items() if host in allowed or host == "encode"}
    pts = prep.points
    if bool(((pts["d"] == d) & pts["role"].isin(ok)).any()):
        return None
    every = everything()
    cand = every[(every["service"] == row["service"]) & (every["bucket"] == row["bucket"]) & every["role"].isin(ok)]
    uniq = sorted(set(cand["reason"].astype(str)) - {""})
    return DiagnosisItem(service=str(row["service"]), bucket=str(row["bucket"]), constraint="route",
                         message=f"{architecture}: encode phase: no feasible encoder operating point ({'; '.join(uniq[:3]) or 'no candidate'})",
                         fix="relax the TTFT target, add devices with a dense FLOP/s figure, or lower the image tokens per request")


def _explain(svc: str, bucket: str, phase: str, architecture: str, row: Any, cand: pd.DataFrame) -> DiagnosisItem:
    where = f"{architecture}: {phase} phase"
    if cand.empty:
        return DiagnosisItem(service=svc, bucket=bucket, constraint="route",
                             message=f"{where}: the capacity table has no operating point for this bucket in roles the architecture uses",
                             fix="add candidate devices / TP degrees, or another architecture")
    reasons = " ".join(cand["reason"].astype(str)).lower()
    fits = cand[~cand["reason"].astype(str).str.lower().str.contains("memory|fit|does not fit", regex=True)]
    if fits.empty and ("memory" in reasons or "fit" in reasons):
        return DiagnosisItem(service=svc, bucket=bucket, constraint="memory",
                             message=f"{where}: the model (weights + KV of the representative request, {row['input_tokens_rep']:.0f} in / {row['output_tokens_rep']:.0f} out tokens) does not fit any candidate device at any TP degree",
                             fix="add devices with more memory, allow larger TP degrees, or use a lower weight/KV precision")
    ttft_t = float(row["ttft_target_ms"])
    tpot_t = float(row["tpot_target_ms"])
    tok = "TPOT"
    itl_t = float(row.get("itl_target_ms", math.inf))
    if itl_t < tpot_t:  # the binding per-token target is ITL (every token gap)
        tpot_t, tok = itl_t, "ITL"
    first = fits[fits["role"].isin(["prefill", "unified"]) & fits["ttft_ms"].map(lambda v: math.isfinite(float(v)))]
    if phase == "prefill" and len(first):
        best = first.iloc[int(np.argmin(first["ttft_ms"].to_numpy(float)))]
        if float(best["ttft_ms"]) >= ttft_t and LANE_BOUND_MARK in str(best["reason"]):
            # a unified point whose prompt prefills in time but whose lane is full at its full batch (planner/perf/points.py
            # _unified_infeasible): its TTFT is not the fastest prefill, and a faster device is not the only way out
            return DiagnosisItem(service=svc, bucket=bucket, constraint="slo_ttft",
                                 message=(f"{where}: TTFT p{row['ttft_quantile'] * 100:g} target {ttft_t:g} ms is below the TTFT of every "
                                          f"unified operating point at its full batch; on {best['config']}: {best['reason']}"),
                                 fix=(f"raise the TTFT target above {float(best['ttft_ms']):.0f} ms, or plan this service disaggregated "
                                      "(a prefill pool is sized for its TTFT whatever the output length)"))
        if float(best["ttft_ms"]) >= ttft_t:
            return DiagnosisItem(service=svc, bucket=bucket, constraint="slo_ttft",
                                 message=(f"{where}: TTFT p{row['ttft_quantile'] * 100:g} target {ttft_t:g} ms is below the fastest prefill of the "
                                          f"representative prompt ({row['input_tokens_rep']:.0f} tokens): {float(best['ttft_ms']):.0f} ms on {best['role']} {best['config']}"),
                                 fix=f"raise the TTFT target above {float(best['ttft_ms']):.0f} ms (plus queueing), add faster devices or larger TP degrees")
    dec = fits[fits["role"].isin(["decode", "unified"]) & fits["tpot_ms"].map(lambda v: math.isfinite(float(v)))]
    if len(dec):
        best = dec.iloc[int(np.argmin(dec["tpot_ms"].to_numpy(float)))]
        if float(best["tpot_ms"]) > tpot_t:
            return DiagnosisItem(service=svc, bucket=bucket, constraint="slo_tpot",
                                 message=f"{where}: {tok} target {tpot_t:g} ms is below the fastest decode step ({float(best['tpot_ms']):.1f} ms on {best['role']} {best['config']})",
                                 fix=f"raise the {tok} target to at least {float(best['tpot_ms']):.1f} ms, or add devices with more memory bandwidth / larger TP")
    if phase == "prefill" and len(first):
        best = first.iloc[int(np.argmin(first["ttft_ms"].to_numpy(float)))]
        return DiagnosisItem(service=svc, bucket=bucket, constraint="slo_ttft",
                             message=f"{where}: the fastest prefill ({float(best['ttft_ms']):.0f} ms on {best['config']}) leaves no room for queueing within the TTFT target {ttft_t:g} ms at p{row['ttft_quantile'] * 100:g}",
                             fix="raise the TTFT target or its quantile slack, or add faster devices")
    uniq = sorted(set(cand["reason"].astype(str)) - {""})
    return DiagnosisItem(service=svc, bucket=bucket, constraint="route",
                         message=f"{where}: no feasible operating point ({'; '.join(uniq[:3]) or 'no reason given'})",
                         fix="relax the SLO, or add candidate devices / TP degrees")


def diagnose_solver_infeasible(built: Built, architecture: str, settings: SolveSettings) -> list[DiagnosisItem]:
    """Every bucket is routable but the MIP is infeasible: find out which limit binds.

    The limits are relaxed one at a time — budget, GPU procurement, then the tool-phase limits
    (CPU-server procurement, KV-tier capacity; :mod:`planner.agents.diagnose`) — and then all
    together; the first relaxed model with a plan says what it needs beyond each limit.
    """
    from planner.agents.diagnose import explain_relaxed, relaxations
    from planner.optimize.highs import make_solver

    m = built.model
    had_proc = [t for t in m.procurement if m.procurement[t].active]
    limits: list[tuple[str, Any, Any]] = []
    if m.budget_c.active:
        limits.append(("budget", m.budget_c.deactivate, m.budget_c.activate))
    if had_proc:
        def relax_proc() -> None:
            for t in had_proc:
                m.procurement[t].deactivate()

        def restore_proc() -> None:
            for t in had_proc:
                m.procurement[t].activate()

        limits.append(("procurement", relax_proc, restore_proc))
    limits += relaxations(built)

    def trial() -> tuple[bool, Any]:
        solver = make_solver()
        res = solver.solve(m, time_limit=settings.time_limit_s, rel_gap=1e-3, threads=settings.threads,
                           load_solutions=False, raise_exception_on_nonoptimal_result=False, solver_options={"random_seed": 0})
        ok = getattr(res.solution_status, "name", "") in ("optimal", "feasible")
        if ok:
            res.solution_loader.load_vars()
        return ok, res

    trials = [[lim] for lim in limits] + ([limits] if len(limits) > 1 else [])
    for group in trials:
        names = {g[0] for g in group}
        for g in group:
            g[1]()
        try:
            ok, res = trial()
        finally:
            for g in group:
                g[2]()
        if not ok:
            continue
        out: list[DiagnosisItem] = []
        if "budget" in names:
            need = float(res.incumbent_objective)
            if need > float(_pe_value(m.budget)) * (1 + 1e-9):
                out.append(DiagnosisItem(service="*", bucket="", constraint="budget",
                                         message=f"{architecture}: the cheapest plan within every other constraint costs {need:,.0f} USD/month, above the budget of {_pe_value(m.budget):,.0f}",
                                         fix=f"raise options.budget_usd_per_month to at least {need:,.0f}, or reduce traffic"))
        if "procurement" in names:
            out += _procurement_items(built, architecture, had_proc)
        out += explain_relaxed(built, architecture, names)
        if out:
            return out
    return [DiagnosisItem(service="*", bucket="", constraint="redundancy/device_types",
                          message=f"{architecture}: infeasible with every bucket routable and no budget, procurement or tool-phase limit binding",
                          fix="lower options.redundancy, or allow more device types (options.shared_single_device_type: false)")]


def _pe_value(v: Any) -> float:
    import pyomo.core as pe  # pyomo.environ less its plug-ins (planner.optimize.highs.import_pyomo)

    return float(pe.value(v))


def _procurement_items(built: Built, architecture: str, limited: list[str]) -> list[DiagnosisItem]:
    """Devices over their procurement limit in the relaxed plan; the tools whose held KV sits there."""
    from planner.agents.diagnose import held_kv_items

    m = built.model
    pools = built.prep.pools
    tps = pools["tp"].to_numpy(int)
    devs = pools["device"].to_numpy(str)
    out: list[DiagnosisItem] = []
    for t in limited:
        used = sum(int(tps[p]) * round(m.n[p].value or 0) for p in range(len(pools)) if devs[p] == t)
        limit = built.prep.procurement[t]
        if used > limit:
            out.append(DiagnosisItem(service="*", bucket="", constraint=f"procurement[{t}]",
                                     message=f"{architecture}: the cheapest plan needs {used} {t} devices; the procurement limit is {limit:g}",
                                     fix=f"raise the procurement limit of {t} to {used}, add other candidate devices, or reduce traffic"))
            out += held_kv_items(built, architecture, t, used, limit)
    if not out:
        out.append(DiagnosisItem(service="*", bucket="", constraint="procurement",
                                 message=f"{architecture}: procurement limits together leave too few devices",
                                 fix="raise procurement limits or add candidate devices"))
    return out
