"""A plan whose demand rows carry a malformed ``length_mix`` (a fuzzed plan's ``"true"``: `planner simulate --plan`
failed with an internal TypeError in the simulator's adapter) is refused when read, naming the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm")
    r = CliRunner().invoke(main, ["solve", str(MINIMAL), "--out", str(out), "-q", "--no-cache"])
    assert r.exit_code == 0, r.output
    return out / "plan.json"


@pytest.mark.parametrize("bad", ["true", "[1, 2, 3]", "[[0.5, 1000]]", "[[-1, 1000, 200]]", "[[0, 1000, 200]]",
                                 "[[0.5, 1e999, 200]]", "[[true, 1000, 200]]", "{}", "[", "[]"])
def test_a_malformed_length_mix_is_refused_by_name(solved: Path, tmp_path: Path, bad: str) -> None:
    doc = json.loads(solved.read_text())
    doc["capacity"]["demand"][0]["length_mix"] = bad
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    for args in (["simulate", str(MINIMAL), "--plan", str(plan), "--duration", "5", "--json"], ["check", str(plan)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert "capacity.demand" in r.output and "length_mix" in r.output and "regenerate the plan" in r.output, r.output
        assert "Traceback" not in r.output and "internal error" not in r.output


def test_a_well_formed_length_mix_is_read(solved: Path, tmp_path: Path) -> None:
    doc = json.loads(solved.read_text())
    doc["capacity"]["demand"][0]["length_mix"] = json.dumps([[0.25, 800.0, 150.0], [0.75, 1100.0, 230.0]])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    from planner.report.plan_io import load_plan

    assert load_plan(plan).capacity.demand[0]["length_mix"].startswith("[[0.25")
