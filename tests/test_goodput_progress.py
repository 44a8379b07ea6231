"""`planner validate-goodput` progress: each solved row is a :func:`planner.progress.stage` (row k of N and its
system) that the CLI shows on stderr (live on a terminal, one line per row with ``-v``), never on stdout, so
``--json`` stays one JSON document; nothing with ``-q``."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner, Result

import planner.cli.output as cli_output
from planner.cli import main
from planner.goodput import SYSTEM_LABEL_CHARS, row_label
from planner.mlperf import read_mlperf

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "models" / "measured" / "mlperf_public_v4.0-v5.0.csv"
LINES = (4, 14, 16)
"""Rows of the shipped file: a gptj row (not predicted: no catalog model) and two llama2-70b Offline rows of one
1xMI300X system (99 and 99.9 accuracy: one case, one solve; a one-device system keeps the solve small)."""
SOLVED = "MLPerf row 2/3: v4.1 1xMI300X_2xEPYC-9374F llama2-70b-99 Offline"


def _small_file(tmp_path: Path) -> Path:
    records = list(csv.reader(io.StringIO(DATA.read_text(encoding="utf-8"))))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([records[0], *(records[line - 1] for line in LINES)])
    p = tmp_path / "mlperf.csv"
    p.write_text(buf.getvalue(), encoding="utf-8")
    return p


def _run(tmp_path: Path, *extra: str) -> Result:
    # --rel-tol 0.5: the coarsest bisection (the rates are not what is checked here)
    return CliRunner().invoke(main, ["validate-goodput", str(_small_file(tmp_path)), "--json", "--rel-tol", "0.5", *extra])


def _json_of(res: Result) -> dict[str, Any]:
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)  # stdout is the JSON alone: no progress in it
    assert [r["line"] for r in data["rows"]] == [3, 4] and [r["line"] for r in data["not_predicted"]] == [2]
    return data


def test_row_label_names_the_row_and_its_system_on_one_line() -> None:
    rows = read_mlperf(DATA)
    assert row_label(13, 314, rows[12]) == "MLPerf row 13/314: v4.1 1xMI300X_2xEPYC-9374F llama2-70b-99 Offline"
    long = max(rows, key=lambda r: len(r.system))
    label = row_label(1, 1, long)
    assert long.system not in label and long.system[:SYSTEM_LABEL_CHARS - 1] + "…" in label


def test_verbose_prints_each_solved_row_on_stderr_and_json_stays_clean(tmp_path: Path) -> None:
    res = _run(tmp_path, "-v")
    _json_of(res)
    rows = [ln for ln in res.stderr.splitlines() if ln.startswith("MLPerf row ")]
    # one line for the one solve, with its time; the skipped row and the row sharing the case need no solve
    assert len(rows) == 1 and rows[0].startswith(SOLVED + ": ") and rows[0].endswith(" s"), res.stderr
    assert "MLPerf row" not in res.stdout


class _Terminal:
    """A stream that says it is a terminal (stderr as :mod:`planner.cli.output` sees it)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _SysWithTerminal:
    """``sys`` for :mod:`planner.cli.output`, its ``stderr`` (CliRunner's, while a command runs) a terminal."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)

    @property
    def stderr(self) -> _Terminal:
        return _Terminal(sys.stderr)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "sys", _SysWithTerminal())
    # no periodic redraw (a daemon thread every 0.5 s): the draws checked are those of the stage's start and end
    monkeypatch.setattr(cli_output.StageReporter, "_run", lambda self: None)


@pytest.mark.usefixtures("terminal")
def test_on_a_terminal_the_running_row_is_drawn_on_stderr_only(tmp_path: Path) -> None:
    res = _run(tmp_path)
    _json_of(res)
    assert f"\r\033[K{SOLVED}" in res.stderr  # drawn when the row's solve starts, erased when it ends
    assert res.stderr.endswith("\r\033[K")
    assert "MLPerf row" not in res.stdout


@pytest.mark.usefixtures("terminal")
def test_quiet_draws_nothing_even_on_a_terminal(tmp_path: Path) -> None:
    res = _run(tmp_path, "-q", "-v")
    _json_of(res)
    assert res.stderr == ""


def test_cases_on_two_cores_give_the_one_process_tables_and_report_every_solved_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate_goodput(parallel=True) solves the distinct cases alternately here and in a forked child: the same
    tables as one process, and each solved row reported once to the listeners (the child's when its result arrives,
    planner.progress.report), with its time."""
    import planner.forked
    from planner.catalog import load_catalog
    from planner.goodput import validate_goodput
    from planner.progress import listening

    records = list(csv.reader(io.StringIO(DATA.read_text(encoding="utf-8"))))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([records[0], *(records[line - 1] for line in (14, 15, 16, 17))])
    p = tmp_path / "mlperf.csv"
    p.write_text(buf.getvalue(), encoding="utf-8")
    rows, catalog = read_mlperf(p), load_catalog()
    monkeypatch.setattr(planner.forked, "usable_cores", lambda: 2)
    ends: list[tuple[str, float]] = []
    with listening(lambda event, label, s: ends.append((label, s)) if event == "end" else None):
        pred2, skip2 = validate_goodput(rows, catalog, rel_tol=0.5, parallel=True)
    pred1, skip1 = validate_goodput(rows, catalog, rel_tol=0.5, parallel=False)
    pd.testing.assert_frame_equal(pred2, pred1)
    pd.testing.assert_frame_equal(skip2, skip1)
    rows_heard = [(label, s) for label, s in ends if label.startswith("MLPerf row ")]  # not the solves' nested stages
    labels = [label for label, _ in rows_heard]
    # two cases (Offline, Server; the 99.9 rows share them): one solved here, one in the child and reported
    assert len(labels) == len(set(labels)) == 2 and all(s > 0 for _, s in rows_heard), ends
    assert all(label.split(":")[0].endswith("/4") for label in labels)
