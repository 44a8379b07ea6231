"""Streaming statistics with memory independent of the number of requests.

:class:`LogHistogram` keeps counts in logarithmic bins (``BINS_PER_DECADE`` per decade from
``MIN_S`` up), so a quantile is known to within half a bin: a relative error below
``10^(1/(2·BINS_PER_DECADE)) − 1`` ≈ 0.12 %. Values ≤ ``MIN_S`` (e.g. no wait at all) are
counted exactly as zeros. Means are exact (running sums).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_S = 1e-6
BINS_PER_DECADE = 1000
DECADES = 12  # 1 µs .. 1e6 s


class LogHistogram:
    """Streaming histogram: samples are buffered (at most ``FLUSH`` of them) and binned in
    vectorised batches, so adding is cheap and memory stays bounded."""

    __slots__ = ("counts", "zeros", "n", "total", "maximum", "buf", "bin_of")

    FLUSH = 4096

    def __init__(self) -> None:
        self.counts = np.zeros(BINS_PER_DECADE * DECADES + 1, dtype=np.int64)
        self.zeros = 0
        self.n = 0
        self.total = 0.0
        self.maximum = 0.0
        self.buf: list[float] = []
        self.bin_of: dict[float, int] = {}
        """Bin of each value :meth:`add_many` has seen (a simulation repeats a few step times)."""

    def add(self, x: float) -> None:
        buf = self.buf
        buf.append(x)
        if len(buf) >= self.FLUSH:
            self.flush()

    def add_many(self, x: float, count: int) -> None:
        """Add ``count`` samples equal to ``x`` (binned at once)."""
        if count <= 0:
            return
        if self.buf:
            self.flush()
        self.n += count
        self.total += x * count
        if x > self.maximum:
            self.maximum = x
        if x <= MIN_S:
            self.zeros += count
            return
        idx = self.bin_of.get(x)
        if idx is None:
            if len(self.bin_of) > 65536:
                self.bin_of.clear()
            idx = self.bin_of[x] = min(max(int((math.log10(x) + 6.0) * BINS_PER_DECADE), 0), self.counts.size - 1)
        self.counts[idx] += count

    def flush(self) -> None:
        if not self.buf:
            return
        x = np.asarray(self.buf, dtype=float)
        self.buf = []
        self.n += x.size
        self.total += float(x.sum())
        self.maximum = max(self.maximum, float(x.max()))
        pos = x[x > MIN_S]
        self.zeros += int(x.size - pos.size)
        idx = ((np.log10(pos) + 6.0) * BINS_PER_DECADE).astype(np.int64)
        np.clip(idx, 0, self.counts.size - 1, out=idx)
        self.counts += np.bincount(idx, minlength=self.counts.size)

    @property
    def mean(self) -> float:
        self.flush()
        return self.total / self.n if self.n else math.nan

    def quantile(self, q: float) -> float:
        """Value below which a share ``q`` of the samples lie (bin midpoint, geometric)."""
        self.flush()
        if self.n == 0:
            return math.nan
        rank = q * self.n
        if rank <= self.zeros:
            return 0.0
        cum = np.cumsum(self.counts) + self.zeros
        i = int(np.searchsorted(cum, rank, side="left"))
        i = min(i, self.counts.size - 1)
        return min(10 ** ((i + 0.5) / BINS_PER_DECADE - 6.0), self.maximum)

    def share_above(self, t: float) -> float:
        """Share of samples greater than ``t`` (to bin resolution)."""
        self.flush()
        if self.n == 0:
            return math.nan
        if t < MIN_S:
            return (self.n - self.zeros) / self.n
        i = int((math.log10(t) + 6.0) * BINS_PER_DECADE)
        return float(self.counts[i + 1 :].sum()) / self.n


@dataclass(frozen=True)
class Summary:
    """Quantiles of one latency metric, seconds."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, h: LogHistogram) -> Summary:
        h.flush()
        return cls(n=h.n, mean=h.mean, p50=h.quantile(0.5), p90=h.quantile(0.9),
                   p99=h.quantile(0.99), max=h.maximum if h.n else math.nan)


def merged(histograms: list[LogHistogram]) -> LogHistogram:
    """One histogram holding the samples of several (e.g. a service's per-bucket routes)."""
    out = LogHistogram()
    for h in histograms:
        h.flush()
        out.counts += h.counts
        out.zeros += h.zeros
        out.n += h.n
        out.total += h.total
        out.maximum = max(out.maximum, h.maximum)
    return out


def quantile_interval(h: LogHistogram, q: float, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval for the ``q`` quantile from the order statistics.

    The number of samples below the true quantile is Binomial(n, q); with the normal
    approximation the interval is ``[x_(l), x_(u)]`` with ranks
    ``l, u = n q ∓ z √(n q (1−q))`` (``z`` the two-sided normal quantile of ``level``),
    read from the histogram (to its bin resolution, ~0.1 %). ``u > n`` gives ``inf``: too
    few samples to bound the quantile from above.
    """
    from statistics import NormalDist

    h.flush()
    n = h.n
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    half = z * math.sqrt(n * q * (1.0 - q))
    lo_rank = math.floor(n * q - half)
    hi_rank = math.ceil(n * q + half) + 1
    lo = h.quantile(lo_rank / n) if lo_rank >= 1 else 0.0
    hi = h.quantile(hi_rank / n) if hi_rank <= n else math.inf
    return lo, hi
