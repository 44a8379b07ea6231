"""Simulate a solved plan at peak and compare it with the analytic prediction (DESIGN §6, issue 7).

``planner solve`` sizes pools with queueing approximations (:mod:`planner.queueing`,
the verify-and-tighten loop of :mod:`planner.optimize.solve`). This module checks each
feasible architecture's final plan in the discrete-event simulator
(:mod:`planner.simulate`) and records the outcome in ``ArchitecturePlan.simulation``
(:class:`planner.schema.plan.SimulationCheck`).

The run
-------
* Inputs: :func:`planner.simulate.adapter.plan_to_sim_by_bucket` — the plan's pools, one
  route per (service, bucket, prefill pool, decode pool), each bucket's arrivals split by
  the plan's routing shares, the bucket's representative lengths (what the plan was sized
  for), and the stated approximations of that adapter.
* Arrivals: per service a renewal process at its **peak** rate with the logs'
  inter-arrival CV (:func:`planner.simulate.adapter.bucket_stream`), seeded.
* Size: ``requests`` measured requests over all services (default
  :data:`DEFAULT_REQUESTS`) after a warm-up of ``max(10 % of the run, 2 × the longest
  holding time)`` (a request's TTFT + output × TPOT), the warm-up itself capped at twice
  the measured span. The run is bounded in requests, not in simulated seconds, so its
  cost (~50,000 simulated requests per second of wall time) does not grow with the rate.
* Statistics: the SLO quantile ``q`` of each service's TTFT/TPOT over its measured requests,
  with a ``ci_level`` interval from the order statistics
  (:func:`planner.simulate.stats.quantile_interval`): with ``n`` samples the ``q``
  quantile is bracketed by ranks ``n q ∓ z √(n q (1−q))`` (for ``n = 2500``, ``q = 0.99``:
  about the 98.6th to 99.4th percentiles). Requests that never finish count as infinitely late.

What is reported
----------------
Per service: simulated p50/p90/p99 and the quantile at the SLO (with its interval); the
plan's analytic prediction (the worst bucket's) against the simulated quantile of the same
worst bucket, with their relative difference (flagged above :data:`DISAGREEMENT_TOLERANCE`);
met or not; when missed, the pool responsible (the largest simulated wait among the pools
the service visits; for TPOT its decode / unified pool) and by how much. Per pool:
simulated utilisation and wait quantile against the analytic wait
(:func:`planner.optimize.solve.predicted_pool_quantiles`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import pandas as pd

from planner.schema.plan import PlanResult, SimulatedPool, SimulatedService, SimulationCheck

DEFAULT_REQUESTS = 2500
"""Measured requests per check (over all services)."""
DISAGREEMENT_TOLERANCE = 0.15
"""Analytic and simulated p99 further apart than this (relative) are reported."""
CI_LEVEL = 0.95


def _ms(x: float) -> float:
    return x * 1e3 if math.isfinite(x) else math.inf


def _txt(x: float | None, spec: str = ",.0f") -> str:
    return format(x, spec) if x is not None and math.isfinite(x) else "unbounded"


def _fin(x: float | None) -> float | None:
    """JSON-safe: ``None`` for an unbounded or undefined value (see :data:`planner.schema.plan.SimMs`)."""
    return float(x) if x is not None and math.isfinite(x) else None


def _quantile_all(h: Any, q: float, unfinished: int) -> float:
    """The ``q`` quantile over completed plus unfinished requests (unfinished = infinitely late)."""
    n = h.n
    total = n + unfinished
    if total == 0:
        return math.nan
    if n == 0:
        return math.inf
    qq = q * total / n
    return h.quantile(qq) if qq <= 1.0 else math.inf


def run_length(route_table: pd.DataFrame, points: pd.DataFrame, requests: int) -> tuple[float, float]:
    """(duration_s, warmup_s) of a check with ``requests`` measured requests (module docstring)."""
    rate = float(route_table.groupby("service")["rate_peak_per_s"].first().sum())
    measure_s = requests / rate
    hold_s = 0.0
    if len(points):
        out = route_table.groupby(["service", "bucket"])["output_tokens"].first().rename("o").reset_index()
        pts = points.merge(out, on=["service", "bucket"], how="inner")
        hold = (pts["ttft_ms"].fillna(0.0) + pts["o"] * pts["tpot_ms"].fillna(0.0)) / 1e3
        hold_s = float(hold.max()) if len(hold) else 0.0
    warm = min(max(0.1 * measure_s / 0.9, 2.0 * hold_s), 2.0 * measure_s)
    return warm + measure_s, warm


def simulate_plan(result: PlanResult, architecture: str, *, requests: int = DEFAULT_REQUESTS, seed: int = 0,
                  ci_level: float = CI_LEVEL) -> SimulationCheck:
    """Simulate one architecture's plan at peak and compare with its analytic prediction."""
    from planner.optimize.solve import predicted_pool_quantiles
    from planner.simulate.adapter import bucket_stream, plan_to_sim_by_bucket
    from planner.simulate.engine import simulate
    from planner.simulate.spec import SimConfig
    from planner.simulate.stats import merged, quantile_interval

    if requests < 100:
        raise ValueError(f"requests must be >= 100 for a tail estimate, got {requests}")
    t0 = time.perf_counter()
    plan = result.architectures[architecture]
    sim = plan_to_sim_by_bucket(result, architecture)
    rt = sim.route_table
    points = pd.DataFrame(result.capacity.points)
    duration, warm = run_length(rt, points, requests)
    hold_cap = duration
    cfg = SimConfig(warmup_s=warm, max_drain_s=max(60.0, hold_cap), sample_interval_s=duration / 50.0)
    res = simulate(sim.pools, sim.routes, bucket_stream(sim, load="peak", duration_s=duration, seed=seed), cfg,
                   duration_hint_s=duration)

    analytic_pools = predicted_pool_quantiles(result, architecture).set_index("pool")
    pool_rows: list[SimulatedPool] = []
    pool_wait_sim: dict[str, float] = {}
    plan_pools = {p.name: p for p in plan.pools}
    batch_of = {ps.name: ps.max_batch for ps in sim.pools}
    for name, pr in res.pools.items():
        q = float(str(analytic_pools.at[name, "quantile"])) if name in analytic_pools.index else 0.99
        h = res.histograms[f"pool:{name}:wait"]
        w = h.quantile(q)
        lo, hi = quantile_interval(h, q, ci_level)
        pool_wait_sim[name] = _ms(w)
        pp = plan_pools[name]
        pool_rows.append(SimulatedPool(
            pool=name, role=pr.role, instances=pr.instances, simulated_batch=int(batch_of.get(name, 1)),
            utilization_plan=pp.utilization_peak, utilization_sim=_fin(pr.utilization if pr.role == "prefill" else pr.slot_utilization),
            quantile=q, wait_analytic_ms=_fin(float(str(analytic_pools.at[name, "wait_ms"]))) if name in analytic_pools.index else None,
            wait_sim_ms=_fin(_ms(w)), wait_ci_low_ms=_fin(_ms(lo)), wait_ci_high_ms=_fin(_ms(hi)),
            preemptions=pr.preemptions, max_queue=pr.queue_max,
        ))

    analytic = {lp.service: lp for lp in plan.latency}
    services: list[SimulatedService] = []
    findings: list[str] = []
    for svc, g in rt.groupby("service", sort=True):
        svc = str(svc)
        idx = g.index.tolist()
        names = [sim.routes[i].service for i in idx]
        done = sum(res.services[n].completed for n in names)
        unfinished = sum(res.services[n].unfinished + res.services[n].rejected for n in names)
        r0 = sim.routes[idx[0]]
        out: dict[str, Any] = {}
        for metric, q, target_s in (("ttft", r0.ttft_quantile, r0.ttft_target_s), ("tpot", r0.tpot_quantile, r0.tpot_target_s)):
            hs = [res.histograms[f"service:{n}:{metric}"] for n in names]
            h = merged(hs)
            # unfinished requests count as late for TTFT only when they never got a first token; TPOT over finished ones
            late = unfinished if metric == "ttft" else 0
            sim_q = _quantile_all(h, q, late)
            lo, hi = quantile_interval(h, min(q * (h.n + late) / h.n, 1.0) if h.n else q, ci_level) if h.n else (math.nan, math.nan)
            if sim_q == math.inf:
                hi = math.inf
            # worst bucket: merge routes per bucket
            worst_b, worst_v = "", -1.0
            for bucket, gb in g.groupby("bucket", sort=True):
                hb = merged([res.histograms[f"service:{sim.routes[i].service}:{metric}"] for i in gb.index])
                lb = sum(res.services[sim.routes[i].service].unfinished + res.services[sim.routes[i].service].rejected
                         for i in gb.index) if metric == "ttft" else 0
                v = _quantile_all(hb, q, lb)
                if v == v and v > worst_v:
                    worst_b, worst_v = str(bucket), v
            lp = analytic.get(svc)
            a_ms = (lp.ttft_predicted_ms if metric == "ttft" else lp.tpot_predicted_ms) if lp else math.nan
            worst_ms = _ms(worst_v) if worst_v >= 0 else math.nan
            dis = (worst_ms / a_ms - 1.0) if (a_ms and a_ms > 0 and math.isfinite(a_ms) and math.isfinite(worst_ms)) else None
            out[metric] = {"q": q, "target_ms": _ms(target_s), "p50": _ms(h.quantile(0.5)), "p90": _ms(h.quantile(0.9)),
                           "p99": _ms(h.quantile(0.99)), "sim": _ms(sim_q), "lo": _ms(lo), "hi": _ms(hi), "analytic": a_ms,
                           "worst": worst_ms, "worst_bucket": worst_b, "dis": dis,
                           "met": bool(sim_q == sim_q and sim_q <= target_s * (1 + 1e-9))}
        pools_of = sorted({p for col in ("prefill", "decode", "unified") for p in g[col].dropna().astype(str)})
        miss_pool, miss_ms, miss_share = None, 0.0, 0.0
        for metric in ("ttft", "tpot"):
            o = out[metric]
            if o["met"]:
                continue
            share = o["sim"] / o["target_ms"] - 1.0 if o["target_ms"] > 0 else math.inf
            if share <= miss_share and miss_pool is not None:
                continue
            if metric == "ttft":
                pool = max(pools_of, key=lambda p: pool_wait_sim.get(p, 0.0) if pool_wait_sim.get(p, 0.0) == pool_wait_sim.get(p, 0.0) else 0.0)
            else:
                gw = g[g["bucket"] == o["worst_bucket"]] if o["worst_bucket"] else g
                dec = gw["decode"].fillna(gw["unified"]).astype(str)
                pool = str(dec.iloc[0])
            miss_pool, miss_ms, miss_share = pool, o["sim"] - o["target_ms"], share
            pw = next((p for p in pool_rows if p.pool == pool), None)
            extra = (f": p{pw.quantile * 100:g} wait {_txt(pw.wait_sim_ms)} ms simulated vs {_txt(pw.wait_analytic_ms)} ms analytic, "
                     f"utilisation {_txt(pw.utilization_sim, '.2f')} (plan {pw.utilization_plan:.2f})") if pw is not None else ""
            if pw is not None and pw.role == "unified" and metric == "ttft":
                lane_a = float(str(analytic_pools.at[pool, "lane_wait_ms"])) if pool in analytic_pools.index and "lane_wait_ms" in analytic_pools.columns else math.nan
                extra += ("; in a unified pool prompts also queue inside the instance for the chunked-prefill lane (not in this wait; "
                          f"analytic lane wait {_txt(lane_a)} ms)")
            findings.append(f"{architecture}: {svc} misses its p{o['q'] * 100:g} {metric.upper()} target in simulation at peak: "
                            f"{_txt(o['sim'], ',.1f')} ms vs {o['target_ms']:,.0f} ms (+{_txt(o['sim'] - o['target_ms'], ',.1f')} ms, +{_txt(100 * share)}%); "
                            f"pool {pool}{extra}")
        for metric in ("ttft", "tpot"):
            o = out[metric]
            if o["dis"] is not None and abs(o["dis"]) > DISAGREEMENT_TOLERANCE:
                findings.append(f"{architecture}: {svc} p{o['q'] * 100:g} {metric.upper()} of the worst bucket ({o['worst_bucket']}): "
                                f"analytic {o['analytic']:,.1f} ms vs simulated {o['worst']:,.1f} ms ({o['dis']:+.0%}, beyond "
                                f"±{DISAGREEMENT_TOLERANCE:.0%})")
        t, p = out["ttft"], out["tpot"]
        services.append(SimulatedService(
            service=svc, requests=done, unfinished=unfinished,
            ttft_quantile=t["q"], ttft_target_ms=t["target_ms"], ttft_p50_ms=_fin(t["p50"]), ttft_p90_ms=_fin(t["p90"]), ttft_p99_ms=_fin(t["p99"]),
            ttft_sim_ms=_fin(t["sim"]), ttft_ci_low_ms=_fin(t["lo"]), ttft_ci_high_ms=_fin(t["hi"]), ttft_analytic_ms=_fin(t["analytic"]),
            ttft_sim_worst_bucket_ms=_fin(t["worst"]), ttft_worst_bucket=t["worst_bucket"], ttft_disagreement=t["dis"],
            tpot_quantile=p["q"], tpot_target_ms=p["target_ms"], tpot_p50_ms=_fin(p["p50"]), tpot_p90_ms=_fin(p["p90"]), tpot_p99_ms=_fin(p["p99"]),
            tpot_sim_ms=_fin(p["sim"]), tpot_ci_low_ms=_fin(p["lo"]), tpot_ci_high_ms=_fin(p["hi"]), tpot_analytic_ms=_fin(p["analytic"]),
            tpot_sim_worst_bucket_ms=_fin(p["worst"]), tpot_worst_bucket=p["worst_bucket"], tpot_disagreement=p["dis"],
            ttft_met=t["met"], tpot_met=p["met"], miss_pool=miss_pool, miss_ms=_fin(miss_ms), miss_share=_fin(miss_share),
        ))
    measured = sum(s.requests + s.unfinished for s in services)
    method = (f"discrete-event simulation at peak: {res.requests:,} requests over {duration:,.0f} s "
              f"({warm:,.0f} s warm-up not measured), seed {seed}; routes per (service, bucket) split by the plan's shares, "
              f"representative lengths; approximations in planner.simulate.adapter; {ci_level:.0%} intervals from order statistics")
    return SimulationCheck(load="peak", seed=seed, duration_s=duration, warmup_s=warm, requests=res.requests,
                           measured_requests=measured, wall_s=time.perf_counter() - t0, ci_level=ci_level,
                           met=all(s.ttft_met and s.tpot_met for s in services), services=services, pools=pool_rows,
                           findings=findings, method=method)


