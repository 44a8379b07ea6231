"""The planner installed as a tool (issue 18): build the wheel, install it into a fresh virtual
environment outside the repository, and from a temporary folder list the catalog, copy the
examples and solve each one, getting the same plan as inside the repository.

The new environment gets the already-installed dependencies (pyomo, pandas, ...) by a ``.pth``
file that lists this interpreter's site-packages folders as plain paths: plain lines are only
appended to ``sys.path``, the ``.pth`` files inside those folders are not run, so an editable
install of the repository there cannot leak in. The test checks that ``planner`` is imported from
the new environment. Building needs setuptools from the package index (pip's build isolation).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
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
    # The first example through the installed `planner solve` command; the others by the installed package's
    # `planner.cli.main` in one process of the new environment, as solved_example runs it in the repository (each
    # `planner solve` process spends ~1.2 s importing pandas, pyomo and scipy before solving; the test took 46.6 s with
    # eight processes, 42.3 s so, on an idle 2-core VM, 2026-12-06).
    first, rest = EXAMPLES[0], EXAMPLES[1:]
    installed = {first: json.loads(_run([planner, "solve", f"my-plan/{first}", "--json"], work, env).stdout)}
    solves = work / "solves.json"
    _run([py, "-c", _SOLVE_EACH, solves, *(f"my-plan/{name}" for name in rest)], work, env)
    for name, (code, stdout, output) in zip(rest, json.loads(solves.read_text(encoding="utf-8")), strict=True):
        assert code == 0, f"{name}: exit {code}\n{output[-2000:]}"
        installed[name] = json.loads(stdout)
    for name in EXAMPLES:
        in_repo = solved_example(Path(name).stem)  # `planner solve instances/NAME --json` in the repository, once per session
        assert in_repo.exit_code == 0, in_repo.output
        assert _plan_summary(installed[name]) == _plan_summary(in_repo.json()), name


_SOLVE_EACH = """
import json, sys
from pathlib import Path
from click.testing import CliRunner
import planner
from planner.cli import main
assert Path(planner.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), planner.__file__
out = []
for inst in sys.argv[2:]:
    r = CliRunner().invoke(main, ["solve", inst, "--json"])
    out.append([r.exit_code, r.stdout, r.output])
Path(sys.argv[1]).write_text(json.dumps(out), encoding="utf-8")
"""
"""``python -c _SOLVE_EACH OUT INSTANCE...``: ``planner solve INSTANCE --json`` of each instance in this process
(click's runner, as :func:`conftest.solved_example`); [exit code, stdout, stdout and stderr] of each into OUT."""


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
