"""Tool statistics of agent logs (TraceLab): per tool class, and sessions.

Per tool: ``calls_per_request`` = calls of the tool / LLM calls (rounds) of the service;
latency mean and p50/p90/p99 (linear interpolation) and max over calls with a usable
latency; ``error_share`` and ``timeout_share`` = flagged calls / calls. Sessions: count,
mean rounds per session, mean newly appended (uncached) input tokens per round, and the
cached-prefix share of input tokens.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.schema.workload import SessionStats, ToolLatency, ToolStats


def tool_stats(tools: pd.DataFrame, requests: int) -> dict[str, ToolStats]:
    out: dict[str, ToolStats] = {}
    for name, calls in tools.groupby("tool", sort=True):
        lat = calls["latency_ms"].to_numpy(dtype=np.float64)
        lat = lat[~np.isnan(lat) & (lat >= 0)]
        if lat.size == 0:
            continue
        q = np.quantile(lat, (0.5, 0.9, 0.99))
        out[str(name)] = ToolStats(
            calls_per_request=len(calls) / requests,
            latency=ToolLatency(mean_ms=float(lat.mean()), p50_ms=float(q[0]), p90_ms=float(q[1]), p99_ms=float(q[2]), max_ms=float(lat.max())),
            error_share=float(calls["is_error"].mean()),
            timeout_share=float(calls["is_timeout"].mean()),
            calls_observed=len(calls),
        )
    return out


def all_tools_summary(tools: pd.DataFrame, requests: int) -> dict[str, float | int]:
    """Across all tools: calls, calls per request, share of requests with a call, latency quantiles."""
    lat = tools["latency_ms"].to_numpy(dtype=np.float64)
    lat = lat[~np.isnan(lat) & (lat >= 0)]
    summary: dict[str, float | int] = {
        "calls": len(tools),
        "calls_per_request": len(tools) / requests,
        "requests_with_tool_calls": int(tools["request"].nunique()),
        "error_share": float(tools["is_error"].mean()) if len(tools) else 0.0,
        "timeout_share": float(tools["is_timeout"].mean()) if len(tools) else 0.0,
    }
    if lat.size:
        q = np.quantile(lat, (0.5, 0.9, 0.99))
        summary.update(latency_mean_ms=float(lat.mean()), latency_p50_ms=float(q[0]), latency_p90_ms=float(q[1]), latency_p99_ms=float(q[2]), latency_max_ms=float(lat.max()))
    return summary


def session_stats(frame: pd.DataFrame) -> SessionStats | None:
    if "session" not in frame.columns or len(frame) == 0:
        return None
    sessions = int(frame["session"].nunique())
    appended = 0.0
    if "appended_tokens" in frame.columns and frame["appended_tokens"].notna().any():
        appended = float(frame["appended_tokens"].mean())
    share = 0.0
    if "cached_tokens" in frame.columns:
        basis = float(frame["cache_basis_tokens"].sum())
        share = min(1.0, float(frame["cached_tokens"].sum()) / basis) if basis > 0 else 0.0
    return SessionStats(sessions=sessions, rounds_per_session_mean=len(frame) / sessions, tokens_appended_per_round_mean=appended, cached_prefix_share=share)
