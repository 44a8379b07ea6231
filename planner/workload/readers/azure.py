"""Azure LLM inference trace (2023/2024): ``TIMESTAMP, ContextTokens, GeneratedTokens``.

TIMESTAMP is a naive wall-clock date-time with 7 fractional digits (no zone); ContextTokens
are prompt tokens, GeneratedTokens output tokens. No session, no model, no completion time.
"""

from __future__ import annotations

from pathlib import Path

from planner.workload.log import OnBadRow, RequestLog
from planner.workload.readers._table import read_csv
from planner.workload.readers.generic import log_from_table

COLUMNS = {"time": "TIMESTAMP", "input": "ContextTokens", "output": "GeneratedTokens"}


def read_azure(path: Path, on_bad_row: OnBadRow, service_column: str | None = None) -> RequestLog:
    mapping = {**COLUMNS, **({"service": service_column} if service_column else {})}
    return log_from_table(read_csv(path), path, mapping, "azure", on_bad_row)
