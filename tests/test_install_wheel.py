"""The planner installed as a tool (issue 18): build the wheel, install it into a fresh virtual
environment outside the repository, and from a temporary folder list the catalog, copy the
examples, check that the wheel holds every file of the package as the repository has it, and solve
one example, getting the same plan as inside the repository.

The new environment gets the already-installed dependencies (pyomo, pandas, ...) by a ``.pth``
file that lists this interpreter's site-packages folders as plain paths: plain lines are only
appended to ``sys.path``, the ``.pth`` files inside those folders are not run, so an editable
install of the repository there cannot leak in. The test checks that ``planner`` is imported from
the new environment. Building needs setuptools from the package index (pip's build isolation).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.name for p in (ROOT / "instances").glob("*.yaml"))


def _run(args: list[str | Path], cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{args}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    return res


def _plan_summary(plan: dict) -> dict:
    """What must agree between two solves of one instance: per architecture the pools, routing and
    cost; the verdict; the versions."""
    archs = {}
    for name, arch in plan["architectures"].items():
        archs[name] = {
            "feasible": arch["feasible"],
            "pools": sorted((p["name"], p["instances"]) for p in arch["pools"]),
            "routing": sorted((r["service"], r["bucket"], r["role"], r["config"], round(r["share"], 9)) for r in arch["routing"]),
            "total": round((arch.get("costs") or {}).get("total_usd_per_month", 0.0), 4),
        }
    verdict = plan["verdict"]
    return {"architectures": archs, "winner": verdict["winner"], "margin": round(verdict["margin_usd_per_month"], 4),
            "planner_version": plan["planner_version"], "catalog_version": plan["catalog_version"]}


@pytest.mark.slow
def test_wheel_installs_and_runs_from_any_folder(tmp_path: Path, solved_example) -> None:
    # a copy of the sources (symlinks kept), so the build leaves nothing in the repository
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "tests", "benchmarks", "out"))
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PLANNER_MODELS_DIR", "PYTHONHOME"}}
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, src], tmp_path, env)
    wheels = list(dist.glob("planner-*.whl"))
    assert len(wheels) == 1

    venv = tmp_path / "venv"
    py = _fresh_venv(venv, env)
    _run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", wheels[0]], tmp_path, env)

    work = tmp_path / "work"
    work.mkdir()
    where = _run([py, "-c", "import planner; print(planner.__file__)"], work, env).stdout.strip()
    assert Path(where).resolve().is_relative_to(venv.resolve()), f"planner imported from {where}, not the new environment"
    # byte-code compiled on install (pip's default), not by a first run: nothing has imported these yet
    tag = _run([py, "-c", "import sys; print(sys.implementation.cache_tag)"], work, env).stdout.strip()
    for module in ("cli/__init__", "plan_cache", "optimize/solve", "schema/plan"):
        folder, _, stem = f"/{module}".rpartition("/")
        pyc = Path(where).parent / folder.lstrip("/") / "__pycache__" / f"{stem}.{tag}.pyc"
        assert pyc.is_file(), f"{pyc} was not compiled on install"
    planner = venv / "bin" / "planner"

    devices = _run([planner, "catalog", "devices", "--json"], work, env).stdout
    assert len(json.loads(devices)["devices"]) >= 20
    models = _run([planner, "catalog", "models", "--json"], work, env).stdout
    assert len(json.loads(models)["models"]) >= 12
    version = _run([planner, "--version"], work, env).stdout
    assert "catalog sha256:" in version

    _run([planner, "examples", "my-plan"], work, env)
    assert sorted(p.name for p in (work / "my-plan").glob("*.yaml")) == EXAMPLES
    # The wheel holds the package as the repository has it: every file under planner/ (the catalog and the examples
    # through their links) byte for byte, so an example solved by the installed package reads what it reads here. The
    # one exception is a code folder's README (a developer's note, e.g. planner/perf/README.md, not read at run time).
    with zipfile.ZipFile(wheels[0]) as wheel:
        shipped = {n: hashlib.sha256(wheel.read(n)).hexdigest() for n in wheel.namelist() if n.startswith("planner/")}
    expected = _package_files(src / "planner")
    missing = sorted(set(expected) - set(shipped))
    assert not missing, f"files of planner/ not in the wheel (pyproject.toml's package-data): {missing}"
    changed = sorted(n for n, digest in expected.items() if shipped[n] != digest)
    assert not changed, f"files stored in the wheel with other contents: {changed}"
    # One example through the installed `planner solve` command, from its own empty cache, against the repository's
    # plan. Every example was solved here until 2026-12-08 (190 s of the suite's ~2,100 worker-seconds, eight solves
    # tests/test_instance_verdicts.py also runs): with the wheel's files equal to the repository's, a second example
    # only re-ran the same code on the same files.
    env_fresh = {**env, "PLANNER_CACHE_DIR": str(tmp_path / "cache")}
    installed = json.loads(_run([planner, "solve", f"my-plan/{SOLVED}", "--json"], work, env_fresh).stdout)
    in_repo = solved_example(Path(SOLVED).stem)  # `planner solve instances/NAME --json` in the repository, once per session
    assert in_repo.exit_code == 0, in_repo.output
    assert _plan_summary(installed) == _plan_summary(in_repo.json())


SOLVED = "enterprise-chat.yaml"
"""The example the installed command solves: the quickest of them (~3 s), both architectures feasible."""


def _package_files(folder: Path) -> dict[str, str]:
    """``{"planner/...": sha256}`` of every file under ``folder`` (links followed), but byte code and the README of a
    folder holding Python code."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):  # planner/models, planner/instances: links
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = Path(dirpath, name)
            if path.suffix == ".pyc" or (name == "README.md" and (path.parent / "__init__.py").is_file()):
                continue
            out["planner/" + path.relative_to(folder).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _fresh_venv(where: Path, env: dict[str, str]) -> Path:
    """A new virtual environment that sees this interpreter's dependencies (module docstring).

    Made ``--without-pip``: ensurepip's copy of pip (and, on Python 3.11, setuptools) took 2.7 s of the
    test's time per environment. ``python -m pip`` in it is this interpreter's pip, found through the
    ``.pth`` file, and installs into the new environment (pip installs into ``sys.prefix`` of the
    interpreter that runs it), as the new environment's own pip would. Where this interpreter's pip is not
    in those folders (a system Python's), the new environment gets its own by ensurepip, as before."""
    _run([sys.executable, "-m", "venv", "--without-pip", where], where.parent, env)
    py = where / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], where.parent, env).stdout.strip())
    deps = [p for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]} if Path(p).is_dir()]
    (site / "zz_planner_test_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")
    if not any((Path(p) / "pip" / "__init__.py").is_file() for p in deps):
        _run([py, "-m", "ensurepip", "--default-pip"], where.parent, env)
    return py


