"""Sweep of the example instance: re-solve (persistent HiGHS) vs rebuild per scenario.

Run: python benchmarks/bench_sweep.py [--jobs 2] [--n 200] [--repeat 1] [--profile 30] [--out rows.csv]
Prints the sweep's wall time on ``--jobs`` processes, its CPU time (this process and the
workers, ``getrusage``: on a shared, loaded machine the wall time measures the neighbours too),
the median of ``--repeat`` runs and its ratio to issue 27's target (1,000 scenarios in <= 60 s on
2 processes, scaled to ``--n``; <= 1 meets it), and the ratio against rebuilding the model for
every scenario (measured on a sample of scenarios, single process, extrapolated;
``--rebuild-sample 0`` skips it). Each run starts with empty per-process memos (the workers are
new processes; with ``--jobs 1`` the memos of this process are cleared between runs).
``--warm-caps`` computes the utilisation caps of every rate first (untimed; the workers are forked
after it and inherit them): the sweep's time if the caps cost nothing, i.e. how far a faster cap
computation alone can take it.
``--profile K`` runs the sweep under cProfile (use it with ``--jobs 1``: workers are not profiled)
and prints the K functions with the largest cumulative time, then those with the largest own time
(the profile issue 27's closing note asks for; the profiler itself adds ~30 % to the times).

Measured (wt-sw3, 2 shared cores, load average 3-5 from other work, so CPU is the steadier figure):
``--jobs 2 --n 1000 --rebuild-sample 0`` 383 s wall, 429 s CPU (429 ms/scenario; 534 s / 460 s before
this session's changes, under heavier load); with ``--warm-caps`` 118 s wall, 234 s CPU (ratio 1.97):
the caps are ~45 % of the sweep's CPU, the peak simulations and the solves the rest.
2026-12-05 (lead): ``--jobs 2 --n 1000`` 106.5 s wall, 210 s CPU before; after the price intervals
(planner/studies/price_interval.py) 43.7 s wall, 84 s CPU on a quiet VM (58-72 s wall with another engineer's
runs on the cores); ``--jobs 1 --n 100`` 166 -> 74-81 ms/scenario. Compare two versions' answers with ``--out``
(pools, devices and winners identical; totals within 3.4e-11 relative at 1,000 scenarios).
2026-12-06 (lead), after a study's rate scenario solves the table built at that rate (planner/studies/source.py:
the rate selects the operating points, so the scaled base table was another table than ``planner solve --set``
builds): ``--jobs 2 --n 1000 --rebuild-sample 0`` 87.3 s wall, 173 s CPU (ratio 1.45, not met; a helper's test
runs on the cores) — 100 table builds of ~0.8 s and a model per rate, where the rates' scaled tables re-used one.
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
from planner.studies.spec import Scenario, expand, parse_sets
from planner.studies.sweep import run_sweep

INSTANCE = Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml"
TARGET_S_PER_1000 = 60.0
"""Issue 27: 1,000 scenarios in <= 60 s on 2 processes."""


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _clear_memos(src: TableSource, *, keep_resolvers: bool = False) -> None:
    """Per-process memos a sweep fills (so a repeated run in this process starts cold, as a new worker does);
    ``keep_resolvers``: not the resolvers (``--warm-caps``: their caps memo is the point)."""
    import planner.optimize.extract as ex
    import planner.optimize.latency as lat
    import planner.solve_instance as si
    import planner.studies.sweep as sw

    src.solved.clear()
    lat._MEMO.clear()
    ex._PLAN_MEMO.clear()
    si._SIMULATED.clear()
    if not keep_resolvers:
        sw._RESOLVERS.clear()
        sw._KEYS.clear()


def _warm_caps(src: TableSource, study: list[Scenario]) -> float:
    """Seconds to fill this process's resolver (the one :func:`planner.studies.sweep.solve_scenario` uses)
    with the utilisation caps of every distinct rate of ``study`` (``Resolver.reprepare``'s memo), untimed
    by the sweep; workers are forked after it, so they start with every cap known: the sweep's time
    without the caps (what a faster or cached cap computation could reach at most)."""
    import planner.studies.sweep as sw
    from planner.optimize.resolve import Resolver

    t0 = time.perf_counter()
    headroom = sw.study_headroom(src, study)
    seen: set[bytes] = set()
    for sc in study:
        base, tables, settings = src.tables_and_settings(sc.overrides)
        rates = tables.demand["rate_peak_per_s"].to_numpy(float).tobytes()
        if rates in seen:
            continue
        seen.add(rates)
        key = (sw._structure_key(base), float(headroom))
        if key not in sw._RESOLVERS:
            sw._RESOLVERS[key] = Resolver.create(base, settings, rate_headroom=headroom)
        sw._RESOLVERS[key].reprepare(tables)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rebuild-sample", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1, help="Sweeps timed (median reported).")
    ap.add_argument("--profile", type=int, default=0, help="Profile the sweep (this process) and print the top K functions.")
    ap.add_argument("--warm-caps", action="store_true",
                    help="Compute every rate's utilisation caps before timing (the sweep without the caps' cost).")
    ap.add_argument("--out", default=None, help="Write the last sweep's rows to this CSV (compare two versions' answers; solve_s dropped).")
    a = ap.parse_args()
    resolved = load_instance(INSTANCE)
    src = TableSource.from_instance(resolved)
    mults = ",".join(f"{v:.4g}" for v in np.geomspace(0.25, 16, a.n // 10))
    spec = parse_sets([f"services.chat.traffic.rate_multiplier={mults}", "costs.electricity_usd_per_kwh=0.04,0.06,0.08,0.1,0.12,0.14,0.16,0.18,0.2,0.22"])
    study = expand(spec)
    walls, cpus = [], []
    if a.warm_caps:
        print(f"caps of every rate computed before timing (--warm-caps): {_warm_caps(src, study):.1f} s", flush=True)
    for _ in range(max(1, a.repeat)):
        _clear_memos(src, keep_resolvers=a.warm_caps)
        t0 = time.perf_counter()
        cpu0 = _cpu_s()
        if a.profile > 0:
            import cProfile

            prof = cProfile.Profile()
            rows = prof.runcall(run_sweep, src, study, jobs=a.jobs)
        else:
            rows = run_sweep(src, study, jobs=a.jobs)
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu_s() - cpu0)
        print(f"scenarios: {len(study)}  jobs: {a.jobs}  sweep wall: {walls[-1]:.1f} s  CPU (all processes): {cpus[-1]:.1f} s "
              f"({cpus[-1] / len(study) * 1e3:.0f} ms/scenario CPU)", flush=True)
    if a.out:
        rows.drop(columns=["solve_s"]).to_csv(a.out, index=False)
    if a.profile > 0:
        import pstats

        for key in ("cumulative", "tottime"):
            pstats.Stats(prof).strip_dirs().sort_stats(key).print_stats(a.profile)
    sweep_s = statistics.median(walls)
    target = TARGET_S_PER_1000 * len(study) / 1000
    print(f"median of {len(walls)}: wall {sweep_s:.1f} s, CPU {statistics.median(cpus):.1f} s; target <= {target:g} s "
          f"(60 s per 1,000 scenarios on 2 processes): ratio {sweep_s / target:.2f} ({'met' if sweep_s <= target else 'not met'})")
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
