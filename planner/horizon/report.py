"""Reports of a plan over time: terminal text, a JSON document, CSV and Parquet tables.

Every figure comes from :mod:`planner.horizon.solve`'s tables: the schedule (period × device),
pool sizes per (period, slot), cost per (period, term) and the slots' demand and supply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from planner.horizon.solve import HorizonResult

SCHEMA_VERSION = 1


BASELINE_NAME = "an owned fleet sized for each period's peak, in place from period 0 (no purchase lead time)"
"""What the baseline is (:mod:`planner.horizon.model`): bought devices arrive at once, while the plan waits out
each device's lead time (renting meanwhile); so the plan can cost more than it, and that is no saving."""


def saving(arch: Any) -> tuple[float, float] | None:
    """(USD, share) the plan saves against the owned-peak baseline, when both exist (negative: it costs more)."""
    if arch.total_usd is None or arch.baseline_usd is None or arch.baseline_usd <= 0:
        return None
    d = float(arch.baseline_usd) - float(arch.total_usd)
    return d, d / float(arch.baseline_usd)


def saving_text(arch: Any, usd: Any) -> str | None:
    """One sentence comparing the plan with the baseline (``usd`` formats dollars), never a negative saving."""
    sv = saving(arch)
    if sv is None:
        return None
    base = f"{BASELINE_NAME}, {usd(float(arch.baseline_usd))}"
    if sv[0] >= 0:
        return f"saves {usd(sv[0])} ({100 * sv[1]:.1f} %) against {base}"
    return (f"costs {usd(-sv[0])} ({-100 * sv[1]:.1f} %) more than {base}: that fleet cannot be had in time "
            "(the plan must wait out the lead times), so this is no saving")


def saving_cell(share: float | None) -> str:
    """The saving share for a table cell: a negative one says it costs more."""
    if share is None:
        return "-"
    return f"{100 * share:.1f} %" if share >= 0 else f"none (+{-100 * share:.1f} % cost)"


def baseline_check_record(chk: Any) -> dict[str, Any] | None:
    """The owned-peak baseline's check of every level (:class:`planner.horizon.baseline.BaselineCheck`) for the JSON
    document: levels checked and missed (``missed_levels``: ``k = period · slots + slot``), periods raised, instances
    added, present value before and after."""
    if chk is None:
        return None
    return {"levels_checked": chk.levels_checked, "levels_missed": chk.levels_missed, "missed_levels": list(chk.missed),
            "levels_unfixed": len(chk.unfixed),
            "periods_raised": chk.periods_raised, "instances_added": chk.instances_added,
            "usd_present_value_before": chk.usd_before, "usd_present_value_after": chk.usd_after,
            "resolve_failed": chk.failed or None, "check_s": chk.check_s}


