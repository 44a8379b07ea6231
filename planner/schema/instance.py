"""The planning instance: services, candidate hardware, costs, options, scenarios.

An instance is one YAML file (see ``instances/``); ``planner schema`` prints its JSON Schema.
Paths inside it (traces, profiles, measurement files) are relative to the instance file.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from planner.schema.common import (
    MAX_BUCKETS,
    MAX_PEAK_RATE_PER_S,
    MAX_REDUNDANCY,
    Architecture,
    Fraction,
    NonNegFloat,
    PosFloat,
    PosInt,
    Precision,
    Pricing,
    Quantile,
    StrictModel,
    UniqueItems,
    bounded,
)
from planner.schema.encode import EncodePhase
from planner.schema.horizon import Horizon
from planner.schema.speculative import SpeculativeDecoding
from planner.schema.workload import ToolStats

PeakWindow = Literal["1s", "60s", "600s"]
ToolStatePolicy = Literal["hold", "offload", "recompute"]
"""What happens to a session's KV cache while it waits on a tool (DESIGN §5)."""

_UNIQUE = Field(json_schema_extra={"uniqueItems": True})
UniqueIds = Annotated[list[str], UniqueItems, _UNIQUE]
"""Catalog ids, each listed once."""
_RATE_WHY = (f"a service's planned peak is at most {MAX_PEAK_RATE_PER_S:,.0f} req/s (planner.schema.common.MAX_PEAK_RATE_PER_S): "
             "plan one region or cluster and replicate the plan")
RatePerS = Annotated[float, bounded(gt=0, le=MAX_PEAK_RATE_PER_S, why=_RATE_WHY)]
TpDegree = Annotated[int, bounded(gt=0, le=72, why="tensor parallelism runs inside one scale-up domain (8 devices in an HGX/OAM node, "
                                         "at most 72 in an NVL72 rack); degrees above a device's devices_per_node are skipped")]


LatencyStatistic = Literal["quantile", "mean"]


class LatencyTarget(StrictModel):
    """A latency SLO: the ``quantile`` (or, with ``statistic: mean``, the mean) of the metric
    must not exceed ``target_ms``."""

    target_ms: PosFloat
    """Target, milliseconds."""
    quantile: Quantile = 0.99
    """Quantile level in (0, 1), e.g. 0.9 for p90 (not with ``statistic: mean``)."""
    statistic: LatencyStatistic = "quantile"
    """``quantile`` (the ``quantile`` level of the metric's distribution) or ``mean``."""

    @model_validator(mode="after")
    def _one_statistic(self) -> LatencyTarget:
        if self.statistic == "mean" and "quantile" in self.model_fields_set:
            raise ValueError("a mean target has no quantile: drop 'quantile', or drop 'statistic: mean' for a quantile target")
        return self

    @property
    def level(self) -> float | None:
        """The quantile level, or ``None`` for a mean target."""
        return None if self.statistic == "mean" else float(self.quantile)


