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

A **unified** host (``encode_unified``) carries its tower as lane work: ``e · q / δ`` more prompt tokens
(``δ = step_ms − decode_only_step_ms``, the lane time of a full chunk of ``q`` tokens beyond the decode step: the
tower takes the time of that many prompt tokens, as the simulator runs it, :func:`planner.simulate.adapter.inline_encode_tokens`)
on its ``prefill_tokens`` (and ``prefill_tokens_rep``), ``lane_service_ms`` and ``ttft_ms``; its own time per
request (its decode, from which the lane model takes its output count) is kept. A host without lane columns (a
measured point) keeps the tower as its own row, its time added to the bucket's TTFT. multimodal-image's shared plan
(4 H100, 39-token outputs), peak simulation against analytic: TPOT p99 39.9 ms against 41.1 (−3 %; 24.3, +65 %
optimistic, with the tower outside the lane) and TTFT p99 399 against 661 ms (pessimistic −40 %; 293, +36 %
optimistic, before): the short-output TTFT law behind several instances is pessimistic
(``benchmarks/bench_latency_at_load.py --outputs 40``). When this fold was first tried (2026-12-07) the TPOT law's
window count (negative binomial, dispersion ``c_a² / (1 − a)²``) put TPOT p99 at 50.7 ms and the check bought 14
L40S the simulation did not need; with the window's law behind the router
(:func:`planner.pool_latency._tpot_quantile_s`) the plan is unchanged (12,876 USD/month).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FOLDED_COLUMN = "encode_folded"
"""Marks a frame :func:`fold_inline_encode` already folded (so a function handing its folded frame to another folds once)."""


def fold_inline_encode(points: pd.DataFrame, share: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """``(points, share)`` with every routed ``encode_prefill`` row folded into its host prefill row and every routed
    ``encode_unified`` row into its host unified row as lane work (module docstring); the same objects when there is
    nothing to fold or the frame is already folded."""
    x = np.asarray(share, dtype=float)
    if FOLDED_COLUMN in points.columns or "role" not in points.columns or not len(points):
        return points, x
    roles = points["role"].to_numpy(str)
    lane_cols = all(c in points.columns for c in (*_LANE_TOKEN_COLUMNS, "step_ms", "decode_only_step_ms", "prefill_chunk_tokens"))
    enc = ((roles == "encode_prefill") | ((roles == "encode_unified") & lane_cols)) & (x > 0)
    if not enc.any():
        return points, x
    out = points.copy()
    out[FOLDED_COLUMN] = True
    x = x.copy()
    key = list(zip(out["service"].astype(str), out["bucket"].astype(str), out["pool"].astype(str), roles, strict=True))
    host_role = {"encode_prefill": "prefill", "encode_unified": "unified"}
    host_of = {(*k[:3], k[3]): i for i, k in enumerate(key) if x[i] > 0 and k[3] in ("prefill", "unified")}
    tau = out["instance_seconds_per_request"].to_numpy(float).copy()
    ttft = out["ttft_ms"].to_numpy(float).copy()
    lane = {c: pd.to_numeric(out[c], errors="coerce").to_numpy(float).copy()
            for c in (*_LANE_TOKEN_COLUMNS, "prefill_tokens_rep") if c in out.columns}
    step_s, dec_s, q_tok = (out[c].to_numpy(float) if lane_cols else np.full(len(out), np.nan)
                            for c in ("step_ms", "decode_only_step_ms", "prefill_chunk_tokens"))
    step_s, delta_s = step_s / 1e3, (step_s - dec_s) / 1e3   # a unified host's full-chunk iteration, and its lane part
    for j in np.flatnonzero(enc):
        h = host_of.get((*key[j][:3], host_role[key[j][3]]))
        if h is None:
            continue  # no routed host in the pool (the MIP's encode_host rows forbid it): left as its own row
        e_s = x[j] * float(tau[j]) / x[h]
        if not (e_s > 0 and np.isfinite(e_s)):
            x[j] = 0.0
            continue
        if key[j][3] == "encode_prefill":
            tau[h] += e_s
            ttft[h] += 1e3 * e_s
        else:
            d, q = float(delta_s[h]), float(q_tok[h])
            if not (d > 0 and np.isfinite(d) and q > 0):
                continue  # no lane on the host (a measured point): the tower stays its own row, added to the TTFT
            tokens = e_s * q / d  # the prompt tokens whose lane time the tower takes (the simulator's inline_encode_tokens)
            lane["prefill_tokens"][h] += tokens
            if "prefill_tokens_rep" in lane and np.isfinite(lane["prefill_tokens_rep"][h]):
                lane["prefill_tokens_rep"][h] += tokens
            lane["lane_service_ms"][h] += 1e3 * tokens * float(step_s[h]) / q
            ttft[h] += 1e3 * e_s
        x[j] = 0.0
    out["instance_seconds_per_request"] = tau
    out["ttft_ms"] = ttft
    for c, v in lane.items():
        out[c] = v
    return out, x


_LANE_TOKEN_COLUMNS = ("prefill_tokens", "lane_service_ms")
