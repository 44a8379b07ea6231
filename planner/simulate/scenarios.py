"""The standard checks of a plan: normal load, peak, one instance failed per pool, model swap.

* ``normal`` — arrivals at the mean rate;
* ``peak`` — arrivals at the planned peak rate;
* ``failure`` — peak, with instance 0 of every pool down for the whole run (N−1 per pool:
  what redundancy ``k ≥ 1`` promises);
* ``model_swap`` — peak, with instance 0 of every pool offline from ``duration/3`` for its
  weight-reload time ``weight_bytes / (tp · load bandwidth)`` (each of the ``tp`` devices
  loads its shard in parallel); its work is requeued and recomputed elsewhere.

The first ``warmup_share`` of the run is simulated but not measured (the pools start empty).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.simulate.arrivals import RequestChunk
from planner.simulate.engine import simulate
from planner.simulate.results import SimResult
from planner.simulate.spec import Outage, PoolSpec, ServiceRoute, SimConfig

SCENARIOS: tuple[str, ...] = ("normal", "peak", "failure", "model_swap")

StreamFactory = Callable[[str, int], Iterator[RequestChunk]]
"""``(load, seed) -> stream`` where load is ``"mean"`` or ``"peak"``."""


@dataclass(frozen=True)
class ScenarioRun:
    name: str
    load: str
    outages: tuple[Outage, ...]
    result: SimResult


def run_scenarios(pools: list[PoolSpec], routes: list[ServiceRoute], stream: StreamFactory, *,
                  duration_s: float, seed: int, reload_s: dict[str, float] | None = None,
                  scenarios: tuple[str, ...] = SCENARIOS, warmup_share: float = 0.1) -> list[ScenarioRun]:
    """Run the named scenarios with the same seed (common random numbers across scenarios)."""
    reload_s = reload_s or {}
    warm = warmup_share * duration_s
    out = []
    for name in scenarios:
        load = "mean" if name == "normal" else "peak"
        outages: tuple[Outage, ...] = ()
        if name == "failure":
            outages = tuple(Outage(p.name, 0, 0.0) for p in pools if p.instances > 0)
        elif name == "model_swap":
            start = duration_s / 3.0
            outages = tuple(Outage(p.name, 0, start, start + reload_s.get(p.name, 0.0))
                            for p in pools if p.instances > 0 and reload_s.get(p.name, 0.0) > 0)
        elif name not in ("normal", "peak"):
            raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
        cfg = SimConfig(warmup_s=warm, max_drain_s=max(duration_s, 60.0), outages=outages,
                        sample_interval_s=duration_s / 200.0)
        res = simulate(pools, routes, stream(load, seed), cfg, duration_hint_s=duration_s)
        out.append(ScenarioRun(name, load, outages, res))
    return out


def weight_reload_s(weight_bytes: float, tp: int, load_gb_per_s: float) -> float:
    """Seconds to reload one instance's weights: each of ``tp`` devices loads ``W/tp``."""
    if load_gb_per_s <= 0 or tp < 1:
        return math.inf
    return weight_bytes / tp / (load_gb_per_s * 1e9)