def verify_result(result: PlanResult, *, requests: int = DEFAULT_REQUESTS, seed: int = 0,
                  ci_level: float = CI_LEVEL) -> PlanResult:
    """``result`` with ``simulation`` filled in for every feasible architecture, and notes for
    misses and disagreements. A plan the simulator cannot represent gets a note, not an error."""
    archs = dict(result.architectures)
    notes = list(result.notes)
    for name, plan in result.architectures.items():
        if not plan.feasible or not plan.pools:
            continue
        try:
            check = simulate_plan(result, name, requests=requests, seed=seed, ci_level=ci_level)
        except ValueError as exc:
            notes.append(f"{name}: not simulated ({exc})")
            continue
        archs[name] = plan.model_copy(update={"simulation": check})
        rounds = plan.solver.rounds
        worst = [f"{s.service} TTFT p{s.ttft_quantile * 100:g} {_txt(s.ttft_analytic_ms)} ms analytic / {_txt(s.ttft_sim_ms)} ms simulated"
                 for s in check.services]
        notes.append(f"{name}: {rounds} solve round(s); at peak in simulation "
                     + ("every service meets its targets" if check.met else "a target is missed (see the simulation block)")
                     + ("; " + "; ".join(worst) if worst else ""))
    return result.model_copy(update={"architectures": archs, "notes": notes})
