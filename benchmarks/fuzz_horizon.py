"""Fuzz plans over time (issue 24): horizon instances and the fleet files they read. Every input must end in
a clean result or in one ``error:`` (exit 2), never an internal error, a traceback, a Python warning, a hang
(per-input alarm) or a silently wrong answer.

Seeds: a small horizon instance (``instances/fleet-horizon.yaml`` cut to 2 periods, 2 buckets, TP 2/8), its
fleet file (the first 300 windows of ``instances/traces/servegen_m-large_fleet_sum.csv``, ~2 days) and a
ServeGen client folder (``tests/data/servegen_horizon_clients``, read as a fleet or with ``clients: each``).
Each input is one of:

- **fleet** — the fleet file or one client file with 1-3 mutations (``fuzz_readers``' CSV and byte
  mutations: a hostile cell or column, a column deleted, rows duplicated, truncation, random bytes, BOM,
  UTF-16, CRLF); read as ``planner horizon`` reads it (:func:`planner.horizon.demand.slot_profile`,
  :func:`~planner.horizon.demand.client_slot_profiles`), in-process. Oracles on a clean read: the slots'
  hours add up to the period's; ``0 ≤ mean ≤ peak`` per slot; the hours-weighted mean of the slots' means
  is the mean of the windows read (× ``rate_scale``); the largest slot peak is the largest window rate
  read; CVs finite and ≥ 0; every number finite.
- **instance** — 1-3 leaves of the instance (mostly under ``horizon:``) set to hostile values, a key
  removed or an unknown key added, then ``planner check-instance`` (CliRunner).
- every ``--solve-every``-th input also runs ``planner horizon INSTANCE --no-baseline --json`` on its
  (mutated) files. Oracles on exit 0: every number finite; counts non-negative integers; per period, slot
  and device the devices in pools are at most owned + reserved + on demand + spot, and equal the sum of
  that slot's pools' devices; a slot with demand has devices in pools; pool utilisation at most 1.

    python benchmarks/fuzz_horizon.py [--inputs 10000] [--seed 0] [--solve-every 500] [--save DIR]

Prints the counts by kind and outcome, the slowest run and the first failures (inputs saved under --save).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_common import Timeout, run_cli, time_limit  # noqa: E402  (the campaigns' one runner and classification)
from fuzz_readers import _mutate_bytes, _mutate_csv  # noqa: E402  (the same mutations as the readers' campaign)

ROOT = Path(__file__).resolve().parent.parent
FLEET_ROWS = 300
HOSTILE: list[Any] = [0, -1, -0.5, 1e-9, 1e-13, 1e300, 1e20, 1e7, float("inf"), float("-inf"), float("nan"), 2**63, "", "x" * 500,
                      "nan", True, None, [], {}, [1, 1], {"a": 1}, 0.5, 1.0, 1.0000001, 3, 12, 24, 1000, 100000, "h100-sxm", "each",
                      {"top": 0}, {"top": 2}, "hour_of_day_weekpart", "fleet", "normal(0.05,10)", [1.0, 2.0], "chunk-a", 7, -7]



def _base_instance() -> dict[str, Any]:
    d: dict[str, Any] = yaml.safe_load((ROOT / "instances" / "fleet-horizon.yaml").read_text(encoding="utf-8"))
    d["horizon"]["periods"] = 2
    d["horizon"]["demand"]["fleet_file"] = "fleet.csv"
    svc = d["services"]["chat"]
    svc["traffic"]["trace"] = str(ROOT / "instances" / svc["traffic"]["trace"])
    svc["traffic"]["buckets"] = 2
    d["catalog"]["tp_degrees"] = [2, 8]
    d["options"]["solver"]["time_limit_s"] = 20
    return d


BASE = _base_instance()
FLEET = "\n".join((ROOT / "instances" / "traces" / "servegen_m-large_fleet_sum.csv").read_text(encoding="utf-8").splitlines()[:FLEET_ROWS + 1]) + "\n"
CLIENTS = ROOT / "tests" / "data" / "servegen_horizon_clients"


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _mutate_instance(d: dict[str, Any], rng: random.Random) -> None:
    paths = _paths(d)
    horizon = [p for p in paths if p[0] == "horizon"]
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(horizon if rng.random() < 0.85 else paths)
        parent: Any = d
        for p in path[:-1]:
            parent = parent[p]
        key = path[-1]
        op = rng.random()
        try:
            if op < 0.75:
                parent[key] = copy.deepcopy(rng.choice(HOSTILE))
            elif op < 0.87 and isinstance(parent, dict):
                del parent[key]
            elif isinstance(parent, dict):
                parent[rng.choice(["extra", "clients", "rate_scale", "day0_weekday", "multipliers", "months_per_period"])] = rng.choice(HOSTILE)
        except (KeyError, IndexError, TypeError):
            pass
        paths = _paths(d)
        horizon = [p for p in paths if p[0] == "horizon"] or paths


def make_case(rng: random.Random, folder: Path) -> tuple[str, Path]:
    """Write one input into ``folder``; (kind, instance path)."""
    d = copy.deepcopy(BASE)
    fleet = FLEET.encode()
    use_clients = rng.random() < 0.3
    if use_clients:
        shutil.copytree(CLIENTS, folder / "clients")
        del d["horizon"]["demand"]["fleet_file"]
        d["horizon"]["demand"]["servegen_fleet"] = "clients"
        if rng.random() < 0.5:
            d["horizon"]["demand"]["clients"] = rng.choice(["each", {"top": 2}])
    kind = "fleet" if rng.random() < 0.6 else "instance"
    if kind == "fleet":
        target = rng.choice(sorted((folder / "clients").glob("*-trace.csv"))) if use_clients else None
        data = target.read_bytes() if target is not None else fleet
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.75:
                try:
                    data = _mutate_csv(data.decode("utf-8"), rng).encode("utf-8")
                    continue
                except UnicodeDecodeError:
                    pass
            data = _mutate_bytes(data, rng)
        if target is not None:
            target.write_bytes(data)
        else:
            fleet = data
    else:
        _mutate_instance(d, rng)
    (folder / "fleet.csv").write_bytes(fleet)
    inst = folder / "inst.yaml"
    inst.write_text(yaml.safe_dump(d, allow_unicode=True), encoding="utf-8")
    return kind, inst


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _windows_read(inst: Path) -> Any:
    """The windows ``planner horizon`` reads for this instance (fleet sum), for the oracles."""
    from planner.horizon.demand import _read_window_csv, fleet_windows

    d = yaml.safe_load(inst.read_text(encoding="utf-8"))
    demand = d["horizon"]["demand"]
    return fleet_windows(inst.parent / demand["servegen_fleet"]) if "servegen_fleet" in demand else _read_window_csv(inst.parent / demand["fleet_file"])


def check_slots(inst: Path) -> tuple[str, str]:
    """Read the instance's fleet as ``planner horizon`` does; (outcome, detail)."""
    from planner.errors import InputError
    from planner.horizon.demand import client_slot_profiles, slot_profile
    from planner.schema.horizon import Horizon

    d = yaml.safe_load(inst.read_text(encoding="utf-8"))
    horizon = Horizon.model_validate(d["horizon"])
    hpm = float(d["costs"]["hours_per_month"])
    try:
        prof = slot_profile(horizon, inst.parent, hpm)
        split = horizon.demand.servegen_fleet is not None and horizon.demand.clients != "fleet"
        clients = client_slot_profiles(horizon, inst.parent, hpm)[0] if split else {}
        windows = _windows_read(inst)
    except InputError as exc:
        text = str(exc)
        return ("error" if text and "\n" not in text.strip() else "bad-error"), text[:300]
    hours = horizon.hours_per_period(hpm)
    scale = float(horizon.demand.rate_scale)
    for name, p in [("fleet", prof), *clients.items()]:
        s = p.slots
        for col in ("hours_per_period", "peak_rate_per_s", "mean_rate_per_s", "interarrival_cv"):
            v = s[col].to_numpy(float)
            if not (v == v).all() or not all(math.isfinite(x) and x >= 0 for x in v):
                return "wrong", f"{name}: {col} {v.tolist()[:6]}"
        if abs(float(s["hours_per_period"].sum()) - hours) > 1e-6 * hours:
            return "wrong", f"{name}: slot hours sum to {s['hours_per_period'].sum()}, the period has {hours}"
        if (s["mean_rate_per_s"] > s["peak_rate_per_s"] * (1 + 1e-9) + 1e-12).any():
            return "wrong", f"{name}: a slot's mean above its peak"
    s = prof.slots
    mean_w = float((s["hours_per_period"] * s["mean_rate_per_s"]).sum() / s["hours_per_period"].sum())
    mean_r = float(windows["rate_rps"].mean()) * scale
    if abs(mean_w - mean_r) > 1e-6 * max(mean_r, 1e-300):
        return "wrong", f"slots' mean {mean_w} vs the windows' mean {mean_r}"
    peak_r = float(windows["rate_rps"].max()) * scale
    if abs(float(s["peak_rate_per_s"].max()) - peak_r) > 1e-9 * max(peak_r, 1e-300):
        return "wrong", f"largest slot peak {s['peak_rate_per_s'].max()} vs the largest window {peak_r}"
    return "ok", ""


