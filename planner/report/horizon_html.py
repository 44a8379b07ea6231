"""A self-contained HTML page for a plan over time (``planner horizon --html FILE``).

Two inline SVG charts per architecture, drawn with matplotlib from the horizon tables
(:mod:`planner.horizon.solve`): devices by how they are had at each period's busiest slot — owned,
reserved, on demand, spot — stacked, with the busiest slot's demand overlaid (right axis); and the
cost of each period by term. Then the schedule table. No script, no external resource.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

import pandas as pd

from planner.horizon.solve import HorizonResult

SUPPLY_COLORS = {"owned": "#1f4e79", "reserved": "#5b9bd5", "on demand": "#ed7d31", "spot": "#ffc000"}


def _svg(fig: Any, label: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return svg.replace("<svg", f'<svg role="img" aria-label="{html.escape(label)}"', 1)


def supply_frame(arch: Any) -> pd.DataFrame:
    """Per period: devices at the busiest slot by source, and that slot's demand multiplier."""
    sl = arch.slots.copy()
    sl["busy"] = sl.groupby(["period", "slot"])["in_pools"].transform("sum")
    rows = []
    for t, grp in sl.groupby("period"):
        peak_slot = grp.loc[grp["busy"].idxmax(), "slot"]
        at = grp[grp["slot"] == peak_slot]
        sch = arch.schedule[arch.schedule["period"] == t]
        in_pools = float(at["in_pools"].sum())
        od = float(at["on_demand"].sum())
        spot = float(at["spot"].sum())
        reserved = float(sch["reserved"].sum())
        rows.append({"period": int(t), "owned": float(sch["owned"].sum()), "reserved": reserved, "on demand": od, "spot": spot,
                     "in_pools": in_pools, "peak_multiplier": float(at["peak_multiplier"].iloc[0])})
    return pd.DataFrame(rows)


def supply_chart(arch: Any, demand_unit: str, demand_scale: float = 1.0) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = supply_frame(arch)
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    bottom = pd.Series(0.0, index=f.index)
    for col, color in SUPPLY_COLORS.items():
        if f[col].sum() > 0:
            ax.bar(f["period"], f[col], bottom=bottom, color=color, label=col, width=0.8)
            bottom = bottom + f[col]
    ax.plot(f["period"], f["in_pools"], color="black", marker=".", linewidth=1, label="devices in pools (busiest slot)")
    ax.set_ylim(0, 1.12 * max(float(bottom.max()), float(f["in_pools"].max()), 1.0))
    ax.set_xlabel("period")
    ax.set_ylabel("devices")
    ax2 = ax.twinx()
    ax2.plot(f["period"], f["peak_multiplier"] * demand_scale, color="#7f7f7f", linestyle="--", label=f"busiest-slot demand ({demand_unit})")
    ax2.set_ylabel(f"demand ({demand_unit})")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8, frameon=False)
    ax.spines["top"].set_visible(False)
    return _svg(fig, f"{arch.architecture}: devices by source per period, with demand")


def cost_chart(arch: Any) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = arch.costs.pivot_table(index="period", columns="term", values="usd", aggfunc="sum")
    per = per.loc[:, per.sum(axis=0) > 0]
    fig, ax = plt.subplots(figsize=(8.5, 3.2))
    bottom = pd.Series(0.0, index=per.index)
    cmap = plt.get_cmap("tab20")
    same = {"ownership": SUPPLY_COLORS["owned"], "reserved": SUPPLY_COLORS["reserved"], "on_demand": SUPPLY_COLORS["on demand"],
            "spot": SUPPLY_COLORS["spot"]}  # the supply chart's colours for the same sources
    others = [t for t in per.columns if t not in same]
    for term in per.columns:
        color = same.get(str(term), cmap((2 * others.index(term) + 4) % 20) if term in others else "#999999")
        ax.bar(per.index, per[term], bottom=bottom, color=color, label=str(term).replace("_", " "), width=0.8)
        bottom = bottom + per[term]
    ax.set_xlabel("period")
    ax.set_ylabel("USD in the period")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _p: f"${v / 1e3:,.0f}k" if v >= 1e3 else f"${v:,.0f}"))
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncol=3)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    return _svg(fig, f"{arch.architecture}: cost per period by term")


