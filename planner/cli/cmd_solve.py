"""`planner solve` (plan an instance) and `planner check` (re-verify a plan file)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from planner.cli.output import echo_json, note, wrote
from planner.errors import InfeasibleError, InputError, Problem, SolverError


@click.command("solve")
@click.argument("instance", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (verdict, architectures, costs, solver).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write plan.json, costs.csv, pools.csv (and .parquet), report.md here.")
@click.option("--time-limit", type=float, help="Solver time limit per architecture, seconds (default: options.solver).")
@click.option("--mip-gap", type=float, help="Relative MIP gap (default: options.solver).")
@click.option("--architectures", help="Comma-separated: shared,disaggregated,hybrid (default: options.architectures).")
@click.option("--scenario", help="Apply a named scenario of the instance.")
@click.option("--set", "sets", multiple=True, help="Override a field: PATH=VALUE (repeatable).")
@click.option("--on-bad-row", type=click.Choice(["error", "skip"]), default=None,
              help="Unusable rows of a traffic log: stop (error) or drop them and say how many (skip); default: options.on_bad_row (error).")
@click.option("--capacity", "capacity_file", type=click.Path(dir_okay=False),
              help="Measured capacity CSV: per (service, bucket, device, tp[, role]) the requests/s one instance sustains within SLO; "
                   "its rows replace the modelled ones (README 'Measured capacities', planner.capacity).")
@click.option("--capacity-only", is_flag=True,
              help="With --capacity: the file's rows are the only candidates (configurations and roles it does not list carry no traffic).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), help="Also write a self-contained HTML report here.")
@click.option("--robust", is_flag=True, help="Plan for several scenarios at once (devices chosen once, routing per scenario); see --robust-scenario.")
@click.option("--robust-scenario", "robust_scenarios", multiple=True,
              help="With --robust: a named scenario to plan for (repeatable; 'base' = the instance as written). Default: base and every named scenario.")
@click.option("--compare-devices", is_flag=True,
              help="Also solve each candidate device alone: its best plan's cost and what held it back (a few seconds more).")
@click.option("--confidence", type=click.Choice(["exact", "off"]), default="off", show_default=True,
              help="How robust the verdict is: exact finds every change of winner along prefill time, decode step time and traffic "
                   "by re-solving as `planner sweep` does (tens of solves, on two cores: ~50 s CPU, 36 s wall on enterprise-chat; minutes on code-completion-8b).")
@click.option("--resolution", type=click.Choice(["fixed", "auto"]), default="fixed", show_default=True,
              help="Length buckets of services whose traffic is a log: fixed (traffic.buckets) or auto (refine until the winner's "
                   "cost moves < 2 %, at most 16; each count tried is a solve without the peak simulation).")
@click.option("--no-cache", is_flag=True,
              help="Solve from scratch: neither read nor write the cache ($PLANNER_CACHE_DIR, default ~/.cache/planner) of capacity tables, "
                   "prepared tables and solved plans (keyed on the instance, the files it names, the catalog, the calibration, the options "
                   "and the planner's code: planner.capacity_cache, planner.plan_cache).")
@click.option("--no-plan-cache", is_flag=True,
              help="Solve again even when the cache holds the plan of these exact inputs (the capacity and prepared tables still come from it).")
@click.pass_context
def solve(ctx: click.Context, instance: str, as_json: bool, out_dir: str | None, time_limit: float | None, mip_gap: float | None,
          architectures: str | None, scenario: str | None, sets: tuple[str, ...], capacity_file: str | None,
          capacity_only: bool, html_file: str | None, robust: bool, robust_scenarios: tuple[str, ...], compare_devices: bool,
          confidence: str = "off", resolution: str = "fixed", no_cache: bool = False, no_plan_cache: bool = False,
          on_bad_row: str | None = None) -> None:
    """Size the pools of INSTANCE, compare architectures and say which wins.

    Exit 3 if infeasible or if no architecture's plan meets its latency targets (the cheapest plan
    is still written); exit 4 if the solver fails, or its plan fails `planner check`. A plan solved
    before from identical inputs is read from the cache and says so in its notes (--no-cache
    solves again).
    """
    if robust:
        from planner.cli.cmd_studies import solve_robust_cmd

        ignored = [name for name, given in (("--scenario", scenario), ("--capacity", capacity_file), ("--capacity-only", capacity_only), ("--html", html_file),
                                            ("--time-limit", time_limit), ("--mip-gap", mip_gap), ("--architectures", architectures)) if given]
        if ignored:
            raise InputError(Problem("", ignored[0], "is not supported with --robust", "use --robust-scenario to choose scenarios, or drop --robust"))
        ctx.invoke(solve_robust_cmd, instance=instance, scenarios=robust_scenarios, sets=sets, objective="expected",
                   weights=None, out_dir=out_dir, as_json=as_json)
        return
    if robust_scenarios:
        raise InputError(Problem("", "--robust-scenario", "needs --robust", "add --robust"))
    if capacity_only and not capacity_file:
        raise InputError(Problem("", "--capacity-only", "needs --capacity FILE", "add --capacity measured.csv"))
    from planner.instance import load_instance
    from planner.report import summary_text, write_outputs
    from planner.solve_instance import settings_from_instance, solve_instance

    archs = None
    if architectures:
        archs = tuple(a.strip() for a in architectures.split(",") if a.strip())
        bad = [a for a in archs if a not in ("shared", "disaggregated", "hybrid")]
        if bad:
            raise InputError(Problem("", "--architectures", f"unknown architecture(s): {', '.join(bad)}", "use shared, disaggregated, hybrid"))
    if time_limit is not None and time_limit <= 0:
        raise InputError(Problem("", "--time-limit", "must be > 0", "give seconds, e.g. --time-limit 10"))
    if mip_gap is not None and mip_gap < 0:
        raise InputError(Problem("", "--mip-gap", "must be >= 0", "e.g. --mip-gap 0.001"))
    from planner.overrides import parse_set_options

    overrides = parse_set_options(sets)
    if on_bad_row is not None:  # the same as --set options.on_bad_row=...: recorded with the plan's overrides
        overrides["options.on_bad_row"] = on_bad_row
    resolved = load_instance(instance, overrides or None, scenario=scenario)
    if resolved.instance.horizon is not None:  # one line, on stderr (the --json output stays a document); -q drops it
        note(f"note: {instance} has a horizon section; this is the single-peak plan of its services' own traffic. "
             f"Plan over time (periods x slots, buy / reserve / rent) with `planner horizon {instance}`.")
    settings = settings_from_instance(resolved.instance, architectures=archs, time_limit_s=time_limit, mip_gap=mip_gap)
    settings = replace(settings, confidence=confidence)
    if no_cache or no_plan_cache:
        result = solve_instance(resolved, settings, capacity_file=capacity_file, scenario=scenario, overrides=overrides,
                                capacity_only=capacity_only, resolution=resolution, cache=not no_cache).result
    else:
        from planner.plan_cache import cached_solve

        result, _status = cached_solve(resolved, settings, capacity_file=capacity_file, scenario=scenario, overrides=overrides,
                                       capacity_only=capacity_only, resolution=resolution)
    if overrides:
        from planner.instance import instance_mapping
        from planner.overrides import multipliers_replaced, replaced_by_set

        replaced = replaced_by_set(scenario, dict(resolved.instance.scenarios.get(scenario, {})), overrides) if scenario else []
        replaced += multipliers_replaced(instance_mapping(instance, scenario), {k: [v] for k, v in overrides.items()})
        if replaced:
            result = result.model_copy(update={"notes": [*result.notes, *replaced]})
    if out_dir:
        write_outputs(result, out_dir)
    if html_file:
        from planner.report.html import write_html

        write_html(html_file, plan=result)
    per_device = _compare_devices(resolved, capacity_file) if compare_devices and result.verdict.winner is not None else None
    if as_json:
        data = result.model_dump(mode="json")
        if per_device is not None:
            data["per_device"] = per_device.to_dict("records")
        echo_json(data)
    else:
        click.echo(summary_text(result))
        if per_device is not None:
            from planner.cli.output import table

            click.echo("\nper candidate device (each solved alone, analytic; see planner.studies.devices):")
            click.echo(table(["device", "best architecture", "$/month", "more than best", "$/1M tokens", "devices", "what held it back"],
                             per_device.values.tolist()))
        if out_dir:
            wrote(f"\nwrote {Path(out_dir) / 'plan.json'}, costs.csv, pools.csv (and .parquet), report.md")
        if html_file:
            wrote(f"wrote {html_file}")
    _raise_if_check_rejects(result)
    if result.verdict.winner is None:
        from planner.errors import Diagnosis

        diags = [Diagnosis(d.service, d.bucket, d.constraint, f"{arch}: {d.message}" if not d.message.startswith(arch) else d.message, d.fix)
                 for arch, plan in result.architectures.items() for d in plan.diagnosis]
        if not diags and any(p.solver.status in ("error", "time_limit") for p in result.architectures.values()):
            raise SolverError("the solver stopped without a feasible plan for any architecture (raise --time-limit)")
        raise InfeasibleError(diags, headline=f"no architecture of {resolved.instance.name} has a feasible plan")


def _compare_devices(resolved: Any, capacity_file: str | None) -> Any:
    from planner.cli.output import progress
    from planner.studies.devices import device_comparison
    from planner.studies.source import TableSource

    if capacity_file:
        raise InputError(Problem("", "--compare-devices", "works with the performance model's tables only", "drop --capacity"))
    source = TableSource.from_instance(resolved)
    with progress(len(source.base_tables.configs["device"].unique()), "solving per device") as bar:
        return device_comparison(source, progress=bar.update)


def _raise_if_check_rejects(result: object) -> None:
    """``solve`` never exits 0 with a plan ``planner check`` rejects, nor with a winner that misses its
    targets (issue 16).

    A plan check rejects is inconsistent (a numerical failure of the solve): exit 4 listing the
    violations. A consistent plan whose winner misses its own latency targets (predicted, or in
    the peak simulation: no architecture's plan meets them) is an infeasible outcome: exit 3 with
    a diagnosis per miss. The plan files were already written (``--out``) for inspection.
    """
    from planner.errors import Diagnosis, SolverError
    from planner.optimize.check import check_plan, winner_misses
    from planner.schema.plan import PlanResult

    assert isinstance(result, PlanResult)
    violations = check_plan(result, recompute_latency=False)  # the prediction extract just made; a cache read-back loads no scipy
    if violations:
        raise SolverError(f"the plan fails its own check ({len(violations)} violation(s)); the solve is numerically unreliable:\n"
                          + "\n".join(f"  - {v}" for v in violations[:20]))
    misses = winner_misses(result)
    if misses:
        fixes = {"ttft": "raise slo.ttft.target_ms, lower options.max_utilization, or add faster candidate devices",
                 "tpot": "raise the per-token target (slo.tpot or slo.itl) or add candidate devices with more memory bandwidth",
                 "simulation": "add options.redundancy or lower options.max_utilization"}
        raise InfeasibleError([Diagnosis(svc, "", f"latency[{what}]", detail + "; no architecture's plan meets its targets", fixes[what])
                               for svc, what, detail in misses],
                              headline=f"no architecture of {result.instance} meets its latency targets (the cheapest plan is in the outputs)")


@click.command("check")
@click.argument("plan", type=click.Path(dir_okay=False, path_type=str))
@click.option("--instance", "instance_file", type=click.Path(dir_okay=False, path_type=str),
              help="Re-derive the capacity snapshot from this instance (default: the instance path the plan records, when it exists).")
@click.option("--no-instance", is_flag=True, help="Trust the plan's own capacity snapshot (do not re-derive it from the instance).")
def check(plan: str, instance_file: str | None, no_instance: bool) -> None:
    """Re-verify PLAN.json (written by `planner solve --out`) without the solver; exit 1 on a violation.

    Every number the plan states is recomputed: routing, masks, load, KV, utilisation, pool and
    total costs, tokens and $/1M tokens, latency flags, solver status, simulation flags, the
    verdict's winner and margin. With the instance (``--instance``, or the path recorded in the
    plan) the capacity snapshot is re-derived from it instead of being trusted.
    """
    from planner.optimize.check import check_plan, recompute_instance, stated_derived_problems
    from planner.report.plan_io import load_plan, recorded_instance

    if instance_file and no_instance:
        raise InputError(Problem("", "--instance", "cannot be combined with --no-instance", "drop one of them"))
    result = load_plan(plan)
    truth, name, source = None, None, "the plan's own capacity snapshot (no instance)"
    path = instance_file or (None if no_instance else recorded_instance(result, plan))
    if path is not None:
        truth, name = recompute_instance(result, path)
        source = f"the capacity snapshot re-derived from {path}"
    elif not no_instance and result.instance_path:
        click.echo(f"note: the plan's instance {result.instance_path} is not found from here nor beside the plan: checking against "
                   "the plan's own capacity snapshot only (give --instance)", err=True)
        source = f"the plan's own capacity snapshot only: its instance {result.instance_path} is not found"
    problems = check_plan(result, truth, instance_name=name)
    import json  # the figures the schema recomputes on reading (meets_targets) compared with what the file states

    problems += stated_derived_problems(json.loads(Path(plan).read_text(encoding="utf-8")), result)
    if problems:
        click.echo(f"{plan}: {len(problems)} violation(s) (against {source}):", err=True)
        for v in problems:
            click.echo(f"  - {v}", err=True)
        raise SystemExit(1)
    n = sum(1 for a in result.architectures.values() if a.feasible)
    click.echo(f"{plan}: valid — {n} feasible architecture plan(s) re-verified against {source} "
               "(routing, masks, load, KV, utilisation, procurement, budget, pool and total costs, tokens, latency flags, solver status, simulation, verdict)")


COMMANDS = [solve, check]
