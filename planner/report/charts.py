"""Charts for the HTML report: matplotlib figures rendered to inline SVG strings.

Every chart is a pure function of typed values or tidy DataFrames returning a :class:`Chart`
(an id, a caption and the SVG text), or ``None`` when there is nothing to draw. No pyplot and
no global state: each figure is a :class:`matplotlib.figure.Figure` saved to SVG with text
kept as text (``svg.fonttype = none``), so the numbers on a chart are readable and
searchable in the page, and nothing is fetched over the network to view it.

Several SVGs live in one HTML document, so the element ids matplotlib writes (``figure_1``,
clip paths, markers) are prefixed with the chart id to stay unique; the XML prolog, DOCTYPE
and RDF metadata (which carry URLs) are dropped.

Inputs other than the plan (sweep, tornado, frontier, simulation) follow the column
contracts documented on each function; the studies and simulator commands produce them.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, cast

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from planner.schema.plan import PlanResult

_P = ParamSpec("_P")

ARCH_COLORS = {"shared": "#0072B2", "disaggregated": "#E69F00", "hybrid": "#009E73"}
"""Okabe-Ito colours (readable with colour-vision deficiency), one per architecture."""

TERM_COLORS = {
    "equipment_usd_per_month": "#0072B2",
    "power_busy_usd_per_month": "#D55E00",
    "power_idle_usd_per_month": "#F0A57A",
    "network_nic_usd_per_month": "#009E73",
    "network_transfer_usd_per_month": "#7FD1B9",
    "ops_pools_usd_per_month": "#CC79A7",
    "ops_device_types_usd_per_month": "#E8B5D2",
    "ops_devices_usd_per_month": "#999999",
    "licenses_usd_per_month": "#56B4E9",
    "cpu_pool_usd_per_month": "#E69F00",
    "kv_tier_usd_per_month": "#F5D07A",
    "tool_state_energy_usd_per_month": "#8C6D1F",
}

TERM_LABELS = {
    "equipment_usd_per_month": "equipment",
    "power_busy_usd_per_month": "busy power",
    "power_idle_usd_per_month": "idle power",
    "network_nic_usd_per_month": "KV network (NICs)",
    "network_transfer_usd_per_month": "KV transfer",
    "ops_pools_usd_per_month": "operations per pool",
    "ops_device_types_usd_per_month": "operations per device type",
    "ops_devices_usd_per_month": "operations per device",
    "licenses_usd_per_month": "licences",
    "cpu_pool_usd_per_month": "CPU pool (tools)",
    "kv_tier_usd_per_month": "KV tier",
    "tool_state_energy_usd_per_month": "KV reload/recompute energy",
}

_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "legend.frameon": False,
}


@dataclass(frozen=True)
class Chart:
    """One chart of the report: ``id`` (unique in the page), ``caption`` and inline ``svg``."""

    id: str
    caption: str
    svg: str


# ---------------------------------------------------------------------------------------------
# number formatting (shared with the HTML tables)


def sig(value: float, digits: int = 3) -> str:
    """Round for reading: thousands separators from 1,000 up, else ``digits`` significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def usd(value: float) -> str:
    """``$12,345`` from $100 up, ``$12.3`` / ``$0.123`` below (3 significant digits)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if abs(value) < 0.005:  # below half a cent: floating-point residue of a difference, not money
        return "$0"
    sign = "−" if value < 0 else ""
    v = abs(value)
    return f"{sign}${v:,.0f}" if v >= 100 else f"{sign}${sig(v)}"


def pct(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value * 100:.{digits}f}%"


# ---------------------------------------------------------------------------------------------
# SVG rendering


def _svg(fig: Any, chart_id: str, label: str) -> str:
    """Serialise a figure to SVG text safe to inline next to other SVGs in one HTML page."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(cast(Any, {**_RC, "svg.hashsalt": chart_id})):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    text = text.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    text = text.replace(' xmlns="http://www.w3.org/2000/svg"', "")
    # Unique ids across the page: prefix every id and every reference to one.
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{chart_id}-{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{chart_id}-{m.group(1)})", text)
    text = re.sub(r'((?:xlink:)?href)="#([^"]+)"', lambda m: f'{m.group(1)}="#{chart_id}-{m.group(2)}"', text)
    # Scale with the page: keep the viewBox, drop the fixed size in points.
    text = re.sub(r'<svg\s+width="[^"]+"\s+height="[^"]+"',
                  f'<svg id="{chart_id}-svg" role="img" aria-label="{_attr(label)}"', text, count=1)
    return text.strip()


