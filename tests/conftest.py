"""Shared fixtures.

The capacity-table cache (:mod:`planner.capacity_cache`) of ``planner solve`` goes to a folder of
this test session, never the user's ``~/.cache/planner``: set here at import, so subprocesses
inherit it, and removed when the session ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_CACHE_DIR = tempfile.mkdtemp(prefix="planner-test-cache-")
os.environ["PLANNER_CACHE_DIR"] = _CACHE_DIR


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def catalog():
    from planner.catalog import load_catalog

    return load_catalog()
