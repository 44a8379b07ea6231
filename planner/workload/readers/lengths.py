"""Length-only CSV (ShareGPT statistics from Sarathi-Serve/Vidur): ``num_prefill_tokens, num_decode_tokens``.

No timestamps: the log gives the length mix only; arrival rates must come from elsewhere
(``traffic.peak_rate_per_s`` in an instance, or a rate with ``lengths``).
"""

from __future__ import annotations

from pathlib import Path

from planner.workload.log import OnBadRow, RequestLog
from planner.workload.readers._table import read_csv
from planner.workload.readers.generic import log_from_table

COLUMNS = {"input": "num_prefill_tokens", "output": "num_decode_tokens"}


def read_lengths(path: Path, on_bad_row: OnBadRow, service_column: str | None = None) -> RequestLog:
    mapping = {**COLUMNS, **({"service": service_column} if service_column else {})}
    return log_from_table(read_csv(path), path, mapping, "lengths", on_bad_row)
