"""Length buckets: a few (input, output) bins with weights and conservative representatives.

The rule (the same for every log):

1. **Bins** split requests by *input* length at the ``i/k`` quantiles (``i = 1..k-1``,
   linear interpolation): equal-count bins, so every bucket carries real traffic and long
   prompts get their own bucket(s) that the optimiser can route differently. A request
   with input ``x`` goes to the first bin whose upper edge is ``>= x``. Equal edges (many
   equal lengths) merge, so a log may yield fewer than ``k`` buckets. **Nested**: the levels
   ``i/k`` of ``k`` buckets are levels ``2i/2k`` of ``2k`` (IEEE division is exact to the
   same double), so doubling the count splits every bin in two and moves no edge.
2. **Representatives: one tail budget for the service, not one per bucket.** A latency
   target at quantile ``p`` is a statement about the service's requests,
   ``P(latency > target) = sum_b w_b P_b(latency > target)``. The length part of that tail
   is spent once, service-wide: with ``r`` = ``representative_quantile`` (0.995 by default)
   the *tail set* is every request whose input exceeds the service's ``r``-quantile of inputs
   ``N*`` or whose output exceeds its ``r``-quantile of outputs ``O*``; by the union bound it
   holds at most ``2 (1 - r) = 1 %`` of the service's requests, whatever the bucket count
   (of ``n`` requests, at most ``(n - 1)(1 - r) + 1`` lie above an interpolated quantile, so
   ``2 ((n - 1)(1 - r) + 1) / n`` exactly: a small log's tail is its longest request or two).
   Each bucket's representative is the (input, output) pair of maxima over its requests
   *outside* the tail set: ``n_b = max{x_i : i in b, i not in T}``, ``o_b = max{y_i : ...}``.
   Why this holds the service's quantile: latency grows with both lengths, so every request
   outside ``T`` is no slower than its bucket's representative (at the same queueing); only
   the requests of ``T`` can be, ``|T|/N <= 2 (1 - r)``, so a TTFT/TPOT computed at the
   representatives holds for all but ``2 (1 - r)`` of the service's requests (queueing aside,
   which the optimiser adds at the target's quantile). **How approximate, with queueing**: a
   request misses only if it lies in ``T`` or its queueing exceeds the target's quantile ``q``, so
   the analytic rule bounds the service's share of misses by ``|T|/N + (1 - q)``: up to
   ``2 (1 - r) + (1 - q)`` = 2 % at a p99 target with the default ``r``, not 1 %, in the worst case
   (the two tails need not coincide; in practice the representative is much slower than most of its
   bucket and the share far smaller). What holds the service's own quantile is the peak simulation
   (:mod:`planner.verify`): it takes the ``q``-quantile over all of the service's requests, every
   bucket's length mix, and the verify-and-tighten loop (:mod:`planner.optimize.tighten`) resizes a
   plan that misses it. The mixture condition ``sum_s v_s P(latency_s > target) <= 1 - q`` over a latency
   group's fine sub-bins (item 5), the input tail ``input_tail_share`` counted as misses, holds the TTFT of
   prefill pools in the analytic rule (:mod:`planner.ttft_mixture`: caps and check; never stricter than the
   representative rule); a shared pool's TTFT at load is the lane model's, at each bucket's mean prompt
   (:func:`planner.pool_latency.unified_at_load`). Before (issue 24 item 0) each bucket
   carried its own ``r``-quantiles (a union bound per bucket), so the top bucket's
   representative sat at the service's ``1 - (1 - r)/w_top`` quantile and a coarse bucketing
   planned its whole top bucket at that deeper tail.
   **Refinement never raises a representative**: ``T`` does not depend on ``k``, and a bin of
   ``2k`` buckets is a subset of a bin of ``k`` (item 1), so its maxima over a subset of the
   same retained requests are no larger, componentwise. Operating points cost more for longer
   requests, so a finer bucketing's capacity table is nowhere dearer per request (the
   optimiser's integer pools can still move a plan's cost either way by a device or so).
   A bucket all of whose requests lie in ``T`` (possible only when a bin is narrower than the
   tail, i.e. more than ``1 / (2 (1 - r))`` buckets, or with heavy ties) keeps its own
   ``r``-quantiles, as before, and this is noted.
3. **Means** inside the bin (``*_mean``) are kept beside the representatives (reported).
4. Cached-prefix share per bin = cached tokens / basis tokens of the bin's requests.
5. **Length mix** (``length_mix``): each bucket also carries its share of the nested sub-bins
   at the finest resolution :data:`FINE_BUCKETS` (the ``i/32`` input quantiles: a bin of ``k``
   buckets is a union of them whenever ``k`` divides 32, item 1; else it is cut at the fine
   edges inside it), each with its share of the bucket's requests, its input representative by
   the rule of item 2 (never above the bucket's) and its mean output (the sub-bins split by input
   only, so an output maximum would be each sub-bin's near-service-wide output tail; decode work
   is linear in the output length, so its mean prices it exactly). The capacity table (:mod:`planner.capacity`,
   :func:`planner.capacity.bucket_work`, :func:`planner.capacity.mix_work`) prices a bucket's
   *work* per request from this mix and its *latency* at the bucket's representatives, so a
   bucket of short and long prompts costs the sum of their work, not every request at its
   longest, and the cost of work does not grow with the coarseness of the bucketing (issue 24
   item 0). Approximation: each sub-bin's requests are priced at the sub-bin's representatives
   (the 1/32 of the service around each; conservative inside it), the tail set's at their
   sub-bin's.

6. **Latency groups** (:func:`latency_groups`, issue 24 item 0). Latency, unlike work, is held at
   a fixed resolution, :data:`LATENCY_GROUPS` = 4: with more buckets than that, each bucket's
   representatives are those of the ``i/4`` input-quantile group it nests in (the rule of item 2
   over the group's requests: the bin of 4 buckets it is a part of), and the optimiser's queueing
   caps price the group's queue, not the bucket's: its load (:func:`planner.optimize.prepare.group_busy`),
   its mixture of service times (``group_service``) and, for a shared pool, its mean prompt and lane
   time (``group_point``); the prefill point's batch is chosen at the group's rate (:mod:`planner.capacity`). So 4, 8 and 16
   buckets hold the same requests to the same latency in the same queues and differ only in routing
   freedom and in the work each bucket is priced at (its own mix, item 5). Before, each bucket's
   TTFT budget (target minus its representative's TTFT) and its queue (``⌈λ_b τ_b⌉`` servers)
   both moved with the bucket count, and so did cost (long-context-assistant's disaggregated plan
   $89k / $132k / $146k at 4 / 8 / 16 buckets). A prefill point's TTFT is held at its group's length
   mix (:mod:`planner.ttft_mixture`), the same sub-bins at every bucket count; what this is not: the
   service-wide condition ``sum_b w_b P_b(latency > target) <= 1 - q`` across groups (each group holds
   its own ``1 - q``, a sufficient condition), nor the mix for shared pools. The peak simulation holds
   the same groups since 2026-12-06 (:func:`planner.verify._service_metrics`: every group's simulated
   quantile within the target, not only the service's), so the two checks state one criterion. At most 4
   buckets: every bucket is its own group (unchanged).

7. **Enough requests per bucket** (:func:`supported_buckets`). A bucket is a length class estimated from the
   log, so it must hold requests enough to estimate it: at least :data:`MIN_REQUESTS_PER_BUCKET` (5) of the
   log's requests on average (``n / k``). When a log is too small for the count asked, the count is halved
   (nested, item 1) until ``n / k >= 5``, and a note says so. Why 5: a bucket's mean length (its work, item
   5) from ``m`` requests has a standard error of ``CV / sqrt(m)`` of the mean; at ``m = 5`` and the length
   CV of ~1 that the example logs show, ~45 %, which is already as coarse as a length class can be: below
   it a bucket is one or two requests, sampling noise rather than a class, and its routing freedom lets the
   optimiser fit the sample (agentic-assistant's 10-request log asked for 8 buckets: most held one request,
   and its cost moved 18 % against 4 buckets). A planning floor, not a statistical guarantee; stated.

A representative or mean below one token is raised to one (a request reads at least one
token and produces at least its first token); that is noted when it happens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.schema.workload import LengthBucket
from planner.workload.quantiles import pmf_quantile

REPRESENTATIVE_QUANTILE = 0.995
MIN_TOKENS = 1.0
FINE_BUCKETS = 32
"""The finest resolution: each bucket's ``length_mix`` is its share of these nested sub-bins (module
docstring, item 5; the schema's most buckets, :data:`planner.schema.common.MAX_BUCKETS`)."""
MIN_REQUESTS_PER_BUCKET = 5
"""Fewest logged requests per bucket, on average, that a bucket count needs (module docstring, item 7)."""
LATENCY_GROUPS = 4
"""The latency resolution (module docstring, item 6): above this many buckets, buckets are held to the
latency targets, and queue, as the ``i/4`` input-quantile groups they nest in."""


