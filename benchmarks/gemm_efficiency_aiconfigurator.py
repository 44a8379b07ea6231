"""Sustained GEMM efficiency per device from aiconfigurator's measured kernel tables (issue 25, goodput).

Source: github.com/ai-dynamo/aiconfigurator (Apache-2.0), snapshot ``095f58a5``, tables
``aic-core/src/aiconfigurator_core/systems/data/<system>/gemm/<framework>/<version>/gemm_perf.parquet``
(columns ``device, gemm_dtype, m, n, k, latency`` in ms). A table counts only if its ``device`` column
names the system's own GPU (a table reused from another system would name that one).

Per table and dtype: efficiency of a row = ``2 m n k / latency`` over the catalog device's DENSE peak
(``models/hardware/<id>.yaml``, ``peak_tflops_dense``). Rows kept: the dense catalog models' layer shapes
at tp 1-8 (``4096 <= n <= 57344``, ``4096 <= k <= 28672``) and compute-bound (compute time at the peak
> 2x the datasheet-bandwidth time of weights + activations). Fitted (``scipy.optimize.least_squares``,
``soft_l1``, f_scale 0.05) ``eta(m) = eta_inf m / (m + M_half)``, the row-dependent GEMM efficiency of
``planner/perf/roofline.py``. The per-device factor is ``eta_inf(device) / eta_inf(h100_sxm)`` in the
same framework version and dtype (the calibration's reference device is the H100 SXM).

The measured table ships as ``models/measured/gemm_efficiency_aiconfigurator.csv`` (provenance in
``models/measured/SOURCE.md``); every ``gemm_efficiency_factor`` in ``models/hardware/*.yaml`` is its
TensorRT-LLM 1.3.0rc20 ``factor_vs_h100_sxm`` (``tests/test_gemm_efficiency_factor.py`` holds them equal).

Run::

    python benchmarks/gemm_efficiency_aiconfigurator.py                  # print the shipped table
    git clone https://github.com/ai-dynamo/aiconfigurator AIC && git -C AIC checkout 095f58a5
    PYTHONPATH=. python benchmarks/gemm_efficiency_aiconfigurator.py --repo AIC [--csv out.csv]
                                                                        # measure again, compare with it
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "measured" / "gemm_efficiency_aiconfigurator.csv"
KEY = ["system", "framework", "version", "dtype"]
DATA = "aic-core/src/aiconfigurator_core/systems/data"
# aiconfigurator system -> (catalog device id, the GPU name its tables must carry)
SYSTEMS = {
    "h100_sxm": ("h100-sxm", "H100 80GB HBM3"),
    "h200_sxm": ("h200-sxm", "H200"),
    "b200_sxm": ("b200", "B200"),
    "gb200": ("gb200", "GB200"),
    "l40s": ("l40s", "L40S"),
    "a100_sxm": ("a100-sxm-80gb", "A100"),
    "rtx_pro_6000_server": ("rtx-pro-6000", "RTX PRO 6000"),
    "b300_sxm": ("b300", "B300"),
    "gb300": ("gb300", "GB300"),
}
DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}  # per-tensor fp8; fp8_block / nvfp4 not used by the roofline
N_RANGE = (4096, 57344)
K_RANGE = (4096, 28672)
COMPUTE_BOUND_RATIO = 2.0


def _device(dev_id: str) -> dict:
    return yaml.safe_load((ROOT / "models/hardware" / f"{dev_id}.yaml").read_text())


def _tables(repo: Path, system: str) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", f"HEAD:{DATA}/{system}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    return [p for p in out if p.startswith("gemm/") and p.endswith("gemm_perf.parquet")]


def _read(repo: Path, system: str, path: str) -> pd.DataFrame:
    blob = subprocess.run(
        ["git", "-C", str(repo), "show", f"HEAD:{DATA}/{system}/{path}"], capture_output=True, check=True
    ).stdout
    return pd.read_parquet(io.BytesIO(blob))


def fit_curve(m: np.ndarray, eta: np.ndarray) -> tuple[float, float]:
    """``eta(m) = eta_inf m / (m + M_half)`` by robust least squares; returns (eta_inf, M_half)."""

    def resid(p: np.ndarray) -> np.ndarray:
        return p[0] * m / (m + p[1]) - eta

    r = least_squares(resid, x0=[float(np.median(eta[m >= 2048])) if (m >= 2048).any() else 0.5, 64.0],
                      bounds=([0.0, 0.0], [1.5, 4096.0]), loss="soft_l1", f_scale=0.05)
    return float(r.x[0]), float(r.x[1])


def measure(repo: Path) -> pd.DataFrame:
    rows = []
    for system, (dev_id, gpu_name) in SYSTEMS.items():
        dev = _device(dev_id)
        peaks = dev["peak_tflops_dense"]
        bw = float(dev["memory_bandwidth_gb_per_s"]) * 1e9
        for path in _tables(repo, system):
            _, framework, version, _ = path.split("/")
            df = _read(repo, system, path)
            devices = sorted(set(df["device"].astype(str)))
            own = all(gpu_name.lower() in d.lower() for d in devices)
            for dtype, prec in DTYPES.items():
                if prec not in peaks:
                    continue
                d = df[(df["gemm_dtype"] == dtype)
                       & df["n"].between(*N_RANGE) & df["k"].between(*K_RANGE)]
                if d.empty:
                    continue
                peak = float(peaks[prec]) * 1e12
                b = 1.0 if prec == "fp8" else 2.0
                m, n, k = (d[c].to_numpy(float) for c in ("m", "n", "k"))
                flops = 2 * m * n * k
                t_c = flops / peak
                t_m = (b * (n * k + m * k) + 2 * m * n) / bw
                keep = t_c > COMPUTE_BOUND_RATIO * t_m
                eff = flops / (d["latency"].to_numpy(float) * 1e-3) / peak
                if keep.sum() < 20:
                    continue
                eta_inf, m_half = fit_curve(m[keep], eff[keep])
                big = keep & (m >= 4096)
                rows.append({
                    "system": system, "device": dev_id, "framework": framework, "version": version,
                    "dtype": prec, "measured_on": ";".join(devices), "own_device": own,
                    "rows": int(keep.sum()), "eta_inf": round(eta_inf, 4), "m_half_rows": round(m_half, 1),
                    "median_eff_m_ge_4096": round(float(np.median(eff[big])), 4) if big.any() else float("nan"),
                    "tdp_w": dev.get("tdp_w"),
                })
    out = pd.DataFrame(rows)
    ref = out[out["system"] == "h100_sxm"].set_index(["framework", "version", "dtype"])["eta_inf"]
    out["factor_vs_h100_sxm"] = [
        round(r.eta_inf / ref[(r.framework, r.version, r.dtype)], 3)
        if (r.framework, r.version, r.dtype) in ref.index else float("nan")
        for r in out.itertuples()
    ]
    return out.sort_values(["framework", "version", "dtype", "system"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, help="a clone of github.com/ai-dynamo/aiconfigurator at 095f58a5 (measure again); "
                    "without it the shipped table is printed")
    ap.add_argument("--csv", type=Path)
    a = ap.parse_args(argv)
    shipped = pd.read_csv(SHIPPED, dtype={"version": str})
    if a.repo is None:
        print(f"{SHIPPED.relative_to(ROOT)} (measured from aiconfigurator 095f58a5; --repo to measure again):")
        print(shipped.drop(columns=["measured_on"]).to_string(index=False))
        return 0
    out = measure(a.repo)
    if a.csv:
        out.to_csv(a.csv, index=False)
    print(out.drop(columns=["measured_on"]).to_string(index=False))
    both = out.merge(shipped, on=KEY, how="outer", suffixes=("", "_shipped"), indicator=True)
    moved = both[(both["_merge"] != "both") | ((both["eta_inf"] - both["eta_inf_shipped"]).abs() > 1e-4)]
    print(f"\nagainst {SHIPPED.relative_to(ROOT)}: " + ("the same" if moved.empty else f"{len(moved)} rows differ"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
