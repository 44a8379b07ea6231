"""Domain errors and their exit codes.

Every error a user can cause is a :class:`PlannerError`. The CLI turns it into one message
on stderr and a non-zero exit code; a traceback is shown only with ``--debug``.

Exit codes:
    2  bad input (a file, a field, a reference, a command-line value)
    3  the instance is infeasible (comes with a diagnosis)
    4  the solver failed or hit a limit without any feasible plan
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One problem found in an input: where it is, what is wrong, how to fix it."""

    file: str
    """The file the problem is in ('' for command-line values)."""
    path: str
    """Dotted field path inside the file, e.g. ``services.chat.slo.ttft.quantile``."""
    message: str
    """What is wrong."""
    fix: str = ""
    """What the user should do about it."""

    def render(self) -> str:
        where = self.file or "<command line>"
        if self.path:
            where += f": {self.path}"
        text = f"{where}: {self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return one_line(text)


_CONTROL = {c: f"\\x{c:02x}" for c in range(32)} | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 127: "\\x7f"}


def one_line(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): a problem is one line on a terminal, whatever
    names a user's file holds (a device id with a newline, an ANSI escape)."""
    return text.translate(_CONTROL)


class PlannerError(Exception):
    """Base of every error the planner reports to a user."""

    exit_code = 1

    def render(self) -> str:
        return str(self)


class InputError(PlannerError):
    """Bad input: collects *all* problems found, then raises once."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str, *, file: str = "") -> None:
        if isinstance(problems, str):
            problems = [Problem(file=file, path="", message=problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return "error: " + self.problems[0].render()
        lines = [f"error: {len(self.problems)} problems found:"]
        lines += ["  - " + p.render() for p in self.problems]
        return "\n".join(lines)


@dataclass
class Diagnosis:
    """Why an instance is infeasible and what would make it feasible."""

    service: str
    bucket: str
    constraint: str
    message: str
    fix: str

    def render(self) -> str:
        scope = self.service + (f"/{self.bucket}" if self.bucket else "")
        return f"{scope}: {self.constraint}: {self.message} (to make it feasible: {self.fix})"


class InfeasibleError(PlannerError):
    """The instance has no plan; carries one diagnosis per cause found."""

    exit_code = 3

    def __init__(self, diagnoses: list[Diagnosis], headline: str = "the instance is infeasible") -> None:
        self.diagnoses = diagnoses
        self.headline = headline
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"infeasible: {self.headline}"]
        lines += ["  - " + d.render() for d in self.diagnoses]
        return "\n".join(lines)


class SolverError(PlannerError):
    """The solver failed, or stopped at a limit with no feasible plan."""

    exit_code = 4


@dataclass
class ProblemCollector:
    """Accumulates problems while validating; raise once at the end (STYLE §8)."""

    file: str = ""
    problems: list[Problem] = field(default_factory=list)

    def add(self, path: str, message: str, fix: str = "", *, file: str | None = None) -> None:
        self.problems.append(Problem(file=self.file if file is None else file, path=path, message=message, fix=fix))

    def extend(self, problems: list[Problem]) -> None:
        self.problems.extend(problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise InputError(self.problems)