def _attr(s: str) -> str:
    return s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _styled(fn: Callable[_P, Chart | None]) -> Callable[_P, Chart | None]:
    """Build the figure inside the report's matplotlib style (axes pick rcParams up at creation)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> Chart | None:
        import matplotlib

        with matplotlib.rc_context(cast(Any, _RC)):
            return fn(*args, **kwargs)

    return wrapper


def _figure(width_in: float, height_in: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def _money_axis(ax: Axes, axis: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _pos: usd(v) if v else "$0")
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def _log_axis(ax: Axes, axis: str = "x") -> None:
    """Log scale labelled with plain numbers (``100``, ``1,000``): readable, and no mathtext to parse."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    # 1-2-5 ticks within a decade, 1-3 up to two decades, so a short range still has labels that do not collide.
    ratio = hi / max(lo, 1e-12)
    subs = (1.0, 2.0, 5.0) if ratio < 12 else (1.0, 3.0) if ratio < 120 else (1.0,)
    a.set_major_locator(LogLocator(base=10, subs=subs))
    a.set_major_formatter(FuncFormatter(lambda v, _pos: sig(v)))
    a.set_minor_formatter(NullFormatter())


def as_frame(data: Any) -> pd.DataFrame:
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data
    return pd.DataFrame(list(data))


def _feasible(plan: PlanResult) -> list[Any]:
    return [p for p in plan.architectures.values() if p.feasible and p.costs is not None]


# ---------------------------------------------------------------------------------------------
# plan charts


@_styled
def cost_terms_chart(plan: PlanResult) -> Chart | None:
    """Stacked bars: monthly cost by term (``CostBreakdown.terms()``) per feasible architecture."""
    from planner.schema.plan import COST_TERMS

    archs = _feasible(plan)
    if not archs:
        return None
    terms = [t for t in COST_TERMS if any(abs(a.costs.terms()[t]) > 0 for a in archs)]
    fig = _figure(7.5, 3.4)
    ax = fig.add_subplot()
    names = [a.architecture for a in archs]
    bottoms = [0.0] * len(archs)
    for t in terms:
        vals = [a.costs.terms()[t] for a in archs]
        ax.bar(names, vals, bottom=bottoms, width=0.55, color=TERM_COLORS[t], label=TERM_LABELS[t],
               edgecolor="white", linewidth=0.6)
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    top = max(bottoms) if bottoms else 1.0
    for i, a in enumerate(archs):
        ax.text(i, bottoms[i] + 0.02 * top, f"{usd(a.costs.total_usd_per_month)}/month",
                ha="center", va="bottom", fontweight="bold")
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel("cost (USD per month)")
    _money_axis(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="cost term", alignment="left")
    ax.set_title("Monthly cost by term")
    winner = plan.verdict.winner
    cap = "Monthly cost of each architecture, stacked by cost term (USD/month); the totals are above the bars."
    if winner:
        cap += f" {winner.capitalize()} is cheapest."
    return Chart("chart-cost-terms", cap, _svg(fig, "chart-cost-terms", "Monthly cost by term per architecture"))


