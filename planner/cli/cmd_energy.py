"""`planner calibrate-energy`, `planner validate-energy`: device power curves fitted and checked
on measured serving runs (ML.ENERGY CSV format; planner/perf/power.py for the model)."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli.output import echo_json, fixed, table, wrote
from planner.errors import InputError


def _power_calibration(path: str | None):  # noqa: ANN202 - lazy import keeps --help fast
    from planner.errors import InputError
    from planner.perf.power import load_power_calibration, power_file

    cal = load_power_calibration(path)
    if cal is None:
        raise InputError(f"{power_file()}: no power calibration (run `planner calibrate-energy MEASUREMENTS.csv` or pass --power)")
    return cal


@click.command("calibrate-energy")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Where to write (default: power.calibration.yaml in the current folder; use it with --power).")
@click.option("--into-catalog", is_flag=True,
              help="Replace the shipped models/calibration/power.yaml (the file the planner reads by default).")
@click.option("--json", "as_json", is_flag=True)
def calibrate_energy(measurements: str, output: str | None, into_catalog: bool, as_json: bool) -> None:
    """Fit per-stack steady-state throughput and per-device power curves on measured serving runs
    (ML.ENERGY CSV: models/measured/measured_energy.csv); deterministic. Kept apart from
    `planner calibrate` (the latency fit) so either can be refitted alone."""
    from planner.perf.power import power_file

    if output and into_catalog:
        raise InputError("give either -o FILE or --into-catalog, not both")
    fit_and_write_power(measurements, power_file() if into_catalog else Path(output) if output else Path("power.calibration.yaml"), as_json)


def is_energy_file(path: str) -> bool:
    """True for a measured-energy CSV (the ML.ENERGY format of models/measured/measured_energy.csv): its header
    carries J per output token and GPU power. ``planner calibrate`` hands such files to the power fit."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            head = fh.readline()
    except OSError:
        return False
    return "energy_j_per_output_token" in head and "avg_power_w_per_gpu" in head


def _skips_text(reasons: list[str]) -> str:
    """The skipped rows counted by reason, ``N rows: reason; ...`` (as validate-energy prints them)."""
    from planner.perf.energy_check import count_reasons

    return "; ".join(f"{n} row{'s' if n != 1 else ''}: {why}" for why, n in count_reasons(reasons).items()) or "none"


def refuse_curveless_fit(measurements: str, curves: int, fitted: int, skip_reasons: list[str], warnings: list[str]) -> None:
    """Rule: a power fit that yields no curve writes nothing and exits 2 (an empty calibration predicts
    nothing, and with --into-catalog it would replace the shipped curves): no predictable run names the
    skip reasons; predictable runs too few for a curve (fewer than MIN_ROWS_PER_DEVICE on every
    (device, stack)) say so. A fit with some curve is written; a (device, stack) too small for its own
    curve and a throughput fit on fewer runs than its parameters are warnings."""
    from planner.errors import Problem

    if curves:
        return
    if not fitted:
        raise InputError(Problem(measurements, "", f"no predictable run, nothing written (skipped: {_skips_text(skip_reasons)})",
                                 "give steady-state serving runs of catalog GPUs and models (models/measured/SOURCE_energy.md)"))
    from planner.perf.power_fit import MIN_ROWS_PER_DEVICE

    few = "; ".join(w for w in warnings if "fewer than the" in w) or "no run is feasible on its GPUs"
    raise InputError(Problem(measurements, "", f"{fitted} predictable run{'s' if fitted != 1 else ''}, too few for a power curve "
                             f"(a (device, stack) needs {MIN_ROWS_PER_DEVICE}): {few}; nothing written "
                             f"(skipped: {_skips_text(skip_reasons)})",
                             f"give at least {MIN_ROWS_PER_DEVICE} steady-state runs of one GPU and serving stack"))


