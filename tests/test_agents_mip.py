"""Tool phase in the MIP on hand-made tables: hold/offload break-even, recompute vs reload, TTFT mask, CPU pool."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.agents.economics import (
    breakeven_wait_s,
    hold_usd_per_byte_s,
    reload_usd,
    tier_usd_per_byte_s,
)
from planner.agents.tables import (
    AGENT_POINT_COLUMNS,
    CPU_SERVER_COLUMNS,
    WAIT_COLUMNS,
    AgentParams,
    AgentTables,
)
from planner.optimize import SolveSettings, check_plan, solve_tables
from planner.optimize.model import build_model, restrict
from planner.optimize.prepare import prepare
from planner.schema.capacity import CapacityTables, CostParams

H = 730.0
EQ_PF, EQ_DEC = 2.0, 3.0  # USD per device-hour
K_DEC = 50e9  # KV bytes one decode instance holds
RHO_PF = 0.8
B = 4e9  # KV bytes per session
LAM = 10.0  # LLM calls per second (peak = mean)


def _tables(wait_s: float, *, reload_s: float = 0.05, recompute_s: float = 2.0, tier_usd_per_gb_month: float = 3.0,
            policies: str = "hold,offload,recompute", reload_ms_rep: float | None = None, ttft_target_ms: float = 5000.0,
            cpu_s_per_call: float = 0.0, cpu_servers: pd.DataFrame | None = None, calls: float = 1.0,
            tpot_ms: float = 20.0, out_tokens: float = 100.0, lam: float = LAM, tau_dec: float = 1e-9) -> CapacityTables:
    demand = pd.DataFrame([{
        "service": "agent", "bucket": "b0", "weight": 1.0, "rate_mean_per_s": lam, "rate_peak_per_s": lam,
        "input_tokens_mean": 20000.0, "output_tokens_mean": out_tokens, "input_tokens_rep": 20000.0, "output_tokens_rep": out_tokens,
        "interarrival_cv": 1.0, "ttft_quantile": 0.99, "ttft_target_ms": ttft_target_ms, "tpot_quantile": 0.99, "tpot_target_ms": 50.0,
    }])
    base = {"service": "agent", "bucket": "b0", "tp": 1, "feasible": True, "reason": "", "bound": "compute", "kv_transfer_bytes_per_request": 0.0,
            "energy_j_per_request": 0.0, "service_time_cv": 0.0, "source": "hand"}
    points = pd.DataFrame([
        {**base, "role": "prefill", "config": "pf/tp1", "device": "pf", "instance_seconds_per_request": 0.5, "max_batch": 1,
         "kv_bytes_per_request": 0.0, "ttft_ms": 1000.0, "tpot_ms": 0.0, "utilization_cap": RHO_PF},
        {**base, "role": "decode", "config": "dec/tp1", "device": "dec", "instance_seconds_per_request": tau_dec, "max_batch": 64,
         "kv_bytes_per_request": 0.0, "ttft_ms": 0.0, "tpot_ms": tpot_ms, "utilization_cap": 1.0},
    ])
    cfg = {"tp": 1, "kind": "gpu", "busy_power_w": 700.0, "idle_power_w": 100.0, "host_power_w": 0.0, "ops_usd_per_device_month": 0.0,
           "license_usd_per_device_month": 0.0, "procurement_limit": math.inf, "nic_bw_gb_per_s": 50.0}
    configs = pd.DataFrame([{**cfg, "config": "pf/tp1", "device": "pf", "equipment_usd_per_device_hour": EQ_PF},
                            {**cfg, "config": "dec/tp1", "device": "dec", "equipment_usd_per_device_hour": EQ_DEC}])
    costs = CostParams(electricity_usd_per_kwh=0.0, pue=1.0, hours_per_month=H, ops_usd_per_pool_month=0.0,
                       ops_usd_per_device_type_month=0.0, nic_usd_per_device_month=0.0, transfer_usd_per_gb=0.0)
    waits = pd.DataFrame([{
        "service": "agent", "bucket": "b0", "tool": "search", "calls_per_request": calls, "wait_mean_s": wait_s, "latency_mean_ms": wait_s * 1e3,
        "latency_p50_ms": wait_s * 1e3, "latency_p90_ms": wait_s * 1e3, "latency_p99_ms": wait_s * 1e3, "timeout_share": 0.0,
        "retry_share": 0.0, "error_share": 0.0, "cpu_s_per_call": cpu_s_per_call, "context_tokens": 20100.0, "kv_bytes_per_session": B,
        "tail_quantile": math.nan, "policies": policies,
    }], columns=list(WAIT_COLUMNS))
    rep = reload_ms_rep if reload_ms_rep is not None else reload_s * 1e3
    apts = pd.DataFrame([
        {"service": "agent", "bucket": "b0", "role": role, "config": config, "kv_capacity_bytes": K_DEC if config == "dec/tp1" else 0.0,
         "reload_s": reload_s, "reload_ms_rep": rep, "recompute_s": recompute_s, "recompute_ms_rep": recompute_s * 1e3, "offload_reason": ""}
        for role, config in (("prefill", "pf/tp1"), ("decode", "dec/tp1"))], columns=list(AGENT_POINT_COLUMNS))
    srv = cpu_servers if cpu_servers is not None else pd.DataFrame(columns=list(CPU_SERVER_COLUMNS))
    agents = AgentTables(waits=waits, points=apts, cpu_servers=srv,
                         cpu_demand=pd.DataFrame([{"service": "agent", "bucket": "b0", "tokenizer_cpu_s_per_request": 0.0}]),
                         params=AgentParams(tier_usd_per_gb_month=tier_usd_per_gb_month, tier_location="hand"))
    return CapacityTables(demand=demand, points=points, configs=configs, costs=costs, agents=agents)


_KEEP: list[object] = []


def _relaxed_shares(tables: CapacityTables) -> tuple[float, float, float, float]:
    """Solve the LP relaxation (continuous pools): policy shares and the objective."""
    import pyomo.environ as pe

    from planner.optimize.solve import make_solver

    built = build_model(prepare(tables))
    _KEEP.append(built)  # a freed model whose id() is reused confuses a later HiGHS solve in this process
    for v in built.model.component_data_objects(pe.Var):  # LP relaxation, bounds kept
        if v.is_binary():
            v.domain = pe.UnitInterval
        elif v.is_integer():
            v.domain = pe.NonNegativeReals
    restrict(built, "disaggregated")
    res = make_solver().solve(built.model, load_solutions=True, threads=1, solver_options={"random_seed": 0})
    assert res.termination_condition.name == "convergenceCriteriaSatisfied"
    m = built.model
    hold = sum(m.hold[h].value for h in m.THOLD)
    off = sum(m.toff[r].value for r in m.TPF)
    rec = sum(m.trec[r].value for r in m.TPF)
    return hold, off, rec, float(pe.value(m.objective))


def _closed_form_breakeven(reload_s: float = 0.05, tier: float = 3.0) -> float:
    # Hand derivation: hold = b W p_h, p_h = (EQ_DEC/3600)/K_DEC; offload = b W p_o + C_r with
    # p_o = tier / 1e9 / (H 3600) and C_r = reload_s (busy share 1) (EQ_PF/3600) / RHO_PF.
    p_h = EQ_DEC / 3600.0 / K_DEC
    p_o = tier / 1e9 / (H * 3600.0)
    c_r = reload_s * EQ_PF / 3600.0 / RHO_PF
    hand = c_r / (B * (p_h - p_o))
    lib = breakeven_wait_s(B, hold_usd_per_byte_s(EQ_DEC / 3600.0, K_DEC), tier_usd_per_byte_s(tier, H), reload_usd(reload_s, 1.0, EQ_PF / 3600.0, RHO_PF))
    assert lib == pytest.approx(hand, rel=1e-12)
    return hand


def test_breakeven_closed_form_matches_hand_numbers() -> None:
    # p_h = 3/3600/50e9 = 1.6667e-14 USD/B/s; p_o = 3/1e9/2,628,000 = 1.1416e-15; C_r = 0.05 x 2/3600/0.8 = 3.4722e-5 USD
    w = _closed_form_breakeven()
    assert w == pytest.approx(3.4722222e-5 / (4e9 * (1.6666667e-14 - 1.1415525e-15)), rel=1e-6)
    assert w == pytest.approx(0.5592, rel=1e-3)


def test_mip_switches_from_hold_to_offload_exactly_at_the_breakeven_wait() -> None:
    # The decode pool serves every request, so it exists with at least one instance (route_on, even at
    # a negligible decode load); that instance's KV holds sessions for free. At lam = 100 the held KV at
    # W* needs ~4.5 decode instances, so the free instance covers a known share 1 / (held / K_DEC).
    lam = 100.0
    w_star = _closed_form_breakeven()
    hold, off, rec, _ = _relaxed_shares(_tables(w_star * (1 - 1e-3), lam=lam))
    assert hold == pytest.approx(1.0) and off == pytest.approx(0.0, abs=1e-9) and rec == pytest.approx(0.0, abs=1e-9)
    w = w_star * (1 + 1e-3)
    free = K_DEC / (lam * w * B)  # share of the sessions the one provisioned decode instance holds for free
    hold, off, rec, _ = _relaxed_shares(_tables(w, lam=lam))
    assert hold == pytest.approx(free, rel=1e-6) and off == pytest.approx(1.0 - free, rel=1e-6)
    # At W* both policies cost the same: the LP objective equals the hand-computed hold cost.
    _, _, _, obj = _relaxed_shares(_tables(w_star, lam=lam))
    hold_cost = lam * w_star * B / K_DEC * EQ_DEC * H  # decode instances for the held KV x USD per instance-month
    base = lam * 0.5 / RHO_PF * EQ_PF * H  # prefill work; the decode pool is sized by the held KV (its load is negligible)
    assert obj == pytest.approx(base + hold_cost, rel=1e-6)


@pytest.mark.parametrize("factor, expect", [(0.1, "hold"), (0.5, "hold"), (2.0, "offload"), (10.0, "offload")])
def test_waits_far_from_breakeven_pick_the_obvious_policy_in_the_integer_plan(factor: float, expect: str) -> None:
    # 1000 calls/s: pools of tens to hundreds of instances, so integer rounding (< 1 instance per
    # pool) cannot outweigh a factor of 2 in the wait; a real decode load keeps the decode pool provisioned.
    w = _closed_form_breakeven() * factor
    res = solve_tables(_tables(w, lam=1000.0, tau_dec=1e-3), SolveSettings(architectures=("disaggregated",))).result
    plan = res.architectures["disaggregated"]
    assert plan.tool_phase is not None, plan.solver
    row = plan.tool_phase.tools[0]
    share = {"hold": row.hold_share, "offload": row.offload_share}[expect]
    assert share >= 0.95  # the rest fills free capacity left by rounding pools up to whole instances (free, so optimal)
    assert check_plan(res) == []


def test_recompute_wins_only_when_reload_is_slower_than_recompute() -> None:
    # hold excluded; tier free: offload costs reload_s, recompute costs recompute_s (same pool, same price).
    for reload_s, expect in ((1.8, "offload"), (2.2, "recompute")):
        hold, off, rec, _ = _relaxed_shares(_tables(30.0, reload_s=reload_s, recompute_s=2.0, tier_usd_per_gb_month=0.0, policies="offload,recompute"))
        assert (off if expect == "offload" else rec) == pytest.approx(1.0)


@settings(max_examples=12, deadline=None)
@given(reload_s=st.floats(0.01, 5.0), recompute_s=st.floats(0.01, 5.0), wait=st.floats(0.1, 100.0))
def test_property_recompute_chosen_implies_reload_slower(reload_s: float, recompute_s: float, wait: float) -> None:
    _h, off, rec, _ = _relaxed_shares(_tables(wait, reload_s=reload_s, recompute_s=recompute_s, tier_usd_per_gb_month=0.0))
    if rec > 0.5:
        assert reload_s >= recompute_s * (1 - 1e-6)
    assert _h + off + rec == pytest.approx(1.0)


def test_offload_is_masked_where_the_reload_breaks_the_ttft_target() -> None:
    # Long wait (offload far cheaper), but reload 4.5 s + TTFT 1 s > 5 s target: offload not allowed.
    w = _closed_form_breakeven() * 20
    hold, off, rec, _ = _relaxed_shares(_tables(w, reload_ms_rep=4500.0, policies="hold,offload"))
    assert off == pytest.approx(0.0, abs=1e-9) and hold == pytest.approx(1.0)
    res = solve_tables(_tables(w, reload_ms_rep=4500.0, policies="hold,offload", tau_dec=1e-2), SolveSettings(architectures=("disaggregated",))).result
    alt = {a.policy: a for a in res.architectures["disaggregated"].tool_phase.tools[0].alternatives}  # type: ignore[union-attr]
    assert alt["offload"].usd_per_month is None and "TTFT" in alt["offload"].reason


def test_cpu_pool_sized_by_cores_and_costed() -> None:
    # 10 calls/s x 2 core-s = 20 cores; 16 cores x cap 0.5 = 8 usable per server -> ceil(20/8) = 3 servers.
    srv = pd.DataFrame([{"server": "cpu", "cores": 16, "memory_gb": 512.0, "equipment_usd_per_server_hour": 1.0, "busy_power_w": 500.0,
                         "idle_power_w": 100.0, "host_power_w": 0.0, "ops_usd_per_server_month": 10.0, "license_usd_per_server_month": 0.0,
                         "procurement_limit": math.inf}])
    t = _tables(0.1, cpu_s_per_call=2.0, cpu_servers=srv, tau_dec=1e-2)
    t = CapacityTables(demand=t.demand, points=t.points, configs=t.configs, costs=t.costs,
                       agents=AgentTables(waits=t.agents.waits, points=t.agents.points, cpu_servers=srv, cpu_demand=t.agents.cpu_demand,  # type: ignore[union-attr]
                                          params=AgentParams(tier_usd_per_gb_month=3.0, cpu_utilization_cap=0.5)))
    res = solve_tables(t, SolveSettings(architectures=("disaggregated",))).result
    plan = res.architectures["disaggregated"]
    assert plan.tool_phase is not None and plan.costs is not None
    (pool,) = plan.tool_phase.cpu_pools
    assert pool.instances == 3 and pool.cores_needed_peak == pytest.approx(20.0)
    assert plan.costs.cpu_pool_usd_per_month == pytest.approx(3 * (1.0 * H + 10.0))  # electricity price 0
    assert sum(plan.costs.terms().values()) == pytest.approx(plan.costs.total_usd_per_month)
    assert plan.solver.objective_usd_per_month == pytest.approx(plan.costs.total_usd_per_month, rel=1e-6)
    assert check_plan(res) == []


def test_tool_waiting_dominates_says_accelerators_would_not_help() -> None:
    res = solve_tables(_tables(60.0, calls=2.0, tau_dec=1e-2), SolveSettings(architectures=("disaggregated",))).result
    text = " ".join(res.architectures["disaggregated"].tool_phase.statements)  # type: ignore[union-attr]
    assert "tool waiting dominates" in text and "More accelerators would not help" in text and "parallel" in text
    res = solve_tables(_tables(0.1, calls=0.1, tau_dec=1e-2), SolveSettings(architectures=("disaggregated",))).result
    text = " ".join(res.architectures["disaggregated"].tool_phase.statements)  # type: ignore[union-attr]
    assert "dominates" not in text and "LLM pools set the pace" in text


def test_no_agents_keeps_tool_terms_zero() -> None:
    t = _tables(1.0)
    plain = CapacityTables(demand=t.demand, points=t.points, configs=t.configs, costs=t.costs)
    plan = solve_tables(plain, SolveSettings(architectures=("disaggregated",))).result.architectures["disaggregated"]
    assert plan.tool_phase is None and plan.costs is not None
    assert plan.costs.cpu_pool_usd_per_month == plan.costs.kv_tier_usd_per_month == plan.costs.tool_state_energy_usd_per_month == 0.0
    assert np.isfinite(plan.costs.total_usd_per_month)
