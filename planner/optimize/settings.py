"""Settings of a solve: everything besides the capacity tables that shapes the MIP and its checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.schema.plan import PlanResult


@dataclass(frozen=True)
class SolveSettings:
    """Everything besides the capacity tables that shapes the MIP."""

    architectures: tuple[str, ...] = ("shared", "disaggregated")
    redundancy: int = 0
    budget_usd_per_month: float | None = None
    max_utilization: float | None = None
    shared_single_device_type: bool = True
    time_limit_s: float = 60.0
    mip_gap: float = 1e-4
    threads: int = 1
    extra_notes: tuple[str, ...] = field(default_factory=tuple)
    verify_rounds: int = 4
    """Extra solve rounds the latency check may spend tightening caps (0: no check)."""
    simulation_check: Callable[[PlanResult, str], Any] | None = None
    """Optional discrete-event check of an architecture's plan (``(result, architecture) ->
    SimulationCheck``, e.g. :func:`planner.verify.simulate_plan`); a miss tightens the named pool
    and re-solves (module docstring, step 5)."""
    simulation_rounds: int = 10
    """Extra solve rounds the simulated check may spend tightening caps (10: a miss chased across a phase's
    configurations needs a round per configuration after the escalation of a repeat; at 6, code-completion-8b's
    8-bucket disaggregated plan ran out with an untightened decode tp2 missing, tests/test_tighten.py)."""
    relax: bool = True
    """Raise prefill caps far tighter than the pool's actual size needs, and keep the result when it
    passes the analytic check and costs less (:func:`planner.optimize.latency.relax_factors`)."""
    refine_rounds: int = 4
    """Solves spent bisecting a large last simulated tightening for a cheaper plan that still meets
    (:mod:`planner.optimize.tighten`, step 6; 0: off). 4: at 2, code-completion-8b's shared plan tried ``t`` = 1/2 and
    3/4 of its last ×1.7 step (11 and 13 tp4, both missing in simulation) and kept 15 tp4 ($129,480), where 14 meet
    ($121,166, found at ``t`` = 7/8) — and traffic ×1.05 had found 14, so more traffic cost less."""
    descent_rounds: int = 3
    """Solves spent trying the final plan with one instance fewer in a shared (unified) pool, or its shared pools merged
    into one, kept when it meets the analytic and the simulated checks and costs less (:mod:`planner.optimize.tighten`,
    step 7; 0: off)."""
    reroute_tries: int = 2
    """Configurations the final plan's phases are tried without — most tightened pool first, one per usable core —,
    each a fresh path through every step (:meth:`planner.optimize.tighten._Loop.reroute`, step 8; 0: off); the
    cheapest that meets both checks and costs less is kept."""
    confidence: str = "off"
    """How robust the verdict is (:mod:`planner.optimize.confidence`): ``exact`` (re-solving scaled
    capacity tables as a sweep does, tens of solves; :func:`planner.optimize.resolve.with_confidence`,
    called by :func:`planner.solve_instance.solve_instance`) or ``off`` (not assessed: the
    re-sizing shortcut that was the default gave flips that re-solving does not confirm, issue 24)."""



def settings_from_instance(instance: Any, *, architectures: tuple[str, ...] | None = None, time_limit_s: float | None = None,
                           mip_gap: float | None = None) -> SolveSettings:
    """Solve settings from an instance's ``options``; command-line values win."""
    o = instance.options
    return SolveSettings(
        architectures=tuple(architectures or o.architectures), redundancy=o.redundancy, budget_usd_per_month=o.budget_usd_per_month,
        max_utilization=o.max_utilization, shared_single_device_type=o.shared_single_device_type,
        time_limit_s=time_limit_s if time_limit_s is not None else o.solver.time_limit_s,
        mip_gap=mip_gap if mip_gap is not None else o.solver.mip_gap, threads=o.solver.threads,
    )

