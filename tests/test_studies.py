"""Studies: sweeps equal individual solves, crossovers bracket the flip, budgets are monotone, --set errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from planner.optimize import SolveSettings, solve_tables
from planner.optimize.resolve import scale_rates
from planner.optimize.synthetic import synthetic_tables
from planner.studies.budget import budget_frontier
from planner.studies.distributions import parse_distribution
from planner.studies.source import TableSource
from planner.studies.spec import expand, parse_sets
from planner.studies.sweep import crossovers, run_sweep

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "instances" / "enterprise-chat-70b.yaml"
RATE = "services.svc0.traffic.rate_multiplier"


@pytest.fixture(scope="module")
def source() -> TableSource:
    return TableSource.from_tables(synthetic_tables(services=1, buckets=2, devices=2, seed=1), SolveSettings())


def test_sweep_rows_equal_fresh_solves_on_tables(source: TableSource) -> None:
    study = expand(parse_sets([f"{RATE}=0.5,2,16", "costs.electricity_usd_per_kwh=0.05,0.3"]))
    rows = run_sweep(source, study, jobs=1)
    assert len(rows) == 6 * 2 and rows["model_reused"].all()
    for sc in study:
        t = scale_rates(source.base_tables, {"svc0": sc.overrides[RATE]})
        t = type(t)(demand=t.demand, points=t.points, configs=t.configs,
                    costs=type(t.costs)(**{**vars(t.costs), "electricity_usd_per_kwh": sc.overrides["costs.electricity_usd_per_kwh"]}), meta=t.meta)
        fresh = solve_tables(t, SolveSettings()).result
        mine = rows[rows["scenario"] == sc.name].set_index("architecture")
        assert mine["winner"].iat[0] == fresh.verdict.winner
        for arch, plan in fresh.architectures.items():
            assert plan.costs is not None
            assert mine.loc[arch, "total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)
            for term, value in plan.costs.terms().items():
                assert mine.loc[arch, term] == pytest.approx(value, rel=1e-4, abs=1e-6)


def test_crossover_brackets_the_verdict_change(source: TableSource) -> None:
    study = expand(parse_sets([f"{RATE}=1,64"]))
    rows = run_sweep(source, study, jobs=1)
    winners = rows.drop_duplicates("scenario")["winner"].tolist()
    assert winners[0] != winners[1], "test instance must flip between 1x and 64x"
    cross = crossovers(source, rows, RATE, rel_tol=0.01, headroom=64)
    assert len(cross) == 1
    r = cross.iloc[0]
    assert 1 <= r["low"] < r["high"] <= 64 and r["high"] / r["low"] - 1 <= 0.01 + 1e-12
    for m, expected in ((r["low"], r["winner_low"]), (r["high"], r["winner_high"])):
        fresh = solve_tables(scale_rates(source.base_tables, {"svc0": m}), SolveSettings()).result
        assert fresh.verdict.winner == expected
    assert r["winner_low"] != r["winner_high"]


def test_budget_results_are_monotone(source: TableSource) -> None:
    base = solve_tables(source.base_tables, SolveSettings()).result
    cheapest = min(p.costs.total_usd_per_month for p in base.architectures.values() if p.costs)
    frame = budget_frontier(source, [cheapest * f for f in (0.9, 1.0, 2.0, 4.0)], rel_tol=0.02)
    m = frame["max_traffic_multiplier"].to_numpy(float)
    assert np.all(np.diff(m) >= 0)
    assert m[1] >= 1.0 and m[3] > m[1]
    served = frame.dropna(subset=["total_usd_per_month"])
    assert (served["total_usd_per_month"] <= served["budget_usd_per_month"] * (1 + 1e-9)).all()


def test_distributions_and_monte_carlo_are_seeded() -> None:
    d = parse_distribution("lognormal(2, 0.5)")
    draws = d.sample(np.random.default_rng(0), 20000)
    assert draws.mean() == pytest.approx(2.0, rel=0.02) and draws.std() == pytest.approx(0.5, rel=0.05)
    spec = parse_sets([f"{RATE}=dist:growth(0.5,0.1,2)"])
    a, b = expand(spec, monte_carlo=5, seed=3), expand(spec, monte_carlo=5, seed=3)
    assert [s.overrides for s in a] == [s.overrides for s in b]
    assert all(1.2 < s.overrides[RATE] < 3.5 for s in a)
    with pytest.raises(ValueError, match="takes 3 numbers"):
        parse_distribution("triangular(1,2)")


def test_grid_is_a_cartesian_product() -> None:
    study = expand(parse_sets(["a.x=1,2,3", "b.y=4,5", "c.z=7"]))
    assert len(study) == 6 and all(s.overrides["c.z"] == 7 for s in study)
    assert {(s.overrides["a.x"], s.overrides["b.y"]) for s in study} == {(i, j) for i in (1, 2, 3) for j in (4, 5)}


@pytest.mark.skipif(not EXAMPLE.exists(), reason="example instance not written yet")
def test_instance_sweep_equals_individual_solves() -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.studies.source import settings_for

    resolved = load_instance(EXAMPLE)
    src = TableSource.from_instance(resolved)
    study = expand(parse_sets(["services.chat.traffic.rate_multiplier=0.5,3"]))
    rows = run_sweep(src, study, jobs=1)
    for sc in study:
        r = load_instance(EXAMPLE, sc.overrides)
        fresh = solve_tables(build_capacity_tables(r), settings_for(r)).result
        mine = rows[rows["scenario"] == sc.name].set_index("architecture")
        assert mine["winner"].iat[0] == fresh.verdict.winner
        for arch, plan in fresh.architectures.items():
            if plan.costs is not None:
                assert mine.loc[arch, "total_usd_per_month"] == pytest.approx(plan.costs.total_usd_per_month, rel=1e-4)


@pytest.mark.parametrize(("arg", "needle"), [
    ("services.chat.traffic.rate_mult=2", "valid there: buckets, columns"),
    ("services.chatt.traffic.rate_multiplier=2", "valid there: chat"),
    ("costz.pue=1.2", "valid there: catalog, costs"),
    ("services.chat.traffic.rate_multiplier=-1,2", "rate_multiplier"),
    ("costs.pue=dist:weird(1)", "unknown distribution"),
])
def test_bad_set_gives_exit_2_naming_path(arg: str, needle: str) -> None:
    from planner.cli import main

    inst = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
    res = CliRunner().invoke(main, ["sweep", str(inst), "--set", arg])
    assert res.exit_code == 2, res.output
    assert needle in res.output and arg.split("=")[0] in res.output


def test_dask_local_cluster_gives_identical_rows(source: TableSource) -> None:
    pytest.importorskip("distributed")
    study = expand(parse_sets([f"{RATE}=0.5,4"]))
    local = run_sweep(source, study, jobs=1)
    dask = run_sweep(source, study, jobs=2, executor="local-dask", chunk_size=1)
    cols = ["scenario", "architecture", "total_usd_per_month", "winner", "device_mix", "pools"]
    assert local[cols].equals(dask[cols])
