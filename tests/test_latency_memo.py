"""The analytic latency check's memo (planner.optimize.latency): the same answer as computing it, a
changed points frame (same object, changed in place) is a miss, and callers get their own copies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def test_memoised_check_equals_the_computation_and_misses_on_changed_points() -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize import latency
    from planner.optimize.model import build_model
    from planner.optimize.prepare import prepare
    from planner.optimize.solve import make_solver, solve_architecture
    from planner.studies.source import settings_for

    # the first shared plan of long-document-nvidia with a 4 s TTFT target misses its p99 TTFT (tests/test_studies.py;
    # 3.5 s before the JSQ shared-pool latency model of planner.pool_latency, whose first plan there passes)
    resolved = load_instance(ROOT / "instances" / "long-document-nvidia.yaml", {"services.assistant.slo.ttft.target_ms": 4000})
    tables, settings = build_capacity_tables(resolved), settings_for(resolved)
    built = build_model(prepare(tables, max_utilization=settings.max_utilization), redundancy=settings.redundancy)
    plan = solve_architecture(built, make_solver(), "shared", settings)
    k = settings.redundancy

    factors, buckets = latency.tighten_factors(built.prep, plan, k)
    want, want_buckets = latency._tighten_factors(built.prep, plan, k, min_step=1.05, max_step=4.0)
    assert factors and factors == want
    pd.testing.assert_frame_equal(buckets, want_buckets)
    factors["someone else's pool"] = 2.0  # a caller's copy: the next answer is unchanged
    again, _b = latency.tighten_factors(built.prep, plan, k)
    assert again == want
    # a different point frame with the same content hits (a sweep's price-only scenarios)
    twin = replace(built.prep, points=built.prep.points.copy())
    assert latency.tighten_factors(twin, plan, k)[0] == want
    assert latency.relax_factors(built.prep, plan, k) == latency._relax_factors(built.prep, plan, k, below=0.8, ceiling=latency.RELAX_CEILING)

    # the same frame object with its peak rates raised in place (x1.5): not the memo's answer
    pts = twin.points
    pts["rate_peak_per_s"] = pts["rate_peak_per_s"] * 1.5
    changed = latency.tighten_factors(twin, plan, k)[0]
    assert changed == latency._tighten_factors(twin, plan, k, min_step=1.05, max_step=4.0)[0]
    assert changed != want
