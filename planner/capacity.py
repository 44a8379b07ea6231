"""Build the capacity tables (the optimiser's only input) from an instance, or read a measured file.

From an instance (:func:`build_capacity_tables`)
------------------------------------------------
- ``demand``: one row per (service, bucket) of the workload profile
  (:func:`planner.workload.service_profile`): ``rate_mean = λ_mean · w_b``,
  ``rate_peak = λ_peak(window) · w_b`` (the service's peak over ``traffic.peak_window`` split
  by bucket weight), bucket means and conservative representatives, SLOs, and
  ``model = "{model}@{weight_precision}"`` (instances of different groups are different pools);
  ``interarrival_cv`` = the CV inside ``traffic.peak_window`` windows (:func:`peak_interarrival_cv`),
  the whole-log CV kept in ``interarrival_cv_whole_log``; ``latency_group``: the bucket's latency group
  (:func:`planner.workload.buckets.latency_groups`, item 6 of that module: above 4 buckets, the ``i/4``
  input-quantile bin it nests in; each bucket its own otherwise or when the buckets are not in ascending
  input order, e.g. hand-written), whose queue the utilisation caps price (:func:`planner.optimize.prepare.group_busy`)
  and whose peak rate a prefill point's batch is chosen for.
- ``points``: :func:`planner.perf.operating_point` for every (service, bucket, role,
  device, tp) with tp ≤ the device's scale-up domain. Latency uses the bucket
  representatives. Work per request (``instance_seconds_per_request``, energy, KV) uses the
  bucket's length mix when every bucket of the service has one (a log's buckets,
  :mod:`planner.workload.buckets` item 5), so that it does not depend on the bucket count
  (issue 24 item 0): decode and unified points are computed at the service's mean lengths
  (a unified point's TTFT at the bucket's representative prompt) and each bucket pays its own
  mean work there (:func:`bucket_work`); a prefill point is the representative's (its TTFT and
  batch), its time per request the share-weighted mean of its sub-bins' points (:func:`mix_work`).
  Without a mix (hand-written buckets) the representatives price the work too (conservative).
  Unified points also carry the chunked-prefill lane columns (``POINT_OPTIONAL_COLUMNS``, from
  ``OperatingPoint.detail``).
- ``configs``: prices per device-hour — rental, or purchase as an annuity
  ``P · r / (1 − (1 + r)^−Y)`` per year (straight line ``P / Y`` at ``r = 0``) over
  ``12 · hours_per_month`` hours; power, host share, operations (profile + instance
  per-device operations), licences, procurement limits, NIC bandwidth.

A measured capacity file (:func:`read_measured_capacity`, Mélange-style)
-------------------------------------------------------------------------
CSV with one row per (service, bucket, device, tp[, role]): the request rate ONE instance
sustains while meeting the service's SLO. Columns::

    service, bucket          must match the instance's demand rows (see ``planner solve --json``)
    device, tp               a candidate device id and tensor-parallel degree
    role                     optional: unified (default), prefill or decode
    parallelism              optional: an expert-parallel replica's label (``tp1·ep32·dp32`` or ``tp1-ep32-dp32``;
                             ``tp`` is then its GPUs); empty = TP only
    max_rate_per_s           requests/s one instance sustains within SLO (measured)
    ttft_ms, tpot_ms         optional: measured latencies at that rate (reported, checked against targets)
    max_batch                optional (default 1)
    energy_j_per_request     optional (default: busy power x tp / max_rate_per_s)
    kv_transfer_bytes_per_request  optional, prefill rows (default 0)

Each row becomes an operating point with ``instance_seconds_per_request = 1 / max_rate_per_s``
and ``utilization_cap = 1`` — the measured rate already includes queueing at the SLO — and
replaces the roofline points for the same (service, bucket, role, config); with
``only_listed`` (``--capacity-only``) every other point is marked infeasible. A measured
TTFT or TPOT above the service's target marks the point infeasible (reason given). Pools made
of measured points add no queueing wait (:func:`planner.optimize.extract.measured_pools`), are
not re-checked or tightened, and are simulated as delay stations
(:mod:`planner.simulate.adapter`). Problems (missing file or columns, unknown service/bucket,
a device that is neither a candidate nor declared, tp, role, a rate ≤ 0) are collected and
raised once as an :class:`InputError` naming the row (CLI exit 2).

Declared devices (``catalog.declared_devices``: price, power if known; not in the catalog) get
a configs row like any device and, having no performance profile, infeasible operating points
until a measured file gives theirs.

:func:`measured_capacity_frame` writes a capacity table's feasible points in this format
(``max_rate_per_s = 1 / instance_seconds_per_request``: the busy-rate of one instance, before
any queueing cap) — a starting template to replace with measurements; reading it back gives
the same per-request instance time, batch, energy, latency and KV transfer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem, ProblemCollector
from planner.instance import ResolvedInstance
from planner.perf.moe import Parallelism
from planner.pricing import equipment_usd_per_device_hour
from planner.schema.capacity import (
    BURST_TABLE_COLUMNS,
    CONFIG_COLUMNS,
    CONFIG_PARALLELISM_COLUMN,
    DEMAND_COLUMNS,
    DEMAND_LATENCY_COLUMNS,
    INPUT_TAIL_COLUMN,
    LATENCY_GROUP_COLUMN,
    LENGTH_MIX_COLUMN,
    POINT_COLUMNS,
    POINT_KV_CAPACITY_COLUMN,
    POINT_OPTIONAL_COLUMNS,
    TTFT_MIX_COLUMN,
    CapacityTables,
    CostParams,
    config_devices,
    latency_targets,
)
from planner.ttft_mixture import mix_text
from planner.workload.buckets import latency_groups
from planner.workload.replay_wait import (
    RENEWAL_WAIT_COLUMN,
    REPLAY_SLOT_COLUMN,
    REPLAY_WAIT_COLUMN,
    curve_json,
    renewal_curve,
    traffic_refusal,
)

ROLES = ("prefill", "decode", "unified")


def cost_params(resolved: ResolvedInstance) -> CostParams:
    c = resolved.instance.costs
    return CostParams(electricity_usd_per_kwh=c.electricity_usd_per_kwh, pue=c.pue, hours_per_month=c.hours_per_month,
                      ops_usd_per_pool_month=c.ops_usd_per_pool_month, ops_usd_per_device_type_month=c.ops_usd_per_device_type_month,
                      nic_usd_per_device_month=c.network.nic_usd_per_device_month, transfer_usd_per_gb=c.network.transfer_usd_per_gb)


def _configs(resolved: ResolvedInstance) -> pd.DataFrame:
    from planner.perf.power import loaded_idle_power_w

    inst = resolved.instance
    c = inst.costs
    rows = []
    for dev_id in inst.catalog.devices:
        dev = resolved.devices[dev_id]
        eq = equipment_usd_per_device_hour(dev, inst.catalog.pricing, c.hours_per_month, years=c.amortization_years, rate=c.cost_of_capital_rate)
        candidates = [Parallelism(tp) for tp in inst.catalog.tp_degrees if tp <= dev.devices_per_node]
        candidates += ep_candidates(resolved) if dev_id not in inst.catalog.declared_devices else []
        for par in candidates:
            rows.append({
                "config": f"{dev_id}/{par.key()}", "device": dev_id, "tp": par.gpus, "kind": dev.kind,
                "equipment_usd_per_device_hour": eq, "busy_power_w": float(dev.busy_power_w or 0.0),
                "idle_power_w": loaded_idle_power_w(dev), "host_power_w": float(dev.host_power_w),  # weights loaded, no work (planner.perf.power)
                "ops_usd_per_device_month": float(dev.operations_usd_per_month) + float(c.ops_usd_per_device_month),
                "license_usd_per_device_month": float(dev.software_license_usd_per_month),
                "procurement_limit": float(dev.procurement_limit) if dev.procurement_limit else math.inf,
                "nic_bw_gb_per_s": float(dev.nic_bw_gb_per_s or 0.0), CONFIG_PARALLELISM_COLUMN: par.label(),
            })
    return pd.DataFrame(rows, columns=[*CONFIG_COLUMNS, CONFIG_PARALLELISM_COLUMN])


def ep_candidates(resolved: ResolvedInstance) -> list[Parallelism]:
    """Expert-parallel replicas to consider (``catalog.ep_degrees`` x ``catalog.attention_tp_degrees``;
    :data:`planner.perf.moe.DEFAULT_EP_DEGREES` when ``ep_degrees`` is not given and a service serves a
    MoE model, none for dense-only instances so that their candidates stay TP-only)."""
    from planner.perf.moe import DEFAULT_EP_DEGREES, ep_parallelisms

    cat = resolved.instance.catalog
    degrees = cat.ep_degrees
    if degrees is None:
        moe = any(resolved.models[s.model].moe is not None for s in resolved.instance.services.values())
        degrees = list(DEFAULT_EP_DEGREES) if moe else []
    return ep_parallelisms(degrees, cat.attention_tp_degrees)


def _parallelism(configs: pd.DataFrame) -> dict[str, Parallelism]:
    """Config name -> its :class:`Parallelism` (from the ``parallelism`` label)."""
    out: dict[str, Parallelism] = {}
    for config, label in zip(configs["config"].astype(str), configs[CONFIG_PARALLELISM_COLUMN].astype(str), strict=True):
        parts = {p[:2]: int(p[2:]) for p in label.split("·")}
        out[config] = Parallelism(parts["tp"], parts.get("ep", 1), parts.get("dp", 1))
    return out


def _demand(resolved: ResolvedInstance) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    from planner.workload import peak_rate_per_s, service_profile
    from planner.workload.context import context_findings

    rows = []
    profiles: dict[str, Any] = {}
    notes: list[str] = []
    for name, svc in resolved.instance.services.items():
        prof = service_profile(resolved, name)
        profiles[name] = prof
        peak = float(peak_rate_per_s(prof, svc.traffic.peak_window))
        mean = float(prof.arrivals.rate_mean_per_s)
        if peak < mean:
            notes.append(f"{name}: peak over {svc.traffic.peak_window} ({peak:.3g}/s) below the mean ({mean:.3g}/s); planning for the mean")
            peak = mean
        notes += [f"{name}: {n}" for n in prof.arrivals.notes]
        cv, cv_note = peak_interarrival_cv(prof.arrivals, svc.traffic.peak_window, svc.traffic.interarrival_cv)
        if cv_note:
            notes.append(f"{name}: {cv_note}")
        replay = _replay_wait_text(svc.traffic, prof)
        slots = "" if not replay else curve_json(prof.arrivals.replay_slot_spacing.get(svc.traffic.peak_window))
        renewal = "" if replay else renewal_curve(cv)  # renewal arrivals at peak: their bursts, for shared lanes
        means = [b.input_tokens_mean for b in prof.buckets]
        # latency groups (planner.workload.buckets item 6) of buckets in ascending input order (a log's, a PMF's); else each its own
        groups = (latency_groups([b.weight for b in prof.buckets]) if all(x <= y for x, y in zip(means, means[1:], strict=False))
                  else list(range(len(prof.buckets))))
        for b, group in zip(prof.buckets, groups, strict=True):
            rows.append({
                "service": name, "bucket": b.name, "weight": b.weight,
                "rate_mean_per_s": mean * b.weight, "rate_peak_per_s": peak * b.weight,
                "input_tokens_mean": b.input_tokens_mean, "output_tokens_mean": b.output_tokens_mean,
                "input_tokens_rep": b.input_tokens, "output_tokens_rep": b.output_tokens,
                "interarrival_cv": cv, "interarrival_cv_whole_log": float(prof.arrivals.interarrival_cv),
                **svc.slo.table_columns(),
                "model": f"{svc.model}@{svc.weight_precision}", "cached_prefix_share": b.cached_prefix_share,
                LENGTH_MIX_COLUMN: json.dumps([list(m) for m in b.length_mix]) if b.length_mix else "",
                LATENCY_GROUP_COLUMN: int(group), INPUT_TAIL_COLUMN: float(b.input_tail_share),
                REPLAY_WAIT_COLUMN: replay, REPLAY_SLOT_COLUMN: slots, RENEWAL_WAIT_COLUMN: renewal,
            })
    beyond, context_notes = context_findings(resolved, profiles)  # requests beyond the model's context window
    if beyond:
        raise InputError(beyond)
    notes += context_notes
    return pd.DataFrame(rows, columns=[*DEMAND_COLUMNS, *DEMAND_LATENCY_COLUMNS, "model", "cached_prefix_share", "interarrival_cv_whole_log",
                                       LENGTH_MIX_COLUMN, LATENCY_GROUP_COLUMN, INPUT_TAIL_COLUMN, *BURST_TABLE_COLUMNS]), profiles, notes


def _replay_wait_text(traffic: Any, prof: Any) -> str:
    """The service's replayed-burst wait curve (:mod:`planner.workload.replay_wait`) as the demand column's text, where
    the peak simulation replays its log (as :func:`planner.verify.peak_arrivals_from_instance` decides: a log with
    timestamps, no ``interarrival_cv`` override, one service, replayable over ``peak_window``); ``""`` elsewhere (the
    simulation draws renewal arrivals there, and the G/G/c wait with the CV is the whole model)."""
    if traffic_refusal(traffic):
        return ""
    return curve_json(prof.arrivals.replay_wait.get(traffic.peak_window))


def length_mix(row: Any) -> list[tuple[float, float, float]]:
    """A demand row's length mix (``[]`` when absent): ``(share, input tokens, output tokens)`` per sub-bin."""
    raw = row.get(LENGTH_MIX_COLUMN, "") if hasattr(row, "get") else ""
    if not isinstance(raw, str) or not raw:
        return []
    return [(float(w), float(n), float(o)) for w, n, o in json.loads(raw)]


