"""The standard checks of a plan: normal load, peak, one instance failed per pool, model swap.

* ``normal`` — arrivals at the mean rate;
* ``peak`` — arrivals at the planned peak rate;
* ``failure`` — peak, with instance 0 of every pool down for the whole run (N−1 per pool:
  what redundancy ``k ≥ 1`` promises);
* ``model_swap`` — peak, with instance 0 of every pool offline from ``duration/3`` for its
  weight-reload time ``weight_bytes / (tp · load bandwidth)`` (each of the ``tp`` devices
  loads its shard in parallel); its work is requeued and recomputed elsewhere.

The first ``warmup_share`` of the run is simulated but not measured (the pools start empty). A stream
whose every arrival falls inside the warm-up (a replayed log compressed to the peak rate: a 20-minute log at
×80 lasts 15 s) would measure nothing; it is repeated back to back until the run's end, so the replayed
window lies after the warm-up too (:func:`after_warmup`, said in :attr:`ScenarioRun.note`). A scenario that
still measures no request says so (:attr:`planner.simulate.results.SimResult.measured`): it is not a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

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
    note: str = ""
    """How the arrivals were placed when the stream alone would have measured nothing (``""`` otherwise)."""

    @property
    def measured(self) -> bool:
        """At least one request was measured (a scenario without any is no verdict, met or missed)."""
        return self.result.measured > 0


def after_warmup(chunks: Iterator[RequestChunk], warmup_s: float, duration_s: float, notes: list[str]) -> Iterator[RequestChunk]:
    """``chunks`` as they are, unless all their arrivals fall before ``warmup_s``: then the stream is repeated
    back to back (period: its span plus one mean gap) until ``duration_s``, and a note says so. Chunks are held
    only while they lie inside the warm-up (memory bounded by the warm-up's arrivals)."""
    held: list[RequestChunk] = []
    for c in chunks:
        if not len(c):
            continue
        held.append(c)
        if float(c.arrival_s.max()) >= warmup_s:
            yield from held
            held = []
            yield from chunks
            return
    if not held:
        return
    first = min(float(c.arrival_s.min()) for c in held)
    last = max(float(c.arrival_s.max()) for c in held)
    n = sum(len(c) for c in held)
    period = (last - first) + ((last - first) / (n - 1) if n > 1 else max(warmup_s, 1.0))
    if period <= 0.0:
        period = max(warmup_s, 1.0) / max(n, 1)
    copies = 0
    while True:
        shift = copies * period - first
        if first + shift >= duration_s:
            break
        for c in held:
            keep = c.arrival_s + shift < duration_s
            if keep.any():
                yield RequestChunk(c.arrival_s[keep] + shift, c.input_tokens[keep], c.output_tokens[keep], c.service[keep],
                                   c.turns[keep], c.tool_wait_s[keep], c.append_tokens[keep])
        copies += 1
    notes.append(f"the arrivals ({n:,} over {last - first:,.3g} s) all fell inside the {warmup_s:,.3g} s warm-up: "
                 f"repeated back to back {copies:,} times to fill the {duration_s:,.3g} s run, so the window is measured after the warm-up")


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
        said: list[str] = []
        if name == "failure":
            alone = [p.name for p in pools if p.instances == 1]
            if alone:  # N−1 of one instance is none: what "lost" counts there is the pool's single point of failure
                said.append(f"{', '.join(alone)} {'has' if len(alone) == 1 else 'have'} one instance, which this scenario "
                            "takes down: every request routed through it is lost (redundancy k >= 1 keeps one more)")
        res = simulate(pools, routes, after_warmup(iter(stream(load, seed)), warm, duration_s, said), cfg, duration_hint_s=duration_s)
        if said:
            res = replace(res, note="; ".join(said))
        out.append(ScenarioRun(name, load, outages, res, "; ".join(said)))
    return out


def weight_reload_s(weight_bytes: float, tp: int, load_gb_per_s: float) -> float:
    """Seconds to reload one instance's weights: each of ``tp`` devices loads ``W/tp``."""
    if load_gb_per_s <= 0 or tp < 1:
        return math.inf
    return weight_bytes / tp / (load_gb_per_s * 1e9)
