"""Reading YAML/JSON files into schema models, turning every failure into file/field/fix problems."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import InputError, Problem

M = TypeVar("M", bound=BaseModel)

_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping names the same key twice (YAML says keys are unique; PyYAML keeps the last)."""


class _UniqueKeyLoader(_BASE_LOADER):
    """libyaml's C loader when available (several times faster; same safe subset of YAML) that
    rejects a key given twice in one mapping, naming the key and both lines, instead of keeping
    the last silently."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (TypeError, yaml.YAMLError):
                    continue  # an unhashable key: the base constructor reports it
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKeyError(
                        "while reading a mapping", node.start_mark,
                        f"key {key!r} appears twice (lines {seen[key]} and {line}); YAML keys must be unique", key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", _UniqueKeyLoader.construct_yaml_map)
_YAML_LOADER: Any = _UniqueKeyLoader


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level is a mapping; errors name the file."""
    p = Path(path)
    if not p.exists():
        raise InputError(Problem(str(p), "", "file does not exist", missing_file_fix(p)))
    if p.is_dir():
        raise InputError(Problem(str(p), "", "is a directory, not a file", "give the path of a YAML file"))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(Problem(str(p), "", f"cannot be read: {exc}", "give a UTF-8 text file")) from exc
    try:
        data = json.loads(text, object_pairs_hook=_unique_json_object) if p.suffix == ".json" else yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        if isinstance(exc, DuplicateKeyError):
            raise InputError(Problem(str(p), "", f"{_syntax_message(exc)}", "keep one of the two entries (PyYAML would silently keep the last)")) from exc
        raise InputError(Problem(str(p), "", f"is not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {_syntax_message(exc)}", "fix the syntax at the line shown")) from exc
    except RecursionError as exc:  # absurdly deep nesting
        raise InputError(Problem(str(p), "", "is nested too deeply to read", "write a flat YAML mapping (see `planner schema`)")) from exc
    if data is None:
        raise InputError(Problem(str(p), "", "is empty", "write the document (see `planner schema`)"))
    if not isinstance(data, dict):
        raise InputError(Problem(str(p), "", f"top level is a {type(data).__name__}, not a mapping", "the file must be a mapping of field: value"))
    return data