@_styled
def utilization_chart(plan: PlanResult) -> Chart | None:
    """Horizontal bars per pool: utilisation at mean and at peak load, with the latency cap."""
    rows = [(a.architecture, p) for a in _feasible(plan) for p in a.pools]
    if not rows:
        return None
    labels = [f"{arch} · {p.role} {p.instances}× {p.config}" for arch, p in rows]
    n = len(rows)
    fig = _figure(7.5, 0.55 * n + 1.3)
    ax = fig.add_subplot()
    h = 0.38
    ys = list(range(n))[::-1]
    for y, (arch, p) in zip(ys, rows, strict=True):
        c = ARCH_COLORS.get(arch, "#555555")
        ax.barh(y + h / 2, p.utilization_mean * 100, height=h, color=c, alpha=0.45)
        ax.barh(y - h / 2, p.utilization_peak * 100, height=h, color=c)
        cap_x = p.utilization_cap * 100 if p.utilization_cap > 0 else -1.0
        for v, yy in ((p.utilization_mean, y + h / 2), (p.utilization_peak, y - h / 2)):
            # the value right of its bar, or right of the cap tick when the tick is that close (never on it)
            x = v * 100 + 1.5
            if cap_x >= 0 and x - 1.0 <= cap_x + 1.0 and x + 7.0 >= cap_x:  # the label (~6 % wide) would cross the tick
                x = max(cap_x, v * 100) + 2.0
            ax.text(x, yy, pct(v), va="center", fontsize=9)
        if p.utilization_cap > 0:
            ax.plot([cap_x] * 2, [y - h, y + h], color="#C00000", linewidth=2)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=ARCH_COLORS.get(a, "#555555"), label=a) for a in dict.fromkeys(arch for arch, _ in rows)]
    handles += [Patch(facecolor="#888888", alpha=0.45, label="mean load (light)"), Patch(facecolor="#888888", label="peak load (dark)"),
                Line2D([], [], color="#C00000", linewidth=2, label="latency cap")]
    ax.set_yticks(ys, labels)
    ax.set_xlim(0, 115)
    ax.set_xlabel("utilisation (% of provisioned instance time)")
    fig.legend(handles=handles, loc="outside lower center", ncols=3)
    ax.set_title("Utilisation per pool")
    cap = ("Utilisation of each pool at mean load (light) and at peak load (dark), in % of provisioned "
           "instance time; the red tick is the largest peak utilisation the latency targets allow.")
    return Chart("chart-utilization", cap, _svg(fig, "chart-utilization", "Utilisation per pool at mean and peak load"))


@_styled
def unit_costs_chart(plan: PlanResult) -> Chart | None:
    """Two panels: USD per 1M tokens and facility Wh per 1k tokens, per architecture."""
    archs = [a for a in _feasible(plan) if a.usd_per_million_tokens is not None]
    if not archs:
        return None
    fig = _figure(7.5, 2.6)
    axes = fig.subplots(1, 2)
    names = [a.architecture for a in archs]
    colors = [ARCH_COLORS.get(n, "#555555") for n in names]
    panels: list[tuple[Any, list[float], str, Callable[[float], str]]] = [
        (axes[0], [float(a.usd_per_million_tokens or 0.0) for a in archs], "USD per 1M tokens", lambda v: f"${sig(v)}"),
        (axes[1], [float(a.energy_wh_per_1k_tokens or 0.0) for a in archs], "Wh per 1k tokens", lambda v: f"{sig(v)} Wh"),
    ]
    for ax, vals, title, label in panels:
        ax.barh(names, vals, color=colors, height=0.55)
        ax.invert_yaxis()
        m = max(vals) if vals and max(vals) > 0 else 1.0
        for i, v in enumerate(vals):
            ax.text(v + 0.02 * m, i, label(v), va="center")
        ax.set_xlim(0, m * 1.3)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        ax.set_title(title)
    cap = ("Cost per million tokens served (input + output, USD) and facility energy per thousand tokens "
           "(busy + idle, × PUE, Wh) for each architecture at mean load.")
    return Chart("chart-unit-costs", cap, _svg(fig, "chart-unit-costs", "USD per 1M tokens and Wh per 1k tokens"))


# ---------------------------------------------------------------------------------------------
# simulator


def sim_runs(simulation: Any) -> list[tuple[str, Any]] | None:
    """``[(scenario, SimResult)]`` from one ``SimResult`` (scenario ``""``), a mapping
    scenario -> ``SimResult``, or a list of ``ScenarioRun`` (``.name``, ``.result``); else ``None``."""
    if hasattr(simulation, "services"):
        return [("", simulation)]
    if isinstance(simulation, Mapping):
        items = list(simulation.items())
        if items and all(hasattr(v, "services") for _, v in items):
            return [(str(k), v) for k, v in items]
        return None
    if isinstance(simulation, (list, tuple)) and simulation and all(hasattr(r, "result") and hasattr(r, "name") for r in simulation):
        return [(str(r.name), r.result) for r in simulation]
    return None


