"""Device power as a function of the work it does, and the energy of an operating point.

Replaces the flat ``busy_power_w = 0.7 x TDP`` in the operating points: a device's board power
rises from a loaded-idle floor with how busy its tensor cores (compute-bound prefill, large
decode batches) and its memory bus (bandwidth-bound decode) are. Per device::

    u_c = t_compute / t_step          share of the iteration the matmul/attention units work
    u_b = t_memory  / t_step          share of the iteration the HBM bus streams weights / KV
    u_r = min(1, log2(1 + T) / log2(1 + T_sat))   rows: T tokens in the iteration (decode batch +
                                      prefill tokens), T_sat = ROWS_SATURATION
    L   = min(1, w_c u_c + w_b u_b + w_r u_r)   load (0 = weights loaded, nothing to do; 1 = flat out)
    P   = TDP (f_idle + (f_max - f_idle) L ** gamma)

``t_compute``, ``t_memory`` and ``t_step`` are the roofline's times of the iteration
(:class:`planner.perf.roofline.StepTime`: ``compute_s``, ``memory_s``, ``total_s``), so ``u``
follows the phase and the batch: a batch-8 decode step is mostly weight streaming plus fixed
overheads (``u_b`` high, ``u_c`` low), a batch-256 step or a prefill chunk is matmul-bound.
``u_r`` is occupancy: every device of a TP group runs all ``T`` rows of each GEMM (on its slice),
and a kernel with few rows leaves most SMs waiting on loads, so power rises with the rows even
when the roofline shares do not move (an MoE decode step stays ~5 % compute-bound at any batch,
yet the measured H100 power rises from 0.6 to 0.8 x TDP between batch 8 and 512). On the H100
v3.0 runs this term takes out-of-sample power error from 13 % to 10 % (``planner/perf/README.md``).
Both shares are at most 1 (``total_s`` holds the larger of the two in each kernel group plus
communication and host overheads, during which the device draws only part of its dynamic power).

Symbols, per device curve (:class:`PowerCurve`):

============  ===============================================================================
``f_idle``     loaded-idle power / TDP: weights resident, clocks up, no kernels (P0 idle)
``f_max``      power at ``L = 1`` / TDP (the board cap is 1)
``w_c, w_b``   weight of compute and memory-bus activity in the load
``w_r``        weight of the rows term (occupancy)
``gamma``      curvature (``< 1``: power rises fast at low load and saturates)
============  ===============================================================================

Energy of a request at an operating point of ``tp`` devices (:func:`instance_power_w`, used by
:mod:`planner.perf.points`)::

    E = P(u) x tp x instance_seconds_per_request        (J; GPU board power only)

and per output token ``E / OSL``. A powered-down device draws 0 (the optimiser counts only
provisioned devices); a provisioned device with nothing to do draws ``f_idle x TDP``
(:func:`loaded_idle_power_w`: the capacity table's ``idle_power_w``, the optimiser's idle term;
the profile's ``idle_power_w`` where no curve applies: CPUs, devices without a TDP, measured busy power). Host power (CPU, DRAM, NICs, fans, PSU loss) is not in ``P``:
the profile's ``host_power_w`` covers it, and PUE the facility.

Where the numbers come from (``models/calibration/power.yaml``, written by ``planner
calibrate-energy``, :mod:`planner.perf.power_fit`): the H100 SXM curve is fitted on the ML.ENERGY
Benchmark v3.0 steady-state runs (vLLM 0.11.1; ``models/measured/measured_energy.csv``), the
A100 curve on ML.ENERGY Leaderboard v2 (vLLM 0.5.4, A100-SXM4-40GB). ``f_idle`` is not
identifiable from steady-state runs at batch >= 8 and is fixed from spot readings
(:data:`LOADED_IDLE_FRAC`). A device whose ``busy_power_w`` carries a source (a measurement,
e.g. set through ``catalog.device_overrides`` with its ``sources`` entry) keeps that flat figure;
the shipped profiles' 0.7 x TDP is an assumption, which the curve replaces. A device with no fitted curve uses the reference curve
(:data:`REFERENCE_DEVICE`) at its own TDP — an assumption: the same fractions of TDP at the same
utilisation, which holds roughly within a vendor generation and is untested elsewhere. A device
without ``tdp_w`` (CPU servers) keeps its flat ``busy_power_w``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import Field

from planner.perf.calibration import EngineCalibration, calibration_dir
from planner.schema.common import StrictModel
from planner.schema.hardware import DeviceProfile
from planner.validation import load_model_cached

POWER_FILE_NAME = "power.yaml"
"""Shipped power calibration, ``models/calibration/power.yaml``."""
REFERENCE_DEVICE = "h100-sxm"
"""Curve used (scaled by TDP) for devices without a fitted curve of their own."""
LOADED_IDLE_FRAC = 0.16
"""Loaded-idle power / TDP: H200 with an SGLang server up, weights loaded (124.6 GB), 0 %
utilisation, P0: 115 W / 700 W = 0.164 (sgl-project/sglang issue 3196); H100 SXM with no process
reads 83-88 W (0.12, NVIDIA/nccl issue 1264) and with 72.8 GB allocated 145 W (0.21, gpu-burn
issue 114); B200 air-cooled idle 137 W (0.14) and MI355X 238 W (0.17), ROCm issue 5219. The
steady-state runs (batch >= 8) cannot identify it, so it is fixed, not fitted."""
ROWS_SATURATION = 1024.0
"""Rows (tokens per iteration) at which the occupancy term ``u_r`` reaches 1: ten doublings
from one row; a 1024-row bf16 GEMM on an H100 runs at ~94 % of its large-M rate by the
roofline's ``M / (M + 64)`` (:data:`planner.perf.roofline.GEMM_M_HALF_TOKENS`). Not fitted."""


