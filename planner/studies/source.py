"""Capacity tables for a scenario: patch the base table when possible, rebuild otherwise.

Overrides whose effect on the capacity table is exact and known are applied to the table
directly (no instance re-resolution, no performance model):

- ``services.<s>.traffic.rate_multiplier`` multiplies the service's mean and peak rates by
  ``new / base`` (:func:`planner.optimize.resolve.scale_rates`) — **only where the operating points are held**
  (``exact_rates=False``: a held plan's pools in ``planner evaluate``, ``solve-robust``'s one plan for every
  scenario, and ``planner budget``'s doubling search, which passes the instance's planning bound of 10,000 req/s
  where a rebuilt table is refused). A re-optimisation at another rate (a sweep's row, evaluate's regret) rebuilds
  the table at that rate, as ``planner solve --set`` does: the rate selects the operating points (a unified point's
  batch and cap are chosen for the queue of the service's peak rate, a prefill point's for its latency group's,
  caps at the nominal pool ``n0 = ceil(λ τ)``), so a patched table is another table. Patched, long-document-nvidia's
  ×4 table scaled to ×1 offered B200 tp2 points where ``solve`` at ×1 has tp4 and tp1 ones, and its sweep row
  was $34,187 against ``solve``'s $31,391 (issue 24: one answer everywhere);
- ``costs.electricity_usd_per_kwh`` replaces the price scalar;
- ``options.budget_usd_per_month`` goes to the solve settings.

Any other override is applied to the instance (:meth:`ResolvedInstance.with_overrides`) and
the capacity table is rebuilt by ``planner.capacity`` — then the patches are applied on top.
A source built from tables alone (:meth:`TableSource.from_tables`) accepts patches only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.errors import InputError, Problem
from planner.optimize.resolve import scale_rates, with_price
from planner.optimize.solve import SolveSettings
from planner.schema.capacity import CapacityTables

if TYPE_CHECKING:
    from planner.instance import ResolvedInstance

_RATE = re.compile(r"^services\.([^.]+)\.traffic\.rate_multiplier$")
PRICE_PATH = "costs.electricity_usd_per_kwh"
BUDGET_PATH = "options.budget_usd_per_month"


def is_patch(path: str) -> bool:
    return bool(_RATE.match(path)) or path in (PRICE_PATH, BUDGET_PATH)


def capacity_tables(resolved: ResolvedInstance, capacity_file: str | None = None, capacity_only: bool = False) -> CapacityTables:
    """The capacity table of an instance (``planner.capacity``), with a measured capacity file's rows
    when one is given (``--capacity``; only them with ``capacity_only``)."""
    from planner import capacity

    build: Callable[[Any], CapacityTables] = capacity.build_capacity_tables
    tables = build(resolved)
    if capacity_file:
        tables = capacity.read_measured_capacity(capacity_file, tables, only_listed=capacity_only)
    return tables


def settings_for(resolved: ResolvedInstance) -> SolveSettings:
    """Solve settings from an instance's ``options``, as ``planner solve`` runs them
    (:func:`planner.solve_instance.instance_settings`: the peak simulation and its tightening when
    ``options.verify`` is on), so a study's scenario at the instance's own values is solve's plan."""
    from planner.solve_instance import instance_settings, settings_from_instance

    return instance_settings(resolved, replace(settings_from_instance(resolved.instance), confidence="off"))[0]


