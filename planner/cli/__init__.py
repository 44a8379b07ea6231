"""Command-line interface. Commands only parse, call the library and print.

Each ``planner/cli/cmd_*.py`` module defines ``COMMANDS`` (a list of click commands); they
are registered here automatically, so adding a command never edits this file; a module is imported
when one of its commands is asked for (:class:`PlannerGroup`: ``cmd_NAME`` for ``planner NAME``). Keep heavy
imports (pyomo, pandas) inside command functions so ``planner --help`` stays fast.

The error boundary: a :class:`planner.errors.PlannerError` becomes one message on stderr
and its exit code (2 bad input, 3 infeasible, 4 solver); any other exception is reported as
an internal error (exit 1), but for a file-system error on a path the user gave (``OSError`` with a
file name: an ``--out`` under a file, a read-only folder), which is bad input (exit 2, :func:`path_error_message`).
``--debug`` prints the traceback as well and keeps the exit code.

``--debug``, ``-q/--quiet`` and ``-v/--verbose`` are accepted before the subcommand
(``planner --debug solve X``) and after it (``planner solve X --debug``): :func:`_register`
adds them to every command; they are kept in the click context's ``meta`` (shared by the
group's and the subcommand's contexts) and read through :mod:`planner.cli.output`.
"""

from __future__ import annotations

import errno
import gc
import importlib
import os
import pkgutil
import sys
import traceback
from typing import Any

import click

from planner.cli.output import DEBUG_KEY, VERBOSITY_KEY, reporting_stages
from planner.errors import PlannerError

# One BLAS thread per planner process unless the user chose otherwise (OpenBLAS, OpenMP, MKL read these
# when numpy loads, which happens after this module: command modules import numpy/pandas lazily). The
# planner's matrix products are small (e.g. the lane-count chains of planner.pool_latency); a second BLAS
# thread that must wait for a core on a busy 2-core machine made one goodput check 25x slower (issue 27).
for _blas_threads_var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_blas_threads_var, "1")


GC_GEN0_THRESHOLD = 10_000
"""Allocations between two young-generation collections of Python's cyclic garbage collector while a command
runs (CPython's default: 700; restored when the command returns). A cold ``planner solve`` of the README example
creates millions of short-lived objects (imports of pandas, pyomo, scipy and the schemas, DataFrames, the
MIP's expressions), nearly all freed by reference counting: at 700 the collector ran 386 times and took 0.18 s of
its ~2.1 s CPU, at 10,000 24 times and 0.07 s (issue 27). Only when garbage is collected changes, not what:
objects in reference cycles live a little longer (peak RSS of a cold solve: enterprise-chat 318 -> 316 MB,
code-completion-8b 207 -> 220 MB, one run each)."""


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[DEBUG_KEY] = True


def _set_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[VERBOSITY_KEY] = -1


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if value and ctx.meta.get(VERBOSITY_KEY, 0) >= 0:
        ctx.meta[VERBOSITY_KEY] = value


def _global_options() -> list[click.Option]:
    """The options every command accepts, before or after its name (fresh objects per command)."""
    return [
        click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                     help="Show tracebacks as well as the one-line errors (exit codes unchanged)."),
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_set_quiet,
                     help="Results only: no progress, warnings or 'wrote FILE' lines."),
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_set_verbose,
                     help="Also print each step and its time on stderr."),
    ]


class PlannerGroup(click.Group):
    """Click group with the one error boundary of the CLI, whose commands are loaded when asked for.

    ``planner NAME`` imports ``planner/cli/cmd_NAME.py`` (``-`` read as ``_``) first and the other
    command modules only when that one does not define ``NAME`` (e.g. ``check-instance`` lives in
    ``cmd_catalog``); listing the commands (``--help``) imports them all. So a command pays for its own
    module's imports only, not for every other command's (issue 27: start-up of ``planner solve``)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            guess = f"cmd_{cmd_name.replace('-', '_')}"
            if guess in _command_modules():
                _register(guess)
            if cmd_name not in self.commands:
                _register_all()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _register_all()
        return super().list_commands(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        previous = gc.get_threshold()
        gc.set_threshold(GC_GEN0_THRESHOLD, *previous[1:])
        try:
            return self._invoke_guarded(ctx)
        finally:
            gc.set_threshold(*previous)

    def _invoke_guarded(self, ctx: click.Context) -> Any:
        try:
            with reporting_stages():  # progress of long library steps on a terminal, their times with -v
                return super().invoke(ctx)
        except PlannerError as exc:
            if ctx.meta.get(DEBUG_KEY):
                traceback.print_exc(file=sys.stderr)
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
        except OSError as exc:
            if ctx.meta.get(DEBUG_KEY):
                traceback.print_exc(file=sys.stderr)
            if exc.filename is None and exc.errno not in _ENVIRONMENT_ERRNOS:  # not a path the user gave, nor the disk: ours
                click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback, and report it)", err=True)
                ctx.exit(1)
            click.echo(path_error_message(exc), err=True)
            ctx.exit(2)
        except Exception as exc:  # noqa: BLE001 - the boundary: never a traceback without --debug
            if ctx.meta.get(DEBUG_KEY):
                traceback.print_exc(file=sys.stderr)
            click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback, and report it)", err=True)
            ctx.exit(1)


_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""Write errors of the place written to (disk full, quota, read-only file system): bad input, exit 2,
even where the OS does not say which file (a full disk is reported on ``close``)."""


def path_error_message(exc: OSError) -> str:
    """One message for a file-system error on a path the user gave (an ``--out`` folder under a file, a
    folder that cannot be created, a read-only place): the path, what the system said, and the fix."""
    path = ("the output (its file system)" if exc.filename is None
            else exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}")
    if exc.errno in _ENVIRONMENT_ERRNOS:
        fix = "free space on that file system (or lift its quota / read-only mount), or write to a path on another one"
    else:
        fix = ("give a path whose parent folders exist and are folders (not files) you can write to, "
               "or an input file that exists and you can read")
    return f"error: {path}: {exc.strerror or type(exc).__name__}\n  fix: {fix}"


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
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the package version and the catalog's version (a hash of its files) and exit.")
def main() -> None:
    """Capacity planner for LLM inference: prefill, decode and tool pools sized by a MIP."""


def _command_modules() -> list[str]:
    """The ``planner.cli.cmd_*`` modules, by name (sorted): each defines ``COMMANDS``."""
    import planner.cli as pkg

    return sorted(info.name for info in pkgutil.iter_modules(pkg.__path__) if info.name.startswith("cmd_"))


def _register(module_name: str) -> None:
    """Import one command module and add its ``COMMANDS`` to :data:`main` (once)."""
    if module_name in _REGISTERED:
        return
    _REGISTERED.add(module_name)
    module = importlib.import_module(f"planner.cli.{module_name}")
    for command in getattr(module, "COMMANDS", []):
        _add_global_options(command)
        main.add_command(command)


_REGISTERED: set[str] = set()
"""The command modules imported so far (:func:`_register`)."""


def _register_all() -> None:
    for name in _command_modules():
        _register(name)


def _add_global_options(command: click.Command) -> None:
    command.params.extend(_global_options())
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_global_options(sub)


main.params.extend(_global_options())
