"""Length buckets refine by splitting, and refining never raises a representative or the cost
(issue 24 item 0; the rule is in planner.workload.buckets).

- Representatives: over random logs, the bins of ``2k`` buckets nest in those of ``k``, every
  child bucket's (input, output) representative is no larger than its parent's, and at every
  ``k`` the requests longer than their bucket's representative are the same service-wide tail
  set, at most ``2 ((n - 1)(1 - r) + 1) / n`` of the service's ``n`` requests (``2 (1 - r) = 1 %``
  for a large log).
- Cost: a small one-service instance whose traffic is a random log, solved at 2, 4 and 8 buckets
  (no peak simulation, no confidence): each architecture's cost is non-increasing under
  refinement within :data:`REFINE_TOLERANCE` (the optimiser's pools are whole instances and its
  MIP gap is not zero, so equal tables can land a device apart).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.workload.buckets import REPRESENTATIVE_QUANTILE, bin_edges, length_buckets

REFINE_TOLERANCE = 0.01


def _log(seed: int, n: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests with lognormal input and output lengths, log-correlated by ``rho``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((2, n))
    inp = np.round(np.exp(6.5 + 1.2 * z[0]))
    out = np.round(np.exp(4.5 + 0.9 * (rho * z[0] + np.sqrt(1 - rho * rho) * z[1])))
    return np.maximum(inp, 1.0), np.maximum(out, 1.0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), n=st.integers(50, 4000), rho=st.sampled_from([0.0, 0.5, -0.3]), k=st.sampled_from([1, 2, 4, 8]))
def test_refining_nests_bins_and_never_raises_a_representative(seed: int, n: int, rho: float, k: int) -> None:
    inp, out = _log(seed, n, rho)
    coarse, _ = length_buckets(inp, out, k)
    fine, _ = length_buckets(inp, out, 2 * k)
    ec, ef = bin_edges(inp, k), bin_edges(inp, 2 * k)
    assert set(ec.tolist()) <= set(ef.tolist())                       # nested: no coarse edge moves
    wc, wf = np.searchsorted(ec, inp, side="left"), np.searchsorted(ef, inp, side="left")
    parent = {}
    for j in np.unique(wf):
        ps = np.unique(wc[wf == j])
        assert ps.size == 1                                           # each fine bin lies in one coarse bin
        parent[int(j)] = int(ps[0])
    cmap = {j: b for j, b in zip(np.unique(wc).tolist(), coarse, strict=True)}
    fmap = {j: b for j, b in zip(np.unique(wf).tolist(), fine, strict=True)}
    for j, b in fmap.items():
        p = cmap[parent[j]]
        assert b.input_tokens <= p.input_tokens and b.output_tokens <= p.output_tokens, (b, p)
    # per length, values above the interpolated r-quantile: at most (n - 1)(1 - r) + 1 of n
    budget = 2 * ((n - 1) * (1 - REPRESENTATIVE_QUANTILE) + 1) / n
    for which, bks in ((wc, cmap), (wf, fmap)):
        over = np.zeros(n, dtype=bool)
        for j, b in bks.items():
            m = which == j
            over[m] = (inp[m] > b.input_tokens) | (out[m] > b.output_tokens)
        assert over.mean() <= budget + 1e-12


def _instance(tmp: Path, seed: int) -> Path:
    """Llama-3.1-8B on H100 (tp 1), traffic a random 10-minute log at ~4 req/s (azure CSV)."""
    rng = np.random.default_rng(seed)
    n = 2400
    t = np.sort(rng.uniform(0, 600, n))
    inp, out = _log(seed, n, 0.3)
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(t, unit="s")
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": inp.astype(int),
                  "GeneratedTokens": out.astype(int)}).to_csv(tmp / "log.csv", index=False)
    doc: dict[str, Any] = {
        "name": "refine", "services": {"chat": {
            "model": "llama-3.1-8b", "weight_precision": "bf16",
            "slo": {"ttft": {"quantile": 0.99, "target_ms": 3000.0}, "itl": {"quantile": 0.99, "target_ms": 60.0}},
            "traffic": {"trace": "log.csv", "format": "azure", "peak_window": "60s", "buckets": 2, "rate_multiplier": 4.0}}},
        "catalog": {"devices": ["h100-sxm"], "pricing": "rent", "tp_degrees": [1]},
        "costs": {"electricity_usd_per_kwh": 0.1, "pue": 1.2},
        "options": {"architectures": ["shared", "disaggregated"], "verify": False},
    }
    path = tmp / "refine.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _costs(path: Path, buckets: int) -> dict[str, float | None]:
    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    r = load_instance(path, {"services.chat.traffic.buckets": buckets})
    res = solve_instance(r, replace(settings_from_instance(r.instance), confidence="off")).result
    return {a: (p.costs.total_usd_per_month if p.feasible and p.costs else None) for a, p in res.architectures.items()}


@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 1000))
def test_refining_never_raises_the_cost(tmp_path_factory: Any, seed: int) -> None:
    path = _instance(tmp_path_factory.mktemp("r"), seed)
    by_k = {k: _costs(path, k) for k in (2, 4, 8)}
    for a in ("shared", "disaggregated"):
        seq = [by_k[k][a] for k in (2, 4, 8)]
        assert all(c is not None for c in seq), by_k
        for lo, hi in zip(seq, seq[1:], strict=False):
            assert hi <= lo * (1 + REFINE_TOLERANCE), (a, by_k)  # type: ignore[operator]
