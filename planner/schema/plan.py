"""The plan / result contract: what ``planner solve`` produces and ``planner check`` reads.

A :class:`PlanResult` holds one :class:`ArchitecturePlan` per solved architecture (shared,
disaggregated, hybrid), the :class:`Verdict` comparing them, and a :class:`CapacitySnapshot`
of the capacity-table rows the plans use, so that a plan file can be re-verified without
the solver, the performance model or the instance (``planner check plan.json``).

Units: money in USD per month (``hours_per_month`` of the instance, 730 by default),
rates in requests/s, latency in ms, energy in Wh. Every number is computed from the
capacity tables (:mod:`planner.schema.capacity`) and the solution; see
:mod:`planner.optimize.extract` for the formulas.

Consumers (simulator, studies, reports) should use:

- ``PlanResult.architectures[name].pools`` — the pools to simulate (role, device, tp,
  instances, model group) and ``.routing`` — which share of each (service, bucket) goes
  to which pool;
- ``ArchitecturePlan.costs.terms()`` — cost terms that sum to ``costs.total_usd_per_month``;
- ``PlanResult.verdict`` — winner, margin and reasons.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, computed_field, field_validator, model_validator

from planner.schema.common import Architecture, Role, StrictModel

SolveStatus = Literal["optimal", "feasible", "time_limit", "infeasible", "error", "skipped"]
"""``optimal``: proven within the MIP gap; ``time_limit``: stopped by the time limit with a plan
(never called optimal); ``feasible``: a plan without proof; ``infeasible``: no plan exists;
``skipped``: not solved (e.g. no candidate configuration for this architecture)."""

COST_TERMS: tuple[str, ...] = (
    "equipment_usd_per_month",
    "power_busy_usd_per_month",
    "power_idle_usd_per_month",
    "network_nic_usd_per_month",
    "network_transfer_usd_per_month",
    "ops_pools_usd_per_month",
    "ops_device_types_usd_per_month",
    "ops_devices_usd_per_month",
    "licenses_usd_per_month",
    "cpu_pool_usd_per_month",
    "kv_tier_usd_per_month",
    "tool_state_energy_usd_per_month",
)
"""The cost terms of the objective (DESIGN §1); they sum to ``total_usd_per_month``.
The last three are the tool execution phase (:mod:`planner.agents`; 0 without agents)."""

TOOL_COST_TERMS: tuple[str, ...] = ("cpu_pool_usd_per_month", "kv_tier_usd_per_month", "tool_state_energy_usd_per_month")
"""Cost terms of the tool execution phase, recomputed by :func:`planner.agents.check.tool_phase_costs`."""


class CostBreakdown(StrictModel):
    """Monthly cost by term. The terms in :data:`COST_TERMS` sum to ``total_usd_per_month``.

    ``idle_capacity_usd_per_month`` is an *attribution*, not an extra cost: the part of the
    equipment and idle-power cost that pays for provisioned but unused device time at mean
    load. It is already inside the terms and is never added to the total.
    """

    equipment_usd_per_month: float
    """Rental, or purchase annuitised at the cost of capital, for every provisioned device."""
    power_busy_usd_per_month: float
    """Busy energy (``energy_j_per_request`` at mean rate) x PUE x electricity price."""
    power_idle_usd_per_month: float
    """Idle power (device + host share) on provisioned-but-unused device time x PUE x price."""
    network_nic_usd_per_month: float
    """NIC/port/optics share for every device in a pool that sends or receives KV."""
    network_transfer_usd_per_month: float
    """KV bytes moved prefill -> decode at mean rate x price per GB."""
    ops_pools_usd_per_month: float
    """Fixed operations per distinct pool."""
    ops_device_types_usd_per_month: float
    """Fixed cost per distinct device type."""
    ops_devices_usd_per_month: float
    """Per-device operations."""
    licenses_usd_per_month: float
    """Per-device software licences."""
    cpu_pool_usd_per_month: float = 0.0
    """CPU pool for tool orchestration and tokenisation (and the KV tier when it lives in its
    memory): equipment, power (idle on every server, busy on the used core share, x PUE),
    per-server operations and licences, and the per-pool operations cost."""
    kv_tier_usd_per_month: float = 0.0
    """Priced host-memory / storage tier holding offloaded KV during tool waits (GB x USD/GB-month)."""
    tool_state_energy_usd_per_month: float = 0.0
    """Busy-minus-idle energy of KV reloads and recomputes on GPU pools (their idle power is
    already in ``power_idle``), x PUE x electricity price."""
    total_usd_per_month: float
    idle_capacity_usd_per_month: float = 0.0
    """Attribution (already inside equipment and idle power): cost of unused device time at mean load."""

    def terms(self) -> dict[str, float]:
        return {t: float(getattr(self, t)) for t in COST_TERMS}


class PoolPlan(StrictModel):
    """One pool: ``instances`` replicas of a model on ``tp`` devices each, serving one role."""

    name: str
    """``{role}:{device}/tp{tp}:{model}``, the key used in routing and constraint names."""
    role: Role
    device: str
    tp: int
    """Devices per instance (the TP degree; for an expert-parallel replica its ``dp x tp`` GPUs)."""
    config: str
    """``{device}/tp{tp}``, or ``{device}/tp{t}-ep{e}-dp{d}`` for an expert-parallel replica."""
    parallelism: str = ""
    """Parallelism of one instance: ``tp4``, or ``tp1·ep32·dp32`` (attention TP, expert parallelism,
    data-parallel attention ranks; :class:`planner.perf.moe.Parallelism`)."""
    model: str
    """Model group served by the pool (one set of weights per instance)."""
    instances: int
    devices: int
    """``instances x tp``."""
    redundancy: int
    """Instances the pool can lose and still carry peak load (N+k)."""
    busy_instances_mean: float
    """Instance-seconds of work per second at mean rate (``sum lambda_mean w tau x``)."""
    busy_instances_peak: float
    utilization_mean: float
    """``busy_instances_mean / instances``."""
    utilization_peak: float
    utilization_cap: float
    """Largest peak utilisation the latency targets allow (effective, over what is routed here)."""
    kv_bytes_peak: float = 0.0
    """KV bytes resident at peak (decode/unified)."""
    kv_capacity_bytes: float = 0.0
    """KV bytes the pool can hold with ``instances - redundancy`` instances."""
    sends_kv: bool = False
    """Pool takes part in prefill -> decode KV transfer (pays NICs)."""
    cost_usd_per_month: float = 0.0
    """Cost attributable to this pool (equipment, power, NIC, per-device ops and licences, pool ops)."""


class RoutingShare(StrictModel):
    """Share of a (service, bucket)'s requests served by a pool in one phase."""

    service: str
    bucket: str
    role: Role
    config: str
    pool: str
    share: float
    """In [0, 1]; shares of one (service, bucket, phase) sum to 1."""
    rate_peak_per_s: float
    rate_mean_per_s: float


