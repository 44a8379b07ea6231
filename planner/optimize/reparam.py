"""Set the parameters of a model built with ``mutable_rates`` in place (issue 27: one pyomo model per
architecture across a sweep's scenarios and the verify-and-tighten loop's rounds, the LP
:func:`planner.optimize.model.build_model` gives bit for bit, ``tests/test_resolve_same_lp.py``).
Used by :mod:`planner.optimize.resolve` (studies) and :mod:`planner.optimize.solve` (``planner solve``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from planner.optimize.highs import make_solver
from planner.optimize.model import Built, build_model
from planner.optimize.prepare import Prepared
from planner.optimize.settings import SolveSettings
from planner.schema.capacity import CapacityTables


def point_keys(prep: Prepared) -> list[tuple[str, str, str, str]]:
    """(service, bucket, role, config) of every point, in order: two prepared tables with equal keys have
    the same model structure."""
    p = prep.points
    return list(zip(p["service"], p["bucket"], p["role"], p["config"], strict=True))


def set_parameters(built: Built, prep: Prepared, tables: CapacityTables, s: SolveSettings) -> None:
    """Set a model built with ``mutable_rates`` to ``prep`` (same structure): rates, ``tau/rho``, big-M,
    price and budget, each as :func:`build_model` computes it from ``prep``; ``built.prep`` and
    ``built.n_max`` follow (the bound :func:`restrict` gives ``n``)."""
    m = built.model
    built.prep = prep
    # Big-M and the bound restrict() gives n: as build_model sets them (n_max + k spares).
    built.n_max = prep.pools["n_max"].to_numpy(int) + int(s.redundancy)
    for p, v in enumerate(built.n_max.tolist()):
        m.big_m[p].set_value(float(v))
    dem = prep.demand
    for d, (lp, lm) in enumerate(zip(dem["rate_peak_per_s"].astype(float), dem["rate_mean_per_s"].astype(float), strict=True)):
        m.lam_peak[d].set_value(lp)
        m.lam_mean[d].set_value(lm)
    # tau/rho as build_model computes it, so each load coefficient is the float a fresh build gives
    tau_over_rho = prep.points["instance_seconds_per_request"].to_numpy(float) / prep.points["rho"].to_numpy(float)
    for i, c in enumerate(tau_over_rho.tolist()):
        m.load_coef[i].set_value(c)
    m.price.set_value(float(tables.costs.electricity_usd_per_kwh))
    if s.budget_usd_per_month:
        m.budget.set_value(float(s.budget_usd_per_month))
        m.budget_c.activate()
    else:
        m.budget_c.deactivate()


@dataclass
class InPlaceModel:
    """The tightening rounds' models of one structure (:func:`planner.optimize.tighten.solve_verified`'s
    ``remodel``): one second model of ``structure``'s points and pools, built with mutable rates, caps,
    big-M, price and budget on the first call of :meth:`load`, and each call setting them to the given
    prep in place (:func:`set_parameters`) instead of a new pyomo model and a new hand-over to HiGHS per
    round. It is the LP :func:`build_model` builds from that prep, bit for bit
    (``tests/test_resolve_same_lp.py``). Used by ``planner solve`` (:func:`planner.optimize.solve.solve_tables`,
    small tables) and the studies (:meth:`planner.optimize.resolve.Resolver.remodel`)."""

    structure: Prepared
    """The prep the model is built from (its points and pools fix the structure)."""
    redundancy: int
    budget_usd_per_month: float | None
    scratch: tuple[Built, Any] | None = None
    """The second model and its solver, once built."""
    keys: list[tuple[str, str, str, str]] = field(init=False)
    pool_names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.keys = point_keys(self.structure)
        self.pool_names = self.structure.pools["pool"].astype(str).tolist()

    def load(self, prep: Prepared, s: SolveSettings) -> tuple[Built, Any] | None:
        """A :class:`Built` holding ``prep`` over the one shared model (the loop solves a model right after
        loading it and reads only the prep of earlier ones), with its solver; None (build it afresh) when
        ``prep`` is not of this structure or has a tool phase."""
        if prep.tool is not None or point_keys(prep) != self.keys or prep.pools["pool"].astype(str).tolist() != self.pool_names:
            return None
        if self.scratch is None:
            t0 = time.perf_counter()
            model = build_model(self.structure, redundancy=self.redundancy, mutable_rates=True,
                                budget_usd_per_month=self.budget_usd_per_month)
            model.build_s = time.perf_counter() - t0
            self.scratch = (model, make_solver())
        base, solver = self.scratch
        built = replace(base, prep=prep, build_s=0.0)
        set_parameters(built, prep, prep.tables, s)
        return built, solver
