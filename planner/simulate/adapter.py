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
  prefill config's NIC bandwidth (``nic_bw_gb_per_s × tp``); a profile without a NIC figure
  gets the performance model's default (``planner.perf.roofline.DEFAULT_NIC_GB_PER_S``, the
  figure its operating points were priced with), said in the notes.
* **Decode pool** — the plan knows the step time only at the planned batch ``B*``
  (``tpot_ms``); the simulator uses ``t = Σ λ_b tpot_b / Σ λ_b`` at every batch ``b ≤ B``
  (an upper bound: decode steps get faster at smaller batches). The batch limit is the
  *capacity-preserving* batch of the mix routed to the pool,
  ``B = t · Σ λ_b o_b / Σ λ_b τ_b`` (``o_b`` = representative output): a full instance then
  serves the routed mix at exactly the instance-seconds per request ``τ_b`` the MIP
  charged. (Each bucket's own ``B*_b`` prices that bucket alone — a long-context bucket's
  small ``B*`` — so the smallest ``B*`` would undersize a mixed pool, and the largest
  would oversize it.) KV capacity per instance = ``kv_capacity_bytes / (instances −
  redundancy)`` divided by the KV bytes per token ``kv_bytes_per_request / (n_b + o_b)``;
  without a capacity: unlimited. Recompute after preemption costs the service's prefill
  time per token.
* **Unified pool** — from the points' lane columns (``prefill_chunk_tokens`` ``q_b``,
  ``prefill_tokens`` ``n_b``, ``decode_only_step_ms``, ``mean_step_ms``; :func:`unified_lane`):
  one chunk ``q = Σ λ_b N_b / Σ λ_b (n_b/q_b)`` tokens (``N_b`` the representative input the
  simulated request prefills, ``n_b`` the new tokens after the cached prefix the point prefills:
  the simulated lane does the lane work the points priced, ``n_b/q_b`` chunk iterations per
  prompt, and the request keeps its whole context in KV); an
  iteration with ``c`` prompt tokens takes ``t_dec + (t − t_dec) · c/q`` (``t`` the planned full-chunk
  iteration ``step_ms`` ``t_b``, averaged over the chunk iterations the buckets' prompts take,
  ``t = Σ λ_b (n_b/q_b) t_b / Σ λ_b (n_b/q_b)``, so the lane's time is the points' too — ``Σ λ_b`` weights
  alone put 8,000-token prompts of eight output buckets at +29 % lane time; the ``λ``-weighted
  ``step_ms`` or ``tpot_ms`` where a row has no ``step_ms``; ``t_dec`` the decode-only step; linear in between — a
  roofline iteration's time grows about linearly with its tokens); the batch limit ``B`` is
  the capacity-preserving batch as for decode, with the mean iteration time ``mean_step_ms``
  in place of ``t`` (the unified ``τ_b = o_b · mean_step_b / B*_b``). The step time does not
  vary with the batch (as for decode). Without the lane columns (measured points, older
  plans) the estimate is: every iteration takes ``t`` and ``q = B · Σ λ_b n_b / Σ λ_b o_b``
  (prompts admitted as fast as outputs finish at a full batch), said in the notes.
* **Measured pools** — every routed point from a measured capacity file (``bound`` =
  ``measured``, :func:`planner.capacity.read_measured_capacity`). A measured rate is what one
  instance sustains *within* the SLO, its own queueing included; the MIP keeps each such pool at
  or below that rate per instance. So the simulator does not queue them a second time: a measured
  pool is a delay station whose service times come from the measurement — the decode step (or
  unified iteration) ``t = Σ λ_b t_b / Σ λ_b`` with ``t_b`` the measured ``tpot_ms``, or, when not
  measured, ``t_b = min(τ_b / o_b, TPOT target)`` (``τ_b = 1 / max_rate_per_s``: the request's
  instance time spread over its output tokens; measured within the SLO, so at most the target);
  a prefill instance serves every waiting prompt as one batch in ``Σ λ_b s_b / Σ λ_b``,
  ``s_b = min(τ_b, TTFT target / 2)`` (a prompt arriving while a batch runs waits for at most one
  batch, so the wait and its own batch fit the target; a
  measured prefill TTFT above that is added as the route's delay, as for modelled points,
  :func:`plan_to_sim_by_bucket`). Slots per instance:
  :func:`measured_slots` (four times the whole pool's mean requests in flight, so none waits for a
  slot); a unified chunk takes every admitted prompt in one iteration. The simulated latency of a
  measured pool is therefore its measured (or derived) service, and its load is checked by the
  MIP, not by the simulation; pools modelled by the planner in the same plan are simulated as
  above. A pool mixing measured and modelled points is simulated as modelled, its measured points
  with the derived ``t_b`` when they carry no TPOT (said in the notes).
* **Routing** — :func:`plan_to_sim` (one route per service, e.g. for replaying a log)
  sends every request of a service through one pool per phase: the pool with the largest
  routed share; services split across pools are listed in ``notes``.
  :func:`plan_to_sim_by_bucket` instead makes one route per (service, bucket, prefill pool,
  decode pool) and splits each bucket's arrivals by the plan's shares (prefill and decode
  shares independent, ``x_pf · x_dec``), so a split service is simulated as planned.
* **Arrivals** — per service a renewal process at the service's peak (or mean) rate with
  the demand's inter-arrival CV; :func:`demand_stream` draws lengths from the buckets'
  mean (input, output) with the bucket weights; :func:`bucket_stream` gives each arrival
  a route (bucket and pools) drawn with probabilities ``w_b x_pf x_dec`` and lengths drawn
  from the bucket's length mix (``length_mix`` of the demand: the sub-bins the points' work per
  request was priced at, :mod:`planner.capacity`; each input no longer than the bucket's
  representative, which bounds the analytic TTFT), or the bucket's *representative* lengths when
  it has no mix. The capacity-preserving pool parameters (per-token prefill time, effective batch,
  lane chunk, KV per token) use the same mix's mean lengths (:func:`_work_lengths`).
