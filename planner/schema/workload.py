"""Workload profiles: what a request log says about a service, in the form the planner uses.

Produced by :mod:`planner.workload` (``planner characterize``) or written by hand; an
instance can include one (``traffic.profile``) or point at a log (``traffic.trace``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from planner.schema.common import (
    Fraction,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    Quantile,
    StrictModel,
    bounded,
)


class TokenStats(StrictModel):
    """Distribution summary of a token count (quantiles, not just means)."""

    mean: NonNegFloat
    p50: NonNegFloat
    p90: NonNegFloat
    p99: NonNegFloat
    max: NonNegFloat

    @model_validator(mode="after")
    def _ordered(self) -> TokenStats:
        if not (self.p50 <= self.p90 <= self.p99 <= self.max):
            raise ValueError("quantiles must be ordered: p50 <= p90 <= p99 <= max")
        return self


class LengthBucket(StrictModel):
    """A bin of (input, output) lengths with its share of requests.

    ``input_tokens`` / ``output_tokens`` are the *representatives* the performance model
    uses: conservative values (a high quantile inside the bin) so the bin's latency holds
    for its tail. ``*_mean`` are the means inside the bin, used for throughput and cost.
    """

    name: str
    weight: Fraction
    """Share of the service's requests in this bucket (weights sum to 1)."""
    input_tokens: PosFloat
    output_tokens: PosFloat
    input_tokens_mean: PosFloat
    output_tokens_mean: PosFloat
    cached_prefix_share: Fraction = 0.0
    """Share of input tokens whose KV can be reused from an earlier request (prefix cache)."""
    length_mix: list[tuple[Fraction, PosFloat, PosFloat]] = []
    """The bucket's lengths at the finest resolution (:data:`planner.workload.buckets.FINE_BUCKETS`
    nested sub-bins): ``(share of the bucket's requests, input representative, mean output)`` per
    sub-bin, each input representative no larger than the bucket's. The capacity table prices a bucket's
    *work* per request from this mix and its latency at the bucket's representatives
    (:mod:`planner.capacity`). Optional: empty (hand-written buckets) prices the work at the
    representatives too."""
    input_tail_share: Fraction = 0.0
    """Share of the bucket's requests whose input exceeds the service's ``representative_quantile`` of inputs
    (the input part of the service's length tail set, :mod:`planner.workload.buckets` item 2): no sub-bin's
    representative covers their TTFT, so the TTFT quantile of the mix counts them as misses
    (:mod:`planner.ttft_mixture`). 0 for hand-written buckets (which have no mix)."""


class ArrivalStats(StrictModel):
    """Arrival process of one service."""

    requests: NonNegInt
    duration_s: PosFloat
    rate_mean_per_s: PosFloat
    rate_peak_per_s: dict[str, NonNegFloat] = {}
    """Peak rate over windows, keyed by window (``1s``, ``60s``, ``600s``)."""
    interarrival_cv: NonNegFloat = 1.0
    """Coefficient of variation of inter-arrival times over the whole log (1 = Poisson)."""
    interarrival_cv_within: dict[str, NonNegFloat] = {}
    """Inter-arrival CV *inside* windows, keyed like ``rate_peak_per_s``: gaps normalised by their
    window's mean gap, pooled over busy windows (:func:`planner.workload.arrivals.within_window_cv`).
    The burstiness a pool sees at the peak rate of that window; empty when not measured."""
    timestamp_resolution_s: NonNegFloat | None = None
    """Detected resolution of timestamps (None when the log has none)."""
    timestamps: Literal["naive", "zoned", "relative", "bucketed", "missing", "synthetic"] = "naive"
    notes: list[str] = []
    """Caveats found while characterising (e.g. bucketed timestamps make 1 s peaks unreliable)."""
    empty_windows: dict[str, NonNegInt] = {}
    """Windows with no arrival, keyed like ``rate_peak_per_s`` (windows aligned to the first arrival)."""
    peak_quantile: Quantile | None = None
    """Quantile level of ``rate_quantile_per_s`` (e.g. 0.99)."""
    rate_quantile_per_s: dict[str, NonNegFloat] = {}
    """The ``peak_quantile`` of per-window rates, keyed by window: a less extreme peak to plan for."""
    unreliable_peak_windows: list[str] = []
    """Windows whose peak is not trustworthy (timestamps coarser than a tenth of the window)."""
    replay_wait: dict[str, list[list[float]]] = {}
    """Per window key: the normalised wait the log's replayed peak-like windows cause at each utilisation, rows
    ``[u, Q_0.5, Q_0.9, Q_0.99, Q_0.999]`` (:func:`planner.workload.replay_wait.replay_wait_curve`); a window is left
    out where the peak simulation would not replay the log (bucketed timestamps, too few arrivals)."""
    replay_slot_spacing: dict[str, list[list[float]]] = {}
    """Per window key, as ``replay_wait``: the lower quantiles of the time ``c`` consecutive replayed arrivals span, rows
    ``[c, g_0.5, g_0.1, g_0.01, g_0.001]`` then ``[0, span, n, 0, 0]`` (:func:`planner.workload.replay_wait.replay_slot_table`:
    the slot wait of a decode pool under the log's bursts)."""


