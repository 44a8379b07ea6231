"""The code base stays ruff- and mypy-clean (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    res = _run("ruff", "check", "--no-cache", ".")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_mypy_is_clean(tmp_path: Path) -> None:
    res = _run("mypy", "--cache-dir", str(tmp_path / "mypy-cache"), "planner")
    assert res.returncode == 0, res.stdout + res.stderr
