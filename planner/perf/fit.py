"""Calibration fit (``planner calibrate``): per engine, least absolute log-ratio.

For each engine with enough rows (and once pooled over every row, stored as ``default``) we fit
the fields in :data:`FITTED` (``eta_f, eta_b, layer_overhead_us, seq_overhead_us,
allreduce_overhead_us, ttft_overhead_ms, eta_link, cohort_exponent``; the last only for engines
with mixed prefill) minimising the summed absolute log-ratio (least absolute deviations of the
relative error: symmetric in over- and under-prediction, and a row the model cannot explain — a
closed loop's transient, a benchmark artefact — pulls the fit by its sign, not by its size)::

    sum_rows |log(pred_ttft / meas_ttft)| + |log(pred_tpot / meas_tpot)|

Round 7 replaced the squared log-ratio by this: out of sample (fit on two models, predict the
third) TTFT / TPOT MAPE went from 34.1 / 12.7 % to 31.8 / 13.3 %; round 8 added ``eta_link`` and
``cohort_exponent``: 28.5 / 13.0 % (in sample 23.5 / 8.9 %; README). The minimiser is the shared
bounded least-squares routine :func:`planner.perf.lsq.fit_least_squares` (issue 25: one routine for
every calibration; it replaced a hand-written Levenberg-Marquardt loop on logit/log-transformed
parameters) on the residuals ``sign(l) sqrt(|l| + L1_EPS)`` of each log-ratio ``l`` (their squares
sum to the objective plus a constant), in the parameters' own units within the bounds of
:data:`FITTED` (numeric Jacobian — each evaluation one vectorised call over the engine's rows). A
parameter that ends on a bound, one that changes no residual, and a Jacobian of lower rank than the
parameters are warnings (:attr:`FitRecord.warnings`, printed by ``planner calibrate``). The cohort
term is piecewise in its exponent, so the fit starts from each of :data:`COHORT_STARTS`, runs
:data:`PROBE_ITERS` iterations, and carries the best training objective to convergence. The scheduler facts ``mixed_prefill`` and
``prefill_token_budget`` come from :data:`ENGINE_SCHEDULERS` and are not fitted. Rows that cannot
be predicted are skipped and counted in the fit record.

Round 9: rows are fitted in a canonical order (:func:`canonical_order`), so a refit reproduces a
file whatever the input order; after the engines, each harness with enough rows gets its own
closed-loop ``ttft_overhead_ms`` and ``cohort_exponent`` (:func:`_fit_harness`, engines fixed), and
an engine's own ``ttft_overhead_ms`` becomes the lowest of its harnesses'; the fit records the error
per (device, engine) (:func:`error_bands`; since issue 25 out of sample, :func:`leave_one_group_out_bands`,
when ``fit_calibration(out_of_sample=True)`` as ``planner calibrate`` calls it).
:func:`leave_one_device_out` backs ``validate-perf --leave-one-device-out``.

Round 10: ``allreduce_overhead_us`` is no longer fitted (0 unless a user sets it): the H100 rows of
the 70B model (tp 2-8 only) cannot tell a cost per all-reduce (160 per step, whatever the tp) from a
cost per layer, the fit put vLLM's overhead into the all-reduce, and the H200 tp 1 rows — no
all-reduce — show the same ~7 ms per step. A harness of one engine also gets its engine version's
per-layer and per-sequence overheads (:data:`FIT_HARNESS_OVERHEADS`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.perf.calibration import (
    PUBLISHED_DEFAULT,
    Calibration,
    EngineCalibration,
    ErrorBand,
    FitRecord,
    HarnessCalibration,
    file_sha256,
)
from planner.perf.lsq import LsqResult, fit_least_squares, fit_warnings
from planner.perf.validate import Prepared, mape, predict_prepared, prepare_rows

ENGINE_SCHEDULERS: dict[str, dict[str, Any]] = {
    "trtllm": {"mixed_prefill": True, "prefill_token_budget": 8192, "kv_share_of_free": True, "kv_reserve_peak": True,
               "memory_fraction": 0.9, "workspace_gb": 3.0, "kv_block_tokens": 32},
    "vllm": {"mixed_prefill": True, "prefill_token_budget": 8192, "kv_share_of_free": False, "kv_reserve_peak": False, "kv_preempt": True,
             "memory_fraction": 0.9, "workspace_gb": 3.0, "kv_block_tokens": 16},
    "sglang": {"mixed_prefill": False, "prefill_token_budget": 8192, "kv_share_of_free": False, "kv_reserve_peak": False,
               "memory_fraction": None, "workspace_gb": 0.0, "kv_block_tokens": 1, "cohort_exponent": 1.0},
    "default": {"mixed_prefill": True, "prefill_token_budget": 8192, "kv_share_of_free": False, "kv_reserve_peak": False,
                "memory_fraction": 0.9, "workspace_gb": 3.0, "kv_block_tokens": 16},
}
"""Documented scheduler and memory defaults (see :mod:`planner.perf.calibration`): TensorRT-LLM
``KvCacheConfig.free_gpu_memory_fraction`` 0.9 and ``tokens_per_block`` 32 (nvidia.github.io/TensorRT-LLM,
llm-api reference ``KvCacheConfig``); vLLM ``gpu_memory_utilization`` 0.9 and ``CacheConfig.DEFAULT_BLOCK_SIZE``
16 (docs.vllm.ai ``vllm.config.cache``; the default became 0.92 after the versions in the shipped data);
SGLang automatic ``mem_fraction_static`` (reserve by device class, ``server_args.py``) and ``page_size`` 1.
``workspace_gb`` 3: activations, CUDA graphs and buffers (``planner.perf.roofline.RESERVE_GB``)."""
L1_EPS = 1e-4
"""Smoothing of ``|l|`` at 0 in the least-absolute-deviation residuals (``sqrt(|l| + eps)``):
keeps the Jacobian finite for a row predicted exactly; 1e-4 is 1 % of a 1 % error's weight."""
MIN_ROWS_TO_FIT = 3
"""The fewest usable rows (predictable, with a measured TTFT and TPOT) the pooled fit takes."""
MIN_ROWS_PER_ENGINE = 20
"""An engine with fewer usable rows is not fitted on its own; it uses ``default``."""