E2E_MISS = "E2E target in simulation"
"""How the peak simulation words an E2E miss in its findings (:func:`planner.verify._e2e_check`), the
only record of it: :mod:`planner.optimize.check` reads ``SimulationCheck.met`` against it."""


def stat_label(quantile: float | None) -> str:
    """``p99`` for a quantile level of 0.99, ``mean`` for ``None`` (a mean target)."""
    return "mean" if quantile is None else f"p{quantile * 100:g}"


def share_label(share: float) -> str:
    """A share as a percentage for a reader: two significant digits below 10 % (``0.021 %``, ``1 %``, ``12.5 %``),
    ``< 0.001 %`` for a positive share below that, ``0 %`` for none."""
    p = 100.0 * share
    if p <= 0:
        return "0 %"
    if p < 0.001:
        return "< 0.001 %"
    return f"{p:.2g} %" if p < 10 else f"{p:.3g} %"


def token_metric_label(metrics: Any) -> str:
    """Column label for per-token latency: ``TPOT`` or ``ITL`` when every row holds that metric, else
    ``TPOT/ITL`` (each cell then names its own)."""
    names = {str(m).upper() for m in metrics}
    return names.pop() if len(names) == 1 else "TPOT/ITL"


class LatencyPrediction(StrictModel):
    """Predicted latency quantiles of one service at peak against its targets."""

    service: str
    ttft_quantile: float
    ttft_target_ms: float
    ttft_predicted_ms: float
    """Worst bucket: service time of the operating point + queueing wait quantile at peak."""
    tpot_quantile: float | None
    """Quantile level of the per-token target (``None``: a mean target)."""
    tpot_target_ms: float
    tpot_predicted_ms: float
    """Worst bucket: the per-token metric (``token_metric``) of the decode / unified operating point."""
    ttft_met: bool
    tpot_met: bool
    method: str = ""
    """How the queueing wait was estimated (e.g. ``erlang-c (M/M/c), Allen-Cunneen CV correction``)."""
    token_metric: Literal["tpot", "itl"] = "tpot"
    """Which per-token metric the ``tpot_*`` fields hold: ``tpot`` (per request, (E2E − TTFT)/(output − 1))
    or ``itl`` (each token gap); the service's TPOT target when it sets one, else its ITL target."""
    ttft_added_ms: float = 0.0
    """Of ``ttft_predicted_ms``, the KV reload / recompute time after tool waits added to the pools' figure
    (:func:`planner.agents.extract.adjust_latency`; 0 without a tool phase that offloads or recomputes)."""

    @field_validator("ttft_target_ms", "tpot_target_ms", mode="before")
    @classmethod
    def _unset_target_is_inf(cls, v: Any) -> Any:
        """JSON writes an unset target (``inf``) as ``null``: read it back as ``inf``."""
        return math.inf if v is None else v


