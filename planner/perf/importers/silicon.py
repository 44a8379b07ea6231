"""aiconfigurator ``silicon_*.csv`` (NVIDIA ai-dynamo/aiconfigurator ``systems/silicon_sample.csv``
format; the shipped ``models/measured/silicon_h100_dense.csv`` is one): a thin wrapper over
:func:`planner.perf.measurements.convert_silicon`, which documents the column mapping. Every row
is a closed-loop run (``batch_size`` users)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.perf.importers.common import RunContext, apply_given
from planner.perf.measurements import convert_silicon


def read(path: Path, ctx: RunContext) -> list[dict[str, Any]]:
    """The file's rows; a command-line option only fills what a row does not say, and one that
    contradicts a row is an error (:func:`planner.perf.importers.common.apply_given`)."""
    return apply_given(convert_silicon(path, ctx.hf_ids, device_ids=ctx.device_ids), ctx, path, resolve_names=False)
