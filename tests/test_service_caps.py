"""Utilisation caps of a bucket from its latency group's queue (issue 24 item 0): splitting a bucket inside its
group must not move the caps of its halves (planner.optimize.prepare.group_busy, group_service)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from planner.optimize.prepare import group_busy, group_service, utilization_caps


def _points(buckets: list[tuple[str, float, float, float]], role: str = "unified", service: str = "chat",
            group: int | None = 0) -> pd.DataFrame:
    """One point per (bucket, peak rate /s, instance-seconds per request, service-time CV)."""
    rows = []
    for bucket, rate, tau, cv in buckets:
        rows.append({"service": service, "bucket": bucket, "role": role, "config": "h100-tp1",
                     "instance_seconds_per_request": tau, "max_batch": 1 if role == "prefill" else 4,
                     "rate_peak_per_s": rate, "ttft_ms": 200.0, "ttft_target_ms": 1000.0, "tpot_target_ms": 50.0,
                     "ttft_quantile": 0.99, "tpot_quantile": 0.99, "tpot_ms": 30.0, "bound": "compute",
                     "service_time_cv": cv, "interarrival_cv": 1.0})
    frame = pd.DataFrame(rows)
    return frame if group is None else frame.assign(latency_group=group)


def test_group_busy_sums_the_group_buckets_per_role_and_config() -> None:
    pts = pd.concat([_points([("a", 4.0, 0.5, 0.0), ("b", 2.0, 0.5, 0.0)]),
                     _points([("c", 2.0, 0.5, 0.0)], group=1),
                     _points([("a", 10.0, 0.5, 0.0)], service="other")], ignore_index=True)
    # 0.5 s x (4 + 2) /s for the group; bucket c alone in its group; the other service alone
    np.testing.assert_allclose(group_busy(pts), [3.0, 3.0, 1.0, 5.0])
    # without the column (a hand-written table): every bucket its own
    np.testing.assert_allclose(group_busy(pts.drop(columns="latency_group")), [2.0, 1.0, 1.0, 5.0])


def test_group_service_is_the_rate_weighted_mixture() -> None:
    pts = _points([("lo", 3.0, 0.2, 0.5), ("hi", 1.0, 1.0, 0.0)], role="prefill")
    mean, cv = group_service(pts, pts["instance_seconds_per_request"].to_numpy(float), pts["service_time_cv"].to_numpy(float))
    m1 = 0.75 * 0.2 + 0.25 * 1.0
    m2 = 0.75 * 0.2**2 * 1.25 + 0.25 * 1.0
    np.testing.assert_allclose(mean, [m1, m1])
    np.testing.assert_allclose(cv, [np.sqrt(m2 / m1**2 - 1.0)] * 2)


@pytest.mark.parametrize("role", ["prefill", "decode", "unified"])
def test_cap_does_not_move_when_a_bucket_is_split_inside_its_group(role: str) -> None:
    # one bucket at 8 /s of 0.5 s, or halves of 0.3 s and 0.7 s (the same mixture mean) in one group: the halves'
    # queue is the whole's, with the mixture's CV; the whole bucket carrying that CV gets the same cap
    halves = _points([("lo", 4.0, 0.3, 0.0), ("hi", 4.0, 0.7, 0.0)], role=role)
    cv = float(group_service(halves, halves["instance_seconds_per_request"].to_numpy(float) * (1 if role == "prefill" else 4),
                             np.zeros(2))[1][0])
    whole, _ = utilization_caps(_points([("all", 8.0, 0.5, cv)], role=role))
    split, _ = utilization_caps(halves)
    assert whole[0] > 0
    np.testing.assert_allclose(split, whole[0], rtol=1e-6)
    # each half in its own group (the rule before: the bucket's own load and service time) caps differently
    lone, _ = utilization_caps(halves.assign(latency_group=[0, 1]))
    assert abs(lone[1] - whole[0]) > 1e-3


def test_stacked_copies_of_a_table_are_grouped_apart() -> None:
    # planner.horizon.model prices every rate level in one call on stacked copies of the points: a copy's
    # caps are those it gets alone (the groups do not mix rate levels)
    base = _points([("lo", 4.0, 0.3, 0.0), ("hi", 4.0, 0.7, 0.0)], role="prefill")
    stacked, _ = utilization_caps(pd.concat([base, base.assign(rate_peak_per_s=40.0)], ignore_index=True))
    alone = [utilization_caps(base)[0], utilization_caps(base.assign(rate_peak_per_s=40.0))[0]]
    np.testing.assert_allclose(stacked, np.concatenate(alone))
    assert stacked[2] > stacked[0] + 1e-3  # ten times the load pools better
