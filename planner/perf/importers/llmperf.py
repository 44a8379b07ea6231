"""LLMPerf (ray-project/llmperf ``token_benchmark_ray.py``) ``<model>_<in>_<out>_summary.json``.

Source of the format: ray-project/llmperf ``token_benchmark_ray.py`` (``metrics_summary`` and
``get_token_throughput_latencies``: the ``results`` dict, flattened with ``_`` by
``src/llmperf/utils.py`` ``LLMPerfResults.to_dict``/``flatten_dict``), metric names in
``src/llmperf/common_metrics.py``. Keys used:

==============================================  ================================================
LLMPerf key                                     our column
==============================================  ================================================
``model``                                       ``model``
``num_concurrent_requests``                     ``concurrency`` (closed loop: N clients, each
                                                sending its next request when one returns)
``results_number_input_tokens_mean``            ``isl``
``results_number_output_tokens_mean``           ``osl``
``results_ttft_s_mean``                         ``ttft_ms`` (x 1000)
``results_end_to_end_latency_s_mean``,          ``tpot_ms = (e2e - ttft) / (osl - 1)`` on the means
``results_ttft_s_mean``, output tokens mean
==============================================  ================================================

LLMPerf's ``inter_token_latency_s`` is **not** a TPOT: the client sums every gap *including the
first token's* and divides by the output tokens (``openai_chat_completions_client.py`` and
``token_benchmark_ray.py``), i.e. about ``e2e / osl``. The TPOT above is computed from the means,
exact when every request has the same lengths, approximate otherwise (the mean of ratios is
not the ratio of means). The file names no engine, device or tp: give them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.perf.importers.common import RunContext, load_records, number, run_load, summary_row

TOOL = "LLMPerf"


def looks_like(record: dict[str, Any]) -> bool:
    return "results_ttft_s_mean" in record or any(k.startswith("results_ttft_s_") for k in record)


def read(path: Path, ctx: RunContext) -> list[dict[str, Any]]:
    records = load_records(path)
    rows = []
    for i, rec in enumerate(records):
        ttft_s = number(rec.get("results_ttft_s_mean"))
        e2e_s = number(rec.get("results_end_to_end_latency_s_mean"))
        osl = number(rec.get("results_number_output_tokens_mean"))
        tpot_ms = 1e3 * (e2e_s - ttft_s) / (osl - 1.0) if (ttft_s is not None and e2e_s is not None and osl and osl > 1) else None
        load, problems = run_load(path, None, number(rec.get("num_concurrent_requests")), where=f"run {i}" if len(records) > 1 else "")
        rows.append(summary_row(
            path, TOOL, ctx, index=i if len(records) > 1 else None, problems=problems,
            ttft_ms=1e3 * ttft_s if ttft_s is not None else None, tpot_ms=tpot_ms,
            isl=number(rec.get("results_number_input_tokens_mean")), osl=osl,
            load=load,
            model=rec.get("model"), device=rec.get("device"), engine=rec.get("engine"), tp=rec.get("tp"),
        ))
    return rows
