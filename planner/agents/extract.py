"""From a solved model to the tool-phase section of a plan (:class:`ToolPhasePlan`) and its cost terms.

At the solution (``x`` routing, ``hold/off/rec`` policy shares, ``n_cpu``):

- per (service, tool): shares = Σ over its waits and points, weighted by the wait rate
  ``λ_peak(d) c_t``; sessions in wait = Σ_d λ_peak c W̄ (mean) and × tail (planned);
  reload / recompute ms = routed-share-weighted over the next turn's prefill points (means);
- cost of each alternative = the (service, tool)'s waits all under one policy, the rest of the
  plan fixed: its KV bytes, instance load and tier GB replace the row's current use, and what
  exceeds the plan's slack is priced at the pool's monthly cost per instance ``c^{inst}_p``
  (equipment, idle power, ops, licences, NIC; per byte of KV capacity for memory), the tier
  price ``p^{GB}`` (or the cheapest CPU server's monthly cost per usable GB when the tier lives
  there), plus busy-minus-idle energy. Continuous: pools are not re-rounded, so this is the
  marginal cost, not a re-solve;
- break-even wait ``W* = C / (A_h − A_o)`` with ``A_h``, ``A_o`` the hold and tier costs per
  second of wait with every byte priced (no slack) and ``C`` the reload cost (:func:`planner.agents.economics.breakeven_wait_s`);
- cost terms: ``cpu_pool`` (servers, pool ops, busy energy of the used cores),
  ``kv_tier`` (``p^{GB}`` × GB needed, priced tier), ``tool_state_energy`` (reloads and
  recomputes, busy minus idle power).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.agents.economics import breakeven_wait_s, instance_usd_per_month
from planner.schema.plan import (
    CpuPoolPlan,
    LatencyPrediction,
    ToolPhasePlan,
    ToolPhaseRow,
    ToolPolicyCost,
)
from planner.units import J_PER_KWH, SECONDS_PER_HOUR

DOMINANT_SHARE = 0.5
"""Tool waiting 'dominates' a service when it is more than this share of a session's time."""


def _val(v: Any) -> float:
    return float(v.value or 0.0) if v.value is not None else 0.0


def pool_usd_per_instance_month(prep: Any) -> np.ndarray:
    """Monthly cost of one more instance of each pool (equipment, idle power, ops, licences, NIC)."""
    c = prep.tables.costs
    cfg = prep.tables.configs.drop_duplicates("config").set_index("config")
    kwh = float(c.electricity_usd_per_kwh) * float(c.pue)
    out = []
    for r in prep.pools.itertuples(index=False):
        row = cfg.loc[str(r.config)]
        out.append(instance_usd_per_month(
            tp=float(r.tp), equipment_usd_per_device_hour=float(row["equipment_usd_per_device_hour"]), hours_per_month=float(c.hours_per_month),
            ops_usd_per_device_month=float(row["ops_usd_per_device_month"]), license_usd_per_device_month=float(row["license_usd_per_device_month"]),
            nic_usd_per_device_month=float(c.nic_usd_per_device_month) if bool(r.sends_kv) else 0.0,
            idle_w_per_device=float(row["idle_power_w"]) + float(row["host_power_w"]), usd_per_kwh_facility=kwh))
    return np.array(out, dtype=float)


def cpu_server_rates(prep: Any) -> tuple[list[float], float]:
    """Per CPU server type: monthly cost per server (equipment, idle + host power, ops, licences);
    and the busy-minus-idle power per busy core (largest over the candidates), W."""
    c = prep.tables.costs
    H = float(c.hours_per_month)
    kwh = float(c.electricity_usd_per_kwh) * float(c.pue)
    srv = prep.tool.cpu_servers
    rates = [float(r.equipment_usd_per_server_hour) * H + float(r.ops_usd_per_server_month) + float(r.license_usd_per_server_month)
             + (float(r.idle_power_w) + float(r.host_power_w)) / 1e3 * H * kwh for r in srv.itertuples(index=False)]
    per_core = max((max(float(r.busy_power_w) - float(r.idle_power_w), 0.0) / float(r.cores) for r in srv.itertuples(index=False) if float(r.cores) > 0), default=0.0)
    return rates, per_core


