"""Launch settings of one plan architecture for each serving engine.

One function per target turns the engine-neutral :class:`~planner.deploy.pools.PoolLaunch` list into
files (shell launch scripts, YAML configs) and :class:`Command` records whose flags the tests check
against the engine's own list (:mod:`planner.deploy.flags`). What the target cannot express is a
*warning* (``NOTES.md`` and stderr); how a number was derived is a *note* (``NOTES.md``).

Flag names and YAML keys, per target (versions in ``planner/data/engine_flags/``):

- **vllm**: ``vllm serve MODEL`` with ``--tensor-parallel-size``, ``--data-parallel-size``,
  ``--enable-expert-parallel``, ``--quantization``, ``--kv-cache-dtype``, ``--max-num-seqs``,
  ``--max-num-batched-tokens``, ``--gpu-memory-utilization``, ``--max-model-len``,
  ``--enable-chunked-prefill``, ``--enable-mm-embeds`` (a separate encode pool); P/D: ``--kv-transfer-config`` with the NIXL connector
  (``kv_role: kv_both``); speculation: ``--speculative-config``.
- **sglang**: ``python -m sglang.launch_server`` with ``--tp-size``, ``--dp-size`` +
  ``--enable-dp-attention``, ``--ep-size``, ``--max-running-requests``, ``--chunked-prefill-size``,
  ``--max-prefill-tokens``, ``--mem-fraction-static``, ``--context-length``; P/D: ``--disaggregation-mode``,
  ``--disaggregation-transfer-backend``, ``--disaggregation-bootstrap-port`` and the router
  ``python -m sglang_router.launch_router --pd-disaggregation``; speculation:
  ``--speculative-algorithm`` / ``--speculative-num-steps`` / ``--speculative-eagle-topk`` /
  ``--speculative-num-draft-tokens``.
- **trtllm**: ``trtllm-serve MODEL --backend pytorch --config POOL.yaml`` (LLM-API keys
  ``max_batch_size``, ``max_num_tokens``, ``max_seq_len``, ``kv_cache_config``...); P/D:
  ``trtllm-serve disaggregated -c disagg_config.yaml`` (``context_servers`` / ``generation_servers``,
  ``cache_transceiver_config``).
- **dynamo**: a ``DynamoGraphDeployment`` (Frontend with ``--router-mode kv``; one worker service per
  pool running ``python3 -m dynamo.vllm``, prefill workers with ``--is-prefill-worker``; Dynamo sets
  the NIXL connector itself).
- **llm-d**: llm-d-modelservice Helm values (``decode`` / ``prefill`` with ``replicas``,
  ``parallelism``, vLLM ``args``; ``routing.proxy.connector: nixlv2`` for P/D).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from planner.deploy.pools import PoolLaunch

ROUTER_PORT = 8000
"""Port of the router / frontend every target exposes."""
BASE_PORT = {"prefill": 8100, "decode": 8200, "unified": 8300}
"""First engine port per role; pool ``i`` of a role listens on ``base + i``."""
SGLANG_BOOTSTRAP_PORT = 8998
"""SGLang's default ``--disaggregation-bootstrap-port``; prefill pool ``i`` uses ``8998 + i``."""
IMAGES = {
    "dynamo": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.3.2",
    "llm-d": "ghcr.io/llm-d/llm-d-cuda-dev:latest",
}
"""Container images of the Kubernetes targets (the ones their example manifests use)."""


@dataclass
class Command:
    """One emitted command line (for the flag check) and where it runs."""

    pool: str
    argv: list[str]
    kind: str = "flags"
    """Which list of the target's flag file it belongs to: ``flags``, ``frontend_flags``,
    ``disaggregated_flags`` or ``router``."""
    replicas: int = 1


@dataclass
class Deployment:
    """The settings of one architecture for one target."""

    target: str
    architecture: str
    files: dict[str, str] = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)
    yaml_docs: dict[str, Any] = field(default_factory=dict)
    """Emitted YAML documents by file name (their keys are checked against the target's key list)."""
    warnings: list[str] = field(default_factory=list)
    """What the plan needs and the target cannot express."""
    notes: list[str] = field(default_factory=list)
    language_only: bool = False
    """The plan runs the vision tower in a separate encode pool: the LLM pools take embeddings where the target can."""


def slug(p: PoolLaunch) -> str:
    """``decode-mi300x-tp1`` (DNS-1123 label characters only)."""
    base = f"{p.role}-{p.device}-tp{p.tp}" + (f"-ep{p.ep}-dp{p.dp}" if p.ep > 1 or p.dp > 1 else "")
    return re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")


