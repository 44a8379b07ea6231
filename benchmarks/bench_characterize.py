"""Scale benchmark: characterise a 10-million-row Azure-format log.

Generates the log in a temporary directory by resampling (input, output) rows of the
shipped Azure samples with Poisson arrivals at 50 req/s (about 56 hours), then runs
``characterize_path`` in a *separate process* and prints its wall time and peak RSS
(``ru_maxrss`` of the child), against the targets of issue 4: <= 30 s and <= 3 GB.

    python benchmarks/bench_characterize.py [--rows 10000000] [--repeat 1]

Timestamps are written by pyarrow as ``YYYY-MM-DD HH:MM:SS.fffffffff`` (9 fractional
digits, the original has 7); the reader is the same.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [ROOT / "instances/traces/azure2023_conv_min00-20.csv", ROOT / "instances/traces/azure2023_code_min00-20.csv"]

CHILD = """
import sys, time, resource
t0 = time.perf_counter()
from planner.workload.characterize import characterize_path
res = characterize_path(sys.argv[1], buckets=4)
c = res["default"]
wall = time.perf_counter() - t0
rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
print(f"{wall:.3f} {rss_gb:.3f} {c.requests} {c.arrivals.rate_peak_per_s['60s']:.3f} {c.input_tokens.p99:.1f}")
"""


def generate(path: Path, rows: int, rate_per_s: float = 50.0, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    ins, outs = [], []
    for s in SAMPLES:
        t = pcsv.read_csv(s)
        ins.append(t.column("ContextTokens").to_numpy())
        outs.append(t.column("GeneratedTokens").to_numpy())
    inp, out = np.concatenate(ins), np.concatenate(outs)
    pick = rng.integers(0, len(inp), rows)
    gaps_ns = rng.exponential(1e9 / rate_per_s, rows).astype(np.int64)
    ts = np.datetime64("2023-11-16T18:00:00", "ns") + np.cumsum(gaps_ns).astype("timedelta64[ns]")
    table = pa.table({"TIMESTAMP": pa.array(ts, pa.timestamp("ns")), "ContextTokens": inp[pick], "GeneratedTokens": out[pick]})
    pcsv.write_csv(table, path, write_options=pcsv.WriteOptions(quoting_style="none"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "azure_big.csv"
        t0 = time.perf_counter()
        generate(path, args.rows)
        print(f"generated {args.rows:,} rows ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        walls, rss = [], []
        for _ in range(args.repeat):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(proc.stderr)
            out = proc.stdout.split()
            walls.append(float(out[0]))
            rss.append(float(out[1]))
            print(f"  run: wall {out[0]} s, peak RSS {out[1]} GB, requests {int(out[2]):,}, 60s peak {out[3]}/s, input p99 {out[4]}")
        wall, peak = statistics.median(walls), max(rss)
        child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9
        print(f"median wall {wall:.2f} s (target <= 30 s, ratio {wall / 30:.2f}); peak RSS {peak:.2f} GB (target <= 3 GB, ratio {peak / 3:.2f}; children max {child_rss:.2f} GB)")


if __name__ == "__main__":
    main()
