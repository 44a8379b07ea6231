"""`planner horizon`: plan an instance over time (periods x daily slots, growth, buy / reserve / rent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from planner.cli.output import echo_json, note, wrote
from planner.errors import Diagnosis, InfeasibleError, InputError, Problem, SolverError


@click.command("horizon")
@click.argument("instance", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the plan over time as JSON (schedule, pools, costs, slots).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write horizon.json and schedule/pools/costs/slots as CSV and Parquet here.")
@click.option("--architectures", help="Comma-separated: shared,disaggregated,hybrid (default: options.architectures).")
@click.option("--time-limit", type=float, help="Solver time limit per solve, seconds (default: options.solver).")
@click.option("--mip-gap", type=float, help="Relative MIP gap (default: options.solver, at least 1e-3 over a horizon).")
@click.option("--set", "sets", multiple=True, help="Override a field: PATH=VALUE (repeatable), e.g. horizon.growth.monthly_rate=0.08.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), help="Also write a self-contained HTML report (devices by source over time with demand, cost per period).")
@click.option("--no-baseline", is_flag=True, help="Skip the owned-peak baseline (one solve fewer per architecture).")
@click.option("--regret-growth", "--growth", "regret_growth", help="Comma-separated monthly growth rates: hold the winner's (or "
              "--evaluate's) purchases and reservations, re-plan rentals under each rate, and print the regret against re-planning "
              "with that rate known.")
@click.option("--evaluate", "evaluate_file", type=click.Path(dir_okay=False, exists=True), help="A horizon.json (from --out, or "
              "--json output): hold its schedule's purchases and reservations under this instance and each --growth rate "
              "(default: the instance's own growth) and print the regret, instead of planning.")
@click.option("--evaluate-architecture", help="Which plan of the --evaluate file to hold (default: its winner).")
@click.option("--sweep", "sweeps", multiple=True, help="PATH=V1,V2,... (repeatable; several make a grid): plan the horizon for "
              "every value, e.g. --sweep horizon.growth.monthly_rate=0.02,0.05,0.08, and print each plan's present value.")
@click.option("--per-slot-architecture", help="Two architectures, e.g. shared,disaggregated: also plan one of them per slot "
              "(a binary per slot; switching pays the weight reload; needs horizon.weight_load). Sets horizon.per_slot_architecture.")
@click.option("--monte-carlo", "draws", type=int, default=0, help="With --growth-dist: draws of the monthly growth rate; "
              "each holds the winner's purchases and reservations and reports cost and regret (mean, p10, p90).")
@click.option("--growth-dist", help="Distribution of the monthly growth rate for --monte-carlo, e.g. 'normal(0.05,0.02)' "
              "(grammar of `planner sweep --help`).")
@click.option("--seed", type=click.IntRange(min=0), default=0, help="Seed of the --monte-carlo draws (a non-negative integer).")
@click.option("--verify/--no-verify", default=False, show_default=True, help="Simulate the busiest slots of each plan "
              "(--verify-slots of them): per slot and service TTFT and the targeted per-token metric (TPOT or ITL) analytic vs "
              "simulated, met or missed by each (planner.horizon.verify; "
              "3-6 s per slot and plan on the example, so off by default).")
@click.option("--verify-slots", type=int, default=3, show_default=True, help="How many of the busiest (period, slot) levels --verify simulates.")
@click.option("--budget-per-year", type=float, help="Largest monthly growth whose plan (the winner's architecture) costs at "
              "most this much in every year of the horizon, USD (bisection on the rate).")
def horizon(instance: str, as_json: bool, out_dir: str | None, architectures: str | None, time_limit: float | None,
            mip_gap: float | None, sets: tuple[str, ...], html_file: str | None, no_baseline: bool, regret_growth: str | None,
            draws: int, growth_dist: str | None, seed: int, budget_per_year: float | None, evaluate_file: str | None,
            evaluate_architecture: str | None, sweeps: tuple[str, ...], per_slot_architecture: str | None, verify: bool = False,
            verify_slots: int = 3) -> None:
    """Plan INSTANCE over its `horizon`: what to buy and when, what to reserve, what to rent per hour of the day.

    Demand per slot is the busiest window inside that hour of the day over the log (ServeGen fleet
    windows or a window_start_s,rate_rps CSV), grown per period; every slot's pools meet the same
    latency caps as `planner solve`. Exit 3 if no architecture has a plan.
    """
    from planner.horizon.inputs import horizon_inputs, horizon_tables
    from planner.horizon.report import summary_lines, to_document, write_outputs
    from planner.horizon.solve import solve_horizon
    from planner.instance import load_instance

    archs, rates, _dist, drawn = _checked_options(architectures, time_limit, mip_gap, regret_growth, draws, growth_dist, seed,
                                                  verify_slots, budget_per_year)
    from planner.overrides import parse_set_options

    overrides = parse_set_options(sets, example="horizon.growth.monthly_rate=0.08")  # as `planner solve --set`
    if per_slot_architecture:
        pair = [a.strip() for a in per_slot_architecture.split(",") if a.strip()]
        if len(pair) != 2 or len(set(pair)) != 2 or any(a not in ("shared", "disaggregated", "hybrid") for a in pair):
            raise InputError(Problem("", "--per-slot-architecture", f"{per_slot_architecture!r} is not two different architectures",
                                     "e.g. --per-slot-architecture shared,disaggregated"))
        overrides["horizon.per_slot_architecture"] = pair
    resolved = load_instance(instance, overrides or None)
    if overrides:
        from planner.instance import instance_mapping
        from planner.overrides import multipliers_replaced

        for line in multipliers_replaced(instance_mapping(instance), {k: [v] for k, v in overrides.items()}):
            note(f"note: {line}")
    inst = resolved.instance
    if any(s.tools or s.tools_from_trace for s in inst.services.values()) or inst.catalog.cpu_servers:
        raise InputError(Problem(instance, "services", "plans over time do not cover the tool execution phase yet",
                                 "plan agentic services with `planner solve`, or drop tools / cpu_servers"))
    inputs = horizon_inputs(resolved)
    tables = horizon_tables(resolved, inputs)
    solver = inst.options.solver
    plans = plan_names(inst, archs)
    gap_default = mip_gap if mip_gap is not None else max(solver.mip_gap, 1e-3)
    if sweeps:
        _sweep(resolved, sweeps, plans, time_limit or solver.time_limit_s, gap_default, not no_baseline, as_json)
        return
    if evaluate_file:
        _evaluate(evaluate_file, evaluate_architecture, tables, inputs, inst, rates, time_limit or solver.time_limit_s, gap_default, as_json)
        return
    result = solve_horizon(tables, inputs, plans,
                           time_limit_s=time_limit or solver.time_limit_s, mip_gap=mip_gap if mip_gap is not None else max(solver.mip_gap, 1e-3),
                           baseline=not no_baseline, verify_slots=verify_slots if verify else 0)
    regrets, mc, budget = _held_schedule_studies(result, tables, inputs, inst, rates, drawn, budget_per_year,
                                                 time_limit or solver.time_limit_s, gap_default)
    if out_dir:
        written = write_outputs(result, Path(out_dir), inst.name)
    if html_file and result.winner is not None:
        from planner.report.horizon_html import write_horizon_html

        write_horizon_html(html_file, result, inst.name, "req/s", float(tables.demand["rate_peak_per_s"].sum()))
    if as_json:
        doc = to_document(result, inst.name)
        doc["regret"] = _regret_records(regrets)
        if mc is not None:
            doc["monte_carlo"] = {"growth_dist": growth_dist, "seed": seed, "draws": mc.to_dict("records")}
        if budget is not None:
            doc["budget"] = {"usd_per_year": budget_per_year, "largest_monthly_growth": budget[0], "costliest_year_usd": budget[1],
                             "probes": [{"monthly_rate": r, "costliest_year_usd": c} for r, c in budget[2]]}
        echo_json(doc)
    else:
        click.echo("\n".join(summary_lines(result, inst.name)))
        _echo_studies(result, regrets, mc, growth_dist, seed, budget, budget_per_year)
        if out_dir:
            wrote(f"\nwrote {written[0]} and schedule / pools / costs / slots (.csv, .parquet)")
        if html_file and result.winner is not None:
            wrote(f"wrote {html_file}")
    if result.winner is None:
        raise _no_plan_error(result, inputs, inst.name)


def _checked_options(architectures: str | None, time_limit: float | None, mip_gap: float | None, regret_growth: str | None,
                     draws: int, growth_dist: str | None, seed: int, verify_slots: int, budget_per_year: float | None
                     ) -> tuple[tuple[str, ...] | None, list[float], Any, Any]:
    """The options checked before anything is read or solved: the architectures asked for, the
    --regret-growth rates, the --growth-dist distribution and its --monte-carlo draws (drawn here, so a
    distribution the schema cannot take fails in a second, not after the solve)."""
    archs = None
    if architectures:
        archs = tuple(a.strip() for a in architectures.split(",") if a.strip())
        bad = [a for a in archs if a not in ("shared", "disaggregated", "hybrid")]
        if bad or not archs:
            raise InputError(Problem("", "--architectures", f"unknown architecture(s): {', '.join(bad) or '(none)'}", "use shared, disaggregated, hybrid"))
    if time_limit is not None and not time_limit > 0:
        raise InputError(Problem("", "--time-limit", "must be > 0", "give seconds, e.g. --time-limit 60"))
    if mip_gap is not None and not mip_gap >= 0:
        raise InputError(Problem("", "--mip-gap", "must be >= 0", "e.g. --mip-gap 0.001"))
    rates: list[float] = []
    if regret_growth:
        try:
            rates = [float(v) for v in regret_growth.split(",") if v.strip()]
        except ValueError:
            raise InputError(Problem("", "--regret-growth", f"{regret_growth!r} is not a list of numbers", "e.g. --regret-growth 0.02,0.08")) from None
        if not rates or any(not -0.5 < r <= 1.0 for r in rates):
            raise InputError(Problem("", "--regret-growth", "monthly rates must lie in (-0.5, 1]", "e.g. --regret-growth 0.02,0.08"))
    dist: Any = None
    drawn: Any = None
    if draws < 0:
        raise InputError(Problem("", "--monte-carlo", "must be >= 0", "e.g. --monte-carlo 20"))
    if (draws > 0) != (growth_dist is not None):
        raise InputError(Problem("", "--monte-carlo" if growth_dist else "--growth-dist", "--monte-carlo N and --growth-dist go together",
                                 "e.g. --monte-carlo 20 --growth-dist 'normal(0.05,0.02)'"))
    if growth_dist is not None:
        from planner.schema.distributions import parse_distribution
        from planner.schema.horizon import GROWTH_RATE_RANGE

        try:
            dist = parse_distribution(growth_dist)
        except ValueError as exc:
            raise InputError(Problem("", "--growth-dist", str(exc), "e.g. 'normal(0.05,0.02)'")) from None
        import numpy as np

        drawn = np.asarray(dist.sample(np.random.default_rng(seed), draws), dtype=float)
        outside = drawn[~((drawn > GROWTH_RATE_RANGE[0]) & (drawn <= GROWTH_RATE_RANGE[1]))]
        if outside.size:
            raise InputError(Problem("", "--growth-dist", f"{outside.size} of {draws} draws (seed {seed}) fall outside the monthly growth "
                                     f"range ({GROWTH_RATE_RANGE[0]:g}, {GROWTH_RATE_RANGE[1]:g}], e.g. {float(outside[0]):.4g}",
                                     "give a distribution inside that range, e.g. 'normal(0.05,0.02)' or 'uniform(0,0.1)'"))
    if verify_slots < 1:
        raise InputError(Problem("", "--verify-slots", "must be >= 1", "e.g. --verify-slots 3, or --no-verify"))
    if budget_per_year is not None and not budget_per_year > 0:
        raise InputError(Problem("", "--budget-per-year", "must be > 0", "give USD per year, e.g. --budget-per-year 5e6"))
    return archs, rates, dist, drawn


def _held_schedule_studies(result: Any, tables: Any, inputs: Any, inst: Any, rates: list[float], drawn: Any,
                          budget_per_year: float | None, time_limit_s: float, gap: float) -> tuple[list[Any], Any, Any]:
    """What the winner's held purchases and reservations cost under other growth: the regret per
    --regret-growth rate, the --monte-carlo draws (``drawn``), the largest growth within --budget-per-year."""
    regrets: list[Any] = []
    if rates and result.winner is not None:
        from planner.horizon.demand import growth_multipliers
        from planner.horizon.evaluate import growth_regret
        from planner.schema.horizon import Growth

        hz = inst.horizon
        assert hz is not None
        paths = {f"{100 * r:g} %/month": growth_multipliers(Growth(monthly_rate=r), hz.periods, hz.months_per_period) for r in rates}
        regrets = growth_regret(tables, inputs, result.winner, result.architectures[result.winner].schedule, paths,
                                time_limit_s=time_limit_s, mip_gap=gap)
    mc = None
    if drawn is not None and result.winner is not None:
        from planner.horizon.evaluate import growth_monte_carlo

        mc = growth_monte_carlo(tables, inputs, result.winner, result.architectures[result.winner].schedule, drawn,
                                time_limit_s=time_limit_s, mip_gap=gap)
    budget = None
    if budget_per_year is not None and result.winner is not None:
        from planner.horizon.evaluate import largest_growth_within_budget

        budget = largest_growth_within_budget(tables, inputs, result.winner, budget_per_year,
                                              time_limit_s=time_limit_s, mip_gap=gap)
    return regrets, mc, budget


def _echo_studies(result: Any, regrets: list[Any], mc: Any, growth_dist: str | None, seed: int, budget: Any,
                  budget_per_year: float | None) -> None:
    """The regret, Monte Carlo and budget tables under the plan's summary (text output)."""
    if regrets:
        click.echo("\n" + "\n".join(_regret_table(f"regret of the {result.winner} schedule (purchases and reservations held, "
                                                    "rentals re-planned):", regrets)))
    if mc is not None:
        from planner.cli.output import fmt, table

        ok = mc.dropna(subset=["held_usd", "replanned_usd"])
        click.echo(f"\nMonte Carlo over monthly growth ~ {growth_dist} ({len(mc)} draws, seed {seed}; {len(mc) - len(ok)} without a plan): "
                   f"the {result.winner} schedule held, rentals re-planned")
        q = ok[["monthly_rate", "held_usd", "replanned_usd", "regret_usd"]].quantile([0.1, 0.5, 0.9])
        rows = [["mean", *[fmt(v) for v in ok[["monthly_rate", "held_usd", "replanned_usd", "regret_usd"]].mean().round(4)]]]
        rows += [[f"p{int(100 * i)}", *[fmt(v) for v in q.loc[i].round(4)]] for i in q.index]
        click.echo(table(["", "monthly rate", "held USD", "re-planned USD", "regret USD"], rows))
    if budget is not None:
        rate, worst, probes = budget
        if rate is None:
            click.echo(f"\nbudget ${budget_per_year:,.0f}/year: not even {probes[0][0]:+.1%}/month fits (costliest year "
                       f"{'no plan' if probes[0][1] is None else f'${probes[0][1]:,.0f}'})")
        else:
            click.echo(f"\nbudget ${budget_per_year:,.0f}/year: growth up to {rate:+.2%}/month fits ({result.winner}; costliest year "
                       f"${(worst or 0):,.0f}; bisection over {len(probes)} plans)")


