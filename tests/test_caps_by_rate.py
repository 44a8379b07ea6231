"""The horizon's unified caps searched a rate step at a time (issue 27, build at the speed of the data).

:func:`planner.horizon.model._caps_by_rate` links each point to itself one ×1.5 rate step lower and
:func:`planner.optimize.prepare.unified_caps_at_load` starts each search where that chain puts the cap. These
tests hold it to the bisection it replaces: the lowest step's caps are ``planner solve``'s bit for bit, every
other cap is within the bisection's tolerance of the bisection's, the search prices far fewer points, and
splitting the chains over two processes changes no cap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.forked as forked
import planner.optimize.prepare as prepare_mod
import planner.pool_latency as pool_latency
from planner.horizon.model import _caps_by_rate
from planner.optimize.prepare import encode_split_ttft, prepare, utilization_caps
from planner.queueing import UTILIZATION_CEILING

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 2e-3  # unified_caps_at_load's default


@pytest.fixture(scope="module")
def points():
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    prep = prepare(build_capacity_tables(load_instance(ROOT / "instances" / "enterprise-chat.yaml")))
    # as a horizon prices its levels: without the log's replayed bursts (planner.horizon.model.without_replay)
    pts = encode_split_ttft(prep.points, prep.demand).reset_index(drop=True).drop(columns=["replay_wait", "replay_slot_spacing"], errors="ignore")
    assert (pts["role"] == "unified").sum() >= 20
    return pts


KEYS = [(1.5**k, -1.0) for k in range(6)] + [(1.5**k, 3.0) for k in range(2, 6)]


def _alone(points, m: float, cv: float, verdicts: list | None = None) -> np.ndarray:
    """The caps of ``points`` at one key, by the bisection ``planner solve`` uses (``verdicts`` gets its ``fits``)."""
    scaled = points.assign(rate_peak_per_s=points["rate_peak_per_s"].to_numpy(float) * m,
                           interarrival_cv=np.full(len(points), cv) if cv >= 0 else points["interarrival_cv"].to_numpy(float))
    if verdicts is None:
        return utilization_caps(scaled)[0]
    bisected = prepare_mod._caps_bisected

    def keep(fits, *a):
        verdicts.append(fits)
        return bisected(fits, *a)

    prepare_mod._caps_bisected = keep
    try:
        return utilization_caps(scaled)[0]
    finally:
        prepare_mod._caps_bisected = bisected


def _chained(points) -> np.ndarray:
    return _caps_by_rate(points, KEYS, points["rate_peak_per_s"].to_numpy(float), points["interarrival_cv"].to_numpy(float), None)


def test_chained_caps_keep_the_bisections_answer_within_its_tolerance(points) -> None:
    """Within the tolerance of the bisection's cap where a point's verdict is monotone in ρ. Where it is not (the
    pool ``n(ρ) = ⌈busy / ρ⌉`` is whole instances, so a pocket above the first miss can meet again), either search
    may stop at another crossing: there the chained cap must still meet, and miss one tolerance above it."""
    chained = _chained(points)
    unified = (points["role"] == "unified").to_numpy()
    binding = pockets = 0
    for j, (m, cv) in enumerate(KEYS):
        verdicts: list = []
        alone = _alone(points, m, cv, verdicts)
        if j == 0:  # the lowest rate: no chain, priced as planner solve prices the table
            np.testing.assert_array_equal(chained[j], alone)
            continue
        np.testing.assert_array_equal(chained[j][~unified], alone[~unified])  # other roles: the closed-form caps
        binding += int((alone[unified] < 0.99).sum())
        far = np.flatnonzero(np.abs(chained[j][unified] - alone[unified]) > TOLERANCE * (1 + 1e-9))
        if far.size:
            (fits,) = verdicts
            cap = chained[j][unified][far]
            assert np.all(fits(cap, far)) and not np.any(fits(cap + TOLERANCE, far)), (m, cv, cap)
            pockets += far.size
    assert binding >= 20  # caps below the ceiling, where the search has work to do
    assert pockets <= 2  # rare: 1 of 240 unified caps here


def test_chained_search_prices_fewer_points(points, monkeypatch: pytest.MonkeyPatch) -> None:
    priced = {"n": 0}
    at = pool_latency.UnifiedRows.at

    def counting(self, idx, *a, **k):
        priced["n"] += len(idx)
        return at(self, idx, *a, **k)

    monkeypatch.setattr(pool_latency.UnifiedRows, "at", counting)
    for m, cv in KEYS:
        _alone(points, m, cv)
    alone, priced["n"] = priced["n"], 0
    _chained(points)
    assert priced["n"] < 0.6 * alone, (priced["n"], alone)


def test_chains_split_over_processes_give_the_same_caps(points, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepare_mod, "PARALLEL_ROWS", 1)
    monkeypatch.setattr(forked, "usable_cores", lambda: 1)
    one = _chained(points)
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    calls = []
    real = forked.fork_map
    monkeypatch.setattr(forked, "fork_map", lambda fn, parts: calls.append(len(parts)) or real(fn, parts))
    two = _chained(points)
    assert calls and max(calls) == 2  # the chains were split in two parts
    np.testing.assert_array_equal(one, two)


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rates=st.lists(st.floats(0.2, 60.0), min_size=2, max_size=6, unique=True),
       cvs=st.lists(st.sampled_from([-1.0, 0.6, 1.0, 2.5, 6.0]), min_size=1, max_size=2, unique=True))
def test_every_chained_cap_is_priced_meeting_with_a_miss_within_a_tolerance(points, monkeypatch: pytest.MonkeyPatch,
                                                                           rates: list[float], cvs: list[float]) -> None:
    """Random horizons' grids (rate multipliers, burstiness): each chained unified cap meets at its own key, and the
    search priced a miss at most one tolerance above it (the bisection's guarantee, checked with the search's own
    verdicts); the caps do not depend on the chains being split over two processes."""
    keys = [(m, cv) for m in rates for cv in cvs]
    seen: list = []
    near = prepare_mod._caps_near

    def keep(fits, on, *a):
        lo, hi = near(fits, on, *a)
        seen.append((fits, on.copy(), lo.copy(), hi.copy()))
        return lo, hi

    monkeypatch.setattr(prepare_mod, "_caps_near", keep)
    monkeypatch.setattr(prepare_mod, "PARALLEL_ROWS", 1)
    monkeypatch.setattr(forked, "usable_cores", lambda: 1)
    one = _caps_by_rate(points, keys, points["rate_peak_per_s"].to_numpy(float), points["interarrival_cv"].to_numpy(float), None)
    assert seen  # the chains were searched
    for fits, on, lo, hi in seen:
        assert np.all(hi - lo <= TOLERANCE * (1 + 1e-9))
        met, missed = lo > 0, hi < UTILIZATION_CEILING
        assert np.all(fits(lo[met], on[met]))
        assert not np.any(fits(hi[missed], on[missed]))
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    np.testing.assert_array_equal(one, _caps_by_rate(points, keys, points["rate_peak_per_s"].to_numpy(float),
                                                     points["interarrival_cv"].to_numpy(float), None))
