"""``planner html PLAN.json -o report.html``: render the self-contained HTML report of a plan."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli.output import wrote


@click.command("html")
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Report file to write [default: report.html next to PLAN_FILE].")
@click.option("--title", default=None, help="Page title [default: 'Capacity plan: INSTANCE'].")
def html_cmd(plan_file: Path, out: Path | None, title: str | None) -> None:
    """Render PLAN_FILE (plan.json written by `planner solve`) as one self-contained HTML page."""
    from planner.report.html import load_plan, write_html

    plan = load_plan(plan_file)
    path = write_html(out or plan_file.with_name("report.html"), plan=plan, title=title)
    wrote(f"wrote {path} (verdict: {plan.verdict.winner or 'no feasible plan'})")


COMMANDS = [html_cmd]
