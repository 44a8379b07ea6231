"""``planner sweep``, ``budget``, ``evaluate`` and ``solve-robust``: studies on an instance (DESIGN §7)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from planner.cli.cmd_horizon import refuse_horizon
from planner.cli.cmd_simulate import SEED, FiniteFloatRange
from planner.cli.output import echo_json, fmt, note, progress, sig, step, table, versioned

SET_HELP = ("PATH=VALUES, repeatable. PATH is a dot-path into the instance (as in `scenarios:`). "
            "VALUES: one value, a comma list (a grid dimension; several make a cartesian product), or "
            "dist:NAME(a,b[,c]) drawn --monte-carlo times: normal(mean,sd), lognormal(mean,sd) (mean/sd of the value), "
            "uniform(lo,hi), triangular(lo,mode,hi), growth(rate,sd,years) = (1+g)^years, g~normal(rate,sd).")

REL_TOL = FiniteFloatRange(1e-6, 0.5)
"""``--rel-tol`` of the multiplier searches (:func:`planner.studies.search.largest_passing_multiplier`): the bisection
stops at ``hi/lo - 1 <= rel_tol``, so 0 (or below) never stops, nan stops at once (the bracket's low end, 1, was printed
as the answer), and 0.5 is already a coarse bracket."""


def _load(instance: str, scenario: str | None) -> Any:
    from planner.instance import load_instance

    return load_instance(instance, scenario=scenario)


def _note_multipliers(raw: dict[str, Any], spec: Any) -> None:
    """A note per ``*multiplier`` field the instance sets that ``--set`` replaces (:func:`planner.overrides.multipliers_replaced`)."""
    from planner.overrides import multipliers_replaced

    for line in multipliers_replaced(raw, {**{k: [v] for k, v in spec.fixed.items()}, **spec.grid}):
        note(f"note: {line}")


def _study(resolved: Any, sets: tuple[str, ...], scenarios: tuple[str, ...], monte_carlo: int, seed: int,
           extra_paths: tuple[str, ...] = ()) -> tuple[Any, list[Any]]:
    """Parse and check ``--set`` (plus the instance's forecasts for --monte-carlo), expand to scenarios."""
    from planner.errors import InputError, Problem
    from planner.studies.spec import check_paths, check_values, expand, parse_sets, with_forecasts

    spec = parse_sets(list(sets))
    file = str(resolved.path)
    spec = with_forecasts(spec, resolved.instance.forecasts, monte_carlo=monte_carlo)
    if monte_carlo > 0 and not spec.distributions:
        raise InputError(Problem("--monte-carlo", str(monte_carlo), "nothing to draw: no --set PATH=dist:... and no forecasts in the instance",
                                 "add --set PATH=dist:lognormal(1.5,0.3), or a forecasts: mapping to the instance"))
    check_paths(resolved.raw, list(spec.fixed) + spec.paths + list(extra_paths), file=file)
    check_values(resolved.raw, spec, file=file)
    _note_multipliers(resolved.raw, spec)
    for name in scenarios:
        if name not in resolved.instance.scenarios:
            raise InputError(f"scenario {name!r} is not defined (defined: {', '.join(resolved.instance.scenarios) or 'none'})", file=file)
    bases = {name: dict(resolved.instance.scenarios[name]) for name in scenarios} if scenarios else None
    return spec, expand(spec, bases=bases, monte_carlo=monte_carlo, seed=seed)


@click.command("sweep")
@click.argument("instance", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, help=SET_HELP)
@click.option("--scenario", "scenarios", multiple=True,
              help="Named scenario(s) of the instance to use as bases (default: the instance); crossovers bisect within each, "
                   "and with one the tornado starts from it.")
@click.option("--monte-carlo", type=click.IntRange(min=0), default=0, show_default=True,
              help="Draws from the dist: paths (default: the instance's forecasts: mapping).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the --monte-carlo draws (a non-negative integer).")
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Parallel processes (or Dask workers for local-dask).")
@click.option("--executor", default=None, help="Dask scheduler tcp://host:port, or local-dask (default: local processes).")
@click.option("--crossover", "crossover_paths", multiple=True,
              help="Path along which to bisect verdict flips (default: every swept rate_multiplier).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write sweep.csv, sweep.parquet, crossovers.csv, tornado.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print rows, crossovers and tornado as JSON.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (cost against the swept parameter, crossovers, tornado).")
@click.option("--capacity", "capacity_file", type=click.Path(dir_okay=False), default=None,
              help="Measured capacity CSV applied to every scenario's capacity table (as `planner solve --capacity`).")
@click.option("--capacity-only", is_flag=True, help="With --capacity: the file's rows are the only candidates.")
def sweep_cmd(instance: str, sets: tuple[str, ...], scenarios: tuple[str, ...], monte_carlo: int, seed: int, jobs: int,
              executor: str | None, crossover_paths: tuple[str, ...], out_dir: str | None, as_json: bool,
              html_file: str | None, capacity_file: str | None, capacity_only: bool) -> None:
    """Solve a grid / Monte Carlo study of INSTANCE: cost by term, mix, verdict per scenario; crossovers; tornado.

    Crossovers bisect each flip with the scenario's own overrides: its --scenario base, every
    fixed --set and the other swept values.
    """
    from planner.errors import InputError, Problem
    from planner.studies.source import TableSource
    from planner.studies.sweep import crossovers, run_sweep, study_headroom, tornado

    if capacity_only and not capacity_file:
        raise InputError(Problem("", "--capacity-only", "needs --capacity FILE", "add --capacity measured.csv"))
    resolved = _load(instance, None)
    refuse_horizon(resolved, "sweep", "--sweep PATH=V1,V2 (or --monte-carlo N --growth-dist DIST)")
    spec, study = _study(resolved, sets, scenarios, monte_carlo, seed, crossover_paths)
    source = TableSource.from_instance(resolved, capacity_file=capacity_file, capacity_only=capacity_only)
    with progress(len(study), f"solving {len(study)} scenarios") as bar:
        rows = run_sweep(source, study, jobs=jobs, executor=executor, progress=bar.update)
    paths = list(crossover_paths) or [p for p in spec.grid if p.endswith("rate_multiplier")]
    headroom = study_headroom(source, study)
    with step(f"bisecting verdict flips along {len(paths)} path(s)"):
        cross = [crossovers(source, rows, p, headroom=headroom, scenarios=study) for p in paths]
    import pandas as pd

    cross_df = pd.concat([c for c in cross if len(c)], ignore_index=True) if any(len(c) for c in cross) else pd.DataFrame()
    ranges: dict[str, tuple[Any, Any]] = {p: (min(v), max(v)) for p, v in spec.grid.items() if all(isinstance(x, (int, float)) for x in v)}
    ranges |= {p: d.quantiles(seed=seed) for p, d in spec.distributions.items()}
    start = dict(resolved.instance.scenarios[scenarios[0]]) if len(scenarios) == 1 else {}  # one --scenario: the tornado starts there
    with step(f"tornado over {len(ranges)} parameter(s)"):
        torn = tornado(source, ranges, base_overrides={**start, **spec.fixed}, headroom=headroom) if ranges else pd.DataFrame()
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows.to_csv(out / "sweep.csv", index=False)
        rows.to_parquet(out / "sweep.parquet", index=False)
        cross_df.to_csv(out / "crossovers.csv", index=False)
        torn.to_csv(out / "tornado.csv", index=False)
    if html_file:
        from planner.report.html import write_html

        numeric = [p for p, v in spec.grid.items() if all(isinstance(x, (int, float)) for x in v) and len(set(v)) > 1]
        x = next((p for p in paths if p in numeric), numeric[0] if numeric else None)
        write_html(html_file, sweep=rows, crossovers=cross_df, tornado=torn if len(torn) else None, sweep_x=x,
                   title=f"Sweep: {resolved.instance.name} ({len(study)} scenarios)")
    if as_json:
        echo_json(versioned({"rows": rows.to_dict("records"), "crossovers": cross_df.to_dict("records"), "tornado": torn.to_dict("records")}))
        return
    win = rows[rows["is_winner"]] if len(rows) else rows
    shown = win[["scenario", "architecture", "total_usd_per_month", "usd_per_million_tokens", "device_mix", "margin_usd_per_month"]]
    click.echo(table(["scenario", "winner", "total $/month", "$/1M tokens", "devices", "margin $/month"], shown.values.tolist()))
    if len(cross_df):
        click.echo("\nverdict flips (bisection brackets):")
        for r in cross_df.to_dict("records"):
            where = f" (in {r['base']})" if isinstance(r.get("base"), str) else ""
            click.echo(f"  {r['path']}{where}: {r['winner_low']} at {r['low']:.4g} -> {r['winner_high']} at {r['high']:.4g}")
    elif paths:
        click.echo(f"\nno verdict flip between adjacent swept values of {', '.join(paths)}")
    if paths:
        # the bisection brackets only flips between neighbours with different winners: a window narrower than the
        # grid's step between two values with one winner is not seen (enterprise-chat: shared at x1 and x2 alike,
        # disaggregated from x1.47 to x1.76)
        click.echo("  (a window between two swept values with one winner is not searched: `planner solve --confidence exact` "
                   "lists every window in the traffic dimension)")
    if len(torn):
        click.echo("\ntornado (cheapest plan's total, one parameter at a time):")
        click.echo(table(["path", "low", "high", "$ at low", "$ at high", "swing"],
                         torn[["path", "low", "high", "total_at_low_usd_per_month", "total_at_high_usd_per_month", "swing_usd_per_month"]].values.tolist()))
    if html_file:
        note(f"wrote {html_file}")


@click.command("budget")
@click.argument("instance", type=click.Path(dir_okay=False))
@click.option("--budgets", required=True, help="Comma list of monthly budgets, USD (e.g. 50000,100000,200000).")
@click.option("--set", "sets", multiple=True, help="Fixed PATH=VALUE overrides applied first.")
@click.option("--scenario", default=None, help="A named scenario of the instance to start from.")
@click.option("--rel-tol", type=REL_TOL, default=0.01, show_default=True, help="Relative precision of the multiplier, 1e-6 to 0.5.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write budget.csv and budget.parquet.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (the budget frontier with the device mix).")
def budget_cmd(instance: str, budgets: str, sets: tuple[str, ...], scenario: str | None, rel_tol: float, out_dir: str | None, as_json: bool,
               html_file: str | None) -> None:
    """For each budget: the largest traffic multiplier servable within SLO, and the mix that does it."""
    from planner.errors import InputError, Problem
    from planner.studies.budget import budget_frontier
    from planner.studies.source import TableSource
    from planner.studies.spec import check_paths, check_values, parse_sets

    try:
        values = [float(v) for v in budgets.split(",") if v.strip()]
    except ValueError as exc:
        raise InputError(Problem("--budgets", budgets, "not a comma list of numbers", "e.g. --budgets 50000,100000")) from exc
    if not values or any(v <= 0 for v in values):
        raise InputError(Problem("--budgets", budgets, "budgets must be positive numbers", "e.g. --budgets 50000,100000"))
    spec = parse_sets(list(sets))
    if spec.grid or spec.distributions:
        raise InputError(Problem("--set", next(iter(spec.paths)), "budget takes fixed values only", "give PATH=VALUE"))
    resolved = _load(instance, scenario)
    refuse_horizon(resolved, "budget", "--budget-per-year USD")
    check_paths(resolved.raw, list(spec.fixed), file=str(resolved.path))
    check_values(resolved.raw, spec, file=str(resolved.path))
    _note_multipliers(resolved.raw, spec)
    if spec.fixed:
        resolved = resolved.with_overrides(spec.fixed)
    with progress(len(values), f"{len(values)} budget(s)") as bar:
        frame = budget_frontier(TableSource.from_instance(resolved), values, rel_tol=rel_tol, progress=bar.update)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "budget.csv", index=False)
        frame.to_parquet(out / "budget.parquet", index=False)
    if html_file:
        from planner.report.html import write_html

        write_html(html_file, frontier=frame, title=f"Budget study: {resolved.instance.name}")
    if as_json:
        echo_json(versioned({"budgets": frame.to_dict("records")}))
        return
    click.echo(table(["budget $/month", "max traffic x", "cost $/month", "winner", "devices"],
                     frame[["budget_usd_per_month", "max_traffic_multiplier", "total_usd_per_month", "winner", "device_mix"]].values.tolist(),
                     formats={1: sig}))  # 3 significant digits kept: "19.0" beside "42.2"
    # a budget with no plan says why (the JSON's note), or "max traffic x 0" reads as a result
    for r in frame.to_dict("records"):
        if r.get("note"):
            click.echo(f"  ${float(r['budget_usd_per_month']):,.0f}/month: {r['note']}")
    if html_file:
        note(f"wrote {html_file}")


