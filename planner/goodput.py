"""Goodput under latency limits, checked against MLPerf Server/Interactive/Offline results through the
path of ``planner solve`` (``planner validate-goodput``).

For each MLPerf row (:mod:`planner.mlperf`) the question is the one a buyer asks: how many requests
per second does this system sustain under the scenario's rules? The answer comes from the planner's
own chain, never a separate formula:

1. an instance (:func:`instance_for`): one service on the row's model at the benchmark's mean lengths
   (one bucket: the assumed mean input, the run's measured mean output), Poisson arrivals
   (``interarrival_cv: 1``), the scenario's SLO (Server / Interactive: p99 TTFT and p99 per-request
   TPOT at the limits the log prints; Offline: no latency limit, written as a p99 end-to-end bound of
   the 600 s minimum run, the only bound an Offline run has), the system's device as the only
   candidate, tp in {1, 2, 4, 8} up to the system's count (only the submission's tp where its run
   command and harness fix one engine for all cards: :func:`system_tp`), both architectures, and the
   device's ``procurement_limit`` set to the system's accelerator count;
2. its capacity table (:func:`planner.capacity.build_capacity_tables`) and the MIP with the
   verify-and-tighten loop of a study (:func:`planner.studies.sweep.solve_scenario`, the same plans
   ``planner solve`` gives);
3. the largest rate ``λ*`` at which some architecture has a feasible plan within the system's
   devices: bisection on ``log λ`` (:func:`planner.studies.search.largest_passing_multiplier`) from the
   table's no-queueing bound ``λ_0 = max over points of (N / devices per instance) / instance-seconds
   per request`` until ``hi / lo − 1 ≤ rel_tol`` (default 2 %; the reported rate is the passing end, so
   it errs low by at most that much).

Predicted throughput = ``λ* × mean output tokens`` of the run (tokens/s of the whole system), compared
with the measured tokens/s; error = predicted / measured − 1.

Precision (the logs do not state it): fp8 weights and fp8 KV, fp4 weights on Blackwell (B200, GB200:
NVIDIA's v5.0 Llama-2-70B submissions are FP4) — :data:`WEIGHT_PRECISION`, an assumption shared with
``benchmarks/bench_perf_fidelity.py``. Engine: TensorRT stacks -> ``trtllm``, vLLM -> ``vllm``
calibration, except upstream CUDA vLLM before 0.6 -> the ``vllm-0.5.4`` stack fitted on ML.ENERGY runs
(:func:`stack_of`); any other stack is not predicted (no calibration for it).

Rows not predicted are listed with the reason (:class:`Skip`): a later round (held out), a row outside the
scored set (open division, a system not available, a result not valid: :func:`planner.mlperf.scope_reason`), an accelerator
with no catalog profile, a benchmark whose model has no profile or whose mean input length is not
stated, a software stack with no calibration, no token throughput in the row.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from planner.errors import InputError, Problem
from planner.mlperf import BENCHMARKS, LAST_ROUND, MLPerfResult, scope_reason
from planner.perf.names import device_id
from planner.progress import report, stage

WEIGHT_PRECISION: dict[str, str] = {"b200": "fp4", "gb200": "fp4", "b300": "fp4", "gb300": "fp4"}
"""Weight precision per device (default fp8): see the module docstring."""
KV_PRECISION = "fp8"
OFFLINE_E2E_BOUND_MS = 600_000.0
"""Offline has no latency limit; a run lasts at least 600 s (``*.min_duration``), so no request of a
valid run takes longer: the one bound written for Offline (p99 E2E), loose enough never to bind."""
TP_DEGREES = (1, 2, 4, 8)
REL_TOL = 0.02


def mlperf_device(accelerator: str, catalog_ids: Iterable[str]) -> str | None:
    """Catalog device id of an MLPerf accelerator name, or ``None``.

    The name is normalised as :func:`planner.perf.names.device_id` does (vendor prefix dropped,
    separators to ``-``) and its longest leading run of ``-``-separated parts that the resolver maps
    wins: ``AMD Instinct MI300X-NPS1-SPX-192GB-750W`` -> ``mi300x``, ``NVIDIA H200-SXM-141GB-CTS`` ->
    ``h200-sxm``, ``NVIDIA H100-NVL-94GB`` -> ``h100-nvl``. Names with no profile (GH200, TPU v5e,
    Gaudi 2) give ``None``. One function, so it can later point at the project's single resolver."""
    ids = frozenset(catalog_ids)
    s = re.sub(r"[^a-z0-9]+", "-", accelerator.strip().lower()).strip("-")
    s = re.sub(r"^(nvidia|amd-instinct|amd|intel)-", "", s)
    parts = s.split("-")
    for k in range(len(parts), 0, -1):
        dev = device_id("-".join(parts[:k]), ids)
        if dev is not None:
            return dev
    return None


