"""From a plan's pools to engine-neutral launch settings (one :class:`PoolLaunch` per pool).

Every number comes from the plan file (its pools, routing and capacity snapshot) or the catalog:

- **model**: the catalog model's ``hf_id`` (``models/llm/<id>.yaml``); the pool's model group is
  ``{model}@{weight_precision}`` (:mod:`planner.capacity`).
- **KV-cache dtype**: the service's ``kv_precision`` in the instance the plan was solved from
  (``PlanResult.instance_path``); when that file cannot be read, the instance schema's default
  (:meth:`planner.schema.instance.Service.kv_precision_resolved`: the weight precision, fp8 for fp4
  weights) and a note saying so.
- **parallelism**: ``PoolPlan.parallelism`` (``tp4`` or ``tp1·ep32·dp32``).
- **batch cap** (``max_seqs``): a pool serves several length buckets, each with its own latency-limited
  batch ``B_i`` (the operating point's ``max_batch``); an engine takes one cap. Under the linear
  step model each resident sequence of bucket ``i`` uses ``1/B_i`` of the step budget, so the
  largest mixed batch within the targets is ``B = 1 / sum_i (s_i / B_i)``, ``s_i`` the share of
  resident sequences from bucket ``i`` (Little's law: ``s_i`` proportional to peak rate routed x
  representative output tokens for decode/unified; to the routed rate for prefill). ``B`` lies
  between ``min B_i`` and ``max B_i`` and equals ``B_i`` for a single bucket.
- **token budget**: unified pools carry ``B`` decode tokens plus a prefill chunk ``q`` per
  iteration (:mod:`planner.perf.points`: ``q <= Q - B``); the engine's one chunk is the smallest
  chunk of the routed buckets (the ITL-safe one; larger chunks lengthen the ITL tail), and the
  budget is ``Q = B + q``. Prefill pools: the largest ``max_batch x input_tokens_rep`` (a whole
  batch of the bucket's representative prompts in one iteration, as the prefill point was costed;
  longer prompts of a bucket are chunked by the engine). The context length is left to the
  engine (the model's): the plan keeps only representative lengths, not each bucket's longest. Decode pools: ``B x (1 + k)`` (``k`` speculative tokens).
- **memory fraction**: :data:`planner.perf.roofline.U_MEM` (the planner sized KV with
  ``W/tp + reserve + KV <= M u_mem``). TensorRT-LLM's fraction is of the memory left after the
  weights, so its value is ``(M u_mem - W/tp - reserve) / (M - W/tp - reserve)``.
- **replicas**: ``PoolPlan.instances``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.catalog import Catalog
    from planner.schema.plan import PlanResult, PoolPlan


@dataclass(frozen=True)
class SpeculativeLaunch:
    """Speculative decoding chosen for a pool (the operating points' ``spec_*`` columns)."""

    method: str
    """``mtp``, ``eagle``, ``draft_model`` or ``ngram``."""
    num_tokens: int
    """Tokens proposed per step (k)."""
    draft_model: str = ""
    """Draft model id for ``draft_model`` / ``eagle`` (a Hugging Face id or path), else ''."""


@dataclass(frozen=True)
class PoolLaunch:
    """Everything an engine needs to launch one pool of a plan."""

    pool: str
    role: str
    """``prefill``, ``decode`` or ``unified``."""
    device: str
    vendor: str
    devices_per_node: int
    tp: int
    ep: int
    dp: int
    gpus_per_instance: int
    instances: int
    model_id: str
    hf_id: str
    weight_precision: str
    native_precision: str
    kv_precision: str
    max_seqs: int
    batch_range: tuple[int, int]
    """Smallest and largest per-bucket batch cap the mixed cap was formed from."""
    token_budget: int
    chunk_tokens: int | None
    """Prefill chunk (unified pools); ``None`` elsewhere."""
    chunk_range: tuple[int, int] | None
    memory_fraction: float
    free_memory_fraction: float
    """The same KV pool as a share of the memory left after weights and reserve (TensorRT-LLM)."""
    buckets: tuple[str, ...]
    speculative: SpeculativeLaunch | None = None
    plain_buckets: tuple[str, ...] = ()
    """Buckets of a speculative pool whose operating point is plain (the engine speculates for every request)."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def parse_parallelism(text: str, tp_default: int) -> tuple[int, int, int]:
    """``tp4`` -> (4, 1, 1); ``tp1·ep32·dp32`` -> (1, 32, 32) (attention TP, expert parallel, DP ranks)."""
    def get(key: str, default: int) -> int:
        m = re.search(rf"{key}(\d+)", text or "")
        return int(m.group(1)) if m else default
    return get("tp", tp_default), get("ep", 1), get("dp", 1)


def mixed_batch(caps: list[float], shares: list[float]) -> float:
    """``1 / sum_i (s_i / B_i)`` with the shares normalised (module docstring); ``min(caps)`` without weights."""
    total = sum(shares)
    if total <= 0:
        return float(min(caps))
    return 1.0 / sum((s / total) / b for s, b in zip(shares, caps, strict=True) if b > 0)


def instance_kv_precisions(path: str | Path, plan_file: Path | None) -> dict[str, str] | None:
    """``{model group: kv precision}`` from the instance file the plan was solved from, or ``None``
    when it cannot be found or read (the caller notes the fallback)."""
    import yaml

    raw = Path(path)
    candidates = [raw] if raw.is_absolute() else [Path.cwd() / raw] + ([plan_file.parent / raw] if plan_file else [])
    for cand in candidates:
        try:
            found = cand.is_file()
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte (fuzzed plans, issue 24)
            found = False
        if found:
            try:
                data = yaml.safe_load(cand.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                return None
            out: dict[str, str] = {}
            for svc in (data or {}).get("services", {}).values():
                if not isinstance(svc, dict) or "model" not in svc:
                    continue
                w = svc.get("weight_precision", "bf16")
                kv = svc.get("kv_precision") or ("fp8" if w == "fp4" else w)
                out[f"{svc['model']}@{w}"] = str(kv)
            return out
    return None


def _points_of(plan: PlanResult, pool: PoolPlan, arch: str) -> list[tuple[dict[str, Any], float]]:
    """The capacity rows of the pool's (service, bucket) routes, with the peak rate routed to it."""
    routes = [r for r in plan.architectures[arch].routing if r.pool == pool.name and r.share > 0 and r.role == pool.role]  # not inline encode
    rows = {(p.get("service"), p.get("bucket"), p.get("role"), p.get("config")): p for p in plan.capacity.points
            if p.get("model") == pool.model}
    out = []
    for r in routes:
        row = rows.get((r.service, r.bucket, r.role, r.config))
        if row is not None:
            out.append((row, r.rate_peak_per_s * r.share))
    return out


def _spec_of(rows: list[tuple[dict[str, Any], float]]) -> SpeculativeLaunch | None:
    for row, _ in rows:
        method = row.get("spec_method")
        if isinstance(method, str) and method:
            return SpeculativeLaunch(str(method), int(row.get("spec_tokens") or 0), str(row.get("spec_draft_model") or ""))
    return None


def pool_launch(plan: PlanResult, arch: str, pool: PoolPlan, catalog: Catalog,
                kv_by_group: dict[str, str] | None) -> PoolLaunch:
    """Launch settings of one pool (module docstring for every formula)."""
    from planner.perf.roofline import RESERVE_GB, U_MEM

    model_id, _, weight = pool.model.partition("@")
    model = catalog.models.get(model_id)
    device = catalog.devices.get(pool.device)
    notes: list[str] = []
    hf_id = model.hf_id if model is not None and model.hf_id else model_id
    if model is None or not model.hf_id:
        notes.append(f"model {model_id!r} has no hf_id in the catalog: the model argument is the catalog id; replace it with the checkpoint path")
    native = model.native_weight_precision if model is not None else weight
    if kv_by_group is not None and pool.model in kv_by_group:
        kv = kv_by_group[pool.model]
    else:
        kv = "fp8" if weight == "fp4" else weight
        notes.append(f"KV-cache dtype {kv} is the schema default for {weight} weights: the instance file {plan.instance_path!r} "
                     "could not be read (run deploy from the folder `planner solve` ran in)")
    tp, ep, dp = parse_parallelism(pool.parallelism, pool.tp)
    rows = _points_of(plan, pool, arch)
    spec = _spec_of(rows)
    k = spec.num_tokens if spec else 0
    caps = [max(1.0, float(r.get("max_batch") or 1)) for r, _ in rows] or [1.0]
    if pool.role == "prefill":
        shares = [lam for _, lam in rows]
    else:
        shares = [lam * float(r.get("output_tokens_rep") or _demand(plan, r, "output_tokens_rep") or 1.0) for r, lam in rows]
    b = max(1, math.floor(mixed_batch(caps, shares) + 1e-9))
    chunk: int | None = None
    chunk_range: tuple[int, int] | None = None
    if pool.role == "unified":
        chunks = [int(r["prefill_chunk_tokens"]) for r, _ in rows if r.get("prefill_chunk_tokens")]
        if chunks:
            chunk, chunk_range = min(chunks), (min(chunks), max(chunks))
        budget = b * (1 + k) + (chunk or 0)
    elif pool.role == "prefill":
        budget = max(int(math.ceil(float(r.get("max_batch") or 1) * float(_demand(plan, r, "input_tokens_rep") or 1))) for r, _ in rows) if rows else 1
    else:
        budget = b * (1 + k)
    # memory: the planner's KV pool expressed as TensorRT-LLM's share of the memory left after weights
    free_frac = U_MEM
    if model is not None and device is not None and device.memory_gb:
        m = device.memory_gb * 1e9
        w_dev = _weight_bytes(model, weight) / max(1, pool.tp)  # expert-parallel replicas: the mean per GPU
        if ep > 1:
            notes.append("TensorRT-LLM free_gpu_memory_fraction uses the mean weight bytes per GPU of the expert-parallel replica "
                         "(attention weights are replicated per DP rank, so the true share left for KV is a little smaller)")
        left = m - w_dev - RESERVE_GB * 1e9
        if left > 0:
            free_frac = max(0.0, min(1.0, (m * U_MEM - w_dev - RESERVE_GB * 1e9) / left))
    return PoolLaunch(
        pool=pool.name, role=pool.role, device=pool.device, vendor=(device.vendor if device else ""),
        devices_per_node=(device.devices_per_node if device else 8), tp=tp, ep=ep, dp=dp,
        gpus_per_instance=pool.tp, instances=pool.instances, model_id=model_id, hf_id=hf_id,
        weight_precision=weight, native_precision=native, kv_precision=kv, max_seqs=b,
        batch_range=(int(min(caps)), int(max(caps))), token_budget=max(int(budget), b),
        chunk_tokens=chunk, chunk_range=chunk_range,
        memory_fraction=U_MEM, free_memory_fraction=round(free_frac, 3),
        buckets=tuple(f"{r.get('service')}/{r.get('bucket')}" for r, _ in rows), speculative=spec,
        plain_buckets=tuple(f"{r.get('service')}/{r.get('bucket')}" for r, _ in rows
                            if spec is not None and not (isinstance(r.get("spec_method"), str) and r.get("spec_method"))),
        notes=tuple(notes))


def _weight_bytes(model: Any, precision: str) -> float:
    """``W`` at the served precision (:meth:`planner.schema.llm.LLMProfile.weight_bytes`)."""
    return float(model.weight_bytes(precision))


def _demand(plan: PlanResult, row: dict[str, Any], key: str) -> Any:
    """A demand column (``input_tokens_rep``...) of the row's (service, bucket)."""
    if key in row and row[key] is not None:
        return row[key]
    for d in plan.capacity.demand:
        if d.get("service") == row.get("service") and d.get("bucket") == row.get("bucket"):
            return d.get(key)
    return None
