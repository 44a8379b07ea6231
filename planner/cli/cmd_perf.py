"""`planner estimate`, `planner calibrate`, `planner validate-perf`, `planner convert-measurements`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from planner.cli.output import echo_json, fmt, table, wrote
from planner.errors import InputError, Problem

_FORMAT = click.Choice(["auto", "planner", "silicon", "vllm", "sglang", "aiperf", "genai-perf", "llmperf"])
_FORMAT_HELP = ("Input format; auto tells it from the content: our measurements CSV, aiconfigurator silicon_*.csv, "
                "vLLM `bench serve` JSON, SGLang bench_serving JSONL, AIPerf/GenAI-Perf export (JSON or CSV), LLMPerf summary JSON "
                "(planner/perf/importers).")
_PRECISION = click.Choice(["bf16", "fp8", "fp4", "int8"])


def _input_options(fn: Any) -> Any:
    """Options naming what a benchmark file does not say: they fill what a file (or a row of our CSV) leaves out;
    one that contradicts what a file records is an error (planner/perf/importers/common.py)."""
    options = [
        click.option("--from-format", "fmt_name", type=_FORMAT, default="auto", show_default=True, help=_FORMAT_HELP),
        click.option("--device", "in_device", default=None, help="Device of the runs (catalog id, e.g. h100-sxm) when the file does not say."),
        click.option("--model", "in_model", default=None,
                     help="Model of the runs (catalog id, checkpoint name, e.g. Qwen/Qwen3-32B-FP8, or a path to its config.json) when the file does not say."),
        click.option("--engine", "in_engine", default=None, help="Serving engine of the runs: vllm, sglang, trtllm or another name (default calibration) when the file does not say "
                          "(a benchmark client's backend name it replaces, with a warning)."),
        click.option("--precision", "in_precision", type=_PRECISION, default=None,
                     help="Weight precision (default: what the file or checkpoint name says, else bf16)."),
        click.option("--kv-precision", "in_kv_precision", type=_PRECISION, default=None, help="KV-cache precision (default: the checkpoint name's, else bf16)."),
        click.option("--tp", "in_tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel degree of one replica when the file does not say."),
        click.option("--concurrency", "in_concurrency", type=click.IntRange(min=1), default=None,
                     help="Users of a closed-loop run when the file does not say (AIPerf/GenAI-Perf CSV)."),
        click.option("--request-rate", "in_request_rate_per_s", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Arrival rate (req/s) of an open-loop run when the file does not say."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _read(paths: tuple[str, ...], fmt_name: str, given: dict[str, Any], *, converting: bool = False) -> Any:
    """Rows of every input file (:func:`planner.perf.importers.read_benchmarks`); warnings to stderr (``converting``: every row is written)."""
    from planner.catalog import load_catalog
    from planner.errors import InputError, Problem
    from planner.perf.importers import context_for, read_benchmarks, unmapped_lines
    from planner.perf.importers.common import engine_name
    from planner.perf.names import device_id, model_ref

    cat = load_catalog()
    values = {k[len("in_"):]: v for k, v in given.items() if k.startswith("in_") and v is not None}
    problems = []
    if "device" in values:
        dev = device_id(values["device"], frozenset(cat.devices))
        if dev is None or dev not in cat.devices:
            problems.append(Problem("", "--device", f"unknown device {values['device']!r}", f"use one of: {', '.join(sorted(cat.devices))}"))
        values["device"] = dev
    derived = {}
    if "model" in values:
        ref = model_ref(values["model"], {m.hf_id: m.id for m in cat.models.values()})
        if ref.model_id is None:
            try:  # a config.json path or a shipped config (planner/hf_config.py)
                profile = cat.resolve_model(values["model"])
                derived[profile.id] = profile
                ref = type(ref)(profile.id, ref.weight_precision, ref.kv_precision)
            except InputError as exc:
                problems.extend(Problem(p.file, "--model" + (f": {p.path}" if p.path and p.file else ""), p.message, p.fix) for p in exc.problems)
        values["model"] = ref.model_id
        if ref.weight_precision and "precision" not in values:
            values["precision"] = ref.weight_precision
        if ref.kv_precision and "kv_precision" not in values:
            values["kv_precision"] = ref.kv_precision
    if "engine" in values:
        values["engine"] = engine_name(values["engine"]) or values["engine"]
    if problems:
        raise InputError(problems)
    result = read_benchmarks(paths, fmt_name, context_for(cat, **values))
    result.models.update(derived)
    cat = cat.with_models(derived)
    for line in unmapped_lines(result.all_rows, cat):
        click.echo(line, err=True)
    for line in result.notes:
        click.echo(line, err=True)
    for load, count in sorted(result.set_aside.items()):
        kind = "open-loop runs (request rate)" if load == "open" else "single-burst runs (all requests at t = 0, no concurrency cap)"
        if converting:  # convert-measurements writes every row: say so, and what the other commands do with these
            click.echo(f"note: {_rows(count)} {kind}, written with load={load}: calibrate and validate-perf set them aside "
                       "(the closed-loop predictor, planner/perf/closed_loop.py, does not model them)", err=True)
        else:
            click.echo(f"note: {_rows(count)} set aside, {kind}: the closed-loop predictor (planner/perf/closed_loop.py) does not model them", err=True)
    if result.precision_assumed:
        click.echo(f"note: {_rows(result.precision_assumed)} without a stated precision (file, checkpoint name or --precision): taken as bf16, "
                   "the checkpoint's own dtype; give --precision if the server quantised on load", err=True)
    return result


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _is_input(path: Path, inputs: tuple[str, ...]) -> bool:
    """True when ``path`` is one of the input files (the same file, by its resolved path)."""
    target = path.resolve()
    return any(Path(m).resolve() == target for m in inputs)


def _check_outputs(out: Path, data_copy: Path, inputs: tuple[str, ...], copy_is_the_data: bool) -> None:
    """Exit-2 error, before any fit, when ``calibrate`` would write onto an input file: the calibration
    itself, or its data copy unless the copy would be the one input of our format (then none is written)."""
    problems = [Problem(str(out), "", "is an input file: the calibration would overwrite it", "give another -o name")] if _is_input(out, inputs) else []
    if _is_input(data_copy, inputs) and not copy_is_the_data:
        problems.append(Problem(str(data_copy), "", f"is an input file: the data copy of {out.name} would overwrite it",
                                "give -o a name whose <stem>.measurements.csv is not an input"))
    if problems:
        raise InputError(problems)


def _staged_copy(rows: list[dict[str, Any]], data_copy: Path) -> Path:
    """The data copy written next to its final name (a hidden temporary file): ``calibrate`` moves it
    into place only after a successful fit, so a failed run leaves no copy and replaces no file."""
    import os
    import tempfile

    from planner.perf.measurements import write_measurements

    fd, tmp = tempfile.mkstemp(prefix=f".{data_copy.name}.", suffix=".tmp", dir=data_copy.parent)
    os.close(fd)
    write_measurements(rows, tmp)
    return Path(tmp)


def _engine_mape(fit: Any, engine: str) -> tuple[Any, Any]:
    """The in-sample MAPE of TTFT and TPOT of ``engine``'s rows: the pooled figure for ``default`` (fitted on
    every row), ``"no rows"`` for an engine without rows (it takes the pooled parameters; there is nothing to score)."""
    key = "all" if engine == "default" else engine
    if key not in fit.mape_ttft_pct:
        return "no rows", "no rows"
    return fit.mape_ttft_pct[key], fit.mape_tpot_pct.get(key)


def _calibration(name: str | None) -> Any:
    from planner.perf.calibration import load_calibration

    if name == "none":
        return None
    return load_calibration(name)


def _checkpoint_precisions(model_arg: str, model: Any, catalog: Any) -> tuple[str | None, str | None, str]:
    """(weight precision, KV precision, what states them) of the checkpoint ``--model`` names: its name's
    quantisation suffix (:func:`planner.perf.names.model_ref`: ``Qwen/Qwen3-8B-FP8`` -> fp8), else, for a
    profile derived from a config.json, its ``quantization_config`` (:mod:`planner.hf_config`,
    ``native_weight_precision``); ``None``: not stated. A catalog id states nothing (bf16 by default)."""
    from planner.perf.names import model_ref

    if not model_arg.strip().lower().endswith(".json"):
        ref = model_ref(model_arg, {m.hf_id: m.id for m in catalog.models.values()})
        if ref.weight_precision or ref.kv_precision:
            return ref.weight_precision, ref.kv_precision, f"the checkpoint name {model_arg.strip()}"
    if catalog.models.get(model.id) is not model and model.native_weight_precision != "bf16":
        return model.native_weight_precision, None, f"{model.id}'s config.json (quantization_config)"
    return None, None, ""


@click.command("estimate")
@click.option("--model", "model_id", required=True,
              help="Model: a catalog id (planner catalog models), a Hugging Face id (meta-llama/Llama-3.1-8B-Instruct) or a path to its config.json.")
@click.option("--device", "device_id", required=True, help="Device id (planner catalog devices) or a GPU name (NVIDIA H100-SXM-80GB).")
@click.option("--tp", type=click.IntRange(min=1), default=None,
              help="Tensor-parallel degree of one replica (required without --ep); with --ep, the attention TP inside each DP rank (default ep/dp).")
@click.option("--ep", type=click.IntRange(min=2), default=None,
              help="Expert-parallel replica of EP GPUs (MoE models; planner/perf/moe.py): prints the all-to-all time.")
@click.option("--dp", type=click.IntRange(min=1), default=None, help="Data-parallel attention ranks of the --ep replica (default: ep, i.e. attention tp 1).")
@click.option("--precision", default=None, type=_PRECISION,
              help="Weight/activation precision (default: what the checkpoint name or its config.json states, e.g. -FP8, else bf16).")
@click.option("--kv-precision", default=None, type=_PRECISION, help="KV-cache precision (default: what the checkpoint name states, e.g. -FP8-KV, else bf16).")
@click.option("--isl", type=click.IntRange(min=1), required=True, help="Input tokens per request.")
@click.option("--osl", type=click.IntRange(min=1), required=True, help="Output tokens per request.")
@click.option("--concurrency", type=click.IntRange(min=1), required=True, help="Users in the closed loop.")
@click.option("--engine", default="default", show_default=True,
              help="Engine calibration: one of the calibration's engines (shipped: trtllm, vllm, sglang) or default; another name is an error.")
@click.option("--ttft-ms", type=float, default=None,
              help="Optional TTFT target (> 0): said met or missed; exit 2 if the engine's prefill alone misses it.")
@click.option("--tpot-ms", type=float, default=None, help="Optional TPOT target (> 0): said met or missed; exit 2 if even batch 1 misses it.")
@click.option("--redundant-experts", type=click.IntRange(min=0), default=None,
              help="With --ep: redundant EPLB expert slots (default: as the plans, the calibration's moe.redundant_experts if it "
                   "fixes one, else E/8 of the routed experts: DeepSeek's 32 for 256; 0 = no EPLB replicas).")
@click.option("--calibration", "cal_name", default=None, help="Calibration name or file ('none' = published defaults).")
@click.option("--json", "as_json", is_flag=True)
def estimate(model_id: str, device_id: str, tp: int | None, ep: int | None, dp: int | None, precision: str | None, kv_precision: str | None,
             isl: int, osl: int, concurrency: int, engine: str, ttft_ms: float | None, tpot_ms: float | None, redundant_experts: int | None,
             cal_name: str | None, as_json: bool) -> None:
    """Predict TTFT, TPOT and throughput of a closed-loop benchmark at fixed concurrency; with --ep (and --dp),
    one expert-parallel replica's decode step (with its all-to-all time) and prefill throughput."""
    from planner.catalog import load_catalog
    from planner.cli.output import note
    from planner.errors import InputError
    from planner.perf.estimate import (
        estimate_closed_loop,
        estimate_expert_parallel,
        precision_choice,
    )
    from planner.perf.names import resolve_device

    cat = load_catalog()
    model = cat.resolve_model(model_id)
    device_id = resolve_device(device_id, frozenset(cat.devices))
    stated_w, stated_kv, stated_by = _checkpoint_precisions(model_id, model, cat)
    precision, precision_source, warn_w = precision_choice(precision, stated_w, stated_by, "--precision")
    kv_precision, kv_precision_source, warn_kv = precision_choice(kv_precision, stated_kv, stated_by, "--kv-precision")
    said = {"precision_source": precision_source, "kv_precision_source": kv_precision_source}

    def say_precisions() -> None:
        """The checkpoint's precisions taken (a note) or overridden (a warning), on stderr (silent with -q)."""
        taken = [f"{flag} {value}" for flag, value, src in (("--precision", precision, precision_source), ("--kv-precision", kv_precision, kv_precision_source))
                 if src == stated_by and stated_by]
        if taken:
            note(f"note: {stated_by} states {' and '.join(taken)}: estimated so (give the option to override)")
        for warn in (warn_w, warn_kv):
            if warn:
                note(f"warning: {warn}")

    if ep is None and redundant_experts is not None:
        raise InputError(Problem("", "redundant-experts", "applies to an expert-parallel replica only", "give --ep (and --dp), or drop --redundant-experts"))
    if ep is not None:
        given = [f"--{n} {v:g}" for n, v in (("ttft-ms", ttft_ms), ("tpot-ms", tpot_ms)) if v is not None]
        if given:
            raise InputError(Problem("", given[0].split()[0].lstrip("-"), f"{' and '.join(given)}: targets are not checked with --ep",
                                     "drop the target and read tpot_ms and ttft_ms from the output"))
        res = estimate_expert_parallel(model, cat.device(device_id), ep=ep, dp=dp or (ep // tp if tp else ep), tp=tp,
                                       precision=precision, kv_precision=kv_precision, isl=isl, osl=osl, concurrency=concurrency,
                                       engine=engine, calibration=_calibration(cal_name), redundant_experts=redundant_experts)
        res = {**res, **said}
        say_precisions()
        if as_json:
            echo_json(res)
            return
        comp = res["decode_step_components_ms"]
        rows = [[k, res[k]] for k in ("experts_per_gpu", "redundant_experts", "weights_gb_per_gpu", "kv_capacity_gb_per_rank", "users_running",
                                      "active_ranks", "batch_per_rank", "max_batch_per_rank", "tpot_ms", "ttft_ms", "output_tokens_per_s_per_node",
                                      "input_tokens_per_s_per_node", "prefill_prompts_per_rank", "prefill_iteration_ms", "prefill_all_to_all_ms")]
        rows += [[f"decode {k} ms", v] for k, v in comp.items()] + [["two_batch_overlap", res["two_batch_overlap"]]]
        click.echo(f"{model_id} on {res['gpus']} x {device_id} ({res['parallelism']}, {res['nodes']} node(s); {precision}, KV {kv_precision}), "
                   f"ISL {isl}, OSL {osl}, {concurrency} users, source {res['source']}")
        click.echo(table(["quantity", "value"], rows, align_right=False))
        nic = (" within one node (its scale-up link; no inter-node traffic)" if res["nodes"] <= 1
               else f" (device profile has no nic_bw_gb_per_s: the default {res['nic_gb_per_s']:g} GB/s per GPU is used)" if res["nic_defaulted"]
               else f" at {res['nic_gb_per_s']:g} GB/s per GPU across nodes")
        click.echo(f"\nAll-to-all (dispatch + combine, all MoE layers) {comp['all_to_all']:.1f} ms per decode step, "
                   f"{comp['all_to_all_exposed']:.1f} ms not hidden by two-batch overlap{nic}. Model: planner/perf/moe.py.")
        waiting = (f"; {res['users_without_slot']:,} of the {concurrency:,} users get no slot (the ranks take "
                   f"{res['users_running']:,}: max_batch_per_rank, by KV memory and the per-rank token limit) and their wait is not in it" if res["users_without_slot"] else "")
        click.echo(f"TTFT is one prompt per rank on a replica with room, its first decode step and the engine's TTFT overhead: "
                   f"no queueing{waiting}. Not a closed-loop replay.")
        click.echo(f"prefill_iteration_ms is one iteration of {res['prefill_prompts_per_rank']:,} prompt(s) per rank at the per-rank token budget "
                   "(input_tokens_per_s_per_node), not a user's TTFT. Output tokens/s: users_running x OSL / (TTFT + (OSL - 1) TPOT). "
                   f"Redundant experts {res['redundant_experts']}: {res['redundant_experts_source']}.")
        return
    if tp is None:
        raise InputError("give --tp (or --ep with --dp for an expert-parallel replica)")
    result = estimate_closed_loop(model, cat.device(device_id), tp, precision=precision, kv_precision=kv_precision,
                                  isl=isl, osl=osl, concurrency=concurrency, engine=engine, calibration=_calibration(cal_name),
                                  ttft_target_ms=ttft_ms, tpot_target_ms=tpot_ms)
    result = {**result, **said}
    say_precisions()
    if as_json:
        echo_json(result)
        return
    rows = [[k, result[k]] for k in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_device", "output_tokens_per_s_per_device_without_harness", "memory_used_gb_per_device",
                                      "memory_free_gb_per_device", "max_batch", "max_batch_at_peak_context", "running_batch", "bound")]
    click.echo(f"{model_id} on {tp} x {device_id} ({precision}, KV {kv_precision}), ISL {isl}, OSL {osl}, {concurrency} users, source {result['source']}")
    click.echo(table(["quantity", "value"], rows, align_right=False))
    comp = result["ttft_components_ms"]
    click.echo(f"\nTTFT {result['ttft_ms']:.0f} ms = engine prefill {comp['engine_prefill']:.0f} + engine closed-loop wait "
               f"{comp['engine_closed_loop_wait']:.0f} + harness TTFT overhead {comp['harness_ttft_overhead']:.0f} + harness cohorts "
               f"{comp['harness_cohorts']:.0f} ms (without the harness terms: {result['ttft_without_harness_ms']:.0f} ms); "
               "closed-loop model: planner/perf/closed_loop.py.")
    eng = result["engine_terms"]
    click.echo("engine terms: " + ", ".join(f"{k} {fmt(eng[k])}" for k in ("eta_f", "eta_b", "layer_overhead_us", "seq_overhead_us", "eta_link"))
               + f" ({eng['source'] or result['source']})")
    for metric in ("ttft", "tpot"):
        target = result[f"{metric}_target_ms"]
        if target is None:
            continue
        met = result[f"{metric}_target_met"]
        line = f"{metric.upper()} {result[metric + '_ms']:.1f} ms against the target {target:g} ms: {'met' if met else 'MISSED'}"
        if metric == "ttft" and not met and result["ttft_target_met_without_harness"]:
            line += f" (met without the benchmark harness's terms: {result['ttft_without_harness_ms']:.1f} ms)"
        click.echo(line)
    har = result["harness_terms"]
    fitted = ", ".join(f"{n} ({h['rows']} rows)" for n, h in har["fitted_on_harnesses"].items()) or "no harness rows: the engine's values"
    click.echo(f"benchmark-harness terms: ttft_overhead_ms {fmt(har['ttft_overhead_ms'])}, cohort_exponent {fmt(har['cohort_exponent'])}"
               f" (fitted on: {fitted})")