FITTED: tuple[tuple[str, float, float], ...] = (
    ("eta_f", 1e-3, 1.0),
    ("eta_b", 1e-3, 1.0),
    ("layer_overhead_us", 0.0, math.inf),
    ("seq_overhead_us", 0.0, math.inf),
    # allreduce_overhead_us: not fitted since round 10 (see README)
    ("ttft_overhead_ms", 0.0, math.inf),
    ("eta_link", 1e-3, 1.0),
    ("cohort_exponent", 0.0, 1.0),
)
"""Fitted fields: (name, lower bound, upper bound). Efficiencies are fractions of a datasheet peak
(at most 1), overheads are non-negative times; a value that ends on a bound is reported
(:attr:`planner.perf.lsq.LsqResult.at_bound`, :attr:`FitRecord.warnings`)."""
START = {"seq_overhead_us": 20.0, "allreduce_overhead_us": 5.0, "step_overhead_ms": 1.0, "ttft_overhead_ms": 20.0,
         "layer_overhead_us": 1e-2}
"""Starting values for the overheads (the published defaults leave them at 0)."""
COHORT_STARTS = (0.1, 0.3, 0.6)
"""Starting values of ``cohort_exponent`` for the multi-start fit (cohorts of ``D^0.1``-``D^0.6``)."""
PROBE_ITERS = 15
"""Trust-region iterations (``max_nfev``) from each start before the best start is carried on."""
FTOL = 1e-8
"""Relative decrease of the objective below which a descent stops (scipy ``ftol``)."""
DIFF_STEP = 1e-4
"""Relative step of the numeric Jacobian (``h = 1e-4 max(1, |x|)``): the cohort staircase and the
KV-slot counts are piecewise in the parameters, a smaller step sees a flat Jacobian."""
MIN_ROWS_PER_HARNESS = 20
"""A harness with fewer usable rows gets no closed-loop parameters of its own (its rows use the engine's)."""