def mix_means(mix: list[tuple[float, float, float]]) -> tuple[float, float]:
    """The share-weighted mean (input, output) tokens of a length mix: the lengths a bucket's work is
    priced at (:func:`bucket_work`) and the simulator's requests average (:mod:`planner.simulate.adapter`)."""
    w = np.array([m[0] for m in mix], dtype=float)
    w = w / w.sum()
    return float(np.dot(w, [m[1] for m in mix])), float(np.dot(w, [m[2] for m in mix]))


def service_mean_lengths(demand: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per service all of whose buckets carry a length mix: its mean (input, output) tokens over the
    mixes, ``sum_b w_b M_b / sum_b w_b`` (``M_b`` = :func:`mix_means`). The mixes are the same fine
    sub-bins at every bucket count (:mod:`planner.workload.buckets` item 5), so this is too."""
    out: dict[str, tuple[float, float]] = {}
    if LENGTH_MIX_COLUMN not in demand.columns:
        return out
    for svc, g in demand.groupby("service", sort=False):
        mixes = [length_mix(r) for r in g.to_dict("records")]
        w = g["weight"].to_numpy(float)
        if not all(mixes) or w.sum() <= 0:
            continue
        means = np.array([mix_means(m) for m in mixes])
        out[str(svc)] = (float(np.dot(w, means[:, 0]) / w.sum()), float(np.dot(w, means[:, 1]) / w.sum()))
    return out


def bucket_work(op: Any, role: str, service_means: tuple[float, float], mix: list[tuple[float, float, float]],
                share: float) -> dict[str, float]:
    """A bucket's work per request at its service's decode or unified point (module docstring;
    :mod:`planner.workload.buckets` item 5). Returns the point columns to replace (empty for an
    infeasible point or one without the lane columns).

    Why the point is computed at the service's mean lengths ``(n_s, o_s)``: in continuous batching
    every sequence of a batch waits the same step, whose time depends on the batch's total KV, i.e.
    on the mix of lengths the pool runs, not on one request's; so the batch ``B``, the step times,
    the chunk ``q``, memory and hence TPOT / ITL are the pool's, the same for every bucket and every
    bucket count. TTFT is per request: a unified point counts the chunk iterations of the bucket's
    representative prompt (``ttft_input_tokens`` of :func:`planner.perf.operating_point`). Each
    bucket then pays its own work at that point, linear in its mean lengths ``(E_b[n], E_b[o])`` (:func:`mix_means` of its
    length mix ``mix``)
    (``n`` the prompt tokens computed after the cached prefix, :func:`planner.perf.points.request_tokens`):

    - decode: a sequence holds its slot for ``o / E`` steps of ``t_dec(B)``: ``tau_b = tau E_b[o] / o_s``;
    - unified: ``tau_b = max(E_b[o] t_dec / (B E) + E_b[n] (t_it - t_dec) / q,  E_b[n] t_it / q)`` — the
      slot time of the decode-only steps plus each chunk's extra, or the lane's time when the lane
      binds (``E`` the tokens per step of a speculative point, else 1); at the service's means this is
      the point's own ``o t_mean / (B E)``; the lane service per prompt ``E_b[n] t_it / q`` and
      ``prefill_tokens`` ``E_b[n]``;
    - KV bytes per request scale with the bucket's mean peak tokens ``E_b[n + o]`` (KV is linear in
      tokens), energy per request with ``tau_b``;
    - a speculative point's ``plain_instance_seconds_per_request`` (the plain point's, at the service's
      means) by the same ``tau_b / tau``: the saving a row quotes is the one at the service's means (the
      plain point is not priced per bucket). Left at the means it was set against the bucket's ``tau_b``,
      and enterprise-chat's EAGLE note read "-92-67 % fewer instance-seconds" for points that all save.

    **The ``max`` per fine sub-bin** (the bucket's ``length_mix``): a unified bucket's ``tau_b`` is
    ``sum_f s_f max(a_f, c_f)`` over its sub-bins ``f`` (shares ``s_f``, lengths ``(n_f, o_f)``), the slot
    part ``a`` and the lane part ``c`` above taken per sub-bin, not ``max(a, c)`` at the bucket's mean
    lengths. The sub-bins are the same at every bucket count (:mod:`planner.workload.buckets` item 5), so
    ``sum_b w_b tau_b`` is one figure at 4, 8, 16 or 32 buckets (issue 24 item 0). At the bucket's means, a
    coarse bucket averaged its long, lane-bound prompts with short, slot-bound ones, so the ``max`` hid the
    lane-bound part and the service's work fell with the bucket count: code-completion-8b's tp4 shared point
    0.02469 s per request at 4 buckets against 0.02493 s at 8 and 16, which moved its plan by one device
    (``$87,911`` against ``$91,493``). Approximation (conservative): the slots and the lane are two resources of
    one instance, and over the requests a pool runs the binding one is ``max(sum a, sum c)``, which is at most
    ``sum max(a, c)``; the difference is the lane time of lane-bound prompts that slot-bound ones' lane idle
    time could have absorbed. ``lane_service_ms`` and ``prefill_tokens`` are linear, the bucket's means.
    Approximation: a pool that serves only some of a service's buckets runs a mix other than the
    service's; its step time is that of the service's mix."""
    from planner.perf.points import request_tokens

    if not op.feasible or op.instance_seconds_per_request <= 0:
        return {}
    _i, o_s, n_s, _h = request_tokens(service_means[0], service_means[1], share)
    bucket_means = mix_means(mix)
    _i, o_b, n_b, _h = request_tokens(bucket_means[0], bucket_means[1], share)
    tau_s = float(op.instance_seconds_per_request)
    out: dict[str, float] = {}
    if role == "decode":
        tau = tau_s * o_b / o_s
    else:
        d = op.detail
        t_dec, t_it = float(d.get("decode_only_step_ms", math.nan)) / 1e3, float(d.get("step_ms", math.nan)) / 1e3
        q, b = float(d.get("prefill_chunk_tokens", math.nan)), float(op.max_batch)
        e = float(d.get("spec_tokens_per_step", 1.0))
        if not all(math.isfinite(x) and x > 0 for x in (t_dec, t_it, q, b, e)):
            return {}
        def tau_at(o: float, n: float) -> float:
            return max(o * t_dec / (b * e) + n * max(t_it - t_dec, 0.0) / q, n * t_it / q)

        ws = np.array([m[0] for m in mix], dtype=float)
        subs = [request_tokens(n_f, o_f, share) for _w, n_f, o_f in mix]
        tau = float(np.dot(ws / ws.sum(), [tau_at(o_f, n_f) for _i, o_f, n_f, _h in subs]))
        out["lane_service_ms"] = 1e3 * n_b * t_it / q
        out["prefill_tokens"] = n_b
    out["instance_seconds_per_request"] = tau
    out["energy_j_per_request"] = float(op.energy_j_per_request) * tau / tau_s
    plain = float(op.detail.get("plain_instance_seconds_per_request", math.nan))
    if math.isfinite(plain):  # a speculative point: its plain alternative priced alike, so the saving compares like with like
        out["plain_instance_seconds_per_request"] = plain * tau / tau_s
    out["kv_bytes_per_request"] = float(op.kv_bytes_per_request) * (bucket_means[0] + bucket_means[1]) / max(sum(service_means), 1.0)
    return out


def mix_work(op: Any, subs: list[tuple[float, Any]], input_tail_share: float = 0.0) -> dict[str, Any]:
    """A prefill point's time and energy per request priced as its bucket's length mix
    (:mod:`planner.workload.buckets` item 5): ``tau = sum_f s_f tau_f`` over the sub-bins ``f``
    (share ``s_f``) of the bucket, ``tau_f`` the prefill point of the sub-bin's representative
    (same device, targets and rate). The bucket's own point, at its representative, keeps its TTFT,
    batch and KV transfer (the TTFT target must hold for the representative prompt). A sub-bin whose
    point is infeasible is priced at the bucket's; the mix never costs more than the bucket's own
    point (its sub-bins' representatives are no longer). ``service_time_cv``: the CV of the sub-bins'
    times (share-weighted), which the utilisation cap's G/G/c wait counts (a deterministic service
    time at the mean would understate the queue: code-completion-8b's L40S prefill pool waited 79 ms
    at p99 in the simulation against 0 ms analytic). ``ttft_mix`` (:data:`planner.schema.capacity.TTFT_MIX_COLUMN`):
    each sub-bin's share and TTFT, the latter never above the bucket's own point's (a sub-bin whose own batch
    choice makes it slower, or whose point is infeasible, is taken at the bucket's), for the TTFT
    quantile of the mix (:mod:`planner.ttft_mixture`); the bucket's ``input_tail_share`` (its requests in the
    service's input tail, whose prompts no sub-bin covers) is one more entry at an infinite TTFT, a miss,
    its share taken from the sub-bins alike. Returns the columns to replace (empty for an infeasible point)."""
    if not subs or not op.feasible or op.instance_seconds_per_request <= 0:
        return {}
    tau_c = float(op.instance_seconds_per_request)
    w = np.array([s for s, _o in subs], dtype=float)
    w = w / w.sum()
    good = [bool(o.feasible and o.instance_seconds_per_request > 0) for _s, o in subs]
    taus = np.array([float(o.instance_seconds_per_request) if g else tau_c for g, (_s, o) in zip(good, subs, strict=True)])
    energies = np.array([float(o.energy_j_per_request) if g else float(op.energy_j_per_request)
                         for g, (_s, o) in zip(good, subs, strict=True)])
    raw = float(np.dot(w, taus))
    tau = min(raw, tau_c)
    # the bucket's prompts are no longer one deterministic service time: the queue sees the mix's spread
    cv = math.sqrt(float(np.dot(w, (taus - raw) ** 2))) / raw if raw > 0 else 0.0
    # each sub-bin's TTFT (planner.ttft_mixture): its own point's, never above the bucket's own (its prompts are no longer)
    t_c = float(op.ttft_ms)
    ttfts = [min(float(o.ttft_ms), t_c) if g and math.isfinite(float(o.ttft_ms)) else t_c for g, (_s, o) in zip(good, subs, strict=True)]
    return {"instance_seconds_per_request": tau, "energy_j_per_request": float(np.dot(w, energies)) * tau / max(raw, 1e-30),
            "service_time_cv": max(float(op.service_time_cv), cv), TTFT_MIX_COLUMN: ttft_mix_text(w, ttfts, input_tail_share)}


def ttft_mix_text(shares: np.ndarray, ttft_ms: list[float], input_tail_share: float) -> str:
    """A prefill point's ``ttft_mix`` (:func:`mix_work`): the sub-bins' shares scaled by ``1 − τ`` and the
    input tail ``τ`` as one entry at an infinite TTFT (never within a target)."""
    tail = min(max(float(input_tail_share), 0.0), 1.0) if math.isfinite(float(input_tail_share)) else 0.0
    if tail <= 0.0:
        return mix_text(shares, ttft_ms)
    return mix_text([*(np.asarray(shares, dtype=float) / np.sum(shares) * (1.0 - tail)).tolist(), tail], [*ttft_ms, math.inf])


def peak_interarrival_cv(arrivals: Any, window: str, override: float | None = None) -> tuple[float, str]:
    """The inter-arrival CV the pools see at the peak rate over ``window``, and a note.

    ``traffic.interarrival_cv`` (``override``) wins; else the CV inside windows of that size
    (``ArrivalStats.interarrival_cv_within[window]``, :func:`planner.workload.arrivals.within_window_cv`):
    the plan sizes for the peak rate over ``window``, so the rate changes *between* windows that
    the whole-log CV also counts are already covered and must not be charged again as
    burstiness. Falls back to the whole-log CV when the within-window CV was not measured
    (hand-written profiles, logs with no busy window)."""
    whole = float(arrivals.interarrival_cv)
    if override is not None:
        return float(override), ""
    within = arrivals.interarrival_cv_within.get(window)
    if within is None:
        if arrivals.requests > 0 and arrivals.timestamps not in ("missing", "synthetic"):
            return whole, f"no inter-arrival CV inside {window} windows (no busy window): using the whole-log CV {whole:.3g}"
        return whole, ""
    within = float(within)
    if abs(within - whole) > 0.05 * max(whole, 1e-9):
        return within, (f"inter-arrival CV inside {window} windows {within:.3g} (whole log {whole:.3g}: includes rate changes "
                        f"between windows, already covered by planning for the {window} peak)")
    return within, ""


def _kv_capacity_bytes(model: Any, dev: Any, tp: int, weight_precision: str, kv_precision: str) -> float:
    """KV bytes one instance holds (:func:`planner.perf.roofline.kv_capacity_bytes`, the same memory
    fit that gives ``max_batch``); 0 when the weights do not fit."""
    from planner.perf.points import _instance
    from planner.perf.roofline import kv_capacity_bytes

    try:
        return max(float(kv_capacity_bytes(_instance(model, dev, tp, weight_precision, kv_precision))), 0.0)
    except ValueError:
        return 0.0


def _error_bands(inst: Any, calibration: Any, sources: dict[str, str] | None = None) -> dict[str, float]:
    """Per ``device/engine`` of the instance: the validated relative error of the performance model
    (:func:`planner.perf.calibration.error_band`, the wider of TTFT and TPOT; wider still for a device
    the calibration has no rows for), read by the verdict's confidence (:mod:`planner.optimize.confidence`).
    ``sources`` (filled when given): where each band comes from (how it was validated, on how many rows,
    or "not validated")."""
    from planner.perf.calibration import error_band

    out: dict[str, float] = {}
    for dev in inst.catalog.devices:
        for engine in sorted({s.engine for s in inst.services.values()}):
            ttft, tpot, src = error_band(dev, engine, calibration)
            out[f"{dev}/{engine}"] = max(float(ttft), float(tpot))
            if sources is not None:
                sources[f"{dev}/{engine}"] = src
    return out


def point_row(ids: dict[str, Any], op: Any, kv_capacity_bytes: float, spec: Any, work: dict[str, Any]) -> dict[str, Any]:
    """A capacity table's row of the point ``op`` (an :class:`OperatingPoint`) for ``ids`` (service,
    bucket, role, config, device, tp); ``kv_capacity_bytes`` of a decode / unified instance,
    ``work`` the mix's columns (:func:`bucket_work`, :func:`mix_work`)."""
    from planner.perf.speculative import spec_columns

    role = ids["role"]
    return {
        **ids, "feasible": bool(op.feasible), "reason": op.reason, "bound": op.bound,
        "instance_seconds_per_request": float(op.instance_seconds_per_request), "max_batch": int(op.max_batch),
        "kv_bytes_per_request": float(op.kv_bytes_per_request),
        "kv_transfer_bytes_per_request": float(op.kv_transfer_bytes_per_request) if role == "prefill" else 0.0,
        "energy_j_per_request": float(op.energy_j_per_request), "ttft_ms": float(op.ttft_ms),
        "tpot_ms": float(op.tpot_ms), "service_time_cv": float(op.service_time_cv), "source": op.source,
        **{c: float(op.detail.get("prefill_tokens_ttft" if c == "prefill_tokens_rep" else c, math.nan))
           if role == "unified" or c == "itl_ms" else math.nan for c in POINT_OPTIONAL_COLUMNS},
        # a speculative point's instance also holds the draft's weights (planner.perf.speculative)
        POINT_KV_CAPACITY_COLUMN: (float(op.detail.get("spec_kv_capacity_bytes", kv_capacity_bytes)) if role != "prefill" else 0.0),
        **spec_columns(spec, op.detail),
        **work,
    }


