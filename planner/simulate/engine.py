"""The discrete-event engine: prefill, KV transfer, continuous-batching decode, unified
chunked-prefill pools, tool waits, outages.

Event-driven with one ``heapq``; arrivals are merged from the (chunked) stream without
entering the heap. A decode/unified instance is *fast-forwarded*: between changes of its
batch the step time ``t(b)`` is constant, so instead of one event per step it keeps a step
counter ``k`` anchored at a step boundary ``(k, t)`` and schedules one event at the next
step where something happens — the earliest finishing sequence (``finish_step`` in a
per-instance heap) or the step at which KV would overflow. KV in use at step ``k`` is
``S + n·k`` with ``S = Σ (context_i − join_step_i) + held tokens``, since every active
sequence adds one token per step; the overflow step is ``⌊(cap − S)/n⌋``. Sequences join at
the first step boundary at or after their admission (continuous batching). A unified
instance with prompt work runs one iteration per event (decode batch + a prefill chunk).

Measured quantities, as vLLM ``bench serve`` / SGLang ``bench_serving`` / DistServe define them
(requests whose turn starts in ``[warmup_s, measure_end_s)``): TTFT = first token − turn start;
TPOT = (last token − first token)/(output − 1), one sample per request; E2E = last token − turn
start; ITL = each gap between consecutive tokens of any sequence, one sample per gap (gaps that
end in ``[warmup_s, measure_end_s)``: a fast-forwarded stretch of ``k`` steps of ``t(b)`` adds ``b·k``
gaps of ``t(b)`` less the first tokens it produces; a unified iteration adds one gap per
sequence already decoding); per-pool wait = admission (start of service or join) − entry into
the pool's queue.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from planner.simulate.arrivals import RequestChunk
from planner.simulate.results import PoolResult, ServiceResult, SimResult
from planner.simulate.spec import PoolSpec, ServiceRoute, SimConfig
from planner.simulate.stats import LogHistogram, SectionCounts, Summary

EV_PF_DONE, EV_DEC_ENQ, EV_INST, EV_TURN, EV_OUT_START, EV_OUT_END, EV_ENCODED = range(7)
_EPS = 1e-9
_heappush, _heappop = heapq.heappush, heapq.heappop  # module globals: one lookup each, not heapq.<name>'s two
INDEX_MIN_INSTANCES = {"decode": 32, "unified": 8}
"""Decode and unified pools of at least this many instances keep their instances filed by load
(:attr:`_Pool.by_load`) for admission; smaller ones are scanned, which costs less than keeping the index
(measured: a unified pool runs admission at the end of most iterations, a decode pool about once per request)."""


def _stat(h: LogHistogram, quantile: float) -> float:
    """The ``quantile`` of ``h``, or its mean for a mean target (``quantile`` is ``nan``)."""
    return h.mean if quantile != quantile else h.quantile(quantile)


class _Req:
    __slots__ = ("turn_arrival", "out", "svc", "turns_left", "tool_wait", "append", "context",
                 "ctx", "pf_tokens", "pf_left", "generated", "gen_base", "first", "join_id",
                 "join_step", "kv_off", "inst", "enter", "recompute", "measured", "held_inst",
                 "held_epoch", "held_tokens", "waited", "enc", "to_encode")

    def __init__(self, t: float, inp: int, out: int, svc: int, turns: int, tool_wait: float,
                 append: int, measured: bool) -> None:
        self.turn_arrival = t
        self.out = out
        self.svc = svc
        self.turns_left = turns
        self.tool_wait = tool_wait
        self.append = append
        self.context = inp      # tokens of the session so far (prompt of this turn)
        self.ctx = inp          # tokens in KV when (re)joining decode
        self.pf_tokens = inp    # tokens to prefill for this turn (an inline encode's tokens included: ServiceRoute.encode_tokens)
        self.pf_left = inp
        self.enc = 0            # of pf_tokens, the inline encode's (prefill work that holds no KV and sends none)
        self.to_encode = False  # first visits its route's separate encode pool (ServiceRoute.encode)
        self.generated = 0
        self.gen_base = 0
        self.first = -1.0
        self.join_id = -1
        self.join_step = 0
        self.kv_off = 0
        self.inst: _Inst | None = None
        self.enter = t
        self.recompute = False
        self.measured = measured
        self.held_inst: _Inst | None = None
        self.held_epoch = 0
        self.held_tokens = 0
        self.waited = False


class _Inst:
    __slots__ = ("pool", "idx", "up", "version", "epoch", "n", "S", "step", "t", "target",
                 "fin", "pending", "active", "pf", "in_iter", "plan", "pf_batch", "busy_s",
                 "slot_s", "kv_s", "lane_s", "ix", "bit", "lk")

    def __init__(self, pool: _Pool, idx: int) -> None:
        self.pool = pool
        self.idx = idx
        self.up = True
        self.version = 0
        self.epoch = 0
        self.n = 0
        self.S = 0.0
        self.step = 0
        self.t = 0.0
        self.target = -1
        self.fin: list[tuple[int, int, _Req]] = []
        self.pending: list[tuple[int, int, _Req]] = []
        self.active: dict[int, _Req] = {}
        self.pf: deque[_Req] = deque()
        self.in_iter = False
        self.plan: list[tuple[_Req, int]] = []
        self.pf_batch: list[_Req] = []
        self.busy_s = 0.0
        self.slot_s = 0.0
        self.kv_s = 0.0
        self.lane_s = 0.0  # time in iterations that carry a prompt chunk (a unified instance's lane busy)
        self.ix = pool.by_load is not None
        """The pool keeps :attr:`_Pool.by_load` (call :func:`_relink` after a change of ``n``, ``pf`` or ``up``)."""
        self.bit = 1 << idx
        self.lk = 0
        """The load level (``n + len(pf)``) under which the instance is filed in its pool's :attr:`_Pool.by_load`,
        or -1 while it is not filed (down, or ``max_batch`` or more)."""


class _Pool:
    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.role = spec.role
        self.serial = spec.role in ("prefill", "encode")
        """One batch of requests per instance at a time (prefill and encode pools: :meth:`_Sim.start_prefill`)."""
        self.queue: deque[_Req] = deque()
        self.free = (1 << spec.instances) - 1
        """Prefill pools: bit ``i`` set while instance ``i`` is up without a batch (:meth:`_Sim.start_prefill`
        takes the lowest set bit: the first such instance in index order, as a scan of ``insts`` would)."""
        indexed = spec.instances >= INDEX_MIN_INSTANCES.get(spec.role, math.inf)
        self.by_load: list[int] | None = [self.free] + [0] * (spec.max_batch - 1) if indexed else None
        """Bit ``i`` of ``by_load[l]`` set while instance ``i`` is up with load ``n + len(pf) == l < max_batch``
        (kept by :func:`_relink`): :meth:`_Sim.admit` finds the least-loaded instance (lowest index among equals)
        without scanning ``insts``."""
        self.levels = 1 if spec.instances else 0
        """Bit ``l`` set while ``by_load[l]`` is not empty."""
        self.insts = [_Inst(self, i) for i in range(spec.instances)]
        self.table = spec.step_table()
        self.cap = float(spec.kv_capacity_tokens)
        self.max_batch = spec.max_batch
        self.prefill_time = spec.prefill_time_s
        self.chunk_tokens = spec.chunk_tokens
        self.burst = spec.tokens_per_step - 1.0 if spec.role in ("decode", "unified") else 0.0
        """Tokens beyond the first per sequence and step (speculative decoding; 0 otherwise)."""
        self.wait = LogHistogram()
        self.itl = LogHistogram()
        self.preemptions = 0
        self.kv_blocked = 0
        self.rejected = 0
        self.recompute_s = 0.0
        self.queue_max = 0
        it = spec.iteration_time_s
        table, pt = self.table, spec.prefill_time_s
        if it is None:
            def it(b: int, chunk: int) -> float:
                return (table[b] if b else 0.0) + (pt(chunk) if chunk else 0.0)
        self.iter_time = it


def _mark_free(inst: _Inst) -> None:
    """Set instance ``inst``'s bit of its pool's :attr:`_Pool.free` from its state (up and no prefill batch)."""
    bit = 1 << inst.idx
    pool = inst.pool
    pool.free = (pool.free | bit) if inst.up and not inst.pf_batch else (pool.free & ~bit)


def _relink(inst: _Inst) -> None:
    """File instance ``inst`` under its current load in its pool's :attr:`_Pool.by_load` (call after any change
    of its ``n``, ``pf`` or ``up``)."""
    pool = inst.pool
    by_load = pool.by_load
    if by_load is None:
        return
    key = inst.n + len(inst.pf) if inst.up else -1
    if key >= pool.max_batch:
        key = -1
    old = inst.lk
    if key == old:
        return
    bit = inst.bit
    if old >= 0:
        v = by_load[old] ^ bit
        by_load[old] = v
        if not v:
            pool.levels ^= 1 << old
    if key >= 0:
        v = by_load[key]
        if not v:
            pool.levels |= 1 << key
        by_load[key] = v | bit
    inst.lk = key


class _Sim:
    def __init__(self, pools: Sequence[PoolSpec], routes: Sequence[ServiceRoute],
                 config: SimConfig) -> None:
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError("pool names must be unique")
        self.pools = {p.name: _Pool(p) for p in pools}
        self.routes = list(routes)
        self.config = config
        self.warmup_s = config.warmup_s
        self.measure_end_s = config.measure_end_s
        for r in self.routes:
            for key, role in (("prefill", "prefill"), ("decode", "decode"), ("unified", "unified"), ("encode", "encode")):
                name = getattr(r, key)
                if name is None:
                    continue
                if name not in self.pools:
                    raise ValueError(f"service {r.service}: unknown pool {name!r}")
                if self.pools[name].role != role:
                    raise ValueError(f"service {r.service}: pool {name!r} is a {self.pools[name].role} pool, not {role}")
        self.r_pre = [self.pools[r.prefill] if r.prefill else None for r in self.routes]
        self.r_dec = [self.pools[r.decode or r.unified or ""] for r in self.routes]
        self.r_enc = [int(r.encode_tokens) for r in self.routes]
        self.r_enc_pool = [self.pools[r.encode] if r.encode else None for r in self.routes]
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.next_seq = itertools.count(1).__next__
        """The tie-breaker of the heap's events: 1, 2, 3, ... in push order."""
        self.join_seq = 0
        self.events = 0
        self.now = 0.0
        nsvc = len(self.routes)
        self.ttft = [LogHistogram() for _ in range(nsvc)]
        self.tpot = [LogHistogram() for _ in range(nsvc)]
        self.e2e = [LogHistogram() for _ in range(nsvc)]
        self.sections: dict[str, SectionCounts] = {}
        if config.sections > 0 and math.isfinite(config.measure_end_s) and config.measure_end_s > config.warmup_s:
            self.sections = {m: SectionCounts(nsvc, config.sections, config.warmup_s, config.measure_end_s) for m in ("ttft", "tpot")}
        self.itl = {name: p.itl for name, p in self.pools.items()}
        self.ttft_ok = [0] * nsvc
        self.tpot_ok = [0] * nsvc
        self.slo_ok = [0] * nsvc
        self.done = [0] * nsvc
        self.started = [0] * nsvc
        self.rejected = [0] * nsvc
        self.requests = 0
        self.timeline: dict[str, list[float]] = {"time_s": []}
        self.series: list[tuple[_Pool, list[float], list[float], list[float]]] = []
        """Per pool its timeline's queue, active and kv_used_share lists (:meth:`sample` appends to them)."""
        for p in self.pools.values():
            queue: list[float] = []
            active: list[float] = []
            kv_used_share: list[float] = []
            self.timeline[f"{p.name}.queue"] = queue
            self.timeline[f"{p.name}.active"] = active
            self.timeline[f"{p.name}.kv_used_share"] = kv_used_share
            self.series.append((p, queue, active, kv_used_share))

    # ---------------------------------------------------------------- scheduling helpers
    def push(self, t: float, kind: int, obj: Any, ver: int = 0) -> None:
        _heappush(self.heap, (t, self.next_seq(), kind, obj, ver))

    # ---------------------------------------------------------------- arrivals
    def arrive(self, req: _Req, now: float) -> None:
        svc = req.svc
        req.enter = now
        req.waited = False
        dec = self.r_dec[svc]
        if req.ctx + 1 > dec.cap:
            dec.rejected += 1
            if req.measured:
                self.rejected[svc] += 1
            return
        if req.measured:
            self.started[svc] += 1
        enc = self.r_enc_pool[svc]
        if req.to_encode and enc is not None:  # the tower first, in its own pool; dispatch() after it
            enc.queue.append(req)
            if len(enc.queue) > enc.queue_max:
                enc.queue_max = len(enc.queue)
            self.start_prefill(enc, now)
            return
        self.dispatch(req, now)

    def dispatch(self, req: _Req, now: float) -> None:
        """Queue an arrived (or just encoded) request at its route's prefill pool, else its decode / unified pool."""
        svc = req.svc
        dec = self.r_dec[svc]
        pre = self.r_pre[svc]
        if pre is not None:
            pre.queue.append(req)
            if len(pre.queue) > pre.queue_max:
                pre.queue_max = len(pre.queue)
            self.start_prefill(pre, now)
        else:
            if dec.role == "unified":
                req.pf_left = req.pf_tokens
            dec.queue.append(req)
            if len(dec.queue) > dec.queue_max:
                dec.queue_max = len(dec.queue)
            self.admit(dec, now)

    # ---------------------------------------------------------------- prefill pool
    def start_prefill(self, pool: _Pool, now: float) -> None:
        q = pool.queue
        if not q:
            return
        spec = pool.spec
        insts = pool.insts
        free = pool.free
        while q and free:
            low = free & -free  # the first instance (index order) that is up and idle
            free ^= low
            pool.free = free
            inst = insts[low.bit_length() - 1]
            batch = [q.popleft()]
            tokens = batch[0].pf_tokens
            if spec.prefill_batch_tokens > 0:
                while q and len(batch) < pool.max_batch and tokens + q[0].pf_tokens <= spec.prefill_batch_tokens:
                    r = q.popleft()
                    batch.append(r)
                    tokens += r.pf_tokens
            for r in batch:
                if r.measured and not r.waited:
                    r.waited = True  # a restart after an outage is not a second wait sample
                    pool.wait.add(now - r.enter)
            dur = pool.prefill_time(tokens)
            end = now + dur
            # in_window's first case inline (a call per batch otherwise); x * 1.0 == x, so the sum is the same
            inst.busy_s += dur if self.warmup_s <= now and end <= self.measure_end_s else dur * self.in_window(now, end)
            inst.pf_batch = batch
            inst.version += 1
            self.push(end, EV_PF_DONE, inst, inst.version)

    def prefill_done(self, inst: _Inst, now: float) -> None:
        batch = inst.pf_batch
        inst.pf_batch = []
        _mark_free(inst)
        if inst.pool.role == "encode":
            for req in batch:
                req.to_encode = False
                delay = self.routes[req.svc].encode_transfer_s
                if delay > 0:
                    self.push(now + delay, EV_ENCODED, req)
                else:
                    self.encoded(req, now)
            self.start_prefill(inst.pool, now)
            return
        touched: dict[_Pool, None] = {}  # the decode pools fed, in the batch's order (a set iterated them in id order)
        for req in batch:
            route = self.routes[req.svc]
            delay = route.transfer_s_per_token * (req.pf_tokens - req.enc)
            if delay > 0:
                self.push(now + delay, EV_DEC_ENQ, req)
            else:
                dec = self.r_dec[req.svc]
                req.enter = now
                req.waited = False
                dec.queue.append(req)
                touched[dec] = None
        self.start_prefill(inst.pool, now)
        for dec in touched:
            if len(dec.queue) > dec.queue_max:
                dec.queue_max = len(dec.queue)
            self.admit(dec, now)

    def encoded(self, req: _Req, now: float) -> None:
        """The request's embeddings reached its prefill / unified pool: it waits there from ``now``."""
        req.enter = now
        req.waited = False
        self.dispatch(req, now)

    def in_window(self, t0: float, t1: float) -> float:
        """Share of ``[t0, t1]`` inside the measured window ``[warmup_s, measure_end_s)``: the pools' busy, slot, lane
        and KV time are accrued over it (each interval at its mean rate), so a pool's utilisation is that of the
        steady load the latencies are measured at, not of the warm-up or of the drain after the last arrival.
        The hot callers (:meth:`start_prefill`, :meth:`move`, :meth:`iteration_end`) test its first case inline."""
        lo, hi = self.warmup_s, self.measure_end_s
        if lo <= t0 and t1 <= hi:
            return 1.0
        if t1 <= lo or t0 >= hi or t1 <= t0:
            return 0.0
        return (min(t1, hi) - max(t0, lo)) / (t1 - t0)

    # ---------------------------------------------------------------- decode / unified
    def advance(self, inst: _Inst, now: float) -> None:
        """Move an instance's anchor to the first step boundary at or after ``now``."""
        if inst.in_iter:
            return
        if inst.n == 0:
            if inst.t < now:
                inst.kv_s += inst.S * (now - inst.t) * self.in_window(inst.t, now)  # held / reserved KV on an idle instance
                inst.t = now
            return
        if inst.t >= now:
            return
        tc = inst.pool.table[inst.n]
        k = math.ceil((now - inst.t) / tc - _EPS)
        if inst.target >= inst.step and inst.step + k > inst.target:
            k = inst.target - inst.step
        self.move(inst, k, tc)

    def move(self, inst: _Inst, k: int, tc: float) -> None:
        if k <= 0:
            return
        n = inst.n
        dt = k * tc
        old_step, old_t = inst.step, inst.t
        new_t = old_t + dt
        lo, hi = self.warmup_s, self.measure_end_s
        w = dt if lo <= old_t and new_t <= hi else self.in_window(old_t, new_t) * dt  # in_window's first case inline
        inst.busy_s += w
        inst.slot_s += n * w
        inst.kv_s += (inst.S + n * old_step + 0.5 * n * k) * w
        inst.step = step = old_step + k
        inst.t = new_t
        firsts = 0
        if inst.pending:
            keep = []
            for ent in inst.pending:
                target, jid, req = ent
                if req.join_id != jid:
                    continue
                if target <= step:
                    self.first_token(req, old_t + (target - old_step) * tc)
                    firsts += 1
                else:
                    keep.append(ent)
            inst.pending = keep
        if lo <= new_t < hi and n * k > firsts:
            pool = inst.pool
            pool.itl.add_many(tc, n * k - firsts)
            if pool.burst > 0.0:  # speculative bursts: E - 1 further tokens per step arrive at once
                pool.itl.add_many(0.0, int(round(pool.burst * n * k)))
        fin = inst.fin
        while fin and fin[0][0] <= step:
            f, jid, req = _heappop(fin)
            if req.join_id == jid:
                self.retire(inst, req, old_t + (f - old_step) * tc)

    def first_token(self, req: _Req, t: float) -> None:
        req.first = t
        if req.measured:
            svc = req.svc
            ttft = t + self.routes[svc].ttft_overhead_s - req.turn_arrival
            self.ttft[svc].add(ttft)
            if self.sections:
                self.sections["ttft"].add(svc, req.turn_arrival, ttft)

    def join(self, inst: _Inst, req: _Req) -> None:
        """Add a sequence to the decode batch at the instance's current boundary."""
        self.join_seq += 1
        jid = self.join_seq
        req.join_id = jid
        req.inst = inst
        req.join_step = inst.step
        req.gen_base = req.generated
        req.kv_off = req.ctx - inst.step
        inst.S += req.kv_off
        inst.n += 1
        if inst.ix:
            _relink(inst)
        inst.active[jid] = req
        remaining = req.out - req.generated
        if inst.pool.burst > 0.0:  # E tokens per step: the sequence finishes in ceil(remaining / E) steps
            remaining = max(1, math.ceil(remaining / (1.0 + inst.pool.burst) - _EPS))
        _heappush(inst.fin, (inst.step + remaining, jid, req))
        if req.first < 0:
            inst.pending.append((inst.step + 1, jid, req))

    def retire(self, inst: _Inst, req: _Req, t: float) -> None:
        del inst.active[req.join_id]
        req.join_id = -1
        req.inst = None
        inst.n -= 1
        if inst.ix:
            _relink(inst)
        inst.S -= req.kv_off
        self.turn_done(inst, req, t)

    def turn_done(self, inst: _Inst, req: _Req, t: float) -> None:
        svc = req.svc
        if req.measured:
            self.done[svc] += 1
            route = self.routes[svc]
            ok = req.first + route.ttft_overhead_s - req.turn_arrival <= route.ttft_target_s
            if ok:
                self.ttft_ok[svc] += 1
            if req.out > 1:
                tpot = (t - req.first) / (req.out - 1)
                self.tpot[svc].add(tpot)
                if self.sections:
                    self.sections["tpot"].add(svc, req.turn_arrival, tpot)
                if tpot <= route.tpot_target_s:
                    self.tpot_ok[svc] += 1
                else:
                    ok = False
            else:
                self.tpot_ok[svc] += 1
            if ok:
                self.slo_ok[svc] += 1
            self.e2e[svc].add(t + route.ttft_overhead_s - req.turn_arrival)
        if req.turns_left > 1:
            route = self.routes[req.svc]
            req.context = req.context + req.out
            delay = req.tool_wait
            if route.tool_policy == "hold":
                req.held_inst = inst
                req.held_epoch = inst.epoch
                req.held_tokens = req.context
                inst.S += req.context
            elif route.tool_policy == "offload":
                delay += route.reload_s_per_token * req.context
            self.push(t + delay, EV_TURN, req, 0)

    def next_turn(self, req: _Req, now: float) -> None:
        route = self.routes[req.svc]
        tool_done = now
        if route.tool_policy == "offload":
            tool_done = now - route.reload_s_per_token * req.context
        held = req.held_inst
        if held is not None:
            if held.epoch == req.held_epoch:
                self.advance(held, now)  # account the held KV up to now
                held.S -= req.held_tokens
                self.admit(held.pool, now)
                self.reschedule(held, now)
            req.held_inst = None
        req.turns_left -= 1
        req.context += req.append
        req.ctx = req.context
        req.pf_tokens = req.context if route.tool_policy == "recompute" else max(req.append, 1)
        req.pf_left = req.pf_tokens
        req.enc = 0  # a later turn's prompt carries no new image here
        req.to_encode = False
        req.generated = 0
        req.first = -1.0
        req.recompute = False
        req.turn_arrival = tool_done
        req.measured = self.config.warmup_s <= tool_done < self.config.measure_end_s
        self.arrive(req, now)

    def admit(self, pool: _Pool, now: float) -> None:
        """FCFS admission from the pool queue to the least-loaded instance with room."""
        if pool.serial:
            self.start_prefill(pool, now)
            return
        by_load = pool.by_load
        if by_load is not None:
            self.admit_indexed(pool, by_load, now)
            return
        q = pool.queue
        mb = pool.max_batch
        cap = pool.cap
        unified = pool.role == "unified"
        while q:
            req = q[0]
            best = None
            best_load = mb
            if unified:
                for inst in pool.insts:
                    if inst.up:
                        load = inst.n + len(inst.pf)
                        if load < best_load:
                            best, best_load = inst, load
            else:
                for inst in pool.insts:
                    if inst.n < best_load and inst.up:
                        best, best_load = inst, inst.n
            if best is None:
                return
            chosen = self.with_kv_room(best, self._scan_order(pool, best), req.ctx + 1, cap, now)
            if chosen is None:
                pool.kv_blocked += 1
                return
            self.place(pool, chosen, q.popleft(), now)

    def with_kv_room(self, best: _Inst, others: Iterator[_Inst], need: float, cap: float, now: float) -> _Inst | None:
        """``best`` if its KV, advanced to ``now``, has room for ``need`` more tokens (its batch's next tokens
        included), else the first of ``others`` that has (each advanced on reaching it; ``others`` is read lazily, so
        it sees the loads as the advances leave them); None when none has."""
        self.advance(best, now)
        if best.S + best.n * (best.step + 1) + need <= cap:
            return best
        for inst in others:
            self.advance(inst, now)
            if inst.S + inst.n * (inst.step + 1) + need <= cap:
                return inst
        return None

    @staticmethod
    def _scan_order(pool: _Pool, best: _Inst) -> Iterator[_Inst]:
        """The pool's instances with room but ``best``, by load, list order among equals (a stable sort), for a pool
        without :attr:`_Pool.by_load`. A generator, so the sort runs only when :meth:`with_kv_room` finds ``best`` full
        (most admissions never get here); it then runs after ``best`` was advanced, which changes only ``best``'s own
        load, so the others' order is the one a sort before that advance gives."""
        mb = pool.max_batch
        for i in sorted(pool.insts, key=lambda i: i.n + len(i.pf)):
            if i is not best and i.up and i.n + len(i.pf) < mb:
                yield i

    @staticmethod
    def _by_load_order(pool: _Pool, by_load: list[int], best: _Inst) -> Iterator[_Inst]:
        """The pool's instances with room but ``best``, by load, index order among equals (:meth:`admit`'s stable
        sort): advancing one only lowers its own load, to a level already passed, so reading each level on reaching
        it is exact."""
        insts = pool.insts
        levels = pool.levels
        while levels:
            low = levels & -levels
            levels ^= low
            members = by_load[low.bit_length() - 1]
            while members:
                bit = members & -members
                members ^= bit
                inst = insts[bit.bit_length() - 1]
                if inst is not best:
                    yield inst

    def admit_indexed(self, pool: _Pool, by_load: list[int], now: float) -> None:
        """:meth:`admit` for a pool with ``by_load`` (its :attr:`_Pool.by_load`): the same choices without
        scanning the instances."""
        q = pool.queue
        cap = pool.cap
        insts = pool.insts
        while q:
            req = q[0]
            levels = pool.levels
            if not levels:
                return  # no instance up with room
            # the least-loaded instance, the lowest index among equals (what admit's scan with strict < finds)
            members = by_load[(levels & -levels).bit_length() - 1]
            best = insts[(members & -members).bit_length() - 1]
            chosen = self.with_kv_room(best, self._by_load_order(pool, by_load, best), req.ctx + 1, cap, now)
            if chosen is None:
                pool.kv_blocked += 1
                return
            self.place(pool, chosen, q.popleft(), now)

    def place(self, pool: _Pool, chosen: _Inst, req: _Req, now: float) -> None:
        """Admit ``req``, just taken from the head of the pool's queue, to instance ``chosen``."""
        if req.measured and not req.waited:
            req.waited = True
            pool.wait.add(max(chosen.t, now) - req.enter)
        if pool.role == "unified":
            chosen.S += req.ctx  # reserve the prompt's KV while it is prefilled
            req.pf_left = req.ctx if req.recompute else req.pf_tokens
            chosen.pf.append(req)
            if chosen.ix:
                _relink(chosen)
            self.reschedule(chosen, now)
        else:
            if req.recompute:
                stall = pool.prefill_time(req.ctx)
                begin = max(chosen.t, now)
                chosen.t = begin + stall
                chosen.busy_s += stall * self.in_window(begin, begin + stall)
                pool.recompute_s += stall
                req.recompute = False
            self.join(chosen, req)
            self.reschedule(chosen, now)

    def preempt_if_full(self, inst: _Inst) -> None:
        pool = inst.pool
        cap = pool.cap
        while inst.n > 0 and inst.S + inst.n * (inst.step + 1) > cap:
            jid, req = inst.active.popitem()  # newest sequence first
            inst.n -= 1
            inst.S -= req.kv_off
            steps = int((inst.step - req.join_step) * (1.0 + pool.burst))  # tokens generated since joining
            req.generated = min(req.out - 1, req.gen_base + steps) if pool.burst > 0.0 else req.gen_base + steps
            req.ctx = req.ctx + steps
            req.recompute = True
            req.join_id = -1
            req.inst = None
            req.enter = inst.t
            pool.preemptions += 1
            pool.queue.appendleft(req)
        _relink(inst)

    def reschedule(self, inst: _Inst, now: float) -> None:
        """Replace the instance's pending event after a change of its batch or KV."""
        if inst.in_iter:
            return  # an iteration is in flight; its end event stays valid
        if inst.t < now:  # advance() does nothing otherwise (a unified instance's iteration just ended at now)
            self.advance(inst, now)
        inst.version += 1
        inst.target = -1
        if not inst.up:
            return
        pool = inst.pool
        if inst.pf:
            self.start_iteration(inst, now)
            return
        n = inst.n
        if n == 0:
            return
        fin = inst.fin
        while fin and fin[0][1] != fin[0][2].join_id:
            _heappop(fin)
        target = fin[0][0]
        if pool.cap < math.inf:
            kfull = math.floor((pool.cap - inst.S) / n)
            if kfull < target:
                target = kfull
        if target < inst.step:
            target = inst.step
        inst.target = target
        t_event = inst.t + (target - inst.step) * pool.table[n]
        self.push(t_event if t_event > now else now, EV_INST, inst, inst.version)

    def start_iteration(self, inst: _Inst, now: float) -> None:
        pool = inst.pool
        budget = chunk_tokens = pool.chunk_tokens
        plan = []
        for req in inst.pf:
            take = req.pf_left if req.pf_left < budget else budget
            plan.append((req, take))
            budget -= take
            if budget == 0:
                break
        dur = pool.iter_time(inst.n, chunk_tokens - budget)
        inst.in_iter = True
        inst.plan = plan
        inst.target = -1
        _heappush(self.heap, (inst.t + dur, self.next_seq(), EV_INST, inst, inst.version))  # push(), inline: once an iteration

    def iteration_end(self, inst: _Inst, now: float) -> None:
        t0 = inst.t
        dt = now - t0
        n = inst.n
        pool = inst.pool
        lo, hi = self.warmup_s, self.measure_end_s
        if n and lo <= now < hi:
            pool.itl.add_many(dt, n)
            if pool.burst > 0.0:  # speculative bursts: E - 1 further tokens per sequence arrive at once
                pool.itl.add_many(0.0, int(round(pool.burst * n)))
        w = dt if lo <= t0 and now <= hi else self.in_window(t0, now) * dt  # in_window's first case inline
        inst.busy_s += w
        inst.slot_s += n * w
        step = inst.step
        inst.kv_s += (inst.S + n * step) * w
        plan = inst.plan
        if plan:
            inst.lane_s += w
        inst.step = step = step + 1
        inst.t = now
        inst.in_iter = False
        fin = inst.fin
        while fin and fin[0][0] <= step:
            f, jid, req = _heappop(fin)
            if req.join_id == jid:
                self.retire(inst, req, now)
        for req, take in plan:
            req.pf_left -= take
            if req.pf_left <= 0:
                inst.pf.remove(req)
                if inst.ix:
                    _relink(inst)
                inst.S -= req.ctx
                if req.first < 0:
                    self.first_token(req, now)
                    req.generated = 1
                req.recompute = False
                if req.generated >= req.out:
                    self.turn_done(inst, req, now)
                else:
                    self.join(inst, req)
        inst.plan = []
        if inst.n > 0 and inst.S + inst.n * (inst.step + 1) > pool.cap:  # preempt_if_full's test, without the call
            self.preempt_if_full(inst)
        if pool.queue:  # admit() does nothing on an empty queue
            self.admit(pool, now)
        self.reschedule(inst, now)

    def inst_event(self, inst: _Inst, now: float) -> None:
        if inst.in_iter:
            self.iteration_end(inst, now)
            return
        pool = inst.pool
        self.move(inst, inst.target - inst.step, pool.table[inst.n] if inst.n else 0.0)
        inst.t = now if inst.n == 0 else inst.t
        if inst.n > 0 and inst.S + inst.n * (inst.step + 1) > pool.cap:  # preempt_if_full's test, without the call
            self.preempt_if_full(inst)
        if pool.queue:  # admit() does nothing on an empty queue
            self.admit(pool, now)
        self.reschedule(inst, now)

    # ---------------------------------------------------------------- outages
    def outage_start(self, inst: _Inst, now: float) -> None:
        pool = inst.pool
        self.advance(inst, now)
        evicted: list[_Req] = []
        if pool.serial:
            evicted = list(inst.pf_batch)
            inst.pf_batch = []
        else:
            for req in inst.active.values():
                steps = int((inst.step - req.join_step) * (1.0 + pool.burst))  # tokens generated since joining
                req.generated = min(req.out - 1, req.gen_base + steps) if pool.burst > 0.0 else req.gen_base + steps
                req.ctx += steps
                req.recompute = True
                req.join_id = -1
                req.inst = None
                evicted.append(req)
            for req in inst.pf:
                inst.S -= req.ctx
                req.recompute = req.recompute or req.first >= 0
                evicted.append(req)
            inst.active.clear()
            inst.pf.clear()
            inst.fin.clear()
            inst.pending.clear()
            inst.n = 0
            inst.S = 0.0
            inst.in_iter = False
            inst.plan = []
        inst.up = False
        _mark_free(inst)
        _relink(inst)
        inst.epoch += 1
        inst.version += 1
        for req in reversed(evicted):
            req.enter = now
            pool.queue.appendleft(req)
        self.admit(pool, now)

    def outage_end(self, inst: _Inst, now: float) -> None:
        inst.up = True
        _mark_free(inst)
        _relink(inst)
        inst.t = now
        inst.target = -1
        inst.version += 1
        self.admit(inst.pool, now)

    # ---------------------------------------------------------------- main loop
    def sample(self, t: float) -> None:
        self.timeline["time_s"].append(t)
        for p, queue, active, kv_used_share in self.series:
            queue.append(float(len(p.queue)))
            if p.serial:
                active.append(float(sum(1 for i in p.insts if i.pf_batch)))
                kv_used_share.append(0.0)
            else:
                active.append(float(sum(i.n + len(i.pf) for i in p.insts)))
                if p.cap < math.inf and p.insts:
                    used = sum(i.S + i.n * i.step for i in p.insts)
                    kv_used_share.append(used / (p.cap * len(p.insts)))
                else:
                    kv_used_share.append(0.0)

    def sample_until(self, now: float, t: float, interval: float, max_samples: int) -> float:
        """Sample the timeline at ``t, t + interval, ...`` up to ``now`` (at most ``max_samples`` samples in all);
        returns the next sample's time, ``inf`` once the timeline is full (so the loop stops asking)."""
        times = self.timeline["time_s"]
        while now >= t:
            if len(times) >= max_samples:
                return math.inf
            self.sample(t)
            t += interval
        return t

    def run(self, stream: Iterable[RequestChunk], duration_hint_s: float | None) -> SimResult:
        wall0 = time.perf_counter()
        cfg = self.config
        for o in cfg.outages:
            pool = self.pools.get(o.pool)
            if pool is None or not 0 <= o.instance < len(pool.insts):
                raise ValueError(f"outage names unknown pool/instance {o.pool}[{o.instance}]")
            inst = pool.insts[o.instance]
            if o.start_s <= 0:
                inst.up = False
                _mark_free(inst)
                _relink(inst)
            else:
                self.push(o.start_s, EV_OUT_START, inst)
            if o.end_s < math.inf:
                self.push(o.end_s, EV_OUT_END, inst)
        interval = cfg.sample_interval_s or ((duration_hint_s or 200.0) / 200.0)
        next_sample = 0.0
        max_samples = 10_000
        warm = cfg.warmup_s
        mend = cfg.measure_end_s
        heap = self.heap
        pop = _heappop
        chunks = iter(stream)
        arr: list[Any] = []
        pos = 0
        n_arr = 0
        last_arrival = 0.0
        next_arr = math.inf

        def load() -> float:
            nonlocal arr, pos, n_arr
            for c in chunks:
                if len(c):
                    arr = list(zip(c.arrival_s.tolist(), c.input_tokens.tolist(), c.output_tokens.tolist(),
                                   c.service.tolist(), c.turns.tolist(), c.tool_wait_s.tolist(),
                                   c.append_tokens.tolist(), strict=True))
                    pos, n_arr = 0, len(arr)
                    return float(arr[0][0])
            arr, pos, n_arr = [], 0, 0
            return math.inf

        next_arr = load()
        nsvc = len(self.routes)
        stop_at = math.inf
        # the loop's own counters and the hottest handlers as locals (self.now, self.events, self.requests are set
        # once after the loop: nothing reads them while it runs)
        now = self.now
        events = self.events
        requests = self.requests
        inst_event, iteration_end, prefill_done, arrive = self.inst_event, self.iteration_end, self.prefill_done, self.arrive
        r_enc, r_enc_pool = self.r_enc, self.r_enc_pool
        while True:
            if heap and (t_next := heap[0][0]) < next_arr:
                if t_next > stop_at:
                    break
                now = t_next
                if now >= next_sample:
                    next_sample = self.sample_until(now, next_sample, interval, max_samples)
                _, _, kind, obj, ver = pop(heap)
                events += 1
                if kind == EV_INST:
                    if ver == obj.version:
                        if obj.in_iter:  # inst_event's first case, without its call (a unified pool's every iteration)
                            iteration_end(obj, now)
                        else:
                            inst_event(obj, now)
                elif kind == EV_PF_DONE:
                    if ver == obj.version:
                        prefill_done(obj, now)
                elif kind == EV_DEC_ENQ:
                    dec = self.r_dec[obj.svc]
                    obj.enter = now
                    obj.waited = False
                    dec.queue.append(obj)
                    if len(dec.queue) > dec.queue_max:
                        dec.queue_max = len(dec.queue)
                    self.admit(dec, now)
                elif kind == EV_TURN:
                    self.next_turn(obj, now)
                elif kind == EV_ENCODED:
                    self.encoded(obj, now)
                elif kind == EV_OUT_START:
                    self.outage_start(obj, now)
                elif kind == EV_OUT_END:
                    self.outage_end(obj, now)
            elif next_arr < math.inf:
                now = next_arr
                if now >= next_sample:
                    next_sample = self.sample_until(now, next_sample, interval, max_samples)
                t, inp, out, svc, turns, wait, append = arr[pos]
                pos += 1
                if not 0 <= svc < nsvc:
                    raise ValueError(f"request stream names service index {svc}, but only {nsvc} routes exist")
                requests += 1
                req = _Req(t, inp, out, svc, turns, wait, append, warm <= t < mend)
                enc = r_enc[svc]
                if enc:  # an inline encode: its time as prompt work in the route's prefill / unified pool
                    req.enc = enc
                    req.pf_tokens += enc
                    req.pf_left += enc
                req.to_encode = r_enc_pool[svc] is not None
                arrive(req, now)
                last_arrival = t
                next_arr = arr[pos][0] if pos < n_arr else load()
                if next_arr == math.inf:
                    stop_at = last_arrival + cfg.max_drain_s
            else:
                break
        self.now, self.events, self.requests = now, events, requests
        return self.result(time.perf_counter() - wall0, last_arrival)

    def result(self, wall_s: float, last_arrival: float) -> SimResult:
        end = self.now
        services = {}
        for i, r in enumerate(self.routes):
            done = self.done[i]
            gaps = self.itl.get(r.decode or r.unified or "")
            itl = Summary.of(gaps) if gaps is not None else None
            services[r.service] = ServiceResult(
                service=r.service, ttft=Summary.of(self.ttft[i]), tpot=Summary.of(self.tpot[i]),
                e2e=Summary.of(self.e2e[i]), completed=done,
                unfinished=self.started[i] - done, rejected=self.rejected[i],
                ttft_attainment=self.ttft_ok[i] / done if done else math.nan,
                tpot_attainment=self.tpot_ok[i] / done if done else math.nan,
                slo_attainment=(self.slo_ok[i] / (self.started[i] + self.rejected[i])
                                if self.started[i] + self.rejected[i] else math.nan),
                ttft_target_s=r.ttft_target_s, ttft_quantile=r.ttft_quantile,
                tpot_target_s=r.tpot_target_s, tpot_quantile=r.tpot_quantile,
                ttft_met=(done > 0 and self.ttft[i].quantile(r.ttft_quantile) <= r.ttft_target_s),
                tpot_met=(done > 0 and (self.tpot[i].n == 0 or _stat(self.tpot[i], r.tpot_quantile) <= r.tpot_target_s)),
                token_metric=r.token_metric, itl=itl, itl_target_s=r.itl_target_s, itl_quantile=r.itl_quantile,
                itl_met=(gaps is None or gaps.n == 0 or gaps.quantile(r.itl_quantile) <= r.itl_target_s),
            )
        pools = {}
        # the window the pools' time was accrued over (in_window): the measured one, ended by the run if sooner
        span = min(end, self.measure_end_s) - max(0.0, self.warmup_s)
        for p in self.pools.values():
            n = len(p.insts)
            inst_time = n * span if span > 0 else math.nan
            busy = sum(i.busy_s for i in p.insts)
            slots = sum(i.slot_s for i in p.insts)
            lane = sum(i.lane_s for i in p.insts)
            kv = sum(i.kv_s for i in p.insts)
            pools[p.name] = PoolResult(
                name=p.name, role=p.role, instances=n, wait=Summary.of(p.wait),
                utilization=busy / inst_time if n else math.nan,
                slot_utilization=(slots / (inst_time * p.max_batch) if n and not p.serial else math.nan),
                lane_utilization=(lane / inst_time if n and p.role == "unified" else math.nan),
                kv_utilization=(kv / (inst_time * p.cap) if n and p.cap < math.inf and not p.serial else math.nan),
                preemptions=p.preemptions, kv_blocked_admissions=p.kv_blocked, rejected=p.rejected,
                recompute_s=p.recompute_s, queue_max=p.queue_max,
            )
        hist: dict[str, LogHistogram] = {f"pool:{p.name}:wait": p.wait for p in self.pools.values()}
        for i, r in enumerate(self.routes):
            hist[f"service:{r.service}:ttft"] = self.ttft[i]
            hist[f"service:{r.service}:tpot"] = self.tpot[i]
            hist[f"service:{r.service}:e2e"] = self.e2e[i]
        for name, h in self.itl.items():
            hist[f"pool:{name}:itl"] = h
        return SimResult(services=services, pools=pools, requests=self.requests, events=self.events,
                         wall_s=wall_s, sim_end_s=end, last_arrival_s=last_arrival,
                         timeline=self.timeline, histograms=hist, sections=self.sections)


def simulate(pools: Sequence[PoolSpec], routes: Sequence[ServiceRoute],
             stream: Iterable[RequestChunk], config: SimConfig | None = None, *,
             duration_hint_s: float | None = None) -> SimResult:
    """Run one simulation. ``stream`` yields time-ordered :class:`RequestChunk`; its
    ``service`` column indexes ``routes``. Deterministic given the stream."""
    return _Sim(pools, routes, config or SimConfig()).run(stream, duration_hint_s)
