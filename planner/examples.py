"""The example instances shipped with the package, and copying them into a user's folder.

The repository keeps one copy, ``instances/`` at its top (the example instances, the logs they
read under ``traces/``, their SOURCE notes and licences); ``planner/instances`` is a symbolic link
to it and the wheel stores the files themselves (``[tool.setuptools.package-data]``), so both are
found through :mod:`importlib.resources`. :func:`copy_examples` writes them into a folder with the
same layout, so each instance's relative ``trace:`` paths keep working there, and points each
instance's editor schema comment at ``instance.schema.json`` written beside it (`planner schema`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from planner.errors import InputError, Problem

SCHEMA_FILE = "instance.schema.json"
_SCHEMA_COMMENT = re.compile(r"^(# yaml-language-server: \$schema=)\S+", re.MULTILINE)


def examples_dir() -> Path:
    """The shipped example folder (``planner/instances``), found through importlib.resources."""
    return Path(str(resources.files("planner").joinpath("instances")))


@dataclass(frozen=True)
class Example:
    file: str
    """File name, e.g. ``enterprise-chat.yaml``."""
    description: str
    """The instance's ``description`` (first sentence), or its name."""
    logs: tuple[str, ...]
    """Files it reads, relative to the example folder (``traces/...``)."""
    devices: tuple[str, ...] = ()
    """The catalog's candidate devices (``catalog.devices``), as the instance lists them."""
    targets: tuple[str, ...] = ()
    """Per service its latency targets, read from the instance (``"chat: TTFT p99 2,000 ms, ITL p99 60 ms"``)."""


_METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


def _targets(services: dict[str, object]) -> tuple[str, ...]:
    """``"<service>: TTFT p99 2,000 ms, ITL p99 60 ms"`` per service, from its raw ``slo`` mapping: what
    `planner examples --list` states beside the description, so the listing cannot misname a metric
    (long-document-nvidia's description said "time per output token" for an ``itl`` target)."""
    out = []
    for name, svc in services.items():
        slo = svc.get("slo") if isinstance(svc, dict) else None
        if not isinstance(slo, dict):
            continue
        parts = []
        for key, label in _METRICS.items():
            t = slo.get(key)
            if not isinstance(t, dict) or "target_ms" not in t:
                continue
            stat = "mean" if t.get("statistic") == "mean" else f"p{100 * float(t.get('quantile', 0.99)):g}"
            parts.append(f"{label} {stat} {float(t['target_ms']):,.0f} ms")
        if parts:
            out.append(f"{name}: {', '.join(parts)}")
    return tuple(out)


def list_examples() -> list[Example]:
    """Every shipped example instance with the logs it reads."""
    folder = examples_dir()
    if not folder.is_dir():
        raise InputError(Problem(str(folder), "", "the shipped example folder does not exist",
                                 "reinstall planner (its wheel ships planner/instances)"))
    out = []
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        text = " ".join(str(data.get("description") or data.get("name") or path.stem).split())
        logs = sorted({str(svc["traffic"][key]) for svc in (data.get("services") or {}).values()
                       if isinstance(svc, dict) and isinstance(svc.get("traffic"), dict)
                       for key in ("trace", "profile") if svc["traffic"].get(key)})
        catalog = data.get("catalog")
        devices = tuple(str(d) for d in ((catalog.get("devices") if isinstance(catalog, dict) else None) or []))
        out.append(Example(path.name, text.split(". ")[0].rstrip("."), tuple(logs), devices,
                           _targets(data.get("services") or {})))
    return out


def _files_to_copy(folder: Path) -> list[Path]:
    """Instances, the example README and everything under ``traces/`` (logs, SOURCE notes, licences)."""
    files = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.md"))
    traces = folder / "traces"
    if traces.is_dir():
        files += sorted(p for p in traces.rglob("*") if p.is_file())
    return files


def copy_examples(dest: str | Path, *, force: bool = False) -> list[Path]:
    """Copy the examples into ``dest`` (created if missing); returns the files written.

    Refuses (input error) to overwrite an existing file unless ``force``.
    """
    import json

    from planner.schema.common import json_schema
    from planner.schema.instance import Instance

    folder = examples_dir()
    examples = list_examples()  # checks the folder exists
    target = Path(dest)
    if target.exists() and not target.is_dir():
        raise InputError(Problem(str(target), "", "exists and is not a folder", "give a new or empty folder"))
    files = _files_to_copy(folder)
    plan = [(src, target / src.relative_to(folder)) for src in files]
    schema_file = target / SCHEMA_FILE
    clashes = [dst for _, dst in plan if dst.exists()] + ([schema_file] if schema_file.exists() else [])
    if clashes and not force:
        # the count covers the schema file written beside the examples, as the clashes do
        raise InputError(Problem(str(clashes[0]), "", f"already exists ({len(clashes)} of the {len(plan) + 1} files to write do)",
                                 "choose a new or empty folder, or pass --force to overwrite"))
    target.mkdir(parents=True, exist_ok=True)
    schema_file.write_text(json.dumps(json_schema(Instance), indent=2) + "\n", encoding="utf-8")
    written = []
    instance_names = {e.file for e in examples}
    for src, dst in plan:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.parent == folder and src.name in instance_names:
            text = _SCHEMA_COMMENT.sub(rf"\g<1>{SCHEMA_FILE}", src.read_text(encoding="utf-8"))
            dst.write_text(text, encoding="utf-8")
        else:
            dst.write_bytes(src.read_bytes())
        written.append(dst)
    return [*written, schema_file]
