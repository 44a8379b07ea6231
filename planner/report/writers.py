"""Plan writers: tidy tables (pandas) and text renderings of a :class:`PlanResult`.

``cost_table``: one row per (architecture, term) — tidy, for CSV and sweeps.
``pool_table``: one row per (architecture, pool).
``summary_text``: the terminal summary; ``markdown``: report.md; ``write_outputs``: --out DIR.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from planner.agents.report import tool_phase_lines, tool_phase_markdown
from planner.cli.output import fmt, table, to_json
from planner.optimize.verdict import plain_limit
from planner.report.encode import encode_lines
from planner.report.explain import pool_explanations
from planner.schema.plan import COST_TERMS, ArchitecturePlan, PlanResult, stat_label

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: the terminal summary needs none (issue 27, start-up)


def cost_table(result: PlanResult) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for arch, plan in result.architectures.items():
        if plan.costs is None:
            continue
        for term in COST_TERMS:
            rows.append({"architecture": arch, "term": term, "usd_per_month": getattr(plan.costs, term)})
        rows.append({"architecture": arch, "term": "total_usd_per_month", "usd_per_month": plan.costs.total_usd_per_month})
        rows.append({"architecture": arch, "term": "idle_capacity_usd_per_month (attribution, inside the terms)", "usd_per_month": plan.costs.idle_capacity_usd_per_month})
    return pd.DataFrame(rows, columns=["architecture", "term", "usd_per_month"])


def pool_table(result: PlanResult) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for arch, plan in result.architectures.items():
        for p in plan.pools:
            rows.append({"architecture": arch, **p.model_dump()})
    return pd.DataFrame(rows)


def parallelism_lines(plan: ArchitecturePlan) -> list[str]:
    """One line per pool naming its parallelism, when a pool is expert-parallel (TP-only plans: none, the
    pool name already says ``tpK``)."""
    if not any("ep" in p.parallelism for p in plan.pools):
        return []
    return [f"parallelism of {p.name}: {p.parallelism} ({p.tp} devices per instance, {p.instances} instance(s))" for p in plan.pools]


def _share(value: float) -> float | str:
    """A utilisation or cap to three decimals; below 0.0005 (a trickle of traffic) three significant digits, not 0."""
    return f"{value:.3g}" if 0.0 < value < 5e-4 else round(value, 3)


def _arch_lines(result: PlanResult, arch: str) -> list[str]:
    plan = result.architectures[arch]
    s = plan.solver
    gap = f"{100 * s.gap:.3f} %" if s.gap is not None else "-"  # a percentage (2.00e-05 read as float residue)
    state = ("feasible" if plan.meets_targets else "feasible but MISSES its latency targets") if plan.feasible else "INFEASIBLE"
    out = [f"== {arch}: {state} — solver {s.status} (gap {gap}, {s.time_s:.2f} s HiGHS, build {s.build_s:.2f} s, extract {s.extract_s:.2f} s)"]
    if not plan.feasible:
        out += [f"  - {d.service}/{d.bucket}: {d.constraint}: {d.message} (to make it feasible: {d.fix})" for d in plan.diagnosis]
        return out
    out.append(table(["pool", "instances", "devices", "util_mean", "util_peak", "cap", "USD/month"],
                     [[p.name, p.instances, p.devices, _share(p.utilization_mean), _share(p.utilization_peak), _share(p.utilization_cap), round(p.cost_usd_per_month)] for p in plan.pools]))
    out += [f"  {line}" for line in parallelism_lines(plan)]
    out.append("")
    out.append(table(["service", "TTFT pred ms", "target", "TPOT/ITL pred ms", "target", "met"],
                     [[lp.service, f"p{lp.ttft_quantile * 100:g} {lp.ttft_predicted_ms:,.0f}", lp.ttft_target_ms, f"{lp.token_metric.upper()} {stat_label(lp.tpot_quantile)} {lp.tpot_predicted_ms:.1f}", lp.tpot_target_ms,
                       "yes" if lp.ttft_met and lp.tpot_met else "NO"] for lp in plan.latency]))
    assert plan.costs is not None
    out.append("")
    out.append(table(["cost term", "USD/month"], [[t.removesuffix("_usd_per_month"), round(v, 2)] for t, v in plan.costs.terms().items()]
                     + [["TOTAL", round(plan.costs.total_usd_per_month, 2)], ["(idle capacity, attribution)", round(plan.costs.idle_capacity_usd_per_month, 2)]]))
    out.append(f"  {fmt(plan.usd_per_million_tokens)} USD per 1M tokens; {fmt(plan.energy_wh_per_1k_tokens)} Wh per 1k tokens (facility); {fmt(plan.tokens_per_month / 1e9)} G tokens/month")
    out += [f"  why: {e}" for e in pool_explanations(plan)]
    out += [f"  {line}" for line in encode_lines(result, arch)]  # multimodal encode phase (planner.report.encode)
    out += energy_lines(plan)  # facility energy by pool and phase, emissions (planner.optimize.energy_report)
    out += tool_phase_lines(plan)  # tool execution phase (planner.agents)
    out += simulation_lines(plan)  # discrete-event check at peak (planner.verify)
    return out


def energy_lines(plan: ArchitecturePlan) -> list[str]:
    """Energy by pool and phase (busy, provisioned-but-idle), and emissions when a carbon intensity is given."""
    e = plan.energy
    if e is None:
        return []
    parts = [f"{p.pool} ({p.role}) {fmt(p.wh_per_1k_tokens)} Wh/1k tok [busy {fmt(p.busy_kwh_per_month)} + idle {fmt(p.idle_kwh_per_month)} kWh/month]"
             for p in e.pools]
    out = [f"  energy: {fmt(e.facility_kwh_per_month)} kWh/month facility = busy {fmt(e.busy_kwh_per_month)} + idle (provisioned, unused) "
           f"{fmt(e.idle_kwh_per_month)}" + (f" + tool phase {fmt(e.tool_phase_kwh_per_month)}" if e.tool_phase_kwh_per_month > 1e-9 * max(e.facility_kwh_per_month, 1.0) else "")]
    out += [f"    {p}" for p in parts]
    if e.emissions_kg_per_month is not None:
        out.append(f"  emissions: {fmt(e.emissions_kg_per_month)} kg CO2e/month, {fmt(e.emissions_g_per_million_tokens)} g per 1M tokens "
                   f"at {fmt(e.carbon_g_per_kwh)} gCO2e/kWh (costs.carbon_g_per_kwh)")
    return out


def _n(x: float | None, spec: str = ",.0f") -> str:
    """A simulated value; ``None`` (unbounded, see ``planner.schema.plan.SimMs``) prints as ``inf``."""
    return format(x, spec) if x is not None else "inf"


def _ci(lo: float | None, hi: float | None) -> str:
    return f"[{_n(lo)}, {_n(hi)}]"


def simulation_lines(plan: ArchitecturePlan) -> list[str]:
    """Terminal lines for ``plan.simulation`` (empty when the check did not run)."""
    c = plan.simulation
    if c is None:
        return []
    out = ["", f"  simulated at peak ({plan.solver.rounds} solve round(s)): {c.requests:,} requests over {c.duration_s:,.0f} s "
           f"(warm-up {c.warmup_s:,.0f} s), seed {c.seed}, {c.wall_s:.2f} s wall; {c.ci_level:.0%} CI from order statistics and sections"]
    out.append(table(["service", "TTFT analytic ms", "TTFT sim ms", "CI", "target", "TPOT/ITL analytic", "TPOT/ITL sim", "target",
                      "requests over target", "met"],
                     [[s.service, f"p{s.ttft_quantile * 100:g} {_n(s.ttft_analytic_ms)}", _n(s.ttft_sim_ms), _ci(s.ttft_ci_low_ms, s.ttft_ci_high_ms),
                       s.ttft_target_ms, f"{s.token_metric.upper()} {stat_label(s.tpot_quantile)} {_n(s.tpot_analytic_ms, '.1f')}", _n(s.tpot_sim_ms, '.1f'), s.tpot_target_ms,
                       s.over_target_text(), "yes" if s.ttft_met and s.tpot_met else f"NO ({s.miss_pool}: +{_n(s.miss_ms)} ms)"] for s in c.services]))
    out += [f"  ! {f}" for f in c.findings]
    return out


def simulation_markdown(plan: ArchitecturePlan) -> list[str]:
    """report.md section for ``plan.simulation``."""
    c = plan.simulation
    if c is None:
        return []
    lines = [f"Simulated at peak after {plan.solver.rounds} solve round(s): {c.requests:,} requests over {c.duration_s:,.0f} s "
             f"(warm-up {c.warmup_s:,.0f} s not measured), seed {c.seed}; {c.ci_level:.0%} confidence intervals: the wider of the order statistics' and the sectioning one (TTFT, TPOT).", "",
             "| service | TTFT analytic (ms) | TTFT simulated (ms) | CI | target | TPOT/ITL analytic | TPOT/ITL simulated | target | requests over target | met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s.service} | p{s.ttft_quantile * 100:g} {_n(s.ttft_analytic_ms)} | {_n(s.ttft_sim_ms)} | {_ci(s.ttft_ci_low_ms, s.ttft_ci_high_ms)} | "
              f"{s.ttft_target_ms:,g} | {s.token_metric.upper()} {stat_label(s.tpot_quantile)} {_n(s.tpot_analytic_ms, '.1f')} | {_n(s.tpot_sim_ms, '.1f')} | {s.tpot_target_ms:,g} | "
              f"{s.over_target_text()} | "
              + ("yes" if s.ttft_met and s.tpot_met else f"**no** — {s.miss_pool} +{_n(s.miss_ms)} ms ({_n(s.miss_share, '+.0%')})") + " |" for s in c.services]
    lines += [""] + [f"- {f}" for f in c.findings] + ([""] if c.findings else [])
    return lines


def summary_text(result: PlanResult) -> str:
    lines = [f"plan for {result.instance}" + (f" (scenario {result.scenario})" if result.scenario else "")]
    v = result.verdict
    lines.append("")
    lines += [f"VERDICT: {r}" if i == 0 else f"  {r}" for i, r in enumerate(v.reasons)]
    if v.confidence is not None:  # planner.optimize.confidence
        lines.append(f"  CONFIDENCE: {v.confidence.summary}")
    for arch in result.architectures:
        lines.append("")
        lines += _arch_lines(result, arch)
    if result.notes:
        lines.append("")
        lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def markdown(result: PlanResult) -> str:
    lines = [f"# Plan: {result.instance}", ""]
    if result.scenario:
        lines += [f"Scenario: `{result.scenario}`", ""]
    lines += ["## Verdict", ""] + [f"- {r}" for r in result.verdict.reasons] + [""]
    if result.verdict.confidence is not None:  # planner.optimize.confidence
        lines += [f"Confidence: {result.verdict.confidence.summary}", ""]
    costs = cost_table(result)
    if len(costs):
        wide = costs.pivot(index="term", columns="architecture", values="usd_per_month").reindex(costs["term"].unique())
        lines += ["## Cost by term (USD/month)", "", "| term | " + " | ".join(wide.columns) + " |", "|---|" + "---|" * len(wide.columns)]
        lines += [f"| {t} | " + " | ".join(f"{v:,.2f}" for v in row) + " |" for t, row in wide.iterrows()]
        lines.append("")
    for arch, plan in result.architectures.items():
        s = plan.solver
        lines += [f"## {arch}", "", f"Solver: {s.status} ({s.termination}), gap {f'{100 * s.gap:.3f} %' if s.gap is not None else '-'}, HiGHS {s.time_s:.3f} s, build {s.build_s:.3f} s.", ""]
        if not plan.feasible:
            lines += [f"- **{d.service}/{d.bucket}** `{d.constraint}`: {d.message} — fix: {d.fix}" for d in plan.diagnosis] + [""]
            continue
        lines += ["| pool | instances | devices | util mean | util peak | cap | USD/month |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {p.name} | {p.instances} | {p.devices} | {p.utilization_mean:.3f} | {p.utilization_peak:.3f} | {p.utilization_cap:.3f} | {p.cost_usd_per_month:,.0f} |" for p in plan.pools]
        lines += (["", *[f"- {line}" for line in parallelism_lines(plan)]] if parallelism_lines(plan) else [])
        lines += ["", "| service | TTFT predicted (ms) | target | TPOT/ITL predicted (ms) | target |", "|---|---|---|---|---|"]
        lines += [f"| {lp.service} | p{lp.ttft_quantile * 100:g} {lp.ttft_predicted_ms:,.0f} | {lp.ttft_target_ms:,g} | {lp.token_metric.upper()} {stat_label(lp.tpot_quantile)} {lp.tpot_predicted_ms:.1f} | {lp.tpot_target_ms:,g} |" for lp in plan.latency]
        lines += ["", f"{fmt(plan.usd_per_million_tokens)} USD per 1M tokens, {fmt(plan.energy_wh_per_1k_tokens)} Wh per 1k tokens.", ""]
        lines += [f"- Why: {e}" for e in pool_explanations(plan)] + ([""] if pool_explanations(plan) else [])
        lines += speculation_markdown(result, arch)  # planner.perf.speculative: which decode points speculate
        lines += [*(f"- {line}" for line in encode_lines(result, arch)), ""] if encode_lines(result, arch) else []  # encode phase
        lines += tool_phase_markdown(plan)  # tool execution phase (planner.agents)
        lines += simulation_markdown(plan)  # discrete-event check at peak (planner.verify)
        if plan.binding:
            lines += ["What limits this plan: " + "; ".join(dict.fromkeys(f"{plain_limit(b.name, b.kind, b.detail)} (`{b.name}`)" for b in plan.binding)), ""]
    if result.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def speculation_lines(result: PlanResult, arch: str) -> list[str]:
    """Per decode or shared (unified) pool of ``arch`` with a speculative service: which routed buckets use speculation
    (the capacity snapshot's ``spec_*`` columns, :mod:`planner.perf.speculative`) and which stay plain."""
    plan = result.architectures[arch]
    routed = {(r.service, r.bucket, r.pool) for r in plan.routing if r.role in ("decode", "unified") and r.share > 0}
    out = []
    for pool in plan.pools:
        if pool.role not in ("decode", "unified"):
            continue
        rows = [p for p in result.capacity.points if p.get("role") == pool.role and (p.get("service"), p.get("bucket"), pool.name) in routed
                and p.get("config") == pool.config and "spec_method" in p]
        spec = [p for p in rows if isinstance(p.get("spec_method"), str) and p["spec_method"]]
        if not spec and not any(math.isfinite(float(p.get("spec_breakeven_batch") or math.nan)) for p in rows):
            continue
        plain = [f"{p['service']}/{p['bucket']}" for p in rows if p not in spec]
        used = "; ".join(f"{p['service']}/{p['bucket']} at batch {p['max_batch']} ({p['spec_tokens_per_step']:.2f} tokens per "
                         f"{p['spec_step_ms']:.1f} ms step, {p['instance_seconds_per_request']:.3g} instance-s per request against "
                         f"{p['plain_instance_seconds_per_request']:.3g} plain)" for p in spec)
        line = f"Speculative decoding in {pool.name}: " + (f"{spec[0]['spec_method']} k={spec[0]['spec_tokens']} for {used}" if spec else "not chosen")
        if plain:
            line += f"; plain decoding for {', '.join(plain)} (cheaper there: a larger batch within the targets, where the verify step is compute-bound)"
        out.append(line)
    return out


def speculation_markdown(result: PlanResult, arch: str) -> list[str]:
    lines = speculation_lines(result, arch)
    return [*(f"- {line}" for line in lines), ""] if lines else []


def write_outputs(result: PlanResult, out_dir: str | Path) -> list[Path]:
    """Write plan.json, costs.csv/.parquet, pools.csv/.parquet and report.md into ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / "plan.json", d / "costs.csv", d / "pools.csv", d / "report.md", d / "costs.parquet", d / "pools.parquet"]
    paths[0].write_text(to_json(result.model_dump(mode="json")) + "\n", encoding="utf-8")
    costs, pools = cost_table(result), pool_table(result)
    costs.to_csv(paths[1], index=False)
    pools.to_csv(paths[2], index=False)
    paths[3].write_text(markdown(result), encoding="utf-8")
    costs.to_parquet(paths[4], index=False)
    pools.to_parquet(paths[5], index=False)
    return paths