def latency_groups(weights: Sequence[float], groups: int = LATENCY_GROUPS) -> list[int]:
    """Per bucket (in ascending input order, ``weights`` their shares) the latency group it belongs to
    (module docstring, item 6): itself when there are at most ``groups`` buckets, else the
    ``groups``-quantile of the service its middle falls in, ``floor(groups * (W_<b + w_b / 2))``
    (``W_<b`` the weight below it). Equal-count buckets of ``k = m * groups`` fall ``m`` to a group,
    exactly the bins of ``groups`` buckets (nested, item 1)."""
    w = np.asarray(list(weights), dtype=float)
    if len(w) <= groups or w.sum() <= 0:
        return list(range(len(w)))
    mid = (np.cumsum(w) - w / 2.0) / w.sum()
    return [int(g) for g in np.minimum(np.floor(mid * groups + 1e-9), groups - 1)]


def supported_buckets(requests: int, k: int, min_requests: int = MIN_REQUESTS_PER_BUCKET) -> int:
    """The bucket count a log of ``requests`` requests supports when ``k`` are asked (module docstring,
    item 7): ``k`` halved (``ceil(k / 2)``, nested whenever ``k`` is even) until ``requests / k >= min_requests``,
    at least 1."""
    while k > 1 and requests < min_requests * k:
        k = (k + 1) // 2
    return k


