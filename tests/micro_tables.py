"""One hand-solvable capacity table shared by the tests that price it by hand (import it as
``from micro_tables import micro_tables``; pytest puts ``tests/`` on the path).

One bucket of one service, one unified tp1 configuration ``g/tp1``: 10 req/s at peak (5 mean),
1 s of an instance per request, 500 J per request, a supplied utilisation cap (0.5 by default:
20 instances at peak); device ``g`` rents at $2/h, 100 W idle + 50 W host, $10 + $5 a month of
operations and licence.
"""

from __future__ import annotations

import math

import pandas as pd

from planner.schema.capacity import CapacityTables, CostParams


def micro_tables(*, rate_peak: float = 10.0, tau: float = 1.0, cap: float = 0.5, price_kwh: float = 0.0, ops_pool: float = 0.0,
                 ops_type: float = 0.0, limit: float = math.inf) -> CapacityTables:
    demand = pd.DataFrame([{
        "service": "chat", "bucket": "b0", "weight": 1.0, "rate_mean_per_s": rate_peak / 2, "rate_peak_per_s": rate_peak,
        "input_tokens_mean": 1000.0, "output_tokens_mean": 100.0, "input_tokens_rep": 1000.0, "output_tokens_rep": 100.0,
        "interarrival_cv": 1.0, "ttft_quantile": 0.99, "ttft_target_ms": 1000.0, "tpot_quantile": 0.99, "tpot_target_ms": 50.0,
    }])
    points = pd.DataFrame([{
        "service": "chat", "bucket": "b0", "role": "unified", "config": "g/tp1", "device": "g", "tp": 1, "feasible": True,
        "reason": "", "bound": "compute", "instance_seconds_per_request": tau, "max_batch": 1, "kv_bytes_per_request": 0.0,
        "kv_transfer_bytes_per_request": 0.0, "energy_j_per_request": 500.0, "ttft_ms": 200.0, "tpot_ms": 20.0,
        "service_time_cv": 0.0, "source": "hand", "utilization_cap": cap,
    }])
    configs = pd.DataFrame([{
        "config": "g/tp1", "device": "g", "tp": 1, "kind": "gpu", "equipment_usd_per_device_hour": 2.0, "busy_power_w": 700.0,
        "idle_power_w": 100.0, "host_power_w": 50.0, "ops_usd_per_device_month": 10.0, "license_usd_per_device_month": 5.0,
        "procurement_limit": limit, "nic_bw_gb_per_s": 50.0,
    }])
    costs = CostParams(electricity_usd_per_kwh=price_kwh, pue=1.5, hours_per_month=730.0, ops_usd_per_pool_month=ops_pool,
                       ops_usd_per_device_type_month=ops_type, nic_usd_per_device_month=40.0, transfer_usd_per_gb=0.0)
    return CapacityTables(demand=demand, points=points, configs=configs, costs=costs)
