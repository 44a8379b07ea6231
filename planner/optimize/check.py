"""Independent plan checker: re-verifies every number a :class:`PlanResult` states.

No solver and no pyomo: plain arithmetic over the capacity snapshot and the plan's numbers.
With the instance at hand (:func:`recompute_snapshot`, ``planner check PLAN --instance FILE``
or the ``instance_path`` the plan records) the snapshot itself is re-derived from the
instance and its inputs (capacity tables and queueing caps) instead of being trusted: a
plan whose snapshot was edited (a point's ``rho`` raised to 1, prices lowered) is rejected.

Checks, each violation naming architecture, constraint and item:

- ``finite``: no NaN or infinity in any number of a feasible plan, the verdict or the used
  snapshot rows (``inf`` is allowed only where it means "unlimited": a procurement limit);
- ``snapshot``: (with the instance) demand, used operating points, configurations, prices,
  redundancy and budget equal the recomputed ones (relative 1e-6); tightened caps in
  ``capacity.utilization_caps`` never exceed the queueing cap of their point;
- ``status``: a feasible plan has a solver status with a plan (``optimal``, ``feasible``,
  ``time_limit``), pools, routing and costs; an infeasible one has none of those statuses;
  the gap matches objective and bound;
- ``route``: each (service, bucket) is fully routed (shares sum to 1 ± 1e-5) in each phase,
  only through roles the architecture allows; routed rates = point rates × share;
- ``mask``: every routed operating point is in the snapshot and marked feasible, and its
  TTFT / TPOT without queueing is within the service's targets;
- ``pool``: every routed pool exists with ``k+1`` or more instances, ``devices = instances × tp``,
  name/config/device/tp agree; busy instances, utilisation (in [0, 1]) and the effective cap
  recomputed from the routed loads; the pool's monthly cost recomputed from counts and prices;
- ``load``: ``Σ λ_peak τ/ρ x ≤ instances − redundancy`` (1e-6 relative tolerance), with
  ``ρ`` the architecture's tightened cap where the latency check tightened it
  (``capacity.utilization_caps``), else the snapshot point's ``rho``;
- ``kv``: resident KV at peak within the surviving instances' KV capacity (when known);
- ``procurement`` and ``budget``;
- ``costs``: the terms recomputed from the snapshot equal the plan's, and sum to its total;
  pool costs + per-device-type operations + tool-phase terms = total; tokens per month,
  $/1M tokens (and energy per 1k tokens without a tool phase) recomputed;
- ``latency``: one prediction per service with the snapshot's targets, TPOT = the worst routed
  point's, TTFT at least the worst routed point's own TTFT, ``*_met`` flags true to the numbers;
- ``caps`` / ``max_utilization``: ``options.max_utilization`` (the instance's; without it the plan's
  ``capacity.max_utilization``, overrides or, for older plans, caps note, :func:`user_max_utilization`) bounds
  every point's cap, every tightened or relaxed cap and every pool's effective cap (busy / load);
- ``simulation``: ``met`` true to its services, each service's flags true to its simulated quantiles, each
  share of requests over a target within what its quantile and met flag allow (:func:`_check_over_target`);
- ``verdict``: a winner exactly when some plan is feasible, solved and feasible itself; it is
  the cheapest among the plans that meet their targets (predicted and simulated) — a winner that
  misses them while another plan meets them is a violation; runner-up, margin (USD/month, per
  1M tokens, share) and term differences recomputed; its reasons, ``proven`` and ``tie_rule`` rebuilt from the
  plans (:func:`_check_verdict_text`), so an edited figure in the text is caught. A plan whose winner misses its targets
  because no plan meets them is consistent (``planner solve`` exits 3 on it, see
  :func:`winner_misses`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.agents.check import check_tool_phase
from planner.optimize.extract import cost_breakdown
from planner.optimize.latency import RELAX_CEILING
from planner.optimize.prepare import ARCH_ROLES, ENCODE_HOST
from planner.optimize.verdict import meets_targets
from planner.schema.capacity import (
    POINT_OPTIONAL_COLUMNS,
    TTFT_MIX_COLUMN,
    CostParams,
    config_devices,
    token_metric,
)
from planner.schema.plan import (
    COST_TERMS,
    E2E_MISS,
    TOOL_COST_TERMS,
    ArchitecturePlan,
    CapacitySnapshot,
    PlanResult,
)
from planner.units import J_PER_KWH, SECONDS_PER_HOUR

TOL = 1e-6
_PLAN_STATUSES = ("optimal", "feasible", "time_limit")
_POINT_NUMBERS = ("rate_peak_per_s", "rate_mean_per_s", "instance_seconds_per_request", "rho", "ttft_ms", "tpot_ms",
                  "ttft_target_ms", "tpot_target_ms", "kv_peak_coef", "energy_j_per_request", "kv_transfer_bytes_per_request",
                  "input_tokens_mean", "output_tokens_mean", "max_batch", "tp", "ttft_quantile", "tpot_quantile",
                  "service_time_cv", "interarrival_cv")
"""Numeric point columns that must be finite and (with the instance) equal the recomputed ones."""
_POINT_LANE_NUMBERS = POINT_OPTIONAL_COLUMNS
"""A unified point's lane columns (``nan`` elsewhere): with the instance they must equal the recomputed ones too — the
analytic latency at load reads them (``prefill_tokens``, ``prefill_tokens_rep``, the steps), so a tampered one moves
every shared pool's predicted TTFT while the plan still read as valid."""
_DEMAND_NUMBERS = ("weight", "rate_mean_per_s", "rate_peak_per_s", "input_tokens_mean", "output_tokens_mean",
                   "ttft_quantile", "ttft_target_ms", "tpot_quantile", "tpot_target_ms")
_CONFIG_NUMBERS = ("tp", "equipment_usd_per_device_hour", "busy_power_w", "idle_power_w", "host_power_w",
                   "ops_usd_per_device_month", "license_usd_per_device_month", "procurement_limit", "nic_bw_gb_per_s")


def _close(a: float, b: float, rel: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(abs(a), abs(b)) + abs_tol


def _num(v: Any) -> float:
    """A snapshot number; ``None`` (how JSON stores nan and inf) reads as nan."""
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _bad(v: Any, column: str = "") -> bool:
    """Not a finite number — except where the table contract gives the value a meaning: a latency
    target not set is +inf (``*_target_ms``), a mean target has no quantile level (``*_quantile`` NaN)."""
    if not isinstance(v, float) or math.isfinite(v):
        return False
    if column.endswith(("_target_ms", "_target_s")) and v == math.inf:
        return False
    return not (column.endswith("_quantile") and math.isnan(v))


def _bad_number(v: Any, column: str = "") -> bool:
    """:func:`_bad`, and also a value that is not a number at all (text, a list, true/false) in a numeric column
    of the snapshot: it would otherwise reach the cost recomputation as an internal error (fuzzed plans, issue 24).
    ``None`` stays allowed (a column a table leaves empty)."""
    return (v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))) or _bad(v, column)


def _has_text_numbers(snap: CapacitySnapshot) -> bool:
    def text(v: Any) -> bool:
        return v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))

    return (any(text(r[c]) for r in snap.points for c in (*_POINT_NUMBERS, *_POINT_LANE_NUMBERS) if c in r)
            or any(text(r[c]) for r in snap.demand for c in _DEMAND_NUMBERS if c in r)
            or any(text(r.get(c)) for r in snap.configs for c in _CONFIG_NUMBERS))


# --- the instance side: a snapshot re-derived from the instance -------------------------------

def recompute_snapshot(result: PlanResult, instance_path: str | Path) -> CapacitySnapshot:
    """The capacity snapshot re-derived from the instance (with the plan's scenario and overrides):
    capacity tables (:func:`planner.capacity.build_capacity_tables`), queueing caps
    (:func:`planner.optimize.prepare.prepare`), prices, redundancy and budget. Every point of
    the instance is included (the checker looks up the routed ones)."""
    return recompute_instance(result, instance_path)[0]


