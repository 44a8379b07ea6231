"""SGLang ``python -m sglang.bench_serving --output-file X.jsonl``: one JSON object per run,
appended as a line.

Source of the format: sgl-project/sglang ``python/sglang/bench_serving.py`` (``benchmark``: the
``result`` dict written with ``json.dumps`` to ``args.output_file``), read at commit 0033168f.
Keys used:

=========================================  ======================================================
SGLang key                                 our column
=========================================  ======================================================
``backend`` (``sglang``, ``sglang-oai``,   ``engine`` (``sglang*`` -> sglang, ``vllm*`` -> vllm,
``vllm``, ``trt``, ``lmdeploy``...)        ``trt`` -> trtllm; others: give ``--engine``)
``request_rate`` (``Infinity`` or R),      ``load``: closed with N users / open at R (``common``)
``max_concurrency``
``total_input_tokens / completed``         ``isl``
``total_output_tokens / completed``        ``osl``
``mean_ttft_ms``                           ``ttft_ms``
``mean_tpot_ms``                           ``tpot_ms`` (per request, as vLLM's; = ours)
=========================================  ======================================================

The file names no model and no device (the script's ``--model`` is not saved): give ``--model``,
``--device`` and ``--tp``. ``mean_itl_ms`` is the per-gap metric and is not used.
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

TOOL = "SGLang bench_serving"


def looks_like(record: dict[str, Any]) -> bool:
    return "mean_ttft_ms" in record and ("dataset_name" in record or "random_input_len" in record or "accept_length" in record)


def read(path: Path, ctx: RunContext) -> list[dict[str, Any]]:
    records = load_records(path)
    rows = []
    for i, rec in enumerate(records, start=1):
        rows.append(summary_row(
            path, TOOL, ctx, index=i, **bench_serving_figures(path, rec, where=f"run {i}"),
            model=rec.get("model_id") or rec.get("model") or rec.get("tokenizer_id"), engine=rec.get("backend"),
            tp=rec.get("tp") or rec.get("tp_size"),
        ))
    return rows