def _no_plan_error(result: Any, inputs: Any, inst_name: str) -> Exception:
    """Why no architecture has a plan: the solver's time limit (``SolverError``), or per architecture the
    busiest slot's demand against the ways devices can be had (``InfeasibleError``)."""
    if any("time" in a.status.lower() for a in result.architectures.values()):
        return SolverError("the solver stopped without a plan for any architecture over the horizon (raise --time-limit)")
    caps = []
    for dev, a in inputs.acquisition.items():
        ways = [w for w, v in (("buy", a.buy_usd_per_device_hour), ("reserve", a.reserve_usd_per_hour),
                               ("on demand", a.on_demand_usd_per_hour), ("spot", a.spot_usd_per_hour)) if v is not None]
        lim = [f"procurement limit {a.procurement_limit:g}"] if a.procurement_limit != float("inf") else []
        lim += [f"on demand at most {a.on_demand_max}"] if a.on_demand_max is not None else []
        caps.append(f"{dev} ({', '.join(ways)}{'; ' + ', '.join(lim) if lim else ''})")
    busiest = float(max(inputs.growth)) * float(inputs.slots["peak_rate_per_s"].max())
    diags = [Diagnosis("", "", f"horizon[{arch}]",
                       f"no plan: {a.status}; the busiest slot asks {busiest:.4g}{' req/s' if inputs.absolute else 'x the planned peak'}, "
                       f"devices can be had as {'; '.join(caps)}",
                       "raise the caps (on_demand.max_devices, procurement limits), add a way to get capacity, shorten lead times, or lower growth")
             for arch, a in result.architectures.items()]
    return InfeasibleError(diags, headline=f"no architecture of {inst_name} has a plan over the horizon")