def build_capacity_tables(resolved: ResolvedInstance) -> CapacityTables:
    """Demand, operating points and configs of an instance (see the module docstring)."""
    from planner.capacity_encode import encode_demand, encode_points
    from planner.perf.instance_calibration import instance_calibration
    from planner.perf.moe import ep_operating_point, moe_params, replica_kv_capacity_bytes
    from planner.perf.points import (
        PendingPrefill,
        PendingUnified,
        finish_prefill_points,
        finish_unified_points,
        operating_point_stage,
    )
    from planner.perf.speculative import (
        SPEC_POINT_COLUMNS,
        draft_profile,
        spec_columns,
        speculation_notes,
    )

    inst = resolved.instance
    demand, _profiles, notes = _demand(resolved)
    demand = encode_demand(resolved, demand, _profiles)  # multimodal services: encoder tokens per request (planner.capacity_encode)
    calibration, cal_ref = instance_calibration(resolved)
    notes = [*notes, cal_ref.note()]
    notes = inst.defaults_used() + notes
    configs = _configs(resolved)
    link = inst.costs.network.kv_link_gb_per_s
    declared = inst.catalog.declared_devices
    for dev_id, decl in declared.items():
        unknown = [f for f in ("busy_power_w", "idle_power_w") if getattr(decl, f) is None]
        notes.append(f"{dev_id}: declared device (catalog.declared_devices), no performance profile: it serves only what a measured "
                     "capacity file (--capacity) gives for it" + (f"; {' and '.join(unknown)} not declared, counted as 0 W" if unknown else ""))
    rows = []
    cache: dict[tuple[Any, ...], Any] = {}
    kv_cap: dict[tuple[Any, ...], float] = {}
    pars = _parallelism(configs)
    if any(p.is_ep for p in pars.values()):
        notes.append(_ep_note(resolved, configs, pars, calibration))
    svc_means = service_mean_lengths(demand)
    # a prefill point's batch is chosen for the queue of its latency group (planner.workload.buckets item 6): the group's peak rate
    group_peak = demand.groupby(["service", LATENCY_GROUP_COLUMN])["rate_peak_per_s"].transform("sum").to_numpy(float)
    worked: dict[tuple[Any, ...], dict[str, Any]] = {}
    # prefill rows wait for the loop's end: their points' utilisation caps (queued points come back
    # PendingPrefill) are bisected in one call for all of them (planner.perf.points.finish_prefill_points)
    late: list[tuple[int, dict[str, Any], tuple[Any, ...], list[tuple[float, tuple[Any, ...]]] | None, Any]] = []
    # so do unified rows whose points come back PendingUnified: their scans run together, one cap bisection
    # per round for all of them (planner.perf.points.finish_unified_points); (row, point key, the row given the point)
    late_unified: list[tuple[int, tuple[Any, ...], Callable[[Any], dict[str, Any]]]] = []
    for rec, rate_group in zip(demand.to_dict("records"), group_peak, strict=True):
        service, bucket = str(rec["service"]), str(rec["bucket"])
        isl, osl = float(rec["input_tokens_rep"]), float(rec["output_tokens_rep"])
        share = float(rec["cached_prefix_share"])
        lat = latency_targets(rec)
        rate_cv = (float(rec["rate_peak_per_s"]), float(rec["interarrival_cv"]))
        svc_rate = float(rec["rate_peak_per_s"]) / float(rec["weight"]) if float(rec["weight"]) > 0 else rate_cv[0]
        svc = inst.services[service]
        model = resolved.models[svc.model]
        mix = length_mix(rec) if service in svc_means else []
        for cfg in configs.to_dict("records"):
            device, tp, config = str(cfg["device"]), int(cfg["tp"]), str(cfg["config"])
            dev = resolved.devices[device]
            for role in ROLES:
                if device in declared:
                    rows.append({**_declared_point(service, bucket, role, config, device, tp), **spec_columns(None, {})})
                    continue
                par = pars[config]
                # planner.perf.speculative: decode and shared (unified) pools, expert-parallel decode replicas
                spec = svc.speculative if role == "decode" or (role == "unified" and not par.is_ep) else None
                # the unified point is chosen at the service's peak rate (its shared pool serves every bucket, so its
                # queue has the service's instances, not the bucket's: planner.perf.points, _unified_costs)
                rate_cv_role = (svc_rate, rate_cv[1]) if role == "unified" else (float(rate_group), rate_cv[1]) if role == "prefill" else rate_cv
                # with a length mix, decode and unified points run the service's mean lengths (the mix its pools run;
                # a unified point's TTFT at the representative prompt) and prefill work is the mix's (bucket_work, mix_work)
                at_mix = bool(mix) and (role == "decode" or (role == "unified" and not par.is_ep))
                in_len, out_len = svc_means[service] if at_mix else (isl, osl)
                ttft_in = isl if at_mix and role == "unified" else None
                key = (svc.model, svc.weight_precision, svc.kv_precision_resolved, svc.engine, device, tp, role, in_len, out_len, share,
                       tuple(lat.items()), rate_cv_role if role != "decode" else None, par, spec.model_dump_json() if spec else None, ttft_in)
                kw: dict[str, Any] = dict(role=role, weight_precision=svc.weight_precision, kv_precision=svc.kv_precision_resolved,
                                          input_tokens=in_len, output_tokens=out_len, cached_prefix_share=share, **lat,
                                          rate_per_s=rate_cv_role[0], interarrival_cv=rate_cv_role[1], engine=svc.engine,
                                          kv_link_gb_per_s=link, calibration=calibration)
                if ttft_in is not None:
                    kw["ttft_input_tokens"] = ttft_in
                if spec is not None:
                    kw.update(speculative=spec, draft_model=draft_profile(resolved, service, spec))

                def point(kw: dict[str, Any], model: Any = model, dev: Any = dev, par: Parallelism = par, tp: int = tp) -> Any:
                    return ep_operating_point(model, dev, par, **kw) if par.is_ep else operating_point_stage(model, dev, tp, **kw)

                if key not in cache:
                    cache[key] = point(kw)
                op = cache[key]
                ids = {"service": service, "bucket": bucket, "role": role, "config": config, "device": device, "tp": tp}
                if role == "prefill":
                    subs: list[tuple[float, tuple[Any, ...]]] | None = None
                    if mix:
                        subs = []
                        for w_f, n_f, o_f in mix:
                            k2 = (*key, "sub", n_f, o_f)
                            if k2 not in cache:
                                cache[k2] = point({**kw, "input_tokens": n_f, "output_tokens": o_f})
                            subs.append((w_f, k2))
                    late.append((len(rows), ids, key, subs, (key, rec[LENGTH_MIX_COLUMN], float(rec.get(INPUT_TAIL_COLUMN, 0.0) or 0.0))
                                 if mix else None))
                    rows.append({})
                    continue
                kv_key = (svc.model, svc.weight_precision, svc.kv_precision_resolved, device, tp, par)
                if role != "prefill" and kv_key not in kv_cap:
                    kv_cap[kv_key] = (replica_kv_capacity_bytes(model, dev, par, svc.weight_precision, svc.kv_precision_resolved,
                                                                moe_params(calibration)) if par.is_ep else
                                      _kv_capacity_bytes(model, dev, tp, svc.weight_precision, svc.kv_precision_resolved))

                def row_of(op: Any, ids: dict[str, Any] = ids, role: str = role, at_mix: bool = at_mix, service: str = service,
                           share: float = share, mix: Any = mix,
                           kv: float = kv_cap[kv_key], spec: Any = spec) -> dict[str, Any]:
                    work = bucket_work(op, role, svc_means[service], mix, share) if at_mix else {}
                    return point_row(ids, op, kv, spec, work)

                if isinstance(op, PendingUnified):
                    late_unified.append((len(rows), key, row_of))
                    rows.append({})
                    continue
                rows.append(row_of(op))
    pending = [k for k, v in cache.items() if isinstance(v, PendingPrefill)]
    cache.update(zip(pending, finish_prefill_points([cache[k] for k in pending]), strict=True))
    waiting = [k for k, v in cache.items() if isinstance(v, PendingUnified)]
    cache.update(zip(waiting, finish_unified_points([cache[k] for k in waiting]), strict=True))
    for at, k_u, finish_row in late_unified:
        rows[at] = finish_row(cache[k_u])
    for at, ids, key, subs, wkey in late:
        if subs is not None and wkey not in worked:
            worked[wkey] = mix_work(cache[key], [(w_f, cache[k2]) for w_f, k2 in subs], wkey[2])
        rows[at] = point_row(ids, cache[key], 0.0, None, worked[wkey] if subs is not None else {})
    rows += encode_points(resolved, demand, configs, {**{c: math.nan for c in POINT_OPTIONAL_COLUMNS}, POINT_KV_CAPACITY_COLUMN: 0.0,
                                                      **spec_columns(None, {})})
    points = pd.DataFrame(rows, columns=[*POINT_COLUMNS, *POINT_OPTIONAL_COLUMNS, POINT_KV_CAPACITY_COLUMN, *SPEC_POINT_COLUMNS,
                                         TTFT_MIX_COLUMN])
    points[TTFT_MIX_COLUMN] = [v if isinstance(v, str) else "" for v in points[TTFT_MIX_COLUMN].tolist()]
    notes = notes + speculation_notes(inst, points)
    from planner.agents.tables import build_agent_tables  # tool execution phase (issue 6)

    agents = build_agent_tables(resolved, demand, configs)
    if agents is not None:
        notes = notes + list(agents.params.notes)
    band_sources: dict[str, str] = {}
    bands = _error_bands(inst, calibration, band_sources)
    return CapacityTables(demand=demand, points=points, configs=configs, costs=cost_params(resolved),
                          meta={"instance": inst.name, "notes": notes, "source": "roofline (planner.perf.operating_point)",
                                "calibration": cal_ref.record(), "perf_error_band": bands, "perf_error_band_source": band_sources},
                          agents=agents)