def tool_phase_plan(built: Any, x: np.ndarray, n: np.ndarray, redundancy: int) -> tuple[ToolPhasePlan, dict[str, float], dict[str, float]]:
    """The tool-phase section, its three cost terms, and per service the extra TTFT (ms) of reloads / recomputes."""
    m = built.model
    prep = built.prep
    tool = prep.tool
    pts = prep.points
    costs = prep.tables.costs
    H = float(costs.hours_per_month)
    kwh = float(costs.electricity_usd_per_kwh) * float(costs.pue)
    waits = tool.waits
    pf = tool.pf
    params = tool.params
    inst_month = pool_usd_per_instance_month(prep)
    lam_peak_d = prep.demand["rate_peak_per_s"].to_numpy(float)
    lam_mean_d = prep.demand["rate_mean_per_s"].to_numpy(float)

    hold_v = np.array([_val(m.hold[h]) for h in range(len(tool.hold))])
    off_v = np.array([_val(m.toff[r]) for r in range(len(pf))])
    rec_v = np.array([_val(m.trec[r]) for r in range(len(pf))])
    for arr in (hold_v, off_v, rec_v):
        np.clip(arr, 0.0, 1.0, out=arr)
        arr[arr < 1e-7] = 0.0
    pf_w = pf["w"].to_numpy(int)
    pf_j = pf["j"].to_numpy(int)
    srv = tool.cpu_servers
    rates, per_core_w = cpu_server_rates(prep) if len(srv) else ([], 0.0)
    mem_u = params.tier_memory_utilization
    if params.tier_usd_per_gb_month is not None:
        gb_price: float | None = float(params.tier_usd_per_gb_month)
    elif len(srv):
        gb_price = min(rates[c] / (float(srv["memory_gb"].iat[c]) * mem_u) for c in range(len(srv)) if float(srv["memory_gb"].iat[c]) > 0)
    else:
        gb_price = None
    e_f = kwh * SECONDS_PER_HOUR * H / J_PER_KWH

    hold_w = np.zeros(len(waits))
    off_w = np.zeros(len(waits))
    rec_w = np.zeros(len(waits))
    for h, (w, _i, _k) in enumerate(tool.hold):
        hold_w[w] += hold_v[h]
    np.add.at(off_w, pf_w, off_v)
    np.add.at(rec_w, pf_w, rec_v)

    rows: list[ToolPhaseRow] = []
    extra_ttft: dict[str, float] = {}
    energy_total = 0.0
    tier_gb = 0.0
    for r in range(len(pf)):
        w = int(pf_w[r])
        d = int(waits["d"].iat[w])
        energy_total += lam_mean_d[d] * e_f * (float(pf["rl_energy_j"].iat[r]) * off_v[r] + float(pf["rc_energy_j"].iat[r]) * rec_v[r])
        tier_gb += lam_peak_d[d] * float(waits["tier_gb_coef"].iat[w]) * off_v[r]
        if off_v[r] > 0 or rec_v[r] > 0:
            svc = str(waits["service"].iat[w])
            add = max(float(pf["reload_ms_rep"].iat[r]) if off_v[r] > 0 else 0.0, float(pf["recompute_ms_rep"].iat[r]) if rec_v[r] > 0 else 0.0)
            extra_ttft[svc] = max(extra_ttft.get(svc, 0.0), add)

    ctx = _slack_context(built, x, n, redundancy, hold_v, off_v, rec_v, inst_month, gb_price, tier_gb, e_f)
    for (svc, tname), grp in waits.groupby(["service", "tool"], sort=True):
        ws = grp["w"].to_numpy(int)
        rate = grp["rate_peak_per_s"].to_numpy(float) * grp["calls_per_request"].to_numpy(float)
        wt = rate / rate.sum() if rate.sum() > 0 else np.full(len(ws), 1.0 / max(len(ws), 1))
        first = grp.iloc[0]
        sel_pf = np.isin(pf_w, ws)
        xw = np.array([x[int(j)] * lam_peak_d[int(pts["d"].iat[int(j)])] for j in pf_j[sel_pf]])
        on = xw > 0  # an unrouted point's time may be inf (no link to reload over): 0 x inf is not 0 in floats
        reload_ms = float(np.sum(xw[on] * pf["reload_s"].to_numpy(float)[sel_pf][on] * 1e3) / xw.sum()) if xw.sum() > 0 else math.nan
        recompute_ms = float(np.sum(xw[on] * pf["recompute_s"].to_numpy(float)[sel_pf][on] * 1e3) / xw.sum()) if xw.sum() > 0 else math.nan
        # Alternatives: this (service, tool)'s waits all under one policy, the rest of the plan fixed;
        # priced as the extra capacity beyond the plan's slack (module docstring).
        hold_c, off_c, rec_c, off_reason, rec_reason, hold_reason, tier_part, reload_part, hold_lin = _alternatives(
            ctx, ws, set(int(v) for v in grp["d"]), str(first["policies"]))
        wait_mean = float(first["wait_mean_s"])
        be: float | None = None
        if hold_c is not None and off_c is not None and wait_mean > 0:
            be_v = breakeven_wait_s(1.0, hold_lin / wait_mean, tier_part / wait_mean, reload_part)
            be = be_v if math.isfinite(be_v) else None
        hs, os_, rs = (float(np.sum(wt * hold_w[ws])), float(np.sum(wt * off_w[ws])), float(np.sum(wt * rec_w[ws])))
        shares = {"hold": hs, "offload": os_, "recompute": rs}
        top = max(shares, key=lambda k: shares[k])
        policy = top if shares[top] >= 1 - 1e-6 else "mixed: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items() if v > 1e-6)
        sessions_mean = float(np.sum(grp["sessions_mean"]))
        rows.append(ToolPhaseRow(
            service=str(svc), tool=str(tname), calls_per_request=float(first["calls_per_request"]),
            calls_per_s_peak=float(rate.sum()), latency_mean_ms=float(first["latency_mean_ms"]), latency_p50_ms=float(first["latency_p50_ms"]),
            latency_p90_ms=float(first["latency_p90_ms"]), latency_p99_ms=float(first["latency_p99_ms"]),
            timeout_share=float(first["timeout_share"]), retry_share=float(first["retry_share"]), error_share=float(first["error_share"]),
            wait_mean_s=wait_mean, kv_bytes_per_session=float(np.sum(wt * grp["kv_bytes_per_session"].to_numpy(float))),
            sessions_in_wait_mean=sessions_mean, sessions_in_wait_peak=float(np.sum(grp["sessions_mean"] * grp["tail"])),
            reload_ms=reload_ms, recompute_ms=recompute_ms, hold_share=hs, offload_share=os_, recompute_share=rs, policy=policy,
            breakeven_wait_s=be,
            alternatives=[ToolPolicyCost(policy="hold", usd_per_month=hold_c, reason=hold_reason),
                          ToolPolicyCost(policy="offload", usd_per_month=off_c, reason=off_reason),
                          ToolPolicyCost(policy="recompute", usd_per_month=rec_c, reason=rec_reason)],
            cpu_cores_peak=float(np.sum(rate * (1.0 + grp["retry_share"].to_numpy(float)) * grp["cpu_s_per_call"].to_numpy(float))),
        ))

    # CPU pool.
    sigma = tool.cpu_s_per_request
    cores_peak = float(np.sum(lam_peak_d * sigma))
    cores_mean = float(np.sum(lam_mean_d * sigma))
    tok_peak = cores_peak - sum(r.cpu_cores_peak for r in rows)
    n_cpu = np.array([round(_val(m.n_cpu[c])) for c in range(len(srv))], dtype=int) if len(srv) else np.zeros(0, dtype=int)
    cap_cores = np.array([float(srv["cores"].iat[c]) * max(int(n_cpu[c]) - redundancy, 0) for c in range(len(srv))])
    cap_mem = np.array([float(srv["memory_gb"].iat[c]) * mem_u * max(int(n_cpu[c]) - redundancy, 0) for c in range(len(srv))])
    cpu_pools: list[CpuPoolPlan] = []
    cpu_cost = 0.0
    for c in range(len(srv)):
        if n_cpu[c] <= 0:
            continue
        share = cap_cores[c] / cap_cores.sum() if cap_cores.sum() > 0 else 0.0
        need = cores_peak * share
        cost_c = rates[c] * int(n_cpu[c]) + float(costs.ops_usd_per_pool_month)
        cpu_cost += cost_c
        cpu_pools.append(CpuPoolPlan(
            server=str(srv["server"].iat[c]), instances=int(n_cpu[c]), cores_per_server=int(srv["cores"].iat[c]),
            memory_gb_per_server=float(srv["memory_gb"].iat[c]), cores_needed_peak=need,
            utilization_peak=need / (float(srv["cores"].iat[c]) * int(n_cpu[c])), utilization_cap=float(params.cpu_utilization_cap),
            kv_tier_gb=(tier_gb * cap_mem[c] / cap_mem.sum() if cap_mem.sum() > 0 else 0.0) if params.tier_usd_per_gb_month is None else 0.0,
            redundancy=redundancy, equipment_usd_per_server_hour=float(srv["equipment_usd_per_server_hour"].iat[c]),
            cost_usd_per_month=cost_c,
        ))
    busy_energy = kwh * per_core_w * H / 1e3 * cores_mean if len(srv) else 0.0
    cpu_cost += busy_energy
    tier_cost = float(params.tier_usd_per_gb_month) * tier_gb if params.tier_usd_per_gb_month is not None else 0.0
    terms = {"cpu_pool_usd_per_month": cpu_cost, "kv_tier_usd_per_month": tier_cost, "tool_state_energy_usd_per_month": energy_total}

    statements = _statements(built, x, rows)
    section = ToolPhasePlan(
        tools=rows, cpu_pools=cpu_pools, kv_tier_gb=tier_gb, kv_tier_usd_per_gb_month=params.tier_usd_per_gb_month,
        kv_tier_location=params.tier_location, cpu_cores_peak=cores_peak, tokenizer_cores_peak=max(tok_peak, 0.0), statements=statements,
        method=("sessions in wait: Little's law at peak (rate x calls per LLM call x mean wait with retries), planned at the Poisson (M/G/inf) "
                "quantile of the TTFT quantile level where tool_phase.wait_tail is ttft_quantile; KV per session = bucket-mean context x KV bytes/token; "
                "reload = KV / (KV-split devices x link GB/s); recompute = extra prefill of the dropped context (planner.perf roofline); "
                "alternative costs at the plan's marginal prices (no integer rounding)"),
        inputs={"redundancy": redundancy, "cpu_usd_per_server_month": {str(srv["server"].iat[c]): rates[c] for c in range(len(srv))},
                "cpu_cores_per_server": {str(srv["server"].iat[c]): int(srv["cores"].iat[c]) for c in range(len(srv))},
                "cpu_memory_gb_per_server": {str(srv["server"].iat[c]): float(srv["memory_gb"].iat[c]) for c in range(len(srv))},
                "ops_usd_per_pool_month": float(costs.ops_usd_per_pool_month), "cpu_busy_energy_usd_per_month": busy_energy,
                "tier_memory_utilization": mem_u, "tool_state_energy_usd_per_month": energy_total},
    )
    return section, terms, extra_ttft


