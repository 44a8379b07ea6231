"""Mooncake FAST'25 traces (JSON Lines): ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

``hash_ids`` are prefix-block hashes of 512-token blocks: a request's leading blocks that an
earlier request already produced can be served from a prefix cache. For each request we count
its *leading* blocks whose id appeared in any earlier request (KV reuse needs a shared prefix,
so the count stops at the first new block); ``cached_tokens = 512 * leading_seen`` and
``cache_basis_tokens = 512 * len(hash_ids)``, so the service's cached-prefix share is
``sum(leading_seen) / sum(len(hash_ids))`` — a share of blocks, as the hashes count them.

Timestamps in the conversation trace are bucketed to about 3 s; the arrival
characterisation detects that from the data (see :mod:`planner.workload.arrivals`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from planner.workload.log import OnBadRow, RequestLog
from planner.workload.readers._table import RawTable, read_jsonl
from planner.workload.readers.generic import log_from_table

BLOCK_TOKENS = 512
COLUMNS = {"time": "timestamp", "input": "input_length", "output": "output_length", "time_unit": "ms"}


def leading_seen_blocks(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per request, how many leading block ids already occurred in an earlier request.

    ``ids`` are all requests' block ids concatenated; request ``r`` owns
    ``ids[offsets[r]:offsets[r+1]]``. Vectorised: the first request holding each id is
    found with one ``np.unique``; a block is *seen* if that request is earlier than its own.
    """
    n = len(offsets) - 1
    counts = np.diff(offsets)
    if ids.size == 0:
        return np.zeros(n, dtype=np.int64)
    row = np.repeat(np.arange(n), counts)
    _, first_pos, inverse = np.unique(ids, return_index=True, return_inverse=True)
    first_row = row[first_pos][inverse]
    seen = first_row < row
    # leading run of seen blocks: positions where no unseen block occurred yet in the row
    unseen_cum = np.cumsum(~seen)
    start = offsets[:-1]
    before = np.where(start > 0, unseen_cum[np.maximum(start - 1, 0)], 0)
    run = (unseen_cum - np.repeat(before, counts)) == 0
    return np.bincount(row, weights=run, minlength=n).astype(np.int64)


def read_mooncake(path: Path, on_bad_row: OnBadRow, service_column: str | None = None) -> RequestLog:
    raw = read_jsonl(path)
    table = raw.table
    extra: dict[str, np.ndarray] = {}
    if "hash_ids" in table.column_names:
        col = table.column("hash_ids").combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            filled = col.fill_null(pa.scalar([], type=col.type)) if col.null_count else col
            offsets = np.asarray(filled.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
            offsets = offsets - offsets[0]
            ids = np.asarray(filled.flatten().to_numpy(zero_copy_only=False))
            seen = leading_seen_blocks(offsets, ids)
            extra["cached_tokens"] = seen.astype(np.float64) * BLOCK_TOKENS
            extra["cache_basis_tokens"] = np.diff(offsets).astype(np.float64) * BLOCK_TOKENS
    mapping = {**COLUMNS, **({"service": service_column} if service_column else {})}
    if not extra:
        return log_from_table(raw, path, mapping, "mooncake", on_bad_row)
    return _with_extra(raw, path, on_bad_row, extra, mapping)


def _with_extra(raw: RawTable, path: Path, on_bad_row: OnBadRow, extra: dict[str, np.ndarray], mapping: dict[str, str]) -> RequestLog:
    """Attach per-request prefix columns before bad rows are dropped (so rows stay aligned)."""
    table = raw.table
    for name, values in extra.items():
        table = table.append_column(name, pa.array(values))
    raw.table = table
    log = log_from_table(raw, path, mapping, "mooncake", on_bad_row, keep=list(extra))
    log.notes.append(f"cached-prefix share counted in {BLOCK_TOKENS}-token blocks from hash_ids (leading blocks seen in an earlier request)")
    return log
