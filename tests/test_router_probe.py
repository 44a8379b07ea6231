"""The router probe (benchmarks/bench_router_lane.py) still reads the simulator it instruments, and what README's
*How far to trust the numbers* says of the simulated router holds: the instances' in-flight counts stay within about
one of each other, and the probe's times left of an iteration are times within one.

The probe patches :meth:`planner.simulate.engine._Sim.admit` / ``reschedule`` and reads an instance's ``pf``, ``n``,
``in_iter``, ``plan``, ``t`` and its pool's ``iter_time`` / ``table``; a change of the engine that renames them would
leave the bench failing long after. One small cell: 8,000-token prompts behind 4 instances at 50 %, one seed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def _probe():  # the bench puts its folder on sys.path itself, for its grid module
    spec = importlib.util.spec_from_file_location("bench_router_lane", BENCH_DIR / "bench_router_lane.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_probe_reads_the_simulated_router(tmp_path: Path) -> None:
    from planner.simulate import engine

    probe = _probe()
    admit, reschedule = engine._Sim.admit, engine._Sim.reschedule
    res, obs = _observed_run(probe, tmp_path)
    assert engine._Sim.admit is admit and engine._Sim.reschedule is reschedule  # the engine is left as it was
    assert len(obs.k) > 500 and len(obs.residual_s) == len(obs.chosen) == len(obs.k) == len(obs.states)
    st = np.stack(obs.states)
    x = st[:, :, 0] + st[:, :, 1]
    assert st.shape[1] == 4
    chosen = st[np.arange(len(st)), np.asarray(obs.chosen)]
    assert np.all(chosen.sum(axis=1) == x.min(axis=1))  # the router's choice is a least-loaded instance
    # the router holds the counts together: within about one of each other (README; independent Poisson counts of the
    # same mean would spread by their square root, ~4 here)
    assert float(x.std(axis=1).mean()) < 1.2
    left = np.asarray(obs.residual_s)
    assert np.all(left >= -1e-9)
    rho, batch, live = probe.lane_inputs(res)
    assert live == 4 and 0.0 < rho < 1.0 and batch > 0.0
    # a time left of one iteration: at most the longest, and the decode step it may begin after (Observer.left_s)
    longest_s = float(max(p.iter_time(p.max_batch, p.spec.chunk_tokens) + max(p.table) for p in _unified_pools(res)))
    assert float(left.max()) <= longest_s + 1e-9


def _observed_run(probe, tmp_path: Path):  # noqa: ANN001, ANN202 - (the plan simulated, the probe's Observer)
    """The grid's 8,000-token shared plan behind 4 instances at 50 %, one seed of 1,000 requests, observed."""
    grid = probe.grid
    res, _m = grid.at_utilisation(grid.at_instances(grid.solved_plan("shared", 8000, tmp_path), "shared", 4), "shared", 0.5)
    obs = probe.Observer()
    restore = obs.install()
    try:
        grid.simulated_quantiles(res, "shared", (0,), 1000)
    finally:
        restore()
    return res, obs


def _unified_pools(res):  # noqa: ANN001, ANN202 - the plan's unified pools as the engine builds them
    from planner.simulate.adapter import plan_to_sim_by_bucket
    from planner.simulate.engine import _Pool

    sim = plan_to_sim_by_bucket(res, "shared")
    return [_Pool(spec) for spec in sim.pools if spec.role == "unified"]


def test_random_ties_pick_a_least_loaded_instance_not_always_the_first(tmp_path: Path) -> None:
    """``--random-ties`` (the probe's :func:`random_ties`): the router still picks a least-loaded instance, among tied
    ones not always the lowest index (the simulator's own rule), and restoring leaves the engine as it was."""
    from planner.simulate import engine

    probe = _probe()
    indexed, index_min = engine._Sim.admit_indexed, dict(engine.INDEX_MIN_INSTANCES)
    restore_ties = probe.random_ties()
    try:
        _res, obs = _observed_run(probe, tmp_path)
    finally:
        restore_ties()
    assert engine._Sim.admit_indexed is indexed and index_min == engine.INDEX_MIN_INSTANCES
    st = np.stack(obs.states)
    x = st[:, :, 0] + st[:, :, 1]
    chosen = np.asarray(obs.chosen)
    assert np.all(x[np.arange(len(x)), chosen] == x.min(axis=1))
    first_min = np.argmax(x == x.min(axis=1, keepdims=True), axis=1)  # the lowest index among the least loaded
    tied = (x == x.min(axis=1, keepdims=True)).sum(axis=1) > 1
    assert tied.sum() > 100 and np.any(chosen[tied] != first_min[tied])
