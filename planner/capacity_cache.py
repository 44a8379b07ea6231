"""A persistent on-disk cache of the pre-solve pipeline: capacity tables and prepared tables.

:func:`planner.capacity.build_capacity_tables` evaluates the performance model for every
(service, bucket, role, device, tp) of an instance (the workload profile of its logs included);
on the example instances that is 0.3–1.8 s of a ``planner solve``, and it gives the same tables
every time for the same inputs. :func:`cached_capacity_tables` keeps them in
``$PLANNER_CACHE_DIR`` (default ``$XDG_CACHE_HOME/planner``, else ``~/.cache/planner``), one
pickle per key. :func:`cached_prepared` keeps the optimiser's last step before the model build
(:func:`planner.optimize.prepare.prepare`: utilisation caps, pool bounds; 0.2–0.4 s) under the
same key and ``max_utilization``, so a warm ``planner solve`` goes straight to the model build and
the solver. :mod:`planner.plan_cache` stores solved plans in the same folder
(:func:`load_entry`, :func:`store_entry`).

Never wrong: the key is a SHA-256 over everything the tables are computed from —

- the validated instance mapping after scenario and ``--set`` overrides (``ResolvedInstance.raw``)
  and the instance's folder (relative paths resolve against it);
- the bytes of every file the instance names (traces, workload profiles, calibration, a catalog
  folder's files): each string of the mapping that names an existing file or folder next to the
  instance is hashed with its content;
- the catalog: its version (SHA-256 over every profile, calibration and measured file of every
  catalog folder used), the folders, and the resolved device and model profiles (instance
  overrides applied);
- the performance calibration the instance uses (its file's SHA-256);
- the planner: its version and a SHA-256 of the source of every module of the package (a code
  change misses the cache, installed or editable), the Python, numpy and pandas versions, and
  every ``PLANNER_*`` environment variable but ``PLANNER_CACHE_DIR``.

A missing, unreadable or corrupt entry is rebuilt and rewritten (atomically: a temporary file
then a rename, so concurrent runs never read half a file). ``planner solve --no-cache`` bypasses
it; deleting the folder clears it. At most :data:`MAX_ENTRIES` entries are kept (the least
recently used go first). The entries are pickles the planner wrote itself into the
user's own cache folder: do not point ``PLANNER_CACHE_DIR`` at a folder others can write to.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

CACHE_FORMAT = "capacity-tables-1"
"""Raised when the pickled layout changes (older entries are then ignored)."""

PREPARED_FORMAT = "prepared-1"
"""Layout of a prepared-tables entry (:func:`cached_prepared`)."""

NO_FOLDER = "miss (not stored: no cache folder: set PLANNER_CACHE_DIR)"

ENV_CACHE_DIR = "PLANNER_CACHE_DIR"

MAX_ENTRIES = 256
"""Entries kept; past that the least recently used are deleted when a new one is stored."""


def cache_dir() -> Path | None:
    """``$PLANNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/planner``, else ``~/.cache/planner``; None
    when none is set and there is no home directory (then nothing is cached)."""
    env = os.environ.get(ENV_CACHE_DIR, "").strip()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    try:
        if env:
            return Path(env).expanduser()
        return (Path(xdg) if xdg else Path.home() / ".cache") / "planner"
    except RuntimeError:  # "~" cannot be expanded: no home directory
        return None


@lru_cache(maxsize=1)
def source_sha256() -> str:
    """SHA-256 over the relative path and bytes of every ``.py`` file of the installed package."""
    import planner

    root = Path(planner.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _hash_path(digest: Any, path: Path) -> None:
    """A file's bytes, or every file below a folder (sorted, with relative names)."""
    if path.is_file():
        digest.update(path.read_bytes())
        return
    for sub in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(sub.relative_to(path).as_posix().encode() + b"\0")
        digest.update(sub.read_bytes())