class SLO(StrictModel):
    """Latency targets of a service: any subset of TTFT, TPOT, ITL and E2E (at least one).

    The metrics are defined as vLLM ``bench serve``, SGLang ``bench_serving`` and DistServe
    define them (DESIGN §3); NVIDIA AIPerf / GenAI-Perf call the per-request TPOT
    ``inter_token_latency``. Before the ITL metric existed, ``tpot`` bounded every token
    interval: that reading is now ``itl``."""

    ttft: LatencyTarget | None = None
    """Time to first token: request arrival to first output token (queueing + prefill + KV
    transfer + first decode step); its quantile is taken over requests."""
    tpot: LatencyTarget | None = None
    """Time per output token, per request: (E2E - TTFT) / (output tokens - 1), the mean of the
    request's own token gaps; its quantile is taken over requests (one-token outputs have none)."""
    itl: LatencyTarget | None = None
    """Inter-token latency: each gap between consecutive output tokens; its quantile is taken
    over all gaps of all requests (a chunked-prefill step that lengthens a gap shows here)."""
    e2e: LatencyTarget | None = None
    """End-to-end latency: request arrival to last output token; quantile over requests."""

    @model_validator(mode="after")
    def _some_target(self) -> SLO:
        if self.ttft is None and self.tpot is None and self.itl is None and self.e2e is None:
            raise ValueError("give at least one latency target: ttft, tpot (per request), itl (per token gap) or e2e")
        if self.ttft is not None and self.ttft.statistic == "mean":
            raise ValueError("ttft: a mean TTFT target is not supported (the queueing check sizes pools for a wait "
                             "quantile); give a quantile, e.g. {quantile: 0.5, target_ms: ...} for the median")
        return self

    @property
    def token_metric(self) -> Literal["tpot", "itl"]:
        """The per-token metric reported and simulated for the service: ``tpot`` when set, else ``itl``."""
        return "itl" if self.tpot is None and self.itl is not None else "tpot"

    def table_columns(self) -> dict[str, Any]:
        """The demand-table columns of these targets (:mod:`planner.schema.capacity`):
        ``<metric>_quantile`` (``nan`` for a mean target) and ``<metric>_target_ms`` (``inf``
        when not set) for ttft, tpot, itl, e2e, and ``token_metric``."""
        out: dict[str, Any] = {}
        for name in ("ttft", "tpot", "itl", "e2e"):
            t: LatencyTarget | None = getattr(self, name)
            out[f"{name}_quantile"] = 0.99 if t is None else (math.nan if t.statistic == "mean" else float(t.quantile))
            out[f"{name}_target_ms"] = math.inf if t is None else float(t.target_ms)
        out["token_metric"] = self.token_metric
        return out


class ManualBucket(StrictModel):
    """A length bucket given by hand (traffic without a log)."""

    input_tokens: PosInt
    output_tokens: PosInt
    weight: Fraction
    cached_prefix_share: Fraction = 0.0


