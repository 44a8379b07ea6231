"""Shared fixtures.

The cache of ``planner solve`` (capacity and prepared tables, :mod:`planner.capacity_cache`; solved
plans, :mod:`planner.plan_cache`) goes to a folder of this test session, never the user's ``~/.cache/planner``: set here at import (so subprocesses
inherit it; pytest-xdist workers reuse the folder of the process that started them), and removed
when the session that created it ends.

:func:`solved_example` solves each example instance (``instances/*.yaml``) once per session with
``planner solve INSTANCE --json --out DIR``, for the tests that read the same plan (the verdict
regression, the browser test of each report, ``check`` and its tampering cases). Its folder is
shared: tests read it and write elsewhere (``tmp_path``); its JSON comes back as fresh copies.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

# One BLAS thread per test process, set before anything imports numpy (pytest loads this file before
# the test modules; subprocesses and pytest-xdist workers inherit it; a value already set wins). The
# suite runs as two processes on two cores (`pytest -n 2`), so OpenBLAS's own worker threads only wait
# for a core: the power iteration of planner.pool_latency._lane_count_pmf (up to 2,000 products of a
# vector and an 801 x 801 matrix) took 48-64 s with OpenBLAS's default 2 threads on a loaded 2-core
# machine against 2.4-2.7 s with one (tests/test_goodput_mlperf.py::test_perf_overview_cells_stay_where_measured[cell1],
# measured 2026-12-04). The matrices here are small; one thread gives the same products.
for _blas_var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_blas_var, "1")

_SESSION_VAR = "PLANNER_TEST_SESSION_CACHE_DIR"
_OWN_CACHE = not os.environ.get(_SESSION_VAR)
if _OWN_CACHE:
    os.environ[_SESSION_VAR] = tempfile.mkdtemp(prefix="planner-test-cache-")
os.environ["PLANNER_CACHE_DIR"] = os.environ[_SESSION_VAR]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files holding a test marked ``slow`` run first, each file's tests kept together and in order.

    ``pytest -n 2`` schedules with ``--dist worksteal`` (``pyproject.toml``'s addopts): each worker
    starts on its half of the tests and an idle worker takes tests from the other's queue, so with
    the 10-50 s end-to-end tests at the front they are split between the two workers and the short
    tests fill in behind, instead of one worker running a long test alone at the end (the full suite
    289 s with worksteal on an idle 2-core VM, 2026-12-04; the last clean-clone run with ``load``
    338 s). Sorting is stable and the same in every worker (xdist requires identical collections)."""
    heavy = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in heavy)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _OWN_CACHE:
        shutil.rmtree(os.environ[_SESSION_VAR], ignore_errors=True)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def latency_bench() -> Any:
    """``benchmarks/bench_latency_at_load.py`` as a module: its grid's instance, scalings and measurements."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_latency_at_load", ROOT / "benchmarks" / "bench_latency_at_load.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def catalog():
    from planner.catalog import load_catalog

    return load_catalog()


@dataclass(frozen=True)
class SolvedExample:
    """One ``planner solve instances/<stem>.yaml --json --out DIR`` of the session."""

    instance: Path
    exit_code: int
    stdout: str
    output: str
    """stdout and stderr, as the click runner gives them."""
    out_dir: Path

    def json(self) -> dict[str, Any]:
        """The printed JSON (a fresh copy: callers may edit it)."""
        return json.loads(self.stdout)

    def plan_data(self) -> dict[str, Any]:
        """``plan.json`` as a mapping (a fresh copy)."""
        return json.loads((self.out_dir / "plan.json").read_text(encoding="utf-8"))

    def plan(self) -> Any:
        """``plan.json`` as a :class:`planner.schema.plan.PlanResult` (a fresh copy)."""
        from planner.report.plan_io import load_plan

        return load_plan(self.out_dir / "plan.json")


@contextmanager
def _session_lock(name: str) -> Iterator[None]:
    """An exclusive lock named ``name`` shared by the processes of this test session (pytest-xdist workers:
    a file in the session's cache folder, :func:`fcntl.flock`; released when the block ends or the process dies).
    Without ``fcntl`` (not POSIX) there is no lock, only the duplicated work it saves."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(Path(os.environ[_SESSION_VAR]) / f"{name}.lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def solved_example(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], SolvedExample]:
    """``solved_example("enterprise-chat")``: the session's solve of that example instance.

    Each worker solves an example at most once, and the two workers of ``pytest -n 2`` never solve the same one at
    the same time: the solve holds a session-wide lock per example, so a worker that asks for an example the other is
    solving waits for it and then reads the stored plan (``planner solve``'s plan cache, shared by the session's
    processes) instead of solving it again alongside. Without the lock, a worker that asked before the other had
    stored the plan solved it too: tests/test_instance_verdicts.py solves every example near the start of one
    worker's half of the suite, while tests/test_install_wheel.py, tests/test_monotone.py and tests/test_one_path.py
    ask for them from the start of the other's, and code-completion-8b alone is a 52-58 s solve on the 2-core VM
    (2026-12-08; ~20 s before the peak simulation ran longer for bursty logs)."""
    from click.testing import CliRunner

    from planner.cli import main

    done: dict[str, SolvedExample] = {}

    def get(stem: str) -> SolvedExample:
        if stem not in done:
            instance = ROOT / "instances" / f"{stem}.yaml"
            out = tmp_path_factory.mktemp(f"solved-{stem}")
            with _session_lock(f"solved-{stem}"):  # the other worker's solve of this stem, if running, finishes first
                r = CliRunner().invoke(main, ["solve", str(instance), "--json", "--out", str(out)])
            done[stem] = SolvedExample(instance, r.exit_code, r.stdout, r.output, out)
        return done[stem]

    return get


@dataclass(frozen=True)
class EnergyFit:
    """One ``planner calibrate-energy models/measured/measured_energy.csv -o DIR/power.yaml`` of the session."""

    exit_code: int
    stdout: str
    stderr: str
    out: Path
    """The power file it wrote (tests read it; they write elsewhere)."""


@pytest.fixture(scope="session")
def shipped_energy_fit(tmp_path_factory: pytest.TempPathFactory) -> EnergyFit:
    """The power fit of the shipped ML.ENERGY runs, run once per session: the tests that read its output, its
    warnings and notes (tests/test_energy.py, tests/test_energy_review.py) ran the same command four times
    (1.5-2 s each on an idle VM); a test that checks the fit is deterministic still runs a second fit of its own."""
    from click.testing import CliRunner

    from planner.cli import main

    out = tmp_path_factory.mktemp("shipped-energy-fit") / "power.yaml"
    r = CliRunner().invoke(main, ["calibrate-energy", str(ROOT / "models" / "measured" / "measured_energy.csv"), "-o", str(out)])
    return EnergyFit(r.exit_code, r.stdout, r.stderr, out)