def _referenced_files(value: Any, base: Path, out: dict[str, str]) -> None:
    """Every string in ``value`` that names an existing file or folder (relative to ``base`` or
    absolute), with the SHA-256 of its content."""
    if isinstance(value, dict):
        for v in value.values():
            _referenced_files(v, base, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _referenced_files(v, base, out)
    elif isinstance(value, str) and value and len(value) < 4096 and "\0" not in value:
        try:
            p = Path(value).expanduser()
            target = p if p.is_absolute() else base / p
            if not (target.is_file() or target.is_dir()) or str(target.resolve()) in out:
                return
            if target.is_dir() and (target.resolve() == base.resolve() or len(target.resolve().parts) <= 2):
                return  # ".", "/", "/home" and the like are names, not data folders
            digest = hashlib.sha256()
            _hash_path(digest, target)
            out[str(target.resolve())] = digest.hexdigest()
        except (OSError, ValueError, RuntimeError):  # RuntimeError: "~word" naming no user (a description's "~5 req/s")
            return


def cache_key(resolved: Any) -> str:
    """The SHA-256 key of an instance's capacity tables (module docstring lists what it covers)."""
    import numpy
    import pandas

    from planner import __version__
    from planner.perf.instance_calibration import calibration_ref

    files: dict[str, str] = {}
    _referenced_files(resolved.raw, resolved.base_dir, files)
    catalog = resolved.catalog
    cal = calibration_ref(resolved.path, resolved.instance.calibration)
    parts = {
        "format": CACHE_FORMAT,
        "planner": __version__,
        "source": source_sha256(),
        "python": sys.version,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("PLANNER_") and k != ENV_CACHE_DIR},
        "instance": resolved.raw,
        "instance_dir": str(resolved.base_dir.resolve()),
        "files": files,
        "catalog_version": getattr(catalog, "version", ""),
        "catalog_folders": [str(f) for f in getattr(catalog, "folders", ())],
        "devices": {k: v.model_dump(mode="json") for k, v in sorted(resolved.devices.items())},
        "models": {k: v.model_dump(mode="json") for k, v in sorted(resolved.models.items())},
        "calibration": cal.record(),
    }
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def load_entry(folder: Path, key: str, format_: str) -> Any | None:
    """The value stored under ``key`` with layout ``format_``, or None (absent, unreadable, corrupt,
    another layout: never trusted). A hit marks the entry recently used."""
    path = folder / f"{key}.pkl"
    try:
        with path.open("rb") as fh:
            stored_format, stored_key, value = pickle.load(fh)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a corrupt or foreign entry is rebuilt, never trusted
        return None
    if stored_format != format_ or stored_key != key:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: pruned last
    return value


def store_entry(folder: Path, key: str, format_: str, value: Any) -> str:
    """Write ``value`` under ``key`` (atomically: a temporary file, then a rename, so concurrent
    runs never read half a file) and prune; ``"miss"``, or ``"miss (not stored: …)"``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump((format_, key, value), fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, folder / f"{key}.pkl")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        return f"miss (not stored: {exc})"
    _prune(folder)
    return "miss"


def cached_capacity_tables(resolved: Any, *, directory: Path | None = None) -> tuple[Any, str]:
    """:func:`planner.capacity.build_capacity_tables` of ``resolved`` through the cache, and
    ``"hit"``, ``"miss"`` (built and stored) or ``"miss (not stored: …)"``."""
    from planner.capacity import build_capacity_tables

    folder = directory or cache_dir()
    if folder is None:
        return build_capacity_tables(resolved), NO_FOLDER
    key = cache_key(resolved)
    tables = load_entry(folder, key, CACHE_FORMAT)
    if tables is not None:
        return tables, "hit"
    tables = build_capacity_tables(resolved)
    return tables, store_entry(folder, key, CACHE_FORMAT, tables)


def prepared_key(resolved: Any, max_utilization: float | None) -> str:
    """The key of the optimiser's prepared tables (:func:`planner.optimize.prepare.prepare`) of
    ``resolved``'s capacity tables: :func:`cache_key` (the tables are a function of it, and it
    covers the planner's code) and ``max_utilization``, prepare's only other input."""
    blob = json.dumps([PREPARED_FORMAT, cache_key(resolved), max_utilization]).encode()
    return hashlib.sha256(blob).hexdigest()


def cached_prepared(resolved: Any, tables: Any, max_utilization: float | None, *,
                    directory: Path | None = None) -> tuple[Any, str]:
    """``prepare(tables, max_utilization=...)`` (the feasible points indexed, the utilisation caps
    and pool bounds: the last step before the model is built) through the cache; ``tables`` must
    be ``resolved``'s capacity tables as :func:`cached_capacity_tables` gives them (not changed by
    a measured-capacity file: that caller prepares its own). Returns it and the cache status."""
    from planner.optimize.prepare import prepare

    folder = directory or cache_dir()
    if folder is None:
        return prepare(tables, max_utilization=max_utilization), NO_FOLDER
    key = prepared_key(resolved, max_utilization)
    prep = load_entry(folder, key, PREPARED_FORMAT)
    if prep is not None:
        return prep, "hit"
    prep = prepare(tables, max_utilization=max_utilization)
    return prep, store_entry(folder, key, PREPARED_FORMAT, prep)


def _prune(folder: Path, keep: int = MAX_ENTRIES) -> None:
    """Delete the least recently used entries beyond ``keep``."""
    try:
        entries = sorted(folder.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[keep:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
