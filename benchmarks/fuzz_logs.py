"""Fuzz `planner characterize` with mutated logs (issue 16): every input must end in exit 0 or in
exit 2 with one ``error:`` line; never an internal error (exit 1), a crash or a warning.

Seeds are small slices of the shipped logs (Azure CSV, Mooncake and TraceLab JSON Lines, a generic
CSV with epoch-millisecond times, a generic JSON Lines file, a lengths-only CSV and a ServeGen
pair). Each input applies 1-3 random mutations (a hostile value in one field or a whole column,
lines deleted, duplicated, swapped or shuffled, a truncated file, random bytes, a byte-order mark,
CRLF endings, a deeply nested JSON line, a renamed or missing header, an extra mixed-type field,
timestamps in other forms) and random options (format given or detected, ``--on-bad-row skip``,
``--buckets``, ``--peak-quantile``, ``--out`` into a missing folder). Runs in-process through the
CLI's error boundary, with Python warnings turned into errors.

    python benchmarks/fuzz_logs.py [--inputs 10000] [--seed 0] [--save DIR]

Prints the counts by outcome (and by seed), and the first failing inputs (saved under --save).
``tests/test_workload_fuzz.py`` runs the same generator on a few dozen inputs in CI.
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
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_common import Timeout, time_limit  # noqa: E402  (the campaigns' one time limit)

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "instances" / "traces"
DATA = ROOT / "tests" / "data"

HOSTILE = ["", "nan", "inf", "-inf", "1e400", "-1", "-1e308", "1e308", "1e12", "0", "0.5", "true", "null", "[1, 2]",
           "{\"a\": 1}", "\"123\"", "99999999999999999999999999", "1970-01-01 00:00:01", "2023-11-16T18:15:50Z",
           "2023-11-16 18:15:50+05:30", "9999-12-31 23:59:59", "x" * 300, "\u00e9\u4e2d\U0001f600", "1,2", "\"", "\\x00"]
"""Values put into one field (JSON Lines: as JSON where they parse, else as a string)."""


@dataclass
class Seed:
    name: str
    files: dict[str, bytes]
    main: str
    """The file passed to characterize."""
    fmt: str
    args: list[str] = field(default_factory=list)


def _head(path: Path, lines: int) -> bytes:
    text = path.read_text(encoding="utf-8").splitlines()[:lines]
    return ("\n".join(text) + "\n").encode()


def seeds() -> list[Seed]:
    azure = _head(TRACES / "azure2023_code_min00-20.csv", 41)
    rows = [line.split(",") for line in azure.decode().splitlines()[1:]]
    generic_csv = "ts,prompt,completion,svc\n" + "".join(f"{1_700_000_000_000 + 700 * i},{r[1]},{r[2]},{'ab'[i % 2]}\n" for i, r in enumerate(rows))
    mooncake = _head(TRACES / "mooncake_conversation_min00-15.jsonl", 40)
    generic_jsonl = "".join(json.dumps({"t": 0.25 * i, "in": int(r[1]), "out": int(r[2]), "session": f"s{i % 3}"}) + "\n" for i, r in enumerate(rows))
    lengths = _head(DATA / "sharegpt8k_lengths_rows00001-00200.csv", 41)
    sg = "servegen_reason_deepseek-r1_chunk-48"
    return [
        Seed("azure", {"a.csv": azure}, "a.csv", "azure"),
        Seed("mooncake", {"m.jsonl": mooncake}, "m.jsonl", "mooncake"),
        Seed("tracelab", {"t.jsonl": _head(TRACES / "tracelab_example_claude_session.jsonl", 10)}, "t.jsonl", "tracelab"),
        Seed("generic-csv", {"g.csv": generic_csv.encode()}, "g.csv", "generic", ["--columns", "time=ts,input=prompt,output=completion,service=svc"]),
        Seed("generic-jsonl", {"g.jsonl": generic_jsonl.encode()}, "g.jsonl", "generic", ["--columns", "time=t,input=in,output=out,session=session"]),
        Seed("lengths", {"l.csv": lengths}, "l.csv", "lengths"),
        Seed("servegen", {"c-trace.csv": (DATA / f"{sg}-trace.csv").read_bytes()[:4000].rsplit(b"\n", 1)[0] + b"\n",
                          "c-dataset.json": _servegen_dataset(DATA / f"{sg}-dataset.json")}, "c-trace.csv", "servegen"),
    ]


def _servegen_dataset(path: Path) -> bytes:
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = sorted(data, key=float)[:3]
    return json.dumps({k: data[k] for k in keys}).encode()


# ----------------------------------------------------------------------------- mutations


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _join(lines: list[bytes]) -> bytes:
    return b"\n".join(lines)


def _set_field(data: bytes, rng: random.Random, value: str, whole_column: bool) -> bytes:
    lines = _lines(data)
    body = [i for i, line in enumerate(lines) if line.strip()]
    if not body:
        return data
    if lines[body[0]].lstrip().startswith(b"{"):
        targets = body if whole_column else [rng.choice(body)]
        key = None
        for i in targets:
            try:
                obj = json.loads(lines[i])
            except (ValueError, RecursionError):
                continue
            if not isinstance(obj, dict) or not obj:
                continue
            key = key if key is not None and key in obj else rng.choice(sorted(obj))
            try:
                obj[key] = json.loads(value)
            except ValueError:
                obj[key] = value
            lines[i] = json.dumps(obj).encode()
        return _join(lines)
    cells = [line.split(b",") for line in lines]
    width = max(len(c) for c in cells)
    col = rng.randrange(width)
    targets = body[1:] if whole_column else [rng.choice(body)]
    for i in targets:
        if col < len(cells[i]):
            cells[i][col] = value.encode("utf-8", "replace")
    return _join([b",".join(c) for c in cells])


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random mutation of a file's bytes."""
    kind = rng.randrange(16)
    lines = _lines(data)
    if kind in (0, 1, 2):
        return _set_field(data, rng, rng.choice(HOSTILE), whole_column=kind == 2)
    if kind == 3 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
        return _join(lines)
    if kind == 4 and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return _join(lines)
    if kind == 5 and len(lines) > 2:
        head, body = lines[:1], lines[1:]
        rng.shuffle(body)
        return _join(head + body)
    if kind == 6 and data:
        return data[: rng.randrange(len(data))]
    if kind == 7:
        pos = rng.randrange(len(data) + 1)
        return data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) + data[pos:]
    if kind == 8:
        return b"\xef\xbb\xbf" + data
    if kind == 9:
        return data.replace(b"\n", b"\r\n")
    if kind == 10:
        depth = rng.choice([10, 70, 1000, 60_000])
        opener, closer = rng.choice([(b'{"a":', b"}"), (b"[", b"]")])
        line = opener * depth + b"1" + closer * depth
        if opener == b"[":
            line = b'{"timestamp": 1, "input_length": ' + line + b', "output_length": 2, "input_tokens_total": 3, "output_tokens": 1}'
        lines.insert(rng.randrange(len(lines) + 1), line)
        return _join(lines)
    if kind == 11 and lines:
        return _join(lines[1:])  # header (or first row) gone
    if kind == 12 and lines:
        lines[0] = lines[0].replace(b"Tokens", b"Tokenz").replace(b"length", b"lenght")
        return _join(lines)
    if kind == 13:
        return b"" if rng.random() < 0.5 else _join(lines[:1]) + b"\n"
    if kind == 14:  # an extra field of mixed types
        out = []
        for i, line in enumerate(lines):
            if line.lstrip().startswith(b"{") and line.rstrip().endswith(b"}"):
                extra = json.dumps(rng.choice([1, "x", [1, 2], {"k": None}, True, 1.5]))
                line = line.rstrip()[:-1] + b', "extra_' + str(i % 2).encode() + b'": ' + extra.encode() + b"}"
            out.append(line)
        return _join(out)
    return _set_field(data, rng, rng.choice(["1970-01-01T00:00:00Z", "1700000000123", "2023-11-16 18:15:50.0000000+00:00", "0"]), whole_column=False)


