"""Printing helpers shared by commands: JSON, aligned tables."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import click


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def to_json(data: Any) -> str:
    return json.dumps(_clean(data), indent=2, sort_keys=False, default=str)


def echo_json(data: Any) -> None:
    click.echo(to_json(data))


def fmt(value: Any, digits: int = 3) -> str:
    """Round for reading: significant digits for floats, thousands separators for big numbers."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align_right: bool = True) -> str:
    """An aligned plain-text table; numbers right-aligned."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) if rows else False for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        out = []
        for i, v in enumerate(values):
            out.append(v.rjust(widths[i]) if (numeric[i] and align_right) else v.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), sep] + [line(r) for r in cells])
