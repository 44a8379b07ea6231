"""Synthetic capacity tables for tests and benchmarks (not for planning).

The numbers are internally consistent but invented: each device has a speed factor and a
price; prefill instance-time scales with input tokens / (speed · tp^0.9); decode runs a
batch whose size grows with tp; unified pays a chunked-prefill interference factor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from planner.schema.capacity import CapacityTables, CostParams


def synthetic_tables(*, services: int = 1, buckets: int = 2, devices: int = 2, tps: tuple[int, ...] = (1,),
                     roles: tuple[str, ...] = ("prefill", "decode", "unified"), seed: int = 0,
                     rate_scale: float = 1.0, procurement_limit: float = float("inf"),
                     infeasible_share: float = 0.0) -> CapacityTables:
    rng = np.random.default_rng(seed)
    dem_rows = []
    for s in range(services):
        peak = rate_scale * float(rng.uniform(0.5, 8.0))
        w = rng.dirichlet(np.ones(buckets))
        for b in range(buckets):
            dem_rows.append({
                "service": f"svc{s}", "bucket": f"b{b}", "weight": float(w[b]),
                "rate_mean_per_s": float(peak * w[b] * rng.uniform(0.4, 0.9)), "rate_peak_per_s": float(peak * w[b]),
                "input_tokens_mean": float(rng.uniform(100, 4000)), "output_tokens_mean": float(rng.uniform(50, 600)),
                "input_tokens_rep": 0.0, "output_tokens_rep": 0.0, "interarrival_cv": 1.0,
                "ttft_quantile": 0.99, "ttft_target_ms": 2000.0, "tpot_quantile": 0.99, "tpot_target_ms": 80.0,
                "model": f"m{s % 2}",
            })
    demand = pd.DataFrame(dem_rows)
    demand["input_tokens_rep"] = demand["input_tokens_mean"] * 1.5
    demand["output_tokens_rep"] = demand["output_tokens_mean"] * 1.5
    dev: list[dict[str, Any]] = [{"device": f"dev{j}", "speed": float(rng.uniform(0.5, 2.0)), "price": float(rng.uniform(1.0, 5.0)),
            "busy_w": float(rng.uniform(300, 1000)), "idle_w": float(rng.uniform(60, 150))} for j in range(devices)]
    cfg_rows, pt_rows = [], []
    for dv in dev:
        for tp in tps:
            config = f"{dv['device']}/tp{tp}"
            cfg_rows.append({"config": config, "device": dv["device"], "tp": tp, "kind": "gpu",
                             "equipment_usd_per_device_hour": dv["price"], "busy_power_w": dv["busy_w"], "idle_power_w": dv["idle_w"],
                             "host_power_w": 100.0, "ops_usd_per_device_month": 50.0, "license_usd_per_device_month": 0.0,
                             "procurement_limit": procurement_limit, "nic_bw_gb_per_s": 50.0})
            speed = dv["speed"] * tp ** 0.9
            for d in dem_rows:
                for role in roles:
                    inp, out = float(d["input_tokens_mean"]), float(d["output_tokens_mean"])  # type: ignore[arg-type]
                    if role == "prefill":
                        tau = inp / (speed * 20000.0)
                        batch, ttft, tpot = 1, tau * 1e3 * 1.5 + 20, 0.0
                    elif role == "decode":
                        batch = int(16 * tp * dv["speed"]) + 1
                        step = 0.03 / dv["speed"] * tp ** -0.5
                        tau = out * step / batch
                        ttft, tpot = 0.0, step * 1e3
                    else:
                        batch = int(12 * tp * dv["speed"]) + 1
                        step = 0.03 / dv["speed"] * tp ** -0.5
                        tau = (inp / (speed * 20000.0)) * 1.3 + out * step / batch * 1.2
                        ttft, tpot = inp / (speed * 20000.0) * 1e3 * 2.0 + 30, step * 1.2e3
                    feasible = bool(rng.uniform() >= infeasible_share)
                    pt_rows.append({
                        "service": d["service"], "bucket": d["bucket"], "role": role, "config": config, "device": dv["device"], "tp": tp,
                        "feasible": feasible, "reason": "" if feasible else "synthetic: marked infeasible", "bound": "compute",
                        "instance_seconds_per_request": tau, "max_batch": batch,
                        "kv_bytes_per_request": 0.0 if role == "prefill" else (inp + out) * 160e3,
                        "kv_transfer_bytes_per_request": inp * 160e3 if role == "prefill" else 0.0,
                        "energy_j_per_request": tau * tp * dv["busy_w"], "ttft_ms": ttft, "tpot_ms": tpot,
                        "service_time_cv": 0.5, "source": "synthetic",
                    })
    costs = CostParams(electricity_usd_per_kwh=0.0806, pue=1.54, hours_per_month=730.0, ops_usd_per_pool_month=2000.0,
                       ops_usd_per_device_type_month=3000.0, nic_usd_per_device_month=40.0, transfer_usd_per_gb=0.0)
    return CapacityTables(demand=demand, points=pd.DataFrame(pt_rows), configs=pd.DataFrame(cfg_rows), costs=costs,
                          meta={"source": f"synthetic seed={seed}"})
