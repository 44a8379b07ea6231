"""One self-contained HTML report: the verdict on top, the main numbers, why, and charts.

The page has no scripts and no external resources (styles inline, charts as inline SVG from
:mod:`planner.report.charts`), so it can be mailed and opened offline. It is built from
sections, each a pure function of one optional input that returns HTML (or ``""`` when
its input is absent), so every command can render what it has:

=================  ===========================================  ================================
section            input                                        ``write_html`` keyword
=================  ===========================================  ================================
verdict, numbers   :class:`~planner.schema.plan.PlanResult`     ``plan``
plan, costs,       the same plan                                ``plan``
utilisation, unit
costs, solver
tool phase         the plan's ``ArchitecturePlan.tool_phase``   ``plan``
tools              per-tool statistics                          ``tools``
simulated latency  ``SimResult``, scenario -> ``SimResult``,    ``simulation``
                   ``ScenarioRun`` list, or samples DataFrame
sweep              tidy sweep DataFrame (``run_sweep`` rows)    ``sweep`` (``sweep_x``),
                   and bisection brackets                       ``crossovers``
tornado            tornado rows                                 ``tornado``
budget frontier    frontier rows (``budget_frontier``)          ``frontier``
=================  ===========================================  ================================

Column contracts of the study inputs are documented on the chart functions in
:mod:`planner.report.charts`; the studies' own frames (:mod:`planner.studies.sweep`,
:mod:`planner.studies.budget`) are mapped to them by :func:`sweep_frame`,
:func:`tornado_frame` and :func:`frontier_frame`. Without a plan, the page opens with a
study headline (:func:`study_verdict`). Numbers are rounded for reading (3 significant digits,
thousands separators, whole dollars from $100) and always carry their unit.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.report import charts as ch
from planner.report.charts import Chart, pct, sig, usd

# re-exported: `from planner.report.html import load_plan`
from planner.report.plan_io import load_plan as load_plan

if TYPE_CHECKING:
    import pandas as pd

    from planner.schema.plan import ArchitecturePlan, PlanResult

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;color:#1b1b1b;
 max-width:1080px;margin:24px auto;padding:0 20px;line-height:1.45;background:#fff}
h1{font-size:1.5em;margin:0 0 2px}
h2{font-size:1.2em;margin:28px 0 8px;border-bottom:2px solid #e3e3e3;padding-bottom:3px}
h3{font-size:1.02em;margin:16px 0 6px}
.sub{color:#555;margin:0 0 14px}
.verdict{font-size:1.22em;font-weight:600;padding:12px 16px;border-left:6px solid #0072B2;background:#eef5fb;margin:10px 0}
.verdict.none{border-color:#C00000;background:#fbeeee}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{flex:1 1 150px;border:1px solid #ddd;border-radius:6px;padding:8px 12px}
.card .v{font-size:1.35em;font-weight:700}
.card .k{color:#555;font-size:.85em}
table{border-collapse:collapse;margin:6px 0 10px;font-size:.92em}
th,td{padding:3px 10px;border-bottom:1px solid #e6e6e6;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600}
#costs td,#unit-costs td,#solver td{white-space:nowrap}
#plan td:nth-child(2),#plan td:nth-child(3){white-space:nowrap}
#plan table,#tool-phase table,#simulation table{font-size:.86em}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.n{white-space:nowrap}
.ok{color:#1a7f37;font-weight:600}.bad{color:#C00000;font-weight:600}
figure.chart{margin:10px 0 18px}
figure.chart svg{width:100%;height:auto;max-width:900px;display:block}
figcaption{color:#444;font-size:.9em;margin-top:4px}
.side{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.side>*{flex:1 1 420px}
ul.why li{margin:3px 0}
.muted{color:#666;font-size:.88em}
.verdict.tool{border-color:#D55E00;background:#fdf1e8;font-size:1.05em}
.callout{padding:8px 14px;border-left:4px solid #999;background:#f6f6f6;margin:8px 0}
.study{font-size:1.12em}
"""


# ---------------------------------------------------------------------------------------------
# small HTML helpers


def esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[bool] | None = None,
           table_id: str | None = None) -> str:
    """A table; ``rows`` hold display strings (already rounded, units included) or raw HTML via ``_Raw``."""
    numeric = numeric or [False] * len(headers)
    head = "".join(f'<th class="n">{esc(h)}</th>' if n else f"<th>{esc(h)}</th>" for h, n in zip(headers, numeric, strict=True))
    body = []
    for row in rows:
        cells = []
        for v, n in zip(row, numeric, strict=True):
            text = v.html if isinstance(v, _Raw) else esc(v)
            cells.append(f'<td class="n">{text}</td>' if n else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    tid = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{tid}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Raw:
    __slots__ = ("html",)

    def __init__(self, html_text: str) -> None:
        self.html = html_text


def _met(ok: bool) -> _Raw:
    return _Raw('<span class="ok">met</span>' if ok else '<span class="bad">missed</span>')


def _figure(chart: Chart | None) -> str:
    if chart is None:
        return ""
    return f'<figure class="chart" id="{esc(chart.id)}">{chart.svg}<figcaption>{esc(chart.caption)}</figcaption></figure>'


def _section(section_id: str, title: str, body: str) -> str:
    if not body:
        return ""
    return f'<section id="{esc(section_id)}"><h2>{esc(title)}</h2>{body}</section>'


def ms(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{sig(value)} ms"


def tokens(n: float) -> str:
    """Token counts in words: ``21.9 billion``, ``1.18 trillion``, ``350 million``."""
    for scale, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if abs(n) >= scale:
            return f"{sig(n / scale)} {word}"
    return sig(n)


def _feasible(plan: PlanResult) -> list[ArchitecturePlan]:
    return [a for a in plan.architectures.values() if a.feasible and a.costs is not None]


# ---------------------------------------------------------------------------------------------
# the verdict


def verdict_sentence(plan: PlanResult) -> str:
    """The verdict in one sentence, from the plan's numbers. When the shared pool wins it says so first."""
    v = plan.verdict
    archs = plan.architectures
    if v.winner is None or v.winner not in archs or archs[v.winner].costs is None:
        return f"No architecture has a feasible plan for {plan.instance}: see the diagnosis below."
    win = archs[v.winner]
    assert win.costs is not None
    head = "Shared pool wins" if v.winner == "shared" else f"{v.winner.capitalize()} wins"
    run = archs.get(v.runner_up) if v.runner_up else None
    if run is None or run.costs is None:
        others = [a for a in archs if a != v.winner]
        tail = f"; {', '.join(others)} {'is' if len(others) == 1 else 'are'} infeasible" if others else ""
        s = f"{head}: {usd(win.costs.total_usd_per_month)}/month is the only feasible plan{tail}."
    else:
        s = (f"{head}: {usd(win.costs.total_usd_per_month)}/month against {usd(run.costs.total_usd_per_month)}/month "
             f"for {v.runner_up} — {usd(v.margin_usd_per_month)}/month ({pct(v.margin_share, 1)}) less, "
             f"{usd(v.margin_usd_per_million_tokens)} per 1M tokens.")
    if not v.proven:
        s = s[:-1] + " (not proven optimal: the verdict may change with more solve time)."
    return s


def _key_numbers(plan: PlanResult) -> str:
    v = plan.verdict
    if v.winner is None or v.winner not in plan.architectures:
        return ""
    w = plan.architectures[v.winner]
    if w.costs is None:
        return ""
    met = all(lp.ttft_met and lp.tpot_met for lp in w.latency) if w.latency else None
    cards = [
        ("total cost", f"{usd(w.costs.total_usd_per_month)}/month"),
        ("cost per 1M tokens", f"{usd(w.usd_per_million_tokens)}" if w.usd_per_million_tokens is not None else "–"),
        ("energy per 1k tokens", f"{sig(w.energy_wh_per_1k_tokens)} Wh" if w.energy_wh_per_1k_tokens is not None else "–"),
        ("devices", f"{sum(p.devices for p in w.pools):,}"),
        ("facility power at mean load", f"{sig(w.power_kw_mean)} kW"),
        ("tokens per month", tokens(w.tokens_per_month)),
        ("latency targets", "–" if met is None else ("all met" if met else "missed")),
    ]
    items = "".join(f'<div class="card"><div class="v">{esc(val)}</div><div class="k">{esc(k)} ({esc(v.winner)})</div></div>'
                    for k, val in cards)
    return f'<div class="cards" id="key-numbers">{items}</div>'


def verdict_section(plan: PlanResult) -> str:
    cls = "verdict" if plan.verdict.winner else "verdict none"
    out = [f'<p class="{cls}" id="verdict">{esc(verdict_sentence(plan))}</p>', _key_numbers(plan)]
    if plan.verdict.confidence is not None:  # planner.optimize.confidence
        out.append(f'<p id="confidence"><b>Confidence:</b> {esc(plan.verdict.confidence.summary)}</p>')
    why = plan.verdict.reasons[1:]
    if why:
        out.append('<h3>Why</h3><ul class="why">' + "".join(f"<li>{esc(r)}</li>" for r in why) + "</ul>")
    for a in plan.architectures.values():
        if a.diagnosis:
            out.append(f"<h3>Why {esc(a.architecture)} is infeasible</h3>")
            out.append(_table(["service", "bucket", "constraint", "problem", "fix"],
                              [(d.service, d.bucket, d.constraint, d.message, d.fix) for d in a.diagnosis]))
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# the plan


def plan_section(plan: PlanResult) -> str:
    out = []
    for a in plan.architectures.values():
        status = a.solver.status + (f", gap {pct(a.solver.gap, 2)}" if a.solver.gap is not None else "")
        total = f" — {usd(a.costs.total_usd_per_month)}/month" if a.costs is not None else ""
        win = " (winner)" if a.architecture == plan.verdict.winner else ""
        out.append(f"<h3>{esc(a.architecture.capitalize())}{esc(win)}{esc(total)} <span class=\"muted\">solver: {esc(status)}</span></h3>")
        if not a.feasible:
            out.append("<p>No feasible plan.</p>")
            continue
        out.append(_table(
            ["pool role", "device / parallelism", "model", "instances", "devices", "spare (N+k)", "util. mean", "util. peak",
             "util. cap", "cost (USD/month)"],
            [(p.role, p.config, p.model, f"{p.instances:,}", f"{p.devices:,}", f"{p.redundancy}", pct(p.utilization_mean),
              pct(p.utilization_peak), pct(p.utilization_cap), usd(p.cost_usd_per_month)) for p in a.pools],
            numeric=[False, False, False, True, True, True, True, True, True, True],
            table_id=f"table-pools-{a.architecture}"))
        if a.latency:
            out.append(_table(
                ["service", "TTFT target", "TTFT predicted", "", "TPOT target", "TPOT predicted", ""],
                [(lp.service, f"p{lp.ttft_quantile * 100:g} ≤ {ms(lp.ttft_target_ms)}", ms(lp.ttft_predicted_ms), _met(lp.ttft_met),
                  f"p{lp.tpot_quantile * 100:g} ≤ {ms(lp.tpot_target_ms)}", ms(lp.tpot_predicted_ms), _met(lp.tpot_met))
                 for lp in a.latency],
                numeric=[False, True, True, False, True, True, False], table_id=f"table-latency-{a.architecture}"))
            methods = sorted({lp.method for lp in a.latency if lp.method})
            if methods:
                out.append(f'<p class="muted">Predicted latency at peak: {esc("; ".join(methods))}.</p>')
    return "".join(out)


def costs_section(plan: PlanResult) -> str:
    from planner.schema.plan import COST_TERMS

    archs = _feasible(plan)
    if not archs:
        return ""
    chart = _figure(ch.cost_terms_chart(plan))
    terms = [t for t in COST_TERMS if any(abs(a.costs.terms()[t]) > 0 for a in archs if a.costs)]
    headers = ["cost term"] + [f"{a.architecture} (USD/month)" for a in archs]
    rows: list[list[Any]] = []
    diff = len(archs) >= 2 and plan.verdict.winner is not None and plan.verdict.runner_up is not None
    if diff:
        headers.append(f"{plan.verdict.runner_up} − {plan.verdict.winner}")
    for t in terms:
        row: list[Any] = [ch.TERM_LABELS[t]] + [usd(a.costs.terms()[t]) for a in archs if a.costs]
        if diff:
            row.append(usd(plan.verdict.term_differences_usd_per_month.get(t, 0.0)))
        rows.append(row)
    total: list[Any] = [_Raw("<b>total</b>")] + [_Raw(f"<b>{esc(usd(a.costs.total_usd_per_month))}</b>") for a in archs if a.costs]
    if diff:
        total.append(_Raw(f"<b>{esc(usd(plan.verdict.margin_usd_per_month))}</b>"))
    rows.append(total)
    idle: list[Any] = [_Raw('<span class="muted">of which idle capacity (already counted above)</span>')]
    idle += [usd(a.costs.idle_capacity_usd_per_month) for a in archs if a.costs]
    if diff:
        idle.append("")
    rows.append(idle)
    table = _table(headers, rows, numeric=[False] + [True] * (len(headers) - 1), table_id="table-cost-terms")
    return chart + table


def utilization_section(plan: PlanResult) -> str:
    return _figure(ch.utilization_chart(plan))


def unit_costs_section(plan: PlanResult) -> str:
    archs = _feasible(plan)
    if not archs:
        return ""
    table = _table(
        ["architecture", "USD per 1M tokens", "Wh per 1k tokens", "tokens per month", "facility power at mean load"],
        [(a.architecture, usd(a.usd_per_million_tokens) if a.usd_per_million_tokens is not None else "–",
          f"{sig(a.energy_wh_per_1k_tokens)} Wh" if a.energy_wh_per_1k_tokens is not None else "–",
          tokens(a.tokens_per_month), f"{sig(a.power_kw_mean)} kW") for a in archs],
        numeric=[False, True, True, True, True], table_id="table-unit-costs")
    return _figure(ch.unit_costs_chart(plan)) + table


def solver_section(plan: PlanResult) -> str:
    rows = []
    for a in plan.architectures.values():
        s = a.solver
        rows.append((a.architecture, s.status, pct(s.gap, 2) if s.gap is not None else "–", f"{sig(s.time_s)} s",
                     f"{sig(s.build_s)} s", f"{sig(s.extract_s)} s", f"{s.rounds}", f"{s.variables:,}", f"{s.constraints:,}"))
    out = _table(["architecture", "status", "MIP gap", "solve time", "build time", "extract time", "rounds", "variables",
                  "constraints"], rows, numeric=[False, False, True, True, True, True, True, True, True], table_id="table-solver")
    if plan.notes:
        out += "<h3>Notes</h3><ul>" + "".join(f"<li>{esc(n)}</li>" for n in plan.notes) + "</ul>"
    return out


# ---------------------------------------------------------------------------------------------
# optional inputs


TOOL_COLUMNS = ("service", "tool", "calls_per_request", "latency_mean_ms", "latency_p50_ms", "latency_p90_ms",
                "latency_p99_ms", "error_share", "timeout_share", "cpu_seconds_per_call")


def tool_frame(tools: Any) -> pd.DataFrame:
    """Normalise tool statistics to one row per (service, tool) with :data:`TOOL_COLUMNS`.

    Accepts a DataFrame with those columns (``service`` and ``cpu_seconds_per_call`` optional),
    a mapping tool -> :class:`~planner.schema.workload.ToolStats`, or service -> (tool -> ToolStats).
    """
    import pandas as pd

    if isinstance(tools, pd.DataFrame):
        df = tools.copy()
    else:
        rows = []
        for key, val in dict(tools).items():
            nested = val.items() if isinstance(val, Mapping) else [(key, val)]
            service = key if isinstance(val, Mapping) else ""
            for tool, st in nested:
                rows.append({"service": service, "tool": tool, "calls_per_request": st.calls_per_request,
                             "latency_mean_ms": st.latency.mean_ms, "latency_p50_ms": st.latency.p50_ms,
                             "latency_p90_ms": st.latency.p90_ms, "latency_p99_ms": st.latency.p99_ms,
                             "error_share": st.error_share, "timeout_share": st.timeout_share,
                             "cpu_seconds_per_call": st.cpu_seconds_per_call})
        df = pd.DataFrame(rows, columns=list(TOOL_COLUMNS))
    for col in ("service",):
        if col not in df.columns:
            df[col] = ""
    for col in ("cpu_seconds_per_call", "error_share", "timeout_share"):
        if col not in df.columns:
            df[col] = 0.0
    return df.reset_index(drop=True)


def tools_section(tools: Any) -> str:
    df = tool_frame(tools)
    if df.empty:
        return ""
    table = _table(
        ["service", "tool", "calls per request", "mean", "p50", "p90", "p99", "errors", "timeouts", "CPU per call"],
        [(str(r["service"]) or "–", str(r["tool"]), sig(float(r["calls_per_request"])), ms(float(r["latency_mean_ms"])),
          ms(float(r["latency_p50_ms"])), ms(float(r["latency_p90_ms"])), ms(float(r["latency_p99_ms"])),
          pct(float(r["error_share"]), 1), pct(float(r["timeout_share"]), 1), f"{sig(float(r['cpu_seconds_per_call']) * 1e3)} ms")
         for r in df.to_dict("records")],
        numeric=[False, False, True, True, True, True, True, True, True, True], table_id="table-tools")
    return _figure(ch.tool_latency_chart(df)) + table


def _tool_plan(plan: PlanResult) -> ArchitecturePlan | None:
    """The architecture whose tool phase the report shows: the winner's, else the first that has one."""
    w = plan.architectures.get(plan.verdict.winner or "")
    if w is not None and w.tool_phase is not None:
        return w
    return next((a for a in plan.architectures.values() if a.tool_phase is not None), None)


def tool_dominance(plan: PlanResult) -> list[str]:
    """The plan's statements that tool waiting dominates a service (empty when the LLM pools set the pace)."""
    a = _tool_plan(plan)
    if a is None or a.tool_phase is None:
        return []
    return [st for st in a.tool_phase.statements if "tool waiting dominates" in st]


def _gb(value_bytes: float) -> str:
    return f"{sig(value_bytes / 1e9)} GB"


def tool_phase_section(plan: PlanResult) -> str:
    """Per service and tool: latency, timeouts/retries, KV per session, sessions in wait, reload, policy and
    the cost of each alternative; the CPU pool and KV tier; the plain statements (from ``ArchitecturePlan.tool_phase``)."""
    a = _tool_plan(plan)
    if a is None or a.tool_phase is None:
        return ""
    tp = a.tool_phase
    out = [f'<p class="muted">From the {esc(a.architecture)} plan{" (the winner)" if a.architecture == plan.verdict.winner else ""}. '
           f"{esc(tp.method)}</p>" if tp.method else ""]
    service_lines = [st for st in tp.statements if "/" not in st.split(":", 1)[0]]
    tool_lines = [st for st in tp.statements if st not in service_lines]
    for st in service_lines:
        cls = "verdict tool" if "tool waiting dominates" in st else "callout"
        out.append(f'<p class="{cls}">{esc(st)}</p>')
    if tp.tools:
        import pandas as pd

        frame = pd.DataFrame([{"service": r.service, "tool": r.tool, "latency_p50_ms": r.latency_p50_ms,
                               "latency_p90_ms": r.latency_p90_ms, "latency_p99_ms": r.latency_p99_ms} for r in tp.tools])
        out.append(_figure(ch.tool_latency_chart(frame, chart_id="chart-tool-phase-latency")))
        out.append(_table(
            ["service", "tool", "calls per LLM call", "calls/s at peak", "p50", "p90", "p99", "timeouts", "retries", "errors",
             "mean wait (with retries)"],
            [(r.service, r.tool, sig(r.calls_per_request), sig(r.calls_per_s_peak), ms(r.latency_p50_ms), ms(r.latency_p90_ms),
              ms(r.latency_p99_ms), pct(r.timeout_share, 1), pct(r.retry_share, 1), pct(r.error_share, 1), f"{sig(r.wait_mean_s)} s")
             for r in tp.tools],
            numeric=[False, False] + [True] * 9, table_id="table-tool-phase"))
        out.append(_table(
            ["service", "tool", "KV per waiting session", "sessions in wait (mean)", "sessions in wait (planned)",
             "reload before next turn", "recompute instead", "CPU cores at peak"],
            [(r.service, r.tool, _gb(r.kv_bytes_per_session), sig(r.sessions_in_wait_mean), sig(r.sessions_in_wait_peak),
              ms(r.reload_ms), ms(r.recompute_ms), sig(r.cpu_cores_peak)) for r in tp.tools],
            numeric=[False, False] + [True] * 6, table_id="table-tool-kv"))
        out.append("<h3>KV state while a session waits: the policy chosen and what each alternative costs</h3>")
        out.append(_figure(ch.tool_policy_chart(tp.tools)))

        def alt(r: Any, pol: str) -> str:
            x = next((v for v in r.alternatives if v.policy == pol), None)
            if x is None:
                return "–"
            return f"{usd(x.usd_per_month)}/month" if x.usd_per_month is not None else f"not possible: {x.reason}"

        out.append(_table(
            ["service", "tool", "policy chosen", "hold / offload / recompute share", "break-even wait", "hold", "offload", "recompute"],
            [(r.service, r.tool, r.policy, f"{pct(r.hold_share)} / {pct(r.offload_share)} / {pct(r.recompute_share)}",
              f"{sig(r.breakeven_wait_s)} s" if r.breakeven_wait_s is not None else "never", alt(r, "hold"), alt(r, "offload"),
              alt(r, "recompute")) for r in tp.tools],
            numeric=[False, False, False, True, True, True, True, False], table_id="table-tool-policy"))
    if tp.cpu_pools:
        out.append("<h3>CPU pool and KV tier</h3>")
        out.append(_table(
            ["CPU server", "servers", "cores each", "memory each", "cores needed at peak", "util. peak", "util. cap", "spare (N+k)",
             "KV tier here", "cost (USD/month)"],
            [(c.server, f"{c.instances:,}", f"{c.cores_per_server:,}", f"{sig(c.memory_gb_per_server)} GB", sig(c.cores_needed_peak),
              pct(c.utilization_peak, 1), pct(c.utilization_cap), f"{c.redundancy}", f"{sig(c.kv_tier_gb)} GB", usd(c.cost_usd_per_month))
             for c in tp.cpu_pools],
            numeric=[False] + [True] * 9, table_id="table-cpu-pool"))
    price = (f"{usd(tp.kv_tier_usd_per_gb_month)} per GB-month" if tp.kv_tier_usd_per_gb_month is not None
             else "priced inside the CPU pool")
    out.append(f'<p id="kv-tier">KV tier: <b>{esc(sig(tp.kv_tier_gb))} GB</b> ({esc(price)}; {esc(tp.kv_tier_location or "–")}). '
               f"CPU cores needed at peak: <b>{esc(sig(tp.cpu_cores_peak))}</b> (of which tokenisation {esc(sig(tp.tokenizer_cores_peak))}).</p>")
    if tool_lines:
        out.append('<ul class="why">' + "".join(f"<li>{esc(st)}</li>" for st in tool_lines) + "</ul>")
    return "".join(out)


def simulation_section(simulation: Any, plan: PlanResult | None) -> str:
    chart = _figure(ch.latency_chart(simulation, plan))
    runs = ch.sim_runs(simulation)
    table = ""
    if runs:
        many = len(runs) > 1 or bool(runs[0][0])
        rows = []
        for scen, res in runs:
            for name in sorted(res.services):
                s = res.services[name]
                row: list[Any] = [scen] if many else []
                row += [name, f"{s.completed:,}", f"{s.unfinished + s.rejected:,}", ms(s.ttft.p50 * 1e3), ms(s.ttft.p99 * 1e3),
                        ms(s.ttft_target_s * 1e3), _met(s.ttft_met), ms(s.tpot.p50 * 1e3), ms(s.tpot.p99 * 1e3),
                        ms(s.tpot_target_s * 1e3), _met(s.tpot_met), pct(s.slo_attainment, 1)]
                rows.append(row)
        headers = (["scenario"] if many else []) + ["service", "requests", "lost", "TTFT p50", "TTFT p99", "target", "",
                                                     "TPOT p50", "TPOT p99", "target", "", "within SLO"]
        numeric = ([False] if many else []) + [False, True, True, True, True, True, False, True, True, True, False, True]
        table = _table(headers, rows, numeric=numeric, table_id="table-simulation")
        if many:
            bad = [f"{scen}/{name}" for scen, res in runs for name, s in sorted(res.services.items()) if not (s.ttft_met and s.tpot_met)]
            head = (f"Every scenario meets its latency targets ({', '.join(sc for sc, _ in runs)})." if not bad else
                    f"Latency targets missed in: {', '.join(bad)}.")
            table = f'<p class="{"ok" if not bad else "bad"}" id="simulation-verdict">{esc(head)}</p>' + table
    return chart + table


def _is_frame(data: Any) -> bool:
    import pandas as pd

    return isinstance(data, pd.DataFrame)


_SWEEP_OUTPUT_COLUMNS = {"scenario", "architecture", "feasible", "status", "gap", "devices", "device_mix", "pools", "tokens_per_month",
                         "usd_per_million_tokens", "energy_wh_per_1k_tokens", "winner", "is_winner", "model_reused", "solve_s"}
"""Output columns of :func:`planner.studies.sweep.run_sweep` rows (with every ``*_usd_per_month``); the rest are parameters."""


def sweep_frame(sweep: Any, x: str | None = None) -> tuple[pd.DataFrame, str | None, list[str]]:
    """The sweep rows the chart draws, the swept parameter, and notes.

    Accepts the chart's format (:func:`planner.report.charts.sweep_chart`) or the tidy rows of
    :func:`planner.studies.sweep.run_sweep` (one row per scenario and architecture, swept
    dot-paths as columns). When several parameters vary, the chart keeps the rows where the
    others sit at their first value (the notes say which).
    """
    df = ch.as_frame(sweep)
    notes: list[str] = []
    if df.empty or "total_usd_per_month" not in df.columns:
        return df, None, notes
    params = [c for c in df.columns if c not in _SWEEP_OUTPUT_COLUMNS and not str(c).endswith("_usd_per_month")] \
        if "scenario" in df.columns else []
    numeric = [c for c in params if ch._numeric(df[c]) and df[c].nunique() > 1]
    if x is None:
        x = next((c for c in numeric if c.endswith("rate_multiplier")), numeric[0] if numeric else None) or ch.sweep_parameter(df)
    others = [c for c in params if c != x and df[c].nunique(dropna=False) > 1]
    if others:
        first = {c: df[c].iloc[0] for c in others}
        for c, v in first.items():
            df = df[df[c] == v]
        notes.append("The chart holds " + ", ".join(f"{c} = {v}" for c, v in first.items()) + "; the table has every scenario.")
    return df, x, notes


def sweep_section(sweep: Any, x: str | None, crossovers: Any = None) -> str:
    df, x, notes = sweep_frame(sweep, x)
    brackets: list[tuple[float, float]] | None = None
    cross = ch.as_frame(crossovers) if crossovers is not None else None
    if cross is not None and len(cross) and {"path", "low", "high"}.issubset(cross.columns) and x is not None:
        brackets = [(float(r["low"]), float(r["high"])) for r in cross.to_dict("records") if r["path"] == x]
    chart = ch.sweep_chart(df, x, brackets=brackets or None) if x else None
    out = [_figure(chart)] if chart is not None else []
    out += [f'<p class="muted">{esc(n)}</p>' for n in notes]
    if cross is not None and len(cross) and {"path", "low", "high", "winner_low", "winner_high"}.issubset(cross.columns):
        out.append("<h3>Where the verdict flips (bisection)</h3>")
        out.append(_table(["parameter", "below", "wins", "above", "wins", "precision"],
                          [(str(r["path"]), sig(float(r["low"])), str(r["winner_low"]), sig(float(r["high"])), str(r["winner_high"]),
                            pct(float(r["high"]) / float(r["low"]) - 1, 1) if float(r["low"]) > 0 else "–")
                           for r in cross.to_dict("records")],
                          numeric=[False, True, False, True, False, True], table_id="table-crossovers"))
    full = ch.as_frame(sweep)
    if "scenario" in full.columns and "is_winner" in full.columns:
        win = full[full["is_winner"].astype(bool)]
        if len(win):
            out.append("<h3>Winner per scenario</h3>")
            out.append(_table(
                ["scenario", "winner", "total", "per 1M tokens", "devices", "margin over runner-up"],
                [(str(r["scenario"]), str(r["architecture"]), f"{usd(float(r['total_usd_per_month']))}/month",
                  usd(float(r["usd_per_million_tokens"])) if r.get("usd_per_million_tokens") is not None else "–",
                  str(r.get("device_mix", "")), f"{usd(float(r['margin_usd_per_month']))}/month")
                 for r in win.to_dict("records")],
                numeric=[False, False, True, True, False, True], table_id="table-sweep"))
    return "".join(out)


def tornado_frame(tornado: Any) -> pd.DataFrame:
    """The chart's tornado columns from :func:`planner.studies.sweep.tornado` rows (``path``, ``low``, ``high``,
    ``total_at_low_usd_per_month``, ``total_at_high_usd_per_month``, ``base_total_usd_per_month``); the chart's own
    format passes through."""
    df = ch.as_frame(tornado)
    if "total_at_low_usd_per_month" not in df.columns:
        return df
    return df.assign(parameter=df["path"].astype(str), low_usd_per_month=df["total_at_low_usd_per_month"],
                     high_usd_per_month=df["total_at_high_usd_per_month"], base_usd_per_month=df["base_total_usd_per_month"],
                     low_label=[_value(v) for v in df["low"]], high_label=[_value(v) for v in df["high"]])


def _value(v: Any) -> str:
    return sig(float(v)) if isinstance(v, (int, float)) else str(v)


def tornado_section(tornado: Any) -> str:
    return _figure(ch.tornado_chart(tornado_frame(tornado)))


def frontier_frame(frontier: Any) -> pd.DataFrame:
    """The chart's frontier columns from :func:`planner.studies.budget.budget_frontier` rows
    (``max_traffic_multiplier``, ``winner``, ``device_mix``); the chart's own format passes through."""
    df = ch.as_frame(frontier)
    if "max_traffic_multiplier" not in df.columns:
        return df
    mix = [f"{w}: {m}" if isinstance(w, str) and w else "no plan within budget"
           for w, m in zip(df.get("winner", [None] * len(df)), df.get("device_mix", [""] * len(df)), strict=True)]
    return df.assign(traffic_multiplier=df["max_traffic_multiplier"], mix=mix)


def frontier_section(frontier: Any) -> str:
    df = frontier_frame(frontier)
    chart = ch.frontier_chart(df)
    if chart is None:
        return ""
    df = df.sort_values("budget_usd_per_month")
    rows = [(f"{usd(float(r['budget_usd_per_month']))}/month", f"{sig(float(r['traffic_multiplier']))}×",
             f"{usd(float(r['total_usd_per_month']))}/month" if "total_usd_per_month" in df.columns and _finite(r["total_usd_per_month"]) else "–",
             str(r["mix"]) if "mix" in df.columns else "–") for _, r in df.iterrows()]
    table = _table(["budget", "traffic served within SLO", "plan cost", "device mix"], rows,
                   numeric=[True, True, True, False], table_id="table-frontier")
    return _figure(chart) + table


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def study_verdict(sweep: Any = None, crossovers: Any = None, frontier: Any = None) -> str:
    """A headline for a study report without a plan: who wins how often and where it flips; or what the budgets buy."""
    parts: list[str] = []
    if sweep is not None:
        df = ch.as_frame(sweep)
        if "is_winner" in df.columns and "scenario" in df.columns:
            per = df.drop_duplicates("scenario")
            counts = per["winner"].fillna("none feasible").astype(str).value_counts()
            n = len(per)
            wins = ", ".join(f"{('shared pool' if w == 'shared' else w)} wins {k} of {n}" for w, k in counts.items())
            parts.append(f"Across {n} scenario{'s' if n != 1 else ''}: {wins}.")
            cross = ch.as_frame(crossovers) if crossovers is not None else None
            if cross is not None and len(cross) and {"path", "low", "high", "winner_low", "winner_high"}.issubset(cross.columns):
                parts += [f"The verdict flips from {r['winner_low']} to {r['winner_high']} between {r['path']} = "
                          f"{sig(float(r['low']))} and {sig(float(r['high']))}." for r in cross.to_dict("records")]
            elif len(counts) == 1:
                parts.append("The verdict does not flip in the swept range.")
    if frontier is not None:
        df = frontier_frame(frontier)
        if {"budget_usd_per_month", "traffic_multiplier"}.issubset(df.columns) and len(df):
            recs = df.sort_values("budget_usd_per_month").to_dict("records")
            first, last = recs[0], recs[-1]

            def serves(r: Mapping[Any, Any]) -> str:
                return f"{usd(float(r['budget_usd_per_month']))}/month serves {sig(float(r['traffic_multiplier']))}× the forecast"

            if len(recs) == 1:
                mix = f" ({first['mix']})" if isinstance(first.get("mix"), str) and first.get("mix") else ""
                parts.append(f"Within the latency targets, {serves(first)}{mix}.")
            else:
                parts.append(f"Within the latency targets, {serves(first)} and {serves(last)}.")
                if "winner" in df.columns:
                    runs: list[tuple[str, float, float]] = []
                    for r in recs:
                        w = str(r["winner"]) if isinstance(r.get("winner"), str) and r.get("winner") else "no plan"
                        b = float(r["budget_usd_per_month"])
                        if runs and runs[-1][0] == w:
                            runs[-1] = (w, runs[-1][1], b)
                        else:
                            runs.append((w, b, b))
                    if len(runs) == 1:
                        parts.append(f"{'Shared pool' if runs[0][0] == 'shared' else runs[0][0].capitalize()} wins at every budget.")
                    else:
                        parts.append("Winner: " + ", ".join(
                            f"{w} from {usd(lo)}" + (f" to {usd(hi)}/month" if hi > lo else "/month") for w, lo, hi in runs) + ".")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# the page


def render_html(*, plan: PlanResult | None = None, sweep: Any = None, tornado: Any = None, frontier: Any = None,
                simulation: Any = None, tools: Any = None, sweep_x: str | None = None, title: str | None = None,
                crossovers: Any = None) -> str:
    """The report as one HTML string (see the module docstring for the inputs)."""
    name = plan.instance if plan is not None else "study"
    title = title or f"Capacity plan: {name}"
    parts: list[str] = [f"<h1>{esc(title)}</h1>"]
    if plan is not None:
        sub = [f"instance {plan.instance}"]
        if plan.scenario:
            sub.append(f"scenario {plan.scenario}")
        if plan.overrides:
            sub.append("overrides " + ", ".join(f"{k}={v}" for k, v in plan.overrides.items()))
        sub.append("costs in USD per month, latency in ms, energy in Wh")
        parts.append(f'<p class="sub">{esc(" · ".join(sub))}</p>')
        dom = "".join(f'<p class="verdict tool" id="tool-dominance">{esc(st)}</p>' for st in tool_dominance(plan))
        parts.append(f'<section id="summary">{verdict_section(plan)}{dom}</section>')
        if simulation is not None:  # a simulate report: the simulated check right after the verdict
            parts.append(_section("simulation", "Simulated latency", simulation_section(simulation, plan)))
        parts.append(_section("plan", "Plan", plan_section(plan)))
        parts.append(_section("costs", "Cost by term", costs_section(plan)))
        parts.append(_section("utilization", "Utilisation per pool", utilization_section(plan)))
        parts.append(_section("unit-costs", "Cost per token and energy per token", unit_costs_section(plan)))
    else:
        head = study_verdict(sweep, crossovers, frontier)
        if head:
            parts.append(f'<section id="summary"><p class="verdict study" id="verdict">{esc(head)}</p></section>')
    if plan is not None:
        parts.append(_section("tool-phase", "Tool phase", tool_phase_section(plan)))
    if tools is not None:
        parts.append(_section("tools", "Tool statistics", tools_section(tools)))
    if simulation is not None and plan is None:
        parts.append(_section("simulation", "Simulated latency", simulation_section(simulation, plan)))
    if sweep is not None:
        parts.append(_section("sweep", "Sweep: where the verdict flips", sweep_section(sweep, sweep_x, crossovers)))
    if tornado is not None:
        parts.append(_section("tornado", "Sensitivity", tornado_section(tornado)))
    if frontier is not None:
        parts.append(_section("frontier", "Budget frontier", frontier_section(frontier)))
    if plan is not None:
        parts.append(_section("solver", "Solver and notes", solver_section(plan)))
    body = "\n".join(p for p in parts if p)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def write_html(path: str | Path, *, plan: PlanResult | None = None, sweep: Any = None, tornado: Any = None,
               frontier: Any = None, simulation: Any = None, tools: Any = None, sweep_x: str | None = None,
               title: str | None = None, crossovers: Any = None) -> Path:
    """Write the self-contained report to ``path`` (parent folders created) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(plan=plan, sweep=sweep, tornado=tornado, frontier=frontier, simulation=simulation,
                               tools=tools, sweep_x=sweep_x, title=title, crossovers=crossovers), encoding="utf-8")
    return out