* **Encode phase** (multimodal requests, :mod:`planner.capacity_encode`) — an inline encode
  (``encode_prefill`` / ``encode_unified`` rows) is prompt work in the pool that prefills the
  request: per route ``ServiceRoute.encode_tokens`` = the mean encode seconds of what the route's
  pool prefills of its bucket (routed rate x encode time over the rate the pool prefills) at the
  pool's time per prompt token (:func:`inline_encode_tokens`), so the pool is as busy as the MIP
  charged it; those tokens take a unified iteration's chunk budget (vLLM runs the tower in the same
  step, under its own encoder budget) and hold no KV. A separate ``encode`` pool is a pool of role
  ``encode`` (one request per instance for the tower's time, its routed rows' rate-weighted
  ``instance_seconds_per_request``) the request visits first, then its embeddings take
  ``ttft_ms − instance_seconds_per_request`` of the encode point (``ServiceRoute.encode_transfer_s``).
  :func:`plan_to_sim_by_bucket` draws a bucket's placement by its shares (:func:`_encode_options`),
  independently of its prefill / decode pools; :func:`plan_to_sim` takes the placement carrying most
  of the service (said in the notes).
* **Agent sessions** are simulated call by call (each LLM call an independent request at
  the demand rate); tool waits and the KV they hold are not simulated here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.pool_latency import lane_chunk_step_s, unified_ttft_overhead_ms
from planner.schema.plan import ArchitecturePlan, PlanResult, PoolPlan
from planner.simulate.arrivals import RequestChunk, merge_streams
from planner.simulate.results import SimResult
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
    points: pd.DataFrame | None = None
    """The plan's capacity points as a frame (``pd.DataFrame(plan.capacity.points)``, built once per plan)."""

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


def _step_ms(g: pd.DataFrame) -> pd.Series:
    """The planned iteration time of each row: a unified point's chunk-carrying iteration
    (``step_ms``; its ``tpot_ms`` is the per-request TPOT, a mean over chunk and decode-only
    steps), else ``tpot_ms`` (a decode step; measured rows)."""
    if "step_ms" not in g.columns:
        return g["tpot_ms"].astype(float)
    chunk = g["step_ms"].astype(float)
    out = chunk.where((g["role"] == "unified") & chunk.notna(), g["tpot_ms"].astype(float))
    if "spec_step_ms" in g.columns:  # a speculative decode point: its verify + draft step (tpot_ms is per token);
        spec = g["spec_step_ms"].astype(float)  # a speculative unified point keeps its chunk iteration (step_ms)
        out = spec.where(spec.notna() & (g["role"] != "unified"), out)
    return out


def _tokens_per_step(g: pd.DataFrame) -> pd.Series:
    """Tokens a decode or unified step yields per sequence: ``spec_tokens_per_step`` of a speculative point, else 1."""
    if "spec_tokens_per_step" not in g.columns:
        return pd.Series(1.0, index=g.index)
    return g["spec_tokens_per_step"].astype(float).fillna(1.0).clip(lower=1.0)


def _itl_fields(d: Any) -> dict[str, Any]:
    """The route's ITL and E2E targets and per-token metric from a demand row (absent columns: none)."""
    get = d.get if hasattr(d, "get") else (lambda k, default=None: default)
    return {"itl_target_s": float(get("itl_target_ms", math.inf)) / 1e3, "itl_quantile": float(get("itl_quantile", 0.99)),
            "token_metric": str(get("token_metric", "tpot")), "e2e_target_s": float(get("e2e_target_ms", math.inf)) / 1e3,
            "e2e_quantile": float(get("e2e_quantile", 0.99))}


ENCODE_NOTE = "encode phase, "
"""How every note on the encode phase begins (:func:`plan_to_sim`), so :func:`planner.verify.simulate_plan` can put them in
its method line and nothing else (a service or pool whose name holds "encode")."""
INLINE_ENCODE_ROLES: tuple[str, ...] = ("encode_prefill", "encode_unified")
"""The inline encode roles (:mod:`planner.capacity_encode`): the tower's time riding in the prefill / unified pool."""


