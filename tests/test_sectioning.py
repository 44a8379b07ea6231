"""The peak check's run length and interval under bursts (planner/verify.py, *Size*): a renewal service of CV ``c``
starts at ``requests · c²``, and a TTFT / TPOT quantile's interval is the wider of the order statistics' and the
sectioning one (planner/simulate/stats.py ``SectionCounts``, ``sectioned_half_width``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from planner.simulate.stats import (
    LogHistogram,
    SectionCounts,
    quantile_interval,
    sectioned_half_width,
)
from planner.verify import renewal_dispersion


def test_sections_keep_each_arrivals_sample_in_its_part_of_the_window() -> None:
    """Window [10, 20) in 2 sections: arrivals in [10, 15) in the first, [15, 20) in the second, others dropped;
    route 1 kept apart from route 0; a quantile to within the coarse bins (±2.3 %)."""
    s = SectionCounts(routes=2, sections=2, start_s=10.0, end_s=20.0)
    for i in range(100):
        s.add(0, 10.0 + 0.05 * i, 1.0)       # section 0, value 1 s
        s.add(0, 15.0 + 0.05 * i, 3.0)       # section 1, value 3 s
        s.add(1, 12.0, 100.0)                # another route
    s.add(0, 9.99, 500.0)                    # before the window: not kept
    s.add(0, 20.0, 500.0)                    # at its end: not kept
    s.add(0, 12.0, 0.0)                      # no wait: counted as zero
    q = s.quantiles([0], 0.5)
    assert q[0] == pytest.approx(1.0, rel=0.024) and q[1] == pytest.approx(3.0, rel=0.024)
    assert s.quantiles([0], 0.001)[0] == 0.0  # the zero sample is the lowest
    assert s.quantiles([0], 1.0)[1] == pytest.approx(3.0, rel=0.024)  # the 500 s samples were dropped
    both = s.quantiles([0, 1], 0.99)
    assert both[0] == pytest.approx(100.0, rel=0.024) and both[1] == pytest.approx(3.0, rel=0.024)
    assert s.counts[0].sum() == 201 and s.counts[1].sum() == 100
    empty = SectionCounts(routes=1, sections=3, start_s=0.0, end_s=1.0)
    assert np.isnan(empty.quantiles([0], 0.99)).all()


def test_the_sectioning_half_width_is_students_t_over_the_sections() -> None:
    """t_{0.975, K-1} s / sqrt(K): the tables give 2.262 at 9 degrees of freedom, 2.776 at 4, 2.093 at 19."""
    for k, t in ((10, 2.262), (5, 2.776), (20, 2.093)):
        v = np.arange(k, dtype=float)
        assert sectioned_half_width(v) == pytest.approx(t * v.std(ddof=1) / math.sqrt(k), rel=3e-3)
    assert math.isnan(sectioned_half_width(np.array([1.0])))
    assert math.isnan(sectioned_half_width(np.array([1.0, math.nan])))  # a section without a sample is left out
    assert sectioned_half_width(np.array([2.0, 2.0, 2.0])) == 0.0


def test_correlated_samples_widen_the_interval_the_order_statistics_give() -> None:
    """Samples whose level drifts over the window (a burst's waits) against the same values shuffled: the order
    statistics give both the same interval; the sections see the drift."""
    rng = np.random.default_rng(7)
    n, k = 20_000, 10
    t = np.arange(n) / n
    level = np.exp(2.0 * np.sin(2 * math.pi * 3 * t))        # three slow surges over the window
    x = level * rng.exponential(1.0, n)
    drifting, shuffled = SectionCounts(1, k, 0.0, 1.0), SectionCounts(1, k, 0.0, 1.0)
    h = LogHistogram()
    perm = rng.permutation(n)
    for i in range(n):
        drifting.add(0, t[i], x[i])
        shuffled.add(0, t[i], x[perm[i]])
        h.add(x[i])
    lo, hi = quantile_interval(h, 0.99)
    order_half = (hi - lo) / 2
    wide, iid = sectioned_half_width(drifting.quantiles([0], 0.99)), sectioned_half_width(shuffled.quantiles([0], 0.99))
    assert wide > 3 * order_half
    assert iid < 2 * order_half  # independent samples: the two intervals are alike


def test_a_renewal_service_needs_its_squared_cv_times_the_requests() -> None:
    rt = pd.DataFrame({"service": ["a", "a", "b"], "interarrival_cv": [2.0, 2.0, 0.5]})
    assert renewal_dispersion(rt, None) == pytest.approx(4.0)
    assert renewal_dispersion(rt, {"a": object()}) == 1.0  # a replays its log; b's CV below 1 counts as Poisson
    assert renewal_dispersion(rt.iloc[:0], None) == 1.0
    assert renewal_dispersion(rt.assign(interarrival_cv=["x", "x", None]), None) == 1.0
