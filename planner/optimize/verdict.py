"""The verdict: which architecture wins, by how much, and why — every reason built from numbers.

Margin = runner-up total − winner total (USD/month), also per 1M tokens (divided by the
winner's tokens per month) and as a share of the runner-up. Reasons, in order:

1. the headline (when the shared pool wins it says so first);
2. the cost terms that make the difference, largest first;
3. pool utilisation at mean load of the loser's (or winner's) prefill / decode pools — the
   idle time a separate pool pays for at low traffic;
4. the device counts, and for disaggregation the batching gain that outweighs the extra pools;
5. binding constraints, and a warning when a plan is not proven optimal.

Ties. Two plans whose totals differ by at most :data:`TIE_REL_TOL` of the larger total (or half
a cent) tie on cost — a difference the solver's rounding can make — when both meet their targets
in the peak simulation (or both miss). A tie is reported as one (``Verdict.tie_rule``, the
headline says so) and broken by :func:`tie_break`: fewer devices, then fewer pools, then the
simpler architecture (shared, disaggregated, hybrid).
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.optimize.prepare import Prepared
from planner.schema.plan import COST_TERMS, ArchitecturePlan, Verdict

_TERM_WORDS = {
    "equipment_usd_per_month": "equipment",
    "power_busy_usd_per_month": "busy power",
    "power_idle_usd_per_month": "idle power",
    "network_nic_usd_per_month": "KV network (NICs)",
    "network_transfer_usd_per_month": "KV transfer",
    "ops_pools_usd_per_month": "per-pool operations",
    "ops_device_types_usd_per_month": "per-device-type operations",
    "ops_devices_usd_per_month": "per-device operations",
    "licenses_usd_per_month": "licences",
    "cpu_pool_usd_per_month": "CPU pool (tools, tokenisation)",
    "kv_tier_usd_per_month": "KV tier (offloaded sessions)",
    "tool_state_energy_usd_per_month": "KV reload/recompute energy",
}


def term_words(term: str) -> str:
    """A cost term (``equipment_usd_per_month``) in words (``equipment``)."""
    return _TERM_WORDS.get(term, term.removesuffix("_usd_per_month").replace("_", " "))


_SIMPLICITY = {"shared": 0, "disaggregated": 1, "hybrid": 2}

TIE_REL_TOL = 1e-6
"""Totals within this share of the larger one (or half a cent) are a cost tie (module docstring)."""


def _ties(a: ArchitecturePlan, b: ArchitecturePlan) -> bool:
    assert a.costs is not None and b.costs is not None
    ta, tb = a.costs.total_usd_per_month, b.costs.total_usd_per_month
    return meets_in_simulation(a) == meets_in_simulation(b) and abs(ta - tb) <= max(TIE_REL_TOL * max(abs(ta), abs(tb)), 0.005)


def tie_break(plans: list[ArchitecturePlan]) -> tuple[list[ArchitecturePlan], str | None]:
    """``plans`` ranked (cheapest first) with the plans tying the first on cost reordered by the tie
    rule, and the rule that decided between the first two (None when they do not tie)."""
    if len(plans) < 2 or not _ties(plans[0], plans[1]):
        return plans, None
    tied = [p for p in plans if _ties(plans[0], p)]
    rest = [p for p in plans if not any(p is t for t in tied)]
    tied.sort(key=lambda p: (_devices(p), len(p.pools), _SIMPLICITY[p.architecture]))
    a, b = tied[0], tied[1]
    if _devices(a) != _devices(b):
        rule = f"fewer devices ({_devices(a)} against {_devices(b)})"
    elif len(a.pools) != len(b.pools):
        rule = f"fewer pools ({len(a.pools)} against {len(b.pools)})"
    else:
        rule = f"same devices and pools; the simpler architecture ({a.architecture} before {b.architecture})"
    return tied + rest, rule


def _usd(v: float) -> str:
    text = f"${abs(v):,.0f}"
    return text if text == "$0" or v >= 0 else "-" + text


def _rate(v: float) -> str:
    """A request rate for a sentence: 3 significant digits, never scientific notation (``5e+03`` read as residue)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _equipment_clause(disagg_minus_shared_usd: float) -> str:
    """How disaggregated equipment compares with shared, from their difference (USD/month)."""
    if round(disagg_minus_shared_usd) == 0:
        return "and equipment costs the same"
    if disagg_minus_shared_usd < 0:
        return f"while it saves {_usd(-disagg_minus_shared_usd)}/month in equipment"
    return f"and its equipment costs {_usd(disagg_minus_shared_usd)}/month more"


