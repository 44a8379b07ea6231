"""Turning an instance's service traffic into a :class:`WorkloadProfile` (what the optimiser reads).

Three sources, one per service (the instance schema enforces it):

- ``traffic.trace``: the log is characterised at load (cached per file and options); with
  ``rate_per_s`` its rates are scaled so that the mean is that rate (shape kept);
- ``traffic.profile``: a profile YAML written by ``planner characterize --out``;
- ``traffic.rate_per_s`` + ``lengths``: a profile built from the given buckets. There is no
  log, so the peak over every window is ``traffic.peak_rate_per_s`` if given, else the mean
  rate (said in the notes), and the inter-arrival CV is 1 (Poisson) unless overridden.

Then, in this order: ``peak_rate_per_s`` (with a trace or profile) replaces the peak over
``peak_window``; ``interarrival_cv`` replaces the measured CV; ``rate_multiplier`` scales
mean, peak and quantile rates; ``input_length_multiplier`` / ``output_length_multiplier``
scale every input / output token figure (statistics, bucket representatives and means).
Tools: the trace's tool profile is used when ``tools_from_trace`` is set, else the service's
``tools`` (possibly none).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from planner.errors import InputError, Problem
from planner.schema.workload import ArrivalStats, LengthBucket, TokenStats, WorkloadProfile
from planner.validation import load_model

if TYPE_CHECKING:
    from planner.instance import ResolvedInstance
    from planner.schema.instance import Service, Traffic

WINDOWS = ("1s", "60s", "600s")


def peak_rate_per_s(profile: WorkloadProfile, window: str) -> float:
    """Peak arrival rate over ``window`` (``1s``, ``60s``, ``600s``), requests/s."""
    peaks = profile.arrivals.rate_peak_per_s
    if window not in peaks:
        raise InputError(
            Problem(
                file=profile.source,
                path="arrivals.rate_peak_per_s",
                message=f"the profile of {profile.service!r} has no peak over {window} windows (has: {', '.join(peaks) or 'none'})",
                fix="set traffic.peak_rate_per_s, or choose traffic.peak_window among the windows the profile has",
            )
        )
    return float(peaks[window])


def write_profile(profile: WorkloadProfile, path: str | Path) -> None:
    """Write a profile as YAML (readable back with :func:`read_profile` / ``traffic.profile``)."""
    data = profile.model_dump(mode="json")
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(Problem(file=str(target), path="", message=f"cannot create its folder: {exc.strerror or exc}", fix="give a path in a folder you can write")) from None
    try:
        target.write_text("# workload profile written by `planner characterize`\n" + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    except OSError as exc:
        raise InputError(Problem(file=str(target), path="", message=f"cannot be written: {exc.strerror or exc}", fix="give a writable file path")) from None


def read_profile(path: str | Path) -> WorkloadProfile:
    return load_model(WorkloadProfile, path)


def _scale_tokens(stats: TokenStats, factor: float) -> TokenStats:
    if factor == 1.0:
        return stats
    return TokenStats(mean=stats.mean * factor, p50=stats.p50 * factor, p90=stats.p90 * factor, p99=stats.p99 * factor, max=stats.max * factor)


def scale_profile(profile: WorkloadProfile, rate: float = 1.0, input_length: float = 1.0, output_length: float = 1.0) -> WorkloadProfile:
    """Multiply rates and token lengths (growth and length-mix scenarios)."""
    a = profile.arrivals
    arrivals = a
    if rate != 1.0:
        arrivals = a.model_copy(
            update={
                "rate_mean_per_s": a.rate_mean_per_s * rate,
                "rate_peak_per_s": {k: v * rate for k, v in a.rate_peak_per_s.items()},
                "rate_quantile_per_s": {k: v * rate for k, v in a.rate_quantile_per_s.items()},
                "notes": [*a.notes, f"rates multiplied by {rate:g}"],
            }
        )
    buckets = profile.buckets
    if input_length != 1.0 or output_length != 1.0:
        buckets = [
            b.model_copy(
                update={
                    "input_tokens": b.input_tokens * input_length,
                    "input_tokens_mean": b.input_tokens_mean * input_length,
                    "output_tokens": b.output_tokens * output_length,
                    "output_tokens_mean": b.output_tokens_mean * output_length,
                    "length_mix": [(w, n * input_length, o * output_length) for w, n, o in b.length_mix],
                }
            )
            for b in buckets
        ]
        arrivals = arrivals.model_copy(update={"notes": [*arrivals.notes, f"input lengths x{input_length:g}, output lengths x{output_length:g}"]})
    return profile.model_copy(
        update={
            "arrivals": arrivals,
            "input_tokens": _scale_tokens(profile.input_tokens, input_length),
            "output_tokens": _scale_tokens(profile.output_tokens, output_length),
            "buckets": buckets,
        }
    )


def manual_profile(service: str, traffic: Traffic) -> WorkloadProfile:
    """Profile of traffic given by rate and length buckets (no log)."""
    assert traffic.rate_per_s is not None and traffic.lengths
    rate = traffic.rate_per_s
    peak = traffic.peak_rate_per_s if traffic.peak_rate_per_s is not None else rate
    note = f"no log: the peak over every window is traffic.peak_rate_per_s = {peak:g}/s" if traffic.peak_rate_per_s is not None else f"no log and no traffic.peak_rate_per_s: the peak over every window is taken as the mean rate {rate:g}/s"
    buckets = [
        LengthBucket(
            name=f"b{i}_in{b.input_tokens}_out{b.output_tokens}",
            weight=b.weight,
            input_tokens=b.input_tokens,
            output_tokens=b.output_tokens,
            input_tokens_mean=b.input_tokens,
            output_tokens_mean=b.output_tokens,
            cached_prefix_share=b.cached_prefix_share,
        )
        for i, b in enumerate(traffic.lengths)
    ]
    total = sum(b.weight for b in buckets)
    buckets = [b.model_copy(update={"weight": b.weight / total}) for b in buckets]
    return WorkloadProfile(
        service=service,
        source="manual (traffic.rate_per_s and lengths)",
        arrivals=ArrivalStats(
            requests=0,
            duration_s=3600.0,
            rate_mean_per_s=rate,
            rate_peak_per_s=dict.fromkeys(WINDOWS, peak),
            interarrival_cv=1.0,
            timestamps="synthetic",
            notes=[note, "inter-arrival CV assumed 1 (Poisson) unless traffic.interarrival_cv is set", "duration_s is nominal (one hour); requests is 0 because nothing was observed"],
        ),
        input_tokens=_weighted_stats([(b.input_tokens, b.weight) for b in buckets]),
        output_tokens=_weighted_stats([(b.output_tokens, b.weight) for b in buckets]),
        cached_prefix_share=sum(b.weight * b.cached_prefix_share * b.input_tokens for b in buckets) / sum(b.weight * b.input_tokens for b in buckets),
        buckets=buckets,
    )


def _weighted_stats(points: list[tuple[float, float]]) -> TokenStats:
    """Statistics of a discrete distribution given as (value, weight) points (inverse CDF)."""
    import numpy as np

    from planner.workload.quantiles import pmf_stats

    values = np.array([v for v, _ in points], dtype=np.float64)
    probs = np.array([w for _, w in points], dtype=np.float64)
    return pmf_stats(values, probs)


def _from_trace(resolved: ResolvedInstance, name: str, svc: Service) -> WorkloadProfile:
    from planner.workload.characterize import ONE_INSTANT_NOTE, characterize_file, no_rate_reason

    t = svc.traffic
    assert t.trace is not None
    columns = dict(t.columns)
    service_column = columns.pop("service", None)
    where = f"services.{name}.traffic"
    try:
        results = characterize_file(resolved.resolve_path(t.trace), t.format, columns or None, buckets=t.buckets, service_column=service_column,
                                    on_bad_row=resolved.instance.options.on_bad_row)
    except InputError as exc:
        raise InputError([Problem(file=p.file, path=p.path or f"{where}.trace", message=p.message + f" (traffic of service {name!r} in {resolved.path})", fix=p.fix) for p in exc.problems]) from None
    if t.service_column_value is not None:
        if service_column is None:
            raise InputError(Problem(file=str(resolved.path), path=f"{where}.service_column_value", message="service_column_value needs a service column", fix="add columns: {service: <column name>}"))
        if t.service_column_value not in results:
            raise InputError(Problem(file=str(resolved.path), path=f"{where}.service_column_value", message=f"no rows with {service_column} = {t.service_column_value!r}", fix=f"use one of: {', '.join(sorted(results))}"))
        c = results[t.service_column_value]
    elif len(results) == 1:
        c = next(iter(results.values()))
    else:
        raise InputError(Problem(file=str(resolved.path), path=f"{where}.service_column_value", message=f"the trace holds several services ({', '.join(sorted(results))})", fix="set service_column_value to the one this service serves"))
    if c.arrivals is None:
        if t.peak_rate_per_s is None and t.rate_per_s is None:
            raise InputError(
                Problem(
                    file=str(resolved.path),
                    path=f"{where}.peak_rate_per_s",
                    message=f"the trace {t.trace!r} {no_rate_reason(c.notes)}, so it gives lengths but no arrival rate",
                    fix="set traffic.rate_per_s (mean, requests/s) and/or traffic.peak_rate_per_s (planned peak)",
                )
            )
        mean = t.rate_per_s if t.rate_per_s is not None else t.peak_rate_per_s
        peak = t.peak_rate_per_s if t.peak_rate_per_s is not None else t.rate_per_s
        assert mean is not None and peak is not None
        src = "traffic.rate_per_s" if t.rate_per_s is not None else "traffic.peak_rate_per_s"
        psrc = "traffic.peak_rate_per_s" if t.peak_rate_per_s is not None else "traffic.rate_per_s"
        arrivals = ArrivalStats(
            requests=c.requests,
            duration_s=3600.0,
            rate_mean_per_s=mean,
            rate_peak_per_s=dict.fromkeys(WINDOWS, peak),
            interarrival_cv=1.0,
            timestamps="missing",
            notes=[f"the log {no_rate_reason(c.notes)}: mean rate {src} = {mean:g}/s, peak {psrc} = {peak:g}/s, CV assumed 1 (Poisson); duration_s is nominal"],
        )
        # the note above says why there is no measured rate: the characterisation's own note would say it again
        c = dataclasses.replace(c, arrivals=arrivals, notes=[n for n in c.notes if n != ONE_INSTANT_NOTE])
    return c.to_profile()


def service_profile(resolved: ResolvedInstance, service_name: str) -> WorkloadProfile:
    """The workload profile of one service of an instance, with its traffic options applied."""
    inst = resolved.instance
    if service_name not in inst.services:
        raise InputError(Problem(file=str(resolved.path), path="services", message=f"no service {service_name!r}", fix=f"use one of: {', '.join(inst.services)}"))
    svc = inst.services[service_name]
    t = svc.traffic
    where = f"services.{service_name}.traffic"
    if t.trace is not None:
        profile = _from_trace(resolved, service_name, svc)
        if t.rate_per_s is not None and profile.arrivals.timestamps != "missing":
            log_mean = profile.arrivals.rate_mean_per_s
            profile = scale_profile(profile, t.rate_per_s / log_mean)
            profile = profile.model_copy(update={"arrivals": profile.arrivals.model_copy(update={"notes": [
                *profile.arrivals.notes[:-1],
                f"log scaled to traffic.rate_per_s = {t.rate_per_s:g}/s (its mean {log_mean:.4g}/s: rates x{t.rate_per_s / log_mean:.4g}, "
                "burstiness and lengths kept)"]})})
    elif t.profile is not None:
        try:
            profile = read_profile(resolved.resolve_path(t.profile))
        except InputError as exc:
            raise InputError([Problem(file=p.file, path=p.path, message=p.message + f" (profile of service {service_name!r}, {where}.profile in {resolved.path})", fix=p.fix) for p in exc.problems]) from None
    else:
        profile = manual_profile(service_name, t)
    a = profile.arrivals
    updates: dict[str, object] = {}
    if t.peak_rate_per_s is not None and (t.trace is not None or t.profile is not None) and a.timestamps != "missing":
        updates["rate_peak_per_s"] = {**a.rate_peak_per_s, t.peak_window: t.peak_rate_per_s}
        updates["notes"] = [*a.notes, f"peak over {t.peak_window} set by traffic.peak_rate_per_s = {t.peak_rate_per_s:g}/s (measured: {a.rate_peak_per_s.get(t.peak_window, float('nan')):g}/s)"]
    if t.interarrival_cv is not None:
        updates["interarrival_cv"] = t.interarrival_cv
        updates["notes"] = [*updates.get("notes", a.notes), f"inter-arrival CV set by traffic.interarrival_cv = {t.interarrival_cv:g} (measured: {a.interarrival_cv:g})"]  # type: ignore[misc]
    if updates:
        profile = profile.model_copy(update={"arrivals": a.model_copy(update=updates)})
    if svc.tools_from_trace:
        if not profile.tools:
            raise InputError(Problem(file=str(resolved.path), path=f"services.{service_name}.tools_from_trace", message="the trace/profile has no tool calls", fix="give the tools under services.<name>.tools, or use an agent log (TraceLab)"))
    else:
        profile = profile.model_copy(update={"tools": dict(svc.tools)})
    profile = profile.model_copy(update={"service": service_name})
    return scale_profile(profile, t.rate_multiplier, t.input_length_multiplier, t.output_length_multiplier)