@_styled
def latency_chart(simulation: Any, plan: PlanResult | None = None) -> Chart | None:
    """Simulated latency distributions per service (and per scenario), against the targets.

    ``simulation`` is either

    - a ``planner.simulate.results.SimResult`` (per service ``ttft``/``tpot`` summaries in
      seconds: p50, p90, p99, max), a mapping scenario name -> ``SimResult``, or a list of
      ``planner.simulate.scenarios.ScenarioRun`` — drawn as quantile markers, one row per
      (scenario, service), or
    - a tidy DataFrame of samples with columns ``service``, ``metric`` (``ttft`` or ``tpot``)
      and ``latency_ms`` — drawn as empirical CDFs.

    Targets come from the SimResult, else from the plan's latency predictions when given.
    """
    targets: dict[tuple[str, str], tuple[float, float]] = {}
    if plan is not None and plan.verdict.winner and plan.verdict.winner in plan.architectures:
        for lp in plan.architectures[plan.verdict.winner].latency:
            targets[(lp.service, "ttft")] = (lp.ttft_target_ms, lp.ttft_quantile)
            if lp.token_metric == "tpot" and lp.tpot_quantile is not None:  # the chart plots per-request TPOT quantiles
                targets[(lp.service, "tpot")] = (lp.tpot_target_ms, lp.tpot_quantile)
    runs = sim_runs(simulation)
    metrics = (("ttft", "Time to first token (ms)"), ("tpot", "Time per output token (ms)"))
    if runs is not None:
        rows = [(scen, name, res.services[name]) for scen, res in runs for name in sorted(res.services)]
        if not rows:
            return None
        fig = _figure(7.5, 1.3 + 0.42 * len(rows))
        axes = fig.subplots(1, 2, sharey=True)
        marks = (("p50", "o"), ("p90", "s"), ("p99", "D"), ("max", "x"))
        ys = list(range(len(rows)))[::-1]
        labels = [f"{scen} · {name}" if scen else name for scen, name, _ in rows]
        for ax, (metric, title) in zip(axes, metrics, strict=True):
            for y, (_, _, sr) in zip(ys, rows, strict=True):
                summ = getattr(sr, metric)
                tgt_ms = getattr(sr, f"{metric}_target_s") * 1e3
                xs = [getattr(summ, k) * 1e3 for k, _ in marks]
                if not all(math.isfinite(v) and v > 0 for v in xs[:3]):
                    lost = sr.unfinished + sr.rejected
                    ax.text(0.02, y, f"no request completed ({lost:,} lost)" if sr.completed == 0 else "no samples",
                            transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="#C00000")
                    continue
                met = bool(getattr(sr, f"{metric}_met"))
                color = "#0072B2" if met else "#C00000"
                # quantiles on their own small rows (p50 top … max bottom) so equal values stay visible
                dodge = {"p50": 0.22, "p90": 0.07, "p99": -0.08, "max": -0.23}
                ax.plot([min(xs[:3]), max(xs[:3])], [y] * 2, color="#777777", linewidth=1, zorder=1)
                for (k, mk), v in zip(marks, xs, strict=True):
                    if math.isfinite(v) and v > 0:
                        ax.scatter([v], [y + dodge[k]], marker=mk, s=22, color=color, zorder=2, label=k if y == ys[0] else None)
                ax.text(1.0, y + 0.3, f"p99 {sig(xs[2])} ms ", ha="right", fontsize=8, color=color, transform=ax.get_yaxis_transform())
                ax.plot([tgt_ms] * 2, [y - 0.35, y + 0.35], color="#C00000", linewidth=2,
                        label="target" if y == ys[0] else None)
            ax.set_ylim(-0.6, len(rows) - 0.4)
            lo, hi = ax.get_xlim()
            if hi / max(lo, 1e-12) > 8:
                _log_axis(ax)
            else:  # a narrow range (TPOT): linear, few ticks, so labels do not run together
                from matplotlib.ticker import FuncFormatter, MaxNLocator

                ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: sig(v)))
            ax.set_title(title)
        axes[0].set_yticks(ys, labels)
        axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        cap = ("Simulated latency per " + ("scenario and service" if len(runs) > 1 else "service") +
               " at the plan's sizing: p50 (circle), p90 (square), p99 (diamond) and maximum (cross), in ms (log scale over a wide range); "
               "the red tick is the target; markers turn red where the target quantile is missed.")
    else:
        df = as_frame(simulation)
        need = {"service", "metric", "latency_ms"}
        if df.empty or not need.issubset(df.columns):
            return None
        import numpy as np

        fig = _figure(7.5, 2.9)
        axes = fig.subplots(1, 2)
        services = sorted(df["service"].unique())
        for ax, (metric, title) in zip(axes, metrics, strict=True):
            for j, name in enumerate(services):
                v = np.sort(df.loc[(df["service"] == name) & (df["metric"] == metric), "latency_ms"].to_numpy(float))
                if v.size == 0:
                    continue
                color = f"C{j}"
                ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=color, label=name)
                if (name, metric) in targets:
                    t, q = targets[(name, metric)]
                    ax.axvline(t, color=color, linestyle="--", linewidth=1)
                    ax.text(t, 0.02, f" target p{q * 100:g} {sig(t)} ms", rotation=90, va="bottom", fontsize=8, color=color)
            ax.set_ylim(0, 1.02)
            ax.set_ylabel("share of requests")
            ax.set_title(title)
            ax.set_xlabel("ms")
        axes[1].legend(loc="lower right")
        cap = ("Empirical distribution (CDF) of simulated latency per service, in ms; dashed lines mark the "
               "targets from the plan.")
    return Chart("chart-latency", cap, _svg(fig, "chart-latency", "Simulated latency distributions"))