def slot_check_html(arch: Any) -> str:
    """The per-slot verification table (:mod:`planner.horizon.verify`)."""
    sc = arch.slot_checks

    def ms(v: Any) -> str:
        return "-" if v is None or v != v else f"{float(v):,.1f}"

    def verdict(v: Any) -> str:
        return "-" if v is None or v != v else ("met" if v else "MISSED")

    # the per-token columns hold the metric the service targets (``token_metric``: TPOT, or ITL)
    metrics = sorted({str(m).upper() for m in sc["token_metric"].dropna()}) if "token_metric" in sc.columns else []
    tok = " / ".join(metrics) or "TPOT"
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            int(r.period), r.slot, r.service, f"{float(r.peak_rate_per_s):,.1f}", ms(r.ttft_analytic_ms), ms(r.ttft_sim_ms),
            ms(r.ttft_target_ms), ms(r.tpot_analytic_ms), ms(r.tpot_sim_ms), ms(r.tpot_target_ms),
            verdict(getattr(r, "analytic_met", None)), verdict(r.met))) + "</tr>" for r in sc.itertuples())
    head = "".join(f"<th>{h}</th>" for h in ("period", "slot", "service", "peak req/s", "TTFT analytic ms", "TTFT simulated ms",
                                             "TTFT target ms", f"{tok} analytic ms", f"{tok} simulated ms", f"{tok} target ms",
                                             "analytic", "simulated"))
    return (f"<h3>Per-slot check</h3><p>{html.escape(arch.slot_checks_method)} ({arch.verify_s:.1f} s).</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")


def render(result: HorizonResult, name: str, demand_unit: str, demand_scale: float = 1.0) -> str:
    from planner.horizon.report import saving_text

    parts = [f"<h1>Plan over time: {html.escape(name)}</h1>",
             f"<p>{result.periods} periods × {len(result.slots)} slots. Winner over the horizon: "
             f"<strong>{html.escape(str(result.winner))}</strong>.</p>"]
    for arch in result.architectures.values():
        parts.append(f"<h2>{html.escape(arch.architecture)}</h2>")
        if not arch.feasible:
            parts.append(f"<p>No plan: {html.escape(arch.status)}</p>")
            continue
        gap = f"{arch.gap:.2%}" if arch.gap is not None else "n/a"
        line = f"Present value ${arch.total_usd:,.0f} ({html.escape(arch.status)}; gap {gap})."
        text = saving_text(arch, lambda v: f"${v:,.0f}")
        if text is not None:
            line += f" This schedule {html.escape(text)}."
        parts.append(f"<p>{line}</p>")
        if getattr(arch, "notes", None):  # the plan's own notes (the check of every level, a per-slot plan's price)
            parts.append("<ul class=\"plan-notes\">" + "".join(f"<li>{html.escape(n)}</li>" for n in arch.notes) + "</ul>")
        parts.append(f"<figure>{supply_chart(arch, demand_unit, demand_scale)}<figcaption>Devices at each period's busiest slot by how they are "
                     "had (bars), devices serving in pools (line) and that slot's demand (dashed, right axis).</figcaption></figure>")
        parts.append(f"<figure>{cost_chart(arch)}<figcaption>Cost of each period by term (undiscounted).</figcaption></figure>")
        cols = ["period", "device", "bought", "delivered", "owned", "sold", "reserved", "on_demand_peak", "spot_peak", "in_pools_peak"]
        sch = arch.schedule[cols]
        head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in sch.to_numpy().tolist())
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        if len(arch.slot_checks):
            parts.append(slot_check_html(arch))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    parts.append(f"<h2>Notes</h2><ul>{notes}</ul>")
    style = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "figure{margin:1em 0}figcaption{font-size:12px;color:#555}svg{max-width:100%;height:auto}")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(name)} — plan over time</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def write_horizon_html(path: str | Path, result: HorizonResult, name: str, demand_unit: str, demand_scale: float = 1.0) -> None:
    """``demand_scale`` turns the slots' peak multipliers into ``demand_unit`` (the planned peak rate, req/s)."""
    Path(path).write_text(render(result, name, demand_unit, demand_scale), encoding="utf-8")
