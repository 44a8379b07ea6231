"""The one-way flow of the package: no import circles (static, from the AST), and the light
commands do not load the solver or plotting stacks."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "planner"

KNOWN_CIRCLES: set[frozenset[str]] = set()
"""Circles allowed for now: none (the verify-and-tighten loop lives in planner.optimize.tighten and
planner.solve_instance, above both)."""


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    def target(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        is_pkg = p.name == "__init__.py"
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                if n.level:
                    parts = m.split(".") if is_pkg else m.split(".")[:-1]
                    parts = parts[: len(parts) - (n.level - 1)]
                    mod = ".".join(parts + ([n.module] if n.module else []))
                else:
                    mod = n.module or ""
                names = [mod] + [f"{mod}.{a.name}" for a in n.names]
            for x in names:
                if x.split(".")[0] == "planner":
                    t = target(x)
                    if t and t != m and not (mods[t].name == "__init__.py" and m.startswith(t + ".")):
                        g[m].add(t)
    return g


def _circles(g: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    circles = [c for c in _circles(_graph(_modules())) if c not in KNOWN_CIRCLES]
    assert circles == [], [sorted(c) for c in circles]


def test_the_detector_finds_a_circle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(g) == [frozenset({"a", "b", "c"})]


def test_schema_imports_no_feature_module() -> None:
    g = _graph(_modules())
    for m, deps in g.items():
        if m.startswith("planner.schema"):
            assert all(d.startswith(("planner.schema", "planner.errors")) for d in deps), (m, deps)


def test_verification_does_not_import_the_optimiser() -> None:
    """planner.verify checks a plan against the simulator: it reads the shared analytic latency from
    planner.pool_latency, never from planner.optimize (issue 27), directly or through a module it imports."""
    g = _graph(_modules())
    seen, todo = set(), ["planner.verify"]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(g.get(m, ()))
    assert not any(m.startswith("planner.optimize") for m in seen), sorted(m for m in seen if m.startswith("planner.optimize"))


def test_help_and_check_instance_load_neither_pyomo_nor_matplotlib() -> None:
    """Nor pandas (and the pyarrow it imports): the schemas and the catalog load without it (issue 27, start-up)."""
    instance = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
    code = ("import sys\nfrom planner.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pyomo', 'matplotlib', 'highspy', 'pandas', 'pyarrow'})\n"
            "print('HEAVY', heavy)\n")
    for args in (["--help"], ["check-instance", str(instance)], ["solve", "--help"]):
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, check=False)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "HEAVY []" in p.stdout, (args, p.stdout[-500:])
