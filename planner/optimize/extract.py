"""From a solved model to an :class:`ArchitecturePlan`: pools, routing, costs, latency.

Formulas (at the solution; ``λ`` rates, ``x`` shares, ``τ`` instance-seconds per request):

- pool busy instances at peak ``Σ λ_peak τ x`` and at mean ``Σ λ_mean τ x``; utilisation = busy / n;
- effective cap ``ρ_p = Σ λ_peak τ x / Σ λ_peak τ x / ρ_i`` (load-weighted harmonic mean);
- tokens per month ``Σ λ_mean (in_mean + out_mean) · 3600 H`` (each request counted once,
  in its prefill phase or its unified point);
- $/1M tokens = total / tokens · 1e6; energy per 1k tokens = facility kWh (busy + idle, × PUE; with agents + the CPU pool
  and the KV reloads / recomputes, :func:`energy_kwh_per_month`) / tokens · 1e3 (Wh);
- idle-capacity attribution = Σ_p (n_p tp_p − busy device-hours at mean) × (equipment rate + idle power cost rate).

Latency at peak (per pool, :mod:`planner.queueing`): the pool is a G/G/c queue with
``c = (n − k)·B`` servers (k lost instances, B the load-weighted batch; B = 1 for prefill),
arrival rate ``λ_p = Σ λ_peak x`` and mean service ``s = ρ_peak c / λ_p`` (so ``λ s = busy``).
A bucket's TTFT quantile ≈ its operating point's ``ttft_ms`` + the wait quantile of its
prefill (or unified) pool + the slot-wait quantile of its decode pool; summing quantiles is
conservative. A service reports its worst routed bucket. Unified points are taken at the load
their pool carries (:func:`planner.pool_latency.unified_at_load`: the iteration time, chunk share
and batch of the arrivals, not of the point's full batch); the per-bucket sum is
:func:`planner.pool_latency.bucket_latency`, the one function the tightening loop, the checker and
the simulation check's analytic figures also use.

Chunked-prefill lane of a unified pool (:func:`lane_wait_quantile_ms`). Inside each unified
instance, admitted prompts queue for the one prefill lane (a chunk of ``q`` tokens per
iteration, :mod:`planner.perf.points`). A unified operating point prices that wait for its
bucket alone at its full load on one instance (``lane_wait_ms``, M/D/1, included in its
``ttft_ms``); a pool mixing buckets replaces it by the lane wait of the mix at the pool's actual
peak load over its ``c = n − k`` live instances, each instance's lane one server:

- the pool's arrival rate ``λ = Σ λ_i x_i`` with the arrival-weighted inter-arrival CV ``c_a`` of
  its points (the service's burstiness);
- the lane service time of a bucket-``i`` prompt ``S_i = lane_service_ms_i = n_i / q_i · t_it,i``
  (its new tokens over its chunk cap, in chunk iterations; several short prompts share one chunk,
  so the lane's work is fractional), a discrete mixture with weights ``λ_i x_i``; lane
  utilisation ``ρ = λ E[S] / c``;
- **router assumed: least-loaded** — each request goes to the instance with the fewest requests in
  flight (vLLM / SGLang "least requests" routers; :mod:`planner.simulate` does the same). The
  wait is :func:`planner.queueing.least_loaded_lane_wait_quantile_s`:
  ``min(W_random, max(W_pooled + W_residual, W_balanced))`` — the pooled G/G/c wait of all ``c``
  lanes (Erlang C + Allen–Cunneen: what balancing in-flight counts achieves) plus the residual
  work of a prompt in progress on the chosen lane (found with probability ``ρ``: the count-based
  router does not see which lane is busy); at least one lane as a GI/G/1 queue fed every
  ``c``-th arrival (a short prompt still queues behind a long one on its own lane); at most the
  exact M/G/1 tail of a random split (Cramér–Lundberg asymptotic for the mixture). Arrivals
  enter the lane terms no burstier than Poisson (``min(c_a, 1)``): the service's burstiness is
  charged in the pool's slot wait (G/G/c over all batch slots), and the router spreads a burst
  over the instances. One instance with Poisson arrivals: the M/G/1 lane, exactly as the
  operating point prices it.

Before this model the lane was one M/G/1 per instance with Kingman's exponential tail; measured
against the simulator on the example instances that over-predicted the shared pools' TTFT p99 by
23–170 % (agentic-assistant 2,928 ms analytic vs 1,498 ms simulated); the table before/after is
printed by ``python benchmarks/bench_simulate.py --verify``.

A unified bucket's TTFT quantile is then ``ttft_ms − lane_wait_ms_i`` (its own service) + the
pool's slot wait + the pool's lane wait (quantiles added: conservative); at the load that arrives
(:func:`planner.pool_latency.unified_at_load`, the plan's prediction) the lane is inside its TTFT law and the
slot wait is summed with it as an independent variable, the quantile of the sum
(:func:`planner.pool_latency.slot_sum_quantile_s`; the caps, :func:`planner.optimize.prepare.unified_caps_at_load`,
on the same rule). Without lane columns (measured points) the point's ``ttft_ms`` is used as it is.

Measured pools (every routed point from a measured capacity file, :func:`measured_pools`) add
no wait: a measured rate is what one instance sustains within the SLO with its own queueing,
so up to that rate per instance (cap 1, enforced by the load constraint) the latency is the
measured one — a pool filled to exactly 100 % of its measured rate is a plan, not an overload.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from planner.optimize.memo import Memo, array_key, frame_key
from planner.optimize.model import COST_EXPRESSIONS, PHASE_ROLES, Built
from planner.optimize.prepare import ENCODE_HOST
from planner.pool_latency import bucket_latency, pool_latency
from planner.pool_latency import (
    lane_wait_quantile_ms as lane_wait_quantile_ms,  # re-exported (tests, docs)
)
from planner.schema.capacity import CONFIG_PARALLELISM_COLUMN, TTFT_MIX_COLUMN, token_metric
from planner.schema.capacity import quantile_level as _level
from planner.schema.plan import CostBreakdown, LatencyPrediction, PoolPlan, RoutingShare
from planner.units import J_PER_KWH, SECONDS_PER_HOUR

SHARE_EPS = 1e-7
SHARE_DECIMALS = 9
"""Routing shares are read to 1e-9 (issue 27, sweep speed): HiGHS returns the same vertex with last-bit noise
(a share of 1.0 in one solve, 0.9999999999953 in the next), which made an identical plan a new key for the
peak-simulation and latency memos (:mod:`planner.optimize.memo`): 25 of 46 peak simulations of a
100-scenario sweep re-ran a plan already simulated. Well inside the solver's feasibility tolerance (1e-7)."""


