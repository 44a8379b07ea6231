"""Where study chunks run: this process, local processes, or a Dask cluster.

Why Dask (distributed) rather than Ray: it is pure Python and pip-installable with no
native daemon, ``LocalCluster`` gives tests a real multi-process cluster in a second, an
existing cluster is addressed by one ``tcp://host:port`` string, and its futures API
mirrors ``concurrent.futures`` so one code path serves both. Ray would add a large native
dependency for no gain on a workload of independent, coarse tasks.

Results come back in submission order, so the same study gives the same table on every
executor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from planner.errors import InputError, Problem


def map_chunks(fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], *, jobs: int = 1, executor: str | None = None,
               progress: Callable[[int], None] | None = None) -> list[Any]:
    """``[fn(*a) for a in args]``, in order, on the chosen executor; ``progress(k)`` after chunk k finishes."""
    if executor:
        return _dask(fn, args, jobs=jobs, address=executor, progress=progress)
    if jobs <= 1 or len(args) <= 1:
        out = []
        for k, a in enumerate(args):
            out.append(fn(*a))
            if progress:
                progress(k)
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list[Any] = [None] * len(args)
    # fork: workers inherit the loaded catalog and imported pyomo (spawn would re-import both).
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = {pool.submit(fn, *a): k for k, a in enumerate(args)}
        for f in as_completed(futures):
            k = futures[f]
            results[k] = f.result()
            if progress:
                progress(k)
    return results


def _dask(fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], *, jobs: int, address: str,
          progress: Callable[[int], None] | None) -> list[Any]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise InputError(Problem("--executor", address, "Dask is not installed", "pip install 'planner[distributed]'")) from exc
    cluster = None
    if address == "local-dask":
        cluster = LocalCluster(n_workers=max(1, jobs), threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    elif address.startswith(("tcp://", "tls://", "ucx://")):
        try:
            client = Client(address, timeout="10s")
        except OSError as exc:
            raise InputError(Problem("--executor", address, f"cannot reach the Dask scheduler: {exc}", "start one with `dask scheduler`, or use --executor local-dask")) from exc
    else:
        raise InputError(Problem("--executor", address, "not an executor address", "give tcp://host:port of a Dask scheduler, or local-dask"))
    try:
        futures = [client.submit(fn, *a, pure=False) for a in args]
        index = {f.key: k for k, f in enumerate(futures)}
        for f in as_completed(futures):
            if progress:
                progress(index[f.key])
        return client.gather(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