def _ports(pools: list[PoolLaunch]) -> dict[str, int]:
    out: dict[str, int] = {}
    seen: dict[str, int] = {}
    for p in pools:
        i = seen.get(p.role, 0)
        out[p.pool] = BASE_PORT[p.role] + i
        seen[p.role] = i + 1
    return out


def _needs_quantization(p: PoolLaunch) -> bool:
    return p.weight_precision != p.native_precision


def _add(items: list[str], text: str) -> None:
    """Append ``text`` unless it is there already (several pools share a warning)."""
    if text not in items:
        items.append(text)


def context_warning(p: PoolLaunch) -> str | None:
    """A warning when the plan's longest request exceeds the model profile's ``max_context_tokens``:
    the engines refuse a longer maximum length at start (vLLM unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1,
    SGLang unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1) and the model was not trained for it."""
    if p.max_model_tokens is None or p.model_context_tokens is None or p.max_model_tokens <= p.model_context_tokens:
        return None
    return (f"{p.model_id}: the plan's longest request is {p.max_model_tokens} tokens (input + output), more than the model's "
            f"max_context_tokens {p.model_context_tokens}: the emitted maximum model length makes the engine refuse to start "
            "(and forcing it past the model's context degrades quality); shorten the requests or plan a longer-context model")


def _common_warnings(pools: list[PoolLaunch], target: str, dep: Deployment) -> None:
    for p in pools:
        for w in p.warnings:
            _add(dep.warnings, w)
        cw = context_warning(p)
        if cw:
            _add(dep.warnings, cw)
        if p.max_model_tokens is None:
            _add(dep.notes, f"{p.model_id}: maximum model length left to the engine (the model's): the plan keeps representative "
                            "lengths of a traffic log's buckets, not their longest request")
        if p.prefill_prompts_per_rank is not None:
            _add(dep.notes, f"{p.pool}: expert-parallel prefill priced at {p.prefill_prompts_per_rank} prompts per DP rank per "
                            f"iteration (the largest count planner.perf.moe tries whose iteration fits the point's TTFT): batch cap "
                            f"{p.max_seqs} and token budget {p.token_budget} per replica of {p.dp} ranks")
    spec_dec = [p for p in pools if p.role == "decode" and p.speculative is not None]
    if spec_dec and any(p.role == "prefill" for p in pools) and target != "sglang":
        _add(dep.notes, f"speculative decoding is configured on the decode servers only; {target}'s prefill side runs the target "
                        "model alone here. SGLang needs the same speculative settings on its prefill servers under PD "
                        "disaggregation (sgl-project/sglang PR #23918, #9976; issue #10059): if your engine version reports a "
                        "draft/hidden-state mismatch at the KV handoff, add the decode pool's speculative settings to the prefill pool")
    by_role: dict[str, list[PoolLaunch]] = {}
    for p in pools:
        by_role.setdefault(p.role, []).append(p)
    for role, ps in by_role.items():
        if len(ps) > 1:
            routes = "; ".join(f"{p.pool}: {', '.join(p.buckets)}" for p in ps)
            dep.warnings.append(
                f"the plan splits the {role} phase over {len(ps)} pools by request length ({routes}); {target}'s router "
                "balances load and cannot route by prompt length: put a length-aware gateway in front or accept that the "
                "plan's latency figures assume this routing")
    for p in pools:
        if p.gpus_per_instance > p.devices_per_node:
            dep.warnings.append(
                f"{p.pool}: one instance spans {p.gpus_per_instance} devices, more than the {p.devices_per_node} per node of "
                f"{p.device}: the commands below are for the leader node; add the target's multi-node options "
                "(node count, rank, head address) for your cluster")
        if p.batch_range[0] != p.batch_range[1]:
            dep.notes.append(
                f"{p.pool}: batch cap {p.max_seqs} is the mix of the per-bucket caps {p.batch_range[0]}..{p.batch_range[1]} "
                "(B = 1 / sum_i s_i / B_i, planner/deploy/pools.py)")
        if p.chunk_range and p.chunk_range[0] != p.chunk_range[1]:
            dep.notes.append(
                f"{p.pool}: prefill chunk {p.chunk_tokens} is the pool's one chunk for the per-bucket chunks "
                f"{p.chunk_range[0]}..{p.chunk_range[1]} (the lane work the buckets' points priced; the plan's latency check and "
                "peak simulation ran the pool at it, ITL included; planner/deploy/pools.py)")
        dep.notes.extend(f"{p.pool}: {n}" for n in p.notes)
        if p.speculative is not None and p.plain_buckets:
            dep.warnings.append(
                f"{p.pool}: the plan speculates for {', '.join(b for b in p.buckets if b not in p.plain_buckets)} but decodes "
                f"{', '.join(p.plain_buckets)} plain; an engine speculates for every request of the pool: split the pool or "
                "accept slower decoding of those buckets at their planned batch")


