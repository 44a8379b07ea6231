"""Simulation results: per-service latency and SLO attainment, per-pool load and KV pressure."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from planner.simulate.stats import LogHistogram, SectionCounts, Summary


@dataclass(frozen=True)
class ServiceResult:
    """Latency of one service's measured requests (turns), seconds.

    ``*_attainment``: share of completed requests meeting the target; ``slo_attainment``:
    share of all measured requests (completed, unfinished or rejected) meeting both.
    ``*_met``: the SLO quantile of the simulated distribution is within the target.
    """

    service: str
    ttft: Summary
    tpot: Summary
    e2e: Summary
    completed: int
    unfinished: int
    rejected: int
    ttft_attainment: float
    tpot_attainment: float
    slo_attainment: float
    ttft_target_s: float
    ttft_quantile: float
    tpot_target_s: float
    tpot_quantile: float
    ttft_met: bool
    tpot_met: bool
    token_metric: str = "tpot"
    """The per-token metric the service targets: ``tpot`` when it sets a TPOT target, else ``itl`` (DESIGN §3)."""
    itl: Summary | None = None
    """Every token gap of the decode / unified pool the service's route uses (``None``: no such pool)."""
    itl_target_s: float = float("inf")
    itl_quantile: float = 0.99
    itl_met: bool = True

    @property
    def measured(self) -> int:
        """Measured requests: completed, unfinished or rejected."""
        return self.completed + self.unfinished + self.rejected

    @property
    def verdict(self) -> bool | None:
        """Both targets met (TTFT and the per-token metric); ``None`` when no request was measured: no requests
        measured is not a miss, nor a pass."""
        return None if self.measured == 0 else bool(self.ttft_met and self.token_met)

    @property
    def token_summary(self) -> Summary | None:
        """The samples of the per-token metric the service targets (TPOT per request, or every ITL gap)."""
        return self.itl if self.token_metric == "itl" else self.tpot

    @property
    def token_target_s(self) -> float:
        return self.itl_target_s if self.token_metric == "itl" else self.tpot_target_s

    @property
    def token_met(self) -> bool:
        """The per-token target the service sets is met (a TPOT-only flag would pass an ITL-only service on 'target inf')."""
        return self.itl_met if self.token_metric == "itl" else self.tpot_met


@dataclass(frozen=True)
class PoolResult:
    """Load of one pool over the simulated time.

    ``utilization``: busy instance-time / provisioned instance-time (an outage counts as
    provisioned); ``slot_utilization``: mean batch / ``max_batch``; ``lane_utilization`` (unified
    pools): the share of instance-time in iterations that carry a prompt chunk; ``kv_utilization``:
    mean KV tokens / capacity; ``kv_blocked_admissions``: times the queue head could not
    be admitted for lack of KV (with a free slot); ``recompute_s``: instance time spent
    recomputing preempted sequences' KV.
    """

    name: str
    role: str
    instances: int
    wait: Summary
    utilization: float
    slot_utilization: float
    kv_utilization: float
    preemptions: int
    kv_blocked_admissions: int
    rejected: int
    recompute_s: float
    queue_max: int
    lane_utilization: float = math.nan

    @property
    def plan_comparable_utilization(self) -> float:
        """The simulated figure shown beside the plan's utilisation (``sum lambda tau / n``): a prefill or encode pool's
        busy share; a decode pool's slot occupancy (mean batch / ``max_batch``, the capacity-preserving batch); a unified
        pool's larger of its slot occupancy and its lane's busy share, as a unified point's ``tau`` is per request the
        larger of its slot time and its prompt's lane time (:func:`planner.capacity.bucket_work`). Approximate for
        decode and unified pools: the plan counts a request's time at the operating point's full batch, while the
        batch that arrives runs faster steps, so the simulated occupancy is lower where a per-token target rather
        than the slots sizes the pool (the example shared pools: 0.33–0.97 simulated against 0.41–0.99 planned, e.g.
        enterprise-chat 0.39 against 0.55, their per-token latency at its target in both; every disaggregated pool
        within 0.02 of its plan). All figures are of the measured window (:meth:`planner.simulate.engine._Sim.in_window`):
        divided by the whole run, drain included, every pool read 5–12 % low (before 2026-12-07, late)."""
        if self.role in ("prefill", "encode"):
            return self.utilization
        if self.role == "unified" and math.isfinite(self.lane_utilization):
            return max(self.slot_utilization, self.lane_utilization) if math.isfinite(self.slot_utilization) else self.lane_utilization
        return self.slot_utilization


@dataclass(frozen=True)
class SimResult:
    services: dict[str, ServiceResult]
    pools: dict[str, PoolResult]
    requests: int
    """Requests (first turns) taken from the stream."""
    events: int
    wall_s: float
    sim_end_s: float
    last_arrival_s: float
    timeline: dict[str, list[float]] = field(default_factory=dict)
    """Sampled every interval: ``time_s`` and per pool ``queue``, ``active``, ``kv_used_share``."""
    histograms: dict[str, LogHistogram] = field(default_factory=dict, repr=False)
    """Fixed-size histograms keyed ``pool:<name>:wait``, ``pool:<name>:itl`` (every token gap of the
    pool's sequences) and ``service:<name>:<ttft|tpot|e2e>``."""
    sections: dict[str, SectionCounts] = field(default_factory=dict, repr=False)
    """Per request metric (``ttft``, ``tpot``): its samples per route and section of the measured window
    (:class:`planner.simulate.stats.SectionCounts`; empty when the window is not finite or ``SimConfig.sections`` is 0)."""
    note: str = ""
    """How the arrivals were placed when the stream alone would have measured nothing (:func:`planner.simulate.scenarios.after_warmup`)."""

    @property
    def measured(self) -> int:
        """Requests measured over every service (0: the run measured nothing, so it says nothing)."""
        return sum(s.measured for s in self.services.values())

    def share_above(self, kind: str, name: str, metric: str, t_s: float) -> float:
        """Share of samples of a metric above ``t_s`` (e.g. ``("pool", "decode", "wait", 0.1)``)."""
        return self.histograms[f"{kind}:{name}:{metric}"].share_above(t_s)

    def quantile(self, kind: str, name: str, metric: str, q: float) -> float:
        return self.histograms[f"{kind}:{name}:{metric}"].quantile(q)

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests, "events": self.events, "wall_s": self.wall_s,
            "sim_end_s": self.sim_end_s, "last_arrival_s": self.last_arrival_s,
            "measured_requests": self.measured,
            "services": {k: {**asdict(v), "measured": v.measured, "met": v.verdict,
                             **({"verdict": "no requests measured"} if v.measured == 0 else {})}
                         for k, v in self.services.items()},
            "pools": {k: asdict(v) for k, v in self.pools.items()},
        }
        if self.note:
            out["note"] = self.note
        if timeline:
            out["timeline"] = self.timeline
        return out
