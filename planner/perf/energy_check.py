"""Check predicted throughput, power and J per output token against measured serving runs
(``planner validate-energy``), in sample and out of sample by model (the benchmark).

Per predictable run (:mod:`planner.perf.energy_runs`)::

    pred_output_tokens_per_s   = D OSL / T_cyc                      (steady state at the batch cap)
    pred_power_w_per_gpu       = P(L) of the device's curve         (:mod:`planner.perf.power`)
    pred_j_per_output_token    = pred_power_w_per_gpu x gpu_count / pred_output_tokens_per_s

MAPE = mean |pred / measured - 1| x 100 over the predicted runs of a group; groups are
(GPU, model family), the family being the catalog model a run maps to.

A run predicted on something other than what its row states (a pipeline-parallel layout as TP over all
GPUs, a precision the model lacks at its native one: :attr:`planner.perf.energy_runs.RunConfig.approximations`)
carries it in its row's ``approximation`` and is counted by kind in ``approximated_by_kind``. A
run whose measured J per output token contradicts its power x GPUs / tokens/s (beyond
:data:`~planner.perf.energy_runs.JTOK_RTOL`) is predicted (the power fit skips it), its row's
``inconsistency`` naming both figures, counted in ``inconsistent``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.perf.energy_runs import (
    JTOK_REASON,
    JTOK_RTOL,
    MULTIMODAL_INPUTS,
    RunConfig,
    approximation_kind,
    predict_runs,
    resolve_runs,
)
from planner.perf.power import PowerCalibration, curve_for, curve_power_w, load_fraction
from planner.perf.power_fit import fit_power, stack_calibration


def _mape(pred: list[float], meas: list[float]) -> float:
    if not meas:
        return float("nan")
    return float(100.0 * np.mean(np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)))


def predict_energy(rows: list[dict[str, Any]], catalog: Catalog, cal: PowerCalibration, *,
                   expert_parallel_as_tp: bool = False) -> list[dict[str, Any]]:
    """One output row per input row: measured and predicted figures, or the reason it is skipped."""
    runs, reasons, insts = resolve_runs(rows, catalog, expert_parallel_as_tp=expert_parallel_as_tp)
    pred = predict_runs(runs, insts, stack_calibration(cal))
    out: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        out.append({"row": i, "source": r.get("source", ""), "gpu": r.get("gpu", ""), "model": r.get("model", ""),
                    "task": r.get("task", ""), "gpu_count": r.get("gpu_count", ""),
                    "batch_cap": r.get("batch_cap_max_num_seqs", ""), "model_family": "", "device": "", "predicted": False,
                    "reason": reasons[i], "approximation": "", "approximation_kinds": [], "inconsistency": ""})
    for j, run in enumerate(runs):
        o = out[run.index]
        dev_id = run.device.split("@")[0]
        o.update({"model_family": run.model if not run.derived_input else f"{run.model} +{o['task']} (derived input)",
                  "input_basis": "derived input size" if run.derived_input else "recorded or task mean",
                  "derived_input": run.derived_input, "encode_s_per_request": run.encode_s, "profile": run.profile,
                  "device": dev_id, "stack": run.engine, "assumed_input_tokens": run.isl,
                  "output_tokens": run.osl, "meas_output_tokens_per_s": run.meas_tok_per_s,
                  "meas_j_per_output_token": run.meas_j_per_tok, "meas_power_w_per_gpu": run.meas_power_w_per_gpu,
                  "approximation": "; ".join(run.approximations),
                  "approximation_kinds": list(dict.fromkeys(approximation_kind(a) for a in run.approximations)),
                  "inconsistency": run.inconsistency})
        if not pred.feasible[j]:
            o["reason"] = "weights and one sequence's KV do not fit the GPUs"
            continue
        curve = curve_for(catalog.devices[dev_id], cal, run.engine)
        if curve is None:
            o["reason"] = f"no power curve for {dev_id} (no TDP or no calibration)"
            continue
        tdp = float(catalog.devices[dev_id].tdp_w or 0.0)
        p = float(curve_power_w(curve, tdp, load_fraction(curve, pred.compute_s[j], pred.memory_s[j], pred.total_s[j], pred.rows[j])))
        tok = float(pred.tok_per_s[j])
        o.update({"predicted": True, "reason": "", "running_batch": float(pred.running[j]),
                  "pred_output_tokens_per_s": tok, "pred_power_w_per_gpu": p,
                  "pred_j_per_output_token": p * run.gpu_count / tok})
    return out


def _reason_class(reason: str) -> str:
    """Reasons without the row's own figures, so that they count up: a model the catalog lacks by
    its name (``model 'x' is not in the catalog ...`` -> ``model not in the catalog: x``), a
    multimodal run by its task and what the file lacks (:data:`~planner.perf.energy_runs.MULTIMODAL_INPUTS`)."""
    if reason.startswith(JTOK_REASON):
        return f"{JTOK_REASON} (beyond {100 * JTOK_RTOL:g} %)"
    if reason.startswith("model ") and ("cannot model" in reason or "not modelled" in reason):
        return f"model architecture not modelled ({reason.rsplit(': ', 1)[-1]})"
    if reason.startswith("model ") and " is not in the catalog" in reason:
        return f"model not in the catalog: {reason.split(' is not in the catalog', 1)[0].removeprefix('model ').strip(chr(39))}"
    if reason.startswith("task ") and "image/video tokens are not recorded" in reason:
        task = reason.removeprefix("task ").split(":", 1)[0].strip("'")
        why = reason.split("; model ", 1)[1].split(": ", 1)[1] if "; model " in reason else ""
        return (f"multimodal task {task!r}: image/video prompt tokens not recorded ({MULTIMODAL_INPUTS.get(task, 'unknown task')})"
                + (f": {why}" if why else ""))
    for head, text in (("model ", "model not in the catalog"), ("GPU ", "GPU has no catalog device"),
                       ("task ", "multimodal task: image/video prompt tokens not recorded"), ("record_type ", "not a steady-state serving run"),
                       ("expert-parallel run ", "expert-parallel replica not possible"),
                       ("expert-parallel", "expert-parallel run: the roofline models tensor parallelism only")):
        if reason.startswith(head):
            return text
    return reason


def count_reasons(reasons: list[str]) -> dict[str, int]:
    """Non-empty skip reasons counted by class (:func:`_reason_class`), most frequent first."""
    counts: dict[str, int] = {}
    for reason in reasons:
        if reason:
            key = _reason_class(reason)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def count_approximations(kinds: list[list[str]]) -> dict[str, int]:
    """Runs counted by kind of approximation (a row's ``approximation_kinds``,
    :func:`~planner.perf.energy_runs.approximation_kind`): a run with two kinds counts under each."""
    counts: dict[str, int] = {}
    for per_run in kinds:
        for kind in per_run:
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def summarize(out: list[dict[str, Any]]) -> dict[str, Any]:
    """MAPE per (GPU, serving stack, model family) and pooled, with the skipped rows counted by reason."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for o in out:
        if o["predicted"]:
            groups.setdefault((o["gpu"], o["stack"], o["model_family"]), []).append(o)
    def block(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"runs": len(items),
                "mape_j_per_output_token_pct": _mape([x["pred_j_per_output_token"] for x in items], [x["meas_j_per_output_token"] for x in items]),
                "mape_output_tokens_per_s_pct": _mape([x["pred_output_tokens_per_s"] for x in items], [x["meas_output_tokens_per_s"] for x in items]),
                "mape_power_pct": _mape([x["pred_power_w_per_gpu"] for x in items], [x["meas_power_w_per_gpu"] for x in items])}
    predicted = [o for o in out if o["predicted"]]
    derived = [o for o in predicted if o.get("derived_input")]
    return {"rows": len(out), "predicted": len(predicted), "skipped": len(out) - len(predicted),
            "skipped_by_reason": count_reasons([o["reason"] for o in out if not o["predicted"]]),
            "approximated_by_kind": count_approximations([o.get("approximation_kinds", []) for o in predicted]),
            "inconsistent": count_reasons([o.get("inconsistency", "") for o in predicted]),
            "pooled": block(predicted),
            "derived_input": block(derived),
            "by_gpu_family": [{"gpu": g, "stack": st, "model_family": f, **block(v)} for (g, st, f), v in sorted(groups.items())]}


