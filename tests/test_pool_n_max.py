"""One big-M helper (issue 27): :func:`planner.optimize.prepare.pool_n_max` is the per-pool sum that
``prepare()`` computed in its pool loop, and the sweeps' re-preparation gives the model a fresh
``prepare()`` builds (a multimodal one-path bug was the two drifting apart)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from planner.optimize.prepare import pool_n_max, prepare
from planner.optimize.resolve import Resolver, scale_rates
from planner.optimize.settings import SolveSettings
from planner.optimize.synthetic import synthetic_tables


def _loop_reference(pts: pd.DataFrame, pools: pd.DataFrame) -> np.ndarray:
    """The per-pool loop ``prepare()`` ran before the helper (one group at a time, scalar sums)."""
    out = []
    for pool, kvcap in zip(pools["pool"], pools["kv_capacity_bytes"], strict=True):
        grp = pts[pts["pool"] == pool]
        if not len(grp):
            out.append(2)  # ⌈0 + 1e-9⌉ + 1, as the helper
            continue
        inline = grp["role"].isin(["encode_prefill", "encode_unified"]).to_numpy()
        n_load = math.ceil(grp.groupby(["d", inline])["load_peak_coef"].max().sum() + 1e-9)
        kvcap = float(np.nan_to_num(kvcap, nan=0.0))
        n_kv = math.ceil(grp.groupby("d")["kv_peak_coef"].max().sum() / kvcap + 1e-9) if kvcap > 0 else 0
        out.append(max(n_load, n_kv) + 1)
    return np.array(out, dtype=int)


def _random_points(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    n = 300
    pool_names = [f"p{k}" for k in range(12)]
    pts = pd.DataFrame({
        "pool": rng.choice(pool_names[:-1], n),  # the last pool has no points: big-M 2
        "d": rng.integers(0, 9, n),
        "role": rng.choice(["prefill", "unified", "decode", "encode_prefill", "encode_unified"], n),
        "load_peak_coef": rng.exponential(3.0, n),
        "kv_peak_coef": np.where(rng.random(n) < 0.1, np.nan, rng.exponential(5e10, n)),  # NaN: measured rows
    })
    kvcap = rng.choice([0.0, np.nan, 4e10, 8e10], len(pool_names))
    pools = pd.DataFrame({"pool": pool_names, "kv_capacity_bytes": kvcap})
    return pts, pools


def test_vectorised_big_m_equals_the_per_pool_loop() -> None:
    for seed in range(5):
        pts, pools = _random_points(seed)
        got = pool_n_max(pts, pools)
        ref = _loop_reference(pts, pools)
        assert got.tolist() == ref.tolist()
        assert got[-1] == 2
        # the inline split matters: taking one max per demand row would give a smaller big-M somewhere
        single = pts.assign(role="prefill")
        assert (pool_n_max(single, pools) <= got).all() and (pool_n_max(single, pools) < got).any()


def test_prepare_uses_the_helper() -> None:
    tables = synthetic_tables(services=2, buckets=3, devices=2, tps=(1, 2), seed=3)
    prep = prepare(tables)
    assert prep.pools["n_max"].tolist() == _loop_reference(prep.points, prep.pools).tolist()
    assert (prep.pools["n_max"] >= 2).all()


def test_resolver_reprepare_gives_the_fresh_big_m_at_every_rate() -> None:
    tables = synthetic_tables(services=2, buckets=3, devices=2, tps=(1, 2), seed=3)
    r = Resolver.create(tables, SolveSettings(), rate_headroom=4.0)
    for mult in (0.5, 1.0, 2.7, 4.0):
        t = scale_rates(tables, {"svc0": mult})
        fresh = prepare(t)
        again = r.reprepare(t)
        assert again is not None
        assert again.pools["pool"].tolist() == fresh.pools["pool"].tolist()
        assert again.pools["n_max"].tolist() == fresh.pools["n_max"].tolist()
