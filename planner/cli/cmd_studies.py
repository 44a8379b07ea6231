"""``planner sweep`` and ``planner budget``: studies on an instance (DESIGN §7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from planner.cli.output import echo_json, table

SET_HELP = ("PATH=VALUES, repeatable. PATH is a dot-path into the instance (as in `scenarios:`). "
            "VALUES: one value, a comma list (a grid dimension; several make a cartesian product), or "
            "dist:NAME(a,b[,c]) drawn --monte-carlo times: normal(mean,sd), lognormal(mean,sd) (mean/sd of the value), "
            "uniform(lo,hi), triangular(lo,mode,hi), growth(rate,sd,years) = (1+g)^years, g~normal(rate,sd).")


def _load(instance: str, scenario: str | None) -> Any:
    from planner.instance import load_instance

    return load_instance(instance, scenario=scenario)


@click.command("sweep")
@click.argument("instance", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, help=SET_HELP)
@click.option("--scenario", "scenarios", multiple=True, help="Named scenario(s) of the instance to use as bases (default: the instance).")
@click.option("--monte-carlo", type=click.IntRange(min=0), default=0, show_default=True, help="Draws from the dist: paths.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Parallel processes (or Dask workers for local-dask).")
@click.option("--executor", default=None, help="Dask scheduler tcp://host:port, or local-dask (default: local processes).")
@click.option("--crossover", "crossover_paths", multiple=True,
              help="Path along which to bisect verdict flips (default: every swept rate_multiplier).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write sweep.csv, sweep.parquet, crossovers.csv, tornado.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print rows, crossovers and tornado as JSON.")
def sweep_cmd(instance: str, sets: tuple[str, ...], scenarios: tuple[str, ...], monte_carlo: int, seed: int, jobs: int,
              executor: str | None, crossover_paths: tuple[str, ...], out_dir: str | None, as_json: bool) -> None:
    """Solve a grid / Monte Carlo study of INSTANCE: cost by term, mix, verdict per scenario; crossovers; tornado."""
    from planner.studies.source import TableSource
    from planner.studies.spec import check_paths, check_values, expand, parse_sets
    from planner.studies.sweep import crossovers, run_sweep, study_headroom, tornado

    spec = parse_sets(list(sets))
    resolved = _load(instance, None)
    file = str(resolved.path)
    check_paths(resolved.raw, list(spec.fixed) + spec.paths + list(crossover_paths), file=file)
    check_values(resolved.raw, spec, file=file)
    bases = {name: dict(resolved.instance.scenarios[name]) for name in scenarios} if scenarios else None
    if scenarios:
        for name in scenarios:
            if name not in resolved.instance.scenarios:
                from planner.errors import InputError

                raise InputError(f"scenario {name!r} is not defined (defined: {', '.join(resolved.instance.scenarios) or 'none'})", file=file)
    study = expand(spec, bases=bases, monte_carlo=monte_carlo, seed=seed)
    source = TableSource.from_instance(resolved)
    make_bar: Any = click.progressbar
    bar: Any = make_bar(length=len(study), label=f"{len(study)} scenarios", file=click.get_text_stream("stderr"))  # type: ignore[operator]
    with bar:
        rows = run_sweep(source, study, jobs=jobs, executor=executor, progress=bar.update)
    paths = list(crossover_paths) or [p for p in spec.grid if p.endswith("rate_multiplier")]
    headroom = study_headroom(source, study)
    cross = [crossovers(source, rows, p, headroom=headroom) for p in paths]
    import pandas as pd

    cross_df = pd.concat([c for c in cross if len(c)], ignore_index=True) if any(len(c) for c in cross) else pd.DataFrame()
    ranges: dict[str, tuple[Any, Any]] = {p: (min(v), max(v)) for p, v in spec.grid.items() if all(isinstance(x, (int, float)) for x in v)}
    ranges |= {p: d.quantiles(seed=seed) for p, d in spec.distributions.items()}
    torn = tornado(source, ranges, base_overrides=dict(spec.fixed), headroom=headroom) if ranges else pd.DataFrame()
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows.to_csv(out / "sweep.csv", index=False)
        rows.to_parquet(out / "sweep.parquet", index=False)
        cross_df.to_csv(out / "crossovers.csv", index=False)
        torn.to_csv(out / "tornado.csv", index=False)
    if as_json:
        echo_json({"rows": rows.to_dict("records"), "crossovers": cross_df.to_dict("records"), "tornado": torn.to_dict("records")})
        return
    win = rows[rows["is_winner"]] if len(rows) else rows
    shown = win[["scenario", "architecture", "total_usd_per_month", "usd_per_million_tokens", "device_mix", "margin_usd_per_month"]]
    click.echo(table(["scenario", "winner", "total $/month", "$/1M tokens", "devices", "margin $/month"], shown.values.tolist()))
    if len(cross_df):
        click.echo("\nverdict flips (bisection brackets):")
        for r in cross_df.to_dict("records"):
            click.echo(f"  {r['path']}: {r['winner_low']} at {r['low']:.4g} -> {r['winner_high']} at {r['high']:.4g}")
    elif paths:
        click.echo("\nno verdict flip inside the swept range")
    if len(torn):
        click.echo("\ntornado (cheapest plan's total, one parameter at a time):")
        click.echo(table(["path", "low", "high", "$ at low", "$ at high", "swing"],
                         torn[["path", "low", "high", "total_at_low_usd_per_month", "total_at_high_usd_per_month", "swing_usd_per_month"]].values.tolist()))


@click.command("budget")
@click.argument("instance", type=click.Path(dir_okay=False))
@click.option("--budgets", required=True, help="Comma list of monthly budgets, USD (e.g. 50000,100000,200000).")
@click.option("--set", "sets", multiple=True, help="Fixed PATH=VALUE overrides applied first.")
@click.option("--scenario", default=None, help="A named scenario of the instance to start from.")
@click.option("--rel-tol", type=float, default=0.01, show_default=True, help="Relative precision of the multiplier.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write budget.csv and budget.parquet.")
@click.option("--json", "as_json", is_flag=True)
def budget_cmd(instance: str, budgets: str, sets: tuple[str, ...], scenario: str | None, rel_tol: float, out_dir: str | None, as_json: bool) -> None:
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
    check_paths(resolved.raw, list(spec.fixed), file=str(resolved.path))
    check_values(resolved.raw, spec, file=str(resolved.path))
    if spec.fixed:
        resolved = resolved.with_overrides(spec.fixed)
    frame = budget_frontier(TableSource.from_instance(resolved), values, rel_tol=rel_tol)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "budget.csv", index=False)
        frame.to_parquet(out / "budget.parquet", index=False)
    if as_json:
        echo_json(frame.to_dict("records"))
        return
    click.echo(table(["budget $/month", "max traffic x", "cost $/month", "winner", "devices"],
                     frame[["budget_usd_per_month", "max_traffic_multiplier", "total_usd_per_month", "winner", "device_mix"]].values.tolist()))


COMMANDS = [sweep_cmd, budget_cmd]