def engine_of(framework: str) -> str | None:
    """Calibrated engine of a software stack string (``TensorRT 10.2, CUDA 12.4`` -> ``trtllm``)."""
    f = framework.lower()
    if "tensorrt" in f:
        return "trtllm"
    if "vllm" in f:
        return "vllm"
    return None


STACKS_FILE = "engine_stacks.yaml"
"""``models/calibration/engine_stacks.yaml``: the per-version engine calibrations of
``models/calibration/power.yaml`` (fitted on ML.ENERGY runs, ``measured_energy.csv``; never on
MLPerf) as a calibration file an instance can name (:func:`write_stack_calibration`)."""
VLLM_V0_STACK = "vllm-0.5.4"
VLLM_V0_BEFORE = (0, 6)
"""Upstream (CUDA) vLLM releases before 0.6.0 get the ``vllm-0.5.4`` stack, not the shipped ``vllm``
calibration (vLLM 0.11-0.12 runs). vLLM 0.6.0 moved the API server, scheduling and output
processing off the GPU's critical path (vLLM blog, 2024-09-05, "vLLM v0.6.0: 2.7x Throughput
Improvement and 5x Latency Reduction": 2.7x on Llama-3-8B / H100, 1.8x on Llama-3-70B / 4xH100), so a
0.5-era engine pays per-sequence host costs a 0.11 calibration lacks; ML.ENERGY Leaderboard v2 ran
vLLM 0.5.4 and its fit (``seq_overhead_us`` 375 vs 56, ``layer_overhead_us`` 396 vs 67; refitted 2026-12-05 on
314 runs, its ``eta_b`` at the bound 1 and the per-layer overhead carrying the slowness; 413 vs 56 and ``eta_b``
0.38 on the 54 runs before) is the only measurement of that era we have. ROCm builds (``+rocm`` or a ROCm runtime in the string: AMD's
fork, its own kernels and scheduler) keep the ``vllm`` calibration: no non-MLPerf ROCm-vLLM runs calibrate them."""


def stack_of(framework: str) -> tuple[str, str | None] | None:
    """``(engine, calibration file name or None = the shipped one)`` of a software stack string, or
    ``None`` when no engine is calibrated: ``vLLM 0.5.2`` -> ``("vllm-0.5.4", "engine_stacks.yaml")``,
    ``vLLM 0.4.3+rocm614, ...`` -> ``("vllm", None)``, ``TensorRT 10.2`` -> ``("trtllm", None)``."""
    engine = engine_of(framework)
    if engine != "vllm":
        return (engine, None) if engine else None
    m = re.search(r"vllm\s+v?(\d+)\.(\d+)(?:\.\d+)?([^\s,]*)", framework.lower())
    if m and (int(m.group(1)), int(m.group(2))) < VLLM_V0_BEFORE and "rocm" not in framework.lower():
        return VLLM_V0_STACK, STACKS_FILE
    return "vllm", None


INTERCONNECT_FILE = "mlperf_system_interconnect.csv"
"""``models/measured/mlperf_system_interconnect.csv``: the ``accelerator_interconnect`` of the PCIe-card
systems, copied from their MLPerf system descriptions (its SOURCE.md); a configuration fact like the
accelerator count, not a measurement."""


@lru_cache(maxsize=1)
def _interconnects() -> dict[tuple[str, str, str], tuple[int, str]]:
    from planner.catalog import catalog_file

    path = catalog_file(f"measured/{INTERCONNECT_FILE}")
    if path is None:
        return {}
    with path.open(encoding="utf-8") as fh:
        return {(r["round"], r["submitter"], r["system"]): (int(r["accelerators_per_node"]), r["accelerator_interconnect"])
                for r in csv.DictReader(fh)}


def system_interconnect(row: MLPerfResult) -> int:
    """Cards per node of a system listed with no NVLink (``accelerator_interconnect`` without
    "nvlink", e.g. ``N/A``), else 0 (the catalog's scale-up link holds)."""
    hit = _interconnects().get((row.round, row.submitter, row.system))
    return hit[0] if hit is not None and "nvlink" not in hit[1].lower() else 0


