"""200-scenario sweep of the example instance: re-solve (persistent HiGHS) vs rebuild per scenario.

Run: python benchmarks/bench_sweep.py [--jobs 2] [--n 200]
Prints the sweep's wall time on ``--jobs`` processes, its CPU time (this process and the
workers, ``getrusage``: on a shared, loaded machine the wall time measures the neighbours too),
and the ratio against rebuilding the model for every scenario (measured on a sample of
scenarios, single process, extrapolated; ``--rebuild-sample 0`` skips it).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import numpy as np

from planner.instance import load_instance
from planner.optimize import solve_tables
from planner.optimize.resolve import scale_rates, with_price
from planner.studies.source import TableSource
from planner.studies.spec import expand, parse_sets
from planner.studies.sweep import run_sweep

INSTANCE = Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml"


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rebuild-sample", type=int, default=10)
    a = ap.parse_args()
    resolved = load_instance(INSTANCE)
    src = TableSource.from_instance(resolved)
    mults = ",".join(f"{v:.4g}" for v in np.geomspace(0.25, 16, a.n // 10))
    spec = parse_sets([f"services.chat.traffic.rate_multiplier={mults}", "costs.electricity_usd_per_kwh=0.04,0.06,0.08,0.1,0.12,0.14,0.16,0.18,0.2,0.22"])
    study = expand(spec)
    t0 = time.perf_counter()
    cpu0 = _cpu_s()
    rows = run_sweep(src, study, jobs=a.jobs)
    sweep_s = time.perf_counter() - t0
    sweep_cpu_s = _cpu_s() - cpu0
    print(f"scenarios: {len(study)}  jobs: {a.jobs}  sweep wall: {sweep_s:.1f} s  CPU (all processes): {sweep_cpu_s:.1f} s "
          f"({sweep_cpu_s / len(study) * 1e3:.0f} ms/scenario CPU)", flush=True)
    if a.rebuild_sample <= 0:
        return
    per = []
    for sc in study[:: max(1, len(study) // a.rebuild_sample)][: a.rebuild_sample]:
        t = scale_rates(src.base_tables, {"chat": sc.overrides["services.chat.traffic.rate_multiplier"] / src.base_rate_multiplier["chat"]})
        t = with_price(t, sc.overrides["costs.electricity_usd_per_kwh"])
        t1 = time.perf_counter()
        solve_tables(t, src.settings)
        per.append(time.perf_counter() - t1)
    rebuild_total = statistics.median(per) * len(study)
    print(f"MIP gap: {src.settings.mip_gap:g} (the instance's own; sweeps do not loosen it)")
    print(f"  ({sweep_s / len(study) * 1e3:.0f} ms/scenario wall)")
    print(f"re-used built model in {rows.drop_duplicates('scenario')['model_reused'].mean():.0%} of scenarios")
    print(f"rebuild per scenario (solve_tables, 1 process): median {statistics.median(per):.2f} s -> {rebuild_total:.0f} s for {len(study)} (1 process)")
    print(f"ratio rebuild(1 proc) / sweep({a.jobs} procs): {rebuild_total / sweep_s:.1f}x; per-process ratio {rebuild_total / (sweep_s * a.jobs):.1f}x")


if __name__ == "__main__":
    main()
