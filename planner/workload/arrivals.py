"""Arrival process of one service: rate, per-window peaks, burstiness, timestamp resolution.

Definitions (``t`` = arrival seconds after the first arrival, sorted, ``n`` requests):

- span ``T = t[-1] - t[0]``; mean rate ``n / T`` requests/s;
- windows of width ``w`` are aligned to the first arrival: window ``j`` holds arrivals with
  ``floor(t / w) = j``, for ``j = 0 .. floor(T / w)`` (the last one may be partial);
  peak rate over ``w`` = ``max_j count_j / w``; empty windows = windows with no arrival;
  the *peak quantile* is the ``q``-quantile (linear interpolation) of ``count_j / w`` over all windows;
- inter-arrival CV = population standard deviation / mean of ``diff(t)``.

Timestamp resolution. The *quantum* is the finest step the raw values can express (gcd of
their differences, found by the reader). Logs may also be *bucketed*: arrivals snapped to a
coarse grid (Mooncake's conversation trace ≈ 3 s). We call a log bucketed when more than
half its requests share their timestamp with an earlier one **and** the 5th percentile of
the gaps between distinct timestamps is more than 10 quanta; its resolution is then the
median gap between distinct timestamps. A peak over a window ``w`` is flagged unreliable
when the resolution exceeds ``w / 10`` (fewer than ten timestamp steps per window: counts
pile up in whichever window a bucket lands in), and the inter-arrival CV of a bucketed log
is flagged too (zero gaps inflate it).
"""

from __future__ import annotations

import numpy as np

from planner.schema.workload import ArrivalStats
from planner.workload.log import TimestampKind

WINDOWS_S: dict[str, float] = {"1s": 1.0, "60s": 60.0, "600s": 600.0}
BUCKETED_DUPLICATE_SHARE = 0.5
BUCKETED_MIN_QUANTA = 10.0
RELIABLE_STEPS_PER_WINDOW = 10.0


def detect_resolution(t: np.ndarray, quantum_s: float | None) -> tuple[float | None, bool]:
    """(resolution in seconds, whether the timestamps are bucketed) — see the module docstring."""
    if len(t) < 3:
        return quantum_s, False
    distinct_mask = np.empty(len(t), dtype=bool)
    distinct_mask[0] = True
    np.not_equal(t[1:], t[:-1], out=distinct_mask[1:])
    duplicate_share = 1.0 - float(np.count_nonzero(distinct_mask)) / len(t)
    distinct = t[distinct_mask]
    if len(distinct) < 3:
        return quantum_s, False
    gaps = np.diff(distinct)
    q = quantum_s or float(np.min(gaps))
    if duplicate_share > BUCKETED_DUPLICATE_SHARE and float(np.quantile(gaps, 0.05)) > BUCKETED_MIN_QUANTA * q:
        return float(np.median(gaps)), True
    return quantum_s, False


def arrival_stats(
    t: np.ndarray,
    timestamps: TimestampKind,
    quantum_s: float | None,
    peak_quantile: float | None = 0.99,
) -> ArrivalStats | None:
    """Arrival statistics of sorted arrival times ``t`` (seconds); None if they span no time."""
    n = len(t)
    if n < 2:
        return None
    t = t - t[0]
    span = float(t[-1])
    if span <= 0:
        return None
    notes: list[str] = []
    resolution, bucketed = detect_resolution(t, quantum_s)
    kind: TimestampKind = "bucketed" if bucketed else timestamps
    if bucketed:
        notes.append(f"timestamps are bucketed to about {resolution:.3g} s ({timestamps} values): peaks over windows shorter than {RELIABLE_STEPS_PER_WINDOW * (resolution or 0):.3g} s and the inter-arrival CV overstate burstiness")
    if timestamps == "naive":
        notes.append("timestamps are naive (no time zone): used for differences only")
    peaks: dict[str, float] = {}
    empty: dict[str, int] = {}
    quant: dict[str, float] = {}
    unreliable: list[str] = []
    for key, w in WINDOWS_S.items():
        idx = np.floor(t / w).astype(np.int64)
        counts = np.bincount(idx, minlength=int(span // w) + 1)
        rates = counts / w
        peaks[key] = float(rates.max())
        empty[key] = int(np.count_nonzero(counts == 0))
        if peak_quantile is not None:
            quant[key] = float(np.quantile(rates, peak_quantile))
        if resolution is not None and resolution > w / RELIABLE_STEPS_PER_WINDOW:
            unreliable.append(key)
        if span < w:
            notes.append(f"the log spans {span:.3g} s, less than one {key} window: the {key} peak is a lower bound")
    gaps = np.diff(t)
    mean_gap = float(gaps.mean())
    cv = float(gaps.std() / mean_gap) if mean_gap > 0 else 0.0
    if unreliable:
        notes.append(f"peak rates over {', '.join(unreliable)} windows are unreliable: timestamp resolution {resolution:.3g} s is coarser than a tenth of the window")
    return ArrivalStats(
        requests=n,
        duration_s=span,
        rate_mean_per_s=n / span,
        rate_peak_per_s=peaks,
        interarrival_cv=cv,
        timestamp_resolution_s=resolution,
        timestamps=kind,
        notes=notes,
        empty_windows=empty,
        peak_quantile=peak_quantile,
        rate_quantile_per_s=quant,
        unreliable_peak_windows=unreliable,
    )
