"""A sweep's re-solved model hands HiGHS the very LP a fresh build does (issue 24 item 1: one path to an answer).

The Resolver (:mod:`planner.optimize.resolve`) re-solves one built model for many scenarios by setting
mutable parameters. When it rebuilt the load and big-M constraints at the end of the model, HiGHS got the
same problem with its rows and columns in another order and coefficients rounded another way
(``λ·τ·(1/ρ)`` instead of ``λ·(τ/ρ)``); the solutions differed in the last bits, and on
long-document-nvidia at a 4 s TTFT target a knife-edge latency check then took the sweep's
verify-and-tighten loop to $265,937/month where ``planner solve`` reported $175,545 (disaggregated).
These tests compare the LP HiGHS holds (costs, bounds, matrix) and the solution bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from planner.optimize import SolveSettings
from planner.optimize.architecture import solve_architecture
from planner.optimize.extract import solution_arrays
from planner.optimize.highs import make_solver
from planner.optimize.model import Built, build_model
from planner.optimize.prepare import prepare
from planner.optimize.resolve import Resolver, scale_rates, with_price
from planner.optimize.synthetic import synthetic_tables
from planner.schema.capacity import CapacityTables


def _lp(solver: Any) -> dict[str, Any]:
    """The LP the persistent HiGHS object holds (after a solve), the matrix row-wise with sorted indices."""
    import scipy.sparse as sp

    lp = solver._solver_model.getLp()
    a = lp.a_matrix_
    parts = (np.array(a.value_), np.array(a.index_), np.array(a.start_))
    shape = (lp.num_row_, lp.num_col_)
    mat = (sp.csr_matrix(parts, shape=shape) if "row" in str(a.format_).lower() else sp.csc_matrix(parts, shape=shape)).tocsr()
    mat.sort_indices()
    mat.eliminate_zeros()
    return {"cost": np.array(lp.col_cost_), "col_lower": np.array(lp.col_lower_), "col_upper": np.array(lp.col_upper_),
            "row_lower": np.array(lp.row_lower_), "row_upper": np.array(lp.row_upper_), "indptr": mat.indptr,
            "indices": mat.indices, "values": mat.data, "integrality": np.array(lp.integrality_, dtype=int)}


def _fresh(tables: CapacityTables, settings: SolveSettings) -> Built:
    return build_model(prepare(tables, max_utilization=settings.max_utilization), redundancy=settings.redundancy,
                       budget_usd_per_month=settings.budget_usd_per_month)


def _assert_same_as_fresh(fresh: Any, fresh_solver: Any, mine: Any, solver: Any, settings: Any, label: str) -> None:
    """Per architecture: the LP HiGHS holds, the solution and the cost of ``mine`` equal a fresh build's."""
    for arch in settings.architectures:
        a = solve_architecture(fresh, fresh_solver, arch, settings)
        lp_a, x_a = _lp(fresh_solver), np.concatenate(solution_arrays(fresh)[:2])
        b = solve_architecture(mine, solver, arch, settings)
        lp_b, x_b = _lp(solver), np.concatenate(solution_arrays(mine)[:2])
        for key, v in lp_a.items():
            assert np.array_equal(v, lp_b[key]), f"{label} {arch}: {key} differs from a fresh build"
        assert np.array_equal(x_a, x_b), f"{label} {arch}: the solution differs from a fresh build's"
        assert (a.costs is None) == (b.costs is None)
        if a.costs is not None and b.costs is not None:
            assert a.costs.total_usd_per_month == b.costs.total_usd_per_month


