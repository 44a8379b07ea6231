"""Tell a benchmark file's format from its content (``--from-format auto``).

- CSV: ``model_path`` + ``silicon_ttft_ms`` columns -> ``silicon`` (aiconfigurator); ``device``,
  ``model``, ``engine`` columns -> ``planner`` (ours); a first column ``Metric`` next to ``avg``
  -> ``aiperf`` (AIPerf / GenAI-Perf CSV export).
- JSON / JSON Lines: the first object's keys -> ``llmperf`` (``results_ttft_s_*``), ``aiperf``
  (``time_to_first_token: {avg: ...}``), ``sglang`` (``mean_ttft_ms`` with ``dataset_name`` /
  ``random_input_len``), ``vllm`` (``mean_ttft_ms`` with ``model_id`` / ``endpoint_type`` / ``date``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from planner.errors import InputError, Problem
from planner.perf.importers import aiperf, llmperf, sglang, vllm
from planner.textio import loads_json, read_text

FORMATS = ("planner", "silicon", "vllm", "sglang", "aiperf", "genai-perf", "llmperf")
"""Names accepted by ``--from-format`` (besides ``auto``); ``genai-perf`` is read as ``aiperf``."""


def _first_object(path: Path) -> dict[str, object] | None:
    """The first JSON object of a JSON or JSON Lines file; exit-2 error when it is neither."""
    text = read_text(path)
    try:
        data = loads_json(text, path)
    except json.JSONDecodeError as whole:
        line = next((ln for ln in text.splitlines() if ln.strip()), "")
        try:
            data = loads_json(line, path)
        except json.JSONDecodeError:
            raise InputError(Problem(str(path), f"line {whole.lineno}", f"not valid JSON ({whole.msg}, column {whole.colno})",
                                     "give the file the benchmark tool wrote, unchanged")) from None
    if isinstance(data, list):
        data = data[0] if data else None
    return data if isinstance(data, dict) else None


def _per_request_hint(rec: dict[str, object] | None) -> str:
    """Name the summary file when ``rec`` is a per-request record of a known tool."""
    if rec is None:
        return ""
    if "ttft_s" in rec and "inter_token_latency_s" in rec:
        return ": this is LLMPerf's per-request file; give its *_summary.json"
    if "metadata" in rec and "metrics" in rec:
        return ": this is AIPerf's per-request profile_export.jsonl; give profile_export_aiperf.json"
    if "experiments" in rec:
        return ": this is perf_analyzer's raw profile_export.json; give GenAI-Perf's profile_export_genai_perf.json"
    return ""


def detect_format(path: str | Path) -> str:
    """The format name of ``path`` (one of :data:`FORMATS` but ``genai-perf``); exit-2 error if unknown."""
    p = Path(path)
    if not p.is_file():
        raise InputError(Problem(str(p), "", "file does not exist", "check the path"))
    head = read_text(p)[:4096].lstrip()
    if p.suffix.lower() in (".json", ".jsonl") and not head.startswith(("{", "[")):
        first = head.splitlines()[0][:40] if head else ""
        raise InputError(Problem(str(p), "", f"named {p.suffix} but it is not JSON (it starts with {first!r})" if first else f"named {p.suffix} but empty",
                                 "give the JSON file the benchmark tool wrote; a measurements CSV must end in .csv"))
    if head.startswith(("{", "[")):
        rec = _first_object(p)
        if rec is not None:
            for name, mod in (("llmperf", llmperf), ("aiperf", aiperf), ("sglang", sglang), ("vllm", vllm)):
                if mod.looks_like(rec):
                    return name
        raise InputError(Problem(str(p), "", "JSON that is none of the known benchmark results (vLLM, SGLang, AIPerf/GenAI-Perf, LLMPerf)"
                                 + _per_request_hint(rec), "give --from-format, or the summary file the tool wrote"))
    header = next(csv.reader([head.splitlines()[0] if head else ""]), [])
    cols = {h.strip() for h in header}
    if {"model_path", "silicon_ttft_ms"} <= cols:
        return "silicon"
    if aiperf.looks_like_csv(header):
        return "aiperf"
    return "planner"  # our reader names the missing columns
