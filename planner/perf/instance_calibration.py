"""Which performance calibration an instance plans with, and the record of it in the plan.

An instance may name its own calibration file (``calibration:`` in the instance, relative to the
instance file; written by ``planner calibrate``); otherwise the calibration shipped in
``models/calibration/`` applies (:data:`planner.perf.calibration.DEFAULT_CALIBRATION`), and
without that file the published defaults (``source: roofline``). The capacity tables carry
:func:`calibration_record` into the plan's notes, so a plan says which calibration produced its
operating points: the path and the sha256 of the file's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.perf.calibration import (
    DEFAULT_CALIBRATION,
    Calibration,
    calibration_dir,
    file_sha256,
    load_calibration,
)


@dataclass(frozen=True)
class CalibrationRef:
    """The calibration an instance uses: the file (``None``: published defaults), how the plan
    names it, and its content hash."""

    path: Path | None
    label: str
    sha256: str

    def note(self) -> str:
        if self.path is None:
            return f"performance calibration: {self.label}"
        return f"performance calibration: {self.label} (sha256 {self.sha256})"

    def record(self) -> dict[str, Any]:
        return {"path": self.label, "sha256": self.sha256}


def calibration_ref(instance_path: Path, calibration: str | None) -> CalibrationRef:
    """The calibration named by an instance's ``calibration`` field (``None``: the shipped one)."""
    if calibration is not None:
        p = Path(calibration)
        target = p if p.is_absolute() else instance_path.parent / p
        return CalibrationRef(target, calibration, file_sha256(target))
    shipped = calibration_dir() / f"{DEFAULT_CALIBRATION}.yaml"
    if shipped.exists():
        return CalibrationRef(shipped, f"models/calibration/{shipped.name} (shipped)", file_sha256(shipped))
    return CalibrationRef(None, "published defaults (no calibration file)", "")


def instance_calibration(resolved: Any) -> tuple[Calibration | None, CalibrationRef]:
    """The loaded calibration of a resolved instance and its :class:`CalibrationRef`."""
    ref = calibration_ref(resolved.path, resolved.instance.calibration)
    return (load_calibration(ref.path) if ref.path is not None else None), ref
