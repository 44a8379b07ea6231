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

Clients as services (``demand.clients``, ServeGen fleets only). ``fleet`` (the default) is the sum
above, one service. ``each`` makes every client with traffic its own service, named
``<service>/<client>`` (``chat/chunk-12`` for ``chunk-12-trace.csv``); ``{top: N}`` does so for the
``N`` clients with the largest mean rate (their summed rate over the log's windows, over the number of
windows the fleet's log has — a window a client's file lacks counts as 0 req/s) and sums the rest into
one ``<service>/others`` service (rates and CV as for a fleet). Each client-service's slots come from
its own windows: a window missing from its file is 0 req/s, so every service has the same slots and
hours; its peak is its own busiest window in the slot (the sum of the clients' slot peaks is at least
the fleet's slot peak: clients do not all peak in the same window). A client without any traffic is
left out (a note says so).

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
from planner.textio import text_stream
from planner.workload.readers.servegen import MAX_CV, MAX_RATE_PER_S

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


MAX_START_S = 1e12
"""Latest window start (s): ~30,000 years; beyond it a value is a typo (and overflows the hour-of-day slotting)."""


def _read_window_csv(path: Path) -> pd.DataFrame:
    """One ServeGen client file or a fleet file: ``window_start_s, rate_rps[, cv, ...]`` (header optional).

    Read by pandas' C parser when every row is numbers (a fleet's 162 files: 0.1 s instead of 1.5 s);
    anything else — a header, a blank or missing field, a negative or non-finite number — goes
    through :func:`_read_window_csv_rows`, which reads it row by row with the same meaning and
    names the line of a bad value."""
    try:
        frame = pd.read_csv(path, header=None, usecols=[0, 1, 2], names=["window_start_s", "rate_rps", "cv"],
                            dtype=float, encoding="utf-8-sig", skip_blank_lines=False, on_bad_lines="error")
    except (ValueError, IndexError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return _read_window_csv_rows(path)
    start, rate, cv = frame["window_start_s"].to_numpy(), frame["rate_rps"].to_numpy(), frame["cv"].to_numpy()
    # the row reader's bounds too (a 1e308 rate or start passed here and overflowed the slotting; fuzzed fleet files, issue 24)
    if not (np.isfinite(start).all() and np.isfinite(rate).all() and (start >= 0).all() and (rate >= 0).all()
            and (start <= MAX_START_S).all() and (rate <= MAX_RATE_PER_S).all() and (np.isnan(cv) | ((cv >= 0) & (cv <= MAX_CV))).all()):
        return _read_window_csv_rows(path)
    return frame


def _read_window_csv_rows(path: Path) -> pd.DataFrame:
    """:func:`_read_window_csv` row by row (the header, blanks and errors path)."""
    starts: list[float] = []
    rates: list[float] = []
    cvs: list[float] = []
    try:
        with text_stream(path) as fh:
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
                if (not (math.isfinite(start) and math.isfinite(rate)) or not 0 <= rate <= MAX_RATE_PER_S or not 0 <= start <= MAX_START_S
                        or not (math.isnan(cv) or 0 <= cv <= MAX_CV)):
                    raise InputError(Problem(str(path), f"line {lineno}", f"window start {start:g} s / rate {rate:g} req/s / cv {cv:g} out of range "
                                             f"(start in [0, {MAX_START_S:.0e}] s, rate in [0, {MAX_RATE_PER_S:.0e}] req/s, cv in [0, {MAX_CV:g}])",
                                             "fix or drop the row"))
                starts.append(start)
                rates.append(rate)
                cvs.append(cv)
    except OSError as exc:
        raise InputError(Problem(str(path), "", f"cannot read: {exc.strerror}", "check the path")) from None
    return pd.DataFrame({"window_start_s": starts, "rate_rps": rates, "cv": cvs})


def _client_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("*-trace.csv"))
    if not files:
        raise InputError(Problem(str(directory), "", "no ServeGen '*-trace.csv' client files here",
                                 "point servegen_fleet at the directory holding chunk-*-trace.csv"))
    return files


def client_windows(directory: Path) -> pd.DataFrame:
    """Every client's windows of a ServeGen fleet directory, one row per row of its files: ``client``
    (the file name without ``-trace.csv``), ``window_start_s``, ``rate_rps``, ``cv`` (missing CV: 1)."""
    parts = []
    for f in _client_files(directory):
        w = _read_window_csv(f)
        w["cv"] = w["cv"].fillna(1.0)
        w.insert(0, "client", f.name.removesuffix("-trace.csv"))
        parts.append(w)
    out = pd.concat(parts, ignore_index=True)
    out["client"] = out["client"].astype("category")
    return out


def sum_windows(windows: pd.DataFrame) -> pd.DataFrame:
    """Sum clients' windows per window start (module docstring: CV by Whitt's QNA)."""
    w = windows.assign(rate_cv2=windows["rate_rps"] * windows["cv"] ** 2)
    g = w.groupby("window_start_s", sort=True)[["rate_rps", "rate_cv2"]].sum().reset_index()
    g["cv"] = np.where(g["rate_rps"] > 0, np.sqrt(g["rate_cv2"] / g["rate_rps"].where(g["rate_rps"] > 0, 1.0)), 1.0)
    return g[["window_start_s", "rate_rps", "cv"]]


def fleet_windows(directory: Path) -> pd.DataFrame:
    """Sum the clients of a ServeGen fleet directory per window (module docstring: CV by Whitt's QNA)."""
    return sum_windows(client_windows(directory))


def client_groups(windows: pd.DataFrame, clients: object) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Split a fleet's client windows into the services of ``demand.clients`` (module docstring, *Clients as
    services*): name suffix → that service's windows (``window_start_s, rate_rps, cv``) on the fleet's whole
    window grid, and notes."""
    starts = np.sort(windows["window_start_s"].unique())
    n_windows = len(starts)
    mean = windows.groupby("client", observed=True)["rate_rps"].sum() / n_windows
    active = mean[mean > 0].sort_values(ascending=False, kind="stable")
    notes: list[str] = []
    silent = sorted(str(c) for c in mean.index if mean[c] <= 0)
    if silent:
        notes.append(f"{len(silent)} client(s) without traffic left out: {', '.join(silent[:5])}{' ...' if len(silent) > 5 else ''}")
    top = getattr(clients, "top", None)
    own = list(active.index.astype(str)) if top is None else list(active.index.astype(str)[: int(top)])
    rest = [] if top is None else list(active.index.astype(str)[int(top):])
    grid = pd.DataFrame({"window_start_s": starts})

    def on_grid(w: pd.DataFrame) -> pd.DataFrame:
        g = grid.merge(w[["window_start_s", "rate_rps", "cv"]], on="window_start_s", how="left")
        return g.fillna({"rate_rps": 0.0, "cv": 1.0})

    out: dict[str, pd.DataFrame] = {}
    by_client = {str(c): g for c, g in windows.groupby("client", observed=True)}
    for c in own:
        out[c] = on_grid(sum_windows(by_client[c]))  # sum_windows: one row per window even if a file repeats one
    if rest:
        out["others"] = on_grid(sum_windows(windows[windows["client"].astype(str).isin(rest)]))
        notes.append(f"the {len(own)} largest clients by mean rate are services of their own ({', '.join(own)}: "
                     f"{', '.join(f'{active[c]:.3g}' for c in own)} req/s); the other {len(rest)} are summed into 'others' "
                     f"({float(active[rest].sum()):.3g} req/s)")
    else:
        notes.append(f"{len(own)} clients, each a service of its own")
    return out, notes


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
    notes: tuple[str, ...] = (f"{n_all} windows over {days:.1f} days grouped by {profile.grouping} into {len(rows)} slots; "
             "a slot's peak is its busiest window's mean rate, its burstiness that window's inter-arrival CV",)
    if days < 1.0:  # the slots then stand for hours the log never saw: every slot is the same few windows
        notes += (f"warning: the log covers {days * 24:.1g} hours, less than a day: its {len(rows)} slot(s) stand for the whole "
                  "period; give a log of at least a day (ideally a week) for the hours of the day to differ",)
    return SlotProfile(pd.DataFrame(rows, columns=list(SLOT_COLUMNS)), absolute=True, source=source, notes=notes)


def slot_profile(horizon: Horizon, base_dir: Path, hours_per_month: float) -> SlotProfile:
    """The slots of ``horizon.demand`` (paths relative to ``base_dir``, the instance's folder); a period has
    ``hours_per_month`` (the instance's ``costs.hours_per_month``) x ``months_per_period`` hours."""
    prof = horizon.demand
    hours = horizon.hours_per_period(hours_per_month)
    if prof.slots is not None:
        total = sum(s.hours_per_period for s in prof.slots)
        if abs(total - hours) > 1e-6 * hours:
            raise InputError(Problem("", "horizon.demand.slots", f"slot hours sum to {total:g}, the period has {hours:g}",
                                     f"make hours_per_period of the slots add up to costs.hours_per_month ({hours_per_month:g}) x months_per_period"))
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
        raise InputError(Problem(str(f), "horizon.demand.fleet_file", "is a folder, not a file" if f.is_dir() else "file not found",
                                 "give a window_start_s, rate_rps[, cv] CSV"))
    return slots_from_windows(_read_window_csv(f), prof, hours, str(f))


def client_slot_profiles(horizon: Horizon, base_dir: Path, hours_per_month: float) -> tuple[dict[str, SlotProfile], list[str]]:
    """Per client-service (``demand.clients`` ``each`` or ``{top: N}``): its slots from its own windows
    (module docstring, *Clients as services*), keyed by the client's name (or ``others``), and notes."""
    prof = horizon.demand
    assert prof.servegen_fleet is not None
    d = base_dir / prof.servegen_fleet
    if not d.is_dir():
        raise InputError(Problem(str(d), "horizon.demand.servegen_fleet", "not a directory", "give the folder of chunk-*-trace.csv files"))
    groups, notes = client_groups(client_windows(d), prof.clients)
    if not groups:
        raise InputError(Problem(str(d), "horizon.demand", "the log has no traffic", "give a log with requests in it"))
    out = {name: slots_from_windows(w, prof, horizon.hours_per_period(hours_per_month), f"{d} ({name})") for name, w in groups.items()}
    return out, notes


def growth_multipliers(growth: Growth, periods: int, months_per_period: float) -> np.ndarray:
    """Demand multiplier of each period (module docstring)."""
    if growth.multipliers is not None:
        if len(growth.multipliers) != periods:
            raise InputError(Problem("", "horizon.growth.multipliers", f"{len(growth.multipliers)} multipliers for {periods} periods",
                                     "give one multiplier per period"))
        return np.asarray(growth.multipliers, dtype=float)
    r = float(growth.monthly_rate or 0.0)
    return np.array([(1.0 + r) ** (t * months_per_period) for t in range(periods)])
