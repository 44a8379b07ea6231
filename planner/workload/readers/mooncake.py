"""Mooncake FAST'25 traces (JSON Lines): ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

``hash_ids`` are prefix-block hashes of 512-token blocks: a request's leading blocks that an
earlier request already produced can be served from a prefix cache. For each request we count
its *leading* blocks whose id appeared in any earlier request (earlier in time: a log whose
lines are shuffled gives the same counts) (KV reuse needs a shared prefix,
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
from planner.workload.readers._table import RawTable, read_jsonl, to_times
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


def leading_seen_in_time_order(offsets: np.ndarray, ids: np.ndarray, arrival: np.ndarray | None) -> np.ndarray:
    """:func:`leading_seen_blocks` with "earlier" meaning earlier in time, not in the file.

    Requests are put in arrival order (stable: ties and missing times keep file order, missing
    times last), counted, and the counts put back in file order."""
    n = len(offsets) - 1
    if arrival is None or n == 0:
        return leading_seen_blocks(offsets, ids)
    key = np.where(np.isnan(arrival), np.inf, arrival)
    order = np.argsort(key, kind="stable")
    if bool(np.all(order == np.arange(n))):
        return leading_seen_blocks(offsets, ids)
    counts = np.diff(offsets)[order]
    new_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    take = np.repeat(offsets[:-1][order] - new_offsets[:-1], counts) + np.arange(int(new_offsets[-1]))
    seen_sorted = leading_seen_blocks(new_offsets, ids[take])
    seen = np.empty(n, dtype=np.int64)
    seen[order] = seen_sorted
    return seen


def read_mooncake(path: Path, on_bad_row: OnBadRow, service_column: str | None = None) -> RequestLog:
    fields = [COLUMNS["time"], COLUMNS["input"], COLUMNS["output"], *([service_column] if service_column else [])]
    raw = read_jsonl(path, fields, ids=["hash_ids"])
    table = raw.table
    extra: dict[str, np.ndarray] = {}
    if "hash_ids" in table.column_names:
        col = table.column("hash_ids").combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            filled = col.fill_null(pa.scalar([], type=col.type)) if col.null_count else col
            offsets = np.asarray(filled.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
            offsets = offsets - offsets[0]
            ids = np.asarray(filled.flatten().to_numpy(zero_copy_only=False))
            arrival = to_times(table.column(COLUMNS["time"]), COLUMNS["time_unit"]).seconds if COLUMNS["time"] in table.column_names else None
            seen = leading_seen_in_time_order(offsets, ids, arrival)
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
