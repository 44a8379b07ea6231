"""Per-process memos of what depends only on a plan and the traffic, not on prices (issue 27, sweep speed).

A sweep over electricity prices solves the same capacity table at many prices; the MIP's solution
often stays the same (same pools, instances and routing shares), and with it everything computed
from the solution and the points alone: the pools' waits and the buckets' predicted latency
(:func:`planner.optimize.extract.build_pools_routing_latency`), the analytic check
(:mod:`planner.optimize.latency` keeps its own memo) and the peak simulation
(:mod:`planner.solve_instance`). A key is the *content* of the frames read (every column hashed row
by row: a frame changed in place is a different key) and the exact bytes of the solution arrays, so
a hit is the answer the computation would give, bit for bit (``tests/test_sweep_memo.py``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd


def frame_key(df: pd.DataFrame) -> tuple[Any, ...]:
    """The frame's content: its columns and every row hashed (``pandas.util.hash_pandas_object``); a
    frame with a column pandas cannot hash gets a key equal to nothing else (no sharing)."""
    try:
        return (tuple(df.columns), df.shape, pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    except TypeError:
        return ("unhashable", object())


def array_key(a: np.ndarray) -> tuple[Any, ...]:
    """Exact bytes of an array (dtype and shape included)."""
    arr = np.ascontiguousarray(a)
    return (str(arr.dtype), arr.shape, arr.tobytes())


class Memo:
    """A small least-recently-used map guarded by a lock (a Dask worker may run chunks on several threads)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> Any:
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                self.misses += 1
            else:
                self.hits += 1
                self._data.move_to_end(key)
            return hit

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0
