"""`planner validate-goodput`: MLPerf Server / Interactive / Offline throughput predicted through the
path of `planner solve` (planner/goodput.py for the method)."""

from __future__ import annotations

import click

from planner.cli.cmd_simulate import FiniteFloatRange
from planner.cli.output import echo_json, table


@click.command("validate-goodput")
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--rel-tol", type=FiniteFloatRange(0.001, 0.5), default=0.02, show_default=True,
              help="Bisection stops when the passing and failing rates are within this relative distance.")
@click.option("--rows", "show_rows", is_flag=True, help="Also print every predicted row.")
@click.option("--json", "as_json", is_flag=True, help='{"rows": [...], "not_predicted": [...], "by_device_scenario": [...], "pooled": {...}}')
def validate_goodput_cmd(results: str, rel_tol: float, show_rows: bool, as_json: bool) -> None:
    """Predict each MLPerf row's throughput under its scenario's rules (Offline: none; Server and
    Interactive: p99 TTFT and p99 per-request TPOT, Poisson arrivals) as the largest rate `planner solve`
    plans within the system's devices, and compare with the measured tokens/s
    (models/measured/mlperf_public_v4.0-v5.0.csv; rounds after v5.0 are held out, rows outside the closed division,
    available systems or valid results are listed, not scored; a file with no scored row is an error, exit 2).

    Progress goes to stderr, never to stdout or the JSON: on a terminal, the row being predicted (row k of the
    file's N, its round, system, benchmark and scenario) and its running step; with -v, each predicted row and its
    time, also when stderr is not a terminal; nothing with -q. Rows that share a case (same device, count,
    limits and lengths) share its solve."""
    from planner.catalog import load_catalog
    from planner.goodput import error_summary, require_scored_rows, validate_goodput
    from planner.mlperf import read_mlperf

    rows = read_mlperf(results)
    require_scored_rows(rows, results)
    pred, skipped = validate_goodput(rows, load_catalog(), rel_tol=rel_tol)
    by, pooled = error_summary(pred)
    if as_json:
        echo_json({"rows": pred.to_dict("records"), "not_predicted": skipped.to_dict("records"),
                   "by_device_scenario": by.to_dict("records"), "pooled": pooled})
        return
    if show_rows and not pred.empty:
        click.echo(table(["line", "round", "submitter", "device", "n", "benchmark", "scenario", "engine", "measured tok/s", "predicted tok/s",
                          "error %", "at 100 % busy tok/s", "TP over PCIe", "plan"],
                         [[r.line, r.round, r.submitter, r.device, r.n_accel, r.benchmark, r.scenario, r.engine, r.measured_tokens_per_s,
                           r.predicted_tokens_per_s, r.error_pct, r.busy_bound_tokens_per_s, "yes" if r.tp_over_pcie else "", r.plan]
                          for r in pred.itertuples()]))
        click.echo("")
    if pred.empty:
        click.echo("no row predicted: no error to report (the reasons are below)")
    else:
        click.echo(table(["device", "scenario", "rows", "mean error %", "mean |error| %", "at 100 % busy, mean error %"],
                         [[r.device, r.scenario, r.rows, r.mean_error_pct, r.mean_abs_error_pct, r.busy_bound_error_pct] for r in by.itertuples()]))
        scen = ", ".join(f"{k.removesuffix('_mean_abs_error_pct')} {v:.1f} %" for k, v in pooled.items()
                         if k.endswith("_mean_abs_error_pct") and k != "mean_abs_error_pct")
        click.echo(f"\npooled mean |error| {pooled['mean_abs_error_pct']:.1f} % over {pooled['rows']} rows ({scen})")
    if not skipped.empty:
        click.echo(f"\nnot predicted: {len(skipped)} rows")
        for reason, n in skipped.groupby("reason").size().sort_values(ascending=False).items():
            click.echo(f"  {n:4d}  {reason}")


COMMANDS = [validate_goodput_cmd]