def _ep_note(resolved: ResolvedInstance, configs: pd.DataFrame, pars: dict[str, Parallelism], calibration: Any) -> str:
    """What the expert-parallel candidates are and which parameters price them (one note line)."""
    from planner.perf.moe import moe_params

    p = moe_params(calibration)
    labels = sorted({pars[c].label() for c in configs["config"].astype(str) if pars[c].is_ep}, key=lambda s: int(s.split("ep")[1].split("·")[0]))
    no_nic = sorted({str(d) for d, c in zip(configs["device"], configs["config"], strict=True)
                     if pars[str(c)].is_ep and not resolved.devices[str(d)].nic_bw_gb_per_s})
    from planner.perf.roofline import DEFAULT_NIC_GB_PER_S

    nic = (f"; {', '.join(no_nic)} lack nic_bw_gb_per_s: all-to-all across nodes at the default {DEFAULT_NIC_GB_PER_S:g} GB/s per GPU "
           "(planner.perf.roofline.DEFAULT_NIC_GB_PER_S)") if no_nic else ""
    redundant = "E/8 (DeepSeek's 32 of 256)" if p.redundant_experts is None else str(p.redundant_experts)
    return (f"expert-parallel candidates (planner.perf.moe): {', '.join(labels)} for MoE services (prefill and decode only); "
            f"EPLB imbalance {p.ep_imbalance:g}, {redundant} redundant experts, all-to-all at {p.a2a_efficiency:g} of the NIC, "
            f"two-batch overlap {p.tbo_overlap:g} ({p.source}){nic}")


