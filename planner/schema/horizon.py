"""Plans over time (DESIGN §7): periods, representative time slots, growth, ways to get capacity.

An instance with a ``horizon`` section is planned by ``planner horizon``: one MIP over
``periods`` (months by default) × ``slots`` (representative hours) chooses what to buy and when,
what to reserve, and what to rent on demand or on the spot market for the peaks
(:mod:`planner.horizon.model`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from planner.schema.common import (
    Fraction,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    StrictModel,
    bounded,
)

SlotGrouping = Literal["hour_of_day", "hour_of_day_weekpart"]
"""How windows of a multi-day log are grouped into representative slots: 24 hours of the day,
or 24 hours × {weekday, weekend} (needs ``day0_weekday``)."""


class GivenSlot(StrictModel):
    """A representative time slot given by hand."""

    name: str
    hours_per_period: PosFloat
    """Hours of each period that look like this slot (the slots' hours sum to ``costs.hours_per_month`` x ``months_per_period``)."""
    peak_multiplier: PosFloat
    """Peak rate in this slot as a multiple of the service's planned peak rate (period 0)."""
    mean_multiplier: PosFloat | None = None
    """Mean rate in this slot as a multiple of the service's mean rate (default: ``peak_multiplier``)."""
    interarrival_cv: NonNegFloat | None = None
    """Burstiness inside the slot's busiest window (default: the service's)."""


class TopClients(StrictModel):
    """The ``top`` clients by mean rate each their own service; the rest summed into one ``others`` service."""

    top: PosInt


ClientSplit = Literal["fleet", "each"] | TopClients
"""How a ServeGen fleet becomes services: ``fleet`` (one service, the sum), ``each`` (every client its own
service) or ``{top: N}`` (the N largest clients by mean rate, the rest one ``others`` service)."""


class DemandProfile(StrictModel):
    """Where the daily / weekly shape of demand comes from: a multi-day log or slots given by hand.

    Exactly one of ``servegen_fleet``, ``fleet_file`` or ``slots`` is given.
    """

    servegen_fleet: str | None = None
    """A directory of ServeGen ``chunk-*-trace.csv`` files (600 s windows per client), relative to the
    instance; the fleet (sum over the clients) is the service's traffic."""
    fleet_file: str | None = None
    """A CSV with columns ``window_start_s, rate_rps`` (and optionally ``cv``): windows of a log that
    spans days (e.g. the fleet sum written by ``planner horizon --write-fleet``)."""
    slots: list[GivenSlot] | None = None
    """Representative slots given by hand."""
    grouping: SlotGrouping = "hour_of_day"
    """Slots derived from a log: hour of day (24), or hour of day × weekday/weekend (48)."""
    day0_weekday: int | None = Field(default=None, ge=0, le=6)
    """Weekday of the log's first day (0 = Monday); needed for ``hour_of_day_weekpart``."""
    rate_scale: Annotated[float, bounded(ge=1e-6, le=1e6, why="scales the log's rates, from 1e-6 to 1e6 (far below, the demand falls "
                                         "under the solver's feasibility tolerance and 0 devices pass for a plan that serves it)")] = 1.0
    """Scales the log's rates (plan for a share of the fleet, or a bigger one)."""
    clients: ClientSplit = "fleet"
    """With ``servegen_fleet``: ``fleet`` plans the sum of the clients as the instance's one service (default);
    ``each`` makes every client its own service, ``{top: N}`` the N largest clients by mean rate, with the rest
    summed into one ``others`` service. Client services copy the instance's service (model, SLO, lengths), each
    with its own slots (peak, mean, burstiness from its own windows) and its own pools
    (:mod:`planner.horizon.demand`, *Clients as services*)."""

    @model_validator(mode="after")
    def _one_source(self) -> DemandProfile:
        given = [k for k in ("servegen_fleet", "fleet_file", "slots") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'servegen_fleet' (a ServeGen client directory), 'fleet_file' "
                             f"(window_start_s, rate_rps CSV) or 'slots' (given by hand); got {given or 'none'}")
        if self.grouping == "hour_of_day_weekpart" and self.day0_weekday is None and self.slots is None:
            raise ValueError("grouping 'hour_of_day_weekpart' needs 'day0_weekday' (0 = Monday): the log does not say "
                             "which day it starts on")
        if self.slots is not None and len({s.name for s in self.slots}) != len(self.slots):
            raise ValueError("slot names must be distinct")
        if self.clients != "fleet" and self.servegen_fleet is None:
            raise ValueError("clients 'each' / {top: N} split a ServeGen fleet into services: it needs 'servegen_fleet' (a directory "
                             "of per-client chunk-*-trace.csv files)")
        return self


GROWTH_RATE_RANGE: tuple[float, float] = (-0.5, 1.0)
"""Open below, closed above: the monthly growth rates a horizon takes (halving to doubling per month)."""


class Growth(StrictModel):
    """Demand growth over the horizon: a compound monthly rate or explicit multipliers per period."""

    monthly_rate: float | None = Field(default=None, gt=GROWTH_RATE_RANGE[0], le=GROWTH_RATE_RANGE[1])
    """Compound growth per month (0.05 = 5 %/month); period ``t`` has multiplier ``(1 + r)^(t · months/period)``."""
    multipliers: list[PosFloat] | None = None
    """One demand multiplier per period (period 0 first)."""

    @model_validator(mode="after")
    def _one(self) -> Growth:
        if (self.monthly_rate is None) == (self.multipliers is None):
            raise ValueError("give exactly one of 'monthly_rate' or 'multipliers'")
        return self


class BuyOption(StrictModel):
    """Buying devices: price, lead time, amortisation, optional resale."""

    purchase_usd: PosFloat | None = None
    """Price per device (server share included); default: the profile's ``purchase_usd``."""
    lead_time_periods: NonNegInt = 0
    """Periods between the order and the device being in service."""
    amortization_years: PosFloat | None = None
    """Default: the profile's (or ``costs.amortization_years``)."""
    cost_of_capital_rate: Fraction | None = None
    """Default: the profile's (or ``costs.cost_of_capital_rate``)."""
    resale_fraction: Fraction | None = None
    """If set, owned devices may be sold; the sale recovers this share of the remaining amortisation."""
    initial_owned: NonNegInt = 0
    """Devices already owned at period 0."""
    source: str = ""


class ReserveOption(StrictModel):
    """A reserved-capacity commitment: a device-hour price for a term, paid whether used or not."""

    usd_per_hour: PosFloat
    term_periods: PosInt
    """Length of the commitment in periods (12 or 36 months for 1- or 3-year terms)."""
    source: str


class OnDemandOption(StrictModel):
    usd_per_hour: PosFloat | None = None
    """Default: the profile's ``rental_usd_per_hour``."""
    max_devices: PosInt | None = None
    """Most devices that can be had on demand at once."""
    source: str = ""


class SpotOption(StrictModel):
    """Preemptible capacity: cheap, interrupted; only usable with redundancy (``options.redundancy ≥ 1``)."""

    usd_per_hour: PosFloat
    interruption_rate: Fraction
    """Share of spot device-time lost to interruptions: a spot device counts as ``1 − rate`` of a device."""
    max_devices: PosInt | None = None
    source: str


class DeviceAcquisition(StrictModel):
    """Ways to get one device type; a way left out is not available."""

    buy: BuyOption | None = None
    reserve: ReserveOption | None = None
    on_demand: OnDemandOption | None = None
    spot: SpotOption | None = None

    @model_validator(mode="after")
    def _some(self) -> DeviceAcquisition:
        if not any((self.buy, self.reserve, self.on_demand, self.spot)):
            raise ValueError("give at least one of buy, reserve, on_demand, spot")
        return self


class WeightLoad(StrictModel):
    """Bringing instances up: every new instance loads one replica of its model's weights
    (:mod:`planner.horizon.model`, *Weight loading*): the reload time and its price, and the ramp limit."""

    device_gb_per_s: PosFloat
    """Per device, weight store → device memory, GB/s (each of an instance's ``tp`` devices loads ``W / tp``)."""
    fleet_gb_per_s: PosFloat | None = None
    """Total bandwidth of the weight store, GB/s: what loads within one slot bounds how far the pools can
    grow in it (the ramp limit). None: only the per-device time counts."""
    usd_per_device_hour: PosFloat | None = None
    """Price of a device-hour spent loading instead of serving (default: the device's on-demand price, else
    its reserved price, else its owned price per hour)."""
    source: str
    """Where the bandwidths come from."""


Architecture = Literal["shared", "disaggregated", "hybrid"]


class Horizon(StrictModel):
    """Plan over time: periods × representative slots, growth, and how capacity is obtained."""

    periods: PosInt = Field(le=120)
    """Number of planning periods (e.g. 24 months)."""
    months_per_period: PosFloat = 1.0
    demand: DemandProfile
    growth: Growth = Growth(monthly_rate=0.0)
    acquisition: dict[str, DeviceAcquisition] = Field(min_length=1)
    """Per candidate device id (``catalog.devices``): the ways to get it."""
    owned_when_unused: Literal["powered_down", "idle"] = "powered_down"
    """Owned devices outside every pool in a slot: powered down (only ownership costs) or idle at idle power."""
    ramp_instances_per_slot: PosInt | None = None
    """Most instances a pool may add from one slot to the next (weights must load); none = unlimited."""
    discount_rate_per_year: Fraction = 0.0
    """Discount rate for the present value of later periods' costs."""
    weight_load: WeightLoad | None = None
    """Weight loading: ramp limit and reload cost of growing pools (none: pools grow freely and at no cost)."""
    per_slot_architecture: tuple[Architecture, Architecture] | None = None
    """Also plan one architecture per slot, chosen between these two (e.g. [shared, disaggregated]: shared at
    night, split at the daily peak); switching pays the weight reload of the pools taking over (needs
    ``weight_load``)."""

    @model_validator(mode="after")
    def _switching(self) -> Horizon:
        if self.per_slot_architecture is not None:
            a, b = self.per_slot_architecture
            if a == b:
                raise ValueError("per_slot_architecture needs two different architectures, e.g. [shared, disaggregated]")
            if self.weight_load is None:
                raise ValueError("per_slot_architecture needs weight_load (device_gb_per_s, source): a switch reloads the "
                                 "weights of the pools taking over, and that is its cost")
        return self

    def hours_per_period(self, hours_per_month: float) -> float:
        """Hours of one period at the instance's ``costs.hours_per_month``."""
        return hours_per_month * self.months_per_period
