"""Request streams for the simulator: replayed from a log or synthetic, in chunks.

A stream is an iterator of :class:`RequestChunk` (columns as numpy arrays, arrival times
non-decreasing across chunks). Chunks keep memory flat in the number of requests: the
simulator pulls the next chunk only when it needs the next arrival.

Synthetic arrivals are a renewal process: inter-arrival times are exponential (Poisson,
CV = 1) or gamma with shape ``1/CV²`` and mean ``1/rate`` (any CV > 0; CV < 1 smoother,
CV > 1 burstier). Lengths are drawn with replacement from given (input, output) samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 8192


@dataclass(frozen=True)
class RequestChunk:
    """A block of requests. ``service`` indexes the simulation's routes.

    ``turns`` (≥ 1) LLM calls per session; between turns a tool wait of ``tool_wait_s``
    and ``append_tokens`` new input tokens per follow-up turn (0 and 1 for plain requests).
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    service: np.ndarray
    turns: np.ndarray
    tool_wait_s: np.ndarray
    append_tokens: np.ndarray

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])


def _chunk(arrival: np.ndarray, inp: np.ndarray, out: np.ndarray, service: np.ndarray | None = None,
           turns: np.ndarray | None = None, tool_wait: np.ndarray | None = None,
           append: np.ndarray | None = None) -> RequestChunk:
    n = arrival.shape[0]
    return RequestChunk(
        arrival_s=np.asarray(arrival, dtype=float),
        input_tokens=np.maximum(np.asarray(inp, dtype=np.int64), 1),
        output_tokens=np.maximum(np.asarray(out, dtype=np.int64), 1),
        service=np.zeros(n, dtype=np.int64) if service is None else np.asarray(service, dtype=np.int64),
        turns=np.ones(n, dtype=np.int64) if turns is None else np.maximum(np.asarray(turns, dtype=np.int64), 1),
        tool_wait_s=np.zeros(n) if tool_wait is None else np.asarray(tool_wait, dtype=float),
        append_tokens=np.zeros(n, dtype=np.int64) if append is None else np.asarray(append, dtype=np.int64),
    )