@pytest.mark.parametrize("seed", [1, 7])
def test_resolver_hands_highs_the_lp_of_a_fresh_build(seed: int) -> None:
    tables = synthetic_tables(services=2, buckets=2, devices=2, tps=(1, 2), seed=seed)
    settings = SolveSettings(redundancy=1)
    services = [str(s) for s in tables.demand["service"].unique()]
    scenarios = [tables, scale_rates(tables, dict.fromkeys(services, 2.5)), with_price(tables, 0.31),
                 scale_rates(tables, {services[0]: 0.4}), tables]
    r = Resolver.create(tables, settings, rate_headroom=3.0)  # big-M sized for more than any scenario
    for k, t in enumerate(scenarios):
        fresh, solver = _fresh(t, settings), make_solver()
        mine = r.load(t, settings)
        assert mine is not None
        _assert_same_as_fresh(fresh, solver, mine, r.solver, settings, f"scenario {k}")


def test_tightened_models_set_in_place_are_the_lp_of_a_fresh_build() -> None:
    """The tightening rounds of a sweep load their caps into one mutable model (``Resolver.remodel``):
    each is the LP and the solution a rebuild gives (``planner solve`` rebuilds)."""
    from planner.optimize.tighten import tighten_prepared

    tables = synthetic_tables(services=2, buckets=2, devices=2, tps=(1, 2), seed=3)
    settings = SolveSettings(redundancy=1)
    r = Resolver.create(tables, settings, rate_headroom=2.0)
    scenario = scale_rates(tables, {str(tables.demand["service"].iat[0]): 1.6})
    assert r.load(scenario, settings) is not None
    remodel = r.remodel(settings)
    pools = r.built.prep.points["pool"].astype(str).unique().tolist()
    rng = np.random.default_rng(0)
    preps = [tighten_prepared(r.built.prep, {p: float(f) for p, f in zip(pools, rng.uniform(1.0, 3.0, len(pools)), strict=True)}),
             tighten_prepared(r.built.prep, {pools[0]: 4.0}), r.built.prep]
    for k, prep in enumerate(preps):
        got = remodel(prep)
        assert got is not None
        mine, solver = got
        assert mine.prep is prep and mine.model is not r.built.model
        fresh, fresh_solver = build_model(prep, redundancy=settings.redundancy), make_solver()
        _assert_same_as_fresh(fresh, fresh_solver, mine, solver, settings, f"prep {k}")
    # another structure (one point fewer): not this model's, so the loop builds it
    other = replace(r.built.prep, points=r.built.prep.points.iloc[1:].reset_index(drop=True))
    assert remodel(other) is None


def test_sweep_rows_with_tightening_rounds_are_solves_answers() -> None:
    """A sweep whose plans go through tightening rounds (on the Resolver's in-place model) reports the plan
    (pools and total) that a fresh ``solve_tables`` of each scenario reports (one path to an answer)."""
    from planner.optimize import solve_tables
    from planner.studies import sweep
    from planner.studies.source import TableSource
    from planner.studies.spec import expand, parse_sets

    rate = "services.svc0.traffic.rate_multiplier"
    source = TableSource.from_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=598), SolveSettings())
    study = expand(parse_sets([f"{rate}=3,4.5,6", "costs.electricity_usd_per_kwh=0.05,0.3"]))
    sweep._RESOLVERS.clear()
    rows = sweep.run_sweep(source, study, jobs=1)
    rounds = 0
    for sc in study:
        _base, tables, settings = source.tables_and_settings(sc.overrides)
        fresh = solve_tables(tables, settings).result
        mine = rows[rows["scenario"] == sc.name].set_index("architecture")
        assert mine["winner"].iat[0] == fresh.verdict.winner
        for arch, plan in fresh.architectures.items():
            rounds = max(rounds, plan.solver.rounds)
            assert plan.costs is not None
            # the same plan; its total summed in another order on the lean path (the model's cost terms): 1 ulp
            assert mine.loc[arch, "total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-12), (sc.name, arch)
            assert mine.loc[arch, "pools"] == ", ".join(f"{p.name}x{p.instances}" for p in sorted(plan.pools, key=lambda p: p.name))
    assert rounds > 1, "the premise: some plan of the study is tightened and re-solved"
    assert any(r._in_place is not None and r._in_place.scratch is not None for r in sweep._RESOLVERS.values()), "the tightening rounds ran on the in-place model"
