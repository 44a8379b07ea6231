"""`planner estimate`, `planner calibrate`, `planner validate-perf`, `planner convert-measurements`."""

from __future__ import annotations

from typing import Any

import click

from planner.cli.output import echo_json, fmt, table

_FORMAT = click.Choice(["planner", "silicon"])
_FORMAT_HELP = "Input format: our measurements CSV (planner/perf/measurements.py) or aiconfigurator's silicon_*.csv."


def _read(path: str, fmt_name: str) -> list[dict[str, Any]]:
    from planner.catalog import load_catalog
    from planner.perf.measurements import convert_silicon, read_measurements

    if fmt_name == "silicon":
        cat = load_catalog()
        return convert_silicon(path, {m.hf_id: m.id for m in cat.models.values()})
    return read_measurements(path)


def _calibration(name: str | None) -> Any:
    from planner.perf.calibration import load_calibration

    if name == "none":
        return None
    return load_calibration(name)


@click.command("estimate")
@click.option("--model", "model_id", required=True, help="Model id (planner catalog models).")
@click.option("--device", "device_id", required=True, help="Device id (planner catalog devices).")
@click.option("--tp", type=click.IntRange(min=1), required=True, help="Tensor-parallel degree of one replica.")
@click.option("--precision", default="bf16", show_default=True, type=click.Choice(["bf16", "fp8", "fp4", "int8"]), help="Weight/activation precision.")
@click.option("--kv-precision", default="bf16", show_default=True, type=click.Choice(["bf16", "fp8", "fp4", "int8"]))
@click.option("--isl", type=click.IntRange(min=1), required=True, help="Input tokens per request.")
@click.option("--osl", type=click.IntRange(min=1), required=True, help="Output tokens per request.")
@click.option("--concurrency", type=click.IntRange(min=1), required=True, help="Users in the closed loop.")
@click.option("--engine", default="default", show_default=True, help="Engine calibration: trtllm, vllm, sglang or default.")
@click.option("--ttft-ms", type=float, default=None, help="Optional TTFT target: fail (exit 2) if unreachable.")
@click.option("--tpot-ms", type=float, default=None, help="Optional TPOT target: fail (exit 2) if even batch 1 misses it.")
@click.option("--calibration", "cal_name", default=None, help="Calibration name or file ('none' = published defaults).")
@click.option("--json", "as_json", is_flag=True)
def estimate(model_id: str, device_id: str, tp: int, precision: str, kv_precision: str, isl: int, osl: int, concurrency: int,
             engine: str, ttft_ms: float | None, tpot_ms: float | None, cal_name: str | None, as_json: bool) -> None:
    """Predict TTFT, TPOT and throughput of a closed-loop benchmark at fixed concurrency."""
    from planner.catalog import load_catalog
    from planner.perf.estimate import estimate_closed_loop

    cat = load_catalog()
    result = estimate_closed_loop(cat.model(model_id), cat.device(device_id), tp, precision=precision, kv_precision=kv_precision,
                                  isl=isl, osl=osl, concurrency=concurrency, engine=engine, calibration=_calibration(cal_name),
                                  ttft_target_ms=ttft_ms, tpot_target_ms=tpot_ms)
    if as_json:
        echo_json(result)
        return
    rows = [[k, result[k]] for k in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_device", "memory_used_gb_per_device",
                                      "memory_free_gb_per_device", "max_batch", "running_batch", "bound")]
    click.echo(f"{model_id} on {tp} x {device_id} ({precision}, KV {kv_precision}), ISL {isl}, OSL {osl}, {concurrency} users, source {result['source']}")
    click.echo(table(["quantity", "value"], rows, align_right=False))
    click.echo("\nTTFT includes closed-loop queueing; see planner/perf/closed_loop.py for the model.")