def bin_edges(values: np.ndarray, k: int) -> np.ndarray:
    """Upper edges of the first ``k - 1`` bins (distinct, ascending)."""
    if k <= 1:
        return np.empty(0)
    levels = np.arange(1, k) / k
    return np.unique(np.quantile(values, levels))


def _name(j: int, lo: float, hi: float) -> str:
    return f"b{j}_in{int(round(lo))}-{int(round(hi))}"


def _clamp(value: float, what: str, notes: list[str]) -> float:
    if value < MIN_TOKENS:
        notes.append(f"{what} {value:g} raised to {MIN_TOKENS:g} token")
        return MIN_TOKENS
    return value


def length_buckets(
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    k: int,
    *,
    cached_tokens: np.ndarray | None = None,
    cache_basis_tokens: np.ndarray | None = None,
    representative_quantile: float = REPRESENTATIVE_QUANTILE,
) -> tuple[list[LengthBucket], list[str]]:
    """Buckets of a request sample; returns (buckets, notes)."""
    notes: list[str] = []
    n = len(input_tokens)
    edges = bin_edges(input_tokens, k)
    which = np.searchsorted(edges, input_tokens, side="left")
    buckets: list[LengthBucket] = []
    # the service's tail set (module docstring, item 2): outside it every request is covered
    input_kept = input_tokens <= np.quantile(input_tokens, representative_quantile)
    kept = input_kept & (output_tokens <= np.quantile(output_tokens, representative_quantile))
    fine = np.searchsorted(bin_edges(input_tokens, max(FINE_BUCKETS, k)), input_tokens, side="left")
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(len(edges) + 2), side="left")
    bins = [order[bounds[j] : bounds[j + 1]] for j in range(len(edges) + 1)]
    bins = [rows for rows in bins if rows.size]
    if len(bins) < k:  # counted after the empty bins go (it counted the edges + 1: "2 distinct bins" beside 1 bucket)
        notes.append(f"asked for {k} buckets; input lengths repeat so much that only {len(bins)} distinct "
                     f"{'bins exist' if len(bins) != 1 else 'bin exists'}")
    # latency groups (item 6): each bucket's representatives are its group's; its length mix (work) its own
    group_of = latency_groups([rows.size / n for rows in bins])
    group_rows = {g: np.concatenate([rows for rows, h in zip(bins, group_of, strict=True) if h == g]) for g in set(group_of)}
    for rows, g in zip(bins, group_of, strict=True):
        inp = input_tokens[rows]
        out = output_tokens[rows]
        name = _name(len(buckets), float(inp.min()), float(inp.max()))
        keep = kept[rows]
        own_in = float(inp[keep].max()) if keep.any() else float(np.quantile(inp, representative_quantile))
        own_out = float(out[keep].max()) if keep.any() else float(np.quantile(out, representative_quantile))
        rows_g = group_rows[g]
        keep_g = kept[rows_g]
        if keep_g.any():
            in_rep, out_rep = float(input_tokens[rows_g][keep_g].max()), float(output_tokens[rows_g][keep_g].max())
        else:
            notes.append(f"{name}: every request of its latency group lies in the service's length tail; the group's own "
                         f"{representative_quantile:g}-quantiles represent it")
            in_rep = float(np.quantile(input_tokens[rows_g], representative_quantile))
            out_rep = float(np.quantile(output_tokens[rows_g], representative_quantile))
        share = 0.0
        if cached_tokens is not None and cache_basis_tokens is not None:
            basis = float(cache_basis_tokens[rows].sum())
            share = min(1.0, float(cached_tokens[rows].sum()) / basis) if basis > 0 else 0.0
        in_rep = _clamp(in_rep, f"{name}: input representative", notes)
        out_rep = _clamp(out_rep, f"{name}: output representative", notes)
        buckets.append(
            LengthBucket(
                name=name,
                weight=rows.size / n,
                input_tokens=in_rep,
                output_tokens=out_rep,
                length_mix=_mix(inp, out, keep, fine[rows], max(own_in, MIN_TOKENS), max(own_out, MIN_TOKENS)),
                input_tokens_mean=_clamp(float(inp.mean()), f"{name}: input mean", notes),
                output_tokens_mean=_clamp(float(out.mean()), f"{name}: output mean", notes),
                cached_prefix_share=share,
                input_tail_share=float(np.mean(~input_kept[rows])),
            )
        )
    return _renormalise(buckets), notes