def _statements(built: Any, x: np.ndarray, rows: list[ToolPhaseRow]) -> list[str]:
    """Where tool waiting dominates a session: say that accelerators would not help, and what would."""
    prep = built.prep
    pts = prep.points
    out: list[str] = []
    dem = prep.demand
    for svc, drows in dem.groupby("service", sort=False):
        trs = [r for r in rows if r.service == svc]
        if not trs:
            continue
        w_d = drows["rate_mean_per_s"].to_numpy(float)
        w_d = w_d / w_d.sum() if w_d.sum() > 0 else np.full(len(w_d), 1.0 / len(w_d))
        llm_s = 0.0
        for wd, d in zip(w_d, drows["d"].to_numpy(int), strict=True):
            sel = (pts["d"].to_numpy(int) == d) & (x > 0)
            first = sel & pts["role"].isin(["prefill", "unified"]).to_numpy()
            dec = sel & pts["role"].isin(["decode", "unified"]).to_numpy()
            ttft = float(np.sum(x[first] * pts["ttft_ms"].to_numpy(float)[first])) / 1e3
            tpot = float(np.sum(x[dec] * pts["tpot_ms"].to_numpy(float)[dec])) / 1e3
            llm_s += wd * (ttft + float(dem["output_tokens_mean"].iat[d]) * tpot)
        tool_s = sum(r.calls_per_request * r.wait_mean_s for r in trs)
        share = tool_s / (tool_s + llm_s) if tool_s + llm_s > 0 else 0.0
        top = max(trs, key=lambda r: r.calls_per_request * r.wait_mean_s)
        if share > DOMINANT_SHARE:
            out.append(
                f"{svc}: tool waiting dominates — {tool_s:.1f} s of tool wait per LLM call against {llm_s:.1f} s of LLM time "
                f"({share:.0%} of a session). More accelerators would not help: they can shorten only the LLM part "
                f"(at most {1 - share:.0%} of session time). What would: faster tools ({top.tool} contributes "
                f"{top.calls_per_request * top.wait_mean_s:.1f} s per call, p50 {top.latency_p50_ms / 1e3:.1f} s, p99 {top.latency_p99_ms / 1e3:.1f} s), "
                f"running independent tool calls in parallel, caching tool results, fewer retries and tighter timeouts.")
        else:
            out.append(f"{svc}: tool waiting is {share:.0%} of a session ({tool_s:.1f} s per LLM call against {llm_s:.1f} s of LLM time); the LLM pools set the pace.")
        for r in trs:
            be = f"break-even wait {r.breakeven_wait_s:.2f} s" if r.breakeven_wait_s is not None else "no hold/offload break-even"
            why = ""
            alt = {a.policy: a.usd_per_month for a in r.alternatives}
            if r.hold_share > 0.5 and r.breakeven_wait_s is not None and r.wait_mean_s > r.breakeven_wait_s and alt.get("hold") == 0.0:
                why = " — held although the wait is past the break-even: the decode pools have spare KV memory at peak, so holding costs nothing extra"
            out.append(f"{svc}/{r.tool}: mean wait {r.wait_mean_s:.2f} s, {be} (every held byte priced): policy {r.policy}{why}.")
    return out


