"""Tool-phase tables: the agent inputs the optimiser reads next to the capacity tables.

The types and column contracts live here, beside :mod:`planner.schema.capacity`;
:func:`planner.agents.tables.build_agent_tables` fills them from an instance (tests build
them by hand). Four tidy frames:
``waits`` — one row per (service, bucket, tool)::

    calls_per_request        tool calls per LLM call (the profile's, from the log or the instance)
    wait_mean_s              mean wait per call with retries: latency mean x (1 + retry_share)
    latency_*_ms             mean, p50, p90, p99 of the tool's latency (reported)
    timeout_share, retry_share, error_share
    cpu_s_per_call           CPU core-seconds per call (x (1 + retry_share) in the CPU load)
    context_tokens           tokens in the context a waiting session holds: input + output (bucket means)
    kv_bytes_per_session     KV bytes of that context (the model's KV bytes per token at its KV precision)
    tail_quantile            level of the sessions-in-wait quantile planned for (NaN: the mean)
    policies                 allowed KV policies, comma-separated (hold, offload, recompute)

``points`` — one row per (service, bucket, role, config) of the capacity table::

    kv_capacity_bytes        KV bytes one instance holds (decode/unified; perf memory fit)
    reload_s                 tier -> device transfer of one session's KV (bucket-mean context)
    reload_ms_rep            the same for the conservative representative context (TTFT check)
    recompute_s              extra prefill instance-seconds when the KV was dropped (means)
    recompute_ms_rep         the same at the representative context (TTFT check)
    offload_reason           why offload is impossible here ('' when possible)

``cpu_servers`` — candidate CPU server types (price per server-hour, cores, memory, power).
``cpu_demand`` — per (service, bucket): tokenisation CPU core-seconds per request (uncached input + output tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

WAIT_COLUMNS: tuple[str, ...] = (
    "service", "bucket", "tool", "calls_per_request", "wait_mean_s", "latency_mean_ms", "latency_p50_ms", "latency_p90_ms",
    "latency_p99_ms", "timeout_share", "retry_share", "error_share", "cpu_s_per_call", "context_tokens",
    "kv_bytes_per_session", "tail_quantile", "policies",
)
AGENT_POINT_COLUMNS: tuple[str, ...] = (
    "service", "bucket", "role", "config", "kv_capacity_bytes", "reload_s", "reload_ms_rep", "recompute_s",
    "recompute_ms_rep", "offload_reason",
)
CPU_SERVER_COLUMNS: tuple[str, ...] = (
    "server", "cores", "memory_gb", "equipment_usd_per_server_hour", "busy_power_w", "idle_power_w", "host_power_w",
    "ops_usd_per_server_month", "license_usd_per_server_month", "procurement_limit",
)
POLICIES: tuple[str, ...] = ("hold", "offload", "recompute")


@dataclass(frozen=True)
class AgentParams:
    """Scalars of the tool phase (copied from ``Instance.tool_phase``)."""

    cpu_utilization_cap: float = 0.7
    reload_busy_share: float = 1.0
    tier_usd_per_gb_month: float | None = None
    """``None``: the tier lives in the CPU pool's memory."""
    tier_max_gb: float | None = None
    tier_memory_utilization: float = 0.8
    tier_location: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentTables:
    waits: pd.DataFrame
    points: pd.DataFrame
    cpu_servers: pd.DataFrame
    cpu_demand: pd.DataFrame
    params: AgentParams = field(default_factory=AgentParams)