class SolverInfo(StrictModel):
    solver: str = "highs"
    status: SolveStatus
    termination: str = ""
    """The solver's own termination condition, verbatim."""
    objective_usd_per_month: float | None = None
    bound_usd_per_month: float | None = None
    gap: float | None = None
    """Relative MIP gap ``(objective - bound) / objective`` at termination."""
    time_s: float = 0.0
    """Solver wall time."""
    build_s: float = 0.0
    extract_s: float = 0.0
    rounds: int = 1
    """Solve rounds (the latency check may tighten caps and re-solve)."""
    time_limit_s: float | None = None
    mip_gap: float | None = None
    variables: int = 0
    constraints: int = 0


class BindingConstraint(StrictModel):
    """A constraint at (or within 1e-6 relative of) its bound in the plan."""

    name: str
    """Name by the constraint grammar, e.g. ``load[decode:h100-sxm/tp2:llama-3.1-70b@bf16]``."""
    kind: str
    """``load``, ``kv_memory``, ``procurement``, ``budget``, ``integrality`` ..."""
    detail: str = ""


class DiagnosisItem(StrictModel):
    service: str
    bucket: str
    constraint: str
    message: str
    fix: str


class ToolPolicyCost(StrictModel):
    """What one KV policy would cost for all waits of one (service, tool), at the plan's marginal prices."""

    policy: Literal["hold", "offload", "recompute"]
    usd_per_month: float | None
    """``None`` when the policy is not allowed or not feasible (see ``reason``)."""
    reason: str = ""


class ToolPhaseRow(StrictModel):
    """One (service, tool class): the wait, the KV it strands and the policy chosen."""

    service: str
    tool: str
    calls_per_request: float
    """Calls of this tool per LLM call."""
    calls_per_s_peak: float
    latency_mean_ms: float
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p99_ms: float
    timeout_share: float
    retry_share: float
    error_share: float
    wait_mean_s: float
    """Mean wait per call with retries: ``mean x (1 + retry_share)``."""
    kv_bytes_per_session: float
    """KV of the context a waiting session holds (bucket means, request-weighted)."""
    sessions_in_wait_mean: float
    """Little's law at peak: ``rate_peak x calls_per_request x wait_mean``."""
    sessions_in_wait_peak: float
    """The quantile planned for (Poisson / M/G/∞ at the TTFT quantile, or the mean)."""
    reload_ms: float
    """KV reload time added to the next turn's TTFT when offloaded (routed pools, request-weighted)."""
    recompute_ms: float
    """Extra prefill time of the next turn when the KV is dropped and recomputed."""
    hold_share: float
    offload_share: float
    recompute_share: float
    policy: str
    """The chosen policy (``mixed: ...`` when shares are split)."""
    breakeven_wait_s: float | None = None
    """Wait above which offloading is cheaper than holding, at the plan's prices (None: never)."""
    alternatives: list[ToolPolicyCost] = []
    cpu_cores_peak: float = 0.0
    """CPU cores this tool's calls keep busy at peak (with retries)."""


class CpuPoolPlan(StrictModel):
    """The CPU pool: servers for tool orchestration, tokenisation and (optionally) the KV tier."""

    server: str
    instances: int
    cores_per_server: int
    memory_gb_per_server: float
    cores_needed_peak: float
    utilization_peak: float
    utilization_cap: float
    kv_tier_gb: float = 0.0
    """KV tier capacity hosted in this pool's memory."""
    redundancy: int = 0
    equipment_usd_per_server_hour: float = 0.0
    cost_usd_per_month: float = 0.0