def _spec_note(p: PoolLaunch) -> str:
    s = p.speculative
    assert s is not None
    return (f"{p.pool}: speculative decoding {s.method}, {s.num_tokens} tokens proposed per step"
            + (f", a draft tree of {s.verified_per_step} tokens verified per step" if s.is_tree else "")
            + (f", draft {s.draft_model}" if s.draft_model else ""))


def _chain_only_warning(p: PoolLaunch, target: str) -> str | None:
    """A draft tree the target's emitted settings cannot express (vLLM's --speculative-config and
    TensorRT-LLM's speculative_config keys of the pinned lists carry no tree): a chain is emitted."""
    s = p.speculative
    if s is None or not s.is_tree:
        return None
    return (f"{p.pool}: the plan priced a draft tree of {s.verified_per_step} tokens verified per step (speculative.verify_tokens); "
            f"{target}'s settings here verify a chain of {s.num_tokens + 1}: fewer tokens accepted per step than planned, so "
            "decoding is slower than the plan (use --target sglang, which takes the tree, or re-plan without verify_tokens)")


def encode_settings(pools: list[PoolLaunch], encode: list[Any], target: str, dep: Deployment) -> None:
    """A plan with a separate encode (vision-tower) pool sized its LLM pools without the tower's
    work: say what ``target`` offers so they skip it. vLLM-based targets (vllm, dynamo, llm-d):
    ``--enable-mm-embeds`` (in the pinned flag list) lets the LLM servers take the encoder's image
    embeddings, so the tower does not run there. SGLang: encoder disaggregation (``--encoder-only``
    encoder servers, ``--language-only --encoder-urls`` LLM servers; sgl-project/sglang PR #12263)
    is newer than the pinned flag list: a warning. TensorRT-LLM: no such key in the pinned list: a warning."""
    shared = dep.architecture == "shared"
    where = "the shared (unified) pool" if shared else "the prefill pool"
    head = (f"the plan has a separate encode (vision-tower) pool ({', '.join(f'{p.instances} x {p.config}' for p in encode)}): "
            f"not emitted, {target} settings here cover LLM pools only; launch the encoder service separately (or re-plan with "
            f"services.<name>.encode.placement: inline to keep the tower inside {where}). The plan sized the LLM pools without "
            "the tower's work: ")
    if target in ("vllm", "dynamo", "llm-d"):
        dep.language_only = True
        dep.warnings.append(head + "the LLM servers get --enable-mm-embeds, so they accept the encoder's image embeddings "
                            "(send image_embeds in place of images); images sent as pixels still run the tower there "
                            "(vLLM's encoder-cache disaggregation, --ec-transfer-config, is newer than the pinned flag list)")
    elif target == "sglang":
        dep.warnings.append(head + "SGLang skips the tower with encoder disaggregation (--encoder-only on the encoder servers, "
                            "--language-only --encoder-urls URL... on these; sgl-project/sglang PR #12263), newer than the pinned "
                            "flag list so not emitted: with the pinned version the tower runs inside these servers, more work "
                            "than the plan sized")
    else:
        dep.warnings.append(head + "TensorRT-LLM's pinned keys have no encoder-disaggregation option: the tower runs inside "
                            "these servers, more work than the plan sized (send precomputed embeddings if your version takes "
                            "them, or deploy with --target vllm / sglang)")


# ---------------------------------------------------------------------------------------- vLLM