def summary_lines(result: HorizonResult, name: str) -> list[str]:
    from planner.cli.output import fmt, table

    out = [f"plan over time for {name}: {result.periods} periods x {len(result.slots)} slots "
           f"({result.size['variables']:,} variables, {result.size['integer_variables']:,} integer, "
           f"{result.size['constraints']:,} constraints; build {result.build_s:.1f} s)"]
    win = result.winner
    ok = {k: a for k, a in result.architectures.items() if a.feasible and a.total_usd is not None}
    if win is not None:
        w = ok[win]
        others = [a for k, a in ok.items() if k != win]
        line = f"VERDICT: {win} wins over the horizon: ${fmt(round(float(w.total_usd or 0)))} present value"
        if others:
            o = min(others, key=lambda a: float(a.total_usd or 0))
            diff = float(o.total_usd or 0) - float(w.total_usd or 0)
            line += f" against ${fmt(round(float(o.total_usd or 0)))} for {o.architecture} ({100 * diff / float(o.total_usd or 1):.1f} % less)"
        out.append(line)
    for arch in result.architectures.values():
        out.append("")
        if not arch.feasible:
            out.append(f"== {arch.architecture}: no plan ({arch.status})")
            continue
        gap = f", gap {arch.gap:.2%}" if arch.gap is not None else ""
        out.append(f"== {arch.architecture}: {arch.status}{gap}, solve {arch.solve_s:.1f} s (HiGHS {arch.highs_s:.1f} s), "
                   f"extract {arch.extract_s:.1f} s; "
                   f"total ${fmt(round(float(arch.total_usd or 0)))} (present value)")
        text = saving_text(arch, lambda v: f"${fmt(round(v))}")
        if text is not None:
            out.append(f"  {text}")
        sch = arch.schedule
        cols = ["period", "device", "bought", "owned", "sold", "reserved", "on_demand_peak", "spot_peak", "in_pools_peak"]
        active = sch[(sch[cols[2:]] != 0).any(axis=1)]
        out.append(table(cols, active[cols].to_numpy().tolist()))
        if "carried_by" in arch.slots.columns:
            out.extend(f"  {line}" for line in slot_architecture_lines(arch.slots))
        per = arch.costs.pivot_table(index="period", columns="term", values="usd", aggfunc="sum")
        shown = ["ownership", "reserved", "on_demand", "spot", "power_busy", "power_idle"]
        if "weight_reload" in per.columns and float(per["weight_reload"].abs().sum()) > 0:
            shown.append("weight_reload")
        shown = [c for c in shown if c in per.columns]
        # the terms not shown (network, operations, CPU pool, ...) in one column, so that the row sums to its total
        # (fleet-horizon's shared rows were 6,000 USD short of their total: ops_pools + ops_device_types)
        rest = [c for c in per.columns if c not in shown and float(per[c].abs().sum()) > 0]  # the terms it holds
        crow = [[int(t), *[fmt(round(float(v))) for v in vals], fmt(round(float(sum(vals_all) - sum(vals)))), fmt(round(float(sum(vals_all))))]
                for t, vals, vals_all in zip(per.index, per[shown].to_numpy(), per.to_numpy(), strict=True)]
        out.append(table(["period", *shown, "other", "total USD"], crow))
        if rest:
            out.append(f"  other: {', '.join(str(c) for c in rest)} (per term in costs.csv)")
        out.extend(f"  note: {n}" for n in getattr(arch, "notes", []))
        if len(arch.slot_checks):
            out.extend(slot_check_lines(arch))
    for n in result.notes:
        out.append(f"  note: {n}")
    return out


def slot_check_lines(arch: Any) -> list[str]:
    """The per-slot verification (:mod:`planner.horizon.verify`) as a table with a verdict line."""
    from planner.cli.output import fmt, table

    sc = arch.slot_checks
    missed = sc[sc["met"] == False]  # noqa: E712 - None (not simulated) is neither
    unsim = sc[sc["met"].isna()]
    a_col = sc["analytic_met"] if "analytic_met" in sc.columns else pd.Series([None] * len(sc), index=sc.index, dtype=object)
    a_missed = sc[a_col == False]  # noqa: E712
    sim = ("every checked slot meets its targets in simulation" if missed.empty and unsim.empty else
           f"{len(missed)} service-slot(s) MISS their targets in simulation" if not missed.empty else
           f"{len(unsim)} service-slot(s) not simulated")
    ana = ("" if a_missed.empty else
           f"; {len(a_missed)} service-slot(s) MISS analytically ({', '.join(f'period {int(r.period)} {r.slot}' for r in a_missed.itertuples())})"
           if a_col.notna().any() else "")
    if a_missed.empty and a_col.notna().all() and len(sc):
        ana = " and analytically"
    head = f"  per-slot check ({sc[['period', 'slot']].drop_duplicates().shape[0]} busiest slot(s) simulated, {arch.verify_s:.1f} s): {sim}{ana}"

    def ms(v: Any) -> str:
        return "-" if v is None or v != v else fmt(round(float(v), 1))

    def verdict(v: Any) -> str:
        return "-" if v is None or v != v else ("met" if v else "MISSED")

    metrics = sorted(set(sc["token_metric"].dropna().astype(str))) if "token_metric" in sc.columns else []
    tok = "/".join(m.upper() for m in metrics) if metrics else "TPOT"
    rows = [[int(r.period), r.slot, r.service, fmt(round(float(r.peak_rate_per_s), 1)), f"{ms(r.ttft_analytic_ms)} / {ms(r.ttft_sim_ms)}",
             ms(r.ttft_target_ms), f"{ms(r.tpot_analytic_ms)} / {ms(r.tpot_sim_ms)}", ms(r.tpot_target_ms),
             verdict(getattr(r, "analytic_met", None)), verdict(r.met)] for r in sc.itertuples()]
    def pq(col: str) -> str:
        q = sorted(set(sc[col].dropna().astype(float))) if len(sc) else []
        return "/".join(f"p{100 * v:g}" for v in q) + " " if q else ""

    out = [head, table(["period", "slot", "service", "peak req/s", f"TTFT {pq('ttft_quantile')}ms analytic / sim", "target",
                        f"{tok} {pq('tpot_quantile')}ms analytic / sim", "target", "analytic", "simulated"], rows)]
    out.extend(f"  {n}" for n in sorted(set(sc["note"].dropna().astype(str))) if n)
    return out