class ToolPhasePlan(StrictModel):
    """The tool execution phase of a plan (DESIGN §5): per-tool numbers, CPU pool, KV tier."""

    tools: list[ToolPhaseRow] = []
    cpu_pools: list[CpuPoolPlan] = []
    kv_tier_gb: float = 0.0
    kv_tier_usd_per_gb_month: float | None = None
    """``None``: the tier lives in the CPU pool's memory (its cost is in the CPU pool)."""
    kv_tier_location: str = ""
    cpu_cores_peak: float = 0.0
    """CPU cores needed at peak over every tool and tokenisation."""
    tokenizer_cores_peak: float = 0.0
    statements: list[str] = []
    """Plain-language findings (e.g. tool waiting dominates: more accelerators would not help)."""
    method: str = ""
    inputs: dict[str, Any] = {}
    """Scalars needed to re-verify the tool-phase cost terms without the solver."""


SimMs = float | None
"""A simulated or predicted latency (ms) or share; ``None`` when it is unbounded or not measurable
(requests that never finish, an overloaded pool, too few samples for the interval's upper end)."""


class SimulatedService(StrictModel):
    """One service at peak in the discrete-event check (:mod:`planner.verify`), ms.

    ``*_sim_ms`` is the simulated quantile at the SLO's quantile over all the service's
    requests (what the SLO is about), with a ``ci_level`` confidence interval (``*_ci_low_ms``, ``*_ci_high_ms``):
    the wider of the order statistics' and, for TTFT and TPOT, the sectioning one (:mod:`planner.verify`, *Size*:
    the measured window cut in ten by arrival, which counts the correlation of a burst's waits). ``*_analytic_ms`` is the plan's
    prediction, which is for the worst bucket; it is compared with the simulated quantile
    of that worst bucket (``*_sim_worst_bucket_ms``): ``*_disagreement`` = sim / analytic − 1.
    """

    service: str
    requests: int
    """Measured requests that completed (after the warm-up)."""
    unfinished: int = 0
    """Measured requests still queued or running when the run ended, or rejected."""
    ttft_quantile: float
    ttft_target_ms: float
    ttft_p50_ms: SimMs
    ttft_p90_ms: SimMs
    ttft_p99_ms: SimMs
    ttft_sim_ms: SimMs
    ttft_ci_low_ms: SimMs
    ttft_ci_high_ms: SimMs
    ttft_analytic_ms: SimMs
    ttft_sim_worst_bucket_ms: SimMs
    ttft_worst_bucket: str = ""
    ttft_disagreement: float | None = None
    tpot_quantile: float | None
    """Quantile level of the per-token target (``None``: a mean target, compared with the simulated mean)."""
    tpot_target_ms: float
    tpot_p50_ms: SimMs
    tpot_p90_ms: SimMs
    tpot_p99_ms: SimMs
    tpot_sim_ms: SimMs
    tpot_ci_low_ms: SimMs
    tpot_ci_high_ms: SimMs
    tpot_analytic_ms: SimMs
    tpot_sim_worst_bucket_ms: SimMs
    tpot_worst_bucket: str = ""
    tpot_disagreement: float | None = None
    ttft_met: bool
    tpot_met: bool
    miss_pool: str | None = None
    """The pool that makes the service miss (largest simulated wait; for TPOT its decode pool)."""
    miss_ms: SimMs = 0.0
    """Simulated quantile minus target, ms (worst of TTFT and TPOT relative to the target; 0 when met)."""
    miss_share: SimMs = 0.0
    """``miss_ms / target``."""
    token_metric: Literal["tpot", "itl"] = "tpot"
    """Which per-token metric the ``tpot_*`` fields hold (as :attr:`LatencyPrediction.token_metric`)."""
    ttft_over_target_share: float | None = None
    """Share of the service's measured requests whose TTFT exceeded the target (unfinished ones count as over):
    what a ``q``-quantile target bounds by ``1 − q`` over the service's requests, every bucket's length mix together
    (:mod:`planner.workload.buckets` item 2). ``None``: a mean target, or a plan written before it was recorded."""
    tpot_over_target_share: float | None = None
    """The same for the per-token metric of ``token_metric`` (per request for TPOT, per token gap for ITL)."""

    def over_target_text(self) -> str:
        """The simulated shares over each quantile target against the ``1 − q`` they allow, as every report
        shows them: ``"TTFT 0.58 % of 1 % · ITL 0 % of 1 %"``; ``"–"`` where none is recorded (mean targets,
        plans written before)."""
        parts = []
        for label, share, q in (("TTFT", self.ttft_over_target_share, self.ttft_quantile),
                                (self.token_metric.upper(), self.tpot_over_target_share, self.tpot_quantile)):
            if share is not None and q is not None and 0.0 < q < 1.0:
                parts.append(f"{label} {share_label(share)} of {share_label(1.0 - q)}")
        return " · ".join(parts) or "–"

    @field_validator("ttft_target_ms", "tpot_target_ms", mode="before")
    @classmethod
    def _unset_target_is_inf(cls, v: Any) -> Any:
        """JSON writes an unset target (``inf``) as ``null``: read it back as ``inf``."""
        return math.inf if v is None else v


