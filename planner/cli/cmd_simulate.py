"""`planner simulate`: discrete-event check of a plan at normal load, peak, failure, model swap."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from planner.cli.output import echo_json, fmt, table, wrote
from planner.errors import InputError, Problem

if TYPE_CHECKING:
    from planner.schema.plan import PlanResult
    from planner.simulate.arrivals import RequestChunk


def _ms(x: float) -> float:
    return x * 1e3 if x == x else math.nan


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (a FloatRange lets ``nan`` through: every
    comparison with it is false). A usage error (exit 2) naming the option."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number; give a number in the range {self._describe_range()}", param, ctx)
        return super().convert(rv, param, ctx)


POSITIVE = FiniteFloatRange(min=0, min_open=True)
"""A finite number > 0 (durations, bandwidths)."""

SEED = click.IntRange(min=0)
"""A random seed: numpy takes non-negative integers only."""


def _refuse_other_instance(plan: PlanResult, plan_path: str, instance: str) -> None:
    """An InputError when ``plan`` was solved for another instance than the file ``instance``: the test of
    ``planner check`` (:func:`planner.optimize.check.check_plan`: the plan must name the instance's ``name``),
    and the plan's services must be the instance's. Read from the raw file, before the plan's scenario and
    overrides are applied to it (those of another instance would fail there with a message about them). A plan
    that records no instance file (solved from capacity tables, :func:`planner.optimize.solve.solve_tables`) is
    not refused: the instance then only lends the model swap its devices and models (the notes say what it lacks)."""
    from planner.validation import read_mapping

    if not plan.instance_path:
        return
    data = read_mapping(instance)
    name, services = data.get("name"), data.get("services")
    if not isinstance(name, str) or not isinstance(services, dict):
        return  # an instance without them: load_instance reports it
    plan_services = sorted(({r.service for a in plan.architectures.values() for r in a.routing}
                            | {str(d.get("service", "")) for d in plan.capacity.demand}) - {""})
    foreign = [s for s in plan_services if s not in services]
    if plan.instance == name and not foreign:
        return
    why = (f"the plan was solved for instance {plan.instance!r}, not {name!r} ({instance})" if plan.instance != name
           else f"the plan was solved for an instance {name!r} with other services")
    if foreign:
        why += f": its service(s) {', '.join(map(repr, foreign))} are not in {instance}"
    raise InputError(Problem(plan_path, "instance", why,
                             f"simulate the plan with its own instance ({plan.instance_path}), or re-solve for this one: "
                             f"`planner solve {instance} --out DIR` and pass DIR/plan.json"))


@click.command("simulate")
@click.argument("instance", type=click.Path(dir_okay=False, path_type=str))
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=str),
              help="Plan JSON written by `planner solve --out` (default: solve the instance first).")
@click.option("--architecture", help="Architecture of the plan to simulate (default: the verdict's winner).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=str),
              help="Replay this request log instead of synthetic arrivals, its time scaled to the plan's mean rate (peak scenarios: the planned peak rate).")
@click.option("--trace-format", help="Log format of --trace (auto-detected if absent).")
@click.option("--duration", "duration_s", type=POSITIVE, default=600.0, show_default=True, help="Simulated seconds of arrivals per scenario.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Random seed, a non-negative integer (same seed, same result).")
@click.option("--scenario", "scenario_names", multiple=True, type=click.Choice(["normal", "peak", "failure", "model_swap"]),
              help="Scenarios to run (repeatable; default all).")
@click.option("--load-gb-per-s", type=POSITIVE, help="Weight-reload bandwidth per device for the model swap (default: the device's NIC bandwidth).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=str),
              help="Also write a self-contained HTML report: the plan and the simulated latency per scenario.")
def simulate_cmd(instance: str, plan_path: str | None, architecture: str | None, trace_path: str | None,
                 trace_format: str | None, duration_s: float, seed: int, scenario_names: tuple[str, ...],
                 load_gb_per_s: float | None, as_json: bool, html_file: str | None) -> None:
    """Simulate a plan: TTFT / per-request TPOT quantiles per service, ITL (every token gap) per pool, SLO attainment, queues, KV pressure, utilisation."""
    from planner.instance import load_instance
    from planner.schema.plan import UTILIZATION_NOTE
    from planner.simulate.adapter import (
        bucket_stream,
        lengths_drawn,
        plan_to_sim,
        plan_to_sim_by_bucket,
        service_results,
    )
    from planner.simulate.arrivals import replay_requests
    from planner.simulate.scenarios import SCENARIOS, run_scenarios, weight_reload_s

    if plan_path is None:
        from planner.plan_cache import cached_solve
        from planner.solve_instance import settings_from_instance

        resolved = load_instance(instance)
        plan, status = cached_solve(resolved, settings_from_instance(resolved.instance))  # `planner solve INSTANCE`'s plan (cache)
        plan_label = f"solved from {instance}" + (" (the plan `planner solve` stored in the cache)" if status == "hit" else "")
    else:
        from planner.report.plan_io import load_plan
        from planner.solve_instance import plan_overrides

        plan = load_plan(plan_path)  # a horizon.json is refused there, pointing at `planner horizon --evaluate`
        _refuse_other_instance(plan, plan_path, instance)
        # the instance as the plan was solved: its scenario and overrides (bucket counts included)
        resolved = load_instance(instance, plan_overrides(plan) or None, scenario=plan.scenario)
        plan_label = f"from {plan_path}"
    # Synthetic arrivals follow the plan's routing shares bucket by bucket (every pool gets the traffic
    # the plan sends it, as in the solve's peak check); a replayed log has no buckets, so each service
    # takes one pool per phase (the notes say which, when the plan splits it).
    try:
        by_bucket = None if trace_path else plan_to_sim_by_bucket(plan, architecture)
        sim = by_bucket.base if by_bucket is not None else plan_to_sim(plan, architecture)
    except ValueError as exc:
        raise InputError(Problem(plan_path or instance, "architectures", str(exc),
                                 "choose a feasible architecture with --architecture")) from None

    notes = [n for n in sim.notes if by_bucket is None or " is split over " not in n and "KV transfer simulated" not in n]
    reload: dict[str, float] = {}
    reload_detail: dict[str, dict[str, Any]] = {}
    svc_of_pool: dict[str, str] = {}
    for share in plan.architectures[sim.architecture].routing:
        if share.share > 1e-9:
            svc_of_pool.setdefault(share.pool, share.service)
    for ps in sim.pools:
        pp = sim.pool_plans[ps.name]
        svc_name = svc_of_pool.get(ps.name, "")
        svc = resolved.instance.services.get(svc_name)
        dev = resolved.devices.get(pp.device)
        if svc is None or dev is None or svc.model not in resolved.models:
            what = (f"its service {svc_name!r} is not in {instance}" if svc is None else
                    f"its device {pp.device!r} is not among {instance}'s devices" if dev is None else
                    f"its model {svc.model!r} is not in the catalog")
            notes.append(f"pool {ps.name}: {what}; model swap not simulated for it")
            continue
        # weights come over the network (model store) or, failing a NIC figure, the host link
        field = "nic_bw_gb_per_s" if dev.nic_bw_gb_per_s else "pcie_bw_gb_per_s"
        bw = load_gb_per_s if load_gb_per_s is not None else getattr(dev, field)
        if not bw:
            notes.append(f"pool {ps.name}: device {pp.device} has neither nic_bw_gb_per_s nor pcie_bw_gb_per_s; "
                         "model swap not simulated (pass --load-gb-per-s)")
            continue
        w = resolved.models[svc.model].weight_bytes(svc.weight_precision)
        reload[ps.name] = weight_reload_s(w, pp.tp, bw)
        reload_detail[ps.name] = {"weight_bytes": w, "tp": pp.tp, "load_gb_per_s": bw,
                                  "source": "--load-gb-per-s" if load_gb_per_s is not None else f"{pp.device}.{field}",
                                  "reload_s": reload[ps.name]}

    if trace_path:
        from planner.workload.log import RequestLog
        from planner.workload.readers import read_trace

        log = read_trace(Path(trace_path), trace_format)
        if not isinstance(log, RequestLog) or not log.has_arrivals:
            raise InputError(Problem(trace_path, "", "the log has no per-request arrival times to replay",
                                     "use a log with timestamps, or simulate synthetic arrivals (drop --trace)"))
        frame = log.frame
        if "service" not in frame.columns:
            if len(sim.routes) != 1:
                raise InputError(Problem(trace_path, "service", "the log has no service column but the plan has several services",
                                         "use a log with a service column"))
            frame = frame.assign(service=sim.routes[0].service)
        span = float(frame["arrival_s"].max() - frame["arrival_s"].min()) or 1.0
        trace_rate = len(frame) / span
        peak_rate = float(sim.demand["rate_peak_per_s"].sum())
        mean_rate = float(sim.demand["rate_mean_per_s"].sum())

        def stream(load: str, s: int) -> Iterator[RequestChunk]:
            # the log's time compressed (or stretched) to the plan's rate: its peak for the peak scenario, its mean
            # otherwise (the instance's traffic.rate_multiplier included: a x20 plan replays the log 20x faster)
            scale = trace_rate / (peak_rate if load == "peak" else mean_rate)
            keep = frame[(frame["arrival_s"] - frame["arrival_s"].min()) * scale <= duration_s]
            return replay_requests(keep, services=sim.services, time_scale=scale)
        runs = run_scenarios(sim.pools, sim.routes, stream, duration_s=duration_s, seed=seed, reload_s=reload,
                             scenarios=scenario_names or SCENARIOS)
        arrivals = (f"replay of {trace_path} ({trace_rate:.3g} req/s), its time scaled to the plan's mean rate "
                    f"({mean_rate:.3g} req/s; peak scenario: its peak rate, {peak_rate:.3g} req/s)")
    else:
        assert by_bucket is not None
        bsim = by_bucket

        def bstream(load: str, s: int) -> Iterator[RequestChunk]:
            return bucket_stream(bsim, load=load, duration_s=duration_s, seed=s)

        runs = [replace(r, result=service_results(r.result, bsim))
                for r in run_scenarios(bsim.pools, bsim.routes, bstream, duration_s=duration_s, seed=seed, reload_s=reload,
                                       scenarios=scenario_names or SCENARIOS)]
        arrivals = f"synthetic renewal at the plan's demand, routed by the plan's shares per bucket ({lengths_drawn(bsim.route_table)})"
    payload = {
        "instance": resolved.instance.name, "plan": plan_label, "architecture": sim.architecture,
        "arrivals": arrivals,
        "duration_s": duration_s, "seed": seed, "model_swap_reload": reload_detail, "notes": notes,
        "scenarios": {r.name: {"load": r.load, "outages": [o.__dict__ for o in r.outages], **r.result.to_dict(timeline=True)} for r in runs},
    }
    if html_file:
        from planner.report.html import write_html

        write_html(html_file, plan=plan, simulation=runs,
                   title=f"Simulated plan: {resolved.instance.name} ({sim.architecture}, {fmt(duration_s)} s per scenario)")
    if as_json:
        echo_json(payload)
        return
    click.echo(f"{resolved.instance.name}: {sim.architecture} plan {plan_label}; {payload['arrivals']}, "
               f"{fmt(duration_s)} s per scenario, seed {seed}")
    for r in runs:
        res = r.result
        click.echo(f"\n[{r.name}] {res.requests:,} requests, {res.events:,} events in {fmt(res.wall_s)} s wall")
        rows = []
        # the per-token columns hold the metric each service targets (TPOT, or ITL when it sets only an ITL target)
        from planner.schema.plan import token_metric_label

        tok = token_metric_label(s.token_metric for s in res.services.values()).lower()
        for s in res.services.values():
            t = s.token_summary
            p50, p99 = (_ms(t.p50), _ms(t.p99)) if t is not None else (math.nan, math.nan)
            cells: list[Any] = [p50, p99] if tok != "tpot/itl" else [f"{s.token_metric} {fmt(p50)}", f"{s.token_metric} {fmt(p99)}"]
            rows.append([s.service, _ms(s.ttft.p50), _ms(s.ttft.p90), _ms(s.ttft.p99), _ms(s.ttft_target_s),
                         *cells, _ms(s.token_target_s), s.slo_attainment,
                         {True: "yes", False: "NO", None: "no requests measured"}[s.verdict], s.unfinished + s.rejected])
        click.echo(table(["service", "ttft p50 ms", "p90", "p99", "target", f"{tok} p50 ms", "p99", "target",
                          "slo share", "met", "lost"], rows))
        plan_util = {p.name: (p.utilization_mean if r.load == "mean" else p.utilization_peak) for p in sim.pool_plans.values()}
        itl = {name: res.histograms.get(f"pool:{name}:itl") for name in res.pools}
        prow = [[p.name, p.instances, plan_util.get(p.name), p.plan_comparable_utilization,
                 p.utilization, p.kv_utilization, _ms(p.wait.p99),
                 *((_ms(h.quantile(0.5)), _ms(h.quantile(0.99))) if (h := itl[p.name]) is not None and h.n else ("-", "-")),
                 p.queue_max, p.preemptions, p.kv_blocked_admissions] for p in res.pools.values()]
        click.echo(table(["pool", "inst", "plan util", "sim util", "any busy", "kv", "wait p99 ms", "itl p50 ms", "itl p99 ms", "max queue", "preempt",
                          "kv blocked"], prow))
        if any(p.role in ("decode", "unified") for p in res.pools.values()):
            click.echo(f"  {UTILIZATION_NOTE}")
        if res.note:
            click.echo(f"  note: {res.note}")
        if trace_path and res.last_arrival_s < 0.5 * duration_s:
            click.echo(f"  note: at this rate the log replays in {fmt(res.last_arrival_s)} s of the {fmt(duration_s)} s run: "
                       f"{res.measured:,} requests measured after the warm-up (a longer log measures more)")
    for n in notes:
        click.echo(f"note: {n}")
    if html_file:
        wrote(f"wrote {html_file}")


COMMANDS = [simulate_cmd]