def recompute_instance(result: PlanResult, instance_path: str | Path) -> tuple[CapacitySnapshot, str]:
    """:func:`recompute_snapshot` and the instance's ``name`` (the plan must name the same instance)."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare

    resolved = load_instance(instance_path, result.overrides or None, scenario=result.scenario)
    opts = resolved.instance.options
    tables = build_capacity_tables(resolved)
    prep = prepare(tables, max_utilization=opts.max_utilization)
    cols = [c for c in prep.points.columns if c != "i"]
    option = [] if opts.max_utilization is None else [{_MAX_UTILIZATION: float(opts.max_utilization)}]
    return CapacitySnapshot(
        demand=prep.demand.drop(columns=["d"]).to_dict("records"), points=prep.points[cols].to_dict("records"),
        configs=tables.configs.to_dict("records"), costs={k: float(v) for k, v in vars(tables.costs).items()},
        redundancy=opts.redundancy, budget_usd_per_month=opts.budget_usd_per_month, utilization_caps=option), resolved.instance.name


_MAX_UTILIZATION = "options.max_utilization"
"""Key of the record in a re-derived snapshot's ``utilization_caps`` (:func:`recompute_instance`) that carries the
instance's ``options.max_utilization`` (no record: not set); the plan's own records are kept (:func:`_trusted`)."""
_NOTE_CAP = re.compile(r"bounded by options\.max_utilization = ([0-9][0-9.eE+-]*)")
"""How :func:`planner.optimize.prepare.utilization_caps` states the option in the caps note a plan carries."""


def user_max_utilization(result: PlanResult, instance_snapshot: CapacitySnapshot | None) -> tuple[float | None, float]:
    """The ``options.max_utilization`` the plan must keep every cap within, and the relative tolerance to compare at.

    With the instance (``instance_snapshot`` from :func:`recompute_instance`): the instance's, with the plan's
    scenario and overrides (None when not set). Without it, what the plan states: its structured record
    ``capacity.max_utilization`` (written by :func:`planner.optimize.solve.solve_tables`), else its ``overrides``
    (``--set options.max_utilization=…``), else, for plans written before that record (or by a writer that does
    not set it), the caps note (``bounded by options.max_utilization = 0.3``, six significant digits: compared at
    1e-5). The note's text is only this fallback: an edited note does not change the bound of a plan with the record."""
    if instance_snapshot is not None:
        got = [_num(c[_MAX_UTILIZATION]) for c in instance_snapshot.utilization_caps if _MAX_UTILIZATION in c]
        return (got[0] if got and math.isfinite(got[0]) else None), TOL
    for stated in (result.capacity.max_utilization, result.overrides.get(_MAX_UTILIZATION) if isinstance(result.overrides, dict) else None):
        if isinstance(stated, (int, float)) and not isinstance(stated, bool) and math.isfinite(float(stated)):
            return float(stated), TOL
    for note in result.notes:
        m = _NOTE_CAP.search(note)
        if m:
            try:
                return float(m.group(1)), 1e-5
            except ValueError:
                continue
    return None, TOL