@click.command("calibrate")
@click.argument("measurements", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_input_options
@click.option("--name", default=None, help="Calibration name (default: the first input file's name).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the calibration to this file.")
@click.option("--instance", "instance_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Write <name>.calibration.yaml next to this instance file (name it there as `calibration:`).")
@click.option("--into-catalog", is_flag=True, help="Write into the package's models/calibration/<name>.yaml (replaces a shipped file of that name).")
@click.option("--json", "as_json", is_flag=True)
def calibrate(measurements: tuple[str, ...], name: str | None, output: str | None, instance_path: str | None, into_catalog: bool,
              as_json: bool, **given: Any) -> None:
    """Fit per-engine efficiencies and overheads on measured closed-loop runs; write a calibration file and,
    next to it, the rows it was fitted on (<stem>.measurements.csv). A measured-energy CSV (ML.ENERGY
    format, with power) is fitted as `planner calibrate-energy` does: <name or power>.power.yaml.

    The file is the user's: it goes to -o, next to --instance, or the current directory
    (<name>.calibration.yaml); never into the package unless --into-catalog is given."""
    import os
    import re
    from pathlib import Path

    from planner.catalog import load_catalog
    from planner.errors import InputError
    from planner.perf.calibration import calibration_dir, file_sha256, save_calibration
    from planner.perf.fit import fit_calibration

    if sum(bool(x) for x in (output, instance_path, into_catalog)) > 1:
        raise InputError("give only one of -o, --instance and --into-catalog")
    from planner.cli.cmd_energy import fit_and_write_power, is_energy_file

    energy = [m for m in measurements if is_energy_file(m)]
    if energy:  # measured power: the power fit (planner calibrate-energy), written where a latency fit would go
        if len(energy) != len(measurements) or len(energy) > 1:
            raise InputError("give one measured-energy CSV on its own (its power is fitted apart from latency files)")
        from planner.perf.power import power_file

        stem = name or "power"
        out_p = (Path(output) if output else power_file() if into_catalog
                 else Path(instance_path).parent / f"{stem}.power.yaml" if instance_path else Path.cwd() / f"{stem}.power.yaml")
        fit_and_write_power(energy[0], out_p, as_json)
        return
    imported = _read(measurements, given.pop("fmt_name"), given)
    cal_name = name or re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(measurements[0]).stem)
    if output:
        out = Path(output)
    elif into_catalog:
        out = calibration_dir() / f"{cal_name}.yaml"
    elif instance_path:
        out = Path(instance_path).parent / f"{cal_name}.calibration.yaml"
    else:
        out = Path.cwd() / f"{cal_name}.calibration.yaml"
    stem = out.name.removesuffix(out.suffix).removesuffix(".calibration")
    data_copy = out.with_name(f"{stem}.measurements.csv")
    single = len(measurements) == 1 and imported.formats[measurements[0]] in ("planner", "silicon")
    copy_is_input = _is_input(data_copy, measurements)
    _check_outputs(out, data_copy, measurements, copy_is_input and single and imported.formats[measurements[0]] == "planner")
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = _staged_copy(imported.rows, data_copy) if not copy_is_input else None
    try:
        cal = fit_calibration(imported.rows, load_catalog().with_models(imported.models), name=cal_name,
                              data_file=measurements[0] if single else data_copy, out_of_sample=True,
                              data_sha256=None if single or staged is None else file_sha256(staged))
        save_calibration(cal, out)
    except BaseException as exc:
        if staged is not None:
            staged.unlink(missing_ok=True)
        if isinstance(exc, InputError):  # a fit error names the input files, not a data copy that was never written
            from dataclasses import replace

            raise InputError([replace(pr, file=", ".join(measurements)) if pr.file == str(data_copy) else pr for pr in exc.problems]) from None
        raise
    if staged is not None:
        os.replace(staged, data_copy)
    else:
        data_copy = Path(measurements[0])  # the input is the data: no copy onto it
    assert cal.fit is not None
    if as_json:
        echo_json({"file": str(out), "data": str(data_copy), **cal.model_dump(mode="json")})
        return
    wrote(f"wrote {out} (fitted on {cal.fit.rows_used} rows, {cal.fit.rows_skipped} skipped; "
          + (f"data copy {data_copy})" if staged is not None else f"data {data_copy}: the input itself, no copy written onto it)"))
    click.echo(table(["engine", "eta_f", "eta_b", "step_ms", "layer_us", "seq_us", "allreduce_us", "eta_link", "cohort_exp", "ttft_ovh_ms", "MAPE_TTFT_%", "MAPE_TPOT_%"],
                     [[e, c.eta_f, c.eta_b, c.step_overhead_ms, c.layer_overhead_us, c.seq_overhead_us, c.allreduce_overhead_us, c.eta_link, c.cohort_exponent, c.ttft_overhead_ms,
                       *_engine_mape(cal.fit, e)]
                      for e, c in cal.engines.items()]))
    for w in cal.fit.warnings:
        click.echo(f"warning: {w}", err=True)
    from planner.perf.calibration import MIN_VALIDATED_ROWS

    valid = [b for b in cal.fit.error_bands if b.how != "in sample" and b.rows >= MIN_VALIDATED_ROWS]
    if not valid:
        click.echo(f"warning: error not validated: no (device, engine) has {MIN_VALIDATED_ROWS} or more rows predicted out of sample "
                   "(leave one model out needs rows of two or more models); plans using this calibration quote the published-defaults band",
                   err=True)
    for b in cal.fit.error_bands:
        click.echo(f"out-of-sample error {b.device}/{b.engine}: TTFT {100 * b.ttft_rel:.1f} %, TPOT {100 * b.tpot_rel:.1f} % "
                   f"({b.how}, {b.rows} rows{'' if b in valid else ', not validated: fewer than ' + str(MIN_VALIDATED_ROWS)})")
    if instance_path:
        click.echo(f"to plan with it, add to {instance_path}:  calibration: {os.path.relpath(out, Path(instance_path).parent)}")