ENGINES_FILE = "mlperf_system_engines.csv"
"""``models/measured/mlperf_system_engines.csv``: systems whose submission fixes the number of engine
instances (one API server for all cards), read from its run command and harness code (its SOURCE.md);
a configuration fact, not a measurement."""


@lru_cache(maxsize=1)
def _engine_instances() -> dict[tuple[str, str, str], int]:
    from planner.catalog import catalog_file

    path = catalog_file(f"measured/{ENGINES_FILE}")
    if path is None:
        return {}
    with path.open(encoding="utf-8") as fh:
        return {(r["round"], r["submitter"], r["system"]): int(r["engine_instances"]) for r in csv.DictReader(fh)}


def system_tp(row: MLPerfResult) -> int:
    """Tensor-parallel size a system's submission fixes (``n_accel / engine_instances`` of
    :data:`ENGINES_FILE`), else 0 (the planner chooses tp and replicas as ``planner solve`` does)."""
    k = _engine_instances().get((row.round, row.submitter, row.system))
    return row.n_accel // k if k and row.n_accel % k == 0 else 0


def write_stack_calibration(path: str | Path) -> None:
    """Write :data:`STACKS_FILE` from ``models/calibration/power.yaml`` (its ``engines``, by
    :func:`planner.perf.power_fit.stack_calibration`): the two files cannot drift (a test compares them)."""
    import yaml

    from planner.perf.power import load_power_calibration
    from planner.perf.power_fit import stack_calibration

    pc = load_power_calibration()
    cal = stack_calibration(pc) if pc is not None else None
    if pc is None or cal is None:
        raise ValueError("models/calibration/power.yaml has no engine calibrations")
    cal = cal.model_copy(update={"name": "engine_stacks", "description": (
        f"per-version engine calibrations of power.yaml (fitted on {pc.data_file}, sha256 {pc.data_sha256[:12]}; "
        "ML.ENERGY runs, no MLPerf row), written by planner.goodput.write_stack_calibration")})
    header = ("# Written by planner.goodput.write_stack_calibration from models/calibration/power.yaml (engines);\n"
              "# see planner/perf/calibration.py for the fields. Do not edit: regenerate.\n")
    Path(path).write_text(header + yaml.safe_dump(cal.model_dump(mode="json", exclude_none=True), sort_keys=False, width=100),
                          encoding="utf-8")


@dataclass(frozen=True)
class Case:
    """What one prediction needs; rows with equal cases share one solve."""

    device: str
    n_accel: int
    model: str
    weight_precision: str
    engine: str
    input_tokens: int
    output_tokens: int
    ttft_ms: float | None
    tpot_ms: float | None
    calibration: str | None = None
    """Calibration file in ``models/calibration/`` (``None``: the shipped one): :func:`stack_of`."""
    pcie_node: int = 0
    """0: the device's catalog scale-up link; ``k > 0``: the system's cards have no NVLink, ``k`` per
    node on PCIe (:func:`system_interconnect`)."""
    fixed_tp: int = 0
    """0: tp in :data:`TP_DEGREES` up to the system's count; ``k > 0``: the submission ran one engine
    per ``k`` cards (:func:`system_tp`), so only tp ``k``."""


@dataclass(frozen=True)
class Skip:
    reason: str


def case_for(row: MLPerfResult, catalog: Any) -> Case | Skip:
    """The prediction a row asks for, or why it cannot be made."""
    out_of_scope = scope_reason(row)
    if out_of_scope:
        return Skip(out_of_scope)
    rules = BENCHMARKS.get(row.family)
    if rules is None:
        return Skip(f"benchmark {row.benchmark!r} has no rules in planner.mlperf.BENCHMARKS")
    if rules.model is None or rules.model not in catalog.models:
        return Skip(f"model of {row.benchmark} not in the catalog")
    if rules.input_tokens_assumed is None:
        return Skip(f"mean input length of {row.family}: {rules.input_source}")
    dev = mlperf_device(row.accelerator, catalog.devices)
    if dev is None or dev not in catalog.devices:
        return Skip(f"accelerator {row.accelerator!r} has no catalog device")
    if row.n_accel < 1:
        return Skip("no accelerator count (CPU-only system)")
    stack = stack_of(row.framework)
    if stack is None:
        return Skip(f"software stack {row.framework!r} has no calibrated engine (trtllm, vllm)")
    engine, calibration = stack
    if not math.isfinite(row.tokens_per_s) or row.tokens_per_s <= 0:
        return Skip("no token throughput in the row")
    osl = row.output_tokens_mean or rules.output_tokens_ref
    return Case(device=dev, n_accel=row.n_accel, model=rules.model, weight_precision=WEIGHT_PRECISION.get(dev, "fp8"), engine=engine,
                input_tokens=int(round(rules.input_tokens_assumed)), output_tokens=int(round(osl)),
                ttft_ms=row.ttft_p99_target_ms, tpot_ms=row.tpot_p99_target_ms, calibration=calibration,
                pcie_node=system_interconnect(row), fixed_tp=system_tp(row))