@dataclass
class Case:
    seed: str
    files: dict[str, bytes]
    args: list[str]
    """Command-line arguments; ``{dir}`` stands for the folder the files are written to."""


def make_case(seed: Seed, rng: random.Random) -> Case:
    files = dict(seed.files)
    target = rng.choice(sorted(files))
    for _ in range(rng.randint(1, 3)):
        files[target] = mutate(files[target], rng)
    args = ["{dir}/" + seed.main]
    if rng.random() < 0.7:
        args += ["--format", seed.fmt]
    args += seed.args
    if rng.random() < 0.4:
        args += ["--on-bad-row", "skip"]
    if rng.random() < 0.2:
        args += ["--buckets", str(rng.choice([0, 1, 3, 7, 50]))]
    if rng.random() < 0.1:
        args += ["--peak-quantile", str(rng.choice([0.0, 0.5, 0.999, 1.5]))]
    if rng.random() < 0.2:
        args += ["--out", "{dir}/missing/folder/profile.yaml"]
    if rng.random() < 0.5:
        args.append("--json")
    return Case(seed.name, files, args)


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def silently_wrong(case: Case, stdout: str, folder: Path) -> str:
    """A reason when an exit-0 ``--json`` answer cannot be right ('' when it passes every oracle).

    Oracles: the request count is at least 1 and at most the file's non-empty lines (a ServeGen
    trace is aggregated: not bounded by its lines); bucket weights are positive and sum to 1;
    every number is finite and non-negative; the token statistics are ordered
    ``p50 ≤ p90 ≤ p99 ≤ max`` and ``mean ≤ max``; each window's peak rate is at least its quantile
    rate; every bucket's mean lengths are within the log's maximum (unless a note says a mean below one
    token was raised to 1).
    """
    top = json.loads(stdout)
    docs = list(top["services"].values()) if isinstance(top.get("services"), dict) else [top]
    total = 0
    for doc in docs:
        n = doc.get("requests")
        if not _finite(n) or n < 1:
            return f"requests = {n}"
        total += n
        why = _wrong_profile(doc)
        if why:
            return f"{doc.get('service')}: {why}"
    if case.seed != "servegen":
        lines = sum(1 for ln in (folder / case.args[0].split("/")[-1]).read_bytes().splitlines() if ln.strip())
        if total > lines:
            return f"{total} requests from a file of {lines} non-empty lines"
    return ""