def adjust_latency(latency: list[LatencyPrediction], extra_ttft_ms: dict[str, float]) -> list[LatencyPrediction]:
    """Add the reload / recompute time to the TTFT of services whose waits are offloaded or recomputed (conservative: every turn)."""
    out = []
    for lp in latency:
        add = extra_ttft_ms.get(lp.service, 0.0)
        if add > 0:
            t = lp.ttft_predicted_ms + add
            lp = lp.model_copy(update={"ttft_predicted_ms": t, "ttft_met": bool(t <= lp.ttft_target_ms * (1 + 1e-6)), "ttft_added_ms": add,
                                       "method": lp.method + f"; + {add:.0f} ms KV reload / recompute after tool waits"})
        out.append(lp)
    return out


def _slack_context(built: Any, x: np.ndarray, n: np.ndarray, redundancy: int, hold_v: np.ndarray, off_v: np.ndarray,
                   rec_v: np.ndarray, inst_month: np.ndarray, gb_price: float | None, tier_gb: float, e_f: float) -> dict[str, Any]:
    """Used and available KV bytes and load per pool, and tier capacity, at the plan."""
    prep = built.prep
    tool = prep.tool
    pts = prep.points
    pools = prep.pools
    pool_pos = {p: j for j, p in enumerate(pools["pool"])}
    pool_of_pt = np.array([pool_pos[p] for p in pts["pool"]], dtype=int) if len(pts) else np.zeros(0, dtype=int)
    lam_peak = pts["rate_peak_per_s"].to_numpy(float)
    kv_used = np.bincount(pool_of_pt, weights=pts["kv_peak_coef"].to_numpy(float) * x, minlength=len(pools))
    load_used = np.bincount(pool_of_pt, weights=lam_peak * pts["instance_seconds_per_request"].to_numpy(float) / pts["rho"].to_numpy(float) * x,
                            minlength=len(pools))
    lam_d = prep.demand["rate_peak_per_s"].to_numpy(float)
    d_w = tool.waits["d"].to_numpy(int)
    for h, (w, i, k) in enumerate(tool.hold):
        kv_used[pool_of_pt[i]] += lam_d[d_w[w]] * k * hold_v[h]
    pf = tool.pf
    if len(pf):
        load_used += np.bincount(pool_of_pt[pf["j"].to_numpy(int)], minlength=len(pools),
                                 weights=lam_d[d_w[pf["w"].to_numpy(int)]] * (pf["rl_load"].to_numpy(float) * off_v + pf["rc_load"].to_numpy(float) * rec_v))
    avail = np.maximum(n - redundancy, 0).astype(float)
    kv_cap = pools["kv_capacity_bytes"].to_numpy(float) * avail
    srv = tool.cpu_servers
    tier_cap = math.inf
    if tool.params.tier_usd_per_gb_month is None and len(srv):
        n_cpu = np.array([round(_val(built.model.n_cpu[c])) for c in range(len(srv))])
        tier_cap = float(np.sum(srv["memory_gb"].to_numpy(float) * tool.params.tier_memory_utilization * np.maximum(n_cpu - redundancy, 0)))
    return {"tool": tool, "pts": pts, "kvcap_inst": pools["kv_capacity_bytes"].to_numpy(float),
            "tier_priced": tool.params.tier_usd_per_gb_month is not None, "lam_mean_d": prep.demand["rate_mean_per_s"].to_numpy(float),
            "x": x, "hold_v": hold_v, "off_v": off_v, "rec_v": rec_v, "pool_of_pt": pool_of_pt, "kv_used": kv_used, "kv_cap": kv_cap,
            "load_used": load_used, "avail": avail, "inst_month": inst_month, "gb_price": gb_price, "tier_gb": tier_gb,
            "tier_cap": tier_cap, "e_f": e_f, "lam_d": lam_d, "d_w": d_w,
            "hold_arr": (np.array([h[0] for h in tool.hold], dtype=int), np.array([h[1] for h in tool.hold], dtype=int),
                         np.array([h[2] for h in tool.hold], dtype=float)),
            "pf_arr": {"w": pf["w"].to_numpy(int), "j": pf["j"].to_numpy(int), "rl_load": pf["rl_load"].to_numpy(float),
                       "rc_load": pf["rc_load"].to_numpy(float), "off_ok": pf["off_ok"].to_numpy(bool), "rec_ok": pf["rec_ok"].to_numpy(bool),
                       "reason": pf["reason"].astype(str).to_numpy(), "rl_energy_j": pf["rl_energy_j"].to_numpy(float),
                       "rc_energy_j": pf["rc_energy_j"].to_numpy(float)},
            "gb_coef": tool.waits["tier_gb_coef"].to_numpy(float)}