class PowerCurve(StrictModel):
    """Power of one device type as fractions of its TDP (module docstring)."""

    idle_frac: float = Field(ge=0, le=1)
    """Loaded-idle power / TDP."""
    max_frac: float = Field(gt=0, le=1.2)
    """Power at full load / TDP."""
    w_compute: float = Field(ge=0, le=4)
    """Weight of the compute share ``u_c`` in the load."""
    w_bandwidth: float = Field(ge=0, le=4)
    """Weight of the memory-bus share ``u_b`` in the load."""
    w_rows: float = Field(0.0, ge=0, le=4)
    """Weight of the occupancy term ``u_r`` (rows per iteration) in the load."""
    gamma: float = Field(gt=0, le=4)
    """Curvature of power in load."""
    source: str = ""
    """Where the curve comes from (fit provenance or the scaling assumption)."""


class PowerCalibration(StrictModel):
    """Fitted power curves per device id, with the provenance of the fit."""

    name: str = "power"
    description: str = ""
    curves: dict[str, PowerCurve]
    engines: dict[str, EngineCalibration] = Field(default_factory=dict)
    """Throughput calibration per serving stack (``vllm-0.11.1``) of the steady-state runs the
    curves were fitted on (:mod:`planner.perf.power_fit`). Used by ``planner validate-energy``;
    the planner's operating points keep the latency calibration."""
    curve_stacks: dict[str, str] = Field(default_factory=dict)
    """Per device: the stack whose runs its curve was fitted on."""
    data_file: str = ""
    data_sha256: str = ""
    rows_used: dict[str, int] = Field(default_factory=dict)
    residuals: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Per device: in-sample MAPE of power and of J per output token, %."""


def power_file() -> Path:
    return calibration_dir() / POWER_FILE_NAME


_CACHE: dict[str, tuple[float, Any]] = {}


def load_power_calibration(path: str | Path | None = None) -> PowerCalibration | None:
    """Read a power calibration (the shipped ``models/calibration/power.yaml`` by default;
    ``None`` when that file is absent)."""
    p = Path(path) if path is not None else power_file()
    if path is None and not p.exists():
        return None
    return load_model_cached(PowerCalibration, p, _CACHE)


def save_power_calibration(cal: PowerCalibration, path: str | Path) -> None:
    text = "# Fitted by `planner calibrate-energy`; the model is in planner/perf/power.py.\n"
    text += yaml.safe_dump(cal.model_dump(mode="json"), sort_keys=False)
    Path(path).write_text(text, encoding="utf-8")


def curve_for(device: DeviceProfile, calibration: PowerCalibration | None | str = "auto", stack: str = "") -> PowerCurve | None:
    """The device's curve: its own fitted one (for ``stack`` when one was fitted on that serving
    stack's runs), else the reference device's fractions at the device's own TDP; ``None`` when
    no calibration exists or the device has no TDP."""
    cal = load_power_calibration() if calibration == "auto" else calibration
    if cal is None or isinstance(cal, str) or device.tdp_w is None or device.kind == "cpu":
        return None
    if "busy_power_w" in device.sources:  # a measured busy power (e.g. a device override with its source) beats the curve
        return None
    own = cal.curves.get(f"{device.id}@{stack}") if stack else None
    own = own or cal.curves.get(device.id)
    if own is not None:
        return own
    ref = cal.curves.get(REFERENCE_DEVICE)
    if ref is None:
        return None
    return ref.model_copy(update={"source": f"{REFERENCE_DEVICE} curve at this device's TDP (assumed: same fractions of TDP)"})


def rows_share(rows: Any) -> np.ndarray:
    """``u_r = min(1, log2(1 + T) / log2(1 + T_sat))`` for ``T`` tokens in the iteration."""
    t = np.maximum(np.asarray(rows, dtype=float), 0.0)
    return np.clip(np.log2(1.0 + t) / np.log2(1.0 + ROWS_SATURATION), 0.0, 1.0)


def load_fraction(curve: PowerCurve, compute_s: Any, memory_s: Any, total_s: Any, rows: Any) -> np.ndarray:
    """``L = min(1, w_c u_c + w_b u_b + w_r u_r)`` with ``u = t / t_step`` (each share clipped to
    [0, 1]) and ``u_r`` from the rows (tokens) of the iteration."""
    t = np.maximum(np.asarray(total_s, dtype=float), 1e-15)
    u_c = np.clip(np.asarray(compute_s, dtype=float) / t, 0.0, 1.0)
    u_b = np.clip(np.asarray(memory_s, dtype=float) / t, 0.0, 1.0)
    return np.clip(curve.w_compute * u_c + curve.w_bandwidth * u_b + curve.w_rows * rows_share(rows), 0.0, 1.0)


def curve_power_w(curve: PowerCurve, tdp_w: Any, load: Any) -> np.ndarray:
    """``P = TDP (f_idle + (f_max - f_idle) L ** gamma)`` per device, W (non-decreasing in ``L``
    when ``f_max >= f_idle``)."""
    span = max(curve.max_frac - curve.idle_frac, 0.0)
    return np.asarray(tdp_w, dtype=float) * (curve.idle_frac + span * np.clip(np.asarray(load, dtype=float), 0.0, 1.0) ** curve.gamma)


def device_power_w(device: DeviceProfile, compute_s: Any, memory_s: Any, total_s: Any, rows: Any,
                   calibration: PowerCalibration | None | str = "auto") -> float:
    """Board power of one device running iterations with these roofline times and ``rows``
    tokens per iteration, W. Falls back to the profile's flat ``busy_power_w`` when no curve
    applies (no TDP, CPU, no calibration)."""
    curve = curve_for(device, calibration)
    if curve is None:
        return float(device.busy_power_w or 0.0)
    return float(curve_power_w(curve, device.tdp_w, load_fraction(curve, compute_s, memory_s, total_s, rows)))


def loaded_idle_power_w(device: DeviceProfile, calibration: PowerCalibration | None | str = "auto") -> float:
    """Power of a provisioned device with weights loaded and no work, W (profile
    ``idle_power_w`` when no curve applies)."""
    curve = curve_for(device, calibration)
    if curve is None:
        return float(device.idle_power_w or 0.0)
    return float(curve.idle_frac * float(device.tdp_w or 0.0))


InstancePower = Callable[[float, float, float, float], float]
"""``(compute_s, memory_s, total_s, rows) -> W`` of one instance (all its devices)."""


def instance_power_w(device: DeviceProfile, tp: int, calibration: PowerCalibration | None | str = "auto") -> InstancePower:
    """Power of an instance of ``tp`` devices as a function of its iteration's roofline times and
    rows (what :mod:`planner.perf.points` multiplies by ``instance_seconds_per_request``)."""
    def power(compute_s: float, memory_s: float, total_s: float, rows: float) -> float:
        return tp * device_power_w(device, compute_s, memory_s, total_s, rows, calibration)

    return power
