"""Engine calibrations: achieved efficiencies, overheads and scheduler behaviour per engine.

A calibration file ``models/calibration/<name>.yaml`` holds one :class:`EngineCalibration` per
serving engine (``trtllm``, ``vllm``, ``sglang``) plus ``default`` (pooled over every engine;
used for an engine the data do not cover), and the provenance of the fit: the data file and
its sha256, the rows used, the residuals. ``planner calibrate`` writes it
(:mod:`planner.perf.fit`).

The fitted quantities transfer across devices: they are fractions of a device's datasheet
peaks (``eta_f``, ``eta_b``) and fixed software costs (``step_overhead_ms``,
``layer_overhead_us``), never per-device constants. Two scheduler facts are documented engine
defaults, not fitted:

- ``mixed_prefill``: whether an iteration carries prefill tokens together with the decode
  batch (TensorRT-LLM in-flight batching and vLLM V1 chunked prefill: yes; SGLang: no unless
  ``--enable-mixed-chunk``).
- ``prefill_token_budget``: tokens per iteration (TensorRT-LLM ``max_num_tokens`` 8192, vLLM
  ``max_num_batched_tokens`` 8192, SGLang ``chunked_prefill_size`` 8192 on 80 GB-class GPUs).
- ``kv_share_of_free`` and ``kv_reserve_peak``: how the KV pool is sized and how requests are
  admitted to it (TensorRT-LLM: ``free_gpu_memory_fraction`` 0.9 of the memory left after the
  weights, and the ``GUARANTEED_NO_EVICT`` scheduler reserving ``ISL + OSL`` per request; vLLM
  and SGLang: a share of device memory, admission on current usage).

``seq_overhead_us``, ``allreduce_overhead_us``, ``ttft_overhead_ms``, ``eta_link`` (the achieved
fraction of the datasheet scale-up bandwidth in a TP all-reduce) and ``cohort_exponent`` (closed-loop
benchmarks only: the size of the cohorts a mixed-prefill engine's closed loop keeps in step) are
fitted too (``allreduce_overhead_us`` up to round 9; since round 10 it is 0 unless set, like
``step_overhead_ms``); ``step_overhead_ms`` and ``admit_share`` are kept for users who know them but are not
fitted (on the H100 data the first cannot be told from ``layer_overhead_us`` within one model, and
fitting the second made out-of-sample TTFT worse: it absorbs a benchmark artefact of one model's
runs). An engine without rows of its own gets the pooled values with its own scheduler facts.
Each engine also records how it sizes its KV pool (``memory_fraction``, ``workspace_gb``,
``kv_block_tokens``, ``kv_share_of_free``; documented engine defaults, overridable). Closed-loop
harness effects — the benchmark's TTFT overhead and cohort size — are fitted per harness
(:class:`HarnessCalibration`, ``harnesses``; since round 10 with the per-layer and per-sequence
overheads of the engine version a one-engine harness ran) and used only to replay benchmarks; the engine's own
``ttft_overhead_ms`` (what the open-loop operating points add) is the lowest of its harnesses'. Each
fit records its validated error per (device, engine) (:class:`ErrorBand`), read with
:func:`error_band`. Round 9 of ``planner/perf/README.md``.
The closed loop's first wave and SGLang's locked cohort are formulas in
:mod:`planner.perf.closed_loop`, not fitted shares; mixed-prefill engines' cohorts have the fitted
size ``D ** cohort_exponent``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from planner.schema.common import StrictModel
from planner.validation import load_model_cached

CALIBRATION_DIR_NAME = "calibration"
DEFAULT_CALIBRATION = "h100_dense"
"""Name of the calibration shipped in models/calibration/ and used by default."""


class EngineCalibration(StrictModel):
    """Efficiencies and overheads of one serving engine."""

    eta_f: float = Field(gt=0, le=1)
    """Achieved fraction of dense peak FLOP/s in matmul-bound work."""
    eta_b: float = Field(gt=0, le=1)
    """Achieved fraction of peak memory bandwidth in bandwidth-bound work."""
    step_overhead_ms: float = Field(ge=0)
    """Fixed time per engine iteration (scheduler, sampling, launches), ms."""
    layer_overhead_us: float = Field(ge=0)
    """Extra time per transformer layer per iteration (small kernels, launches), us."""
    seq_overhead_us: float = Field(0.0, ge=0)
    """Host time per running sequence per iteration (scheduler bookkeeping, sampling,
    detokenisation; not divided by tp), us."""
    eta_link: float = Field(1.0, gt=0, le=1)
    """Achieved fraction of the datasheet scale-up (NVLink/xGMI) bandwidth in a tensor-parallel
    all-reduce (bandwidth-bound prefill messages; small decode messages are latency-bound)."""
    allreduce_overhead_us: float = Field(0.0, ge=0)
    """Software latency of one tensor-parallel all-reduce beyond the link hops (launch,
    synchronisation), us."""
    admit_share: float = Field(0.0, ge=0, le=4)
    """Closed-loop admission wait, as a share of the inter-completion time ``T_cyc / D``."""
    ttft_overhead_ms: float = Field(0.0, ge=0)
    """Fixed time added to every TTFT (API server, tokenisation, first scheduling), ms."""
    cohort_exponent: float = Field(0.0, ge=0, le=1)
    """Closed-loop benchmarks only: steady-state cohort size ``g = D ** cohort_exponent`` —
    requests that come back together and share their prefill passes (0: none; 1: the whole
    batch stays in step). See :mod:`planner.perf.closed_loop`."""
    mixed_prefill: bool = True
    """Iterations carry prefill chunks with the decode batch (chunked prefill / in-flight batching)."""
    prefill_token_budget: int = Field(8192, gt=0)
    """Tokens (prefill + decode) one iteration may carry."""
    kv_share_of_free: bool = False
    """The KV pool is ``U_MEM`` x the memory left after weights and reserve (TensorRT-LLM
    ``free_gpu_memory_fraction``), not ``U_MEM`` x device memory minus weights (vLLM
    ``gpu_memory_utilization``, SGLang ``mem_fraction_static``)."""
    kv_reserve_peak: bool = False
    """Admission reserves KV for a request's full ``ISL + OSL`` (TensorRT-LLM's default
    ``GUARANTEED_NO_EVICT`` capacity scheduler) rather than admitting on current usage (vLLM,
    SGLang: admission by the mean footprint ``ISL + OSL/2``, preempting when the pool fills)."""
    kv_preempt: bool = False
    """When the KV pool is short, the engine admits a prompt as soon as its blocks fit and preempts
    running requests (recompute) as their contexts grow (vLLM V1's scheduler), so part of the slot
    wait comes after the first token: the closed loop puts the share ``ISL / (ISL + OSL)`` of the
    wait in TTFT and the rest in TPOT (:mod:`planner.perf.closed_loop`, round 10). False: the whole
    wait is before the first token (TensorRT-LLM reserves the peak; SGLang admits conservatively)."""
    memory_fraction: float | None = Field(0.9, gt=0, le=1)
    """Share of device memory (or, with ``kv_share_of_free``, of the memory free after weights and
    workspace) the engine gives its KV pool: vLLM ``gpu_memory_utilization`` 0.9, TensorRT-LLM
    ``free_gpu_memory_fraction`` 0.9. Empty (``null``) = SGLang's automatic ``mem_fraction_static``
    (device memory minus a reserve by device class; :func:`planner.perf.roofline.engine_kv_pool_bytes`)."""
    workspace_gb: float = Field(3.0, ge=0)
    """Per-device memory the engine holds outside weights and KV (activations of the largest batch,
    CUDA graphs, communication buffers), GB. Not used with SGLang's automatic reserve."""
    kv_block_tokens: int = Field(16, ge=1)
    """Tokens per KV block; a sequence holds whole blocks (vLLM 16, TensorRT-LLM 32, SGLang 1)."""
    source: str = ""
    """Where the values come from (``fit:<file>`` or a published default with its citation)."""


class HarnessCalibration(StrictModel):
    """Closed-loop behaviour of one benchmark harness (the tool and setup that produced a set of
    rows: ``harness`` column of the measurements). Used only to replay closed-loop benchmarks
    (``validate-perf``, ``calibrate``, ``estimate``), never by the open-loop operating points."""

    ttft_overhead_ms: float | None = Field(None, ge=0)
    """Mean TTFT beyond the engine's work in this harness's runs (client, API server, tokenisation,
    first scheduling as this harness measures it), ms; replaces the engine's value in replays.
    Empty: the engine's value."""
    cohort_exponent: float = Field(0.0, ge=0, le=1)
    """Mean size ``D ** cohort_exponent`` of the groups of requests that come back together in this
    harness's closed loops (see :mod:`planner.perf.closed_loop`)."""
    layer_overhead_us: float | None = Field(None, ge=0)
    """Per-layer overhead of the engine version this harness ran (round 10), us; replaces the engine's
    value for the harness's rows of the engines in ``engines``. Empty: the engine's value."""
    seq_overhead_us: float | None = Field(None, ge=0)
    """Per-sequence host overhead of the engine version this harness ran (round 10), us; as above."""
    rows: int = Field(0, ge=0)
    """Rows the values were fitted on."""
    engines: list[str] = Field(default_factory=list)
    """Engines of those rows."""


class ErrorBand(StrictModel):
    """Validated error of a calibration on one (device, engine): mean absolute relative error of
    TTFT and TPOT over its rows (fractions, 0.2 = 20 %)."""

    device: str
    engine: str
    ttft_rel: float = Field(ge=0)
    tpot_rel: float = Field(ge=0)
    rows: int = Field(ge=0)
    how: str = "in sample"
    """``in sample`` (the calibration's own rows: not a validation, :func:`error_band` ignores it) or
    ``leave one model out`` (each model's rows predicted by a fit without them, ``planner.perf.fit``)."""


class FitRecord(StrictModel):
    """Provenance of a fitted calibration."""

    data_file: str
    data_sha256: str
    rows_used: int
    rows_skipped: int
    engines_fitted: list[str]
    objective: str
    mape_ttft_pct: dict[str, float]
    mape_tpot_pct: dict[str, float]
    error_bands: list[ErrorBand] = Field(default_factory=list)
    """Validated error per (device, engine) (:func:`error_band`)."""
    notes: str = ""
    warnings: list[str] = Field(default_factory=list)
    """Fitted parameters that ended on a bound of their range (:mod:`planner.perf.lsq`): the value is
    the bound, not an estimate; ``planner calibrate`` prints each."""


REDUNDANT_EXPERT_SHARE = 32 / 256
"""Redundant EPLB slots per routed expert when a calibration does not fix them: DeepSeek's 32 for 256
(:attr:`MoECalibration.redundant_experts`)."""


class MoECalibration(StrictModel):
    """Expert-parallel (EP) serving parameters of the MoE step-time model (:mod:`planner.perf.moe`).

    Every default is a published or physical figure, named here; a calibration file may set them
    (``moe:`` block) and ``planner.perf.moe.fit_moe_calibration`` fits ``ep_imbalance`` and
    ``a2a_efficiency`` from measured expert-parallel rows."""

    redundant_experts: int | None = Field(None, ge=0)
    """Extra expert slots EPLB places replicas of hot experts in: ``E + R`` slots spread over the EP
    GPUs, ``ceil((E + R) / EP)`` per GPU. ``None`` (the default): :meth:`redundant_for`, ``R = round(E / 8)``,
    DeepSeek's share: its inference system (open-source week day 6: 256 + 32 = 288 expert slots) and the SGLang
    96-H100 deployment (LMSYS blog 2025-05-05: "32 additional experts ... a pool of 288 experts") add 32 to 256
    routed experts. Other models keep that share (an ASSUMPTION: 16 for Qwen3-235B-A22B's 128, 1 for Mixtral's 8);
    until 2026-12-05 every model got 32 (Mixtral: 40 slots, 3 per GPU at EP16). A number fixes ``R``."""
    ep_imbalance: float = Field(1.11, ge=1.0, le=4.0)
    """Max over mean tokens per GPU in a MoE layer after EPLB (the step waits on the busiest GPU);
    multiplies the expert GEMM rows and the all-to-all bytes. 1.11 = measured routed tokens per rank
    of DeepSeek-R1 with EPLB on 288 expert slots, averaged over layers and iterations: imbalance ratio
    (max - mean) / mean 0.109 at EP32 (9 slots per rank) and 0.115 at EP36 (8 per rank), 1.564 without
    EPLB (TensorRT-LLM tech blog 4, "Scaling Expert Parallelism in TensorRT-LLM, Part 1", Table 1;
    machine-translation dataset, GB200, local batch 256). Independent of the SGLang 96-H100 figures
    that ``tests/test_moe_ep.py`` checks (SGLang's own perfect-vs-real EPLB throughput ratio, 59,337 /
    50,302 = 1.18, was the previous default: a fit to the check, not a source)."""
    a2a_efficiency: float = Field(0.8, gt=0, le=1)
    """Achieved fraction of the per-GPU NIC bandwidth in dispatch/combine across nodes. 0.8 = DeepEP
    low-latency kernels on H800 + CX7 400 Gb/s (~50 GB/s): 39-46 GB/s at EP 64-256 (DeepEP
    docs/legacy.md, "Low-latency kernels with pure RDMA")."""
    a2a_nvlink_efficiency: float = Field(0.77, gt=0, le=1)
    """Achieved fraction of the per-direction scale-up bandwidth inside a node: 153-158 GB/s of H800's
    200 GB/s per direction (DeepEP docs/legacy.md, intranode normal kernels)."""
    a2a_latency_us: float = Field(12.0, ge=0)
    """Fixed latency per dispatch or combine call, us (the roofline's network hop, 4 x 3 us)."""
    tbo_overlap: float = Field(1.0, ge=0, le=1)
    """Share of the smaller of (compute, all-to-all) that two-batch overlap hides in each stage pair
    (1: the larger of the two only; 0: no overlap). Used only when it makes the step faster (TBO
    splits the batch in two, so every GEMM runs at half the rows). 1.0 = DeepSeek's published
    profiles of its inference system (github.com/deepseek-ai/profile-data README: prefill EP32 and
    decode EP128 each run two micro-batches whose all-to-all overlaps the other's computation; in
    decode the all-to-all holds no SMs and "the system waits for the all-to-all communication to
    complete after the computation has finished"). Those profiles use perfectly balanced routing, so
    they give the overlap, not the imbalance. The traces themselves (decode.json, prefill.json) are
    not in the stored snapshot, so the hidden share was not measured from them: 1.0 is the upper end,
    what the profiles show, not a measured fraction. SGLang's TBO ablation (LMSYS blog 2025-05-05:
    +27-35 % prefill, +25.5 % decode) is the out-of-sample check; the model at 1.0 gives larger gains
    (+50 % and +43 %; ``tests/test_moe_ep.py``), so SGLang's stack hides less than DeepSeek's
    (SM contention, CPU-blocking dispatch, stage imbalance). 0.75 reproduced SGLang's gains and was the
    previous default: a fit to the check, not a source."""
    prefill_comm_sm_share: float = Field(24.0 / 132.0, ge=0, lt=1)
    """Share of SMs the prefill (normal) all-to-all kernels take while they overlap compute:
    ``Buffer.set_num_sms(24)`` of H100/H800's 132 SMs (DeepEP docs/legacy.md example). Decode
    (low-latency) kernels hold no SMs while in flight (DeepEP receive hooks)."""
    prefill_tokens_per_rank: int = Field(16384, gt=0)
    """Prompt tokens one DP rank carries per prefill iteration: 16,384 per device in DeepSeek's
    profile and SGLang's (LMSYS blog 2025-05-05; two-batch overlap lets it fit)."""
    decode_max_tokens_per_rank: int = Field(256, gt=0)
    """Largest decode batch per DP rank: DeepEP's low-latency buffers are sized for
    ``num_max_dispatch_tokens_per_rank``, recommended below 256 (DeepEP docs/legacy.md); SGLang's
    96-H100 run used 256."""
    source: str = "published defaults (planner/perf/calibration.py MoECalibration)"

    def redundant_for(self, num_experts: int) -> int:
        """Redundant expert slots for a model of ``num_experts`` routed experts (:attr:`redundant_experts`)."""
        if self.redundant_experts is not None:
            return self.redundant_experts
        return round(num_experts * REDUNDANT_EXPERT_SHARE)


class Calibration(StrictModel):
    """A set of engine calibrations (one file)."""

    name: str
    description: str = ""
    engines: dict[str, EngineCalibration]
    harnesses: dict[str, HarnessCalibration] = Field(default_factory=dict)
    """Closed-loop parameters per benchmark harness (replays only); see :class:`HarnessCalibration`.
    Rows of a harness not listed use their engine's values (for SGLang: the locked cohort). A pooled
    fallback (row-weighted mean over the fitted harnesses) was tried in round 9 and dropped."""
    fit: FitRecord | None = None
    moe: MoECalibration = Field(default_factory=MoECalibration)
    """Expert-parallel parameters (:class:`MoECalibration`); defaults when the file has no ``moe`` block."""

    def for_engine(self, engine: str) -> tuple[EngineCalibration, str]:
        """The engine's calibration, else ``default``; with the ``source`` label for outputs."""
        if engine in self.engines:
            return self.engines[engine], f"calibrated:{engine}"
        if "default" in self.engines:
            return self.engines["default"], "calibrated:default"
        return PUBLISHED_DEFAULT, "roofline"


PUBLISHED_DEFAULT = EngineCalibration(
    eta_f=0.6,
    eta_b=0.8,
    step_overhead_ms=0.0,
    layer_overhead_us=0.003,
    admit_share=0.0,
    ttft_overhead_ms=0.0,
    source=(
        "published defaults: eta_b 0.8 and 3 us constant latency = aiconfigurator "
        "mem_bw_empirical_scaling_factor / mem_empirical_constant_latency (systems/*.yaml, "
        "shared/data/hardware/measured_public.csv); eta_f 0.6 = typical large-GEMM share of dense "
        "peak (assumption)"
    ),
)
"""Used when no calibration file is found (``source`` = 'roofline')."""


def calibration_dir() -> Path:
    """Where a new calibration is written: ``calibration/`` of the last catalog folder
    (``$PLANNER_MODELS_DIR`` when set, else the shipped catalog; see :mod:`planner.catalog`)."""
    from planner.catalog import models_dir

    return models_dir() / CALIBRATION_DIR_NAME


def load_calibration(name_or_path: str | Path | None = None) -> Calibration | None:
    """Load ``calibration/<name>.yaml`` from the catalog folders (the last that has it; see
    :mod:`planner.catalog`) or a path. ``None`` name -> the shipped default if present, else
    ``None`` (the published defaults apply)."""
    from planner.catalog import catalog_file

    if name_or_path is None:
        found = catalog_file(f"{CALIBRATION_DIR_NAME}/{DEFAULT_CALIBRATION}.yaml")
        if found is None:
            return None
        path = found
    else:
        p = Path(name_or_path)
        if p.suffix in {".yaml", ".yml"} or p.exists():
            path = p
        else:
            path = catalog_file(f"{CALIBRATION_DIR_NAME}/{name_or_path}.yaml") or calibration_dir() / f"{name_or_path}.yaml"
    return _load(str(path))


_CACHE: dict[str, tuple[float, Any]] = {}


def _load(path: str) -> Calibration:
    return load_model_cached(Calibration, Path(path), _CACHE)


def save_calibration(cal: Calibration, path: str | Path) -> None:
    data: dict[str, Any] = cal.model_dump(mode="json", exclude_none=True)
    # an engine's empty memory_fraction means SGLang's automatic reserve and its default is 0.9: written out
    # as null, or the file would read back as 0.9 (every SGLang KV pool at 0.9 with no reserve)
    for name, eng in cal.engines.items():
        if eng.memory_fraction is None:
            data["engines"][name]["memory_fraction"] = None
    header = "# Fitted by `planner calibrate`; see planner/perf/calibration.py for the meaning of each field.\n"
    Path(path).write_text(header + yaml.safe_dump(data, sort_keys=False, width=100), encoding="utf-8")


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


UNCALIBRATED_BAND_REL = 0.25
"""Extra relative error allowed for a (device, engine) the calibration has no rows for: its band is
the engine's widest band on the devices it was fitted on (else the widest of any engine) plus this.
Round 9 of ``planner/perf/README.md``: a calibration fitted on H100 alone predicted H200 within
that much more than its in-sample error."""
MIN_VALIDATED_ROWS = 10
"""A band measured on fewer rows is not a validation: :func:`error_band` says "not validated" and
carries :data:`NO_CALIBRATION_BAND_REL` (three rows fitted and checked on themselves quoted ±14 %)."""
NO_CALIBRATION_BAND_REL = 0.6
"""Band of the published defaults (no calibration file): their error on the shipped H100 rows was
62 % (TTFT) and 33 % (TPOT); we carry the larger for both."""


def error_band(device: str, engine: str, calibration: Calibration | None | str = "auto") -> tuple[float, float, str]:
    """``(ttft_rel, tpot_rel, source)``: the validated relative error band of a prediction on
    ``device`` with ``engine`` under ``calibration`` (``"auto"`` = the shipped default file).

    - the calibration has rows for (device, engine): its recorded band (``FitRecord.error_bands``,
      mean absolute relative error), source ``"calibrated:<device>/<engine>"``;
    - rows for the engine (or, failing that, any engine) on other devices only: the widest such
      band plus :data:`UNCALIBRATED_BAND_REL`, source ``"uncalibrated device: ..."`` — or ``"uncalibrated
      engine: ..."`` when the device itself has bands, for other engines;
    - no calibration or no recorded bands: :data:`NO_CALIBRATION_BAND_REL` for both, source
      ``"published defaults"``; a band that is in sample or of fewer than :data:`MIN_VALIDATED_ROWS`
      rows is "not validated" and carries the same band.
    """
    cal = load_calibration(None) if calibration == "auto" else (load_calibration(calibration) if isinstance(calibration, str) else calibration)
    bands = cal.fit.error_bands if cal is not None and cal.fit is not None else []
    if not bands:
        if cal is not None and cal.fit is not None:
            return (NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL,
                    "not validated: the calibration records no out-of-sample error (rows of one model cannot be held out); "
                    "published-defaults band")
        return NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL, "published defaults"
    valid = [b for b in bands if b.rows >= MIN_VALIDATED_ROWS and b.how != "in sample"]
    if not valid:
        why = ("its error bands are in sample (the rows it was fitted on)" if all(b.how == "in sample" for b in bands)
               else f"fewer than {MIN_VALIDATED_ROWS} rows predicted out of sample per (device, engine)")
        return NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL, f"not validated: {why}; published-defaults band"
    for b in bands:
        if b.device == device and b.engine == engine:
            if b not in valid:
                return (NO_CALIBRATION_BAND_REL, NO_CALIBRATION_BAND_REL,
                        f"not validated: calibrated:{device}/{engine} ({b.how}, {b.rows} rows; a validation is out of sample on at least "
                        f"{MIN_VALIDATED_ROWS} rows); published-defaults band")
            return b.ttft_rel, b.tpot_rel, f"calibrated:{device}/{engine} ({b.how}, {b.rows} rows)"
    same = [b for b in valid if b.engine == engine] or valid
    ttft = max(b.ttft_rel for b in same) + UNCALIBRATED_BAND_REL
    tpot = max(b.tpot_rel for b in same) + UNCALIBRATED_BAND_REL
    on = ", ".join(sorted({b.device for b in same}))
    here = sorted({b.engine for b in valid if b.device == device})
    if here:  # the device is calibrated, with other engines: it is this engine that has no band (a review found "uncalibrated device" for the H100)
        return ttft, tpot, (f"uncalibrated engine: {engine} on {device} (calibrated there: {', '.join(here)}); "
                            f"{engine if same[0].engine == engine else 'any engine'} calibrated on {on} + {UNCALIBRATED_BAND_REL:.2f}")
    return ttft, tpot, f"uncalibrated device: {engine if same[0].engine == engine else 'any engine'} calibrated on {on} + {UNCALIBRATED_BAND_REL:.2f}"
