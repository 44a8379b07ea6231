"""Characterise a request log per service: arrivals, token quantiles, buckets, tools, sessions.

:func:`characterize_log` works on a read log; :func:`characterize_file` reads and
characterises a file and is cached on (path, size, mtime, options), because sweeps ask for
the same trace many times.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem
from planner.schema.workload import (
    ArrivalStats,
    LengthBucket,
    ModalityStats,
    SessionStats,
    TokenStats,
    ToolStats,
    WorkloadProfile,
)
from planner.workload.arrivals import WINDOWS_S, arrival_stats
from planner.workload.buckets import (
    MIN_REQUESTS_PER_BUCKET,
    REPRESENTATIVE_QUANTILE,
    length_buckets,
    pmf_buckets,
    supported_buckets,
)
from planner.workload.log import OnBadRow, RequestLog
from planner.workload.quantiles import pmf_stats, token_stats
from planner.workload.readers import read_trace
from planner.workload.readers.servegen import WINDOW_S, ServeGenAggregate
from planner.workload.tools import all_tools_summary, session_stats, tool_stats

DEFAULT_SERVICE = "default"

ONE_INSTANT_NOTE = "fewer than two distinct arrival times: no arrival rate can be measured"
"""The note of a log with timestamps but no arrival span (one request, or every request at one instant)."""


def no_rate_reason(notes: list[str]) -> str:
    """Why a characterised log has no arrival rate, for messages: it has no timestamps, or they span no time."""
    if ONE_INSTANT_NOTE in notes:
        return "has timestamps but no arrival span (one request, or every request at the same instant)"
    return "has no timestamps"


@dataclass(frozen=True)
class Characterization:
    """Everything measured about one service of one log."""

    service: str
    source: str
    format: str
    requests: int
    arrivals: ArrivalStats | None
    """None when the log has no timestamps (length-only files)."""
    input_tokens: TokenStats
    output_tokens: TokenStats
    buckets: list[LengthBucket]
    cached_prefix_share: float | None = None
    """None when the log says nothing about prefix reuse."""
    tools: dict[str, ToolStats] = field(default_factory=dict)
    tools_summary: dict[str, float | int] | None = None
    sessions: SessionStats | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Format-specific figures (ServeGen window statistics)."""
    modalities: dict[str, ModalityStats] = field(default_factory=dict)
    """Image / audio / video input per request (multimodal logs; :class:`planner.schema.workload.ModalityStats`)."""

    def to_profile(self) -> WorkloadProfile:
        """The workload profile; needs arrivals (a log with timestamps)."""
        if self.arrivals is None:
            raise InputError(
                Problem(
                    file=self.source,
                    path="",
                    message=f"the log {no_rate_reason(self.notes)}, so a workload profile (which needs arrival rates) cannot be built from it",
                    fix="characterise it without --out for the length mix, or give the rate in the instance (traffic.rate_per_s with lengths, or traffic.peak_rate_per_s with this trace)",
                )
            )
        arrivals = self.arrivals.model_copy(update={"notes": list(dict.fromkeys(self.arrivals.notes + self.notes))})
        return WorkloadProfile(
            service=self.service,
            source=f"{self.source} ({self.format})",
            arrivals=arrivals,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_prefix_share=self.cached_prefix_share or 0.0,
            buckets=self.buckets,
            tools=self.tools,
            sessions=self.sessions,
            modalities=dict(self.modalities),
        )

    def to_json(self) -> dict[str, Any]:
        a = self.arrivals
        out: dict[str, Any] = {
            "service": self.service,
            "source": self.source,
            "format": self.format,
            "requests": self.requests,
            "duration_s": a.duration_s if a else None,
            "arrival_rate_mean_per_s": a.rate_mean_per_s if a else None,
            "arrival_rate_peak_per_s": dict(a.rate_peak_per_s) if a else None,
            "peak_quantile": a.peak_quantile if a else None,
            "arrival_rate_quantile_per_s": dict(a.rate_quantile_per_s) if a else None,
            "interarrival_cv": a.interarrival_cv if a else None,
            "empty_windows": dict(a.empty_windows) if a else None,
            "timestamps": a.timestamps if a else "missing",
            "timestamp_resolution_s": a.timestamp_resolution_s if a else None,
            "unreliable_peak_windows": list(a.unreliable_peak_windows) if a else [],
            "replay_wait": {k: [list(r) for r in v] for k, v in a.replay_wait.items()} if a else {},
            "replay_slot_spacing": {k: [list(r) for r in v] for k, v in a.replay_slot_spacing.items()} if a else {},
            "input_tokens": self.input_tokens.model_dump(),
            "output_tokens": self.output_tokens.model_dump(),
            "cached_prefix_share": self.cached_prefix_share,
            "buckets": [b.model_dump() for b in self.buckets],
        }
        if self.tools_summary is not None:
            out["tools"] = {**self.tools_summary, "by_tool": {k: v.model_dump() for k, v in self.tools.items()}}
        if self.sessions is not None:
            out["sessions"] = self.sessions.model_dump()
        if self.modalities:
            out["modalities"] = {k: v.model_dump() for k, v in self.modalities.items()}
        if self.extra:
            out.update(self.extra)
        out["notes"] = list(dict.fromkeys((a.notes if a else []) + self.notes))
        return out