@click.command("evaluate")
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False))
@click.option("--instance", default=None, type=click.Path(dir_okay=False),
              help="Instance the plan was solved for (default: the plan's instance_path).")
@click.option("--architecture", default=None, help="Which of the plan's architectures to hold (default: the verdict's winner).")
@click.option("--set", "sets", multiple=True, help=SET_HELP)
@click.option("--scenario", "scenarios", multiple=True, help="Named scenario(s) of the instance to evaluate under.")
@click.option("--monte-carlo", type=click.IntRange(min=0), default=0, show_default=True,
              help="Draws from the dist: paths (default: the instance's forecasts: mapping).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the --monte-carlo draws (a non-negative integer).")
@click.option("--rel-tol", type=REL_TOL, default=0.01, show_default=True, help="Relative precision of the headroom multiplier, 1e-6 to 0.5.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write evaluate.csv and evaluate.parquet.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--capacity", "capacity_file", type=click.Path(dir_okay=False), default=None,
              help="Measured capacity CSV applied to every scenario's capacity table (the file the plan was solved with, "
                   "as `planner solve --capacity`).")
@click.option("--capacity-only", is_flag=True, help="With --capacity: the file's rows are the only candidates.")
@click.option("--simulate", is_flag=True,
              help="Also simulate the held plan (pools and routing as solved) at each scenario's rates, as `planner solve` "
                   "simulates it at peak (scenarios that change only rates).")