def split_encode_phase(routing: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Routing without the encode phase of multimodal requests (roles ``encode*``, :mod:`planner.capacity_encode`), and
    its encode rows: inline (``encode_prefill`` / ``encode_unified``, simulated as prompt work in that pool,
    :func:`inline_encode_tokens`) and separate (``encode``, a pool of its own the request visits first)."""
    if not len(routing):
        return routing, routing
    enc = routing["role"].astype(str).str.startswith("encode")
    return routing[~enc], routing[enc]


def inline_encode_tokens(pool: PoolSpec, encode_s: float) -> int:
    """Prompt tokens of ``pool``'s work that take ``encode_s`` seconds (an inline encode, :attr:`ServiceRoute.encode_tokens`):
    a prefill pool's time per token; a unified pool's lane time per chunk token, ``(t(q) − t(0)) / q`` of its iteration
    (the full-chunk iteration over its chunk where the iteration does not grow with the chunk: no lane columns)."""
    if not (encode_s > 0 and math.isfinite(encode_s)):
        return 0
    if pool.role == "prefill":
        per_token = float(pool.prefill_time_s(1000)) / 1000.0
    else:
        q = int(pool.chunk_tokens)
        it = pool.iteration_time_s
        step = pool.step_table()[1] if pool.max_batch >= 1 else 0.0
        full, empty = (float(it(0, q)), float(it(0, 0))) if it is not None else (step + float(pool.prefill_time_s(q)), step)
        per_token = (full - empty) / q if full > empty else full / q
    return int(round(encode_s / per_token)) if per_token > 0 else 0


def _inline_encode_s(encode: pd.DataFrame, service: str, bucket: str | None, pool: str) -> float:
    """Mean encode seconds per request ``pool`` encodes inline for ``service`` (one ``bucket``, or all): the inline rows'
    routed-rate-weighted encode time (a pool that encodes every request it prefills, as the MIP's ``encode_host`` rows
    have it in the examples, so the mean over what it prefills)."""
    if not len(encode):
        return 0.0
    g = encode[(encode["service"].astype(str) == service) & (encode["pool"].astype(str) == pool)
               & encode["role"].astype(str).isin(INLINE_ENCODE_ROLES)]
    if bucket is not None:
        g = g[g["bucket"].astype(str) == bucket]
    return _rate_mean(g, g["instance_seconds_per_request"].astype(float)) if len(g) else 0.0


def _encode_transfer_s(rows: pd.DataFrame) -> float:
    """The embeddings' transfer of separate encode rows (s): the point's ``ttft_ms`` (encode + transfer) less its
    ``instance_seconds_per_request`` (the encode), routed-rate weighted."""
    extra = (rows["ttft_ms"].astype(float) / 1e3 - rows["instance_seconds_per_request"].astype(float)).clip(lower=0.0)
    return _rate_mean(rows, extra)


def _rate_mean(rows: pd.DataFrame, values: pd.Series) -> float:
    """``values`` of the encode ``rows`` weighted by their routed peak rates (negative rates as 0); 0 without rate."""
    lam = rows["rate_peak_per_s"].astype(float).clip(lower=0.0)
    return float((lam * values).sum() / lam.sum()) if lam.sum() > 0 else 0.0


def _routed_points(plan: PlanResult, architecture: str | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The plan's capacity points as a frame, its routing rows with a share (encode phase split off,
    :func:`split_encode_phase`) left-joined to their operating points, and the encode rows with their points'
    ``instance_seconds_per_request`` and ``ttft_ms``.
    Built once per plan: :func:`plan_to_sim` and :func:`plan_to_sim_by_bucket` both read the join
    (neither mutates it: every later step makes a new frame)."""
    arch = choose_architecture(plan, architecture)
    points = pd.DataFrame(plan.capacity.points)
    routing = pd.DataFrame([r.model_dump() for r in arch.routing])
    routing, encode = split_encode_phase(routing[routing["share"] > 1e-9])
    routed = routing.merge(points, on=["service", "bucket", "role", "config"], how="left", suffixes=("", "_pt"))
    if len(encode):
        encode = encode.merge(points[["service", "bucket", "role", "config", "instance_seconds_per_request", "ttft_ms"]],
                              on=["service", "bucket", "role", "config"], how="left")
        encode = encode.assign(instance_seconds_per_request=encode["instance_seconds_per_request"].astype(float).fillna(0.0),
                               ttft_ms=encode["ttft_ms"].astype(float).fillna(0.0))
    return points, routed, encode


def plan_to_sim(plan: PlanResult, architecture: str | None = None) -> SimInputs:
    """Build :class:`PoolSpec` / :class:`ServiceRoute` values from a plan (module docstring)."""
    return _plan_to_sim(plan, architecture, _routed_points(plan, architecture))


def _plan_to_sim(plan: PlanResult, architecture: str | None,
                 routed_points: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> SimInputs:
    """:func:`plan_to_sim` from the plan's routing joined to its points (:func:`_routed_points`)."""
    arch = choose_architecture(plan, architecture)
    demand = pd.DataFrame(plan.capacity.demand)
    points, rows, encode = routed_points
    configs = pd.DataFrame(plan.capacity.configs).set_index("config") if plan.capacity.configs else pd.DataFrame()
    rows = rows.merge(demand[["service", "bucket", "input_tokens_rep", "output_tokens_rep",
                              "input_tokens_mean", "output_tokens_mean"]], on=["service", "bucket"], how="left")
    rows = rows.merge(_work_lengths(demand), on=["service", "bucket"], how="left")
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
                                              / (g["lam"] * g["input_tokens_work"]).sum())
        else:
            q = g["max_batch"] * _tokens_per_step(g) * g["input_tokens_work"] / g["output_tokens_work"]
            svc_s_per_token[str(svc)] = _weighted(_step_ms(g) / 1e3 / q.clip(lower=1.0), g["lam"])

    measured_row = (rows["bound"].astype(str) == "measured").to_numpy(bool) if "bound" in rows.columns else np.zeros(len(rows), dtype=bool)
    if measured_row.any():
        derived = rows["instance_seconds_per_request"] / rows["output_tokens_rep"].clip(lower=1.0) * 1e3
        if "tpot_target_ms" in rows.columns:  # measured within the SLO: at most the TPOT target
            derived = derived.clip(upper=rows["tpot_target_ms"].fillna(np.inf))
        no_tpot = measured_row & ~(rows["tpot_ms"].to_numpy(float) > 0)
        rows.loc[no_tpot, "tpot_ms"] = derived[no_tpot]  # t_b = min(τ_b / o_b, TPOT target) (module docstring, measured pools)
    rows["measured"] = measured_row
    pools: list[PoolSpec] = []
    separate = encode[encode["role"].astype(str) == "encode"] if len(encode) else encode
    for p in arch.pools:
        if p.role == "encode":  # a separate encode pool: the tower's time per request, its routed rows' mean
            ge = separate[separate["pool"].astype(str) == p.name] if len(separate) else separate
            if p.instances > 0 and len(ge) and float(ge["rate_peak_per_s"].astype(float).clip(lower=0.0).sum()) > 0:
                t_enc = _rate_mean(ge, ge["instance_seconds_per_request"].astype(float))
                pools.append(PoolSpec(p.name, "encode", p.instances, prefill_time_s=_constant1(t_enc)))
            continue
        g = rows[rows["pool"] == p.name]
        if g.empty or p.instances <= 0:
            continue
        if bool(g["measured"].all()):
            pools.append(measured_pool(p, g))
            continue
        if bool(g["measured"].any()):
            notes.append(f"pool {p.name}: mixes measured and modelled operating points; simulated as modelled "
                         "(measured points without a TPOT: step time = instance time / output tokens)")
        if p.role == "prefill":
            s_per_token = float((g["lam"] * g["instance_seconds_per_request"]).sum()
                                / (g["lam"] * g["input_tokens_work"]).sum())
            pools.append(PoolSpec(p.name, "prefill", p.instances, prefill_time_s=_per_token(s_per_token)))
            continue
        step_s = _weighted(_step_ms(g), g["lam"]) / 1e3
        lane = unified_lane(g) if p.role == "unified" else None
        e = _tokens_per_step(g)
        # speculative decoding: bursts of E tokens per step (planner.perf.speculative), o / E steps per request
        e_pool = _weighted(e, g["lam"] * g["output_tokens_work"]) if bool((e > 1.0).any()) else 1.0
        gw = g.assign(output_tokens_rep=g["output_tokens_work"])  # the capacity-preserving batch counts the work's outputs
        if p.role == "unified" and e_pool > 1.0:
            batch = effective_batch(gw.assign(output_tokens_rep=gw["output_tokens_rep"] / e),
                                    lane.mean_step_s if lane is not None else step_s)
        else:
            batch = effective_batch(gw, lane.mean_step_s if lane is not None else step_s)
        kv_per_token = _weighted(g["kv_bytes_per_request"] / (g["input_tokens_work"] + g["output_tokens_work"]), g["lam"])
        live = max(p.instances - p.redundancy, 1)
        cap_tokens = (p.kv_capacity_bytes / live / kv_per_token) if (p.kv_capacity_bytes > 0 and kv_per_token > 0) else math.inf
        recompute = _weighted(pd.Series([svc_s_per_token.get(str(s), step_s) for s in g["service"]]), g["lam"])
        if p.role == "decode":
            if e_pool > 1.0:
                batch = effective_batch(gw.assign(output_tokens_rep=gw["output_tokens_rep"] / e), step_s)
            pools.append(PoolSpec(p.name, "decode", p.instances, prefill_time_s=_per_token(recompute),
                                  step_time_s=[0.0] + [step_s] * batch, max_batch=batch,
                                  kv_capacity_tokens=cap_tokens, tokens_per_step=e_pool))
        else:
            if lane is None:  # no lane columns (measured points or an older plan): the stated estimate
                chunk = int(max(1, round(batch * float((g["lam"] * g["input_tokens_work"]).sum())
                                         / float((g["lam"] * g["output_tokens_work"]).sum()))))
                notes.append(f"pool {p.name}: no prefill-chunk size in the plan; chunk estimated as {chunk} tokens "
                             "(prompt tokens admitted per iteration at a full batch)")
                it = _constant2(step_s)
                dec_s = step_s
            else:
                t_chunk = lane.chunk_step_s if lane.chunk_step_s is not None else step_s
                chunk, it, dec_s = lane.chunk_tokens, _chunk_iteration(lane.decode_only_step_s, t_chunk, lane.chunk_tokens), lane.decode_only_step_s
            pools.append(PoolSpec(p.name, "unified", p.instances, prefill_time_s=_per_token(recompute),
                                  step_time_s=[0.0] + [dec_s] * batch, max_batch=batch,
                                  kv_capacity_tokens=cap_tokens, chunk_tokens=chunk,
                                  iteration_time_s=it, tokens_per_step=e_pool))

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
        if "unified" in chosen and "decode" in chosen:
            # a hybrid plan serving the service both ways: one route per service here, the larger share of its traffic
            unified_rate = float(g.loc[g["role"] == "unified", "rate_peak_per_s"].sum())
            split_rate = float(g.loc[g["role"] == "decode", "rate_peak_per_s"].sum())
            keep = "unified" if unified_rate >= split_rate else "disaggregated"
            for role in (("prefill", "decode") if keep == "unified" else ("unified",)):
                chosen.pop(role, None)
            notes.append(f"service {svc}: the plan serves it both in a shared pool and disaggregated; simulated entirely "
                         f"{'in the shared pool' if keep == 'unified' else 'disaggregated'} "
                         f"({max(unified_rate, split_rate) / max(unified_rate + split_rate, 1e-300):.0%} of its traffic)")
        transfer = 0.0
        if "prefill" in chosen:
            gp = g[(g["role"] == "prefill") & (g["pool"] == chosen["prefill"])]
            cfg = str(gp["config"].iloc[0])
            nic = float(configs.at[cfg, "nic_bw_gb_per_s"]) if cfg in configs.index else math.nan  # type: ignore[arg-type]
            tp = float(configs.at[cfg, "tp"]) if cfg in configs.index else 1.0  # type: ignore[arg-type]
            bytes_per_token = _weighted(gp["kv_transfer_bytes_per_request"] / gp["input_tokens_rep"], gp["lam"])
            if not (nic > 0 and math.isfinite(nic)):
                from planner.perf.roofline import DEFAULT_NIC_GB_PER_S

                nic = DEFAULT_NIC_GB_PER_S
                notes.append(f"service {svc}: the profile of {cfg} gives no NIC bandwidth; KV transfer simulated at "
                             f"{nic:g} GB/s per device, the default the performance model priced the plan's points with")
            transfer = bytes_per_token / (nic * tp * 1e9)
        missing = [pl for pl in chosen.values() if pl not in known]
        if missing:
            raise ValueError(f"service {svc}: routed to pools without instances: {', '.join(missing)}")
        first = "prefill" if "prefill" in chosen else "unified" if "unified" in chosen else None
        enc_tokens, enc_pool, enc_transfer = 0, None, 0.0
        e_svc = encode[encode["service"].astype(str) == str(svc)] if len(encode) else encode
        if first is not None and len(e_svc):
            # one route per service: the encode placement carrying most of its requests (separate pools by name)
            sep = e_svc[e_svc["role"].astype(str) == "encode"]
            by_pool = sep.groupby("pool")["rate_peak_per_s"].sum().sort_values(ascending=False) if len(sep) else pd.Series(dtype=float)
            inline_rate = float(e_svc.loc[e_svc["role"].astype(str).isin(INLINE_ENCODE_ROLES), "rate_peak_per_s"].sum())
            if len(by_pool) and float(by_pool.sum()) > inline_rate and str(by_pool.index[0]) in known:
                enc_pool = str(by_pool.index[0])
                enc_transfer = _encode_transfer_s(sep[sep["pool"].astype(str) == enc_pool])
                notes.append(f"{ENCODE_NOTE}service {svc}: encoded in the separate pool {enc_pool}, then prefilled after "
                             f"{enc_transfer * 1e3:.1f} ms of embedding transfer")
            else:
                enc_s = _inline_encode_s(e_svc, str(svc), None, chosen[first])
                enc_tokens = inline_encode_tokens(next(ps for ps in pools if ps.name == chosen[first]), enc_s)
                if enc_tokens:
                    notes.append(f"{ENCODE_NOTE}service {svc}: inline encode simulated as prompt work in {chosen[first]}: {enc_tokens} "
                                 f"tokens per request, its {enc_s * 1e3:.1f} ms at the pool's time per prompt token")
            if (len(by_pool) and inline_rate > 0) or len(by_pool) > 1:
                notes.append(f"{ENCODE_NOTE}service {svc}: its encode is split over {len(by_pool) + (inline_rate > 0)} placements in the plan; "
                             f"simulated all {'in ' + enc_pool if enc_pool else 'inline'}")
        routes.append(ServiceRoute(
            str(svc), prefill=chosen.get("prefill"), decode=chosen.get("decode"), unified=chosen.get("unified"),
            transfer_s_per_token=transfer, encode_tokens=enc_tokens, encode=enc_pool, encode_transfer_s=enc_transfer,
            ttft_target_s=float(d["ttft_target_ms"]) / 1e3, ttft_quantile=float(d["ttft_quantile"]),
            tpot_target_s=float(d["tpot_target_ms"]) / 1e3, tpot_quantile=float(d["tpot_quantile"]),
            **_itl_fields(d),
        ))
    return SimInputs(architecture=arch.architecture, pools=pools, routes=routes, demand=demand,
                     pool_plans=pool_plans, notes=notes, points=points)


def _work_lengths(demand: pd.DataFrame) -> pd.DataFrame:
    """Per (service, bucket) the lengths its points' work per request was priced at: the length mix's
    share-weighted means (:func:`planner.capacity.mix_means`), else the representatives. The
    capacity-preserving pool parameters (per-token prefill time, effective batch, lane chunk, KV per
    token) divide the points' work by these, and the simulated requests draw their lengths from the
    same mix (:func:`plan_to_sim_by_bucket`, :func:`bucket_stream`)."""
    from planner.capacity import length_mix, mix_means

    rows = []
    for rec in demand.to_dict("records"):
        mix = length_mix(rec)
        n, o = mix_means(mix) if mix else (float(rec["input_tokens_rep"]), float(rec["output_tokens_rep"]))
        rows.append({"service": rec["service"], "bucket": rec["bucket"], "input_tokens_work": n, "output_tokens_work": o})
    return pd.DataFrame(rows, columns=["service", "bucket", "input_tokens_work", "output_tokens_work"])


def measured_slots(rows: pd.DataFrame, residence_s: float) -> int:
    """Slots per instance of a measured pool: four times the whole pool's mean requests in flight
    (``Σ λ · residence``, Little's law) + 1 — one instance holding four times what the whole pool
    holds on average does not happen behind a least-loaded router, so no request waits for a slot."""
    return int(math.ceil(4.0 * float(rows["lam"].sum()) * residence_s)) + 1


def measured_pool(p: PoolPlan, rows: pd.DataFrame) -> PoolSpec:
    """A pool made of measured operating points as a delay station (module docstring, measured pools)."""
    if p.role == "prefill":
        tau = rows["instance_seconds_per_request"]
        if "ttft_target_ms" in rows.columns:  # a batch waited for and one's own within the TTFT target
            tau = tau.clip(upper=rows["ttft_target_ms"].fillna(np.inf) / 2e3)
        s = _weighted(tau, rows["lam"])
        slots = measured_slots(rows, s)
        longest = int(rows["input_tokens_rep"].max())
        return PoolSpec(p.name, "prefill", p.instances, prefill_time_s=_constant1(s), max_batch=slots,
                        prefill_batch_tokens=slots * max(longest, 1))
    step_s = _weighted(rows["tpot_ms"], rows["lam"]) / 1e3
    residence = step_s * (_weighted(rows["output_tokens_rep"], rows["lam"]) + 1.0)
    slots = measured_slots(rows, residence)
    if p.role == "decode":
        return PoolSpec(p.name, "decode", p.instances, prefill_time_s=_per_token(step_s), step_time_s=_constant1(step_s), max_batch=slots)
    chunk = slots * max(int(rows["input_tokens_rep"].max()), 1)
    return PoolSpec(p.name, "unified", p.instances, prefill_time_s=_per_token(step_s), step_time_s=_constant1(step_s), max_batch=slots,
                    chunk_tokens=chunk, iteration_time_s=_constant2(step_s))


def _constant1(t: float) -> Callable[[int], float]:
    def f(n: int) -> float:
        return t
    return f


@dataclass(frozen=True)
class UnifiedLane:
    """The chunked-prefill lane of a unified pool, from its points' lane columns (module docstring)."""

    chunk_tokens: int
    decode_only_step_s: float
    mean_step_s: float
    chunk_step_s: float | None = None
    """The full-chunk iteration ``t = Σ λ_b (n_b/q_b) t_b / Σ λ_b (n_b/q_b)`` (s; ``t_b`` the point's ``step_ms``),
    weighted by the chunk iterations each bucket's prompts take, so that the lane does the lane time the
    points priced (module docstring); ``None`` when a row has no ``step_ms``."""


def unified_lane(rows: pd.DataFrame) -> UnifiedLane | None:
    """One chunk size and iteration times for a unified pool mixing buckets (module docstring);
    ``None`` when the rows lack the lane columns of :data:`planner.schema.capacity.POINT_OPTIONAL_COLUMNS`.

    ``q = Σ λ_b N_b / Σ λ_b (n_b / q_b)`` with ``N_b`` the mean input the simulated requests carry and
    prefill (``input_tokens_work``: the bucket's length-mix mean, :func:`_work_lengths`; the representative
    where a bucket has no mix) and ``n_b`` the new tokens the point prefills (input minus cached prefix): the
    simulated lane does the lane work the points priced (``n_b / q_b`` chunk iterations per prompt) while the
    request keeps its whole context in KV. Until 2026-12-06 ``N_b`` was the representative input, the longest
    of the bucket's mix, while the requests drew their inputs from the mix: long-context-assistant's shared pool
    got a 3,099-token chunk where its prompts average a third of their representative, and the simulated lane
    did about half the work its points priced (lane busy 0.32 against the analytic prefill share 0.57)."""
    cols = ("prefill_tokens", "prefill_chunk_tokens", "decode_only_step_ms", "mean_step_ms")
    if any(c not in rows.columns for c in cols):
        return None
    sub = rows[list(cols)].to_numpy(float)
    if not np.all(np.isfinite(sub)) or np.any(sub[:, 1] < 1):
        return None
    lam = rows["lam"].to_numpy(float)
    n, q = sub[:, 0], sub[:, 1]
    full = (rows["input_tokens_work"].to_numpy(float) if "input_tokens_work" in rows.columns
            else rows["input_tokens_rep"].to_numpy(float) if "input_tokens_rep" in rows.columns else n)
    chunk = float((lam * full).sum() / (lam * n / q).sum())
    # a bucket's prompts take n_b / q_b full-chunk iterations of its own t_b: weighted by rate alone, a mix of
    # one-chunk 8,000-token prompts (t_b 700 ms) and three-chunk ones (241 ms each) gave the pool's
    # 4,285-token chunk 484 ms where the points priced 377 ms (+29 % lane time; benchmarks/bench_latency_at_load.py)
    step = rows["step_ms"].to_numpy(float) if "step_ms" in rows.columns else np.full(len(rows), np.nan)
    chunk_step = lane_chunk_step_s(lam, n / q, step) if np.all(np.isfinite(step)) and (lam * n).sum() > 0 else None
    return UnifiedLane(chunk_tokens=max(1, int(round(chunk))), decode_only_step_s=_weighted(rows["decode_only_step_ms"], rows["lam"]) / 1e3,
                       mean_step_s=_weighted(rows["mean_step_ms"], rows["lam"]) / 1e3, chunk_step_s=chunk_step)


def _chunk_iteration(t_dec: float, t_chunk: float, chunk_tokens: int) -> Callable[[int, int], float]:
    """Iteration time with ``c`` prompt tokens: ``t_dec + (t_chunk − t_dec) · c / q`` (linear in the
    chunk between the decode-only step and the full-chunk step; module docstring)."""
    extra = max(t_chunk - t_dec, 0.0) / chunk_tokens

    def f(b: int, chunk: int) -> float:
        return t_dec + extra * (chunk if chunk < chunk_tokens else chunk_tokens)  # min(), without its call (every iteration)
    return f


def effective_batch(rows: pd.DataFrame, step_s: float) -> int:
    """Capacity-preserving batch of a decode/unified pool (module docstring):
    ``B = t · Σ λ_b o_b / Σ λ_b τ_b``, rounded, within ``[min B*_b, max B*_b]``.

    ``rows``: the operating points routed to the pool with ``lam`` (routed peak rate),
    ``output_tokens_rep``, ``instance_seconds_per_request`` and ``max_batch``.
    """
    busy = float((rows["lam"] * rows["instance_seconds_per_request"]).sum())
    lo = max(1, int(rows["max_batch"].min()))
    hi = max(lo, int(rows["max_batch"].max()))
    if busy <= 0 or step_s <= 0:
        return lo
    b = step_s * float((rows["lam"] * rows["output_tokens_rep"]).sum()) / busy
    return int(min(hi, max(lo, round(b))))


def _prefill_s(pools: Mapping[str, PoolSpec], pool: str, tokens: int, fallback_s: float) -> float:
    """The simulated prefill pool ``pool``'s time for ``tokens`` (:func:`plan_to_sim_by_bucket`); ``fallback_s`` (the
    point's ``τ``) for a pool simulated otherwise (measured, or not in ``pools``)."""
    spec = pools.get(pool)
    if spec is None or spec.prefill_time_s is None:
        return fallback_s
    got = float(spec.prefill_time_s(int(tokens)))
    return got if math.isfinite(got) and got >= 0 else fallback_s


def _per_token(s_per_token: float) -> Callable[[int], float]:
    def f(n: int) -> float:
        return n * s_per_token
    return f


def _constant2(t: float) -> Callable[[int, int], float]:
    def f(b: int, chunk: int) -> float:
        return t
    return f


@dataclass(frozen=True)
class BucketSimInputs:
    """Simulator inputs with one route per (service, bucket, prefill pool, decode pool).

    ``route_table`` has one row per route (its index = the route's index in ``routes``):
    service, bucket, prefill / decode / unified pool, ``probability`` (of an arrival of the
    service taking this route: ``w_b · x_pf · x_dec``), ``input_tokens`` / ``output_tokens``
    (the bucket's representatives), ``rate_peak_per_s`` / ``rate_mean_per_s`` of the
    service (the renewal process all its routes share).
    """

    base: SimInputs
    routes: list[ServiceRoute]
    route_table: pd.DataFrame

    @property
    def pools(self) -> list[PoolSpec]:
        return self.base.pools


ROUTING_NOISE_SHARE = 1e-5
"""A routing share at most this large to a pool without instances is the MIP's rounding noise (HiGHS'
primal feasibility tolerance is 1e-7 on the scaled rows), not traffic: the bucket simulation ignores it."""


def plan_to_sim_by_bucket(plan: PlanResult, architecture: str | None = None) -> BucketSimInputs:
    """Like :func:`plan_to_sim`, but routed by the plan's shares, bucket by bucket (module docstring).

    On a disaggregated route the KV-transfer delay (which occupies no pool) is set so that
    a request of the bucket's representative input ``n_rep`` meeting no queue has the TTFT of its prefill operating
    point: ``delay = ttft_ms − p(n_rep) − tpot_dec`` with ``p(n)`` the simulated prefill pool's time for ``n`` tokens
    (the point's TTFT includes the batch of prompts it shares an iteration with, the KV transfer at the planned link
    and the first decode step; the simulated prefill instance is busy only the amortised per-token time), charged per
    token, ``delay / n_rep``. So the simulation tests the queueing, not the operating point. Until 2026-12-06 it was
    ``ttft_ms − τ_pf``, with ``τ_pf`` priced at the bucket's length mix while ``ttft_ms`` is the representative's: the
    finer the buckets, the shorter a long-prompt bucket's ``τ_pf`` against the same ``ttft_ms`` (code-completion-8b's
    prompts of 2,734–3,360 tokens at 16 buckets: 85 ms against 139 ms for their 4-bucket bucket), and the simulated
    p99 TTFT of the same plan's top latency group came out 490 ms at 16 buckets against 541 at 4 (41 H100 prefill).
    """
    routed_points = _routed_points(plan, architecture)
    base = _plan_to_sim(plan, architecture, routed_points)
    demand = base.demand
    routing, encode = routed_points[1], routed_points[2]
    known = {ps.name for ps in base.pools}
    spec_of = {ps.name: ps for ps in base.pools}
    prefill_of = {ps.name: ps for ps in base.pools if ps.role == "prefill"}
    # a share the MIP leaves on a pool it did not open is solver noise (below its feasibility tolerance): dropped
    # (long-document-nvidia at a 3 s TTFT target routed a sliver of a bucket to a decode pool with 0 instances)
    routing = routing[routing["pool"].astype(str).isin(known) | (routing["share"] > ROUTING_NOISE_SHARE)]
    routes: list[ServiceRoute] = []
    table: list[dict[str, object]] = []
    for (svc, bucket), g in routing.groupby(["service", "bucket"], sort=True):
        d_all = demand[demand["service"] == svc]
        d = d_all[d_all["bucket"] == bucket].iloc[0]
        w = float(d["weight"]) / float(d_all["weight"].sum())
        n_rep = max(1, round(float(d["input_tokens_rep"])))
        o_rep = max(1, round(float(d["output_tokens_rep"])))
        pf = g[g["role"] == "prefill"]
        dec = g[g["role"].isin(["decode", "unified"])]
        # the simulated prefill of the representative input: the pool's per-token time (capacity-preserving) times n_rep
        pf_opts: list[tuple[str | None, float, float]] = (
            [(str(pl), float(sh), float(tt) / 1e3 - _prefill_s(prefill_of, str(pl), n_rep, float(ta))) for pl, sh, tt, ta in
             zip(pf["pool"], pf["share"], pf["ttft_ms"], pf["instance_seconds_per_request"], strict=True)] or [(None, 1.0, 0.0)])
        overhead_ms = np.nan_to_num(unified_ttft_overhead_ms(dec), nan=0.0)
        enc_opts = _encode_options(encode, str(svc), str(bucket), known)
        for dec_pool, dec_role, dec_share, dec_tpot, dec_overhead_ms in zip(
                dec["pool"].astype(str), dec["role"].astype(str), dec["share"].astype(float), dec["tpot_ms"].astype(float),
                overhead_ms, strict=True):
            # a unified route prefills in its own pool; a decode route pairs with each prefill pool, the pair's share
            # the product of the two within the bucket's disaggregated part (a hybrid plan may also route it unified)
            pf_total = float(pf["share"].sum()) if len(pf) else 1.0
            for pf_pool, pf_share, pf_extra_s in ([(None, 1.0, 0.0)] if dec_role == "unified" else pf_opts):
                pair = pf_share / pf_total if pf_pool is not None and pf_total > 0 else pf_share
                used = [p for p in (pf_pool, dec_pool) if p is not None]
                missing = [p for p in used if p not in known]
                if missing:
                    raise ValueError(f"service {svc}: routed to pools without instances: {', '.join(missing)}")
                unified = dec_role == "unified"
                delay = max(0.0, pf_extra_s - dec_tpot / 1e3) if pf_pool is not None else 0.0
                first = dec_pool if unified else pf_pool
                # the encode options (module docstring): a separate pool, or inline as prompt work in the route's first pool
                for enc_pool, enc_share, enc_transfer in enc_opts:
                    enc_tokens = (inline_encode_tokens(spec_of[first], _inline_encode_s(encode, str(svc), str(bucket), first))
                                  if enc_pool is None and first is not None and len(encode) else 0)
                    routes.append(ServiceRoute(
                        f"{svc}|{bucket}|{len(routes)}", prefill=pf_pool,
                        decode=None if unified else dec_pool, unified=dec_pool if unified else None,
                        transfer_s_per_token=delay / n_rep, encode_tokens=enc_tokens, encode=enc_pool, encode_transfer_s=enc_transfer,
                        ttft_target_s=float(d["ttft_target_ms"]) / 1e3, ttft_quantile=float(d["ttft_quantile"]),
                        tpot_target_s=float(d["tpot_target_ms"]) / 1e3, tpot_quantile=float(d["tpot_quantile"]),
                        **_itl_fields(d), ttft_overhead_s=float(dec_overhead_ms) / 1e3 if unified else 0.0,
                    ))
                    table.append({"service": str(svc), "bucket": str(bucket), "prefill": pf_pool,
                                  "decode": None if unified else dec_pool, "unified": dec_pool if unified else None,
                                  "encode": enc_pool,
                                  "probability": w * pair * dec_share * enc_share, "input_tokens": n_rep, "output_tokens": o_rep,
                                  "length_mix": _route_mix(d, n_rep, o_rep),
                                  "rate_peak_per_s": float(d_all["rate_peak_per_s"].sum()),
                                  "rate_mean_per_s": float(d_all["rate_mean_per_s"].sum()),
                                  "interarrival_cv": float(d["interarrival_cv"]) if "interarrival_cv" in d else 1.0})
    return BucketSimInputs(base=base, routes=routes, route_table=pd.DataFrame(table))


def _encode_options(encode: pd.DataFrame, service: str, bucket: str, known: set[str]) -> list[tuple[str | None, float, float]]:
    """A bucket's encode placements as (separate pool or ``None`` for inline / no encode, share, embedding transfer s):
    each separate pool's routing share, the rest inline (its share the inline rows', the MIP routes a multimodal bucket
    wholly through an encode phase); ``[(None, 1, 0)]`` for a bucket without encode rows. The placement is drawn
    independently of the prefill / decode pools (the MIP ties an inline encode to the pool that prefills; a bucket split
    between placements is simulated with that tie loosened)."""
    if not len(encode):
        return [(None, 1.0, 0.0)]
    g = encode[(encode["service"].astype(str) == service) & (encode["bucket"].astype(str) == bucket)]
    sep = g[(g["role"].astype(str) == "encode") & g["pool"].astype(str).isin(known)]
    opts: list[tuple[str | None, float, float]] = [
        (str(pl), float(rows["share"].sum()), _encode_transfer_s(rows)) for pl, rows in sep.groupby("pool", sort=True)]
    rest = 1.0 - sum(o[1] for o in opts)
    if rest > ROUTING_NOISE_SHARE or not opts:
        opts.append((None, max(rest, 0.0) if opts else 1.0, 0.0))
    total = sum(o[1] for o in opts)
    return [(pl, sh / total, tr) for pl, sh, tr in opts] if total > 0 else [(None, 1.0, 0.0)]


def _route_mix(d: Any, n_rep: int, o_rep: int) -> list[tuple[float, int, int]]:
    """A route's lengths: its bucket's length mix (share, input, output; whole tokens, at least 1:
    the lengths its points' work was priced at, :mod:`planner.capacity`), or the representatives alone."""
    from planner.capacity import length_mix

    mix = length_mix(d)
    if not mix:
        return [(1.0, n_rep, o_rep)]
    tot = sum(m[0] for m in mix)
    return [(m[0] / tot, max(1, round(m[1])), max(1, round(m[2]))) for m in mix]


def lengths_drawn(route_table: pd.DataFrame) -> str:
    """What :func:`bucket_stream` draws a request's lengths from, in words, for the run's method line: each bucket's
    length mix (its sub-bins, several lengths per route) where the routes carry one, the bucket's representative
    lengths where a route's mix is the representatives alone (a bucket without a mix, :func:`_route_mix`)."""
    mixes = route_table["length_mix"] if "length_mix" in route_table.columns else pd.Series([], dtype=object)
    several = [len(m) > 1 for m in mixes]
    if several and all(several):
        return "each request's lengths drawn from its bucket's length mix, the sub-bins its work was priced at"
    if any(several):
        return ("each request's lengths drawn from its bucket's length mix, the sub-bins its work was priced at, "
                "or its bucket's representative lengths where the bucket has none")
    return "each bucket's representative lengths"


def bucket_stream(inputs: BucketSimInputs, *, load: str = "peak", duration_s: float, seed: int,
                  rate_multiplier: float = 1.0, chunk: int = 8192,
                  arrival_times: Mapping[str, np.ndarray] | None = None) -> Iterator[RequestChunk]:
    """Per service one renewal process (the demand's inter-arrival CV) at its peak or mean
    rate; each arrival takes route ``r`` with probability ``route_table.probability`` (so the
    service's burstiness is kept, not diluted over independent per-bucket streams) and lengths
    drawn from that route's ``length_mix`` (its bucket's sub-bins, the lengths the plan's work was
    priced at; the representatives when the bucket has no mix). Reproducible: one generator per service, seeded from
    ``seed`` and the service's position.

    ``arrival_times``: per service name, given arrival seconds (e.g. a log's busiest windows
    replayed at the peak rate, :func:`planner.workload.replay_wait.peak_window_times`) used
    instead of the renewal process; routes are still drawn as above."""
    from planner.simulate.arrivals import _chunk

    rt = inputs.route_table
    col = "rate_peak_per_s" if load == "peak" else "rate_mean_per_s"
    streams = []
    for i, (_svc, g) in enumerate(rt.groupby("service", sort=True)):
        rate = float(g[col].iloc[0]) * rate_multiplier
        if rate <= 0:
            continue
        # one draw per arrival over (route, sub-bin of its bucket's length mix): P = probability x share
        mixes = g["length_mix"] if "length_mix" in g.columns else pd.Series(
            [[(1.0, n, o)] for n, o in zip(g["input_tokens"], g["output_tokens"], strict=True)], index=g.index)
        flat = [(r, pr * sh, n, o) for r, pr, mix in zip(g.index, g["probability"].astype(float), mixes, strict=True)
                for sh, n, o in mix]
        # in order of length, not of the route table: one uniform per arrival then picks the same lengths for the
        # same arrival whatever the bucket count (nested buckets share their sub-bins), so a plan's simulated
        # verdict does not move with the buckets' names or number (``b10`` sorts before ``b2``)
        flat.sort(key=lambda f: (f[2], f[3], f[0]))
        idx = np.array([f[0] for f in flat], dtype=np.int64)
        p = np.array([f[1] for f in flat], dtype=float)
        p = p / p.sum()
        inp = np.array([f[2] for f in flat], dtype=np.int64)
        out = np.array([f[3] for f in flat], dtype=np.int64)
        cv = float(g["interarrival_cv"].iloc[0])
        cv = cv if cv > 0 else 1.0

        given = None if arrival_times is None else arrival_times.get(str(_svc))

        def gen(rate: float = rate, idx: np.ndarray = idx, p: np.ndarray = p, inp: np.ndarray = inp,
                out: np.ndarray = out, cv: float = cv, s: int = seed + 7919 * i,
                given: np.ndarray | None = given) -> Iterator[RequestChunk]:
            rng = np.random.default_rng(s)
            if given is not None:
                times_all = np.sort(np.asarray(given, dtype=float))
                times_all = times_all[times_all < duration_s]
                for a in range(0, times_all.size, chunk):
                    times = times_all[a:a + chunk]
                    k = rng.choice(idx.size, size=times.size, p=p)
                    yield _chunk(times, inp[k], out[k], idx[k])
                return
            mean_gap, shape, t = 1.0 / rate, 1.0 / cv**2, 0.0
            while t < duration_s:
                gaps = rng.exponential(mean_gap, chunk) if cv == 1.0 else rng.gamma(shape, mean_gap / shape, chunk)
                times = t + np.cumsum(gaps)
                t = float(times[-1])
                times = times[times < duration_s]
                if times.size == 0:
                    break
                k = rng.choice(idx.size, size=times.size, p=p)
                yield _chunk(times, inp[k], out[k], idx[k])
        streams.append(gen())
    return merge_streams(*streams)


def service_results(res: SimResult, inputs: BucketSimInputs) -> SimResult:
    """``res`` of a by-bucket simulation with its routes merged back into one result per service.

    Latency summaries and histograms are those of the merged samples of the service's routes;
    counts add up; attainments are the routes' shares weighted by their completed (TTFT/TPOT)
    or measured (SLO) requests, i.e. the service's own shares; ``*_met`` compares the merged
    quantile with the target."""
    from dataclasses import replace

    from planner.simulate.results import ServiceResult
    from planner.simulate.stats import Summary, merged

    hist = {k: v for k, v in res.histograms.items() if not k.startswith("service:")}
    services: dict[str, ServiceResult] = {}
    for svc, g in inputs.route_table.groupby("service", sort=True):
        parts = [res.services[inputs.routes[i].service] for i in g.index]
        h = {m: merged([res.histograms[f"service:{inputs.routes[i].service}:{m}"] for i in g.index]) for m in ("ttft", "tpot", "e2e")}
        for m, hm in h.items():
            hist[f"service:{svc}:{m}"] = hm
        done = sum(p.completed for p in parts)
        measured = sum(p.completed + p.unfinished + p.rejected for p in parts)

        def share(attr: str, weight: str, parts: list[ServiceResult] = parts) -> float:
            w = [(p.completed if weight == "done" else p.completed + p.unfinished + p.rejected) for p in parts]
            tot = sum(w)
            return sum(float(getattr(p, attr)) * x for p, x in zip(parts, w, strict=True) if x) / tot if tot else math.nan

        r0 = parts[0]
        # ITL: every token gap of the decode / unified pools the service's routes use (as planner.verify checks it)
        itl_pools = sorted({str(inputs.routes[i].decode or inputs.routes[i].unified) for i in g.index
                            if f"pool:{inputs.routes[i].decode or inputs.routes[i].unified}:itl" in res.histograms})
        gaps = merged([res.histograms[f"pool:{p}:itl"] for p in itl_pools]) if itl_pools else None
        services[str(svc)] = ServiceResult(
            service=str(svc), ttft=Summary.of(h["ttft"]), tpot=Summary.of(h["tpot"]), e2e=Summary.of(h["e2e"]),
            completed=done, unfinished=sum(p.unfinished for p in parts), rejected=sum(p.rejected for p in parts),
            ttft_attainment=share("ttft_attainment", "done"), tpot_attainment=share("tpot_attainment", "done"),
            slo_attainment=share("slo_attainment", "measured") if measured else math.nan,
            ttft_target_s=r0.ttft_target_s, ttft_quantile=r0.ttft_quantile, tpot_target_s=r0.tpot_target_s, tpot_quantile=r0.tpot_quantile,
            ttft_met=done > 0 and h["ttft"].quantile(r0.ttft_quantile) <= r0.ttft_target_s,
            tpot_met=done > 0 and (h["tpot"].n == 0 or h["tpot"].quantile(r0.tpot_quantile) <= r0.tpot_target_s),
            token_metric=r0.token_metric, itl=Summary.of(gaps) if gaps is not None else None,
            itl_target_s=r0.itl_target_s, itl_quantile=r0.itl_quantile,
            itl_met=gaps is None or gaps.n == 0 or gaps.quantile(r0.itl_quantile) <= r0.itl_target_s,
        )
    return replace(res, services=services, histograms=hist)