def context_note(inp: np.ndarray, out: np.ndarray, context_limit_tokens: int | None) -> str | None:
    """A note when some requests need more context (input + output tokens) than
    ``context_limit_tokens`` (the largest context window of any model in the catalog)."""
    if not context_limit_tokens or len(inp) == 0:
        return None
    need = inp + out
    over = need > context_limit_tokens
    if not over.any():
        return None
    return (f"{int(over.sum())} request(s) need more context (input + output tokens, up to {float(need.max()):,.0f}) than any "
            f"model in the catalog offers ({context_limit_tokens:,} tokens): no model can serve them as logged")


def _one_service(log: RequestLog, frame: pd.DataFrame, tools: pd.DataFrame | None, service: str, k: int, peak_quantile: float | None,
                 representative_quantile: float, context_limit_tokens: int | None = None) -> Characterization:
    inp = frame["input_tokens"].to_numpy(dtype=np.float64)
    out = frame["output_tokens"].to_numpy(dtype=np.float64)
    has_cache = "cached_tokens" in frame.columns
    cached = frame["cached_tokens"].to_numpy(dtype=np.float64) if has_cache else None
    basis = frame["cache_basis_tokens"].to_numpy(dtype=np.float64) if has_cache else None
    k_log = supported_buckets(len(inp), k)
    buckets, bucket_notes = length_buckets(inp, out, k_log, cached_tokens=cached, cache_basis_tokens=basis, representative_quantile=representative_quantile)
    if k_log < k:
        bucket_notes = [f"asked for {k} length buckets; the log's {len(inp):,} requests support {k_log} (at least "
                        f"{MIN_REQUESTS_PER_BUCKET} requests per bucket: planner.workload.buckets item 7)", *bucket_notes]
    share = None
    if cached is not None and basis is not None:
        total = float(basis.sum())
        share = min(1.0, float(cached.sum()) / total) if total > 0 else 0.0
    arrivals = None
    notes = list(log.notes) + bucket_notes
    long_note = context_note(inp, out, context_limit_tokens)
    if long_note:
        notes.append(long_note)
    if "arrival_s" in frame.columns:
        arrivals = arrival_stats(frame["arrival_s"].to_numpy(dtype=np.float64), log.timestamps, log.time_quantum_s, peak_quantile)
        if arrivals is None:
            notes.append(ONE_INSTANT_NOTE)
    tstats: dict[str, ToolStats] = {}
    summary = None
    if tools is not None and len(tools):
        tstats = tool_stats(tools, len(frame))
        summary = all_tools_summary(tools, len(frame))
    sessions = session_stats(frame) if "session" in frame.columns else None
    return Characterization(
        modalities=log_modalities(frame),
        service=service,
        source=log.source,
        format=log.format,
        requests=len(frame),
        arrivals=arrivals,
        input_tokens=token_stats(inp),
        output_tokens=token_stats(out),
        buckets=buckets,
        cached_prefix_share=share,
        tools=tstats,
        tools_summary=summary,
        sessions=sessions,
        notes=notes,
    )