def _declared_point(service: str, bucket: str, role: str, config: str, device: str, tp: int) -> dict[str, Any]:
    """The placeholder-free row of a declared device (no performance profile): infeasible until measured."""
    return {"service": service, "bucket": bucket, "role": role, "config": config, "device": device, "tp": tp, "feasible": False,
            "reason": f"{device} is a declared device without a performance profile: give its measured capacity (--capacity)",
            "bound": "declared", "instance_seconds_per_request": math.inf, "max_batch": 1, "kv_bytes_per_request": 0.0,
            "kv_transfer_bytes_per_request": 0.0, "energy_j_per_request": 0.0, "ttft_ms": math.nan, "tpot_ms": math.nan,
            "service_time_cv": 0.0, "source": "declared", **{c: math.nan for c in POINT_OPTIONAL_COLUMNS}}


MEASURED_REQUIRED = ("service", "bucket", "device", "tp", "max_rate_per_s")
MEASURED_COLUMNS: tuple[str, ...] = (*MEASURED_REQUIRED, "role", "ttft_ms", "tpot_ms", "max_batch", "energy_j_per_request",
                                     "kv_transfer_bytes_per_request")
"""Every column of the measured capacity format (module docstring); the first five are required. ``parallelism``
is added (and read) when a configuration is expert-parallel."""