def _free(engine: str) -> tuple[tuple[str, float, float], ...]:
    """The fitted fields for ``engine``: all of :data:`FITTED`, except ``cohort_exponent`` for an
    engine without mixed prefill (its cohorts are a formula; the parameter has no effect there)."""
    mixed = ENGINE_SCHEDULERS.get(engine, ENGINE_SCHEDULERS["default"])["mixed_prefill"]
    return tuple(f for f in FITTED if mixed or f[0] != "cohort_exponent")


def _start(c: EngineCalibration, free: tuple[tuple[str, float, float], ...], start: dict[str, float] | None = None) -> np.ndarray:
    """Starting point: ``c``'s value of each field (efficiencies kept 1e-3 inside their bounds), an
    overhead at least its :data:`START` value."""
    out = []
    for name, lo, hi in free:
        v = float(getattr(c, name)) or (start or START).get(name, 0.0)
        if math.isfinite(hi):
            out.append(min(max(v, lo + 1e-3 * (hi - lo)), hi - 1e-3 * (hi - lo)))
        else:
            out.append(max(v, START.get(name, 0.0)))
    return np.array(out)


def _engine_of(x: np.ndarray, engine: str, source: str, free: tuple[tuple[str, float, float], ...]) -> EngineCalibration:
    sched = ENGINE_SCHEDULERS.get(engine, ENGINE_SCHEDULERS["default"])
    values = {name: float(v) for (name, _lo, _hi), v in zip(free, x, strict=True)}
    return PUBLISHED_DEFAULT.model_copy(update={**values, **sched, "source": source})


def _subset(prep: Prepared, keep: np.ndarray) -> Prepared:
    """Rows outside ``keep`` are marked unpredictable and left out of the prediction arrays."""
    reasons = [r if keep[i] else (r or "excluded") for i, r in enumerate(prep.reasons)]
    agg = keep[prep.agg_idx] if prep.agg_idx.size else np.zeros(0, bool)
    dis = keep[prep.dis_idx] if prep.dis_idx.size else np.zeros(0, bool)
    return replace(
        prep, reasons=reasons,
        agg_idx=prep.agg_idx[agg], agg_inst=prep.agg_inst.take(agg) if prep.agg_inst is not None and agg.any() else None,
        dis_idx=prep.dis_idx[dis], dis_prefill=prep.dis_prefill.take(dis) if prep.dis_prefill is not None and dis.any() else None,
        dis_decode=prep.dis_decode.take(dis) if prep.dis_decode is not None and dis.any() else None,
        dis_link=prep.dis_link[dis] if prep.dis_link.size else prep.dis_link,
    )


def lad_residuals(log_ratio: np.ndarray) -> np.ndarray:
    """``sign(l) sqrt(|l| + L1_EPS)``: residuals whose sum of squares is ``sum |l| + n L1_EPS``, so a
    least-squares solver on them minimises the summed absolute log-ratio (least absolute deviations)."""
    r = np.asarray(log_ratio, dtype=float)
    return np.sign(r) * np.sqrt(np.abs(r) + L1_EPS)


def _minimise(log_ratio_fn: Any, x0: np.ndarray, names: list[str], lower: np.ndarray, upper: np.ndarray, n_iter: int) -> LsqResult:
    """Least absolute log-ratio: :func:`planner.perf.lsq.fit_least_squares` on :func:`lad_residuals`
    (at most ``n_iter`` trust-region iterations; the Jacobian's evaluations are not counted)."""
    return fit_least_squares(lambda x: lad_residuals(log_ratio_fn(x)), x0, names=names, lower=lower, upper=upper,
                             max_nfev=n_iter, diff_step=DIFF_STEP, x_scale=np.maximum(np.abs(x0), 1e-2), ftol=FTOL, xtol=1e-10)


