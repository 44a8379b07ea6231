"""Fuzz the commands that read a plan (issue 24): ``check``, ``evaluate``, ``deploy`` and ``simulate`` on a
mutated ``plan.json``. Every input must end in exit 0 or in one ``error:`` (exit 2; ``check`` exits 1
when it finds violations, with no traceback), never an internal error, a Python warning, a hang
(per-input alarm) or a silently wrong answer.

Seed: the plan ``planner solve tests/data/instances/valid_minimal.yaml --out DIR`` writes (solved once at
start). Each input applies 1-3 mutations (``fuzz_readers``' JSON and byte mutations: a hostile value at a
random leaf, a key deleted, truncation, random bytes, a BOM, UTF-16, CRLF, deep nesting), then one command:
``check`` (with or without the instance), ``deploy`` (a random target), ``simulate --plan`` (peak, 20 s)
or ``evaluate`` (rarer: it re-solves the headroom).

Oracles on exit 0 — a plan the command accepted must be one whose flags follow from its numbers:

- ``check`` accepted it: for every feasible architecture, ``ttft_met`` / ``tpot_met`` agree with the
  predictions against the targets, ``meets_targets`` implies every latency met, every pool's devices are
  its instances × TP, its utilisation at peak at most 1, and the cost terms add up to ``total_usd_per_month``;
- ``deploy``: one settings entry per pool of the deployed architecture with instances > 0, with the plan's
  instance count and TP;
- ``simulate`` / ``evaluate --json``: every number finite (or null), simulated p50 ≤ p99.

    python benchmarks/fuzz_plans.py [--inputs 2000] [--seed 0] [--save DIR] [--evaluate-share 0.03] [--simulate-share 0]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_common import run_cli  # noqa: E402  (the campaigns' one runner and classification)
from fuzz_readers import _mutate_bytes, _mutate_json  # noqa: E402  (the same mutations as the readers' campaign)

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
TARGETS = ["vllm", "sglang", "trtllm", "dynamo", "llm-d"]
COST_TERMS = ("equipment", "power_busy", "power_idle", "network_nic", "network_transfer", "ops_pools", "ops_device_types", "ops_devices",
              "licenses", "cpu_pool", "kv_tier", "tool_state_energy")



def solve_seed(folder: Path) -> Path:
    from click.testing import CliRunner

    from planner.cli import main

    inst = folder / INSTANCE.name
    shutil.copy(INSTANCE, inst)
    res = CliRunner().invoke(main, ["solve", str(inst), "--out", str(folder / "sol"), "-q"])
    if res.exit_code != 0:
        raise SystemExit(f"seed solve failed: {res.stderr}")
    return folder / "sol" / "plan.json"


def mutate(data: bytes, rng: random.Random) -> bytes:
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.85:
            try:
                data = _mutate_json(data.decode("utf-8"), rng).encode("utf-8")
                continue
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
                pass
        data = _mutate_bytes(data, rng)
    return data


def command(plan: Path, inst: Path, tmp: Path, rng: random.Random, evaluate_share: float = 0.03,
            simulate_share: float = 0.0) -> list[str]:
    """One command for a mutated plan; ``evaluate`` on ``evaluate_share`` of inputs, ``simulate_share`` of those with
    ``--simulate`` at a rate multiplier (the defaults draw the same sequence as campaigns before those options)."""
    r = rng.random()
    if r >= 1.0 - evaluate_share:
        extra = (["--simulate", "--set", f"services.chat.traffic.rate_multiplier={rng.choice([0.5, 1, 2])}"]
                 if simulate_share and rng.random() < simulate_share else [])
        return ["evaluate", str(plan), "--instance", str(inst), "--rel-tol", "0.2", "--json", *extra]
    r = r / (1.0 - evaluate_share) * 0.97  # the other commands in their old proportions
    if r < 0.45:
        return ["check", str(plan), *(["--no-instance"] if rng.random() < 0.6 else ["--instance", str(inst)])]
    if r < 0.78:
        return ["deploy", str(plan), "--target", rng.choice(TARGETS), "--out", str(tmp / "dep")]
    return ["simulate", str(inst), "--plan", str(plan), "--scenario", "peak", "--duration", "20", "--json"]


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _nonfinite(node: object, path: str = "") -> str:
    if isinstance(node, dict):
        for k, v in node.items():
            why = _nonfinite(v, f"{path}.{k}")
            if why:
                return why
    elif isinstance(node, list):
        for i, v in enumerate(node):
            why = _nonfinite(v, f"{path}[{i}]")
            if why:
                return why
    elif isinstance(node, float) and not math.isfinite(node):
        return f"{path} = {node}"
    return ""


def wrong_plan(doc: dict[str, Any]) -> str:
    """Why a plan ``check`` accepted is inconsistent ('' when its flags follow from its numbers)."""
    for name, a in doc["architectures"].items():
        if not a.get("feasible"):
            continue
        for lat in a.get("latency", []):
            for m in ("ttft", "tpot"):
                pred, tgt, met = lat[f"{m}_predicted_ms"], lat[f"{m}_target_ms"], lat[f"{m}_met"]
                if _finite(pred) and _finite(tgt) and bool(met) != (pred <= tgt * (1 + 1e-6)):
                    return f"{name}: {lat['service']} {m}_met {met} with {pred} against {tgt}"
            if a.get("meets_targets") is True and not (lat["ttft_met"] and lat["tpot_met"]):
                return f"{name}: meets_targets true with {lat['service']} missing a target"
        for p in a["pools"]:
            if p["devices"] != p["instances"] * p["tp"]:
                return f"{name}: pool {p['name']} devices {p['devices']} != {p['instances']} x tp {p['tp']}"
            if not (_finite(p["utilization_peak"]) and p["utilization_peak"] <= 1 + 1e-6):
                return f"{name}: pool {p['name']} utilization_peak {p['utilization_peak']}"
        c = a["costs"]
        total = sum(float(c.get(f"{t}_usd_per_month", 0.0)) for t in COST_TERMS)
        if not math.isclose(total, float(c["total_usd_per_month"]), rel_tol=1e-6, abs_tol=1e-6):
            return f"{name}: cost terms add to {total}, total {c['total_usd_per_month']}"
    return ""


def silently_wrong(args: list[str], stdout: str, plan: Path, tmp: Path) -> str:
    if args[0] == "check":
        return wrong_plan(json.loads(plan.read_text(encoding="utf-8-sig")))
    if args[0] == "deploy":
        doc = json.loads(plan.read_text(encoding="utf-8-sig"))
        s = json.loads((tmp / "dep" / "settings.json").read_text(encoding="utf-8"))
        pools = {p["name"]: p for p in doc["architectures"][s["architecture"]]["pools"] if p["instances"] > 0}
        got = {p["pool"]: p for p in s["pools"]}
        if set(got) != set(pools):
            return f"deployed pools {sorted(got)} vs the plan's {sorted(pools)}"
        for k, p in got.items():
            if p["instances"] != pools[k]["instances"] or p["tp"] != pools[k]["tp"]:
                return f"{k}: deployed {p['instances']} x tp {p['tp']}, plan {pools[k]['instances']} x tp {pools[k]['tp']}"
        return ""
    doc = json.loads(stdout)
    why = _nonfinite(doc)
    if why:
        return why
    if args[0] == "simulate":
        for m in ("ttft", "tpot"):
            for svc in _find(doc, f"{m}_p50_ms"):
                p50, p99 = svc.get(f"{m}_p50_ms"), svc.get(f"{m}_p99_ms")
                if _finite(p50) and _finite(p99) and p50 > p99 * (1 + 1e-9):
                    return f"{m} p50 {p50} above p99 {p99}"
    return ""


def _find(node: object, key: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if key in node:
            out.append(node)
        for v in node.values():
            out += _find(v, key)
    elif isinstance(node, list):
        for v in node:
            out += _find(v, key)
    return out


def run_one(args: list[str], plan: Path, tmp: Path, timeout_s: int) -> tuple[str, str, float]:
    """(outcome, detail, seconds): :func:`fuzz_common.run_cli` (exit 1 of ``check`` is its verdict
    "violations"), an ``ok`` run's output checked by :func:`silently_wrong`."""
    run = run_cli(args, timeout_s, exit1_is="violations" if args[0] == "check" else None)
    if run.outcome == "ok":
        try:
            why = silently_wrong(args, run.stdout, plan, tmp)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError) as exc:
            why = f"output not readable: {type(exc).__name__}: {exc}"
        return ("wrong" if why else "ok"), why, run.seconds
    return run.outcome, run.detail, run.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=int, default=120)
    ap.add_argument("--save", type=Path, default=None)
    ap.add_argument("--evaluate-share", type=float, default=0.03, help="share of inputs run through evaluate")
    ap.add_argument("--simulate-share", type=float, default=0.0, help="share of the evaluate runs given --simulate")
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    counts: Counter[tuple[str, str]] = Counter()
    failures: list[tuple[str, list[str], str]] = []
    slowest = (0.0, "")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-plans-") as d:
        base = Path(d)
        seed_plan = solve_seed(base)
        data = seed_plan.read_bytes()
        inst = base / INSTANCE.name
        for i in range(ns.inputs):
            tmp = base / f"{i}"
            tmp.mkdir()
            plan = tmp / "plan.json"
            plan.write_bytes(mutate(data, rng))
            args = command(plan, inst, tmp, rng, ns.evaluate_share, ns.simulate_share)
            outcome, detail, dt = run_one(args, plan, tmp, ns.timeout_s)
            counts[(args[0], outcome)] += 1
            if dt > slowest[0]:
                slowest = (dt, " ".join(args))
            if outcome not in ("ok", "error", "violations"):
                failures.append((outcome, args, detail))
                if ns.save is not None:
                    ns.save.mkdir(parents=True, exist_ok=True)
                    shutil.copy(plan, ns.save / f"{i:05d}-{args[0]}-{outcome}.json")
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{ns.inputs:,} plan inputs in {time.perf_counter() - t_start:.0f} s (seed {ns.seed})")
    for (cmd, outcome), n in sorted(counts.items()):
        print(f"  {cmd:10s} {outcome:10s} {n:>7,}")
    print(f"slowest: {slowest[0]:.2f} s ({slowest[1]})")
    for outcome, args, detail in failures[:20]:
        print(f"- {outcome}: planner {' '.join(args)}\n    {detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