def _mix(inp: np.ndarray, out: np.ndarray, keep: np.ndarray, fine: np.ndarray, in_rep: float,
         out_rep: float) -> list[tuple[float, float, float]]:
    """A bucket's ``length_mix`` (module docstring, item 5): per fine sub-bin its share of the bucket's
    requests, its input representative — the maximum input of its requests outside the service's tail
    set, the bucket's own for a sub-bin wholly in the tail, never above the bucket's — and the mean
    output of its requests; at least :data:`MIN_TOKENS` each."""
    mix: list[tuple[float, float, float]] = []
    for f in np.unique(fine):
        sel = fine == f
        kept = sel & keep
        n_f = min(float(inp[kept].max()), in_rep) if kept.any() else in_rep
        o_f = float(out[sel].mean())
        mix.append((float(sel.sum()) / inp.size, max(n_f, MIN_TOKENS), max(o_f, MIN_TOKENS)))
    return mix


def _renormalise(buckets: list[LengthBucket]) -> list[LengthBucket]:
    """Make weights sum to exactly 1 (floating-point residue goes to the largest bucket)."""
    total = sum(b.weight for b in buckets)
    if abs(total - 1.0) < 1e-12 or not buckets:
        return buckets
    big = max(range(len(buckets)), key=lambda i: buckets[i].weight)
    out = list(buckets)
    out[big] = out[big].model_copy(update={"weight": out[big].weight + (1.0 - total)})
    return out