def measured_capacity_frame(tables: CapacityTables) -> pd.DataFrame:
    """The feasible operating points of ``tables`` in the measured capacity format (module docstring)."""
    p = tables.points
    p = p[p["feasible"].astype(bool) & (p["instance_seconds_per_request"].astype(float) > 0)]
    out = pd.DataFrame({
        "service": p["service"].astype(str), "bucket": p["bucket"].astype(str), "device": p["device"].astype(str),
        "tp": p["tp"].astype(int), "max_rate_per_s": 1.0 / p["instance_seconds_per_request"].astype(float),
        "role": p["role"].astype(str), "ttft_ms": p["ttft_ms"].astype(float), "tpot_ms": p["tpot_ms"].astype(float),
        "max_batch": p["max_batch"].astype(int), "energy_j_per_request": p["energy_j_per_request"].astype(float),
        "kv_transfer_bytes_per_request": p["kv_transfer_bytes_per_request"].astype(float),
    })
    cols = list(MEASURED_COLUMNS)
    if CONFIG_PARALLELISM_COLUMN in tables.configs.columns and p["config"].astype(str).str.contains("-ep").any():
        out[CONFIG_PARALLELISM_COLUMN] = [str(c).rpartition("/")[2] if "-ep" in str(c) else "" for c in p["config"]]
        cols.append(CONFIG_PARALLELISM_COLUMN)
    return out.reset_index(drop=True)[cols]


