"""NVIDIA AIPerf and GenAI-Perf profile exports: ``profile_export_aiperf.json`` /
``profile_export_genai_perf.json`` (statistics + the run's configuration) and the ``.csv``
versions (statistics only).

Sources of the format: ai-dynamo/aiperf ``docs/tutorials/working-with-profile-exports.md``
(mirror nvda-ci/aiperf at 8e6a033d: ``profile_export_aiperf.json`` with per-metric objects
``{"unit", "avg", "p50", "p99", ...}`` and ``input_config.loadgen.concurrency`` /
``request_rate``, ``input_config.endpoint.model_names``; the CSV's first section
``Metric,avg,min,max,p1,...`` with rows such as ``Time to First Token (ms)``); GenAI-Perf
triton-inference-server/perf_analyzer ``genai-perf/genai_perf/export_data/json_exporter.py``
(the same statistics plus ``input_config`` = the command-line arguments: ``model``,
``concurrency``, ``request_rate``, ``backend``) and its CSV exporter (rows ``Time To First Token
(ms)``, ``Inter Token Latency (ms)``, ``Input Sequence Length``, numbers with thousands
separators). Keys used:

==================================================  ==========================================
AIPerf / GenAI-Perf                                 our column
==================================================  ==========================================
``time_to_first_token.avg`` (unit ms)               ``ttft_ms``
``inter_token_latency.avg``                         ``tpot_ms``: per request ``(request_latency -
                                                    ttft) / (output_sequence_length - 1)``
                                                    (AIPerf metrics reference), averaged = our TPOT
``input_sequence_length.avg``                       ``isl``
``output_sequence_length.avg``                      ``osl``
``input_config`` concurrency / request_rate         ``load`` (closed with N users / open at R)
model_names[0] (AIPerf), model[0] (GenAI-Perf)      ``model``
GenAI-Perf ``backend`` (``tensorrtllm``, ``vllm``)  ``engine`` (Triton backends)
``telemetry_data`` ``gpu_name`` (AIPerf)            ``device`` when it maps to a catalog id
==================================================  ==========================================

The CSV carries no configuration: give ``--concurrency`` (or ``--request-rate``), ``--model``,
``--engine``, ``--device`` and ``--tp``. AIPerf's ``inter_chunk_latency`` (per streamed chunk)
is not used.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem
from planner.perf.importers.common import (
    RunContext,
    load_of,
    load_records,
    number,
    run_load,
    summary_row,
)
from planner.textio import text_stream

TOOL = "AIPerf/GenAI-Perf"
_TO_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}


def looks_like(record: dict[str, Any]) -> bool:
    return isinstance(record.get("time_to_first_token"), dict) and "avg" in record["time_to_first_token"]


def looks_like_csv(header: list[str]) -> bool:
    return bool(header) and header[0].strip().lower() == "metric" and any(h.strip().lower() == "avg" for h in header)


def _ms(stat: Any) -> float | None:
    if not isinstance(stat, dict):
        return None
    value = number(stat.get("avg"))
    scale = _TO_MS.get(str(stat.get("unit", "ms")).strip().lower())
    return None if value is None or scale is None else value * scale


def _avg(stat: Any) -> float | None:
    return number(stat.get("avg")) if isinstance(stat, dict) else None


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _gpu_name(rec: dict[str, Any]) -> str | None:
    tele = rec.get("telemetry_data")
    endpoints = tele.get("endpoints") if isinstance(tele, dict) else None
    if not isinstance(endpoints, dict):  # a file edited by hand may hold anything here: no GPU name then
        return None
    names = {g.get("gpu_name") for ep in endpoints.values() if isinstance(ep, dict) and isinstance(ep.get("gpus"), dict)
             for g in ep["gpus"].values() if isinstance(g, dict) and isinstance(g.get("gpu_name"), str) and g.get("gpu_name")}
    return names.pop() if len(names) == 1 else None


def read(path: Path, ctx: RunContext) -> list[dict[str, Any]]:
    records = load_records(path)
    rows = []
    for i, rec in enumerate(records):
        cfg: dict[str, Any] = rec["input_config"] if isinstance(rec.get("input_config"), dict) else {}
        loadgen: dict[str, Any] = cfg["loadgen"] if isinstance(cfg.get("loadgen"), dict) else cfg
        endpoint: dict[str, Any] = cfg["endpoint"] if isinstance(cfg.get("endpoint"), dict) else cfg
        model = _first(endpoint.get("model_names")) or _first(cfg.get("model"))
        conc, rate = number(loadgen.get("concurrency")), number(loadgen.get("request_rate"))
        if conc is None and rate is None and ctx.concurrency is None and ctx.request_rate_per_s is None:
            raise InputError(Problem(str(path), "input_config", f"the {TOOL} export names neither a concurrency nor a request rate",
                                     "give --concurrency N (or --request-rate R)"))
        load, problems = run_load(path, rate, conc, where=f"run {i}" if len(records) > 1 else "")
        rows.append(summary_row(
            path, TOOL, ctx, index=i if len(records) > 1 else None, problems=problems,
            ttft_ms=_ms(rec.get("time_to_first_token")), tpot_ms=_ms(rec.get("inter_token_latency")),
            isl=_avg(rec.get("input_sequence_length")), osl=_avg(rec.get("output_sequence_length")),
            load=load, model=model, device=_gpu_name(rec), engine=cfg.get("backend"),
            tp=cfg.get("tp"),
        ))
    return rows


_CSV_ROWS = {
    "time to first token": "ttft", "inter token latency": "tpot",
    "input sequence length": "isl", "output sequence length": "osl",
}


def read_csv(path: Path, ctx: RunContext) -> list[dict[str, Any]]:
    stats: dict[str, float] = {}
    with text_stream(path) as fh:
        reader = csv.reader(fh)
        avg_col: int | None = None
        for raw in reader:
            if not raw or not raw[0].strip():
                avg_col = None
                continue
            cells = [c.strip() for c in raw]
            if cells[0].lower() == "metric":
                low = [c.lower() for c in cells]
                avg_col = low.index("avg") if "avg" in low else None
                continue
            if avg_col is None or avg_col >= len(cells):
                continue
            name = cells[0].lower()
            for prefix, key in _CSV_ROWS.items():
                if name.startswith(prefix) and key not in stats:
                    value = number(cells[avg_col])
                    if value is not None:
                        unit = name[name.find("(") + 1:name.find(")")] if "(" in name else "ms"
                        scale = _TO_MS.get(unit, 1.0) if key in ("ttft", "tpot") else 1.0
                        stats[key] = value * scale
    if "ttft" not in stats:
        raise InputError(Problem(str(path), "Time to First Token", f"no 'Time to First Token' row in this {TOOL} CSV", "give profile_export_aiperf.csv or profile_export_genai_perf.csv"))
    if ctx.concurrency is None and ctx.request_rate_per_s is None:
        raise InputError(Problem(str(path), "concurrency", f"the {TOOL} CSV does not record the concurrency or request rate", "give --concurrency N (or --request-rate R), or use the .json export"))
    return [summary_row(path, TOOL, ctx, ttft_ms=stats.get("ttft"), tpot_ms=stats.get("tpot"), isl=stats.get("isl"), osl=stats.get("osl"),
                        load=load_of(ctx.request_rate_per_s, ctx.concurrency))]