class Traffic(StrictModel):
    """Where a service's traffic comes from: a request log, a workload profile, or a rate.

    One of ``trace``, ``profile`` or ``rate_per_s`` (with ``lengths``) is given; or ``trace``
    with ``rate_per_s``: the log's lengths and burstiness, scaled to that mean rate (the log's
    mean and peak rates are both multiplied by ``rate_per_s / log mean rate``).
    """

    trace: str | None = None
    """Request log, characterised at load (path relative to the instance file)."""
    format: str | None = None
    """Log format (``azure``, ``mooncake``, ``lengths``, ``tracelab``, ``servegen``, ``generic``); auto-detected if absent."""
    columns: dict[str, str] = {}
    """Column mapping for the generic reader: time, input, output, service, session."""
    service_column_value: str | None = None
    """When the log holds several services: the value of the service column to keep."""
    profile: str | None = None
    """A workload profile YAML written by ``planner characterize`` (relative path)."""
    rate_per_s: RatePerS | None = None
    """Mean request rate, requests/s: the traffic without a log (with ``lengths``), or, with
    ``trace``, the rate the log is scaled to (its shape kept)."""
    peak_rate_per_s: RatePerS | None = None
    """Peak request rate to plan for; defaults to the log's peak over ``peak_window``."""
    peak_window: PeakWindow = "60s"
    """Window over which the log's peak rate is taken: the busiest window of that length at any
    start (sliding), not windows aligned to the first arrival."""
    interarrival_cv: Annotated[float, bounded(ge=0, le=100, why="a CV of inter-arrival times above 100 is not a traffic pattern "
                                              "(the bursty Azure code trace has 4.7)")] | None = None
    """Burstiness override (coefficient of variation of inter-arrival times)."""
    lengths: list[ManualBucket] | None = None
    """Length buckets for traffic given by rate."""
    buckets: Annotated[int, bounded(gt=0, le=MAX_BUCKETS, why=f"at most {MAX_BUCKETS}: 4-8 are typical; the solve grows linearly with "
                                   "buckets and a log's buckets beyond that hold too few requests for their representatives")] = 4
    """Number of length buckets when characterising a log."""
    rate_multiplier: Annotated[float, bounded(gt=0, le=1e4, why="a growth factor on the log's rates: above 10,000x the log no longer "
                                         "describes the traffic; give rate_per_s / peak_rate_per_s instead")] = 1.0
    """Scales mean and peak rate (growth scenarios)."""
    input_length_multiplier: Annotated[float, bounded(gt=0, le=1e3, why="scales the log's lengths: 1,000x already puts a "
                                                 "1k-token prompt past every model's context")] = 1.0
    """Scales input lengths (length-mix scenarios)."""
    output_length_multiplier: Annotated[float, bounded(gt=0, le=1e3, why="scales the log's lengths: 1,000x already puts a "
                                                  "1k-token answer past every model's context")] = 1.0
    """Scales output lengths (length-mix scenarios)."""

    @model_validator(mode="after")
    def _one_source(self) -> Traffic:
        given = [k for k in ("trace", "profile", "rate_per_s") if getattr(self, k) is not None]
        if given != ["trace", "rate_per_s"] and len(given) != 1:
            raise ValueError(
                "give exactly one of 'trace' (a request log), 'profile' (a workload profile) "
                f"or 'rate_per_s' (with 'lengths'), or 'trace' with 'rate_per_s' (the log scaled to that rate); got {given or 'none'}"
            )
        rate = self.peak_rate_per_s if self.peak_rate_per_s is not None else self.rate_per_s
        if rate is not None and rate * self.rate_multiplier > MAX_PEAK_RATE_PER_S:
            raise ValueError(
                f"planned peak {rate:g} req/s x rate_multiplier {self.rate_multiplier:g} = {rate * self.rate_multiplier:g} req/s exceeds "
                f"{MAX_PEAK_RATE_PER_S:,.0f} req/s; fix: {_RATE_WHY}")
        if self.trace is not None and self.rate_per_s is not None and self.lengths:
            raise ValueError("'lengths' do not go with 'trace' (the log gives the lengths); drop 'lengths'")
        if self.trace is None and self.rate_per_s is not None and not self.lengths:
            raise ValueError("'rate_per_s' needs 'lengths' (a list of {input_tokens, output_tokens, weight}), or a 'trace' to scale")
        if self.lengths:
            total = sum(b.weight for b in self.lengths)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"'lengths' weights sum to {total:.4f}; they must sum to 1")
        return self


class ToolOverride(StrictModel):
    """Figures for one tool class that the log does not give, and the KV policies it may use."""

    cpu_seconds_per_call: Annotated[float, bounded(ge=0, le=3600, why="at most a core-hour per call: an interactive agent's "
                                                   "tool; longer jobs are batch work outside this plan")] | None = None
    """CPU work per call on the orchestration pool (serialisation, validation, routing), core-seconds."""
    retry_share: Fraction | None = None
    """Share of calls retried once (each retry repeats the wait and the CPU work)."""
    timeout_share: Fraction | None = None
    """Share of calls that hit the tool's timeout (reported)."""
    policies: Annotated[list[ToolStatePolicy], UniqueItems, _UNIQUE] | None = None
    """KV policies allowed while waiting on this tool (default: ``tool_phase.policies``)."""
    source: str = ""
    """Where the figures come from (measurement, assumption and why)."""


