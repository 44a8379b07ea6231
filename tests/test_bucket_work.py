"""Buckets pay their mean work, so cost does not depend on the bucket count (issue 24 item 0;
planner.capacity.bucket_work / mix_work, planner.workload.buckets item 5).

- Work: over random logs, a service's work per request on one configuration and role,
  ``sum_b w_b tau_b`` over its buckets, is the same at 4, 8 and 16 buckets (the fine sub-bins a
  bucket's work is priced from are the same at every count that divides 32), and no more than the
  representatives' pricing it replaces (every request at its bucket's longest).
- Cost: a small one-service instance on a random log, solved at ``k`` and ``2k`` buckets (no peak
  simulation, no confidence): each architecture's cost within :data:`SPREAD_TOLERANCE` of each other.
  Before (work at the representatives) coarse buckets paid for their whole top bucket as if it were
  the service's 99.5th-percentile request.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from test_bucket_refinement import (
    _log,  # the same random lognormal log as the refinement property tests
)

SPREAD_TOLERANCE = 0.05
WORK_TOLERANCE = {"prefill": 0.01, "decode": 0.01, "unified": 0.05}
"""Prefill and decode work are the fine sub-bins' at every count (floating point apart). A unified point
holds its bucket's representative prompt's TTFT, so each bucket's batch and chunk can differ (a 2.4 %
spread of the service's unified work at 4 / 8 / 16 buckets on one random log): within 5 %."""
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
"""Each example builds capacity tables or solves: shrinking a failure would take minutes."""


