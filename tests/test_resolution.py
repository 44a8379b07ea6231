"""Adaptive length-bucket resolution (issue 13, item 5): refine until the winner's cost settles."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.resolution as resolution
from planner.optimize.settings import SolveSettings
from planner.schema.plan import ResolutionStep

INSTANCES = Path(__file__).resolve().parents[1] / "instances"


def test_bucket_counts_double_and_stop_at_the_cap() -> None:
    """Doubling keeps the bins nested (issue 24 item 0): 4 -> 8 -> 16."""
    seq = [4]
    while seq[-1] < resolution.MAX_BUCKETS:
        seq.append(resolution.next_buckets(seq[-1]))
    assert seq == [4, 8, 16]
    assert resolution.next_buckets(1) == 2
    assert resolution.next_buckets(12) == 16


class _Resolved:
    """A stand-in instance: one logged service; ``with_overrides`` records the bucket count."""

    def __init__(self, buckets: int) -> None:
        traffic = SimpleNamespace(trace="log.csv", buckets=buckets)
        self.instance = SimpleNamespace(services={"chat": SimpleNamespace(traffic=traffic)})
        self.buckets = buckets

    def with_overrides(self, o: dict[str, Any]) -> _Resolved:
        return _Resolved(int(o["services.chat.traffic.buckets"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["shared", "disaggregated"]), st.floats(1e3, 1e6)), min_size=6, max_size=6))
def test_stops_at_the_first_settled_resolution_or_the_cap(outcomes: list[tuple[str, float]]) -> None:
    costs = dict(zip([4, 8, 16, 99, 98, 97], outcomes, strict=True))

    def fake_step(resolved: Any, _s: Any, buckets: dict[str, int], _c: Any) -> ResolutionStep:
        w, c = costs[buckets["chat"]]
        return ResolutionStep(buckets=dict(buckets), winner=w, winner_usd_per_month=c)

    orig = resolution._step
    resolution._step = fake_step  # type: ignore[assignment]
    try:
        chosen, steps, why = resolution.choose_resolution(_Resolved(4), SolveSettings())
    finally:
        resolution._step = orig  # type: ignore[assignment]
    assert chosen.buckets == steps[-1].buckets["chat"]
    settled = [k for k in range(1, len(steps)) if steps[k].winner == steps[k - 1].winner
               and abs(steps[k].winner_usd_per_month / steps[k - 1].winner_usd_per_month - 1) < resolution.TOLERANCE]  # type: ignore[operator]
    if settled:
        assert settled == [len(steps) - 1] and "moved" in why  # the first settled pair ends the search
    else:
        assert steps[-1].buckets["chat"] == resolution.MAX_BUCKETS and "cap" in why


def test_resolution_flip_names_the_nearest_count_with_another_winner() -> None:
    steps = [ResolutionStep(buckets={"chat": 4}, winner="disaggregated", winner_usd_per_month=100.0),
             ResolutionStep(buckets={"chat": 6}, winner="shared", winner_usd_per_month=90.0),
             ResolutionStep(buckets={"chat": 9}, winner="shared", winner_usd_per_month=89.0)]
    f = resolution.resolution_flip(steps, "shared", "settled")
    assert f.dimension == "bucket_resolution" and f.slower_or_more == 4.0
    assert "4 disaggregated $100 → 6 shared $90 → 9 shared $89" in f.note


def test_instances_without_a_log_keep_their_buckets() -> None:
    from planner.instance import load_instance

    r = load_instance(Path(__file__).resolve().parent / "data" / "instances" / "valid_minimal.yaml")
    chosen, steps, why = resolution.choose_resolution(r, SolveSettings())
    assert chosen is r and steps == [] and "fixed" in why


@pytest.mark.slow
def test_code_completion_auto_resolution_settles_and_states_it() -> None:
    """The issue's example: code-completion-8b's verdict moved with buckets 4 / 6 / 8."""
    from planner.instance import load_instance
    from planner.solve_instance import settings_from_instance, solve_instance

    r = load_instance(INSTANCES / "code-completion-8b.yaml")
    res = solve_instance(r, settings_from_instance(r.instance), resolution="auto").result
    conf = res.verdict.confidence
    assert conf is not None and len(conf.resolution) >= 2
    last, prev = conf.resolution[-1], conf.resolution[-2]
    settled = last.winner == prev.winner and abs(last.winner_usd_per_month / prev.winner_usd_per_month - 1) < 0.02  # type: ignore[operator]
    assert settled or max(last.buckets.values()) == resolution.MAX_BUCKETS
    assert conf.buckets == last.buckets
    assert "bucket resolution:" in conf.summary


def _fake_steps(costs: dict[int, tuple[str, float]]) -> Any:
    def fake_step(resolved: Any, _s: Any, buckets: dict[str, int], _c: Any) -> ResolutionStep:
        w, c = costs[buckets["chat"]]
        return ResolutionStep(buckets=dict(buckets), winner=w, winner_usd_per_month=c)
    return fake_step


@pytest.mark.parametrize(("costs", "words"), [
    ({4: ("shared", 100.0), 8: ("shared", 103.0), 16: ("shared", 99.0)}, "the winner is the same and its cost moves 3.0 %"),
    ({4: ("shared", 100.0), 8: ("disaggregated", 95.0), 16: ("shared", 99.0)}, "the winner changes"),
])
def test_fixed_resolution_is_checked_at_two_finer_counts(costs: dict[int, tuple[str, float]], words: str) -> None:
    """``--confidence exact`` at a fixed resolution states the finer nested counts (issue 24 item 0): the plan's
    own count, then 2x and 4x (capped at 16); the flip is the count nearest the plan's whose winner differs."""
    orig = resolution._step
    resolution._step = _fake_steps(costs)  # type: ignore[assignment]
    try:
        steps, why = resolution.check_resolution(_Resolved(4), SolveSettings())
        capped, why_cap = resolution.check_resolution(_Resolved(16), SolveSettings())
    finally:
        resolution._step = orig  # type: ignore[assignment]
    assert [s.buckets["chat"] for s in steps] == [4, 8, 16] and words in why
    assert [s.buckets["chat"] for s in capped] == [16] and "no finer count" in why_cap
    flip = resolution.resolution_flip(steps, "shared", why, chosen=0)
    assert flip.slower_or_more == (8.0 if "changes" in words else None)
    assert flip.note.startswith("bucket resolution: 4 shared $100 → 8 ")


@pytest.mark.slow
def test_fixed_resolution_check_keeps_the_plans_own_count_first() -> None:
    """On enterprise-chat (analytic path) the check's first step is the plan's own 4 buckets and finer counts
    keep its winner within 2 % (instances/README.md, bucket-count table)."""
    from planner.instance import load_instance

    r = load_instance(INSTANCES / "enterprise-chat.yaml")
    steps, why = resolution.check_resolution(r, SolveSettings())
    assert [s.buckets["chat"] for s in steps] == [4, 8, 16]
    assert {s.winner for s in steps} == {"shared"} and "moves" in why
    costs = [s.winner_usd_per_month for s in steps]
    assert max(costs) <= 1.02 * min(costs)  # type: ignore[type-var, operator]
