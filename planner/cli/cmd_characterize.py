"""`planner characterize`: characterise a request log into a workload profile."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli.output import echo_json, fmt, table, versioned, wrote


@click.command("characterize")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt_name", type=click.Choice(["azure", "mooncake", "lengths", "tracelab", "servegen", "generic"]), help="Log format (auto-detected if absent).")
@click.option("--service-column", help="Column whose values split the log into services.")
@click.option("--columns", help="Column mapping for --format generic: time=..,input=..,output=..,service=..,session=..,cached=..,time_unit=s|ms|us|ns")
@click.option("--buckets", type=int, default=4, show_default=True, help="Number of length buckets.")
@click.option("--peak-quantile", type=float, default=0.99, show_default=True, help="Quantile of per-window rates reported beside the peak.")
@click.option("--on-bad-row", type=click.Choice(["error", "skip"]), default="error", show_default=True, help="Stop at unusable rows, or drop them and say how many.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=str), help="Write the workload profile YAML here (one file per service when there are several).")
def characterize(file: str, fmt_name: str | None, service_column: str | None, columns: str | None, buckets: int, peak_quantile: float, on_bad_row: str, as_json: bool, out: str | None) -> None:
    """Characterise a request log: arrival peaks, token quantiles, length buckets, tools.

    Peaks over 1 s, 60 s and 600 s are the busiest window of that length at any start (sliding
    windows), as planning uses them; the peak quantile and empty-window counts are over windows
    aligned to the first arrival. Numeric times without a unit are seconds unless their size
    says epoch ms/us/ns (a note says so). Unusable rows (not numbers, negative, not finite,
    over 1e8 tokens, an arrival far outside the rest of the log) stop the run with their line
    numbers, or are dropped with --on-bad-row skip. Requests longer than every catalog model's
    context window get a note."""
    from planner.workload.characterize import characterize_path
    from planner.workload.profile import write_profile
    from planner.workload.readers.generic import parse_columns

    mapping = parse_columns(columns) if columns else None
    if mapping and "service" in mapping and service_column is None:
        service_column = mapping.pop("service")
    results = characterize_path(file, fmt_name, mapping, buckets=buckets, peak_quantile=peak_quantile, on_bad_row=on_bad_row,  # type: ignore[arg-type]
                                service_column=service_column, context_limit_tokens=_largest_context())
    written: list[str] = []
    if out:
        profiles = {name: c.to_profile() for name, c in results.items()}
        for name, profile in profiles.items():
            target = Path(out) if len(profiles) == 1 else Path(out).with_name(f"{Path(out).stem}.{name}{Path(out).suffix or '.yaml'}")
            write_profile(profile, target)
            written.append(str(target))
    notes = sorted({n for c in results.values() for n in c.to_json()["notes"]})
    for note in notes:
        if note.startswith(("timestamps were not in order", "skipped")):
            click.echo(f"warning: {file}: {note}", err=True)
    if as_json:
        data = [c.to_json() for c in results.values()]
        payload = data[0] if len(data) == 1 else {"services": {c["service"]: c for c in data}}
        if written:
            payload = {**payload, "written": written}
        echo_json(versioned(payload))
        return
    for name, c in results.items():
        j = c.to_json()
        click.echo(f"service {name}: {j['requests']:,} requests from {file} ({j['format']})")
        if j["duration_s"] is not None:
            peaks = j["arrival_rate_peak_per_s"]
            click.echo(f"  span {fmt(j['duration_s'])} s, mean {fmt(j['arrival_rate_mean_per_s'])}/s, peak " + ", ".join(f"{fmt(v)}/s over {k}" for k, v in peaks.items()) + f"; inter-arrival CV {fmt(j['interarrival_cv'])}; timestamps {j['timestamps']} (resolution {fmt(j['timestamp_resolution_s'])} s)")
            for key, rows_u in j.get("replay_wait", {}).items():
                at = {round(r[0], 2): r[3] for r in rows_u}  # the p99 column (planner.workload.replay_wait.LEVELS)
                if key == "60s" and all(u in at for u in (0.3, 0.5, 0.7)):
                    click.echo(f"  its busiest {key} windows replayed: p99 wait of a pool {' / '.join(f'{fmt(at[u])}' for u in (0.3, 0.5, 0.7))} "
                               "mean gaps at 30 / 50 / 70 % busy (a prefill pool's burst wait, planner.workload.replay_wait)")
        else:
            click.echo("  no arrival span (no timestamps, or every request at one instant): lengths only")
        rows = [[k, *(j[f"{k}_tokens"][q] for q in ("mean", "p50", "p90", "p99", "max"))] for k in ("input", "output")]
        rows += [[f"{m} (of input)", *(v["tokens"][q] for q in ("mean", "p50", "p90", "p99", "max"))]  # multimodal: encode phase
                 for m, v in j.get("modalities", {}).items()]
        click.echo(table(["tokens", "mean", "p50", "p90", "p99", "max"], rows))
        for m, v in j.get("modalities", {}).items():
            click.echo(f"  {m}: {fmt(v['items_per_request'])} item(s) per request (encoder input, services.<name>.encode)")
        if j["cached_prefix_share"] is not None:
            click.echo(f"  cached-prefix share {fmt(j['cached_prefix_share'])}")
        click.echo(table(["bucket", "weight", "input_rep", "output_rep", "input_mean", "output_mean"], [[b["name"], b["weight"], b["input_tokens"], b["output_tokens"], b["input_tokens_mean"], b["output_tokens_mean"]] for b in j["buckets"]]))
        if "tools" in j:
            t = j["tools"]
            click.echo(f"  tools: {t['calls']} calls, {fmt(t['calls_per_request'])} per request, error share {fmt(t['error_share'])}")
            click.echo(table(["tool", "calls", "per_request", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms", "errors"], [[k, v["calls_observed"], v["calls_per_request"], v["latency"]["mean_ms"], v["latency"]["p50_ms"], v["latency"]["p90_ms"], v["latency"]["p99_ms"], v["latency"]["max_ms"], v["error_share"]] for k, v in t["by_tool"].items()]))
        if "sessions" in j:
            s = j["sessions"]
            click.echo(f"  sessions {s['sessions']}, rounds per session {fmt(s['rounds_per_session_mean'])}, appended tokens per round {fmt(s['tokens_appended_per_round_mean'])}")
        for note in j["notes"]:
            click.echo(f"  note: {note}")
    for w in written:
        wrote(f"wrote {w}")


def _largest_context() -> int | None:
    """The largest ``max_context_tokens`` in the catalog (None when the catalog cannot be read)."""
    from planner.catalog import load_catalog
    from planner.errors import InputError

    try:
        models = load_catalog().models.values()
    except InputError:
        return None
    return max((m.max_context_tokens for m in models), default=None)


COMMANDS = [characterize]
