"""The TTFT quantile of a length mixture (planner.ttft_mixture; issue 24 item 0): hand-solvable cases,
never stricter than the representative rule, the input tail counted as misses, and bucket-count invariance."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity import ttft_mix_text
from planner.queueing import (
    UTILIZATION_CEILING,
    max_utilization,
    wait_quantile_s,
    wait_tail_probability,
)
from planner.ttft_mixture import (
    mixture_caps,
    mixture_quantile_ms,
    parse_mix,
    queue_tail_params,
    wait_tail,
)


def test_tail_params_match_the_queueing_tail() -> None:
    """(C, θ) reproduce planner.queueing.wait_tail_probability at any t (the form every cap uses)."""
    c, lam, s, cs, ca = 4.0, 3.0, 1.0, 0.5, 1.2
    pw, theta = queue_tail_params(np.array([c]), np.array([lam]), np.array([s]), np.array([cs]), np.array([ca]))
    for t in (0.0, 0.1, 0.7, 2.5):
        assert float(wait_tail(np.array([t]), pw, theta)[0]) == pytest.approx(wait_tail_probability(t, lam, 4, s, cs, ca), rel=1e-9)
    assert float(wait_tail(np.array([-0.01]), pw, theta)[0]) == 1.0


def test_one_class_mixture_is_the_representative_rule() -> None:
    """A mix of one sub-bin at the representative's TTFT: quantile t + W_q, cap = max_utilization's."""
    c, s, q, cv = 3.0, 0.4, 0.99, 1.0
    t_ms, target_ms = 300.0, 900.0
    cap = mixture_caps(np.array([c]), np.array([s]), np.array([0.0]), np.array([cv]), np.array([q]), np.array([target_ms / 1e3]),
                       [(np.array([1.0]), np.array([t_ms / 1e3]))], ceiling=UTILIZATION_CEILING)[0]
    ref = max_utilization(3, s, q, (target_ms - t_ms) / 1e3, service_cv=0.0, arrival_cv=cv)
    assert cap == pytest.approx(ref, abs=2e-6)
    lam = 0.8 * c / s
    pw, theta = queue_tail_params(np.array([c]), np.array([lam]), np.array([s]), np.array([0.0]), np.array([cv]))
    x = mixture_quantile_ms(q, np.array([1.0]), np.array([t_ms]), pw, theta / 1e3, upper_ms=1e6)
    assert x == pytest.approx(t_ms + 1e3 * wait_quantile_s(q, lam, 3, s, 0.0, cv), abs=0.02)


def test_two_class_quantile_by_hand() -> None:
    """M/M/1-like tail C e^{-θt} with C = 0.5, θ = 1/ms: requests at 0 and 10 ms, half each.
    m(X) = 0.5 (0.5 e^{-X}) + 0.5 (0.5 e^{-(X-10)}) for X ≥ 10; = 0.01 at X = 10 + ln(25 (1 + e^{-10}))."""
    x = mixture_quantile_ms(0.99, np.array([0.5, 0.5]), np.array([0.0, 10.0]), np.array([0.5, 0.5]), np.array([1.0, 1.0]),
                            upper_ms=100.0, tolerance_ms=1e-6)
    assert x == pytest.approx(10.0 + math.log(25.0 * (1.0 + math.exp(-10.0))), abs=1e-5)
    # the representative rule: 10 + W_0.99 = 10 + ln(0.5 / 0.01) = 10 + ln 50
    assert x < 10.0 + math.log(50.0)


def test_the_input_tail_counts_as_misses() -> None:
    """An entry at inf TTFT is a certain miss: 2 % of tail against a 1 % budget leaves the representative's figure
    (upper) and no mixture cap; 0.5 % leaves half the budget to the queue."""
    mix = parse_mix(ttft_mix_text(np.array([0.5, 0.5]), [100.0, 200.0], 0.02))
    assert mix is not None and math.isinf(float(mix[1][-1])) and float(mix[0][-1]) == pytest.approx(0.02)
    assert float(mix[0].sum()) == pytest.approx(1.0)
    x = mixture_quantile_ms(0.99, mix[0], mix[1], np.full(3, 0.3), np.full(3, 0.01), upper_ms=777.0)
    assert x == 777.0
    cap = mixture_caps(np.array([2.0]), np.array([0.1]), np.array([0.0]), np.array([1.0]), np.array([0.99]), np.array([1.0]),
                       [(mix[0], mix[1] / 1e3)], ceiling=UTILIZATION_CEILING)[0]
    assert cap == 0.0
    half = parse_mix(ttft_mix_text(np.array([1.0]), [100.0], 0.005))
    assert half is not None
    cap_half = mixture_caps(np.array([2.0]), np.array([0.1]), np.array([0.0]), np.array([1.0]), np.array([0.99]), np.array([1.0]),
                            [(half[0], half[1] / 1e3)], ceiling=UTILIZATION_CEILING)[0]
    # the queue may miss 0.5 % of the remaining 99.5 %: the cap of a 0.995-quantile-ish budget, below the 0.99 one
    ref_99 = max_utilization(2, 0.1, 0.99, 0.9, service_cv=0.0, arrival_cv=1.0)
    assert 0.0 < cap_half < ref_99


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(1.0, 900.0)), min_size=1, max_size=8),
       st.integers(1, 40), st.floats(0.01, 2.0), st.floats(0.0, 2.0), st.floats(0.2, 3.0), st.sampled_from([0.9, 0.95, 0.99]))
def test_never_stricter_than_the_representative(subs: list[tuple[float, float]], c: int, s: float, cs: float, ca: float,
                                                q: float) -> None:
    """Every sub-bin no slower than the representative (the slowest): the mixture's cap is at least the
    representative rule's and its quantile at most t_rep + W_q."""
    v = np.array([a for a, _t in subs])
    v = v / v.sum()
    t_ms = np.array([b for _a, b in subs])
    t_rep, target = float(t_ms.max()), 1000.0
    cap = mixture_caps(np.array([float(c)]), np.array([s]), np.array([cs]), np.array([ca]), np.array([q]), np.array([target / 1e3]),
                       [(v, t_ms / 1e3)], ceiling=UTILIZATION_CEILING)[0]
    ref = max_utilization(c, s, q, (target - t_rep) / 1e3, service_cv=cs, arrival_cv=ca)
    assert cap >= ref - 2e-6
    lam = 0.7 * c / s
    pw, theta = queue_tail_params(np.array([float(c)]), np.array([lam]), np.array([s]), np.array([cs]), np.array([ca]))
    upper = t_rep + 1e3 * wait_quantile_s(q, lam, c, s, cs, ca)
    x = mixture_quantile_ms(q, v, t_ms, np.full(len(v), pw[0]), np.full(len(v), theta[0] / 1e3), upper_ms=upper)
    assert x <= upper + 1e-9
    # and the mixture at x holds the budget
    assert float(np.dot(v, wait_tail((x - t_ms) / 1e3, pw[0], theta[0]))) <= (1 - q) * (1 + 1e-6) or x == upper