def characterize_log(
    log: RequestLog,
    buckets: int = 4,
    peak_quantile: float | None = 0.99,
    representative_quantile: float = REPRESENTATIVE_QUANTILE,
    context_limit_tokens: int | None = None,
) -> dict[str, Characterization]:
    """Characterise each service of a log (one service, ``default``, without a service column).

    ``context_limit_tokens``: the largest context window of any model; requests beyond it get a note."""
    frame = log.frame
    if "service" not in frame.columns:
        return {DEFAULT_SERVICE: _one_service(log, frame, log.tools, DEFAULT_SERVICE, buckets, peak_quantile, representative_quantile, context_limit_tokens)}
    out: dict[str, Characterization] = {}
    codes, names = pd.factorize(frame["service"], sort=True)
    for code, name in enumerate(names):
        rows = np.flatnonzero(codes == code)
        sub = frame.iloc[rows].reset_index(drop=True)
        tools = None
        if log.tools is not None:
            pos = np.full(len(frame), -1)
            pos[rows] = np.arange(len(rows))
            t = log.tools[pos[log.tools["request"].to_numpy()] >= 0].copy()
            t["request"] = pos[t["request"].to_numpy()]
            tools = t
        label = str(name) if str(name) else "(empty)"
        out[label] = _one_service(log, sub, tools, label, buckets, peak_quantile, representative_quantile, context_limit_tokens)
    return out


