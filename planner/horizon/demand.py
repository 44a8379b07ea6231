r"""Time-varying demand for plans over time: representative slots and growth per period.

From a log that spans days (600 s windows of a ServeGen fleet, or any ``window_start_s,
rate_rps[, cv]`` table) the windows are grouped into representative **slots**: the hour of the
day (24 slots, the default) or the hour of the day × weekday / weekend (48; the log must say
which weekday its first day is — ServeGen does not). Per slot:

- ``peak_rate_per_s`` — the busiest window inside the slot (the largest window mean over all
  days that fall in the slot): the pools of that slot are sized for it;
- ``mean_rate_per_s`` — the mean over the slot's windows (energy and busy power);
- ``interarrival_cv`` — the inter-arrival CV inside the busiest window (the burstiness the
  queueing caps see around that rate);
- ``hours_per_period`` — the slot's share of the windows × the period's hours.

A fleet of clients is one service: per window the rates add, and the CV of the superposition
of independent renewal streams is the rate-weighted mean of the clients' squared CVs,
:math:`c^2 = \sum_i (\lambda_i/\lambda) c_i^2` (Whitt, "The Queueing Network Analyzer", Bell
System Technical Journal 62(9), 1983, eq. 34 — the asymptotic method; it is exact for Poisson
clients and understates burstiness when clients burst together).

Growth: period ``t`` (0-based) multiplies every rate by ``(1 + r)^{t · months_per_period}``
for a monthly rate ``r``, or by the given multiplier.

Memory follows the number of windows read (one row per window per file), never the time span
the windows cover.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem
from planner.schema.horizon import DemandProfile, Growth, Horizon

WINDOW_S = 600.0
SLOT_COLUMNS: tuple[str, ...] = ("slot", "hours_per_period", "peak_rate_per_s", "mean_rate_per_s", "interarrival_cv")


@dataclass(frozen=True)
class SlotProfile:
    """Representative slots of one period (before growth) and where they come from."""

    slots: pd.DataFrame
    """Columns :data:`SLOT_COLUMNS`; rates absolute (requests/s) when ``absolute``, else multipliers."""
    absolute: bool
    """True: rates in requests/s (from a log); False: multipliers of the service's planned rates."""
    source: str
    notes: tuple[str, ...] = ()


def _read_window_csv(path: Path) -> pd.DataFrame:
    """One ServeGen client file or a fleet file: ``window_start_s, rate_rps[, cv, ...]`` (header optional)."""
    starts: list[float] = []
    rates: list[float] = []
    cvs: list[float] = []
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            for lineno, row in enumerate(csv.reader(fh), start=1):
                if not row or not row[0].strip():
                    continue
                try:
                    start = float(row[0])
                except ValueError:
                    if lineno == 1:
                        continue  # a header
                    raise InputError(Problem(str(path), f"line {lineno}", f"window start {row[0]!r} is not a number",
                                             "each row is window_start_s, rate_rps[, cv]")) from None
                try:
                    rate = float(row[1]) if len(row) > 1 and row[1].strip() else 0.0
                    cv = float(row[2]) if len(row) > 2 and row[2].strip() else math.nan
                except ValueError:
                    raise InputError(Problem(str(path), f"line {lineno}", "rate or cv is not a number",
                                             "each row is window_start_s, rate_rps[, cv]")) from None
                if not (math.isfinite(start) and math.isfinite(rate)) or rate < 0 or start < 0:
                    raise InputError(Problem(str(path), f"line {lineno}", f"window start {start} / rate {rate} must be finite and >= 0",
                                             "fix or drop the row"))
                starts.append(start)
                rates.append(rate)
                cvs.append(cv)
    except OSError as exc:
        raise InputError(Problem(str(path), "", f"cannot read: {exc.strerror}", "check the path")) from None
    return pd.DataFrame({"window_start_s": starts, "rate_rps": rates, "cv": cvs})


def fleet_windows(directory: Path) -> pd.DataFrame:
    """Sum the clients of a ServeGen fleet directory per window (module docstring: CV by Whitt's QNA)."""
    files = sorted(directory.glob("*-trace.csv"))
    if not files:
        raise InputError(Problem(str(directory), "", "no ServeGen '*-trace.csv' client files here",
                                 "point servegen_fleet at the directory holding chunk-*-trace.csv"))
    parts = []
    for f in files:
        w = _read_window_csv(f)
        w["cv"] = w["cv"].fillna(1.0)
        parts.append(w)
    allw = pd.concat(parts, ignore_index=True)
    allw["rate_cv2"] = allw["rate_rps"] * allw["cv"] ** 2
    g = allw.groupby("window_start_s", sort=True)[["rate_rps", "rate_cv2"]].sum().reset_index()
    g["cv"] = np.where(g["rate_rps"] > 0, np.sqrt(g["rate_cv2"] / g["rate_rps"].where(g["rate_rps"] > 0, 1.0)), 1.0)
    return g[["window_start_s", "rate_rps", "cv"]]


