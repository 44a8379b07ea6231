"""ServeGen per-client aggregates (Alibaba Bailian): a headerless ``*-trace.csv`` and a ``*-dataset.json``.

These are not request logs. The trace CSV has one row per 600 s window:
``window_start_s, rate_rps, cv, arrival_family, param1, param2`` (family empty when idle).
The dataset JSON maps a window start (6 h windows) to ``{field: PMF}``, each PMF a string
holding a Python dict literal ``{token_count: probability}``; a dataset window applies to
every trace window from its start until the next key.

Length distributions are mixed over dataset windows with weights = requests (rate x 600 s)
in the trace windows each covers. Multimodal clients give ``text_tokens`` and per-modality
token counts instead of ``input_tokens``: the input distribution is their convolution,
assuming the parts independent (said in the notes).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from planner.errors import InputError, Problem
from planner.workload.log import MAX_TOKENS

WINDOW_S = 600.0
INPUT_PARTS = ("text_tokens", "image_tokens", "audio_tokens", "video_tokens")


@dataclass
class ServeGenAggregate:
    source: str
    windows: pd.DataFrame
    """Columns window_start_s, rate_rps, cv, family."""
    pmfs: dict[str, tuple[np.ndarray, np.ndarray]]
    """Mixed PMF per field: (values, probabilities)."""
    notes: list[str] = field(default_factory=list)


def sibling_paths(path: Path) -> tuple[Path, Path]:
    """(trace CSV, dataset JSON) for either file of a pair."""
    name = path.name
    for suffix in ("-trace.csv", "-dataset.json"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            return path.with_name(stem + "-trace.csv"), path.with_name(stem + "-dataset.json")
    raise InputError(Problem(file=str(path), path="", message="a ServeGen file is named <client>-trace.csv or <client>-dataset.json", fix="give one of the pair (both must sit side by side)"))


MAX_RATE_PER_S = 1e7
MAX_CV = 1e3
"""Bounds of a window row: beyond them the row is not a measurement (and the peak estimates
``rate + z·cv·sqrt(rate / w)`` would overflow)."""
MAX_DENSE_TOKENS = 4_000_000
"""Largest token value convolved on a dense grid (32 MB per distribution); larger supports are
summed pairwise when that stays under :data:`MAX_PAIRS`."""
MAX_PAIRS = 10_000_000


def _parse_pmf(text: object, file: str, where: str) -> dict[float, float]:
    """A PMF ``{token_count: probability}``: counts finite and >= 0, probabilities finite and >= 0."""
    fix = "use the ServeGen dataset file unchanged"
    try:
        obj = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InputError(Problem(file=file, path=where, message="PMF is not a dict literal {value: probability}", fix=fix)) from None
    if not isinstance(obj, dict):
        raise InputError(Problem(file=file, path=where, message="PMF is not a mapping {value: probability}", fix=fix))
    out: dict[float, float] = {}
    for k, v in obj.items():
        try:
            if isinstance(k, bool) or isinstance(v, bool):
                raise TypeError
            value, prob = float(k), float(v)
        except (TypeError, ValueError, OverflowError):
            raise InputError(Problem(file=file, path=where, message=f"PMF entry {str(k)[:20]!r}: {str(v)[:20]!r} is not token_count: probability (numbers)", fix=fix)) from None
        if not (math.isfinite(value) and math.isfinite(prob)) or value < 0 or prob < 0 or value > MAX_TOKENS:
            raise InputError(Problem(file=file, path=where, message=f"PMF entry {k!r}: {v!r} needs a token count in [0, {MAX_TOKENS:.0e}] and a probability >= 0", fix=fix))
        out[value] = out.get(value, 0.0) + prob
    return out  # may be empty (an idle window): _mix skips it


def _mix(parts: list[tuple[dict[float, float], float]], file: str = "", name: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Mixture of the PMFs weighted by the requests each covers (equal weights when none
    carries traffic); empty arrays when no PMF has any probability mass."""
    acc: dict[float, float] = {}
    for pmf, weight in parts:
        total = sum(pmf.values())
        if total <= 0 or weight <= 0:
            continue
        for v, p in pmf.items():
            acc[v] = acc.get(v, 0.0) + weight * p / total
    if not acc and parts and all(w <= 0 for _, w in parts):  # no trace window weighs these: mix them equally
        return _mix([(pmf, 1.0) for pmf, _ in parts], file, name)
    if not acc:  # no probability mass anywhere: the field is left out
        return np.zeros(0), np.zeros(0)
    values = np.array(sorted(acc), dtype=np.float64)
    probs = np.array([acc[v] for v in values], dtype=np.float64)
    return values, probs / probs.sum()


