"""The catalog: device profiles (``models/hardware``) and LLM profiles (``models/llm``).

The models directory is ``$PLANNER_MODELS_DIR`` if set, else ``models/`` at the project root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem, ProblemCollector
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile
from planner.validation import problems_from_validation, read_mapping

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def models_dir() -> Path:
    env = os.environ.get("PLANNER_MODELS_DIR")
    return Path(env) if env else PROJECT_ROOT / "models"


@dataclass(frozen=True)
class Catalog:
    devices: dict[str, DeviceProfile]
    models: dict[str, LLMProfile]
    device_files: dict[str, Path]
    model_files: dict[str, Path]

    def device(self, device_id: str) -> DeviceProfile:
        try:
            return self.devices[device_id]
        except KeyError:
            raise InputError(Problem("", "device", f"unknown device {device_id!r}", f"use one of: {', '.join(sorted(self.devices))}")) from None

    def model(self, model_id: str) -> LLMProfile:
        try:
            return self.models[model_id]
        except KeyError:
            raise InputError(Problem("", "model", f"unknown model {model_id!r}", f"use one of: {', '.join(sorted(self.models))}")) from None


def _load_dir(folder: Path, model: type[Any], collector: ProblemCollector) -> tuple[dict[str, Any], dict[str, Path]]:
    from pydantic import ValidationError

    items: dict[str, Any] = {}
    files: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            data = read_mapping(path)
            obj = model.model_validate(data)
        except InputError as exc:
            collector.extend(exc.problems)
            continue
        except ValidationError as exc:
            collector.extend(problems_from_validation(exc, model, str(path)))
            continue
        if obj.id in items:
            collector.add("id", f"duplicate id {obj.id!r} (also in {files[obj.id]})", "give each profile a unique id", file=str(path))
            continue
        if obj.id != path.stem:
            collector.add("id", f"id {obj.id!r} differs from the file name {path.stem!r}", "name the file <id>.yaml", file=str(path))
        items[obj.id] = obj
        files[obj.id] = path
    return items, files


@lru_cache(maxsize=4)
def _load_catalog_cached(root: str) -> Catalog:
    base = Path(root)
    collector = ProblemCollector()
    devices, device_files = _load_dir(base / "hardware", DeviceProfile, collector)
    models, model_files = _load_dir(base / "llm", LLMProfile, collector)
    collector.raise_if_any()
    return Catalog(devices, models, device_files, model_files)


def load_catalog(root: str | Path | None = None) -> Catalog:
    """Load and validate every profile; all problems are reported at once."""
    return _load_catalog_cached(str(root or models_dir()))


def apply_device_overrides(device: DeviceProfile, overrides: dict[str, Any], file: str, path: str) -> DeviceProfile:
    """A copy of ``device`` with instance-supplied fields; each overridden figure is sourced to the instance.

    Provenance is merged per figure, never replaced wholesale: ``sources`` and ``assumptions``
    given in the override are added to the profile's own (each entry prefixed with
    ``instance override (<file>)``). An overridden figure drops the profile's entries for it
    (they described the old value) and gets the override's entry, or ``instance override
    (<file>)`` when the override names none.
    """
    from pydantic import ValidationError

    data = device.model_dump(exclude_unset=True)
    sources = dict(data.get("sources", {}))
    assumptions = dict(data.get("assumptions", {}))
    given_sources = dict(overrides.get("sources") or {})
    given_assumptions = dict(overrides.get("assumptions") or {})
    tag = f"instance override ({file})"
    for key, value in overrides.items():
        if key in {"sources", "assumptions"}:
            continue
        data[key] = value
        if key == "notes":
            continue
        sources.pop(key, None)
        assumptions.pop(key, None)
        if key not in given_sources and key not in given_assumptions:
            sources[key] = tag
    sources.update({k: f"{tag}: {v}" for k, v in given_sources.items()})
    assumptions.update({k: f"{tag}: {v}" for k, v in given_assumptions.items()})
    data["sources"] = sources
    if assumptions:
        data["assumptions"] = assumptions
    try:
        return DeviceProfile.model_validate(data)
    except ValidationError as exc:
        raise InputError(problems_from_validation(exc, DeviceProfile, file, prefix=path)) from exc