def _log_ratios(prep: Prepared, mask: np.ndarray, cal: Any, meas_ttft: np.ndarray, meas_tpot: np.ndarray) -> np.ndarray:
    ttft, tpot, _, _ = predict_prepared(prep, cal)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.concatenate([np.log(ttft[mask] / meas_ttft[mask]), np.log(tpot[mask] / meas_tpot[mask])])
    return np.where(np.isfinite(r), np.clip(r, -5.0, 5.0), 5.0)


def _fit_one(prep: Prepared, mask: np.ndarray, engine: str, meas_ttft: np.ndarray, meas_tpot: np.ndarray, iters: int = 40,
             warnings: list[str] | None = None) -> EngineCalibration:
    """Bounded least absolute log-ratio over the fields of :data:`FITTED` for the rows in ``mask``,
    started from each of :data:`COHORT_STARTS` (the cohort exponent has local minima: the staircase
    is piecewise in it); the lowest training objective after :data:`PROBE_ITERS` iterations is carried
    to convergence. A field that ends on a bound is appended to ``warnings``."""
    label = f"fit:{engine}"
    free = _free(engine)
    names = [f[0] for f in free]
    lower = np.array([f[1] for f in free])
    upper = np.array([f[2] for f in free])

    def cal_for(x: np.ndarray) -> Calibration:
        c = _engine_of(x, engine, label, free)
        # every row in the mask is evaluated with this engine's parameters, but its own scheduler
        sched = {e: c.model_copy(update=ENGINE_SCHEDULERS.get(e, ENGINE_SCHEDULERS["default"])) for e in ENGINE_SCHEDULERS}
        return _AnyEngine(c, sched)  # type: ignore[return-value]

    def fn(x: np.ndarray) -> np.ndarray:
        return _log_ratios(prep, mask, cal_for(x), meas_ttft, meas_tpot)

    starts = COHORT_STARTS if "cohort_exponent" in names else COHORT_STARTS[:1]
    # a short descent from every start, then the best one to convergence
    best = min((_minimise(fn, _start(PUBLISHED_DEFAULT, free, {**START, "cohort_exponent": c0}), names, lower, upper, PROBE_ITERS)
                for c0 in starts), key=lambda r: r.cost)
    sol = _minimise(fn, best.x, names, lower, upper, iters)
    if warnings is not None:
        warnings.extend(fit_warnings(f"engine {engine} ({int(mask.sum())} rows)", sol, len(names)))
    return _engine_of(sol.x, engine, label, free)


HARNESS_FIELDS: tuple[tuple[str, float, float], ...] = (
    ("ttft_overhead_ms", 0.0, math.inf), ("cohort_exponent", 0.0, 1.0), ("layer_overhead_us", 0.0, math.inf), ("seq_overhead_us", 0.0, math.inf))
"""Fields of a harness fit (the last two only for a one-engine harness) and their bounds."""


