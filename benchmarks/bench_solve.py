"""Benchmarks for `planner solve` (not part of the test gate).

1. Whole-process wall time of `planner solve instances/enterprise-chat.yaml` (target <= 2 s).
2. A large synthetic capacity table (20 devices x 4 TP x 3 roles x 5 services x 10 buckets):
   build + extract time against HiGHS's own solve time (target ratio <= 1), model size.
3. Fleet scale (``--fleet``): 50 services x 8 buckets x 20 devices x 4 TP x 3 roles (96,000
   points, ~97 k variables), shared and disaggregated: the phases timed one by one —
   utilisation caps and index sets (:func:`planner.optimize.prepare.prepare`), the pyomo
   build (:func:`planner.optimize.model.build_model`), HiGHS, extraction — against the target
   build + extract <= HiGHS time, whole solve <= 30 s. Takes minutes; not run by default.

Run: python benchmarks/bench_solve.py [--repeat N] [--fleet]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_cli(repeat: int) -> None:
    inst = ROOT / "instances" / "enterprise-chat.yaml"
    # Steady state as a user sees it: byte-code compiled once (sandboxes that set
    # PYTHONDONTWRITEBYTECODE would otherwise recompile the package on every run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "planner")], check=True, capture_output=True)
    times = []
    for _ in range(max(repeat, 9)):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from planner.cli import main; main()", "solve", str(inst), "--json"],
                       check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    lo, hi = min(times), max(times)
    print(f"planner solve {inst.name}: median {statistics.median(times):.2f} s wall over {len(times)} runs "
          f"(min {lo:.2f}, max {hi:.2f}; target <= 2 s)")


def bench_large(repeat: int) -> None:
    from planner.optimize import SolveSettings, solve_tables
    from planner.optimize.synthetic import synthetic_tables

    tables = synthetic_tables(services=5, buckets=10, devices=20, tps=(1, 2, 4, 8), seed=1, rate_scale=20)
    rows = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = solve_tables(tables, SolveSettings(architectures=("hybrid",), time_limit_s=120, mip_gap=1e-3))
        wall = time.perf_counter() - t0
        s = out.result.architectures["hybrid"].solver
        rows.append((s.build_s, s.extract_s, s.time_s, wall, s))
    build = statistics.median(r[0] for r in rows)
    extract = statistics.median(r[1] for r in rows)
    solve = statistics.median(r[2] for r in rows)
    s = rows[-1][4]
    print(f"large synthetic: {len(tables.points)} points, {s.variables} variables, {s.constraints} constraints; status {s.status}, gap {s.gap}")
    print(f"  build {build:.2f} s + extract {extract:.2f} s vs HiGHS {solve:.2f} s -> ratio {(build + extract) / solve:.2f} (target <= 1)")


def bench_fleet() -> None:
    from planner.optimize import SolveSettings
    from planner.optimize.model import build_model
    from planner.optimize.prepare import prepare
    from planner.optimize.solve import make_solver, solve_architecture
    from planner.optimize.synthetic import synthetic_tables

    t0 = time.perf_counter()
    tables = synthetic_tables(services=50, buckets=8, devices=20, tps=(1, 2, 4, 8), seed=1, rate_scale=20)
    t1 = time.perf_counter()
    prep = prepare(tables)
    t2 = time.perf_counter()
    built = build_model(prep)
    t3 = time.perf_counter()
    print(f"fleet: {len(tables.points):,} points; tables {t1 - t0:.1f} s, prepare (caps, index sets) {t2 - t1:.1f} s, "
          f"pyomo build {t3 - t2:.1f} s")
    solver = make_solver()
    for arch in ("shared", "disaggregated"):
        w0 = time.perf_counter()
        plan = solve_architecture(built, solver, arch, SolveSettings(architectures=(arch,), time_limit_s=600, mip_gap=1e-3))
        wall = time.perf_counter() - w0
        s = plan.solver
        print(f"  {arch}: {s.variables:,} variables, {s.constraints:,} constraints, status {s.status}; HiGHS {s.time_s:.1f} s, "
              f"extract {s.extract_s:.1f} s, wall {wall:.1f} s; (prepare + build + extract) / HiGHS = "
              f"{(t3 - t1 + s.extract_s) / max(s.time_s, 1e-9):.2f} (target <= 1)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fleet", action="store_true", help="Also the fleet-scale model (minutes).")
    a = ap.parse_args()
    bench_cli(a.repeat)
    bench_large(max(1, a.repeat // 2))
    if a.fleet:
        bench_fleet()