class ToolLatency(StrictModel):
    """Latency distribution of one tool class, milliseconds."""

    mean_ms: NonNegFloat
    p50_ms: NonNegFloat
    p90_ms: NonNegFloat
    p99_ms: NonNegFloat
    max_ms: NonNegFloat | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ToolLatency:
        if not (self.p50_ms <= self.p90_ms <= self.p99_ms):
            raise ValueError("tool latency quantiles must be ordered: p50_ms <= p90_ms <= p99_ms")
        if self.max_ms is not None and self.max_ms < self.p99_ms:
            raise ValueError("max_ms must be >= p99_ms")
        return self


class ToolStats(StrictModel):
    """One tool class as observed in an agent log (or given by hand)."""

    calls_per_request: NonNegFloat
    """Calls of this tool per LLM call (request)."""
    latency: ToolLatency
    cpu_seconds_per_call: Annotated[float, bounded(ge=0, le=3600, why="at most a core-hour per call: an interactive agent's "
                                                   "tool; longer jobs are batch work outside this plan")] = 0.0
    """CPU work per call on the orchestration pool (serialisation, validation, routing)."""
    error_share: Fraction = 0.0
    timeout_share: Fraction = 0.0
    retry_share: Fraction = 0.0
    calls_observed: NonNegInt = 0


class SessionStats(StrictModel):
    """Agent sessions: several LLM calls separated by tool calls."""

    sessions: NonNegInt
    rounds_per_session_mean: PosFloat
    tokens_appended_per_round_mean: NonNegFloat = 0.0
    """New input tokens per round (beyond the cached prefix)."""
    cached_prefix_share: Fraction = 0.0


class ModalityStats(StrictModel):
    """Non-text input of one modality (image, audio, video) per request: the encoder-output (LLM)
    tokens the encode phase must produce (:mod:`planner.perf.encoder`), and the items (images, clips)
    they come in. Requests without the modality count as 0 tokens."""

    tokens: TokenStats
    items_per_request: NonNegFloat = 0.0
    """Mean items per request (ServeGen ``*_count``; a generic log's ``*_count`` column, else the share of
    requests with tokens of this modality)."""


class WorkloadProfile(StrictModel):
    """Characterised workload of one service."""

    service: str = "default"
    source: str = ""
    """Which log (path and format) this was computed from, or 'manual'."""
    arrivals: ArrivalStats
    input_tokens: TokenStats
    output_tokens: TokenStats
    cached_prefix_share: Fraction = 0.0
    buckets: list[LengthBucket] = Field(min_length=1)
    tools: dict[str, ToolStats] = {}
    sessions: SessionStats | None = None
    modalities: dict[Literal["image", "audio", "video"], ModalityStats] = {}
    """Per-request image / audio / video input (multimodal logs); their tokens are also inside
    ``input_tokens`` (the LLM prefills them). Applied to every bucket: ServeGen publishes no joint
    distribution of text and image tokens, so buckets split by total input share the service's means."""

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> WorkloadProfile:
        total = sum(b.weight for b in self.buckets)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"bucket weights sum to {total:.6f}, must sum to 1")
        return self
