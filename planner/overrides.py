"""Dot-path overrides on instance data: ``services.chat.traffic.rate_multiplier=1.5``.

Overrides are applied to the raw mapping, then the whole instance is validated again, so a
bad path or value gets the same file/field/fix error as a bad file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from planner.errors import InputError, Problem


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], *, source: str = "") -> dict[str, Any]:
    """Return a deep copy of ``data`` with each dot-path set to its value.

    Intermediate mappings must exist except for the last key, which may be new (it is
    validated against the schema afterwards). Lists are indexed by position: ``lengths.0.weight``.
    """
    if not isinstance(overrides, dict):
        raise InputError(Problem(source, "", f"overrides must be a mapping of dot-path: value, got {type(overrides).__name__}", "e.g. services.chat.traffic.rate_multiplier: 1.5"))
    out = copy.deepcopy(data)
    problems: list[Problem] = []
    for path, value in overrides.items():
        if not isinstance(path, str) or not path:
            problems.append(Problem(source, str(path), "an override key must be a dot-path string", "e.g. services.chat.traffic.rate_multiplier"))
            continue
        parts = path.split(".")
        node: Any = out
        ok = True
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, dict):
                if i == 1 and parts[0] == "services" and part not in node:
                    # a service is never created by an override (it needs a model and traffic): name the ones there are
                    names = ", ".join(sorted(map(str, node))) or "none"
                    problems.append(Problem(source, path, f"the instance has no service {part!r} (its services: {names})",
                                            f"use one of them, e.g. services.{next(iter(sorted(map(str, node))), 'chat')}.{'.'.join(parts[2:])}"))
                    ok = False
                    break
                if part not in node or node[part] is None:
                    # allow creating optional sections (e.g. options.solver)
                    node[part] = {}
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                problems.append(Problem(source, path, f"cannot descend into {'.'.join(parts[: i + 1])!r}", "check the path against `planner schema`"))
                ok = False
                break
        if not ok:
            continue
        last = parts[-1]
        if isinstance(node, dict):
            node[last] = value
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = value
        else:
            problems.append(Problem(source, path, "path does not name a field", "check the path against `planner schema`"))
    if problems:
        raise InputError(problems)
    return out


def parse_value(text: str) -> Any:
    """Parse a command-line value as YAML (numbers, booleans, lists), falling back to the string."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_set_options(values: tuple[str, ...] | list[str], *, example: str = "services.chat.traffic.rate_multiplier=1.5") -> dict[str, Any]:
    """``--set PATH=VALUE`` options (repeatable) as ``{path: value}``; each value through :func:`parse_value`.

    ``example`` is the PATH=VALUE the error message suggests when an item has no ``=``."""
    out: dict[str, Any] = {}
    for v in values:
        if "=" not in v:
            raise InputError(Problem("", "--set", f"{v!r} is not PATH=VALUE", f"write e.g. --set {example}"))
        k, val = v.split("=", 1)
        out[k.strip()] = parse_value(val)
    return out


def replaced_by_set(scenario: str, scenario_overrides: dict[str, Any], overrides: dict[str, Any]) -> list[str]:
    """One note per path that both the named ``scenario`` and ``--set`` give, with different values: the ``--set`` value
    is applied after the scenario's and replaces it (``planner solve --scenario growth-2x --set
    services.chat.traffic.rate_multiplier=0.5`` plans at 0.5, not at the scenario's 2.0 nor at their product)."""
    return [f"--set {path}={overrides[path]!r} replaces scenario {scenario}'s {path}: {scenario_overrides[path]!r} "
            "(the scenario's other overrides apply)" for path in overrides
            if path in scenario_overrides and overrides[path] != scenario_overrides[path]]


def _at_path(data: Any, path: str) -> Any:
    """The value at the dot-path ``path`` of a raw instance mapping (list items by position), ``None`` where it has none."""
    node = data
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def multipliers_replaced(raw: Mapping[str, Any], values: Mapping[str, Sequence[Any]], *, option: str = "--set") -> list[str]:
    """One note per ``*multiplier`` field the instance itself sets that ``option`` gives other values: the option sets the
    field, it does not scale the instance's value. ``services.vqa.traffic.rate_multiplier=1.1`` on an instance that
    writes ``rate_multiplier: 20`` plans 1.1x the log's rate, 0.055x the instance's traffic, which read as "traffic
    x1.1" would be a study of another deployment (``values``: path -> the values given; ``raw``: the instance's mapping
    before ``option``, after its scenario)."""
    out: list[str] = []
    for path, given in values.items():
        if not path.rsplit(".", 1)[-1].endswith("multiplier"):
            continue
        old = _number(_at_path(raw, path))
        nums = [n for n in (_number(v) for v in given) if n is not None]
        if old is None or old <= 0 or not nums or all(n == old for n in nums):
            continue
        lo, hi = min(nums) / old, max(nums) / old
        share = f"x{lo:.3g}" if lo == hi else f"x{lo:.3g} to x{hi:.3g}"
        shown = ",".join(f"{n:g}" for n in nums)
        fix = (f"; for x{nums[0]:g} of it give {path}={old * nums[0]:g}" if len(nums) == 1 else
               f"; for factors on it give their products with {old:g}")
        out.append(f"{option} {path}={shown} replaces the instance's {old:g}, it does not multiply it ({share} of the "
                   f"instance's value){fix}")
    return out
