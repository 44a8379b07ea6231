"""Benchmark of the tool execution phase (issue 6; not part of the test gate).

Solve time of ``instances/agentic-assistant.yaml`` and of a scaled variant (10x the LLM-call
rate, and each of the trace's 4 tools split into ``--tool-copies`` tools with wait times spread
from 0.25x to 4x the original, the calls per LLM call shared among the copies, so the tool
load is comparable and the policy choice is not). Phases, medians over ``--repeat`` runs:

- tables: capacity tables incl. the agent tables (perf model, reload / recompute per point);
- build:  prepare (index sets, tool-phase coefficients) + pyomo build, plus the rebuilds of
          the latency check's tightening rounds;
- HiGHS:  the solver's own time over all architectures and rounds;
- extract: plan extraction (incl. the tool-phase section and alternative costs).

The DESIGN §9 target is modelling overhead (build + extract) no larger than the solver's time.
Run: python benchmarks/bench_agents.py [--repeat N] [--tool-copies K]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "instances" / "agentic-assistant.yaml"


def more_tools(tables: Any, copies: int) -> Any:
    """Each tool split into ``copies`` tools with waits 0.25x..4x (log-spaced), calls per LLM call / copies."""
    from planner.agents.tables import AgentTables

    a = tables.agents
    factors = np.geomspace(0.25, 4.0, copies) if copies > 1 else np.array([1.0])
    frames = []
    for k, f in enumerate(factors):
        w = a.waits.copy()
        w["tool"] = w["tool"].astype(str) + f"-{k}"
        w["calls_per_request"] = w["calls_per_request"] / copies
        for col in ("wait_mean_s", "latency_mean_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms"):
            w[col] = w[col] * f
        frames.append(w)
    agents = AgentTables(waits=pd.concat(frames, ignore_index=True), points=a.points, cpu_servers=a.cpu_servers,
                         cpu_demand=a.cpu_demand, params=a.params)
    return replace(tables, agents=agents)


def run(label: str, overrides: dict[str, Any] | None, copies: int, repeat: int) -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.model import build_model
    from planner.optimize.prepare import prepare
    from planner.optimize.solve import settings_from_instance, solve_tables

    rows = []
    for _ in range(repeat):
        resolved = load_instance(INSTANCE, overrides)
        t0 = time.perf_counter()
        tables = build_capacity_tables(resolved)
        if copies > 1:
            tables = more_tools(tables, copies)
        t_tables = time.perf_counter() - t0
        settings = settings_from_instance(resolved.instance)
        t1 = time.perf_counter()
        built = build_model(prepare(tables), redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
        t_build0 = time.perf_counter() - t1
        built.build_s = t_build0
        t2 = time.perf_counter()
        out = solve_tables(tables, settings, built=built)
        t_solve_wall = time.perf_counter() - t2
        plans = out.result.architectures.values()
        highs = sum(p.solver.time_s for p in plans)
        build = sum(p.solver.build_s for p in plans)  # first build (counted once) + rebuilds of tightening rounds
        extract = sum(p.solver.extract_s or 0.0 for p in plans)
        rounds = {p.architecture: p.solver.rounds for p in plans}
        size = (built.model.nvariables(), built.model.nconstraints())
        rows.append((t_tables, build, highs, extract, t_solve_wall, rounds, size, len(tables.agents.waits) if tables.agents is not None else 0,
                     {p.architecture: (p.feasible, p.costs.total_usd_per_month if p.costs else None) for p in plans}))
    med = [statistics.median(r[i] for r in rows) for i in range(5)]
    last = rows[-1]
    print(f"{label}: {last[7]} tool waits, model {last[6][0]} variables / {last[6][1]} constraints, solve rounds {last[5]}")
    print(f"  tables {med[0]:.2f} s | build {med[1]:.2f} s | HiGHS {med[2]:.2f} s | extract {med[3]:.2f} s | solve_tables wall {med[4]:.2f} s "
          f"(median of {len(rows)})")
    ratio = (med[1] + med[3]) / med[2] if med[2] > 0 else float("inf")
    print(f"  modelling overhead (build + extract) / HiGHS = {ratio:.2f} (target <= 1)")
    print("  plans: " + "; ".join(f"{a}: {'feasible' if ok else 'infeasible'}" + (f" {c:,.0f} USD/month" if c is not None else "")
                                 for a, (ok, c) in last[8].items()))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tool-copies", type=int, default=4)
    a = ap.parse_args()
    run("agentic-assistant", None, 1, a.repeat)
    run(f"agentic-assistant x10 rate, {a.tool_copies}x tools", {"services.agent.traffic.rate_multiplier": 2000}, a.tool_copies, a.repeat)
