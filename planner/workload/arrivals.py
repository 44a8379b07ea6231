"""Arrival process of one service: rate, per-window peaks, burstiness, timestamp resolution.

Definitions (``t`` = arrival seconds after the first arrival, sorted, ``n`` requests):

- span ``T = t[-1] - t[0]``; mean rate ``n / T`` requests/s;
- peak rate over ``w`` = the busiest window of width ``w`` at any start (sliding):
  ``max_s #{i : s <= t_i < s + w} / w``. The maximum is reached with ``s`` at an arrival, so
  it is ``max_i (#{k : t_k < t_i + w} - i) / w`` (one ``searchsorted``; memory follows the
  number of arrivals, never the span). Windows aligned to the first arrival would miss a burst
  that straddles two of them: on the Azure 2023 code log the busiest second holds 41 requests
  where the busiest aligned second holds 34;
- aligned windows (for the quantile and the empty count): window ``j`` holds arrivals with
  ``floor(t / w) = j``, for ``j = 0 .. floor(T / w)`` (the last one may be partial); empty
  windows = windows with no arrival; the *peak quantile* is the ``q``-quantile (linear
  interpolation) of ``count_j / w`` over all ``floor(T / w) + 1`` windows, computed from the
  non-empty windows and the number of empty ones (no array as long as the span);
- inter-arrival CV = population standard deviation / mean of ``diff(t)`` over the whole log
  (``interarrival_cv``): it mixes burstiness inside a window with rate changes between
  windows (minute-to-minute swings of a diurnal or bursty log);
- within-window CV over ``w`` (``interarrival_cv_within[w]``, :func:`within_window_cv`): the
  gaps between consecutive arrivals in the same window, each divided by its window's own mean
  gap ``ḡ_j`` (so a window's rate level cancels), pooled over *busy* windows (at least
  :data:`WITHIN_MIN_GAPS` gaps) with one degree of freedom per window removed::

      cv_within(w)² = Σ_j Σ_{i∈j} (g_i / ḡ_j − 1)² / Σ_j (m_j − 1)      (m_j gaps in window j)

  i.e. the gap-weighted mean of the windows' squared sample CVs (Bessel-corrected). A Poisson
  stream gives ≈ 1 at every ``w``; the gap between ``interarrival_cv`` and this value is the
  share of burstiness that is rate change between windows, which the plan already covers by
  sizing for the peak rate over ``traffic.peak_window``. ``nan`` (key left out) when no window
  is busy enough.

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
WITHIN_MIN_GAPS = 10
"""A window enters the within-window CV only with at least this many gaps (11 arrivals)."""


def busiest_window_count(t: np.ndarray, window_s: float) -> int:
    """Most arrivals in any window ``[s, s + window_s)`` (sliding; ``t`` sorted)."""
    if len(t) == 0:
        return 0
    ends = np.searchsorted(t, t + window_s, side="left")
    return int(np.max(ends - np.arange(len(t))))


def aligned_window_counts(t: np.ndarray, window_s: float) -> tuple[np.ndarray, int]:
    """(counts of the non-empty aligned windows, sorted; number of aligned windows) for sorted
    ``t`` starting at 0 — without an array as long as the span."""
    idx = np.floor(t / window_s).astype(np.int64)
    _, counts = np.unique(idx, return_counts=True)
    return np.sort(counts), int(idx[-1]) + 1


def _quantile_with_zeros(sorted_counts: np.ndarray, zeros: int, q: float) -> float:
    """numpy's linear quantile of ``zeros`` zeros followed by ``sorted_counts``."""
    n = zeros + len(sorted_counts)
    h = (n - 1) * q
    lo = int(np.floor(h))

    def at(k: int) -> float:
        return 0.0 if k < zeros else float(sorted_counts[k - zeros])

    lo_v = at(lo)
    return lo_v if lo + 1 >= n else lo_v + (h - lo) * (at(lo + 1) - lo_v)


def within_window_cv(t: np.ndarray, window_s: float, min_gaps: int = WITHIN_MIN_GAPS) -> float:
    """Pooled inter-arrival CV inside windows of ``window_s`` (module docstring); ``nan`` if no
    window has ``min_gaps`` gaps. ``t`` sorted arrival seconds."""
    t = np.asarray(t, dtype=float)
    if len(t) < 2:
        return float("nan")
    idx = np.floor((t - t[0]) / window_s).astype(np.int64)
    same = idx[1:] == idx[:-1]
    gaps = np.diff(t)[same]
    win = idx[1:][same]
    if gaps.size == 0:
        return float("nan")
    _, inv, m = np.unique(win, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=gaps)
    busy = (m >= max(min_gaps, 2)) & (sums > 0)
    if not busy.any():
        return float("nan")
    mean_gap = np.where(busy, sums / np.maximum(m, 1), 1.0)
    keep = busy[inv]
    dev2 = ((gaps[keep] / mean_gap[inv[keep]]) - 1.0) ** 2
    dof = float(np.sum(m[busy] - 1))
    return float(np.sqrt(dev2.sum() / dof))


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
    within: dict[str, float] = {}
    unreliable: list[str] = []
    for key, w in WINDOWS_S.items():
        peaks[key] = busiest_window_count(t, w) / w
        counts, n_windows = aligned_window_counts(t, w)
        empty[key] = n_windows - len(counts)
        if peak_quantile is not None:
            quant[key] = _quantile_with_zeros(counts, n_windows - len(counts), peak_quantile) / w
        cw = within_window_cv(t, w)
        if np.isfinite(cw):
            within[key] = cw
        if resolution is not None and resolution > w / RELIABLE_STEPS_PER_WINDOW:
            unreliable.append(key)
        if span < w:
            notes.append(f"the log spans {span:.3g} s, less than one {key} window: the {key} peak is a lower bound")
    replay: dict[str, list[list[float]]] = {}
    slots: dict[str, list[list[float]]] = {}
    if not bucketed:
        from planner.workload.replay_wait import replay_slot_table, replay_wait_curve

        for key, w in WINDOWS_S.items():
            curve = replay_wait_curve(t, w)
            if curve is not None:
                replay[key] = curve
            table = replay_slot_table(t, w)
            if table is not None:
                slots[key] = table
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
        interarrival_cv_within=within,
        timestamp_resolution_s=resolution,
        timestamps=kind,
        notes=notes,
        empty_windows=empty,
        peak_quantile=peak_quantile,
        rate_quantile_per_s=quant,
        unreliable_peak_windows=unreliable,
        replay_wait=replay,
        replay_slot_spacing=slots,
    )
