"""Fuzzing instances and plans as a hostile user would (issue 16).

Three targets, each a hypothesis property with a small CI budget and a long-run budget:

- **instances → ``planner check-instance``**: 1–3 mutations of an example instance (a leaf set to a
  hostile value — 0, negative, 1e300, inf, nan, text, a list with duplicates, a wrong type —, a key
  removed, an unknown key added, a list entry repeated); the outcome must be exit 0 or 2, never an
  internal error or a traceback;
- **instances → ``planner solve``**: numeric leaves of the small rate-given instance
  (``tests/data/instances/valid_minimal.yaml``) scaled by hostile factors; exit 0, 2, 3 or 4; an exit 0
  plan must pass ``planner check`` against the instance;
- **plans → ``check_plan``**: 1–3 numbers of a solved plan set to hostile values; the result is a
  schema rejection (what ``planner check`` reports as exit 2) or a list of violations, never an
  exception; a large change of a number ``check`` recomputes must be caught.

CI runs ~100 inputs in well under 60 s. The long run is ``PLANNER_FUZZ=1 pytest -m fuzz tests/test_fuzz.py -s``
(marker ``fuzz``; skipped unless ``PLANNER_FUZZ`` is set, so a plain ``pytest`` never starts it):
``PLANNER_FUZZ_INSTANCES`` (default 6000), ``PLANNER_FUZZ_SOLVES`` (300) and ``PLANNER_FUZZ_PLANS``
(4000) examples, and it prints the counts by outcome.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
BASES = [MINIMAL, ROOT / "instances" / "enterprise-chat.yaml", ROOT / "instances" / "agentic-assistant.yaml"]
LONG = bool(os.environ.get("PLANNER_FUZZ"))
COUNTS: dict[str, Counter[str]] = {"instances": Counter(), "solves": Counter(), "plans": Counter()}

HOSTILE: list[Any] = [0, -1, -0.5, 1e-9, 1e-300, 1e300, 1e20, 1e7, float("inf"), float("-inf"), float("nan"), 2**63, -(2**63),
                      "", "x" * 2000, "1e400", "nan", True, None, [], {}, [1, 1], ["h100-sxm", "h100-sxm"], {"a": 1}, 0.5, 1.0, 3, 1000000]


def _base(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    for svc in (data.get("services") or {}).values():  # traces stay readable from a temporary copy
        traffic = svc.get("traffic") or {}
        for key in ("trace", "profile"):
            if isinstance(traffic.get(key), str):
                traffic[key] = str((path.parent / traffic[key]).resolve())
    return data


_BASE_DATA = {p: _base(p) for p in BASES}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node[p]
    return node


def _mutate(data: dict[str, Any], draw: Any, values: st.SearchStrategy[Any]) -> None:
    paths = _paths(data)
    path = draw(st.sampled_from(paths))
    parent = _get(data, path[:-1])
    op = draw(st.sampled_from(["set", "set", "set", "delete", "unknown", "repeat"]))
    key = path[-1]
    if op == "set":
        parent[key] = copy.deepcopy(draw(values))  # a fresh copy: a shared hostile dict must not be mutated into a cycle
    elif op == "delete":
        del parent[key]
    elif op == "unknown" and isinstance(parent, dict):
        parent[draw(st.sampled_from(["typo_field", "rate_per_sec", "devices "]))] = copy.deepcopy(draw(values))
    elif op == "repeat" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))


@st.composite
def instance_mutants(draw: Any) -> dict[str, Any]:
    data = copy.deepcopy(_BASE_DATA[draw(st.sampled_from(BASES))])
    values = st.one_of(st.sampled_from(HOSTILE), st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=12))
    for _ in range(draw(st.integers(1, 3))):
        _mutate(data, draw, values)
    return data


def _outcome(r: Result) -> str:
    text = r.output + (r.stderr if r.stderr_bytes is not None else "")
    if "internal error" in text or "Traceback" in text or (r.exception is not None and not isinstance(r.exception, SystemExit)):
        return "internal error"
    return f"exit {r.exit_code}"


def _write(data: dict[str, Any], directory: str) -> Path:
    path = Path(directory) / "mutant.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _fuzz_instances(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        r = CliRunner().invoke(main, ["check-instance", str(_write(data, d))])
    outcome = _outcome(r)
    COUNTS["instances"][outcome] += 1
    assert outcome in ("exit 0", "exit 2"), (outcome, r.output, data)
    if outcome == "exit 2":
        assert "(fix: " in r.stderr, r.stderr


@st.composite
def solve_mutants(draw: Any) -> dict[str, Any]:
    data = copy.deepcopy(_BASE_DATA[MINIMAL])
    data.setdefault("options", {})["verify"] = draw(st.sampled_from([False, False, False, True]))
    data["options"]["solver"] = {"time_limit_s": 20}
    numeric = [p for p in _paths(data) if isinstance(_get(data, p), (int, float)) and not isinstance(_get(data, p), bool)]
    factors = st.sampled_from([0.0, -1.0, 1e-9, 1e-3, 0.1, 0.5, 2.0, 10.0, 1e3, 1e6, 1e12])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(numeric))
        parent = _get(data, path[:-1])
        v = parent[path[-1]] * draw(factors)
        parent[path[-1]] = int(v) if isinstance(parent[path[-1]], int) and abs(v) < 2**62 else v
    return data


def _fuzz_solve(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = _write(data, d)
        out = Path(d) / "out"
        r = CliRunner().invoke(main, ["solve", str(path), "--out", str(out)])
        outcome = _outcome(r)
        if outcome == "exit 0":
            c = CliRunner().invoke(main, ["check", str(out / "plan.json"), "--instance", str(path)])
            if c.exit_code != 0:
                outcome = "exit 0 but check rejects"
    COUNTS["solves"][outcome] += 1
    assert outcome in ("exit 0", "exit 2", "exit 3", "exit 4"), (outcome, r.output, c.output if outcome.startswith("exit 0") else "", data)


# --- plans ------------------------------------------------------------------------------------------

_PLAN: dict[str, Any] = {}


def _solved() -> tuple[dict[str, Any], Any]:
    if not _PLAN:
        from planner.optimize.check import recompute_snapshot
        from planner.schema.plan import PlanResult

        with tempfile.TemporaryDirectory() as d:
            r = CliRunner().invoke(main, ["solve", str(MINIMAL), "--out", d])
            assert r.exit_code == 0, r.output
            data = json.loads((Path(d) / "plan.json").read_text(encoding="utf-8"))
        _PLAN["data"] = data
        _PLAN["truth"] = recompute_snapshot(PlanResult.model_validate(data), MINIMAL)
    return _PLAN["data"], _PLAN["truth"]


RECOMPUTED = ("utilization_peak", "utilization_mean", "busy_instances_peak", "busy_instances_mean", "cost_usd_per_month",
              "equipment_usd_per_month", "power_busy_usd_per_month", "power_idle_usd_per_month", "total_usd_per_month",
              "tokens_per_month", "usd_per_million_tokens", "rate_peak_per_s", "rate_mean_per_s", "instances", "devices",
              "tpot_predicted_ms", "rho", "equipment_usd_per_device_hour", "instance_seconds_per_request", "margin_usd_per_month")
"""Numbers ``check`` recomputes exactly: a change by a factor of 3 (or a sign flip, nan, inf) must be caught."""


@st.composite
def plan_mutants(draw: Any) -> tuple[dict[str, Any], list[str]]:
    data = copy.deepcopy(_solved()[0])
    scopes = [("architectures",), ("verdict",), ("capacity", "points"), ("capacity", "configs")]
    must_catch: list[tuple[tuple[Any, ...], Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        scope = draw(st.sampled_from(scopes))
        numeric = [p for p in _paths(_get(data, scope)) if isinstance(_get(_get(data, scope), p), (int, float))
                   and not isinstance(_get(_get(data, scope), p), bool)]
        if not numeric:
            continue
        path = draw(st.sampled_from(numeric))
        parent = _get(_get(data, scope), path[:-1])
        old = parent[path[-1]]
        how = draw(st.sampled_from(["x3", "neg", "nan", "inf", "zero", "hostile"]))
        new = {"x3": old * 3, "neg": -old, "nan": math.nan, "inf": math.inf, "zero": 0}.get(how) if how != "hostile" else copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        parent[path[-1]] = new
        if (path[-1] in RECOMPUTED and isinstance(old, (int, float)) and abs(old) > 1e-6 and how in ("x3", "neg", "nan")
                and scope[0] != "capacity" and "simulation" not in path):
            must_catch.append((scope + path, old))
    base = _solved()[0]
    changed = [f"{'.'.join(map(str, p))}: {_get(base, p)!r} -> {_get(data, p)!r}" for p, _old in must_catch
               if _get(data, p) != _get(base, p)]  # a later mutation may undo an earlier one
    return data, changed


def _fuzz_plan(case: tuple[dict[str, Any], list[str]]) -> None:
    from planner.optimize.check import check_plan
    from planner.schema.plan import PlanResult

    data, must_catch = case
    try:
        result = PlanResult.model_validate(json.loads(json.dumps(data)))
    except ValidationError:
        COUNTS["plans"]["rejected by the schema (exit 2)"] += 1
        return
    try:
        violations = check_plan(result, _solved()[1])
    except Exception as exc:  # noqa: BLE001 - the property: check never crashes
        COUNTS["plans"]["internal error"] += 1
        raise AssertionError(f"check_plan crashed: {type(exc).__name__}: {exc}") from exc
    outcome = "caught (exit 1)" if violations else "valid (exit 0)"
    COUNTS["plans"][outcome] += 1
    if must_catch:
        assert violations, f"a recomputed number changed by x3, a sign or nan went unnoticed: {must_catch}"


# --- CI budget ----------------------------------------------------------------------------------------

_CI = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@_CI
@given(instance_mutants())
def test_fuzz_instances_check_instance(data: dict[str, Any]) -> None:
    _fuzz_instances(data)


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(solve_mutants())
def test_fuzz_instances_solve(data: dict[str, Any]) -> None:
    _fuzz_solve(data)


@_CI
@given(plan_mutants())
def test_fuzz_plans_check(case: tuple[dict[str, Any], list[str]]) -> None:
    _fuzz_plan(case)


# --- long run -------------------------------------------------------------------------------------------

def _long(n_env: str, default: int) -> Any:
    return settings(max_examples=int(os.environ.get(n_env, default)), deadline=None, derandomize=False,
                    suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.fuzz
@pytest.mark.skipif(not LONG, reason="long-run fuzz: set PLANNER_FUZZ=1 and run pytest -m fuzz")
class TestLongRun:
    @_long("PLANNER_FUZZ_INSTANCES", 6000)
    @given(instance_mutants())
    def test_instances(self, data: dict[str, Any]) -> None:
        _fuzz_instances(data)

    @_long("PLANNER_FUZZ_SOLVES", 300)
    @given(solve_mutants())
    def test_solves(self, data: dict[str, Any]) -> None:
        _fuzz_solve(data)

    @_long("PLANNER_FUZZ_PLANS", 4000)
    @given(plan_mutants())
    def test_plans(self, case: tuple[dict[str, Any], list[str]]) -> None:
        _fuzz_plan(case)

    def test_zz_report(self) -> None:
        total = sum(sum(c.values()) for c in COUNTS.values())
        lines = [f"fuzz inputs: {total}"] + [f"  {k}: {dict(sorted(v.items()))}" for k, v in COUNTS.items()]
        print("\n".join(lines))