@click.command("calibrate")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--from-format", "fmt_name", type=_FORMAT, default="planner", show_default=True, help=_FORMAT_HELP)
@click.option("--name", default="h100_dense", show_default=True, help="Calibration name (file models/calibration/<name>.yaml).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write here instead of models/calibration/<name>.yaml.")
@click.option("--json", "as_json", is_flag=True)
def calibrate(measurements: str, fmt_name: str, name: str, output: str | None, as_json: bool) -> None:
    """Fit per-engine efficiencies and overheads on measured closed-loop rows; write a calibration file
    and, next to it, the rows it was fitted on (<name>.measurements.csv)."""
    from pathlib import Path

    from planner.catalog import load_catalog
    from planner.perf.calibration import calibration_dir, save_calibration
    from planner.perf.fit import fit_calibration
    from planner.perf.measurements import write_measurements

    rows = _read(measurements, fmt_name)
    cal = fit_calibration(rows, load_catalog(), name=name, data_file=measurements)
    out = Path(output) if output else calibration_dir() / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    data_copy = out.with_name(out.stem + ".measurements.csv")
    write_measurements(rows, data_copy)
    save_calibration(cal, out)
    assert cal.fit is not None
    if as_json:
        echo_json({"file": str(out), "data": str(data_copy), **cal.model_dump(mode="json")})
        return
    click.echo(f"wrote {out} (fitted on {cal.fit.rows_used} rows, {cal.fit.rows_skipped} skipped; data copy {data_copy})")
    click.echo(table(["engine", "eta_f", "eta_b", "step_ms", "layer_us", "seq_us", "allreduce_us", "eta_link", "cohort_exp", "ttft_ovh_ms", "MAPE_TTFT_%", "MAPE_TPOT_%"],
                     [[e, c.eta_f, c.eta_b, c.step_overhead_ms, c.layer_overhead_us, c.seq_overhead_us, c.allreduce_overhead_us, c.eta_link, c.cohort_exponent, c.ttft_overhead_ms,
                       cal.fit.mape_ttft_pct.get(e, cal.fit.mape_ttft_pct.get("all")), cal.fit.mape_tpot_pct.get(e, cal.fit.mape_tpot_pct.get("all"))]
                      for e, c in cal.engines.items()]))


@click.command("validate-perf")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--from-format", "fmt_name", type=_FORMAT, default="planner", show_default=True, help=_FORMAT_HELP)
@click.option("--calibration", "cal_name", default=None, help="Calibration name or file ('none' = published defaults).")
@click.option("--leave-one-device-out", "lodo", is_flag=True,
              help="Also fit on all devices but one and predict that one, for each device (refits: seconds per device).")
@click.option("--json", "as_json", is_flag=True, help='{"rows": [...], "summary": {...}}')
def validate_perf(measurements: str, fmt_name: str, cal_name: str | None, lodo: bool, as_json: bool) -> None:
    """Predict every measured row; report MAPE of TTFT and TPOT overall and per (device, model, engine)."""
    from planner.catalog import load_catalog
    from planner.perf.validate import validate

    rows = _read(measurements, fmt_name)
    catalog = load_catalog()
    result = validate(rows, catalog, _calibration(cal_name))
    if lodo:
        from planner.perf.fit import leave_one_device_out

        result["summary"]["leave_one_device_out"] = leave_one_device_out(rows, catalog)
    if as_json:
        echo_json(result)
        return
    s = result["summary"]
    click.echo(f"{s['rows']} rows, {s['predicted']} predicted, {s['not_predicted']} not ({s['calibration']})")
    click.echo(table(["device", "model", "engine", "rows", "predicted", "MAPE_TTFT_%", "MAPE_TPOT_%"],
                     [[g["device"], g["model"], g["engine"], g["rows"], g["predicted"], g["mape_ttft_pct"], g["mape_tpot_pct"]] for g in s["per_group"]]))
    click.echo(f"overall: MAPE TTFT {fmt(s['mape_ttft_pct'])} %, TPOT {fmt(s['mape_tpot_pct'])} %")
    if lodo:
        out = s["leave_one_device_out"]
        if not out:
            click.echo("leave one device out: the rows cover one device only")
        else:
            click.echo("\nleave one device out (fitted on the other devices' rows):")
            click.echo(table(["held-out device", "model", "engine", "rows", "predicted", "MAPE_TTFT_%", "MAPE_TPOT_%"],
                             [[g["device"], g["model"], g["engine"], g["rows"], g["predicted"], g["mape_ttft_pct"], g["mape_tpot_pct"]] for g in out]))
    reasons: dict[str, int] = {}
    for r in result["rows"]:
        if r.get("reason"):
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    for text, count in sorted(reasons.items(), key=lambda x: -x[1]):
        click.echo(f"not predicted ({count} rows): {text}")


@click.command("convert-measurements")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False), required=True)
def convert_measurements(source: str, output: str) -> None:
    """Convert an aiconfigurator silicon_*.csv into our measurements CSV."""
    from planner.perf.measurements import write_measurements

    rows = _read(source, "silicon")
    write_measurements(rows, output)
    click.echo(f"wrote {len(rows)} rows to {output}")


COMMANDS = [estimate, calibrate, validate_perf, convert_measurements]