def missing_file_fix(p: Path) -> str:
    """The fix for a file that does not exist, true to the lookup made: a relative path was looked up from
    the current directory; an absolute one (also what a caller builds from a name, e.g. a calibration
    name in the catalog's ``calibration/``) in its folder, whose files of that kind are listed."""
    if not p.is_absolute():
        return f"check the path (relative paths are resolved from the current directory, {Path.cwd()})"
    try:
        present = sorted(f.name for f in p.parent.glob(f"*{p.suffix}") if f.is_file()) if p.parent.is_dir() else []
    except OSError:
        present = []
    if not present:
        return "check the path"
    shown = ", ".join(present[:12]) + (", ..." if len(present) > 12 else "")
    return f"check the name: {p.parent} holds {shown}"


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise json.JSONDecodeError(f"key {key!r} appears twice in one object; JSON keys must be unique", "", 0)
        out[key] = value
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _syntax_message(exc: Exception) -> str:
    """``<problem> at line L, column C`` for YAML/JSON syntax errors (1-based)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = exc.problem or "syntax error"
        context = f" ({exc.context})" if exc.context else ""
        return f"{what}{context} at line {mark.line + 1}, column {mark.column + 1}"
    return _one_line(str(exc))


MAX_MAGNITUDE = 1e12
"""Largest magnitude of any number in an instance file. Every field is in units where real values
are far smaller (GB, TFLOPs, USD per device, req/s); 1e20 CPU-seconds per call or a 1e300 price
would reach HiGHS as an infinite coefficient or overflow a cost to ``inf``."""


def _numbers(data: Any, prefix: str = "") -> Iterator[tuple[str, float | int]]:
    """Every number in a nested mapping/list with its dotted path; each container visited once (YAML
    anchors can share, or cycle back to, a container)."""
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(data, prefix)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            yield path, node
            continue
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        seen.add(id(node))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        children = [(v, (f"{path}.{k}" if path else str(k)) if isinstance(node, dict) else f"{path}[{k}]") for k, v in items]
        stack.extend(reversed(children))


def magnitude_problems(data: Any, file: str, prefix: str = "") -> list[Problem]:
    """Problems for every number beyond :data:`MAX_MAGNITUDE` in ``data`` (a validated model's
    ``model_dump()``: numbers written as text, e.g. ``--set x=1e300``, are numbers by then)."""
    return [Problem(file, path, f"{v:g} is beyond the range the planner computes with (|x| <= {MAX_MAGNITUDE:g})",
                    "give a realistic value in the unit the field name states")
            for path, v in _numbers(data, prefix) if math.isfinite(v) and abs(v) > MAX_MAGNITUDE]


def nonfinite_problems(data: Any, file: str, prefix: str = "") -> list[Problem]:
    """Problems for every ``.inf``/``.nan`` number in ``data`` (YAML accepts them; no field does)."""
    return [Problem(file, path, f"{v!r} is not a finite number", "give a finite plain number")
            for path, v in _numbers(data, prefix) if isinstance(v, float) and not math.isfinite(v)]


def loc_to_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if item == "[key]":  # the key itself is invalid: name it as a key, not an index
            if parts and parts[-1].startswith("["):
                parts[-1] = "." + parts[-1][1:-1] if len(parts) > 1 else parts[-1][1:-1]
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            # skip pydantic's internal tags for unions / function validators
            if _is_tag(item):
                continue
            parts.append(("." if parts else "") + item)
    return "".join(parts)


def _fix_for(error: dict[str, Any], model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        valid = _valid_fields(model, loc[:-1])
        hint = f"; valid fields here: {', '.join(valid)}" if valid else ""
        return f"remove it or correct the spelling{hint}"
    if kind == "missing":
        return "add this field"
    if kind in {"too_short", "too_long"}:
        return "give a list of the length stated"
    if kind in {"greater_than", "greater_than_equal"}:
        # A lower bound of 0 is a sign rule (a rate, a count, a price): the field's reason is about its upper bound
        # and quoting it would send a user with `rate_per_s: -5` to the maximum. A non-zero lower bound is explained.
        limit = (error.get("ctx") or {}).get("gt" if kind == "greater_than" else "ge")
        sym = ">" if kind == "greater_than" else ">="
        if isinstance(limit, (int, float)):
            why = _bounds_reason(model, loc) if limit != 0 else ""
            return f"give a value {sym} {limit:g}" + (f" ({why})" if why else "")
        return "use a value within the bound stated"
    if kind in {"less_than", "less_than_equal"}:
        why = _bounds_reason(model, loc)
        return f"use a value within the bound stated: {why}" if why else "use a value within the bound stated"
    if kind.startswith("literal"):
        return "use one of the values listed"
    if kind in {"float_parsing", "int_parsing", "float_type", "int_type", "int_from_float"}:
        return "give a plain number without units (units are in the field name)"
    if kind in {"string_type", "list_type", "dict_type", "bool_type", "bool_parsing", "model_type"}:
        return "use the type named"
    if kind == "value_error":
        return "see the message"
    return "see `planner schema` for the expected format"


def _valid_fields(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Walk the model along ``loc`` to list the fields allowed where an unknown key sits.

    Follows field annotations through ``dict[str, X]`` values (service names, device ids),
    ``list[X]`` items and ``X | None``, so ``services.chat.<typo>`` lists ``Service``'s fields.
    """
    current: Any = model
    for item in loc:
        if _is_tag(item):
            continue
        current = _step(current, item)
        if current is None:
            return []
    inner = _inner_model(current)
    return sorted(inner.model_fields) if inner is not None else []