@click.command("validate-perf")
@click.argument("measurements", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_input_options
@click.option("--calibration", "cal_name", default=None, help="Calibration name or file ('none' = published defaults).")
@click.option("--leave-one-device-out", "lodo", is_flag=True,
              help="Also fit on all devices but one and predict that one, for each device (refits: seconds per device).")
@click.option("--json", "as_json", is_flag=True, help='{"rows": [...], "summary": {...}}')
def validate_perf(measurements: tuple[str, ...], cal_name: str | None, lodo: bool, as_json: bool, **given: Any) -> None:
    """Predict every measured closed-loop run; report MAPE of TTFT and TPOT overall and per (device, model, engine).
    Open-loop and single-burst runs are set aside and counted."""
    from planner.catalog import load_catalog
    from planner.perf.validate import in_sample_files, validate

    imported = _read(measurements, given.pop("fmt_name"), given)
    catalog = load_catalog().with_models(imported.models)
    calibration = _calibration(cal_name)
    result = validate(imported.rows, catalog, calibration)
    _none_predicted(result, measurements, imported)
    result["summary"]["inputs"] = {"formats": imported.formats, "set_aside": imported.set_aside, "precision_assumed": imported.precision_assumed,
                                   "notes": imported.notes}
    in_sample = in_sample_files(calibration, measurements)
    result["summary"]["in_sample"] = bool(in_sample)
    result["summary"]["in_sample_files"] = in_sample
    if lodo:
        from planner.perf.fit import leave_one_device_out

        result["summary"]["leave_one_device_out"] = leave_one_device_out(imported.rows, catalog)
    if as_json:
        echo_json(result)
        return
    s = result["summary"]
    click.echo(f"{s['rows']} rows, {s['predicted']} predicted, {s['not_predicted']} not ({s['calibration']})")
    if in_sample:
        click.echo(f"in sample: the calibration {s['calibration']} was fitted on {', '.join(in_sample)} (the same sha256): these figures are "
                   "its own residuals, not a validation (calibrate reports the out-of-sample error; or use --leave-one-device-out)")
    click.echo(table(["device", "model", "engine", "rows", "predicted", "MAPE_TTFT_%", "MAPE_TPOT_%"],
                     [[g["device"], g["model"], g["engine"], g["rows"], g["predicted"], g["mape_ttft_pct"], g["mape_tpot_pct"]] for g in s["per_group"]]))
    click.echo(f"overall: MAPE TTFT {fmt(s['mape_ttft_pct'])} % over {_rows(s['mape_ttft_rows'])}, TPOT {fmt(s['mape_tpot_pct'])} % over "
               f"{_rows(s['mape_tpot_rows'])} (predicted rows with a measured value){' — in sample' if in_sample else ''}")
    src = s["kv_precision_sources"]
    click.echo(f"KV precision: {src['stated']} rows stated, {src['checkpoint']} from the checkpoint name, {src['default']} the published "
               f"default, {src['inferred']} inferred (not in the file; the measured concurrency and TTFT need it; planner/perf/kv_infer.py)")
    inferred = [r for r in result["rows"] if r.get("kv_precision_source") == "inferred"]
    if inferred:
        click.echo(table(["inferred-KV row", "engine", "precision", "kv_precision", "concurrency", "TTFT_error_%"],
                         [[r.get("id") or "", r.get("engine"), r.get("precision"), r.get("kv_precision"), r.get("concurrency"), r.get("ttft_error_pct")]
                          for r in inferred[:50]], align_right=False))
    if lodo:
        out = s["leave_one_device_out"]
        if not out:
            click.echo("leave one device out: the rows cover one device only")
        else:
            click.echo("\nleave one device out (fitted on the other devices' rows):")
            click.echo(table(["held-out device", "model", "engine", "rows", "predicted", "MAPE_TTFT_%", "MAPE_TPOT_%"],
                             [[g["device"], g["model"], g["engine"], g["rows"], g["predicted"], g["mape_ttft_pct"], g["mape_tpot_pct"]]
                              for g in out if not g.get("skipped")]))
            for g in out:
                if g.get("skipped"):
                    click.echo(f"held-out device {g['device']} skipped ({_rows(g['rows'])} not predicted): cannot fit {g['skipped']}")
    reasons: dict[str, int] = {}
    for r in result["rows"]:
        if r.get("reason"):
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    for text, count in sorted(reasons.items(), key=lambda x: -x[1]):
        click.echo(f"not predicted ({count} rows): {text}")


def _none_predicted(result: dict[str, Any], paths: tuple[str, ...], imported: Any) -> None:
    """Exit-2 error when no row was predicted: a validation of nothing is no result. The error names
    the reasons, counted, or that the files hold no rows at all. Files whose every run is open-loop or
    a burst are the exception: those runs are set aside and counted in a note (exit 0, ``rows: []``)."""
    s = result["summary"]
    if s["predicted"] or (not s["rows"] and imported.set_aside):
        return
    where = ", ".join(paths)
    if not s["rows"]:
        raise InputError(Problem(where, "", "no rows to predict (the file has a header only)" if len(paths) == 1 else "no rows to predict in these files",
                                 "give a file with measured closed-loop runs (see planner/perf/measurements.py)"))
    reasons: dict[str, int] = {}
    for r in result["rows"]:
        reasons[r.get("reason") or "not predicted"] = reasons.get(r.get("reason") or "not predicted", 0) + 1
    raise InputError([Problem(where, "", f"none of the {_rows(s['rows'])} predicted: {text} ({_rows(n)})", _none_predicted_fix(text))
                      for text, n in sorted(reasons.items(), key=lambda x: -x[1])[:10]])


def _none_predicted_fix(reason: str) -> str:
    """The fix of a row that could not be predicted, by its reason: memory (the run's tp on that device holds less
    than the weights and one sequence), else the row's identity and shape."""
    if "do not fit" in reason:
        return "check the run's tp and device (the weights and one sequence's KV need more memory than it has at that tp)"
    return "fix the rows (catalog ids, tp and concurrency, or give the missing value with --tp / --concurrency / --device / --model)"


@click.command("convert-measurements")
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_input_options
@click.option("--output", "-o", type=click.Path(dir_okay=False), required=True)
def convert_measurements(sources: tuple[str, ...], output: str, **given: Any) -> None:
    """Convert benchmark results (any --from-format) into our measurements CSV: systems to catalog device ids,
    checkpoints to the base model and the precision their name states; unmapped rows are kept and named
    in a warning, open-loop runs kept with load=open."""
    from planner.perf.measurements import write_measurements

    imported = _read(sources, given.pop("fmt_name"), given, converting=True)
    keep = [r for r in imported.all_rows if not r.get("skip_reason")]
    if len(keep) < len(imported.all_rows):
        from planner.perf.measurements import skipped_summary

        click.echo(f"note: {_rows(len(imported.all_rows) - len(keep))} not written, numbers out of bounds: {skipped_summary(imported.all_rows)}", err=True)
    write_measurements(keep, output)
    wrote(f"wrote {len(keep)} rows to {output}")


@click.command("calibrate-moe")
@click.argument("rows_csv", type=click.Path(dir_okay=False))
@click.option("--calibration", "cal_name", default=None, help="Calibration to start from and write back (default: the shipped one).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default="moe.calibration.yaml", show_default=True,
              help="Where to write the calibration with its fitted moe: block.")
@click.option("--json", "as_json", is_flag=True)
def calibrate_moe(rows_csv: str, cal_name: str | None, output: str, as_json: bool) -> None:
    """Fit the expert-parallel parameters (EPLB imbalance, all-to-all efficiency) on measured EP iterations: a CSV of
    model, device, ep, dp, tp, precision, kv_precision, engine, role, isl, osl, batch_per_rank, step_ms
    (planner/perf/moe.py MOE_ROW_COLUMNS). Writes the calibration with its moe: block to -o."""
    from planner.catalog import load_catalog
    from planner.perf.calibration import Calibration, save_calibration
    from planner.perf.moe import (
        fit_moe_calibration,
        moe_fit_fields,
        predict_moe_rows,
        read_moe_rows,
    )

    cat = load_catalog()
    rows = read_moe_rows(rows_csv, cat.models, cat.devices)
    if not rows:
        raise InputError(Problem(rows_csv, "", "no measured rows (only a header): nothing to fit, and the defaults would be written back as a fit",
                                 "give at least one measured expert-parallel iteration"))
    out_dir = Path(output).resolve().parent
    if not out_dir.is_dir():
        raise InputError(Problem("", "--output", f"folder {out_dir} does not exist", "create it or write elsewhere (-o FILE)"))
    base = _calibration(cal_name)
    warnings: list[str] = []
    fitted = fit_moe_calibration(rows, cat.models, cat.devices, base, base.moe if base is not None else None, warnings=warnings, file=rows_csv)
    import numpy as np

    pred = predict_moe_rows(rows, cat.models, cat.devices, fitted, base)
    err = float(np.mean(np.abs(pred / np.array([float(r["step_ms"]) for r in rows]) - 1.0)))
    if not math.isfinite(err):
        raise InputError(Problem(rows_csv, "", "the fitted model does not predict every row (a non-finite prediction): nothing written",
                                 "check the rows for absurd values"))
    cal = (base or Calibration(name="moe", engines={})).model_copy(update={"moe": fitted})
    try:
        save_calibration(cal, output)
    except OSError as exc:
        raise InputError(Problem("", "--output", f"cannot write {output}: {exc.strerror or exc}", "give a writable path (-o FILE)")) from None
    fields = moe_fit_fields(rows, cat.models, cat.devices, base, base.moe if base is not None else None, fitted)
    if as_json:
        echo_json({"file": output, "rows": len(rows), "mape": err, "moe": fitted.model_dump(mode="json"), "fields": fields, "warnings": warnings})
        return
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    shown = ", ".join(f"{n} {f['value']:.3f} ({f['status']})" for n, f in fields.items())
    click.echo(f"fitted on {len(rows)} rows: {shown}; mean |pred/meas - 1| {err:.1%}\nwrote {output}")


COMMANDS = [estimate, calibrate, validate_perf, convert_measurements, calibrate_moe]
