"""Command-line interface. Commands only parse, call the library and print.

Each ``planner/cli/cmd_*.py`` module defines ``COMMANDS`` (a list of click commands); they
are registered here automatically, so adding a command never edits this file. Keep heavy
imports (pyomo, pandas) inside command functions so ``planner --help`` stays fast.

The error boundary: a :class:`planner.errors.PlannerError` becomes one message on stderr
and its exit code (2 bad input, 3 infeasible, 4 solver); any other exception is reported as
an internal error (exit 1). ``--debug`` re-raises with the traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

import click

from planner.errors import PlannerError


class PlannerGroup(click.Group):
    """Click group with the one error boundary of the CLI."""

    def invoke(self, ctx: click.Context) -> Any:
        debug = "--debug" in sys.argv[1:] or bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except PlannerError as exc:
            if debug:
                raise
            click.echo(exc.render(), err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            # output piped into e.g. `head` that closed early: not an error of ours
            import os

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(0)
        except Exception as exc:  # noqa: BLE001 - the boundary: never a traceback without --debug
            if debug:
                raise
            click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback, and report it)", err=True)
            ctx.exit(1)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from planner import __version__
    from planner.catalog import version_lines

    click.echo(f"planner {__version__}")
    for line in version_lines():
        click.echo(line)
    ctx.exit()


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the package version and the catalog's version (a hash of its files) and exit.")
def main(debug: bool) -> None:
    """Capacity planner for LLM inference: prefill, decode and tool pools sized by a MIP."""


def _register() -> None:
    import planner.cli as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("cmd_"):
            continue
        module = importlib.import_module(f"planner.cli.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            main.add_command(command)


_register()