# ---------------------------------------------------------------------------------------------
# studies

SWEEP_OUTPUTS = {"total_usd_per_month", "winner", "architecture", "usd_per_million_tokens",
                 "energy_wh_per_1k_tokens", "scenario", "margin_usd_per_month", "feasible"}


def sweep_parameter(sweep: pd.DataFrame) -> str | None:
    """The swept parameter: the first numeric column that is not an output and takes >1 value."""
    for col in sweep.columns:
        if col in SWEEP_OUTPUTS or col.endswith("_usd_per_month") or not _numeric(sweep[col]):
            continue
        if sweep[col].nunique() > 1:
            return str(col)
    return None


def _numeric(s: pd.Series) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(s)) and not bool(pd.api.types.is_bool_dtype(s))


def crossovers(sweep: pd.DataFrame, x: str) -> list[float]:
    """Parameter values where the verdict flips.

    With one row per (scenario, ``architecture``) the crossing of the two cheapest cost curves
    is found by linear interpolation of their difference between neighbouring sweep points;
    with one row per scenario (``winner`` only) it is the midpoint between neighbouring points
    whose winners differ — exact only to the sweep's resolution.
    """
    if "architecture" in sweep.columns:
        wide = sweep.pivot_table(index=x, columns="architecture", values="total_usd_per_month", aggfunc="min").sort_index()
        if wide.shape[1] < 2:
            return []
        xs = wide.index.to_numpy(float)
        out: list[float] = []
        for i in range(len(xs) - 1):
            a = {str(k): float(v) for k, v in wide.iloc[i].items()}
            b = {str(k): float(v) for k, v in wide.iloc[i + 1].items()}
            if any(math.isnan(v) for v in (*a.values(), *b.values())):
                continue
            wa, wb = min(a, key=a.__getitem__), min(b, key=b.__getitem__)
            if wa == wb:
                continue
            d0 = a[wa] - a[wb]  # <= 0
            d1 = b[wa] - b[wb]  # >= 0
            frac = -d0 / (d1 - d0) if d1 != d0 else 0.5
            out.append(float(xs[i] + frac * (xs[i + 1] - xs[i])))
        return out
    s = sweep.sort_values(x)
    xs = s[x].to_numpy(float)
    w = s["winner"].astype(str).to_numpy()
    return [float((xs[i] + xs[i + 1]) / 2) for i in range(len(xs) - 1) if w[i] != w[i + 1] and xs[i] != xs[i + 1]]