def vllm_engine_args(p: PoolLaunch, dep: Deployment, *, kv_transfer: bool) -> list[str]:
    """vLLM engine flags of a pool (shared by vllm, dynamo and llm-d)."""
    args = ["--tensor-parallel-size", str(p.tp)]
    if p.dp > 1:
        args += ["--data-parallel-size", str(p.dp)]
    if p.ep > 1:
        args += ["--enable-expert-parallel"]
        if p.ep != p.tp * p.dp:
            dep.warnings.append(f"{p.pool}: the plan's expert parallelism {p.ep} differs from TP x DP = {p.tp * p.dp}; "
                                "vLLM's expert-parallel size is always TP x DP")
    if _needs_quantization(p):
        if p.weight_precision == "fp8":
            args += ["--quantization", "fp8"]
        else:
            dep.warnings.append(f"{p.pool}: {p.weight_precision} weights need a pre-quantized checkpoint (vLLM reads its "
                                f"quantization config); replace {p.hf_id} with an {p.weight_precision} checkpoint of the model")
    if p.kv_precision == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    elif p.kv_precision != "bf16":
        dep.warnings.append(f"{p.pool}: KV cache in {p.kv_precision} has no vLLM --kv-cache-dtype value (auto, bfloat16, fp8*): "
                            "the engine will keep the model dtype and hold fewer sequences than planned")
    seqs, budget = _per_rank(p, dep, "vLLM runs one scheduler per data-parallel rank")
    args += ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(budget),
             "--gpu-memory-utilization", f"{p.memory_fraction:.2f}"]
    if p.max_model_tokens is not None:
        args += ["--max-model-len", str(p.max_model_tokens)]
    if p.role == "unified":
        args += ["--enable-chunked-prefill"]
    if dep.language_only:
        args += ["--enable-mm-embeds"]
    if kv_transfer and p.role in ("prefill", "decode"):
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))]
    if p.speculative and p.role != "prefill":
        s = p.speculative
        cfg: dict[str, Any] = {"num_speculative_tokens": s.num_tokens}
        if s.method == "mtp":
            cfg["method"] = "deepseek_mtp" if p.model_id.startswith("deepseek") else "mtp"
        elif s.method == "eagle":
            cfg["method"] = "eagle3" if "eagle3" in s.draft_model.lower() else "eagle"
            cfg["model"] = s.draft_model
        elif s.method == "draft_model":
            cfg["method"] = "draft_model"
            cfg["model"] = s.draft_model
        else:
            cfg["method"] = "ngram"
        args += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        _add(dep.notes, _spec_note(p))
        tree = _chain_only_warning(p, dep.target)
        if tree:
            _add(dep.warnings, tree)
    return args