def plan_names(inst: Any, archs: tuple[str, ...] | None) -> tuple[str, ...]:
    """The plans to make: the architectures asked for, and the per-slot plan when the instance has one."""
    from planner.horizon.solve import switching_name

    names = tuple(archs or inst.options.architectures)
    hz = inst.horizon
    if hz is not None and hz.per_slot_architecture is not None:
        names += (switching_name(tuple(hz.per_slot_architecture)),)
    return names


def _regret_table(label: str, regrets: list[Any]) -> list[str]:
    from planner.cli.output import fmt, table

    out = [label, table(["growth", "held USD", "held gap", "re-planned USD", "re-plan gap", "regret USD"],
                        [[g.label, fmt(None if g.held_usd is None else round(g.held_usd)),
                          "-" if g.held_gap is None else f"{g.held_gap:.1%}",
                          fmt(None if g.replanned_usd is None else round(g.replanned_usd)),
                          "-" if g.replanned_gap is None else f"{g.replanned_gap:.1%}",
                          fmt(None if g.regret_usd is None else round(g.regret_usd)) if g.held_usd is not None else f"- ({g.status})"] for g in regrets])]
    if any(g.regret_usd is not None and g.regret_usd < 0 for g in regrets):
        out.append("  a negative regret: the re-planned (heuristic, fleet-scale) solve found a costlier plan than holding the "
                   "schedule; its gap says how far from the bound it stopped")
    return out