def _wrong_profile(doc: dict[str, object]) -> str:
    nums: list[tuple[str, object]] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            nums.append((path, node))

    walk({k: v for k, v in doc.items() if k != "schema_version"}, "")
    for path, v in nums:
        if not _finite(v) or float(v) < 0:  # type: ignore[arg-type]
            return f"{path} = {v}"
    buckets: list[dict[str, object]] = doc.get("buckets") or []  # type: ignore[assignment]
    if buckets:
        w = [b.get("weight") for b in buckets]
        if any(not _finite(x) or x <= 0 for x in w) or abs(sum(w) - 1.0) > 1e-6:
            return f"bucket weights {w}"
    for key in ("input_tokens", "output_tokens"):
        t = doc.get(key) or {}
        qs = [t.get(q) for q in ("p50", "p90", "p99", "max")]
        if all(_finite(x) for x in qs) and any(a > b * (1 + 1e-9) + 1e-9 for a, b in zip(qs, qs[1:], strict=False)):
            return f"{key} quantiles out of order {qs}"
        if _finite(t.get("mean")) and _finite(t.get("max")) and t["mean"] > t["max"] * (1 + 1e-9) + 1e-9:
            return f"{key} mean {t['mean']} above max {t['max']}"
        for b in buckets:
            m = b.get(f"{key}_mean")
            raised = any(f"{b.get('name')}: {key.split('_')[0]} mean" in str(n) and "raised to" in str(n) for n in doc.get("notes") or [])  # type: ignore[union-attr]
            if _finite(m) and _finite(t.get("max")) and m > t["max"] * (1 + 1e-9) + 1e-9 and not raised:  # clamped to 1 token, with a note
                return f"bucket {b.get('name')} {key}_mean {m} above the log's max {t['max']}"
    peaks, quants = doc.get("arrival_rate_peak_per_s") or {}, doc.get("arrival_rate_quantile_per_s") or {}
    for win, pk in peaks.items():
        q = quants.get(win)
        if _finite(pk) and _finite(q) and q > pk * (1 + 1e-9) + 1e-9:
            return f"window {win}: quantile rate {q} above peak {pk}"
    return ""



