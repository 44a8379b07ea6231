"""Reading YAML/JSON files into schema models, turning every failure into file/field/fix problems."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import InputError, Problem

M = TypeVar("M", bound=BaseModel)


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level is a mapping; errors name the file."""
    p = Path(path)
    if not p.exists():
        raise InputError(Problem(str(p), "", "file does not exist", "check the path (relative paths are resolved from the current directory)"))
    if p.is_dir():
        raise InputError(Problem(str(p), "", "is a directory, not a file", "give the path of a YAML file"))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(Problem(str(p), "", f"cannot be read: {exc}", "give a UTF-8 text file")) from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise InputError(Problem(str(p), "", f"is not valid YAML/JSON: {_one_line(str(exc))}", "fix the syntax at the line shown")) from exc
    if data is None:
        raise InputError(Problem(str(p), "", "is empty", "write the document (see `planner schema`)"))
    if not isinstance(data, dict):
        raise InputError(Problem(str(p), "", f"top level is a {type(data).__name__}, not a mapping", "the file must be a mapping of field: value"))
    return data


def _one_line(text: str) -> str:
    return " ".join(text.split())


def loc_to_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            # skip pydantic's internal tags for unions / function validators
            if item.startswith("function-") or item in {"literal", "str", "int", "float", "bool", "dict", "list"}:
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
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return "use a value within the bound stated"
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
    """Walk the model along ``loc`` to list the fields allowed where an unknown key sits."""
    current: Any = model
    for item in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(item))
            if field is None:
                return []
            current = _inner_model(field.annotation)
        elif isinstance(item, (int, str)):
            continue
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside an annotation such as ``dict[str, Service]`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def problems_from_validation(exc: ValidationError, model: type[BaseModel], file: str, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        path = loc_to_path(loc)
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        msg = err.get("msg", "invalid value")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        else:
            value = err.get("input")
            if not isinstance(value, (dict, list)) and value is not None:
                msg = f"{msg} (got {value!r})"
        problems.append(Problem(file, path, msg, _fix_for(err, model, loc)))
    return problems


def validate_mapping(model: type[M], data: dict[str, Any], file: str, prefix: str = "") -> M:
    """Validate ``data`` as ``model``; raise one :class:`InputError` listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(problems_from_validation(exc, model, file, prefix)) from exc


def load_model(model: type[M], path: str | Path) -> M:
    return validate_mapping(model, read_mapping(path), str(path))
