"""Read a ``plan.json`` written by ``planner solve``: the one loader every command uses.

``planner html``, ``planner check``, ``planner simulate --plan`` (and the report) call
:func:`load_plan`, so a missing, unreadable or stale plan file gives the same error
everywhere: an :class:`~planner.errors.InputError` naming the file, the field and the fix
(CLI exit 2, no traceback).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.schema.plan import PlanResult

REGENERATE = "regenerate the plan with this version of `planner solve`"


OTHER_OUTPUTS: tuple[tuple[str, frozenset[str]], ...] = (
    ("planner sweep --json", frozenset({"rows", "crossovers", "tornado"})),
    ("planner budget --json", frozenset({"budgets"})),
    ("planner evaluate --json", frozenset({"architecture", "instances", "rows"})),
    ("planner solve-robust --json", frozenset({"objective", "scenarios", "weights", "winner", "rows", "plans"})),
    ("planner simulate --json", frozenset({"plan", "arrivals", "duration_s", "model_swap_reload", "scenarios"})),
    ("planner horizon --evaluate --json", frozenset({"evaluated", "regret"})),
    ("planner horizon --sweep --json", frozenset({"instance", "sweep"})),
)
"""The JSON another command prints, by the top-level keys it always has (:mod:`planner.cli.cmd_studies`,
:mod:`planner.cli.cmd_simulate`, :mod:`planner.cli.cmd_horizon`); a horizon.json is recognised in :func:`load_plan`."""


def other_output(data: object) -> str | None:
    """The command whose ``--json`` output ``data`` is (:data:`OTHER_OUTPUTS`), or None. Asked only of a file that is
    not a valid plan: a plan has ``verdict`` and ``capacity``, which none of them has."""
    if not isinstance(data, dict) or "verdict" in data or "capacity" in data:
        return None
    return next((command for command, keys in OTHER_OUTPUTS if keys <= data.keys()), None)


def load_plan(path: str | Path) -> PlanResult:
    """Read and validate a plan file; a missing or malformed file is an InputError (up to 10 field problems)."""
    import json

    from pydantic import ValidationError

    from planner.errors import InputError, Problem
    from planner.schema.plan import PlanResult

    p = Path(path)
    if not p.is_file():
        raise InputError(Problem(str(p), "", "plan file not found: the path does not exist", "pass the plan.json written by `planner solve INSTANCE --out DIR`"))
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(Problem(str(p), "", f"not valid JSON ({exc})", "pass the plan.json written by `planner solve`")) from None
    except RecursionError:  # arrays or objects nested thousands deep (fuzzed plans, issue 24)
        raise InputError(Problem(str(p), "", "JSON nested too deeply to be a plan", "pass the plan.json written by `planner solve`")) from None
    if isinstance(data, dict) and "periods" in data and "slots" in data and "architectures" in data:
        # every reader of a plan (check, html, deploy, evaluate, simulate --plan) comes through here
        raise InputError(Problem(str(p), "periods", "this is a plan over time (horizon.json from `planner horizon`), not the "
                                 "single-peak plan.json of `planner solve` this command reads",
                                 "give the plan.json of `planner solve INSTANCE --out DIR`; a plan over time is read by "
                                 f"`planner horizon INSTANCE --evaluate {p} --growth RATES`"))
    try:
        return PlanResult.model_validate(data)
    except ValidationError as exc:
        command = other_output(data)
        if command is not None:  # one line saying what the file is, not a field error per key it has and lacks
            raise InputError(Problem(str(p), "", f"this is the output of `{command}`, not a plan.json",
                                     "give the plan.json `planner solve INSTANCE --out DIR` writes")) from None
        problems = [Problem(str(p), ".".join(str(x) for x in e["loc"]) or "(top level)", e["msg"], REGENERATE)
                    for e in exc.errors()[:10]]
        raise InputError(problems) from None


def recorded_instance(result: PlanResult, plan_file: str | Path) -> Path | None:
    """The instance file the plan records (``instance_path``), found from any working directory: the path
    itself (absolute since plans record it so; a relative one is tried from here), else relative to the plan
    file's folder. ``None`` when the plan records none or the file is not found."""
    if not result.instance_path:
        return None
    p = Path(result.instance_path)
    for cand in (p,) if p.is_absolute() else (p, Path(plan_file).resolve().parent / p):
        try:
            if cand.is_file():
                return cand
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte: not found
            continue
    return None