def _fit_harness(prep: Prepared, mask: np.ndarray, cal: Calibration, harness: str, meas_ttft: np.ndarray, meas_tpot: np.ndarray,
                 engines: list[str], iters: int = 40, warnings: list[str] | None = None) -> HarnessCalibration:
    """The closed-loop parameters of one harness (``ttft_overhead_ms`` and ``cohort_exponent``) on its
    rows, the engines' fitted parameters fixed; for a harness of one engine (one engine version) also
    that version's ``layer_overhead_us`` and ``seq_overhead_us`` (:data:`FIT_HARNESS_OVERHEADS`).
    Started from the engine's values (and from each of :data:`COHORT_STARTS`)."""
    n = int(mask.sum())
    own = FIT_HARNESS_OVERHEADS and len(engines) == 1  # engine-version overheads: one engine per harness only
    fields = HARNESS_FIELDS if own else HARNESS_FIELDS[:2]
    names = [f[0] for f in fields]
    lower = np.array([f[1] for f in fields])
    upper = np.array([f[2] for f in fields])

    def build(x: np.ndarray) -> HarnessCalibration:
        extra = {"layer_overhead_us": float(x[2]), "seq_overhead_us": float(x[3])} if own else {}
        return HarnessCalibration(ttft_overhead_ms=float(x[0]), cohort_exponent=float(x[1]), rows=n, engines=engines, **extra)

    def fn(x: np.ndarray) -> np.ndarray:
        c = cal.model_copy(update={"harnesses": {harness: build(x)}})
        return _log_ratios(prep, mask, c, meas_ttft, meas_tpot)

    e0 = cal.for_engine(engines[0])[0]
    k0 = min(max(e0.cohort_exponent, 0.05), 0.95)
    tail = [max(e0.layer_overhead_us, 1e-2), max(e0.seq_overhead_us, 1e-2)] if own else []
    starts = [np.array([max(e0.ttft_overhead_ms, 1.0), k]+ tail) for k in (k0, *COHORT_STARTS)]
    best = min((_minimise(fn, t, names, lower, upper, PROBE_ITERS) for t in starts), key=lambda r: r.cost)
    sol = _minimise(fn, best.x, names, lower, upper, iters)
    if warnings is not None:
        warnings.extend(fit_warnings(f"harness {harness} ({n} rows)", sol, len(names)))
    return build(sol.x)


class _AnyEngine:
    """A calibration stand-in that returns one engine's efficiencies for every row (with the
    row's own scheduler), used while fitting pooled or per-engine parameters."""

    name = "fit"

    def __init__(self, cal: EngineCalibration, by_engine: dict[str, EngineCalibration]) -> None:
        self.cal = cal
        self.by_engine = by_engine

    def for_engine(self, engine: str) -> tuple[EngineCalibration, str]:
        return self.by_engine.get(engine, self.by_engine["default"]), "fit"


ROW_KEY = ("device", "model", "engine", "harness", "mode", "precision", "kv_precision", "tp", "concurrency", "isl", "osl",
           "prefill_tp", "prefill_workers", "decode_tp", "decode_workers", "decode_batch", "ttft_ms", "tpot_ms", "id")
"""Rows are fitted in the order of these fields, not the file's: the fit sums floating-point
residuals and stops on a relative gain, so the input order moved fitted values in the third
digit (round 9); a canonical order makes a refit reproduce the file whatever the row order."""
FIT_HARNESSES = True
FIT_HARNESS_OVERHEADS = True
"""Round 10: a harness that ran one engine (aiconfigurator's harnesses are one engine version each:
``aic-auto-gap-analysis/vllm/0.12.0``) also gets that engine version's ``layer_overhead_us`` and
``seq_overhead_us``, with the engine's efficiencies fixed; a version the data do not cover uses the
engine's values. H100 -> H200 transfer TPOT of the shared harness (Llama-3.1-70B vLLM) 11.3 -> 8.0 %."""
"""Fit closed-loop parameters per harness (round 9); False reproduces the per-engine-only fit."""