def instance_for(case: Case, rate_per_s: float = 1.0) -> dict[str, Any]:
    """The planning instance (as a mapping) whose answer is the system's goodput: see the module docstring."""
    if case.ttft_ms is None and case.tpot_ms is None:
        slo: dict[str, Any] = {"e2e": {"quantile": 0.99, "target_ms": OFFLINE_E2E_BOUND_MS}}
    else:
        slo = {}
        if case.ttft_ms is not None:
            slo["ttft"] = {"quantile": 0.99, "target_ms": case.ttft_ms}
        if case.tpot_ms is not None:
            slo["tpot"] = {"quantile": 0.99, "target_ms": case.tpot_ms}
    extra: dict[str, Any] = {}
    if case.calibration:
        from planner.catalog import catalog_file

        path = catalog_file(f"calibration/{case.calibration}")
        if path is None:
            raise InputError(Problem("models/calibration", case.calibration, "is missing",
                                     "regenerate it: python -c 'from planner.goodput import write_stack_calibration as w; "
                                     "w(\"models/calibration/engine_stacks.yaml\")'"))
        extra["calibration"] = str(path)
    # no NVLink in the system: no scale-up link, the node's cards on PCIe (roofline: a ring over PCIe)
    pcie: dict[str, Any] = ({"scaleup_bw_gb_per_s_bidir": None, "devices_per_node": case.pcie_node,
                             "sources": {"scaleup_bw_gb_per_s_bidir": f"MLPerf system description: no NVLink ({INTERCONNECT_FILE})",
                                         "devices_per_node": f"MLPerf system description: cards per node ({INTERCONNECT_FILE})"}}
                            if case.pcie_node else {})
    return {
        **extra,
        "name": "mlperf-goodput",
        "services": {"mlperf": {
            "model": case.model, "weight_precision": case.weight_precision, "kv_precision": KV_PRECISION, "engine": case.engine, "slo": slo,
            "traffic": {"rate_per_s": rate_per_s, "peak_rate_per_s": rate_per_s, "interarrival_cv": 1.0,
                        "lengths": [{"input_tokens": case.input_tokens, "output_tokens": case.output_tokens, "weight": 1.0}]},
        }},
        "catalog": {"devices": [case.device], "tp_degrees": [case.fixed_tp] if case.fixed_tp else [t for t in TP_DEGREES if t <= case.n_accel], "pricing": "rent",
                    "device_overrides": {case.device: {"procurement_limit": case.n_accel, **pcie}}},
        "options": {"architectures": ["shared", "disaggregated"]},
    }


@dataclass(frozen=True)
class Goodput:
    """The largest Poisson rate a case's system serves within its limits (``rate_per_s``; 0: none)."""

    rate_per_s: float
    solves: int
    architecture: str | None
    pools: str
    """The plan at that rate: ``pool x instances``."""
    busy_bound_rate_per_s: float = 0.0
    """``λ_0``: the rate the devices carry at 100 % busy on the best point (no queueing, no limits on the
    pool size beyond the device count): ``rate_per_s / busy_bound_rate_per_s`` is the share the
    queueing caps, the latency limits' pool choice and integer instances leave."""


def _no_queue_bound(tables: Any, n_accel: int) -> float:
    """Requests/s the system's devices carry at 100 % busy (no queueing, best point): the bracket's top."""
    pts = tables.points
    pts = pts[pts["feasible"].astype(bool)]
    if pts.empty:
        return 0.0
    dev_s = pts["instance_seconds_per_request"].to_numpy(float) * pts["tp"].to_numpy(float)
    uni = dev_s[pts["role"].to_numpy() == "unified"]
    best = float(uni.min()) if len(uni) else math.inf
    pf = dev_s[pts["role"].to_numpy() == "prefill"]
    dc = dev_s[pts["role"].to_numpy() == "decode"]
    if len(pf) and len(dc):
        best = min(best, float(pf.min() + dc.min()))
    return n_accel / best if math.isfinite(best) and best > 0 else 0.0


