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

    # the first shared plan of code-completion-8b with a 225 ms TTFT target misses its p99 TTFT (checked at 200, 225,
    # 240 and 250 ms: it misses; at 260 ms and above it passes). Was long-document-nvidia at 3.5 s; since a long prompt
    # waits behind the prompts a least-loaded router leaves ahead of it (issue 24 item 3) that plan passes at 3, 3.5,
    # 3.8, 3.9, 4.05, 4.1, 4.5 and 5 s and misses only at exactly 4 s (a one-instance tp2 pool): not a robust premise
    resolved = load_instance(ROOT / "instances" / "code-completion-8b.yaml", {"services.code.slo.ttft.target_ms": 225})
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
    changed, changed_buckets = latency.tighten_factors(twin, plan, k)
    fresh, fresh_buckets = latency._tighten_factors(twin, plan, k, min_step=1.05, max_step=4.0)
    assert changed == fresh
    pd.testing.assert_frame_equal(changed_buckets, fresh_buckets)
    # the factors can both sit at the 4x step limit (no queueing room at 225 ms), so the miss shows in the bucket table
    assert not changed_buckets.equals(want_buckets)
