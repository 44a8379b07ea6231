"""From an instance with a ``horizon`` section to :class:`~planner.horizon.model.HorizonInputs`.

Prices default from the device profiles (``purchase_usd``, ``rental_usd_per_hour`` with their
sources); the instance's ``horizon.acquisition`` adds what profiles do not carry (reserved and
spot prices, lead times, caps) with its own ``source`` strings.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from planner.capacity import equipment_usd_per_device_hour
from planner.errors import InputError, Problem
from planner.horizon.demand import client_slot_profiles, growth_multipliers, slot_profile
from planner.horizon.model import Acquisition, HorizonInputs, WeightLoad
from planner.schema.capacity import CapacityTables


def acquisition_for(resolved: Any) -> dict[str, Acquisition]:
    inst = resolved.instance
    hz = inst.horizon
    assert hz is not None
    c = inst.costs
    out: dict[str, Acquisition] = {}
    problems: list[Problem] = []
    unknown = sorted(set(hz.acquisition) - set(inst.catalog.devices))
    for dev_id in unknown:
        problems.append(Problem(str(resolved.path), f"horizon.acquisition.{dev_id}", "not a candidate device",
                                f"use one of catalog.devices: {', '.join(inst.catalog.devices)}"))
    for dev_id in inst.catalog.devices:
        ways = hz.acquisition.get(dev_id)
        if ways is None:
            problems.append(Problem(str(resolved.path), f"horizon.acquisition.{dev_id}", "no way to get this candidate device",
                                    "add buy / reserve / on_demand / spot for it, or drop it from catalog.devices"))
            continue
        dev = resolved.devices[dev_id]
        kw: dict[str, Any] = {"device": dev_id,
                              "procurement_limit": float(dev.procurement_limit) if dev.procurement_limit else math.inf}
        if ways.buy is not None:
            price = ways.buy.purchase_usd if ways.buy.purchase_usd is not None else dev.purchase_usd
            if price is None:
                problems.append(Problem(str(resolved.path), f"horizon.acquisition.{dev_id}.buy.purchase_usd",
                                        "the profile has no purchase price", "give purchase_usd with a source"))
            else:
                years = ways.buy.amortization_years or c.amortization_years
                rate = ways.buy.cost_of_capital_rate if ways.buy.cost_of_capital_rate is not None else c.cost_of_capital_rate
                priced = dev.model_copy(update={"purchase_usd": float(price)})
                kw.update(buy_usd_per_device_hour=equipment_usd_per_device_hour(priced, "buy", c.hours_per_month, years=years, rate=rate),
                          purchase_usd=float(price), lead_time_periods=ways.buy.lead_time_periods,
                          resale_fraction=ways.buy.resale_fraction, initial_owned=ways.buy.initial_owned)
        if ways.reserve is not None:
            kw.update(reserve_usd_per_hour=ways.reserve.usd_per_hour, reserve_term_periods=ways.reserve.term_periods)
        if ways.on_demand is not None:
            price = ways.on_demand.usd_per_hour if ways.on_demand.usd_per_hour is not None else dev.rental_usd_per_hour
            if price is None:
                problems.append(Problem(str(resolved.path), f"horizon.acquisition.{dev_id}.on_demand.usd_per_hour",
                                        "the profile has no rental price", "give usd_per_hour with a source"))
            else:
                kw.update(on_demand_usd_per_hour=float(price), on_demand_max=ways.on_demand.max_devices)
        if ways.spot is not None:
            if inst.options.redundancy < 1:
                problems.append(Problem(str(resolved.path), f"horizon.acquisition.{dev_id}.spot",
                                        "spot capacity is interrupted: it needs spare instances",
                                        "set options.redundancy >= 1 or drop spot"))
            kw.update(spot_usd_per_hour=ways.spot.usd_per_hour, spot_availability=1.0 - ways.spot.interruption_rate,
                      spot_max=ways.spot.max_devices)
        out[dev_id] = Acquisition(**kw)
    if problems:
        raise InputError(problems)
    return out


def horizon_inputs(resolved: Any) -> HorizonInputs:
    inst = resolved.instance
    hz = inst.horizon
    if hz is None:
        raise InputError(Problem(str(resolved.path), "horizon", "the instance has no horizon section",
                                 "add horizon: {periods, demand, growth, acquisition} (see `planner schema`), or use `planner solve`"))
    service_slots: dict[str, pd.DataFrame] | None = None
    client_notes: list[str] = []
    if hz.demand.clients != "fleet":
        per_client, client_notes = client_slot_profiles(hz, resolved.base_dir, inst.costs.hours_per_month)
        base = next(iter(inst.services))
        service_slots = {client_service(base, c): p.slots for c, p in per_client.items()}
        first = next(iter(per_client.values()))
        agg = first.slots.copy()  # slot names and hours; rates summed over the client-services (their slot peaks need not coincide)
        for p in list(per_client.values())[1:]:
            agg[["peak_rate_per_s", "mean_rate_per_s"]] += p.slots[["peak_rate_per_s", "mean_rate_per_s"]].to_numpy(float)
        prof = type(first)(agg, absolute=True, source=first.source, notes=first.notes)
    else:
        prof = slot_profile(hz, resolved.base_dir, inst.costs.hours_per_month)
    if prof.absolute and len(inst.services) != 1:
        raise InputError(Problem(str(resolved.path), "horizon.demand", "a demand profile from a log gives one service's rates, "
                                 f"the instance has {len(inst.services)} services", "plan one service, or give slots by hand (multipliers)"))
    weight_load = None
    if hz.weight_load is not None:
        acq = acquisition_for(resolved)
        weights = {name: resolved.models[svc.model].weight_bytes(svc.weight_precision) for name, svc in inst.services.items()}
        if service_slots is not None:
            weights.update({name: weights[next(iter(inst.services))] for name in service_slots})
        weight_load = WeightLoad(
            weight_bytes=weights,
            device_gb_per_s=hz.weight_load.device_gb_per_s, fleet_gb_per_s=hz.weight_load.fleet_gb_per_s,
            usd_per_device_hour={y: load_price(a, hz.weight_load.usd_per_device_hour) for y, a in acq.items()},
            slot_length_h=slot_lengths_h(prof.slots, prof.absolute, hz.hours_per_period(inst.costs.hours_per_month)), source=hz.weight_load.source)
    return HorizonInputs(slots=prof.slots, absolute=prof.absolute,
                         growth=growth_multipliers(hz.growth, hz.periods, hz.months_per_period),
                         months_per_period=hz.months_per_period, acquisition=acquisition_for(resolved),
                         owned_when_unused=hz.owned_when_unused, ramp_instances_per_slot=hz.ramp_instances_per_slot,
                         discount_rate_per_year=hz.discount_rate_per_year, redundancy=inst.options.redundancy,
                         max_utilization=inst.options.max_utilization,
                         shared_single_device_type=inst.options.shared_single_device_type, weight_load=weight_load,
                         per_slot_architecture=hz.per_slot_architecture, service_slots=service_slots,
                         demand_notes=(*prof.notes, *client_notes))


def client_service(base: str, client: str) -> str:
    """Name of a client-service: ``<service>/<client>`` (:mod:`planner.horizon.demand`, *Clients as services*)."""
    return f"{base}/{client}"


def horizon_tables(resolved: Any, inputs: HorizonInputs) -> CapacityTables:
    """The capacity table of a plan over time: the instance's, with the service copied once per client-service
    when ``horizon.demand.clients`` splits the fleet (:func:`split_services`). Through the on-disk
    cache of :mod:`planner.capacity_cache` (keyed on everything the tables are computed from)."""
    from planner.capacity_cache import cached_capacity_tables
    from planner.progress import stage

    with stage("capacity tables"):
        tables, _status = cached_capacity_tables(resolved)
    if inputs.service_slots is None:
        return tables
    return split_services(tables, next(iter(resolved.instance.services)), inputs.service_slots)


def split_services(tables: CapacityTables, base: str, service_slots: dict[str, pd.DataFrame]) -> CapacityTables:
    """One copy of ``base``'s demand and point rows per client-service (same model, SLO, lengths, operating
    points), each its own model group — so its own pools — with its rates scaled to its own busiest slot
    (peak) and its mean over the slots (the horizon's multipliers are relative to these rates; the
    queueing caps are recomputed at every level's actual rate, :func:`planner.horizon.model.levels_for`)."""
    dem = tables.demand[tables.demand["service"] == base]
    pts = tables.points[tables.points["service"] == base]
    ref_peak = float(dem["rate_peak_per_s"].sum())
    ref_mean = float(dem["rate_mean_per_s"].sum())
    demands, points = [], []
    for name, slots in service_slots.items():
        h = slots["hours_per_period"].to_numpy(float)
        peak = float(slots["peak_rate_per_s"].max())
        mean = float((slots["mean_rate_per_s"].to_numpy(float) * h).sum() / h.sum())
        d = dem.copy()
        d["service"] = name
        d["rate_peak_per_s"] = d["rate_peak_per_s"] * (peak / ref_peak)
        d["rate_mean_per_s"] = d["rate_mean_per_s"] * (mean / ref_mean if ref_mean > 0 else 0.0)
        model = d["model"].astype(str) if "model" in d.columns else pd.Series("default", index=d.index)
        d["model"] = model + "/" + name.split("/", 1)[-1]
        demands.append(d)
        points.append(pts.assign(service=name))
    return CapacityTables(demand=pd.concat(demands, ignore_index=True), points=pd.concat(points, ignore_index=True),
                          configs=tables.configs, costs=tables.costs, meta=dict(tables.meta), agents=tables.agents)


def load_price(a: Acquisition, given: float | None) -> float:
    """USD per device-hour spent loading weights: the given price, else on demand, else reserved, else owned per hour."""
    for v in (given, a.on_demand_usd_per_hour, a.reserve_usd_per_hour, a.buy_usd_per_device_hour, a.spot_usd_per_hour):
        if v is not None:
            return float(v)
    return 0.0


def slot_lengths_h(slots: Any, absolute: bool, hours_per_period: float) -> Any:
    """Hours of one occurrence of each slot: 1 for slots read from a log (hours of the day); slots given by hand
    are taken as parts of one day, each occurring once a day (``hours_per_period / days per period``)."""
    import numpy as np

    h = slots["hours_per_period"].to_numpy(float)
    if absolute:
        return np.ones_like(h)
    return h / (hours_per_period / 24.0)