class Service(StrictModel):
    """One served model with its SLOs, traffic and (for agents) tool profile."""

    model: str
    """LLM profile: a catalog id (``planner catalog models``), a Hugging Face id the catalog maps
    (``meta-llama/Llama-3.1-8B-Instruct``) or a path to the model's ``config.json``, relative to the
    instance file (``planner/hf_config.py`` derives the profile)."""
    weight_precision: Precision = "bf16"
    """Precision of the served weights: ``bf16`` (default: the precision models are published in),
    ``fp8``, ``fp4`` or ``int8``. Sets the weight bytes every instance holds and the GEMM speed;
    serving a 70B model in fp8 (common on Hopper and MI300) halves its weights against bf16, so
    say which you serve. Left out, the plan notes that bf16 was assumed."""
    kv_precision: Precision | None = None
    """KV-cache precision; defaults to the weight precision (fp4 weights keep fp8 KV)."""
    engine: str = "default"
    """Serving engine whose calibration to use (``trtllm``, ``vllm``, ``sglang`` or ``default``)."""
    speculative: SpeculativeDecoding | None = None
    """Speculative decoding (MTP, EAGLE, draft model, n-gram): offered next to plain decoding for
    disaggregated decode pools; the cheaper point is kept (:mod:`planner.perf.speculative`)."""
    encode: EncodePhase | None = None
    """Encode phase of a multimodal service (vision tower before prefill): inline in the prefill /
    unified pool or in a separate ``encode`` pool, chosen by the MIP (:mod:`planner.perf.encoder`)."""
    slo: SLO
    traffic: Traffic
    tools: dict[str, ToolStats] = {}
    """Tool classes the agent calls between LLM calls (agentic services)."""
    tools_from_trace: bool = False
    """Take the tool profile from the trace (TraceLab agent logs) instead of ``tools``."""
    tool_overrides: dict[str, ToolOverride] = {}
    """Per tool class of the profile (from ``tools`` or the trace): figures the log lacks
    (CPU seconds per call, retry share) and the KV policies allowed. Naming a tool the
    profile does not define is an error."""

    @property
    def kv_precision_resolved(self) -> str:
        if self.kv_precision is not None:
            return self.kv_precision
        return "fp8" if self.weight_precision == "fp4" else self.weight_precision


class DeclaredDevice(StrictModel):
    """A device that is not in the catalog, declared for a measured-capacity study.

    The planner has no performance profile for it (no memory, bandwidth or FLOP/s), so it can
    serve only the (service, bucket) rows a measured capacity file (``planner solve --capacity``)
    gives for it; without one it carries no traffic. Price and power are what it costs.
    """

    name: str = ""
    """Human-readable name, e.g. ``NVIDIA A10G 24GB``."""
    kind: Literal["gpu", "accelerator"] = "gpu"
    rental_usd_per_hour: PosFloat | None = None
    """Rental price per device-hour, USD (needed when ``catalog.pricing`` is ``rent``)."""
    purchase_usd: PosFloat | None = None
    """Purchase price per device, USD (needed when ``catalog.pricing`` is ``buy``)."""
    amortization_years: PosFloat = 4.0
    """Years over which the purchase is amortised."""
    cost_of_capital_rate: Fraction = 0.0
    """Annual cost of capital of the purchase (0 = straight line)."""
    busy_power_w: NonNegFloat | None = None
    """Average power while serving, W, if known (unknown: 0, and the plan says so)."""
    idle_power_w: NonNegFloat | None = None
    """Power while provisioned but idle, W, if known (unknown: 0, and the plan says so)."""
    devices_per_node: PosInt = 8
    """Devices in one scale-up domain (bounds the tensor-parallel degree)."""
    source: str = Field(min_length=1)
    """Where the price (and power) come from, e.g. ``AWS g5 on-demand, 2024 (Melange §4)``."""


