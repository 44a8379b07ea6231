"""Fuzz the newer readers (issue 24): users' benchmark results (`validate-perf`, `convert-measurements`), ML.ENERGY
runs (`validate-energy`), expert-parallel rows (`calibrate-moe`), Hugging Face ``config.json`` files (`estimate
--model PATH`) and MLPerf results (`validate-goodput`; issue 25). Every input must end in exit 0 or in exit 2 with
one ``error:`` block, never an internal error (exit 1), a traceback, a Python warning, a hang, or a silently wrong
answer (a written row with a non-positive or non-finite latency, a fit with a non-finite error).

Seeds are the shipped fixtures (``tests/data/benchmarks``, ``tests/data/energy/runs_fixture.csv``,
``tests/data/fuzz_turn3/energy_one_row_ok.csv`` and ``moe_base.csv``). Each input applies 1-3 random mutations: a
hostile value in one field (JSON) or cell (CSV), a key or column deleted, lines duplicated or deleted, a truncated
file, random bytes, a byte-order mark, UTF-16, CRLF endings, deep nesting; then one command with random options.
Runs in-process through the CLI's error boundary, with warnings recorded.

MLPerf inputs (a header and three rows of ``models/measured/mlperf_public_v4.0-v5.0.csv``: one the planner predicts,
two it skips, then mutated) go through the reader and every row's case and planning instance in-process
(``mlperf-read``: ``read_mlperf``, ``goodput.case_for``, ``goodput.instance_for``, ``resolve_instance``; an
``InputError`` is the clean refusal) and, every ``--goodput-every``-th one, the whole ``validate-goodput`` command
(each predicted row a bisection of solves, ~2 s).

    python benchmarks/fuzz_readers.py [--inputs 2000] [--seed 0] [--save DIR] [--skip-moe] [--kind perf|energy|moe|config|mlperf] [--timeout-s 60] [--goodput-every 50]

Prints the counts by command and outcome, the slowest run, and the first failing inputs (saved under --save).
"""

from __future__ import annotations

import argparse
import codecs
import json
import math
import random
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_common import run_cli  # noqa: E402  (the campaigns' one runner and classification)

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "tests" / "data" / "benchmarks"
FUZZ = ROOT / "tests" / "data" / "fuzz_turn3"

HOSTILE: list[object] = ["", "nan", "inf", "-inf", "1e400", "-1", "-5", "0", "1e308", "-1e308", "0.5", "2.5", "true", None,
                         [1, 2], {"a": 1}, "\u00e9\u4e2d\U0001f600", "line\nbreak", "x" * 300, 5, -5.0, float("nan"),
                         float("inf"), 1e308, 99999999999999999999999999, "h100-sxm", "fp3", "cpu", "xeon6-6980p", "decode"]
SLOW_S = 20.0

SEEDS: list[tuple[str, Path]] = [
    ("perf", BENCH / "vllm_bench_serve_closed.json"),
    ("perf", BENCH / "vllm_bench_serve_open.json"),
    ("perf", BENCH / "sglang_bench_serving.jsonl"),
    ("perf", BENCH / "llmperf_summary.json"),
    ("perf", BENCH / "profile_export_aiperf.json"),
    ("perf", BENCH / "profile_export_aiperf.csv"),
    ("perf", BENCH / "profile_export_genai_perf.csv"),
    ("energy", ROOT / "tests" / "data" / "energy" / "runs_fixture.csv"),
    ("energy", FUZZ / "energy_one_row_ok.csv"),
    ("moe", FUZZ / "moe_base.csv"),
    ("config", ROOT / "models" / "llm" / "configs" / "Qwen--Qwen3-8B_config.json"),
    ("config", ROOT / "models" / "llm" / "configs" / "Qwen--Qwen3-30B-A3B_config.json"),
    ("config", ROOT / "models" / "llm" / "configs" / "deepseek-ai--DeepSeek-V3_config.json"),
    ("config", ROOT / "models" / "llm" / "configs" / "google--gemma-3-12b-it_config.json"),
    ("config", ROOT / "models" / "llm" / "configs" / "openai--gpt-oss-20b_config.json"),
    ("config", ROOT / "models" / "llm" / "configs" / "nvidia--NVIDIA-Nemotron-Nano-9B-v2_config.json"),
    ("mlperf", ROOT / "models" / "measured" / "mlperf_public_v4.0-v5.0.csv"),
]

