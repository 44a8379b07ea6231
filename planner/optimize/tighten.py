"""The verify-and-tighten loop: solve one architecture, check its tail latency, tighten the caps of the
pools that miss and re-solve (DESIGN §6, issue 7).

The analytic check and the factors it asks for are :mod:`planner.optimize.latency` (steps 1–3 there).
The loop:

4. Stop when every bucket meets its targets, or after ``SolveSettings.verify_rounds`` extra
   rounds (the plan then reports the miss). ``SolverInfo.rounds`` counts the solves.
5. With ``SolveSettings.simulation_check`` (``planner solve`` when ``options.verify``): the plan
   that passes the analytic check is simulated at peak (:func:`planner.verify.simulate_plan`,
   bursts replayed from the log). Each service missing a quantile names a pool
   (``SimulatedService.miss_pool``: for TTFT the pool with the largest simulated wait on the
   worst bucket's path — the larger of its mean and its SLO quantile —, ties to the first-token phase, and a near
   tie of two phases' pools (waits within ``MISS_TIE_BAND``, 15 %) to the one with fewer instances,
   :func:`planner.verify.ttft_miss_pool`; for TPOT its decode / unified pool). The factor is the simulated/target ratio
   ``f_p = clamp(sim_q / T, 1.05, 4)`` (largest over the services naming the pool); it divides the
   caps of the pool's points. When the miss has *moved* — the pool was not named before but a
   pool of the same phase (service, bucket, role) was — the factor divides the caps of the whole
   phase (:func:`phase_point_factors`): the pool by ``f_p``, and every other configuration of that
   role for the (service, bucket) pairs routed to it up to the phase's tightest cap so far, so the
   next solve cannot dodge again to a configuration that was never tightened (issue 13: a 70B long-prompt plan chased from prefill tp2 to tp4 to an
   untightened tp8, then dropped). The first round tightens the named pool alone: moving load to
   an alternative configuration is often the cheapest fix, and the check sees whether it holds. The MIP
   is re-solved, at most ``simulation_rounds`` times. A pool named again in a later round gets
   ``f_p ** (k + 1)`` on its ``k``-th repeat (clamped the same way) when the last step did not shrink its
   miss: a miss that a modest cap does not fix — e.g. a one-instance pool whose tail is service time more
   than queueing — is pushed off the pool instead of being chased in equal small steps until the rounds run
   out. A pool named again at the instance count it was named at (the step bought none: rounding had left it
   slack) gets ``f_p / r``, ``r`` the share of its working instances its load fills (:func:`_with_slack`). A
   miss that shrank is stepped by its own ``f_p`` again: long-context-assistant's relaxed disaggregated
   path missed its top latency group by 7.0, 4.8, then 0.8 % (14, 15, 17 tp4 prefill) and the escalated
   ×1.158 for the last 0.8 % bought 19 instances ($145,800) where ×1.05 asks for one more. The final plan carries its last check
   (``ArchitecturePlan.simulation``): met, or which pool misses and by how much. Every round also applies
   the analytic check's factors, and a plan that meets in simulation but misses the analytic check is
   tightened by those alone and checked again (same bound on rounds): a simulated round that moves load
   between configurations can leave the analytic check missed (long-context-assistant's disaggregated plan
   after MI300X's measured GEMM efficiency: TTFT 16.5 s analytic against 15 s, 14.9 s simulated, until this
   step). A plan that still
   misses is ranked after those that meet, and the verdict says after how many tightening rounds.
   Seeded, so the same input gives the same plan.

Points whose cap came with the table (measured capacity, ``utilization_cap`` given) are
not re-checked: a measured rate already includes queueing at the SLO. The tightened caps
of each architecture are recorded in ``CapacitySnapshot.utilization_caps`` (so that
``planner check`` verifies the load constraint with the caps actually used).

4b. Relax caps that are far too tight (:func:`planner.optimize.latency.relax_factors`): a prefill
   pool sized by caps from a one-server nominal pool can run at 1–2 % (code-completion-8b at rate
   ×1: 32 prefill instances), so more traffic cost less. After the analytic loop, such caps are
   raised to what the pool's actual size needs — at most ``RELAX_CEILING`` and never above the user's
   ``options.max_utilization`` (:func:`planner.optimize.latency.relax_ceiling`: a hard bound on every
   cap; only the queueing-derived part is loosened) — and the model re-solved and re-checked; the relaxed
   plan is kept only when it passes the analytic check and costs less, and — with the peak
   simulation — when after its own simulated rounds it meets and still costs less than the first
   path's final plan (both paths are simulated; ``SolveSettings.relax``). A unified (shared) pool is
   relaxed the same way, to the fewest instances at which every bucket through it meets its targets
   (:func:`planner.optimize.latency._unified_instances_needed`): long-document-nvidia's shared plan
   15 → 14 B200 tp2, long-context-assistant's 16 → 14 MI300X tp4, both meeting in simulation.
6. Keep the cheaper of neighbouring solutions. The simulated factors are coarse (a miss whose
   requests never finish gets the largest step, ×4), and an over-tightened pool makes the reported
   cost jump and lose monotonicity (issue 13: code-completion-8b's disaggregated cost fell from
   $144,769 to $112,743/month when its traffic grew ×1.5). When the last simulated round that
   made the plan meet tightened some cap by ``REFINE_MIN_STEP`` (×1.05, the smallest simulated step) or more, the exponent
   ``t`` of that round's per-point factors is bisected (``SolveSettings.refine_rounds`` solves,
   from ``t = 1/2``): a plan at ``factors ** t`` that costs less and meets the analytic and the
   simulated checks replaces the current one; the first ``t`` that is not cheaper stops it, and a plan with the pools
   and routing of one that missed earlier in the bisection is taken as missing without a second check. Every simulated
   step is refined (:data:`REFINE_MIN_STEP`), not only those of x1.5 or more.
   The last analytic round is refined the same way, whatever its size (a step of ×1.05 or more
   can overshoot when the pool is small): a looser target's first solution missed and its
   tightened re-solve cost more than the tighter target's plan (synthetic tables, seed 598, rate
   ×4.5, TTFT ×2: shared $87,301 → $91,699; now $87,301 both; ``tests/test_monotone.py``).
7. One instance fewer in a shared pool (:meth:`_Loop.descend`, with the peak simulation): the final plan's unified
   pools, dearest first, each in turn has its caps raised by the smallest common factor at which its load at the
   plan's routing fits one instance fewer (:func:`_caps_to_fit`: each cap at most
   :func:`planner.optimize.latency.relax_ceiling`, a cap near it stopping there while the others rise; never measured
   caps), the model re-solved; a plan that costs
   less and meets the analytic and the simulated checks replaces the current one (``SolveSettings.descent_rounds``
   solves). A unified pool's caps come from the nominal pool of one latency group, which grows with the traffic
   (step 4b's unified branch sizes the pool by count for the same reason), so a lower traffic's loop can end one
   instance above what its simulation needs: long-context-assistant at traffic ×0.8 kept 13 MI300X tp4 ($78,497)
   after its relaxed path had put a two-instance tp1 pool beside 12 and the simulation named it, where ×0.85 solved
   to 12 tp4 ($73,020); 12 meet at ×0.8 too ($72,924 now). When no pool can lose an instance, the shared pools'
   traffic is moved onto the dearest of them (:meth:`_Loop._merge`): its caps raised to what the merged load
   needs at a count between the fewest instances at which every bucket through it meets the analytic check
   (:func:`planner.optimize.latency.unified_instances_meeting`) and the ceiling holds and the most that cost less than
   the pools do — the most first, then lower by bisection while a count meets (``descent_rounds`` solves; the
   analytic check of a shared pool's long prompts is optimistic, so its fewest can miss in simulation where one more
   meets) —; re-solved and checked the same way. Neither the relaxation (4b: each pool at its own routing) nor
   one fewer merges pools: long-document-nvidia at ×0.9 kept 9 B200 tp1 + 9 tp2 ($82,353) where 13 tp2 meet
   ($78,072), and long-context-assistant's own plan 14 MI300X tp4 + 2 tp1 ($88,749) where 14 tp4 meet ($84,457; in the check's 400-s run of then: the
   runs ``c²`` times longer since miss with them, :mod:`planner.verify` *Size*) —
   at 4, 8 and 16 length buckets alike (at 16 its loop ended at 15 tp4, $90,029, and scaling every cap alike stopped at
   the first to reach the ceiling, so one fewer was never tried).
   Not prefill or decode pools: there one instance fewer in
   one phase moves the simulated miss to the other (their waits near a tie, step 5), and the descent's reach depends
   on the path — code-completion-8b's disaggregated plan dropped three prefill instances at 8 length buckets and
   none at 4 (4 → 3 decode instead), its bucket spread 3.9 → 8.2 %, and at ×0.8–×1.2 its series moved more, not
   less (8 inversions, largest 9.5 %, against 7 and 8.1 %).
8. Another route for a phase (:meth:`_Loop.reroute`, with the peak simulation): the final plan's prefill, decode and
   unified pools in a phase it serves with two pools or more, most tightened first (the largest ``ρ_base / ρ`` over a pool's
   points), ``SolveSettings.reroute_tries`` of them, one per usable core: each pool's configuration closed (its big-M 0,
   :data:`planner.optimize.prepare.CLOSED_COLUMN`) and the instance solved afresh from the base caps through every
   step above, its simulated loops stopping once it cannot undercut the plan in hand (``bar_usd_per_month``, as the
   relaxed path's do); the cheapest plan that meets the analytic and the simulated checks and costs less replaces the
   final one. Why: the loops tighten a pool's caps for every bucket on it, so a bucket whose own service time leaves little
   room (code-completion-8b's 1,402–2,733-token prompts on L40S at traffic ×0.8) drags the whole pool to a low
   utilisation round after round (55 L40S beside 30 H100, $119,346), where without that configuration the same
   traffic meets on 39 H100 ($95,122); the path, not the traffic, set the cost (×0.8 $119,346, ×0.9 $109,512, ×1
   $117,299). Closing a pool is the one move the caps cannot express: the MIP sees the tightened caps of the
   bucket that caused them on every bucket of the pool. Shared (unified) pools too, since the peak simulation runs
   long enough for its bursts (:mod:`planner.verify`, *Size*): code-completion-8b's shared plan at traffic ×1.05 ended
   at 17 H100 tp1 + 15 tp4 ($166,332, its tp1 pool's caps divided by 4) between $121,136 at ×1 and $125,317 at ×1.1;
   without tp1 it meets on 28 tp2 ($121,148). A shared plan's one pool too, when the loops tightened its caps (×1.05 or
   more) and another shared configuration is open: the loops tighten the configuration they are on and never go back to
   the one they left (code-completion-8b's shared plan at ×1 ended at 14 H100 tp4, $121,166, above ×1.05's $116,991;
   without tp4 it meets on 27 tp2, $116,979). An agent service's plan (a tool phase) is not rerouted.

The discrete-event check is injected (``SolveSettings.simulation_check``, a callable): this
module does not import :mod:`planner.verify`, which sits above the optimiser
(:mod:`planner.solve_instance` wires the two together), so the flow stays one-way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from planner.optimize.architecture import solve_architecture
from planner.optimize.highs import make_solver
from planner.optimize.latency import relax_ceiling, relax_factors, tighten_factors
from planner.optimize.model import Built, build_model
from planner.optimize.prepare import Prepared, pool_n_max
from planner.optimize.settings import SolveSettings
from planner.optimize.verdict import make_verdict
from planner.schema.plan import ArchitecturePlan, CapacitySnapshot, PlanResult, PoolPlan

REFINE_MIN_STEP = 1.05
"""A simulated tightening whose largest factor reaches this is refined (module docstring, step 6): the smallest
step :func:`simulated_factors` takes, so every simulated step is. It was 1.5: code-completion-8b's shared plan at 8
buckets kept a x1.144 step (a simulation's noise against x1.136 at 4 buckets) that cost one more device
($91,493 against $87,914; `tests/test_tighten.py`); refined, the half step meets and 4, 8 and 16 buckets agree."""


def tighten_prepared(prep: Prepared, factors: Mapping[str, float] | np.ndarray) -> Prepared:
    """``prep`` with caps divided by factors; load coefficients and big-M updated.

    ``factors``: per pool name (every point of the pool), or an array with one factor per row of
    ``prep.points`` (:func:`phase_point_factors`)."""
    pts = prep.points.copy()
    if isinstance(factors, np.ndarray):
        f = np.maximum(np.asarray(factors, dtype=float), 1.0)
    else:
        f = pts["pool"].map(dict(factors)).fillna(1.0).to_numpy(float)
    pts["rho"] = pts["rho"].to_numpy(float) / f
    pts["load_peak_coef"] = pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / pts["rho"]
    pools = prep.pools.copy()
    # the one big-M definition prepare() uses (inline-encode split, KV term); never below the prepared one
    pools["n_max"] = np.maximum(pools["n_max"].to_numpy(int), pool_n_max(pts, pools))
    tool = prep.tool
    if tool is not None:
        from planner.agents.prep import refresh_caps

        tool = refresh_caps(tool, pts)  # reload/recompute load coefficients carry 1/rho too
    return replace(prep, points=pts, pools=pools, tool=tool)


def phase_point_factors(prep: Prepared, plan: ArchitecturePlan, pool_factors: Mapping[str, float],
                        applied: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``prep.points``: the factor dividing its cap when a simulated miss has moved to the
    named pools from another configuration of the same phase (module docstring, step 5).

    A pool ``P`` (role ``r``) named with factor ``f``: every point of ``P`` gets ``f`` (all buckets
    share its queue); every other point of role ``r`` of the (service, bucket) pairs the plan routes
    to ``P``, in every configuration, is levelled up to the phase's tightest cap so far (``applied``:
    per point the tightening already in its cap, ``ρ_base / ρ``). So the next solve cannot dodge to
    a configuration that was never tightened, while the pool that misses now is tightened by its own
    miss only (not by another configuration's, which over-tightens: measured on code-completion-8b,
    shared $274k against $205k)."""
    pts = prep.points
    done = np.ones(len(pts)) if applied is None else np.maximum(np.asarray(applied, dtype=float), 1.0)
    f = np.ones(len(pts))
    pool_of = pts["pool"].astype(str).to_numpy()
    role_of = pts["role"].astype(str).to_numpy()
    pair = (pts["service"].astype(str) + "\x00" + pts["bucket"].astype(str)).to_numpy()
    roles = {p.name: str(p.role) for p in plan.pools}
    for pool, fac in pool_factors.items():
        served = {f"{r.service}\x00{r.bucket}" for r in plan.routing if r.pool == pool}
        sel = (pool_of == pool) | ((role_of == roles.get(pool, "")) & np.isin(pair, list(served)))
        if not sel.any():
            continue
        others = sel & (pool_of != pool)
        level = float(done[sel].max())  # the phase's tightest cap so far
        f = np.where(pool_of == pool, np.maximum(f, float(fac)), f)
        f = np.where(others, np.maximum(f, level / done), f)
    return f


Remodel = Callable[[Prepared], "tuple[Built, Any] | None"]
"""A model of a tightened or relaxed prep and the solver to solve it on, or None to build one
(:meth:`planner.optimize.resolve.Resolver.remodel`: a sweep updates one model in place)."""


def _model_of(prep: Prepared, settings: SolveSettings, remodel: Remodel | None) -> tuple[Built, Any]:
    """The model of ``prep`` (``remodel``'s, else built) and a solver for it; ``build_s`` its seconds."""
    t0 = time.perf_counter()
    got = remodel(prep) if remodel is not None else None
    if got is None:
        nxt = build_model(prep, redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
        solver = make_solver()
    else:
        nxt, solver = got
    nxt.build_s = time.perf_counter() - t0
    return nxt, solver


def _solve_tightened(cur: Built, factors: Mapping[str, float] | np.ndarray, architecture: str,
                     settings: SolveSettings, remodel: Remodel | None = None) -> tuple[ArchitecturePlan, Built]:
    """Rebuild with the named pools' caps divided by their factors and solve again.

    Rebuilt (or, with ``remodel``, its parameters set in place) rather than the current model updated: the
    instance-count bounds (big-M) must grow with the load, and the loop reads earlier models' preps.
    """
    nxt, solver = _model_of(tighten_prepared(cur.prep, factors), settings, remodel)
    return solve_architecture(nxt, solver, architecture, settings), nxt


def solve_verified(built: Built, solver: Any, architecture: str, settings: SolveSettings, *,
                   first: ArchitecturePlan | None = None, remodel: Remodel | None = None,
                   bar_usd_per_month: float | None = None) -> tuple[ArchitecturePlan, Built, list[dict[str, Any]]]:
    """Solve one architecture, then verify tail latency and tighten caps until met (bounded rounds).

    Returns the final plan, the model it came from and the tightened caps (records for the snapshot).
    ``first``: the plan of ``built`` as it stands, when the caller has solved it already (not solved again).
    ``remodel``: where the tightened and relaxed models come from (:data:`Remodel`; None: built afresh; the
    LP is the same either way, so is the plan). ``bar_usd_per_month``: a plan another path found (step 8): the simulated
    loops stop once this path cannot undercut it (:meth:`_Loop._cannot_undercut`).
    The steps (module docstring): the analytic loop (4), relaxing over-tight caps (4b), the simulated
    loop (5) on both paths, refining (6), one instance fewer (7), another route for a phase (8); :class:`_Loop`
    carries the state they share.
    """
    plan = first if first is not None else solve_architecture(built, solver, architecture, settings)
    loop = _Loop(built=built, architecture=architecture, settings=settings, plan=plan, cur=built, rounds=1,
                 total_time=plan.solver.time_s, total_build=plan.solver.build_s,
                 base_rho=built.prep.points["rho"].to_numpy(float), remodel=remodel, bar_usd_per_month=bar_usd_per_month)
    loop.analytic_loop()
    relaxed_state = loop.relaxed() if loop.plan.feasible and settings.relax else None
    if settings.simulation_check is not None and loop.plan.feasible and loop.plan.pools:
        loop.sim_loop()
        if relaxed_state is not None:
            loop.sim_relaxed(relaxed_state)
        loop.descend()
        loop.reroute()
    elif relaxed_state is not None:
        loop.plan, loop.cur = relaxed_state[0], relaxed_state[1]
        loop.history[:] = relaxed_state[2]
    info = loop.plan.solver.model_copy(update={"rounds": loop.rounds, "time_s": loop.total_time, "build_s": loop.total_build})
    plan = loop.plan.model_copy(update={"solver": info})
    return plan, loop.cur, _caps_records(built, loop.cur, plan, architecture, loop.rounds, loop.history)


@dataclass
class _Loop:
    """The state :func:`solve_verified`'s steps share: the current plan and the model it came from,
    solves so far and their times, the history for the note, the last simulated step (for refining)."""

    built: Built
    architecture: str
    settings: SolveSettings
    plan: ArchitecturePlan
    cur: Built
    rounds: int
    total_time: float
    total_build: float
    base_rho: np.ndarray
    history: list[str] = field(default_factory=list)
    last_step: tuple[Built, np.ndarray] | None = None
    remodel: Remodel | None = None
    """Where tightened and relaxed models come from (:func:`solve_verified`)."""
    beat_usd_per_month: float | None = None
    """Set on the relaxed path when the first path's plan meets in simulation: the cost the relaxed
    path must undercut to be kept (:meth:`sim_relaxed`); :meth:`sim_loop` stops once it cannot."""
    bar_usd_per_month: float | None = None
    """The cost of a plan another path found (step 8, :meth:`reroute`): every simulated loop of this solve stops once
    it cannot undercut it, as it does for :attr:`beat_usd_per_month`."""

    def _cannot_undercut(self) -> bool:
        """Whether no later plan of this path can cost less than :attr:`beat_usd_per_month`: each
        later model (a simulated round, a refined step) divides caps of the current one, so its
        optimum is at least the current optimum, which is at least the current plan's cost less the
        MIP gap when HiGHS proved it optimal (relative gap ``mip_gap``, absolute 1e-6)."""
        bars = [b for b in (self.beat_usd_per_month, self.bar_usd_per_month) if b is not None]
        if not bars or self.plan.costs is None or self.plan.solver.status != "optimal":
            return False
        lower = self.plan.costs.total_usd_per_month * (1.0 - self.settings.mip_gap) - 1e-6
        return lower >= min(bars) - 0.005

    def _count(self, cand: ArchitecturePlan) -> None:
        self.rounds += 1
        self.total_time += cand.solver.time_s
        self.total_build += cand.solver.build_s

    def _passes(self, prep: Prepared, plan: ArchitecturePlan) -> bool:
        return not tighten_factors(prep, plan, self.settings.redundancy)[0]

    def tighten(self, factors: Mapping[str, float], label: str, per_point: np.ndarray | None = None) -> bool:
        """One more round with the named pools' caps divided (or ``per_point``, which covers them);
        False when it leaves no plan."""
        self.history.append(label + ", ".join(f"{p} x1/{f:.3g}" for p, f in sorted(factors.items())))
        cand, nxt = _solve_tightened(self.cur, per_point if per_point is not None else factors, self.architecture, self.settings,
                                     self.remodel)
        self._count(cand)
        if not cand.feasible:
            self.history.append(f"round {self.rounds}: tighter caps leave no feasible plan ({cand.solver.status}); kept the previous plan")
            return False
        self.plan, self.cur = cand, nxt
        return True

    def refine(self, before: Built, step: np.ndarray, *, simulated: bool = True) -> None:
        """Keep the cheaper of neighbouring solutions (module docstring, step 6): bisect the exponent
        ``t`` of the last tightening ``step`` (per point) from the model ``before`` it; a plan at
        ``step ** t`` that costs less and meets the analytic check (and, when ``simulated``, the
        simulated one) replaces the current one."""
        settings = self.settings
        if simulated and (float(np.max(step)) < REFINE_MIN_STEP or settings.simulation_check is None):
            return
        lo, hi = 0.0, 1.0
        missed: set[tuple[Any, ...]] = set()  # the plans (pools, routing) a round of this bisection saw miss
        for _ in range(settings.refine_rounds):
            t = 0.5 * (lo + hi)
            cand, nxt = _solve_tightened(before, np.power(step, t), self.architecture, settings, self.remodel)
            self._count(cand)
            assert self.plan.costs is not None
            if not (cand.feasible and cand.costs is not None and cand.costs.total_usd_per_month < self.plan.costs.total_usd_per_month - 0.005):
                break  # no cheaper plan with less tightening: keep the current one
            if _plan_key(cand) in missed:
                lo = t  # the same pools and routing as a plan that missed: it misses again (the checks read only those)
                continue
            chk = None
            passes = self._passes(nxt.prep, cand)
            if passes and simulated:
                assert settings.simulation_check is not None
                chk = settings.simulation_check(_check_result(nxt.prep, self.architecture, cand, settings), self.architecture)
            if passes and (not simulated or (chk is not None and chk.met)):
                self.history.append(f"refined: the last {'simulated' if simulated else 'analytic'} tightening to the power {t:.2f} "
                                    f"also meets and costs {self.plan.costs.total_usd_per_month - cand.costs.total_usd_per_month:,.0f} USD/month less")
                self.plan, self.cur = (cand.model_copy(update={"simulation": chk}) if chk is not None else cand), nxt
                hi = t
            else:
                lo = t
                missed.add(_plan_key(cand))

    def analytic_loop(self) -> None:
        """Step 4: tighten the pools the analytic check names until it passes (bounded rounds), then refine."""
        step: tuple[Built, np.ndarray] | None = None
        while self.plan.feasible and self.rounds <= self.settings.verify_rounds:
            factors, _buckets = tighten_factors(self.cur.prep, self.plan, self.settings.redundancy)
            before = self.cur
            if not factors or not self.tighten(factors, ""):
                break
            step = (before, before.prep.points["pool"].astype(str).map(factors).fillna(1.0).to_numpy(float))
        if step is not None and self.plan.feasible and self.plan.costs is not None and self._passes(self.cur.prep, self.plan):
            self.refine(*step, simulated=False)

    def _relaxing_can_shrink(self, pts: pd.DataFrame, raised: np.ndarray, relax: Mapping[str, float]) -> bool:
        """Whether the raised caps let some relaxed pool drop an instance on the plan's own routing: its load row
        ``Σ λ τ / ρ x ≤ n − k`` (planner.optimize.model) at the raised caps needs fewer than its instances. When none
        can (a cap already at the ceiling, or a pool one instance over its load), the re-solve is skipped: the
        fleet-scale benchmark's two unified pools, relaxed by 3 % and 2 %, re-solved a 97k-variable MIP (7 s) to the
        same plan."""
        from planner.pool_latency import plan_shares

        load = _load_rows(pts, plan_shares(self.plan, pts), raised)
        pool = pts["pool"].astype(str).to_numpy()
        have = {p.name: p.instances for p in self.plan.pools}
        k = int(self.settings.redundancy)
        for p in relax:
            need = math.ceil(float(load[pool == p].sum()) - 1e-9) + k
            if p in have and max(need, k + 1) < have[p]:
                return True
        return False

    def relaxed(self) -> tuple[ArchitecturePlan, Built, list[str]] | None:
        """Step 4b: the plan with over-tight prefill and unified caps raised, re-solved and re-checked, when it passes
        and costs less (plan, model, history); None otherwise. The state is left at the first path's plan."""
        settings = self.settings
        top = relax_ceiling(user_max_utilization(self.cur.prep, settings))  # never above options.max_utilization
        relax = relax_factors(self.cur.prep, self.plan, settings.redundancy, ceiling=top)
        if not (relax and self.plan.costs is not None and self._passes(self.cur.prep, self.plan)):
            return None
        kept, kept_cur, kept_rounds, kept_history = self.plan, self.cur, self.rounds, list(self.history)
        pts = self.cur.prep.points
        ceiling = np.maximum(pts["rho"].to_numpy(float), top)  # relaxing never lowers a cap, nor lifts one above `top`
        raised = np.minimum(pts["rho"].to_numpy(float) / pts["pool"].astype(str).map(relax).fillna(1.0).to_numpy(float), ceiling)
        if not self._relaxing_can_shrink(pts, raised, relax):
            return None
        nxt, solver = _model_of(_with_caps(self.cur.prep, raised), settings, self.remodel)
        cand = solve_architecture(nxt, solver, self.architecture, settings)
        self._count(cand)
        if cand.feasible:
            self.history.append("relaxed: " + ", ".join(f"{p} x1/{f:.3g}" for p, f in sorted(relax.items())))
            self.plan, self.cur = cand, nxt
            self.analytic_loop()
        ok = self.plan.feasible and self.plan.costs is not None and self._passes(self.cur.prep, self.plan)
        out = None
        if ok and self.plan.costs is not None and kept.costs is not None and self.plan.costs.total_usd_per_month < kept.costs.total_usd_per_month - 0.005:
            out = (self.plan, self.cur, list(self.history))
        else:
            kept_history.append(f"relaxing over-tight caps gave no cheaper plan that passes ({self.rounds - kept_rounds} solve(s)); kept the first")
        self.plan, self.cur = kept, kept_cur
        self.history[:] = kept_history
        return out

    def sim_loop(self) -> None:
        """Step 5: simulate at peak, tighten the pools a miss names (the phase when it moved), re-solve;
        then refine the last step that made the plan meet (step 6)."""
        settings = self.settings
        sim_rounds = 0
        repeats: dict[str, int] = {}  # per pool: rounds that named it
        last_share: dict[str, float] = {}  # per pool: the miss share the last round that named it saw
        named_at: dict[str, int | None] = {}  # per pool: its instances when a round last named it
        tightened: set[tuple[str, str, str]] = set()  # (service, bucket, role) of the pools named so far
        while True:
            assert settings.simulation_check is not None
            if self._cannot_undercut():
                cost = self.plan.costs.total_usd_per_month if self.plan.costs is not None else math.nan
                bar = min(b for b in (self.beat_usd_per_month, self.bar_usd_per_month) if b is not None)
                self.history.append(f"simulation: stopped after {sim_rounds} round(s) at {cost:,.0f} USD/month, no less than "
                                    f"the {bar:,.0f} of the plan that meets")
                break
            check = settings.simulation_check(_check_result(self.cur.prep, self.architecture, self.plan, settings), self.architecture)
            self.plan = self.plan.model_copy(update={"simulation": check})
            # the plan a simulated round made must pass the analytic check too: a round that moved load
            # between configurations can meet in simulation and miss analytically (step 5)
            analytic, _b = tighten_factors(self.cur.prep, self.plan, settings.redundancy)
            if (check.met and not analytic) or sim_rounds >= settings.simulation_rounds:
                break
            shares = _miss_shares(check)
            escalate = escalations(repeats, shares, last_share)
            last_share.update(shares)
            factors = simulated_factors(check, escalate) if not check.met else {}
            have = {q.name: q.instances for q in self.plan.pools}
            stuck = {p for p in factors if p in named_at and named_at[p] == have.get(p)}
            factors.update(_with_slack({p: factors[p] for p in stuck}, self.cur.prep, self.plan, settings.redundancy))
            named_at.update({p: have.get(p) for p in factors})
            # a miss that moved to another configuration of a phase tightened before: tighten the phase
            phase_of = _phases(self.plan, factors)
            moved = {p: f for p, f in factors.items() if p not in repeats and phase_of[p] & tightened}
            for p in factors:
                repeats[p] = repeats.get(p, 0) + 1
                tightened |= phase_of[p]
            per_point = phase_point_factors(self.cur.prep, self.plan, moved, self.base_rho / self.cur.prep.points["rho"].to_numpy(float))
            on_named = self.cur.prep.points["pool"].astype(str).map(factors).fillna(1.0).to_numpy(float)
            per_point = np.maximum(per_point, on_named)
            on_pool = self.cur.prep.points["pool"].astype(str).map(analytic).fillna(1.0).to_numpy(float)
            per_point = np.maximum(per_point, on_pool)
            for p, f in analytic.items():
                factors[p] = max(factors.get(p, 1.0), f)
            sim_rounds += 1
            before = self.cur
            if not factors or not self.tighten(factors, "simulation: ", per_point):
                break
            self.last_step = (before, per_point)
        if self.plan.simulation is not None and self.plan.simulation.met and self.last_step is not None:
            self.refine(*self.last_step)

    def reroute(self) -> None:
        """Step 8: the final plan's phase without the configuration of one of its pools, most tightened first, solved
        afresh through every step (module docstring); the cheapest that meets both checks and costs less is kept. The
        tries are independent: one per usable core (:func:`planner.forked.fork_map`; each the same, forked or not)."""
        from planner.forked import fork_map

        settings = self.settings
        plan = self.plan
        sim = plan.simulation
        if not (settings.reroute_tries > 0 and settings.simulation_check is not None and plan.feasible and plan.costs is not None
                and sim is not None and sim.met and self.built.prep.tool is None):
            return
        bar = plan.costs.total_usd_per_month
        base = self.built.prep

        def attempt(pool: str) -> tuple[str, ArchitecturePlan, np.ndarray | None]:
            """The try without ``pool``: its plan, and its final caps where it meets both checks for less (picklable)."""
            nxt, solver = _model_of(_closed(base, pool), settings, None)
            alt, alt_cur, _caps = solve_verified(nxt, solver, self.architecture, replace(settings, reroute_tries=0),
                                                 bar_usd_per_month=bar)
            ok = (alt.feasible and alt.costs is not None and alt.costs.total_usd_per_month < bar - 0.005
                  and alt.simulation is not None and alt.simulation.met and self._passes(alt_cur.prep, alt))
            return pool, alt, alt_cur.prep.points["rho"].to_numpy(float) if ok else None

        best: tuple[str, ArchitecturePlan, np.ndarray] | None = None
        for pool, alt, rho in fork_map(attempt, _by_tightening(base, self.cur.prep, plan)[:settings.reroute_tries]):
            self.rounds += alt.solver.rounds
            self.total_time += alt.solver.time_s
            self.total_build += alt.solver.build_s
            if rho is None:
                self.history.append(f"rerouting without {pool} gave no cheaper plan that meets")
            elif best is None or (alt.costs is not None and best[1].costs is not None
                                  and alt.costs.total_usd_per_month < best[1].costs.total_usd_per_month):
                best = (pool, alt, rho)
        if best is not None:
            pool, alt, rho = best
            assert alt.costs is not None
            self.history.append(f"rerouted: without {pool} the plan meets at {alt.costs.total_usd_per_month:,.0f} USD/month, "
                                f"{bar - alt.costs.total_usd_per_month:,.0f} less")
            # the model of the kept plan, rebuilt from its caps (a forked try returns its plan and caps, not its model)
            at = _with_caps(_closed(base, pool), rho)
            at.pools["n_max"] = np.maximum(at.pools["n_max"].to_numpy(int), pool_n_max(at.points, at.pools))  # tightened caps need more
            self.plan, self.cur = alt, _model_of(at, settings, None)[0]

    def descend(self) -> None:
        """Step 7: one instance fewer in a shared pool, or its shared pools merged, where the simulation allows it
        (module docstring)."""
        from planner.pool_latency import plan_shares

        settings = self.settings
        if settings.simulation_check is None:
            return
        top = relax_ceiling(user_max_utilization(self.cur.prep, settings))
        k = int(settings.redundancy)
        tried: set[tuple[Any, ...]] = set()
        for _ in range(settings.descent_rounds):
            sim = self.plan.simulation
            if not (self.plan.feasible and self.plan.costs is not None and sim is not None and sim.met):
                return
            pts = self.cur.prep.points
            rho = pts["rho"].to_numpy(float)
            x = plan_shares(self.plan, pts)
            load = _load_rows(pts, x, rho)
            pool = pts["pool"].astype(str).to_numpy()
            given = pts["utilization_cap"].to_numpy(float) if "utilization_cap" in pts.columns else np.full(len(pts), np.nan)
            cand_model: tuple[PoolPlan, np.ndarray] | None = None
            for p in sorted(self.plan.pools, key=lambda q: -q.cost_usd_per_month):
                if str(p.role) != "unified":
                    continue  # a shared pool's count only (module docstring, step 7)
                on = pool == p.name
                need = float(load[on].sum())
                room = p.instances - 1 - k  # the pool one instance smaller
                if room < 1 or not need > room or not np.isnan(given[on]).all():
                    continue
                raised = _caps_to_fit(pts, x, rho, on, room, top)
                if raised is None:
                    continue  # not within the ceiling (options.max_utilization): not by relaxing
                key = (p.name, p.instances, _plan_key(self.plan))
                if key in tried:
                    continue
                tried.add(key)
                cand_model = (p, raised)
                break
            if cand_model is None:
                if not self._merge(pts, rho, x, given, tried, top, k):
                    return
                continue
            move, raised = cand_model
            nxt, solver = _model_of(_with_caps(self.cur.prep, raised), settings, self.remodel)
            cand = solve_architecture(nxt, solver, self.architecture, settings)
            self._count(cand)
            if not (cand.feasible and cand.costs is not None and cand.costs.total_usd_per_month < self.plan.costs.total_usd_per_month - 0.005
                    and self._passes(nxt.prep, cand)):
                continue
            chk = settings.simulation_check(_check_result(nxt.prep, self.architecture, cand, settings), self.architecture)
            if not chk.met:
                continue
            saved = self.plan.costs.total_usd_per_month - cand.costs.total_usd_per_month
            self.history.append(f"descent: {move.name} one instance fewer ({move.instances} -> {move.instances - 1} at the plan's routing) "
                                f"also meets and costs {saved:,.0f} USD/month less")
            self.plan, self.cur = cand.model_copy(update={"simulation": chk}), nxt

    def _merge(self, pts: pd.DataFrame, rho: np.ndarray, x: np.ndarray, given: np.ndarray, tried: set[tuple[Any, ...]],
               top: float, k: int) -> bool:
        """Step 7's second move: every unified pool's traffic on the dearest one, at a count between the fewest
        instances at which every bucket through it meets the analytic check (the other pools' caps as they are: the
        re-solve may keep some of them) and the most that still cost less than the pools do. The largest is tried
        first, then the counts below it by bisection (``SolveSettings.descent_rounds`` solves): a count whose plan meets
        the analytic and the simulated checks and costs less is kept and the next tried lower, one that misses ends the
        search above it. Why not the fewest alone: the analytic check of a shared pool's long prompts is optimistic
        (long-context-assistant's top latency group 10.6 s analytic against 14.6 s simulated), so at 4 buckets the
        merge was tried at 14 MI300X tp4, missed in simulation and kept 16 tp4 + 2 tp1 ($99,894), where at 8 buckets
        the path had reached 17 tp4 and one instance fewer met at 16 ($95,602) (figures from before a unified point's
        fixed TTFT overhead was the engine's own, 2026-12-07: 15 tp4 at every count since). False when the plan has one unified pool,
        a bucket has no point on the dearest pool's configuration, or no count below the pools' cost meets."""
        from planner.optimize.latency import unified_instances_meeting

        uni = [p for p in self.plan.pools if str(p.role) == "unified"]
        if len(uni) < 2 or self.plan.costs is None:
            return False
        big = max(uni, key=lambda q: q.cost_usd_per_month)
        key = ("merge", big.name, _plan_key(self.plan))
        if key in tried:
            return False
        tried.add(key)
        pool = pts["pool"].astype(str).to_numpy()
        on_big = pool == big.name
        if not np.isnan(given[on_big]).all():
            return False
        svc, bkt = pts["service"].astype(str).to_numpy(), pts["bucket"].astype(str).to_numpy()
        row_of = {(svc[i], bkt[i]): int(i) for i in np.flatnonzero(on_big)}
        merged = x.copy()
        for other in uni:
            if other.name == big.name:
                continue
            for i in np.flatnonzero((pool == other.name) & (x > 0)):
                j = row_of.get((svc[i], bkt[i]))
                if j is None:
                    return False
                merged[j] += merged[i]
                merged[i] = 0.0
        inst = {p.name: p.instances for p in self.plan.pools if p.name not in {q.name for q in uni} or p.name == big.name}
        per_instance = big.cost_usd_per_month / max(big.instances, 1)
        most = math.ceil(sum(q.cost_usd_per_month for q in uni) / per_instance) - 1  # fewer instances than the pools cost
        need = unified_instances_meeting(pts, merged, inst, k, big.name, most)
        busy = float(_load_rows(pts, merged, np.ones(len(pts)))[on_big].sum())  # Σ λ τ x: busy instances at peak
        lo = None if need is None else max(need, math.ceil(busy / top - 1e-9) + k, k + 1)
        if lo is None or lo > most:
            return False  # no count below the pools' cost meets, or none within the ceiling
        settings = self.settings
        assert settings.simulation_check is not None
        hi, count = most, most
        kept: tuple[ArchitecturePlan, Built] | None = None
        for _ in range(max(1, settings.descent_rounds)):
            raised = _caps_to_fit(pts, merged, rho, on_big, count - k, top)
            ok = False
            if raised is not None:
                nxt, solver = _model_of(_with_caps(self.cur.prep, raised), settings, self.remodel)
                cand = solve_architecture(nxt, solver, self.architecture, settings)
                self._count(cand)
                bar = (kept[0] if kept is not None else self.plan).costs
                if (cand.feasible and cand.costs is not None and bar is not None
                        and cand.costs.total_usd_per_month < bar.total_usd_per_month - 0.005 and self._passes(nxt.prep, cand)):
                    chk = settings.simulation_check(_check_result(nxt.prep, self.architecture, cand, settings), self.architecture)
                    if chk.met:
                        kept, ok = (cand.model_copy(update={"simulation": chk}), nxt), True
            if ok:
                hi = count - 1  # met: a smaller count may too
            else:
                lo = count + 1  # missed (or not within the ceiling): the counts at and below it are not tried
            if lo > hi:
                break
            count = (lo + hi + 1) // 2
        if kept is None or self.plan.costs is None or kept[0].costs is None:
            return False
        saved = self.plan.costs.total_usd_per_month - kept[0].costs.total_usd_per_month
        self.history.append(f"descent: the other shared pools' traffic moved onto {big.name} also meets and costs {saved:,.0f} USD/month less")
        self.plan, self.cur = kept
        return True

    def sim_relaxed(self, relaxed_state: tuple[ArchitecturePlan, Built, list[str]]) -> None:
        """The relaxed path through the simulated check too; keep the cheaper of the two that meets."""
        first, first_cur, first_history = self.plan, self.cur, list(self.history)
        self.plan, self.cur = relaxed_state[0], relaxed_state[1]
        self.history[:] = relaxed_state[2]
        self.last_step = None
        met_a = first.simulation is not None and first.simulation.met
        self.beat_usd_per_month = first.costs.total_usd_per_month if met_a and first.costs is not None else None
        self.sim_loop()
        self.beat_usd_per_month = None
        met_b = self.plan.simulation is not None and self.plan.simulation.met
        cheaper = (self.plan.costs is not None and first.costs is not None
                   and self.plan.costs.total_usd_per_month < first.costs.total_usd_per_month - 0.005)
        if not (met_b and (cheaper or not met_a)):
            self.plan, self.cur = first, first_cur
            self.history[:] = first_history + ["relaxing over-tight caps gave no cheaper plan that meets in simulation; kept the first"]


def user_max_utilization(prep: Prepared, settings: SolveSettings) -> float | None:
    """The instance's ``options.max_utilization`` (the solve's, else the one ``prep``'s caps were bounded by;
    the smaller when both are set), None when neither is: no cap of the loop may exceed it (step 4b)."""
    given = [float(v) for v in (settings.max_utilization, getattr(prep, "max_utilization", None)) if v is not None]
    return min(given) if given else None


def _caps_records(built: Built, cur: Built, plan: ArchitecturePlan, architecture: str, rounds: int,
                  history: list[str]) -> list[dict[str, Any]]:
    """The caps of ``cur`` that differ from ``built``'s (tightened or relaxed; records for the snapshot) and
    the note that says how they came about."""
    caps: list[dict[str, Any]] = []
    base_rho = built.prep.points["rho"].to_numpy(float)
    if cur is not built:
        pts = cur.prep.points
        rho = pts["rho"].to_numpy(float)
        for i in np.nonzero(np.abs(rho - base_rho) > 1e-12 * base_rho)[0]:  # tightened or relaxed
            r = pts.iloc[int(i)]
            caps.append({"architecture": architecture, "service": str(r["service"]), "bucket": str(r["bucket"]),
                         "role": str(r["role"]), "config": str(r["config"]), "rho": float(rho[i]),
                         "rho_queueing": float(base_rho[i]), "tightening_factor": float(base_rho[i] / rho[i])})
    if history:
        caps_note = f"{architecture}: latency check tightened utilisation caps in {rounds - 1} round(s): " + "; ".join(history)
        if not all(lp.ttft_met and lp.tpot_met for lp in plan.latency):
            caps_note += f" — targets still missed after {rounds} solves (see the latency table)"
        caps.append({"architecture": architecture, "note": caps_note})
    return caps


def simulated_factors(check: Any, repeats: Mapping[str, int] | None = None, *, min_step: float = 1.05,
                      max_step: float = 4.0) -> dict[str, float]:
    """Per pool a simulated miss names: the factor dividing its caps, ``f = clamp(sim_q / target, min_step, max_step)``
    raised to ``k + 1`` for a pool already named ``k`` times (``repeats``) and clamped to ``max_step``
    again (module docstring, step 5); the largest over the services naming the pool."""
    out: dict[str, float] = {}
    for s in check.services:
        if s.miss_pool is None:
            continue
        share = s.miss_share if s.miss_share is not None else math.inf  # None: unbounded (requests never finished)
        f = min(max_step, max(min_step, 1.0 + share))
        f = float(min(max_step, f ** (1 + (repeats or {}).get(s.miss_pool, 0))))
        out[s.miss_pool] = max(out.get(s.miss_pool, 1.0), f)
    return out


def escalations(repeats: Mapping[str, int], shares: Mapping[str, float], last: Mapping[str, float]) -> dict[str, int]:
    """The repeats :func:`simulated_factors` escalates by (module docstring, step 5): a pool's count of earlier
    namings, kept only when its miss share now (``shares``) is not below the one the last round that named it saw
    (``last``): a miss that shrank is stepped by its own factor again."""
    return {p: k for p, k in repeats.items() if not shares.get(p, math.inf) < last.get(p, math.inf)}


def _with_slack(factors: Mapping[str, float], prep: Prepared, plan: ArchitecturePlan, redundancy: int) -> dict[str, float]:
    """Simulated factors for pools the last step named without changing their instances (module docstring, step 5):
    ``f / r`` with ``r = Σ λ τ x / ρ / (n − k)`` the share of the pool's working instances its load row fills at the
    current caps (:mod:`planner.optimize.model`). Dividing caps by ``f`` asks for ``f`` more *load*, which a pool that
    rounding left slack (``r < 1``) absorbs without an instance: code-completion-8b's one-instance decode pool at rate
    ×1.5 of its log was named four times at x1.19 … x2.02 and kept its instance each time, until the rounds ran out
    with the plan missing. ``f / r`` asks for ``f`` times its working instances."""
    from planner.pool_latency import plan_shares

    if not factors:
        return {}
    pts = prep.points
    load = _load_rows(pts, plan_shares(plan, pts), pts["rho"].to_numpy(float))
    pool = pts["pool"].astype(str).to_numpy()
    have = {p.name: p.instances for p in plan.pools}
    out = {}
    for p, f in factors.items():
        working = have.get(p, 0) - int(redundancy)
        r = float(load[pool == p].sum()) / working if working > 0 else 1.0
        out[p] = float(f) / r if 0.0 < r < 1.0 else float(f)
    return out


def _by_tightening(base: Prepared, cur: Prepared, plan: ArchitecturePlan) -> list[str]:
    """The plan's prefill, decode and unified pools in phases it serves with two pools or more, most tightened first (the largest
    ``ρ_base / ρ`` over a pool's points; step 8). Untightened pools too: the try's own relaxation can find what the
    first path's did not (code-completion-8b at traffic ×0.95 and ×1.05, both pools at or above their base caps:
    $101,755 and $109,540 without them tried, $97,268 and $101,523 with them, the second a 2.3 % inversion at ×1).
    And a shared plan's one pool when its caps were tightened by the smallest simulated step (``REFINE_MIN_STEP``) or
    more and the table has another shared configuration open: the loops tighten the configuration they are on, and
    the one they left for it is not tried again (code-completion-8b's shared plan went 24 H100 tp2 → 17 tp2 + 4 tp4 →
    16 tp4 → 14 tp4, $121,166, where 27 tp2 meet, $116,979, and traffic ×1.05 cost $116,991). A prefill or decode
    pool alone in its phase is not closed: not measured, and each try is a whole path of the solve."""
    by_role: dict[str, list[str]] = {}
    for p in plan.pools:
        if str(p.role) in ("prefill", "decode", "unified") and p.instances > 0:
            by_role.setdefault(str(p.role), []).append(p.name)
    if len(base.points) != len(cur.points):
        return []
    factor = base.points["rho"].to_numpy(float) / cur.points["rho"].to_numpy(float)
    pool = cur.points["pool"].astype(str).to_numpy()

    def tightness(n: str) -> float:
        return float(factor[pool == n].max()) if (pool == n).any() else 1.0

    names = [n for pools in by_role.values() if len(pools) >= 2 for n in pools]
    lone = by_role.get("unified", [])
    if len(lone) == 1 and tightness(lone[0]) >= REFINE_MIN_STEP:
        # a shared plan's one pool, tightened, where the table has another shared configuration to route to
        pools = base.pools
        usable = (pools["role"].astype(str).to_numpy() == "unified") & (pools["n_max"].to_numpy(int) > 0)
        if (pools["pool"].astype(str).to_numpy()[usable] != lone[0]).any():
            names += lone
    return sorted(names, key=lambda n: (-tightness(n), n))


def _closed(prep: Prepared, pool: str) -> Prepared:
    """``prep`` with ``pool`` closed: its big-M 0, so no instance and no routing (:data:`planner.optimize.prepare.CLOSED_COLUMN`)."""
    from planner.optimize.prepare import CLOSED_COLUMN

    pools = prep.pools.copy()
    flag = pools[CLOSED_COLUMN].to_numpy(bool) if CLOSED_COLUMN in pools.columns else np.zeros(len(pools), dtype=bool)
    pools[CLOSED_COLUMN] = flag | (pools["pool"].astype(str).to_numpy() == pool)
    pools["n_max"] = pool_n_max(prep.points, pools)
    return replace(prep, pools=pools)


def _with_caps(prep: Prepared, rho: np.ndarray) -> Prepared:
    """``prep`` with the caps ``rho`` raised to (relaxing, step 4b; the descent, step 7) and the load coefficients that
    carry ``1/ρ``; the big-M bounds stay (higher caps need fewer instances)."""
    pts = prep.points
    return replace(prep, points=pts.assign(rho=rho, load_peak_coef=pts["rate_peak_per_s"] * pts["instance_seconds_per_request"] / rho))


def _load_rows(pts: pd.DataFrame, x: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Per point: its term of its pool's load row ``λ τ x / ρ`` (instances; :mod:`planner.optimize.model`) at caps
    ``rho``."""
    return pts["rate_peak_per_s"].to_numpy(float) * pts["instance_seconds_per_request"].to_numpy(float) / rho * x


def _caps_to_fit(pts: pd.DataFrame, x: np.ndarray, rho: np.ndarray, on: np.ndarray, room: float, top: float) -> np.ndarray | None:
    """Caps ``rho`` with those of the rows ``on`` raised by the smallest common factor at which their load row at routing
    ``x`` fits ``room`` instances (strictly inside: the MIP's feasibility tolerance), each raised cap at most ``top`` (and
    never lowered); None when even every cap at ``top`` leaves the load over the room. A cap already near ``top`` stops
    there while the others rise (step 7: scaling every cap alike stopped at the first to reach the ceiling)."""
    lowest = max(float(rho[on].min()), 1e-12) if on.any() else 1.0

    def raised_by(scale: float) -> np.ndarray:
        return np.where(on, np.maximum(rho, np.minimum(rho * scale, top)), rho)

    def carried(scale: float) -> float:
        return float(_load_rows(pts, x, raised_by(scale))[on].sum())

    fits = room * (1.0 - 1e-9)
    if room < 1 or carried(max(1.0, top / lowest)) > fits:
        return None
    if carried(1.0) <= fits:
        return rho
    lo, hi = 1.0, max(1.0, top / lowest)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if carried(mid) <= fits else (mid, hi)
    return raised_by(hi)


def _plan_key(plan: ArchitecturePlan) -> tuple[Any, ...]:
    """What the analytic and simulated checks of a plan read from it: its pools' sizes and its routing (to 10⁻⁹)."""
    return (tuple(sorted((p.name, p.instances) for p in plan.pools)),
            tuple(sorted((r.service, r.bucket, r.role, r.pool, round(r.share, 9)) for r in plan.routing)))


def _miss_shares(check: Any) -> dict[str, float]:
    """Per pool a simulated miss names: its largest miss share over the services naming it (``inf`` unbounded)."""
    out: dict[str, float] = {}
    for sv in check.services:
        if sv.miss_pool is not None:
            share = sv.miss_share if sv.miss_share is not None else math.inf
            out[sv.miss_pool] = max(out.get(sv.miss_pool, -math.inf), share)
    return out


def _phases(plan: ArchitecturePlan, pools: Mapping[str, float]) -> dict[str, set[tuple[str, str, str]]]:
    """Per named pool: the (service, bucket, role) phases the plan routes through it."""
    out: dict[str, set[tuple[str, str, str]]] = {p: set() for p in pools}
    for r in plan.routing:
        if r.pool in out:
            out[r.pool].add((r.service, r.bucket, str(r.role)))
    return out


def _check_result(prep: Prepared, architecture: str, plan: ArchitecturePlan, settings: SolveSettings) -> PlanResult:
    """A one-architecture :class:`PlanResult` carrying what the simulated check reads (pools, routing, snapshot)."""
    used = used_points(plan, prep)
    pts_cols = [c for c in prep.points.columns if c not in ("i",)]
    snapshot = CapacitySnapshot(
        demand=prep.demand.drop(columns=["d"]).to_dict("records"), points=prep.points.loc[used, pts_cols].to_dict("records"),
        configs=prep.tables.configs.to_dict("records"), costs={k: float(v) for k, v in vars(prep.tables.costs).items()},
        redundancy=settings.redundancy, budget_usd_per_month=settings.budget_usd_per_month)
    return PlanResult(instance="check", architectures={architecture: plan}, verdict=make_verdict({architecture: plan}, prep),
                      capacity=snapshot)


def used_points(plan: ArchitecturePlan, prep: Prepared) -> list[int]:
    """Row labels (``i``) of ``prep.points`` that ``plan`` routes traffic to."""
    if not plan.routing:
        return []
    pts = prep.points
    sep = "\x00"  # one key per point, built column-wise (a dict over every point cost 0.3 s at fleet scale)
    key = pd.Index((pts["service"].astype(str) + sep + pts["bucket"].astype(str) + sep + pts["role"].astype(str)
                    + sep + pts["config"].astype(str)).to_numpy(dtype=object))
    wanted = [sep.join((r.service, r.bucket, str(r.role), r.config)) for r in plan.routing]
    pos = key.get_indexer(wanted) if key.is_unique else np.array([max((j for j, k in enumerate(key) if k == w), default=-1) for w in wanted])
    if (pos < 0).any():
        raise KeyError(wanted[int(np.flatnonzero(pos < 0)[0])])
    return [int(v) for v in pts["i"].to_numpy(int)[pos]]