UTILIZATION_NOTE = ("Utilisation planned: the share of what the pool's instances serve at the operating point's batch "
                    "within the targets. Simulated: a prefill pool's busy time; a decode pool's mean batch over its batch "
                    "limit; a unified pool's larger of that and its chunked-prefill lane's busy time. The batch that "
                    "arrives runs faster steps than the full one, so a decode or unified pool sized by its per-token "
                    "target shows a lower simulated figure while its latency is at the target.")
"""What the simulated utilisation beside the planned one is (:attr:`SimulatedPool.utilization_sim`, :attr:`planner.simulate.results.PoolResult.plan_comparable_utilization`): under
the HTML report's simulated pools and `planner simulate`'s pool table."""


class SimulatedPool(StrictModel):
    """One pool at peak in the discrete-event check: simulated against analytic wait quantile."""

    pool: str
    role: str
    instances: int
    simulated_batch: int = 1
    """Batch limit the simulator used (decode/unified; :mod:`planner.simulate.adapter`)."""
    utilization_plan: float
    utilization_sim: SimMs
    """Prefill: busy instance-time share; decode: mean batch / simulated batch (the capacity-preserving batch makes it
    comparable with ``utilization_plan``); unified: the larger of that and the share of instance-time its lane runs
    prompt chunks (:attr:`planner.simulate.results.PoolResult.plan_comparable_utilization`)."""
    quantile: float
    wait_analytic_ms: SimMs
    """:func:`planner.pool_latency.predicted_pool_quantiles` (G/G/c, Allen–Cunneen)."""
    wait_sim_ms: SimMs
    wait_ci_low_ms: SimMs
    wait_ci_high_ms: SimMs
    preemptions: int = 0
    max_queue: int = 0


class SimulationCheck(StrictModel):
    """The plan simulated at its peak rate (seeded, bounded number of requests): :mod:`planner.verify`."""

    load: str = "peak"
    seed: int
    duration_s: float
    """Simulated seconds of arrivals (including the warm-up)."""
    warmup_s: float
    requests: int
    """Requests generated (including the warm-up)."""
    measured_requests: int
    wall_s: float
    ci_level: float
    """Confidence level of the quantile intervals (normal approximation to the binomial order statistic; Student's t
    over the sections for TTFT and TPOT, the wider of the two)."""
    met: bool
    """Every service meets its TTFT and TPOT targets at the simulated quantile."""
    services: list[SimulatedService] = []
    pools: list[SimulatedPool] = []
    findings: list[str] = []
    """Plain-language misses and analytic/simulated disagreements above the tolerance."""
    method: str = ""


class PoolEnergy(StrictModel):
    """Facility energy of one pool per month at mean load (x PUE), split by what the devices do."""

    pool: str
    role: str
    """Phase the pool serves: ``prefill``, ``decode`` or ``unified`` (both)."""
    busy_kwh_per_month: float
    """Requests' device energy (``energy_j_per_request``, :mod:`planner.perf.power`) + host share while busy."""
    idle_kwh_per_month: float
    """Provisioned-but-unused device time at idle (device + host) power."""
    wh_per_1k_tokens: float | None = None
    """``(busy + idle) / tokens of the plan x 1e6``: the pool's share of the plan's Wh per 1k tokens."""


class EnergyReport(StrictModel):
    """Where a plan's facility energy goes, and its emissions when a grid carbon intensity is given.
    ``busy + idle + tool_phase = facility_kwh_per_month`` (the energy behind ``energy_wh_per_1k_tokens``)."""

    facility_kwh_per_month: float
    busy_kwh_per_month: float
    idle_kwh_per_month: float
    """Provisioned-but-unused device time (device idle + host power, x PUE)."""
    tool_phase_kwh_per_month: float = 0.0
    """CPU pool and KV reloads/recomputes of the tool phase (agentic services)."""
    pools: list[PoolEnergy] = []
    carbon_g_per_kwh: float | None = None
    """Grid carbon intensity of the site (``costs.carbon_g_per_kwh``); ``None``: not given."""
    emissions_kg_per_month: float | None = None
    """``facility_kwh_per_month x carbon_g_per_kwh / 1000``."""
    emissions_g_per_million_tokens: float | None = None