class CatalogSelection(StrictModel):
    """Which hardware profiles are candidates, and how they are paid for."""

    devices: Annotated[UniqueIds, Field(min_length=1)]
    """Candidate device ids for LLM pools (``planner catalog devices``)."""
    cpu_servers: UniqueIds = []
    """Candidate CPU server ids for the tool/orchestration pool."""
    tp_degrees: Annotated[list[TpDegree], UniqueItems, _UNIQUE, Field(min_length=1)] = [1, 2, 4, 8]
    """Tensor-parallel degrees to consider."""
    ep_degrees: Annotated[list[PosInt], UniqueItems, _UNIQUE] | None = None
    """Expert-parallel replica sizes (GPUs per replica, EP = DP x attention TP) considered for MoE
    models (:mod:`planner.perf.moe`): a replica may span nodes (a size above ``devices_per_node`` must
    be a multiple of it). Empty (default): ``planner.perf.moe.DEFAULT_EP_DEGREES`` when a service
    serves a MoE model, none otherwise (dense-only instances keep their TP-only candidates);
    ``[]``: no expert-parallel candidates."""
    attention_tp_degrees: Annotated[list[PosInt], UniqueItems, _UNIQUE, Field(min_length=1)] = [1]
    """Tensor-parallel degree of the attention inside each data-parallel rank of an expert-parallel
    replica (``dp = ep / tp``). Default ``[1]``: pure DP attention, as DeepSeek's and SGLang's
    wide-EP deployments run it."""
    pricing: Pricing = "rent"
    """``rent`` (per device-hour) or ``buy`` (amortised purchase)."""
    device_overrides: dict[str, dict[str, Any]] = {}
    """Per device id: profile fields to override or supply (e.g. a negotiated rental price)."""
    declared_devices: dict[str, DeclaredDevice] = {}
    """Devices not in the catalog, by id, for measured-capacity studies: list the id in
    ``devices`` too; it serves only what ``--capacity`` measures for it."""
    path: str | None = None
    """A folder of your own profiles (``hardware/<id>.yaml``, ``llm/<id>.yaml``), relative to the
    instance file, added beside the shipped catalog; a profile with a shipped id replaces it (with a note)."""


class NetworkCosts(StrictModel):
    """Network for KV transfer between prefill and decode pools and for cross-node TP."""

    nic_usd_per_device_month: NonNegFloat = 40.0
    """Scale-out NIC/port/optics share per device that sends or receives KV, USD/month. Default
    40: an InfiniBand NDR fat tree costs about $1.7–2.3k per GPU in switches and optics before
    NICs (yobitel estimate for 1,024 GPUs / 48 Quantum-2 switches),
    ~$2k over 48 months ≈ $40/month."""
    transfer_usd_per_gb: NonNegFloat = 0.0
    """Cost per GB of KV moved between pools (0 inside one fabric)."""
    kv_link_gb_per_s: PosFloat | None = None
    """KV transfer bandwidth per device; defaults to the device's ``nic_bw_gb_per_s``."""


class Costs(StrictModel):
    """Prices of power, network and operations; device prices come from the profiles."""

    electricity_usd_per_kwh: PosFloat = 0.0806
    """Price of electricity, USD/kWh. Default 0.0806: US average industrial price 2023,
    8.06 ¢/kWh (US EIA, Electric Power Monthly series)."""
    pue: float = Field(default=1.54, ge=1.0, le=3.0)
    """Power usage effectiveness of the facility (1.0 = no overhead). Default 1.54: industry
    average of the Uptime Institute Global Data Center Survey 2025 (1.58 in 2023, 1.56 in 2024);
    new large facilities reach about 1.3."""
    hours_per_month: Annotated[float, bounded(gt=0, le=744, why="a month has at most 744 hours (31 x 24)")] = 730.0
    ops_usd_per_pool_month: NonNegFloat = 1500.0
    """Fixed operations per distinct pool (scheduler, observability, on-call), USD/month.
    Default 1500 — an assumption, not a measurement: about 0.1 of an engineer at a loaded
    $180k/year per pool run. Set your own figure."""
    ops_usd_per_device_type_month: NonNegFloat = 3000.0
    """Fixed cost per distinct device type (toolchain, compiler, spares, support), USD/month.
    Default 3000 — an assumption, not a measurement: about 0.2 of an engineer at a loaded
    $180k/year per accelerator type kept in production. Set your own figure."""
    ops_usd_per_device_month: NonNegFloat = 0.0
    """Added to every device's own ``operations_usd_per_month``."""
    network: NetworkCosts = NetworkCosts()
    amortization_years: PosFloat | None = None
    """Overrides every profile's amortisation period when buying."""
    cost_of_capital_rate: Fraction | None = None
    """Overrides every profile's cost of capital when buying."""
    carbon_g_per_kwh: NonNegFloat | None = None
    """Grid carbon intensity of the site, gCO2e per kWh of facility energy; when set, plans report
    emissions per month and per 1M tokens (not priced into the objective)."""


