r"""Why the tool phase makes an instance infeasible, and what would make it feasible.

Called by :mod:`planner.optimize.diagnose`. Two stages, as there:

1. **Before solving** (:func:`tool_routability`): every wait ``w = (service, bucket, tool)``
   needs one usable policy in the architecture, else ``tool_balance[w]`` (the shares of hold,
   offload and recompute sum to 1) cannot hold. A policy is usable when

   - hold: allowed, and a decode-phase point of the bucket in the architecture has a known KV
     capacity per instance;
   - offload: allowed, a KV tier exists (priced, or CPU servers to host it), the device has the
     link to reload over, and ``ttft_j + t^{rl}_{rep} ≤ target`` at some next-turn point ``j``;
   - recompute: allowed and ``ttft_j + t^{rc}_{rep} ≤ target`` at some ``j``.

   The fixes are exact for the masks: the TTFT target that admits the best point
   (``ttft_j + t_rep``, rounded up to a millisecond), or the link speed-up that brings the
   reload within the target, ``t^{rl}_{rep} / (target − ttft_j)`` (reload time is KV bytes
   over link bandwidth, so it scales with 1/bandwidth).

2. **Solver infeasible** (:func:`relaxations`, :func:`explain_relaxed`): the tool-phase limits
   the model enforces as constraints — ``cpu_procurement[server]`` and the KV-tier capacity
   ``kv_tier_gb ≤ tool_phase.kv_tier.max_gb`` — are relaxed (together with the GPU budget and
   procurement limits, by the caller) and the model re-solved; the relaxed solution says how many
   CPU servers / GB the plan needs and which service and tool need them. When a GPU procurement
   limit binds and the relaxed plan holds tool-wait KV on that device, the holding services and
   tools are named with the devices their held KV needs and why offload / recompute are no way out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.agents.prep import ttft_words
from planner.schema.plan import DiagnosisItem


@dataclass(frozen=True)
class Blocked:
    """Why one KV policy cannot serve a wait, and the smallest change that would allow it."""

    policy: str
    reason: str
    fix: str
    target_ms_needed: float = 0.0
    """TTFT target that would admit the policy (0 when another change is needed)."""


def _svc_tool(waits: Any, w: int) -> tuple[str, str, str]:
    return str(waits["service"].iat[w]), str(waits["bucket"].iat[w]), str(waits["tool"].iat[w])


def balance_name(waits: Any, w: int) -> str:
    s, b, t = _svc_tool(waits, w)
    return f"tool_balance[{s}|{b}|{t}]"


def blocked_policies(prep: Any, w: int, roles: frozenset[str] | set[str]) -> list[Blocked]:
    """The policies wait ``w`` cannot use in an architecture whose points may take ``roles``, with reasons and fixes."""
    tool = prep.tool
    waits = tool.waits
    pts = prep.points
    svc, _bucket, tname = _svc_tool(waits, w)
    allowed = set(str(waits["policies"].iat[w]).split(",")) - {""}
    where_policy = f"tool_phase.policies or services.{svc}.tool_overrides.{tname}.policies"
    role = pts["role"].to_numpy(str)
    ttft = pts["ttft_ms"].to_numpy(float)
    target = pts["ttft_target_ms"].to_numpy(float)
    q = float(pts["ttft_quantile"].iat[0]) if len(pts) else 0.99
    out: list[Blocked] = []

    # hold
    d = int(waits["d"].iat[w])
    dec_pts = [i for i in range(len(pts)) if int(pts["d"].iat[i]) == d and role[i] in ("decode", "unified") and role[i] in roles]
    holds = [i for (ww, i, _k) in tool.hold if ww == w and role[i] in roles]
    if "hold" not in allowed:
        out.append(Blocked("hold", "hold is not allowed", f"allow hold in {where_policy}"))
    elif not holds:
        why = ("the architecture has no decode-phase point for this bucket" if not dec_pts
               else "the KV capacity per instance of its decode pools is unknown (no kv_capacity_bytes in the capacity table)")
        out.append(Blocked("hold", why, "supply kv_capacity_bytes for the decode points (or let the perf model compute it)"))

    # offload and recompute: the best next-turn point of the architecture
    pf = tool.pf
    rows = [r for r in range(len(pf)) if int(pf["w"].iat[r]) == w and role[int(pf["j"].iat[r])] in roles]
    if not rows:
        for p in ("offload", "recompute"):
            if p in allowed:
                out.append(Blocked(p, "the architecture has no prefill-phase point for this bucket", "use an architecture with a prefill or unified pool"))
            else:
                out.append(Blocked(p, f"{p} is not allowed", f"allow {p} in {where_policy}"))
        return out

    def best(col: str, among: list[int]) -> tuple[int, float, float, float]:
        j_best = min(among, key=lambda r: ttft[int(pf["j"].iat[r])] + float(pf[col].iat[r]))
        j = int(pf["j"].iat[j_best])
        return j_best, float(pf[col].iat[j_best]), float(ttft[j]), float(target[j])

    def _words(r: int) -> str:
        j = int(pf["j"].iat[r])
        return ttft_words(str(role[j]), float(pts["max_batch"].iat[j]), float(ttft[j]), sep=" of ")

    if "offload" not in allowed:
        out.append(Blocked("offload", "offload is not allowed", f"allow offload in {where_policy}"))
    elif not tool.tier_available:
        out.append(Blocked("offload", "there is no KV tier (no tool_phase.kv_tier.usd_per_gb_month and no CPU server to host it)",
                           "price a tier (tool_phase.kv_tier.usd_per_gb_month with its source) or list a CPU server under catalog.cpu_servers"))
    elif not any(bool(pf["off_ok"].iat[r]) for r in rows):
        finite = [r for r in rows if math.isfinite(float(pf["reload_ms_rep"].iat[r]))]
        if not finite:
            out.append(Blocked("offload", str(pf["reason"].iat[rows[0]]) or "no reload path from the tier",
                               "set tool_phase.kv_tier.reload_gb_per_s (with its source) or add the link bandwidth to the device profile"))
        else:
            _r, rl, t0, tgt = best("reload_ms_rep", finite)
            words = _words(_r)
            need = math.ceil(t0 + rl)
            fix = f"raise services.{svc}.slo.ttft.target_ms to at least {need:,}"
            if tgt > t0:
                fix += f", or a KV-tier link at least {rl / (tgt - t0):.2f}x faster (tool_phase.kv_tier.reload_gb_per_s)"
            out.append(Blocked("offload", f"reloading the KV takes {rl:,.0f} ms, and with the {words} "
                                          f"it breaks the p{q * 100:g} TTFT target {tgt:,.0f} ms", fix, float(need)))
    if "recompute" not in allowed:
        out.append(Blocked("recompute", "recompute is not allowed", f"allow recompute in {where_policy}"))
    elif not any(bool(pf["rec_ok"].iat[r]) for r in rows):
        _r, rc, t0, tgt = best("recompute_ms_rep", rows)
        words = _words(_r)
        if not math.isfinite(rc):
            out.append(Blocked("recompute", "the recompute time is unknown", "supply the recompute time of the points"))
        else:
            out.append(Blocked("recompute", f"recomputing the dropped context takes {rc:,.0f} ms, and with the {words} "
                                            f"it breaks the p{q * 100:g} TTFT target {tgt:,.0f} ms",
                               f"raise services.{svc}.slo.ttft.target_ms to at least {math.ceil(t0 + rc):,}, or faster prefill devices",
                               float(math.ceil(t0 + rc))))
    return out


def _describe(blocked: list[Blocked], policies: tuple[str, ...]) -> tuple[str, str]:
    sel = [b for b in blocked if b.policy in policies]
    return "; ".join(f"{b.policy}: {b.reason}" for b in sel), "; or ".join(b.fix for b in sel)


def tool_routability(prep: Any, roles: frozenset[str] | set[str], skip_d: set[int] | None = None) -> list[DiagnosisItem]:
    """Waits with no usable policy in an architecture (stage 1 of the module docstring).

    One item per (service, tool): the bucket whose fix asks the most (highest TTFT target
    needed) is explained, and the other blocked buckets are listed.
    """
    tool = prep.tool
    if tool is None or not len(tool.waits):
        return []
    waits = tool.waits
    found: dict[tuple[str, str], list[tuple[int, list[Blocked]]]] = {}
    for w in range(len(waits)):
        if skip_d and int(waits["d"].iat[w]) in skip_d:
            continue
        blocked = blocked_policies(prep, w, roles)
        if len(blocked) == 3:
            svc, _b, tname = _svc_tool(waits, w)
            found.setdefault((svc, tname), []).append((w, blocked))
    out: list[DiagnosisItem] = []
    for (svc, tname), lst in found.items():
        w, blocked = max(lst, key=lambda e: max(b.target_ms_needed for b in e[1]))
        _s, bucket, _t = _svc_tool(waits, w)
        why, fix = _describe(blocked, ("hold", "offload", "recompute"))
        others = [str(waits["bucket"].iat[v]) for v, _ in lst if v != w]
        also = f" (also blocked in bucket(s) {', '.join(others)})" if others else ""
        out.append(DiagnosisItem(service=svc, bucket=bucket, constraint=balance_name(waits, w),
                                 message=f"tool {tname}: no KV policy can serve the sessions waiting on it{also} — {why}",
                                 fix=fix))
    return out


# --- stage 2: relaxations of the tool-phase limits ----------------------------------------
def relaxations(built: Any) -> list[tuple[str, Callable[[], None], Callable[[], None]]]:
    """(name, relax, restore) for the tool-phase limits the model enforces (module docstring)."""
    m = built.model
    tool = built.prep.tool
    out: list[tuple[str, Callable[[], None], Callable[[], None]]] = []
    if tool is None or not hasattr(m, "kv_tier_gb"):
        return out
    active = [c for c in m.cpu_procurement if m.cpu_procurement[c].active] if hasattr(m, "cpu_procurement") else []
    if active:
        def relax_cpu() -> None:
            for c in active:
                m.cpu_procurement[c].deactivate()

        def restore_cpu() -> None:
            for c in active:
                m.cpu_procurement[c].activate()

        out.append(("cpu_procurement", relax_cpu, restore_cpu))
    ub = m.kv_tier_gb.ub
    if ub is not None and tool.params.tier_max_gb is not None and ub > 0:
        def relax_tier() -> None:
            m.kv_tier_gb.setub(None)

        def restore_tier() -> None:
            m.kv_tier_gb.setub(ub)

        out.append(("kv_tier_capacity", relax_tier, restore_tier))
    return out


def _v(var: Any) -> float:
    return float(var.value or 0.0)


def explain_relaxed(built: Any, architecture: str, relaxed: set[str]) -> list[DiagnosisItem]:
    """At the solution of the relaxed model: which tool-phase limits it exceeds, for which service and tool."""
    m = built.model
    prep = built.prep
    tool = prep.tool
    if tool is None:
        return []
    out: list[DiagnosisItem] = []
    waits = tool.waits
    lam = prep.demand["rate_peak_per_s"].to_numpy(float)
    roles = _roles_of(architecture)
    if "cpu_procurement" in relaxed:
        out += _cpu_items(built, architecture, lam)
    if "kv_tier_capacity" in relaxed and tool.params.tier_max_gb is not None:
        need = _v(m.kv_tier_gb)
        cap = float(tool.params.tier_max_gb)
        if need > cap * (1 + 1e-6) + 1e-9:
            gb = np.zeros(len(waits))
            pf = tool.pf
            for r in range(len(pf)):
                w = int(pf["w"].iat[r])
                gb[w] += lam[int(waits["d"].iat[w])] * float(waits["tier_gb_coef"].iat[w]) * _v(m.toff[r])
            for w in np.argsort(-gb):
                if gb[w] <= 1e-9:
                    break
                svc, bucket, tname = _svc_tool(waits, int(w))
                why, fix = _describe(blocked_policies(prep, int(w), roles), ("hold", "recompute"))
                out.append(DiagnosisItem(
                    service=svc, bucket=bucket, constraint="kv_tier_capacity",
                    message=(f"{architecture}: tool {tname}: offloading the KV of its sessions in wait needs {gb[w]:,.1f} GB of KV tier at peak "
                             f"({float(waits['kv_bytes_per_session'].iat[int(w)]) / 1e9:.2f} GB per session); the plan needs {need:,.1f} GB in all, "
                             f"above tool_phase.kv_tier.max_gb = {cap:,.1f}" + (f" ({why})" if why else "")),
                    fix=f"raise tool_phase.kv_tier.max_gb to at least {math.ceil(need):,}" + (f"; or {fix}" if fix else "")))
    return out


def _roles_of(architecture: str) -> frozenset[str]:
    from planner.optimize.prepare import ARCH_ROLES

    return ARCH_ROLES[architecture]


def _cpu_items(built: Any, architecture: str, lam: np.ndarray) -> list[DiagnosisItem]:
    m = built.model
    tool = built.prep.tool
    srv = tool.cpu_servers
    waits = tool.waits
    lim = srv["procurement_limit"].to_numpy(float)
    cores_need = float(np.sum(lam * tool.cpu_s_per_request))
    by_tool: dict[tuple[str, str], float] = {}
    for w in range(len(waits)):
        svc, _b, tname = _svc_tool(waits, w)
        c = lam[int(waits["d"].iat[w])] * float(waits["calls_per_request"].iat[w]) * (1.0 + float(waits["retry_share"].iat[w])) * float(waits["cpu_s_per_call"].iat[w])
        by_tool[(svc, tname)] = by_tool.get((svc, tname), 0.0) + c
    tok = max(cores_need - sum(by_tool.values()), 0.0)
    top = sorted(by_tool.items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{s}/{t} {c:,.1f}" for (s, t), c in top[:3] if c > 0)
    svc0 = top[0][0][0] if top else "*"
    tool0 = top[0][0][1] if top else ""
    tier_gb = _v(m.kv_tier_gb) if tool.params.tier_usd_per_gb_month is None else 0.0
    out = []
    for c in range(len(srv)):
        used = round(_v(m.n_cpu[c]))
        if math.isfinite(lim[c]) and used > lim[c]:
            name = str(srv["server"].iat[c])
            mem = f" and {tier_gb:,.0f} GB of KV tier in its memory" if tier_gb > 0 else ""
            out.append(DiagnosisItem(
                service=svc0, bucket="", constraint=f"cpu_procurement[{name}]",
                message=(f"{architecture}: the CPU pool needs {used} {name} servers for {cores_need:,.1f} cores at peak "
                         f"(utilisation cap {tool.params.cpu_utilization_cap:g}; tool calls with retries: {parts or 'none'}; "
                         f"tokenisation {tok:,.1f}){mem}; the procurement limit is {lim[c]:g}"),
                fix=(f"raise catalog.device_overrides.{name}.procurement_limit to {used}, add another CPU server type to catalog.cpu_servers"
                     + (f", or cut services.{svc0}.tool_overrides.{tool0}.cpu_seconds_per_call" if tool0 else "")
                     + (", or price a separate KV tier (tool_phase.kv_tier.usd_per_gb_month)" if tier_gb > 0 else ""))))
    return out


def held_kv_items(built: Any, architecture: str, device: str, used: int, limit: float) -> list[DiagnosisItem]:
    """A GPU procurement limit binds: the services and tools whose held KV sits on ``device`` in the relaxed plan."""
    m = built.model
    prep = built.prep
    tool = prep.tool
    if tool is None or not tool.hold:
        return []
    pools = prep.pools
    pool_pos = {p: j for j, p in enumerate(pools["pool"])}
    point_pool = [pool_pos[p] for p in prep.points["pool"]]
    kvcap = pools["kv_capacity_bytes"].to_numpy(float)
    tp = pools["tp"].to_numpy(float)
    lam = prep.demand["rate_peak_per_s"].to_numpy(float)
    waits = tool.waits
    devices_for = np.zeros(len(waits))
    bytes_for = np.zeros(len(waits))
    for h, (w, i, k) in enumerate(tool.hold):
        p = point_pool[i]
        if str(pools["device"].iat[p]) != device or kvcap[p] <= 0:
            continue
        b = lam[int(waits["d"].iat[w])] * k * _v(m.hold[h])
        bytes_for[w] += b
        devices_for[w] += b / kvcap[p] * tp[p]
    roles = _roles_of(architecture)
    out = []
    for w in np.argsort(-devices_for):
        if devices_for[w] <= 1e-9:
            break
        svc, bucket, tname = _svc_tool(waits, int(w))
        why, fix = _describe(blocked_policies(prep, int(w), roles), ("offload", "recompute"))
        sessions = float(waits["sessions_mean"].iat[int(w)]) * float(waits["tail"].iat[int(w)])
        out.append(DiagnosisItem(
            service=svc, bucket=bucket, constraint=f"procurement[{device}]",
            message=(f"{architecture}: tool {tname}: holding the KV of {sessions:,.1f} sessions in tool wait ({bytes_for[w] / 1e9:,.0f} GB at peak) "
                     f"takes {devices_for[w]:,.1f} of the {used} {device} devices the plan needs; the procurement limit is {limit:g}"
                     + (f" — and {why}" if why else "")),
            fix=f"raise the procurement limit of {device} to {used}" + (f"; or {fix}" if fix else "; or let the waits be offloaded or recomputed")))
    return out
