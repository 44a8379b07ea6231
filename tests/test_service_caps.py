"""Utilisation caps of a shared (unified) pool from the service's whole load on a config (issue 24 item 0):
splitting a bucket must not lower the slot pool's cap of its halves (planner.optimize.prepare.service_busy)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.optimize.prepare import service_busy, utilization_caps


def _points(buckets: list[tuple[str, float]], role: str = "unified", service: str = "chat") -> pd.DataFrame:
    rows = []
    for bucket, rate in buckets:
        rows.append({"service": service, "bucket": bucket, "role": role, "config": "h100-tp1",
                     "instance_seconds_per_request": 0.5, "max_batch": 1 if role == "prefill" else 4,
                     "rate_peak_per_s": rate, "ttft_ms": 200.0, "ttft_target_ms": 1000.0, "tpot_target_ms": 50.0,
                     "ttft_quantile": 0.99, "tpot_quantile": 0.99, "tpot_ms": 30.0, "bound": "compute",
                     "service_time_cv": 0.5, "interarrival_cv": 1.0})
    return pd.DataFrame(rows)


def test_service_busy_sums_the_service_buckets_per_role_and_config():
    pts = pd.concat([_points([("a", 4.0), ("b", 2.0)]), _points([("a", 10.0)], service="other")], ignore_index=True)
    np.testing.assert_allclose(service_busy(pts), [3.0, 3.0, 5.0])  # 0.5 s x (4 + 2) /s; the other service alone


def test_unified_slot_cap_does_not_move_when_a_bucket_is_split():
    whole, _ = utilization_caps(_points([("all", 8.0)]))
    halves, _ = utilization_caps(_points([("lo", 4.0), ("hi", 4.0)]))
    quarters, _ = utilization_caps(_points([(f"q{i}", 2.0) for i in range(4)]))
    assert whole[0] > 0
    np.testing.assert_allclose(halves, whole[0])
    np.testing.assert_allclose(quarters, whole[0])
    # the per-bucket nominal pool (1 instance for a 2/s x 0.5 s quarter) gives a strictly lower cap
    lone, _ = utilization_caps(_points([("q0", 2.0)]))
    assert lone[0] < whole[0] - 1e-3


def test_prefill_keeps_the_bucket_own_pool():
    quarters, _ = utilization_caps(_points([(f"q{i}", 2.0) for i in range(4)], role="prefill"))
    lone, _ = utilization_caps(_points([("q0", 2.0)], role="prefill"))
    np.testing.assert_allclose(quarters, lone[0])