def slot_key(window_start_s: np.ndarray, grouping: str, day0_weekday: int | None) -> np.ndarray:
    hour = (window_start_s // 3600).astype(np.int64) % 24
    if grouping == "hour_of_day":
        return np.array([f"h{h:02d}" for h in hour])
    day = (window_start_s // 86400).astype(np.int64)
    weekday = (day + int(day0_weekday or 0)) % 7
    part = np.where(weekday >= 5, "weekend", "weekday")
    return np.array([f"{p}-h{h:02d}" for p, h in zip(part, hour, strict=True)])


def slots_from_windows(windows: pd.DataFrame, profile: DemandProfile, hours_per_period: float, source: str) -> SlotProfile:
    """Group windows into slots (module docstring)."""
    if windows.empty or float(windows["rate_rps"].sum()) <= 0:
        raise InputError(Problem(source, "horizon.demand", "the log has no traffic", "give a log with requests in it"))
    w = windows.copy()
    w["rate_rps"] = w["rate_rps"] * profile.rate_scale
    w["slot"] = slot_key(w["window_start_s"].to_numpy(float), profile.grouping, profile.day0_weekday)
    rows = []
    n_all = len(w)
    for slot, grp in w.groupby("slot", sort=True):
        j = int(np.argmax(grp["rate_rps"].to_numpy(float)))
        cv_busiest = float(grp["cv"].to_numpy(float)[j])
        cv = cv_busiest if math.isfinite(cv_busiest) else 1.0
        rows.append({"slot": str(slot), "hours_per_period": hours_per_period * len(grp) / n_all,
                     "peak_rate_per_s": float(grp["rate_rps"].to_numpy(float)[j]), "mean_rate_per_s": float(grp["rate_rps"].mean()),
                     "interarrival_cv": cv})
    days = (w["window_start_s"].max() - w["window_start_s"].min() + WINDOW_S) / 86400.0
    notes = (f"{n_all} windows over {days:.1f} days grouped by {profile.grouping} into {len(rows)} slots; "
             "a slot's peak is its busiest window's mean rate, its burstiness that window's inter-arrival CV",)
    return SlotProfile(pd.DataFrame(rows, columns=list(SLOT_COLUMNS)), absolute=True, source=source, notes=notes)


def slot_profile(horizon: Horizon, base_dir: Path) -> SlotProfile:
    """The slots of ``horizon.demand`` (paths relative to ``base_dir``, the instance's folder)."""
    prof = horizon.demand
    hours = horizon.hours_per_period
    if prof.slots is not None:
        total = sum(s.hours_per_period for s in prof.slots)
        if abs(total - hours) > 1e-6 * hours:
            raise InputError(Problem("", "horizon.demand.slots", f"slot hours sum to {total:g}, the period has {hours:g}",
                                     "make hours_per_period of the slots add up to 730 x months_per_period"))
        rows = [{"slot": s.name, "hours_per_period": s.hours_per_period, "peak_rate_per_s": s.peak_multiplier,
                 "mean_rate_per_s": s.mean_multiplier if s.mean_multiplier is not None else s.peak_multiplier,
                 "interarrival_cv": s.interarrival_cv if s.interarrival_cv is not None else math.nan} for s in prof.slots]
        return SlotProfile(pd.DataFrame(rows, columns=list(SLOT_COLUMNS)), absolute=False, source="horizon.demand.slots")
    if prof.servegen_fleet is not None:
        d = base_dir / prof.servegen_fleet
        if not d.is_dir():
            raise InputError(Problem(str(d), "horizon.demand.servegen_fleet", "not a directory", "give the folder of chunk-*-trace.csv files"))
        return slots_from_windows(fleet_windows(d), prof, hours, str(d))
    assert prof.fleet_file is not None
    f = base_dir / prof.fleet_file
    if not f.is_file():
        raise InputError(Problem(str(f), "horizon.demand.fleet_file", "file not found", "give a window_start_s, rate_rps[, cv] CSV"))
    return slots_from_windows(_read_window_csv(f), prof, hours, str(f))


def growth_multipliers(growth: Growth, periods: int, months_per_period: float) -> np.ndarray:
    """Demand multiplier of each period (module docstring)."""
    if growth.multipliers is not None:
        if len(growth.multipliers) != periods:
            raise InputError(Problem("", "horizon.growth.multipliers", f"{len(growth.multipliers)} multipliers for {periods} periods",
                                     "give one multiplier per period"))
        return np.asarray(growth.multipliers, dtype=float)
    r = float(growth.monthly_rate or 0.0)
    return np.array([(1.0 + r) ** (t * months_per_period) for t in range(periods)])


def write_fleet_csv(windows: pd.DataFrame, path: Path) -> None:
    """The fleet sum as a ``window_start_s, rate_rps, cv`` CSV (a ``fleet_file``)."""
    windows[["window_start_s", "rate_rps", "cv"]].to_csv(path, index=False, float_format="%.6g")