def test_parse_mix_refuses_malformed_cells() -> None:
    assert parse_mix("") is None and parse_mix(float("nan")) is None and parse_mix("[[1, NaN]]") is None
    assert parse_mix("not json") is None and parse_mix("[[-1, 3]]") is None and parse_mix("[[0, 3]]") is None
    ok = parse_mix("[[2, 3], [2, 5]]")
    assert ok is not None and ok[0].tolist() == [0.5, 0.5]
    # a negative TTFT (no prompt is served before it arrives) and shares whose sum overflows
    assert parse_mix("[[1, -1e9]]") is None
    big = parse_mix("[[1e308, 100], [1e308, 3000]]")
    assert big is not None and big[0].tolist() == [0.5, 0.5]


def _prefill_caps(buckets: int, *, mix: bool = True) -> pd.DataFrame:
    """code-completion-8b's prefill caps at ``buckets`` length buckets (with or without the TTFT mix)."""
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.schema.capacity import LATENCY_GROUP_COLUMN, TTFT_MIX_COLUMN, CapacityTables

    tables = build_capacity_tables(load_instance(EXAMPLES / "code-completion-8b.yaml", {"services.code.traffic.buckets": buckets}))
    if not mix:
        tables = CapacityTables(demand=tables.demand, points=tables.points.assign(**{TTFT_MIX_COLUMN: ""}), configs=tables.configs,
                                costs=tables.costs, meta=tables.meta, agents=tables.agents)
    pts = prepare(tables).points
    pts = pts[pts["role"] == "prefill"]
    return pts[["bucket", LATENCY_GROUP_COLUMN, "config", "rho", "ttft_ms"]].reset_index(drop=True)