@_styled
def sweep_chart(sweep: Any, x: str | None = None, brackets: Sequence[tuple[float, float]] | None = None) -> Chart | None:
    """Total monthly cost against a swept parameter, with verdict crossovers marked.

    Columns: the parameter ``x`` (auto-detected with :func:`sweep_parameter` when omitted),
    ``total_usd_per_month``, and either ``architecture`` (one row per scenario and architecture:
    one line each) or ``winner`` (one row per scenario: the winner's cost, coloured by winner).

    ``brackets``: verdict flips already located by bisection (``(low, high)`` values of ``x``,
    as :func:`planner.studies.sweep.crossovers` returns them); the line is drawn at the
    geometric midpoint and the caption gives the bracket. Without them the flips are
    interpolated from the rows (:func:`crossovers`).
    """
    df = as_frame(sweep)
    if df.empty or "total_usd_per_month" not in df.columns:
        return None
    x = x or sweep_parameter(df)
    if x is None or ("architecture" not in df.columns and "winner" not in df.columns):
        return None
    fig = _figure(7.5, 3.2)
    ax = fig.add_subplot()
    if "architecture" in df.columns:
        for arch, g in df.groupby("architecture", sort=True):
            g = g.sort_values(x)
            ax.plot(g[x], g["total_usd_per_month"], marker="o", color=ARCH_COLORS.get(str(arch)), label=str(arch))
    else:
        s = df.sort_values(x)
        ax.plot(s[x], s["total_usd_per_month"], color="#999999", linewidth=1, zorder=1)
        for win, g in s.groupby("winner", sort=True):
            ax.scatter(g[x], g["total_usd_per_month"], color=ARCH_COLORS.get(str(win)), label=f"{win} wins", zorder=2)
    if brackets:
        flips = [math.sqrt(lo * hi) if lo > 0 and hi > 0 else (lo + hi) / 2 for lo, hi in brackets]
        where = ", ".join(f"{sig(lo)} < {x} < {sig(hi)}" for lo, hi in brackets)
    else:
        flips = crossovers(df, x)
        where = ", ".join(f"{x} ≈ {sig(f)}" for f in flips)
    lo_x, hi_x = ax.get_xlim()
    short = x.rsplit(".", 1)[-1]
    for f in flips:
        ax.axvline(f, color="#C00000", linestyle="--", linewidth=1.2)
        right_half = (f - lo_x) > 0.5 * (hi_x - lo_x)  # the label goes on the side with room, inside the axes
        ax.annotate(f"verdict flips at {short} ≈ {sig(f)}", (f, 0.04), xycoords=("data", "axes fraction"),
                    xytext=(-4 if right_half else 4, 0), textcoords="offset points", ha="right" if right_half else "left",
                    color="#C00000", fontsize=9)
    ax.set_xlabel(x)
    ax.set_ylabel("cost (USD per month)")
    _money_axis(ax)
    ax.legend(loc="upper left")
    ax.set_title(f"Cost against {x}")
    cap = (f"Total monthly cost (USD/month) as {x} varies (lines join the swept points; between them costs move in "
           "whole-instance steps, so where two lines cross is not where the verdict flips); ")
    cap += (f"the dashed line marks where the verdict flips ({where})." if flips else "the verdict does not flip in this range.")
    return Chart("chart-sweep", cap, _svg(fig, "chart-sweep", f"Cost against {x}"))