def run_case(case: Case, folder: Path, timeout_s: int = 60) -> tuple[str, str]:
    """:func:`_run_case` under a per-input alarm: ``hang`` when it runs past ``timeout_s``."""
    try:
        with time_limit(timeout_s):
            return _run_case(case, folder)
    except Timeout:
        return "hang", f"over {timeout_s} s"


def _run_case(case: Case, folder: Path) -> tuple[str, str]:
    """(outcome, detail): ``ok`` (exit 0), ``bad_input`` (exit 2, one error line) or a failure class."""
    from click.testing import CliRunner

    from planner.cli import main
    from planner.workload.characterize import characterize_file

    characterize_file.cache_clear()  # type: ignore[attr-defined]
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    args = [a.replace("{dir}", str(folder)) for a in case.args]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = CliRunner().invoke(main, ["characterize", *args])
    err = res.stderr
    if res.exit_code == 0:
        if "Warning" in err:
            return "warning_text", err[-300:]
        why = silently_wrong(case, res.stdout, folder) if "--json" in args else ""
        return ("wrong", why) if why else ("ok", err[-300:])
    if res.exit_code == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        return ("bad_input" if len(errors) == 1 else "bad_input_unclear"), err[-300:]
    if res.exit_code == 1 and "internal error" in err:
        return "internal_error", err[-500:]
    return f"exit_{res.exit_code}", (err or repr(res.exception))[-500:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", type=Path, help="Write the first failing inputs here.")
    opts = ap.parse_args()
    rng = random.Random(opts.seed)
    pool = seeds()
    outcomes: Counter[str] = Counter()
    by_seed: Counter[tuple[str, str]] = Counter()
    failures: list[tuple[Case, str, str]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.inputs):
            case = make_case(rng.choice(pool), rng)
            folder = Path(tmp) / f"c{i % 4}"
            shutil.rmtree(folder, ignore_errors=True)
            outcome, detail = run_case(case, folder)
            outcomes[outcome] += 1
            by_seed[(case.seed, outcome)] += 1
            if outcome not in ("ok", "bad_input"):
                failures.append((case, outcome, detail))
    wall = time.perf_counter() - t0
    print(f"{opts.inputs:,} log inputs in {wall:.0f} s (seed {opts.seed})")
    for outcome, count in sorted(outcomes.items()):
        print(f"  {outcome:<18} {count:>7,}")
    print("by seed:")
    for (seed, outcome), count in sorted(by_seed.items()):
        print(f"  {seed:<14} {outcome:<18} {count:>6,}")
    for case, outcome, detail in failures[:10]:
        print(f"FAIL {outcome} {case.seed} {case.args}: {detail.strip()[-300:]}")
    if opts.save and failures:
        for n, (case, _, _) in enumerate(failures[:20]):
            folder = opts.save / f"fail{n}"
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in case.files.items():
                (folder / name).write_bytes(data)
            (folder / "args.json").write_text(json.dumps(case.args), encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
