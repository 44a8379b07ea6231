"""The chosen lane behind a least-loaded router in a stylised model, without the engine (issue 24 item 3).

Run: ``python benchmarks/bench_router_stylised.py [--counts 4,17,64] [--rho 0.42] [--batch 7.0] [--ratio 0.086]
[--decode spread|fixed|exp] [--arrivals N] [--holes]`` (~1 minute on the 2-core VM; ``--holes``: how many instances hold
the router's minimum when a prompt arrives, :func:`print_holes`).

What mechanism does the simulator's law of ``K`` (the prompts already in the lane of the instance a long prompt is
sent to; ``benchmarks/bench_router_lane.py``) need? A model with only these parts, event by event:

* ``c`` instances; Poisson arrivals at ``c λ``, ``λ = ρ / S`` per instance (``ρ`` the lane utilisation, ``S`` one
  prompt's lane time; the results depend on ``ρ``, not on ``S``, which only sets the clock);
* the router sends each arrival to an instance with the fewest requests in flight (prompts in its lane plus decoding
  sequences), ties to the lowest index (the simulator's rule) or at random;
* an instance's lane serves its prompts first come first served, each for ``S``;
* after its prefill a request decodes for a time ``D`` and leaves. ``D`` is drawn in *decode time*: an instance's
  decode clock runs at 1 while its lane is idle and at ``r = t_d / (t_d + δ)`` while a prompt is being prefilled
  (``--ratio``; a chunk iteration of ``t_d + δ`` holds every decode of the instance for one token, where a decode
  iteration takes ``t_d``), or always at 1 (``freeze off``). ``D`` has mean ``B / λ`` in real time (``B`` the decoding
  batch, ``--batch``) and is one of ``(2k + 1)/8`` of the mean, ``k = 0…7`` (``spread``: the latency grid's
  ``--spread-outputs``), the mean itself (``fixed``: every output 200 tokens) or exponential (``exp``).

Printed per count: ``P(K ≥ 1 / 2 / 3)``, ties to the lowest index and at random, with and without the freeze; M/D/1
(random routing) is ``P(K ≥ 1) = ρ``. The defaults are the latency grid's 8,000-token shared cell at 50 % with spread
outputs (``bench_router_lane.py --spread-outputs``: ρ 0.420, decoding batch 7.0; iterations of 43 ms decoding and
502 ms with a chunk). Nothing here is read from the planner: it is a check of which parts of the engine the lane law
has to model.

Measured 2026-12-08 (defaults, 150,000 arrivals a run, 3.5 min beside a test run), against ``bench_router_lane.py
--spread-outputs [--random-ties]`` (the planner's simulator, the same cell), ``P(K ≥ 1)``:

=========  ===============================  ===========================  ===========================
instances  simulator, lowest / random ties  stylised, freeze             stylised, no freeze
=========  ===============================  ===========================  ===========================
4          0.319 / 0.342                    0.290 / 0.318                0.361 / 0.375
17         0.231 / 0.264                    0.209 / 0.245                0.357 / 0.360
64         0.175 / 0.227                    0.153 / 0.204                0.360 / 0.356
=========  ===============================  ===========================  ===========================

(with the freeze, lowest index, ``P(K ≥ 2)`` 0.032 / 0.015 / 0.007 against the simulator's 0.043 / 0.020 / 0.012; the
shipped law :func:`planner.pool_latency._jsq_ahead_pmf` 0.244 / 0.131 / 0.083 and 0.052 / 0.013 / 0.005). Without the
freeze the router leaves the chosen lane where random routing puts it whatever ``c`` (one instance: 0.422 / 0.117
against M/D/1's 0.420 / 0.117); with it the stylised model falls with ``c`` as the simulator does, 7–13 % below it. The
mechanism: an instance that has just taken a long prompt frees no slot while it prefills it (its decodes wait out the
chunk iterations), so the router comes back to it only when the other instances have filled to its count — likelier
behind few instances than behind many. The shipped law (decode counts independent of the lane, dispersion ``1/√c``)
has the fall with ``c`` but not its size. With every output the same (``--decode fixed --rho 0.434 --batch 8.9``, the
grid's constant 200 outputs) the freeze gives the echo's heavier lane too: behind 4 / 17 instances, lowest index, 0.374
/ 0.092 and 0.392 / 0.123 against the simulator's 0.408 / 0.137 and 0.336 / 0.096 (random ties 0.421 / 0.116 and 0.444
/ 0.152 against 0.458 / 0.173 and 0.443 / 0.175). The router's state agrees too (``--holes --arrivals 60000``, 4 s;
``bench_router_lane.py --spread-outputs --counts 4,17,64 --utilisations 0.5`` prints the simulator's): the instances
holding the fewest in flight when a prompt arrives — one alone 0.475 / 0.293 / 0.218 of the time behind 4 / 17 / 64
(simulator 0.487 / 0.309 / 0.239), median 2 / 3 / 6 (2 / 3 / 7), 90th percentile 4 / 12 / 40 (4 / 12 / 36), mean 1.92
/ 4.85 / 13.7 (1.90 / 4.87 / 13.6), lowest-index ties. Not uniform over 1…c, as a two-level random walk of the
minimum's holes would have it (tried: that chain's ``P(K ≥ 1)`` 0.186 / 0.093 / 0.058). A law from this model (a
tagged instance's return to the router's minimum within its lane time, its decodes frozen meanwhile, from this law of
the minimum's size) is the open step of item 3.
"""

from __future__ import annotations

import heapq
import random
import sys
from collections import deque

import numpy as np


def _option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def _decode_time(rng: random.Random, mean: float, decode: str) -> float:
    if decode == "fixed":
        return mean
    if decode == "exp":
        return rng.expovariate(1.0 / mean)
    return mean * (2 * rng.randrange(8) + 1) / 8  # spread: 1/8, 3/8, ..., 15/8 of the mean