class SolverOptions(StrictModel):
    time_limit_s: Annotated[float, bounded(gt=0, le=86400, why="at most a day per architecture")] = 60.0
    mip_gap: Annotated[float, bounded(ge=0, le=1, why="a relative gap: 0.01 stops within 1% of the optimum")] = 1e-4
    """Relative MIP gap at which HiGHS stops."""
    threads: Annotated[int, bounded(gt=0, le=256, why="HiGHS threads on this machine")] = 1


class Options(StrictModel):
    architectures: Annotated[list[Architecture], UniqueItems, _UNIQUE, Field(min_length=1)] = ["shared", "disaggregated"]
    """Architectures to solve and compare."""
    redundancy: Annotated[int, bounded(ge=0, le=MAX_REDUNDANCY, why=f"at most {MAX_REDUNDANCY} spare instances per pool (N+k): beyond a "
                                       "handful spares size the plan, not the load; use options.max_utilization for headroom")] = 0
    """Instances each pool can lose and still carry peak load (N+k)."""
    budget_usd_per_month: PosFloat | None = None
    max_utilization: Annotated[float, bounded(ge=0.01, le=1, why="a cap on peak utilisation as a fraction: 0.01 already provisions "
                                              "100x the peak load; write 0.7, not 70")] | None = None
    """Cap on pool utilisation at peak; by default it comes from the queueing model."""
    shared_single_device_type: bool = True
    """Shared architecture: one device type for the whole pool."""
    verify: bool = True
    """Check tail latency after solving and tighten caps where a quantile is missed."""
    on_bad_row: Literal["error", "skip"] = "error"
    """Rows of a service's request log (``traffic.trace``) that cannot be used: stop with an error naming them
    (``error``), or drop them and say how many in the plan's notes (``skip``; ``planner solve --on-bad-row skip``)."""
    solver: SolverOptions = SolverOptions()


class KVTierOptions(StrictModel):
    """The host-memory (or storage) tier that offloaded KV waits in during tool calls.

    Either ``usd_per_gb_month`` is given (host DRAM next to the GPUs, reached over PCIe, or a
    priced storage tier), or the tier lives in the memory of the CPU pool
    (``catalog.cpu_servers``, reached over the GPUs' NIC) and its cost is inside the CPU pool.
    """

    usd_per_gb_month: NonNegFloat | None = None
    """Price of one GB of tier capacity per month; needs ``source``."""
    source: str = ""
    """Where ``usd_per_gb_month`` / ``reload_gb_per_s`` come from."""
    reload_gb_per_s: PosFloat | None = None
    """Tier read bandwidth per accelerator, GB/s (a storage tier); default: PCIe (priced
    host tier) or min(PCIe, NIC) (CPU-pool tier) of the device."""
    max_gb: PosFloat | None = None
    """Most tier capacity available, GB."""
    memory_utilization: Fraction = 0.8
    """Share of a CPU server's memory usable for the tier (the rest: OS, orchestration)."""


class ToolPhaseOptions(StrictModel):
    """Tool execution phase: CPU pool, KV policies during tool waits, host-memory tier (DESIGN §5)."""

    policies: Annotated[list[ToolStatePolicy], UniqueItems, _UNIQUE] = ["hold", "offload", "recompute"]
    """KV policies the optimiser may choose between (per service and tool class)."""
    cpu_utilization_cap: Fraction = 0.7
    """Largest peak utilisation of CPU-pool cores (headroom for bursts of tool calls)."""
    tokenizer_cpu_seconds_per_token: Annotated[float, bounded(ge=0, le=0.01, why="tokenisers take ~1e-6 core-seconds per token; "
                                                              "0.01 s is already 10,000x slower")] = 0.0
    """CPU core-seconds to tokenise / detokenise one token (input + output), on the CPU pool."""
    tokenizer_source: str = ""
    """Where ``tokenizer_cpu_seconds_per_token`` comes from."""
    reload_busy_share: Fraction = 1.0
    """Share of a KV reload during which the receiving instance counts as busy (1 = the
    transfer does not overlap compute: conservative)."""
    wait_tail: Literal["ttft_quantile", "mean"] = "ttft_quantile"
    """Sessions in tool wait at peak: ``mean`` (Little's law) or the Poisson (M/G/∞) quantile
    at the service's TTFT quantile level, so that held KV fits at that quantile."""
    kv_tier: KVTierOptions = KVTierOptions()


