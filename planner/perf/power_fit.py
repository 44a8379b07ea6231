"""Fit the power curves (and the steady-state throughput they rest on) on measured serving runs.

Input: ML.ENERGY-format rows (:mod:`planner.perf.energy_runs`). Two fits, one after the other,
both deterministic (fixed starts, bounded trust-region least squares, no random restarts):

1. **Throughput** (:func:`fit_throughput`). Starting from the engine's latency calibration
   (``vllm`` of ``models/calibration/h100_dense.yaml``), refit ``eta_b``, ``layer_overhead_us``
   and ``seq_overhead_us`` on the runs' log-ratio of predicted to measured output tokens/s
   (robust ``soft_l1`` loss, scale 0.05: a run more than ~5 % off pulls by about its sign). The
   other engine facts (``eta_f``, ``eta_link``, budget, KV sizing) are kept: the steady-state runs
   are decode dominated and do not identify them. This is needed because the latency fit comes
   from another harness and engine version (vLLM 0.11 per-step costs here are ~3 ms higher on an
   8B model at batch 8).
2. **Power** (:func:`fit_power_curve`), per device: with the mean iteration's roofline shares
   ``u_c``, ``u_b`` and rows ``u_r`` from step 1, fit ``f_max``, ``w_c``, ``w_b``, ``w_r`` and ``gamma`` of
   :mod:`planner.perf.power` on the log-ratio of predicted to measured average power per GPU
   (``f_idle`` fixed at :data:`planner.perf.power.LOADED_IDLE_FRAC`). Power, not J/token, is the
   target so that throughput errors do not leak into the curve.

``J per output token`` then follows as ``P x gpu_count / tokens/s`` (checked by
``planner validate-energy``). Only steady-state rows of devices with at least
:data:`MIN_ROWS_PER_DEVICE` predictable rows get a curve of their own.

What a fit cannot vouch for is reported (:class:`PowerFitReport`, printed by ``planner
calibrate-energy`` as ``planner calibrate`` prints its fit's warnings):

- **warnings**: a parameter that ended on a bound (the bound named in the parameter's own units,
  ``allreduce_overhead_us (upper 200)``: a bound, not an estimate), one no residual depends on, a
  Jacobian of lower rank than the parameters (fewer runs than the 4 throughput parameters, e.g.),
  and a (device, stack) whose predictable runs are too few for a curve (fewer than
  :data:`MIN_ROWS_PER_DEVICE`);
- **notes**: the fitted runs predicted on something other than what their rows state, counted by
  kind (:attr:`planner.perf.energy_runs.RunConfig.approximations`: the 17 shipped
  ``tensor_parallel 8 x pipeline_parallel 2`` runs are fitted as TP 16).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.perf.calibration import Calibration, EngineCalibration, load_calibration
from planner.perf.energy_runs import RunConfig, approximation_kind, predict_runs, resolve_runs
from planner.perf.lsq import fit_least_squares, fit_warnings, on_bound
from planner.perf.power import (
    LOADED_IDLE_FRAC,
    PowerCalibration,
    PowerCurve,
    curve_power_w,
    load_fraction,
)
from planner.perf.roofline import InstanceArrays

MIN_ROWS_PER_DEVICE = 8
"""Fewest predictable runs a device needs for a curve of its own."""
THROUGHPUT_PARAMS: tuple[tuple[str, float, float], ...] = (
    ("eta_b", 0.3, 1.0), ("layer_overhead_us", 0.0, 500.0), ("seq_overhead_us", 0.0, 500.0),
    ("allreduce_overhead_us", 0.0, 200.0),
)
"""Engine fields refitted on throughput, with their bounds."""
SOFT_L1_SCALE = 0.05
"""Residual scale (log-ratio) of the robust loss."""


@dataclass
class PowerFitReport:
    """What a power fit cannot vouch for (module docstring), beside the calibration it writes."""

    predictable: int = 0
    """Runs resolved against the catalog (before dropping derived-input runs)."""
    fitted: int = 0
    """Runs the throughput fits saw."""
    skip_reasons: list[str] = field(default_factory=list)
    """Why each skipped row was skipped (one entry per skipped row)."""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _cal_with(base: EngineCalibration, values: np.ndarray, source: str) -> EngineCalibration:
    upd: dict[str, Any] = {name: float(v) for (name, _lo, _hi), v in zip(THROUGHPUT_PARAMS, values, strict=True)}
    upd["source"] = source
    return base.model_copy(update=upd)


def _single(cal: EngineCalibration) -> Calibration:
    return Calibration(name="energy", engines={"default": cal})


def fit_throughput(runs: list[RunConfig], insts: dict[tuple[str, str, int, str], InstanceArrays],
                   base: EngineCalibration, source: str = "fit:energy-runs", warnings: list[str] | None = None) -> EngineCalibration:
    """Engine calibration whose steady-state throughput matches the runs (module docstring, step 1).
    The solver sees the microsecond fields divided by 100; a field on a bound is named with the bound
    in microseconds (``allreduce_overhead_us (upper 200)``), in ``source`` and in ``warnings``."""
    meas = np.array([r.meas_tok_per_s for r in runs])
    x0 = np.array([float(getattr(base, n)) for n, _lo, _hi in THROUGHPUT_PARAMS])
    lo = np.array([b[1] for b in THROUGHPUT_PARAMS])
    hi = np.array([b[2] for b in THROUGHPUT_PARAMS])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    scale = np.where(hi > 1.5, 100.0, 1.0)

    def resid(z: np.ndarray) -> np.ndarray:
        pred = predict_runs(runs, insts, _single(_cal_with(base, z * scale, source)))
        r = np.log(np.maximum(pred.tok_per_s, 1e-9) / meas)
        return np.where(pred.feasible, r, 0.0)

    sol = fit_least_squares(resid, x0 / scale, names=[n for n, _lo, _hi in THROUGHPUT_PARAMS], lower=lo / scale, upper=hi / scale,
                            loss="soft_l1", f_scale=SOFT_L1_SCALE, x_scale="jac", max_nfev=200)
    names = [n for n, _lo, _hi in THROUGHPUT_PARAMS]
    at_bound = on_bound(names, sol.x * scale, lo, hi)
    if warnings is not None:
        warnings.extend(fit_warnings(f"throughput {source.removeprefix('fit:')}", sol, len(names), at_bound))
    bound = f"; on a bound (not an estimate): {', '.join(at_bound)}" if at_bound else ""
    return _cal_with(base, sol.x * scale, source + bound)


def fit_power_curve(compute_s: np.ndarray, memory_s: np.ndarray, total_s: np.ndarray, rows: np.ndarray,
                    meas_power_w: np.ndarray, tdp_w: np.ndarray, source: str, warnings: list[str] | None = None,
                    what: str = "") -> PowerCurve:
    """``f_max, w_c, w_b, gamma, w_r`` minimising the robust log-ratio of predicted to measured power
    per GPU (module docstring, step 2). Parameters on a bound go to ``source`` and to ``warnings``
    (as ``power curve <what>``, default the source)."""
    lo = np.array([0.3, 0.0, 0.0, 0.2, 0.0])
    hi = np.array([1.1, 3.0, 3.0, 3.0, 3.0])

    def curve(z: np.ndarray) -> PowerCurve:
        return PowerCurve(idle_frac=LOADED_IDLE_FRAC, max_frac=float(z[0]), w_compute=float(z[1]), w_bandwidth=float(z[2]),
                          gamma=float(z[3]), w_rows=float(z[4]), source=source)

    def resid(z: np.ndarray) -> np.ndarray:
        c = curve(z)
        p = curve_power_w(c, tdp_w, load_fraction(c, compute_s, memory_s, total_s, rows))
        return np.log(np.maximum(p, 1e-9) / meas_power_w)

    sol = fit_least_squares(resid, np.array([0.9, 0.8, 0.5, 1.0, 0.3]), names=["max_frac", "w_compute", "w_bandwidth", "gamma", "w_rows"],
                            lower=lo, upper=hi, loss="soft_l1", f_scale=SOFT_L1_SCALE, max_nfev=400, x_scale=1.0)
    if warnings is not None:
        warnings.extend(fit_warnings(f"power curve {what or source.removeprefix('fit:')}", sol, len(lo)))
    c = curve(sol.x)
    return c.model_copy(update={"source": f"{source}; on a bound (not an estimate): {', '.join(sol.at_bound)}"}) if sol.at_bound else c


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(100.0 * np.mean(np.abs(pred / meas - 1.0))) if len(meas) else float("nan")


def stack_calibration(cal: PowerCalibration) -> Calibration | None:
    """The per-stack throughput calibrations as a :class:`Calibration` (``default`` = the stack
    with the most fitted runs, for a stack the fit did not see)."""
    if not cal.engines:
        return None
    default = cal.curve_stacks.get("h100-sxm") or next(iter(cal.engines))
    return Calibration(name=cal.name, engines={**cal.engines, "default": cal.engines[default]})


def _base_engine(stack: str, base: Calibration | None) -> EngineCalibration:
    engine = stack.split("-")[0]
    if base is not None:
        return base.for_engine(engine)[0]
    from planner.perf.calibration import PUBLISHED_DEFAULT

    return PUBLISHED_DEFAULT


def fit_power(rows: list[dict[str, Any]], catalog: Catalog, *, data_file: str = "", base: Calibration | None | str = "auto",
              name: str = "power", expert_parallel_as_tp: bool = False) -> PowerCalibration:
    """Throughput calibration per serving stack, then power curves per (device, stack) with at
    least :data:`MIN_ROWS_PER_DEVICE` runs. The stack with the most runs on a device (ties: the
    later version) gives the device's curve (key ``<device>``, the one the planner uses); the
    others are kept as ``<device>@<stack>`` for checking runs of that stack. Module docstring."""
    return fit_power_report(rows, catalog, data_file=data_file, base=base, name=name, expert_parallel_as_tp=expert_parallel_as_tp)[0]


def approximation_notes(runs: list[RunConfig]) -> list[str]:
    """One note per kind of approximation among ``runs`` (the fitted ones), with its count and an example."""
    kinds: dict[str, list[str]] = {}
    for r in runs:
        for a in r.approximations:
            kinds.setdefault(approximation_kind(a), []).append(a)
    return [f"{len(texts)} of {len(runs)} fitted runs approximated, {kind}: e.g. {texts[0].split(': ', 1)[1]}; the fit keeps them"
            for kind, texts in kinds.items()]


def few_runs_warnings(counts: dict[str, dict[str, int]]) -> list[str]:
    """A warning per (device, stack) with predictable runs but fewer than :data:`MIN_ROWS_PER_DEVICE`:
    it gets no curve (``counts``: device -> stack -> feasible runs)."""
    return [f"power curve {dev} {stack}: {n} predictable run{'s' if n != 1 else ''}, fewer than the {MIN_ROWS_PER_DEVICE} a curve "
            "needs: no curve fitted for it" for dev, per in counts.items() for stack, n in sorted(per.items()) if n < MIN_ROWS_PER_DEVICE]


def fit_power_report(rows: list[dict[str, Any]], catalog: Catalog, *, data_file: str = "", base: Calibration | None | str = "auto",
                     name: str = "power", expert_parallel_as_tp: bool = False) -> tuple[PowerCalibration, PowerFitReport]:
    """:func:`fit_power` and its :class:`PowerFitReport` (module docstring)."""
    runs, reasons, insts = resolve_runs(rows, catalog, expert_parallel_as_tp=expert_parallel_as_tp, skip_inconsistent=True)
    report = PowerFitReport(predictable=len(runs), skip_reasons=[r for r in reasons if r])
    runs = [r for r in runs if not r.derived_input]  # multimodal runs of derived input size are checked, never fitted on
    report.fitted = len(runs)
    report.notes.extend(approximation_notes(runs))
    base_cal = load_calibration(None) if base == "auto" else base
    base_cal = base_cal if isinstance(base_cal, Calibration) else None
    src = f"fit:{Path(data_file).name or 'rows'}"
    engines: dict[str, EngineCalibration] = {}
    for stack in sorted({r.engine for r in runs}):
        group = [r for r in runs if r.engine == stack]
        engines[stack] = fit_throughput(group, insts, _base_engine(stack, base_cal), source=f"{src} {stack} ({len(group)} runs)",
                                        warnings=report.warnings)
    pred = predict_runs(runs, insts, Calibration(name=name, engines=engines))
    curves: dict[str, PowerCurve] = {}
    stacks: dict[str, str] = {}
    used: dict[str, int] = {}
    resid: dict[str, dict[str, float]] = {}
    all_counts: dict[str, dict[str, int]] = {}
    for dev in sorted({r.device.split("@")[0] for r in runs}):
        counts = all_counts.setdefault(dev, {})
        for j, r in enumerate(runs):
            if r.device.split("@")[0] == dev and pred.feasible[j]:
                counts[r.engine] = counts.get(r.engine, 0) + 1
        fit_stacks = [k for k in counts if counts[k] >= MIN_ROWS_PER_DEVICE]
        if not fit_stacks:
            continue
        main = max(fit_stacks, key=lambda k: (counts[k], k))
        for stack in sorted(fit_stacks):
            key = dev if stack == main else f"{dev}@{stack}"
            idx = np.array([j for j, r in enumerate(runs) if r.device.split("@")[0] == dev and r.engine == stack and pred.feasible[j]], dtype=int)
            tdp = np.full(len(idx), float(catalog.devices[dev].tdp_w or 0.0))
            meas_p = np.array([runs[j].meas_power_w_per_gpu for j in idx])
            c = fit_power_curve(pred.compute_s[idx], pred.memory_s[idx], pred.total_s[idx], pred.rows[idx], meas_p, tdp,
                                f"{src} {stack} ({len(idx)} runs)", warnings=report.warnings, what=f"{key} ({len(idx)} {stack} runs)")
            p = curve_power_w(c, tdp, load_fraction(c, pred.compute_s[idx], pred.memory_s[idx], pred.total_s[idx], pred.rows[idx]))
            count = np.array([runs[j].gpu_count for j in idx], dtype=float)
            jpt = p * count / pred.tok_per_s[idx]
            curves[key] = c
            stacks[key] = stack
            used[key] = int(len(idx))
            resid[key] = {"power_mape_pct": round(_mape(p, meas_p), 2),
                          "j_per_output_token_mape_pct": round(_mape(jpt, np.array([runs[j].meas_j_per_tok for j in idx])), 2),
                          "throughput_mape_pct": round(_mape(pred.tok_per_s[idx], np.array([runs[j].meas_tok_per_s for j in idx])), 2)}
    report.warnings.extend(few_runs_warnings(all_counts))
    sha = hashlib.sha256(Path(data_file).read_bytes()).hexdigest() if data_file and Path(data_file).exists() else ""
    skipped = sum(1 for r in reasons if r)
    approx = sum(1 for r in runs if r.approximations)
    described = f"; {approx} of them approximated (planner validate-energy: approximation)" if approx else ""
    cal = PowerCalibration(name=name, description=f"fitted on {Path(data_file).name or 'rows'}: {len(runs)} runs predictable, {skipped} skipped"
                           + described, curves=curves, engines=engines, curve_stacks=stacks, data_file=Path(data_file).name,
                           data_sha256=sha, rows_used=used, residuals=resid)
    return cal, report
