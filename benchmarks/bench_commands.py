"""Wall time of every everyday CLI command on the example instances, against a recorded baseline
(issue 13: "benchmarks/ shows no command more than 20 % slower than before").

Each command runs as a user runs it (``python -m planner ... -q`` in a fresh process, from the
repository root, byte-code compiled once); the figure is the median wall time of ``--repeat`` runs.
The baseline is ``bench_commands_baseline.json`` beside this file: the same commands measured on
an earlier commit (which one, on what machine, how many runs and when are recorded in it). The
report prints per command the baseline and current medians, their ratio and ``SLOWER`` where the
ratio exceeds 1.2.

Commands: ``catalog models``, ``schema``, ``check-instance`` and ``solve --json`` on each example
instance, ``characterize`` on two shipped logs, and on enterprise-chat's plan (written once by
``solve --out`` into a temporary folder, not timed): ``check``, ``html`` and ``simulate``; a
two-point ``sweep``; with ``--horizon`` also ``horizon`` on fleet-horizon (minutes per run).

``solve`` runs with ``--no-plan-cache`` on a checkout that has it (:mod:`planner.plan_cache`):
the commands are timed as they were for the baseline (capacity tables cached, the plan solved);
a plan read back from the cache is timed by ``bench_solve_speed.py`` ("warm").

Recording a baseline (what produced the shipped file)::

    git worktree add --detach /tmp/base-verdict e1e171e
    python benchmarks/bench_commands.py --repeat 3 --baseline-root /tmp/base-verdict --record
    git worktree remove /tmp/base-verdict

``--baseline-root`` runs each command on that checkout and on this one in alternation (A, B, A,
B, ...), so both see the same load on a shared machine; ``--record`` writes the baseline
medians to the JSON. Without ``--baseline-root`` only this checkout is timed and compared with the
file.

Run: python benchmarks/bench_commands.py [--repeat N] [--only SUBSTRING] [--horizon] [--baseline-root DIR --record]
(``--record`` keeps the commands it did not time from the existing file.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).resolve().parent / "bench_commands_baseline.json"
SLOWER = 1.2
"""A command whose median exceeds the baseline's by more than this factor is flagged."""
EXAMPLES = ("agentic-assistant", "code-completion-8b", "enterprise-chat", "fleet-horizon", "long-context-assistant",
            "long-document-nvidia")
HORIZON = "horizon fleet-horizon"
"""Timed only with ``--horizon``: minutes per run on a loaded 2-core machine (its MIPs run to their time limits)."""
PLAN = "{plan}"
"""Placeholder in a command for the plan folder written by ``solve --out`` (once, untimed)."""


def commands() -> dict[str, list[str]]:
    """Name -> argv after ``python -m planner`` (paths relative to the repository root)."""
    out: dict[str, list[str]] = {"catalog models": ["catalog", "models"], "schema": ["schema"]}
    for ex in EXAMPLES:
        out[f"check-instance {ex}"] = ["check-instance", f"instances/{ex}.yaml"]
    for ex in EXAMPLES:
        out[f"solve {ex}"] = ["solve", f"instances/{ex}.yaml", "--json"]
    out["characterize azure code"] = ["characterize", "instances/traces/azure2023_code_min00-20.csv"]
    out["characterize mooncake"] = ["characterize", "instances/traces/mooncake_conversation_min00-15.jsonl"]
    out["check enterprise-chat plan"] = ["check", f"{PLAN}/plan.json"]
    out["html enterprise-chat plan"] = ["html", f"{PLAN}/plan.json", "--out", f"{PLAN}/plan.html"]
    out["simulate enterprise-chat plan"] = ["simulate", "instances/enterprise-chat.yaml", "--plan", f"{PLAN}/plan.json"]
    out["sweep enterprise-chat x2"] = ["sweep", "instances/enterprise-chat.yaml", "--set", "services.chat.traffic.rate_multiplier=1,2"]
    out[HORIZON] = ["horizon", "instances/fleet-horizon.yaml"]
    return out


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env.pop("PLANNER_MODELS_DIR", None)
    return env