def _convolve(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], file: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Distribution of the sum of two independent integer-valued variables (memory bounded:
    dense up to :data:`MAX_DENSE_TOKENS`, else pairwise up to :data:`MAX_PAIRS` pairs)."""
    if max(float(a[0].max()), float(b[0].max())) <= MAX_DENSE_TOKENS:
        da = np.zeros(int(a[0].max()) + 1)
        np.add.at(da, a[0].astype(np.int64), a[1])
        db = np.zeros(int(b[0].max()) + 1)
        np.add.at(db, b[0].astype(np.int64), b[1])
        c = np.convolve(da, db)
        nz = np.flatnonzero(c > 0)
        return nz.astype(np.float64), c[nz] / c[nz].sum()
    if a[0].size * b[0].size > MAX_PAIRS:
        raise InputError(Problem(file=file, path="", message=f"input-part distributions too large to combine ({a[0].size} x {b[0].size} values)", fix="use the ServeGen dataset file unchanged"))
    sums = np.add.outer(a[0], b[0]).ravel()
    probs = np.multiply.outer(a[1], b[1]).ravel()
    values, inverse = np.unique(sums, return_inverse=True)
    mass = np.bincount(inverse, weights=probs)
    return values, mass / mass.sum()


NO_FAMILY = "(not in file)"
"""The family of a non-idle window of a trace without the family column."""


def read_servegen(path: Path) -> ServeGenAggregate:
    trace_path, dataset_path = sibling_paths(path)
    for p in (trace_path, dataset_path):
        if not p.is_file():
            raise InputError(Problem(file=str(p), path="", message="missing half of a ServeGen pair", fix=f"put {trace_path.name} and {dataset_path.name} side by side"))
        if p.stat().st_size == 0:
            raise InputError(Problem(file=str(p), path="", message="the file is empty", fix="use the ServeGen files unchanged"))
    fix = "use the ServeGen files unchanged"
    try:
        raw = pd.read_csv(trace_path, header=None, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(Problem(file=str(trace_path), path="", message=f"cannot read as CSV: {str(exc).splitlines()[0][:120]}", fix=fix)) from None
    if raw.shape[1] < 3:
        raise InputError(Problem(file=str(trace_path), path="", message=f"expected 6 headerless columns (window_start_s, rate_rps, cv, family, param1, param2), got {raw.shape[1]}", fix="use the ServeGen trace file unchanged"))
    start = pd.to_numeric(raw[0], errors="coerce")
    rate = pd.to_numeric(raw[1], errors="coerce")
    cv = pd.to_numeric(raw[2], errors="coerce")
    bad = ~(np.isfinite(start) & np.isfinite(rate) & np.isfinite(cv)) | (rate < 0) | (rate > MAX_RATE_PER_S) | (cv < 0) | (cv > MAX_CV) | (start.abs() > 1e12)
    if bool(bad.any()):
        lines = (np.flatnonzero(bad.to_numpy()) + 1)[:5]
        raise InputError(Problem(file=str(trace_path), path="", message=f"{int(bad.sum())} unusable window row(s) at lines {', '.join(map(str, lines))} (window start, rate and CV must be finite numbers, 0 <= rate <= {MAX_RATE_PER_S:.0e}/s, 0 <= CV <= {MAX_CV:g})", fix="use the ServeGen trace file unchanged"))
    # a trace cut to 3 columns has no arrival family: its windows are told idle by their rate alone (NO_FAMILY marks them)
    windows = pd.DataFrame({"window_start_s": start, "rate_rps": rate, "cv": cv,
                            "family": raw[3] if raw.shape[1] > 3 else np.where(rate > 0, NO_FAMILY, "")}).sort_values("window_start_s", kind="stable").reset_index(drop=True)
    try:
        dataset = json.loads(dataset_path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise InputError(Problem(file=str(dataset_path), path="", message=f"not JSON: {exc.msg} (line {exc.lineno})", fix="use the ServeGen dataset file unchanged")) from None
    except (RecursionError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(Problem(file=str(dataset_path), path="", message=f"not usable JSON ({type(exc).__name__})", fix=fix)) from None
    if not isinstance(dataset, dict) or not dataset:
        raise InputError(Problem(file=str(dataset_path), path="", message="expected a non-empty mapping {window_start_s: {field: PMF}}", fix="use the ServeGen dataset file unchanged"))
    def window_start(key: str) -> float:
        try:
            value = float(key)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InputError(Problem(file=str(dataset_path), path=str(key)[:40], message="a dataset key is not a window start in seconds", fix=fix))
        return value

    keys = sorted(dataset, key=window_start)
    starts = np.array([float(k) for k in keys])
    # requests in the trace windows each dataset window covers
    cover = np.searchsorted(starts, windows["window_start_s"].to_numpy(), side="right") - 1
    requests = windows["rate_rps"].to_numpy() * WINDOW_S
    weight = np.bincount(np.maximum(cover, 0)[cover >= 0], weights=requests[cover >= 0], minlength=len(keys))
    fields: dict[str, list[tuple[dict[float, float], float]]] = {}
    for i, key in enumerate(keys):
        entry = dataset[key]
        if not isinstance(entry, dict):
            raise InputError(Problem(file=str(dataset_path), path=key, message="expected {field: PMF}", fix="use the ServeGen dataset file unchanged"))
        for name, text in entry.items():
            fields.setdefault(name, []).append((_parse_pmf(text, str(dataset_path), f"{key}.{name}"), float(weight[i])))
    mixed = {name: _mix(parts, str(dataset_path), name) for name, parts in fields.items()}
    pmfs = {name: pmf for name, pmf in mixed.items() if pmf[0].size}
    notes: list[str] = []
    if bool((windows["family"] == NO_FAMILY).any()):
        notes.append(f"the trace has {raw.shape[1]} of ServeGen's 6 columns: no arrival family; a window is idle when its rate is 0")
    if "input_tokens" not in pmfs:
        parts = [pmfs[name] for name in INPUT_PARTS if name in pmfs]
        if not parts or "output_tokens" not in pmfs:
            raise InputError(Problem(file=str(dataset_path), path="", message=f"no input_tokens/output_tokens distributions (fields: {', '.join(pmfs)})", fix="use a ServeGen language, reason or multimodal dataset file"))
        total = parts[0]
        for part in parts[1:]:
            total = _convolve(total, part, str(dataset_path))
        pmfs["input_tokens"] = total
        notes.append(f"input tokens = {' + '.join(name for name in INPUT_PARTS if name in pmfs)}, assumed independent (their joint is not published)")
    return ServeGenAggregate(source=str(path), windows=windows, pmfs=pmfs, notes=notes)
