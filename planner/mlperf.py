"""MLPerf Inference datacenter LLM results (``models/measured/mlperf_public_v4.0-v5.0.csv``) and the
benchmark rules a capacity planner needs to replay them.

One row is one (round, submitter, system, benchmark, scenario) result; the columns and rules are
described in ``models/measured/mlperf_public_v4.0-v5.0.SOURCE.md`` (§2, §3). What this module keeps
from a row (:class:`MLPerfResult`): the system's accelerator name and count, the software stack, the
benchmark and its latency class, the measured throughput in output tokens/s, the mean output length
of the run (``derived_mean_output_tokens`` = tokens/s ÷ samples/s of the same log) and the scenario's
p99 TTFT / p99 TPOT limits (printed in the log; the rules' values where a results table gave no
log).

Scenarios: ``Offline`` (all queries at once, no latency limit), ``Server`` (Poisson arrivals,
p99 TTFT and p99 per-request TPOT within the limits), ``Interactive`` (v5.0 ``llama2-70b-interactive-*``:
the Server scenario with 450 ms / 40 ms limits).

Rounds after v5.0 are held out (:data:`LAST_ROUND`): a row of a later round is listed as not
predicted, never scored, so those rounds stay an independent check. So is a row outside the closed
division, of a system not available, or of a result not marked valid (:data:`SCORED`,
:func:`scope_reason`). Numbers are bounded (:data:`MAX_RESULT`, :data:`MAX_MEAN_OUTPUT_TOKENS`): a value
beyond them is an error naming its line and column.

Rules (:data:`BENCHMARKS`) per benchmark family, from ``mlperf.conf`` and the benchmark READMEs
(SOURCE.md §3): the catalog model, the Server and Interactive limits, the reference mean output
length, and the mean **input** length the planner assumes. MLCommons states no mean input length
for any LLM benchmark (the datasets are gated); Llama-2-70B uses the project's existing assumption
(294 tokens, ``benchmarks/bench_perf_fidelity.py``: UNVERIFIED; OpenOrca prompts are capped at
1,023 tokens by ``processorca.py``); families without an assumption are not predicted and say so.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError, Problem

LAST_ROUND = (5, 0)
"""The last MLPerf round scored (v5.0); later rounds are held out for an independent check."""


@dataclass(frozen=True)
class BenchmarkRules:
    """What a benchmark family fixes: model, limits (ms, p99), reference lengths."""

    model: str | None
    """Catalog model id (``None``: no catalog profile)."""
    server_ttft_ms: float | None
    server_tpot_ms: float | None
    output_tokens_ref: float
    """Reference mean output tokens per sample (README / rules)."""
    input_tokens_assumed: float | None
    """Mean input tokens the planner assumes (``None``: no assumption, not predicted)."""
    input_source: str


BENCHMARKS: dict[str, BenchmarkRules] = {
    "llama2-70b": BenchmarkRules("llama-2-70b", 2000.0, 200.0, 294.45, 294.0,
                                 "assumed 294 (project assumption, UNVERIFIED: MLCommons states no mean input length)"),
    "llama2-70b-interactive": BenchmarkRules("llama-2-70b", 450.0, 40.0, 294.45, 294.0,
                                             "assumed 294 (project assumption, UNVERIFIED: MLCommons states no mean input length)"),
    "mixtral-8x7b": BenchmarkRules("mixtral-8x7b", 2000.0, 200.0, 144.84, None, "not stated in the sources read"),
    "llama3.1-405b": BenchmarkRules("llama-3.1-405b", 6000.0, 175.0, 684.68, None, "not stated in the sources read (long context)"),
    "gptj": BenchmarkRules(None, None, None, 69.0, None, "CNN DailyMail, max 2048"),
}
"""Per benchmark family (the benchmark name without its ``-99`` / ``-99.9`` accuracy suffix)."""

REQUIRED = ("round", "submitter", "system", "accelerator", "n_accel", "framework", "benchmark", "scenario", "latency_class",
            "result", "unit", "tokens_per_second", "derived_mean_output_tokens", "target_ttft_ns", "target_tpot_ns")
"""Columns the reader needs (the file has more; see SOURCE.md §2)."""

SCENARIOS = ("Offline", "Server", "Interactive")

SCORED: dict[str, str] = {"division": "closed", "availability": "available", "result_valid": "VALID"}
"""Rows scored (SOURCE.md §1, README "closed division, available systems"): the closed division (the
open division may change the model, its accuracy and the rules), systems available for purchase (not
``preview`` / ``rdi``), results the submission checker marked ``VALID``. A column the file lacks, or a
cell left empty (results tables give no validity column: 17 rows of the shipped file), is not stated:
the row is kept. Compared case-insensitively."""
MAX_RESULT = 1e9
"""Largest ``result`` / ``tokens_per_second`` a row may state: 100,000 accelerators (the ``n_accel``
bound) at 10,000 tokens/s each, about 70 times the best per-accelerator result of v4.0-v5.0 (the largest
row of the shipped file is 128,961 tok/s on 72 GPUs). Beyond it the value is a typo, not a run."""
MAX_MEAN_OUTPUT_TOKENS = 1_000_000.0
"""Largest ``derived_mean_output_tokens`` (far above any LLM benchmark's: 684.68 for Llama-3.1-405B); the
smallest is 1, as every request returns at least one token (0 would silently fall back to the reference
length)."""


@dataclass(frozen=True)
class MLPerfResult:
    """One MLPerf row, as the goodput check uses it."""

    line: int
    """Line in the file (header = 1)."""
    round: str
    submitter: str
    system: str
    accelerator: str
    n_accel: int
    framework: str
    benchmark: str
    family: str
    scenario: str
    """``Offline``, ``Server`` or ``Interactive``."""
    tokens_per_s: float
    """Measured output tokens/s of the whole system (NaN when the row gives no token throughput)."""
    output_tokens_mean: float | None
    """The run's mean output tokens per request (``None``: not in the row)."""
    ttft_p99_target_ms: float | None
    tpot_p99_target_ms: float | None
    division: str = ""
    availability: str = ""
    result_valid: str = ""
    """As the file states them (``""``: not stated); :data:`SCORED`, :func:`scope_reason`."""

    @property
    def label(self) -> str:
        return f"{self.round} {self.submitter} {self.system} {self.benchmark} {self.scenario}"


def round_key(name: str) -> tuple[int, int] | None:
    """``v4.1`` -> (4, 1); ``None`` when the name is not a round."""
    m = re.fullmatch(r"v(\d+)\.(\d+)", name.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def family_of(benchmark: str) -> str:
    """Benchmark family: the name without its accuracy suffix (``llama2-70b-99.9`` -> ``llama2-70b``)."""
    return re.sub(r"-99(\.9)?$", "", benchmark.strip())


def scope_reason(row: MLPerfResult) -> str | None:
    """Why a row is outside the scored set, or ``None``: a round after :data:`LAST_ROUND` (held out), or a
    stated division, availability or validity other than :data:`SCORED`'s."""
    rk = round_key(row.round)
    if rk is None or rk > LAST_ROUND:
        return f"round {row.round} is after v{LAST_ROUND[0]}.{LAST_ROUND[1]}: held out for an independent check"
    for column, want in SCORED.items():
        got = getattr(row, column)
        if got and got.lower() != want.lower():
            return f"{column} {got!r}: not scored (only {column} {want!r})"
    return None


def _within(value: float, file: str, line: int, column: str, *, low: float, high: float) -> float:
    """``value`` when ``low <= value <= high`` (the bounds a row's column must meet), else :class:`InputError` naming the column."""
    if not low <= value <= high:
        raise InputError(Problem(file, f"line {line}.{column}", f"{value:g} is not in [{low:g}, {high:g}]",
                                 f"write the value as printed in the MLPerf log in column {column!r}"))
    return value


def _number(text: str, file: str, line: int, column: str, *, required: bool) -> float | None:
    s = (text or "").strip()
    if not s:
        if required:
            raise InputError(Problem(file, f"line {line}.{column}", "is empty", f"give a number in column {column!r}"))
        return None
    try:
        v = float(s)
    except ValueError:
        raise InputError(Problem(file, f"line {line}.{column}", f"{s!r} is not a number", f"write a plain number in column {column!r}")) from None
    if not math.isfinite(v) or v < 0:
        raise InputError(Problem(file, f"line {line}.{column}", f"{s!r} is not a finite non-negative number",
                                 f"write the value as printed in the MLPerf log in column {column!r}"))
    return v


def read_mlperf(path: str | Path) -> list[MLPerfResult]:
    """The rows of an MLPerf-style CSV (columns :data:`REQUIRED`); :class:`InputError` (one line
    naming file, line and column) for a missing file or column, or a value that is not a number."""
    p = Path(path)
    file = str(p)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(Problem(file, "", "no such file", "give the path of an MLPerf results CSV (models/measured/mlperf_public_v4.0-v5.0.csv)")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(Problem(file, "", f"cannot be read as UTF-8 text ({type(exc).__name__})", "give a CSV file")) from None
    reader = csv.DictReader(text.splitlines())
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
        records = list(reader)  # the text is in memory already
    except csv.Error as exc:  # e.g. a quote never closed: one field swallowing the rest of the file
        raise InputError(Problem(file, f"line {max(reader.line_num, 1)}", f"is not valid CSV ({exc})",
                                 "close every quoted field with a quote (a field that holds a comma or a quote is quoted)")) from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(Problem(file, "header", f"missing column(s) {', '.join(missing)}",
                                 "use the columns of models/measured/mlperf_public_v4.0-v5.0.csv (SOURCE.md §2)"))
    out: list[MLPerfResult] = []
    for i, raw in enumerate(records, start=2):
        if None in raw:
            raise InputError(Problem(file, f"line {i}", f"has {len(header) + len(raw[None])} fields, the header {len(header)}",
                                     "quote fields that contain commas"))
        r = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(r.values()):
            continue
        scenario = r["scenario"]
        if scenario not in ("Offline", "Server"):
            raise InputError(Problem(file, f"line {i}.scenario", f"{scenario!r} is not an MLPerf datacenter scenario", "Offline or Server"))
        if round_key(r["round"]) is None:
            raise InputError(Problem(file, f"line {i}.round", f"{r['round']!r} is not a round name", "write it as v4.1"))
        n_accel = _number(r["n_accel"], file, i, "n_accel", required=True)
        assert n_accel is not None
        if n_accel != int(n_accel) or n_accel > 100_000:
            raise InputError(Problem(file, f"line {i}.n_accel", f"{r['n_accel']!r} is not a whole number of accelerators up to 100,000",
                                     "write the system's accelerator count"))
        result = _number(r["result"], file, i, "result", required=True)
        assert result is not None
        _within(result, file, i, "result", low=0.0, high=MAX_RESULT)
        tps = _number(r["tokens_per_second"], file, i, "tokens_per_second", required=False)
        if tps is None:
            tps = result if "token" in r["unit"].lower() else math.nan
        else:
            _within(tps, file, i, "tokens_per_second", low=0.0, high=MAX_RESULT)
        osl = _number(r["derived_mean_output_tokens"], file, i, "derived_mean_output_tokens", required=False)
        if osl is not None:  # a mean of output tokens per request: every request returns at least one
            _within(osl, file, i, "derived_mean_output_tokens", low=1.0, high=MAX_MEAN_OUTPUT_TOKENS)
        ttft = _number(r["target_ttft_ns"], file, i, "target_ttft_ns", required=False)
        tpot = _number(r["target_tpot_ns"], file, i, "target_tpot_ns", required=False)
        family = family_of(r["benchmark"])
        interactive = "interactive" in r["latency_class"].lower() or family.endswith("-interactive")
        rules = BENCHMARKS.get(family)
        if scenario == "Server":
            ttft_ms = ttft / 1e6 if ttft else (rules.server_ttft_ms if rules else None)
            tpot_ms = tpot / 1e6 if tpot else (rules.server_tpot_ms if rules else None)
        else:
            ttft_ms = tpot_ms = None
        out.append(MLPerfResult(
            line=i, round=r["round"], submitter=r["submitter"], system=r["system"], accelerator=r["accelerator"], n_accel=int(n_accel),
            framework=r["framework"], benchmark=r["benchmark"], family=family,
            scenario="Interactive" if scenario == "Server" and interactive else scenario,
            tokens_per_s=float(tps), output_tokens_mean=osl if osl else None, ttft_p99_target_ms=ttft_ms, tpot_p99_target_ms=tpot_ms,
            division=r.get("division", ""), availability=r.get("availability", ""), result_valid=r.get("result_valid", "")))
    if not out:
        raise InputError(Problem(file, "", "has no data rows", "give an MLPerf results CSV with at least one row"))
    return out