def _prepare(root: Path, plan_dir: Path) -> None:
    """Compile the package once and write enterprise-chat's plan for the plan commands (untimed)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "planner")], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "planner", "-q", "solve", "instances/enterprise-chat.yaml", "--out", str(plan_dir)],
                   cwd=root, env=_env(root), check=True, capture_output=True)


def _solves_again(root: Path) -> bool:
    """Whether ``root``'s ``solve`` has ``--no-plan-cache`` (a checkout with the plan cache)."""
    cmd = root / "planner" / "cli" / "cmd_solve.py"
    return cmd.is_file() and "--no-plan-cache" in cmd.read_text(encoding="utf-8")


def _run(root: Path, argv: list[str], plan_dir: Path) -> float:
    args = [a.replace(PLAN, str(plan_dir)) for a in argv]
    if args[0] == "solve" and _solves_again(root):
        args.append("--no-plan-cache")  # timed as the baseline was: the plan solved, not read back
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "planner", "-q", *args], cwd=root, env=_env(root), capture_output=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 3):  # 3: a plan that misses its targets is still a result
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"{' '.join(args)} in {root}: exit {proc.returncode}: {err[-1] if err else ''}")
    return wall


def measure(roots: list[Path], names: list[str], repeat: int, quiet: bool) -> list[dict[str, float]]:
    """Per root, per command: the median wall time (s) over ``repeat`` runs, the roots in alternation."""
    cmds = commands()
    with tempfile.TemporaryDirectory() as tmp:
        plans = [Path(tmp) / f"plan{k}" for k in range(len(roots))]
        for root, plan in zip(roots, plans, strict=True):
            _prepare(root, plan)
        out: list[dict[str, float]] = [{} for _ in roots]
        for name in names:
            times: list[list[float]] = [[] for _ in roots]
            for _ in range(repeat):
                for k, (root, plan) in enumerate(zip(roots, plans, strict=True)):
                    times[k].append(_run(root, cmds[name], plan))
            for k in range(len(roots)):
                out[k][name] = statistics.median(times[k])
            if not quiet:
                print(f"  {name}: " + ", ".join(f"{out[k][name]:.2f} s" for k in range(len(roots))), file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (median)")
    ap.add_argument("--only", default="", help="only commands whose name contains this")
    ap.add_argument("--baseline-root", type=Path, help="checkout of the baseline commit, timed in alternation with this one")
    ap.add_argument("--record", action="store_true", help="with --baseline-root: write its medians to " + BASELINE.name)
    ap.add_argument("--horizon", action="store_true", help="also time `horizon` on fleet-horizon (minutes per run)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-command progress on stderr")
    args = ap.parse_args()
    names = [n for n in commands() if args.only in n and (args.horizon or n != HORIZON)]
    if args.baseline_root is not None:
        base_root = args.baseline_root.resolve()
        base, cur = measure([base_root, ROOT], names, args.repeat, args.quiet)
        if args.record:
            kept = json.loads(BASELINE.read_text(encoding="utf-8"))["medians_s"] if BASELINE.exists() else {}
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=base_root, capture_output=True, text=True).stdout.strip()
            BASELINE.write_text(json.dumps({
                "commit": commit, "recorded_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"), "runs": args.repeat,
                "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
                "how": "python benchmarks/bench_commands.py --baseline-root <checkout> --record (alternating with the "
                       "then-current checkout; medians of wall time)",
                "medians_s": {**kept, **{k: round(v, 3) for k, v in base.items()}}}, indent=1) + "\n", encoding="utf-8")
    else:
        recorded = json.loads(BASELINE.read_text(encoding="utf-8"))
        base = {k: float(v) for k, v in recorded["medians_s"].items()}
        cur = measure([ROOT], names, args.repeat, args.quiet)[0]
    print(f"{'command':<36} {'baseline s':>10} {'now s':>8} {'ratio':>6}")
    worst = 0.0
    for name in names:
        b = base.get(name)
        ratio = cur[name] / b if b else float("nan")
        worst = max(worst, ratio) if b else worst
        flag = "  SLOWER" if b and ratio > SLOWER else ""
        print(f"{name:<36} {b if b is not None else float('nan'):>10.2f} {cur[name]:>8.2f} {ratio:>6.2f}{flag}")
    print(f"worst ratio {worst:.2f} (flagged above {SLOWER:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
