"""Benchmarks for plans over time (`planner horizon`; not part of the test gate).

1. The example instance `instances/fleet-horizon.yaml` (ServeGen fleet, 24 months x 24 hourly slots,
   H100/H200, buy / reserve / on demand), whole process, no Monte Carlo or regret (target <= 15 s).
2. 24 monthly periods x 24 hourly slots x the README catalog (enterprise-chat: H100, H200, MI300X,
   TP 1/2/4/8), both architectures, no baseline (target <= 60 s on 2 cores): model size, build +
   extract time against HiGHS's own time.

3. ``--only growth``: the same fleet (the 162-client ServeGen fleet of the example) growing 5, 30 and
   100 %/month, ``--no-baseline``: pools up to ~700, ~90,000 and ~10¹² devices at month 23. Issue 27's
   target: model build ≤ HiGHS's own time, whole command ≤ 30 s. Prints the build (``build_s`` of the
   JSON: capacity caps of every level, the sparse matrix), HiGHS (``highs_s`` summed over both
   architectures) and the process's CPU time (the build forks one child per extra usable core for the
   unified caps, ``planner/forked.py``; its CPU is counted here too).

Each is run ``--repeat`` times (default 3); the median is printed with its ratio to the target
(< 1: the target is met).

Run: python benchmarks/bench_horizon.py [--repeat N] [--only example|catalog|growth]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_TARGET_S = 15.0
CATALOG_TARGET_S = 60.0


def bench_example(repeat: int) -> None:
    inst = ROOT / "instances" / "fleet-horizon.yaml"
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "planner", "horizon", str(inst), "--json"], check=True, capture_output=True, cwd=ROOT)
        runs.append(time.perf_counter() - t0)
    med = statistics.median(runs)
    print(f"planner horizon {inst.name}: median {med:.1f} s wall over {repeat} runs ({', '.join(f'{r:.1f}' for r in runs)}); "
          f"target <= {EXAMPLE_TARGET_S:g} s: ratio {med / EXAMPLE_TARGET_S:.2f}")


def bench_catalog(repeat: int) -> None:
    import yaml

    from planner.capacity import build_capacity_tables
    from planner.horizon.inputs import horizon_inputs
    from planner.horizon.solve import solve_horizon
    from planner.instance import load_instance

    t0 = time.perf_counter()
    raw = yaml.safe_load((ROOT / "instances" / "fleet-horizon.yaml").read_text())
    raw["catalog"]["devices"] = ["h100-sxm", "h200-sxm", "mi300x"]
    raw["horizon"]["acquisition"]["mi300x"] = {"buy": {"lead_time_periods": 2, "source": "profile"}, "on_demand": {"source": "profile"}}
    path = ROOT / "instances" / ".bench-horizon-catalog.yaml"
    path.write_text(yaml.safe_dump(raw))
    try:
        resolved = load_instance(path)
        tables = build_capacity_tables(resolved)
        inputs = horizon_inputs(resolved)
    finally:
        path.unlink()
    prep_s = time.perf_counter() - t0
    totals = []
    for r in range(repeat):
        t1 = time.perf_counter()
        res = solve_horizon(tables, inputs, ("shared", "disaggregated"), time_limit_s=300, mip_gap=1e-3, baseline=False)
        total = time.perf_counter() - t1
        totals.append(prep_s + total)
        highs = sum(a.highs_s for a in res.architectures.values())
        solve = sum(a.solve_s for a in res.architectures.values())
        extract = sum(a.extract_s for a in res.architectures.values())
        hand_over = solve - highs
        if r == 0:
            print(f"24 x 24 x README catalog: {res.size['variables']:,} variables ({res.size['integer_variables']:,} integer), "
                  f"{res.size['constraints']:,} constraints, {res.size['nonzeros']:,} nonzeros")
            for a in res.architectures.values():
                print(f"  {a.architecture}: {a.status}, gap {a.gap if a.gap is None else f'{a.gap:.2%}'}, ${(a.total_usd or 0):,.0f}")
        print(f"  run {r + 1}: tables + slots {prep_s:.1f} s; horizon {total:.1f} s: build {res.build_s:.1f} s, hand-over to HiGHS "
              f"{hand_over:.1f} s, HiGHS {highs:.1f} s, extract {extract:.1f} s; (build + hand-over + extract) / HiGHS = "
              f"{(res.build_s + hand_over + extract) / max(highs, 1e-9):.2f}")
    med = statistics.median(totals)
    print(f"  median {med:.1f} s (tables + horizon) over {repeat} runs; target <= {CATALOG_TARGET_S:g} s: ratio {med / CATALOG_TARGET_S:.2f}")


def bench_growth(repeat: int) -> None:
    import json
    import resource

    inst = ROOT / "instances" / "fleet-horizon.yaml"
    for growth in (0.05, 0.3, 1.0):
        rows = []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "planner", "horizon", str(inst), "--json", "--no-baseline",
                                "--set", f"horizon.growth.monthly_rate={growth}"], check=True, capture_output=True, cwd=ROOT, text=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            doc = json.loads(r.stdout)
            highs = sum(a["highs_s"] for a in doc["architectures"].values())
            peak = max(row["in_pools_peak"] for a in doc["architectures"].values() for row in a["schedule"])
            rows.append((wall, doc["build_s"], highs, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), peak))
        wall, build, highs, cpu, peak = (statistics.median(x) for x in zip(*rows, strict=True))
        print(f"162-client fleet at {growth:.0%}/month (devices in pools up to {peak:,.0f}): whole {wall:.1f} s wall, CPU {cpu:.1f} s; "
              f"build {build:.2f} s, HiGHS {highs:.2f} s: build / HiGHS = {build / max(highs, 1e-9):.2f} (target <= 1); "
              f"whole / 30 s = {wall / 30:.2f} (medians of {repeat})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["example", "catalog", "growth"])
    args = ap.parse_args()
    if args.only in (None, "example"):
        bench_example(args.repeat)
    if args.only in (None, "catalog"):
        bench_catalog(args.repeat)
    if args.only in (None, "growth"):
        bench_growth(args.repeat)
