"""A unified pool that carries a share ``P`` of its service sees the service's arrivals thinned,
``c_a² = P·c² + 1 − P`` (planner.pool_latency._thinned_cv2), as prefill and decode pools do.

Before, a unified pool kept the service's whole arrival CV whatever its share: code-completion-8b at
16 buckets had a one-instance tp1 top-up pool carrying 2.7 % of four buckets charged the service's CV
4.7 (c_a² 22.3 instead of 1.57), a 1,715 ms slot wait the simulator never saw, and its plan was reported
as missing its TTFT target (analytic 1,395 ms, simulated 484 ms). A pool carrying its whole service is
unchanged (P = 1), so no shipped example's plan moved."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("share", [1.0, 0.3, 0.027])
def test_unified_pool_sees_its_share_of_the_arrivals(share: float) -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.pool_latency import pool_latency

    resolved = load_instance(ROOT / "instances" / "code-completion-8b.yaml")
    pts = prepare(build_capacity_tables(resolved)).points
    unified = pts.index[(pts["role"] == "unified")]
    pool = str(pts.loc[unified[0], "pool"])
    on = (pts["pool"] == pool).to_numpy()
    # every bucket of the service: `share` of it on this pool (the rest elsewhere, not in this pool's queue)
    first = pts[on].groupby("d").head(1).index
    x = np.zeros(len(pts))
    x[pts.index.get_indexer(first)] = share
    row = pool_latency(pts, x, {pool: 50}, 0).set_index("pool").loc[pool]
    c = float(pts.loc[first, "interarrival_cv"].iloc[0])
    assert (pts.loc[first, "interarrival_cv"] == c).all() and c > 1.5  # one bursty service
    assert float(row["arrival_cv"]) == pytest.approx(math.sqrt(share * c * c + 1.0 - share), rel=1e-9)
