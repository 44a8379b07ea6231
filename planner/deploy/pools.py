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
  iteration (:mod:`planner.perf.points`: ``q <= Q - B``); the engine's one chunk is the pool's
  ``q = Σ λ_b n_b / Σ λ_b (n_b / q_b)`` over the routed buckets' chunks ``q_b``
  (:func:`planner.pool_latency.pool_chunk_tokens`): the chunk at which the lane does the iterations the
  points priced, the one the plan's analytic check and peak simulation ran the pool at, its ITL
  included (the smallest per-bucket chunk, launched before 2026-12-06, gave the lane more iterations
  than any check saw; it stays the fallback when a routed point lacks its prompt tokens), and the
  budget is ``Q = B V + q``. Prefill pools: the largest ``max_batch x input_tokens_rep`` (a whole
  batch of the bucket's representative prompts in one iteration, as the prefill point was costed;
  longer prompts of a bucket are chunked by the engine). Decode pools: ``B V``, ``V`` the tokens
  verified per sequence per step: ``k + 1`` for a chain of ``k`` speculative tokens, the
  service's ``speculative.verify_tokens`` for a draft tree (the step the plan priced,
  :mod:`planner.perf.speculative`), 1 without speculation.
- **expert-parallel prefill** (:func:`ep_prefill_prompts_per_rank`): the point's ``max_batch`` is 1
  by convention (:func:`planner.perf.moe.ep_operating_point`), but it was priced at ``m`` prompts
  per DP rank per iteration (``tau = t(m) / (dp m)``, ``TTFT >= t(m)``). ``m`` is not stored in the
  plan; it is recovered as the largest of the prompt counts that function tries with
  ``tau dp m <= TTFT``. The replica's batch cap is ``m dp`` and its token budget ``m dp n`` (``n``
  the representative prompt), i.e. ``m`` prompts and ``m n`` tokens per rank.
- **context length** (:func:`longest_request_tokens`): the longest request (input + output) of the
  pool's model group where the plan records every length exactly (hand-given lengths: mean =
  representative, no length mix); ``None`` (the engine's default, the model's) for a traffic log's
  buckets, whose representative lengths are not their longest.
- **memory fraction**: :data:`planner.perf.roofline.U_MEM` (the planner sized KV with
  ``W/tp + reserve + KV <= M u_mem``). TensorRT-LLM's fraction is of the memory left after the
  weights, so its value is ``(M u_mem - W/tp - reserve) / (M - W/tp - reserve)``.
- **replicas**: ``PoolPlan.instances``.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.catalog import Catalog
    from planner.schema.plan import PlanResult, PoolPlan


EAGLE_DRAFT_PLACEHOLDER = "<EAGLE-draft-head-checkpoint>"
"""Emitted in place of an EAGLE draft the instance does not name: not a Hugging Face id or a path,
so every engine refuses to start on it (instead of loading a wrong or empty draft)."""


@dataclass(frozen=True)
class SpeculativeLaunch:
    """Speculative decoding chosen for a pool (the operating points' ``spec_*`` columns, the
    service's ``speculative`` mapping for what the rows do not carry)."""

    method: str
    """``mtp``, ``eagle``, ``draft_model`` or ``ngram``."""
    num_tokens: int
    """Tokens proposed per step (k)."""
    draft_model: str = ""
    """Draft checkpoint for ``draft_model`` / ``eagle`` (a Hugging Face id or path: a catalog id is
    replaced by its profile's ``hf_id``), :data:`EAGLE_DRAFT_PLACEHOLDER` for an EAGLE draft the
    instance does not name, else ''."""
    verify_tokens: int = 0
    """Tokens verified per sequence per step (``speculative.verify_tokens``, a draft tree); 0: a chain."""

    @property
    def verified_per_step(self) -> int:
        """``V``: ``verify_tokens`` for a tree, ``k + 1`` for a chain."""
        return max(self.verify_tokens, self.num_tokens + 1)

    @property
    def is_tree(self) -> bool:
        return self.verified_per_step > self.num_tokens + 1

    @property
    def tree_topk(self) -> int:
        """Branching factor of the draft tree (SGLang ``--speculative-eagle-topk``): the smallest
        ``K >= 2`` whose tree of ``k`` levels, ``K + (k - 1) K^2`` candidates (SGLang's EAGLE tree:
        top-K per node, the K best expanded per level), holds the ``V - 1`` draft tokens; 1 for a chain."""
        if not self.is_tree:
            return 1
        need = self.verified_per_step - 1
        topk = 2
        while topk + (self.num_tokens - 1) * topk * topk < need:
            topk += 1
        return topk


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
    warnings: tuple[str, ...] = field(default_factory=tuple)
    """What the plan needs and no target can express as emitted (a model path to substitute...)."""
    max_model_tokens: int | None = None
    """Longest request (input + output tokens) of the model group, when the plan records it (:func:`longest_request_tokens`)."""
    model_context_tokens: int | None = None
    """The model profile's ``max_context_tokens``."""
    prefill_prompts_per_rank: int | None = None
    """Expert-parallel prefill: prompts per DP rank per iteration the plan priced (:func:`ep_prefill_prompts_per_rank`)."""


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