def slot_architecture_lines(slots: pd.DataFrame) -> list[str]:
    """A per-slot plan: which architecture carries which slots, for each run of periods with the same split."""
    per = slots.drop_duplicates(["period", "slot"]).groupby("period", sort=True)
    runs: list[tuple[int, int, str]] = []
    for t, grp in per:
        split = "; ".join(f"{a}: {', '.join(grp.loc[grp['carried_by'] == a, 'slot'].astype(str))}"
                          for a in sorted(grp["carried_by"].unique()))
        if runs and runs[-1][2] == split:
            runs[-1] = (runs[-1][0], int(t), split)  # type: ignore[arg-type]
        else:
            runs.append((int(t), int(t), split))  # type: ignore[arg-type]
    return [f"periods {a}-{b}: {split}" if a != b else f"period {a}: {split}" for a, b, split in runs]


def to_document(result: HorizonResult, name: str) -> dict[str, Any]:
    archs = {}
    for k, a in result.architectures.items():
        sv = saving(a)
        archs[k] = {
            "feasible": a.feasible, "status": a.status, "total_usd_present_value": a.total_usd, "gap": a.gap,
            "solve_s": a.solve_s, "highs_s": a.highs_s, "extract_s": a.extract_s, "baseline_owned_peak_usd": a.baseline_usd,
            "baseline": BASELINE_NAME, "baseline_check": baseline_check_record(getattr(a, "baseline_check", None)),
            "saving_usd": sv[0] if sv else None, "saving_share": sv[1] if sv else None,
            "schedule": a.schedule.to_dict("records"), "costs": a.costs.to_dict("records"),
            "pools": a.pools.to_dict("records"), "slots": a.slots.to_dict("records"),
            "slot_checks": a.slot_checks.to_dict("records"), "slot_checks_method": a.slot_checks_method, "verify_s": a.verify_s,
            "notes": list(a.notes),
        }
    return {"schema_version": SCHEMA_VERSION, "instance": name, "periods": result.periods, "slots": result.slots,
            "winner": result.winner, "size": result.size, "build_s": result.build_s, "notes": result.notes, "architectures": archs}


def write_outputs(result: HorizonResult, out_dir: Path, name: str) -> list[Path]:
    """``horizon.json`` and, per table, one CSV and one Parquet file with an ``architecture`` column."""
    from planner.cli.output import to_json

    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "horizon.json"]
    written[0].write_text(to_json(to_document(result, name)))
    for table_name in ("schedule", "pools", "costs", "slots", "slot_checks"):
        frames = [getattr(a, table_name).assign(architecture=k) for k, a in result.architectures.items() if a.feasible]
        if table_name == "slot_checks" and not any(len(f) for f in frames):
            continue
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        for ext in ("csv", "parquet"):
            p = out_dir / f"{table_name}.{ext}"
            if ext == "csv":
                df.to_csv(p, index=False)
            else:
                df.to_parquet(p, index=False)
            written.append(p)
    return written