def validate_energy(rows: list[dict[str, Any]], catalog: Catalog, cal: PowerCalibration, *,
                    expert_parallel_as_tp: bool = False) -> dict[str, Any]:
    """``{"rows": [...], "summary": {...}}`` (one row per input row)."""
    out = predict_energy(rows, catalog, cal, expert_parallel_as_tp=expert_parallel_as_tp)
    return {"rows": out, "summary": summarize(out)}


def out_of_sample_by_model(rows: list[dict[str, Any]], catalog: Catalog, *, source: str, gpu: str,
                           expert_parallel_as_tp: bool = False) -> dict[str, Any]:
    """Hold out each catalog model in turn: fit throughput and power on the other models' runs
    of ``source`` on ``gpu`` (never on derived-input multimodal runs), predict the held-out model's
    runs. Pooled and per-model MAPE; ``derived_input``: the same over the multimodal runs alone."""
    sel = [r for r in rows if r.get("source") == source and r.get("gpu") == gpu]
    runs: list[RunConfig]
    runs, _reasons, _insts = resolve_runs(sel, catalog, expert_parallel_as_tp=expert_parallel_as_tp)
    family = {run.index: run.model for run in runs}
    derived = {run.index for run in runs if run.derived_input}
    held: list[dict[str, Any]] = []
    for model in sorted(set(family.values())):
        # the fits never see a derived-input (multimodal) run: those are predicted, not tuned on
        train = [r for k, r in enumerate(sel) if family.get(k) not in (None, model) and k not in derived]
        test = [r for k, r in enumerate(sel) if family.get(k) == model]
        cal = fit_power(train, catalog, name=f"without-{model}", expert_parallel_as_tp=expert_parallel_as_tp)
        held += [o for o in predict_energy(test, catalog, cal, expert_parallel_as_tp=expert_parallel_as_tp) if o["predicted"]]
    summary = summarize(held)
    return {"source": source, "gpu": gpu, "held_out_runs": len(held), "pooled": summary["pooled"],
            "derived_input": summary["derived_input"], "by_gpu_family": summary["by_gpu_family"]}