def _devices(plan: ArchitecturePlan) -> int:
    return sum(p.devices for p in plan.pools)


def meets_in_simulation(plan: ArchitecturePlan) -> bool:
    """True unless the plan was simulated at peak and missed a target there."""
    return plan.simulation is None or plan.simulation.met


def meets_predicted(plan: ArchitecturePlan) -> bool:
    """Every service meets its TTFT and TPOT targets in the plan's own latency prediction."""
    return all(lp.ttft_met and lp.tpot_met for lp in plan.latency)


def meets_targets(plan: ArchitecturePlan) -> bool:
    """The plan meets its targets as predicted and (when simulated) in the peak simulation."""
    return meets_predicted(plan) and meets_in_simulation(plan)


def _prediction_notes(ranked: list[ArchitecturePlan]) -> list[str]:
    """Say which plans miss a target in their own latency prediction (they rank after those that meet)."""
    notes = []
    for p in ranked:
        miss = [f"{lp.service} {m} {pred:,.0f} ms > {target:,g} ms" for lp in p.latency
                for m, pred, target, met in (("TTFT", lp.ttft_predicted_ms, lp.ttft_target_ms, lp.ttft_met),
                                             ("TPOT", lp.tpot_predicted_ms, lp.tpot_target_ms, lp.tpot_met)) if not met]
        if miss:
            notes.append(f"{p.architecture} misses its predicted latency targets ({'; '.join(miss)}): it ranks after plans that meet them.")
    return notes


def _simulation_notes(ranked: list[ArchitecturePlan]) -> list[str]:
    """Say which plans miss their targets in the peak simulation and how that ranked them."""
    missing = [p for p in ranked if not meets_in_simulation(p)]
    if not missing:
        return []
    notes = []
    for p in missing:
        finding = p.simulation.findings[0] if p.simulation and p.simulation.findings else "a latency target is missed"
        tightened = (f" after {p.solver.rounds - 1} tightening round(s) of the pools and phases that miss"
                     if p.solver.rounds > 1 else "")
        notes.append(f"{p.architecture} misses its latency targets in the discrete-event simulation at peak{tightened} ({finding}).")
    if len(missing) == len(ranked):
        notes.append("No plan meets its targets in simulation at peak: the verdict compares costs only; add redundancy or tighten options.max_utilization.")
    else:
        notes.append("Plans that miss in simulation rank after those that meet, whatever their cost.")
    return notes


def _mix(plan: ArchitecturePlan) -> str:
    return ", ".join(f"{p.role} {p.instances}x {p.config}" for p in plan.pools) or "no pools"


def energy_reasons(win: ArchitecturePlan, run: ArchitecturePlan, margin: float, diffs: dict[str, float]) -> list[str]:
    """A reason naming energy when it decides: the winner's electricity saving (busy + idle power
    terms) exceeds the whole margin, so without it the runner-up would be cheaper."""
    saving = diffs.get("power_busy_usd_per_month", 0.0) + diffs.get("power_idle_usd_per_month", 0.0)
    if margin < 0 or saving <= margin or saving <= 0:
        return []
    we, re_ = win.energy, run.energy
    detail = ""
    if we is not None and re_ is not None:
        detail = (f" ({win.energy_wh_per_1k_tokens or 0.0:.3g} against {run.energy_wh_per_1k_tokens or 0.0:.3g} Wh per 1k tokens; "
                  f"idle {we.idle_kwh_per_month:,.0f} against {re_.idle_kwh_per_month:,.0f} kWh/month)")
    return [f"Energy decides: {win.architecture} saves {_usd(saving)}/month of electricity, more than the {_usd(margin)} margin{detail}; "
            "power per token follows the measured curves of planner/perf/power.py."]


