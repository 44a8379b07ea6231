"""The lane a least-loaded router sends a long prompt to: the simulator's law against the analytic one (issue 24 item 3).

Run: ``python benchmarks/bench_router_lane.py [--counts 4,17,64] [--utilisations 0.3,0.5,0.7,0.85,0.95]
[--input-tokens 8000] [--outputs 200] [--spread-outputs] [--iterations] [--random-ties]`` (~1 minute per count on the
2-core VM; ``--outputs`` and ``--spread-outputs`` are the grid's, :mod:`bench_latency_at_load`; ``--random-ties``: the
simulator's router breaks ties at random, :func:`random_ties`).

The grid plan of ``benchmarks/bench_latency_at_load.py`` (one A100, Llama-3.1-8B bf16, vLLM calibration,
8,000-token prompts and 200-token outputs: every prompt holds its instance's chunked-prefill lane for
several iterations) is spread over ``c`` instances (rates and KV scaled with the count) and run at each
utilisation in :mod:`planner.simulate` (2 seeds). At every admission into a unified pool the simulator's
router (:meth:`planner.simulate.engine._Sim.admit`: a central FCFS queue feeding the instance with the fewest
requests in flight, ``X = N + L``, ``N`` decoding and ``L`` in the prefill lane, ties to the lowest index)
is observed: ``K``, the prompts already in the chosen instance's lane, and, across the instances, the
variance of ``N``, ``L`` and ``X`` and the covariance of ``N`` and ``L``. Printed per count and
utilisation: ``P(K ≥ k)`` simulated, under the analytic law :func:`planner.pool_latency._jsq_ahead_pmf`
(at the lane utilisation ``ρ`` and the decode batch the plan's model gives), and under random routing to an
M/D/1 lane (``K`` the number an arrival finds in an M/D/1 queue at ``ρ``: equal prompts hold the lane for
equal times); then the analytic and simulated TTFT p50 / p99.

Measured 2026-12-05 (``python benchmarks/bench_router_lane.py``, 4 / 17 / 64 instances at 30–95 %), what the
analytic law leaves out:

* **The router's count does not see the lane.** Across 4 instances at 85 % utilisation Var N 3.7, Var L 2.1,
  Var X 1.5, Cov(N, L) −2.2: the decoding count makes up for the lane almost one for one (an instance whose
  prompts wait in its lane has fewer decoding: it was chosen when its decodes had finished), so ``X`` and
  ``L`` are nearly uncorrelated (−0.02 behind 4 instances, 0.10 behind 17). Behind 4 instances the chosen
  lane's ``K`` is the M/D/1 law of random routing from 50 to 85 % (``P(K ≥ 1..5)`` at 85 %: 0.72 / 0.45 /
  0.24 / 0.12 / 0.06 simulated, 0.74 / 0.45 / 0.26 / 0.14 / 0.08 M/D/1; the shipped law 0.58 / 0.32 / 0.18 /
  0.09 / 0.05): that is the TTFT p50 the analytic model misses by −23…−27 % there.
* **The chosen lane is busy more often than the shipped law says at every count**: ``P(K ≥ 1)`` simulated is
  0.57–0.98 of ``ρ`` (behind 64 instances at 30 %: 0.149 against 0.027 shipped; the TTFT p99 −25 % there).
* **Behind 17 and 64 instances the tail is cut** (85 %: ``P(K ≥ 4)`` 0.013 and 0.000 simulated against 0.14
  M/D/1; behind 64 a prompt finds at most two ahead), and the lanes are lighter than M/D/1 (mean L 1.36 against
  1.77 behind 17 at 85 %: each instance's arrivals are more regular than Poisson).
* At 95 % the simulator's full slots cut the tail at every count (4 instances: ``P(K ≥ 5)`` 0.044 simulated,
  0.20 M/D/1); the analytic TTFT p99 is +114 / +63 / +33 % there behind 4 / 17 / 64 instances.
* Tried against ``bench_latency_at_load.py`` by substituting the law (not shipped): random routing to M/D/1
  lanes puts 4 instances' TTFT p50 within 1 % at 50–95 % and p99 within 8 % at 50–70 %, but p99 +27 / +28 %
  at 10 / 30 % and +84 % at 95 %, and +218 / +286 % behind 17 / 64 instances; the shipped selection model
  (decode counts of dispersion ``1/√c`` independent of the lane) with M/D/1 lanes in place of geometric ones,
  at dispersion ``1/√c`` or 1: the 4-instance p50 still −17…−29 %. No law with the decode count independent of
  the lane fits both the body (random) and the tail (cut, more so with ``c``); the count's compensation has to
  be modelled. Open (issue 24 item 3).

Measured 2026-12-07, night (the chosen instance against the others, printed since: its lane and decoding counts,
the time left of its iteration in progress against a random instance's, the counts' spread):

* **The counts stay within about one of each other at every batch**: sd of ``X`` across instances 0.87 / 0.48
  (8,000-token prompts, 200 outputs, 70 %, behind 4 / 64), 0.73 / 0.51 (1,000-token, outputs spread around 200,
  ``--input-tokens 1000 --spread-outputs``), 0.46–0.58 (8,000-token, 40 outputs, ``--outputs 40``, 50–70 % behind 4 /
  17), for decode batches from 0.6 to 158: the independent counts of dispersion ``1/√c`` spread as ``√(B/√c)``, 4.4
  at a batch of 158 behind 64.
* **The chosen instance decodes more than the least of independent counts**: ratio to the mean 0.934 / 0.957
  (``_chosen_batch_ratio`` 0.824 / 0.753) at a batch of 17, 0.996 / 0.995 (0.942 / 0.931) at 158, 0.13–0.66
  (0.00–0.33) below 1.2.
* **A short prompt's instance has just ended an iteration**: 108 / 148 ms left of its iteration against 93 / 99 ms
  for a random instance (1,000-token, behind 4 / 64); 16–120 ms against 149–215 ms (8,000-token, 40 outputs: the
  router puts it in an idle lane); none at 200 outputs for 8,000-token prompts (157 / 158 against 155 / 153 ms).
* The chosen lane holds 0.84 / 0.65 of the mean lane's prompts (1,000-token behind 4 / 64); the lane tilt of
  ``_jsq_ahead_pmf``'s law over the short prompts' grid predicts 0.84 / 0.52 — tried as the short prompts' TTFT law
  and not shipped (``bench_latency_at_load.py``'s docstring).

Measured 2026-12-07, late (``--input-tokens 1000 --counts 1,4,17,64 --utilisations 0.5,0.85 --iterations``, ~4 min: each
prompt's wait for its first iteration, that iteration, and the share of the chosen instance's iteration still to run):

* **A short prompt waits nearly a whole iteration behind many instances**: at 85 % the wait for its first iteration is
  122 / 143 / 169 / 178 ms on average behind 1 / 4 / 17 / 64 instances (83 / 97 / 127 / 141 at 50 %), while that
  iteration is as full (2.63 / 2.46 / 2.58 / 2.43 prompts, 262–275 ms); the share of the chosen instance's iteration
  left at admission has median 0.52 / 0.73 / 0.91 / 0.96. The router fills the slot a departure left, and departures
  leave at an iteration's end: that is the −15…−20 % TTFT p50 behind 17 / 64 instances of the grid.
* **A law of it, tried in a scratch copy and not shipped**: the age of the slot a newcomer fills from a balls-into-bins
  chain (arrivals to the least-loaded of ``c`` bins, departures from random ones: its median age at filling 1.2 / 2.2 /
  4.1 pool inter-arrival times behind 4 / 17 / 64, the number of least-loaded bins it implies — mean 2.2 / 6.3 / 15.8 —
  as probed, 1.8 at 4 and 11.6–13.1 at 64), the iteration in progress unbiased and the arrivals per iteration those of
  the departures (not the iteration's length): TTFT p50 behind 17 / 64 at 70–95 % −1…−18 % (shipped −11…−20 %), p99
  −3…−11 % (+6…+17 %); with the iteration length-biased as for a random instance, p50 −6…+13 % but p99 +10…+28 %
  (``bench_latency_at_load.py --only-counts --counts 4,17,64``).
  Neither is better across the grid than the law shipped. With the router's lane tilt of the night before
  (:func:`planner.pool_latency._jsq_tilt` over ``K' + (1 − u) M``) on top of the length-biased variant: 40-token answers'
  8,000-token TTFT behind 4–64 instances p50 within ±1 % but one cell (+50…+124 % shipped) and p99 within ±16 % but at
  four single-prompt cliffs (+68…+298 %); 200-token answers' 1,000-token p99 behind 17 / 64 at 50–95 % −13…+11 %, p50
  −13…−19 %; but 40-token answers' 1,000-token p50 behind 17 / 64 at 30–85 % −23…−62 % (−22…−52 % shipped)
  (``bench_latency_at_load.py --only-counts --counts 4,17,64 [--outputs 40]``, 2026-12-07, late). The lane tilt is the
  direction for prompts near a chunk; the short prompts behind many instances wait for something neither law has.

Tried on 2026-12-08 and not shipped: the long prompts' lane law with each lane M/G/1 over its services (for these equal
prompts M/D/1: ``P(L ≥ 5)`` 0.197 at ρ 0.824 against the geometric 0.380) in place of the geometric law, the router's
tilt (dispersion ``1/√c``) kept. Re-priced against the simulated values of the 2026-12-07 runs (the simulator
untouched), 8,000-token TTFT behind 4–64 instances: TTFT p99 at 95 % +26 / +40 / +35 % → +16 / +27 / +31 % behind 4 /
17 / 64, the spread grid 24 → 29 of 36 figures within ±15 %, but the as-solved plan's 4 instances at 50–85 % −7 / −23 /
−4 % → −18 / −36 / −24 % (``tests/test_latency_at_load.py``'s 70 % cell fails), the one-bucket grid 21 → 19 of 36.
Behind 4 instances the simulated lane is M/D/1 and the choice nearly blind to it (``P(K ≥ 1..3)`` 0.72 / 0.45 / 0.24
at 85 % against M/D/1's 0.74 / 0.45 / 0.26): the shipped law's agreement there is the geometric law's heavier tail
making up for the tilt's; each needs the other's error. With dispersion 1 or ``1/c`` instead: 64 and 63 of 108
(``1/√c`` 67; geometric, shipped, 64). The examples' costs did not move under it.

Measured 2026-12-08 (8,000-token prompts; ``P(K ≥ 1 / 2 / 3)`` of the chosen lane at 50 %), what the constant outputs
and the simulator's tie rule put into the law above:

* **Constant outputs echo the router's clusters.** Every request decodes 200 tokens, so an instance's sequences leave in
  the order and at the spacing they were admitted, 200 of its iterations later, and the slots they free call the next
  prompts back to the same instance together: behind 17 instances 0.336 / 0.096 / 0.019 against M/D/1's 0.434 / 0.126 /
  0.031. With the outputs spread (``--spread-outputs``: 25–375 tokens, mean 200; ρ 0.420, batch 7.0) the echo is gone
  and the law is lighter than M/D/1's at every count: 0.319 / 0.043 / 0.004 behind 4, 0.231 / 0.020 / 0.000 behind 17,
  0.175 / 0.012 / 0.000 behind 64. There the shipped law's second prompt is within a factor 2.4 (``P(K ≥ 2)`` 0.052 /
  0.013 / 0.005) but its first too rare behind many instances (``P(K ≥ 1)`` 0.244 / 0.131 / 0.083): TTFT
  p99 behind 64 at 30 / 50 % −23 / −20 % (1,112 / 1,447 and 1,391 / 1,728 ms), and behind 4 at 85 % +56 % (4,906 /
  3,144), where the geometric lane's tail is heavier than the lane's.
* **The tie rule matters.** The simulator's router takes the lowest index among the least loaded, as ``min`` over a
  list does; ``--random-ties`` draws among them (:func:`random_ties`): ``P(K ≥ 1)`` behind 4 / 17 instances 0.408 /
  0.336 → 0.458 / 0.443 (constant outputs), behind 17 / 64 with spread outputs 0.231 / 0.175 → 0.264 / 0.227, TTFT
  p99 behind 64 at 50 % 1,728 → 1,797 ms. The law has no tie rule in it; which rule a deployment's router follows is its own.
* **Why the lane is lighter behind more instances**: ``bench_router_stylised.py`` (a model without the engine).
* **Tried, not shipped**: a short prompt's ITL quantile from the lane chain the TTFT reads (``_lane_count_pmf``: the
  excess over a chunk carried, the router's clock behind ``c`` instances) in place of the branching
  law's two moments (:func:`planner.pool_latency._itl_quantile_s`). Re-priced against the stored simulated ITL of the
  grid (``--only-counts``; 200 / 40 outputs, spread 200 / 40): 96 / 74 / 94 / 20 → 94 / 74 / 90 / 22 of 96 / 96 / 96 / 24
  figures within ±15 % (the router's clock lowers the p99 behind 17 / 64: 453 → 379 ms against 452 simulated). The 40-token
  answers' ITL misses are quantiles on a ladder of iterations 74 ms apart (54 ms plus one 1,000-token prompt each): at 95 %
  the simulated median iteration holds 4 prompts (349 ms), the chain's 3 (275), its CDF at 3 prompts 0.508 against 0.467
  simulated.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_latency_at_load as grid  # noqa: E402

from planner import pool_latency as PL  # noqa: E402
from planner.simulate import engine  # noqa: E402


def _option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


COUNTS = tuple(int(c) for c in _option("--counts", "4,17,64").split(","))
INPUT_TOKENS = int(_option("--input-tokens", "8000"))  # the grid's prompt length (1000 or 8000)
UTILISATIONS = tuple(float(u) for u in _option("--utilisations", "0.3,0.5,0.7,0.85,0.95").split(","))
SEEDS = (0, 1)
REQUESTS = 4000
ITERATIONS = "--iterations" in sys.argv  # also time each prompt's wait for its first iteration and that iteration
RANDOM_TIES = "--random-ties" in sys.argv
"""The simulator's router breaks ties among the least-loaded instances at random (seeded) instead of by the lowest
index (:func:`random_ties`)."""


def random_ties(seed: int = 12345) -> Callable[[], None]:
    """Patch the simulator's router to pick among the least-loaded instances at random (``random.Random(seed)``) instead
    of the lowest index: every unified pool keeps its load index (``INDEX_MIN_INSTANCES``; the scan of a smaller pool
    makes the index's choices, :meth:`planner.simulate.engine._Sim.admit_indexed`) and the indexed admission draws
    one of the lowest level's members. Returns the function that restores both."""
    import random

    rng = random.Random(seed)
    indexed, index_min = engine._Sim.admit_indexed, dict(engine.INDEX_MIN_INSTANCES)

    def admit_random(sim: Any, pool: Any, by_load: list[int], now: float) -> None:
        q, insts = pool.queue, pool.insts
        while q:
            if not pool.levels:
                return
            members = by_load[(pool.levels & -pool.levels).bit_length() - 1]
            bits = []
            while members:
                bit = members & -members
                members ^= bit
                bits.append(bit)
            best = insts[bits[rng.randrange(len(bits))].bit_length() - 1]
            chosen = sim.with_kv_room(best, sim._by_load_order(pool, by_load, best), q[0].ctx + 1, pool.cap, now)
            if chosen is None:
                pool.kv_blocked += 1
                return
            sim.place(pool, chosen, q.popleft(), now)

    engine.INDEX_MIN_INSTANCES["unified"] = 1
    engine._Sim.admit_indexed = admit_random  # type: ignore[method-assign,assignment]

    def restore() -> None:
        engine._Sim.admit_indexed = indexed  # type: ignore[method-assign]
        engine.INDEX_MIN_INSTANCES.clear()
        engine.INDEX_MIN_INSTANCES.update(index_min)

    return restore


class Observer:
    """Records, at every admission into a unified pool, the chosen lane's ``K`` and the instances' counts."""

    def __init__(self) -> None:
        self.k: list[int] = []
        self.states: list[np.ndarray] = []
        self.chosen: list[int] = []
        """Per admission: the index of the instance the router chose (a row of ``states``)."""
        self.residual_s: list[tuple[float, float]] = []
        """Per admission: the time left of the chosen instance's iteration in progress, and of a random instance's."""
        self._admitting: Any = None
        self._last: dict[int, Any] = {}
        self._rng = np.random.default_rng(0)

    @staticmethod
    def left_s(inst: Any, now: float) -> float:
        """Time (s) to the end of ``inst``'s iteration in progress: a chunk iteration in flight (which begins at the end
        of the decode step in progress, its start ``t`` then ahead of ``now``: at most one step more than the
        iteration), the decode step the instance is in (its steps run back to back from its anchor ``t``), or 0 when
        it is idle."""
        pool = inst.pool
        if inst.in_iter:
            return inst.t + pool.iter_time(inst.n, sum(take for _req, take in inst.plan)) - now
        if inst.n == 0:
            return 0.0
        step = pool.table[inst.n]
        return inst.t - now if inst.t >= now else step - ((now - inst.t) % step)

    def install(self) -> Callable[[], None]:
        admit, reschedule = engine._Sim.admit, engine._Sim.reschedule
        obs = self

        def admit_observed(sim: Any, pool: Any, now: float) -> None:
            obs._admitting = pool if pool.role == "unified" else None
            try:
                admit(sim, pool, now)
            finally:
                obs._admitting = None

        def reschedule_observed(sim: Any, inst: Any, now: float) -> None:
            pool = obs._admitting
            if pool is not None and inst.pf and inst.pf[-1] is not obs._last.get(id(inst)):
                obs._last[id(inst)] = inst.pf[-1]  # the prompt just appended to the chosen lane (admit, unified)
                obs.k.append(len(inst.pf) - 1)
                obs.states.append(np.array([(i.n, len(i.pf) - (i is inst)) for i in pool.insts], dtype=float))
                obs.chosen.append(inst.idx)
                other = pool.insts[int(obs._rng.integers(len(pool.insts)))]
                obs.residual_s.append((obs.left_s(inst, now), obs.left_s(other, now)))
            reschedule(sim, inst, now)

        engine._Sim.admit = admit_observed  # type: ignore[method-assign,assignment]
        engine._Sim.reschedule = reschedule_observed  # type: ignore[method-assign,assignment]

        def restore() -> None:
            engine._Sim.admit = admit  # type: ignore[method-assign]
            engine._Sim.reschedule = reschedule  # type: ignore[method-assign]
        return restore


class IterationObserver:
    """Records, per prompt admitted to a unified pool (requests kept alive while recorded: ``id`` is their key), its
    arrival, its admission, the start and length of the first iteration that carries its chunk, the prompts in that
    iteration, and its first token; and, at each admission, the share of the chosen instance's iteration in progress
    still to run (:meth:`Observer.left_s` over the iteration's length)."""

    def __init__(self) -> None:
        self.rec: dict[int, dict[str, Any]] = {}
        self.left_share: list[float] = []

    def install(self) -> Callable[[], None]:
        place, start, first = engine._Sim.place, engine._Sim.start_iteration, engine._Sim.first_token
        obs = self

        def place_observed(sim: Any, pool: Any, chosen: Any, req: Any, now: float) -> None:
            if pool.role == "unified" and id(req) not in obs.rec:
                obs.rec[id(req)] = {"req": req, "arrival": req.turn_arrival, "admit": now}
                if chosen.in_iter:
                    whole = pool.iter_time(chosen.n, sum(take for _r, take in chosen.plan))
                else:
                    whole = pool.table[chosen.n] if chosen.n else 0.0
                if whole > 0:
                    obs.left_share.append(Observer.left_s(chosen, now) / whole)
            place(sim, pool, chosen, req, now)

        def start_observed(sim: Any, inst: Any, now: float) -> None:
            start(sim, inst, now)
            length = inst.pool.iter_time(inst.n, sum(take for _r, take in inst.plan))
            for req, _take in inst.plan:
                d = obs.rec.get(id(req))
                if d is not None and "start" not in d:
                    d.update(start=inst.t, length=length, prompts=len(inst.plan))

        def first_observed(sim: Any, req: Any, t: float) -> None:
            d = obs.rec.get(id(req))
            if d is not None and "first" not in d:
                d.update(first=t, measured=req.measured)
            first(sim, req, t)

        engine._Sim.place = place_observed  # type: ignore[method-assign,assignment]
        engine._Sim.start_iteration = start_observed  # type: ignore[method-assign,assignment]
        engine._Sim.first_token = first_observed  # type: ignore[method-assign,assignment]

        def restore() -> None:
            engine._Sim.place = place  # type: ignore[method-assign]
            engine._Sim.start_iteration = start  # type: ignore[method-assign]
            engine._Sim.first_token = first  # type: ignore[method-assign]
        return restore

    def summary(self) -> str:
        done = [d for d in self.rec.values() if d.get("measured") and "start" in d]
        if not done:
            return "    no measured prompt"
        wait = 1e3 * np.array([d["start"] - d["admit"] for d in done])
        length = 1e3 * np.array([d["length"] for d in done])
        prompts = np.array([d["prompts"] for d in done], dtype=float)
        share = np.asarray(self.left_share)
        return (f"    wait for its first iteration mean {wait.mean():.0f} ms (p50 {np.median(wait):.0f}); that iteration "
                f"{length.mean():.0f} ms with {prompts.mean():.2f} prompts; share of the chosen instance's iteration left: "
                f"median {np.median(share):.2f} (q25 {np.quantile(share, 0.25):.2f}, q75 {np.quantile(share, 0.75):.2f})")


def md1_number_pmf(rho: float, kmax: int) -> np.ndarray:
    """``P(K = k)``, ``k = 0..kmax``: the number an arrival finds in an M/D/1 queue at ``rho`` (PASTA: the number a
    departure leaves, the embedded chain ``K' = (K − 1)⁺ + A``, ``A ~ Poisson(ρ)``; mass beyond ``kmax`` on ``kmax``)."""
    n = kmax + 1
    a = PL._count_pmf(rho, 1.0, n + 1)
    trans = np.zeros((n, n))
    for i in range(n):
        base = max(i - 1, 0)
        trans[i, base:] = a[:n - base]
        trans[i, -1] += max(0.0, 1.0 - trans[i].sum())
    pi = PL._stationary(trans[None])
    if pi is None:
        raise RuntimeError(f"no stationary M/D/1 law at rho {rho}")
    return np.asarray(pi[0])


def lane_inputs(result: Any) -> tuple[float, float, int]:
    """The analytic lane utilisation, decode batch at load and live instances of the plan's unified pool."""
    from planner.pool_latency import plan_shares, unified_at_load

    plan = result.architectures["shared"]
    pts = pd.DataFrame(result.capacity.points)
    share = plan_shares(plan, pts)
    sizes = {p.name: p.instances for p in plan.pools}
    at = unified_at_load(pts, share, sizes, 0).dropna(subset=["batch_at_load"])
    lp = PL._lane_points(pts, share)
    if lp is None or not len(at):
        raise RuntimeError("the grid plan has no unified lane")
    ok, lam, _pools, _units, _outputs, _overhead = lp
    lane_s, _own = PL.lane_columns(pts)
    live = sum(sizes.values())
    rho = float(lam[ok].sum()) / live * float(lane_s[ok][0])
    return rho, float(at["batch_at_load"].iloc[0]), live


def tails(pmf: np.ndarray, kmax: int = 5) -> str:
    return " ".join(f"{float(pmf[k:].sum()):.3f}" for k in range(1, kmax + 1))


def main() -> None:
    print(__doc__.split("\n\n")[0])
    if RANDOM_TIES:
        random_ties()
        print("the simulator's router breaks ties at random (--random-ties)")
    with tempfile.TemporaryDirectory() as d:
        base = grid.solved_plan("shared", INPUT_TOKENS, Path(d))
        for c in COUNTS:
            plan_c = grid.at_instances(base, "shared", c)
            print(f"\n== {c} instances: P(K >= 1..5) of the chosen lane; analytic / simulated TTFT (ms)")
            for u in UTILISATIONS:
                res, _m = grid.at_utilisation(plan_c, "shared", u)
                rho, batch, live = lane_inputs(res)
                obs = Observer()
                its = IterationObserver() if ITERATIONS else None
                restore = obs.install()
                restore_its = its.install() if its is not None else None
                try:
                    sim = grid.simulated_quantiles(res, "shared", SEEDS, REQUESTS)
                finally:
                    if restore_its is not None:
                        restore_its()
                    restore()
                ana = grid.analytic_quantiles(res, "shared")
                k = np.bincount(np.asarray(obs.k, dtype=int), minlength=6) / max(len(obs.k), 1)
                st = np.stack(obs.states)
                n, lane = st[:, :, 0], st[:, :, 1]
                x = n + lane
                cov = ((n - n.mean(1, keepdims=True)) * (lane - lane.mean(1, keepdims=True))).mean(1).mean()
                kl = max(40, int(math.ceil(math.log(1e-12) / math.log(max(rho, 1e-3)))))
                print(f"util {u:.2f} rho {rho:.3f} batch {batch:5.1f}: simulated {tails(k)} | shipped law "
                      f"{tails(PL._jsq_ahead_pmf(rho, batch, live))} | M/D/1 {tails(md1_number_pmf(rho, kl))}")
                print(f"    across instances Var N {n.var(1).mean():.2f}  Var L {lane.var(1).mean():.2f}  Var X "
                      f"{x.var(1).mean():.2f}  Cov(N, L) {cov:+.2f}  mean L {lane.mean():.2f}; TTFT p50 "
                      f"{ana['ttft'][0]:,.0f} / {sim['ttft'][0]:,.0f}  p99 {ana['ttft'][1]:,.0f} / {sim['ttft'][1]:,.0f}")
                chosen = st[np.arange(len(st)), np.asarray(obs.chosen)]
                left = 1e3 * np.asarray(obs.residual_s)
                print(f"    chosen instance against the mean: lane {chosen[:, 1].mean():.2f} / {lane.mean():.2f}, decoding "
                      f"{chosen[:, 0].mean():.2f} / {n.mean():.2f} (ratio {chosen[:, 0].mean() / max(n.mean(), 1e-12):.3f}; "
                      f"_chosen_batch_ratio {PL._chosen_batch_ratio(batch, live):.3f}); left of its iteration "
                      f"{left[:, 0].mean():.0f} ms against {left[:, 1].mean():.0f} ms for a random instance; X range "
                      f"{(x.max(1) - x.min(1)).mean():.2f}, sd {x.std(1).mean():.2f}")
                at_min = (x == x.min(axis=1, keepdims=True)).sum(axis=1)  # the instances the router chooses among
                print(f"    instances at the router's minimum: one {np.mean(at_min == 1):.3f}, median {np.median(at_min):.0f}, "
                      f"90th percentile {np.percentile(at_min, 90):.0f}, mean {at_min.mean():.2f} (bench_router_stylised.py --holes)")
                if its is not None:
                    print(its.summary())


if __name__ == "__main__":
    main()
