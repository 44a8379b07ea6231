"""The catalog: device profiles (``hardware/``) and LLM profiles (``llm/``), with calibration
(``calibration/``) and the measured data it cites (``measured/``).

Where profiles come from, in order (a later folder adds profiles and overrides a shipped id):

1. the shipped catalog, found through :mod:`importlib.resources` as the ``models`` folder of the
   installed ``planner`` package. The repository keeps one copy, ``models/`` at its top;
   ``planner/models`` is a symbolic link to it, so a source checkout, an editable install and
   a wheel (which stores the files themselves, see ``[tool.setuptools.package-data]``) all find it
   the same way;
2. each folder in ``$PLANNER_MODELS_DIR`` (several separated by ``os.pathsep``);
3. an instance's ``catalog.path`` (relative to the instance file).

A profile whose id is already defined by an earlier folder replaces it, with a note naming both
files. A folder that does not exist, or a catalog with no device or no model, is an input error
naming the folders searched and the fix. :func:`load_catalog` with an explicit ``root`` loads that
folder alone (tests and fixtures).

The catalog's version (:attr:`Catalog.version`) is a SHA-256 over the relative paths and contents
of every profile, calibration and measured file used, so the same catalog gives the same version
in a checkout and in an installed wheel; ``planner --version`` prints it and a plan records it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem, ProblemCollector
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile
from planner.validation import problems_from_validation, read_mapping

ENV_VAR = "PLANNER_MODELS_DIR"
SUBDIRS = ("hardware", "llm", "calibration", "measured", "encoders")
"""Folders of a catalog; ``hardware`` and ``llm`` hold profiles, ``calibration`` and ``measured`` calibration
data, ``encoders`` the vision-tower configs of multimodal models (:mod:`planner.perf.encoder`); all are in
the catalog version (and so in the capacity cache key)."""

_FIX_SHIPPED = ("reinstall planner (its wheel ships planner/models), or point PLANNER_MODELS_DIR at a folder "
                "with hardware/ and llm/ profiles")


def shipped_models_dir() -> Path:
    """The catalog shipped with the package (``planner/models``), found through importlib.resources."""
    return Path(str(resources.files("planner").joinpath("models")))


def user_models_dirs() -> list[Path]:
    """The folders named by ``$PLANNER_MODELS_DIR`` (empty when unset)."""
    env = os.environ.get(ENV_VAR, "")
    return [Path(part) for part in env.split(os.pathsep) if part.strip()]


def models_dirs(extra: tuple[Path, ...] = ()) -> list[Path]:
    """Every catalog folder in load order: shipped, ``$PLANNER_MODELS_DIR``, then ``extra``."""
    return [shipped_models_dir(), *user_models_dirs(), *extra]


def models_dir() -> Path:
    """The folder new catalog files are written to (and looked up first): the last user folder
    (``$PLANNER_MODELS_DIR``), else the shipped catalog."""
    return models_dirs()[-1]


def catalog_file(relative: str) -> Path | None:
    """``relative`` (e.g. ``calibration/h100_dense.yaml``) in the last catalog folder that has it."""
    for folder in reversed(models_dirs()):
        path = folder / relative
        if path.is_file():
            return path
    return None


@dataclass(frozen=True)
class Catalog:
    devices: dict[str, DeviceProfile]
    models: dict[str, LLMProfile]
    device_files: dict[str, Path]
    model_files: dict[str, Path]
    folders: tuple[Path, ...] = ()
    """The catalog folders loaded, in order (later ones override earlier ids)."""
    notes: tuple[str, ...] = ()
    """One line per profile that shadows an id defined by an earlier folder."""
    version: str = ""
    """``sha256:<12 hex>`` over the catalog files used (module docstring)."""

    def _searched(self) -> str:
        return ", ".join(str(f) for f in self.folders) or "no folder"

    def choices(self, kind: str) -> str:
        """The fix of an "unknown id" error: the ids to choose from, never an empty list."""
        ids = sorted(self.devices if kind == "device" else self.models)
        if ids:
            return f"use one of: {', '.join(ids)}"
        sub = "hardware" if kind == "device" else "llm"
        return (f"the catalog has no {kind} profiles (searched {sub}/ in {self._searched()}); add <id>.yaml files "
                f"there or {_FIX_SHIPPED}")

    def device(self, device_id: str) -> DeviceProfile:
        try:
            return self.devices[device_id]
        except KeyError:
            raise InputError(Problem("", "device", f"unknown device {device_id!r}", self.choices("device"))) from None

    def model(self, model_id: str) -> LLMProfile:
        try:
            return self.models[model_id]
        except KeyError:
            raise InputError(Problem("", "model", f"unknown model {model_id!r}", self.choices("model"))) from None

    def with_models(self, extra: dict[str, LLMProfile]) -> Catalog:
        """This catalog with ``extra`` profiles (derived from ``config.json`` files) added; ids the
        catalog already has are kept as they are."""
        if not extra:
            return self
        from dataclasses import replace

        return replace(self, models={**extra, **self.models})

    def shipped_configs(self) -> dict[str, Path]:
        """Hugging Face id (lower case) -> ``config.json`` in a catalog folder's ``llm/configs/``
        (files named ``<org>--<name>_config.json``, later folders win)."""
        found: dict[str, Path] = {}
        for folder in self.folders:
            for path in sorted((folder / "llm" / "configs").glob("*_config.json")):
                found[path.name.removesuffix("_config.json").replace("--", "/").lower()] = path
        return found

    def resolve_model(self, ref: str, base_dir: Path | None = None) -> LLMProfile:
        """The profile ``ref`` names (issue 25, item 3), tried in this order:

        1. a catalog id (``llama-3.1-8b``);
        2. a path to a ``config.json`` (ends in ``.json``, relative to ``base_dir`` or absolute):
           the profile derived from it (:mod:`planner.hf_config`);
        3. a checkpoint name the name resolver maps to a catalog id
           (``meta-llama/Llama-3.1-8B-Instruct``; :func:`planner.perf.names.model_ref`);
        4. a Hugging Face id with a config shipped in ``llm/configs/``: the profile derived from it.

        Unknown, ambiguous or unmodellable: one :class:`InputError` naming the reason."""
        from planner.hf_config import profile_from_file
        from planner.perf.names import model_ref, normalise_model

        ref = ref.strip()
        if ref in self.models:
            return self.models[ref]
        if ref.lower().endswith(".json"):
            path = Path(ref).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            # the id: the file's name (<org>--<name>_config.json), or its folder's for a plain config.json
            name = path.parent.name if path.stem == "config" else path.stem.removesuffix("_config").replace("--", "/")
            return profile_from_file(path, model_id=normalise_model(name or path.stem)[0] or path.stem.lower())
        hit = model_ref(ref, {m.hf_id: m.id for m in self.models.values()}).model_id
        if hit is not None:
            return self.models[hit]
        configs = self.shipped_configs()
        key = ref.lower()
        if key not in configs:
            base = normalise_model(ref)[0]
            matches = sorted(hf for hf in configs if normalise_model(hf)[0] == base)
            key = matches[0] if len(matches) == 1 else key
        if key in configs:
            name = configs[key].name.removesuffix("_config.json").replace("--", "/")
            return profile_from_file(configs[key], hf_id=name, model_id=normalise_model(name)[0])
        raise InputError(Problem("", "model", f"unknown model {ref!r}",
                                 f"{self.choices('model')}; or a Hugging Face id the catalog maps, or a path to the model's config.json"))


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


def _folder_problem(folder: Path, what: str, fix: str) -> Problem | None:
    """Why ``folder`` cannot be a catalog folder, or None."""
    if not folder.exists():
        return Problem(str(folder), "", f"{what} does not exist", fix)
    if not folder.is_dir():
        return Problem(str(folder), "", f"{what} is not a directory", fix)
    if not any((folder / sub).is_dir() for sub in SUBDIRS):
        return Problem(str(folder), "", f"{what} has none of the catalog folders {', '.join(s + '/' for s in SUBDIRS)}",
                       f"{fix} (profiles go in <folder>/hardware/<id>.yaml and <folder>/llm/<id>.yaml)")
    return None


def catalog_version(folders: tuple[Path, ...] | list[Path]) -> str:
    """``sha256:<12 hex>`` over the relative path and bytes of every catalog file in ``folders``."""
    digest = hashlib.sha256()
    for folder in folders:
        for sub in SUBDIRS:
            base = folder / sub
            if not base.is_dir():
                continue
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                digest.update(f"{sub}/{path.relative_to(base).as_posix()}\0".encode())
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return f"sha256:{digest.hexdigest()[:12]}"


@lru_cache(maxsize=8)
def _load_catalog_cached(roots: tuple[str, ...], labels: tuple[str, ...]) -> Catalog:
    collector = ProblemCollector()
    folders = tuple(Path(r) for r in roots)
    for folder, label in zip(folders, labels, strict=True):
        fix = _FIX_SHIPPED if label == "the shipped catalog" else f"create it or correct {label}"
        problem = _folder_problem(folder, f"catalog folder ({label})", fix)
        if problem:
            collector.extend([problem])
    collector.raise_if_any()
    devices: dict[str, DeviceProfile] = {}
    models: dict[str, LLMProfile] = {}
    device_files: dict[str, Path] = {}
    model_files: dict[str, Path] = {}
    notes: list[str] = []
    for folder in folders:
        for sub, kind, schema, items, files in (("hardware", "device", DeviceProfile, devices, device_files),
                                                 ("llm", "model", LLMProfile, models, model_files)):
            found, found_files = _load_dir(folder / sub, schema, collector)
            for item_id, obj in found.items():
                if item_id in items:
                    notes.append(f"catalog: {kind} {item_id!r} from {found_files[item_id]} replaces the one in {files[item_id]}")
                items[item_id] = obj
                files[item_id] = found_files[item_id]
    collector.raise_if_any()
    searched = ", ".join(str(f) for f in folders)
    empty = [kind for kind, items in (("device (hardware/)", devices), ("model (llm/)", models)) if not items]
    if empty:
        raise InputError(Problem(searched, "", f"the catalog has no {' and no '.join(empty)} profiles",
                                 f"add <id>.yaml profiles to those folders, or {_FIX_SHIPPED}"))
    return Catalog(devices, models, device_files, model_files, folders=folders, notes=tuple(notes),
                   version=catalog_version(folders))


def load_catalog(root: str | Path | None = None, *, extra: tuple[str | Path, ...] = ()) -> Catalog:
    """Load and validate every profile; all problems are reported at once.

    ``root`` given: that folder alone. Otherwise the shipped catalog, ``$PLANNER_MODELS_DIR`` and
    ``extra`` (an instance's ``catalog.path``), in that order (module docstring).
    """
    if root is not None:
        return _load_catalog_cached((str(root),), ("the folder given",))
    users = user_models_dirs()
    roots = [shipped_models_dir(), *users, *(Path(e) for e in extra)]
    labels = ["the shipped catalog", *[ENV_VAR] * len(users), *["catalog.path"] * len(extra)]
    return _load_catalog_cached(tuple(str(r) for r in roots), tuple(labels))


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


def _git_commit(folder: Path) -> str | None:
    """The short commit of the git checkout holding ``folder`` (resolved), if it is in one."""
    import subprocess

    real = folder.resolve()
    if not any((parent / ".git").exists() for parent in (real, *real.parents)):
        return None
    try:
        out = subprocess.run(["git", "-C", str(real), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def version_lines() -> list[str]:
    """What ``planner --version`` prints after the package version: the catalog's version, its
    size and folders, and the git commit when the shipped catalog sits in a checkout."""
    try:
        cat = load_catalog()
    except InputError as exc:
        return [f"catalog: not loadable: {exc.render()}"]
    commit = _git_commit(cat.folders[0])
    lines = [f"catalog {cat.version} ({len(cat.devices)} devices, {len(cat.models)} models)"
             + (f", git commit {commit}" if commit else "")]
    lines += [f"  from {folder}" for folder in cat.folders]
    return lines
