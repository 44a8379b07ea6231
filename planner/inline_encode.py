"""An inline encode as part of the prompt it rides with, for the analytic latency of a plan.

The capacity table prices a multimodal request's vision tower as its own row (role ``encode_prefill`` /
``encode_unified``, :mod:`planner.capacity_encode`) in the pool that prefills the request, and the MIP charges
its time there. For a prefill pool's *queue* the two rows are one job: the tower runs, then the prompt prefills, on
the same instance. :func:`fold_inline_encode` moves each routed ``encode_prefill`` row's time onto its host
prefill row (the same service, bucket and pool) and takes the encode row out of the routing, so the analytic views
(:func:`planner.pool_latency.pool_latency`, :func:`~planner.pool_latency.bucket_latency`) see one arrival per
request carrying both: ``τ += e`` and ``ttft_ms += e``, ``e`` the mean encode seconds per request the host
prefills (``Σ x_enc t_enc / x_host`` over the bucket's inline rows in that pool; the routed rates share the
bucket's ``λ``, so a ratio of shares). The pool's G/G/c then queues one job of ``τ + e`` per request instead of
two arrivals of ``τ`` and ``e``: the same busy time, half the arrivals, a longer mean service. It is the
simulator's model of the same tower (:func:`planner.simulate.adapter.inline_encode_tokens`: the encode seconds as
prompt work). multimodal-image's disaggregated plan: prefill wait p99 216 ms analytic against 203 simulated, TTFT
p99 517 against 536 ms (−4 %); with two arrivals 117 ms and 418 ms (+28 %).

A **unified** host (``encode_unified``) is not folded: its tower stays its own row, its time added to the bucket's
TTFT, and the chunked-prefill lane runs without it. Folded in the same way (the tower as
``e · q / (t_chunk − t_dec)`` more prompt tokens of lane work, as the simulator runs it), multimodal-image's shared
plan (4 H100) was predicted at TTFT p50 / p90 / p99 242 / 413 / 661 ms and TPOT p50 / p99 32.6 / 50.7 ms against
218 / 328 / 454 and 32.5 / 40.1 simulated (600 s, seed 0): the means right, the tails +26 to +46 % — the lane's
per-token law (:func:`planner.pool_latency._tpot_quantile_s`, its count's dispersion ``c_a² / (1 − a)²``) is
pessimistic at a lane share of 0.6 with 39-token outputs, and the check's TPOT 50.7 against the 50 ms target
tightened the plan to 14 L40S (+$1,053/month) that the simulation shows is not needed (TPOT p99 40.1 ms). Unfolded
the shared plan is predicted at TTFT p99 293 and TPOT p99 27.5 ms (optimistic against 399 / 39.9 in the solve's peak
simulation, which checks it). Measured 2026-12-07; open until the per-token law's tail is right at that load.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FOLDED_COLUMN = "encode_folded"
"""Marks a frame :func:`fold_inline_encode` already folded (so a function handing its folded frame to another folds once)."""


def fold_inline_encode(points: pd.DataFrame, share: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """``(points, share)`` with every routed ``encode_prefill`` row folded into its host prefill row (module docstring);
    the same objects when there is nothing to fold or the frame is already folded."""
    x = np.asarray(share, dtype=float)
    if FOLDED_COLUMN in points.columns or "role" not in points.columns or not len(points):
        return points, x
    roles = points["role"].to_numpy(str)
    enc = (roles == "encode_prefill") & (x > 0)
    if not enc.any():
        return points, x
    out = points.copy()
    out[FOLDED_COLUMN] = True
    x = x.copy()
    key = list(zip(out["service"].astype(str), out["bucket"].astype(str), out["pool"].astype(str), roles, strict=True))
    host_of = {k[:3]: i for i, k in enumerate(key) if x[i] > 0 and k[3] == "prefill"}
    tau = out["instance_seconds_per_request"].to_numpy(float).copy()
    ttft = out["ttft_ms"].to_numpy(float).copy()
    for j in np.flatnonzero(enc):
        h = host_of.get(key[j][:3])
        if h is None:
            continue  # no routed host in the pool (the MIP's encode_host rows forbid it): left as its own row
        e_s = x[j] * float(tau[j]) / x[h]
        if e_s > 0 and np.isfinite(e_s):
            tau[h] += e_s
            ttft[h] += 1e3 * e_s
        x[j] = 0.0
    out["instance_seconds_per_request"] = tau
    out["ttft_ms"] = ttft
    return out, x