def kv_precisions_of(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{model group: kv precision}`` of raw instance services (the schema's default: the weight
    precision, fp8 for fp4 weights: :meth:`planner.schema.instance.Service.kv_precision_resolved`)."""
    out: dict[str, str] = {}
    for svc in services.values():
        w = svc.get("weight_precision", "bf16")
        kv = svc.get("kv_precision") or ("fp8" if w == "fp4" else w)
        out[f"{svc['model']}@{w}"] = str(kv)
    return out


def instance_services(path: str | Path, plan_file: Path | None,
                      overrides: dict[str, Any] | None = None) -> dict[str, dict[str, Any]] | None:
    """The raw ``services`` mappings (those with a model) of the instance file the plan was solved
    from, with the plan's ``--set`` overrides (``PlanResult.overrides``) applied as `planner solve`
    applied them (:func:`planner.overrides.apply_overrides`); ``None`` when the file cannot be found
    or read."""
    import yaml

    from planner.errors import InputError
    from planner.overrides import apply_overrides

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
            if not isinstance(data, dict):
                return None
            if overrides:
                # the plan was solved with them; a path the file no longer has keeps the file's value
                with contextlib.suppress(InputError):
                    data = apply_overrides(data, overrides)
            services = data.get("services", {})
            if not isinstance(services, dict):
                return None
            return {str(n): svc for n, svc in services.items() if isinstance(svc, dict) and "model" in svc}
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


def draft_checkpoint(method: str, draft: str, catalog: Catalog) -> tuple[str, str | None]:
    """The draft argument an engine loads, and a warning or ``None``.

    ``draft_model`` names a catalog id (:class:`planner.schema.speculative.SpeculativeDecoding`): its
    profile's ``hf_id``. ``eagle`` names the head's Hugging Face id or path, used as given; the field
    is optional, and without it :data:`EAGLE_DRAFT_PLACEHOLDER` is emitted (chosen over an error:
    the plan itself is valid and every other setting is usable; over an empty string: vLLM and
    TensorRT-LLM would start without a draft or fail late, the placeholder fails at load, naming
    itself) with a warning naming the field to set."""
    if method not in ("eagle", "draft_model"):
        return "", None
    if not draft:
        if method == "eagle":
            return EAGLE_DRAFT_PLACEHOLDER, (
                f"EAGLE speculation without a draft head: the instance gives no speculative.draft_model, so the settings carry "
                f"the placeholder {EAGLE_DRAFT_PLACEHOLDER} (the engine refuses to start on it); set services.<name>.speculative."
                "draft_model to the EAGLE head's Hugging Face id (e.g. yuhuili/EAGLE3-LLaMA3.3-Instruct-70B for Llama-3.3-70B) and re-solve, "
                "or replace the placeholder")
        return "", None
    profile = catalog.models.get(draft)
    if profile is None:
        return draft, None
    if profile.hf_id:
        return str(profile.hf_id), None
    return draft, (f"draft model {draft!r} has no hf_id in the catalog: the draft argument is the catalog id; "
                   "replace it with the draft's checkpoint (Hugging Face id or directory)")


def _spec_of(rows: list[tuple[dict[str, Any], float]], services: dict[str, dict[str, Any]] | None,
             catalog: Catalog) -> tuple[SpeculativeLaunch | None, list[str]]:
    """The pool's speculation: method, k and draft from the first speculative row; the draft tree
    (``verify_tokens``) from the row's service in the instance (the rows do not carry it)."""
    for row, _ in rows:
        method = row.get("spec_method")
        if isinstance(method, str) and method:
            svc = (services or {}).get(str(row.get("service")), {})
            spec_cfg = svc.get("speculative") if isinstance(svc.get("speculative"), dict) else {}
            verify = spec_cfg.get("verify_tokens") if isinstance(spec_cfg, dict) else None
            draft, warning = draft_checkpoint(method, str(row.get("spec_draft_model") or ""), catalog)
            spec = SpeculativeLaunch(str(method), int(row.get("spec_tokens") or 0), draft,
                                     int(verify) if isinstance(verify, int) and not isinstance(verify, bool) else 0)
            return spec, [warning] if warning else []
    return None, []


def ep_prefill_prompts_per_rank(seconds_per_request_s: float, dp: int, ttft_ms: float, prompt_tokens: float,
                                tokens_per_rank_cap: int) -> int:
    """Prompts per DP rank per iteration ``m`` an expert-parallel prefill point was priced at.

    :func:`planner.perf.moe.ep_operating_point` tries ``m`` in ``PREFILL_PROMPTS_PER_RANK`` below
    ``m_max = tokens_per_rank_cap // n`` plus ``m_max`` itself, prices ``tau = t(m) / (dp m)`` and
    reports ``TTFT = t(m) + transfer + first step + overhead >= t(m) = tau dp m``. The plan keeps
    ``tau`` and the TTFT, not ``m``: this is the largest tried ``m`` with ``tau dp m <= TTFT`` (the
    plan's ``m`` unless the TTFT's other terms exceed one more step of the grid). At least 1."""
    from planner.perf.moe import PREFILL_PROMPTS_PER_RANK

    m_max = max(1, int(tokens_per_rank_cap // max(prompt_tokens, 1.0)))
    tried = {m for m in PREFILL_PROMPTS_PER_RANK if m < m_max} | {m_max}
    per_prompt_s = seconds_per_request_s * max(dp, 1)
    if not (per_prompt_s > 0 and math.isfinite(per_prompt_s) and ttft_ms > 0):
        return 1
    fits = [m for m in tried if m * per_prompt_s <= ttft_ms / 1e3 * (1 + 1e-9)]
    return max(fits) if fits else 1


def longest_request_tokens(plan: PlanResult, model_group: str) -> int | None:
    """Longest request (input + output tokens) of the services of ``model_group``, when the plan
    records every length exactly: each demand row's mean equals its representative length and it
    has no length mix (hand-given lengths, ``traffic.lengths``). ``None`` otherwise: a traffic
    log's buckets keep representative lengths, not their longest, and a limit below a real
    request would make the engine reject it."""
    longest = 0.0
    for d in plan.capacity.demand:
        if d.get("model") != model_group:
            continue
        try:
            n_rep, o_rep = float(d["input_tokens_rep"]), float(d["output_tokens_rep"])
            n_mean, o_mean = float(d["input_tokens_mean"]), float(d["output_tokens_mean"])
        except (KeyError, TypeError, ValueError):
            return None
        if d.get("length_mix") or abs(n_rep - n_mean) > 0.5 or abs(o_rep - o_mean) > 0.5:
            return None
        longest = max(longest, n_rep + o_rep)
    return int(math.ceil(longest)) if longest > 0 else None


def _model_of(model_id: str, catalog: Catalog, base_dir: Path | None, where: str, plan_file: str) -> tuple[Any, str, list[str]]:
    """The pool's model profile, the checkpoint argument, and warnings.

    A catalog id (or a name the catalog resolves, :meth:`planner.catalog.Catalog.resolve_model`):
    its ``hf_id``. A ``config.json`` path (a model the instance gave as a file): the engines need
    the checkpoint, not its config: the file's folder when it holds weights (``*.safetensors`` /
    ``*.bin``), else the path as given, with a warning to substitute it. Anything else: an error
    naming the pool (a hand-edited plan)."""
    from planner.errors import InputError, Problem

    model = catalog.models.get(model_id)
    if model is None:
        try:
            model = catalog.resolve_model(model_id, base_dir)
        except InputError:
            model = None
    is_config = model_id.lower().endswith(".json")
    if model is None and not is_config:
        raise InputError(Problem(plan_file, where, f"unknown model {model_id!r}: neither a catalog id nor a model the catalog resolves",
                                 "use a catalog model id (`planner catalog models`) or re-solve the instance with this planner"))
    if model is not None and model.hf_id:
        return model, str(model.hf_id), []
    if is_config:
        cfg = Path(model_id).expanduser()
        if not cfg.is_absolute() and base_dir is not None:
            cfg = base_dir / cfg
        folder = cfg.parent
        try:
            has_weights = any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))
        except OSError:
            has_weights = False
        if has_weights:
            return model, str(folder), [f"the model is given as the config file {model_id}: its folder {folder} (which holds the "
                                        "weights) is the checkpoint argument"]
        return model, model_id, [f"the model is given as the config file {model_id}: engines load a checkpoint, not a config.json; "
                                 "substitute the model's Hugging Face repo id or the checkpoint directory (config.json, tokenizer and "
                                 "weights) for it in the emitted settings"]
    return model, model_id, [f"model {model_id!r} has no hf_id in the catalog: the model argument is the catalog id; "
                             "replace it with the checkpoint (Hugging Face id or directory)"]


def pool_launch(plan: PlanResult, arch: str, pool: PoolPlan, catalog: Catalog,
                kv_by_group: dict[str, str] | None, services: dict[str, dict[str, Any]] | None = None,
                plan_file: str = "plan.json") -> PoolLaunch:
    """Launch settings of one pool (module docstring for every formula)."""
    import numpy as np

    from planner.perf.moe import moe_params
    from planner.perf.roofline import RESERVE_GB, U_MEM
    from planner.pool_latency import pool_chunk_tokens

    model_id, _, weight = pool.model.partition("@")
    base_dir = Path(plan.instance_path).parent if plan.instance_path else None
    model, hf_id, warnings = _model_of(model_id, catalog, base_dir, f"architectures.{arch}.pools.{pool.name}.model", plan_file)
    device = catalog.devices.get(pool.device)
    notes: list[str] = []
    native = model.native_weight_precision if model is not None else weight
    if kv_by_group is not None and pool.model in kv_by_group:
        kv = kv_by_group[pool.model]
    else:
        kv = "fp8" if weight == "fp4" else weight
        notes.append(f"KV-cache dtype {kv} is the schema default for {weight} weights: the instance file {plan.instance_path!r} "
                     "could not be read (run deploy from the folder `planner solve` ran in)")
    tp, ep, dp = parse_parallelism(pool.parallelism, pool.tp)
    rows = _points_of(plan, pool, arch)
    spec, spec_warnings = _spec_of(rows, services, catalog)
    warnings += spec_warnings
    v = spec.verified_per_step if spec else 1
    caps = [max(1.0, float(r.get("max_batch") or 1)) for r, _ in rows] or [1.0]
    prompts_per_rank: int | None = None
    if pool.role == "prefill" and ep > 1 and dp > 1 and rows:
        # expert-parallel prefill: the point's max_batch 1 stands for m prompts on each of dp ranks
        prompts_per_rank = max(ep_prefill_prompts_per_rank(float(r.get("instance_seconds_per_request") or 0.0), dp,
                                                           float(r.get("ttft_ms") or 0.0), _new_prompt_tokens(plan, r),
                                                           moe_params(None).prefill_tokens_per_rank) for r, _ in rows)
        caps = [float(prompts_per_rank * dp)] * len(rows)
    if pool.role == "prefill":
        shares = [lam for _, lam in rows]
    else:
        shares = [lam * float(r.get("output_tokens_rep") or _demand(plan, r, "output_tokens_rep") or 1.0) for r, lam in rows]
    b = max(1, math.floor(mixed_batch(caps, shares) + 1e-9))
    chunk: int | None = None
    chunk_range: tuple[int, int] | None = None
    if pool.role == "unified":
        lane = [(lam, float(r.get("prefill_tokens") or 0.0), float(r["prefill_chunk_tokens"])) for r, lam in rows
                if r.get("prefill_chunk_tokens")]
        if lane:
            chunks = [int(q_b) for _, _, q_b in lane]
            chunk, chunk_range = min(chunks), (min(chunks), max(chunks))
            q = pool_chunk_tokens(*(np.array(col) for col in zip(*lane, strict=True)))
            if len(lane) == len(rows) and math.isfinite(q) and q >= 1:
                chunk = int(round(q))  # the pool's one chunk, as the plan's check and simulation priced it
        budget = b * v + (chunk or 0)
    elif pool.role == "prefill":
        budget = max(int(math.ceil(cap * float(_demand(plan, r, "input_tokens_rep") or 1)))
                     for cap, (r, _) in zip(caps, rows, strict=True)) if rows else 1
    else:
        budget = b * v
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
        notes=tuple(notes), warnings=tuple(warnings),
        max_model_tokens=longest_request_tokens(plan, pool.model),
        model_context_tokens=(int(model.max_context_tokens) if model is not None and getattr(model, "max_context_tokens", None) else None),
        prefill_prompts_per_rank=prompts_per_rank)


def _new_prompt_tokens(plan: PlanResult, row: dict[str, Any]) -> float:
    """New prompt tokens of a row's representative prompt, ``n (1 - cached share)`` (:func:`planner.perf.points.request_tokens`)."""
    n = float(_demand(plan, row, "input_tokens_rep") or 1.0)
    share = float(_demand(plan, row, "cached_prefix_share") or 0.0)
    return max(1.0, n * (1.0 - share))


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
