"""Issue 27, speed at fleet scale: this tree against a baseline commit, measured alternately in one run
(not part of the test gate; the machine may be shared, so compare CPU time and ratios, not wall times
across runs).

1. ``--queueing`` (default on): :func:`planner.queueing.max_utilization` at c = 10 … 10⁶ servers, this
   tree against the baseline's scalar function and the baseline's vectorised copy in
   ``optimize/prepare.py`` (``max_utilization_many``, an O(c) Erlang recursion per bisection step;
   skipped above ``--vector-max-c`` servers, where one call takes minutes), with the largest
   difference between the paths. Target: <= 10 ms at 10⁵ servers, paths equal to 1e-9.
2. ``--commands``: whole processes, baseline and this tree alternately, ``--repeat`` times each
   (median wall and CPU): ``planner solve instances/enterprise-chat.yaml`` with a warm cache, and
   ``planner horizon`` on the 162-client ServeGen fleet (``horizon_base.yaml`` of the fuzz repro
   folder, growth 5 %/month) and on the same fleet at growth 100 %/month (pools of 10³–10¹² servers;
   the baseline ran for minutes: ``--timeout`` caps it), ``--no-baseline``.
3. ``--fleet``: the fleet-scale solve of ``benchmarks/bench_solve_speed.py --fleet`` (50 services x 8
   buckets x 20 devices x 4 TP, ~97 k variables, shared and disaggregated), once per tree, printing
   each architecture's model build (prepare + pyomo + loading HiGHS) against HiGHS's own time.

The baseline is ``git archive <--base>`` of this repository extracted to a temporary folder and
imported with ``PYTHONPATH`` (its own ``planner`` package and catalog), run from a neutral folder
so the working tree never shadows it.

Run: python benchmarks/bench_scale.py [--base 11e9b83] [--commands] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
QUEUE_TARGET_S = 0.010


def _baseline_tree(base: str, into: Path) -> Path:
    blob = subprocess.run(["git", "archive", base], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _best_of(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_queueing(old_tree: Path, vector_max_c: int) -> None:
    sys.path.insert(0, str(ROOT))
    import planner.queueing as new

    old_q = _load(old_tree / "planner" / "queueing.py", "baseline_queueing")
    old_prep = _load(old_tree / "planner" / "optimize" / "prepare.py", "baseline_prepare")
    args = (1.0, 0.99, 0.02, 0.7, 1.5)  # service 1 s, p99 wait within 20 ms, c_s 0.7, c_a 1.5
    new.max_utilization(10, *args)  # imports scipy.special once, outside the timings
    print("max_utilization(c, s=1 s, q=0.99, budget=20 ms, cs=0.7, ca=1.5): best of 5 (1 for the slow baseline vector path)")
    print(f"{'servers':>9}  {'this tree':>10}  {'base scalar':>11}  {'base vector':>11}  {'cap':>10}  {'|new-scalar|':>12}  {'|new-vector|':>12}")
    for c in (10, 100, 1000, 10**4, 10**5, 10**6):
        t_new = _best_of(lambda c=c: new.max_utilization(c, *args), 5)
        t_old = _best_of(lambda c=c: old_q.max_utilization(c, *args), 5)
        cap = new.max_utilization(c, *args)
        d_scalar = abs(cap - old_q.max_utilization(c, *args))
        vec = "skipped"
        d_vec = "-"
        if c <= vector_max_c:
            one = [np.array([v]) for v in (c, *args)]
            t_vec = _best_of(lambda one=one: old_prep.max_utilization_many(*one), 1)
            vec = f"{t_vec * 1e3:9.1f} ms"
            d_vec = f"{abs(cap - float(old_prep.max_utilization_many(*one)[0])):.1e}"
        print(f"{c:>9,}  {t_new * 1e3:7.2f} ms  {t_old * 1e3:8.2f} ms  {vec:>11}  {cap:10.6f}  {d_scalar:12.1e}  {d_vec:>12}")
    t5 = _best_of(lambda: new.max_utilization(10**5, *args), 5)
    print(f"at 10^5 servers: {t5 * 1e3:.2f} ms; target <= {QUEUE_TARGET_S * 1e3:g} ms: ratio {t5 / QUEUE_TARGET_S:.2f}")


def _run(args: list[str], pythonpath: Path, cache: str, timeout: float) -> tuple[float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "PLANNER_CACHE_DIR": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "planner", *args], cwd=tempfile.gettempdir(), env=env, capture_output=True,
                           text=True, timeout=timeout, check=False)
        status = "ok" if p.returncode == 0 else f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"
    except subprocess.TimeoutExpired:
        status = f"timeout {timeout:g} s"
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), status


FLEET_CODE = """
import time
t0 = time.perf_counter()
from planner.optimize import SolveSettings, solve_tables
from planner.optimize.synthetic import synthetic_tables
tables = synthetic_tables(services=50, buckets=8, devices=20, tps=(1, 2, 4, 8), seed=1, rate_scale=20)
out = solve_tables(tables, SolveSettings(architectures=("shared", "disaggregated"), time_limit_s=600, mip_gap=1e-3,
                                         confidence="off"))