class Instance(StrictModel):
    """A planning instance."""

    name: str
    description: str = ""
    services: dict[str, Service] = Field(min_length=1)
    catalog: CatalogSelection
    costs: Costs = Costs()
    """Prices of power, network and operations; each field has a sourced default (or a stated
    assumption), listed in the plan's notes when used."""
    options: Options = Options()
    tool_phase: ToolPhaseOptions = ToolPhaseOptions()
    """Tool execution phase (agentic services): used when a service has tools or CPU servers are candidates."""
    calibration: str | None = None
    """Performance calibration file written by ``planner calibrate`` (path relative to the instance
    file); default: the calibration shipped in ``models/calibration/``. The plan records which one
    it used (path and sha256)."""
    horizon: Horizon | None = None
    """Plan over time (``planner horizon``): periods, daily slots, growth, buy / reserve / rent."""
    scenarios: dict[str, dict[str, Any]] = {}
    """Named scenarios: each a mapping of dot-path overrides, e.g. ``services.chat.traffic.rate_multiplier: 1.5``."""
    forecasts: dict[str, str] = {}
    """Forecast distributions for Monte Carlo studies: dot-path -> ``dist:NAME(a,b[,c])``, e.g.
    ``services.chat.traffic.rate_multiplier: dist:growth(0.5,0.2,2)``; ``planner sweep
    --monte-carlo N`` draws them when no ``--set`` gives a distribution (names:
    ``planner sweep --help``)."""

    @field_validator("forecasts")
    @classmethod
    def _check_forecasts(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        from planner.schema.distributions import parse_distribution
        from planner.schema.paths import valid_fields_at

        problems = []
        for path, text in value.items():
            ok, where, valid = valid_fields_at(cls, dict(info.data), path.split("."))
            if not ok:
                problems.append(f"{path!r} is not a field of the instance (at {where}; valid there: {', '.join(valid) or '(none)'})")
                continue
            spec = text.strip()
            try:
                parse_distribution(spec[len("dist:"):] if spec.startswith("dist:") else spec)
            except ValueError as exc:
                problems.append(f"{path}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    def defaults_used(self) -> list[str]:
        """One note per consequential field left at its default: the five cost figures and each
        service's ``weight_precision`` (so a default never goes unnoticed in a plan)."""
        notes = [f"services.{name}.weight_precision not given: bf16 assumed (set fp8/fp4 if that is what you serve)"
                 for name, svc in self.services.items() if "weight_precision" not in svc.model_fields_set]
        costs = self.costs
        given = costs.model_fields_set if "costs" in self.model_fields_set else set()
        net_given = costs.network.model_fields_set if "network" in given else set()
        why = {"electricity_usd_per_kwh": "US EIA industrial average 2023", "pue": "Uptime Institute survey average 2025",
               "ops_usd_per_pool_month": "assumption: ~0.1 engineer per pool", "ops_usd_per_device_type_month": "assumption: ~0.2 engineer per device type"}
        for key, src in why.items():
            if key not in given:
                notes.append(f"costs.{key} not given: default {getattr(costs, key):g} ({src}; see `planner schema`)")
        if "nic_usd_per_device_month" not in net_given:
            notes.append(f"costs.network.nic_usd_per_device_month not given: default {costs.network.nic_usd_per_device_month:g} "
                         "(NDR fabric ~$2k per GPU over 48 months; see `planner schema`)")
        return notes
