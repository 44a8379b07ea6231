"""Tool-phase tables built from an instance: :func:`build_agent_tables` (called by
:func:`planner.capacity.build_capacity_tables`). The frames, their columns and the
:class:`AgentTables` type are described in :mod:`planner.schema.agents`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from planner.errors import ProblemCollector
from planner.schema.agents import (
    AGENT_POINT_COLUMNS,
    CPU_SERVER_COLUMNS,
    POLICIES,
    WAIT_COLUMNS,
    AgentParams,
    AgentTables,
)

if TYPE_CHECKING:
    from planner.instance import ResolvedInstance

def _prefill_s(inst: Any, eff: Any, n_new: float, cached: float, budget: float) -> float:
    """Prefill time of ``n_new`` tokens after ``cached`` ones in chunks of the token budget (as planner.perf.points)."""
    from planner.perf.roofline import iteration_time

    n_new = max(n_new, 1.0)
    k = math.ceil(n_new / budget)
    chunk = n_new / k
    step = iteration_time(inst, eff, prefill_tokens=chunk, prefill_cached=cached + (n_new - chunk) / 2.0)
    return k * float(step.total_s)


def build_agent_tables(resolved: ResolvedInstance, demand: pd.DataFrame, configs: pd.DataFrame) -> AgentTables | None:
    """The tool-phase tables of an instance, or ``None`` when no service calls tools and no CPU server is a candidate.

    Raises :class:`InputError` for tool profiles the plan cannot use: overrides naming tools
    the profile does not define, CPU work without a CPU server, an unpriced tier without its source.
    """
    from planner.perf.instance_calibration import instance_calibration
    from planner.perf.points import _instance, efficiency_of, engine_calibration
    from planner.perf.roofline import kv_bytes, kv_capacity_bytes, kv_split
    from planner.pricing import equipment_usd_per_device_hour
    from planner.workload import service_profile

    inst = resolved.instance
    calibration, _ref = instance_calibration(resolved)
    tp_opts = inst.tool_phase
    file = str(resolved.path)
    problems = ProblemCollector(file=file)
    profiles = {name: service_profile(resolved, name) for name in inst.services}
    has_tools = any(any(t.calls_per_request > 0 for t in p.tools.values()) for p in profiles.values())
    if not has_tools and not inst.catalog.cpu_servers and not any(s.tool_overrides for s in inst.services.values()):
        return None
    for name, svc in inst.services.items():
        defined = profiles[name].tools
        for tool in svc.tool_overrides:
            if tool not in defined:
                problems.add(f"services.{name}.tool_overrides.{tool}", f"tool {tool!r} is referenced but not defined in the service's tool profile"
                             + (" (from the trace)" if svc.tools_from_trace else f" (services.{name}.tools)"),
                             f"use one of: {', '.join(sorted(defined)) or 'none (the service has no tools)'}; or define it under services.{name}.tools")
        for tool, ov in svc.tool_overrides.items():
            if ov.policies is not None and not set(ov.policies) & set(tp_opts.policies):
                problems.add(f"services.{name}.tool_overrides.{tool}.policies", f"none of {ov.policies} is allowed by tool_phase.policies {tp_opts.policies}",
                             "allow at least one of them in tool_phase.policies")
    tier = tp_opts.kv_tier
    if tier.usd_per_gb_month is not None and not tier.source.strip():
        problems.add("tool_phase.kv_tier.source", "usd_per_gb_month is given without its source", "state where the price per GB-month comes from (quote, cloud price list, assumption and why)")
    if tier.reload_gb_per_s is not None and not tier.source.strip():
        problems.add("tool_phase.kv_tier.source", "reload_gb_per_s is given without its source", "state where the tier bandwidth comes from")
    if tp_opts.tokenizer_cpu_seconds_per_token > 0 and not tp_opts.tokenizer_source.strip():
        problems.add("tool_phase.tokenizer_source", "tokenizer_cpu_seconds_per_token is given without its source", "state where the figure comes from")
    problems.raise_if_any()

    notes: list[str] = []
    wait_rows: list[dict[str, Any]] = []
    cpu_rows: list[dict[str, Any]] = []
    for rec in demand.to_dict("records"):
        service, bucket = str(rec["service"]), str(rec["bucket"])
        svc = inst.services[service]
        model = resolved.models[svc.model]
        ctx = float(rec["input_tokens_mean"]) + float(rec["output_tokens_mean"])
        # Tokenisation covers the new text of a call: the uncached input and the output.
        new_tokens = float(rec["input_tokens_mean"]) * (1.0 - float(rec.get("cached_prefix_share", 0.0) or 0.0)) + float(rec["output_tokens_mean"])
        cpu_rows.append({"service": service, "bucket": bucket,
                         "tokenizer_cpu_s_per_request": tp_opts.tokenizer_cpu_seconds_per_token * new_tokens})
        for tool, st in sorted(profiles[service].tools.items()):
            if st.calls_per_request <= 0:
                continue
            ovr = svc.tool_overrides.get(tool)
            retry = ovr.retry_share if ovr and ovr.retry_share is not None else st.retry_share
            timeout = ovr.timeout_share if ovr and ovr.timeout_share is not None else st.timeout_share
            cpu_s = ovr.cpu_seconds_per_call if ovr and ovr.cpu_seconds_per_call is not None else st.cpu_seconds_per_call
            allowed = [p for p in POLICIES if p in tp_opts.policies and (ovr is None or ovr.policies is None or p in ovr.policies)]
            wait_rows.append({
                "service": service, "bucket": bucket, "tool": tool, "calls_per_request": float(st.calls_per_request),
                "wait_mean_s": st.latency.mean_ms * (1.0 + retry) / 1e3, "latency_mean_ms": st.latency.mean_ms,
                "latency_p50_ms": st.latency.p50_ms, "latency_p90_ms": st.latency.p90_ms, "latency_p99_ms": st.latency.p99_ms,
                "timeout_share": timeout, "retry_share": retry, "error_share": st.error_share, "cpu_s_per_call": cpu_s,
                "context_tokens": ctx, "kv_bytes_per_session": float(model.kv_bytes_for_context(ctx, svc.kv_precision_resolved)
                                                                    + model.ssm_state_bytes_per_sequence()),  # hybrids: + fixed Mamba-2 state
                "tail_quantile": (float(svc.slo.ttft.quantile) if svc.slo.ttft is not None else 0.99)
                                 if tp_opts.wait_tail == "ttft_quantile" else math.nan,
                "policies": ",".join(allowed),
            })
    waits = pd.DataFrame(wait_rows, columns=list(WAIT_COLUMNS))

    cpu_ids = inst.catalog.cpu_servers
    srv_rows = []
    for sid in cpu_ids:
        dev = resolved.devices[sid]
        eq = equipment_usd_per_device_hour(dev, inst.catalog.pricing, inst.costs.hours_per_month,
                                           years=inst.costs.amortization_years, rate=inst.costs.cost_of_capital_rate)
        srv_rows.append({"server": sid, "cores": int(dev.cores or 0), "memory_gb": float(dev.memory_gb or 0.0),
                         "equipment_usd_per_server_hour": eq, "busy_power_w": float(dev.busy_power_w or 0.0),
                         "idle_power_w": float(dev.idle_power_w or 0.0), "host_power_w": float(dev.host_power_w),
                         "ops_usd_per_server_month": float(dev.operations_usd_per_month) + float(inst.costs.ops_usd_per_device_month),
                         "license_usd_per_server_month": float(dev.software_license_usd_per_month),
                         "procurement_limit": float(dev.procurement_limit) if dev.procurement_limit else math.inf})
    cpu_servers = pd.DataFrame(srv_rows, columns=list(CPU_SERVER_COLUMNS))
    cpu_work = bool(len(waits)) and float((waits["cpu_s_per_call"]).max()) > 0 or tp_opts.tokenizer_cpu_seconds_per_token > 0
    if cpu_work and not cpu_ids:
        problems.add("catalog.cpu_servers", "tools or tokenisation need CPU time but no CPU server is a candidate",
                     "list a CPU server profile (e.g. xeon6-6980p, epyc-9965) with its price under catalog.device_overrides")
    if tier.usd_per_gb_month is None and not cpu_ids and "offload" in tp_opts.policies and len(waits):
        notes.append("KV offload is not available: no priced tier (tool_phase.kv_tier.usd_per_gb_month) and no CPU server to host it")
    problems.raise_if_any()
    tier_in_cpu = tier.usd_per_gb_month is None
    location = ("CPU-pool memory (catalog.cpu_servers), reached over the accelerators' NIC" if tier_in_cpu
                else "priced host-memory tier next to the accelerators, reached over PCIe")
    if tier.reload_gb_per_s is not None:
        location += f"; reload bandwidth {tier.reload_gb_per_s:g} GB/s per device (tool_phase.kv_tier.reload_gb_per_s: {tier.source})"

    # Per operating point: KV capacity, reload and recompute times.
    pt_rows: list[dict[str, Any]] = []
    dem: dict[tuple[str, str], dict[Any, Any]] = {(str(r["service"]), str(r["bucket"])): r for r in demand.to_dict("records")}
    cfg = configs.drop_duplicates("config").set_index("config")
    cache: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in demand.to_dict("records"):
        service, bucket = str(rec["service"]), str(rec["bucket"])
        if not (waits["service"] == service).any():
            continue
        svc = inst.services[service]
        model = resolved.models[svc.model]
        cal, _src = engine_calibration(svc.engine, calibration)
        eff = efficiency_of(cal)
        d = dem[(service, bucket)]
        share = float(d.get("cached_prefix_share", 0.0) or 0.0)
        for config in cfg.index:
            device = str(cfg.at[config, "device"])
            tp = int(cfg.at[config, "tp"])  # type: ignore[arg-type]
            dev = resolved.devices[device]
            key = (service, bucket, config)
            if key not in cache:
                try:
                    ia = _instance(model, dev, tp, svc.weight_precision, svc.kv_precision_resolved)
                except ValueError:
                    continue
                split = float(kv_split(ia))
                if tier.reload_gb_per_s is not None:
                    bw, why = tier.reload_gb_per_s, ""
                elif tier_in_cpu:
                    links = [v for v in (dev.pcie_bw_gb_per_s, dev.nic_bw_gb_per_s) if v]
                    bw = min(links) if len(links) == 2 else 0.0
                    why = "" if bw > 0 else f"{device} lacks pcie_bw_gb_per_s or nic_bw_gb_per_s (needed to reload KV from the CPU pool)"
                else:
                    bw = float(dev.pcie_bw_gb_per_s or 0.0)
                    why = "" if bw > 0 else f"{device} lacks pcie_bw_gb_per_s (needed to reload KV from host memory)"
                out: dict[str, Any] = {"kv_capacity_bytes": max(float(kv_capacity_bytes(ia)), 0.0), "offload_reason": why}
                for tag, inp, outp in (("", float(d["input_tokens_mean"]), float(d["output_tokens_mean"])),
                                       ("_rep", float(d["input_tokens_rep"]), float(d["output_tokens_rep"]))):
                    ctx = inp + outp
                    kvb = float(kv_bytes(ia, ctx))
                    rl = kvb / split / (bw * 1e9) if bw > 0 else math.inf
                    appended = max(inp * (1.0 - share), 1.0)
                    budget = float(cal.prefill_token_budget)
                    rc = max(_prefill_s(ia, eff, ctx + appended, 0.0, budget) - _prefill_s(ia, eff, appended, ctx, budget), 0.0)
                    if tag == "":
                        out["reload_s"], out["recompute_s"] = rl, rc
                    else:
                        out["reload_ms_rep"], out["recompute_ms_rep"] = rl * 1e3, rc * 1e3
                cache[key] = out
            for role in ("prefill", "decode", "unified"):
                pt_rows.append({"service": service, "bucket": bucket, "role": role, "config": config, **cache[key]})
    points = pd.DataFrame(pt_rows, columns=list(AGENT_POINT_COLUMNS))
    params = AgentParams(cpu_utilization_cap=tp_opts.cpu_utilization_cap, reload_busy_share=tp_opts.reload_busy_share,
                         tier_usd_per_gb_month=tier.usd_per_gb_month, tier_max_gb=tier.max_gb,
                         tier_memory_utilization=tier.memory_utilization, tier_location=location, notes=tuple(notes))
    return AgentTables(waits=waits, points=points, cpu_servers=cpu_servers,
                       cpu_demand=pd.DataFrame(cpu_rows, columns=["service", "bucket", "tokenizer_cpu_s_per_request"]), params=params)

