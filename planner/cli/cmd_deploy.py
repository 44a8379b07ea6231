"""``planner deploy PLAN.json --target T --out DIR``: engine launch settings for a plan's pools."""

from __future__ import annotations

from pathlib import Path

import click

from planner.deploy.flags import TARGETS


@click.command("deploy")
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", "target", required=True, metavar="|".join(TARGETS),
              help="Serving engine to write settings for: " + ", ".join(TARGETS) + ".")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write the launch script / config files, settings.json and NOTES.md into.")
@click.option("--architecture", default=None, metavar="shared|disaggregated|hybrid",
              help="Architecture of the plan to deploy [default: the plan's winner].")
def deploy_cmd(plan_file: Path, target: str, out: Path, architecture: str | None) -> None:
    """Write launch settings for each pool of PLAN_FILE (plan.json of `planner solve`) for one engine.

    Flags and keys are the engine's own (versions: planner/data/engine_flags/). What the plan needs
    and the target cannot express is printed on stderr and listed in NOTES.md.
    """
    from planner.cli.output import note
    from planner.deploy import deploy_plan

    dep, written = deploy_plan(plan_file, target, out, architecture=architecture)
    for w in dep.warnings:
        note(f"warning: {w}")
    click.echo(f"wrote {len(written)} files to {out} ({dep.architecture} architecture, {target}): "
               + ", ".join(p.name for p in written))


COMMANDS = [deploy_cmd]