def _regret_records(regrets: list[Any]) -> list[dict[str, Any]]:
    return [{"growth": g.label, "held_usd": g.held_usd, "held_gap": g.held_gap, "replanned_usd": g.replanned_usd, "replanned_gap": g.replanned_gap,
             "regret_usd": g.regret_usd, "status": g.status} for g in regrets]


def _evaluate(path: str, architecture: str | None, tables: Any, inputs: Any, inst: Any, rates: list[float], time_limit_s: float,
              mip_gap: float, as_json: bool) -> None:
    """Hold a saved schedule's purchases and reservations under the instance and each growth rate (module docstring of
    :mod:`planner.horizon.evaluate`)."""
    import json

    import pandas as pd

    from planner.horizon.demand import growth_multipliers
    from planner.horizon.evaluate import growth_regret
    from planner.schema.horizon import Growth

    try:
        doc = json.loads(Path(path).read_text())
        plans = doc["architectures"]
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(Problem(path, "architectures", "not a plan over time (horizon.json)",
                                 "give the horizon.json written by `planner horizon --out DIR` (or its --json output)")) from None
    arch = architecture or doc.get("winner")
    if arch not in plans or not plans[arch].get("schedule"):
        raise InputError(Problem(path, f"architectures.{arch}", "no schedule to hold",
                                 f"pick one with --evaluate-architecture: {', '.join(k for k, v in plans.items() if v.get('schedule'))}"))
    schedule = pd.DataFrame(plans[arch]["schedule"])
    if int(schedule["period"].max()) + 1 != len(inputs.growth):
        raise InputError(Problem(path, "periods", f"the schedule has {int(schedule['period'].max()) + 1} periods, the instance "
                                 f"{len(inputs.growth)}", "evaluate with the instance the schedule was planned for"))
    missing = sorted(set(schedule["device"]) - set(inputs.acquisition))
    if missing:
        raise InputError(Problem(path, "schedule.device", f"devices {', '.join(missing)} are not candidates of the instance",
                                 "evaluate with the instance the schedule was planned for"))
    hz = inst.horizon
    paths = ({f"{100 * r:g} %/month": growth_multipliers(Growth(monthly_rate=r), hz.periods, hz.months_per_period) for r in rates}
             if rates else {"the instance's growth": inputs.growth})
    regrets = growth_regret(tables, inputs, arch, schedule, paths, time_limit_s=time_limit_s, mip_gap=mip_gap)
    if as_json:
        echo_json({"schema_version": 1, "instance": inst.name, "evaluated": path, "architecture": arch, "regret": _regret_records(regrets)})
        return
    click.echo("\n".join(_regret_table(f"{path}: the {arch} schedule held (purchases and reservations), rentals and pools re-planned:",
                                        regrets)))