def _instance(tmp: Path, seed: int, n: int, rho: float) -> Path:
    """Llama-3.1-8B on H100 (tp 1), traffic a random 10-minute log at ~4 req/s (azure CSV)."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 600, n))
    inp, out = _log(seed, n, rho)
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(t, unit="s")
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": inp.astype(int),
                  "GeneratedTokens": out.astype(int)}).to_csv(tmp / "log.csv", index=False)
    doc: dict[str, Any] = {
        "name": "bucket-work", "services": {"chat": {
            "model": "llama-3.1-8b", "weight_precision": "bf16",
            "slo": {"ttft": {"quantile": 0.99, "target_ms": 3000.0}, "itl": {"quantile": 0.99, "target_ms": 60.0}},
            "traffic": {"trace": "log.csv", "format": "azure", "peak_window": "60s", "buckets": 4,
                        "rate_multiplier": 2400.0 / n}}},
        "catalog": {"devices": ["h100-sxm"], "pricing": "rent", "tp_degrees": [1]},
        "costs": {"electricity_usd_per_kwh": 0.1, "pue": 1.2},
        "options": {"architectures": ["shared", "disaggregated"], "verify": False},
    }
    path = tmp / "bucket-work.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _work(path: Path, buckets: int, capped: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """Per role: the service's work per request ``sum_b w_b tau_b`` (every point feasible), and the
    instances it needs at peak when all of it is routed to that role's one configuration,
    ``sum_b lambda_b tau_b / rho_b`` (prepare's ``load_peak_coef``: work over the utilisation cap)."""
    from planner.capacity import LENGTH_MIX_COLUMN, build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare

    r = load_instance(path, {"services.chat.traffic.buckets": buckets})
    tables = build_capacity_tables(r)
    assert (tables.demand[LENGTH_MIX_COLUMN].str.len() > 0).all()  # a log's buckets carry their mix
    pts = tables.points.merge(tables.demand[["bucket", "weight"]], on="bucket")
    out: dict[str, float] = {}
    for role, g in pts.groupby("role"):
        assert g["feasible"].all(), g[["bucket", "reason"]]
        out[str(role)] = float((g["weight"] * g["instance_seconds_per_request"]).sum())
    if not capped:
        return out, {}
    prepared = prepare(tables).points
    assert len(prepared) == len(pts)  # every point keeps a positive cap
    return out, {str(k): float(v) for k, v in prepared.groupby("role")["load_peak_coef"].sum().items()}


@settings(max_examples=6, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(seed=st.integers(0, 10_000), n=st.integers(300, 3000), rho=st.sampled_from([0.0, 0.5, -0.3]))
def test_service_work_does_not_depend_on_the_bucket_count(tmp_path_factory: Any, seed: int, n: int, rho: float) -> None:
    path = _instance(tmp_path_factory.mktemp("w"), seed, n, rho)
    by_k = {k: _work(path, k)[0] for k in (4, 8, 16)}
    for role in ("prefill", "decode", "unified"):
        seq = [by_k[k][role] for k in (4, 8, 16)]
        assert max(seq) <= min(seq) * (1 + WORK_TOLERANCE[role]), (role, by_k)


@settings(max_examples=2, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(seed=st.integers(0, 10_000), n=st.integers(600, 3000), rho=st.sampled_from([0.0, 0.5, -0.3]))
def test_capped_load_does_not_depend_on_the_bucket_count(tmp_path_factory: Any, seed: int, n: int, rho: float) -> None:
    """Work over the utilisation cap (prepare's ``load_peak_coef``, the coefficient the optimiser sizes pools
    with) at 4, 8 and 16 buckets. The caps queue each bucket's latency group (prepare.group_busy,
    group_service, group_point) at its group's representative, so they are the 4-bucket caps. Before, each
    bucket's queue and TTFT budget were its own and the capped load moved with the count
    (long-context-assistant's prefill caps: 0.74-0.80 at 4 buckets, 0.47-0.53 at 8)."""
    path = _instance(tmp_path_factory.mktemp("l"), seed, n, rho)
    by_k = {k: _work(path, k, capped=True)[1] for k in (4, 8, 16)}
    for role in ("prefill", "decode", "unified"):
        capped = [by_k[k][role] for k in (4, 8, 16)]
        # the work's own spread, plus 1 %: the fine sub-bins' rounding of a group's mixture
        assert max(capped) <= min(capped) * (1 + WORK_TOLERANCE[role] + 0.01), (role, by_k)


def test_bucket_work_is_the_mix_not_the_representative(tmp_path: Path) -> None:
    """At 4 buckets the decode work per request is the mix's mean output's, well below every request
    at its bucket's representative output (the pricing before: a lognormal log's top bucket holds
    outputs up to the service's 99.5th percentile)."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    path = _instance(tmp_path, 7, 2400, 0.3)
    tables = build_capacity_tables(load_instance(path, {"services.chat.traffic.buckets": 4}))
    d = tables.demand.set_index("bucket")
    dec = tables.points[tables.points["role"] == "decode"].set_index("bucket")["instance_seconds_per_request"]
    w = d["weight"]
    mean_out = float((w * d["output_tokens_mean"]).sum())
    rep_out = float((w * d["output_tokens_rep"]).sum())
    assert rep_out > 2 * mean_out
    # tau_b = tau_s E_b[o] / o_s: per output token the same for every bucket, so the service's work is its mean output's
    per_token = dec / d["output_tokens_mean"]
    assert float(per_token.max()) <= float(per_token.min()) * (1 + WORK_TOLERANCE["decode"])


def _costs(path: Path, buckets: int) -> dict[str, float | None]:
    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    r = load_instance(path, {"services.chat.traffic.buckets": buckets})
    res = solve_instance(r, replace(settings_from_instance(r.instance), confidence="off")).result
    return {a: (p.costs.total_usd_per_month if p.feasible and p.costs else None) for a, p in res.architectures.items()}


@settings(max_examples=2, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(seed=st.integers(0, 1000), rho=st.sampled_from([0.0, 0.5]))
def test_cost_at_k_and_2k_buckets_within_five_percent(tmp_path_factory: Any, seed: int, rho: float) -> None:
    path = _instance(tmp_path_factory.mktemp("c"), seed, 2400, rho)
    by_k = {k: _costs(path, k) for k in (4, 8, 16)}
    for a in ("shared", "disaggregated"):
        seq = [by_k[k][a] for k in (4, 8, 16)]
        assert all(c is not None for c in seq), by_k
        for lo, hi in zip(seq, seq[1:], strict=False):
            assert abs(hi - lo) <= SPREAD_TOLERANCE * min(hi, lo), (a, by_k)  # type: ignore[operator]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), n=st.integers(50, 4000), rho=st.sampled_from([0.0, 0.5, -0.3]), k=st.sampled_from([8, 16]))
def test_latency_representatives_are_the_four_bucket_ones(seed: int, n: int, rho: float, k: int) -> None:
    """Latency groups (planner.workload.buckets item 6): at 8 and 16 buckets every bucket's (input, output)
    representative is that of the 4-bucket bin it nests in, so each request is held to its latency target
    at the same length at every count, while its length mix (work) is its own."""
    from planner.workload.buckets import LATENCY_GROUPS, bin_edges, length_buckets

    inp, out = _log(seed, n, rho)
    coarse, _ = length_buckets(inp, out, LATENCY_GROUPS)
    fine, _ = length_buckets(inp, out, k)
    ec, ef = bin_edges(inp, LATENCY_GROUPS), bin_edges(inp, k)
    wc, wf = np.searchsorted(ec, inp, side="left"), np.searchsorted(ef, inp, side="left")
    cmap = dict(zip(np.unique(wc).tolist(), coarse, strict=True))
    for j, b in zip(np.unique(wf).tolist(), fine, strict=True):
        parent = cmap[int(np.unique(wc[wf == j])[0])]
        assert (b.input_tokens, b.output_tokens) == (parent.input_tokens, parent.output_tokens), (b, parent)
    assert {b.length_mix[0][1] for b in fine} != {b.length_mix[0][1] for b in coarse} or len(fine) == len(coarse)



def test_unified_work_takes_the_max_per_sub_bin_by_hand() -> None:
    """A unified point's time per request is max(slot time, lane time) per fine sub-bin, summed by share
    (planner.capacity.bucket_work): a bucket of one short, slot-bound and one long, lane-bound sub-bin pays
    each its own bound, not the max at the bucket's mean lengths (which hides the long prompt's lane time)."""
    from types import SimpleNamespace

    from planner.capacity import bucket_work

    # step 10 ms with a chunk, 5 ms decode-only; chunk q = 1,000 tokens; batch 10; no speculation
    op = SimpleNamespace(feasible=True, instance_seconds_per_request=1.0, energy_j_per_request=100.0,
                         kv_bytes_per_request=1e6, max_batch=10,
                         detail={"decode_only_step_ms": 5.0, "step_ms": 10.0, "prefill_chunk_tokens": 1000.0})
    mix = [(0.5, 100.0, 200.0), (0.5, 9_000.0, 20.0)]  # (share, input tokens, output tokens)
    # slot a = o 0.005 / 10 + n 0.005 / 1000; lane c = n 0.01 / 1000
    a1, c1 = 200 * 0.0005 + 100 * 5e-6, 100 * 1e-5      # 0.1005 s, 0.001 s: slot-bound
    a2, c2 = 20 * 0.0005 + 9_000 * 5e-6, 9_000 * 1e-5    # 0.055 s, 0.09 s: lane-bound
    got = bucket_work(op, "unified", (4_550.0, 110.0), mix, 0.0)
    assert got["instance_seconds_per_request"] == pytest.approx(0.5 * max(a1, c1) + 0.5 * max(a2, c2), rel=1e-12)
    at_mean = bucket_work(op, "unified", (4_550.0, 110.0), [(1.0, 4_550.0, 110.0)], 0.0)  # one sub-bin at the means
    assert at_mean["instance_seconds_per_request"] == pytest.approx(max(110 * 0.0005 + 4_550 * 5e-6, 4_550 * 1e-5), rel=1e-12)
    assert got["instance_seconds_per_request"] > at_mean["instance_seconds_per_request"]  # 0.09525 > 0.0775
    # the lane part and the prompt tokens stay linear: the bucket's means
    assert got["lane_service_ms"] == pytest.approx(1e3 * 4_550 * 1e-5) and got["prefill_tokens"] == pytest.approx(4_550.0)


def test_code_completion_unified_work_is_one_figure_at_4_8_16_buckets() -> None:
    """code-completion-8b's tp4 shared point: the service's work per request ``sum_b w_b tau_b`` is the same at
    4, 8 and 16 buckets (to floating point). Before the max per sub-bin: 0.02469 s at 4 buckets against
    0.02493 s at 8 and 16, a device of its shared plan."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    root = Path(__file__).resolve().parent.parent
    work = []
    for k in (4, 8, 16):
        t = build_capacity_tables(load_instance(root / "instances" / "code-completion-8b.yaml", {"services.code.traffic.buckets": k}))
        u = t.points[(t.points["role"] == "unified") & (t.points["config"] == "h100-sxm/tp4")]
        w = u["bucket"].map(t.demand.set_index("bucket")["weight"])
        work.append(float((w * u["instance_seconds_per_request"]).sum() / w.sum()))
    assert max(work) - min(work) <= 1e-9 * max(work), work
    assert work[0] == pytest.approx(0.024932, abs=2e-6)


def test_the_distinct_bins_note_counts_the_buckets_made() -> None:
    """50 requests of one length asked for 4 buckets give one bucket, and the note says 1 (it said 2: the
    edges + 1, before the empty bins went)."""
    import numpy as np

    from planner.workload.buckets import length_buckets

    buckets, notes = length_buckets(np.full(50, 100.0), np.full(50, 20.0), 4)
    assert len(buckets) == 1
    assert any("only 1 distinct bin exists" in n for n in notes), notes
    two, notes2 = length_buckets(np.r_[np.full(25, 100.0), np.full(25, 900.0)], np.full(50, 20.0), 4)
    assert len(two) == 2 and any("only 2 distinct bins exist" in n for n in notes2), notes2