def max_goodput(case: Case, catalog: Any, *, rel_tol: float = REL_TOL) -> Goodput:
    """Largest rate with a feasible plan on at most ``case.n_accel`` devices (module docstring, step 3)."""
    from planner.instance import resolve_instance
    from planner.optimize.resolve import winner_of
    from planner.studies.search import largest_passing_multiplier
    from planner.studies.source import TableSource
    from planner.studies.sweep import solve_scenario

    where = Path("mlperf-goodput.yaml")
    probe = TableSource.from_instance(resolve_instance(instance_for(case), where, catalog))
    top = _no_queue_bound(probe.base_tables, case.n_accel)
    if top <= 0:
        return Goodput(0.0, 0, None, "", 0.0)
    source = TableSource.from_instance(resolve_instance(instance_for(case, top), where, catalog))
    seen: dict[float, Any] = {}

    def ok(m: float) -> bool:
        summaries, _ = solve_scenario(source, {"services.mlperf.traffic.rate_multiplier": m}, headroom=1.0)
        w = winner_of(summaries)
        seen[m] = summaries[w] if w else None
        return w is not None

    m = largest_passing_multiplier(ok, cap=2.0**12, rel_tol=rel_tol)
    best = seen.get(m)
    pools = ", ".join(f"{p} x{n}" for p, n in sorted(best.instances.items())) if best else ""
    return Goodput(m * top, len(seen), best.architecture if best else None, pools, top)


def rejected_reason(exc: InputError) -> str:
    """The skip reason of a row whose planning instance :func:`planner.instance.resolve_instance` rejects: its
    first problem with the instance field it is in (``services.mlperf.traffic.rate_per_s: Input should be ...``)
    and that field's fix, so the reader knows which bound the system's row crossed."""
    p = exc.problems[0]
    where = f"{p.path}: " if p.path else ""
    fix = f" ({p.fix})" if p.fix else ""
    return f"the planning instance for this system is rejected: {where}{p.message}{fix}"


def require_scored_rows(rows: list[MLPerfResult], file: str) -> None:
    """:class:`InputError` (exit 2) when no row of ``file`` is in the scored set (every one held out or outside
    it, :func:`planner.mlperf.scope_reason`): there is nothing to check, and an exit 0 with no error would read as
    a pass. Rows in the set that the planner cannot model (no catalog profile, no calibrated stack) are a result,
    listed by :func:`validate_goodput`, not this error."""
    reasons = [scope_reason(r) for r in rows]
    if rows and all(reasons):
        counts: dict[str, int] = {}
        for why in reasons:
            counts[str(why)] = counts.get(str(why), 0) + 1
        said = "; ".join(f"{n} row{'s' if n != 1 else ''}: {why}" for why, n in sorted(counts.items(), key=lambda x: -x[1]))
        raise InputError(Problem(file, "", f"no row is scored ({said})",
                                 f"give rows of rounds up to v{LAST_ROUND[0]}.{LAST_ROUND[1]}, closed division, available systems, "
                                 "valid results (models/measured/mlperf_public_v4.0-v5.0.csv)"))


SYSTEM_LABEL_CHARS = 48
"""Longest system name a progress label shows (longer ones end in ``…``): the label stays on one terminal line."""


def row_label(k: int, total: int, row: MLPerfResult) -> str:
    """Progress label of the ``k``-th of ``total`` rows: its place and the system it predicts
    (``MLPerf row 12/314: v5.0 <system> llama2-70b-99 Server``), a :func:`planner.progress.stage` name."""
    system = row.system if len(row.system) <= SYSTEM_LABEL_CHARS else row.system[:SYSTEM_LABEL_CHARS - 1] + "…"
    return f"MLPerf row {k}/{total}: {row.round} {system} {row.benchmark} {row.scenario}"