@pytest.mark.slow
def test_editable_install_and_sdist_carry_the_catalog(tmp_path: Path) -> None:
    """The README's `pip install -e .` finds the catalog through the package too, and the sdist
    stores the catalog and the examples as files (not links)."""
    import tarfile

    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "tests", "benchmarks", "out"))
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PLANNER_MODELS_DIR", "PYTHONHOME"}}
    py = _fresh_venv(tmp_path / "venv", env)
    _run([py, "-m", "pip", "install", "--no-deps", "--quiet", "-e", src], tmp_path, env)
    work = tmp_path / "work"
    work.mkdir()
    where = _run([py, "-c", "import planner; print(planner.__file__)"], work, env).stdout.strip()
    assert Path(where).resolve().is_relative_to(src.resolve())
    devices = _run([tmp_path / "venv" / "bin" / "planner", "catalog", "devices", "--json"], work, env).stdout
    assert len(json.loads(devices)["devices"]) >= 20

    dist = tmp_path / "sdist"
    _run([py, "-c", "import setuptools; setuptools.setup()", "sdist", "-d", dist], src, env)
    (archive,) = dist.glob("planner-*.tar.gz")
    with tarfile.open(archive) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
    for rel in ("planner/models/hardware/h100-sxm.yaml", "planner/models/llm/llama-3.1-70b.yaml",
                "planner/models/calibration/h100_dense.yaml", "planner/models/measured/silicon_h100_dense.csv",
                "planner/instances/enterprise-chat.yaml", "planner/instances/traces/azure2023_conv_min00-20.csv"):
        assert rel in members and members[rel].isfile(), rel
