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
tools              per-tool statistics                          ``tools``
simulated latency  ``SimResult`` or samples DataFrame           ``simulation``
sweep              tidy sweep DataFrame                         ``sweep`` (``sweep_x``)
tornado            tornado rows                                 ``tornado``
budget frontier    frontier rows                                ``frontier``
=================  ===========================================  ================================

Column contracts of the study inputs are documented on the chart functions in
:mod:`planner.report.charts`. Numbers are rounded for reading (3 significant digits,
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
#plan td,#costs td,#unit-costs td,#solver td{white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ok{color:#1a7f37;font-weight:600}.bad{color:#C00000;font-weight:600}
figure.chart{margin:10px 0 18px}
figure.chart svg{width:100%;height:auto;max-width:900px;display:block}
figcaption{color:#444;font-size:.9em;margin-top:4px}
.side{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.side>*{flex:1 1 420px}
ul.why li{margin:3px 0}
.muted{color:#666;font-size:.88em}
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
        ("tokens per month", f"{sig(w.tokens_per_month / 1e9)} billion"),
        ("latency targets", "–" if met is None else ("all met" if met else "missed")),
    ]
    items = "".join(f'<div class="card"><div class="v">{esc(val)}</div><div class="k">{esc(k)} ({esc(v.winner)})</div></div>'
                    for k, val in cards)
    return f'<div class="cards" id="key-numbers">{items}</div>'


def verdict_section(plan: PlanResult) -> str:
    cls = "verdict" if plan.verdict.winner else "verdict none"
    out = [f'<p class="{cls}" id="verdict">{esc(verdict_sentence(plan))}</p>', _key_numbers(plan)]
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
          f"{sig(a.tokens_per_month / 1e9)} billion", f"{sig(a.power_kw_mean)} kW") for a in archs],
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


def simulation_section(simulation: Any, plan: PlanResult | None) -> str:
    chart = _figure(ch.latency_chart(simulation, plan))
    table = ""
    if hasattr(simulation, "services") and simulation.services:
        rows = []
        for name in sorted(simulation.services):
            s = simulation.services[name]
            rows.append((name, f"{s.completed:,}", ms(s.ttft.p50 * 1e3), ms(s.ttft.p99 * 1e3), _met(s.ttft_met),
                         ms(s.tpot.p50 * 1e3), ms(s.tpot.p99 * 1e3), _met(s.tpot_met), pct(s.slo_attainment, 1)))
        table = _table(["service", "requests", "TTFT p50", "TTFT p99", "", "TPOT p50", "TPOT p99", "", "within SLO"], rows,
                       numeric=[False, True, True, True, False, True, True, False, True], table_id="table-simulation")
    return chart + table


def sweep_section(sweep: Any, x: str | None) -> str:
    chart = ch.sweep_chart(sweep, x)
    if chart is None:
        return ""
    return _figure(chart)


def tornado_section(tornado: Any) -> str:
    return _figure(ch.tornado_chart(tornado))


def frontier_section(frontier: Any) -> str:
    chart = ch.frontier_chart(frontier)
    if chart is None:
        return ""
    df = ch.as_frame(frontier).sort_values("budget_usd_per_month")
    rows = [(f"{usd(float(r['budget_usd_per_month']))}/month", f"{sig(float(r['traffic_multiplier']))}×",
             f"{usd(float(r['total_usd_per_month']))}/month" if "total_usd_per_month" in df.columns else "–",
             str(r["mix"]) if "mix" in df.columns else "–") for _, r in df.iterrows()]
    table = _table(["budget", "traffic served within SLO", "plan cost", "device mix"], rows,
                   numeric=[True, True, True, False], table_id="table-frontier")
    return _figure(chart) + table


# ---------------------------------------------------------------------------------------------
# the page


def load_plan(path: str | Path) -> PlanResult:
    """Read a ``plan.json`` written by ``planner solve``; a missing or malformed file is an InputError."""
    import json

    from pydantic import ValidationError

    from planner.errors import InputError, Problem
    from planner.schema.plan import PlanResult

    p = Path(path)
    if not p.is_file():
        raise InputError(Problem(str(p), "", "plan file not found", "pass the plan.json written by `planner solve INSTANCE --out DIR`"))
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(Problem(str(p), "", f"not valid JSON ({exc})", "pass the plan.json written by `planner solve`")) from exc
    try:
        return PlanResult.model_validate(data)
    except ValidationError as exc:
        problems = [Problem(str(p), ".".join(str(x) for x in e["loc"]), e["msg"],
                            "regenerate the plan with this version of `planner solve`") for e in exc.errors()[:10]]
        raise InputError(problems) from exc


def render_html(*, plan: PlanResult | None = None, sweep: Any = None, tornado: Any = None, frontier: Any = None,
                simulation: Any = None, tools: Any = None, sweep_x: str | None = None, title: str | None = None) -> str:
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
        parts.append(f'<section id="summary">{verdict_section(plan)}</section>')
        parts.append(_section("plan", "Plan", plan_section(plan)))
        parts.append(_section("costs", "Cost by term", costs_section(plan)))
        parts.append(_section("utilization", "Utilisation per pool", utilization_section(plan)))
        parts.append(_section("unit-costs", "Cost per token and energy per token", unit_costs_section(plan)))
    if tools is not None:
        parts.append(_section("tools", "Tool phase", tools_section(tools)))
    if simulation is not None:
        parts.append(_section("simulation", "Simulated latency", simulation_section(simulation, plan)))
    if sweep is not None:
        parts.append(_section("sweep", "Sweep: where the verdict flips", sweep_section(sweep, sweep_x)))
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
               title: str | None = None) -> Path:
    """Write the self-contained report to ``path`` (parent folders created) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(plan=plan, sweep=sweep, tornado=tornado, frontier=frontier, simulation=simulation,
                               tools=tools, sweep_x=sweep_x, title=title), encoding="utf-8")
    return out
