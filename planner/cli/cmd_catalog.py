"""`planner catalog`, `planner check-instance`, `planner schema`."""

from __future__ import annotations

import json
from typing import Any

import click

from planner.cli.output import echo_json, table


@click.group("catalog")
def catalog() -> None:
    """List the hardware and model profiles in models/."""


@catalog.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output with sources.")
def catalog_devices(as_json: bool) -> None:
    """Devices: memory, bandwidth, dense FLOP/s, power, prices, completeness."""
    from planner.catalog import load_catalog

    cat = load_catalog()
    if as_json:
        echo_json(
            {
                "devices": [
                    {**d.model_dump(mode="json"), "complete": d.complete, "missing": d.missing_for_serving(), "file": str(cat.device_files[d.id].name)}
                    for d in cat.devices.values()
                ],
                "notes": list(cat.notes),
                "catalog_version": cat.version,
            }
        )
        return
    rows = []
    for d in sorted(cat.devices.values(), key=lambda d: (d.kind, d.id)):
        rows.append(
            [
                d.id,
                d.kind,
                d.memory_gb,
                d.memory_bandwidth_gb_per_s,
                d.peak_tflops_dense.get("bf16"),
                d.peak_tflops_dense.get("fp8"),
                d.peak_tflops_dense.get("fp4"),
                d.busy_power_w,
                d.rental_usd_per_hour,
                d.purchase_usd,
                d.confidence,
                "yes" if d.complete else "no: " + ", ".join(d.missing_for_serving()),
            ]
        )
    click.echo(
        table(
            ["id", "kind", "mem_GB", "BW_GB/s", "bf16_TFLOPs", "fp8_TFLOPs", "fp4_TFLOPs", "busy_W", "rent_$/h", "buy_$", "confidence", "complete"],
            rows,
        )
    )
    click.echo("\nDense FLOP/s (no 2:4 sparsity). Sources per figure: planner catalog devices --json")
    _notes(cat)


def _notes(cat: Any) -> None:
    """Profiles that replace a shipped id (PLANNER_MODELS_DIR), and the folders read."""
    for note in cat.notes:
        click.echo(f"note: {note}")
    click.echo(f"catalog {cat.version} from {', '.join(str(f) for f in cat.folders)}")


@catalog.command("models")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def catalog_models(as_json: bool) -> None:
    """Models: computed total/active parameters against published totals, KV bytes per token."""
    from planner.catalog import load_catalog

    cat = load_catalog()
    out = []
    for m in cat.models.values():
        total = m.params_total()
        active = m.params_active()
        out.append(
            {
                **m.model_dump(mode="json"),
                "kind": m.kind,
                "params_total_computed": total,
                "params_active_computed": active,
                "params_active_published_basis": m.params_active_published_basis(),
                "params_total_error_pct": m.params_total_error_pct(),
                "params_active_error_pct": m.params_active_error_pct(),
                "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"),
                "file": cat.model_files[m.id].name,
            }
        )
    if as_json:
        echo_json({"models": out, "notes": list(cat.notes), "catalog_version": cat.version})
        return
    rows = [
        [
            o["id"],
            o["kind"],
            o["params_total_computed"] / 1e9,
            o["published_params_total_b"],
            o["params_total_error_pct"],
            o["params_active_computed"] / 1e9,
            o["params_active_published_basis"] / 1e9 if o["published_params_active_b"] else None,
            o["published_params_active_b"],
            o["params_active_error_pct"],
            o["kv_bytes_per_token_bf16"] / 1024,
        ]
        for o in sorted(out, key=lambda o: o["params_total_computed"])
    ]
    headers = ["id", "kind", "params_B(computed)", "params_B(published)", "error_%", "active_B", "active_B(publisher's basis)", "active_B(published)", "active_error_%", "KV_KiB/token(bf16)"]
    click.echo(table(headers, rows))
    click.echo("\nActive on the publisher's basis: gpt-oss counts active parameters without the input embedding.")
    _notes(cat)


@click.command("check-instance")
@click.argument("instance", type=click.Path(dir_okay=False, path_type=str))
def check_instance(instance: str) -> None:
    """Validate an instance file and every reference in it (no solving)."""
    from planner.instance import load_instance
    from planner.instance_checks import check_workload

    resolved = load_instance(instance)
    notes = check_workload(resolved)
    inst = resolved.instance
    click.echo(f"{instance}: valid — {len(inst.services)} service(s), {len(resolved.devices)} candidate device(s), {len(inst.scenarios)} scenario(s)")
    for note in notes:  # what `solve` would note in the plan (a log's requests beyond the context)
        click.echo(f"note: {note}", err=True)


@click.command("schema")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
def schema(output: str | None) -> None:
    """Print the JSON Schema of the instance format (reference it from YAML files)."""
    from planner.schema.common import json_schema
    from planner.schema.instance import Instance

    text = json.dumps(json_schema(Instance), indent=2)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        click.echo(text)


COMMANDS = [catalog, check_instance, schema]
