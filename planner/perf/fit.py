"""Calibration fit (``planner calibrate``): per engine, least squares on relative error.

For each engine with enough rows (and once pooled over every row, stored as ``default``) we fit
``theta = (eta_f, eta_b, step_overhead_ms, layer_overhead_us, sync_share, admit_share,
ttft_overhead_ms)`` minimising the squared log-ratio (relative error, symmetric in over- and
under-prediction, and robust to the few rows a closed loop's transient dominates)::

    sum_rows log(pred_ttft / meas_ttft)^2 + log(pred_tpot / meas_tpot)^2

with a small Levenberg-Marquardt loop on transformed parameters (logit for the efficiencies,
log for the overheads; numeric Jacobian — seven parameters, each evaluation one vectorised call
over every row). The scheduler facts ``mixed_prefill`` and ``prefill_token_budget`` come from
:data:`ENGINE_SCHEDULERS` and are not fitted. Rows that cannot be predicted are skipped and
counted in the fit record.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.perf.calibration import (
    PUBLISHED_DEFAULT,
    Calibration,
    EngineCalibration,
    FitRecord,
    file_sha256,
)
from planner.perf.validate import Prepared, mape, predict_prepared, prepare_rows

ENGINE_SCHEDULERS: dict[str, dict[str, Any]] = {
    "trtllm": {"mixed_prefill": True, "prefill_token_budget": 8192},
    "vllm": {"mixed_prefill": True, "prefill_token_budget": 8192},
    "sglang": {"mixed_prefill": False, "prefill_token_budget": 8192},
    "default": {"mixed_prefill": True, "prefill_token_budget": 8192},
}
"""Documented scheduler defaults (see :mod:`planner.perf.calibration`)."""
MIN_ROWS_PER_ENGINE = 20
"""An engine with fewer usable rows is not fitted on its own; it uses ``default``."""


def _to_theta(c: EngineCalibration) -> np.ndarray:
    def logit(x: float) -> float:
        return float(np.log(x / (1 - x)))

    return np.array([logit(c.eta_f), logit(c.eta_b), np.log(max(c.step_overhead_ms, 1e-3)),
                     np.log(max(c.layer_overhead_us, 1e-2)), logit(min(max(c.sync_share, 1e-3), 3.999) / 4.0),
                     logit(min(max(c.admit_share, 1e-3), 3.999) / 4.0), np.log(max(c.ttft_overhead_ms, 1.0))])


def _from_theta(theta: np.ndarray, engine: str, source: str) -> EngineCalibration:
    sig = 1.0 / (1.0 + np.exp(-theta))
    sched = ENGINE_SCHEDULERS.get(engine, ENGINE_SCHEDULERS["default"])
    return EngineCalibration(
        eta_f=float(np.clip(sig[0], 1e-3, 1.0)), eta_b=float(np.clip(sig[1], 1e-3, 1.0)),
        step_overhead_ms=float(np.exp(theta[2])), layer_overhead_us=float(np.exp(theta[3])),
        sync_share=float(4.0 * sig[4]), admit_share=float(4.0 * sig[5]), ttft_overhead_ms=float(np.exp(theta[6])),
        source=source, **sched,
    )


def _subset(prep: Prepared, keep: np.ndarray) -> Prepared:
    """Rows outside ``keep`` are marked unpredictable so predictions skip them."""
    reasons = [r if keep[i] else (r or "excluded") for i, r in enumerate(prep.reasons)]
    return replace(prep, reasons=reasons)


def _residuals(prep: Prepared, mask: np.ndarray, cal_of: Any, meas_ttft: np.ndarray, meas_tpot: np.ndarray) -> np.ndarray:
    ttft, tpot, _, _ = predict_prepared(prep, cal_of)
    with np.errstate(divide="ignore", invalid="ignore"):
        r1 = np.log(ttft[mask] / meas_ttft[mask])
        r2 = np.log(tpot[mask] / meas_tpot[mask])
    r = np.concatenate([r1, r2])
    return np.where(np.isfinite(r), np.clip(r, -5.0, 5.0), 5.0)


def _fit_one(prep: Prepared, mask: np.ndarray, engine: str, meas_ttft: np.ndarray, meas_tpot: np.ndarray, iters: int = 40) -> EngineCalibration:
    """Levenberg-Marquardt over the seven transformed parameters for the rows in ``mask``."""
    label = f"fit:{engine}"

    def cal_for(theta: np.ndarray) -> Calibration:
        c = _from_theta(theta, engine, label)
        # every row in the mask is evaluated with this engine's parameters, but its own scheduler
        sched = {e: c.model_copy(update=ENGINE_SCHEDULERS.get(e, ENGINE_SCHEDULERS["default"])) for e in ENGINE_SCHEDULERS}
        return _AnyEngine(c, sched)  # type: ignore[return-value]

    theta = _to_theta(PUBLISHED_DEFAULT)
    res = _residuals(prep, mask, cal_for(theta), meas_ttft, meas_tpot)
    cost = float(res @ res)
    lam = 1e-2
    for _ in range(iters):
        jac = np.empty((res.size, theta.size))
        for j in range(theta.size):
            step = np.zeros_like(theta)
            step[j] = 1e-4
            jac[:, j] = (_residuals(prep, mask, cal_for(theta + step), meas_ttft, meas_tpot) - res) / 1e-4
        g = jac.T @ res
        h = jac.T @ jac
        improved = False
        for _ in range(8):
            delta = -np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-9), g)
            cand = theta + np.clip(delta, -2.0, 2.0)
            r_c = _residuals(prep, mask, cal_for(cand), meas_ttft, meas_tpot)
            c_c = float(r_c @ r_c)
            if c_c < cost:
                theta, res, cost, lam, improved = cand, r_c, c_c, max(lam / 3.0, 1e-6), True
                break
            lam *= 4.0
        if not improved or float(np.abs(g).max()) < 1e-6:
            break
    return _from_theta(theta, engine, label)


class _AnyEngine:
    """A calibration stand-in that returns one engine's efficiencies for every row (with the
    row's own scheduler), used while fitting pooled or per-engine parameters."""

    name = "fit"

    def __init__(self, cal: EngineCalibration, by_engine: dict[str, EngineCalibration]) -> None:
        self.cal = cal
        self.by_engine = by_engine

    def for_engine(self, engine: str) -> tuple[EngineCalibration, str]:
        return self.by_engine.get(engine, self.by_engine["default"]), "fit"