def _key(r: dict[str, Any], cols: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(str(r.get(c)) for c in cols)


def _diff_rows(what: str, cols: tuple[str, ...], numbers: tuple[str, ...], stated: list[dict[str, Any]],
               truth: list[dict[str, Any]], *, require_all: bool) -> list[str]:
    out: list[str] = []
    true_rows = {_key(r, cols): r for r in truth}
    stated_keys = set()
    for r in stated:
        k = _key(r, cols)
        stated_keys.add(k)
        t = true_rows.get(k)
        if t is None:
            out.append(f"snapshot: {what}[{'|'.join(k)}] is not in the instance's capacity table")
            continue
        for c in numbers:
            if c not in t or c not in r:
                continue
            a, b = _num(r[c]), _num(t[c])
            if math.isnan(a) and (math.isnan(b) or math.isinf(b)):  # JSON writes inf and nan as null
                continue
            if not _close(a, b):
                out.append(f"snapshot: {what}[{'|'.join(k)}].{c} = {a:.6g} differs from the instance's {b:.6g}")
        if "feasible" in t and bool(r.get("feasible")) != bool(t["feasible"]):
            out.append(f"snapshot: {what}[{'|'.join(k)}].feasible = {r.get('feasible')} differs from the instance's {t['feasible']}")
    if require_all:
        out += [f"snapshot: {what}[{'|'.join(k)}] of the instance is missing" for k in true_rows if k not in stated_keys]
    return out


def _snapshot_problems(snap: CapacitySnapshot, truth: CapacitySnapshot) -> list[str]:
    out = _diff_rows("demand", ("service", "bucket"), _DEMAND_NUMBERS, snap.demand, truth.demand, require_all=True)
    measured = [p for p in snap.points if str(p.get("source", "")).startswith("measured")]
    if not measured:  # measured capacity (--capacity FILE) cannot be re-derived from the instance
        out += _diff_rows("points", ("service", "bucket", "role", "config"), (*_POINT_NUMBERS, *_POINT_LANE_NUMBERS), snap.points,
                          truth.points, require_all=False)
    out += _diff_rows("configs", ("config",), _CONFIG_NUMBERS, snap.configs, truth.configs, require_all=False)
    for k, v in truth.costs.items():
        if k not in snap.costs or not _close(float(snap.costs[k]), float(v)):
            out.append(f"snapshot: costs.{k} = {snap.costs.get(k)} differs from the instance's {v}")
    if snap.redundancy != truth.redundancy:
        out.append(f"snapshot: redundancy {snap.redundancy} differs from the instance's options.redundancy {truth.redundancy}")
    a_b, t_b = snap.budget_usd_per_month, truth.budget_usd_per_month
    if (a_b is None) != (t_b is None) or (a_b is not None and t_b is not None and not _close(float(a_b), float(t_b))):
        out.append(f"snapshot: budget {snap.budget_usd_per_month} differs from the instance's options.budget_usd_per_month {truth.budget_usd_per_month}")
    return out


def _trusted(snap: CapacitySnapshot, truth: CapacitySnapshot) -> CapacitySnapshot:
    """The snapshot to check against: the instance's rows for everything the plan stated, with the plan's tightened caps."""
    measured = any(str(p.get("source", "")).startswith("measured") for p in snap.points)
    return snap.model_copy(update={"demand": truth.demand, "configs": truth.configs, "costs": truth.costs,
                                   "points": snap.points if measured else truth.points,
                                   "redundancy": truth.redundancy, "budget_usd_per_month": truth.budget_usd_per_month})


# --- the plan side ------------------------------------------------------------------------------

def _nonfinite(result: PlanResult) -> list[str]:
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if _bad(node, path) and not (node == math.inf and path.endswith("_predicted_ms")):  # +inf: an unbounded wait (then not met)
            out.append(f"finite: {path} is {node}")
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    for arch, plan in result.architectures.items():
        if plan.feasible:
            walk(plan.model_dump(exclude={"tool_phase", "diagnosis"}), arch)
    walk(result.verdict.model_dump(), "verdict")
    return out


def _snapshot_numbers(snap: CapacitySnapshot, cap: float | None = None, cap_tol: float = TOL) -> list[str]:
    """Numbers of the snapshot that are not finite where they must be, and caps outside their bounds: a point's
    ``rho`` or an architecture's cap above ``cap`` (``options.max_utilization``, :func:`user_max_utilization`), a
    tightened or relaxed cap above its point's queueing cap (a relaxed prefill cap: above :data:`RELAX_CEILING`)."""
    out: list[str] = []
    for r in snap.points:
        for c in _POINT_NUMBERS:
            if c in r and _bad_number(r[c], c):
                out.append(f"finite: point {r.get('service')}|{r.get('bucket')}|{r.get('role')}|{r.get('config')}: {c} is {r[c]}")
        if cap is not None and _num(r.get("rho")) > cap * (1 + cap_tol):
            out.append(f"caps: point {r.get('service')}|{r.get('bucket')}|{r.get('role')}|{r.get('config')}: rho {_num(r.get('rho')):g} "
                       f"is above options.max_utilization = {cap:g}")
    for r in snap.demand:
        for c in _DEMAND_NUMBERS:
            if c in r and _bad_number(r[c], c):
                out.append(f"finite: demand {r.get('service')}|{r.get('bucket')}: {c} is {r[c]}")
    for r in snap.configs:
        for c in _CONFIG_NUMBERS:
            v = r.get(c)
            if _bad_number(v) and not (c == "procurement_limit" and v == math.inf):
                out.append(f"finite: config {r.get('config')}: {c} is {v}")
    for k, v in snap.costs.items():
        if _bad(v) or float(v) < 0:
            out.append(f"finite: costs.{k} is {v}")
    rho_of = {_key(p, ("service", "bucket", "role", "config")): float(p.get("rho", math.nan)) for p in snap.points}
    for rec in snap.utilization_caps:
        if "rho" not in rec:
            continue
        ck = _key(rec, ("service", "bucket", "role", "config"))
        base = rho_of.get(ck)
        rho = _num(rec["rho"])
        # a prefill or unified cap may have been relaxed up to RELAX_CEILING (planner.optimize.latency.relax_factors:
        # the nominal pool behind the queueing cap is far smaller than the pool the plan has)
        limit = max(base, RELAX_CEILING) if base is not None and str(rec.get("role")) in ("prefill", "unified") else base
        if not (0 < rho <= 1) or (limit is not None and rho > limit * (1 + TOL)):
            out.append(f"caps: {rec.get('architecture')}: tightened cap {rho:g} of {'|'.join(ck)} is not within (0, its queueing cap {limit}]")
        if cap is not None and rho > cap * (1 + cap_tol):  # the user's cap bounds every cap, relaxed ones too
            out.append(f"caps: {rec.get('architecture')}: cap {rho:g} of {'|'.join(ck)} is above options.max_utilization = {cap:g}")
    return out


def _check_status(arch: str, plan: ArchitecturePlan) -> list[str]:
    out: list[str] = []
    s = plan.solver
    if plan.feasible:
        if plan.diagnosis:
            out.append(f"{arch}: status: a feasible plan carries {len(plan.diagnosis)} infeasibility diagnosis item(s)")
        if s.status not in _PLAN_STATUSES:
            out.append(f"{arch}: status: a feasible plan with solver status {s.status!r}")
        if not plan.pools or not plan.routing or plan.costs is None:
            out.append(f"{arch}: status: a feasible plan without pools, routing or costs")
        if s.objective_usd_per_month is not None and s.bound_usd_per_month is not None and s.gap is not None:
            obj, bound = s.objective_usd_per_month, s.bound_usd_per_month
            if abs(obj) > 1e-9 and not _close(s.gap, max(0.0, (obj - bound) / abs(obj)), rel=1e-4, abs_tol=1e-9):
                out.append(f"{arch}: status: gap {s.gap:g} differs from (objective - bound) / objective")
            if s.status == "optimal" and s.mip_gap is not None and s.gap > s.mip_gap * 1.01 + 1e-6:
                out.append(f"{arch}: status: 'optimal' with gap {s.gap:g} above the MIP gap {s.mip_gap:g}")
    elif s.status in ("optimal", "feasible"):
        out.append(f"{arch}: status: solver status {s.status!r} on a plan marked infeasible")
    return out


def check_plan(result: PlanResult, instance_snapshot: CapacitySnapshot | None = None, *, instance_name: str | None = None,
               recompute_latency: bool = True) -> list[str]:
    """Violations found (empty when the plan is valid); each names architecture, constraint and item.

    ``instance_snapshot``: the snapshot re-derived from the instance (:func:`recompute_snapshot`);
    when given, the plan's snapshot is compared with it and the plan checked against it;
    ``instance_name``: the instance's name, which the plan must carry. A plan
    may hold any number (nan, inf, 1e308): arithmetic on them is silent here, and the ``finite``
    check reports them. ``recompute_latency``: recompute each service's TTFT prediction from the pools
    (:func:`_recomputed_ttft_ms`; the queueing maths, scipy). ``planner solve``'s check of the plan it has just
    extracted (or read back from its cache, which must load no solver nor scipy) passes ``False``: there the
    prediction is the one :mod:`planner.optimize.extract` computed, and only its floor is checked.
    """
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = _check_plan(result, instance_snapshot, recompute_latency)
    if instance_name is not None and result.instance != instance_name:
        out.insert(0, f"instance: the plan names instance {result.instance!r}, the instance file is {instance_name!r}")
    return out


def _check_plan(result: PlanResult, instance_snapshot: CapacitySnapshot | None, recompute_latency: bool = True) -> list[str]:
    out: list[str] = _nonfinite(result)
    snap = result.capacity
    cap, cap_tol = user_max_utilization(result, instance_snapshot)
    if instance_snapshot is not None:
        out += _snapshot_problems(snap, instance_snapshot)
        snap = _trusted(snap, instance_snapshot)
    out += _snapshot_numbers(snap, cap, cap_tol)
    if _has_text_numbers(snap):  # reported above; the recomputation below needs numbers
        return [*out, "snapshot: a numeric column holds text or true/false: the plan's numbers cannot be recomputed"]
    pts = pd.DataFrame(snap.points)
    demand = pd.DataFrame(snap.demand)
    configs = pd.DataFrame(snap.configs)
    try:
        costs = CostParams(**snap.costs)
    except TypeError as exc:
        return [*out, f"snapshot: costs do not name the price scalars ({exc})"]
    for arch, plan in result.architectures.items():
        if plan.architecture != arch:
            out.append(f"{arch}: the plan says it is {plan.architecture}")
        out += _check_status(arch, plan)
        if plan.feasible:
            caps = {(str(c["service"]), str(c["bucket"]), str(c["role"]), str(c["config"])): float(c["rho"])
                    for c in snap.utilization_caps if c.get("architecture") == arch and "rho" in c}
            arch_pts = pts
            if caps and len(pts):
                arch_pts = pts.copy()
                keys = zip(pts["service"].astype(str), pts["bucket"].astype(str), pts["role"].astype(str), pts["config"].astype(str), strict=True)
                arch_pts["rho"] = [caps.get(k, r) for k, r in zip(keys, pts["rho"].astype(float), strict=True)]
            out += [f"{arch}: {v}" for v in _check_arch(plan, arch_pts, demand, configs, costs, snap.redundancy, snap.budget_usd_per_month,
                                                        cap=cap, cap_tol=cap_tol, recompute_latency=recompute_latency)]
            out += [f"{arch}: {v}" for v in _check_simulation(plan)]
    out += _check_verdict(result)
    out += _check_verdict_text(result)
    return out


def _check_simulation(plan: ArchitecturePlan) -> list[str]:
    sim = plan.simulation
    if sim is None:
        return []
    out: list[str] = []
    e2e_missed = any(E2E_MISS in f for f in sim.findings)  # an E2E miss is a finding, not a service flag (planner.verify)
    if sim.met != (all(s.ttft_met and s.tpot_met for s in sim.services) and not e2e_missed):
        out.append(f"simulation: met = {sim.met} contradicts its services' flags")
    sizes = {p.name: p.instances for p in plan.pools}
    for sp in sim.pools:
        if sp.pool in sizes and sp.instances != sizes[sp.pool]:
            out.append(f"simulation: pool {sp.pool} was simulated with {sp.instances} instance(s), the plan has {sizes[sp.pool]}")
    for s in sim.services:
        for metric, q, target, met in (("ttft", s.ttft_sim_ms, s.ttft_target_ms, s.ttft_met), ("tpot", s.tpot_sim_ms, s.tpot_target_ms, s.tpot_met)):
            if q is None:
                if met:
                    out.append(f"simulation[{s.service}]: {metric}_met true with an unbounded simulated quantile")
            elif met and q > target * (1 + TOL):
                out.append(f"simulation[{s.service}]: {metric}_met true but simulated {q:,.1f} ms > target {target:g} ms")
            elif not met and q < target * (1 - TOL):
                out.append(f"simulation[{s.service}]: {metric}_met false but simulated {q:,.1f} ms < target {target:g} ms")
        out += _check_over_target(s)
    return out


SIM_BIN_RATIO = 1.01
"""Above this ratio of its target a simulated quantile lies beyond the target's histogram bin (bins of
``10^(1/1000)``, :data:`planner.simulate.stats.BINS_PER_DECADE`; a quantile is reported at its bin's middle)."""


def _check_over_target(s: Any) -> list[str]:
    """A simulated service's ``*_over_target_share`` against what the plan records of the same run
    (:func:`planner.verify._share_over`, :func:`planner.verify._quantile_all`: both over the measured requests plus
    the unfinished ones, counted as over, on the same histogram).

    - a share is a share (in [0, 1]), and a mean target (no quantile level) records none;
    - the ``q`` quantile at most the target (met) means at most ``1 − q`` of the requests over it; a quantile beyond
      the target's histogram bin (:data:`SIM_BIN_RATIO`) or unbounded means more than ``1 − q``;
    - unfinished requests count as over the TTFT target: with some, the TTFT share is positive; with none, it is a
      count of the measured requests (``share × requests`` a whole number).
    The share cannot be recomputed exactly (the plan keeps quantiles, not the histogram); these bounds are what it fixes."""
    out: list[str] = []
    for metric, share, level, sim_ms, target, met in (
            ("ttft", s.ttft_over_target_share, s.ttft_quantile, s.ttft_sim_ms, s.ttft_target_ms, s.ttft_met),
            ("tpot", s.tpot_over_target_share, s.tpot_quantile, s.tpot_sim_ms, s.tpot_target_ms, s.tpot_met)):
        if share is None:
            continue
        what = f"simulation[{s.service}]: {metric}_over_target_share {share:g}"
        if not 0.0 <= share <= 1.0:
            out.append(f"{what} is not a share in [0, 1]")
            continue
        if level is None or not 0.0 < level < 1.0:
            out.append(f"{what} recorded for a mean target (none is computed without a quantile level)")
            continue
        allowed = 1.0 - level
        if met and share > allowed + 1e-9:
            out.append(f"{what} exceeds the {allowed:g} its p{level * 100:g} target allows, yet {metric}_met is true")
        elif not met and share <= allowed + 1e-9 and (sim_ms is None or sim_ms > target * SIM_BIN_RATIO):
            out.append(f"{what} is within the {allowed:g} its p{level * 100:g} target allows, yet the simulated quantile "
                       f"{'is unbounded' if sim_ms is None else f'{sim_ms:,.1f} ms'} misses the {target:g} ms target")
        if metric == "ttft":
            if s.unfinished > 0 and share <= 0.0:
                out.append(f"{what}: {s.unfinished} unfinished request(s) count as over the target")
            elif s.unfinished == 0 and s.requests > 0 and abs(share * s.requests - round(share * s.requests)) > 1e-6 * s.requests + 1e-6:
                out.append(f"{what} is not a count of its {s.requests:,} measured requests ({share * s.requests:.3f} over)")
    return out


def _check_verdict(result: PlanResult) -> list[str]:
    out: list[str] = []
    v = result.verdict
    candidates = [p for a, p in result.architectures.items() if p.feasible and p.costs is not None and a == p.architecture]
    if v.winner is None:
        if candidates:
            out.append(f"verdict: no winner, but {', '.join(p.architecture for p in candidates)} has a feasible plan")
        return out
    win = result.architectures.get(v.winner)
    if win is None:
        return [*out, f"verdict: winner {v.winner} was not solved (architectures: {', '.join(result.architectures) or 'none'})"]
    if not win.feasible or win.costs is None:
        return [*out, f"verdict: winner {v.winner} has no feasible plan"]
    # The verdict ranks plans that miss a target (predicted or in the peak simulation) after those that meet.
    meeting = [p for p in candidates if meets_targets(p)]
    best = min(meeting or candidates, key=lambda p: p.costs.total_usd_per_month if p.costs else 0.0)
    if best.architecture != v.winner and best.costs is not None:
        if not meets_targets(win) and meets_targets(best):
            out.append(f"verdict: winner {v.winner} misses its latency targets ({_misses(win)}) while {best.architecture} meets them")
        elif win.costs.total_usd_per_month > best.costs.total_usd_per_month * (1 + TOL):
            out.append(f"verdict: winner {v.winner} is not the cheapest feasible architecture ({best.architecture})")
    others = [p for p in candidates if p.architecture != v.winner]
    if not others:
        if v.runner_up is not None or abs(v.margin_usd_per_month) > 1e-6:
            out.append("verdict: a runner-up or margin with only one feasible plan")
        return out
    run = result.architectures.get(v.runner_up) if v.runner_up else None
    if run is None or run not in others or run.costs is None:
        return [*out, f"verdict: runner-up {v.runner_up} is not another feasible plan"]
    margin = run.costs.total_usd_per_month - win.costs.total_usd_per_month
    if not _close(v.margin_usd_per_month, margin, rel=1e-6, abs_tol=0.01):
        out.append(f"verdict: margin {v.margin_usd_per_month:,.2f} USD/month, the totals give {margin:,.2f}")
    if margin < -0.01 and meets_targets(run) == meets_targets(win):
        out.append(f"verdict: negative margin {margin:,.2f}: the runner-up {run.architecture} is cheaper")
    tokens = win.tokens_per_month or 1.0
    if not _close(v.margin_usd_per_million_tokens, margin / tokens * 1e6, rel=1e-6, abs_tol=1e-6):
        out.append(f"verdict: margin per 1M tokens {v.margin_usd_per_million_tokens:g}, the totals give {margin / tokens * 1e6:g}")
    share = margin / run.costs.total_usd_per_month if run.costs.total_usd_per_month > 0 else 0.0
    if not _close(v.margin_share, share, rel=1e-6, abs_tol=1e-9):
        out.append(f"verdict: margin share {v.margin_share:g}, the totals give {share:g}")
    for t, d in v.term_differences_usd_per_month.items():
        if t in COST_TERMS and not _close(d, run.costs.terms()[t] - win.costs.terms()[t], rel=1e-6, abs_tol=0.01):
            out.append(f"verdict: term difference {t} {d:,.2f} differs from the plans' {run.costs.terms()[t] - win.costs.terms()[t]:,.2f}")
    return out


def _check_verdict_text(result: PlanResult) -> list[str]:
    """The verdict's reasons, ``proven`` and ``tie_rule`` against those its plans give: every reason is built from
    the plans' numbers (:func:`planner.optimize.verdict.verdict_of`, the mean rate from the snapshot's demand), so
    recomputing them catches an edited figure (winner, totals, margin, a term, a device count) or sentence."""
    from planner.optimize.verdict import verdict_of

    v = result.verdict
    try:
        rate = float(pd.DataFrame(result.capacity.demand)["rate_mean_per_s"].sum()) if result.capacity.demand else 0.0
        again = verdict_of(result.architectures, rate)
    except Exception as exc:  # a plan edited beyond what the reasons can be built from: say so, do not fail
        return [f"verdict: its reasons cannot be recomputed from the plans ({type(exc).__name__}: {exc})"]
    out: list[str] = []
    for i in range(max(len(v.reasons), len(again.reasons))):
        stated = v.reasons[i] if i < len(v.reasons) else None
        true = again.reasons[i] if i < len(again.reasons) else None
        if stated is None:
            out.append(f"verdict: reason {i + 1} is missing; the plans' figures give {_clip(true or '', 0)!r}")
        elif true is None:
            out.append(f"verdict: reason {i + 1} {_clip(stated, 0)!r} is not one the plans' figures give")
        elif stated != true:
            at = next((j for j, (a, b) in enumerate(zip(stated, true, strict=False)) if a != b), min(len(stated), len(true)))
            out.append(f"verdict: reason {i + 1} says {_clip(stated, at)!r}, the plans' figures give {_clip(true, at)!r}")
    if v.proven != again.proven:
        out.append(f"verdict: proven = {v.proven}, but the plans' solver statuses give {again.proven}")
    if v.tie_rule != again.tie_rule and v.winner == again.winner:
        out.append(f"verdict: tie rule {v.tie_rule!r} differs from the plans' {again.tie_rule!r}")
    return out


def _clip(text: str, at: int, before: int = 40, after: int = 80) -> str:
    """``text`` around position ``at`` (where two reasons first differ), elided on either side."""
    lo, hi = max(0, at - before), min(len(text), at + after)
    return ("…" if lo > 0 else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def stated_derived_problems(data: Any, result: PlanResult) -> list[str]:
    """Derived fields written to plan.json that reading drops and recomputes (``architectures.*.meets_targets``,
    :meth:`planner.schema.plan.ArchitecturePlan._derived_fields_are_not_input`), compared with ``result`` (the plan
    read from ``data``): an edited value misleads whoever reads the JSON itself. :func:`check_plan` never sees them
    (``result`` no longer holds them): a caller with the file's JSON (``planner check``) adds these."""
    out: list[str] = []
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(archs, dict):
        return out
    for arch, raw in archs.items():
        plan = result.architectures.get(arch)
        if plan is None or not isinstance(raw, dict) or "meets_targets" not in raw:
            continue
        if raw["meets_targets"] is not plan.meets_targets:
            out.append(f"{arch}: meets_targets = {raw['meets_targets']!r}, but its latency flags (predicted"
                       f"{' and simulated' if plan.simulation is not None else ''}) give {plan.meets_targets}")
    return out


def winner_misses(result: PlanResult) -> list[tuple[str, str, str]]:
    """(service, what, detail) for every target the verdict's winner misses (predicted or simulated); empty when it meets them."""
    win = result.architectures.get(result.verdict.winner) if result.verdict.winner else None
    if win is None or meets_targets(win):
        return []
    out = [(lp.service, m, f"{win.architecture}: predicted {m.upper()} {pred:,.0f} ms > target {target:g} ms")
           for lp in win.latency for m, pred, target, met in (("ttft", lp.ttft_predicted_ms, lp.ttft_target_ms, lp.ttft_met),
                                                             ("tpot", lp.tpot_predicted_ms, lp.tpot_target_ms, lp.tpot_met)) if not met]
    if win.simulation is not None:
        out += [(s.service, "simulation", f"{win.architecture}: misses its target in the peak simulation"
                 + (f" (pool {s.miss_pool}, {s.miss_ms:,.0f} ms over)" if s.miss_pool and s.miss_ms is not None else ""))
                for s in win.simulation.services if not (s.ttft_met and s.tpot_met)]
    return out


def _misses(plan: ArchitecturePlan) -> str:
    parts = [f"{lp.service} {m.upper()} predicted {pred:,.0f} ms > {target:g} ms"
             for lp in plan.latency for m, pred, target, met in (("ttft", lp.ttft_predicted_ms, lp.ttft_target_ms, lp.ttft_met),
                                                                 ("tpot", lp.tpot_predicted_ms, lp.tpot_target_ms, lp.tpot_met)) if not met]
    if plan.simulation is not None and not plan.simulation.met:
        parts.append("missed in the peak simulation" + (f": {plan.simulation.findings[0]}" if plan.simulation.findings else ""))
    return "; ".join(parts) or "no latency prediction"


def _check_arch(plan: ArchitecturePlan, pts: pd.DataFrame, demand: pd.DataFrame, configs: pd.DataFrame,
                costs: CostParams, k: int, budget: float | None, *, cap: float | None = None, cap_tol: float = TOL,
                recompute_latency: bool = True) -> list[str]:
    out: list[str] = []
    allowed = ARCH_ROLES[plan.architecture] | {"encode"}  # a separate encode pool is an option of every architecture
    key: dict[tuple[str, str, str, str], int] = {}
    for pos, row in enumerate(pts.itertuples(index=False)):
        key[(str(row.service), str(row.bucket), str(row.role), str(row.config))] = pos
    pools = {p.name: p for p in plan.pools}
    if len(pools) != len(plan.pools):
        out.append("pool: a pool name appears twice")
    phase_sum: dict[tuple[str, str, str], float] = defaultdict(float)
    host_share: dict[tuple[str, str, str], float] = defaultdict(float)
    inline_share: dict[tuple[str, str, str], float] = defaultdict(float)
    load: dict[str, float] = defaultdict(float)
    busy_peak: dict[str, float] = defaultdict(float)
    busy_mean: dict[str, float] = defaultdict(float)
    kv: dict[str, float] = defaultdict(float)
    rows, shares = [], []
    for r in plan.routing:
        if not (-TOL <= r.share <= 1 + TOL):
            out.append(f"route[{r.service}|{r.bucket}]: share {r.share} outside [0, 1]")
        if ENCODE_HOST.get(r.role, r.role) not in allowed:
            out.append(f"route[{r.service}|{r.bucket}]: role {r.role} not allowed in {plan.architecture}")
        for phase, roles in (("prefill", ("prefill", "unified")), ("decode", ("decode", "unified")), ("encode", tuple(ENCODE_HOST))):
            if r.role in roles:
                phase_sum[(r.service, r.bucket, phase)] += r.share
        if r.role in ("prefill", "unified"):
            host_share[(r.service, r.bucket, r.pool)] += r.share
        elif r.role in ("encode_prefill", "encode_unified"):
            inline_share[(r.service, r.bucket, r.pool)] += r.share
        j = key.get((str(r.service), str(r.bucket), str(r.role), str(r.config)))
        if j is None:
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: routed to an operating point missing from the capacity snapshot")
            continue
        pt = pts.iloc[j]
        rho = float(pt["rho"])
        if not bool(pt["feasible"]) or not rho > 0:
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: operating point is infeasible ({pt.get('reason', '')})")
        if r.role in ("prefill", "unified") and float(pt["ttft_ms"]) > float(pt["ttft_target_ms"]) * (1 + TOL):
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: TTFT {float(pt['ttft_ms']):.1f} ms > target {float(pt['ttft_target_ms']):g} ms")
        if r.role in ("decode", "unified") and float(pt["tpot_ms"]) > float(pt["tpot_target_ms"]) * (1 + TOL):
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: TPOT {float(pt['tpot_ms']):.1f} ms > target {float(pt['tpot_target_ms']):g} ms")
        if (r.role in ("decode", "unified") and "itl_target_ms" in pt.index and "itl_ms" in pt.index
                and _num(pt["itl_ms"]) > _num(pt["itl_target_ms"]) * (1 + TOL)):
            out.append(f"mask[{r.service}|{r.bucket}|{r.role}|{r.config}]: ITL {float(pt['itl_ms']):.1f} ms > target {float(pt['itl_target_ms']):g} ms")
        if r.pool not in pools:
            out.append(f"pool[{r.pool}]: routed to a pool the plan does not provision")
        if str(pt["pool"]) != r.pool:
            out.append(f"pool[{r.pool}]: routing names pool {r.pool}, the operating point belongs to {pt['pool']}")
        lam_p, lam_m, tau = float(pt["rate_peak_per_s"]), float(pt["rate_mean_per_s"]), float(pt["instance_seconds_per_request"])
        if not _close(r.rate_peak_per_s, lam_p * r.share) or not _close(r.rate_mean_per_s, lam_m * r.share):
            out.append(f"route[{r.service}|{r.bucket}|{r.role}|{r.config}]: routed rates {r.rate_peak_per_s:g}/{r.rate_mean_per_s:g} req/s "
                       f"!= point rates x share {lam_p * r.share:g}/{lam_m * r.share:g}")
        load[r.pool] += lam_p * tau / rho * r.share if rho > 0 else math.inf
        busy_peak[r.pool] += lam_p * tau * r.share
        busy_mean[r.pool] += lam_m * tau * r.share
        kv[r.pool] += float(pt["kv_peak_coef"]) * r.share
        rows.append(j)
        shares.append(r.share)
    for d in demand.itertuples(index=False):
        encodes = float(getattr(d, "encode_tokens_mean", 0.0) or 0.0) > 0  # multimodal rows: an encode phase too
        for phase in ("prefill", "decode", "encode") if encodes else ("prefill", "decode"):
            s = phase_sum.get((str(d.service), str(d.bucket), phase), 0.0)
            if abs(s - 1.0) > 1e-5:
                out.append(f"route[{d.service}|{d.bucket}|{phase}]: shares sum to {s:.6f}, not 1")
    for (svc, bucket, pool), share in inline_share.items():
        if share > host_share.get((svc, bucket, pool), 0.0) + 1e-5:
            out.append(f"encode_host[{svc}|{bucket}|{pool}]: inline encode share {share:.6f} exceeds the share the pool prefills")
    tool = plan.tool_phase is not None and bool(plan.tool_phase.tools)
    for name, p in pools.items():
        out += _check_pool(name, p, k, load.get(name, 0.0), busy_peak.get(name, 0.0), busy_mean.get(name, 0.0), kv.get(name, 0.0), tool)
        if cap is not None and load.get(name, 0.0) > 0:
            # options.max_utilization bounds every pool: its cap (the routed loads' busy / load) and so its peak utilisation
            eff = busy_peak.get(name, 0.0) / load[name]
            if eff > cap * (1 + cap_tol):
                util = busy_peak.get(name, 0.0) / p.instances if p.instances > 0 else math.inf
                out.append(f"max_utilization[{name}]: utilisation cap {eff:.3g} (peak utilisation {util:.3g}) is above "
                           f"options.max_utilization = {cap:g}")
        # KV capacity: one instance's (the smallest of the pool's points, as planner.optimize.prepare.pools_of) x surviving instances
        if "kv_capacity_bytes" in pts.columns and len(pts):
            mine = pts["pool"].astype(str) == name
            if "role" in pts.columns:  # inline encode rows hold no KV (as prepare.pools_of)
                mine &= ~pts["role"].astype(str).isin(list(ENCODE_HOST))
            own = pts.loc[mine, "kv_capacity_bytes"].astype(float)
            if len(own):
                per_instance = float(np.nan_to_num(own.min(), nan=0.0))
                true_cap = per_instance * max(p.instances - k, 0)
                if not _close(p.kv_capacity_bytes, true_cap, rel=1e-6, abs_tol=1.0):
                    out.append(f"kv[{name}]: kv_capacity_bytes {p.kv_capacity_bytes:.6g} recomputes to {true_cap:.6g} "
                               f"({per_instance:.6g} B per instance x {max(p.instances - k, 0)} surviving)")
                elif true_cap > 0 and kv.get(name, 0.0) > true_cap * (1 + TOL):
                    out.append(f"kv[{name}]: resident KV at peak {kv.get(name, 0.0):.3g} B exceeds the recomputed capacity {true_cap:.3g} B")
    per_device: dict[str, int] = defaultdict(int)
    for p in pools.values():
        per_device[p.device] += p.devices
    for dev, used in per_device.items():
        lim = configs.loc[configs["device"] == dev, "procurement_limit"].astype(float).min() if len(configs) else math.nan
        if np.isfinite(lim) and used > lim:
            out.append(f"procurement[{dev}]: {used} devices exceed the limit {lim:g}")
    if plan.costs is None:
        return out + ["costs: a feasible plan without costs"]
    total = plan.costs.total_usd_per_month
    total_terms = sum(plan.costs.terms().values())
    if abs(total_terms - total) > 1e-6 * max(1.0, abs(total)):
        out.append(f"costs: terms sum to {total_terms:.2f}, total says {total:.2f}")
    for t, v in plan.costs.terms().items():
        if v < -1e-6 * max(1.0, abs(total)):
            out.append(f"costs: {t} is negative ({v:,.2f})")
    if budget is not None and total > budget * (1 + TOL):
        out.append(f"budget: total {total:,.2f} exceeds the budget {budget:,.2f}")
    pool_df = pd.DataFrame([{"pool": p.name, "tp": p.tp, "config": p.config, "device": p.device, "sends_kv": p.sends_kv} for p in pools.values()],
                           columns=["pool", "tp", "config", "device", "sends_kv"])
    beyond = [f"pool[{name}]: {p.instances:.3g} instances is beyond any plan (more than 2^53): its costs cannot be recomputed"
              for name, p in pools.items() if abs(p.instances) > 2**53]
    if beyond:  # a fuzzed count past a machine integer (numpy's int64 overflowed on it)
        return out + beyond
    n = np.array([p.instances for p in pools.values()], dtype=int)
    sub = pts.iloc[rows].reset_index(drop=True) if rows else pts.iloc[0:0]
    x = np.array(shares, dtype=float)
    if len(configs) and not set(pool_df["config"]) <= set(configs["config"].astype(str)):
        return out + [f"pool: configuration(s) {', '.join(sorted(set(pool_df['config']) - set(configs['config'].astype(str))))} not in the snapshot"]
    again = cost_breakdown(costs, configs, sub, x, pool_df, n, redundancy=k)
    out += check_tool_phase(plan)  # tool-phase terms and constraints (planner.agents)
    for t in (*COST_TERMS, "idle_capacity_usd_per_month"):  # the idle attribution too: not a term, but a number shown
        if t in TOOL_COST_TERMS:
            continue
        a, b = getattr(again, t), getattr(plan.costs, t)
        if abs(a - b) > 1e-4 * max(1.0, abs(b)):
            out.append(f"costs: {t} recomputes to {a:,.2f}, plan says {b:,.2f}")
    obj = plan.solver.objective_usd_per_month
    # A proven optimum costs what its objective says. An incumbent cut short (time limit) may carry
    # a device-type or pool indicator at 1 that no pool uses: the plan's recomputed cost is then
    # below its objective, never above.
    if obj is not None and abs(obj - total) > 1e-4 * max(1.0, abs(total)) and (plan.solver.status == "optimal" or total > obj):
        out.append(f"costs: total {total:,.2f} differs from the solver objective {obj:,.2f}")
    out += _check_pool_costs(plan, sub, x, configs, costs)
    out += _check_tokens(plan, sub, x, configs, costs, pools)
    out += _check_latency(plan, sub, x, demand, recompute=recompute_latency)
    return out


def _check_pool(name: str, p: Any, k: int, load: float, busy_peak: float, busy_mean: float, kv: float, tool: bool) -> list[str]:
    out: list[str] = []
    if p.devices != p.instances * p.tp:
        out.append(f"pool[{name}]: devices {p.devices} != instances {p.instances} x tp {p.tp}")
    if config_devices(p.config) != (p.device, p.tp) or name != f"{p.role}:{p.config}:{p.model}":
        out.append(f"pool[{name}]: name, role, config, device and tp disagree ({p.role}, {p.config}, {p.device}, tp{p.tp})")
    if p.redundancy != k:
        out.append(f"pool[{name}]: redundancy {p.redundancy} != the plan's {k}")
    avail = p.instances - k
    if load > avail * (1 + TOL) + TOL:
        out.append(f"load[{name}]: peak load {load:.4f} instances (at the utilisation cap) exceeds {avail} instances after losing {k}")
    if p.instances < k + 1:
        return [*out, f"pool_min[{name}]: {p.instances} instance(s) cannot carry traffic and survive the loss of {k}"]
    if p.kv_capacity_bytes > 0 and kv > p.kv_capacity_bytes * (1 + TOL):
        out.append(f"kv[{name}]: resident KV at peak {kv:.3g} B exceeds capacity {p.kv_capacity_bytes:.3g} B")
    for what, stated, true in (("busy_instances_peak", p.busy_instances_peak, busy_peak), ("busy_instances_mean", p.busy_instances_mean, busy_mean),
                               ("utilization_peak", p.utilization_peak, busy_peak / p.instances),
                               ("utilization_mean", p.utilization_mean, busy_mean / p.instances),
                               ("utilization_cap", p.utilization_cap, busy_peak / load if load > 0 else 0.0)):
        if not _close(stated, true):
            out.append(f"pool[{name}]: {what} {stated:.6g} differs from the routed loads' {true:.6g}")
    for what, v in (("utilization_peak", p.utilization_peak), ("utilization_mean", p.utilization_mean), ("utilization_cap", p.utilization_cap)):
        if not (0.0 <= v <= 1.0 + TOL):
            out.append(f"pool[{name}]: {what} {v:g} outside [0, 1]")
    if not tool and p.kv_bytes_peak > 0 and not _close(p.kv_bytes_peak, kv, rel=1e-6, abs_tol=1.0):
        out.append(f"pool[{name}]: kv_bytes_peak {p.kv_bytes_peak:.6g} differs from the routed points' {kv:.6g}")
    if p.cost_usd_per_month < 0:
        out.append(f"pool[{name}]: negative cost {p.cost_usd_per_month:,.2f}")
    return out


def _check_pool_costs(plan: ArchitecturePlan, sub: pd.DataFrame, x: np.ndarray, configs: pd.DataFrame, c: CostParams) -> list[str]:
    """Each pool's cost recomputed as :func:`planner.optimize.solve._pool_costs` does (every term restricted
    to the pool, without the per-device-type cost), and pools + device types + tool terms = total."""
    assert plan.costs is not None
    out: list[str] = []
    H = float(c.hours_per_month)
    kwh_price = float(c.electricity_usd_per_kwh) * float(c.pue)
    cfg: dict[str, Any] = {str(r["config"]): r for r in configs.to_dict("records")}
    per_pool: dict[str, float] = {}
    for p in plan.pools:
        row = cfg[p.config]
        dev = float(p.devices)
        sel = (sub["pool"].astype(str) == p.name).to_numpy() if len(sub) else np.zeros(0, dtype=bool)
        s = sub[sel]
        lam = s["rate_mean_per_s"].to_numpy(float) * x[sel]
        tau = s["instance_seconds_per_request"].to_numpy(float)
        host = float(row["host_power_w"])
        idle = float(row["idle_power_w"])
        busy_j = s["energy_j_per_request"].to_numpy(float) + tau * float(p.tp) * host
        busy = float(np.sum(lam * busy_j)) * SECONDS_PER_HOUR * H / J_PER_KWH * kwh_price
        idle_cost = kwh_price * H * (dev * (idle + host) / 1e3 - float(np.sum(lam * tau * float(p.tp) * (idle + host))) / 1e3)
        kvtx = np.where(s["role"].to_numpy(str) == "prefill", s["kv_transfer_bytes_per_request"].to_numpy(float), 0.0)
        transfer = float(np.sum(lam * kvtx)) / 1e9 * SECONDS_PER_HOUR * H * float(c.transfer_usd_per_gb)
        cost = (dev * float(row["equipment_usd_per_device_hour"]) * H + busy + idle_cost
                + (dev * float(c.nic_usd_per_device_month) if p.sends_kv else 0.0) + transfer
                + (float(c.ops_usd_per_pool_month) if p.instances > 0 else 0.0)
                + dev * (float(row["ops_usd_per_device_month"]) + float(row["license_usd_per_device_month"])))
        per_pool[p.name] = cost
        if not _close(p.cost_usd_per_month, cost, rel=1e-4, abs_tol=0.01):
            out.append(f"pool[{p.name}]: cost {p.cost_usd_per_month:,.2f} USD/month recomputes to {cost:,.2f} from its counts and prices")
    rest = plan.costs.ops_device_types_usd_per_month + sum(getattr(plan.costs, t) for t in TOOL_COST_TERMS)
    total = sum(per_pool.values()) + rest
    if not _close(total, plan.costs.total_usd_per_month, rel=1e-4, abs_tol=0.01):
        out.append(f"costs: pool costs + device types + tool phase = {total:,.2f}, total says {plan.costs.total_usd_per_month:,.2f}")
    return out


def _check_tokens(plan: ArchitecturePlan, sub: pd.DataFrame, x: np.ndarray, configs: pd.DataFrame, c: CostParams,
                  pools: dict[str, Any]) -> list[str]:
    assert plan.costs is not None
    out: list[str] = []
    H = float(c.hours_per_month)
    first = sub["role"].isin(["prefill", "unified"]).to_numpy() if len(sub) else np.zeros(0, dtype=bool)
    per_req = (sub["input_tokens_mean"] + sub["output_tokens_mean"]).to_numpy(float) if len(sub) else np.zeros(0)
    lam = sub["rate_mean_per_s"].to_numpy(float) * x if len(sub) else np.zeros(0)
    tokens = float(np.sum((lam * per_req)[first])) * SECONDS_PER_HOUR * H
    if not _close(plan.tokens_per_month, tokens):
        out.append(f"costs: tokens_per_month {plan.tokens_per_month:.6g} recomputes to {tokens:.6g}")
    total = plan.costs.total_usd_per_month
    per_m = total / tokens * 1e6 if tokens > 0 else None
    stated = plan.usd_per_million_tokens
    if (per_m is None) != (stated is None) or (per_m is not None and stated is not None and not _close(stated, per_m)):
        out.append(f"costs: usd_per_million_tokens {stated} recomputes to {per_m}")
    if plan.tool_phase is None and tokens > 0 and len(sub):
        cfg = configs.drop_duplicates("config").set_index("config")
        ptc = cfg.reindex(sub["config"].to_numpy())
        tau_tp = sub["instance_seconds_per_request"].to_numpy(float) * sub["tp"].to_numpy(float)
        host = ptc["host_power_w"].to_numpy(float)
        idle_host = ptc["idle_power_w"].to_numpy(float) + host
        busy_kwh = float(np.sum(lam * (sub["energy_j_per_request"].to_numpy(float) + tau_tp * host))) * SECONDS_PER_HOUR * H / J_PER_KWH
        rows = {str(r["config"]): r for r in configs.to_dict("records")}
        prov_w = sum(float(p.devices) * (float(rows[p.config]["idle_power_w"]) + float(rows[p.config]["host_power_w"])) for p in pools.values())
        kwh = float(c.pue) * (busy_kwh + H / 1e3 * (prov_w - float(np.sum(lam * tau_tp * idle_host))))
        wh = kwh * 1e3 / tokens * 1e3
        if plan.energy_wh_per_1k_tokens is None or not _close(plan.energy_wh_per_1k_tokens, wh, rel=1e-5):
            out.append(f"costs: energy_wh_per_1k_tokens {plan.energy_wh_per_1k_tokens} recomputes to {wh:.6g}")
        if not _close(plan.power_kw_mean, kwh / H, rel=1e-5):
            out.append(f"costs: power_kw_mean {plan.power_kw_mean:.6g} recomputes to {kwh / H:.6g}")
    return out


def _recomputed_ttft_ms(plan: ArchitecturePlan, sub: pd.DataFrame, x: np.ndarray) -> dict[str, float]:
    """Per service: the worst routed bucket's TTFT as :mod:`planner.optimize.extract` predicts it — the pools' waits
    (:func:`planner.pool_latency.pool_latency`) and :func:`planner.pool_latency.bucket_latency` with the pools' rows
    (a prefill pool's TTFT is its latency group's length-mix quantile, :mod:`planner.ttft_mixture`); empty when the
    points lack what that needs (a snapshot of another shape: then only the floor below is checked)."""
    from planner.pool_latency import bucket_latency, pool_waits

    need = ("pool", "role", "rate_peak_per_s", "instance_seconds_per_request", "max_batch", "service_time_cv", "interarrival_cv",
            "ttft_quantile", "ttft_ms", "tpot_ms", "ttft_target_ms", "tpot_target_ms")
    if not len(sub) or not plan.pools or any(c not in sub.columns for c in need):
        return {}
    inst = {p.name: p.instances for p in plan.pools}
    k = plan.pools[0].redundancy
    try:
        pl, lanes, waits = pool_waits(sub, x, inst, k)
        by_bucket = bucket_latency(sub, x, waits, lanes, instances=inst, redundancy=k, pool_rows=pl)
    except (KeyError, ValueError, TypeError, ArithmeticError):  # absurd snapshot numbers (1e308): reported by the number checks
        return {}
    return {str(s): float(g["ttft_predicted_ms"].max()) for s, g in by_bucket.groupby("service", sort=False)}


def _check_latency(plan: ArchitecturePlan, sub: pd.DataFrame, x: np.ndarray, demand: pd.DataFrame, *, recompute: bool = True) -> list[str]:
    out: list[str] = []
    recomputed = _recomputed_ttft_ms(plan, sub, x) if recompute else {}
    tool_reloads = {r.service for r in (plan.tool_phase.tools if plan.tool_phase is not None else [])
                    if r.offload_share > 0 or r.recompute_share > 0}
    if len(sub) and plan.pools:
        # unified points at the load their pool carries: the prediction extract reports (planner.pool_latency.unified_at_load)
        from planner.pool_latency import unified_at_load

        try:
            at = unified_at_load(sub, x, {p.name: p.instances for p in plan.pools}, plan.pools[0].redundancy)
        except (ValueError, ArithmeticError, MemoryError):  # absurd snapshot numbers (a 1e200 s service time): the number checks report them
            at = pd.DataFrame({"ttft_at_load_ms": np.full(len(sub), np.nan)}, index=sub.index)
        hit = at["ttft_at_load_ms"].notna().to_numpy()
        if hit.any():
            sub = sub.copy()
            for col, src in (("tpot_ms", "tpot_at_load_ms"), ("itl_ms", "itl_at_load_ms"), ("ttft_ms", "ttft_at_load_ms")):
                if col in sub.columns:
                    sub.loc[hit, col] = at.loc[hit, src].to_numpy(float)
            if "lane_wait_ms" in sub.columns:
                sub.loc[hit, "lane_wait_ms"] = 0.0  # the at-load TTFT holds no point-level lane wait
    by_service = {lp.service: lp for lp in plan.latency}
    if len(by_service) != len(plan.latency):
        out.append("latency: a service has two predictions")
    for svc, g in demand.groupby("service", sort=False):
        lp = by_service.get(str(svc))
        if lp is None:
            out.append(f"latency[{svc}]: no prediction")
            continue
        r0 = g.iloc[0]
        metric = token_metric(r0)  # the per-token metric the service targets (TPOT if set, else ITL), as extract reports it
        if lp.token_metric != metric:
            out.append(f"latency[{svc}]: reports {lp.token_metric.upper()} but the service's per-token target is {metric.upper()}")
        tok_q = float(r0[f"{metric}_quantile"]) if f"{metric}_quantile" in r0 else math.nan
        for what, stated, true in (("ttft_target_ms", lp.ttft_target_ms, float(r0["ttft_target_ms"])),
                                   (f"{metric}_target_ms", lp.tpot_target_ms, float(r0.get(f"{metric}_target_ms", math.inf))),
                                   ("ttft_quantile", lp.ttft_quantile, float(r0["ttft_quantile"])),
                                   (f"{metric}_quantile", math.nan if lp.tpot_quantile is None else lp.tpot_quantile, tok_q)):
            if not (_close(stated, true) or (math.isnan(stated) and math.isnan(true))):
                out.append(f"latency[{svc}]: {what} {stated:g} differs from the service's {true:g}")
        s = sub[(sub["service"].astype(str) == str(svc)).to_numpy()] if len(sub) else sub
        xs = x[(sub["service"].astype(str) == str(svc)).to_numpy()] if len(sub) else x
        on = xs > 0
        roles = s["role"].to_numpy(str)
        dec = np.isin(roles, ("decode", "unified")) & on
        col = "itl_ms" if metric == "itl" and "itl_ms" in s.columns else "tpot_ms"
        tpot = float(s[col].to_numpy(float)[dec].max()) if dec.any() else 0.0
        if not _close(lp.tpot_predicted_ms, tpot, rel=1e-6, abs_tol=1e-6):
            out.append(f"latency[{svc}]: {metric.upper()} predicted {lp.tpot_predicted_ms:,.1f} ms, the worst routed point has {tpot:,.1f} ms")
        first = np.isin(roles, ("prefill", "unified")) & on
        own_lane = np.nan_to_num(s["lane_wait_ms"].to_numpy(float)) if "lane_wait_ms" in s.columns else np.zeros(len(s))
        own_ttft = s["ttft_ms"].to_numpy(float) - np.where(roles == "unified", own_lane, 0.0)
        if TTFT_MIX_COLUMN in s.columns:  # a prefill point's TTFT is its length mix's quantile (planner.ttft_mixture): at least its fastest sub-bin
            from planner.ttft_mixture import parse_mix

            mixes = [parse_mix(m) if r == "prefill" else None for r, m in zip(roles, s[TTFT_MIX_COLUMN].tolist(), strict=True)]
            own_ttft = np.array([min(t, float(np.min(m[1]))) if m is not None else t for t, m in zip(own_ttft, mixes, strict=True)])
        floor = float(own_ttft[first].max()) if first.any() else 0.0
        if lp.ttft_predicted_ms < floor * (1 - 1e-6) - 1e-6:
            out.append(f"latency[{svc}]: TTFT predicted {lp.ttft_predicted_ms:,.1f} ms is below the routed points' own TTFT {floor:,.1f} ms")
        # a tool phase that offloads or recomputes KV adds its reload time to the next turn's TTFT
        # (planner.agents.extract.adjust_latency), stated as ttft_added_ms
        added = _num(lp.ttft_added_ms)
        if not (added >= 0) or (added > 0 and str(svc) not in tool_reloads):
            out.append(f"latency[{svc}]: ttft_added_ms {added:g} ms, but no tool phase of the service offloads or recomputes KV")
            added = 0.0
        again = recomputed.get(str(svc))
        # a plan written before ttft_added_ms with a reloading tool phase: its reload is somewhere above the pools' figure
        older = added == 0 and str(svc) in tool_reloads and lp.ttft_predicted_ms >= (again or 0.0) * (1 - 1e-6) - 1e-3
        if again is not None and not (_close(lp.ttft_predicted_ms, again + added, rel=1e-6, abs_tol=1e-3) or older
                                      or (math.isinf(again) and math.isinf(lp.ttft_predicted_ms))):
            out.append(f"latency[{svc}]: TTFT predicted {lp.ttft_predicted_ms:,.1f} ms, the plan's pools give {again:,.1f} ms"
                       + (f" + {added:,.1f} ms of KV reloads after tool waits" if added > 0 else "") + " (planner.pool_latency.bucket_latency)")
        for metric, pred, target, met in (("ttft", lp.ttft_predicted_ms, lp.ttft_target_ms, lp.ttft_met),
                                          ("tpot", lp.tpot_predicted_ms, lp.tpot_target_ms, lp.tpot_met)):
            if met != bool(pred <= target * (1 + TOL)):
                out.append(f"latency[{svc}]: {metric}_met = {met} but predicted {pred:,.1f} ms vs target {target:g} ms")
    return out
