"""From a solved plan to simulator inputs (pools, routes, arrival streams).

Everything comes from the plan file itself (:class:`planner.schema.plan.PlanResult`): the
pools and routing of one architecture and the capacity-table rows in its snapshot, so a
plan can be simulated without the performance model. What the snapshot does not carry is
approximated, and each approximation is stated here:

* **Prefill pool** — service time proportional to prompt tokens:
  ``prefill_time_s(n) = n · Σ λ_b τ_b / Σ λ_b n_b`` over the (service, bucket) points routed
  to the pool (``τ_b = instance_seconds_per_request`` at the bucket's representative input
  ``n_b``, rates ``λ_b`` = routed peak rates). Batched prompts are amortised inside ``τ``.
* **KV transfer** — ``kv_transfer_bytes_per_request / n_b`` bytes per prompt token over the
  prefill config's NIC bandwidth (``nic_bw_gb_per_s × tp``).
* **Decode pool** — the plan knows the step time only at the planned batch ``B*``
  (``tpot_ms``); the simulator uses it at every batch ``b ≤ B*`` (an upper bound: decode
  steps get slower with the batch). ``max_batch = min B*`` over the routed points; KV
  capacity per instance = ``kv_capacity_bytes / (instances − redundancy)`` divided by the
  KV bytes per token ``kv_bytes_per_request / (n_b + o_b)``; without a capacity: unlimited.
  Recompute after preemption costs the service's prefill time per token.
* **Unified pool** — an iteration takes the planned ``tpot_ms`` whatever its content, with a
  prefill chunk of ``q = B*·n_b/o_b`` tokens (the steady-state chunk of the operating
  point), so a lone prompt's TTFT is ``⌈n/q⌉·tpot`` as in the capacity model.
* **Routing** — the simulator sends every request of a service through one pool per phase:
  the pool with the largest routed share. Services split across pools are listed in
  ``notes``.
* **Arrivals** — per service a renewal process at the service's peak (or mean) rate with
  the demand's inter-arrival CV; lengths drawn from the buckets' mean (input, output)
  with the bucket weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from planner.schema.plan import ArchitecturePlan, PlanResult, PoolPlan
from planner.simulate.arrivals import RequestChunk, merge_streams, synthetic_requests
from planner.simulate.spec import PoolSpec, ServiceRoute


@dataclass(frozen=True)
class SimInputs:
    """Simulator inputs for one architecture of a plan."""

    architecture: str
    pools: list[PoolSpec]
    routes: list[ServiceRoute]
    demand: pd.DataFrame
    """The plan's demand rows (service, bucket, weight, rates, lengths, CV)."""
    pool_plans: dict[str, PoolPlan]
    notes: list[str] = field(default_factory=list)

    @property
    def services(self) -> list[str]:
        return [r.service for r in self.routes]


def choose_architecture(plan: PlanResult, architecture: str | None = None) -> ArchitecturePlan:
    """The requested architecture, or the verdict's winner."""
    name = architecture or plan.verdict.winner
    if name is None or name not in plan.architectures:
        have = ", ".join(k for k, v in plan.architectures.items() if v.feasible) or "none"
        raise ValueError(f"architecture {name!r} is not in the plan (feasible: {have})")
    arch = plan.architectures[name]
    if not arch.feasible or not arch.pools:
        raise ValueError(f"architecture {name!r} has no feasible plan to simulate")
    return arch


def _weighted(values: pd.Series, weights: pd.Series) -> float:
    w = weights.to_numpy(float)
    v = values.to_numpy(float)
    return float((v * w).sum() / w.sum()) if w.sum() > 0 else float(v.mean())


