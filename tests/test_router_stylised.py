"""The stylised router model of benchmarks/bench_router_stylised.py (issue 24 item 3): its lane is the M/D/1 queue where
the router has no choice, and the decodes' freeze while a prompt is prefilled is what makes the chosen lane lighter
behind more instances (the figures its docstring compares with the simulator's)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):  # noqa: ANN202 - a benchmark script as a module
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_instance_is_the_md1_lane_whatever_the_decodes() -> None:
    model = _load("bench_router_stylised")
    frozen = model.chosen_lane_tails(1, 0.42, 7.0, ratio=0.086, freeze=True, arrivals=40_000)
    free = model.chosen_lane_tails(1, 0.42, 7.0, ratio=0.086, freeze=False, arrivals=40_000)
    assert np.array_equal(frozen, free)  # one instance: the router has no choice, the decodes never reach the lane
    md1 = _load("bench_router_lane").md1_number_pmf(0.42, 60)
    assert abs(frozen[0] - 0.42) < 0.02 and abs(frozen[1] - md1[2:].sum()) < 0.02  # Poisson arrivals see time averages


def test_the_freeze_makes_the_chosen_lane_lighter_behind_more_instances() -> None:
    model = _load("bench_router_stylised")
    tails = {(c, freeze): model.chosen_lane_tails(c, 0.42, 7.0, ratio=0.086, freeze=freeze, arrivals=30_000)[0]
             for c in (4, 64) for freeze in (True, False)}
    assert tails[(64, True)] < tails[(4, True)] - 0.08  # 0.153 against 0.290 at 150,000 arrivals
    assert abs(tails[(64, False)] - tails[(4, False)]) < 0.04  # 0.360 against 0.361


def test_the_minimums_size_is_recorded_without_changing_the_run() -> None:
    """``--holes``: at each arrival the number of instances holding the fewest in flight (1…c); recording it leaves the
    run as it was, and behind 4 instances one alone holds it about half the time (0.475 at 60,000 arrivals; the
    simulator's 0.487)."""
    model = _load("bench_router_stylised")
    seen: list[int] = []
    with_holes = model.chosen_lane_tails(4, 0.42, 7.0, ratio=0.086, arrivals=20_000, holes=seen)
    assert np.array_equal(with_holes, model.chosen_lane_tails(4, 0.42, 7.0, ratio=0.086, arrivals=20_000))
    h = np.asarray(seen)
    assert len(h) == 20_000 and h.min() >= 1 and h.max() <= 4
    assert 0.35 < float(np.mean(h == 1)) < 0.6
    one: list[int] = []
    model.chosen_lane_tails(1, 0.42, 7.0, ratio=0.086, arrivals=2_000, holes=one)
    assert set(one) == {1}
