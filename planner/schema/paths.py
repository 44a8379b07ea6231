"""Dot-paths into a pydantic model and its data (``services.chat.traffic.rate_multiplier``).

Used by scenarios, ``--set`` overrides and the instance's ``forecasts:`` to say whether a path
names a field and, when it does not, which names are valid there. The walker takes the model
class as an argument, so schema modules can use it on themselves without an import circle.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel


def _shape(ann: Any) -> tuple[str, Any]:
    """Classify an annotation: ("model", M), ("dict", value annotation), ("list", item annotation) or ("leaf", None)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "model", ann
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is dict:
        return "dict", args[1] if len(args) == 2 else Any
    if origin is list:
        return "list", args[0] if args else Any
    if origin is typing.Annotated:
        return _shape(args[0])
    for a in args:  # X | None
        if a is not type(None):
            kind, inner = _shape(a)
            if kind != "leaf":
                return kind, inner
    return "leaf", None


def valid_fields_at(model: type[BaseModel], raw: dict[str, Any], parts: list[str]) -> tuple[bool, str, list[str]]:
    """Walk ``parts`` through the fields of ``model`` (e.g. the instance schema) and the data ``raw``.

    Returns ``(ok, where, valid)``: whether the path names a field, the prefix where it went
    wrong, and the names valid there (schema fields, or the keys of a mapping such as
    ``services``, or list positions).
    """
    kind, current = "model", model
    node: Any = raw
    for k, part in enumerate(parts):
        where = ".".join(parts[:k]) or "(top level)"
        if kind == "model":
            fields = current.model_fields
            if part not in fields:
                return False, where, sorted(fields)
            kind, current = _shape(fields[part].annotation)
        elif kind == "dict":
            if isinstance(node, dict) and part not in node and _shape(current)[0] == "model":
                return False, where, sorted(map(str, node))
            kind, current = _shape(current)
        elif kind == "list":
            if not part.isdigit() or (isinstance(node, list) and int(part) >= len(node)):
                return False, where, [str(i) for i in range(len(node))] if isinstance(node, list) else []
            kind, current = _shape(current)
            node = node[int(part)] if isinstance(node, list) else None
            continue
        else:
            return True, "", []  # inside a free-form value (e.g. a device override): validated with the value
        node = node.get(part) if isinstance(node, dict) else None
    return True, "", []