def synthetic_requests(rate_per_s: float, duration_s: float, *, input_tokens: Sequence[int] | np.ndarray,
                       output_tokens: Sequence[int] | np.ndarray, interarrival_cv: float = 1.0,
                       seed: int = 0, service: int = 0, start_s: float = 0.0, turns: int = 1,
                       tool_wait_mean_s: float = 0.0, append_tokens: int = 0,
                       chunk: int = CHUNK) -> Iterator[RequestChunk]:
    """Renewal arrivals in ``[start_s, start_s + duration_s)`` with lengths drawn from samples.

    ``input_tokens[i], output_tokens[i]`` are paired samples (e.g. a log's rows) drawn
    with replacement. Agent sessions: ``turns`` calls each, tool waits exponential with
    mean ``tool_wait_mean_s``. Reproducible: one ``numpy`` generator seeded with ``seed``.
    """
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError("rate_per_s and duration_s must be > 0")
    if interarrival_cv <= 0:
        raise ValueError("interarrival_cv must be > 0")
    inp = np.asarray(input_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    if inp.shape != out.shape or inp.size == 0:
        raise ValueError("input_tokens and output_tokens must be paired, non-empty samples")
    rng = np.random.default_rng(seed)
    mean_gap = 1.0 / rate_per_s
    shape = 1.0 / interarrival_cv**2
    t = start_s
    end = start_s + duration_s
    while t < end:
        if interarrival_cv == 1.0:
            gaps = rng.exponential(mean_gap, chunk)
        else:
            gaps = rng.gamma(shape, mean_gap / shape, chunk)
        times = t + np.cumsum(gaps)
        t = float(times[-1])
        times = times[times < end]
        n = times.shape[0]
        if n == 0:
            break
        idx = rng.integers(0, inp.size, n)
        waits: np.ndarray | None = None
        if turns > 1 and tool_wait_mean_s > 0:
            waits = np.asarray(rng.exponential(tool_wait_mean_s, n), dtype=float)
        yield _chunk(times, inp[idx], out[idx], np.full(n, service, dtype=np.int64),
                     np.full(n, turns, dtype=np.int64), waits,
                     np.full(n, append_tokens, dtype=np.int64))


def merge_streams(*streams: Iterator[RequestChunk]) -> Iterator[RequestChunk]:
    """Merge several time-ordered streams (e.g. one per service) into one, chunk by chunk."""
    heads: list[RequestChunk | None] = [next(s, None) for s in streams]
    pos = [0] * len(streams)
    while True:
        live = [i for i, h in enumerate(heads) if h is not None]
        if not live:
            return
        # everything up to the earliest last-arrival among live chunks can be emitted safely
        horizon = min(float(heads[i].arrival_s[-1]) for i in live)  # type: ignore[union-attr]
        parts = []
        for i in live:
            h = heads[i]
            assert h is not None
            a = h.arrival_s
            stop = int(np.searchsorted(a, horizon, side="right"))
            if stop > pos[i]:
                parts.append(_slice(h, pos[i], stop))
                pos[i] = stop
            if pos[i] >= len(h):
                heads[i] = next(streams[i], None)
                pos[i] = 0
        if parts:
            merged = _concat(parts)
            order = np.argsort(merged.arrival_s, kind="stable")
            yield _take(merged, order)


def _slice(c: RequestChunk, a: int, b: int) -> RequestChunk:
    return RequestChunk(*(getattr(c, f)[a:b] for f in _FIELDS))


def _take(c: RequestChunk, idx: np.ndarray) -> RequestChunk:
    return RequestChunk(*(getattr(c, f)[idx] for f in _FIELDS))


def _concat(parts: list[RequestChunk]) -> RequestChunk:
    return RequestChunk(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("arrival_s", "input_tokens", "output_tokens", "service", "turns", "tool_wait_s", "append_tokens")


def replay_requests(frame: pd.DataFrame, *, services: Sequence[str] | None = None,
                    time_scale: float = 1.0, chunk: int = CHUNK) -> Iterator[RequestChunk]:
    """Replay a log: columns ``arrival_s``, ``input_tokens``, ``output_tokens`` and optional
    ``service`` (names, mapped to indexes of ``services``), ``turns``, ``tool_wait_s``,
    ``append_tokens``. Rows are sorted by arrival and shifted to start at 0; ``time_scale``
    < 1 compresses time (a rate multiplier of ``1/time_scale``)."""
    missing = [c for c in ("arrival_s", "input_tokens", "output_tokens") if c not in frame.columns]
    if missing:
        raise ValueError(f"request log lacks columns: {', '.join(missing)}")
    df = frame.sort_values("arrival_s", kind="stable")
    arrival = df["arrival_s"].to_numpy(dtype=float)
    if arrival.size:
        arrival = (arrival - arrival[0]) * time_scale
    if "service" in df.columns:
        names = list(services) if services is not None else sorted(df["service"].astype(str).unique())
        lookup = {n: i for i, n in enumerate(names)}
        unknown = set(df["service"].astype(str)) - set(lookup)
        if unknown:
            raise ValueError(f"request log has services without a route: {', '.join(sorted(unknown))}")
        service = df["service"].astype(str).map(lookup).to_numpy(dtype=np.int64)
    else:
        service = np.zeros(arrival.size, dtype=np.int64)

    def col(name: str) -> np.ndarray | None:
        return df[name].to_numpy() if name in df.columns else None

    inp = df["input_tokens"].to_numpy()
    out = df["output_tokens"].to_numpy()
    turns, waits, append = col("turns"), col("tool_wait_s"), col("append_tokens")
    for a in range(0, arrival.size, chunk):
        b = a + chunk
        yield _chunk(arrival[a:b], inp[a:b], out[a:b], service[a:b],
                     None if turns is None else turns[a:b], None if waits is None else waits[a:b],
                     None if append is None else append[a:b])