def _bounds_reason(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """The ``bounds_reason`` of the field at ``loc`` (:func:`planner.schema.common.bounded`), or ''."""
    current: Any = model
    reason = ""
    for item in loc:
        if _is_tag(item):
            continue
        inner = _inner_model(current) if not isinstance(item, int) else None
        if inner is not None and isinstance(item, str) and item in inner.model_fields:
            reason = _reason_of(inner.model_fields[item])
        current = _step(current, item)
        if current is None:
            break
        reason = reason or _reason_in(current)
    return reason


def _reason_of(field: Any) -> str:
    extra = getattr(field, "json_schema_extra", None)
    if isinstance(extra, dict) and isinstance(extra.get("bounds_reason"), str):
        return str(extra["bounds_reason"])
    return _reason_in(getattr(field, "annotation", None)) or next(
        (r for m in getattr(field, "metadata", []) if (r := _reason_of(m))), "") if hasattr(field, "metadata") else ""


def _reason_in(annotation: Any) -> str:
    """A ``bounds_reason`` carried by ``Annotated[..., Field(...)]`` metadata inside an annotation."""
    for meta in getattr(annotation, "__metadata__", ()) or ():
        extra = getattr(meta, "json_schema_extra", None)
        if isinstance(extra, dict) and isinstance(extra.get("bounds_reason"), str):
            return str(extra["bounds_reason"])
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _reason_in(arg)
        if found:
            return found
    return ""


def _step(annotation: Any, item: int | str) -> Any:
    """The annotation one ``loc`` item below ``annotation`` (None if it cannot be followed)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(item))
        return field.annotation if field is not None else None
    origin = getattr(annotation, "__origin__", None)
    args: tuple[Any, ...] = getattr(annotation, "__args__", ()) or ()
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is list and args:
        return args[0]
    for arg in args:  # a union such as ``X | None``: the first branch the item can follow
        if arg is type(None):
            continue
        found = _step(arg, item)
        if found is not None:
            return found
    return None


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside an annotation such as ``dict[str, Service]`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _is_tag(item: int | str) -> bool:
    """Pydantic's internal loc entries for validators and union branches (not user keys)."""
    return isinstance(item, str) and (item.startswith("function-") or item in _TAGS)


_TAGS = {"literal", "str", "int", "float", "bool", "dict", "list"}


def problems_from_validation(exc: ValidationError, model: type[BaseModel], file: str, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        path = loc_to_path(loc)
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        msg = err.get("msg", "invalid value")
        if loc and loc[-1] == "[key]":
            msg = f"key {err.get('input')!r} must be a string"
            problems.append(Problem(file, path, msg, "write the key as text (quote it in YAML)"))
            continue
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        else:
            value = err.get("input")
            if not isinstance(value, (dict, list)) and value is not None:
                msg = f"{msg} (got {_short_repr(value)})"
        fix = _fix_for(dict(err), model, loc)
        if err.get("type") == "value_error":  # our validators: "<what>; fix: <fix>"
            msg = msg.removeprefix("Value error, ")
            if "; fix: " in msg:
                msg, fix = msg.split("; fix: ", 1)
        problems.append(Problem(file, path, msg, fix))
    return problems


def validate_mapping(model: type[M], data: dict[str, Any], file: str, prefix: str = "") -> M:
    """Validate ``data`` as ``model``; raise one :class:`InputError` listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(problems_from_validation(exc, model, file, prefix)) from exc


def load_model(model: type[M], path: str | Path) -> M:
    return validate_mapping(model, read_mapping(path), str(path))


def load_model_cached(model: type[M], path: Path, cache: dict[str, tuple[float, Any]]) -> M:
    """``path`` read and validated as ``model`` (one error per problem), re-read only when its
    modification time changes; ``cache`` is the caller's (one per kind of file)."""
    mtime = path.stat().st_mtime if path.exists() else -1.0
    hit = cache.get(str(path))
    if hit and hit[0] == mtime:
        return hit[1]
    data = read_mapping(path)
    try:
        obj = model.model_validate(data)
    except ValidationError as exc:
        raise InputError(problems_from_validation(exc, model, str(path))) from exc
    cache[str(path)] = (mtime, obj)
    return obj
