r"""Index sets and coefficients of the tool-phase block of the MIP (from :class:`AgentTables`).

Wait rows ``w = (d, t)``: demand row ``d`` (service, bucket) waiting on tool ``t``. For each,
the hold entries are the decode-phase points ``i`` of ``d`` (roles decode, unified) and the
prefill-phase entries the points ``j`` of ``d`` that run the next turn's prefill (roles
prefill, unified). Coefficients (rates ``λ`` stay outside, as mutable parameters)::

    sessions in wait (mean, at share 1)   m_w = λ_peak(d) c_t W̄_t
    tail factor                           f_w = Q_q(m_w) / m_w (Poisson, M/G/∞), or 1
    hold KV, bytes per (req/s)            κ^hold_{w}   = c_t W̄_t b_d f_w
    tier GB per (req/s)                   γ_{w}        = c_t W̄_t b_d f_w / 1e9
    reload load, instances per (req/s)    ℓ^rl_{w,j}   = c_t t^rl_j β / ρ_j
    recompute load                        ℓ^rc_{w,j}   = c_t t^rc_j / ρ_j
    busy-minus-idle energy per (req/s)    e^{rl|rc}_{w,j} = c_t t_j tp_j (P^busy − P^idle)   (J; β for reloads)

Masks: offload at ``j`` needs a tier (priced, or CPU servers to host it), link bandwidth on
the device, and ``ttft_j + t^rl_rep ≤ TTFT target``; recompute needs
``ttft_j + t^rc_rep ≤ target`` (unqueued TTFT plus the added time, at the conservative
representative context; the pool's queueing budget is the one set without it, an
approximation reported in the plan). Hold needs a known KV capacity of the pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from planner.agents.economics import tail_factor
from planner.agents.tables import AgentParams, AgentTables


@dataclass
class ToolPrep:
    waits: pd.DataFrame
    """One row per wait ``w`` (columns of the waits table + ``w``, ``d``, rates, ``tail``, ``kv_coef``, ``tier_gb_coef``)."""
    hold: list[tuple[int, int, float]]
    """(w, point i, κ^hold) for decode-phase points."""
    pf: pd.DataFrame
    """Prefill-phase entries: w, j, off_ok, rec_ok, rl_load, rc_load, rl_energy_j, rc_energy_j, reload_ms_rep, recompute_ms_rep, reason,
    rho (the utilisation cap of point j the loads were divided by)."""
    cpu_servers: pd.DataFrame
    cpu_s_per_request: np.ndarray
    """Per demand row: CPU core-seconds per LLM call (tokenisation + tool calls with retries)."""
    params: AgentParams
    tier_available: bool
    cpu_n_max: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def ttft_words(role: str, batch: float, ttft_ms: float, sep: str = " ") -> str:
    """The TTFT an offload or recompute is added to, said for what it is: the point's own ``ttft_ms``,
    unqueued, at the bucket's representative prompt; a unified point's at its operating point's full batch
    (the cap: the plan's predicted TTFT at the load that arrives is lower, e.g. agentic-assistant's shared
    pool 2,829 ms here against a predicted p99 of 1,751). ``sep`` between the word and the figure."""
    if role == "unified" and math.isfinite(batch) and batch > 1:
        return f"TTFT{sep}{ttft_ms:,.0f} ms at a full batch of {batch:.0f}"
    return f"unqueued TTFT{sep}{ttft_ms:,.0f} ms"


def prepare_tool_phase(prep: Any, agents: AgentTables, redundancy_hint: int = 0) -> ToolPrep:
    """Coefficients of the tool-phase block; fills pool KV capacities and widens big-Ms (mutates ``prep.pools``)."""
    pts = prep.points
    dem = prep.demand
    params = agents.params
    cfg = prep.tables.configs.drop_duplicates("config").set_index("config")
    d_of = {(str(s), str(b)): int(d) for s, b, d in zip(dem["service"], dem["bucket"], dem["d"], strict=True)}
    waits = agents.waits.copy()
    # Waits of demand rows that have an operating point: a row without any is reported by the
    # routability diagnosis (exit 3) and must not leave a wait with no policy to choose
    # (``tool_balance`` would read 0 = 1). A boolean array, not a list: ``frame[[]]`` selects no columns.
    routable = set(pts["d"].astype(int)) if len(pts) else set()
    keep = np.array([k in d_of and d_of[k] in routable
                     for k in zip(waits["service"].astype(str), waits["bucket"].astype(str), strict=True)], dtype=bool)
    waits = waits.loc[keep].reset_index(drop=True)
    waits["d"] = np.array([d_of[(str(s), str(b))] for s, b in zip(waits["service"], waits["bucket"], strict=True)], dtype=int)
    waits["w"] = np.arange(len(waits))
    lam_peak = dem["rate_peak_per_s"].to_numpy(float)
    lam_mean = dem["rate_mean_per_s"].to_numpy(float)
    waits["rate_peak_per_s"] = lam_peak[waits["d"].to_numpy(int)] if len(waits) else []
    waits["rate_mean_per_s"] = lam_mean[waits["d"].to_numpy(int)] if len(waits) else []
    waits["sessions_mean"] = waits["rate_peak_per_s"] * waits["calls_per_request"] * waits["wait_mean_s"]
    waits["tail"] = [tail_factor(None if (q is None or (isinstance(q, float) and math.isnan(q))) else float(q), float(m))
                     for q, m in zip(waits["tail_quantile"], waits["sessions_mean"], strict=True)]
    waits["kv_coef"] = waits["calls_per_request"] * waits["wait_mean_s"] * waits["kv_bytes_per_session"] * waits["tail"]
    waits["tier_gb_coef"] = waits["kv_coef"] / 1e9
    tier_available = params.tier_usd_per_gb_month is not None or len(agents.cpu_servers) > 0

    ap = agents.points.set_index(["service", "bucket", "role", "config"])
    keys = list(zip(pts["service"].astype(str), pts["bucket"].astype(str), pts["role"].astype(str), pts["config"].astype(str), strict=True))
    has = [k in ap.index for k in keys]
    col = {c: np.array([float(ap.at[k, c]) if h else math.nan for k, h in zip(keys, has, strict=True)])  # type: ignore[arg-type]
           for c in ("kv_capacity_bytes", "reload_s", "reload_ms_rep", "recompute_s", "recompute_ms_rep")}
    reason = [str(ap.at[k, "offload_reason"]) if h else "no tool-phase data for this point" for k, h in zip(keys, has, strict=True)]

    # KV capacity of decode/unified pools from the perf memory fit (when the table has none).
    pools = prep.pools
    pool_pos = {p: j for j, p in enumerate(pools["pool"])}
    point_pool = np.array([pool_pos[p] for p in pts["pool"]], dtype=int) if len(pts) else np.zeros(0, dtype=int)
    kvcap = pools["kv_capacity_bytes"].to_numpy(float).copy()
    for i in range(len(pts)):
        p = point_pool[i]
        if pools["role"].iat[p] != "prefill" and kvcap[p] <= 0 and not math.isnan(col["kv_capacity_bytes"][i]) and col["kv_capacity_bytes"][i] > 0:
            kvcap[p] = col["kv_capacity_bytes"][i]
    pools["kv_capacity_bytes"] = kvcap

    role = pts["role"].to_numpy(str)
    d_pt = pts["d"].to_numpy(int)
    rho = pts["rho"].to_numpy(float)
    tp = pts["tp"].to_numpy(float)
    busy_w = pts["config"].map(cfg["busy_power_w"]).to_numpy(float)
    idle_w = pts["config"].map(cfg["idle_power_w"]).to_numpy(float)
    ttft = pts["ttft_ms"].to_numpy(float)
    target = pts["ttft_target_ms"].to_numpy(float)
    batch = pts["max_batch"].to_numpy(float)
    # the context the TTFT check's reload / recompute times are at (the bucket's representative lengths), named in
    # its reasons: the tool table's reload / recompute ms are request-weighted means at the buckets' mean lengths
    ctx_rep = (dem["input_tokens_rep"].to_numpy(float) + dem["output_tokens_rep"].to_numpy(float)) if len(dem) else np.zeros(0)
    pts_of_d: dict[int, list[int]] = {}
    for i in range(len(pts)):
        pts_of_d.setdefault(int(d_pt[i]), []).append(i)

    hold: list[tuple[int, int, float]] = []
    pf_rows: list[dict[str, Any]] = []
    wrows: list[Any] = list(waits.itertuples(index=False))
    for w in wrows:
        allowed = set(str(w.policies).split(",")) if w.policies else set()
        for i in pts_of_d.get(int(w.d), []):
            if role[i] in ("decode", "unified") and "hold" in allowed and kvcap[point_pool[i]] > 0:
                hold.append((int(w.w), i, float(w.kv_coef)))
            if role[i] in ("prefill", "unified"):
                rl, rc = col["reload_s"][i], col["recompute_s"][i]
                why = []
                off_ok = "offload" in allowed and tier_available and not reason[i] and math.isfinite(rl)
                if "offload" in allowed and not tier_available:
                    why.append("no KV tier (no tool_phase.kv_tier.usd_per_gb_month and no CPU server)")
                elif "offload" in allowed and reason[i]:
                    why.append(reason[i])
                if off_ok and ttft[i] + col["reload_ms_rep"][i] > target[i]:
                    off_ok = False
                    why.append(f"reload {col['reload_ms_rep'][i]:,.0f} ms ({ctx_rep[d_pt[i]]:,.0f} tokens) + {ttft_words(role[i], batch[i], ttft[i])} > target {target[i]:,.0f} ms")
                rec_ok = "recompute" in allowed and math.isfinite(rc)
                if rec_ok and ttft[i] + col["recompute_ms_rep"][i] > target[i]:
                    rec_ok = False
                    why.append(f"recompute {col['recompute_ms_rep'][i]:,.0f} ms ({ctx_rep[d_pt[i]]:,.0f} tokens) + {ttft_words(role[i], batch[i], ttft[i])} > target {target[i]:,.0f} ms")
                c = float(w.calls_per_request)
                pf_rows.append({
                    "w": int(w.w), "j": i, "off_ok": off_ok, "rec_ok": rec_ok,
                    "rl_load": c * (rl if math.isfinite(rl) else 0.0) * params.reload_busy_share / rho[i],
                    "rc_load": c * (rc if math.isfinite(rc) else 0.0) / rho[i],
                    "rl_energy_j": c * (rl if math.isfinite(rl) else 0.0) * params.reload_busy_share * tp[i] * max(busy_w[i] - idle_w[i], 0.0),
                    "rc_energy_j": c * (rc if math.isfinite(rc) else 0.0) * tp[i] * max(busy_w[i] - idle_w[i], 0.0),
                    "reload_ms_rep": col["reload_ms_rep"][i], "recompute_ms_rep": col["recompute_ms_rep"][i],
                    "reload_s": rl, "recompute_s": rc, "reason": "; ".join(why), "rho": float(rho[i]),
                })
    pf = pd.DataFrame(pf_rows, columns=["w", "j", "off_ok", "rec_ok", "rl_load", "rc_load", "rl_energy_j", "rc_energy_j",
                                        "reload_ms_rep", "recompute_ms_rep", "reload_s", "recompute_s", "reason", "rho"])

    d_w_arr = waits["d"].to_numpy(int) if len(waits) else np.zeros(0, dtype=int)
    # Widen the big-M of every pool the block loads: all waits held / recomputed there at share 1.
    n_max = pools["n_max"].to_numpy(int).copy()
    extra = np.zeros(len(pools))
    kvbase = np.bincount(point_pool, weights=pts["kv_peak_coef"].to_numpy(float), minlength=len(pools)) if len(pts) else np.zeros(len(pools))
    for w_, i, k in hold:
        extra[point_pool[i]] += lam_peak[int(d_w_arr[w_])] * k
    for p in range(len(pools)):
        if kvcap[p] > 0:
            n_max[p] += math.ceil((kvbase[p] + extra[p]) / kvcap[p] + 1e-9)
    load_extra = np.zeros(len(pools))
    pfrows: list[Any] = list(pf.itertuples(index=False))
    for r in pfrows:
        load_extra[point_pool[int(r.j)]] += lam_peak[int(d_w_arr[int(r.w)])] * max(float(r.rl_load), float(r.rc_load))
    n_max += np.ceil(load_extra + 1e-9).astype(int)
    pools["n_max"] = n_max

    # CPU work per LLM call: tokenisation + tool calls (with retries).
    cpu_req = np.zeros(len(dem))
    cd = agents.cpu_demand
    for s, b, v in zip(cd["service"], cd["bucket"], cd["tokenizer_cpu_s_per_request"], strict=True):
        if (str(s), str(b)) in d_of:
            cpu_req[d_of[(str(s), str(b))]] += float(v)
    for w in wrows:
        cpu_req[int(w.d)] += float(w.calls_per_request) * (1.0 + float(w.retry_share)) * float(w.cpu_s_per_call)
    servers = agents.cpu_servers.reset_index(drop=True)
    cores_peak = float(np.sum(lam_peak * cpu_req))
    tier_max = float(np.sum(waits["rate_peak_per_s"] * waits["tier_gb_coef"])) if len(waits) else 0.0
    cpu_n_max = []
    srows: list[Any] = list(servers.itertuples(index=False))
    for s in srows:
        by_cores = math.ceil(cores_peak / (float(s.cores) * params.cpu_utilization_cap)) if float(s.cores) > 0 else 0
        by_mem = math.ceil(tier_max / (float(s.memory_gb) * params.tier_memory_utilization)) if params.tier_usd_per_gb_month is None and float(s.memory_gb) > 0 else 0
        cpu_n_max.append(by_cores + by_mem + 1 + redundancy_hint)
    notes = list(params.notes)
    return ToolPrep(waits=waits, hold=hold, pf=pf, cpu_servers=servers, cpu_s_per_request=cpu_req, params=params,
                    tier_available=tier_available, cpu_n_max=cpu_n_max, notes=notes)


def refresh_caps(tool: ToolPrep, points: pd.DataFrame) -> ToolPrep:
    """``tool`` with the reload / recompute load coefficients at the points' current caps.

    ``ℓ^{rl}_{w,j}`` and ``ℓ^{rc}_{w,j}`` carry ``1/ρ_j``; when the latency check tightens the
    caps (:func:`planner.optimize.tighten.tighten_prepared` divides ``ρ`` by a factor) they must
    grow by ``ρ_old / ρ_new`` like the points' own load coefficients, else the re-solved plan
    underestimates the prefill load of reloads and recomputes. Energy and masks do not depend
    on ``ρ``. Call it on the tightened points: ``replace(prep, ..., tool=refresh_caps(prep.tool, pts))``.
    """
    if not len(tool.pf):
        return tool
    pf = tool.pf.copy()
    new_rho = points["rho"].to_numpy(float)[pf["j"].to_numpy(int)]
    scale = pf["rho"].to_numpy(float) / new_rho
    pf["rl_load"] = pf["rl_load"].to_numpy(float) * scale
    pf["rc_load"] = pf["rc_load"].to_numpy(float) * scale
    pf["rho"] = new_rho
    return replace(tool, pf=pf)