@_styled
def tornado_chart(tornado: Any) -> Chart | None:
    """One-at-a-time sensitivities as a tornado.

    Columns: ``parameter``, ``low_usd_per_month``, ``high_usd_per_month`` (total cost with the
    parameter at its low / high value), ``base_usd_per_month``; optional ``low_label`` and
    ``high_label`` (e.g. ``"0.5x"``). Sorted by swing, largest on top.
    """
    df = as_frame(tornado)
    need = {"parameter", "low_usd_per_month", "high_usd_per_month", "base_usd_per_month"}
    if df.empty or not need.issubset(df.columns):
        return None
    df = df.assign(swing=(df["high_usd_per_month"] - df["low_usd_per_month"]).abs()).sort_values("swing")
    base = float(df["base_usd_per_month"].iloc[0])
    fig = _figure(7.5, 0.45 * len(df) + 1.3)
    ax = fig.add_subplot()
    ys = list(range(len(df)))
    span = max(float((df[["low_usd_per_month", "high_usd_per_month"]] - base).abs().to_numpy().max()), 1e-9)
    for y, (_, r) in zip(ys, df.iterrows(), strict=True):
        for col, color, lab in (("low_usd_per_month", "#56B4E9", "low_label"), ("high_usd_per_month", "#D55E00", "high_label")):
            d = float(r[col]) - base
            ax.barh(y, d, left=base, color=color, height=0.6,
                    label=("parameter low" if col.startswith("low") else "parameter high") if y == ys[-1] else None)
            txt = f"{'+' if d >= 0 else '−'}{usd(abs(d))}"
            if lab in df.columns and isinstance(r[lab], str):
                txt = f"{r[lab]}: {txt}"
            ax.text(base + d + (0.02 if d >= 0 else -0.02) * span, y, txt, va="center",
                    ha="left" if d >= 0 else "right", fontsize=8)
    ax.axvline(base, color="#333333", linewidth=1)
    ax.set_yticks(ys, df["parameter"].astype(str))
    lo = base - span * 1.6
    if float(df[["low_usd_per_month", "high_usd_per_month"]].to_numpy().min()) >= 0:
        lo = max(lo, 0.0)  # costs are not negative: no axis below $0
    ax.set_xlim(lo, base + span * 1.6)
    ax.set_xlabel("total cost (USD per month)")
    _money_axis(ax, "x")
    fig.legend(loc="outside lower center", ncols=2)
    ax.set_title("Sensitivity (one at a time)")
    cap = (f"Change in total monthly cost when one parameter moves to its low or high value, others at base "
           f"({usd(base)}/month); largest swing on top.")
    return Chart("chart-tornado", cap, _svg(fig, "chart-tornado", "Tornado of cost sensitivities"))


@_styled
def frontier_chart(frontier: Any) -> Chart | None:
    """Budget frontier: the largest traffic multiplier servable within SLO for each budget.

    Columns: ``budget_usd_per_month``, ``traffic_multiplier``; optional ``mix`` (device mix text)
    and ``total_usd_per_month`` (what the plan at that point costs).
    """
    df = as_frame(frontier)
    need = {"budget_usd_per_month", "traffic_multiplier"}
    if df.empty or not need.issubset(df.columns):
        return None
    df = df.sort_values("budget_usd_per_month")
    fig = _figure(7.5, 3.2)
    ax = fig.add_subplot()
    ax.step(df["budget_usd_per_month"], df["traffic_multiplier"], where="post", color="#0072B2", linewidth=1.5)
    ax.scatter(df["budget_usd_per_month"], df["traffic_multiplier"], color="#0072B2", zorder=3)
    for _, r in df.iterrows():
        label = f"{sig(float(r['traffic_multiplier']))}×"
        if "mix" in df.columns and isinstance(r["mix"], str) and r["mix"]:
            label += f"\n{r['mix']}"
        ax.annotate(label, (r["budget_usd_per_month"], r["traffic_multiplier"]), xytext=(4, 6),
                    textcoords="offset points", fontsize=8)
    ax.set_xlabel("budget (USD per month)")
    ax.set_ylabel("traffic served within SLO (× today)")
    ax.set_ylim(0, float(df["traffic_multiplier"].max()) * 1.3)
    _money_axis(ax, "x")
    ax.set_title("Budget frontier")
    cap = ("Largest traffic (as a multiple of the forecast) that can be served within the latency targets "
           "for each monthly budget (USD/month), with the device mix chosen.")
    return Chart("chart-frontier", cap, _svg(fig, "chart-frontier", "Budget frontier"))


