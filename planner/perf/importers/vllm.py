"""vLLM ``vllm bench serve --save-result`` result JSON (also ``benchmarks/benchmark_serving.py``).

Source of the format: vllm-project/vllm ``vllm/benchmarks/serve.py`` (``main_async``: the
``result_json`` dict; ``benchmark``: the ``result`` dict and ``process_one_metric``), read at
commit 009e6d4a. Keys used:

=====================================  ==========================================================
vLLM key                               our column
=====================================  ==========================================================
``model_id``                           ``model`` (checkpoint name -> catalog id + precision)
``backend`` (``vllm``, ``sglang``,     ``engine`` when it names a server; ``openai*`` does not
``tensorrt-llm``, ``openai``...)       (give ``--engine``)
``request_rate`` (``"inf"`` or R),     ``load``: ``inf`` + ``max_concurrency`` N -> closed, N users;
``max_concurrency``                    finite R -> open at R req/s (see ``common``)
``total_input_tokens / completed``     ``isl`` (mean, rounded)
``total_output_tokens / completed``    ``osl``
``mean_ttft_ms``                       ``ttft_ms``
``mean_tpot_ms``                       ``tpot_ms``: vLLM's TPOT is per request,
                                       ``(latency - ttft) / (output_len - 1)``, averaged = ours
=====================================  ==========================================================

``mean_itl_ms`` is *not* used: vLLM's ITL is the mean over every gap between streamed chunks of
every request (requests with more tokens weigh more), not a per-request figure. ``--metadata
tp=2 device=h100-sxm engine=vllm`` (saved as top-level keys) is read when present.

Checked: a finite ``request_rate`` must be above 0 and a ``max_concurrency`` a whole number from 1
(:func:`~planner.perf.importers.common.run_load`); a run whose ``failed`` requests are more than a
tenth of its requests is an error, fewer a note (:func:`~planner.perf.importers.common.failed_requests`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.perf.importers.common import (
    RunContext,
    bench_serving_figures,
    load_records,
    summary_row,
)

TOOL = "vLLM bench serve"


def looks_like(record: dict[str, Any]) -> bool:
    return "mean_ttft_ms" in record and ("model_id" in record or "endpoint_type" in record or "date" in record)


def read(path: Path, ctx: RunContext) -> list[dict[str, Any]]:
    records = load_records(path)
    rows = []
    for i, rec in enumerate(records):
        rows.append(summary_row(
            path, TOOL, ctx, index=i if len(records) > 1 else None,
            **bench_serving_figures(path, rec, where=f"run {i}" if len(records) > 1 else ""),
            device=rec.get("device") or rec.get("gpu"), model=rec.get("model_id") or rec.get("model"),
            engine=rec.get("engine") or rec.get("backend"), tp=rec.get("tp") or rec.get("tensor_parallel_size"),
            precision=rec.get("precision"),
        ))
    return rows