@dataclass(frozen=True)
class TableSource:
    """Where a study's capacity tables come from (picklable: it travels to worker processes)."""

    base_tables: CapacityTables
    settings: SolveSettings
    base_rate_multiplier: dict[str, float]
    """Per service, the rate multiplier the base table was built with."""
    resolved: ResolvedInstance | None = None
    name: str = "tables"
    capacity_file: str | None = None
    """A measured capacity file applied to every table built from the instance (``--capacity``)."""
    capacity_only: bool = False
    """Only the measured file's rows are candidates (``--capacity-only``)."""
    built: dict[str, CapacityTables] = field(default_factory=dict, compare=False, repr=False)
    """Tables this process built for overrides (:meth:`unpatched`), by the overrides' repr."""
    solved: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Scenario summaries already solved from this source in this process
    (:func:`planner.studies.sweep.solve_scenario`: a sweep's base, its tornado and crossovers, a
    budget's ×1 and evaluate's regret ask for the same scenario)."""

    @classmethod
    def from_instance(cls, resolved: ResolvedInstance, *, capacity_file: str | None = None, capacity_only: bool = False) -> TableSource:
        mult = {s: float(svc.traffic.rate_multiplier) for s, svc in resolved.instance.services.items()}
        return cls(base_tables=capacity_tables(resolved, capacity_file, capacity_only), settings=settings_for(resolved),
                   base_rate_multiplier=mult, resolved=resolved, name=resolved.instance.name,
                   capacity_file=capacity_file, capacity_only=capacity_only)

    @classmethod
    def from_tables(cls, tables: CapacityTables, settings: SolveSettings, name: str = "tables") -> TableSource:
        return cls(base_tables=tables, settings=settings, base_rate_multiplier={str(s): 1.0 for s in tables.demand["service"].unique()},
                   name=name)

    def split(self, overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(overrides that change the instance, patches applied to the table)."""
        structural = {k: v for k, v in overrides.items() if not is_patch(k)}
        patches = {k: v for k, v in overrides.items() if is_patch(k)}
        return structural, patches

    def unpatched(self, structural: dict[str, Any]) -> CapacityTables:
        """The table for the structural overrides alone (base rates and price)."""
        if not structural:
            return self.base_tables
        if self.resolved is None:
            raise InputError(Problem("--set", next(iter(structural)), "this study has only capacity tables, no instance",
                                     "only services.<s>.traffic.rate_multiplier, costs.electricity_usd_per_kwh and options.budget_usd_per_month can vary"))
        key = repr(sorted(structural.items(), key=lambda kv: kv[0]))
        hit = self.built.get(key)
        if hit is None:
            if len(self.built) >= 64:
                self.built.clear()
            hit = capacity_tables(self.resolved.with_overrides(structural), self.capacity_file, self.capacity_only)
            self.built[key] = hit
        return hit

    def rate_ratios(self, patches: dict[str, Any], base: dict[str, float] | None = None) -> dict[str, float]:
        ref = base or self.base_rate_multiplier
        out: dict[str, float] = {}
        for path, value in patches.items():
            m = _RATE.match(path)
            if m:
                svc = m.group(1)
                if svc not in ref:
                    raise InputError(Problem("--set", path, f"no service {svc!r}", f"services: {', '.join(sorted(ref))}"))
                out[svc] = float(value) / ref[svc]
        return out

    def tables_and_settings(self, overrides: dict[str, Any], *, exact_rates: bool = True
                            ) -> tuple[CapacityTables, CapacityTables, SolveSettings]:
        """(unpatched table — the structure, patched table — the scenario, settings). ``exact_rates``: a rate
        multiplier other than the base's rebuilds the table at that rate when the source has an instance (module
        docstring); ``False`` scales the base table's rates (its operating points held)."""
        structural, patches = self.split(overrides)
        if exact_rates and self.resolved is not None:
            ref0 = self.base_rate_multiplier
            if structural:
                ref0 = {s: float(v.traffic.rate_multiplier) for s, v in self.resolved.with_overrides(structural).instance.services.items()}
            moved = {k: v for k, v in patches.items() if _RATE.match(k)}
            if any(abs(r - 1.0) > 1e-12 for r in self.rate_ratios(moved, ref0).values()):
                structural = {**structural, **moved}
                patches = {k: v for k, v in patches.items() if k not in moved}
        base = self.unpatched(structural)
        settings = self.settings
        if structural and self.resolved is not None:
            settings = settings_for(self.resolved.with_overrides(structural))
        ref = self.base_rate_multiplier
        if self.resolved is not None and structural:
            ref = {s: float(v.traffic.rate_multiplier) for s, v in self.resolved.with_overrides(structural).instance.services.items()}
        tables = base
        ratios = self.rate_ratios(patches, ref)
        if ratios:
            tables = scale_rates(tables, ratios)
        if PRICE_PATH in patches:
            tables = with_price(tables, float(patches[PRICE_PATH]))
        if BUDGET_PATH in patches:
            b = patches[BUDGET_PATH]
            settings = replace(settings, budget_usd_per_month=float(b) if b is not None else None)
        return base, tables, settings