def evaluate_cmd(plan_file: str, instance: str | None, architecture: str | None, sets: tuple[str, ...], scenarios: tuple[str, ...],
                 monte_carlo: int, seed: int, rel_tol: float, out_dir: str | None, as_json: bool, capacity_file: str | None,
                 capacity_only: bool, simulate: bool) -> None:
    """How the fixed plan in PLAN.json fares under other traffic: SLO attainment, headroom, first pool to saturate, regret.

    The plan's pool sizes are held and routing is re-optimised for each scenario; regret is
    its cost minus the cost of the best plan re-optimised for that scenario.
    """
    from planner.errors import InputError, Problem
    from planner.instance import load_instance
    from planner.report.plan_io import load_plan
    from planner.solve_instance import plan_overrides
    from planner.studies.evaluate import evaluate_plan
    from planner.studies.fixed import FixedPlan
    from planner.studies.source import TableSource

    result = load_plan(plan_file)  # a horizon.json is refused there, pointing at `planner horizon --evaluate`
    try:
        fixed = FixedPlan.from_result(result, architecture)
    except ValueError as exc:
        raise InputError(Problem(plan_file, "architectures", str(exc), "pick a feasible architecture with --architecture")) from None
    inst = instance or result.instance_path
    try:
        found = bool(inst) and Path(inst).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte (fuzzed plans, issue 24)
        found = False
    if not found:
        shown = inst if len(inst) <= 200 else inst[:200] + "..."
        raise InputError(Problem(plan_file, "instance_path", f"the plan's instance {shown or '(none)'!r} is not a file here",
                                 "give the instance with --instance"))
    # The plan's own scenario and overrides (bucket counts included) are the base: with no --set the
    # evaluation reproduces the plan.
    resolved = load_instance(inst, plan_overrides(result) or None, scenario=result.scenario)
    if capacity_only and not capacity_file:
        raise InputError(Problem("", "--capacity-only", "needs --capacity FILE", "add --capacity measured.csv"))
    measured = sorted({str(p.get("source", ""))[len("measured:"):] for p in result.capacity.points
                       if str(p.get("source", "")).startswith("measured:")})
    if measured and not capacity_file:  # the plan records the file's name, not its rows: the tables come from the model
        note(f"the plan was solved with measured capacity ({', '.join(measured)}); without --capacity evaluate re-derives the "
             "capacity tables from the instance's performance model, so its headroom, SLO and regret are the model's, not the "
             f"measurement's: pass --capacity {measured[0]}")
    _, study = _study(resolved, sets, scenarios, monte_carlo, seed)
    source = TableSource.from_instance(resolved, capacity_file=capacity_file, capacity_only=capacity_only)
    arrivals = None
    if simulate:
        from planner.verify import peak_arrivals_from_instance

        arrivals, _ = peak_arrivals_from_instance(resolved)
    try:
        with progress(len(study), f"evaluating {len(study)} scenario(s)") as bar:
            frame = evaluate_plan(source, fixed, study, rel_tol=rel_tol, progress=bar.update, simulate=result if simulate else None,
                                  arrivals=arrivals)
    except ValueError as exc:
        if (sets or scenarios) and inst == result.instance_path and "no usable operating point" in str(exc):
            # the plan's own instance: a --set / --scenario changed what the held pools serve, not the instance
            import shlex

            pool_keys = ("model", "weight_precision", "kv_precision", "engine", "speculative")
            named = [s for s in sets if s.split("=", 1)[0].strip().rsplit(".", 1)[-1] in pool_keys or "device" in s.split("=", 1)[0]]
            what = [f"--set {s}" for s in (named or sets)] + ([] if named else [f"--scenario {s}" for s in scenarios])
            redo = " ".join([*(f"--set {shlex.quote(s)}" for s in sets), *(f"--scenario {shlex.quote(s)}" for s in scenarios)])
            verb, it = ("changes", "it") if len(what) == 1 else ("change", "them")
            raise InputError(Problem(plan_file, "pools", f"{' and '.join(what)} {verb} what the held pools serve (the model, its precision "
                                     f"or the devices), so the plan cannot be evaluated under {it}: {str(exc).split(' (pools there:')[0]}",
                                     f"drop {it}, or re-solve with {it} (`planner solve {shlex.quote(inst)} {redo} --out DIR`) and "
                                     "evaluate that plan")) from None
        raise InputError(Problem(plan_file, "pools", str(exc), "evaluate with the instance the plan was solved for (--instance)")) from None
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "evaluate.csv", index=False)
        frame.to_parquet(out / "evaluate.parquet", index=False)
    if as_json:
        echo_json(versioned({"architecture": fixed.architecture, "instances": fixed.instances, "rows": frame.to_dict("records")}))
        return
    click.echo(f"held plan ({fixed.architecture}): " + ", ".join(f"{k}x{v}" for k, v in sorted(fixed.instances.items())))
    from planner.studies.evaluate import MAX_MULTIPLIER

    def head(r: Any) -> str:
        h, beyond = float(r["headroom_multiplier"]), r.get("headroom_beyond_search")
        return f">={h:g} (search limit)" if beyond == "above" else f"<1/{MAX_MULTIPLIER:g} (search limit)" if beyond == "below" else fmt(h)

    def usd(v: Any) -> int | None:  # whole dollars: a regret of 9.4e-08 is 0 up to the MIP gap
        return None if v is None or v != v else int(round(float(v)))

    sim_col = ["simulated"] if simulate else []
    click.echo(table(["scenario", "carries", "SLO met", "as routed", *sim_col, "headroom x", "saturates first", "fixed $/month",
                      "re-opt $/month", "regret $/month"],
                     [[r["scenario"], r["carries_load"], r["slo_met"], r["latency_met_as_routed"],
                       *([r["simulated_met"]] if simulate else []), head(r), r["saturates_first"],
                       usd(r["fixed_total_usd_per_month"]), usd(r["optimal_total_usd_per_month"]), usd(r["regret_usd_per_month"])]
                      for r in frame.to_dict("records")]))
    click.echo("  carries / SLO met: within the utilisation caps, routing re-optimised; as routed: the plan's own routing, analytic "
               "latency at the held pools' sizes (no cap)" + ("; simulated: the same held plan in the peak simulation at the "
                                                               "scenario's rates" if simulate else ""))
    for r in frame.to_dict("records"):
        if not r["slo_met"]:
            click.echo(f"  {r['scenario']}: {r['slo_detail']}; as routed: {r['latency_as_routed_detail']}")
        elif r["latency_met_as_routed"] is not True:
            click.echo(f"  {r['scenario']}: as routed: {r['latency_as_routed_detail']}")
        if simulate:
            click.echo(f"  {r['scenario']}: simulated: {r['simulated_detail']}")


