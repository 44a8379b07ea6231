"""Operating points per role — the contract with the optimiser (DESIGN §3,
:class:`planner.schema.capacity.OperatingPoint`).

For one (model, device, tp, precisions, length bucket, SLO). Latency metrics as DESIGN §3 (and
vLLM, SGLang, DistServe) define them: TTFT; TPOT per request, ``(E2E - TTFT)/(OSL - 1)``, its
quantile over requests; ITL, each token gap, its quantile over all gaps; E2E. Each target is a
quantile or a mean; any subset may be set (``None``: not set).

**prefill** (disaggregated prompt pool). ``n = ISL (1 - s)`` new tokens after ``h = ISL s``
cached ones (``s`` = cached prefix share). ``m`` prompts may share one iteration (the weights are
streamed once for all of them), ``1 <= m <= min(floor(Q / n), B_mem,`` :data:`MAX_PREFILL_BATCH` ``)`` (the batches of
:data:`_PREFILL_BATCHES` below that bound, and the bound itself)
with ``Q`` the engine's token budget; a prompt longer than ``Q`` runs alone in ``k = ceil(n / Q)``
chunks. For each ``m``::

    instance_seconds_per_request(m) = t_iter(m prompts) / m
    ttft(m) = t_iter(m prompts) + ISL k_tok / link + t_dec(1, ISL) + ttft_overhead
    kv_transfer_bytes_per_request = kv(ISL)

(the first decode step is estimated on the same device type and tp; ``link`` is
``kv_link_gb_per_s`` or the NIC bandwidth of the ``tp`` devices). The batch is **chosen**: among
the ``m`` with ``ttft(m) <= min(TTFT, E2E target)``, the one that minimises
``tau(m) / rho(m)`` — instance-seconds per request over the utilisation cap the TTFT wait budget
``target - ttft(m)`` allows (:func:`planner.queueing.max_utilization`, the cap
:func:`planner.optimize.prepare.utilization_caps` applies: ``ceil(lambda tau)`` servers at the
bucket's peak rate ``lambda``, deterministic service, the arrivals' CV). A bigger batch costs less
per prompt but spends the TTFT budget the queue needs, so at low rates the choice is one prompt.
Without a rate (or a TTFT target) the cheapest ``m`` whose unqueued TTFT fits is taken.
Feasible iff one prompt's KV fits next to the weights and some ``ttft(m)`` fits.

**decode** (disaggregated generation pool). Mean context ``c = ISL + OSL/2``; KV admission at the
peak ``ISL + OSL``. Every gap is one step, so TPOT (any statistic) = ITL = ``t_dec(B)``. ``B*`` =
the largest batch with ``t_dec(B, c) <= min(TPOT, ITL target)``, ``(OSL - 1) t_dec(B) <= E2E
target`` and ``B <= B_mem`` (capped at :data:`MAX_BATCH`). ::

    instance_seconds_per_request = OSL t_dec(B*) / B*,   tpot = itl = t_dec(B*)

**unified** (shared pool, continuous batching with chunked prefill, Sarathi-Serve). An iteration
carries ``B`` decode sequences and, when a prompt is waiting, a prefill chunk of ``q`` tokens.

- *Chunk choice*: for every batch ``B`` a grid of chunks ``q <= Q - B`` is costed
  (:func:`_chunk_grid`: ``(Q - B)`` times :data:`CHUNK_GRID_FRACTIONS`, whole prompts and 1/2, 1/3, 1/4 of one, and with an
  ITL target the largest ``q`` whose iteration fits it); the feasible ``(B, q)`` with the highest
  throughput is the point. The per-token targets bind as the metrics are defined
  (:func:`planner.queueing.itl_quantile_s`, :func:`planner.queueing.tpot_quantile_s`): the ITL
  ``p`` quantile is the chunk iteration ``t_it(B, q)`` when more than ``1 - p`` of iterations
  carry a chunk (Sarathi-Serve's time-between-tokens cap), else the decode-only step; a request's
  TPOT is the mean of its own ``OSL - 1`` gaps, ``K`` of which carry a chunk, ``K = min(c N,
  OSL - 1)``, ``N ~ Poisson(u (OSL - 1)/c)``, ``c = ceil(n/q)`` — so per-request TPOT allows
  larger chunks, and its quantile stays honest for short outputs. E2E = TTFT + ``(OSL - 1)`` x
  TPOT at the E2E level (quantiles added: errs long).
- *Chunk attention*: chunk ``j`` attends over the ``j q`` tokens of earlier chunks (plus the
  cached prefix): the chunk is costed at its mean position ``h = cached + (n - q)/2``, so the
  ``n/q`` chunks carry exactly the unchunked ``n (n + 2 cached)/2`` pairs, and each chunk rereads
  the prompt's KV so far (``kv(q + h)``) and pays a weight read and the per-iteration overheads.
  ``q > n``: ``q/n`` whole prompts share the iteration.
- *Prefill lane*: prompts are chunked first-come-first-served, one lane of ``q_max`` tokens per
  iteration. Requests finish at ``B/OSL`` per iteration and must be admitted as fast, so a share
  ``u = B n / (OSL q_max)`` of iterations carries a chunk (``u < 1``). The decode-only iterations
  take ``t_dec(B)``::

      t_mean = u t_it(B, q_max) + (1 - u) t_dec(B)
      instance_seconds_per_request = OSL t_mean / B
      tpot = tpot_quantile_s(...),  itl = itl_quantile_s(...)   (detail: step_ms = t_it, itl_ms, e2e_ms)

- *TTFT waits for the lane*: the lane of one instance is an M/D/1 queue (Poisson arrivals at
  ``B/(OSL t_mean)`` per s, service ``S = n t_it / q_max`` per prompt, utilisation
  ``rho = u t_it / t_mean``); its wait at the TTFT target's quantile (:data:`LANE_WAIT_QUANTILE`
  without a TTFT target; :func:`lane_wait_quantile_s`) is part of the point's TTFT::

      ttft = W_q(rho, S) + ceil(n / q_max) t_it(B, q_max) + ttft_overhead

  Assumption: a request is dispatched to one engine on arrival and waits in that engine's own
  queue (vLLM, SGLang, TensorRT-LLM, behind a router); a disaggregated prefill pool is costed by
  the optimiser as one pooled queue (a global prefill queue, as in Dynamo or Mooncake). The wait
  is taken at the point's full rate; the optimiser loads an instance at most that much.
  ``detail`` carries the lane's inputs (``prefill_tokens`` ``n``, ``prefill_chunk_tokens``
  ``q_max``, ``lane_service_ms`` ``S``, ``lane_wait_ms``, ``decode_only_step_ms``,
  ``mean_step_ms``) so that a pool mixing several buckets can price the lane wait of the mix
  (:func:`planner.optimize.extract.lane_wait_quantile_ms`) and the simulator can run the same
  chunk (:mod:`planner.simulate.adapter`).
- *Not mixed* (the engine calibration's ``mixed_prefill`` false: vLLM before chunked prefill —
  V0 without ``--enable-chunked-prefill``, the colocated baseline of DistServe — and SGLang
  without ``--enable-mixed-chunk``): prefill has priority and runs in iterations of its own that
  carry no decode tokens, so each one stalls the whole decode batch. The same lane model holds
  with a "chunk-carrying iteration" that is a decode step followed by the stall,
  ``t_it(B, q) = t_dec(B) + t_pre(q)`` (two iterations, each with its own overheads;
  :func:`_stall_step`), and the chunk is the engine's, not chosen to protect TPOT / ITL: ``q =
  m n`` for ``m`` whole waiting prompts (``m`` from :data:`_PREFILL_BATCHES`, ``m n <= Q``; only
  the choice of ``m`` is the planner's, standing for prompts that queue while others prefill),
  or ``Q``-token chunks of a longer prompt. A request's TPOT then includes every stall during its
  decode (the Poisson count above), its TTFT the lane wait plus ``t_it`` (a full decode step
  before its prefill: errs long by up to one step).
- *Memory*: ``B`` sequences at their peak ``ISL + OSL`` plus the prompt being chunked fit the KV.

``(B*, q*)`` = among the pairs meeting the TPOT / ITL / TTFT / E2E targets that are set and memory,
the one with the least ``tau / rho``: instance-seconds per request ``tau = OSL t_mean / B`` over the
utilisation cap ``rho`` its TTFT wait budget ``target - ttft(B, q)`` allows (the cap
:func:`planner.optimize.prepare.utilization_caps` applies to a unified point: ``ceil(lambda tau)``
instances of ``B`` slots at the bucket's peak rate ``lambda``; :func:`_unified_costs`, one vectorised
bisection for the pairs of a block; :func:`finish_unified_points`, one for the blocks of many points). Without a
rate or a TTFT target ``rho`` is the same for every pair and this is the highest throughput. Pairs
are evaluated in order of falling throughput and the search stops at the first pair whose ``tau``
alone is no less than the best ``tau / rho`` found (``rho <= 1``: no later pair can cost less).
Why not the highest throughput: a looser per-token target admits larger chunks whose TTFT can
nearly fill the TTFT target, leaving the queue no wait budget; picking by throughput then costs
*more* instances than the tighter target's pair (issue 24 item 7: 2 req/s of 8k/32 tokens, ITL
25 -> 37.5 ms, $8,684 -> $12,258/month). A looser target only adds pairs, so the least ``tau / rho``
never rises. Both directions of interference are costed: decode
iterations carrying a chunk are longer, and the prefill lane is limited by the per-token targets.

Energy per request = P x tp x instance_seconds_per_request, ``P`` the device power at the
iteration's roofline shares and rows (:mod:`planner.perf.power`; a unified point's ``P`` is the
time-weighted mean of its chunk-carrying and decode-only iterations', :func:`_cycle_power_w`). ``service_time_cv`` is 0:
within a length bucket every request's service time is the same deterministic function of its
(representative) lengths; the bucket's length spread is carried by the buckets themselves.
``bound`` names the dominant term: ``memory_capacity`` when KV capacity limits the batch,
else the larger of compute / memory-bandwidth time, or ``communication`` when the TP
all-reduces exceed both.

*Re-use across rates.* A point's arrival rate enters only its queueing: a prefill point's caps, a
unified point's costs ``tau / rho`` and where its scan stops. Everything else — the prefill batch
grid and its times (:func:`_prefill_grid`), the unified (batch, chunk) grid, its iteration times,
bounds and the exact metrics of each block of pairs (:func:`_unified_scan`) — is memoised per process
on the values of its inputs, so a study that rebuilds the capacity table at each traffic rate
(``planner sweep``) computes it once; the memo hands back the same arrays, so the points are identical.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import numpy as np

from planner.perf.calibration import (
    PUBLISHED_DEFAULT,
    Calibration,
    EngineCalibration,
    load_calibration,
)
from planner.perf.power import InstancePower, instance_power_w
from planner.perf.roofline import (
    Efficiency,
    InstanceArrays,
    StepTime,
    instance_arrays,
    iteration_time,
    kv_bytes,
    kv_capacity_bytes,
    max_batch,
)
from planner.schema.capacity import LANE_BOUND_MARK, OperatingPoint
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile
from planner.schema.speculative import SpeculativeDecoding

if TYPE_CHECKING:
    from planner.perf.speculative import SpecCost

MAX_BATCH = 1024
"""Largest decode batch considered (engines cap ``max_batch_size`` near here)."""
MAX_PREFILL_BATCH = 256
"""Most prompts one prefill iteration batches (the token budget binds long before for real prompts)."""
_PREFILL_BATCHES = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0])
"""Prefill batches tried (steps of at most 1/4 above 4, plus the largest allowed)."""
CHUNK_GRID_FRACTIONS = np.concatenate([2.0 ** (-np.arange(5) / 2.0), 2.0 ** -np.arange(3.0, 11.0)])
"""Chunk sizes tried per batch by the unified point, as shares of ``cap = Q - B``: half-octave
steps down to ``cap/4``, octaves down to ``cap/1024``; plus whole prompts and halves, thirds and
quarters of one prompt (:func:`_chunk_grid`)."""

LANE_WAIT_QUANTILE = 0.99
"""Quantile of the prefill-lane wait included in a unified point's TTFT when the service sets no
TTFT target (otherwise the TTFT target's quantile)."""

_INST_CACHE: dict[tuple[int, int, int, str, str], tuple[LLMProfile, DeviceProfile, InstanceArrays]] = {}
_CAL_CACHE: dict[str, Calibration | None] = {}


def _instance(model: LLMProfile, device: DeviceProfile, tp: int, wp: str, kvp: str) -> InstanceArrays:
    key = (id(model), id(device), tp, wp, kvp)
    hit = _INST_CACHE.get(key)
    if hit is None or hit[0] is not model or hit[1] is not device:
        if len(_INST_CACHE) > 4096:
            _INST_CACHE.clear()
        hit = (model, device, instance_arrays(model, device, tp, wp, kvp))
        _INST_CACHE[key] = hit
    return hit[2]


def engine_calibration(engine: str, calibration: Calibration | None | Literal["auto"] = "auto") -> tuple[EngineCalibration, str]:
    """The efficiencies for ``engine`` and the ``source`` label (shipped calibration by default)."""
    if calibration == "auto":
        if "auto" not in _CAL_CACHE:
            _CAL_CACHE["auto"] = load_calibration(None)
        calibration = _CAL_CACHE["auto"]
    if calibration is None:
        return PUBLISHED_DEFAULT, "roofline"
    return calibration.for_engine(engine)


def efficiency_of(cal: EngineCalibration) -> Efficiency:
    return Efficiency(cal.eta_f, cal.eta_b, cal.step_overhead_ms * 1e-3, cal.layer_overhead_us * 1e-6,
                      cal.seq_overhead_us * 1e-6, cal.allreduce_overhead_us * 1e-6, cal.eta_link)


def _bound(step: StepTime, i: int | tuple[int, ...] = ()) -> str:
    """The dominant term of element ``i`` (as ``StepTime.bound``, on that element only)."""
    c, m, x = (float(np.asarray(a)[i]) for a in (step.compute_s, step.memory_s, step.comm_s))
    return "communication" if x > max(c, m) else ("compute" if c >= m else "memory_bandwidth")


def tp_shard_problem(model: LLMProfile, device: DeviceProfile, tp: int) -> str:
    """Why tensor parallelism ``tp`` cannot shard ``model``'s attention on a GPU, or ``""`` when it can.

    GPU engines split the attention heads evenly over the TP ranks and refuse a degree that does not divide them at
    start-up (vLLM ``ModelConfig.verify_with_parallel_config``: the attention heads divisible by the tensor-parallel
    size; its ``QKVParallelLinear`` divides the KV heads by the degree, or replicates them when the degree is a
    multiple of them; LMDeploy TurboMind asserts ``head_num % tensor_para_size == 0``). So Llama-3.1-70B (64 heads, 8
    KV heads) runs at TP 1, 2, 4, 8, 16, ... but not 3 or 6: ``tp_degrees: [3]`` gave a plan on 3-GPU replicas no
    engine starts. An MLA model's one latent KV is not split. Other accelerators' stacks have their own rules
    (AWS Neuron's vLLM accepts any degree), so only ``kind: gpu`` is checked."""
    if device.kind != "gpu" or tp <= 1:
        return ""
    hq = model.num_attention_heads
    if hq % tp:
        return (f"tensor parallelism {tp} does not divide {model.id}'s {hq} attention heads (GPU engines shard the heads evenly "
                "and refuse it at start-up)")
    hkv = model.num_kv_heads
    if not model.mla and (hkv % tp if tp < hkv else tp % hkv):
        return (f"tensor parallelism {tp} neither divides {model.id}'s {hkv} KV heads nor is a multiple of them (GPU engines "
                "split or replicate the KV heads evenly)")
    return ""


def _infeasible(reason: str, bound: str, source: str, **kw: float) -> OperatingPoint:
    return OperatingPoint(
        feasible=False, reason=reason, bound=bound, instance_seconds_per_request=math.inf, max_batch=0,
        kv_bytes_per_request=kw.get("kv", 0.0), kv_transfer_bytes_per_request=kw.get("kv_transfer", 0.0),
        energy_j_per_request=math.inf, ttft_ms=kw.get("ttft", math.inf), tpot_ms=kw.get("tpot", math.inf), source=source,
    )


@dataclass(frozen=True)
class _Targets:
    """The latency targets one point must meet (``inf``: not set; a quantile of ``None``: the mean)."""

    ttft_ms: float
    ttft_q: float
    tpot_ms: float
    tpot_q: float | None
    itl_ms: float
    itl_q: float | None
    e2e_ms: float
    e2e_q: float | None

    def token_limit_ms(self) -> float:
        return min(self.tpot_ms, self.itl_ms)

    def token_label(self) -> str:
        """The binding per-token target's name (the smaller of TPOT and ITL)."""
        if not math.isfinite(self.token_limit_ms()):
            return "step"
        return "TPOT" if self.tpot_ms <= self.itl_ms else "ITL"


def _inf(x: float | None) -> float:
    return math.inf if x is None or not math.isfinite(float(x)) else float(x)


def request_tokens(input_tokens: float, output_tokens: float, cached_prefix_share: float) -> tuple[float, float, float, float]:
    """A request's token counts as the operating points use them: ``(isl, osl, n_new, cached)`` —
    prompt tokens, output tokens (at least 1), prompt tokens computed (at least 1; the share of the
    prompt found in the prefix cache, clamped to [0, 1], is not) and prompt tokens read from the cache."""
    isl = float(input_tokens)
    share = min(max(cached_prefix_share, 0.0), 1.0)
    n_new = max(isl * (1.0 - share), 1.0)
    return isl, max(float(output_tokens), 1.0), n_new, (isl - n_new if share > 0 else 0.0)


def _stat(q: float | None) -> str:
    return "mean" if q is None else f"p{q * 100:g}"


_SCAN_BLOCK = 128
"""Screened pairs a unified scan evaluates (and prices) per block, in order of falling throughput."""
_T = TypeVar("_T")


@dataclass
class _Memo(Generic[_T]):
    """A per-process memo of values keyed by their arguments' values (:func:`_value_key`), bounded by
    ``max_bytes`` of arrays (``nbytes`` of a value) and ``max_entries``; the oldest entries go first."""

    max_bytes: float
    max_entries: int
    nbytes: Callable[[_T], int]
    values: dict[tuple[Any, ...], _T] = field(default_factory=dict)
    sizes: dict[tuple[Any, ...], int] = field(default_factory=dict)
    total_bytes: int = 0

    def get(self, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
        """``values[key]``, built by ``build`` on a miss."""
        if key in self.values:
            return self.values[key]
        value = build()
        size = self.nbytes(value)
        while self.values and (self.total_bytes + size > self.max_bytes or len(self.values) >= self.max_entries):
            oldest = next(iter(self.values))
            self.values.pop(oldest, None)
            self.total_bytes -= self.sizes.pop(oldest, 0)
        self.values[key], self.sizes[key] = value, size
        self.total_bytes += size
        return value

    def clear(self) -> None:
        self.values.clear()
        self.sizes.clear()
        self.total_bytes = 0


def _arrays_nbytes(value: Any) -> int:
    """Bytes of the arrays a memoised dataclass holds (its fields, one level of :class:`StepTime` deep)."""
    if value is None:
        return 0
    out = 0
    for f in fields(value):
        v = getattr(value, f.name)
        if isinstance(v, StepTime):
            out += _arrays_nbytes(v)
        elif isinstance(v, np.ndarray) and v.base is None:  # broadcast views hold no bytes of their own
            out += v.nbytes
    return out


_PREFILL_MEMO: _Memo[_PrefillGrid | None] = _Memo(max_bytes=64e6, max_entries=8192, nbytes=_arrays_nbytes)
"""Rate-independent prefill grids (:func:`_prefill_grid`), ~0.5 kB each."""
_SCAN_MEMO: _Memo[_UnifiedScan] = _Memo(max_bytes=256e6, max_entries=1024, nbytes=_arrays_nbytes)
"""Rate-independent unified scans (:func:`_unified_scan`), ~0.3-2 MB each (a (batch, chunk) grid of ~20 arrays):
the README's enterprise-chat table holds 24 of them (43 MB), so the cap keeps several instances' scans."""


def _value_key(x: Any) -> Any:
    """A hashable key equal for two inputs exactly when they hold the same values and types: arrays by
    dtype, shape and bytes, floats by their bits (``0.0`` and ``-0.0`` apart), dataclasses field by field.
    Keys the memos of :func:`_prefill_grid` and :func:`_unified_scan`: a table built at another rate
    re-creates its models and instances (new objects, same values), so identity would never hit."""
    if isinstance(x, float):
        return (type(x), x.hex())
    if isinstance(x, np.ndarray):
        return (np.ndarray, x.dtype.str, x.shape, x.tobytes())
    if x is None or isinstance(x, (bool, int, str)):
        return (type(x), x)
    if isinstance(x, np.generic):
        return _value_key(np.asarray(x))
    if isinstance(x, tuple):
        return (tuple, tuple(map(_value_key, x)))
    if isinstance(x, InstanceArrays):
        return _instance_key(x)
    if is_dataclass(x) and not isinstance(x, type):
        own = getattr(x, "__dict__", None)  # the fields, in order (a slotted dataclass has none: fields() then)
        return (type(x), tuple(map(_value_key, own.values() if own is not None else (getattr(x, f.name) for f in fields(x)))))
    raise TypeError(f"no value key for {type(x).__name__}")


_INSTANCE_KEYS: dict[int, tuple[InstanceArrays, Any]] = {}


def _instance_key(inst: InstanceArrays) -> Any:
    """:func:`_value_key` of an instance's constants (~30 arrays), computed once per object: the
    instances come from :func:`_instance`'s cache, so a table's points share a handful of them."""
    hit = _INSTANCE_KEYS.get(id(inst))
    if hit is None or hit[0] is not inst:
        if len(_INSTANCE_KEYS) > 4096:
            _INSTANCE_KEYS.clear()
        hit = _INSTANCE_KEYS[id(inst)] = (inst, (InstanceArrays, tuple(_value_key(getattr(inst, f.name)) for f in fields(inst))))
    return hit[1]


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` made read-only (a memoised scan's arrays are shared by every point built from it)."""
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class PendingPrefill:
    """A queued prefill point before its utilisation caps: the inputs of the cap bisection
    (:func:`planner.queueing.max_utilization_many`, one row per batch size ``m`` that meets the
    target unqueued: nominal servers, service seconds, the TTFT quantile, the wait budget, the
    arrivals' CV; service CV 0) and ``finish``, the rest of the point's choice given those caps.
    :func:`prefill_stage` returns it; :func:`finish_prefill_points` finishes many with one bisection."""

    servers: np.ndarray
    service_s: np.ndarray
    quantile: float
    budget_s: np.ndarray
    arrival_cv: float
    finish: Callable[[np.ndarray], OperatingPoint]


def finish_prefill_points(pending: Sequence[PendingPrefill]) -> list[OperatingPoint]:
    """Each pending prefill point finished (in order) with its caps from ONE
    :func:`planner.queueing.max_utilization_many` call over all their rows, instead of one call
    per point (each call pays ~20 bisection steps of fixed numpy overhead). The bisection is
    element-wise and every row takes the same number of halvings (they all start on ``[0, ceiling]``),
    so each cap equals the one its own call gives."""
    from planner.queueing import max_utilization_many

    if not pending:
        return []
    sizes = [p.servers.size for p in pending]
    caps = max_utilization_many(np.concatenate([p.servers for p in pending]), np.concatenate([p.service_s for p in pending]),
                                np.repeat([p.quantile for p in pending], sizes), np.concatenate([p.budget_s for p in pending]),
                                service_cv=0.0, arrival_cv=np.repeat([p.arrival_cv for p in pending], sizes))
    ends = np.cumsum(sizes)
    return [p.finish(caps[end - n:end]) for p, n, end in zip(pending, sizes, ends, strict=True)]


@dataclass(frozen=True)
class _PrefillGrid:
    """The rate-independent part of a prefill point (:func:`_build_prefill_grid`; module docstring, **prefill**):
    per batch size ``m`` (``ms``) the iteration ``step``, batch time ``t_batch = k t_iter`` (``k`` chunks of
    ``chunk`` tokens), unqueued ``ttft`` (ms) and instance-seconds per request ``seconds = t_batch / m``."""

    k: int
    chunk: float
    m_max: int
    ms: np.ndarray
    step: StepTime
    t_batch: np.ndarray
    kv_req: float
    t_xfer: float
    t_first: float
    ttft: np.ndarray
    seconds: np.ndarray


def _prefill_grid(inst: InstanceArrays, eff: Efficiency, *, isl: float, n_new: float, cached: float, budget: float,
                  link_bytes_per_s: float, overhead_ms: float) -> _PrefillGrid | None:
    """:func:`_build_prefill_grid`, memoised per process on its arguments' values (:class:`_Memo`): the
    point's arrival rate is not one of them, so a table rebuilt at another rate re-uses it."""
    args = dict(isl=isl, n_new=n_new, cached=cached, budget=budget, link_bytes_per_s=link_bytes_per_s, overhead_ms=overhead_ms)
    return _PREFILL_MEMO.get((_value_key(inst), _value_key(eff), _value_key(tuple(args.items()))),
                             lambda: _build_prefill_grid(inst, eff, **args))


def _build_prefill_grid(inst: InstanceArrays, eff: Efficiency, *, isl: float, n_new: float, cached: float, budget: float,
                        link_bytes_per_s: float, overhead_ms: float) -> _PrefillGrid | None:
    """The batch sizes ``1 <= m <= min(floor(Q / n), B_mem, MAX_PREFILL_BATCH)`` and their unqueued times
    (:func:`_prefill_point`); ``None`` when one prompt's KV does not fit next to the weights."""
    fit = int(max_batch(inst, isl))
    if fit < 1:
        return None
    k = math.ceil(n_new / budget)
    chunk = n_new / k
    m_max = max(1, min(int(budget // n_new), fit, MAX_PREFILL_BATCH))
    ms = np.unique(np.concatenate([_PREFILL_BATCHES[m_max > _PREFILL_BATCHES], [float(m_max)]]))
    # m whole prompts in one iteration (k = 1), or one prompt in k chunks at their mean position
    h_eff = np.where(ms > 1, cached, cached + (n_new - chunk) / 2.0)
    step = iteration_time(inst, eff, prefill_tokens=ms * chunk, prefill_cached=h_eff, prefill_prompts=ms)
    t_batch = k * step.total_s
    kv_req = float(kv_bytes(inst, isl))
    t_xfer = kv_req / link_bytes_per_s
    t_first = float(iteration_time(inst, eff, decode_batch=1.0, decode_context=isl).total_s)
    ttft = 1e3 * (t_batch + t_xfer + t_first) + overhead_ms
    seconds = t_batch / ms
    for a in (ms, step.total_s, step.compute_s, step.memory_s, step.comm_s, t_batch, ttft, seconds):
        _frozen(a)
    return _PrefillGrid(k=k, chunk=chunk, m_max=m_max, ms=ms, step=step, t_batch=t_batch, kv_req=kv_req, t_xfer=t_xfer,
                        t_first=t_first, ttft=ttft, seconds=seconds)


def _prefill_point(model: LLMProfile, device: DeviceProfile, inst: InstanceArrays, eff: Efficiency, *, tp: int,
                   weight_precision: str, isl: float, n_new: float, cached: float, budget: float, power_w: InstancePower,
                   overhead_ms: float, source: str, targets: _Targets, kv_link_gb_per_s: float | None,
                   rate_per_s: float | None, interarrival_cv: float) -> OperatingPoint | PendingPrefill:
    """The prefill point with its batch ``m`` chosen (module docstring, **prefill**); a queued
    point comes back as a :class:`PendingPrefill` (its caps still to bisect). The unqueued part
    comes from :func:`_prefill_grid` (memoised), the rate enters only through the caps."""
    link = (kv_link_gb_per_s if kv_link_gb_per_s else (device.nic_bw_gb_per_s or 25.0) * tp) * 1e9
    grid = _prefill_grid(inst, eff, isl=isl, n_new=n_new, cached=cached, budget=budget, link_bytes_per_s=link,
                         overhead_ms=overhead_ms)
    if grid is None:
        return _infeasible(f"weights ({model.weight_bytes(weight_precision) / 1e9:.0f} GB) and one {isl:.0f}-token prompt's KV do not fit {tp} x {device.memory_gb} GB", "memory_capacity", source)
    k, chunk, m_max, ms, step, t_batch = grid.k, grid.chunk, grid.m_max, grid.ms, grid.step, grid.t_batch
    kv_req, t_xfer, t_first, ttft, seconds = grid.kv_req, grid.t_xfer, grid.t_first, grid.ttft, grid.seconds
    limit_ms = min(targets.ttft_ms, targets.e2e_ms)
    ok = ttft <= limit_ms
    if not ok.any():
        which = "TTFT" if targets.ttft_ms <= targets.e2e_ms else "E2E (its prefill part)"
        return _infeasible(f"{which} {ttft[0]:.0f} ms > target {limit_ms:.0f} ms even unqueued at batch 1",
                           _bound(step, 0), source, kv=kv_req, kv_transfer=kv_req, ttft=float(ttft[0]))
    # instance-seconds per request over the utilisation the TTFT wait budget allows
    # (planner.optimize.prepare's cap: servers ceil(lambda tau), service tau, the TTFT quantile)
    rate = float(rate_per_s) if rate_per_s is not None else 0.0
    queued = rate > 0 and math.isfinite(targets.ttft_ms)
    j = np.nonzero(ok)[0]

    def finish(caps_ok: np.ndarray | None) -> OperatingPoint:
        """The point given the caps of the batch sizes ``j`` (``None``: unqueued)."""
        cost = np.where(ok, seconds, np.inf)
        caps = np.ones_like(seconds)
        if caps_ok is not None:
            caps[j] = caps_ok
            cost = np.where(ok & (caps > 0), seconds / np.maximum(caps, 1e-12), np.inf)
            if not np.isfinite(cost).any():
                cost = np.where(ok, seconds, np.inf)
        i = int(np.argmin(cost))
        return _prefill_chosen(i, ms, seconds, t_batch, ttft, step, caps, queued=queued, m_max=m_max, k=k, chunk=chunk,
                               kv_req=kv_req, t_xfer=t_xfer, t_first=t_first, overhead_ms=overhead_ms, power_w=power_w,
                               source=source)

    if not queued:
        return finish(None)
    # nominal pool n0 = max(1, ceil(rate * seconds)) per batch size, all at once
    return PendingPrefill(servers=np.maximum(1.0, np.ceil(rate * seconds[j])), service_s=seconds[j], quantile=targets.ttft_q,
                          budget_s=(targets.ttft_ms - ttft[j]) / 1e3, arrival_cv=interarrival_cv, finish=finish)


def _prefill_chosen(i: int, ms: np.ndarray, seconds: np.ndarray, t_batch: np.ndarray, ttft: np.ndarray, step: StepTime,
                    caps: np.ndarray, *, queued: bool, m_max: int, k: int, chunk: float, kv_req: float, t_xfer: float,
                    t_first: float, overhead_ms: float, power_w: InstancePower, source: str) -> OperatingPoint:
    """The prefill point at batch index ``i`` (:func:`_prefill_point`'s choice)."""
    m = float(ms[i])
    sec = float(seconds[i])
    return OperatingPoint(
        feasible=True, reason="", bound=_bound(step, i), instance_seconds_per_request=sec, max_batch=1, kv_bytes_per_request=kv_req,
        kv_transfer_bytes_per_request=kv_req, ttft_ms=float(ttft[i]), tpot_ms=0.0,
        energy_j_per_request=power_w(float(step.compute_s[i]), float(step.memory_s[i]), float(step.total_s[i]), m * chunk) * sec,
        source=source,
        detail={"prefill_ms": 1e3 * float(t_batch[i]), "prompts_per_batch": m, "prompts_per_batch_max": float(m_max),
                "utilization_cap_at_batch": float(caps[i]) if queued else math.nan, "chunks": float(k),
                "transfer_ms": 1e3 * t_xfer, "first_step_ms": 1e3 * t_first, "ttft_overhead_ms": overhead_ms,
                "compute_ms": 1e3 * float(step.compute_s[i]) * k, "memory_ms": 1e3 * float(step.memory_s[i]) * k,
                "comm_ms": 1e3 * float(step.comm_s[i]) * k},
    )


def operating_point(model: LLMProfile, device: DeviceProfile, tp: int, **kw: Any) -> OperatingPoint:
    """The operating point of one role (:func:`operating_point_stage`'s arguments and model; a
    queued prefill point's utilisation caps bisected at once, a unified point's blocks priced one
    at a time by :func:`_unified_costs`)."""
    op = operating_point_stage(model, device, tp, **kw)
    if isinstance(op, PendingUnified):
        return op.run()
    return op if isinstance(op, OperatingPoint) else finish_prefill_points([op])[0]


def operating_point_stage(
    model: LLMProfile,
    device: DeviceProfile,
    tp: int,
    *,
    role: Literal["prefill", "decode", "unified"],
    weight_precision: str,
    kv_precision: str,
    input_tokens: float,
    output_tokens: float,
    cached_prefix_share: float = 0.0,
    ttft_target_ms: float | None,
    tpot_target_ms: float | None,
    engine: str = "default",
    kv_link_gb_per_s: float | None = None,
    calibration: Calibration | None | Literal["auto"] = "auto",
    ttft_quantile: float = 0.99,
    tpot_quantile: float | None = 0.99,
    itl_target_ms: float | None = None,
    itl_quantile: float | None = 0.99,
    e2e_target_ms: float | None = None,
    e2e_quantile: float | None = 0.99,
    rate_per_s: float | None = None,
    interarrival_cv: float = 1.0,
    speculative: SpeculativeDecoding | None = None,
    draft_model: LLMProfile | None = None,
    ttft_input_tokens: float | None = None,
) -> OperatingPoint | PendingPrefill | PendingUnified:
    """The operating point of one role; see the module docstring for the model of each role. A
    queued prefill point (``rate_per_s`` and a TTFT target set) comes back as a
    :class:`PendingPrefill`: :func:`finish_prefill_points` bisects the caps of many at once
    (:func:`planner.capacity.build_capacity_tables`), :func:`operating_point` of one. A unified
    point whose batch fits the memory comes back as a :class:`PendingUnified`:
    :func:`finish_unified_points` prices the pairs of many at once, :meth:`PendingUnified.run` of one.

    Targets (``None``: not set): ``tpot_target_ms`` bounds the per-request TPOT at
    ``tpot_quantile``, ``itl_target_ms`` every-gap ITL at ``itl_quantile``, ``e2e_target_ms``
    E2E at ``e2e_quantile`` (a quantile of ``None`` means the mean). ``rate_per_s`` and
    ``interarrival_cv`` (the bucket's peak arrivals) let the prefill point choose its batch
    with the queueing wait it implies; without them the batch is chosen unqueued.

    ``speculative`` (decode role; ``draft_model``: the catalog draft of a ``draft_model`` method):
    the speculative decode point is costed too and the cheaper one that meets the targets is
    returned (:mod:`planner.perf.speculative`).

    ``ttft_input_tokens`` (unified only): the prompt whose TTFT must meet the target when it is longer
    than ``input_tokens`` — a length bucket's representative while ``input_tokens`` / ``output_tokens``
    are the service's mean lengths (:func:`planner.capacity.bucket_work`): the batch, its step times,
    memory, the lane's load and so TPOT / ITL are those of the mix the pool runs (every sequence of a
    continuous batch waits the same step), while TTFT counts the chunk iterations of that prompt (and
    its KV while it is chunked); the lane wait stays the mix's."""
    targets = _Targets(ttft_ms=_inf(ttft_target_ms), ttft_q=ttft_quantile, tpot_ms=_inf(tpot_target_ms), tpot_q=tpot_quantile,
                       itl_ms=_inf(itl_target_ms), itl_q=itl_quantile, e2e_ms=_inf(e2e_target_ms), e2e_q=e2e_quantile)
    cal, source = engine_calibration(engine, calibration)
    shard = tp_shard_problem(model, device, tp)
    if shard:
        return _infeasible(shard, "tensor_parallel", source)
    try:
        inst = _instance(model, device, tp, weight_precision, kv_precision)
    except ValueError as exc:
        return _infeasible(str(exc), "memory_capacity", source)
    eff = efficiency_of(cal)
    isl, osl, n_new, cached = request_tokens(input_tokens, output_tokens, cached_prefix_share)
    power_w = instance_power_w(device, tp)  # W of the instance at an iteration's roofline times (planner.perf.power)
    overhead_ms = cal.ttft_overhead_ms
    budget = float(cal.prefill_token_budget)

    if role == "prefill":
        return _prefill_point(model, device, inst, eff, tp=tp, weight_precision=weight_precision, isl=isl, n_new=n_new,
                              cached=cached, budget=budget, power_w=power_w, overhead_ms=overhead_ms, source=source,
                              targets=targets, kv_link_gb_per_s=kv_link_gb_per_s, rate_per_s=rate_per_s,
                              interarrival_cv=interarrival_cv)

    peak = isl + osl
    ctx = isl + osl / 2.0
    b_mem = int(min(float(max_batch(inst, peak)), MAX_BATCH))
    kv_req = float(kv_bytes(inst, peak))
    if b_mem < 1:
        return _infeasible(
            f"weights ({model.weight_bytes(weight_precision) / 1e9:.0f} GB at {weight_precision}) and one {peak:.0f}-token sequence's KV do not fit {tp} x {device.memory_gb} GB",
            "memory_capacity", source, kv=kv_req)
    batches = np.arange(1, b_mem + 1, dtype=float)
    if role == "unified":
        n_ttft, isl_ttft = n_new, isl
        if ttft_input_tokens is not None and ttft_input_tokens > isl:
            isl_ttft, _o, n_ttft, _c = request_tokens(ttft_input_tokens, output_tokens, cached_prefix_share)

        def unified() -> Generator[CostRequest, np.ndarray, OperatingPoint]:
            plain_u = yield from _unified_steps(inst, eff, batches, isl=isl, osl=osl, n_new=n_new, cached=cached, ctx=ctx,
                                                b_mem=b_mem, n_ttft=n_ttft, isl_ttft=isl_ttft,
                                                budget=budget, kv_req=kv_req, power_w=power_w, overhead_ms=overhead_ms, source=source,
                                                targets=targets, mixed=cal.mixed_prefill, rate_per_s=rate_per_s,
                                                interarrival_cv=interarrival_cv)
            cost = _spec_cost_of(speculative, draft_model, model, device, inst, tp=tp, weight_precision=weight_precision,
                                 kv_precision=kv_precision)
            if cost is None:
                return plain_u
            return _speculative_unified(plain_u, cost, inst, eff, isl=isl, osl=osl, n_new=n_new, cached=cached, ctx=ctx,
                                        budget=budget, n_ttft=n_ttft, isl_ttft=isl_ttft,
                                        kv_req=kv_req, power_w=power_w, overhead_ms=overhead_ms, source=source, targets=targets,
                                        mixed=cal.mixed_prefill, rate_per_s=rate_per_s, interarrival_cv=interarrival_cv)

        return PendingUnified(unified())
    step = iteration_time(inst, eff, decode_batch=batches, decode_context=ctx)
    t = step.total_s
    # every gap of a decode-only instance is one step: TPOT (per request) = ITL (per gap) = t_dec(B),
    # mean or any quantile alike; E2E's decode part (o - 1) t_dec(B) must fit the E2E target too
    limit_s = min(targets.tpot_ms, targets.itl_ms) / 1e3
    ok_tpot = (t <= limit_s) & ((osl - 1.0) * t <= targets.e2e_ms / 1e3)
    if not ok_tpot.any():
        plain = _infeasible(f"{targets.token_label()} {1e3 * float(t[0]):.1f} ms at batch 1 > target {targets.token_limit_ms():g} ms"
                            if 1e3 * float(t[0]) > targets.token_limit_ms() else
                            f"E2E decode part {(osl - 1.0) * float(t[0]):.1f} s at batch 1 > E2E target {targets.e2e_ms / 1e3:g} s",
                            _bound(step, 0), source, kv=kv_req, tpot=1e3 * float(t[0]))
        return _speculate(plain, speculative, draft_model, model, device, inst, eff, tp=tp, weight_precision=weight_precision,
                          kv_precision=kv_precision, isl=isl, osl=osl, targets=targets, power_w=power_w, source=source)
    i = int(np.nonzero(ok_tpot)[0].max())
    b_star = int(batches[i])
    t_star = float(t[i])
    bound = "memory_capacity" if b_star == b_mem and b_mem < MAX_BATCH else _bound(step, i)
    seconds = osl * t_star / b_star
    detail = {"step_ms": 1e3 * t_star, "batch": float(b_star), "batch_memory_limit": float(b_mem),
              "compute_ms": 1e3 * float(step.compute_s[i]), "memory_ms": 1e3 * float(step.memory_s[i]),
              "comm_ms": 1e3 * float(step.comm_s[i]), "overhead_ms": 1e3 * float(step.overhead_s[i]),
              "itl_ms": 1e3 * t_star}
    plain = OperatingPoint(
        feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star,
        kv_bytes_per_request=kv_req, kv_transfer_bytes_per_request=0.0,
        energy_j_per_request=power_w(float(step.compute_s[i]), float(step.memory_s[i]), t_star, float(b_star)) * seconds,
        ttft_ms=0.0, tpot_ms=1e3 * t_star, source=source, detail=detail,
    )
    return _speculate(plain, speculative, draft_model, model, device, inst, eff, tp=tp, weight_precision=weight_precision,
                      kv_precision=kv_precision, isl=isl, osl=osl, targets=targets, power_w=power_w, source=source)


def _spec_cost_of(spec: SpeculativeDecoding | None, draft: LLMProfile | None, model: LLMProfile, device: DeviceProfile,
                  inst: InstanceArrays, *, tp: int, weight_precision: str, kv_precision: str) -> SpecCost | None:
    """The draft sizes and tokens per step of ``spec`` on this instance (``None``: no speculation, or
    a draft model that does not fit the instance's parallelism)."""
    if spec is None:
        return None
    from planner.perf.speculative import spec_cost

    draft_inst = None
    if spec.method == "draft_model" and draft is not None:
        try:
            draft_inst = _instance(draft, device, tp, weight_precision, kv_precision)
        except ValueError:
            return None
    return spec_cost(spec, model, inst, weight_precision, draft, draft_inst, kv_precision)


def _speculate(plain: OperatingPoint, spec: SpeculativeDecoding | None, draft: LLMProfile | None, model: LLMProfile,
               device: DeviceProfile, inst: InstanceArrays, eff: Efficiency, *, tp: int, weight_precision: str,
               kv_precision: str, isl: float, osl: float, targets: _Targets, power_w: InstancePower, source: str) -> OperatingPoint:
    """``plain`` or the speculative decode point, whichever is cheaper (:mod:`planner.perf.speculative`)."""
    cost = _spec_cost_of(spec, draft, model, device, inst, tp=tp, weight_precision=weight_precision, kv_precision=kv_precision)
    if cost is None:
        return plain
    from planner.perf.speculative import speculative_decode_point

    return speculative_decode_point(plain, cost, inst, eff, isl=isl, osl=osl, tpot_limit_s=targets.tpot_ms / 1e3,
                                    itl_limit_s=targets.itl_ms / 1e3, itl_quantile=targets.itl_q,
                                    e2e_limit_s=targets.e2e_ms / 1e3, power_w=power_w, source=source, max_batch=MAX_BATCH)


def _speculative_unified(plain: OperatingPoint, cost: SpecCost, inst: InstanceArrays, eff: Efficiency, *, isl: float, osl: float,
                         n_new: float, cached: float, ctx: float, budget: float, kv_req: float, power_w: InstancePower,
                         overhead_ms: float, source: str, targets: _Targets, mixed: bool, rate_per_s: float | None = None,
                         interarrival_cv: float = 1.0, n_ttft: float | None = None, isl_ttft: float | None = None) -> OperatingPoint:
    """The cheaper of the plain unified point and the speculative one meeting the same targets
    (:func:`_unified_point` with ``spec``; the batch limit and KV include the draft's weights and KV,
    :func:`planner.perf.speculative.spec_batch_limit`). The returned point's ``detail`` says which
    (``spec_tokens_per_step`` present = speculative), as the decode choice does."""
    from planner.perf.speculative import breakeven_batch, spec_batch_limit, spec_kv_capacity_bytes

    peak = isl + osl
    b_mem = spec_batch_limit(cost, inst, peak, MAX_BATCH)
    plain_s = float(plain.instance_seconds_per_request) if plain.feasible else math.inf
    if b_mem < 1:
        plain.detail["spec_rejected"] = 1.0  # the draft's weights and KV leave no room
        return plain
    cap = spec_kv_capacity_bytes(cost, inst)
    sp = _unified_point(inst, eff, np.arange(1, b_mem + 1, dtype=float), isl=isl, osl=osl, n_new=n_new, cached=cached, ctx=ctx,
                        b_mem=b_mem, budget=budget, kv_req=kv_req * (1.0 + cost.draft_kv_share), power_w=power_w,
                        overhead_ms=overhead_ms, source=source, targets=targets, mixed=mixed, spec=cost, kv_cap=cap,
                        rate_per_s=rate_per_s, interarrival_cv=interarrival_cv, n_ttft=n_ttft, isl_ttft=isl_ttft)
    if not sp.feasible:
        plain.detail["spec_rejected"] = 2.0  # no (batch, chunk) meets the targets with a speculative step
        return plain
    breakeven = float(breakeven_batch(cost, inst, eff, ctx, max(b_mem, int(plain.max_batch or 1))))
    if float(sp.instance_seconds_per_request) >= plain_s:
        plain.detail.update({"spec_rejected": 3.0, "spec_instance_seconds_per_request": float(sp.instance_seconds_per_request),
                             "spec_breakeven_batch": breakeven})
        return plain
    sp.detail.update({"plain_instance_seconds_per_request": plain_s, "spec_breakeven_batch": breakeven, "spec_kv_capacity_bytes": cap})
    return sp


def _stall_step(inst: InstanceArrays, eff: Efficiency, batch: np.ndarray, ctx: float, q: np.ndarray, n_new: float,
                cached: float) -> StepTime:
    """A prefill-priority (not mixed) engine's decode step followed by a prefill-only iteration of
    ``q`` tokens that stalls it (module docstring, *Not mixed*): the two iterations' times add,
    each with its own overheads. ``q <= n``: one chunk at its mean position; ``q > n``: ``q/n``
    whole prompts."""
    dec = iteration_time(inst, eff, decode_batch=batch, decode_context=ctx)
    several = q > n_new
    m = np.where(several, q / n_new, 1.0)
    h = np.where(several, cached, cached + (n_new - np.minimum(q, n_new)) / 2.0)
    pre = iteration_time(inst, eff, prefill_tokens=q, prefill_cached=h, prefill_prompts=m)
    return StepTime(*(np.broadcast_arrays(*(getattr(dec, f) + getattr(pre, f) for f in
                                           ("total_s", "compute_s", "memory_s", "comm_s", "overhead_s")))))


def _chunk_step(inst: InstanceArrays, eff: Efficiency, batch: np.ndarray, ctx: float, q: np.ndarray, n_new: float,
                cached: float) -> StepTime:
    """One unified iteration: ``batch`` decodes at mean context ``ctx`` plus ``q`` prefill tokens.

    ``q <= n``: one chunk of a prompt at its mean position, ``h = cached + (n - q)/2`` (chunk
    ``j`` attends over the ``j q`` tokens of earlier chunks, Sarathi-Serve; over the ``n/q``
    chunks the pairs sum to the unchunked ``n (n + 2 cached)/2``, and each chunk rereads the
    KV of the prompt so far). ``q > n``: ``q/n`` whole prompts share the iteration."""
    several = q > n_new
    m = np.where(several, q / n_new, 1.0)
    h = np.where(several, cached, cached + (n_new - np.minimum(q, n_new)) / 2.0)
    return iteration_time(inst, eff, decode_batch=batch, decode_context=ctx, prefill_tokens=q, prefill_cached=h,
                          prefill_prompts=m)


def _busy_step(inst: InstanceArrays, eff: Efficiency, batch: np.ndarray, ctx: float, q: np.ndarray, n_new: float, cached: float,
               spec: SpecCost | None) -> StepTime:
    """A unified chunk-carrying iteration, plain (:func:`_chunk_step`) or speculative
    (:func:`planner.perf.speculative.spec_chunk_step`)."""
    if spec is None:
        return _chunk_step(inst, eff, batch, ctx, q, n_new, cached)
    from planner.perf.speculative import spec_chunk_step

    return spec_chunk_step(spec, inst, eff, batch, ctx, q, n_new, cached)


def _largest_chunk(inst: InstanceArrays, eff: Efficiency, batch: np.ndarray, ctx: float, cap: np.ndarray, n_new: float,
                   cached: float, limit_s: float, spec: SpecCost | None = None) -> np.ndarray:
    """Per batch, the largest integer chunk ``q <= cap`` with ``t_it(B, q) <= limit_s`` (0 if none):
    integer bisection, valid because ``t_it`` grows with ``q``."""
    lo = np.zeros_like(batch)
    hi = np.maximum(np.floor(cap), 0.0)
    ok_hi = _busy_step(inst, eff, batch, ctx, np.maximum(hi, 1.0), n_new, cached, spec).total_s <= limit_s
    lo = np.where(ok_hi, hi, lo)
    active = ~ok_hi & (hi > 1.0)
    while active.any():
        mid = np.floor((lo + hi) / 2.0)
        ok = _busy_step(inst, eff, batch, ctx, np.maximum(mid, 1.0), n_new, cached, spec).total_s <= limit_s
        ok &= mid >= 1.0
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)
        active = hi - lo > 1.0
    return lo


def lane_wait_quantile_s(quantile: float, utilization: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """Waiting-time quantile of a unified instance's prefill lane, an M/D/1 queue (Poisson
    arrivals, deterministic service ``S``): :func:`planner.queueing.md1_wait_quantile_s` —
    ``0`` if ``rho <= 1 - q``; exact ``S ln(q/(1-rho))/rho`` while below ``S``; else the
    Cramér–Lundberg tail ``S ln(γ/(1-q))/x`` (``x`` the root of ``rho(e^x - 1) = x``), within
    1 % of the exact Erlang–Crommelin quantile (Kingman's exponential tail, used before, was
    up to 34 % long at moderate load). ``inf`` at ``rho >= 1``. Vectorised over the batch grid."""
    from planner.queueing import md1_wait_quantile_s

    return md1_wait_quantile_s(quantile, utilization, service_s)


def _chunk_grid(batches: np.ndarray, budget: float, n_new: float) -> np.ndarray:
    """Candidate chunk sizes per batch (rows), ``1 <= q <= Q - B`` (:data:`CHUNK_GRID_FRACTIONS`)."""
    cap = np.maximum(np.floor(budget - batches), 1.0)[:, None]
    geo = np.floor(cap * CHUNK_GRID_FRACTIONS[None, :])
    whole = np.minimum(cap, np.ceil(n_new / np.array([1.0, 2.0, 3.0, 4.0]))[None, :])
    return np.maximum(np.concatenate([geo, whole], axis=1), 1.0)


def _unified_infeasible(inst: InstanceArrays, eff: Efficiency, batches: np.ndarray, busy: StepTime, targets: _Targets,
                        source: str, *, kv_req: float, ctx: float, n_new: float, cached: float, osl: float, stable: np.ndarray,
                        pre: np.ndarray, tpot_q: float | None, u_c: np.ndarray, chunks: np.ndarray, t_busy: np.ndarray,
                        t_idle: np.ndarray, itl_all: np.ndarray, tpot_lb: np.ndarray, ttft_lb: np.ndarray,
                        ttft_ms: np.ndarray, e2e_ms: np.ndarray, mixed: bool = True,
                        rho_lane: np.ndarray | None = None) -> OperatingPoint:
    """Why no (batch, chunk) pair of a unified point is feasible, in the order: per-token target,
    memory, TTFT, E2E. TTFT and E2E are exact where :func:`_unified_point` evaluated them (every
    screened pair: no early stop happened) and their lower bounds elsewhere ("at least"). Where the
    prompt's own iterations meet the TTFT target and the lane's wait at the point's full batch does not
    (``rho_lane``, its utilisation there), the reason says so: the prompts that refill the slots as outputs
    finish keep the lane that busy at every batch (short outputs or long prompts), so the lane, not the slots,
    is full (a point at a load below its full batch is not modelled)."""
    from planner.queueing import tpot_quantile_s

    label = targets.token_label()
    tok = stable & (1e3 * itl_all <= targets.itl_ms) & (1e3 * tpot_lb <= targets.tpot_ms)
    tp = np.full(tok.shape, np.inf)
    tp[tok] = tpot_quantile_s(tpot_q, osl, u_c[tok], chunks[tok], t_busy[tok], t_idle[tok])
    ok_token = tok & (1e3 * tp <= targets.tpot_ms)
    if not ok_token.any():
        t1 = float(t_busy[0].min())
        if not mixed:
            return _infeasible(f"{label} target {targets.token_limit_ms():g} ms cannot be met: each prefill iteration stalls the decode "
                               f"batch (engine without mixed/chunked prefill), {1e3 * t1:.1f} ms with the decode step at batch 1, "
                               f"too long for {osl:.0f}-token outputs", _bound(busy, (0, 0)), source, kv=kv_req, tpot=1e3 * t1)
        one = float(_chunk_step(inst, eff, batches[:1], ctx, np.ones(1), n_new, cached).total_s[0])
        if 1e3 * one > targets.token_limit_ms():
            return _infeasible(f"{label} {1e3 * one:.1f} ms at batch 1 > target {targets.token_limit_ms():g} ms (with a 1-token "
                               "prefill chunk)", _bound(busy, (0, 0)), source, kv=kv_req, tpot=1e3 * one)
        return _infeasible(f"{label} target {targets.token_limit_ms():g} ms cannot be met with a prefill lane: "
                           f"the shortest chunk iteration takes {1e3 * t1:.1f} ms at batch 1, and no chunk size "
                           f"carries {n_new:.0f}-token prompts as fast as {osl:.0f}-token outputs finish within it",
                           _bound(busy, (0, 0)), source, kv=kv_req, tpot=1e3 * t1)
    feas = pre & ok_token
    if not feas.any():
        return _infeasible(f"no batch fits the KV memory with a stable prefill lane under the {label} target",
                           "memory_capacity", source, kv=kv_req)
    done = np.isfinite(ttft_ms)
    ttft_best = np.where(done, ttft_ms, ttft_lb)
    ttft_can = feas & (ttft_best <= targets.ttft_ms)
    if not ttft_can.any():
        best = float(np.min(np.where(feas, ttft_best, np.inf)))
        exact = bool((feas & done & (ttft_ms <= best)).any())
        k = int(np.argmin(np.where(feas & done, ttft_ms, np.inf)))  # the pair of that TTFT (when exact)
        own_k = float(np.asarray(ttft_lb).reshape(-1)[k])            # its prompt's own iterations and the overhead, unqueued
        if rho_lane is not None and exact and own_k <= targets.ttft_ms:
            rho = float(np.asarray(rho_lane).reshape(-1)[k])
            return _infeasible(f"TTFT {best:.0f} ms > target {targets.ttft_ms:.0f} ms with every chunk the {label} target allows: "
                               f"the prompt's own iterations take {own_k:.0f} ms, the rest is the prefill lane's wait at the "
                               f"point's full batch (the lane {100 * rho:.0f} % busy with the prompts that refill its slots as "
                               f"{osl:.0f}-token outputs finish: {LANE_BOUND_MARK}; a unified point below its full batch is not "
                               "modelled)", _bound(busy, (0, 0)), source, kv=kv_req, ttft=best)
        return _infeasible(f"TTFT {'' if exact else 'at least '}{best:.0f} ms > target {targets.ttft_ms:.0f} ms (prefill lane wait "
                           f"included) with every chunk the {label} target allows", _bound(busy, (0, 0)), source, kv=kv_req,
                           ttft=best)
    e2e_best = np.where(done, e2e_ms, ttft_lb + 1e3 * (osl - 1.0) * tpot_lb)
    best = float(np.min(np.where(ttft_can, e2e_best, np.inf)))
    return _infeasible(f"E2E {_stat(targets.e2e_q)} at least {best:.0f} ms > target {targets.e2e_ms:.0f} ms", _bound(busy, (0, 0)),
                       source, kv=kv_req)


def _cycle_power_w(power_w: InstancePower, busy: StepTime, idle: StepTime, ij: tuple[int, int], *, t_busy: float, t_idle: float,
                    share: float, rows: float, chunk: float) -> float:
    """Mean power of a unified instance over its cycle of iterations, W (J per second of the cycle): the
    chunk-carrying iterations (``share`` of them, ``t_busy`` each, at their roofline shares and ``rows + chunk``
    rows) and the decode-only ones (``1 - share``, ``t_idle``, ``rows`` rows), each at its own power::

        P_mean = (u t_it P(it) + (1 - u) t_dec P(dec)) / (u t_it + (1 - u) t_dec)

    Before 2026-12-05 the whole cycle was priced at the chunk-carrying iteration's power, which overstated
    the decode-only iterations' and grew with the chunk: a looser per-token target (larger chunks, fewer of
    them) could raise a plan's power cost (``tests/test_monotone_targets.py``)."""
    i, j = ij
    u = min(max(share, 0.0), 1.0)
    p_it = power_w(float(busy.compute_s[i, j]), float(busy.memory_s[i, j]), t_busy, rows + chunk)
    p_dec = power_w(float(np.ravel(idle.compute_s)[i]), float(np.ravel(idle.memory_s)[i]), t_idle, rows)
    mean_s = u * t_busy + (1.0 - u) * t_idle
    return (u * t_busy * p_it + (1.0 - u) * t_idle * p_dec) / mean_s if mean_s > 0 else p_it


def _unified_costs(tau_s: np.ndarray, batch: np.ndarray, ttft_ms: np.ndarray, targets: _Targets, rate_per_s: float | None,
                   interarrival_cv: float) -> np.ndarray:
    """Instance-seconds per request over the utilisation cap each unified pair allows, ``tau / rho``,
    for arrays of pairs at once: the cap :func:`planner.optimize.prepare.utilization_caps` applies to a
    unified point (``ceil(lambda tau)`` instances of ``B`` slots, slot service ``tau B``, deterministic,
    the arrivals' CV, the TTFT quantile and the wait budget ``target - ttft``), one
    :func:`planner.queueing.max_utilization_many` bisection for all pairs (identical rows evaluated
    once). Without a rate or a TTFT target the cap is the same for every pair and the cost is
    ``tau / UTILIZATION_CEILING`` (the highest throughput wins). A cap of 0 (no wait budget) ranks
    the pair after every pair with a cap, by ``tau``: ``1e12 tau``. One block alone: :func:`_costs_many`
    of one request."""
    return _costs_many([CostRequest(tau_s, batch, ttft_ms, targets, rate_per_s, interarrival_cv)])[0]


def _costs_at_caps(tau_s: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """``tau / rho`` of :func:`_unified_costs` given the caps ``rho``; ``1e12 tau`` where the cap is 0."""
    with np.errstate(divide="ignore"):
        return np.where(cap > 0, tau_s / np.where(cap > 0, cap, 1.0), 1e12 * tau_s)


@dataclass(frozen=True)
class CostRequest:
    """The arguments of one :func:`_unified_costs` call a unified point's scan
    (:func:`_unified_steps`) waits for: a block of pairs that meet every target."""

    tau_s: np.ndarray
    batch: np.ndarray
    ttft_ms: np.ndarray
    targets: _Targets
    rate_per_s: float | None
    interarrival_cv: float

    def costs(self) -> np.ndarray:
        """The block priced alone (:func:`_unified_costs`)."""
        return _unified_costs(self.tau_s, self.batch, self.ttft_ms, self.targets, self.rate_per_s, self.interarrival_cv)


@dataclass(frozen=True)
class PendingUnified:
    """A unified point whose scan (:func:`_unified_steps`, then the speculative alternative) has
    not run: ``steps`` yields a :class:`CostRequest` per block of pairs that meet the targets and
    takes their costs back, in order of falling throughput, and returns the point. One generator,
    finished once: by :meth:`run` (each block priced alone) or :func:`finish_unified_points`
    (the blocks of many points priced together)."""

    steps: Generator[CostRequest, np.ndarray, OperatingPoint]

    def run(self) -> OperatingPoint:
        """The point, each block priced by its own :func:`_unified_costs` call."""
        try:
            request = next(self.steps)
            while True:
                request = self.steps.send(request.costs())
        except StopIteration as stop:
            return stop.value


def _costs_many(requests: Sequence[CostRequest]) -> list[np.ndarray]:
    """:func:`_unified_costs` of each request (the one implementation of its cost), the caps of all of them from ONE
    :func:`planner.queueing.max_utilization_many` call (the rows of a block are the arguments
    :func:`_unified_costs` passes; the bisection is element-wise and every row takes the same
    halvings, so each cost equals the one its own call gives: see :func:`finish_prefill_points`)."""
    from planner.queueing import UTILIZATION_CEILING, max_utilization_many

    out: list[np.ndarray | None] = [None] * len(requests)
    queued: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]] = []
    for n, r in enumerate(requests):
        tau_s = np.asarray(r.tau_s, dtype=float)
        rate = float(r.rate_per_s) if r.rate_per_s is not None else 0.0
        if rate <= 0 or not math.isfinite(r.targets.ttft_ms):
            out[n] = tau_s / UTILIZATION_CEILING
            continue
        servers, service_s, budget_s = _unified_queue(tau_s, np.asarray(r.batch, dtype=float), np.asarray(r.ttft_ms, dtype=float),
                                                      r.targets, rate)
        queued.append((n, tau_s, servers, service_s, budget_s, float(r.targets.ttft_q), float(r.interarrival_cv)))
    if queued:
        sizes = [q[1].size for q in queued]
        caps = max_utilization_many(np.concatenate([q[2] for q in queued]), np.concatenate([q[3] for q in queued]),
                                    np.repeat([q[5] for q in queued], sizes), np.concatenate([q[4] for q in queued]),
                                    0.0, np.repeat([q[6] for q in queued], sizes))
        for (n, tau_s, *_rest), end, size in zip(queued, np.cumsum(sizes), sizes, strict=True):
            out[n] = _costs_at_caps(tau_s, caps[end - size:end])
    return [c for c in out if c is not None]


def finish_unified_points(pending: Sequence[PendingUnified]) -> list[OperatingPoint]:
    """Each pending unified point finished (in order), their scans run in lockstep: every round
    prices the blocks all the live scans wait for with one bisection (:func:`_costs_many`)
    instead of one :func:`_unified_costs` call per block (~20 bisection steps of fixed numpy
    overhead each: 102 calls, ~0.13 s CPU of the README example's cold start). A scan's choice
    depends only on its own costs, which equal its own calls', so each point equals
    :meth:`PendingUnified.run`'s."""
    done: list[OperatingPoint | None] = [None] * len(pending)
    waiting: dict[int, CostRequest] = {}

    def advance(n: int, costs: np.ndarray | None) -> None:
        try:
            waiting[n] = pending[n].steps.send(costs)  # type: ignore[arg-type]  # None starts the generator
        except StopIteration as stop:
            done[n] = stop.value

    for n in range(len(pending)):
        advance(n, None)
    while waiting:
        round_ = list(waiting.items())
        waiting.clear()
        for (n, _r), costs in zip(round_, _costs_many([r for _n, r in round_]), strict=True):
            advance(n, costs)
    return [op for op in done if op is not None]


def _unified_queue(tau_s: np.ndarray, batch: np.ndarray, ttft_ms: np.ndarray, targets: _Targets,
                   rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queue a unified pair's cap is taken on: servers ``ceil(lambda tau) B`` (at least ``B``),
    slot service ``tau B`` seconds and wait budget ``(TTFT target - ttft) / 1e3`` seconds."""
    n0 = np.maximum(1.0, np.ceil(rate * tau_s))
    return np.floor(n0 * batch), tau_s * batch, (targets.ttft_ms - ttft_ms) / 1e3


def _cannot_beat(tau_s: np.ndarray, batch: np.ndarray, ttft_ms: np.ndarray, targets: _Targets, rate_per_s: float | None,
                 interarrival_cv: float, best: np.ndarray) -> np.ndarray:
    """Per unified pair, whether it is ruled out by the least cost ``best`` found before it without its cap:
    the cap it needs to beat ``best``, ``rho = tau / best``, is at or above the ceiling, or its
    wait at that ``rho`` already exceeds the budget (the wait grows with ``rho``). Such a pair
    costs at least ``best``; :func:`_unified_point` asks only where that could be a tie, so that
    the pair chosen is the one the scan in order of falling throughput keeps (the first to reach
    the least cost). Element-wise over arrays of pairs (one :func:`planner.queueing.wait_quantile_many`
    call for all of them; each answer is the one the pair alone gets: the wait is element-wise, and at
    ``rho < 1`` never takes the continued-fraction branch whose iterations depend on the other rows)."""
    from planner.queueing import UTILIZATION_CEILING, wait_quantile_many

    tau_s, best = np.asarray(tau_s, dtype=float), np.asarray(best, dtype=float)
    out = np.zeros(tau_s.shape, dtype=bool)
    rate = float(rate_per_s) if rate_per_s is not None else 0.0
    if rate <= 0 or not math.isfinite(targets.ttft_ms):
        return out
    servers, service_s, budget_s = _unified_queue(tau_s, np.asarray(batch, dtype=float), np.asarray(ttft_ms, dtype=float), targets, rate)
    ask = np.isfinite(best)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = tau_s / np.where(ask, best, 1.0)
    ruled = ask & ((need >= UTILIZATION_CEILING) | (budget_s < 0))
    wait = ask & ~ruled
    if wait.any():
        w = wait_quantile_many(targets.ttft_q, need[wait] * servers[wait] / service_s[wait], servers[wait], service_s[wait], 0.0,
                               interarrival_cv)
        ruled[wait] = w > budget_s[wait]
    return ruled


def _least_costs(costs: list[float], best: float, ruled_out: Callable[[list[int], list[float]], np.ndarray]) -> tuple[list[float], float]:
    """The costs one block of a unified scan keeps, and the least cost after it, from the block's exact
    ``costs`` in order of falling throughput and the least ``best`` before it. In order: a pair whose cost
    is at most ``best (1 + 1e-9)`` (it ties or beats the least so far) is dropped (``inf``) when
    ``ruled_out`` (:func:`_cannot_beat` of the block's positions at the ``best`` each saw) says it cannot
    beat ``best``; then ``best = min(best, cost)``.

    The checks are asked together: the walk from a position is first run assuming no check rules its pair
    out, which gives every check it would make and the ``best`` it would see; they are answered in one call,
    and the walk is exact up to the first pair ruled out; from the pair after it, again. (Ties are rare, so
    a block takes one call where one check per improving pair took one each.)"""
    kept = list(costs)
    start = 0
    while start < len(costs):
        at: list[int] = []
        seen: list[float] = []
        b = best
        for k in range(start, len(costs)):
            if costs[k] <= b * (1.0 + 1e-9) and math.isfinite(b):  # an infinite best rules nothing out
                at.append(k)
                seen.append(b)
            b = min(b, costs[k])
        ruled = np.flatnonzero(ruled_out(at, seen)) if at else np.zeros(0, dtype=int)
        stop = at[int(ruled[0])] if ruled.size else len(costs)
        for k in range(start, stop):
            best = min(best, costs[k])
        if not ruled.size:
            break
        kept[stop] = math.inf  # min(best, inf): best unchanged
        start = stop + 1
    return kept, best


def _unified_point(inst: InstanceArrays, eff: Efficiency, batches: np.ndarray, **kw: Any) -> OperatingPoint:
    """The unified operating point (:func:`_unified_steps`'s arguments), each block of pairs priced
    by its own :func:`_unified_costs` call."""
    return PendingUnified(_unified_steps(inst, eff, batches, **kw)).run()


def _tpot_of(spec: SpecCost | None, osl_tpot: float, q: float | None, u: np.ndarray, c: np.ndarray, tb: np.ndarray,
             ti: np.ndarray) -> np.ndarray:
    """Per-request TPOT quantile ``q`` of unified pairs, s (:func:`planner.queueing.tpot_quantile_s` over the
    ``osl_tpot`` outputs whose gaps are whole iterations; speculative: divided by the ``E`` tokens per step)."""
    from planner.queueing import tpot_quantile_s

    return tpot_quantile_s(q, osl_tpot, u, c, tb, ti) if spec is None else tpot_quantile_s(q, osl_tpot, u, c, tb, ti) / spec.tokens_per_step


def _itl_of(spec: SpecCost | None, q: float | None, u: np.ndarray, tb: np.ndarray, ti: np.ndarray) -> np.ndarray:
    """Every-gap ITL quantile ``q`` of unified pairs, s (:func:`planner.queueing.itl_quantile_s`; speculative:
    :func:`planner.perf.speculative.burst_itl_quantile_s`, the ``E - 1`` ~0 gaps of each burst counted)."""
    if spec is None:
        from planner.queueing import itl_quantile_s

        return itl_quantile_s(q, u, tb, ti)
    from planner.perf.speculative import burst_itl_quantile_s

    return burst_itl_quantile_s(q, u, tb, ti, spec.tokens_per_step)


@dataclass(frozen=True)
class _ScanBlock:
    """One block of a unified scan's screened pairs (``idx``, flat grid indices in order of falling
    throughput): their exact TPOT / ITL quantiles (s), lane wait (s), TTFT and E2E (ms), and the pairs
    among them that meet every target (``met``: positions in the block; ``pairs``: their flat indices,
    with their batch, ``tau`` s and TTFT ms, the arguments of the block's :class:`CostRequest`)."""

    idx: np.ndarray
    tpot_s: np.ndarray
    itl_s: np.ndarray
    wait_s: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    met: np.ndarray
    pairs: np.ndarray
    pair_batch: np.ndarray
    pair_tau_s: np.ndarray
    pair_ttft_ms: np.ndarray


@dataclass(frozen=True)
class _UnifiedScan:
    """Everything of a unified point's scan that does not depend on its arrival rate (module docstring,
    **unified**; :func:`_build_unified_scan`): the (batch, chunk) grid, its iteration times, lane, memory and
    the cheap bounds; ``cand``, the screened pairs in order of falling throughput; ``blocks``, the exact
    metrics of each block of ``cand`` once a scan has reached it (:meth:`block`). The rate enters only
    through the blocks' costs ``tau / rho`` and the early stop (:func:`_unified_steps`), so a table rebuilt
    at another rate re-uses the scan (:func:`_unified_scan`) and recomputes none of this."""

    batches: np.ndarray
    grid: np.ndarray
    busy: StepTime
    idle_step: StepTime
    t_busy: np.ndarray
    t_idle: np.ndarray
    """Decode-only (speculative: verify + draft) step per batch, s, as a column ``(B, 1)``."""
    t_idle_full: np.ndarray
    u_iter: np.ndarray
    u_c: np.ndarray
    stable: np.ndarray
    t_mean: np.ndarray
    rate: np.ndarray
    """Requests/s one instance sustains per pair."""
    service: np.ndarray
    rho_lane: np.ndarray
    chunks: np.ndarray
    fits: np.ndarray
    pre: np.ndarray
    ttft_lb: np.ndarray
    tpot_lb: np.ndarray
    itl_all: np.ndarray
    cand: np.ndarray
    tau_flat: np.ndarray
    tpot_q: float | None
    itl_q: float | None
    wait_q: float
    e2e_q: float | None
    osl: float
    osl_tpot: float
    overhead_ms: float
    targets: _Targets
    spec: SpecCost | None
    blocks: dict[int, _ScanBlock]
    n_first: float = math.nan
    """New tokens of the prompt whose TTFT is checked (``n_ttft``, the bucket's representative; else the point's own)."""

    def block(self, start: int) -> _ScanBlock:
        """The block of ``cand`` from ``start`` (:data:`_SCAN_BLOCK` pairs), evaluated on first use."""
        hit = self.blocks.get(start)
        if hit is None:
            hit = self.blocks[start] = self._evaluate(start)
        return hit

    def _evaluate(self, start: int) -> _ScanBlock:
        """Exact per-token metrics, lane wait, TTFT = ``1e3 (W_q + c t_it) + overhead`` and E2E = TTFT +
        ``1e3 (o - 1) TPOT`` at the E2E statistic of the block's pairs; the pairs meeting every target."""
        tg, spec = self.targets, self.spec
        idx = self.cand[start:start + _SCAN_BLOCK]
        u_i, c_i = self.u_c.ravel()[idx], self.chunks.ravel()[idx]
        tb_i, ti_i = self.t_busy.ravel()[idx], self.t_idle_full.ravel()[idx]
        tp = _tpot_of(spec, self.osl_tpot, self.tpot_q, u_i, c_i, tb_i, ti_i)
        it = _itl_of(spec, self.itl_q, u_i, tb_i, ti_i)
        w = lane_wait_quantile_s(self.wait_q, self.rho_lane.ravel()[idx], self.service.ravel()[idx])
        tt = 1e3 * (w + c_i * tb_i) + self.overhead_ms
        ee = tt + 1e3 * (self.osl - 1.0) * (tp if self.e2e_q == self.tpot_q else _tpot_of(spec, self.osl_tpot, self.e2e_q, u_i, c_i,
                                                                                          tb_i, ti_i))
        met = np.flatnonzero((1e3 * tp <= tg.tpot_ms) & (1e3 * it <= tg.itl_ms) & (tt <= tg.ttft_ms) & (ee <= tg.e2e_ms))
        pairs = idx[met]
        return _ScanBlock(idx=idx, tpot_s=_frozen(tp), itl_s=_frozen(it), wait_s=_frozen(w), ttft_ms=_frozen(tt), e2e_ms=_frozen(ee),
                          met=_frozen(met), pairs=_frozen(pairs), pair_batch=_frozen(self.batches[pairs // self.grid.shape[1]]),
                          pair_tau_s=_frozen(self.tau_flat[pairs]), pair_ttft_ms=_frozen(tt[met]))


def _unified_scan(inst: InstanceArrays, eff: Efficiency, batches: np.ndarray, *, isl: float, osl: float, n_new: float, cached: float,
                  ctx: float, budget: float, kv_req: float, overhead_ms: float, targets: _Targets, mixed: bool,
                  spec: SpecCost | None, kv_cap: float | None, n_ttft: float | None, isl_ttft: float | None) -> _UnifiedScan:
    """:func:`_build_unified_scan`, memoised per process on the values of every argument (:func:`_value_key`):
    a study re-building its capacity table at each traffic rate meets the same scans again (the rate is
    not an argument). The memo returns the very arrays the build gave, so every point is unchanged."""
    args = dict(isl=isl, osl=osl, n_new=n_new, cached=cached, ctx=ctx, budget=budget, kv_req=kv_req, overhead_ms=overhead_ms,
                targets=targets, mixed=mixed, spec=spec, kv_cap=kv_cap, n_ttft=n_ttft, isl_ttft=isl_ttft)
    key = (_value_key(inst), _value_key(eff), _value_key(batches), _value_key(tuple(args.items())))
    return _SCAN_MEMO.get(key, lambda: _build_unified_scan(inst, eff, batches, **args))  # type: ignore[arg-type]


def _build_unified_scan(inst: InstanceArrays, eff: Efficiency, batches: np.ndarray, *, isl: float, osl: float, n_new: float,
                        cached: float, ctx: float, budget: float, kv_req: float, overhead_ms: float, targets: _Targets,
                        mixed: bool, spec: SpecCost | None, kv_cap: float | None, n_ttft: float | None,
                        isl_ttft: float | None) -> _UnifiedScan:
    """The rate-independent part of :func:`_unified_steps` (its arguments; the model is in the module docstring):
    the grid of (batch ``B``, chunk ``q``) pairs, their busy and decode-only iterations, lane share
    ``u = B E n / (OSL q)``, mean step ``t_mean = u t_it + (1 - u) t_dec``, throughput ``B E / (OSL t_mean)``,
    lane service ``n t_it / q`` and utilisation, TTFT chunks, KV fit, the cheap bounds (unqueued TTFT, mean
    TPOT, exact ITL) and the pairs they leave, in order of falling throughput."""
    e = spec.tokens_per_step if spec is not None else 1.0
    osl_tpot = osl if spec is None else 1.0 + (osl - 1.0) / e  # outputs whose gaps are whole iterations
    b2 = batches[:, None]
    if mixed:
        grid = _chunk_grid(batches, budget, n_new)
        if math.isfinite(targets.itl_ms):
            q_itl = _largest_chunk(inst, eff, batches, ctx, np.maximum(budget - batches, 0.0), n_new, cached, targets.itl_ms / 1e3, spec)
            grid = np.concatenate([grid, np.maximum(q_itl, 1.0)[:, None]], axis=1)
        busy = _busy_step(inst, eff, b2, ctx, grid, n_new, cached, spec)
        lane_ok = grid <= np.maximum(budget - b2, 0.0)
    else:
        # the engine prefills whole waiting prompts (several when they queue, up to the budget ``Q``),
        # a longer prompt in ``Q``-token chunks; it cannot shrink a chunk to protect TPOT / ITL
        ms = _PREFILL_BATCHES[max(1.0, budget // n_new) >= _PREFILL_BATCHES] if n_new <= budget else np.ones(1)
        grid = np.broadcast_to(np.minimum(ms * n_new, budget)[None, :], (batches.size, ms.size)).copy()
        if spec is None:
            busy = _stall_step(inst, eff, b2, ctx, grid, n_new, cached)
        else:
            from planner.perf.speculative import spec_stall_step

            busy = spec_stall_step(spec, inst, eff, b2, ctx, grid, n_new, cached)
        lane_ok = np.ones(grid.shape, dtype=bool)
    t_busy = busy.total_s
    if spec is None:
        idle_step = iteration_time(inst, eff, decode_batch=batches, decode_context=ctx)
        t_idle = idle_step.total_s[:, None]
    else:
        from planner.perf.speculative import spec_step

        spec_total, idle_step = spec_step(spec, inst, eff, batches, ctx)  # the verify step's shares, the draft's time
        t_idle = spec_total[:, None]
    # share of iterations carrying a chunk: prompt tokens needed per iteration / lane capacity
    u_iter = b2 * e * n_new / osl / grid
    stable = lane_ok & (u_iter < 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t_mean = np.where(stable, u_iter * t_busy + (1.0 - np.minimum(u_iter, 1.0)) * t_idle, np.inf)
        rate = b2 * e / (osl * t_mean)                                  # requests/s one instance sustains
        service = n_new / grid * t_busy                               # lane seconds per prompt
        rho_lane = np.where(stable, rate * service, np.inf)           # = u_iter t_busy / t_mean
    n_first = n_new if n_ttft is None else max(n_ttft, n_new)  # the prompt whose TTFT is checked
    chunks = np.where(grid >= n_first, 1.0, np.ceil(n_first / grid))
    u_c = np.minimum(u_iter, 1.0)
    t_idle_full = np.broadcast_to(t_idle, grid.shape)
    # KV: B sequences at their peak plus the prompt(s) being chunked
    isl_first = isl if isl_ttft is None else max(isl_ttft, isl)
    prompt_kv = np.maximum(kv_bytes(inst, isl_first), kv_bytes(inst, np.minimum(grid, n_first) + cached))
    if spec is not None:
        prompt_kv = prompt_kv * (1.0 + spec.draft_kv_share)
    kv_need = b2 * kv_req + prompt_kv
    fits = kv_need <= (kv_capacity_bytes(inst) if kv_cap is None else kv_cap)
    pre = stable & (rho_lane < 1.0) & fits
    # the targets, in order of falling throughput until a pair meets them all (the Poisson quantile
    # of TPOT and the lane-wait quantile of TTFT are not free): per-token metrics, TTFT with its
    # lane wait, E2E ~ TTFT + (o - 1) x TPOT at the E2E statistic (quantiles added: errs long)
    tpot_q = targets.tpot_q if math.isfinite(targets.tpot_ms) else 0.99
    itl_q = targets.itl_q if math.isfinite(targets.itl_ms) else 0.99
    wait_q = targets.ttft_q if math.isfinite(targets.ttft_ms) else LANE_WAIT_QUANTILE
    e2e_q = targets.e2e_q if math.isfinite(targets.e2e_ms) else 0.99
    # cheap bounds first: TTFT >= its unqueued part, TPOT quantile >= its mean; ITL is exact and cheap
    ttft_lb = 1e3 * chunks * t_busy + overhead_ms
    tpot_lb = (t_idle_full + u_c * np.maximum(t_busy - t_idle_full, 0.0)) / e
    itl_all = _itl_of(spec, itl_q, u_c, t_busy, t_idle_full)
    screen = (pre & (ttft_lb <= targets.ttft_ms) & (1e3 * tpot_lb <= targets.tpot_ms) & (1e3 * itl_all <= targets.itl_ms)
              & (ttft_lb + 1e3 * (osl - 1.0) * tpot_lb <= targets.e2e_ms))
    cand = np.flatnonzero(screen)
    cand = cand[np.argsort(-rate.ravel()[cand], kind="stable")]
    with np.errstate(divide="ignore"):
        tau_flat = 1.0 / rate.ravel()
    arrays = dict(batches=batches.copy(), grid=grid, t_busy=t_busy, t_idle=t_idle, t_idle_full=t_idle_full, u_iter=u_iter, u_c=u_c,
                  stable=stable, t_mean=t_mean, rate=rate, service=service, rho_lane=rho_lane, chunks=chunks, fits=fits, pre=pre,
                  ttft_lb=ttft_lb, tpot_lb=tpot_lb, itl_all=itl_all, cand=cand, tau_flat=tau_flat)
    return _UnifiedScan(**{k: _frozen(np.asarray(v)) for k, v in arrays.items()}, busy=busy, idle_step=idle_step,
                        tpot_q=tpot_q, itl_q=itl_q, wait_q=wait_q, e2e_q=e2e_q, osl=osl, osl_tpot=osl_tpot, overhead_ms=overhead_ms,
                        targets=targets, spec=spec, blocks={}, n_first=float(n_first))


def _unified_steps(inst: InstanceArrays, eff: Efficiency, batches: np.ndarray, *, isl: float, osl: float, n_new: float,
                   cached: float, ctx: float, b_mem: int, budget: float, kv_req: float, power_w: InstancePower, overhead_ms: float,
                   source: str, targets: _Targets, mixed: bool = True, spec: SpecCost | None = None,
                   kv_cap: float | None = None, rate_per_s: float | None = None, interarrival_cv: float = 1.0,
                   n_ttft: float | None = None, isl_ttft: float | None = None) -> Generator[CostRequest, np.ndarray, OperatingPoint]:
    """The unified operating point; the model is in the module docstring. A generator: it yields a
    :class:`CostRequest` for each block of pairs that meet the targets and takes their costs
    (:func:`_unified_costs`) back (:class:`PendingUnified`). Everything but the costs and the early
    stop is independent of ``rate_per_s`` and comes from :func:`_unified_scan` (memoised).

    ``n_ttft`` / ``isl_ttft`` (:func:`operating_point`'s ``ttft_input_tokens``): the new and total
    tokens of the prompt whose TTFT is checked (its chunk iterations, its KV while chunked) when it is
    longer than the mix's ``n_new`` / ``isl`` that set the lane's load and the batch.

    ``spec`` (speculative decoding, :mod:`planner.perf.speculative`): every iteration verifies ``V``
    tokens per decoding sequence (beside the chunk, when it carries one) and runs the ``k`` draft
    passes, and yields ``E`` tokens per sequence; so requests finish at ``B E / OSL`` per iteration
    (lane share ``u = B E n / (OSL q)``, ``instance_seconds_per_request = OSL t_mean / (B E)``), a
    request spans ``(OSL - 1)/E`` iterations (its TPOT is :func:`planner.queueing.tpot_quantile_s`
    over ``1 + (OSL - 1)/E`` outputs, divided by ``E``) and the ITL counts the ``E - 1`` ~0 gaps of
    each burst (:func:`planner.perf.speculative.burst_itl_quantile_s`). ``kv_req`` and ``kv_cap``
    (default: the instance's) then include the draft's KV and weights.

    ``mixed`` (chunked prefill): every (batch ``B``, chunk ``q``) pair of the grid
    (:func:`_chunk_grid`, plus the largest chunk whose iteration fits an ITL quantile target) is
    costed; the feasible pair with the highest throughput is the point. Not ``mixed``
    (prefill-priority): the engine's chunk is ``min(n, Q)`` and each prefill iteration stalls
    the decode batch (:func:`_stall_step`); only the batch is chosen."""
    sc = _unified_scan(inst, eff, batches, isl=isl, osl=osl, n_new=n_new, cached=cached, ctx=ctx, budget=budget, kv_req=kv_req,
                       overhead_ms=overhead_ms, targets=targets, mixed=mixed, spec=spec, kv_cap=kv_cap, n_ttft=n_ttft,
                       isl_ttft=isl_ttft)
    e = spec.tokens_per_step if spec is not None else 1.0
    shape = sc.grid.shape
    # the exact metrics of the blocks this scan reaches (inf elsewhere: the infeasibility reasons tell "at least")
    out = {k: np.full(shape, np.inf) for k in ("tpot", "itl", "wait", "ttft", "e2e")}
    flat = {k: v.reshape(-1) for k, v in out.items()}
    cost = np.full(shape, np.inf)       # tau / rho of the pairs that meet every target (the choice below)
    cost_flat = cost.reshape(-1)
    best = math.inf
    for start in range(0, sc.cand.size, _SCAN_BLOCK):
        if float(sc.tau_flat[sc.cand[start]]) >= best:  # rho <= 1: no later pair can cost less than its tau
            break
        blk = sc.block(start)
        idx = blk.idx
        flat["tpot"][idx], flat["itl"][idx], flat["wait"][idx], flat["ttft"][idx], flat["e2e"][idx] = (
            blk.tpot_s, blk.itl_s, blk.wait_s, blk.ttft_ms, blk.e2e_ms)
        if not blk.met.size:
            continue
        exact = yield CostRequest(blk.pair_tau_s, blk.pair_batch, blk.pair_ttft_ms, targets, rate_per_s, interarrival_cv)
        # in order of falling throughput, keeping the running least cost; a pair that only ties the
        # least so far (or beats it by less than 1e-9) is checked for the early exit (_cannot_beat) so
        # that ties go to the pair the scan reaches first
        def ruled_out(at: list[int], seen: list[float], blk: _ScanBlock = blk) -> np.ndarray:
            return _cannot_beat(blk.pair_tau_s[at], blk.pair_batch[at], blk.pair_ttft_ms[at], targets, rate_per_s, interarrival_cv,
                                np.asarray(seen, dtype=float))

        kept, best = _least_costs(exact.tolist(), best, ruled_out)
        cost_flat[blk.pairs] = kept
    return _unified_chosen(sc, out, cost, inst, eff, e=e, isl=isl, n_new=n_new, cached=cached, ctx=ctx, b_mem=b_mem, kv_req=kv_req,
                           power_w=power_w, overhead_ms=overhead_ms, source=source, targets=targets, mixed=mixed, spec=spec)


def _unified_chosen(sc: _UnifiedScan, out: dict[str, np.ndarray], cost: np.ndarray, inst: InstanceArrays, eff: Efficiency, *,
                    e: float, isl: float, n_new: float, cached: float, ctx: float, b_mem: int, kv_req: float, power_w: InstancePower,
                    overhead_ms: float, source: str, targets: _Targets, mixed: bool, spec: SpecCost | None) -> OperatingPoint:
    """The unified point a scan chose: the pair of least ``cost`` among those meeting every target (the
    metrics ``out`` of the blocks the scan reached), or why none does (:func:`_unified_infeasible`)."""
    batches, busy, osl = sc.batches, sc.busy, sc.osl
    tpot_s, itl_s, wait, ttft_ms, e2e_ms = out["tpot"], out["itl"], out["wait"], out["ttft"], out["e2e"]
    ok_token = (1e3 * tpot_s <= targets.tpot_ms) & (1e3 * itl_s <= targets.itl_ms)
    ok_ttft = ttft_ms <= targets.ttft_ms
    ok_e2e = e2e_ms <= targets.e2e_ms
    ok = sc.pre & ok_token & ok_ttft & ok_e2e
    if not ok.any() and spec is not None:
        return _infeasible("no (batch, chunk) pair meets the targets with a speculative step", _bound(busy, (0, 0)), source, kv=kv_req)
    if not ok.any():
        return _unified_infeasible(inst, eff, batches, busy, targets, source, kv_req=kv_req, ctx=ctx, n_new=n_new, cached=cached,
                                   osl=osl, stable=sc.stable, pre=sc.pre, tpot_q=sc.tpot_q, u_c=sc.u_c, chunks=sc.chunks,
                                   t_busy=sc.t_busy, t_idle=sc.t_idle_full, itl_all=sc.itl_all, tpot_lb=sc.tpot_lb,
                                   ttft_lb=sc.ttft_lb, ttft_ms=ttft_ms, e2e_ms=e2e_ms, mixed=mixed, rho_lane=sc.rho_lane)
    score = np.where(ok, cost, np.inf)
    ij = np.unravel_index(int(np.argmin(score)), score.shape)
    i, j = int(ij[0]), int(ij[1])
    b_star = int(batches[i])
    seconds = float(1.0 / sc.rate[i, j])
    # memory-bound when the next batch does not fit the KV memory at any chunk
    nxt = i + 1 < len(batches) and not sc.fits[i + 1].any()
    bound = "memory_capacity" if nxt or (i + 1 == len(batches) and b_mem < MAX_BATCH) else _bound(busy, (i, j))
    q_star = float(sc.grid[i, j])
    t_busy, t_idle, t_mean = sc.t_busy, sc.t_idle, sc.t_mean
    detail = {"step_ms": 1e3 * float(t_busy[i, j]), "mean_step_ms": 1e3 * float(t_mean[i, j]),
              "decode_only_step_ms": 1e3 * float(t_idle[i, 0]), "batch": float(b_star), "batch_memory_limit": float(b_mem),
              "prefill_chunk_tokens": q_star, "prefill_tokens": float(n_new), "prefill_tokens_ttft": float(sc.n_first),
              "lane_service_ms": 1e3 * float(sc.service[i, j]),
              "chunk_iteration_share": float(sc.u_iter[i, j]), "lane_utilization": float(sc.rho_lane[i, j]),
              "lane_wait_ms": 1e3 * float(wait[i, j]), "ttft_iterations": float(sc.chunks[i, j]), "ttft_overhead_ms": overhead_ms,
              "itl_ms": 1e3 * float(itl_s[i, j]), "e2e_ms": float(e2e_ms[i, j]),
              "tpot_mean_ms": 1e3 * float(t_mean[i, j]) / e,
              "compute_ms": 1e3 * float(busy.compute_s[i, j]), "memory_ms": 1e3 * float(busy.memory_s[i, j]),
              "comm_ms": 1e3 * float(busy.comm_s[i, j]), "overhead_ms": 1e3 * float(busy.overhead_s[i, j])}
    if spec is not None:  # the speculative step without a chunk (the simulator's burst step) and E
        detail.update({"spec_step_ms": 1e3 * float(t_idle[i, 0]), "spec_tokens_per_step": e})
    return OperatingPoint(
        feasible=True, reason="", bound=bound, instance_seconds_per_request=seconds, max_batch=b_star, kv_bytes_per_request=kv_req,
        kv_transfer_bytes_per_request=0.0, ttft_ms=float(ttft_ms[i, j]),
        energy_j_per_request=_cycle_power_w(power_w, busy, sc.idle_step, (i, j), t_busy=float(t_busy[i, j]),
                                             t_idle=float(t_idle[i, 0]), share=float(sc.u_iter[i, j]),
                                             rows=b_star * (spec.verify_tokens if spec is not None else 1), chunk=q_star) * seconds,
        tpot_ms=1e3 * float(tpot_s[i, j]), source=source, detail=detail,
    )
