"""Text of the tool-phase section of a plan (terminal and Markdown)."""

from __future__ import annotations

import math

from planner.cli.output import table
from planner.schema.plan import ArchitecturePlan, ToolPhasePlan


def _usd(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _num(v: float | None, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{digits}f}"


def _cut(text: str, width: int = 100) -> str:
    """``text`` whole up to ``width`` characters, else cut there with an ellipsis (was cut at 60 without one,
    mid-word: "- (no KV tier (no tool_phase.kv_tier.usd_per_gb_month and no" read as whole)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def _alt(tp: ToolPhasePlan) -> list[list[str]]:
    rows = []
    for r in tp.tools:
        alt = {a.policy: a for a in r.alternatives}
        rows.append([f"{r.service}/{r.tool}", r.policy, _num(r.breakeven_wait_s, 2)]
                    + [_usd(alt[p].usd_per_month) if alt[p].usd_per_month is not None else _cut(f"- ({alt[p].reason})") for p in ("hold", "offload", "recompute")])
    return rows


def tool_phase_lines(plan: ArchitecturePlan) -> list[str]:
    """Terminal lines: per tool latency, sessions in wait, KV, reload, policy and alternatives; CPU pool; KV tier; statements."""
    tp = plan.tool_phase
    if tp is None:
        return []
    out = ["", "tool phase (per service/tool; latency from the log or the instance):"]
    out.append(table(["service/tool", "calls/LLM call", "p50 ms", "p90 ms", "p99 ms", "timeout", "retry", "wait s", "KV/session GB",
                      "in wait (mean/planned)", "reload ms (mean)", "recompute ms (mean)", "hold/offload/recompute"],
                     [[f"{r.service}/{r.tool}", f"{r.calls_per_request:.2f}", _num(r.latency_p50_ms), _num(r.latency_p90_ms), _num(r.latency_p99_ms),
                       f"{r.timeout_share:.0%}", f"{r.retry_share:.0%}", f"{r.wait_mean_s:.2f}", f"{r.kv_bytes_per_session / 1e9:.2f}",
                       f"{r.sessions_in_wait_mean:.1f}/{r.sessions_in_wait_peak:.1f}", _num(r.reload_ms), _num(r.recompute_ms),
                       f"{r.hold_share:.0%}/{r.offload_share:.0%}/{r.recompute_share:.0%}"] for r in tp.tools]))
    out.append("")
    out.append(table(["service/tool", "policy", "break-even wait s", "hold USD/month", "offload USD/month", "recompute USD/month"], _alt(tp)))
    out.append("")
    if tp.cpu_pools:
        out.append(table(["CPU pool", "servers", "cores each", "cores needed (peak)", "util peak", "cap", "KV tier GB", "USD/month"],
                         [[c.server, c.instances, c.cores_per_server, f"{c.cores_needed_peak:.1f}", f"{c.utilization_peak:.3f}", f"{c.utilization_cap:.2f}",
                           f"{c.kv_tier_gb:,.0f}", _usd(c.cost_usd_per_month)] for c in tp.cpu_pools]))
    price = f"{tp.kv_tier_usd_per_gb_month:g} USD/GB-month" if tp.kv_tier_usd_per_gb_month is not None else "inside the CPU pool"
    out.append(f"  KV tier: {tp.kv_tier_gb:,.0f} GB ({price}; {tp.kv_tier_location}); CPU cores at peak {tp.cpu_cores_peak:.1f} "
               f"(tokenisation {tp.tokenizer_cores_peak:.1f})")
    out += [f"  - {s}" for s in tp.statements]
    return out


def tool_phase_markdown(plan: ArchitecturePlan) -> list[str]:
    tp = plan.tool_phase
    if tp is None:
        return []
    lines = ["### Tool phase", "", "| service/tool | calls per LLM call | p50 / p90 / p99 ms | timeout / retry | KV per session (GB) | sessions in wait (mean / planned) | reload ms (mean) | recompute ms (mean) | hold / offload / recompute |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.service}/{r.tool} | {r.calls_per_request:.2f} | {_num(r.latency_p50_ms)} / {_num(r.latency_p90_ms)} / {_num(r.latency_p99_ms)} | {r.timeout_share:.0%} / {r.retry_share:.0%} "
              f"| {r.kv_bytes_per_session / 1e9:.2f} | {r.sessions_in_wait_mean:.1f} / {r.sessions_in_wait_peak:.1f} | {_num(r.reload_ms)} | {_num(r.recompute_ms)} "
              f"| {r.hold_share:.0%} / {r.offload_share:.0%} / {r.recompute_share:.0%} |" for r in tp.tools]
    lines += ["", "| service/tool | policy | break-even wait (s) | hold USD/month | offload USD/month | recompute USD/month |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in _alt(tp)]
    if tp.cpu_pools:
        lines += ["", "| CPU pool | servers | cores needed (peak) | util peak | KV tier GB | USD/month |", "|---|---|---|---|---|---|"]
        lines += [f"| {c.server} | {c.instances} | {c.cores_needed_peak:.1f} | {c.utilization_peak:.3f} | {c.kv_tier_gb:,.0f} | {_usd(c.cost_usd_per_month)} |" for c in tp.cpu_pools]
    lines += ["", f"KV tier: {tp.kv_tier_gb:,.0f} GB ({tp.kv_tier_location})."]
    lines += [""] + [f"- {s}" for s in tp.statements] + [""]
    return lines
