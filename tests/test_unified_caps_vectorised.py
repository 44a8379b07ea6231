"""The unified operating points' queueing in one vectorised call (issue 27, start-up): the utilisation
caps of a block of (batch, chunk) pairs come from one :func:`planner.queueing.max_utilization_many`
bisection (:func:`planner.perf.points._unified_costs`) instead of a scalar
:func:`planner.queueing.max_utilization` per pair, and must equal the scalar path to 1e-9; the pair a
unified point chooses must not change."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import planner.perf.points as points_mod
from planner.catalog import load_catalog
from planner.perf import operating_point
from planner.perf.points import _Targets, _unified_costs
from planner.queueing import (
    UTILIZATION_CEILING,
    max_utilization,
    max_utilization_many,
    wait_quantile_many,
    wait_quantile_s,
)

CAT = load_catalog(Path(__file__).parent / "data" / "perf_catalog")
L8 = CAT.models["llama-3.1-8b"]
L70 = CAT.models["llama-3.1-70b"]
H100 = CAT.devices["h100-sxm"]


def _rows(n: int, seed: int) -> np.ndarray:
    """Random queues shaped like the unified points' caps: ``n0 x B`` slots, slot service ``tau x B``,
    deterministic service, a TTFT quantile, budgets from negative (no cap) to generous."""
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, 512, n).astype(float)
    n0 = rng.integers(1, 40, n).astype(float)
    tau = rng.uniform(0.002, 2.0, n)
    return np.column_stack([n0 * batch, tau * batch, rng.choice([0.9, 0.95, 0.99], n), rng.uniform(-0.2, 3.0, n),
                            np.zeros(n), rng.uniform(0.0, 3.0, n)])


def test_vectorised_caps_equal_the_scalar_path_on_random_rows() -> None:
    rows = _rows(300, 3)
    many = max_utilization_many(*rows.T)
    one = np.array([max_utilization(int(c), s, q, b, cs, ca) for c, s, q, b, cs, ca in rows])
    assert np.max(np.abs(many - one)) <= 1e-9
    assert (many[rows[:, 3] < 0] == 0).all() and ((many > 0) & (many < UTILIZATION_CEILING)).sum() >= 100  # the bisection ran
    # the wait quantile the bisection evaluates, at the caps found: vectorised = scalar (relative 1e-9)
    c, s, q, _b, cs, ca = rows.T
    lam = many * c / s
    wq = wait_quantile_many(q, lam, c, s, cs, ca)
    ref = np.array([wait_quantile_s(qq, la, int(cc), ss, x, y) for qq, la, cc, ss, x, y in zip(q, lam, c, s, cs, ca, strict=True)])
    assert np.allclose(wq, ref, rtol=1e-9, atol=1e-12)


def _scalar_costs(tau_s: np.ndarray, batch: np.ndarray, ttft_ms: np.ndarray, targets: _Targets, rate_per_s: float | None,
                  interarrival_cv: float) -> np.ndarray:
    """The reference: one scalar :func:`max_utilization` per pair (the path before issue 27's vectorisation)."""
    rate = float(rate_per_s) if rate_per_s is not None else 0.0
    out = []
    for tau, b, tt in zip(np.asarray(tau_s, dtype=float), np.asarray(batch, dtype=float), np.asarray(ttft_ms, dtype=float), strict=True):
        if rate <= 0 or not math.isfinite(targets.ttft_ms):
            out.append(tau / UTILIZATION_CEILING)
            continue
        n0 = max(1, math.ceil(rate * tau))
        cap = max_utilization(int(n0 * b), tau * b, targets.ttft_q, (targets.ttft_ms - tt) / 1e3, service_cv=0.0,
                              arrival_cv=interarrival_cv)
        out.append(tau / cap if cap > 0 else 1e12 * tau)
    return np.array(out)


def test_unified_costs_equal_one_scalar_cap_per_pair() -> None:
    rng = np.random.default_rng(8)
    n = 200
    tau = rng.uniform(0.005, 1.0, n)
    batch = rng.integers(1, 256, n).astype(float)
    targets = _Targets(ttft_ms=2000.0, ttft_q=0.99, tpot_ms=math.inf, tpot_q=0.99, itl_ms=math.inf, itl_q=0.99,
                       e2e_ms=math.inf, e2e_q=0.99)
    ttft = rng.uniform(100.0, 2300.0, n)  # some past the target: no wait budget, cost 1e12 tau
    for rate, cv in ((3.0, 1.0), (250.0, 2.5), (None, 1.0)):
        got = _unified_costs(tau, batch, ttft, targets, rate, cv)
        ref = _scalar_costs(tau, batch, ttft, targets, rate, cv)
        assert np.allclose(got, ref, rtol=1e-9, atol=0)
    assert (got == tau / UTILIZATION_CEILING).all()  # no rate: the cap is the ceiling for every pair
    assert (_unified_costs(tau, batch, ttft, targets, 3.0, 1.0)[ttft > 2000.0] == 1e12 * tau[ttft > 2000.0]).all()


@pytest.mark.parametrize(("model", "tp", "isl", "osl", "ttft", "itl", "rate", "cv"), [
    (L8, 1, 2000.0, 200.0, 1500.0, 60.0, 5.0, 1.0),
    (L8, 2, 6000.0, 150.0, 3000.0, None, 40.0, 2.0),
    (L70, 4, 16000.0, 400.0, 20000.0, 40.0, 0.5, 1.5),
    (L70, 8, 1000.0, 800.0, 800.0, 35.0, 120.0, 1.0),
])
def test_unified_point_chooses_the_same_pair_as_the_scalar_caps(monkeypatch: pytest.MonkeyPatch, model: object, tp: int, isl: float,
                                                                osl: float, ttft: float, itl: float | None, rate: float, cv: float) -> None:
    kw = dict(role="unified", weight_precision="bf16", kv_precision="bf16", input_tokens=isl, output_tokens=osl,
              ttft_target_ms=ttft, tpot_target_ms=None, itl_target_ms=itl, rate_per_s=rate, interarrival_cv=cv)
    fast = operating_point(model, H100, tp, **kw)  # type: ignore[arg-type]
    calls: list[int] = []

    def scalar(*a: object, **k: object) -> np.ndarray:
        calls.append(1)
        return _scalar_costs(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(points_mod, "_unified_costs", scalar)
    slow = operating_point(model, H100, tp, **kw)  # type: ignore[arg-type]
    assert calls and fast.feasible  # the caps priced the choice
    assert repr(fast) == repr(slow)  # every field and detail (batch, chunk, TTFT, lane wait, ...) alike