PARTLY = "not for every wait"
"""How an alternative's reason begins when some of the tool's routed points allow the policy and some do not: the
plan can use it on part of its routing (agentic-assistant's shared plan offloads 24 % of WebSearch's waits on its tp4
pool while its tp2 pool's TTFT at a full batch leaves no room for a reload), so "not possible" would contradict it."""


def _partly(reason: str, some_allow: bool) -> str:
    """``reason`` for a policy that not every routed point allows; said as partial when some do."""
    return f"{PARTLY}: {reason} (the rest of its routing can)" if some_allow else reason


def _alternatives(ctx: dict[str, Any], ws: np.ndarray, ds: set[int], policies: str) -> tuple[Any, ...]:
    """Cost (USD/month) of holding / offloading / recomputing all waits of one (service, tool), the rest of the plan fixed.

    Each alternative removes the row's current use of KV memory, instance load and tier and adds
    its use under the policy; the cost is the capacity needed beyond the plan's slack at each
    pool's per-instance price (KV: per byte of instance capacity), the tier's price per GB and
    the busy-minus-idle energy. Also returns the tier and reload parts and the linear hold cost
    (every held byte priced, no slack) used for the break-even wait.
    """
    x = ctx["x"]
    pool_of_pt, lam_d, d_w = ctx["pool_of_pt"], ctx["lam_d"], ctx["d_w"]
    kvcap_inst = ctx["kvcap_inst"]
    inst_month = ctx["inst_month"]
    n_pool = len(inst_month)
    allowed = set(policies.split(",")) if policies else set()
    # current use by this row (flat arrays; no per-row DataFrame lookups)
    hw, hi, hk = ctx["hold_arr"]
    hsel = np.isin(hw, ws)
    lam_h = lam_d[d_w[hw[hsel]]] * hk[hsel]
    kv_now = np.bincount(pool_of_pt[hi[hsel]], weights=lam_h * ctx["hold_v"][hsel], minlength=n_pool)
    kv_all = np.bincount(pool_of_pt[hi[hsel]], weights=lam_h * x[hi[hsel]], minlength=n_pool)
    a = ctx["pf_arr"]
    sel = np.nonzero(np.isin(a["w"], ws))[0]
    w_r, j_r = a["w"][sel], a["j"][sel]
    p_r = pool_of_pt[j_r]
    lam_r = lam_d[d_w[w_r]]
    gbc = ctx["gb_coef"][w_r]
    rl, rc = a["rl_load"][sel], a["rc_load"][sel]
    load_now = np.bincount(p_r, weights=lam_r * (rl * ctx["off_v"][sel] + rc * ctx["rec_v"][sel]), minlength=n_pool)
    gb_now = float(np.sum(lam_r * gbc * ctx["off_v"][sel]))
    xj = x[j_r]
    routed = xj > 0
    off_reason, rec_reason = "", ""
    off_ok_all, rec_ok_all = "offload" in allowed, "recompute" in allowed
    off_bad = np.nonzero(routed & ~a["off_ok"][sel])[0]
    if len(off_bad):
        off_ok_all = False
        off_reason = _partly(str(a["reason"][sel[off_bad[0]]]) or "not allowed", bool(np.any(routed & a["off_ok"][sel])))
    rec_bad = np.nonzero(routed & ~a["rec_ok"][sel])[0]
    if len(rec_bad):
        rec_ok_all = False
        rec_reason = _partly(str(a["reason"][sel[rec_bad[0]]]) or "not allowed", bool(np.any(routed & a["rec_ok"][sel])))
    xr = np.where(routed, xj, 0.0)
    load_rl = np.bincount(p_r, weights=xr * lam_r * rl, minlength=n_pool)
    load_rc = np.bincount(p_r, weights=xr * lam_r * rc, minlength=n_pool)
    gb_all = float(np.sum(xr * lam_r * gbc))
    lam_mean_r = ctx["lam_mean_d"][d_w[w_r]]
    e_rl = float(np.sum(xr * lam_mean_r * ctx["e_f"] * a["rl_energy_j"][sel]))
    e_rc = float(np.sum(xr * lam_mean_r * ctx["e_f"] * a["rc_energy_j"][sel]))
    if not off_reason and "offload" in allowed and ctx["gb_price"] is None:
        off_ok_all, off_reason = False, "no KV tier"
    kv_base = ctx["kv_used"] - kv_now
    load_base = ctx["load_used"] - load_now
    with np.errstate(divide="ignore", invalid="ignore"):
        per_byte = np.where(kvcap_inst > 0, inst_month / kvcap_inst, 0.0)

    def kv_cost(add: np.ndarray) -> float:
        return float(np.sum(per_byte * np.maximum(kv_base + add - ctx["kv_cap"], 0.0) * (add > 0)))

    def load_cost(add: np.ndarray) -> float:
        return float(np.sum(inst_month * np.maximum(load_base + add - ctx["avail"], 0.0) * (add > 0)))

    hold_reason = ""
    if "hold" not in allowed:
        hold_c: float | None = None
        hold_reason = "not allowed"
    else:
        hold_c = kv_cost(kv_all)
    hold_lin = float(np.sum(per_byte * kv_all))
    tier_base = ctx["tier_gb"] - gb_now
    gb_price = ctx["gb_price"] or 0.0
    if ctx["tier_priced"]:
        tier_part = gb_all * gb_price
    else:
        tier_part = max(tier_base + gb_all - ctx["tier_cap"], 0.0) * gb_price
    reload_lin = float(np.sum(inst_month * load_rl)) + e_rl
    off_c = tier_part + load_cost(load_rl) + e_rl if off_ok_all else None
    rec_c = load_cost(load_rc) + e_rc if rec_ok_all else None
    return hold_c, off_c, rec_c, off_reason, rec_reason, hold_reason, gb_all * gb_price, reload_lin, hold_lin


