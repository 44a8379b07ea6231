"""Plan totals with the tool phase: energy per token and mean power include the CPU pool and the
KV reloads; the decode pools' peak KV includes the KV held during tool waits. Hand-computed.

Tables of :mod:`test_agents_mip`: prefill τ 0.5 s at cap 0.8, decode τ 0.01 s, 10 LLM calls/s
(peak = mean), 20,000 in + 100 out tokens, every device 700 W busy / 100 W idle / 0 W host,
tp 1, 730 h per month; here electricity 0.1 USD/kWh and PUE 1.5.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_agents_mip import H, _tables

from planner.agents.tables import AgentParams, AgentTables
from planner.optimize import SolveSettings, check_plan, solve_tables
from planner.schema.capacity import CapacityTables, CostParams
from planner.schema.plan import ArchitecturePlan

PUE = 1.5
PRICE = 0.1
TOKENS = 10.0 * 20100.0 * 3600.0 * H  # per month


def _priced(t: CapacityTables, cpu: pd.DataFrame | None = None, params: AgentParams | None = None) -> CapacityTables:
    costs = CostParams(electricity_usd_per_kwh=PRICE, pue=PUE, hours_per_month=H, ops_usd_per_pool_month=0.0,
                       ops_usd_per_device_type_month=0.0, nic_usd_per_device_month=0.0, transfer_usd_per_gb=0.0)
    a = t.agents
    assert a is not None
    agents = AgentTables(waits=a.waits, points=a.points, cpu_servers=cpu if cpu is not None else a.cpu_servers,
                         cpu_demand=a.cpu_demand, params=params or a.params)
    return CapacityTables(demand=t.demand, points=t.points, configs=t.configs, costs=costs, agents=agents)


def _solve(t: CapacityTables) -> ArchitecturePlan:
    res = solve_tables(t, SolveSettings(architectures=("disaggregated",), verify_rounds=0)).result
    plan = res.architectures["disaggregated"]
    assert plan.feasible, plan.diagnosis
    assert check_plan(res) == []
    return plan


def _instances(plan: ArchitecturePlan) -> dict[str, int]:
    return {p.role: p.instances for p in plan.pools}


def test_energy_includes_the_cpu_pool_idle_and_busy_power() -> None:
    # 10 calls/s x 2 core-s = 20 cores at cap 0.5 on 16-core servers -> 3 servers (as test_agents_mip).
    srv = pd.DataFrame([{"server": "cpu", "cores": 16, "memory_gb": 512.0, "equipment_usd_per_server_hour": 1.0, "busy_power_w": 500.0,
                         "idle_power_w": 100.0, "host_power_w": 0.0, "ops_usd_per_server_month": 10.0, "license_usd_per_server_month": 0.0,
                         "procurement_limit": math.inf}])
    t = _priced(_tables(0.1, cpu_s_per_call=2.0, cpu_servers=srv, tau_dec=1e-2), cpu=srv,
                params=AgentParams(tier_usd_per_gb_month=3.0, cpu_utilization_cap=0.5))
    plan = _solve(t)
    # prefill: 10 x 0.5 / 0.8 = 6.25 -> 7 instances; decode: 0.1 busy, 4 GB held of 50 GB -> 1
    assert _instances(plan) == {"prefill": 7, "decode": 1}
    assert plan.tool_phase is not None and plan.tool_phase.cpu_pools[0].instances == 3
    # GPUs: requests' busy energy 0 (energy_j_per_request 0, host 0); idle 100 W on the 8 instances' unused time:
    #   (8 x 100 - (10 x 0.5 + 10 x 0.01) x 100) W = 290 W -> 0.29 kW x 730 h = 211.7 kWh
    # CPU pool: 3 servers x 100 W idle = 0.3 kW x 730 = 219 kWh; busy (500 - 100) / 16 = 25 W per core x 20 cores = 0.5 kW -> 365 kWh
    kwh = PUE * (211.7 + 219.0 + 365.0)
    assert plan.power_kw_mean == pytest.approx(kwh / H, rel=1e-9)
    assert plan.energy_wh_per_1k_tokens == pytest.approx(kwh * 1e3 / TOKENS * 1e3, rel=1e-9)
    # the energy parts of the cost terms agree: power terms + CPU energy (idle + busy) at PRICE x PUE
    c = plan.costs
    assert c is not None
    cpu_energy_usd = PRICE * PUE * (219.0 + 365.0)
    assert (c.power_busy_usd_per_month + c.power_idle_usd_per_month + cpu_energy_usd) / PRICE == pytest.approx(kwh, rel=1e-9)
    assert c.cpu_pool_usd_per_month == pytest.approx(3 * (1.0 * H + 10.0) + cpu_energy_usd, rel=1e-9)


def test_energy_includes_the_reloads_and_held_kv_is_absent_when_offloaded() -> None:
    # 20 s waits, offload only (else the free KV of the one decode instance holds a few sessions at no cost).
    plan = _solve(_priced(_tables(20.0, tau_dec=1e-2, policies="offload")))
    assert plan.tool_phase is not None and plan.tool_phase.tools[0].offload_share == pytest.approx(1.0)
    # prefill load 10 x (0.5 + 0.05) / 0.8 = 6.875 -> 7; decode 1
    assert _instances(plan) == {"prefill": 7, "decode": 1}
    # GPUs idle as above: 211.7 kWh; reloads: 10/s x 0.05 s x (700 - 100) W = 300 W -> 219 kWh
    kwh = PUE * (211.7 + 219.0)
    assert plan.power_kw_mean == pytest.approx(kwh / H, rel=1e-9)
    assert plan.energy_wh_per_1k_tokens == pytest.approx(kwh * 1e3 / TOKENS * 1e3, rel=1e-9)
    assert plan.costs is not None and plan.costs.tool_state_energy_usd_per_month == pytest.approx(PRICE * PUE * 219.0, rel=1e-9)
    dec = next(p for p in plan.pools if p.role == "decode")
    assert dec.kv_bytes_peak == 0.0  # nothing held


def test_held_kv_is_in_the_decode_pools_peak_kv() -> None:
    # 0.1 s waits are held: 10 calls/s x 0.1 s x 4 GB = 4 GB in wait at peak (requests' own KV is 0 in these tables).
    plan = _solve(_priced(_tables(0.1, tau_dec=1e-2)))
    assert plan.tool_phase is not None and plan.tool_phase.tools[0].hold_share == pytest.approx(1.0)
    dec = next(p for p in plan.pools if p.role == "decode")
    assert dec.kv_bytes_peak == pytest.approx(4e9, rel=1e-9)
    assert dec.kv_bytes_peak <= dec.kv_capacity_bytes
    # and no tool-phase energy beyond the GPUs' idle power
    assert plan.power_kw_mean == pytest.approx(PUE * 0.29, rel=1e-9)


def test_zero_electricity_price_still_reports_energy() -> None:
    t = _tables(0.1, tau_dec=1e-2)  # electricity 0 USD/kWh, PUE 1
    plan = _solve(t)
    assert plan.power_kw_mean == pytest.approx(0.29, rel=1e-9)