def fit_calibration(rows: list[dict[str, Any]], catalog: Catalog, *, name: str, data_file: str | Path,
                    min_rows: int = MIN_ROWS_PER_ENGINE, train_mask: np.ndarray | None = None) -> Calibration:
    """Fit per-engine calibrations (engines with ``>= min_rows`` usable rows) and a pooled ``default``."""
    prep = prepare_rows(rows, catalog)
    meas_ttft = np.array([r["ttft_ms"] if r.get("ttft_ms") is not None else np.nan for r in rows], dtype=float)
    meas_tpot = np.array([r["tpot_ms"] if r.get("tpot_ms") is not None else np.nan for r in rows], dtype=float)
    usable = np.array([not r for r in prep.reasons]) & np.isfinite(meas_ttft) & np.isfinite(meas_tpot) & (meas_ttft > 0) & (meas_tpot > 0)
    if train_mask is not None:
        usable &= train_mask
    engines_all = np.array([str(r.get("engine")) for r in rows])
    fitted: dict[str, EngineCalibration] = {}
    pooled_prep = _subset(prep, usable)
    if usable.sum() >= 3:
        fitted["default"] = _fit_one(pooled_prep, usable, "default", meas_ttft, meas_tpot)
    for engine in sorted(set(engines_all[usable])):
        mask = usable & (engines_all == engine)
        if mask.sum() >= min_rows:
            fitted[engine] = _fit_one(_subset(prep, mask), mask, engine, meas_ttft, meas_tpot)
    if not fitted:
        from planner.errors import InputError

        raise InputError(f"no usable rows to calibrate on ({int(usable.sum())} predictable rows with ttft_ms and tpot_ms)", file=str(data_file))
    cal = Calibration(name=name, engines=fitted)
    ttft, tpot, _, _ = predict_prepared(prep, cal)
    by_engine_ttft = {e: mape(ttft[usable & (engines_all == e)], meas_ttft[usable & (engines_all == e)]) for e in sorted(set(engines_all[usable]))}
    by_engine_tpot = {e: mape(tpot[usable & (engines_all == e)], meas_tpot[usable & (engines_all == e)]) for e in sorted(set(engines_all[usable]))}
    by_engine_ttft["all"] = mape(ttft[usable], meas_ttft[usable])
    by_engine_tpot["all"] = mape(tpot[usable], meas_tpot[usable])
    record = FitRecord(
        data_file=str(data_file), data_sha256=file_sha256(data_file) if Path(data_file).exists() else "",
        rows_used=int(usable.sum()), rows_skipped=int(len(rows) - usable.sum()), engines_fitted=sorted(fitted),
        objective="least squares on relative error of TTFT and TPOT (Levenberg-Marquardt)",
        mape_ttft_pct={k: round(v, 2) for k, v in by_engine_ttft.items()},
        mape_tpot_pct={k: round(v, 2) for k, v in by_engine_tpot.items()},
        notes=f"in-sample residuals; fitted {_dt.date.today().isoformat()}",
    )
    return cal.model_copy(update={"fit": record, "description": f"fitted on {Path(data_file).name}"})
