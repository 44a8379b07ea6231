r"""Tool-state economics: what holding, offloading or recomputing a waiting session's KV costs.

While an agent session waits on a tool for ``W`` seconds its KV cache (``b`` bytes) is

- **held** on the decode device: it occupies KV memory priced at ``p_h`` USD per byte-second
  (the decode instance's cost per second over the KV bytes one instance holds, ``c_dec / K``);
- **offloaded** to a host-memory tier: ``b`` bytes at ``p_o`` USD per byte-second of tier
  capacity, plus one reload before the next turn, ``C_r = t_rl · β · c_pf / ρ_pf`` (reload
  time ``t_rl = b / (split · bw)`` over the receiving instance's links, busy share ``β``,
  charged at the instance price ``c_pf`` per second over its utilisation cap ``ρ_pf``);
- **dropped and recomputed**: ``C_rc = t_rc · c_pf / ρ_pf`` with ``t_rc`` the extra prefill
  time of the full context at the next turn.

Capacity is sized for the sessions in wait at peak. Little's law gives the mean
``m = λ · c · W̄`` (``λ`` LLM calls/s, ``c`` tool calls per LLM call); the number in wait is
that of an M/G/∞ queue, Poisson with mean ``m`` whatever the wait distribution, so a
quantile ``q`` of it is :func:`poisson_quantile` and both memory terms carry the tail
factor ``f = Q_q(m) / m ≥ 1`` (``f = 1`` when planning for the mean).

Break-even (per wait, equating hold and offload)::

    b f W p_h = b f W p_o + C_r   =>   W* = C_r / (b f (p_h − p_o))       (∞ when p_h <= p_o)

Waits shorter than ``W*`` are cheaper held, longer ones offloaded. Offload beats recompute
when ``b f W p_o + C_r < C_rc``: with a cheap tier, exactly when the reload is faster than
the recompute (``t_rl β < t_rc``).
"""

from __future__ import annotations

import math

from planner.units import SECONDS_PER_HOUR


def poisson_quantile(q: float, mean: float) -> float:
    """Smallest ``k`` with ``P(N <= k) >= q`` for ``N ~ Poisson(mean)``, exact at any mean
    (:func:`planner.queueing.poisson_quantile`, scipy's Poisson cdf and its inverse)."""
    from planner.queueing import poisson_quantile as poisson_quantile_many

    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    return float(poisson_quantile_many(q, max(float(mean), 0.0)))


def tail_factor(q: float | None, mean: float) -> float:
    """``Q_q(m) / m`` for sessions in wait (1 for ``q is None`` or an empty queue)."""
    if q is None or mean <= 0.0:
        return 1.0
    return max(1.0, poisson_quantile(q, mean) / mean)


def instance_usd_per_month(*, tp: float, equipment_usd_per_device_hour: float, hours_per_month: float,
                           ops_usd_per_device_month: float = 0.0, license_usd_per_device_month: float = 0.0,
                           nic_usd_per_device_month: float = 0.0, idle_w_per_device: float = 0.0,
                           usd_per_kwh_facility: float = 0.0) -> float:
    """Monthly cost of one provisioned instance of ``tp`` devices (equipment, idle power, ops, licences, NIC)."""
    per_device = (equipment_usd_per_device_hour * hours_per_month + ops_usd_per_device_month + license_usd_per_device_month
                  + nic_usd_per_device_month + idle_w_per_device / 1e3 * hours_per_month * usd_per_kwh_facility)
    return tp * per_device


def hold_usd_per_byte_s(instance_usd_per_s: float, kv_capacity_bytes: float) -> float:
    """``p_h``: price of one byte of decode KV memory for one second."""
    return instance_usd_per_s / kv_capacity_bytes if kv_capacity_bytes > 0 else math.inf


def tier_usd_per_byte_s(usd_per_gb_month: float, hours_per_month: float) -> float:
    """``p_o``: price of one byte of tier capacity for one second."""
    return usd_per_gb_month / 1e9 / (hours_per_month * SECONDS_PER_HOUR)


def reload_usd(reload_s: float, busy_share: float, instance_usd_per_s: float, rho: float) -> float:
    """``C_r``: instance time a reload occupies, at the instance price over its utilisation cap."""
    return reload_s * busy_share * instance_usd_per_s / rho


def breakeven_wait_s(kv_bytes: float, hold_price: float, tier_price: float, reload_cost_usd: float, tail: float = 1.0) -> float:
    """``W* = C_r / (b f (p_h − p_o))``: waits longer than this are cheaper offloaded (∞: never)."""
    denom = kv_bytes * tail * (hold_price - tier_price)
    if denom <= 0:
        return math.inf
    return reload_cost_usd / denom
