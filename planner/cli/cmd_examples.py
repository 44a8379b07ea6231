"""`planner examples`: copy the example instances and their logs into a folder."""

from __future__ import annotations

import click


@click.command("examples")
@click.argument("folder", required=False, default="planner-examples", type=click.Path(file_okay=False))
@click.option("--list", "list_only", is_flag=True, help="List the examples and the logs they read; copy nothing.")
@click.option("--force", is_flag=True, help="Overwrite files that already exist in FOLDER.")
def examples(folder: str, list_only: bool, force: bool) -> None:
    """Copy the example instances, the logs they read (traces/, with SOURCE notes and licences) and
    the instance JSON schema into FOLDER (default ./planner-examples), ready for
    `planner solve FOLDER/enterprise-chat.yaml`."""
    from planner.cli.output import note, verbosity
    from planner.examples import copy_examples, examples_dir, list_examples

    items = list_examples()
    if list_only:
        for ex in items:
            click.echo(f"{ex.file:<30} {ex.description}")
            if ex.devices or ex.targets:  # read from the instance itself, not its prose
                click.echo(f"{'':<30}   " + "; ".join(filter(None, [("devices " + ", ".join(ex.devices)) if ex.devices else "",
                                                                   "; ".join(ex.targets)])))
            for log in ex.logs:
                click.echo(f"{'':<30}   reads {log}")
        click.echo(f"\n{len(items)} examples in {examples_dir()}")
        return
    written = copy_examples(folder, force=force)
    logs = sorted({log for ex in items for log in ex.logs})
    if verbosity() < 0:  # -q: the files are the answer
        return
    click.echo(f"copied {len(items)} example instances, {len(logs)} logs and their notes ({len(written)} files) into {folder}")
    first = next((ex.file for ex in items if ex.file == "enterprise-chat.yaml"), items[0].file if items else None)
    if first:
        note(f"next: planner solve {folder.rstrip('/')}/{first}")


COMMANDS = [examples]