def solution_arrays(built: Built) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    m = built.model
    x = np.array([m.x[i].value or 0.0 for i in range(len(built.prep.points))], dtype=float)
    x = np.clip(x, 0.0, 1.0)
    x[x < SHARE_EPS] = 0.0
    n = np.array([round(m.n[p].value or 0.0) for p in range(len(built.pool_names))], dtype=int)
    x = np.round(_drop_unbuilt_shares(built, x, n), SHARE_DECIMALS)
    z = np.array([round(m.z[p].value or 0.0) for p in range(len(built.pool_names))], dtype=int)
    u = np.array([round(m.u[t].value or 0.0) for t in m.T], dtype=int)
    return x, n, z, u


UNBUILT_SHARE_MAX = 1e-5
"""Largest share routed to a pool of 0 instances that is read as the solver's feasibility tolerance."""


def _drop_unbuilt_shares(built: Built, x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Shares the solver left on a pool of 0 instances within its feasibility tolerance, removed.

    ``route_on`` forbids traffic on a pool that does not exist, but HiGHS meets it to its primal
    tolerance: with the ``group_route`` equalities (a latency group's buckets split alike) a bucket can
    keep ~1e-6 of its decode on a pool the plan does not build, and the latency check then sees an
    overloaded pool of 0 instances (infinite TTFT). Shares up to :data:`UNBUILT_SHARE_MAX` on such
    pools are set to 0 and each affected ``(bucket, phase)`` is rescaled to sum to 1 again; a larger
    share on an unbuilt pool is left for the checks to report."""
    if not len(x):
        return x
    unbuilt = (n[built.point_pool] == 0) & (x > 0) & (x <= UNBUILT_SHARE_MAX)
    if not unbuilt.any():
        return x
    x = x.copy()
    pts = built.prep.points
    d_of = pts["d"].to_numpy(int)
    role_of = pts["role"].to_numpy(str)
    touched = set(d_of[unbuilt].tolist())
    x[unbuilt] = 0.0
    for d in touched:
        for roles in PHASE_ROLES.values():
            idx = np.nonzero((d_of == d) & np.isin(role_of, roles))[0]
            total = float(x[idx].sum())
            if idx.size and total > 0 and abs(total - 1.0) <= 10 * UNBUILT_SHARE_MAX:
                x[idx] = x[idx] / total
    return x


def point_power_arrays(pts: pd.DataFrame, cfg: pd.DataFrame, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per operating point: routed mean rate ``λ_mean x`` (1/s), ``τ`` (instance-s per request),
    ``tp``, host and idle power per device (W), and busy energy per request including the host
    share while busy, ``E + τ tp P_host`` (J). ``cfg`` is the configs table indexed by config."""
    lam_mean = pts["rate_mean_per_s"].to_numpy(float) * np.asarray(x, dtype=float)
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    ptp = pts["tp"].to_numpy(float)
    ptc = cfg.reindex(pts["config"].to_numpy())
    host = ptc["host_power_w"].to_numpy(float)
    pidle = ptc["idle_power_w"].to_numpy(float)
    busy_j = pts["energy_j_per_request"].to_numpy(float) + tau * ptp * host
    return lam_mean, tau, ptp, host, pidle, busy_j


def cost_breakdown(tables_costs: Any, configs: pd.DataFrame, pts: pd.DataFrame, x: np.ndarray,
                   pools: pd.DataFrame, n: np.ndarray, *, redundancy: int = 0) -> CostBreakdown:
    """Recompute every cost term from a plan with plain arithmetic (used by extract and the checker)."""
    c = tables_costs
    H = float(c.hours_per_month)
    cfg = configs.drop_duplicates("config").set_index("config")
    kwh_price = float(c.electricity_usd_per_kwh) * float(c.pue)
    tp = pools["tp"].to_numpy(float)
    dev = n * tp
    pc = cfg.reindex(pools["config"].to_numpy())  # one vectorised lookup per column (no per-element .loc)
    eq = pc["equipment_usd_per_device_hour"].to_numpy(float)
    idle_w = pc["idle_power_w"].to_numpy(float) + pc["host_power_w"].to_numpy(float)
    ops = pc["ops_usd_per_device_month"].to_numpy(float)
    lic = pc["license_usd_per_device_month"].to_numpy(float)
    sends = pools["sends_kv"].to_numpy(bool)

    lam_mean, tau, ptp, host, pidle, busy_j = point_power_arrays(pts, cfg, x)
    equipment = float(np.sum(dev * eq * H))
    power_busy = float(np.sum(lam_mean * busy_j) * SECONDS_PER_HOUR * H / J_PER_KWH * kwh_price)
    busy_dev_h = float(np.sum(lam_mean * tau * ptp * (pidle + host))) * H / 1e3
    power_idle = kwh_price * (float(np.sum(dev * idle_w)) * H / 1e3 - busy_dev_h)
    nic = float(np.sum(dev[sends])) * float(c.nic_usd_per_device_month)
    is_pf = np.isin(pts["role"].to_numpy(str), ("prefill", "encode"))  # KV, or embeddings from a separate encode pool
    transfer = float(np.sum(lam_mean[is_pf] * pts["kv_transfer_bytes_per_request"].to_numpy(float)[is_pf])) / 1e9 * SECONDS_PER_HOUR * H * float(c.transfer_usd_per_gb)
    present = n > 0
    ops_pools = float(c.ops_usd_per_pool_month) * int(np.sum(present))
    types = {pools["device"].iat[p] for p in range(len(pools)) if present[p]}
    ops_types = float(c.ops_usd_per_device_type_month) * len(types)
    ops_dev = float(np.sum(dev * ops))
    licenses = float(np.sum(dev * lic))
    terms = {
        "equipment_usd_per_month": equipment, "power_busy_usd_per_month": power_busy,
        "power_idle_usd_per_month": power_idle, "network_nic_usd_per_month": nic,
        "network_transfer_usd_per_month": transfer, "ops_pools_usd_per_month": ops_pools,
        "ops_device_types_usd_per_month": ops_types, "ops_devices_usd_per_month": ops_dev,
        "licenses_usd_per_month": licenses,
    }
    # Idle-capacity attribution: unused device-hours at mean load x (equipment + idle power rate).
    pool_idx = pd.Series(np.arange(len(pools)), index=pools["pool"].to_numpy())
    j_of = pts["pool"].map(pool_idx).to_numpy(float) if len(pts) else np.zeros(0)
    ok = ~np.isnan(j_of)
    busy_dev = np.bincount(j_of[ok].astype(int), weights=(lam_mean * tau * ptp)[ok], minlength=len(pools)) if len(pools) else np.zeros(0)
    unused_dev = np.maximum(dev - busy_dev, 0.0)
    idle_attr = float(np.sum(unused_dev * H * (eq + idle_w / 1e3 * kwh_price)))
    return CostBreakdown(**terms, total_usd_per_month=float(sum(terms.values())), idle_capacity_usd_per_month=idle_attr)


def model_costs(built: Built) -> dict[str, float]:
    """The cost terms as the solver's expressions evaluate them."""
    import pyomo.core as pe  # pyomo.environ less its plug-ins (planner.optimize.highs.import_pyomo)

    m = built.model
    return {term: float(pe.value(getattr(m, name))) for term, name in COST_EXPRESSIONS.items()}


def measured_pools(points: pd.DataFrame, point_pool: np.ndarray, share: np.ndarray, n_pool: int) -> np.ndarray:
    """Per pool: True when every point routed to it came with its utilisation cap (measured capacity,
    :func:`planner.capacity.read_measured_capacity`). A measured rate is the throughput one instance
    sustains *within* the SLO, its queueing included, so such a pool adds no queueing wait: its
    latency is the measured latency at any load up to the measured rate per instance (the load
    constraint with cap 1)."""
    given = points["utilization_cap"].to_numpy(float) if "utilization_cap" in points.columns else np.full(len(points), np.nan)
    routed = np.asarray(share, dtype=float) > 0
    pp = np.asarray(point_pool, dtype=int)
    modelled = np.bincount(pp[routed & np.isnan(given)], minlength=n_pool)
    measured = np.bincount(pp[routed & ~np.isnan(given)], minlength=n_pool)
    return (measured > 0) & (modelled == 0)


_PLAN_MEMO = Memo(256)
"""Pools, routing and latency of a solution by the content it reads (:mod:`planner.optimize.memo`)."""


def build_pools_routing_latency(built: Built, x: np.ndarray, n: np.ndarray, redundancy: int) -> tuple[list[PoolPlan], list[RoutingShare], list[LatencyPrediction]]:
    """Per pool its size, load, cap and KV; the routing shares; per service the predicted latency at peak
    (module docstring). None of it reads a price: memoised on the points, pools, demand and configs (by
    content), the solution ``x``, ``n`` and ``redundancy`` (issue 27: a sweep over prices meets the same
    solution again and again); computed afresh with a tool phase (its held KV reads the model)."""
    prep = built.prep
    if prep.tool is not None:
        return _pools_routing_latency(built, x, n, redundancy)
    key = (frame_key(prep.points), frame_key(prep.pools), frame_key(prep.demand), frame_key(prep.tables.configs),
           array_key(np.asarray(x, dtype=float)), array_key(np.asarray(n, dtype=float)), int(redundancy))
    hit = _PLAN_MEMO.get(key)
    if hit is None:
        hit = _pools_routing_latency(built, x, n, redundancy)
        _PLAN_MEMO.put(key, hit)
    pools, routing, latency = hit
    return [p.model_copy() for p in pools], [r.model_copy() for r in routing], [lp.model_copy() for lp in latency]


def _pools_routing_latency(built: Built, x: np.ndarray, n: np.ndarray, redundancy: int) -> tuple[list[PoolPlan], list[RoutingShare], list[LatencyPrediction]]:
    prep = built.prep
    pts = prep.points
    pools = prep.pools
    pp = built.point_pool
    lam_peak = pts["rate_peak_per_s"].to_numpy(float)
    lam_mean = pts["rate_mean_per_s"].to_numpy(float)
    tau = pts["instance_seconds_per_request"].to_numpy(float)
    rho = pts["rho"].to_numpy(float)
    kv_coef = pts["kv_peak_coef"].to_numpy(float)
    n_pool = len(pools)
    busy_peak = np.bincount(pp, weights=lam_peak * tau * x, minlength=n_pool)
    busy_mean = np.bincount(pp, weights=lam_mean * tau * x, minlength=n_pool)
    capped = np.bincount(pp, weights=lam_peak * tau / np.maximum(rho, 1e-12) * x, minlength=n_pool)
    arr_peak = np.bincount(pp, weights=lam_peak * x, minlength=n_pool)
    kv_peak = np.bincount(pp, weights=kv_coef * x, minlength=n_pool) + _held_kv(built)  # + KV held during tool waits

    # the pools' waits: planner.pool_latency.pool_latency, the one queue model the tightening loop,
    # the checker and the verification use (arrivals thinned per pool, decode slots held for the mean output)
    names = pools["pool"].astype(str).to_numpy()
    live = {str(names[p]): int(n[p]) for p in range(n_pool) if n[p] > 0}
    pl = {str(r["pool"]): r for r in pool_latency(pts, x, live, redundancy).to_dict("records")}
    pool_list: list[PoolPlan] = []
    cfgs = prep.tables.configs
    parallelism = (dict(zip(cfgs["config"].astype(str), cfgs[CONFIG_PARALLELISM_COLUMN].astype(str), strict=True))
                   if CONFIG_PARALLELISM_COLUMN in cfgs.columns else {})
    wait_ms = np.zeros(n_pool)
    lane_ms = np.full(n_pool, np.nan)
    measured = measured_pools(pts, pp, x, n_pool)
    for p in range(n_pool):
        if n[p] <= 0:
            continue
        row = pools.iloc[p]
        n_eff = max(int(n[p]) - redundancy, 0)
        if measured[p] and n_eff > 0:
            pass  # measured capacity: its queueing is inside the measured rate and latency (measured_pools)
        elif arr_peak[p] > 0 and n_eff > 0 and str(names[p]) in pl:
            wait_ms[p] = float(pl[str(names[p])]["wait_ms"])
            if row["role"] == "unified":
                lane_ms[p] = float(pl[str(names[p])]["lane_wait_ms"])
        elif arr_peak[p] > 0:
            wait_ms[p] = math.inf
        pool_list.append(PoolPlan(
            name=str(row["pool"]), role=row["role"], device=str(row["device"]), tp=int(row["tp"]),
            config=str(row["config"]), parallelism=parallelism.get(str(row["config"]), f"tp{int(row['tp'])}"), model=str(row["model"]), instances=int(n[p]), devices=int(n[p] * row["tp"]),
            redundancy=redundancy, busy_instances_mean=float(busy_mean[p]), busy_instances_peak=float(busy_peak[p]),
            utilization_mean=float(busy_mean[p] / n[p]), utilization_peak=float(busy_peak[p] / n[p]),
            utilization_cap=float(busy_peak[p] / capped[p]) if capped[p] > 0 else 0.0,
            kv_bytes_peak=float(kv_peak[p]),
            kv_capacity_bytes=float(row["kv_capacity_bytes"]) * max(int(n[p]) - redundancy, 0),
            sends_kv=bool(row["sends_kv"]),
        ))

    routing: list[RoutingShare] = []
    nz = np.nonzero(x > 0)[0]
    for i in nz:
        r = pts.iloc[i]
        routing.append(RoutingShare(service=str(r["service"]), bucket=str(r["bucket"]), role=r["role"], config=str(r["config"]),
                                    pool=str(r["pool"]), share=float(x[i]), rate_peak_per_s=float(lam_peak[i] * x[i]),
                                    rate_mean_per_s=float(lam_mean[i] * x[i])))

    # Latency per bucket (planner.pool_latency.bucket_latency, the one analytic prediction every view
    # uses): the pools' waits above, unified points at the load their pool carries; a service reports
    # its worst routed bucket.
    waits = {str(names[p]): float(wait_ms[p]) + (0.0 if math.isnan(lane_ms[p]) else float(lane_ms[p])) for p in range(n_pool) if n[p] > 0}
    lanes = {str(names[p]): float(lane_ms[p]) for p in range(n_pool) if n[p] > 0 and not math.isnan(lane_ms[p])}
    by_bucket = bucket_latency(pts, x, waits, lanes, instances={str(names[p]): int(n[p]) for p in range(n_pool)}, redundancy=redundancy,
                               pool_rows=pl)
    roles = pts["role"].to_numpy(str)
    latency: list[LatencyPrediction] = []
    enc_routed = any(roles[i] in ENCODE_HOST for i in nz)
    mixes = pts[TTFT_MIX_COLUMN].to_numpy(object) if TTFT_MIX_COLUMN in pts.columns else None
    svc_of = pts["service"].astype(str).to_numpy()
    mixed = {str(svc_of[i]) for i in nz if roles[i] == "prefill" and mixes is not None and isinstance(mixes[i], str) and mixes[i]}
    for svc, dgrp in prep.demand.groupby("service", sort=False):
        r0 = dgrp.iloc[0]
        metric = token_metric(r0)  # the per-token metric the service targets: TPOT if set, else ITL
        tok_q = _level(r0[f"{metric}_quantile"])
        tok_t = float(r0[f"{metric}_target_ms"])
        mine = by_bucket[by_bucket["service"] == str(svc)]
        worst_ttft = float(mine["ttft_predicted_ms"].max()) if len(mine) else 0.0
        worst_tpot = float(mine["tpot_predicted_ms"].max()) if len(mine) else 0.0
        latency.append(LatencyPrediction(
            service=str(svc), ttft_quantile=float(r0["ttft_quantile"]), ttft_target_ms=float(r0["ttft_target_ms"]),
            ttft_predicted_ms=float(worst_ttft), tpot_quantile=tok_q, tpot_target_ms=tok_t, token_metric=metric,
            tpot_predicted_ms=float(worst_tpot), ttft_met=bool(worst_ttft <= float(r0["ttft_target_ms"]) * (1 + 1e-6)),
            tpot_met=bool(worst_tpot <= tok_t * (1 + 1e-6)),
            method="worst routed bucket: operating-point latency + G/G/c wait quantile at peak (planner.queueing, Allen-Cunneen), k instances lost; "
                   "unified pools at the load they carry (planner.pool_latency.unified_at_load: iteration time, chunk share and batch "
                   "of the arrivals, not of the point's full batch) with the chunked-prefill lane of the bucket mix over the live "
                   "instances behind a least-loaded router"
                   + ("; + the encode phase (encode pool wait + encode + embedding transfer, or the inline encode time)" if enc_routed else "")
                   + ("; a prefill pool's TTFT: the quantile of its latency group's length mix over the pool's wait tail "
                      "(planner.ttft_mixture), never above the representative prompt's" if str(svc) in mixed else ""),
        ))
    return pool_list, routing, latency


def tokens_per_month(built: Built, x: np.ndarray) -> float:
    pts = built.prep.points
    first = pts["role"].isin(["prefill", "unified"]).to_numpy()
    per_req = (pts["input_tokens_mean"] + pts["output_tokens_mean"]).to_numpy(float)
    lam = pts["rate_mean_per_s"].to_numpy(float)
    return float(np.sum((lam * x * per_req)[first])) * SECONDS_PER_HOUR * built.prep.hours


def energy_kwh_per_month(built: Built, costs: CostBreakdown | None = None) -> float:
    r"""Facility energy per month at the loaded solution, kWh: accelerator pools and the tool phase.

    Accelerators (the physical quantities behind ``power_busy`` and ``power_idle``; computed
    from the plan, not from the costs, so a zero electricity price still gives the energy)::

        E_gpu = η [ Σ_i λ^mean x_i (E_i + τ_i tp_i P^host) · 3600 H / 3.6e6
                    + H/1000 (Σ_p n_p tp_p (P^idle + P^host) − Σ_i λ^mean x_i τ_i tp_i (P^idle + P^host)) ]

    plus the CPU pool and the KV reloads / recomputes
    (:func:`planner.agents.extract.tool_phase_energy_kwh_per_month`). ``costs`` is unused
    (accepted for older callers); ``η`` is the PUE.
    """
    del costs
    prep = built.prep
    c = prep.tables.costs
    H = float(c.hours_per_month)
    x, n, _z, _u = solution_arrays(built)
    cfg = prep.tables.configs.drop_duplicates("config").set_index("config")
    pts = prep.points
    ptc = cfg.reindex(pts["config"].to_numpy())
    lam = pts["rate_mean_per_s"].to_numpy(float) * x
    tau_tp = pts["instance_seconds_per_request"].to_numpy(float) * pts["tp"].to_numpy(float)
    host = ptc["host_power_w"].to_numpy(float)
    idle_host = ptc["idle_power_w"].to_numpy(float) + host
    busy_kwh = float(np.sum(lam * (pts["energy_j_per_request"].to_numpy(float) + tau_tp * host))) * SECONDS_PER_HOUR * H / J_PER_KWH
    pc = cfg.reindex(prep.pools["config"].to_numpy())
    prov_w = float(np.sum(n * prep.pools["tp"].to_numpy(float) * (pc["idle_power_w"].to_numpy(float) + pc["host_power_w"].to_numpy(float))))
    idle_kwh = H / 1e3 * (prov_w - float(np.sum(lam * tau_tp * idle_host)))
    from planner.agents.extract import tool_phase_energy_kwh_per_month

    return float(c.pue) * (busy_kwh + idle_kwh) + tool_phase_energy_kwh_per_month(built)


def _held_kv(built: Built) -> np.ndarray:
    """KV bytes held during tool waits at peak, per pool (zeros without agents)."""
    if built.prep.tool is None:
        return np.zeros(len(built.prep.pools))
    from planner.agents.extract import held_kv_bytes_per_pool

    return held_kv_bytes_per_pool(built)


# --- tool execution phase (planner.agents) ------------------------------------------------
def with_tool_phase(built: Built, x: np.ndarray, n: np.ndarray, costs: CostBreakdown, latency: list[LatencyPrediction],
                    redundancy: int) -> tuple[CostBreakdown, Any, list[LatencyPrediction]]:
    """Add the tool-phase section and cost terms to a plan (unchanged when the tables carry no agents).

    Returns the cost breakdown with ``cpu_pool``, ``kv_tier`` and ``tool_state_energy`` set
    (and the total raised by them), the :class:`planner.schema.plan.ToolPhasePlan` (or None),
    and the latency predictions with reload / recompute time added to the affected services' TTFT.
    """
    if built.prep.tool is None:
        return costs, None, latency
    from planner.agents.extract import adjust_latency, tool_phase_plan

    section, terms, extra = tool_phase_plan(built, x, n, redundancy)
    total = costs.total_usd_per_month + sum(terms.values())
    return costs.model_copy(update={**terms, "total_usd_per_month": total}), section, adjust_latency(latency, extra)