def _per_rank(p: PoolLaunch, dep: Deployment, why: str) -> tuple[int, int]:
    """Batch cap and token budget per data-parallel rank (the plan's are per replica of ``dp`` ranks)."""
    if p.dp <= 1:
        return p.max_seqs, p.token_budget
    seqs, budget = -(-p.max_seqs // p.dp), -(-p.token_budget // p.dp)
    note = f"{p.pool}: the replica's batch {p.max_seqs} and token budget {p.token_budget} are split over {p.dp} DP ranks ({why}): {seqs} and {budget} per rank"
    if note not in dep.notes:
        dep.notes.append(note)
    return seqs, budget


def _replicas(n: int) -> str:
    """``1 replica`` / ``3 replicas``."""
    return f"{n} replica" + ("" if n == 1 else "s")


def _script(header: list[str], blocks: list[tuple[str, list[str], int]]) -> str:
    lines = ["#!/usr/bin/env bash", *(f"# {h}" for h in header), "set -euo pipefail", ""]
    for comment, argv, replicas in blocks:
        lines.append(f"# {comment}")
        if replicas > 1:
            lines.append(f"# run on each of the {replicas} replicas (one per host or GPU group)")
        lines.append(shlex.join(argv) + " &")
        lines.append("")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def emit_vllm(pools: list[PoolLaunch], dep: Deployment, header: list[str]) -> None:
    ports = _ports(pools)
    disagg = dep.architecture != "shared"
    blocks = []
    for p in pools:
        argv = ["vllm", "serve", p.hf_id, "--host", "0.0.0.0", "--port", str(ports[p.pool]),
                *vllm_engine_args(p, dep, kv_transfer=disagg)]
        dep.commands.append(Command(p.pool, argv[2:], replicas=p.instances))
        blocks.append((f"{p.pool}: {_replicas(p.instances)} x {p.gpus_per_instance} {p.device}", argv, p.instances))
    if disagg:
        dep.warnings.append("vLLM has no built-in prefill/decode router: run the replicas behind llm-d, Dynamo or the proxy of "
                            "vLLM's examples/online_serving/disaggregated_serving (or deploy with --target llm-d / dynamo)")
    dep.files["launch.sh"] = _script(header, blocks)


# -------------------------------------------------------------------------------------- SGLang

def sglang_speculative_args(p: PoolLaunch, s: Any) -> list[str]:
    """SGLang's speculative flags for ``s`` (a :class:`~planner.deploy.pools.SpeculativeLaunch`):
    ``--speculative-num-steps k``, ``--speculative-eagle-topk K`` (1 for a chain, the tree's
    branching factor otherwise) and ``--speculative-num-draft-tokens V`` (the tokens verified per
    step: ``k + 1``, or the tree's ``verify_tokens``, as the schema defines it)."""
    algo = {"mtp": "NEXTN", "eagle": "EAGLE3" if "eagle3" in s.draft_model.lower() else "EAGLE",
            "draft_model": "STANDALONE", "ngram": "NGRAM"}[s.method]
    argv = ["--speculative-algorithm", algo, "--speculative-num-steps", str(s.num_tokens),
            "--speculative-eagle-topk", str(s.tree_topk), "--speculative-num-draft-tokens", str(s.verified_per_step)]
    if s.draft_model and s.method in ("eagle", "draft_model"):
        argv += ["--speculative-draft-model-path", s.draft_model]
    return argv


def sglang_prefill_limits(p: PoolLaunch) -> list[str]:
    """Prefill pool limits: ``--max-prefill-tokens`` is per scheduler (per DP rank), the token budget
    per rank; ``--chunked-prefill-size`` is divided by ``dp_size`` under DP attention (SGLang
    ServerArgs: "DP attention is enabled. The chunked prefill size is adjusted"), so it carries the
    replica's budget, leaving each rank its own (at least one whole prompt: a prompt runs on one rank).
    Without DP attention the engine's default chunk is kept."""
    if p.dp <= 1:
        return ["--max-prefill-tokens", str(p.token_budget)]
    per_rank = -(-p.token_budget // p.dp)
    return ["--max-prefill-tokens", str(per_rank), "--chunked-prefill-size", str(per_rank * p.dp)]


def emit_sglang(pools: list[PoolLaunch], dep: Deployment, header: list[str]) -> None:
    ports = _ports(pools)
    disagg = dep.architecture != "shared"
    blocks = []
    boot: dict[str, int] = {}
    # PD disaggregation: SGLang's prefill servers take the decode side's speculative settings (they
    # size the hidden-state buffers sent with the KV; sgl-project/sglang PR #23918, #9976, issue #10059)
    decode_spec = {p.model_id: p.speculative for p in pools if p.role == "decode" and p.speculative is not None}
    for p in pools:
        argv = ["python", "-m", "sglang.launch_server", "--model-path", p.hf_id, "--host", "0.0.0.0", "--port", str(ports[p.pool]),
                "--tp-size", str(p.tp * p.dp)]
        if p.dp > 1:
            argv += ["--dp-size", str(p.dp), "--enable-dp-attention"]
        if p.ep > 1:
            argv += ["--ep-size", str(p.ep)]
        if _needs_quantization(p):
            if p.weight_precision == "fp8":
                argv += ["--quantization", "fp8"]
            else:
                dep.warnings.append(f"{p.pool}: {p.weight_precision} weights need a pre-quantized checkpoint in place of {p.hf_id}")
        if p.kv_precision == "fp8":
            argv += ["--kv-cache-dtype", "fp8_e4m3"]
        elif p.kv_precision != "bf16":
            dep.warnings.append(f"{p.pool}: KV cache in {p.kv_precision} cannot be set in SGLang's --kv-cache-dtype for this model")
        argv += ["--max-running-requests", str(p.max_seqs), "--mem-fraction-static", f"{p.memory_fraction:.2f}"]
        if p.max_model_tokens is not None:
            argv += ["--context-length", str(p.max_model_tokens)]
        if p.dp > 1:
            dep.notes.append(f"{p.pool}: --max-running-requests {p.max_seqs} is the whole replica's batch; SGLang splits it over "
                             f"the {p.dp} DP-attention ranks ({-(-p.max_seqs // p.dp)} each)")
        eagle_like = p.speculative is not None and p.speculative.method in ("eagle", "mtp")
        if p.role == "unified":
            if p.chunk_tokens:
                argv += ["--chunked-prefill-size", str(p.chunk_tokens)]
            if eagle_like:
                dep.warnings.append(
                    f"{p.pool}: SGLang disables mixed chunked prefill under EAGLE/MTP speculation (server_args: \"Mixed chunked "
                    "prefill is disabled because of using eagle speculative decoding\"), so --enable-mixed-chunk is not emitted: "
                    "prompt chunks run as separate iterations, while the plan's shared-pool model lets them ride with the verify "
                    "steps; the plan is optimistic for this pool (longer ITL and TTFT than planned)")
            else:
                argv += ["--enable-mixed-chunk"]
        elif p.role == "prefill":
            argv += sglang_prefill_limits(p)
        if disagg and p.role in ("prefill", "decode"):
            argv += ["--disaggregation-mode", p.role, "--disaggregation-transfer-backend", "mooncake"]
            if p.role == "prefill":
                boot[p.pool] = SGLANG_BOOTSTRAP_PORT + len(boot)
                argv += ["--disaggregation-bootstrap-port", str(boot[p.pool])]
        if p.speculative and p.role != "prefill":
            argv += sglang_speculative_args(p, p.speculative)
            _add(dep.notes, _spec_note(p))
        elif disagg and p.role == "prefill" and p.model_id in decode_spec:
            argv += sglang_speculative_args(p, decode_spec[p.model_id])
            _add(dep.notes, f"{p.pool}: the decode pool's speculative settings are repeated on this prefill server: SGLang's PD "
                            "disaggregation sends the draft's hidden states with the KV and sizes them from the prefill side's "
                            "speculative configuration (sgl-project/sglang PR #23918, #9976; issue #10059)")
        dep.commands.append(Command(p.pool, argv[3:], replicas=p.instances))
        blocks.append((f"{p.pool}: {_replicas(p.instances)} x {p.gpus_per_instance} {p.device}", argv, p.instances))
    if disagg:
        router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for p in pools:
            for i in range(p.instances):
                url = f"http://{slug(p)}-{i}:{ports[p.pool]}"
                router += ["--prefill", url, str(boot[p.pool])] if p.role == "prefill" else ["--decode", url]
        router += ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
        dep.commands.append(Command("router", router[3:], kind="router"))
        blocks.append(("router: one --prefill/--decode per replica (host names are placeholders: <pool>-<replica>)", router, 1))
    elif sum(p.instances for p in pools) > 1:
        dep.notes.append("shared pool: put the replicas behind your load balancer (or SGLang's router in its regular mode)")
    dep.files["launch.sh"] = _script(header, blocks)


# -------------------------------------------------------------------------------- TensorRT-LLM

def _trt_options(p: PoolLaunch, dep: Deployment, *, disagg: bool) -> dict[str, Any]:
    opts: dict[str, Any] = {"tensor_parallel_size": p.tp * p.dp}
    if p.ep > 1:
        opts["moe_expert_parallel_size"] = p.ep
    if p.dp > 1:
        opts["enable_attention_dp"] = True
    seqs, budget = _per_rank(p, dep, "TensorRT-LLM's limits apply per attention-DP rank")
    opts["max_batch_size"] = seqs
    opts["max_num_tokens"] = budget
    if p.max_model_tokens is not None:
        opts["max_seq_len"] = p.max_model_tokens
    if p.role == "unified":
        opts["enable_chunked_prefill"] = True
    kv: dict[str, Any] = {"free_gpu_memory_fraction": p.free_memory_fraction}
    if p.kv_precision == "fp8":
        kv["dtype"] = "fp8"
    elif p.kv_precision != "bf16":
        dep.warnings.append(f"{p.pool}: KV cache in {p.kv_precision} has no TensorRT-LLM kv_cache_config.dtype value here")
    opts["kv_cache_config"] = kv
    if disagg and p.role in ("prefill", "decode"):
        opts["cache_transceiver_config"] = {"backend": "DEFAULT"}
    if p.speculative and p.role != "prefill":
        s = p.speculative
        if s.method == "mtp":
            spec: dict[str, Any] = {"decoding_type": "MTP", "num_nextn_predict_layers": s.num_tokens}
        elif s.method == "ngram":
            spec = {"decoding_type": "NGram", "max_draft_len": s.num_tokens}
        else:
            spec = {"decoding_type": "Eagle" if s.method == "eagle" else "DraftTarget", "max_draft_len": s.num_tokens,
                    "speculative_model_dir": s.draft_model}
        opts["speculative_config"] = spec
        _add(dep.notes, _spec_note(p))
        tree = _chain_only_warning(p, "trtllm")
        if tree:
            _add(dep.warnings, tree)
    return opts


def emit_trtllm(pools: list[PoolLaunch], dep: Deployment, header: list[str]) -> None:
    import yaml

    ports = _ports(pools)
    disagg = dep.architecture != "shared"
    blocks = []
    for p in pools:
        if p.vendor and p.vendor.lower() != "nvidia":
            dep.warnings.append(f"{p.pool}: TensorRT-LLM runs on NVIDIA GPUs only; {p.device} ({p.vendor}) cannot run these settings "
                                "(deploy this pool with --target vllm or sglang)")
        if _needs_quantization(p):
            dep.warnings.append(f"{p.pool}: TensorRT-LLM serves {p.weight_precision} from a pre-quantized checkpoint (ModelOpt); "
                                f"replace {p.hf_id} with the {p.weight_precision} checkpoint of the model")
        opts = _trt_options(p, dep, disagg=disagg)
        name = f"{slug(p)}.yaml"
        dep.yaml_docs[name] = opts
        dep.files[name] = yaml.safe_dump(opts, sort_keys=False)
        argv = ["trtllm-serve", p.hf_id, "--host", "0.0.0.0", "--port", str(ports[p.pool]), "--backend", "pytorch",
                "--config", name]
        dep.commands.append(Command(p.pool, argv[2:], replicas=p.instances))
        blocks.append((f"{p.pool}: {_replicas(p.instances)} x {p.gpus_per_instance} {p.device}", argv, p.instances))
    if disagg:
        ctx = [p for p in pools if p.role == "prefill"]
        gen = [p for p in pools if p.role == "decode"]
        cfg: dict[str, Any] = {"hostname": "0.0.0.0", "port": ROUTER_PORT, "backend": "pytorch"}
        for key, group in (("context_servers", ctx), ("generation_servers", gen)):
            if not group:
                continue
            first = group[0]
            section = {"num_instances": first.instances,
                       "urls": [f"{slug(first)}-{i}:{ports[first.pool]}" for i in range(first.instances)],
                       **_trt_options(first, Deployment(dep.target, dep.architecture), disagg=True)}
            cfg[key] = section
            if len(group) > 1:
                dep.warnings.append(f"trtllm-serve disaggregated takes one {key} configuration: disagg_config.yaml holds "
                                    f"{first.pool}; {', '.join(p.pool for p in group[1:])} need their own disaggregated server")
        dep.yaml_docs["disagg_config.yaml"] = cfg
        dep.files["disagg_config.yaml"] = yaml.safe_dump(cfg, sort_keys=False)
        router = ["trtllm-serve", "disaggregated", "-c", "disagg_config.yaml"]
        dep.commands.append(Command("router", router[2:], kind="disaggregated_flags"))
        blocks.append(("disaggregated server (router) in front of the context and generation servers", router, 1))
    dep.files["launch.sh"] = _script(header, blocks)


# ------------------------------------------------------------------------------------- Dynamo

def emit_dynamo(pools: list[PoolLaunch], dep: Deployment, header: list[str], name: str) -> None:
    import yaml

    disagg = dep.architecture != "shared"
    ns = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "planner"
    front = ["python3", "-m", "dynamo.frontend", "--http-port", str(ROUTER_PORT), "--router-mode", "kv"]
    dep.commands.append(Command("frontend", front[3:], kind="frontend_flags"))
    services: dict[str, Any] = {"Frontend": {"dynamoNamespace": ns, "componentType": "main", "replicas": 1,
                                             "extraPodSpec": {"mainContainer": {"image": IMAGES["dynamo"],
                                                                                "args": [shlex.join(front)]}}}}
    blocks = [("frontend: HTTP, tokenizer and KV-aware router", front, 1)]
    count: dict[str, int] = {}
    for p in pools:
        if p.vendor and p.vendor.lower() != "nvidia":
            dep.warnings.append(f"{p.pool}: the Dynamo vLLM runtime image is built for NVIDIA GPUs; {p.device} ({p.vendor}) needs a "
                                "ROCm build of the worker image")
        argv = ["python3", "-m", "dynamo.vllm", "--model", p.hf_id, *vllm_engine_args(p, dep, kv_transfer=False)]
        if disagg and p.role == "prefill":
            argv.append("--is-prefill-worker")
        dep.commands.append(Command(p.pool, argv[3:], replicas=p.instances))
        base = {"prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker", "unified": "VllmWorker"}[p.role]
        count[base] = count.get(base, 0) + 1
        svc = base if count[base] == 1 else f"{base}{count[base]}"
        services[svc] = {"dynamoNamespace": ns, "envFromSecret": "hf-token-secret", "componentType": "worker",
                         "replicas": p.instances, "resources": {"limits": {"gpu": str(p.gpus_per_instance)}},
                         "extraPodSpec": {"mainContainer": {"image": IMAGES["dynamo"], "args": [shlex.join(argv)]}}}
        blocks.append((f"{p.pool} ({svc}): {_replicas(p.instances)} x {p.gpus_per_instance} {p.device}", argv, p.instances))
    if disagg:
        dep.notes.append("Dynamo sets vLLM's kv_transfer_config (NixlConnector, kv_both) and the NIXL side-channel ports itself "
                         "(components/backends/vllm/src/dynamo/vllm/args.py): no --kv-transfer-config is emitted")
    graph = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": ns},
             "spec": {"services": services}}
    dep.yaml_docs["dynamo-graph.yaml"] = graph
    dep.files["dynamo-graph.yaml"] = yaml.safe_dump(graph, sort_keys=False, width=1000)
    dep.files["launch.sh"] = _script(header + ["Dynamo needs etcd and NATS running (see the Dynamo docs)"], blocks)


# -------------------------------------------------------------------------------------- llm-d

_ACCEL = {"nvidia": "nvidia", "amd": "amd", "google": "google", "intel": "intel-gaudi"}


def emit_llmd(pools: list[PoolLaunch], dep: Deployment, header: list[str], name: str) -> None:
    import yaml

    disagg = dep.architecture != "shared"
    first: dict[str, PoolLaunch] = {}
    for p in pools:
        first.setdefault("prefill" if p.role == "prefill" else "decode", p)

    def role_values(p: PoolLaunch) -> dict[str, Any]:
        args = vllm_engine_args(p, dep, kv_transfer=disagg)
        dep.commands.append(Command(p.pool, args, replicas=p.instances))
        return {"create": True, "replicas": p.instances,
                "parallelism": {"tensor": p.tp, "data": p.dp},
                "containers": [{"name": "vllm", "image": IMAGES["llm-d"], "modelCommand": "vllmServe", "args": args}]}

    def values_for(group: dict[str, PoolLaunch]) -> dict[str, Any]:
        any_pool = next(iter(group.values()))
        vendor = (any_pool.vendor or "nvidia").lower()
        if vendor not in _ACCEL:
            dep.warnings.append(f"{any_pool.pool}: llm-d-modelservice has no accelerator type for vendor {any_pool.vendor}")
        for p in group.values():
            if vendor != "nvidia":
                _add(dep.warnings, f"{p.pool}: the llm-d image {IMAGES['llm-d']} is the CUDA build; {p.device} ({p.vendor}) needs "
                                   "a ROCm (or the vendor's) build of the llm-d vLLM image: replace containers[].image")
        vals: dict[str, Any] = {
            "modelArtifacts": {"name": any_pool.hf_id, "uri": f"hf://{any_pool.hf_id}", "authSecretName": "llm-d-hf-token"},
            "accelerator": {"type": _ACCEL.get(vendor, "nvidia")},
            "routing": {"servicePort": ROUTER_PORT, "proxy": {"enabled": disagg, "connector": "nixlv2"}},
        }
        if any(p.gpus_per_instance > p.devices_per_node for p in group.values()):
            vals["multinode"] = True
        vals["decode"] = role_values(group["decode"]) if "decode" in group else {"create": False}
        vals["prefill"] = role_values(group["prefill"]) if "prefill" in group else {"create": False}
        return vals

    vals = values_for(first)
    dep.yaml_docs["values.yaml"] = vals
    dep.files["values.yaml"] = yaml.safe_dump(vals, sort_keys=False, width=1000)
    for p in pools:
        if p is first.get("prefill" if p.role == "prefill" else "decode"):
            continue
        extra = values_for({"prefill" if p.role == "prefill" else "decode": p})
        fname = f"values-{slug(p)}.yaml"
        dep.yaml_docs[fname] = extra
        dep.files[fname] = yaml.safe_dump(extra, sort_keys=False, width=1000)
        dep.warnings.append(f"{p.pool}: llm-d-modelservice has one decode and one prefill group per release; this pool is a "
                            f"second release ({fname}) and needs its own InferencePool or a shared label selector")
    dep.files["install.sh"] = "\n".join(["#!/usr/bin/env bash", *(f"# {h}" for h in header), "set -euo pipefail",
                                         *(f"helm install {re.sub(r'[^a-z0-9-]+', '-', (name + '-' + f.removesuffix('.yaml')).lower())} "
                                           f"llm-d-modelservice/llm-d-modelservice -f {f}"
                                           for f in dep.files if f.startswith("values"))]) + "\n"
    dep.notes.append("llm-d: install the gateway and inference scheduler (llm-d guides, pd-disaggregation) before these "
                     "releases; the chart adds `vllm serve`, the model and the port to the container args")


NAMED_MAPPINGS = frozenset({"services"})
"""Keys whose mapping is keyed by names the user chooses (Dynamo's ``spec.services``), not by schema keys."""


def yaml_keys(obj: Any, *, names: bool = False) -> set[str]:
    """Every schema key in a YAML document (recursively; the names under :data:`NAMED_MAPPINGS` are skipped)."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not names:
                out.add(str(k))
            out |= yaml_keys(v, names=not names and str(k) in NAMED_MAPPINGS)
    elif isinstance(obj, list):
        for v in obj:
            out |= yaml_keys(v)
    return out
