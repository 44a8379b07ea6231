"""Infeasible agentic instances: the diagnosis names the service, the tool, the constraint and the fix.

Hand-made tables from :mod:`test_agents_mip` (prefill TTFT 1,000 ms without queueing, TTFT
target 5,000 ms, 10 LLM calls/s, one tool call per LLM call, 4 GB KV per session, decode
instances holding 50 GB of KV).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from click.testing import CliRunner
from test_agents_mip import _tables

from planner.agents.tables import AgentParams, AgentTables
from planner.cli import main
from planner.optimize import SolveSettings, solve_tables
from planner.schema.capacity import CapacityTables
from planner.schema.plan import ArchitecturePlan

ROOT = Path(__file__).resolve().parent.parent
AGENTIC = ROOT / "instances" / "agentic-assistant.yaml"


def _with(t: CapacityTables, *, dec_limit: float | None = None, params: AgentParams | None = None,
          cpu_servers: pd.DataFrame | None = None) -> CapacityTables:
    configs = t.configs.copy()
    if dec_limit is not None:
        configs.loc[configs["device"] == "dec", "procurement_limit"] = dec_limit
    a = t.agents
    assert a is not None
    agents = AgentTables(waits=a.waits, points=a.points, cpu_servers=cpu_servers if cpu_servers is not None else a.cpu_servers,
                         cpu_demand=a.cpu_demand, params=params or a.params)
    return CapacityTables(demand=t.demand, points=t.points, configs=configs, costs=t.costs, agents=agents)


def _plan(t: CapacityTables) -> ArchitecturePlan:
    res = solve_tables(t, SolveSettings(architectures=("disaggregated",), verify_rounds=0)).result
    plan = res.architectures["disaggregated"]
    assert not plan.feasible and res.verdict.winner is None
    return plan


def test_offload_breaking_the_ttft_target_with_hold_not_allowed_is_a_tool_balance_diagnosis() -> None:
    # reload 4,500 ms + TTFT 1,000 ms = 5,500 > 5,000 ms: offload masked; hold excluded -> no policy left.
    plan = _plan(_tables(20.0, reload_ms_rep=4500.0, policies="offload"))
    (d,) = plan.diagnosis
    assert (d.service, d.bucket, d.constraint) == ("agent", "b0", "tool_balance[agent|b0|search]")
    assert "tool search" in d.message and "reloading the KV takes 4,500 ms" in d.message and "hold is not allowed" in d.message
    # the target that admits offload is TTFT + reload = 5,500 ms; or a link 4,500 / (5,000 - 1,000) = 1.125x faster
    assert "target_ms to at least 5,500" in d.fix and "1.12x faster" in d.fix and "allow hold" in d.fix
    assert plan.solver.termination.startswith("pre-solve")


def test_recompute_too_slow_is_diagnosed_with_the_target_that_would_admit_it() -> None:
    plan = _plan(_tables(20.0, recompute_s=4.2, policies="recompute"))
    (d,) = plan.diagnosis
    assert d.constraint == "tool_balance[agent|b0|search]"
    assert "recomputing the dropped context takes 4,200 ms" in d.message and "p99 TTFT target 5,000 ms" in d.message
    assert "target_ms to at least 5,200" in d.fix  # 1,000 + 4,200


def test_hold_beyond_the_decode_procurement_limit_with_offload_masked_names_the_tool() -> None:
    # Held KV: 10 calls/s x 20 s x 4 GB = 800 GB = 16 decode instances of 50 GB; the limit is 2 devices.
    plan = _plan(_with(_tables(20.0, reload_ms_rep=4500.0, policies="hold,offload"), dec_limit=2))
    by = {(d.constraint, d.service): d for d in plan.diagnosis}
    gen = by[("procurement[dec]", "*")]
    assert "needs 16 dec devices" in gen.message and "limit is 2" in gen.message
    tool = by[("procurement[dec]", "agent")]
    assert tool.bucket == "b0" and "tool search" in tool.message and "holding the KV of 200.0 sessions" in tool.message
    assert "800 GB" in tool.message and "16.0 of the 16 dec devices" in tool.message
    assert "reloading the KV takes 4,500 ms" in tool.message
    assert "raise the procurement limit of dec to 16" in tool.fix and "target_ms to at least 5,500" in tool.fix


def _cpu(limit: float) -> pd.DataFrame:
    return pd.DataFrame([{"server": "cpu", "cores": 16, "memory_gb": 512.0, "equipment_usd_per_server_hour": 1.0, "busy_power_w": 500.0,
                          "idle_power_w": 100.0, "host_power_w": 0.0, "ops_usd_per_server_month": 10.0, "license_usd_per_server_month": 0.0,
                          "procurement_limit": limit}])


def test_cpu_procurement_limit_names_the_server_the_tool_and_the_servers_needed() -> None:
    # 10 calls/s x 2 core-s = 20 cores; 16 cores x cap 0.5 = 8 per server -> 3 servers; the limit is 2.
    t = _tables(0.1, cpu_s_per_call=2.0, cpu_servers=_cpu(2.0), tau_dec=1e-2)
    plan = _plan(_with(t, cpu_servers=_cpu(2.0), params=AgentParams(tier_usd_per_gb_month=3.0, cpu_utilization_cap=0.5)))
    (d,) = plan.diagnosis
    assert d.constraint == "cpu_procurement[cpu]" and d.service == "agent"
    assert "needs 3 cpu servers for 20.0 cores at peak" in d.message and "agent/search 20.0" in d.message and "limit is 2" in d.message
    assert "procurement_limit to 3" in d.fix and "services.agent.tool_overrides.search.cpu_seconds_per_call" in d.fix
    # the same within the limit is feasible
    ok = solve_tables(_with(t, cpu_servers=_cpu(3.0), params=AgentParams(tier_usd_per_gb_month=3.0, cpu_utilization_cap=0.5)),
                      SolveSettings(architectures=("disaggregated",), verify_rounds=0)).result
    assert ok.architectures["disaggregated"].feasible


def test_tier_capacity_below_the_offloaded_kv_names_the_gb_needed() -> None:
    # Offload only: 10 x 20 s x 4 GB = 800 GB of tier at peak; max_gb 100.
    t = _tables(20.0, policies="offload")
    plan = _plan(_with(t, params=AgentParams(tier_usd_per_gb_month=3.0, tier_max_gb=100.0, tier_location="hand")))
    (d,) = plan.diagnosis
    assert (d.service, d.bucket, d.constraint) == ("agent", "b0", "kv_tier_capacity")
    assert "tool search" in d.message and "800.0 GB of KV tier" in d.message and "max_gb = 100.0" in d.message
    assert "hold is not allowed" in d.message
    assert "max_gb to at least 800" in d.fix and "allow hold" in d.fix


def test_cli_exit_3_names_the_tool_and_the_fix_on_the_agentic_example() -> None:
    res = CliRunner().invoke(main, ["solve", str(AGENTIC), "--architectures", "disaggregated", "--set", "tool_phase.policies=[recompute]",
                                    "--set", "services.agent.slo.ttft.target_ms=2000"])
    assert res.exit_code == 3, res.output
    out = res.output
    for tool in ("Bash", "WebFetch", "WebSearch", "Write"):
        assert "tool_balance[agent|" in out and f"|{tool}]" in out
    assert "recomputing the dropped context takes" in out and "raise services.agent.slo.ttft.target_ms to at least" in out
    assert "Traceback" not in out


def test_the_ttft_a_reload_or_recompute_is_added_to_is_named_for_what_it_is() -> None:
    # a prefill point's ttft_ms is its unqueued TTFT; a unified point's is at its operating point's full
    # batch (above the plan's predicted TTFT at load: agentic-assistant's shared pool 2,829 against 1,751 ms)
    from planner.agents.prep import ttft_words
    from planner.agents.report import _cut

    assert ttft_words("prefill", 1.0, 1364.6) == "unqueued TTFT 1,365 ms"
    assert ttft_words("unified", 44.0, 2829.4) == "TTFT 2,829 ms at a full batch of 44"
    assert ttft_words("unified", 1.0, 900.0, sep=" of ") == "unqueued TTFT of 900 ms"
    plan = _plan(_tables(20.0, recompute_s=4.2, policies="recompute"))
    (d,) = plan.diagnosis
    assert "with the unqueued TTFT of 1,000 ms it breaks" in d.message
    # a reason longer than the column is cut with an ellipsis, not mid-word without one
    assert _cut("x" * 99) == "x" * 99 and _cut("y" * 150) == "y" * 99 + "…"