def characterize_servegen(agg: ServeGenAggregate, buckets: int = 4, peak_quantile: float | None = 0.99, representative_quantile: float = REPRESENTATIVE_QUANTILE) -> Characterization:
    """Characterise a ServeGen client from its per-window aggregates.

    - requests = round(sum of rate x 600 s); duration = windows x 600 s; mean rate = requests / duration;
    - the 600 s peak is the largest window rate (measured); the quantile is over all windows;
    - 60 s and 1 s peaks are *estimates*: inside a window of rate ``λ`` and inter-arrival CV ``c``
      the count in a sub-window of ``w`` seconds has mean ``λw`` and, for a renewal process,
      variance ≈ ``c² λ w``; the largest of the ``m = 600 / w`` sub-windows is taken at the
      ``1 - 1/m`` normal quantile ``z_m``: ``peak_w ≈ max_i (λ_i + z_m c_i sqrt(λ_i / w))``.
      They are listed as unreliable;
    - inter-arrival CV = median of the per-window CVs over non-idle windows;
    - within-window CV (``interarrival_cv_within``, every window key): the per-window CVs pooled
      as :func:`planner.workload.arrivals.within_window_cv` pools gaps — weighted by each window's
      gap count ``λ_i · 600 s``: ``sqrt(Σ λ_i c_i² / Σ λ_i)`` over non-idle windows. For 1 s and
      60 s windows it is the 600 s value (ServeGen has nothing finer; said in the notes).
    """
    w = agg.windows
    rate = w["rate_rps"].to_numpy(dtype=np.float64)
    cv = w["cv"].to_numpy(dtype=np.float64)
    active = (w["family"].astype(str).str.len() > 0).to_numpy() & (rate > 0)
    requests = int(round(float(rate.sum()) * WINDOW_S))
    duration = len(w) * WINDOW_S
    notes = list(agg.notes)
    peaks: dict[str, float] = {}
    quants: dict[str, float] = {}
    for key, width in WINDOWS_S.items():
        if width >= WINDOW_S:
            peaks[key] = float(rate.max())
            if peak_quantile is not None:
                quants[key] = float(np.quantile(rate, peak_quantile))
            continue
        m = WINDOW_S / width
        z = NormalDist().inv_cdf(1.0 - 1.0 / m)
        est = rate + z * cv * np.sqrt(np.maximum(rate, 0.0) / width)
        peaks[key] = float(est.max())
        if peak_quantile is not None:
            quants[key] = float(np.quantile(est, peak_quantile))
    notes.append("ServeGen gives per-600 s aggregates, not requests: 1s and 60s peaks are estimated from each window's rate and CV (normal approximation, see planner.workload.characterize)")
    active_rate = rate[active]
    median_cv = float(np.median(cv[active])) if active.any() else 1.0
    pooled_cv = float(np.sqrt(np.sum(rate[active] * cv[active] ** 2) / np.sum(rate[active]))) if active.any() else 1.0
    notes.append(f"inter-arrival CV inside windows: {pooled_cv:.3g}, pooled from the per-600 s window CVs (used for 1s and 60s windows too)")
    if requests <= 0 or duration <= 0:
        raise InputError(Problem(file=agg.source, path="", message="every window is idle: no traffic to characterise", fix="use another client's files"))
    arrivals = ArrivalStats(
        requests=requests,
        duration_s=duration,
        rate_mean_per_s=requests / duration,
        rate_peak_per_s=peaks,
        interarrival_cv=median_cv,
        interarrival_cv_within={k: pooled_cv for k in WINDOWS_S},
        timestamp_resolution_s=WINDOW_S,
        timestamps="missing",
        notes=notes,
        empty_windows={"600s": int(np.count_nonzero(~active))},
        peak_quantile=peak_quantile,
        rate_quantile_per_s=quants,
        unreliable_peak_windows=[k for k, v in WINDOWS_S.items() if v < WINDOW_S],
    )
    vin, pin = agg.pmfs["input_tokens"]
    vout, pout = agg.pmfs["output_tokens"]
    bks, bnotes = pmf_buckets(vin, pin, vout, pout, buckets, representative_quantile=representative_quantile)
    extra = {
        "servegen": {
            "windows": len(w),
            "active_windows": int(active.sum()),
            "rate_active_mean_per_s": float(active_rate.mean()) if active_rate.size else 0.0,
            "rate_active_p99_per_s": float(np.quantile(active_rate, 0.99)) if active_rate.size else 0.0,
            "rate_active_max_per_s": float(active_rate.max()) if active_rate.size else 0.0,
            "families": {str(k): int(v) for k, v in w.loc[active, "family"].value_counts().items()},
            "length_fields": {name: pmf_stats(v, p).model_dump() for name, (v, p) in agg.pmfs.items()},
        }
    }
    return Characterization(
        service=DEFAULT_SERVICE,
        source=agg.source,
        format="servegen",
        requests=requests,
        arrivals=arrivals,
        input_tokens=pmf_stats(vin, pin),
        output_tokens=pmf_stats(vout, pout),
        buckets=bks,
        notes=bnotes,
        extra=extra,
        modalities=servegen_modalities(agg.pmfs),
    )


MODALITY_NAMES: tuple[str, ...] = ("image", "audio", "video")


def log_modalities(frame: pd.DataFrame) -> dict[str, ModalityStats]:
    """Per modality with a ``<m>_tokens`` column holding any tokens: token quantiles over all requests
    (missing = 0) and items per request (mean of ``<m>_count``, else the share of requests with tokens)."""
    out: dict[str, ModalityStats] = {}
    for m in MODALITY_NAMES:
        col = f"{m}_tokens"
        if col not in frame.columns:
            continue
        tok = np.nan_to_num(frame[col].to_numpy(dtype=np.float64), nan=0.0)
        if tok.size == 0 or float(tok.sum()) <= 0:
            continue
        cnt = f"{m}_count"
        items = float(np.nan_to_num(frame[cnt].to_numpy(dtype=np.float64), nan=0.0).mean()) if cnt in frame.columns else float(np.mean(tok > 0))
        out[m] = ModalityStats(tokens=token_stats(tok), items_per_request=items)
    return out