class ArchitecturePlan(StrictModel):
    """The optimal (or best found) plan for one architecture."""

    architecture: Architecture
    feasible: bool
    """The solver found a plan (pools, routing, costs). Whether that plan meets its latency targets is
    :attr:`meets_targets`: a feasible plan can still miss them (the verdict then ranks it after plans that meet)."""
    pools: list[PoolPlan] = []
    routing: list[RoutingShare] = []
    latency: list[LatencyPrediction] = []
    costs: CostBreakdown | None = None
    tokens_per_month: float = 0.0
    """Input + output tokens served per month at mean rate."""
    usd_per_million_tokens: float | None = None
    energy_wh_per_1k_tokens: float | None = None
    """Facility energy (busy + idle, x PUE) per 1,000 tokens (input + output)."""
    power_kw_mean: float = 0.0
    """Facility power at mean load (x PUE)."""
    solver: SolverInfo
    binding: list[BindingConstraint] = []
    diagnosis: list[DiagnosisItem] = []
    """Why the architecture is infeasible (empty when feasible)."""
    tool_phase: ToolPhasePlan | None = None
    """Tool execution phase (agentic services); ``None`` when the instance has none."""
    simulation: SimulationCheck | None = None
    """Discrete-event check at peak (``options.verify``); ``None`` when not run."""
    energy: EnergyReport | None = None
    """Facility energy by pool and phase, idle energy, emissions (:mod:`planner.optimize.energy_report`)."""

    @model_validator(mode="before")
    @classmethod
    def _derived_fields_are_not_input(cls, data: Any) -> Any:
        """``meets_targets`` is written to plan.json but always recomputed on reading (an edited value is ignored)."""
        if isinstance(data, dict) and "meets_targets" in data:
            data = {k: v for k, v in data.items() if k != "meets_targets"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def meets_targets(self) -> bool:
        """A feasible plan whose every service meets its TTFT and per-token targets as predicted and, when it was
        simulated at peak, in the simulation (as :func:`planner.optimize.verdict.meets_targets`)."""
        return (self.feasible and all(lp.ttft_met and lp.tpot_met for lp in self.latency)
                and (self.simulation is None or self.simulation.met))


ConfidenceDimension = Literal["prefill_time", "decode_step_time", "traffic", "bucket_resolution"]


class WinnerChange(StrictModel):
    """One place along a confidence dimension where the winner changes (:mod:`planner.optimize.confidence`):
    ``winner_low`` wins at multiplier ``low``, ``winner_high`` at ``high`` (re-solves), ``high / low − 1``
    at most the search's precision."""

    low: float
    high: float
    winner_low: str
    winner_high: str


class VerdictFlip(StrictModel):
    """The smallest change along one dimension that flips the verdict (:mod:`planner.optimize.confidence`)."""

    dimension: ConfidenceDimension
    slower_or_more: float | None = None
    """Smallest multiplier above 1 at which another architecture wins (prefill time, decode step time
    or traffic ×m); ``None`` when none up to ``searched_high``. For ``bucket_resolution``: the first
    bucket count tried that flips it."""
    faster_or_less: float | None = None
    """Largest multiplier below 1 at which another architecture wins; ``None`` when none down to ``searched_low``."""
    winner_after: str | None = None
    """Who wins past the nearest flip."""
    searched_low: float = 1.0
    searched_high: float = 1.0
    precision: float = 0.0
    """Relative width of the bisection bracket around a flip (the multiplier is known to ±this share)."""
    within_error: bool = False
    """A flip lies inside the performance model's error band (perf dimensions only)."""
    note: str = ""
    changes: list[WinnerChange] = []
    """Every change of winner found inside ``searched_low``–``searched_high``, in increasing multiplier
    (not only the nearest: the winner can flip and flip back). Empty in plans written before it was recorded."""


class ResolutionStep(StrictModel):
    """One bucket count tried by ``planner solve --resolution auto`` (:mod:`planner.resolution`)."""

    buckets: dict[str, int]
    """Length buckets per service whose traffic is a log."""
    winner: str | None
    winner_usd_per_month: float | None = None
    totals_usd_per_month: dict[str, float] = {}
    """Per feasible architecture (analytic check only, no peak simulation)."""


class VerdictConfidence(StrictModel):
    """How robust the verdict is: the smallest change that flips it, per dimension (issue 13, item 7)."""

    robust: bool | None = None
    """True when no flip of prefill or decode time lies within the error band; ``None`` when not
    assessed (fewer than two architectures meet their targets)."""
    summary: str
    """One line: "robust: ..." or "near thing: flips if prefill is 9 % slower"."""
    error_band: float = 0.25
    """Relative error of the performance model used as the band (± share)."""
    error_band_source: str = ""
    flips: list[VerdictFlip] = []
    method: str = ""
    buckets: dict[str, int] = {}
    """The resolution used: length buckets per service."""
    resolution: list[ResolutionStep] = []
    """Bucket counts tried when the resolution was chosen adaptively (``--resolution auto``), in order, or, at a
    fixed resolution with ``--confidence exact``, the plan's own counts then the finer nested counts checked
    (:func:`planner.resolution.check_resolution`)."""


class Verdict(StrictModel):
    """Which architecture wins, by how much, and why."""

    winner: Architecture | None
    """``None`` when no architecture is feasible."""
    runner_up: Architecture | None = None
    margin_usd_per_month: float = 0.0
    """Runner-up total minus winner total (0 when only one is feasible)."""
    margin_usd_per_million_tokens: float = 0.0
    margin_share: float = 0.0
    """Margin as a share of the runner-up's total."""
    term_differences_usd_per_month: dict[str, float] = {}
    """Per cost term: runner-up minus winner (positive = the winner is cheaper on that term)."""
    reasons: list[str] = []
    """Plain-language reasons built from the numbers; when shared wins the first says so."""
    proven: bool = False
    """Both plans proven optimal within the gap (otherwise the verdict may change with more time)."""
    tie_rule: str | None = None
    """Set when winner and runner-up tie on cost (within ``planner.optimize.verdict.TIE_REL_TOL`` of
    the total): the rule that named the winner (fewer devices, fewer pools, simpler architecture)."""
    confidence: VerdictConfidence | None = None
    """How robust the verdict is (:mod:`planner.optimize.confidence`); ``None`` when not assessed."""


_NUMERIC_SUFFIXES = ("_ms", "_s", "_rep", "_mean", "_tokens", "_bytes", "_request", "_coef", "_quantile", "_cv", "_w",
                     "_hour", "_month", "_share", "_whole_log", "_batch", "_step")
_NUMERIC_NAMES = frozenset({"tp", "d", "rho", "weight", "procurement_limit"})


def _numeric_column(name: str) -> bool:
    """Capacity-table columns that hold numbers (units in names: ``_ms``, ``_per_s``, ``_w``, ...)."""
    return name in _NUMERIC_NAMES or name.endswith(_NUMERIC_SUFFIXES)


def _json_rows(raw: object, width: int) -> list[list[float]] | None:
    """A JSON table cell (``length_mix``, a burst table) as its rows: ``[]`` for ``""``; the rows when ``raw`` is JSON
    text of a list of rows of ``width`` finite non-negative numbers (not true/false); ``None`` otherwise (not text, not
    JSON, nested past the parser's depth, another shape)."""
    import json

    if raw == "":
        return []
    if not isinstance(raw, str):
        return None
    try:
        rows = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == width and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in r)
            for r in rows):
        return None
    return rows