@click.command("solve-robust")
@click.argument("instance", type=click.Path(dir_okay=False))
@click.option("--scenario", "scenarios", multiple=True,
              help="Named scenario of the instance (repeatable; 'base' = the instance as written). Default: base and every named scenario.")
@click.option("--set", "sets", multiple=True, help="PATH=VALUES applied to every scenario; a comma list makes one scenario per value.")
@click.option("--objective", type=click.Choice(["expected", "worst"]), default="expected", show_default=True,
              help="expected: capex/ops once + mean of power/network over scenarios; worst: worst-case monthly total.")
@click.option("--weights", default=None, help="Comma list of scenario weights for --objective expected (default: equal; refused with --objective worst).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write robust.csv (one row per architecture and scenario).")
@click.option("--json", "as_json", is_flag=True)
def solve_robust_cmd(instance: str, scenarios: tuple[str, ...], sets: tuple[str, ...], objective: str, weights: str | None,
                     out_dir: str | None, as_json: bool) -> None:
    """Plan INSTANCE for several scenarios at once: devices chosen once, routing per scenario."""
    from dataclasses import replace

    import pandas as pd

    from planner.errors import InputError, Problem
    from planner.studies.robust import solve_robust
    from planner.studies.source import TableSource
    from planner.studies.spec import check_paths, check_values, expand, parse_sets

    resolved = _load(instance, None)
    file = str(resolved.path)
    names = list(scenarios) or ["base", *resolved.instance.scenarios]
    bases: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in resolved.instance.scenarios:
            bases[name] = dict(resolved.instance.scenarios[name])
        elif name == "base":
            bases[name] = {}
        else:
            raise InputError(f"scenario {name!r} is not defined (defined: base, {', '.join(resolved.instance.scenarios) or 'none'})", file=file)
    spec = parse_sets(list(sets))
    if spec.distributions:
        raise InputError(Problem("--set", next(iter(spec.distributions)), "solve-robust takes values, not distributions", "give PATH=V or PATH=V1,V2"))
    check_paths(resolved.raw, list(spec.fixed) + spec.paths, file=file)
    check_values(resolved.raw, spec, file=file)
    _note_multipliers(resolved.raw, spec)
    study = expand(spec, bases=bases)
    w = None
    if weights and objective == "worst":  # the worst case takes every scenario whole: weights were printed and ignored
        raise InputError(Problem("--weights", weights, "weights apply to --objective expected only; --objective worst plans for the "
                                 "worst scenario whatever its weight", "drop --weights, or use --objective expected"))
    if weights:
        try:
            w = [float(v) for v in weights.split(",")]
        except ValueError:
            raise InputError(Problem("--weights", weights, "not a comma list of numbers", "e.g. --weights 0.7,0.3")) from None
        example = "e.g. --weights " + ",".join(["1"] * len(study))
        if len(w) != len(study):
            raise InputError(Problem("--weights", weights, f"{len(w)} weight(s) for {len(study)} scenarios; need one per scenario "
                                     f"({', '.join(s.name for s in study)})", example))
        if not all(math.isfinite(v) and v >= 0 for v in w):  # nan or inf made the MIP's objective nan: HiGHS spun for ever
            raise InputError(Problem("--weights", weights, "weights must be finite, non-negative numbers", example))
        if sum(w) <= 0:
            raise InputError(Problem("--weights", weights, "weights must have a positive sum (they are normalised to sum to 1)", example))
    source = TableSource.from_instance(resolved)
    tables = []
    settings = None
    for sc in study:
        _, t, s = source.tables_and_settings(sc.overrides, exact_rates=False)  # one plan for every scenario: one set of points
        tables.append((sc.name, t))
        settings = settings or s
    assert settings is not None
    try:
        res = solve_robust(tables, replace(settings, extra_notes=()), objective=objective, weights=w)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InputError(Problem(file, "scenarios", str(exc), "give scenarios that change traffic, prices or budgets")) from None
    rows = []
    for arch, ra in res.architectures.items():
        for name in res.scenarios:
            plan = ra.plans.get(name)
            rows.append({"architecture": arch, "feasible": ra.feasible, "status": ra.status, "objective": res.objective,
                         "objective_usd_per_month": ra.objective_usd_per_month, "scenario": name,
                         "weight": res.weights[res.scenarios.index(name)],
                         "total_usd_per_month": plan.costs.total_usd_per_month if plan and plan.costs else None,
                         "slo_met": all(lat.ttft_met and lat.tpot_met for lat in plan.latency) if plan and plan.feasible else None,
                         "pools": ", ".join(f"{k}x{v}" for k, v in sorted(ra.instances.items())),
                         "device_mix": ", ".join(f"{d}:{n}" for d, n in sorted(ra.devices.items())), "winner": arch == res.winner})
    frame = pd.DataFrame(rows)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "robust.csv", index=False)
    if as_json:
        echo_json(versioned({"objective": res.objective, "scenarios": res.scenarios, "weights": res.weights, "winner": res.winner,
                   "rows": frame.to_dict("records"),
                   "plans": {a: {s: p.model_dump(mode="json") for s, p in ra.plans.items()} for a, ra in res.architectures.items()}}))
        return
    click.echo(f"robust plan over {len(res.scenarios)} scenario(s), objective: {res.objective}; winner: {res.winner or 'none feasible'}")
    click.echo(table(["architecture", "scenario", "weight", "$/month there", "SLO met", f"{res.objective} $/month", "devices"],
                     frame[["architecture", "scenario", "weight", "total_usd_per_month", "slo_met", "objective_usd_per_month", "device_mix"]].values.tolist()))
    if res.winner is None:
        from planner.errors import InfeasibleError

        raise InfeasibleError([], headline=f"no architecture of {resolved.instance.name} has one set of pools that serves every scenario")


COMMANDS = [sweep_cmd, budget_cmd, evaluate_cmd, solve_robust_cmd]