def canonical_order(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of ``rows`` in the canonical fitting order (:data:`ROW_KEY`; blanks first)."""
    def key(i: int) -> tuple[tuple[int, str | float], ...]:
        out = []
        for f in ROW_KEY:
            v = rows[i].get(f)
            out.append((0, "") if v is None or v == "" else ((1, float(v)) if isinstance(v, (int, float)) else (2, str(v))))
        return tuple(out)
    return sorted(range(len(rows)), key=key)


def error_bands(rows: list[dict[str, Any]], ttft: np.ndarray, tpot: np.ndarray, mask: np.ndarray, how: str) -> list[ErrorBand]:
    """Mean absolute relative error of TTFT and TPOT per (device, engine) over the rows in ``mask``."""
    meas_ttft = np.array([r["ttft_ms"] if r.get("ttft_ms") is not None else np.nan for r in rows], dtype=float)
    meas_tpot = np.array([r["tpot_ms"] if r.get("tpot_ms") is not None else np.nan for r in rows], dtype=float)
    keys = np.array([f"{r.get('device')}|{r.get('engine')}" for r in rows])
    out = []
    for k in sorted(set(keys[mask])):
        m = mask & (keys == k) & np.isfinite(ttft) & np.isfinite(tpot)
        if not m.any():
            continue
        dev, eng = k.split("|", 1)
        out.append(ErrorBand(device=dev, engine=eng, ttft_rel=round(mape(ttft[m], meas_ttft[m]) / 100.0, 4),
                             tpot_rel=round(mape(tpot[m], meas_tpot[m]) / 100.0, 4), rows=int(m.sum()), how=how))
    return out


def fit_calibration(rows: list[dict[str, Any]], catalog: Catalog, *, name: str, data_file: str | Path,
                    min_rows: int = MIN_ROWS_PER_ENGINE, train_mask: np.ndarray | None = None,
                    out_of_sample: bool = False, data_sha256: str | None = None) -> Calibration:
    """Fit per-engine calibrations (engines with ``>= min_rows`` usable rows), a pooled ``default``
    and, for harnesses with ``>= MIN_ROWS_PER_HARNESS`` rows, their closed-loop parameters. The
    rows are taken in :func:`canonical_order`; the result does not depend on the file's order.

    The error bands recorded (``fit.error_bands``, what plans quote) are in sample unless
    ``out_of_sample``: then they are :func:`leave_one_group_out_bands` (one refit per model; a plan
    quotes only those, :func:`planner.perf.calibration.error_band`). ``data_sha256``: the data file's
    hash when the file is written after the fit (``planner calibrate``'s data copy); default: ``data_file``'s."""
    order = canonical_order(rows)
    rows = [rows[i] for i in order]
    if train_mask is not None:
        train_mask = np.asarray(train_mask, dtype=bool)[order]
    prep = prepare_rows(rows, catalog)
    meas_ttft = np.array([r["ttft_ms"] if r.get("ttft_ms") is not None else np.nan for r in rows], dtype=float)
    meas_tpot = np.array([r["tpot_ms"] if r.get("tpot_ms") is not None else np.nan for r in rows], dtype=float)
    usable = np.array([not r for r in prep.reasons]) & np.isfinite(meas_ttft) & np.isfinite(meas_tpot) & (meas_ttft > 0) & (meas_tpot > 0)
    if train_mask is not None:
        usable &= train_mask
    engines_all = np.array([str(r.get("engine")) for r in rows])
    fitted: dict[str, EngineCalibration] = {}
    warnings: list[str] = []
    pooled_prep = _subset(prep, usable)
    if usable.sum() >= MIN_ROWS_TO_FIT:
        fitted["default"] = _fit_one(pooled_prep, usable, "default", meas_ttft, meas_tpot, warnings=warnings)
    for engine in sorted(set(engines_all[usable])):
        mask = usable & (engines_all == engine)
        if mask.sum() >= min_rows:
            fitted[engine] = _fit_one(_subset(prep, mask), mask, engine, meas_ttft, meas_tpot, warnings=warnings)
    if "default" in fitted:
        # an engine the data do not cover keeps its documented scheduler facts (e.g. SGLang's
        # prefill-only iterations) with the pooled efficiencies
        for engine, sched in ENGINE_SCHEDULERS.items():
            if engine not in fitted:
                n_eng = int((usable & (engines_all == engine)).sum())
                why = f"no {engine} rows" if n_eng == 0 else f"{n_eng} usable {engine} row(s), fewer than the {min_rows} an engine's own fit needs"
                fitted[engine] = fitted["default"].model_copy(update={**sched, "source": f"fit:default ({why}; {engine} scheduler defaults)"})
    if not fitted:
        from planner.errors import InputError

        n = int(usable.sum())
        raise InputError(f"too few usable rows to calibrate on: {n} predictable row{'' if n == 1 else 's'} with ttft_ms and tpot_ms, "
                         f"the fit needs at least {MIN_ROWS_TO_FIT}", file=str(data_file))
    cal = Calibration(name=name, engines=fitted)
    harnesses_all = np.array([str(r.get("harness") or "") for r in rows])
    if FIT_HARNESSES:
        found: dict[str, HarnessCalibration] = {}
        for h in sorted(set(harnesses_all[usable]) - {"", "default"}):
            mask = usable & (harnesses_all == h)
            if mask.sum() >= MIN_ROWS_PER_HARNESS:
                found[h] = _fit_harness(_subset(prep, mask), mask, cal, h, meas_ttft, meas_tpot, sorted(set(engines_all[mask])),
                                        warnings=warnings)
        # the open-loop TTFT overhead of an engine is the part every harness of it shows: the
        # lowest of its own fit and its harnesses' values
        engines_new = dict(cal.engines)
        for e, c in cal.engines.items():
            seen = [hc.ttft_overhead_ms for hc in found.values() if e in hc.engines and hc.ttft_overhead_ms is not None]
            if seen and min(seen) < c.ttft_overhead_ms:
                engines_new[e] = c.model_copy(update={"ttft_overhead_ms": min(seen)})
        cal = Calibration(name=name, engines=engines_new, harnesses=found)
    ttft, tpot, _, _ = predict_prepared(prep, cal)
    by_engine_ttft = {e: mape(ttft[usable & (engines_all == e)], meas_ttft[usable & (engines_all == e)]) for e in sorted(set(engines_all[usable]))}
    by_engine_tpot = {e: mape(tpot[usable & (engines_all == e)], meas_tpot[usable & (engines_all == e)]) for e in sorted(set(engines_all[usable]))}
    by_engine_ttft["all"] = mape(ttft[usable], meas_ttft[usable])
    by_engine_tpot["all"] = mape(tpot[usable], meas_tpot[usable])
    record = FitRecord(
        data_file=str(data_file),
        data_sha256=data_sha256 if data_sha256 is not None else file_sha256(data_file) if str(data_file) and Path(data_file).is_file() else "",
        rows_used=int(usable.sum()), rows_skipped=int(len(rows) - usable.sum()), engines_fitted=sorted(fitted),
        objective="least absolute log-ratio of TTFT and TPOT (bounded trust-region least squares on sqrt residuals, planner.perf.lsq)",
        mape_ttft_pct={k: round(v, 2) for k, v in by_engine_ttft.items()},
        mape_tpot_pct={k: round(v, 2) for k, v in by_engine_tpot.items()},
        error_bands=(leave_one_group_out_bands(rows, catalog, train_mask=train_mask) if out_of_sample
                     else error_bands(rows, ttft, tpot, usable, "in sample")),
        notes=("MAPE: in-sample residuals; error_bands: " + (f"leave one {HOLDOUT_GROUP} out (refit without each {HOLDOUT_GROUP}, "
               "predict its rows)" if out_of_sample else "in sample (not a validation; plans say 'not validated')")),
        warnings=warnings,
    )
    return cal.model_copy(update={"fit": record, "description": f"fitted on {Path(data_file).name}"})


HOLDOUT_GROUP = "model"
"""Rows held out together for the out-of-sample error: one model at a time (a model's rows share its
shapes; holding out single rows would leave its neighbours in the fit)."""


def leave_one_group_out_bands(rows: list[dict[str, Any]], catalog: Catalog, group: str = HOLDOUT_GROUP,
                              train_mask: np.ndarray | None = None) -> list[ErrorBand]:
    """Out-of-sample error per (device, engine): for each value of ``group`` (e.g. each model), fit on the
    other groups' rows and predict this group's; the bands pool those predictions (mean absolute relative
    error, ``rows`` = rows predicted out of sample). Empty when the rows hold one group only (nothing to
    hold out: a plan then says "not validated"); a group whose complement cannot be fitted is left out."""
    from planner.errors import InputError

    keys = np.array([str(r.get(group)) for r in rows])
    base = np.ones(len(rows), bool) if train_mask is None else np.asarray(train_mask, dtype=bool)
    groups = sorted(set(keys[base]))
    if len(groups) < 2:
        return []
    from planner.forked import fork_each

    prep = prepare_rows(rows, catalog)
    ttft = np.full(len(rows), np.nan)
    tpot = np.full(len(rows), np.nan)

    def held_out(g: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Group ``g``'s rows predicted by the fit without it (None: the rest cannot be fitted)."""
        test = base & (keys == g)
        try:
            cal = fit_calibration(rows, catalog, name=f"without-{g}", data_file="", train_mask=base & ~test)
        except InputError:
            return None
        t, p, _, _ = predict_prepared(prep, cal)
        return t[test], p[test]

    # the groups' fits are independent: dealt over the usable cores (the same fits, the same bands)
    for g, pred in zip(groups, fork_each(held_out, groups), strict=True):
        if pred is not None:
            test = base & (keys == g)
            ttft[test], tpot[test] = pred
    meas_ttft = np.array([r["ttft_ms"] if r.get("ttft_ms") is not None else np.nan for r in rows], dtype=float)
    meas_tpot = np.array([r["tpot_ms"] if r.get("tpot_ms") is not None else np.nan for r in rows], dtype=float)
    usable = base & np.array([not r for r in prep.reasons]) & (meas_ttft > 0) & (meas_tpot > 0) & np.isfinite(ttft) & np.isfinite(tpot)
    return error_bands(rows, ttft, tpot, usable, f"leave one {group} out")


def leave_one_device_out(rows: list[dict[str, Any]], catalog: Catalog) -> list[dict[str, Any]]:
    """For each device with rows: fit on the other devices' rows, predict this device's.
    One entry per (held-out device, model, engine) and one per device (``model`` = ``"all"``), with
    the MAPE of TTFT and TPOT (%) and the rows predicted. Empty when the rows cover one device.
    A device whose complement cannot be fitted (too few usable rows) is skipped and named: its one
    entry (``model`` = ``"all"``) carries ``skipped``, the reason, and nothing predicted (as
    :func:`leave_one_group_out_bands` leaves such a group out)."""
    from planner.errors import InputError

    devices = sorted({str(r.get("device")) for r in rows})
    if len(devices) < 2:
        return []
    dev = np.array([str(r.get("device")) for r in rows])
    mt = np.array([r["ttft_ms"] if r.get("ttft_ms") is not None else np.nan for r in rows], dtype=float)
    mp = np.array([r["tpot_ms"] if r.get("tpot_ms") is not None else np.nan for r in rows], dtype=float)
    from planner.forked import fork_each

    prep = prepare_rows(rows, catalog)

    def held_out(d: str) -> list[dict[str, Any]]:
        test = dev == d
        try:
            cal = fit_calibration(rows, catalog, name=f"without-{d}", data_file="", train_mask=~test)
        except InputError as exc:
            why = "; ".join(pr.message for pr in exc.problems)
            return [{"device": d, "model": "all", "engine": "all", "rows": int(test.sum()), "predicted": 0,
                     "mape_ttft_pct": float("nan"), "mape_tpot_pct": float("nan"), "skipped": f"the other devices' rows: {why}"}]
        ttft, tpot, _, _ = predict_prepared(prep, cal)
        groups: dict[tuple[str, str], np.ndarray] = {("all", "all"): test}
        for i in np.nonzero(test)[0]:
            key = (str(rows[i].get("model")), str(rows[i].get("engine")))
            groups.setdefault(key, np.zeros(len(rows), bool))[i] = True
        out: list[dict[str, Any]] = []
        for (m, e), mask in sorted(groups.items()):
            ok = mask & np.isfinite(ttft)
            out.append({"device": d, "model": m, "engine": e, "rows": int(mask.sum()), "predicted": int(ok.sum()),
                        "mape_ttft_pct": mape(ttft[mask], mt[mask]), "mape_tpot_pct": mape(tpot[mask], mp[mask])})
        return out

    # the devices' fits are independent: dealt over the usable cores (the same fits, in device order)
    return [r for part in fork_each(held_out, devices) for r in part]
