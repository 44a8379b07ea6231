"""Analytic latency at the load that arrives against the simulator (issue 24 item 3).

Run: ``python benchmarks/bench_latency_at_load.py [--quick]``

A plan is solved for a small instance (one A100-80GB, Llama-3.1-8B bf16, vLLM calibration; short
prompts 1,000 in / 200 out or long prompts 8,000 in / 200 out; TTFT 20 s / TPOT 2 s at p99, loose
so that the point's full batch is what the targets allow) for the shared and the disaggregated
architecture. Its traffic is then scaled so that its busiest pool runs at 10–95 % of its
instances (``utilisation = Σ λ τ / n``, the plan's own definition) with the pool sizes kept, and
at each load the analytic p50 and p99 of TTFT, TPOT (per request) and ITL (every gap; DESIGN §3)
of :func:`planner.pool_latency.plan_latency_quantiles` are printed against the simulator's
(:mod:`planner.simulate`, the plan's adapter, Poisson arrivals at the scaled rate, ``SEEDS``
replicated runs of ``REQUESTS`` measured requests each, histograms merged). ``err`` is
analytic / simulated − 1; ``*`` marks those beyond ±15 %. ~1 minute.

``tests/test_latency_at_load.py`` holds a few of these grid points.

Last run (3 seeds × 4,000 requests): 141 of 144 figures within ±15 % (was 131). Left outside:
shared 1,000-token TTFT p99 at 95 % (+38 %: the pool's slot wait, Erlang C with the slot held
``o · t_mean`` of the full batch, is +27 % on its own and is added to the lane-inclusive TTFT
quantile, a sum of quantiles); shared 8,000-token TTFT p99 at 95 % (+81 %: the slots are full in the
simulator, which throttles the lane, while the analytic side adds the slot wait to an unthrottled
lane queue); shared 8,000-token TTFT p50 at 50 % (−18 %: the router sends newcomers to a busy lane
more often than :func:`planner.pool_latency._jsq_busy_share` says).

The examples' shared plans (``planner solve instances/<x>.yaml --json -q``, analytic vs simulated
p99 TTFT at peak): the long-prompt lane model is pessimistic behind many instances —
agentic-assistant (33 instances, prompts of 11.8 chunks) 2,402 vs 1,495 ms (+61 %; the former
pooled lane model −14 %), multimodal-image (11 instances, 2 chunks) 615 vs 410 ms (+50 %; was
−41 %); closer than before on code-completion-8b (−29 %, was −46 %), fleet-horizon (0 %, was −16 %),
long-context-assistant (+34 %, was +101 %), long-document-nvidia (+119 %, was +156 %);
enterprise-chat +6 % (was −3.5 %). The same grid instance at 20 req/s (17 instances, 8,000-token
prompts, 2 seeds × 3,000 requests) shows it: TTFT p99 2,533 vs 2,160 ms at 50 % (+17 %), 6,647 vs
2,458 ms at 85 % (+170 %) — a least-loaded router over many instances keeps the in-flight counts
within about one of each other, so a busy lane is avoided far more often than independent
Poisson counts (:func:`planner.pool_latency._jsq_busy_share`) allow; over 4 instances the
simulator is close to that model. A count-spread model for the router is the open item.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from planner.pool_latency import plan_latency_quantiles
from planner.schema.plan import PlanResult

QUICK = "--quick" in sys.argv
SEEDS = (0, 1) if QUICK else (0, 1, 2)
REQUESTS = 2000 if QUICK else 4000
UTILISATIONS = (0.1, 0.5, 0.9) if QUICK else (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)
TOLERANCE = 0.15
INSTANCE_COUNTS = (1, 4, 17, 64)

INSTANCE = """
name: latency-at-load
description: issue 24 item 3 grid (one A100, Llama-3.1-8B bf16, vLLM calibration)
services:
  chat:
    model: llama-3.1-8b
    weight_precision: bf16
    engine: vllm
    slo:
      ttft: {quantile: 0.99, target_ms: 20000}
      tpot: {quantile: 0.99, target_ms: 2000}
    traffic:
      rate_per_s: 4.0
      lengths:
        - {input_tokens: INPUT, output_tokens: 200, weight: 1.0}
catalog:
  devices: [a100-sxm-80gb]
  pricing: rent
  tp_degrees: [1]
costs:
  electricity_usd_per_kwh: 0.10
  pue: 1.3
  ops_usd_per_pool_month: 500
  ops_usd_per_device_type_month: 1000
  network:
    nic_usd_per_device_month: 50