def read_measured_capacity(path: str | Path, tables: CapacityTables, *, only_listed: bool = False) -> CapacityTables:
    """Replace (or add) operating points with a user's measured per-instance capacity (module docstring).

    ``only_listed`` (``--capacity-only``): the file's rows are the only candidates; every other
    operating point (configurations, roles and buckets it does not list) is marked infeasible."""
    p = Path(path)
    file = str(p)
    if not p.is_file():
        raise InputError(Problem(file, "", "measured capacity file does not exist", "give the path of a CSV file"))
    try:
        df = pd.read_csv(p)
    except (ValueError, OSError) as exc:
        raise InputError(Problem(file, "", f"cannot read the CSV: {exc}", "write a CSV with a header row")) from None
    problems = ProblemCollector(file=file)
    missing = [c for c in MEASURED_REQUIRED if c not in df.columns]
    if missing:
        problems.add("header", f"missing columns: {', '.join(missing)}", f"required: {', '.join(MEASURED_REQUIRED)}")
        problems.raise_if_any()
    if "role" not in df.columns:
        df["role"] = "unified"
    known = set(zip(tables.demand["service"], tables.demand["bucket"], strict=True))
    cfg = tables.configs.drop_duplicates("config").set_index("config")
    dem = tables.demand.set_index(["service", "bucket"])
    rows = []
    for i, r in enumerate(df.to_dict("records")):
        where = f"row {i + 2}"
        par = str(r.get(CONFIG_PARALLELISM_COLUMN) or "").replace("·", "-") if pd.notna(r.get(CONFIG_PARALLELISM_COLUMN)) else ""
        config = f"{r['device']}/{par}" if "ep" in par else f"{r['device']}/tp{int(r['tp'])}"
        if "ep" in par and config_devices(config)[1] != int(r["tp"]):
            problems.add(where, f"tp {int(r['tp'])} is not the {config_devices(config)[1]} GPUs of {par}",
                         "give an expert-parallel row's GPUs per replica (dp x tp) in the tp column")
            continue
        if (r["service"], r["bucket"]) not in known:
            problems.add(where, f"unknown (service, bucket) ({r['service']}, {r['bucket']})", f"use one of: {', '.join(f'{s}/{b}' for s, b in sorted(known))}")
            continue
        if config not in cfg.index:
            device = str(r["device"])
            if device not in set(cfg["device"].astype(str)):
                problems.add(where, f"device {device!r} is not a candidate of the instance",
                             f"list it in catalog.devices; a device that is not in the catalog (planner catalog devices) must be declared "
                             f"under catalog.declared_devices.{device} (rental_usd_per_hour or purchase_usd, power if known, source)")
            else:
                problems.add(where, f"configuration {config} is not a candidate (tp not in catalog.tp_degrees or above the device's node)",
                             f"use one of: {', '.join(cfg.index)}")
            continue
        if r["role"] not in ROLES:
            problems.add(where, f"unknown role {r['role']!r}", "use unified, prefill or decode")
            continue
        rate = float(r["max_rate_per_s"])
        if not rate > 0:
            problems.add(where, "max_rate_per_s must be > 0", "give the measured requests/s of one instance within SLO")
            continue
        d = dem.loc[(r["service"], r["bucket"])]
        ttft = float(r["ttft_ms"]) if "ttft_ms" in df.columns and pd.notna(r.get("ttft_ms")) else 0.0
        tpot = float(r["tpot_ms"]) if "tpot_ms" in df.columns and pd.notna(r.get("tpot_ms")) else 0.0
        reasons = []
        if ttft > float(d["ttft_target_ms"]):
            reasons.append(f"measured TTFT {ttft:g} ms > target {float(d['ttft_target_ms']):g} ms")
        if tpot > float(d["tpot_target_ms"]):
            reasons.append(f"measured TPOT {tpot:g} ms > target {float(d['tpot_target_ms']):g} ms")
        tp = int(r["tp"])
        energy = float(r["energy_j_per_request"]) if "energy_j_per_request" in df.columns and pd.notna(r.get("energy_j_per_request")) \
            else float(cfg.at[config, "busy_power_w"]) * tp / rate  # type: ignore[arg-type]
        rows.append({
            "service": r["service"], "bucket": r["bucket"], "role": r["role"], "config": config, "device": r["device"], "tp": tp,
            "feasible": not reasons, "reason": "; ".join(reasons), "bound": "measured",
            "instance_seconds_per_request": 1.0 / rate,
            "max_batch": int(r["max_batch"]) if "max_batch" in df.columns and pd.notna(r.get("max_batch")) else 1,
            "kv_bytes_per_request": 0.0,
            "kv_transfer_bytes_per_request": float(r.get("kv_transfer_bytes_per_request", 0.0) or 0.0) if r["role"] == "prefill" else 0.0,
            "energy_j_per_request": energy, "ttft_ms": ttft, "tpot_ms": tpot, "service_time_cv": 0.0,
            "source": f"measured:{p.name}", "utilization_cap": 1.0,
        })
    problems.raise_if_any()
    measured = pd.DataFrame(rows)
    base = tables.points.copy()
    if "utilization_cap" not in base.columns:
        base["utilization_cap"] = float("nan")
    keys = set(zip(measured["service"], measured["bucket"], measured["role"], measured["config"], strict=True))
    keep = [k not in keys for k in zip(base["service"], base["bucket"], base["role"], base["config"], strict=True)]
    rest = base[keep].copy()
    notes = list(tables.meta.get("notes", []))  # type: ignore[call-overload]
    unmeasured = int(((measured["ttft_ms"] <= 0) | (measured["tpot_ms"] <= 0)).sum())
    if unmeasured:
        notes.append(f"{p.name}: {unmeasured} of {len(measured)} rows give no ttft_ms / tpot_ms: their latency is taken to meet the SLO "
                     "at the measured rate and is shown as 0 ms (not measured)")
    if only_listed:
        rest["feasible"] = False
        rest["reason"] = f"not measured in {p.name} (--capacity-only: only its rows are candidates)"
        notes.append(f"--capacity-only: the {len(measured)} rows of {p.name} are the only candidate operating points")
    points = pd.concat([rest, measured], ignore_index=True)
    return CapacityTables(demand=tables.demand, points=points, configs=tables.configs, costs=tables.costs,
                          meta={**tables.meta, "measured": file, "notes": notes}, agents=tables.agents)
