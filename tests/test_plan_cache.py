"""The solved-plan cache (planner.plan_cache): a repeated ``planner solve`` of identical inputs
reads the plan back, says so, and gives the plan a fresh solve gives (bar the recorded times);
any changed option, file or override misses; a plan a time limit shaped is never stored."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.instance import load_instance
from planner.optimize.settings import settings_from_instance
from planner.plan_cache import PLAN_FORMAT, plan_key

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
TIMES = ("time_s", "build_s", "extract_s", "wall_s")
"""What a re-run changes: the solver's and the simulation's measured times."""


def _without_times(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _without_times(v) for k, v in data.items() if k not in TIMES}
    if isinstance(data, list):
        return [_without_times(v) for v in data]
    return data


def _formats(store: Path) -> list[str]:
    out = []
    for entry in store.glob("*.pkl"):
        with entry.open("rb") as fh:
            out.append(pickle.load(fh)[0])
    return sorted(out)


def _solve(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["solve", str(MINIMAL), "--json", *args])
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def test_a_repeated_solve_reads_the_plan_back_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "cache"
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(store))
    first = _solve()
    assert not any(n.startswith("cache:") for n in first["notes"])
    assert _formats(store) == sorted(["capacity-tables-1", "prepared-1", PLAN_FORMAT])
    again = _solve()
    *notes, said = again["notes"]
    assert said.startswith("cache: this plan was solved at ") and "--no-cache" in said
    assert _without_times({**again, "notes": notes}) == _without_times(first)
    fresh = _solve("--no-cache")  # solved from scratch: the very plan the cache gave
    assert not any(n.startswith("cache:") for n in fresh["notes"])
    assert _without_times(fresh) == _without_times(first)
    other = _solve("--mip-gap", "0.001")  # another option: another key, solved and stored
    assert not any(n.startswith("cache:") for n in other["notes"])
    assert _formats(store).count(PLAN_FORMAT) == 2


def test_the_key_covers_options_files_scenario_and_overrides(tmp_path: Path) -> None:
    resolved = load_instance(MINIMAL)
    s = settings_from_instance(resolved.instance)
    base = plan_key(resolved, s)
    assert plan_key(load_instance(MINIMAL), settings_from_instance(load_instance(MINIMAL).instance)) == base  # deterministic
    measured = tmp_path / "measured.csv"
    measured.write_text("service,bucket,device,tp,capacity_per_s\nchat,b0,l40s,1,3.0\n", encoding="utf-8")
    variants = [
        plan_key(resolved, replace(s, mip_gap=1e-3)),
        plan_key(resolved, replace(s, time_limit_s=5.0)),
        plan_key(resolved, replace(s, architectures=("shared",))),
        plan_key(resolved, replace(s, confidence="exact")),
        plan_key(resolved, s, resolution="auto"),
        plan_key(resolved, s, scenario="growth"),
        plan_key(resolved, s, overrides={"options.on_bad_row": "skip"}),
        plan_key(resolved, s, capacity_file=str(measured)),
        plan_key(resolved, s, capacity_file=str(measured), capacity_only=True),
        plan_key(load_instance(MINIMAL, {"services.chat.traffic.rate_per_s": 6.0}), s),
    ]
    assert len({base, *variants}) == len(variants) + 1
    before = plan_key(resolved, s, capacity_file=str(measured))
    measured.write_text(measured.read_text(encoding="utf-8").replace("3.0", "4.0"), encoding="utf-8")
    assert plan_key(resolved, s, capacity_file=str(measured)) != before  # the file's bytes, not its name


def test_the_solver_counts_its_time_limit_stops() -> None:
    from planner.optimize.highs import import_pyomo, make_solver, time_limit_stops

    pe = import_pyomo()
    m = pe.ConcreteModel()
    m.I = pe.RangeSet(1, 30)
    m.x = pe.Var(m.I, domain=pe.Binary)
    m.c = pe.Constraint(expr=sum(((i * 37) % 23 + 5) * m.x[i] for i in m.I) <= 100)
    m.o = pe.Objective(expr=sum(((i * 53) % 29 + 3) * m.x[i] for i in m.I), sense=pe.maximize)
    before = time_limit_stops()
    res = make_solver().solve(m, time_limit=1e-9, load_solutions=False, raise_exception_on_nonoptimal_result=False)
    assert res.termination_condition.name == "maxTimeLimit"
    assert time_limit_stops() == before + 1
    res = make_solver().solve(m, time_limit=60, load_solutions=False, raise_exception_on_nonoptimal_result=False)
    assert res.termination_condition.name == "convergenceCriteriaSatisfied"
    assert time_limit_stops() == before + 1


def test_a_plan_a_time_limit_shaped_is_not_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "cache"
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(store))
    runner = CliRunner()
    for _ in range(2):  # the second run solves again: nothing was stored to read back
        r = runner.invoke(main, ["solve", str(MINIMAL), "--time-limit", "1e-9"])
        assert r.exit_code == 4, r.output
        assert "cache:" not in r.output
    assert PLAN_FORMAT not in _formats(store)


def test_a_plan_read_back_loads_no_solver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second ``planner solve`` of the same inputs (a fresh process) reads the plan and re-checks
    it: pyomo, HiGHS and scipy are never imported (what keeps a warm run under a second)."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "cache"))
    _solve()  # solved here and stored
    code = ("import sys\nfrom planner.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & {'pyomo', 'highspy', 'scipy', 'matplotlib'}))\n")
    r = subprocess.run([sys.executable, "-c", code, "solve", str(MINIMAL), "--json"], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ), check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    doc, heavy = r.stdout.rsplit("HEAVY", 1)
    assert json.loads(doc)["notes"][-1].startswith("cache:")  # read back, not solved
    assert heavy.strip() == "[]", heavy
