"""Predict measured closed-loop rows and score the predictions (``planner validate-perf``).

:func:`prepare_rows` resolves each row against the catalog once (instance constants as stacked
arrays, or a ``reason`` why the row cannot be predicted); :func:`predict_prepared` evaluates
every predictable row in one vectorised call, so ~1,000 rows take milliseconds and the
calibration fit can call it hundreds of times.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.perf.calibration import PUBLISHED_DEFAULT, Calibration, EngineCalibration
from planner.perf.closed_loop import EngineArrays, predict_agg, predict_disagg
from planner.perf.kv_infer import KV_SOURCES, with_inferred_kv
from planner.perf.measurements import PRECISIONS
from planner.perf.roofline import InstanceArrays, instance_arrays

ENGINE_FIELDS = ("eta_f", "eta_b", "step_overhead_ms", "layer_overhead_us", "mixed_prefill", "prefill_token_budget")


@dataclass
class Prepared:
    rows: list[dict[str, Any]]
    reasons: list[str]
    agg_idx: np.ndarray
    agg_inst: InstanceArrays | None
    dis_idx: np.ndarray
    dis_prefill: InstanceArrays | None
    dis_decode: InstanceArrays | None
    dis_link: np.ndarray


def _row_reason(row: dict[str, Any], catalog: Catalog) -> str:
    """Why ``row`` cannot be predicted (``""``: it can): first a number the reader found out of bounds
    (``skip_reason``, :data:`planner.perf.measurements.BOUNDS`), then what the catalog lacks."""
    if row.get("skip_reason"):
        return str(row["skip_reason"])
    for f in ("device", "model", "engine", "precision"):
        if not row.get(f):
            return f"missing {f}"
    if row["device"] not in catalog.devices:
        return f"unknown device {row['device']!r}"
    if row["model"] not in catalog.models:
        return f"unknown model {row['model']!r}"
    for f in ("precision", "kv_precision"):
        if row[f] not in PRECISIONS:
            return f"unknown {f} {row[f]!r} (use {', '.join(PRECISIONS)})"
    if not row.get("isl") or not row.get("osl"):
        return "isl and osl must be positive"
    if row.get("mode") == "disagg":
        need = ("prefill_tp", "prefill_workers", "decode_tp", "decode_workers", "decode_batch")
        miss = [f for f in need if not row.get(f)]
        if miss:
            return f"disagg row lacks {', '.join(miss)}"
    elif row.get("mode") != "agg":
        return f"unknown mode {row.get('mode')!r} (use agg or disagg)"
    elif not row.get("tp") or not row.get("concurrency"):
        return "agg row needs tp and concurrency"
    missing = catalog.devices[row["device"]].missing_for_serving()
    missing = [m for m in missing if m in ("memory_gb", "memory_bandwidth_gb_per_s", "peak_tflops_dense")]
    if missing:
        return f"device {row['device']!r} lacks {', '.join(missing)}"
    return ""


def prepare_rows(rows: list[dict[str, Any]], catalog: Catalog) -> Prepared:
    """Rows resolved against the catalog; a KV type the file does not record is inferred first
    (:func:`planner.perf.kv_infer.with_inferred_kv`; ``Prepared.rows`` holds the rows as predicted)."""
    rows = with_inferred_kv(rows, catalog)
    cache: dict[tuple[str, str, int, str, str], InstanceArrays] = {}

    def inst(row: dict[str, Any], tp: int) -> InstanceArrays:
        key = (row["model"], row["device"], tp, row["precision"], row["kv_precision"])
        if key not in cache:
            cache[key] = instance_arrays(catalog.models[row["model"]], catalog.devices[row["device"]], tp, row["precision"], row["kv_precision"])
        return cache[key]

    reasons: list[str] = []
    agg: list[int] = []
    agg_i: list[InstanceArrays] = []
    dis: list[int] = []
    dis_p: list[InstanceArrays] = []
    dis_d: list[InstanceArrays] = []
    links: list[float] = []
    for i, row in enumerate(rows):
        reason = _row_reason(row, catalog)
        if not reason:
            try:
                if row["mode"] == "disagg":
                    dis_p.append(inst(row, int(row["prefill_tp"])))
                    dis_d.append(inst(row, int(row["decode_tp"])))
                    dev = catalog.devices[row["device"]]
                    links.append((dev.nic_bw_gb_per_s or 25.0) * 1e9 * int(row["prefill_tp"]))
                    dis.append(i)
                else:
                    agg_i.append(inst(row, int(row["tp"])))
                    agg.append(i)
            except ValueError as exc:
                reason = str(exc)
        reasons.append(reason)
    return Prepared(
        rows, reasons, np.array(agg, dtype=int), InstanceArrays.stack(agg_i) if agg_i else None,
        np.array(dis, dtype=int), InstanceArrays.stack(dis_p) if dis_p else None,
        InstanceArrays.stack(dis_d) if dis_d else None, np.array(links),
    )


def engine_arrays(cals: list[EngineCalibration]) -> EngineArrays:
    return EngineArrays(
        eta_f=np.array([c.eta_f for c in cals]),
        eta_b=np.array([c.eta_b for c in cals]),
        step_overhead_s=np.array([c.step_overhead_ms * 1e-3 for c in cals]),
        layer_overhead_s=np.array([c.layer_overhead_us * 1e-6 for c in cals]),
        seq_overhead_s=np.array([c.seq_overhead_us * 1e-6 for c in cals]),
        allreduce_overhead_s=np.array([c.allreduce_overhead_us * 1e-6 for c in cals]),
        admit_share=np.array([c.admit_share for c in cals]),
        ttft_overhead_s=np.array([c.ttft_overhead_ms * 1e-3 for c in cals]),
        eta_link=np.array([c.eta_link for c in cals]),
        cohort_exponent=np.array([c.cohort_exponent for c in cals]),
        mixed=np.array([c.mixed_prefill for c in cals]),
        budget_tokens=np.array([float(c.prefill_token_budget) for c in cals]),
        kv_share_of_free=np.array([c.kv_share_of_free for c in cals]),
        kv_reserve_peak=np.array([c.kv_reserve_peak for c in cals]),
        kv_preempt=np.array([c.kv_preempt for c in cals]),
        memory_fraction=np.array([np.nan if c.memory_fraction is None else c.memory_fraction for c in cals], dtype=float),
        workspace_gb=np.array([c.workspace_gb for c in cals]),
        kv_block_tokens=np.array([float(c.kv_block_tokens) for c in cals]),
    )


def calibration_for_rows(prep: Prepared, idx: np.ndarray, calibration: Calibration | None) -> tuple[EngineArrays, list[str]]:
    """Engine parameters for the rows ``idx`` (one array entry per row) and each row's source
    label; resolved once per distinct engine and spread to its rows."""
    engines = np.array([str(prep.rows[i]["engine"]) for i in idx])
    uniq, inverse = np.unique(engines, return_inverse=True)
    cals: list[EngineCalibration] = []
    labels: list[str] = []
    for engine in uniq:
        if calibration is None:
            cals.append(PUBLISHED_DEFAULT)
            labels.append("roofline")
        else:
            c, label = calibration.for_engine(str(engine))
            cals.append(c)
            labels.append(label)
    per_engine = engine_arrays(cals)
    spread = {f.name: np.asarray(getattr(per_engine, f.name))[inverse] for f in fields(EngineArrays)}
    harnesses = getattr(calibration, "harnesses", None) or {}
    if harnesses:
        # closed-loop replay: a row of a known harness takes that harness's TTFT overhead and cohorts
        ttft = spread["ttft_overhead_s"].astype(float).copy()
        kappa = spread["cohort_exponent"].astype(float).copy()
        layer = spread["layer_overhead_s"].astype(float).copy()
        seq = spread["seq_overhead_s"].astype(float).copy()
        for j, i in enumerate(idx):
            h = harnesses.get(str(prep.rows[i].get("harness") or ""))
            if h is not None:
                if h.ttft_overhead_ms is not None:
                    ttft[j] = h.ttft_overhead_ms * 1e-3
                kappa[j] = h.cohort_exponent
                if str(prep.rows[i].get("engine")) in h.engines:
                    if h.layer_overhead_us is not None:
                        layer[j] = h.layer_overhead_us * 1e-6
                    if h.seq_overhead_us is not None:
                        seq[j] = h.seq_overhead_us * 1e-6
        spread["ttft_overhead_s"], spread["cohort_exponent"] = ttft, kappa
        spread["layer_overhead_s"], spread["seq_overhead_s"] = layer, seq
    return EngineArrays(**spread), [labels[j] for j in inverse]


def predict_prepared(prep: Prepared, calibration: Calibration | None) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """Predicted TTFT and TPOT (ms; NaN where not predictable), the reasons and sources per row."""
    n = len(prep.rows)
    ttft = np.full(n, np.nan)
    tpot = np.full(n, np.nan)
    reasons = list(prep.reasons)
    sources = [""] * n
    if prep.agg_inst is not None:
        eng, srcs = calibration_for_rows(prep, prep.agg_idx, calibration)
        users = np.array([prep.rows[i]["concurrency"] for i in prep.agg_idx], dtype=float)
        isl = np.array([prep.rows[i]["isl"] for i in prep.agg_idx], dtype=float)
        osl = np.array([prep.rows[i]["osl"] for i in prep.agg_idx], dtype=float)
        res = predict_agg(prep.agg_inst, eng, users, isl, osl)
        _store(prep, prep.agg_idx, res.ttft_s, res.tpot_s, res.feasible, srcs, ttft, tpot, reasons, sources)
    if prep.dis_prefill is not None and prep.dis_decode is not None:
        eng, srcs = calibration_for_rows(prep, prep.dis_idx, calibration)
        r = [prep.rows[i] for i in prep.dis_idx]
        res = predict_disagg(
            prep.dis_prefill, prep.dis_decode, eng,
            np.array([x["prefill_workers"] for x in r], dtype=float), np.array([x["decode_workers"] for x in r], dtype=float),
            np.array([x["decode_batch"] for x in r], dtype=float), np.array([x["isl"] for x in r], dtype=float),
            np.array([x["osl"] for x in r], dtype=float), prep.dis_link,
        )
        _store(prep, prep.dis_idx, res.ttft_s, res.tpot_s, res.feasible, srcs, ttft, tpot, reasons, sources)
    return ttft, tpot, reasons, sources


def _store(prep: Prepared, idx: np.ndarray, t1: np.ndarray, t2: np.ndarray, ok: np.ndarray, srcs: list[str],
           ttft: np.ndarray, tpot: np.ndarray, reasons: list[str], sources: list[str]) -> None:
    ok = np.asarray(ok, dtype=bool)
    ttft[idx[ok]] = 1e3 * np.asarray(t1)[ok]
    tpot[idx[ok]] = 1e3 * np.asarray(t2)[ok]
    for j, i in enumerate(idx):
        sources[i] = srcs[j]
    for i in idx[~ok]:
        reasons[i] = "weights and one sequence's KV do not fit the device memory at this tp"


def error_pct(pred: float, meas: float) -> float | None:
    """``100 (pred / meas - 1)``; ``None`` unless both are finite and ``meas`` above 0."""
    if not (np.isfinite(pred) and np.isfinite(meas) and meas > 0):
        return None
    return float(100 * (pred / meas - 1))


def covered(pred: np.ndarray, meas: np.ndarray) -> int:
    """The rows :func:`mape` covers: predicted, and measured above 0."""
    return int((np.isfinite(pred) & np.isfinite(meas) & (meas > 0)).sum())


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    m = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
    return float(100.0 * np.mean(np.abs(pred[m] / meas[m] - 1.0))) if m.any() else float("nan")


def validate(rows: list[dict[str, Any]], catalog: Catalog, calibration: Calibration | None) -> dict[str, Any]:
    """``{"rows": [...], "summary": {...}}``: every input row, in order, with predictions or a reason."""
    prep = prepare_rows(rows, catalog)
    rows = prep.rows
    ttft, tpot, reasons, sources = predict_prepared(prep, calibration)
    meas_ttft = np.array([r.get("ttft_ms") if r.get("ttft_ms") is not None else np.nan for r in rows], dtype=float)
    meas_tpot = np.array([r.get("tpot_ms") if r.get("tpot_ms") is not None else np.nan for r in rows], dtype=float)
    out_rows: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        item = dict(r)
        item["pred_ttft_ms"] = None if np.isnan(ttft[i]) else float(ttft[i])
        item["pred_tpot_ms"] = None if np.isnan(tpot[i]) else float(tpot[i])
        item["ttft_error_pct"] = error_pct(ttft[i], meas_ttft[i])
        item["tpot_error_pct"] = error_pct(tpot[i], meas_tpot[i])
        item["source"] = sources[i]
        item.pop("skip_reason", None)
        if reasons[i]:
            item["reason"] = reasons[i]
        out_rows.append(item)
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((str(r.get("device")), str(r.get("model")), str(r.get("engine"))), []).append(i)
    per_group = []
    for (dev, mod, eng), idx in sorted(groups.items()):
        ix = np.array(idx)
        per_group.append({
            "device": dev, "model": mod, "engine": eng, "rows": len(idx),
            "predicted": int(np.isfinite(ttft[ix]).sum()),
            "mape_ttft_pct": mape(ttft[ix], meas_ttft[ix]), "mape_tpot_pct": mape(tpot[ix], meas_tpot[ix]),
            "mape_ttft_rows": covered(ttft[ix], meas_ttft[ix]), "mape_tpot_rows": covered(tpot[ix], meas_tpot[ix]),
        })
    summary = {
        "rows": len(rows),
        "predicted": int(np.isfinite(ttft).sum()),
        "not_predicted": int((~np.isfinite(ttft)).sum()),
        "mape_ttft_pct": mape(ttft, meas_ttft),
        "mape_tpot_pct": mape(tpot, meas_tpot),
        "mape_ttft_rows": covered(ttft, meas_ttft),
        "mape_tpot_rows": covered(tpot, meas_tpot),
        "calibration": calibration.name if calibration else "published defaults (no calibration file)",
        "kv_precision_sources": {k: sum(1 for r in rows if r.get("kv_precision_source") == k) for k in KV_SOURCES},
        "kv_inferred_rows": [str(r.get("id") or i) for i, r in enumerate(rows) if r.get("kv_precision_source") == "inferred"],
        "per_group": per_group,
    }
    return {"rows": out_rows, "summary": summary}


def in_sample_files(calibration: Calibration | None, paths: list[str] | tuple[str, ...]) -> list[str]:
    """The input files ``calibration`` was fitted on: those whose sha256 is the one its fit records
    (``fit.data_sha256``; :func:`planner.perf.calibration.file_sha256`). Figures over such a file are
    in sample (the calibration's own residuals), not a validation."""
    from pathlib import Path

    from planner.perf.calibration import file_sha256

    sha = calibration.fit.data_sha256 if calibration is not None and calibration.fit is not None else ""
    if not sha:
        return []
    return [str(p) for p in dict.fromkeys(paths) if Path(p).is_file() and file_sha256(p) == sha]