def check_solve(stdout: str) -> str:
    """'' when a ``horizon --json`` answer passes the oracles (module docstring), else the reason."""
    doc = json.loads(stdout)
    nums: list[tuple[str, object]] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")
        elif isinstance(node, float) and not math.isfinite(node):
            nums.append((path, node))

    walk({k: v for k, v in doc.items() if k not in ("regret",)}, "")
    if nums:
        return f"non-finite {nums[0]}"
    for arch, a in doc["architectures"].items():
        if not a.get("feasible"):
            continue
        sched = {(r["period"], r["device"]): r for r in a["schedule"]}
        for r in a["schedule"]:
            for k in ("bought", "delivered", "owned", "sold", "reserved", "on_demand_peak", "spot_peak", "in_pools_peak"):
                if not isinstance(r[k], int) or r[k] < 0:
                    return f"{arch}: schedule {k} = {r[k]}"
        pooled: Counter[tuple[int, str, str]] = Counter()
        for p in a["pools"]:
            if p["instances"] < 0 or p["devices"] < 0 or not (p["utilization_peak"] <= 1 + 1e-6):
                return f"{arch}: pool {p}"
            device = str(p["pool"]).split(":")[1].split("/")[0]
            pooled[(p["period"], p["slot"], device)] += p["devices"]
        busy: Counter[tuple[int, str]] = Counter()
        for s in a["slots"]:
            key = (s["period"], s["slot"], s["device"])
            row = sched.get((s["period"], s["device"]))
            have = (row["owned"] + row["reserved"] if row else 0) + s["on_demand"] + s["spot"]
            if s["in_pools"] > have + 1e-6:
                return f"{arch}: {key} {s['in_pools']} devices in pools, {have} available"
            if abs(s["in_pools"] - pooled[key]) > 1e-6:
                return f"{arch}: {key} in_pools {s['in_pools']} vs pools' devices {pooled[key]}"
            busy[(s["period"], s["slot"])] += s["in_pools"]
        for s in a["slots"]:
            if s["peak_multiplier"] > 0 and busy[(s["period"], s["slot"])] == 0:
                return f"{arch}: period {s['period']} slot {s['slot']} has demand and no device in pools"
    return ""