EXAMPLES = Path(__file__).resolve().parents[1] / "instances"


def test_example_prefill_caps_hold_the_group_mix_at_every_bucket_count() -> None:
    """On a log's buckets: every prefill cap is at least the representative rule's, some strictly (the mixture is
    in use), and a latency group's cap is one figure at 4 and at 8 buckets (the same fine sub-bins)."""
    at4, at8, rep4 = _prefill_caps(4), _prefill_caps(8), _prefill_caps(4, mix=False)
    assert len(at4) == len(rep4) and (at4["rho"].to_numpy() >= rep4["rho"].to_numpy() - 1e-9).all()
    assert (at4["rho"].to_numpy() > rep4["rho"].to_numpy() + 1e-3).any()
    four = at4.groupby(["latency_group", "config"])["rho"].first()
    for (group, config), g in at8.groupby(["latency_group", "config"]):
        assert g["rho"].to_numpy() == pytest.approx(float(four.loc[(group, config)]), abs=2e-6)


def test_a_solved_disaggregated_plan_reports_the_mixture_quantile() -> None:
    """long-context-assistant's disaggregated plan (prefill queues that wait): the TTFT it reports is the group
    mix's quantile, below the representative rule's figure for the same pools (bucket_latency without pool rows)
    in some bucket, above it in none. (Where a queue hardly waits, a sub-bin holding more than 1 − q of its group
    sets the quantile at its own TTFT, and the two agree.)"""
    from planner.instance import load_instance
    from planner.optimize.settings import SolveSettings
    from planner.pool_latency import bucket_latency, plan_shares, pool_latency
    from planner.solve_instance import solve_instance

    result = solve_instance(load_instance(EXAMPLES / "long-context-assistant.yaml"), SolveSettings(architectures=("disaggregated",))).result
    plan = result.architectures["disaggregated"]
    pts = pd.DataFrame(result.capacity.points)
    x = plan_shares(plan, pts)
    inst = {p.name: p.instances for p in plan.pools}
    pl = pool_latency(pts, x, inst, result.capacity.redundancy)
    waits = {str(r["pool"]): float(r["wait_ms"]) for r in pl.to_dict("records")}
    rows = {str(r["pool"]): r for r in pl.to_dict("records")}
    rep = bucket_latency(pts, x, waits, instances=inst, redundancy=result.capacity.redundancy)
    mix = bucket_latency(pts, x, waits, instances=inst, redundancy=result.capacity.redundancy, pool_rows=rows)
    assert (mix["ttft_predicted_ms"].to_numpy() <= rep["ttft_predicted_ms"].to_numpy() + 1e-9).all()
    assert (mix["ttft_predicted_ms"].to_numpy() < rep["ttft_predicted_ms"].to_numpy() - 1.0).any()
    lat = {lp.service: lp for lp in plan.latency}["assistant"]
    assert lat.ttft_predicted_ms == pytest.approx(float(mix["ttft_predicted_ms"].max()), rel=1e-9)


def test_verify_compares_a_prefill_groups_ttft_over_the_whole_group() -> None:
    """planner.verify: the simulated TTFT set against a prefill-served bucket's analytic figure (its latency group's
    mix quantile) is the group's merged one; shared-pool buckets, and buckets without a group, stay one unit each."""
    from planner.verify import _comparison_units

    g = pd.DataFrame({"service": ["s"] * 5, "bucket": ["b0", "b1", "b2", "b3", "b3"],
                      "prefill": ["p", "p", "p", "p", "p2"], "decode": ["d"] * 5, "unified": [None] * 5})
    groups = {("s", "b0"): "0", ("s", "b1"): "0", ("s", "b2"): "1", ("s", "b3"): "1"}
    units = dict(_comparison_units(g, groups))
    assert units == {"b0+b1": [0, 1], "b2+b3": [2, 3, 4]}
    assert dict(_comparison_units(g, None)) == {"b0": [0], "b1": [1], "b2": [2], "b3": [3, 4]}
    shared = g.assign(prefill=None, decode=None, unified="u")
    assert dict(_comparison_units(shared, groups)) == {"b0": [0], "b1": [1], "b2": [2], "b3": [3, 4]}