def make_verdict(plans: dict[str, ArchitecturePlan], prep: Prepared) -> Verdict:
    """The verdict over ``plans`` (module docstring); ``prep`` gives the traffic the headline quotes."""
    return verdict_of(plans, float(prep.demand["rate_mean_per_s"].sum()))


def verdict_of(plans: Mapping[str, ArchitecturePlan], rate_mean_per_s: float) -> Verdict:
    """:func:`make_verdict` from the plans and the mean request rate alone (the sum of the demand rows'
    ``rate_mean_per_s``): what ``planner check`` recomputes a plan's verdict, reasons included, from."""
    # Plans that meet their targets (predicted, and in the peak simulation when simulated) first, then
    # cheapest first; a tie (to the cent) goes to the simpler architecture.
    feasible = sorted((p for p in plans.values() if p.feasible and p.costs is not None),
                      key=lambda p: (not meets_targets(p),
                                     round(p.costs.total_usd_per_month, 2) if p.costs else 0.0, _SIMPLICITY[p.architecture]))
    if not feasible:
        return Verdict(winner=None, reasons=["no architecture has a feasible plan; see each architecture's diagnosis"])
    feasible, tie_rule = tie_break(feasible)
    win = feasible[0]
    simulation_notes = _prediction_notes(feasible) + _simulation_notes(feasible)
    assert win.costs is not None
    rate_mean = float(rate_mean_per_s)
    proven = all(p.solver.status == "optimal" for p in feasible)
    if len(feasible) == 1:
        failed = [a for a in plans if a != win.architecture]
        only = [f"{win.architecture} is the only feasible architecture ({_usd(win.costs.total_usd_per_month)}/month)"
                + (f"; {', '.join(failed)} infeasible" if failed else "")]
        for arch in failed:  # why the others have no plan: their first diagnosis
            diag = plans[arch].diagnosis
            if diag:
                d = diag[0]
                where = d.service + (f"/{d.bucket}" if d.bucket else "")
                only.append(f"{arch} has no plan: {where}: {d.message} (to make it feasible: {d.fix}).")
        return Verdict(winner=win.architecture, reasons=only + simulation_notes, proven=proven)
    # Main comparison is shared vs disaggregated; hybrid (a superset) is reported on its own line.
    others = feasible[1:]
    plain = [p for p in others if p.architecture != "hybrid"]
    run = plain[0] if (win.architecture != "hybrid" and plain) else others[0]
    assert run.costs is not None
    margin = run.costs.total_usd_per_month - win.costs.total_usd_per_month
    tokens = win.tokens_per_month or 1.0
    diffs = {t: run.costs.terms()[t] - win.costs.terms()[t] for t in COST_TERMS}
    share = margin / run.costs.total_usd_per_month if run.costs.total_usd_per_month > 0 else 0.0
    reasons: list[str] = []
    head = "Shared pool wins" if win.architecture == "shared" else f"{win.architecture.capitalize()} wins"
    if tie_rule is not None and run is feasible[1]:
        reasons.append(f"Tie on cost: {win.architecture} {_usd(win.costs.total_usd_per_month)}/month and {run.architecture} "
                       f"{_usd(run.costs.total_usd_per_month)}/month differ by {margin:+.3g} USD/month, within {TIE_REL_TOL:g} of the total; "
                       f"{win.architecture} is named by the tie rule: {tie_rule}.")
    elif margin >= 0:
        reasons.append(f"{head}: {_usd(win.costs.total_usd_per_month)}/month against {_usd(run.costs.total_usd_per_month)} for {run.architecture} "
                       f"— {_usd(margin)}/month ({share:.1%}) less, {margin / tokens * 1e6:.3f} USD per 1M tokens, at {_rate(rate_mean)} req/s mean traffic.")
    else:  # the cheaper plan misses its targets, predicted or in simulation (ranked after, see the notes)
        reasons.append(f"{head}: {_usd(win.costs.total_usd_per_month)}/month against {_usd(run.costs.total_usd_per_month)} for {run.architecture}, "
                       f"which is {_usd(-margin)}/month cheaper but misses its latency targets ({_rate(rate_mean)} req/s mean traffic).")
    worse = sorted(((d, t) for t, d in diffs.items() if d > 0.005 * max(margin, 1.0)), reverse=True)
    better = sorted(((d, t) for t, d in diffs.items() if d < -0.005 * max(margin, 1.0)))
    if worse:
        reasons.append(f"{run.architecture} pays more for " + ", ".join(f"{_TERM_WORDS[t]} (+{_usd(d)})" for d, t in worse[:4])
                       + ("; it saves on " + ", ".join(f"{_TERM_WORDS[t]} ({_usd(-d)})" for d, t in better[:3]) if better else "") + ".")
    reasons += energy_reasons(win, run, margin, diffs)
    by_arch = {p.architecture: p for p in feasible}
    shared = by_arch.get("shared")
    disagg = by_arch.get("disaggregated")
    if shared is not None and disagg is not None and shared.costs is not None and disagg.costs is not None:
        sd = {t: disagg.costs.terms()[t] - shared.costs.terms()[t] for t in COST_TERMS}  # disaggregated minus shared
        # the pools of the plan that wins (the sentence used to describe the disaggregated plan's, even when shared won)
        busy = [p for p in win.pools if p.role in ("prefill", "decode", "unified")]
        if busy:
            # utilisation is the share of what the instances serve at the operating point's batch within the targets
            # (busy instances / instances), not of wall time: a unified instance at a small batch iterates all the time
            parts = [f"the {p.role} pool ({p.instances}x {p.config}) runs at {p.utilization_mean:.0%} of its capacity at mean load "
                     f"({1 - p.utilization_mean:.0%} idle)" for p in busy]
            reasons.append(f"At {_rate(rate_mean)} req/s, in the winning {win.architecture} plan, " + "; ".join(parts) + ".")
        reasons.append(_shared_vs_disaggregated(shared, disagg, sd, win))
    hyb = by_arch.get("hybrid")
    if hyb is not None:
        uni = sorted({f"{r.service}/{r.bucket}" for r in hyb.routing if r.role == "unified"})
        spl = sorted({f"{r.service}/{r.bucket}" for r in hyb.routing if r.role != "unified"})
        reasons.append(f"Hybrid routes {', '.join(uni) or 'nothing'} to unified pools and {', '.join(spl) or 'nothing'} to prefill/decode pools.")
    limits = list(dict.fromkeys(plain_limit(b.name, b.kind, b.detail) for b in win.binding))[:5]
    if limits:
        reasons.append(f"What limits the {win.architecture} plan: {'; '.join(limits)}.")
    reasons.extend(simulation_notes)
    if not proven:
        reasons.append("At least one plan is not proven optimal (time limit or solver stop); the verdict may change with more solve time.")
    return Verdict(winner=win.architecture, runner_up=run.architecture, margin_usd_per_month=margin,
                   margin_usd_per_million_tokens=margin / tokens * 1e6, margin_share=share,
                   term_differences_usd_per_month=diffs, reasons=reasons, proven=proven,
                   tie_rule=tie_rule if run is feasible[1] else None)