# --- energy and KV of the tool phase, for the plan's totals (planner.optimize.extract) -------
def tool_phase_energy_kwh_per_month(built: Any) -> float:
    r"""Facility energy of the tool phase per month, kWh (0 without agents), at the loaded solution.

    .. math::

        E = η \Big[\sum_c n^{cpu}_c (P^{idle}_c + P^{host}_c) H / 10^3
              + π H / 10^3 \sum_d \lambda^{mean}_d σ_d
              + \frac{3600 H}{3.6\cdot 10^6} \sum_{w,j} \lambda^{mean}_{d(w)} (e^{rl}_{w,j} off_{w,j} + e^{rc}_{w,j} rec_{w,j})\Big]

    ``η`` PUE; the first two terms are the CPU pool (provisioned servers at idle + host power,
    and busy-minus-idle power ``π`` per busy core at the mean load — the energy part of the
    ``cpu_pool`` cost term), the last the reloads and recomputes (busy minus idle power of the
    instances doing them, J per (req/s): ``tool_state_energy``). Each equals its cost term's
    energy divided by the electricity price.
    """
    prep = built.prep
    tool = prep.tool
    if tool is None:
        return 0.0
    m = built.model
    c = prep.tables.costs
    H = float(c.hours_per_month)
    lam_mean = prep.demand["rate_mean_per_s"].to_numpy(float)
    kwh = 0.0
    srv = tool.cpu_servers
    if len(srv) and hasattr(m, "n_cpu"):
        n_cpu = np.array([round(_val(m.n_cpu[k])) for k in range(len(srv))], dtype=float)
        idle_kw = (srv["idle_power_w"].to_numpy(float) + srv["host_power_w"].to_numpy(float)) / 1e3
        kwh += float(np.sum(n_cpu * idle_kw)) * H
        _rates, per_core_w = cpu_server_rates(prep)
        kwh += per_core_w / 1e3 * H * float(np.sum(lam_mean * tool.cpu_s_per_request))
    pf = tool.pf
    if len(pf) and hasattr(m, "toff"):
        d_w = tool.waits["d"].to_numpy(int)
        lam_r = lam_mean[d_w[pf["w"].to_numpy(int)]]
        off = np.clip(np.array([_val(m.toff[r]) for r in range(len(pf))]), 0.0, 1.0)
        rec = np.clip(np.array([_val(m.trec[r]) for r in range(len(pf))]), 0.0, 1.0)
        joules = float(np.sum(lam_r * (pf["rl_energy_j"].to_numpy(float) * off + pf["rc_energy_j"].to_numpy(float) * rec)))
        kwh += joules * SECONDS_PER_HOUR * H / J_PER_KWH
    return kwh * float(c.pue)


def held_kv_bytes_per_pool(built: Any) -> np.ndarray:
    """KV bytes held during tool waits at peak, per pool position (the tool terms of ``kv[p]``): Σ λ_peak κ^hold hold."""
    prep = built.prep
    out = np.zeros(len(prep.pools))
    tool = prep.tool
    if tool is None or not tool.hold or not hasattr(built.model, "hold"):
        return out
    m = built.model
    lam = prep.demand["rate_peak_per_s"].to_numpy(float)
    d_w = tool.waits["d"].to_numpy(int)
    pp = built.point_pool
    for h, (w, i, k) in enumerate(tool.hold):
        out[int(pp[i])] += lam[d_w[w]] * k * min(max(_val(m.hold[h]), 0.0), 1.0)
    return out