class CapacitySnapshot(StrictModel):
    """The capacity-table rows a plan uses (records of the tidy frames) and the cost scalars."""

    demand: list[dict[str, Any]]
    points: list[dict[str, Any]]
    """Operating points with a positive routing share in some architecture."""
    configs: list[dict[str, Any]]
    costs: dict[str, float]
    redundancy: int = 0
    budget_usd_per_month: float | None = None
    utilization_caps: list[dict[str, Any]] = []
    """Per (service, bucket, role, config): the utilisation cap rho applied."""
    max_utilization: float | None = None
    """``options.max_utilization`` the caps were bounded by (a hard upper bound on every cap, :func:`planner.optimize.check.user_max_utilization`);
    None when the instance sets none, and in plans written before this field (their caps note states it)."""

    @field_validator("demand", "points", "configs")
    @classmethod
    def _numbers_are_numbers(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A numeric column (:func:`_numeric_column`) holds a number or null, never text, true/false or a
        list: the simulator and the cost recomputation would fail on it (fuzzed plans, issue 24)."""
        for i, row in enumerate(rows):
            for k, v in row.items():
                if _numeric_column(k) and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise ValueError(f"row {i}: {k} is {v!r}, not a number")
        return rows

    @field_validator("demand", "points", "configs")
    @classmethod
    def _cells_are_scalars(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every cell is a scalar — text, a number, true/false or null —, never a list or a mapping: the readers group
        and match rows by their key columns (``service``, ``bucket``, ``role``, ``config``), and a mapping there was an
        internal ``TypeError: unhashable type`` in ``planner simulate --plan`` (the plan fuzz campaign of 2026-12-07,
        seed 2035; every cell of the example plans is a scalar)."""
        for i, row in enumerate(rows):
            for k, v in row.items():
                if isinstance(v, (list, dict)):
                    raise ValueError(f"row {i}: {k} is a {type(v).__name__}, not text, a number, true/false or null")
        return rows

    @field_validator("demand")
    @classmethod
    def _length_mix_is_a_mix(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A demand row's ``length_mix`` (:data:`planner.schema.capacity.LENGTH_MIX_COLUMN`) is ``""`` or JSON
        ``[[share, input tokens, output tokens], ...]`` of finite non-negative numbers with some share above 0, as
        :func:`planner.capacity.length_mix` reads it (a fuzzed plan's ``"true"`` failed the simulator's adapter)."""
        from planner.schema.capacity import LENGTH_MIX_COLUMN

        def ok(raw: object) -> bool:
            mix = _json_rows(raw, 3)
            return mix is not None and (raw == "" or (len(mix) >= 1 and any(sub[0] > 0 for sub in mix)))

        for i, row in enumerate(rows):
            if LENGTH_MIX_COLUMN in row and not ok(row[LENGTH_MIX_COLUMN]):
                raise ValueError(f"row {i}: {LENGTH_MIX_COLUMN} is {str(row[LENGTH_MIX_COLUMN])[:60]!r}, not \"\" or a JSON list of "
                                 "[share, input tokens, output tokens] (finite, non-negative)")
        return rows

    @field_validator("demand", "points")
    @classmethod
    def _burst_tables_are_tables(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A row's burst table — ``replay_wait`` (a replayed log's fluid curve), ``renewal_wait`` (the drawn renewal
        stream's) or ``replay_slot_spacing`` (the decode slots' spacings), :mod:`planner.workload.replay_wait` — is ``""``
        or JSON rows of five finite non-negative numbers, at least two: what the readers parse into an array (text that
        is not JSON, nested past the parser's depth or ragged raised in them; found writing the renewal stream's column,
        2026-12-07)."""
        from planner.schema.capacity import BURST_TABLE_COLUMNS

        def ok(raw: object) -> bool:
            table = _json_rows(raw, 5)
            return table is not None and (raw == "" or len(table) >= 2)

        seen: dict[str, bool] = {}  # a service's table repeats on each of its rows: judged once
        for i, row in enumerate(rows):
            for c in BURST_TABLE_COLUMNS:
                if c in row:
                    raw = row[c]
                    key = raw if isinstance(raw, str) else repr(raw)
                    if key not in seen:
                        seen[key] = ok(raw)
                    if not seen[key]:
                        raise ValueError(f"row {i}: {c} is {str(raw)[:60]!r}, not \"\" or JSON rows of five finite, non-negative "
                                         "numbers (planner.workload.replay_wait)")
        return rows

    @field_validator("demand", "points")
    @classmethod
    def _unset_targets(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """JSON writes an unset target (``inf``) and a mean target's level (``nan``) as ``null``:
        read them back as such (``*_target_ms`` -> ``inf``, ``*_quantile`` -> ``nan``)."""
        out = []
        for row in rows:
            if any(v is None and (k.endswith("_target_ms") or k.endswith("_quantile")) for k, v in row.items()):
                row = {k: (math.inf if k.endswith("_target_ms") else math.nan) if v is None and
                       (k.endswith("_target_ms") or k.endswith("_quantile")) else v for k, v in row.items()}
            out.append(row)
        return out


class PlanResult(StrictModel):
    """Everything ``planner solve`` decided, in a form ``planner check`` can re-verify."""

    schema_version: str = "1"
    planner_version: str = ""
    """Version of the planner package that solved it (``planner --version``); empty in older plans."""
    catalog_version: str = ""
    """Version of the catalog it used: ``sha256:<12 hex>`` over the profile and calibration files
    (``planner --version``); empty in older plans."""
    instance: str
    """Instance name."""
    instance_path: str = ""
    """The instance file, absolute (``planner check`` and ``evaluate`` find it from any folder; older plans
    hold the path as typed, tried from the working directory and then beside the plan)."""
    scenario: str | None = None
    overrides: dict[str, Any] = {}
    architectures: dict[str, ArchitecturePlan] = Field(default_factory=dict)
    verdict: Verdict
    capacity: CapacitySnapshot
    notes: list[str] = []
    """Caveats: approximations used, data gaps, time limits."""
