"""Run independent parts of one computation on the machine's other cores, by ``fork``.

Used where a build step is pure and splits into parts that share nothing (the horizon's unified caps: one
search per point, :func:`planner.optimize.prepare.unified_caps_at_load`). A forked child inherits the
parent's memory (the points, the closures, the imported modules: nothing is pickled on the way in), computes
its part, writes the pickled result to a pipe and leaves by ``os._exit`` (no ``atexit`` handlers, no stream
flushes: a lock another thread of the parent held at the fork, e.g. the progress ticker's stderr, is never
taken; the child's ``sys.stdout`` / ``sys.stderr`` are fresh streams to ``/dev/null`` and it calls no progress listener,
:func:`planner.progress.detach`). Any failure of a child (an exception, a signal, an unreadable result) is not an error: the parent
computes that part itself, so the results are those of ``[fn(x) for x in parts]`` either way. Without
``fork`` (not POSIX) or with one usable core, that is what runs.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


CORES_ENV = "PLANNER_CORES"
"""Environment variable: at most this many cores for one planner process (``1``: no forked child), e.g. on a machine
shared with other work or beside ``pytest -n``; ignored unless a positive integer."""


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it), at most :data:`CORES_ENV`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    limit = os.environ.get(CORES_ENV, "").strip()
    return max(1, min(cores, int(limit))) if limit.isdigit() and int(limit) > 0 else cores


def fork_map(fn: Callable[[T], R], parts: Sequence[T]) -> list[R]:
    """``[fn(x) for x in parts]``: ``parts[1:]`` each in a forked child (at most one per usable core beyond this one;
    the rest here), ``parts[0]`` here meanwhile. A pipe or fork the system refuses (process or file limits) leaves
    that part and the ones after it to this process."""
    n_children = min(len(parts) - 1, usable_cores() - 1) if hasattr(os, "fork") else 0
    if n_children <= 0:
        return [fn(x) for x in parts]
    children: list[tuple[int, int]] = []  # (pid, read end) per forked part, parts[1], parts[2], ... in order
    try:
        for x in parts[1:1 + n_children]:
            started = _start(fn, x)
            if started is None:
                break
            children.append(started)
        here = [fn(x) for x in (parts[0], *parts[1 + len(children):])]
        forked: list[R] = []
        while children:  # each child leaves the list before it is collected: _stop never sees a reaped pid or a closed fd
            pid, fd = children.pop(0)
            forked.append(_collect(pid, fd, fn, parts[1 + len(forked)]))
        return [here[0], *forked, *here[1:]]
    finally:
        for pid, fd in children:  # only when this process failed first: stop the children not yet collected
            _stop(pid, fd)


def fork_each(fn: Callable[[T], R], items: Sequence[T], *, parallel: bool = True,
              done: Callable[[T, R, float, bool], None] | None = None) -> list[R]:
    """``[fn(x) for x in items]``, the items dealt round-robin over the usable cores (``items[i::k]``, one part per
    core, :func:`fork_map`); the results in the order of ``items``. For independent items only: each process keeps
    its own copy of what ``fn`` caches. ``parallel=False``: every item here.

    ``done(x, result, elapsed_s, here)`` for each item: as it finishes when this process computed it (``here``), when
    its part arrives when a child did — what a progress report needs, since a child's own stages reach no listener."""
    todo = list(items)
    k = max(1, min(usable_cores(), len(todo))) if parallel else 1
    parent = os.getpid()

    def run(part: list[T]) -> tuple[int, list[tuple[R, float]]]:
        out = []
        for x in part:
            t0 = time.perf_counter()
            r = fn(x)
            elapsed = time.perf_counter() - t0
            if done is not None and os.getpid() == parent:
                done(x, r, elapsed, True)
            out.append((r, elapsed))
        return os.getpid(), out

    parts = [todo[i::k] for i in range(k)]
    results: list[R] = [None] * len(todo)  # type: ignore[list-item]  # every slot is filled below
    for i, (part, (pid, got)) in enumerate(zip(parts, fork_map(run, parts), strict=True)):
        for j, (x, (r, elapsed)) in enumerate(zip(part, got, strict=True)):
            if done is not None and pid != parent:
                done(x, r, elapsed, False)
            results[i + j * k] = r
    return results


def _start(fn: Callable[[T], R], x: T) -> tuple[int, int] | None:
    """Fork a child computing ``fn(x)`` into a pipe: ``(pid, read end)``, or None when the system refuses."""
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the child: compute, write, leave without running any of the parent's exit code
        status = 1
        try:
            os.close(read_fd)
            from planner.progress import detach

            detach()  # the parent shows progress; a listener's lock may be held by a thread that does not exist here
            # nothing of a child is printed (a warning included): fresh streams, not the parent's, whose buffer lock a
            # thread of the parent (the CLI's ticker, drawing on stderr) may have held at the fork
            sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - closed by os._exit
            blob = pickle.dumps(fn(x), protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(blob)
            while view:
                view = view[os.write(write_fd, view):]
            status = 0
        except BaseException:  # noqa: BLE001 - the parent computes this part itself
            pass
        finally:
            os._exit(status)
    os.close(write_fd)
    return pid, read_fd


def _collect(pid: int, fd: int, fn: Callable[[T], R], x: T) -> R:
    """The child's result read to the end of its pipe (the pipe closed and the child reaped whatever happens), or
    ``fn(x)`` computed here when the child failed."""
    chunks = []
    status = 1
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    if status == 0 and chunks:
        try:
            return pickle.loads(b"".join(chunks))  # noqa: S301 - our own child's result
        except Exception:  # noqa: BLE001 - computed here instead
            pass
    return fn(x)


def _stop(pid: int, fd: int) -> None:
    import signal

    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        os.close(fd)