MLPERF_ROWS = (("v4.1", "H100-SXM", "llama2-70b-99", "Offline"), ("v4.1", "H200-SXM", "mixtral-8x7b", "Server"), ("v4.1", "", "gptj-99", "Offline"))
"""(round, accelerator part, benchmark, scenario) of the MLPerf seed's three rows: predicted, skipped (no stated input
length), skipped (model not in the catalog)."""


def _mlperf_seed(path: Path) -> bytes:
    """The header and :data:`MLPERF_ROWS` of the shipped MLPerf file (its first match each)."""
    import csv
    import io

    lines = path.read_text(encoding="utf-8").splitlines()
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    keep = [lines[0]]
    for rnd, acc, bench, scen in MLPERF_ROWS:
        for line, row in zip(lines[1:], rows[1:], strict=True):
            if row[col["round"]] == rnd and acc in row[col["accelerator"]] and row[col["benchmark"]] == bench and row[col["scenario"]] == scen:
                keep.append(line)
                break
    return ("\n".join(keep) + "\n").encode("utf-8")


def _mutate_json(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    try:
        docs = [json.loads(text)]
        jsonl = False
    except json.JSONDecodeError:
        docs = [json.loads(ln) for ln in lines if ln.strip()]
        jsonl = True

    def visit(node: object) -> None:
        if isinstance(node, dict) and node:
            k = rng.choice(list(node))
            if rng.random() < 0.25:
                del node[k]
            elif isinstance(node[k], (dict, list)) and rng.random() < 0.5:
                visit(node[k])
            else:
                node[k] = rng.choice(HOSTILE)
        elif isinstance(node, list) and node:
            visit(rng.choice(node))

    for d in docs:
        visit(d)
    if jsonl:
        return "\n".join(json.dumps(d) for d in docs) + "\n"
    return json.dumps(docs[0], indent=1)


def _mutate_csv(text: str, rng: random.Random) -> str:
    rows = [ln.split(",") for ln in text.splitlines()]
    if len(rows) < 2:
        return text
    r = rng.randrange(len(rows))
    op = rng.random()
    if op < 0.6:
        c = rng.randrange(len(rows[r]))
        rows[r][c] = str(rng.choice(HOSTILE)).replace(",", ";")
    elif op < 0.75:  # a whole column
        c = rng.randrange(len(rows[0]))
        v = str(rng.choice(HOSTILE)).replace(",", ";")
        for row in rows[1:]:
            if c < len(row):
                row[c] = v
    elif op < 0.85:
        c = rng.randrange(len(rows[0]))
        rows = [row[:c] + row[c + 1:] for row in rows]
    else:
        rows.append(list(rows[rng.randrange(1, len(rows))]))
    return "\n".join(",".join(row) for row in rows) + "\n"


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    op = rng.randrange(7)
    if op == 0:
        return data[: rng.randrange(len(data) + 1)]
    if op == 1:
        pos = rng.randrange(len(data) + 1)
        return data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[pos:]
    if op == 2:
        return codecs.BOM_UTF8 + data
    if op == 3:
        return data.decode("utf-8", "replace").encode("utf-16")
    if op == 4:
        return data.replace(b"\n", b"\r\n")
    if op == 5:
        return b"[" * 50_000 + b"]" * 50_000 if rng.random() < 0.5 else b""
    return data + data[: rng.randrange(len(data) + 1)]


def make_input(kind: str, seed_file: Path, rng: random.Random, out: Path) -> None:
    data = _mlperf_seed(seed_file) if kind == "mlperf" else seed_file.read_bytes()
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.75:
            try:
                text = data.decode("utf-8")
                data = (_mutate_json(text, rng) if seed_file.suffix in (".json", ".jsonl") else _mutate_csv(text, rng)).encode("utf-8")
                continue
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
                pass
        data = _mutate_bytes(data, rng)
    out.write_bytes(data)


def command(kind: str, path: Path, rng: random.Random, tmp: Path) -> list[str]:
    if kind == "perf":
        args = ["validate-perf" if rng.random() < 0.7 else "convert-measurements", str(path)]
        for opt, values in (("--device", ["h100-sxm", "h200-sxm", "nope"]), ("--engine", ["vllm", "sglang", "trtllm"]),
                            ("--model", ["qwen3-32b", "llama-3.1-8b"]), ("--tp", ["1", "4", "8"]), ("--concurrency", ["16", "1"])):
            if rng.random() < 0.6:
                args += [opt, rng.choice(values)]
        if args[0] == "convert-measurements":
            args += ["-o", str(tmp / "m.csv")]
        elif rng.random() < 0.7:
            args.append("--json")
        return args
    if kind == "energy":
        return ["validate-energy", str(path), *(["--json"] if rng.random() < 0.5 else [])]
    if kind == "config":
        args = ["estimate", "--model", str(path), "--device", rng.choice(["h100-sxm", "h200-sxm", "b200", "mi300x"]),
                "--tp", rng.choice(["1", "2", "8"]), "--isl", rng.choice(["1", "1000", "32000"]), "--osl", rng.choice(["1", "200"]),
                "--concurrency", rng.choice(["1", "8", "256"])]
        if rng.random() < 0.4:
            args += ["--precision", rng.choice(["fp8", "fp4", "int8"])]
        return args + (["--json"] if rng.random() < 0.7 else [])
    if kind == "mlperf":
        return ["validate-goodput", str(path), "--rel-tol", "0.5", *(["--json"] if rng.random() < 0.5 else [])]
    return ["calibrate-moe", str(path), "--calibration", "none", "-o", str(tmp / "moe.yaml"), "--json"]


def _finite_positive(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def silently_wrong(args: list[str], stdout: str, tmp: Path) -> str:
    """A reason when an exit-0 answer is wrong by the rules above ('' when it looks right)."""
    if args[0] == "validate-perf" and "--json" in args:
        for row in json.loads(stdout).get("rows", []):
            for k in ("ttft_ms", "tpot_ms"):
                if row.get(k) is not None and not _finite_positive(row[k]):
                    return f"row with {k} = {row[k]}"
            for k in ("isl", "osl", "tp"):
                if not _finite_positive(row.get(k)):
                    return f"row with {k} = {row.get(k)}"
    if args[0] == "convert-measurements" and (tmp / "m.csv").exists():
        import csv

        with (tmp / "m.csv").open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                for k in ("ttft_ms", "tpot_ms", "isl", "osl", "tp"):
                    v = row.get(k) or ""
                    if v and not _finite_positive(float(v)):
                        return f"written row with {k} = {v}"
    if args[0] == "estimate" and "--json" in args:
        doc = json.loads(stdout)
        for k in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_device"):
            if not _finite_positive(doc.get(k)):
                return f"{k} = {doc.get(k)}"
    if args[0] == "validate-goodput" and "--json" in args:
        for row in json.loads(stdout).get("rows", []):
            for k in ("predicted_tokens_per_s", "measured_tokens_per_s"):
                if k in row and row[k] is not None and not (_finite_positive(row[k]) or row[k] == 0):
                    return f"row with {k} = {row[k]}"
    if args[0] == "calibrate-moe":
        doc = json.loads(stdout)
        if not _finite_positive(doc.get("mape")) and doc.get("mape") != 0.0:
            return f"mape {doc.get('mape')}"
        if doc.get("rows", 0) == 0:
            return "a fit on zero rows"
    return ""



def read_mlperf_in_process(path: Path) -> tuple[str, str, float]:
    """``mlperf-read``: the MLPerf reader, every row's case and planning instance, without the solves:
    ``ok``, ``error`` (an ``InputError``: the CLI's one-line refusal) or ``crash`` (anything else)."""
    import time

    from planner.catalog import load_catalog
    from planner.errors import InputError
    from planner.goodput import Case, case_for, instance_for
    from planner.instance import resolve_instance
    from planner.mlperf import read_mlperf

    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            catalog = load_catalog()
            for row in read_mlperf(path):
                case = case_for(row, catalog)
                if isinstance(case, Case):
                    resolve_instance(instance_for(case), Path("mlperf-goodput.yaml"), catalog)
    except InputError:
        return "error", "", time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001  (the campaign's point: anything else is a finding)
        return "crash", f"{type(exc).__name__}: {exc}"[:300], time.perf_counter() - t0
    return "ok", "", time.perf_counter() - t0


def run_one(args: list[str], tmp: Path, timeout_s: int = 60) -> tuple[str, str, float]:
    """(outcome, detail, seconds): :func:`fuzz_common.run_cli` (exit 2 the only refusal), ``slow`` past
    ``SLOW_S``, and an ``ok`` run's output checked by :func:`silently_wrong`."""
    run = run_cli(args, timeout_s, refusals=(2,))
    if run.outcome in ("ok", "error", "bad-error") and run.seconds > SLOW_S:
        return "slow", f"{run.seconds:.1f} s", run.seconds
    if run.outcome == "ok":
        try:
            why = silently_wrong(args, run.stdout, tmp)
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            why = f"output not readable: {exc}"
        return ("wrong" if why else "ok"), why, run.seconds
    return run.outcome, run.detail, run.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", type=Path, default=None)
    ap.add_argument("--skip-moe", action="store_true", help="leave out calibrate-moe (one fit per input: 10,000 inputs in ~90 s on the 2-core VM)")
    ap.add_argument("--kind", choices=["perf", "energy", "moe", "config", "mlperf"], action="append",
                    help="only these seed kinds (repeatable): perf = benchmark files, energy = ML.ENERGY runs, moe = EP rows, "
                         "config = Hugging Face config.json, mlperf = MLPerf results")
    ap.add_argument("--goodput-every", type=int, default=50, help="every N-th MLPerf input runs the whole validate-goodput command")
    ap.add_argument("--timeout-s", type=int, default=60, help="per-input limit: a run past it counts as a hang")
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    seeds = [s for s in SEEDS if not (ns.skip_moe and s[0] == "moe") and (not ns.kind or s[0] in ns.kind)]
    counts: Counter[tuple[str, str]] = Counter()
    failures: list[tuple[str, list[str], str]] = []
    slowest = (0.0, "")
    with tempfile.TemporaryDirectory(prefix="fuzz-readers-") as d:
        base = Path(d)
        for i in range(ns.inputs):
            kind, seed_file = rng.choice(seeds)
            tmp = base / f"{i}"
            tmp.mkdir()
            path = tmp / ("config.json" if kind == "config" else seed_file.name)
            make_input(kind, seed_file, rng, path)
            args = command(kind, path, rng, tmp)
            if kind == "mlperf" and i % max(ns.goodput_every, 1):
                args = ["mlperf-read", str(path)]
                outcome, detail, dt = read_mlperf_in_process(path)
            else:
                outcome, detail, dt = run_one(args, tmp, ns.timeout_s)
            counts[(args[0], outcome)] += 1
            if dt > slowest[0]:
                slowest = (dt, " ".join(args))
            if outcome not in ("ok", "error"):
                failures.append((outcome, args, detail))
                if ns.save is not None:
                    ns.save.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, ns.save / f"{i:05d}-{outcome}-{seed_file.name}")
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{ns.inputs} inputs, seed {ns.seed}")
    for (cmd, outcome), n in sorted(counts.items()):
        print(f"  {cmd:22s} {outcome:10s} {n}")
    print(f"slowest: {slowest[0]:.2f} s ({slowest[1]})")
    for outcome, args, detail in failures[:20]:
        print(f"- {outcome}: planner {' '.join(args)}\n    {detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
