"""Token-count summaries: mean and quantiles.

Sample quantiles use linear interpolation between order statistics (numpy's default,
Hyndman & Fan type 7), which is how the SOURCE.md statistics of the shipped samples were
computed. Distributions given as a PMF (ServeGen) use the inverse CDF: the smallest value
whose cumulative probability reaches the level.
"""

from __future__ import annotations

import numpy as np

from planner.schema.workload import TokenStats

LEVELS = (0.5, 0.9, 0.99)


def token_stats(values: np.ndarray) -> TokenStats:
    """Mean, p50, p90, p99 and max of a sample (linear interpolation)."""
    q = np.quantile(values, LEVELS)
    return TokenStats(mean=float(np.mean(values)), p50=float(q[0]), p90=float(q[1]), p99=float(q[2]), max=float(np.max(values)))


def pmf_quantile(values: np.ndarray, probs: np.ndarray, level: float) -> float:
    """Inverse CDF of a discrete distribution: smallest value with CDF >= level."""
    order = np.argsort(values)
    v, p = values[order], probs[order]
    cdf = np.cumsum(p) / p.sum()
    i = int(np.searchsorted(cdf, level - 1e-12, side="left"))
    return float(v[min(i, len(v) - 1)])


def pmf_stats(values: np.ndarray, probs: np.ndarray) -> TokenStats:
    """Mean, p50, p90, p99 and max (largest value with positive probability) of a PMF."""
    p = probs / probs.sum()
    q = [pmf_quantile(values, p, lv) for lv in LEVELS]
    return TokenStats(mean=float(np.dot(values, p)), p50=q[0], p90=q[1], p99=q[2], max=float(values[p > 0].max()))