def run_horizon_cli(args: list[str], timeout_s: int) -> tuple[str, str, str, float]:
    """(outcome, detail, stdout, seconds) of one in-process CLI run (:func:`fuzz_common.run_cli`;
    exit 3, an infeasible fleet, is a clean refusal)."""
    run = run_cli(args, timeout_s, exit3_ok=True)
    return run.outcome, run.detail, run.stdout, run.seconds


def run_reader(inst: Path, timeout_s: int) -> tuple[str, str, float]:
    t0 = time.perf_counter()
    try:
        with time_limit(timeout_s), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcome, detail = check_slots(inst)
    except Timeout:
        return "hang", f"over {timeout_s} s", time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 — an internal error of the reader is what the campaign looks for
        return "internal", f"{type(exc).__name__}: {exc}"[:300], time.perf_counter() - t0
    if caught and outcome in ("ok", "wrong"):
        return "warning", f"{caught[0].category.__name__}: {caught[0].message}"[:300], time.perf_counter() - t0
    return outcome, detail, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--solve-every", type=int, default=500, help="also run `planner horizon` on every N-th input (0: never)")
    ap.add_argument("--timeout-s", type=int, default=60, help="per reader / check-instance run")
    ap.add_argument("--solve-timeout-s", type=int, default=300)
    ap.add_argument("--save", type=Path, default=None)
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    counts: Counter[tuple[str, str]] = Counter()
    failures: list[tuple[str, str, str, Path]] = []
    slowest = (0.0, "")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-horizon-") as d:
        for i in range(ns.inputs):
            folder = Path(d) / f"{i}"
            folder.mkdir()
            kind, inst = make_case(rng, folder)
            runs: list[tuple[str, str, str, float]] = []
            if kind == "fleet":
                outcome, detail, dt = run_reader(inst, ns.timeout_s)
                runs.append(("fleet-read", outcome, detail, dt))
            else:
                outcome, detail, _out, dt = run_horizon_cli(["check-instance", str(inst)], ns.timeout_s)
                runs.append(("check-instance", outcome, detail, dt))
            if ns.solve_every and i % ns.solve_every == ns.solve_every - 1:
                outcome, detail, out, dt = run_horizon_cli(["horizon", str(inst), "--no-baseline", "--json"], ns.solve_timeout_s)
                if outcome == "ok":
                    try:
                        why = check_solve(out)
                    except (ValueError, KeyError, TypeError, IndexError) as exc:
                        why = f"output not readable: {type(exc).__name__}: {exc}"
                    outcome, detail = ("wrong", why) if why else ("ok", "")
                runs.append(("horizon", outcome, detail, dt))
            for what, outcome, detail, dt in runs:
                counts[(what, outcome)] += 1
                if dt > slowest[0]:
                    slowest = (dt, f"{what} input {i}")
                if outcome not in ("ok", "error"):
                    failures.append((what, outcome, detail, folder))
                    if ns.save is not None:
                        shutil.copytree(folder, ns.save / f"{i:05d}-{what}-{outcome}", dirs_exist_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
    print(f"{ns.inputs:,} horizon inputs in {time.perf_counter() - t_start:.0f} s (seed {ns.seed}, a solve every {ns.solve_every})")
    for (what, outcome), n in sorted(counts.items()):
        print(f"  {what:16s} {outcome:10s} {n:>7,}")
    print(f"slowest: {slowest[0]:.2f} s ({slowest[1]})")
    for what, outcome, detail, folder in failures[:20]:
        print(f"- {what} {outcome} ({folder.name}): {detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