def validate_goodput(rows: list[MLPerfResult], catalog: Any, *, rel_tol: float = REL_TOL,
                     parallel: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(predicted rows, rows not predicted with why). Equal cases are solved once; each solve is a
    :func:`planner.progress.stage` named by :func:`row_label` (rows done / total and the system), which the
    command line shows on stderr. ``parallel``: the distinct cases dealt over the usable cores
    (:func:`planner.forked.fork_each`; each case's search is independent of the others); a child's rows are
    reported when they arrive (:func:`planner.progress.report`), with their own times. The same tables either way."""
    from planner.forked import fork_each

    cases = [case_for(r, catalog) for r in rows]
    first: dict[Case, int] = {}
    for k, c in enumerate(cases):
        if not isinstance(c, Skip) and c not in first:
            first[c] = k
    todo = sorted(first.items(), key=lambda kv: kv[1])

    def solve_case(item: tuple[Case, int]) -> Goodput | Skip:
        c, k = item
        with stage(row_label(k + 1, len(rows), rows[k])):
            try:
                return max_goodput(c, catalog, rel_tol=rel_tol)
            except InputError as exc:  # the case's instance is not a valid plan question (e.g. a rate beyond the schema's bound)
                return Skip(rejected_reason(exc))

    def reported(item: tuple[Case, int], _g: Goodput | Skip, elapsed_s: float, here: bool) -> None:
        if not here:  # solved in a forked child, whose stages reach no listener here
            report(row_label(item[1] + 1, len(rows), rows[item[1]]), elapsed_s)

    done = {c: g for (c, _k), g in zip(todo, fork_each(solve_case, todo, parallel=parallel, done=reported), strict=True)}
    out: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for r, c in zip(rows, cases, strict=True):
        base = {"line": r.line, "round": r.round, "submitter": r.submitter, "system": r.system, "accelerator": r.accelerator,
                "n_accel": r.n_accel, "benchmark": r.benchmark, "scenario": r.scenario}
        if isinstance(c, Skip):
            skipped.append({**base, "reason": c.reason})
            continue
        g = done[c]
        if isinstance(g, Skip):
            skipped.append({**base, "reason": g.reason})
            continue
        osl = r.output_tokens_mean or float(c.output_tokens)
        pred = g.rate_per_s * osl
        out.append({**base, "device": c.device, "engine": c.engine, "weight_precision": c.weight_precision,
                    "input_tokens": c.input_tokens, "output_tokens": osl, "ttft_p99_ms": c.ttft_ms, "tpot_p99_ms": c.tpot_ms,
                    "measured_tokens_per_s": r.tokens_per_s, "predicted_tokens_per_s": pred,
                    "error_pct": 100.0 * (pred / r.tokens_per_s - 1.0), "architecture": g.architecture or "", "plan": g.pools,
                    "busy_bound_tokens_per_s": g.busy_bound_rate_per_s * osl,
                    "calibration": c.calibration or "shipped", "tp_over_pcie": bool(c.pcie_node), "fixed_tp": c.fixed_tp})
    return pd.DataFrame(out), pd.DataFrame(skipped, columns=["line", "round", "submitter", "system", "accelerator", "n_accel", "benchmark",
                                                             "scenario", "reason"])


def error_summary(pred: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per (device, scenario): rows, mean signed and mean absolute error (%), and the mean error of the
    100 %-busy bound (the operating point alone: what the queueing and plan leave is the difference);
    and the pooled figures: mean absolute error over all rows, per scenario and per round."""
    if pred.empty:
        return pd.DataFrame(columns=["device", "scenario", "rows", "mean_error_pct", "mean_abs_error_pct"]), {
            "rows": 0, "mean_abs_error_pct": math.nan}
    busy = (100.0 * (pred["busy_bound_tokens_per_s"] / pred["measured_tokens_per_s"] - 1.0) if "busy_bound_tokens_per_s" in pred.columns
            else pd.Series(math.nan, index=pred.index))
    g = pred.assign(abs_error_pct=pred["error_pct"].abs(), busy_error_pct=busy).groupby(["device", "scenario"], sort=True)
    by = g.agg(rows=("error_pct", "size"), mean_error_pct=("error_pct", "mean"), mean_abs_error_pct=("abs_error_pct", "mean"),
               busy_bound_error_pct=("busy_error_pct", "mean")).reset_index()
    absd = pred.assign(a=pred["error_pct"].abs())
    per_scenario = absd.groupby("scenario")["a"].mean()
    per_round = absd.groupby("round")["a"].mean() if "round" in absd.columns else pd.Series(dtype=float)
    pooled = {"rows": int(len(pred)), "mean_abs_error_pct": float(pred["error_pct"].abs().mean()),
              **{f"{s}_mean_abs_error_pct": float(v) for s, v in per_scenario.items()},
              **{f"{r}_mean_abs_error_pct": float(v) for r, v in per_round.items()}}
    return by, pooled
