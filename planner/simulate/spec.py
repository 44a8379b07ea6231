"""Plain typed inputs of the discrete-event simulator (no dependency on the optimiser).

A simulation is a set of pools (:class:`PoolSpec`), one route per service saying which
pools its requests visit (:class:`ServiceRoute`), outages (:class:`Outage`) and a request
stream (:mod:`planner.simulate.arrivals`). Times are seconds, sizes are tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

PoolRole = Literal["prefill", "decode", "unified", "encode"]
ToolPolicy = Literal["hold", "offload", "recompute"]

StepTime = Callable[[int], float] | Sequence[float]
"""Decode step time in seconds as a function of the batch size ``b`` (``1..max_batch``),
or a table indexed by ``b`` (entry 0 is ignored)."""


@dataclass(frozen=True)
class PoolSpec:
    """One pool of identical instances.

    * ``prefill``: an instance serves one prompt (or, with ``prefill_batch_tokens > 0``, a
      batch of queued prompts up to that many tokens and ``max_batch`` prompts) for
      ``prefill_time_s(tokens)`` seconds; pool-level FCFS queue.
    * ``decode``: continuous batching; up to ``max_batch`` sequences per instance, each
      step produces one token for every sequence and takes ``step_time_s(b)``; a sequence
      is admitted at a step boundary when a slot and KV room for its context are free
      (pool-level FCFS queue, least-loaded instance). KV grows one token per sequence per
      step; when the next step would exceed ``kv_capacity_tokens`` the newest sequence is
      preempted and requeued at the head, and on re-admission the instance stalls for
      ``prefill_time_s(context)`` to recompute its KV (vLLM's recompute preemption).
    * ``encode``: a multimodal request's vision tower in a pool of its own (E/P/D): served like a
      prefill pool, one request per instance for ``prefill_time_s(tokens)`` seconds (the adapter:
      a constant, the tower's time per request); the request then goes on to its route's prefill
      or unified pool after ``ServiceRoute.encode_transfer_s`` (the embeddings sent).
    * ``unified``: continuous batching with chunked prefill: each iteration carries the
      decode batch plus up to ``chunk_tokens`` prompt tokens (FCFS over the instance's
      admitted prompts) and takes ``iteration_time_s(b, chunk)``; by default
      ``step_time_s(b) + prefill_time_s(chunk)`` (no overlap of the two: conservative).
    """

    name: str
    role: PoolRole
    instances: int
    prefill_time_s: Callable[[int], float]
    """Time to prefill ``n`` tokens on one instance (prefill/unified; decode: recompute)."""
    step_time_s: StepTime | None = None
    max_batch: int = 1
    kv_capacity_tokens: float = math.inf
    """KV tokens one instance holds (decode/unified)."""
    prefill_batch_tokens: int = 0
    chunk_tokens: int = 512
    iteration_time_s: Callable[[int, int], float] | None = None
    tokens_per_step: float = 1.0
    """Decode and unified: tokens each step (iteration) yields per decoding sequence (speculative decoding: the mean accepted
    tokens ``E``); a sequence of ``o`` tokens takes ``ceil(o / E)`` steps and its tokens arrive in
    bursts (one gap of the step, ``E - 1`` gaps of ~0). KV still grows one token per step per
    sequence here (undercounts the growth of generated tokens by ``E``)."""

    def __post_init__(self) -> None:
        if self.instances < 0:
            raise ValueError(f"pool {self.name}: instances must be >= 0")
        if self.max_batch < 1:
            raise ValueError(f"pool {self.name}: max_batch must be >= 1")
        if self.role in ("decode", "unified") and self.step_time_s is None:
            raise ValueError(f"pool {self.name}: a {self.role} pool needs step_time_s")
        if self.tokens_per_step < 1.0:
            raise ValueError(f"pool {self.name}: tokens_per_step must be >= 1")
        if self.role == "unified" and self.chunk_tokens < 1:
            raise ValueError(f"pool {self.name}: chunk_tokens must be >= 1")

    def step_table(self) -> list[float]:
        """Step time for batch ``0..max_batch`` (entry 0 = 0)."""
        st = self.step_time_s
        if st is None:
            return [0.0] * (self.max_batch + 1)
        if callable(st):
            table = [0.0] + [float(st(b)) for b in range(1, self.max_batch + 1)]
        else:
            if len(st) < self.max_batch + 1:
                raise ValueError(f"pool {self.name}: step-time table needs entries for batch 1..{self.max_batch}")
            table = [0.0] + [float(x) for x in list(st)[1 : self.max_batch + 1]]
        if any(not (x > 0 and math.isfinite(x)) for x in table[1:]):
            raise ValueError(f"pool {self.name}: step times must be positive and finite")
        return table


@dataclass(frozen=True)
class ServiceRoute:
    """Which pools a service's requests visit, its SLO and its tool-wait policy.

    Either ``unified`` or ``decode`` (optionally preceded by ``prefill``) is set. With a
    prefill pool the KV of the prompt moves to decode in ``transfer_s_per_token × tokens``
    seconds (a delay that does not occupy either pool: layer-wise streaming). TTFT ends
    with the first decode step (DESIGN §3); in a unified pool with the iteration that
    finishes the prompt.

    Agent sessions (``turns > 1`` in the stream): between turns the agent waits on a tool.
    ``hold`` keeps the session's KV on its decode instance during the wait (it occupies
    memory) and the next turn prefills only the appended tokens; ``offload`` frees the
    memory and the next turn first reloads the context (``reload_s_per_token × context``,
    e.g. KV bytes per token / host-link bandwidth) and prefills the appended tokens;
    ``recompute`` frees the memory and the next turn prefills context + appended tokens.
    """

    service: str
    decode: str | None = None
    prefill: str | None = None
    unified: str | None = None
    transfer_s_per_token: float = 0.0
    ttft_target_s: float = math.inf
    ttft_quantile: float = 0.99
    tpot_target_s: float = math.inf
    tpot_quantile: float = 0.99
    """Per-request TPOT target and its quantile level (``nan``: a mean target)."""
    itl_target_s: float = math.inf
    itl_quantile: float = 0.99
    """ITL (every token gap) target and its level (``nan``: a mean target)."""
    token_metric: str = "tpot"
    """The per-token metric the service is checked on: ``tpot`` or ``itl`` (DESIGN §3)."""
    e2e_target_s: float = math.inf
    e2e_quantile: float = 0.99
    """E2E target and its level (``nan``: a mean target)."""
    tool_policy: ToolPolicy = "hold"
    reload_s_per_token: float = 0.0
    ttft_overhead_s: float = 0.0
    """Fixed latency added to the request's first token and end (engines' TTFT includes their
    scheduling/tokenisation overhead; the pools' work does not): set on unified routes from the
    operating point (:func:`planner.pool_latency.unified_ttft_overhead_ms`); on a disaggregated
    route the KV-transfer delay carries the prefill point's."""
    encode: str | None = None
    """A separate encode pool the request visits first (role ``encode``); ``None``: none, or inline (``encode_tokens``)."""
    encode_transfer_s: float = 0.0
    """Seconds from the end of the encode to the request joining its prefill / unified queue (the embeddings' transfer;
    a delay that occupies no pool)."""
    encode_tokens: int = 0
    """An inline encode (multimodal requests, :mod:`planner.capacity_encode`): prompt tokens of work added to each
    request's first prefill in the route's prefill or unified pool, the vision tower's time at that pool's time per
    prompt token (:func:`planner.simulate.adapter.inline_encode_tokens`). They take prefill time and a unified
    iteration's chunk budget, hold no KV and send none to decode."""

    def __post_init__(self) -> None:
        if (self.unified is None) == (self.decode is None):
            raise ValueError(f"service {self.service}: route to exactly one of a unified or a decode pool")
        if self.unified is not None and self.prefill is not None:
            raise ValueError(f"service {self.service}: a unified route has no separate prefill pool")
        if self.encode_tokens < 0:
            raise ValueError(f"service {self.service}: encode_tokens must be >= 0")
        if self.encode is not None and self.encode_tokens:
            raise ValueError(f"service {self.service}: a request encodes in a separate pool or inline, not both")
        if not (self.encode_transfer_s >= 0 and math.isfinite(self.encode_transfer_s)):
            raise ValueError(f"service {self.service}: encode_transfer_s must be finite and >= 0")


@dataclass(frozen=True)
class Outage:
    """Instance ``instance`` of ``pool`` is offline in ``[start_s, end_s)``; its work is requeued."""

    pool: str
    instance: int
    start_s: float
    end_s: float = math.inf


@dataclass(frozen=True)
class SimConfig:
    """Run options. Requests arriving before ``warmup_s`` or at/after ``measure_end_s`` are simulated but not measured."""

    warmup_s: float = 0.0
    measure_end_s: float = math.inf
    """End of the measured window: later arrivals keep the load up while measured requests finish
    (no drain inside the measurement); per-token gaps are recorded only in ``[warmup_s, measure_end_s)``."""
    max_drain_s: float = math.inf
    """Stop this long after the last arrival even if work remains (overload)."""
    sample_interval_s: float = 0.0
    """Queue/batch/KV sampling period; 0 chooses ``horizon / 200``."""
    sections: int = 10
    """Equal parts of a finite measured window ``[warmup_s, measure_end_s)`` whose TTFT and TPOT samples are also kept
    apart (:class:`planner.simulate.stats.SectionCounts`: the sectioning interval of a quantile); 0 keeps none."""
    outages: tuple[Outage, ...] = field(default_factory=tuple)
