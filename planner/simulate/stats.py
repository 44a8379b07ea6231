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


def log_bins(x: np.ndarray, per_decade: int) -> np.ndarray:
    """The logarithmic bin of each value ``> MIN_S`` (``per_decade`` bins per decade from ``MIN_S``, bin 0 first)."""
    return ((np.log10(x) + 6.0) * per_decade).astype(np.int64)


def _log_bin(x: float, top: int) -> int:
    """The logarithmic bin of one value ``> MIN_S`` (:func:`log_bins` in ``math.log10``), clamped to ``[0, top]``."""
    return min(max(int((math.log10(x) + 6.0) * BINS_PER_DECADE), 0), top)


def bin_middle_s(i: int, per_decade: int) -> float:
    """The geometric middle of logarithmic bin ``i`` (:func:`log_bins`)."""
    return float(10 ** ((i + 0.5) / per_decade - 6.0))


class LogHistogram:
    """Streaming histogram: samples are buffered (at most ``FLUSH`` of them) and binned in
    vectorised batches, so adding is cheap and memory stays bounded."""

    __slots__ = ("counts", "zeros", "n", "total", "maximum", "buf", "pending")

    FLUSH = 4096

    def __init__(self) -> None:
        self.counts = np.zeros(BINS_PER_DECADE * DECADES + 1, dtype=np.int64)
        self.zeros = 0
        self.n = 0
        self.total = 0.0
        self.maximum = 0.0
        self.buf: list[float] = []
        self.pending: dict[float, int] = {}
        """Samples :meth:`add_many` took and :meth:`flush` has not binned yet: their count by value. A simulation
        repeats a few step times, so a call costs one dict update here rather than a bin and a numpy element update
        (at most ``FLUSH`` values are kept)."""

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
        pending = self.pending
        c = pending.get(x)
        if c is None:
            _log_bin(x, 0)  # a value that has no bin (inf, nan) raises here, as when it was binned at once
            if len(pending) >= self.FLUSH:
                self._bin_pending()
            pending[x] = count
        else:
            pending[x] = c + count

    def _bin_pending(self) -> None:
        counts = self.counts
        top = counts.size - 1
        for x, c in self.pending.items():
            counts[_log_bin(x, top)] += c
        self.pending.clear()

    def flush(self) -> None:
        """Bin the buffered samples (:meth:`add`) and the pending ones (:meth:`add_many`)."""
        if self.pending:
            self._bin_pending()
        if not self.buf:
            return
        x = np.asarray(self.buf, dtype=float)
        self.buf = []
        self.n += x.size
        self.total += float(x.sum())
        self.maximum = max(self.maximum, float(x.max()))
        pos = x[x > MIN_S]
        self.zeros += int(x.size - pos.size)
        idx = log_bins(pos, BINS_PER_DECADE)
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
        return min(bin_middle_s(i, BINS_PER_DECADE), self.maximum)

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


class SectionCounts:
    """One per-request metric's samples per (route, section of the measured window), in coarse logarithmic bins: what
    the *sectioning* (batch) estimate of a quantile's uncertainty reads (:func:`sectioned_half_width`).

    Why: :func:`quantile_interval` takes the samples as independent, but a queue's waits are correlated over its
    bursts. long-document-nvidia's disaggregated plan (gamma-renewal arrivals at inter-arrival CV 2.9) simulated over
    its 413 s check window claimed TTFT p99 11.2 s within ±1 % while seeds 0 and 1 gave a b200 prefill-pool wait p99
    of 2.7 and 4.6 s and 8,000 s runs 5.2-5.5 s. A request's section is its arrival's place in
    ``[start_s, end_s)`` (``sections`` equal parts); samples of requests that arrive outside it are not kept.
    ``BINS_PER_DECADE`` bins per decade (a quantile to within half a bin, ±2.4 %, enough for an interval's width) keep the memory at
    ``routes x sections x 601`` counts whatever the run's length."""

    BINS_PER_DECADE = 50
    FLUSH = 4096

    def __init__(self, routes: int, sections: int, start_s: float, end_s: float) -> None:
        self.sections = int(sections)
        self.start_s, self.end_s = float(start_s), float(end_s)
        self.counts = np.zeros((int(routes), self.sections, self.BINS_PER_DECADE * DECADES + 2), dtype=np.int64)
        self.buf: list[tuple[int, float, float]] = []

    def add(self, route: int, arrival_s: float, x: float) -> None:
        self.buf.append((route, arrival_s, x))
        if len(self.buf) >= self.FLUSH:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        a = np.asarray(self.buf, dtype=float)
        self.buf = []
        span = self.end_s - self.start_s
        pos_s = np.floor((a[:, 1] - self.start_s) / span * self.sections) if span > 0 else np.zeros(len(a))
        keep = (pos_s >= 0) & (pos_s < self.sections)
        a = a[keep]
        sec: np.ndarray = pos_s[keep].astype(np.int64)
        x = a[:, 2]
        # bin 0: values <= MIN_S (no wait); bin 1 + i: the i-th logarithmic bin from MIN_S
        b = np.zeros(x.size, dtype=np.int64)
        pos = x > MIN_S
        b[pos] = 1 + np.clip(log_bins(x[pos], self.BINS_PER_DECADE), 0, self.BINS_PER_DECADE * DECADES)
        np.add.at(self.counts, (a[:, 0].astype(np.int64), sec, b), 1)

    def quantiles(self, routes: list[int], q: float) -> np.ndarray:
        """The ``q`` quantile of each section over ``routes`` merged (seconds; NaN for a section without a sample)."""
        self.flush()
        c = self.counts[np.asarray(routes, dtype=np.int64)].sum(axis=0)  # (sections, bins)
        n = c.sum(axis=1)
        cum = np.cumsum(c, axis=1)
        out = np.full(self.sections, math.nan)
        for k in range(self.sections):
            if n[k] == 0:
                continue
            i = int(np.searchsorted(cum[k], q * n[k], side="left"))
            out[k] = 0.0 if i == 0 else bin_middle_s(i - 1, self.BINS_PER_DECADE)
        return out


def sectioned_half_width(values: np.ndarray, level: float = 0.95) -> float:
    """Half-width of the sectioning interval of an estimate from its per-section values (Asmussen & Glynn, *Stochastic
    Simulation*, III.5): ``t_{K-1} · s / √K`` over the ``K`` sections with a value (Student's ``t`` at ``level``); NaN
    with fewer than two. It holds when the sections are long against the queue's memory; it is wider than
    :func:`quantile_interval` where the samples are correlated (bursts), which that interval ignores."""
    from statistics import NormalDist

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    k = v.size
    if k < 2:
        return math.nan
    p = 0.5 + level / 2.0
    # Student's t quantile by the Cornish-Fisher expansion in 1/df (within 0.3 % of the tables at df >= 4)
    z = NormalDist().inv_cdf(p)
    df = k - 1.0
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2) + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    return float(t * v.std(ddof=1) / math.sqrt(k))