def chosen_lane_tails(c: int, rho: float, batch: float, *, ratio: float, freeze: bool = True, ties: str = "lowest",
                      decode: str = "spread", arrivals: int = 150_000, seed: int = 1,
                      holes: list[int] | None = None) -> np.ndarray:
    """``P(K ≥ k)``, ``k = 1, 2, 3``, of the stylised model (module docstring), the first tenth of the arrivals left out
    as warm-up. ``S`` is 1: times are in lane times. ``holes``: appended with, at each arrival, the number of instances
    holding the fewest in flight (the router's choice is among them), warm-up included."""
    rng = random.Random(seed)
    lam_i = rho  # per instance, S = 1
    slow = ratio if freeze else 1.0
    # D's mean in decode time: the real mean B / λ times the decode clock's mean rate, 1 − ρ + ρ r (the lane busy ρ)
    mean_d = batch / lam_i * ((1.0 - rho) + rho * slow)
    in_flight = [0] * c
    lane: list[deque[float]] = [deque() for _ in range(c)]  # each prompt's prefill end, in lane order
    lane_end = [0.0] * c
    clock = [0.0] * c          # decode clock, as of clock_at
    clock_at = [0.0] * c
    rate = [1.0] * c
    due: list[list[float]] = [[] for _ in range(c)]  # decode-clock times the instance's sequences leave at (heap)
    version = [0] * c
    events: list[tuple[float, int, int, int]] = [(rng.expovariate(c * lam_i), 0, -1, 0)]  # (time, kind, instance, version)
    ks: list[int] = []

    def advance(j: int, t: float) -> None:
        clock[j] += (t - clock_at[j]) * rate[j]
        clock_at[j] = t

    def next_departure(j: int, t: float) -> None:
        version[j] += 1
        if due[j]:
            heapq.heappush(events, (t + (due[j][0] - clock[j]) / rate[j], 2, j, version[j]))

    while len(ks) < arrivals:
        t, kind, j, ver = heapq.heappop(events)
        if kind == 0:  # an arrival: the router's choice, then the lane
            low = min(in_flight)
            tied = [i for i in range(c) if in_flight[i] == low]
            if holes is not None:
                holes.append(len(tied))
            i = rng.choice(tied) if ties == "random" else tied[0]
            q = lane[i]
            while q and q[0] <= t:
                q.popleft()
            ks.append(len(q))
            lane_end[i] = max(t, lane_end[i]) + 1.0
            q.append(lane_end[i])
            in_flight[i] += 1
            advance(i, t)
            rate[i] = slow
            next_departure(i, t)
            heapq.heappush(events, (lane_end[i], 1, i, 0))
            heapq.heappush(events, (t + rng.expovariate(c * lam_i), 0, -1, 0))
        elif kind == 1:  # a prefill ends: its decode begins; the clock runs at 1 again if the lane is empty
            advance(j, t)
            heapq.heappush(due[j], clock[j] + _decode_time(rng, mean_d, decode))
            rate[j] = slow if lane_end[j] > t + 1e-12 else 1.0
            next_departure(j, t)
        elif ver == version[j]:  # a departure still due
            advance(j, t)
            heapq.heappop(due[j])
            in_flight[j] -= 1
            next_departure(j, t)
    k = np.bincount(np.asarray(ks[arrivals // 10:]), minlength=4) / (arrivals - arrivals // 10)
    return np.array([k[n:].sum() for n in (1, 2, 3)])


def main() -> None:
    counts = tuple(int(c) for c in _option("--counts", "4,17,64").split(","))
    rho = float(_option("--rho", "0.42"))
    batch = float(_option("--batch", "7.0"))
    ratio = float(_option("--ratio", str(43.0 / 502.0)))
    decode = _option("--decode", "spread")
    arrivals = int(_option("--arrivals", "150000"))
    if "--holes" in sys.argv:
        print_holes(counts, rho, batch, ratio, decode, arrivals)
        return
    print(f"P(K >= 1 / 2 / 3) of the chosen lane: rho {rho}, decoding batch {batch}, decode clock while prefilling "
          f"{ratio:.3f}, decode times {decode}; M/D/1 (random routing): P(K >= 1) = {rho}")
    for c in counts:
        cells = []
        for freeze in (True, False):
            for ties in ("lowest", "random"):
                p = chosen_lane_tails(c, rho, batch, ratio=ratio, freeze=freeze, ties=ties, decode=decode, arrivals=arrivals)
                cells.append(f"{'freeze' if freeze else 'no freeze'}, {ties} {p[0]:.3f} / {p[1]:.3f} / {p[2]:.3f}")
        print(f"{c:3d} instances: " + "  |  ".join(cells))


def print_holes(counts: tuple[int, ...], rho: float, batch: float, ratio: float, decode: str, arrivals: int) -> None:
    """``--holes``: per count, with the freeze, how many instances hold the router's minimum when a prompt arrives."""
    print(f"instances at the router's minimum when a prompt arrives (with the freeze; rho {rho}, batch {batch})")
    for c in counts:
        for ties in ("lowest", "random"):
            seen: list[int] = []
            p = chosen_lane_tails(c, rho, batch, ratio=ratio, ties=ties, decode=decode, arrivals=arrivals, holes=seen)
            h = np.asarray(seen[arrivals // 10:])
            print(f"{c:3d} instances, {ties} ties: P(K >= 1) {p[0]:.3f}; one instance at the minimum {np.mean(h == 1):.3f}, "
                  f"median {np.median(h):.0f}, 90th percentile {np.percentile(h, 90):.0f}, mean {h.mean():.2f}")


if __name__ == "__main__":
    main()