def _sweep(resolved: Any, sweeps: tuple[str, ...], plans: tuple[str, ...], time_limit_s: float, mip_gap: float, baseline: bool,
           as_json: bool) -> None:
    """Plan the horizon at every point of a grid of instance fields; one row per point and plan."""
    import itertools

    from planner.cli.output import fmt, table
    from planner.horizon.inputs import horizon_inputs, horizon_tables
    from planner.horizon.report import saving, saving_cell
    from planner.horizon.solve import solve_horizon
    from planner.overrides import parse_value

    axes: dict[str, list[Any]] = {}
    for item in sweeps:
        if "=" not in item:
            raise InputError(Problem("", "--sweep", f"{item!r} is not PATH=V1,V2,...", "e.g. --sweep horizon.growth.monthly_rate=0.02,0.05"))
        key, vals = item.split("=", 1)
        axes[key.strip()] = [parse_value(v.strip()) for v in vals.split(",") if v.strip()]
        if not axes[key.strip()]:
            raise InputError(Problem("", "--sweep", f"no values for {key.strip()}", "e.g. --sweep horizon.growth.monthly_rate=0.02,0.05"))
    rows = []
    for point in itertools.product(*axes.values()):
        over = dict(zip(axes, point, strict=True))
        r = resolved.with_overrides(over)
        r_inputs = horizon_inputs(r)
        res = solve_horizon(horizon_tables(r, r_inputs), r_inputs, plans, time_limit_s=time_limit_s, mip_gap=mip_gap, baseline=baseline)
        for name, a in res.architectures.items():
            sv = saving(a)
            rows.append({**over, "architecture": name, "feasible": a.feasible, "total_usd_present_value": a.total_usd, "gap": a.gap,
                         "baseline_owned_peak_usd": a.baseline_usd, "saving_share": sv[1] if sv else None, "winner": name == res.winner})
    if as_json:
        echo_json({"schema_version": 1, "instance": resolved.instance.name, "sweep": rows})
        return
    click.echo(f"plans over time for {resolved.instance.name} at {len(rows) // max(1, len(plans))} point(s) of {', '.join(axes)}:")
    click.echo(table([*axes, "architecture", "present value USD", "gap", "saving vs owned peak (no lead time)", "winner"],
                     [[*(r[k] for k in axes), r["architecture"], fmt(None if r["total_usd_present_value"] is None else round(r["total_usd_present_value"])),
                       "-" if r["gap"] is None else f"{r['gap']:.1%}", saving_cell(r["saving_share"]),
                       "yes" if r["winner"] else ""] for r in rows]))


def refuse_horizon(resolved: Any, command: str, use: str) -> None:
    """`planner sweep / budget / evaluate` on an instance with a horizon: one clear error pointing at `planner horizon`."""
    if getattr(resolved.instance, "horizon", None) is not None:
        raise InputError(Problem(str(resolved.path), "horizon", f"this instance plans over time; `planner {command}` studies a single-peak plan",
                                 f"use `planner horizon {resolved.path} {use}`"))



COMMANDS = [horizon]
