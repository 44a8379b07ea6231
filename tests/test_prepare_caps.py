"""The vectorised utilisation caps equal the scalar queueing function point by point."""

from __future__ import annotations

import numpy as np

from planner.queueing import UTILIZATION_CEILING, max_utilization, max_utilization_many


def test_vectorised_caps_equal_the_scalar_bisection() -> None:
    rng = np.random.default_rng(7)
    n = 400
    servers = np.concatenate([rng.integers(1, 70, n // 2), rng.integers(70, 900, n // 2)])
    service = rng.uniform(0.01, 30.0, n)
    q = rng.choice([0.5, 0.9, 0.99, 0.999], n)
    budget = rng.uniform(-0.5, 5.0, n)  # negative budgets: the service time alone misses the target -> 0
    cs = rng.uniform(0.0, 2.0, n)
    ca = rng.uniform(0.0, 3.0, n)
    got = max_utilization_many(servers, service, q, budget, cs, ca)
    ref = np.array([max_utilization(int(c), s, qq, b, service_cv=x, arrival_cv=y)
                    for c, s, qq, b, x, y in zip(servers, service, q, budget, cs, ca, strict=True)])
    assert np.max(np.abs(got - ref)) <= 1e-9
    assert (got[budget < 0] == 0).all() and (got <= UTILIZATION_CEILING).all()
    assert (got == UTILIZATION_CEILING).any() and ((got > 0) & (got < UTILIZATION_CEILING)).any()
