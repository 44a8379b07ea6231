"""``planner deploy`` review fixes: expert-parallel prefill batches, speculative drafts and trees,
SGLang's EAGLE restrictions, model paths, AMD images, separate encoders, the maximum model length
and hand-edited plans.

Plans are small stand-ins (:func:`_plan`) with the fields deploy reads, so no instance is solved here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from planner.deploy.flags import unknown_flags
from planner.deploy.pools import PoolLaunch, SpeculativeLaunch

# the EP32 prefill point of deepseek-v3-wide-ep with MTP (the reviewer's plan): 2000-token prompts
EP_PREFILL_SECONDS = 0.006713932709889131
EP_PREFILL_TTFT_MS = 1825.8791994302633


def _launch(**kw: Any) -> PoolLaunch:
    base: dict[str, Any] = dict(
        pool="decode:h100-sxm/tp8:llama-3.1-70b@fp8", role="decode", device="h100-sxm", vendor="NVIDIA", devices_per_node=8,
        tp=8, ep=1, dp=1, gpus_per_instance=8, instances=2, model_id="llama-3.1-70b", hf_id="meta-llama/Llama-3.1-70B",
        weight_precision="bf16", native_precision="bf16", kv_precision="bf16", max_seqs=64, batch_range=(64, 64),
        token_budget=64, chunk_tokens=None, chunk_range=None, memory_fraction=0.9, free_memory_fraction=0.8,
        buckets=("chat/b0",))
    base.update(kw)
    return PoolLaunch(**base)


def _dep(target: str = "vllm", arch: str = "disaggregated") -> Any:
    from planner.deploy.targets import Deployment

    return Deployment(target=target, architecture=arch)


def _argv(dep: Any, pool: str) -> list[str]:
    return next(c.argv for c in dep.commands if c.pool == pool)


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _plan(pools: list[Any], points: list[dict[str, Any]], demand: list[dict[str, Any]], *, arch: str = "disaggregated",
          instance_path: str = "", overrides: dict[str, Any] | None = None) -> Any:
    """A stand-in for :class:`planner.schema.plan.PlanResult` with the fields deploy reads."""
    from planner import __version__
    from planner.schema.plan import PlanResult

    routing = [SimpleNamespace(pool=p.name, share=1.0, role=p.role, service=pt["service"], bucket=pt["bucket"], config=p.config,
                               rate_peak_per_s=float(pt.get("rate_peak_per_s", 10.0)))
               for p in pools for pt in points if pt["role"] == p.role and pt["config"] == p.config]
    ap = SimpleNamespace(feasible=True, pools=pools, routing=routing, tool_phase=None)
    return SimpleNamespace(schema_version=PlanResult.model_fields["schema_version"].default, planner_version=__version__,
                           architectures={arch: ap}, verdict=SimpleNamespace(winner=arch), instance="review",
                           instance_path=instance_path, overrides=overrides or {},
                           capacity=SimpleNamespace(points=points, demand=demand))


def _pool(name: str, role: str, config: str, *, tp: int, parallelism: str, model: str, device: str = "h100-sxm",
          instances: int = 1) -> Any:
    return SimpleNamespace(name=name, role=role, device=device, tp=tp, config=config, parallelism=parallelism, model=model,
                           instances=instances)


def _demand_row(model: str, n: float, o: float, **kw: Any) -> dict[str, Any]:
    return {"service": "api", "bucket": f"b_{int(n)}_{int(o)}", "model": model, "input_tokens_rep": n, "output_tokens_rep": o,
            "input_tokens_mean": n, "output_tokens_mean": o, "cached_prefix_share": 0.0, "length_mix": "", **kw}


# ------------------------------------------------------------------ 1: expert-parallel prefill


def test_ep_prefill_prompts_per_rank_recovers_the_points_batch() -> None:
    """planner.perf.moe priced the EP32 prefill point at 8 prompts per rank (its detail), which the
    plan drops; deploy recovers it from tau and the TTFT."""
    from planner.catalog import load_catalog
    from planner.deploy.pools import ep_prefill_prompts_per_rank
    from planner.perf.moe import MoECalibration, Parallelism, ep_operating_point

    cat = load_catalog()
    op = ep_operating_point(cat.models["deepseek-v3"], cat.devices["h200-sxm"], Parallelism(tp=1, ep=32, dp=32), role="prefill",
                            weight_precision="fp8", kv_precision="bf16", input_tokens=2000, output_tokens=500, ttft_target_ms=10000,
                            tpot_target_ms=None, itl_target_ms=120, engine="sglang", rate_per_s=300, interarrival_cv=1.0)
    assert op.max_batch == 1 and op.instance_seconds_per_request == pytest.approx(EP_PREFILL_SECONDS)
    m = ep_prefill_prompts_per_rank(op.instance_seconds_per_request, 32, op.ttft_ms, 2000, MoECalibration().prefill_tokens_per_rank)
    assert m == op.detail["prompts_per_rank"] == 8


def test_ep_prefill_settings_carry_prompts_per_rank_for_every_target() -> None:
    """vLLM: 8 seqs and 8 whole prompts of tokens per DP rank (was 1 and 63); SGLang: 256 running
    requests per replica (8 per rank after its split, was 1 -> 0), per-rank prefill tokens, and a
    chunked-prefill size that leaves each rank 16000 after SGLang divides it by dp; TensorRT-LLM: per rank."""
    from planner.catalog import load_catalog
    from planner.deploy.pools import pool_launch
    from planner.deploy.targets import emit_sglang, emit_trtllm, emit_vllm

    model = "deepseek-v3@fp8"
    pool = _pool("prefill:h200-sxm/tp1-ep32-dp32:deepseek-v3@fp8", "prefill", "h200-sxm/tp1-ep32-dp32", tp=32,
                 parallelism="tp1·ep32·dp32", model=model, device="h200-sxm", instances=2)
    point = {"service": "api", "bucket": "b_2000_500", "role": "prefill", "config": pool.config, "model": model, "max_batch": 1,
             "instance_seconds_per_request": EP_PREFILL_SECONDS, "ttft_ms": EP_PREFILL_TTFT_MS, "spec_method": ""}
    plan = _plan([pool], [point], [_demand_row(model, 2000, 500)])
    p = pool_launch(plan, "disaggregated", pool, load_catalog(), {model: "bf16"})
    assert p.prefill_prompts_per_rank == 8 and p.max_seqs == 8 * 32 and p.token_budget == 8 * 32 * 2000

    dep = _dep("vllm")
    emit_vllm([p], dep, [])
    argv = _argv(dep, p.pool)
    assert _flag(argv, "--max-num-seqs") == "8" and _flag(argv, "--max-num-batched-tokens") == "16000"

    dep = _dep("sglang")
    emit_sglang([p], dep, [])
    argv = _argv(dep, p.pool)
    assert _flag(argv, "--max-running-requests") == "256"
    assert _flag(argv, "--max-prefill-tokens") == "16000" and int(_flag(argv, "--chunked-prefill-size")) // 32 == 16000
    assert unknown_flags("sglang", argv) == []

    dep = _dep("trtllm")
    emit_trtllm([p], dep, [])
    opts = next(d for n, d in dep.yaml_docs.items() if n.startswith("prefill"))
    assert opts["max_batch_size"] == 8 and opts["max_num_tokens"] == 16000


# ------------------------------------------------------------------ 2: draft checkpoints


def test_draft_model_catalog_id_is_emitted_as_its_hf_id() -> None:
    from planner.catalog import load_catalog
    from planner.deploy.pools import _spec_of, draft_checkpoint

    cat = load_catalog()
    hf = cat.models["llama-3.1-8b"].hf_id
    assert hf and draft_checkpoint("draft_model", "llama-3.1-8b", cat) == (hf, None)
    row = {"service": "chat", "spec_method": "draft_model", "spec_tokens": 4, "spec_draft_model": "llama-3.1-8b"}
    spec, warnings = _spec_of([(row, 1.0)], None, cat)
    assert spec is not None and spec.draft_model == hf and warnings == []
    # an EAGLE head named by its Hugging Face id is kept as given
    assert draft_checkpoint("eagle", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", cat) == ("yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", None)


def test_eagle_without_a_draft_gets_a_placeholder_and_a_warning() -> None:
    from planner.catalog import load_catalog
    from planner.deploy.pools import EAGLE_DRAFT_PLACEHOLDER, draft_checkpoint
    from planner.deploy.targets import _common_warnings, emit_sglang, emit_trtllm, emit_vllm

    draft, warning = draft_checkpoint("eagle", "", load_catalog())
    assert draft == EAGLE_DRAFT_PLACEHOLDER and warning and "speculative.draft_model" in warning
    p = _launch(speculative=SpeculativeLaunch("eagle", 3, draft), warnings=(warning,))
    for target, emit in (("vllm", emit_vllm), ("sglang", emit_sglang), ("trtllm", emit_trtllm)):
        dep = _dep(target)
        _common_warnings([p], target, dep)
        emit([p], dep, [])
        text = json.dumps(dep.files)
        assert EAGLE_DRAFT_PLACEHOLDER in text and '"model":""' not in text and "speculative_model_dir: ''" not in text
        assert any("speculative.draft_model" in w for w in dep.warnings)


# ------------------------------------------------------------------ 3: draft trees


def test_draft_tree_is_emitted_and_budgeted_as_priced() -> None:
    """verify_tokens 6 with k = 3: SGLang verifies 6 tokens (top-2 tree); the decode budget is B x 6."""
    from planner.catalog import load_catalog
    from planner.deploy.pools import pool_launch
    from planner.deploy.targets import emit_sglang, emit_vllm

    model = "llama-3.1-70b@fp8"
    pool = _pool("decode:h100-sxm/tp4:llama-3.1-70b@fp8", "decode", "h100-sxm/tp4", tp=4, parallelism="tp4", model=model)
    point = {"service": "chat", "bucket": "b_600_250", "role": "decode", "config": pool.config, "model": model, "max_batch": 40,
             "output_tokens_rep": 250, "spec_method": "eagle", "spec_tokens": 3,
             "spec_draft_model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}
    services = {"chat": {"model": "llama-3.1-70b", "speculative": {"method": "eagle", "num_speculative_tokens": 3,
                                                                   "verify_tokens": 6}}}
    plan = _plan([pool], [point], [_demand_row(model, 600, 250, service="chat", bucket="b_600_250")])
    p = pool_launch(plan, "disaggregated", pool, load_catalog(), {model: "fp8"}, services)
    assert p.speculative is not None and p.speculative.verified_per_step == 6
    assert p.token_budget == 40 * 6

    dep = _dep("sglang")
    emit_sglang([p], dep, [])
    argv = _argv(dep, p.pool)
    assert _flag(argv, "--speculative-num-draft-tokens") == "6" and int(_flag(argv, "--speculative-eagle-topk")) >= 2
    assert _flag(argv, "--speculative-num-steps") == "3"
    dep = _dep("vllm")
    emit_vllm([p], dep, [])
    assert any("draft tree" in w for w in dep.warnings)


def test_chain_keeps_topk_1() -> None:
    s = SpeculativeLaunch("mtp", 1)
    assert s.verified_per_step == 2 and s.tree_topk == 1 and not s.is_tree
    assert SpeculativeLaunch("eagle", 3, "d", verify_tokens=6).tree_topk == 2


# ------------------------------------------------------------------ 4, 5: SGLang and EAGLE


def test_sglang_shared_pool_with_eagle_warns_instead_of_mixed_chunk() -> None:
    from planner.deploy.targets import emit_sglang

    p = _launch(pool="unified:h100-sxm/tp8:llama-3.1-70b@fp8", role="unified", chunk_tokens=512, token_budget=600,
                speculative=SpeculativeLaunch("eagle", 3, "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"))
    dep = _dep("sglang", "shared")
    emit_sglang([p], dep, [])
    assert "--enable-mixed-chunk" not in _argv(dep, p.pool)
    assert any("Mixed chunked prefill is disabled" in w and "optimistic" in w for w in dep.warnings)
    plain = replace(p, speculative=None)
    dep = _dep("sglang", "shared")
    emit_sglang([plain], dep, [])
    assert "--enable-mixed-chunk" in _argv(dep, p.pool)


def test_sglang_pd_prefill_servers_get_the_speculative_settings() -> None:
    from planner.deploy.targets import _common_warnings, emit_sglang, emit_vllm

    spec = SpeculativeLaunch("mtp", 1)
    pre = _launch(pool="prefill:h100-sxm/tp8:deepseek-v3@fp8", role="prefill", model_id="deepseek-v3", token_budget=2000, max_seqs=1)
    dec = _launch(pool="decode:h100-sxm/tp8:deepseek-v3@fp8", model_id="deepseek-v3", speculative=spec)
    dep = _dep("sglang")
    emit_sglang([pre, dec], dep, [])
    assert _flag(_argv(dep, pre.pool), "--speculative-algorithm") == "NEXTN"
    assert _argv(dep, pre.pool)[_argv(dep, pre.pool).index("--speculative-algorithm"):] == \
        _argv(dep, dec.pool)[_argv(dep, dec.pool).index("--speculative-algorithm"):]
    dep = _dep("vllm")
    _common_warnings([pre, dec], "vllm", dep)
    emit_vllm([pre, dec], dep, [])
    assert "--speculative-config" not in _argv(dep, pre.pool)
    assert any("#23918" in n for n in dep.notes)


# ------------------------------------------------------------------ 6, 10: models


def test_config_json_model_warns_to_substitute_the_checkpoint(tmp_path: Path) -> None:
    from planner.catalog import load_catalog
    from planner.deploy.pools import _model_of

    cat = load_catalog()
    _, arg, warnings = _model_of(str(tmp_path / "llama8b.json"), cat, None, "pools.x.model", "plan.json")
    assert arg.endswith("llama8b.json") and any("substitute" in w and "config.json" in w for w in warnings)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"")
    _, arg, warnings = _model_of(str(ckpt / "config.json"), cat, None, "pools.x.model", "plan.json")
    assert arg == str(ckpt) and warnings


def test_unknown_model_is_an_error_naming_the_pool() -> None:
    from planner.catalog import load_catalog
    from planner.deploy.pools import pool_launch
    from planner.errors import InputError

    pool = _pool("unified:h100-sxm/tp1:nosuch@bf16", "unified", "h100-sxm/tp1", tp=1, parallelism="tp1", model="nosuch@bf16")
    plan = _plan([pool], [], [], arch="shared")
    with pytest.raises(InputError, match="unknown model 'nosuch'"):
        pool_launch(plan, "shared", pool, load_catalog(), None, None, "t.json")


def test_zero_instance_pools_are_not_launched() -> None:
    from planner.catalog import load_catalog
    from planner.deploy import build_deployment
    from planner.errors import InputError

    model = "llama-3.1-8b@bf16"
    live = _pool("unified:h100-sxm/tp1:llama-3.1-8b@bf16", "unified", "h100-sxm/tp1", tp=1, parallelism="tp1", model=model)
    idle = _pool("unified:h100-sxm/tp2:llama-3.1-8b@bf16", "unified", "h100-sxm/tp2", tp=2, parallelism="tp2", model=model,
                 instances=0)
    points = [{"service": "api", "bucket": "b_1000_100", "role": "unified", "config": c, "model": model, "max_batch": 32,
               "output_tokens_rep": 100, "prefill_chunk_tokens": 256, "spec_method": ""} for c in ("h100-sxm/tp1", "h100-sxm/tp2")]
    plan = _plan([live, idle], points, [_demand_row(model, 1000, 100, bucket="b_1000_100")], arch="shared")
    dep = build_deployment(plan, load_catalog(), "vllm")
    assert [c.pool for c in dep.commands] == [live.name]
    assert any("0 instances" in w for w in dep.warnings)
    assert "0 replica" not in dep.files["launch.sh"]
    plan = _plan([idle], points, [], arch="shared")
    with pytest.raises(InputError, match="0 instances"):
        build_deployment(plan, load_catalog(), "vllm")


# ------------------------------------------------------------------ 7: llm-d on AMD


def test_llmd_on_amd_warns_about_the_cuda_image() -> None:
    from planner.deploy.targets import emit_llmd

    p = _launch(device="mi300x", vendor="AMD", role="unified", pool="unified:mi300x/tp8:llama-3.1-70b@fp8")
    dep = _dep("llm-d", "shared")
    emit_llmd([p], dep, [], "review")
    assert dep.yaml_docs["values.yaml"]["accelerator"]["type"] == "amd"
    assert any("CUDA build" in w and "mi300x" in w for w in dep.warnings)


# ------------------------------------------------------------------ 8: separate encode pool


def test_separate_encode_pool_skips_the_tower_where_the_engine_can() -> None:
    from planner.deploy.targets import emit_sglang, emit_vllm, encode_settings

    p = _launch(role="unified", pool="unified:h100-sxm/tp1:qwen2.5-vl-7b@bf16", chunk_tokens=256, token_budget=300)
    enc = [SimpleNamespace(instances=1, config="h100-sxm/tp1")]
    dep = _dep("vllm", "shared")
    encode_settings([p], enc, "vllm", dep)
    emit_vllm([p], dep, [])
    argv = _argv(dep, p.pool)
    assert "--enable-mm-embeds" in argv and unknown_flags("vllm", argv) == []
    assert any("shared (unified) pool" in w and "prefill pool" not in w for w in dep.warnings)
    dep = _dep("sglang", "shared")
    encode_settings([p], enc, "sglang", dep)
    emit_sglang([p], dep, [])
    assert any("--language-only" in w for w in dep.warnings)


# ------------------------------------------------------------------ 9: maximum model length


def test_max_model_length_from_the_longest_request() -> None:
    from planner.deploy.pools import longest_request_tokens
    from planner.deploy.targets import _common_warnings, emit_sglang, emit_trtllm, emit_vllm

    model = "llama-3.1-70b@fp8"
    demand = [_demand_row(model, 600, 250), _demand_row(model, 8000, 400)]
    plan = _plan([], [], demand)
    assert longest_request_tokens(plan, model) == 8400
    # a log's bucket (representative != mean, or a length mix): left to the engine
    plan = _plan([], [], [_demand_row(model, 600, 250, input_tokens_mean=420.0)])
    assert longest_request_tokens(plan, model) is None

    p = _launch(max_model_tokens=8400, model_context_tokens=131072)
    dep = _dep("vllm")
    emit_vllm([p], dep, [])
    assert _flag(_argv(dep, p.pool), "--max-model-len") == "8400"
    dep = _dep("sglang")
    emit_sglang([p], dep, [])
    assert _flag(_argv(dep, p.pool), "--context-length") == "8400"
    dep = _dep("trtllm")
    emit_trtllm([p], dep, [])
    assert next(iter(dep.yaml_docs.values()))["max_seq_len"] == 8400
    long = replace(p, max_model_tokens=16200, model_context_tokens=4096)
    dep = _dep("vllm")
    _common_warnings([long], "vllm", dep)
    assert any("max_context_tokens 4096" in w for w in dep.warnings)