@_styled
def tool_latency_chart(tools: pd.DataFrame, chart_id: str = "chart-tools") -> Chart | None:
    """Tool latency quantiles per tool (p50, p90, p99 in ms, log scale) from a normalised tool table
    (columns ``service``, ``tool``, ``latency_p50_ms``, ``latency_p90_ms``, ``latency_p99_ms``)."""
    if tools.empty or "latency_p50_ms" not in tools.columns:
        return None
    labels: Sequence[str] = [f"{r['service']} · {r['tool']}" if r["service"] else str(r["tool"])
                             for r in tools.to_dict("records")]
    fig = _figure(7.5, 0.45 * len(tools) + 1.2)
    ax = fig.add_subplot()
    ys = list(range(len(tools)))[::-1]
    for y, (_, r) in zip(ys, tools.iterrows(), strict=True):
        vals = [float(r[f"latency_{k}_ms"]) for k in ("p50", "p90", "p99")]
        ax.plot([vals[0], vals[2]], [y, y], color="#777777", zorder=1)
        for v, mk, k in zip(vals, ("o", "s", "D"), ("p50", "p90", "p99"), strict=True):
            ax.scatter([v], [y], marker=mk, color="#009E73", zorder=2, label=k if y == ys[0] else None)
        ax.text(vals[2], y + 0.2, f"p99 {sig(vals[2])} ms", fontsize=8, ha="center")
    ax.set_yticks(ys, labels)
    _log_axis(ax)
    ax.set_xlabel("tool call latency (ms, log scale)")
    fig.legend(loc="outside lower center", ncols=3)
    ax.set_title("Tool call latency")
    cap = "Latency of tool calls per tool: p50 (circle), p90 (square), p99 (diamond), in ms on a log scale."
    return Chart(chart_id, cap, _svg(fig, chart_id, "Tool call latency quantiles"))


POLICY_COLORS = {"hold": "#0072B2", "offload": "#E69F00", "recompute": "#CC79A7"}


@_styled
def tool_policy_chart(rows: Sequence[Any]) -> Chart | None:
    """Cost of each KV policy per (service, tool) while sessions wait on the tool.

    ``rows``: :class:`~planner.schema.plan.ToolPhaseRow` (``alternatives``: policy and
    ``usd_per_month``, ``None`` when not allowed or infeasible; ``policy`` the one chosen).
    Grouped horizontal bars in USD/month; an infeasible policy is written out instead of a bar.
    """
    rows = [r for r in rows if r.alternatives]
    if not rows:
        return None
    policies = ("hold", "offload", "recompute")
    fig = _figure(7.5, 0.75 * len(rows) + 1.3)
    ax = fig.add_subplot()
    h = 0.26
    top = max([a.usd_per_month for r in rows for a in r.alternatives if a.usd_per_month is not None] + [1.0])
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows, strict=True):
        alt = {a.policy: a for a in r.alternatives}
        for k, pol in enumerate(policies):
            yy = y + (1 - k) * h
            a = alt.get(pol)
            chosen = r.policy == pol or (r.policy.startswith("mixed") and getattr(r, f"{pol}_share", 0.0) > 0)
            label = pol if y == ys[0] else None
            if a is None or a.usd_per_month is None:
                ax.barh(yy, 0, height=h * 0.9, color=POLICY_COLORS[pol], label=label)
                ax.text(0.005 * top, yy, f"{pol}: not possible", va="center", fontsize=8, color="#666666")
                continue
            ax.barh(yy, a.usd_per_month, height=h * 0.9, color=POLICY_COLORS[pol], label=label,
                    edgecolor="#1b1b1b" if chosen else "none", linewidth=1.2)
            ax.text(a.usd_per_month + 0.01 * top, yy, f"{pol} {usd(a.usd_per_month)}" + ("  ← chosen" if chosen else ""),
                    va="center", fontsize=8, fontweight="bold" if chosen else "normal")
    ax.set_yticks(ys, [f"{r.service} · {r.tool}" for r in rows])
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel("cost of the policy for every wait of this tool (USD per month)")
    _money_axis(ax, "x")
    fig.legend(loc="outside lower center", ncols=3, title="KV state while the session waits")
    ax.set_title("KV policy during tool waits: cost of each choice")
    cap = ("What holding the KV cache on the decode device, offloading it to the KV tier, or dropping and "
           "recomputing it would cost for all waits of each tool (USD/month, at the plan's marginal prices); "
           "the outlined bar is the policy the plan chose.")
    return Chart("chart-tool-policy", cap, _svg(fig, "chart-tool-policy", "Cost of each KV policy per tool"))