def servegen_modalities(pmfs: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, ModalityStats]:
    """Per modality with tokens in a ServeGen multimodal dataset: its ``<m>_tokens`` PMF and mean ``<m>_count``."""
    out: dict[str, ModalityStats] = {}
    for m in MODALITY_NAMES:
        pmf = pmfs.get(f"{m}_tokens")
        if pmf is None or float(np.dot(pmf[0], pmf[1])) <= 0:
            continue
        cnt = pmfs.get(f"{m}_count")
        items = float(np.dot(cnt[0], cnt[1])) if cnt is not None else 1.0
        out[m] = ModalityStats(tokens=pmf_stats(pmf[0], pmf[1]), items_per_request=items)
    return out


def characterize_path(
    path: str | Path,
    fmt: str | None = None,
    columns: dict[str, str] | None = None,
    *,
    buckets: int = 4,
    peak_quantile: float | None = 0.99,
    on_bad_row: OnBadRow = "error",
    service_column: str | None = None,
    context_limit_tokens: int | None = None,
) -> dict[str, Characterization]:
    """Read and characterise a log file (uncached); ``context_limit_tokens`` as in :func:`characterize_log`."""
    if buckets < 1:
        raise InputError(Problem(file="", path="buckets", message=f"buckets must be >= 1, got {buckets}", fix="use e.g. --buckets 4"))
    if peak_quantile is not None and not (0.0 < peak_quantile < 1.0):
        raise InputError(Problem(file="", path="peak_quantile", message=f"peak quantile must be in (0, 1), got {peak_quantile}", fix="use e.g. --peak-quantile 0.99"))
    log = read_trace(Path(path), fmt, columns, on_bad_row, service_column)
    if isinstance(log, ServeGenAggregate):
        c = characterize_servegen(log, buckets, peak_quantile)
        return {c.service: c}
    return characterize_log(log, buckets, peak_quantile, context_limit_tokens=context_limit_tokens)


@functools.lru_cache(maxsize=64)
def _cached(path: str, _size: int, _mtime_ns: int, fmt: str | None, columns: tuple[tuple[str, str], ...], buckets: int, peak_quantile: float | None, on_bad_row: OnBadRow, service_column: str | None) -> dict[str, Characterization]:
    return characterize_path(path, fmt, dict(columns) or None, buckets=buckets, peak_quantile=peak_quantile, on_bad_row=on_bad_row, service_column=service_column)


def characterize_file(
    path: str | Path,
    fmt: str | None = None,
    columns: dict[str, str] | None = None,
    *,
    buckets: int = 4,
    peak_quantile: float | None = 0.99,
    on_bad_row: OnBadRow = "error",
    service_column: str | None = None,
) -> dict[str, Characterization]:
    """Like :func:`characterize_path`, cached on (resolved path, size, mtime, options).

    Do not mutate the returned objects (they are shared between callers).
    """
    p = Path(path).resolve()
    if not p.is_file():
        raise InputError(Problem(file=str(path), path="", message="file not found", fix="check the path"))
    st = p.stat()
    if peak_quantile is not None and math.isnan(peak_quantile):
        peak_quantile = None
    return _cached(str(p), st.st_size, st.st_mtime_ns, fmt, tuple(sorted((columns or {}).items())), buckets, peak_quantile, on_bad_row, service_column)


characterize_file.cache_clear = _cached.cache_clear  # type: ignore[attr-defined]
characterize_file.cache_info = _cached.cache_info  # type: ignore[attr-defined]
