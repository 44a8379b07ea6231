"""Per candidate device: the best plan on that device alone, and what held it back.

For each device ``d`` of the capacity table, the table is cut to ``d``'s configs (its points and
configs rows; nothing is recomputed) and every architecture is solved on it
(:func:`planner.studies.sweep.solve_scenario`). The row gives the cheapest feasible plan on ``d``
and, against the best plan over all candidates:

- ``held_back``: when ``d`` has a feasible plan, the cost terms where it pays more (largest
  first, words of :mod:`planner.optimize.verdict`); when it has none, the most frequent reason
  its operating points were infeasible (the performance model's words), or "no feasible
  architecture" when every point is feasible alone but no plan fits the options (budget,
  procurement limits).

This is the analytic solve only (no peak simulation and no tightening rounds), so a device's
total can differ slightly from what ``planner solve`` with that single device prints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from planner.optimize.resolve import winner_of
from planner.optimize.verdict import term_words
from planner.studies.source import TableSource
from planner.studies.sweep import solve_scenario

COLUMNS = ["device", "architecture", "total_usd_per_month", "more_than_best_usd_per_month", "usd_per_million_tokens",
           "devices", "held_back"]


def _only(source: TableSource, device: str) -> TableSource:
    t = source.base_tables
    cfg = t.configs[t.configs["device"] == device]
    keep = set(cfg["config"])
    pts = t.points[t.points["config"].isin(keep)].reset_index(drop=True)
    agents = t.agents
    if agents is not None:
        agents = replace(agents, points=agents.points[agents.points["config"].isin(keep)].reset_index(drop=True))
    tables = replace(t, points=pts, configs=cfg.reset_index(drop=True), agents=agents)
    # solved={}: the base source's memo of solved scenarios is keyed by rates and prices only, which a
    # device restriction does not change (sharing it returned the all-device plan for every device)
    return replace(source, base_tables=tables, resolved=None, name=f"{source.name}:{device}", solved={})


def device_comparison(source: TableSource, progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """One row per candidate device (module docstring), cheapest first, infeasible last."""
    best = solve_scenario(source, {})[0]
    w = winner_of(best)
    best_total = float(best[w].total_usd_per_month or 0.0) if w else None
    best_terms = best[w].costs if w else {}
    from planner.forked import fork_each

    rows = []
    points = source.base_tables.points
    devices = [str(d) for d in sorted(source.base_tables.configs["device"].unique())]
    # each device solved alone is independent of the others: dealt over the usable cores, the same plans
    solved = fork_each(lambda device: solve_scenario(_only(source, device), {})[0], devices,
                       done=(lambda *_: progress(1)) if progress else None)
    for device, summaries in zip(devices, solved, strict=True):
        win = winner_of(summaries)
        if win is not None:
            s = summaries[win]
            total = float(s.total_usd_per_month or 0.0)
            diffs = sorted(((v - best_terms.get(k, 0.0), k) for k, v in s.costs.items()), reverse=True)
            worse = [f"{term_words(k)} +${d:,.0f}" for d, k in diffs if d > max(1.0, 0.005 * total)][:3]
            held = ("the best plan" if best_total is not None and total <= best_total * (1 + 1e-9)
                    else "pays more for " + ", ".join(worse) if worse else "slightly dearer overall")
            rows.append({"device": device, "architecture": win, "total_usd_per_month": total,
                         "more_than_best_usd_per_month": total - best_total if best_total is not None else None,
                         "usd_per_million_tokens": s.usd_per_million_tokens, "devices": sum(s.devices.values()), "held_back": held})
        else:
            bad = points[(points["device"] == device) & ~points["feasible"].astype(bool)]
            reason = Counter(str(r) for r in bad["reason"]).most_common(1)
            rows.append({"device": device, "architecture": None, "total_usd_per_month": None, "more_than_best_usd_per_month": None,
                         "usd_per_million_tokens": None, "devices": 0,
                         "held_back": f"no feasible plan: {reason[0][0]}" if reason else "no feasible plan within the options (budget, procurement limits)"})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values("total_usd_per_month", na_position="last", kind="stable").reset_index(drop=True)