def pmf_buckets(
    in_values: np.ndarray,
    in_probs: np.ndarray,
    out_values: np.ndarray,
    out_probs: np.ndarray,
    k: int,
    *,
    representative_quantile: float = REPRESENTATIVE_QUANTILE,
) -> tuple[list[LengthBucket], list[str]]:
    """Buckets from input and output *marginal* PMFs (ServeGen), assuming the two independent.

    Bins cut the input CDF at ``i/k`` (inverse CDF, nested as in the module docstring); the tail
    set is the same as for a log (inputs above the input marginal's ``r``-quantile ``N*``, outputs
    above the output marginal's ``O*``): each bin's input representative is its largest support
    point ``<= N*`` (the bin's own ``r``-quantile when the whole bin lies above ``N*``); without a
    joint distribution every bin shares the output representative ``O*`` and the output mean.
    """
    notes = ["input and output lengths are given as separate distributions: buckets assume they are independent"]
    order = np.argsort(in_values)
    v, p = in_values[order], in_probs[order] / in_probs.sum()
    edges = np.unique([pmf_quantile(v, p, i / k) for i in range(1, k)]) if k > 1 else np.empty(0)
    which = np.searchsorted(edges, v, side="left")
    pout = out_probs / out_probs.sum()
    out_rep = pmf_quantile(out_values, pout, representative_quantile)
    in_star = pmf_quantile(v, p, representative_quantile)
    out_mean = float(np.dot(out_values, pout))
    buckets: list[LengthBucket] = []
    sels = [which == j for j in range(len(edges) + 1)]
    sels = [sel for sel in sels if float(p[sel].sum()) > 0]
    group_of = latency_groups([float(p[sel].sum()) for sel in sels])  # item 6: the group's input representative
    for sel, g in zip(sels, group_of, strict=True):
        mass = float(p[sel].sum())
        vv, pp = v[sel], p[sel]
        in_g = np.logical_or.reduce([s2 for s2, h in zip(sels, group_of, strict=True) if h == g])
        name = _name(len(buckets), float(vv[pp > 0].min()), float(vv[pp > 0].max()))
        buckets.append(
            LengthBucket(
                name=name,
                weight=min(mass, 1.0),  # rounding of sum(p) can exceed 1 by an ulp; renormalised below
                input_tokens=_clamp(_pmf_rep(v[in_g], p[in_g], float(p[in_g].sum()), in_star, representative_quantile),
                                    f"{name}: input representative", notes),
                output_tokens=_clamp(out_rep, f"{name}: output representative", notes),
                input_tokens_mean=_clamp(float(np.dot(vv, pp) / mass), f"{name}: input mean", notes),
                output_tokens_mean=_clamp(out_mean, f"{name}: output mean", notes),
            )
        )
    return _renormalise(buckets), notes


def _pmf_rep(values: np.ndarray, probs: np.ndarray, mass: float, limit: float, quantile: float) -> float:
    """A bin's input representative from a PMF: its largest support point (with mass) at or below the
    service's ``limit`` ``N*``; the bin's own ``quantile`` when the whole bin lies above it."""
    inside = (probs > 0) & (values <= limit)
    if inside.any():
        return float(values[inside].max())
    return pmf_quantile(values, probs / mass, quantile)