options:
  architectures: [ARCH]
  redundancy: 0
"""


def solved_plan(architecture: str, input_tokens: int, workdir: Path) -> PlanResult:
    """The plan of :data:`INSTANCE` for one architecture and prompt length (no simulation check)."""
    from planner.instance import load_instance
    from planner.optimize.settings import settings_from_instance
    from planner.solve_instance import solve_instance

    path = workdir / f"{architecture}_{input_tokens}.yaml"
    path.write_text(INSTANCE.replace("INPUT", str(input_tokens)).replace("ARCH", architecture), encoding="utf-8")
    resolved = load_instance(path)
    settings = replace(settings_from_instance(resolved.instance), confidence="off")  # no simulation_check: none is run
    return solve_instance(resolved, settings).result


def at_utilisation(result: PlanResult, architecture: str, utilisation: float) -> tuple[PlanResult, float]:
    """``result`` with every rate scaled so that its busiest pool runs at ``utilisation`` (pool sizes kept)."""
    plan = result.architectures[architecture]
    busiest = max(p.utilization_peak for p in plan.pools)
    m = utilisation / busiest
    cap = result.capacity
    pts = [dict(p, rate_peak_per_s=p["rate_peak_per_s"] * m, rate_mean_per_s=p["rate_mean_per_s"] * m) for p in cap.points]
    dem = [dict(d, rate_peak_per_s=d["rate_peak_per_s"] * m, rate_mean_per_s=d["rate_mean_per_s"] * m) for d in cap.demand]
    return result.model_copy(update={"capacity": cap.model_copy(update={"points": pts, "demand": dem})}), m


def at_instances(result: PlanResult, architecture: str, instances: int) -> PlanResult:
    """``result`` with its busiest pool at ``instances`` instances (the others scaled alike, at least 1),
    every rate and each pool's KV capacity scaled with them, so that every instance carries the load it
    carried before (utilisation kept): the same pools behind a least-loaded router over more instances."""
    plan = result.architectures[architecture]
    k = instances / max(p.instances for p in plan.pools)
    pools = []
    for p in plan.pools:
        n = max(1, round(p.instances * k))
        pools.append(p.model_copy(update={"instances": n, "utilization_peak": p.utilization_peak * p.instances * k / n,
                                          "kv_capacity_bytes": p.kv_capacity_bytes * n / p.instances}))
    cap = result.capacity
    pts = [dict(q, rate_peak_per_s=q["rate_peak_per_s"] * k, rate_mean_per_s=q["rate_mean_per_s"] * k) for q in cap.points]
    dem = [dict(q, rate_peak_per_s=q["rate_peak_per_s"] * k, rate_mean_per_s=q["rate_mean_per_s"] * k) for q in cap.demand]
    return result.model_copy(update={"capacity": cap.model_copy(update={"points": pts, "demand": dem}),
                                     "architectures": {**result.architectures, architecture: plan.model_copy(update={"pools": pools})}})


def simulated_quantiles(result: PlanResult, architecture: str, seeds: tuple[int, ...], requests: int) -> dict[str, tuple[float, float]]:
    """Simulated (p50, p99) in ms of TTFT and TPOT over all requests and ITL over every gap of the
    decode / unified pools, histograms merged over ``seeds``; the run length as the plan's check
    (:func:`planner.verify.run_length`)."""
    from planner.simulate.adapter import bucket_stream, plan_to_sim_by_bucket
    from planner.simulate.engine import simulate
    from planner.simulate.spec import SimConfig
    from planner.simulate.stats import merged
    from planner.verify import run_length

    sim = plan_to_sim_by_bucket(result, architecture)
    duration, warm = run_length(sim.route_table, pd.DataFrame(result.capacity.points), requests)
    hist: dict[str, list[Any]] = {"ttft": [], "tpot": [], "itl": []}
    for seed in seeds:
        res = simulate(sim.pools, sim.routes, bucket_stream(sim, load="peak", duration_s=duration, seed=seed),
                       SimConfig(warmup_s=warm, max_drain_s=max(60.0, duration)), duration_hint_s=duration)
        for m in ("ttft", "tpot"):
            hist[m].append(merged([res.histograms[f"service:{r.service}:{m}"] for r in sim.routes]))
        pools = sorted({str(r.decode or r.unified) for r in sim.routes})
        hist["itl"].append(merged([res.histograms[f"pool:{p}:itl"] for p in pools]))
    out = {}
    for m, hs in hist.items():
        h = merged(hs)
        out[m] = (1e3 * h.quantile(0.5), 1e3 * h.quantile(0.99))
    return out


def analytic_quantiles(result: PlanResult, architecture: str) -> dict[str, tuple[float, float]]:
    """Analytic (p50, p99) in ms, worst bucket (one bucket here)."""
    lo, hi = (plan_latency_quantiles(result, architecture, q) for q in (0.5, 0.99))
    return {m: (float(lo[f"{m}_ms"].max()), float(hi[f"{m}_ms"].max())) for m in ("ttft", "tpot", "itl")}


def grid_rows(cases: list[tuple[str, int]], utilisations: tuple[float, ...], seeds: tuple[int, ...], requests: int,
              workdir: Path, instances: int | None = None) -> pd.DataFrame:
    rows = []
    for arch, n in cases:
        base = solved_plan(arch, n, workdir)
        if instances is not None:
            base = at_instances(base, arch, instances)
        for u in utilisations:
            res, m = at_utilisation(base, arch, u)
            a = analytic_quantiles(res, arch)
            s = simulated_quantiles(res, arch, seeds, requests)
            for metric in ("ttft", "tpot", "itl"):
                for j, lvl in enumerate(("p50", "p99")):
                    rows.append({"architecture": arch, "input_tokens": n, "instances": instances, "utilisation": u, "rate_per_s": 4.0 * m, "metric": metric,
                                 "level": lvl, "analytic_ms": a[metric][j], "simulated_ms": s[metric][j],
                                 "err": a[metric][j] / s[metric][j] - 1.0 if s[metric][j] > 0 else float("nan")})
    return pd.DataFrame(rows)


def main() -> None:
    import tempfile

    t0 = time.perf_counter()
    cases = [("shared", 1000), ("shared", 8000), ("disaggregated", 1000), ("disaggregated", 8000)]
    with tempfile.TemporaryDirectory() as d:
        frame = grid_rows(cases, UTILISATIONS, SEEDS, REQUESTS, Path(d))
        # behind many instances: the shared pools' least-loaded router (planner.pool_latency._jsq_ahead_pmf); the
        # disaggregated pools' model does not depend on the router, so the count grid is the shared one
        counts = pd.concat([grid_rows([("shared", 1000), ("shared", 8000)], UTILISATIONS, SEEDS, REQUESTS, Path(d), c)
                            for c in INSTANCE_COUNTS], ignore_index=True)
    report(frame, "as solved (shared 1,000: 1 instance, shared 8,000: 4, disaggregated 8,000: 3 prefill + 1 decode)")
    report(counts, f"shared pools at {', '.join(map(str, INSTANCE_COUNTS))} instances (rates and KV scaled with the count)")
    print(f"{time.perf_counter() - t0:.0f} s")


def report(frame: pd.DataFrame, title: str) -> None:
    print(f"\n== {title}")
    keys = ["architecture", "input_tokens", "instances", "utilisation"] if frame["instances"].notna().any() else [
        "architecture", "input_tokens", "utilisation"]
    print(f"analytic vs simulated, seeds {SEEDS}, {REQUESTS} measured requests each; err = analytic/simulated - 1, * beyond ±{TOLERANCE:.0%}\n")
    print(f"{'arch':<14}{'in':>6}{'util':>6}{'rate/s':>8}  " + "  ".join(f"{m.upper() + ' ' + lv:>24}" for m in ("ttft", "tpot", "itl")
                                                               for lv in ("p50", "p99")))
    for key, g in frame.groupby(keys, sort=False):
        arch, n, u = key[0], key[1], key[-1]
        if len(key) == 4:
            arch = f"{arch} x{key[2]}"
        cells = []
        for r in g.to_dict("records"):
            flag = "*" if abs(r["err"]) > TOLERANCE else " "
            cells.append(f"{r['analytic_ms']:>8,.0f}/{r['simulated_ms']:>7,.0f} {r['err']:+5.0%}{flag}")
        print(f"{arch:<14}{n:>6}{u:>6.2f}{g['rate_per_s'].iloc[0]:>8.2f}  " + "  ".join(cells))
    within = (frame["err"].abs() <= TOLERANCE).mean()
    print(f"\n{within:.0%} of {len(frame)} figures within ±{TOLERANCE:.0%}; worst {frame['err'].abs().max():.0%}")
    for key, g in frame.groupby(keys[:-1]):
        print(f"  {' '.join(map(str, key))}: {(g['err'].abs() <= TOLERANCE).mean():.0%} within, worst {g['err'].abs().max():.0%}")


if __name__ == "__main__":
    main()