def fit_and_write_power(measurements: str, out: Path, as_json: bool) -> None:
    """Fit the power curves (and per-stack throughput) on ``measurements`` and write them to ``out``;
    the fit's warnings and notes (:class:`planner.perf.power_fit.PowerFitReport`) go to stderr (and
    into the JSON); a fit without a curve is refused (:func:`refuse_curveless_fit`)."""
    from planner.catalog import load_catalog
    from planner.perf.energy_runs import read_energy_runs
    from planner.perf.power import save_power_calibration
    from planner.perf.power_fit import fit_power_report

    rows = read_energy_runs(measurements)
    cal, report = fit_power_report(rows, load_catalog(), data_file=measurements)
    refuse_curveless_fit(measurements, len(cal.curves), report.fitted, report.skip_reasons, report.warnings)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_power_calibration(cal, out)
    if as_json:
        echo_json({"file": str(out), **cal.model_dump(mode="json"), "warnings": report.warnings, "notes": report.notes})
        return
    for w in report.warnings:
        click.echo(f"warning: {w}", err=True)
    for n in report.notes:
        click.echo(f"note: {n}", err=True)
    wrote(f"wrote {out} ({cal.description})")
    click.echo(table(["device", "stack", "runs", "f_idle", "f_max", "w_c", "w_b", "w_rows", "gamma", "MAPE_power_%", "MAPE_J/tok_%", "MAPE_tok/s_%"],
                     [[d, cal.curve_stacks.get(d, ""), cal.rows_used.get(d, 0), c.idle_frac, c.max_frac, c.w_compute, c.w_bandwidth, c.w_rows, c.gamma,
                       cal.residuals[d]["power_mape_pct"], cal.residuals[d]["j_per_output_token_mape_pct"], cal.residuals[d]["throughput_mape_pct"]]
                      for d, c in cal.curves.items()]))


@click.command("validate-energy")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--power", "power_path", type=click.Path(dir_okay=False), default=None,
              help="Power calibration file (default models/calibration/power.yaml).")
@click.option("--expert-parallel-as-tp", is_flag=True,
              help="Predict expert-parallel runs as TP over all GPUs (default: as expert-parallel replicas, planner/perf/moe.py).")
@click.option("--json", "as_json", is_flag=True, help='{"rows": [...], "summary": {...}}, one row per input row.')
def validate_energy(measurements: str, power_path: str | None, expert_parallel_as_tp: bool, as_json: bool) -> None:
    """Predict each run's output tokens/s, power and J per output token from its configuration
    (GPU, GPU count, model, precision, batch cap, task lengths); print MAPE per (GPU, model family)."""
    from planner.catalog import load_catalog
    from planner.perf.energy_check import validate_energy as run
    from planner.perf.energy_runs import read_energy_runs

    rows = read_energy_runs(measurements)
    result = run(rows, load_catalog(), _power_calibration(power_path), expert_parallel_as_tp=expert_parallel_as_tp)
    if as_json:
        echo_json(result)
        return
    s = result["summary"]
    click.echo(f"{s['rows']} rows, {s['predicted']} predicted, {s['skipped']} skipped")
    click.echo(table(["gpu", "stack", "model family", "runs", "MAPE_J/tok_%", "MAPE_tok/s_%", "MAPE_power_%"],
                     [[g["gpu"], g["stack"], g["model_family"], g["runs"], g["mape_j_per_output_token_pct"], g["mape_output_tokens_per_s_pct"], g["mape_power_pct"]]
                      for g in s["by_gpu_family"]], formats={4: fixed, 5: fixed, 6: fixed}))  # percentages to 0.1 point, alike
    p = s["pooled"]
    click.echo(f"pooled: MAPE J per output token {fixed(p['mape_j_per_output_token_pct'])} %, output tokens/s "
               f"{fixed(p['mape_output_tokens_per_s_pct'])} %, power {fixed(p['mape_power_pct'])} % over {p['runs']} runs (in sample "
               "when the calibration was fitted on this file; benchmarks/bench_energy.py gives out-of-sample figures)")
    d = s["derived_input"]
    if d["runs"]:
        click.echo(f"of which derived input size (multimodal runs, prompt tokens derived from what the benchmark sent; never fitted on): "
                   f"{d['runs']} runs, MAPE J per output token {fixed(d['mape_j_per_output_token_pct'])} %, output tokens/s "
                   f"{fixed(d['mape_output_tokens_per_s_pct'])} %, power {fixed(d['mape_power_pct'])} %")
    for kind, count in s["approximated_by_kind"].items():
        click.echo(f"approximated ({count} rows): {kind} (row field 'approximation' in --json)")
    for what, count in s["inconsistent"].items():
        click.echo(f"inconsistent, predicted but not fitted on ({count} rows): {what} (row field 'inconsistency' in --json)")
    for reason, count in s["skipped_by_reason"].items():
        click.echo(f"skipped ({count} rows): {reason}")


COMMANDS = [calibrate_energy, validate_energy]
