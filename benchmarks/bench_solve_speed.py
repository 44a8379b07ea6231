"""Whole-process speed of `planner solve` against the targets of issue 17 (not part of the test gate).

1. `planner solve instances/enterprise-chat.yaml`, whole process (interpreter start, imports,
   capacity tables, MIP, peak simulation, report), byte-code compiled:
   - cold: an empty capacity-table cache (a fresh ``PLANNER_CACHE_DIR`` per run);
   - warm: the tables already cached (one untimed run first, then the timed runs).
   Target: <= 1 s.
2. ``--fleet``: the fleet-scale synthetic instance of ``benchmarks/bench_solve.py --fleet``
   (50 services x 8 buckets x 20 devices x 4 TP x 3 roles, ~97 k variables): a whole process
   that builds its capacity tables and solves shared and disaggregated
   (:func:`planner.optimize.solve_tables`, analytic latency: a synthetic table has no log to
   simulate). Target: <= 30 s. Takes a minute or more per run on 2 cores, so one run by default
   (``--fleet-repeat``).

Prints the median, min and max wall time of each, its ratio to the target (<= 1 meets it), and
the median CPU time (user + system) of the process: on a machine shared with other work the
wall time swings with the load, the CPU time much less, so compare versions by CPU time.

Run: python benchmarks/bench_solve_speed.py [--repeat 5] [--fleet] [--fleet-repeat 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "instances" / "enterprise-chat.yaml"
TARGET_SOLVE_S = 1.0
TARGET_FLEET_S = 30.0

FLEET_CODE = """
from planner.optimize import SolveSettings, solve_tables
from planner.optimize.synthetic import synthetic_tables
tables = synthetic_tables(services=50, buckets=8, devices=20, tps=(1, 2, 4, 8), seed=1, rate_scale=20)
out = solve_tables(tables, SolveSettings(architectures=("shared", "disaggregated"), time_limit_s=600, mip_gap=1e-3,
                                         confidence="off"))
for arch, plan in out.result.architectures.items():
    s = plan.solver
    print(f"{arch}: {s.status}, {s.variables} variables, build {s.build_s:.1f} s, HiGHS {s.time_s:.1f} s, extract {s.extract_s:.1f} s")
"""


def _env(cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PLANNER_CACHE_DIR"] = cache_dir
    return env


CPU: list[float] = []
"""CPU seconds (user + system) of each child process run by :func:`_run`, in order."""


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return wall, p.stdout


def _report(label: str, times: list[float], target: float, cpu: list[float]) -> None:
    med = statistics.median(times)
    print(f"{label}: median {med:.2f} s wall over {len(times)} runs (min {min(times):.2f}, max {max(times):.2f}), "
          f"CPU {statistics.median(cpu):.2f} s; target <= {target:g} s: ratio {med / target:.2f} ({'met' if med <= target else 'not met'})")


def bench_solve(repeat: int) -> None:
    solve = ["-m", "planner", "solve", str(INSTANCE), "--json"]
    cold: list[float] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="planner-bench-cold-") as d:
            cold.append(_run(solve, _env(d))[0])
    _report(f"planner solve {INSTANCE.name}, cold cache", cold, TARGET_SOLVE_S, CPU[-repeat:])
    with tempfile.TemporaryDirectory(prefix="planner-bench-warm-") as d:
        env = _env(d)
        _run(solve, env)  # fills the cache
        warm = [_run(solve, env)[0] for _ in range(repeat)]
    _report(f"planner solve {INSTANCE.name}, warm cache", warm, TARGET_SOLVE_S, CPU[-repeat:])
    with tempfile.TemporaryDirectory(prefix="planner-bench-imports-") as d:
        imports = [_run(["-c", "import planner.cli, planner.instance, planner.report, planner.capacity, planner.solve_instance, "
                               "planner.verify, pyomo.environ"], _env(d))[0] for _ in range(repeat)]
    print(f"  of which interpreter start + imports (pandas, pyomo, pydantic schemas): median {statistics.median(imports):.2f} s wall, "
          f"CPU {statistics.median(CPU[-repeat:]):.2f} s")


def bench_fleet(repeat: int) -> None:
    times = []
    out = ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="planner-bench-fleet-") as d:
            wall, out = _run(["-c", FLEET_CODE], _env(d))
        times.append(wall)
    _report("fleet-scale solve (tables + shared + disaggregated), whole process", times, TARGET_FLEET_S, CPU[-repeat:])
    for line in out.strip().splitlines():
        print(f"  {line}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="Runs of each enterprise-chat measurement (median reported).")
    ap.add_argument("--fleet", action="store_true", help="Also the fleet-scale solve (a minute or more per run).")
    ap.add_argument("--fleet-repeat", type=int, default=1, help="Runs of the fleet-scale solve.")
    a = ap.parse_args()
    # steady state as a user sees it: byte-code compiled once
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "planner")], check=True, capture_output=True)
    bench_solve(max(1, a.repeat))
    if a.fleet:
        bench_fleet(max(1, a.fleet_repeat))
