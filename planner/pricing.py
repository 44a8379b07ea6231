"""Price of equipment per device-hour: the rental rate, or the purchase annuitised.

A small room of its own: the capacity tables (:mod:`planner.capacity`) and the tool-phase
tables (:mod:`planner.agents.tables`) both price devices and servers with it.

Purchase: ``P · r / (1 − (1 + r)^(−y))`` per year (annuity at the cost of capital ``r`` over
``y`` years; ``P / y`` when ``r = 0``), spread over ``12 · hours_per_month`` hours.
"""

from __future__ import annotations

from planner.schema.hardware import DeviceProfile


def equipment_usd_per_device_hour(dev: DeviceProfile, pricing: str, hours_per_month: float, *,
                                  years: float | None = None, rate: float | None = None) -> float:
    """Rental price, or the purchase annuitised at the cost of capital, per device-hour."""
    if pricing == "rent":
        assert dev.rental_usd_per_hour is not None
        return float(dev.rental_usd_per_hour)
    assert dev.purchase_usd is not None
    y = years if years is not None else dev.amortization_years
    r = rate if rate is not None else dev.cost_of_capital_rate
    per_year = dev.purchase_usd / y if r == 0 else dev.purchase_usd * r / (1.0 - (1.0 + r) ** (-y))
    return per_year / (12.0 * hours_per_month)
