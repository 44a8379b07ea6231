"""The capacity-table contract: the only input the optimiser reads (DESIGN §2, §6).

Three tidy DataFrames, built by :mod:`planner.capacity` from the workload and the
performance model, or supplied by a user from measurements:

``demand`` — one row per (service, bucket)::

    service, bucket                 str   keys
    weight                          float share of the service's requests in the bucket
    rate_mean_per_s                 float mean arrival rate of the bucket, requests/s
    rate_peak_per_s                 float peak arrival rate of the bucket (service peak x weight)
    input_tokens_mean               float mean input tokens per request
    output_tokens_mean              float mean output tokens per request
    input_tokens_rep                float conservative representative used for latency
    output_tokens_rep               float
    interarrival_cv                 float burstiness of the service's arrivals at its peak: the inter-arrival
                                          CV inside windows of ``traffic.peak_window`` (the plan already sizes for
                                          the peak rate over that window), or ``traffic.interarrival_cv`` if set
    ttft_quantile, ttft_target_ms   float the service's TTFT target (arrival to first token)
    tpot_quantile, tpot_target_ms   float the service's per-request TPOT target, (E2E - TTFT)/(output - 1)

Latency columns (DESIGN §3 definitions; ``*_target_ms`` is ``inf`` when the service sets no
such target, ``*_quantile`` is ``nan`` for a mean target). Required: the four above. Optional
(:data:`DEMAND_LATENCY_COLUMNS`; a table without them sets no ITL / E2E target)::

    itl_quantile, itl_target_ms     float inter-token latency target: each gap between consecutive tokens
    e2e_quantile, e2e_target_ms     float end-to-end latency target: arrival to last token
    token_metric                    str   'tpot' or 'itl': the per-token metric reported and simulated
                                          (TPOT when the service sets it, else ITL)

``points`` — one row per (service, bucket, role, config) operating point::

    service, bucket, role, config   keys; role in {prefill, decode, unified}; config = f"{device}/tp{tp}"
    device, tp                      str, int
    feasible                        bool  memory fit and SLO met at this operating point
    reason                          str   why not feasible ('' when feasible)
    bound                           str   compute | memory_bandwidth | memory_capacity | communication
    instance_seconds_per_request    float busy instance-time one request consumes (1 / per-instance throughput)
    max_batch                       int   largest concurrent batch (decode/unified), 1 for prefill
    kv_bytes_per_request            float peak KV footprint of one request (decode/unified)
    kv_transfer_bytes_per_request   float KV bytes sent prefill -> decode (prefill role; 0 otherwise)
    energy_j_per_request            float busy energy of all tp devices for one request, J
    ttft_ms                         float predicted TTFT without queueing (prefill/unified)
    tpot_ms                         float predicted per-request TPOT at the operating point (decode/unified), at
                                          the TPOT target's statistic (p99 when no TPOT target is set)
    service_time_cv                 float variability of per-request service time (queueing)
    source                          str   'roofline', 'calibrated:<engine>' or 'measured:<file>'

Optional ``points`` columns (:data:`POINT_OPTIONAL_COLUMNS`; ``nan`` where they do not apply,
e.g. non-unified roles and measured rows; a table without them is valid) — the chunked-prefill
lane of a unified point (:mod:`planner.perf.points`), read by the latency check of mixed
pools (:func:`planner.optimize.extract.lane_wait_quantile_ms`) and the simulator adapter::

    prefill_tokens                  float new prompt tokens the lane prefills per request (input minus cached prefix)
    prefill_tokens_rep              float the same for the bucket's representative prompt (its TTFT's own chunks; a
                                          bucket's prefill_tokens is its length mix's mean, planner.capacity.bucket_work)
    prefill_chunk_tokens            float chunk size q_max the TPOT target allows at the point's batch
    lane_service_ms                 float lane time of one prompt, prefill_tokens / q_max x step_ms
    lane_wait_ms                    float the lane-wait quantile included in ttft_ms (the bucket alone at full load)
    step_ms                         float iteration time with a chunk (= tpot_ms)
    decode_only_step_ms             float iteration time without a chunk
    mean_step_ms                    float mean iteration time at the point (chunk share x step + rest x decode-only)
    itl_ms                          float predicted ITL at the ITL target's statistic (decode: the step; unified:
                                          the chunk iteration when more than 1 - q of gaps carry a chunk)
    e2e_ms                          float predicted E2E (unified: TTFT + (output - 1) x TPOT at the E2E statistic)
    tpot_mean_ms                    float mean per-request TPOT (unified: = mean_step_ms)

Optional ``kv_capacity_bytes`` (:data:`POINT_KV_CAPACITY_COLUMN`): KV bytes one instance holds
(decode/unified; 0 for prefill) from the perf model's memory fit — the figure ``max_batch`` is
derived from. When present the optimiser builds the pool KV constraint and reports each pool's
capacity (:mod:`planner.optimize.prepare`); measured tables may leave it out.

Optional ``demand`` column: ``interarrival_cv_whole_log`` — the CV over the whole log (reported;
it also counts rate changes between windows).

``configs`` — one row per config (device, tp) that appears in ``points``::

    config, device, tp, kind        keys; kind in {gpu, accelerator, cpu}
    equipment_usd_per_device_hour   float rental, or amortised purchase (annuity at cost of capital)
    busy_power_w, idle_power_w      float per device
    host_power_w                    float host share per device
    ops_usd_per_device_month        float profile operations + instance per-device operations
    license_usd_per_device_month    float
    procurement_limit               float max devices of this type (inf = unlimited)
    nic_bw_gb_per_s                 float per device, for KV transfer

Scalars (``CostParams``) carry the instance-wide prices the objective needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd  # imported where used: the schemas load without pandas (issue 27, start-up)

    from planner.schema.agents import AgentTables

DEMAND_COLUMNS: tuple[str, ...] = (
    "service", "bucket", "weight", "rate_mean_per_s", "rate_peak_per_s",
    "input_tokens_mean", "output_tokens_mean", "input_tokens_rep", "output_tokens_rep",
    "interarrival_cv", "ttft_quantile", "ttft_target_ms", "tpot_quantile", "tpot_target_ms",
)
POINT_COLUMNS: tuple[str, ...] = (
    "service", "bucket", "role", "config", "device", "tp", "feasible", "reason", "bound",
    "instance_seconds_per_request", "max_batch", "kv_bytes_per_request",
    "kv_transfer_bytes_per_request", "energy_j_per_request", "ttft_ms", "tpot_ms",
    "service_time_cv", "source",
)
DEMAND_LATENCY_COLUMNS: tuple[str, ...] = ("itl_quantile", "itl_target_ms", "e2e_quantile", "e2e_target_ms", "token_metric")
"""Optional latency columns of ``demand`` (module docstring)."""
POINT_OPTIONAL_COLUMNS: tuple[str, ...] = (
    "prefill_tokens", "prefill_chunk_tokens", "lane_service_ms", "lane_wait_ms", "step_ms",
    "decode_only_step_ms", "mean_step_ms", "itl_ms", "e2e_ms", "tpot_mean_ms", "prefill_tokens_rep",
)
"""Optional unified-lane columns of ``points`` (module docstring); taken from ``OperatingPoint.detail``."""
LENGTH_MIX_COLUMN = "length_mix"
"""Optional column of ``demand``: the bucket's :attr:`planner.schema.workload.LengthBucket.length_mix` as JSON
(``[[share, input, output], ...]``), ``""`` when the bucket has none (:mod:`planner.capacity`)."""
LATENCY_GROUP_COLUMN = "latency_group"
"""Optional column of ``demand``: the bucket's latency group within its service (:func:`planner.workload.buckets.latency_groups`:
the buckets that share one latency representative and one queue in the utilisation caps); absent: each bucket its own."""
INPUT_TAIL_COLUMN = "input_tail_share"
"""Optional column of ``demand``: :attr:`planner.schema.workload.LengthBucket.input_tail_share` (0 when absent)."""
REPLAY_WAIT_COLUMN = "replay_wait"
"""Optional ``demand`` (and points') column: the service's replayed-burst curve as JSON
(:func:`planner.workload.replay_wait.replay_wait_curve`), ``""`` where the peak simulation does not replay a log
(:func:`planner.verify.peak_arrivals_from_instance`)."""
RENEWAL_WAIT_COLUMN = "renewal_wait"
"""Optional ``demand`` (and points') column: the fluid-pool curve of the renewal stream the peak simulation draws where
it replays no log (:func:`planner.workload.replay_wait.renewal_curve`), ``""`` elsewhere; read for shared pools' lanes
only."""
REPLAY_SLOT_COLUMN = "replay_slot_spacing"
"""Optional ``demand`` (and points') column: the service's slot table as JSON
(:func:`planner.workload.replay_wait.replay_slot_table`), ``""`` where the peak simulation does not replay a log (a
decode pool's slot wait under the log's bursts)."""
BURST_TABLE_COLUMNS: tuple[str, ...] = (REPLAY_WAIT_COLUMN, REPLAY_SLOT_COLUMN, RENEWAL_WAIT_COLUMN)
"""The burst tables: JSON rows of five finite non-negative numbers (:mod:`planner.workload.replay_wait`), in the order
the demand frame holds them (:func:`planner.capacity._demand`)."""
TTFT_MIX_COLUMN = "ttft_mix"
"""Optional column of ``points``: a prefill point's sub-bins as JSON ``[[share, ttft_ms], ...]`` (:func:`planner.capacity.mix_work`),
``""`` elsewhere; its TTFT quantile is that of the mix (:mod:`planner.ttft_mixture`)."""
POINT_KV_CAPACITY_COLUMN = "kv_capacity_bytes"
"""Optional column of ``points``: KV bytes one instance holds (module docstring)."""


def quantile_level(x: object) -> float | None:
    """A ``*_quantile`` column value as a level, ``None`` for ``nan`` (a mean target)."""
    v = float(x)  # type: ignore[arg-type]
    return None if math.isnan(v) else v


def latency_targets(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A demand row's latency targets as keyword arguments of
    :func:`planner.perf.operating_point` (``None``: not set; a level of ``None``: the mean)."""
    out: dict[str, Any] = {}
    for name in ("ttft", "tpot", "itl", "e2e"):
        target = float(row.get(f"{name}_target_ms", math.inf))
        out[f"{name}_target_ms"] = target if math.isfinite(target) else None
        level = quantile_level(row.get(f"{name}_quantile", 0.99))
        out[f"{name}_quantile"] = 0.99 if name == "ttft" and level is None else level
    return out


def token_metric(row: Any) -> str:
    """``tpot`` or ``itl``: the per-token metric a demand row reports (``tpot`` if the column is absent)."""
    m = str(row.get("token_metric", "tpot"))
    return m if m in ("tpot", "itl") else "tpot"


CONFIG_COLUMNS: tuple[str, ...] = (
    "config", "device", "tp", "kind", "equipment_usd_per_device_hour", "busy_power_w",
    "idle_power_w", "host_power_w", "ops_usd_per_device_month", "license_usd_per_device_month",
    "procurement_limit", "nic_bw_gb_per_s",
)
CONFIG_PARALLELISM_COLUMN = "parallelism"
"""Optional column of ``configs``: the replica's parallelism label (``tp4``, ``tp1·ep32·dp32``). An
expert-parallel configuration is named ``{device}/tp{t}-ep{e}-dp{d}`` and its ``tp`` column holds the
devices of one replica (``t x d``): every consumer of the table reads ``tp`` as devices per instance."""


def config_devices(config: str) -> tuple[str, int]:
    """``(device, devices per instance)`` of a config name: ``h100-sxm/tp4`` -> 4,
    ``h100-sxm/tp1-ep32-dp32`` -> 32 (``tp x dp``)."""
    device, _, key = config.rpartition("/")
    try:
        parts = {p[:2]: int(p[2:]) for p in key.split("-")}
        return device, parts["tp"] * parts.get("dp", 1)
    except (KeyError, ValueError):
        return device, -1  # not a planner config name (the caller reports the mismatch)


@dataclass(frozen=True)
class CostParams:
    """Instance-wide prices used by the objective (copied from ``Instance.costs``)."""

    electricity_usd_per_kwh: float
    pue: float
    hours_per_month: float
    ops_usd_per_pool_month: float
    ops_usd_per_device_type_month: float
    nic_usd_per_device_month: float
    transfer_usd_per_gb: float


@dataclass(frozen=True)
class OperatingPoint:
    """What the performance model says about one (service, bucket, role, config)."""

    feasible: bool
    reason: str
    bound: str
    instance_seconds_per_request: float
    max_batch: int
    kv_bytes_per_request: float
    kv_transfer_bytes_per_request: float
    energy_j_per_request: float
    ttft_ms: float
    tpot_ms: float
    service_time_cv: float = 0.0
    source: str = "roofline"
    detail: dict[str, float] = field(default_factory=dict)
    """Components for traceability (prefill_ms, transfer_ms, step_ms, ...)."""


@dataclass(frozen=True)
class CapacityTables:
    demand: pd.DataFrame
    points: pd.DataFrame
    configs: pd.DataFrame
    costs: CostParams
    meta: dict[str, object] = field(default_factory=dict)
    agents: AgentTables | None = None
    """Tool execution phase (agentic services): waits per tool, reload/recompute per point,
    CPU servers (:mod:`planner.agents.tables`). ``None``: no tool phase."""

    def check_columns(self) -> None:
        """Raise ``ValueError`` when a table lacks a column, and :class:`planner.errors.InputError` when a
        service's planned peak exceeds :data:`planner.schema.common.MAX_PEAK_RATE_PER_S` (a log's peak
        times ``rate_multiplier``: the instance schema can only bound rates it is given)."""
        for name, frame, cols in (("demand", self.demand, DEMAND_COLUMNS), ("points", self.points, POINT_COLUMNS), ("configs", self.configs, CONFIG_COLUMNS)):
            missing = [c for c in cols if c not in frame.columns]
            if missing:
                raise ValueError(f"capacity table {name!r} lacks columns: {', '.join(missing)}")
        import pandas as pd

        from planner.errors import InputError, Problem
        from planner.schema.common import MAX_PEAK_RATE_PER_S

        peaks = self.demand.groupby("service", sort=True)["rate_peak_per_s"].sum() if len(self.demand) else pd.Series(dtype=float)
        over = [(str(s), float(v)) for s, v in peaks.items() if not float(v) <= MAX_PEAK_RATE_PER_S]
        if over:
            where = f"instance {self.meta['instance']}" if self.meta.get("instance") else "the capacity tables"
            raise InputError([Problem(where, f"services.{s}.traffic", f"planned peak {v:g} req/s exceeds {MAX_PEAK_RATE_PER_S:,.0f} req/s "
                                      "(the log's peak x rate_multiplier)", "lower traffic.rate_multiplier or plan one region or cluster "
                                      "(a share of the traffic) and replicate the plan") for s, v in over])


LANE_BOUND_MARK = "the lane, not the slots, is full"
"""In the reason of an infeasible unified point whose prompt prefills within the TTFT target but whose chunked-prefill
lane is full at every batch it could run (short outputs: :func:`planner.perf.points._unified_infeasible`); the
diagnosis (:mod:`planner.optimize.diagnose`) then does not call its TTFT the fastest prefill."""
