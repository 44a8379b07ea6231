"""Progress and verbosity (issue 27): library stages reach the CLI's reporter; ``-v`` prints each
stage and its time, ``-q`` silences the 'wrote FILE' lines, nothing is drawn when stderr is not a
terminal."""

from __future__ import annotations

import io
from pathlib import Path

import click
from click.testing import CliRunner

from planner.cli import PlannerGroup, _add_global_options
from planner.cli.output import StageReporter, wrote
from planner.progress import listening, stage


def test_stages_reach_listeners_in_order_and_cost_nothing_without() -> None:
    with stage("alone"):  # no listener: a no-op
        pass
    events: list[tuple[str, str]] = []
    with listening(lambda ev, label, s: events.append((ev, label))), stage("outer"), stage("inner"):
        pass
    with stage("after"):
        pass
    assert events == [("start", "outer"), ("start", "inner"), ("end", "inner"), ("end", "outer")]


def _cli(tmp_path: Path) -> click.Group:
    @click.group(cls=PlannerGroup)
    def cli() -> None:
        pass

    @cli.command("work")
    def work() -> None:
        with stage("capacity tables"), stage("solve shared"):
            pass
        wrote(f"wrote {tmp_path / 'plan.json'}")
        click.echo("RESULT")

    _add_global_options(work)
    return cli


def test_verbose_prints_each_stage_and_its_time_quiet_keeps_results_only(tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    runner = CliRunner()
    plain = runner.invoke(cli, ["work"])
    assert plain.exit_code == 0 and "RESULT" in plain.stdout and "wrote" in plain.stdout
    assert "capacity tables" not in plain.stderr  # not a terminal, not -v: nothing drawn
    verbose = runner.invoke(cli, ["work", "-v"])
    lines = verbose.stderr.splitlines()
    assert any(ln.startswith("  solve shared: ") and ln.endswith(" s") for ln in lines)  # nested: indented
    assert any(ln.startswith("capacity tables: ") for ln in lines)
    quiet = runner.invoke(cli, ["work", "-q"])
    assert quiet.stdout == "RESULT\n" and quiet.stderr == ""


def test_reporter_draws_the_running_stages_on_a_terminal(monkeypatch: object) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    import sys

    monkeypatch.setattr(sys, "stderr", err)  # type: ignore[attr-defined]
    rep = StageReporter(tick_s=10.0)
    rep("start", "capacity tables", 0.0)
    rep("start", "solve shared", 0.0)
    drawn = err.getvalue()
    rep("end", "solve shared", 1.0)
    rep("end", "capacity tables", 2.0)
    rep.close()
    assert "capacity tables › solve shared … 0 s" in drawn
    assert err.getvalue().endswith("\r\033[K")  # the line is erased when the stages end