def _more_or_less(usd: float, what: str) -> str:
    """``usd`` (disaggregated minus shared) in words, never a negative amount: 'X more' / 'X less' / 'the same'."""
    if round(usd) == 0:
        return f"the same {what}"
    return f"{_usd(abs(usd))}/month {'more' if usd > 0 else 'less'} {what}"


def _shared_vs_disaggregated(shared: ArchitecturePlan, disagg: ArchitecturePlan, sd: dict[str, float], win: ArchitecturePlan) -> str:
    """Why one of shared / disaggregated costs less, credited to what the numbers show (``sd``: disaggregated minus
    shared per term). Separating the phases is credited only when disaggregated needs fewer devices; when it needs as
    many or more but cheaper ones, the saving is the device choice (per device-month of equipment)."""
    assert shared.costs is not None and disagg.costs is not None
    dw, ds = _devices(disagg), _devices(shared)
    fixed = sd["ops_pools_usd_per_month"] + sd["ops_device_types_usd_per_month"] + sd["network_nic_usd_per_month"] + sd["network_transfer_usd_per_month"]
    power = sd["power_busy_usd_per_month"] + sd["power_idle_usd_per_month"]
    head = f"Disaggregated needs {dw} devices ({_mix(disagg)}) against {ds} shared ({_mix(shared)})"
    if shared.costs.total_usd_per_month <= disagg.costs.total_usd_per_month:
        return (f"{head}; its pools, device types and KV network cost {_more_or_less(fixed, 'than shared')} "
                f"{_equipment_clause(sd['equipment_usd_per_month'])}: the batching gain of separate phases does not pay for them.")
    would = " (it would be cheaper, but it misses its latency targets)" if win is not disagg and not meets_targets(disagg) else ""
    tail = (f"{_more_or_less(sd['equipment_usd_per_month'], 'equipment')}, {_more_or_less(power, 'power')} and "
            f"{_more_or_less(fixed, 'pools, device types and KV network')} than shared{would}")
    eq_d = disagg.costs.equipment_usd_per_month / dw if dw else 0.0
    eq_s = shared.costs.equipment_usd_per_month / ds if ds else 0.0
    if dw >= ds and eq_d < eq_s:
        why = ("a shared plan uses one device type (options.shared_single_device_type)" if len({p.device for p in disagg.pools}) > 1
               and len({p.device for p in shared.pools}) == 1 else "each phase gets the card that suits it")
        return (f"{head}: more devices, but cheaper ones ({_usd(eq_d)} against {_usd(eq_s)} of equipment per device per month; {why}), "
                f"so the saving comes from the choice of cards, not from separating the phases: {tail}.")
    return (f"{head}: prefill in a shared pool slows its decode batches (chunks ride in decode steps, or whole-prompt "
            f"iterations stall them), so separate phases need fewer devices: {tail}.")


def plain_limit(name: str, kind: str, detail: str = "") -> str:
    """A constraint of the plan at its bound, in words (``name`` by the constraint grammar of
    :func:`planner.optimize.model.constraint_name`, e.g. ``load[unified:h100-sxm/tp2:llama-3.1-70b@fp8]``; ``detail``
    the :class:`planner.schema.plan.BindingConstraint`'s, quoted for the one-device-type rule: what it costs)."""
    key = name[name.find("[") + 1:-1] if "[" in name and name.endswith("]") else ""
    pool = key.split(":")[1] + f" {key.split(':')[0]} pool" if key.count(":") >= 2 else key
    if kind == "load":
        return f"the {pool} is exactly as full as its latency targets allow (one more request/s needs another instance)"
    if kind == "kv":
        return f"the {pool} has its KV-cache memory full at peak"
    if kind == "procurement":
        return f"no more {key} can be had (procurement limit of the catalog)"
    if kind == "budget":
        return "the monthly budget is spent"
    if kind == "device_types":
        return "a shared plan uses one device type only (options.shared_single_device_type)" + (f": {detail}" if detail else "")
    return name