def plan_to_sim(plan: PlanResult, architecture: str | None = None) -> SimInputs:
    """Build :class:`PoolSpec` / :class:`ServiceRoute` values from a plan (module docstring)."""
    arch = choose_architecture(plan, architecture)
    demand = pd.DataFrame(plan.capacity.demand)
    points = pd.DataFrame(plan.capacity.points)
    configs = pd.DataFrame(plan.capacity.configs).set_index("config") if plan.capacity.configs else pd.DataFrame()
    routing = pd.DataFrame([r.model_dump() for r in arch.routing])
    routing = routing[routing["share"] > 1e-9]
    rows = routing.merge(points, on=["service", "bucket", "role", "config"], how="left", suffixes=("", "_pt"))
    rows = rows.merge(demand[["service", "bucket", "input_tokens_rep", "output_tokens_rep",
                              "input_tokens_mean", "output_tokens_mean"]], on=["service", "bucket"], how="left")
    rows["lam"] = rows["rate_peak_per_s"].clip(lower=1e-12)
    notes: list[str] = []
    pool_plans = {p.name: p for p in arch.pools}

    # per-service prefill seconds per token (for decode recompute), from any prefill/unified row
    pf_rows = rows[rows["role"].isin(["prefill", "unified"])]
    svc_s_per_token: dict[str, float] = {}
    for svc, g in pf_rows.groupby("service"):
        if (g["role"] == "prefill").any():
            g = g[g["role"] == "prefill"]
            svc_s_per_token[str(svc)] = float((g["lam"] * g["instance_seconds_per_request"]).sum()
                                              / (g["lam"] * g["input_tokens_rep"]).sum())
        else:
            q = g["max_batch"] * g["input_tokens_rep"] / g["output_tokens_rep"]
            svc_s_per_token[str(svc)] = _weighted(g["tpot_ms"] / 1e3 / q.clip(lower=1.0), g["lam"])

    pools: list[PoolSpec] = []
    for p in arch.pools:
        g = rows[rows["pool"] == p.name]
        if g.empty or p.instances <= 0:
            continue
        if p.role == "prefill":
            s_per_token = float((g["lam"] * g["instance_seconds_per_request"]).sum()
                                / (g["lam"] * g["input_tokens_rep"]).sum())
            pools.append(PoolSpec(p.name, "prefill", p.instances, prefill_time_s=_per_token(s_per_token)))
            continue
        batch = int(max(1, g["max_batch"].min()))
        step_s = _weighted(g["tpot_ms"], g["lam"]) / 1e3
        kv_per_token = _weighted(g["kv_bytes_per_request"] / (g["input_tokens_rep"] + g["output_tokens_rep"]), g["lam"])
        live = max(p.instances - p.redundancy, 1)
        cap_tokens = (p.kv_capacity_bytes / live / kv_per_token) if (p.kv_capacity_bytes > 0 and kv_per_token > 0) else math.inf
        recompute = _weighted(pd.Series([svc_s_per_token.get(str(s), step_s) for s in g["service"]]), g["lam"])
        if p.role == "decode":
            pools.append(PoolSpec(p.name, "decode", p.instances, prefill_time_s=_per_token(recompute),
                                  step_time_s=[0.0] + [step_s] * batch, max_batch=batch,
                                  kv_capacity_tokens=cap_tokens))
        else:
            chunk = int(max(1, round(_weighted(g["max_batch"] * g["input_tokens_rep"] / g["output_tokens_rep"], g["lam"]))))
            pools.append(PoolSpec(p.name, "unified", p.instances, prefill_time_s=_per_token(recompute),
                                  step_time_s=[0.0] + [step_s] * batch, max_batch=batch,
                                  kv_capacity_tokens=cap_tokens, chunk_tokens=chunk,
                                  iteration_time_s=_constant2(step_s)))

    known = {ps.name for ps in pools}
    routes: list[ServiceRoute] = []
    for svc, g in rows.groupby("service", sort=True):
        d = demand[demand["service"] == svc].iloc[0]
        chosen: dict[str, str] = {}
        for role, gr in g.groupby("role"):
            by_pool = gr.groupby("pool")["rate_peak_per_s"].sum().sort_values(ascending=False)
            chosen[str(role)] = str(by_pool.index[0])
            if len(by_pool) > 1:
                notes.append(f"service {svc}: {role} traffic is split over {len(by_pool)} pools in the plan; "
                             f"simulated entirely on {by_pool.index[0]} ({by_pool.iloc[0] / by_pool.sum():.0%} of it)")
        transfer = 0.0
        if "prefill" in chosen:
            gp = g[(g["role"] == "prefill") & (g["pool"] == chosen["prefill"])]
            cfg = str(gp["config"].iloc[0])
            nic = float(configs.at[cfg, "nic_bw_gb_per_s"]) if cfg in configs.index else math.nan  # type: ignore[arg-type]
            tp = float(configs.at[cfg, "tp"]) if cfg in configs.index else 1.0  # type: ignore[arg-type]
            bytes_per_token = _weighted(gp["kv_transfer_bytes_per_request"] / gp["input_tokens_rep"], gp["lam"])
            if nic > 0 and math.isfinite(nic):
                transfer = bytes_per_token / (nic * tp * 1e9)
            else:
                notes.append(f"service {svc}: no NIC bandwidth for {cfg}; KV transfer not simulated")
        missing = [pl for pl in chosen.values() if pl not in known]
        if missing:
            raise ValueError(f"service {svc}: routed to pools without instances: {', '.join(missing)}")
        routes.append(ServiceRoute(
            str(svc), prefill=chosen.get("prefill"), decode=chosen.get("decode"), unified=chosen.get("unified"),
            transfer_s_per_token=transfer,
            ttft_target_s=float(d["ttft_target_ms"]) / 1e3, ttft_quantile=float(d["ttft_quantile"]),
            tpot_target_s=float(d["tpot_target_ms"]) / 1e3, tpot_quantile=float(d["tpot_quantile"]),
        ))
    return SimInputs(architecture=arch.architecture, pools=pools, routes=routes, demand=demand,
                     pool_plans=pool_plans, notes=notes)


def _per_token(s_per_token: float) -> Callable[[int], float]:
    def f(n: int) -> float:
        return n * s_per_token
    return f


def _constant2(t: float) -> Callable[[int, int], float]:
    def f(b: int, chunk: int) -> float:
        return t
    return f


def demand_stream(inputs: SimInputs, *, load: str = "peak", rate_multiplier: float = 1.0,
                  duration_s: float, seed: int) -> Iterator[RequestChunk]:
    """Synthetic arrivals for every routed service at its ``peak`` or ``mean`` demand rate."""
    streams = []
    col = "rate_peak_per_s" if load == "peak" else "rate_mean_per_s"
    for i, route in enumerate(inputs.routes):
        d = inputs.demand[inputs.demand["service"] == route.service]
        rate = float(d[col].sum()) * rate_multiplier
        if rate <= 0:
            continue
        # lengths: bucket means, drawn with the bucket weights (1000 paired samples)
        w = d["weight"].to_numpy(float)
        counts = np.maximum(np.round(w / w.sum() * 1000).astype(int), 1)
        inp = np.repeat(np.round(d["input_tokens_mean"].to_numpy(float)).astype(np.int64), counts)
        out = np.repeat(np.round(d["output_tokens_mean"].to_numpy(float)).astype(np.int64), counts)
        cv = float(d["interarrival_cv"].iloc[0]) if "interarrival_cv" in d else 1.0
        streams.append(synthetic_requests(rate, duration_s, input_tokens=inp, output_tokens=out,
                                          interarrival_cv=cv if cv > 0 else 1.0, seed=seed + 7919 * i,
                                          service=i))
    return merge_streams(*streams)