for arch, plan in out.result.architectures.items():
    s = plan.solver
    print(f"{arch}: {s.status}, {s.variables} variables, build {s.build_s:.1f} s, HiGHS {s.time_s:.1f} s, "
          f"extract {s.extract_s:.1f} s, gap {s.gap or 0:.2%}, cost ${plan.costs.total_usd_per_month:,.0f}/month")
print(f"whole (tables + both architectures): {time.perf_counter() - t0:.1f} s")
"""


def bench_fleet(old_tree: Path, timeout: float) -> None:
    for name, tree in (("baseline", old_tree), ("this tree", ROOT)):
        env = {**os.environ, "PYTHONPATH": str(tree)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", FLEET_CODE], cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True,
                           timeout=timeout, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(f"fleet-scale solve, {name}: {time.perf_counter() - t0:.1f} s wall, CPU {cpu:.1f} s")
        for line in (p.stdout.strip() or p.stderr.strip()[-500:]).splitlines():
            print(f"  {line}")


def bench_commands(old_tree: Path, repeat: int, timeout: float) -> None:
    cases = [("solve enterprise-chat (warm cache)", ["solve", str(ROOT / "instances" / "enterprise-chat.yaml")])]
    # the shipped fleet-horizon instance (the 162-client ServeGen fleet, summed), and the same at 100 %/month growth
    # (fuzz reproducer H1: pools of millions of servers)
    fleet = str(ROOT / "instances" / "fleet-horizon.yaml")
    cases += [("horizon 162-client fleet, 5 %/month", ["horizon", fleet, "--no-baseline"]),
              ("horizon 162-client fleet, 100 %/month", ["horizon", fleet, "--no-baseline", "--set", "horizon.growth.monthly_rate=1.0"])]
    trees = [("baseline", old_tree), ("this tree", ROOT)]
    with tempfile.TemporaryDirectory(prefix="bench-scale-cache-") as cache_root:
        for label, args in cases:
            results: dict[str, list[tuple[float, float, str]]] = {name: [] for name, _ in trees}
            for name, tree in trees:  # warm each tree's cache (and byte-code) first, untimed
                _run(args, tree, f"{cache_root}/{name}", timeout)
            for _ in range(repeat):
                for name, tree in trees:
                    results[name].append(_run(args, tree, f"{cache_root}/{name}", timeout))
            print(label)
            med = {}
            for name, _ in trees:
                runs = results[name]
                walls = [w for w, _, s in runs]
                med[name] = statistics.median(walls)
                statuses = sorted({s for _, _, s in runs})
                print(f"  {name:>9}: median {med[name]:6.2f} s wall, CPU {statistics.median([c for _, c, _ in runs]):6.2f} s "
                      f"({', '.join(f'{w:.1f}' for w in walls)}; {', '.join(statuses)})")
            print(f"  ratio this tree / baseline (wall): {med['this tree'] / med['baseline']:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="11e9b83", help="Baseline commit (default: the tree issue 27 was measured on).")
    ap.add_argument("--commands", action="store_true", help="Also the whole-process comparisons (minutes).")
    ap.add_argument("--repeat", type=int, default=3, help="Runs of each command per tree (median reported).")
    ap.add_argument("--timeout", type=float, default=150.0, help="Seconds before a command run is stopped.")
    ap.add_argument("--vector-max-c", type=int, default=10**4, help="Largest c for the baseline's O(c) vector path.")
    ap.add_argument("--no-queueing", action="store_true", help="Skip the queueing comparison.")
    ap.add_argument("--fleet", action="store_true", help="Also the fleet-scale solve, once per tree (minutes).")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scale-base-") as d:
        old = _baseline_tree(a.base, Path(d))
        if not a.no_queueing:
            bench_queueing(old, a.vector_max_c)
        if a.commands:
            bench_commands(old, max(1, a.repeat), a.timeout)
        if a.fleet:
            bench_fleet(old, max(a.timeout, 900.0))
