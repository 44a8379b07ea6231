"""Length buckets: a few (input, output) bins with weights and conservative representatives.

The rule (the same for every log):

1. **Bins** split requests by *input* length at the ``i/k`` quantiles (``i = 1..k-1``,
   linear interpolation): equal-count bins, so every bucket carries real traffic and long
   prompts get their own bucket(s) that the optimiser can route differently. A request
   with input ``x`` goes to the first bin whose upper edge is ``>= x``. Equal edges (many
   equal lengths) merge, so a log may yield fewer than ``k`` buckets.
2. **Representatives** are, per bin, the ``r``-quantile of its input lengths and the
   ``r``-quantile of its output lengths, with ``r = 0.995`` by default. Why this is
   conservative: latency grows with both lengths, so a request can only be slower than its
   bucket's representative if its input *or* its output exceeds the representative; by the
   union bound that happens to at most ``2 (1 - r) = 1 %`` of the bucket's requests — and so
   to at most 1 % of the service. A TTFT/TPOT computed at the representatives therefore
   holds at least at the service's p99 (queueing aside, which the optimiser adds).
3. **Means** inside the bin (``*_mean``) are used for throughput and cost, so the
   conservative representatives cost latency headroom, not double-counted work.
4. Cached-prefix share per bin = cached tokens / basis tokens of the bin's requests.

A representative or mean below one token is raised to one (a request reads at least one
token and produces at least its first token); that is noted when it happens.
"""

from __future__ import annotations

import numpy as np

from planner.schema.workload import LengthBucket
from planner.workload.quantiles import pmf_quantile

REPRESENTATIVE_QUANTILE = 0.995
MIN_TOKENS = 1.0


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
    if len(edges) < k - 1:
        notes.append(f"asked for {k} buckets; input lengths repeat so much that only {len(edges) + 1} distinct bins exist")
    buckets: list[LengthBucket] = []
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(len(edges) + 2), side="left")
    for j in range(len(edges) + 1):
        rows = order[bounds[j] : bounds[j + 1]]
        if rows.size == 0:
            continue
        inp = input_tokens[rows]
        out = output_tokens[rows]
        name = _name(len(buckets), float(inp.min()), float(inp.max()))
        share = 0.0
        if cached_tokens is not None and cache_basis_tokens is not None:
            basis = float(cache_basis_tokens[rows].sum())
            share = min(1.0, float(cached_tokens[rows].sum()) / basis) if basis > 0 else 0.0
        buckets.append(
            LengthBucket(
                name=name,
                weight=rows.size / n,
                input_tokens=_clamp(float(np.quantile(inp, representative_quantile)), f"{name}: input representative", notes),
                output_tokens=_clamp(float(np.quantile(out, representative_quantile)), f"{name}: output representative", notes),
                input_tokens_mean=_clamp(float(inp.mean()), f"{name}: input mean", notes),
                output_tokens_mean=_clamp(float(out.mean()), f"{name}: output mean", notes),
                cached_prefix_share=share,
            )
        )
    return _renormalise(buckets), notes


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

    Bins cut the input CDF at ``i/k`` (inverse CDF); each bin's input representative is the
    ``r``-quantile of the input PMF restricted to the bin; without a joint distribution every
    bin shares the output marginal's ``r``-quantile and mean.
    """
    notes = ["input and output lengths are given as separate distributions: buckets assume they are independent"]
    order = np.argsort(in_values)
    v, p = in_values[order], in_probs[order] / in_probs.sum()
    edges = np.unique([pmf_quantile(v, p, i / k) for i in range(1, k)]) if k > 1 else np.empty(0)
    which = np.searchsorted(edges, v, side="left")
    pout = out_probs / out_probs.sum()
    out_rep = pmf_quantile(out_values, pout, representative_quantile)
    out_mean = float(np.dot(out_values, pout))
    buckets: list[LengthBucket] = []
    for j in range(len(edges) + 1):
        sel = which == j
        mass = float(p[sel].sum())
        if mass <= 0:
            continue
        vv, pp = v[sel], p[sel]
        name = _name(len(buckets), float(vv[pp > 0].min()), float(vv[pp > 0].max()))
        buckets.append(
            LengthBucket(
                name=name,
                weight=min(mass, 1.0),  # rounding of sum(p) can exceed 1 by an ulp; renormalised below
                input_tokens=_clamp(pmf_quantile(vv, pp / mass, representative_quantile), f"{name}: input representative", notes),
                output_tokens=_clamp(out_rep, f"{name}: output representative", notes),
                input_tokens_mean=_clamp(float(np.dot(vv, pp) / mass), f"{name}: input mean", notes),
                output_tokens_mean=_clamp(out_mean, f"{name}: output mean", notes),
            )
        )
    return _renormalise(buckets), notes
