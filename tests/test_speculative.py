"""Speculative decoding (issue 26 item 2): the schema option, the verify + draft step, the choice
between the plain and the speculative decode point, bursts in the simulator, and published speed-ups.

Acceptance figures (each within ±20 %):

- DeepSeek-V3 technical report (arXiv 2412.19437), §5.4.3 "Multi-Token Prediction Evaluation":
  the second token predicted by MTP is accepted 85-90 % of the time, which "enables DeepSeek-V3 to
  achieve a significantly improved decoding speed, delivering 1.8 times TPS". Inputs: MTP, k = 1,
  acceptance 0.85 and 0.90, DeepSeek-V3 fp8 on 8 H800 (the report's GPU), decode batches 64-256.
- SGLang + EAGLE-3 on LLaMA-3.1-8B-Instruct, 1x H100, MT-bench: 158.34 -> 373.25 tokens/s at batch 1
  (2.36x; docs.sglang.io, advanced_features/speculative_decoding, "Performance Highlights") and
  "a 1.38x throughput improvement at a batch size of 64" in SGLang (EAGLE-3 paper, arXiv 2503.01840,
  abstract). The acceptance length is not published with the batch-1 figure, so it is fitted on it
  (one parameter, SGLang's documented defaults --speculative-num-steps 5, --speculative-eagle-topk 4,
  --speculative-num-draft-tokens 8); the batch-64 figure is then predicted: where speculation stops
  paying as the verify step turns compute-bound.
- SGLang docs, DeepSeek usage page, "Multi-token Prediction": SGLang's MTP for DeepSeek-V3 (built on its EAGLE
  speculative decoding) improves decoding speed "by 1.8x for batch size 1 and 1.5x for batch size 32 respectively
  on H200 TP8", published next to ``--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2``
  (later pages: default ``3 / 1 / 4``). Acceptance fitted on the batch-1 figure, batch 32 predicted, both settings.
- GPUStack performance lab, Qwen3-8B on H100 (docs.gpustack.ai, performance-lab/qwen3-8b/h100-latency):
  SGLang EAGLE-3 (--speculative-num-steps 4 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16,
  FP8) mean latency 0.62 s/req at batch 1 and 1.10 s/req at batch 8 (ShareGPT). The model predicts a far
  smaller slow-down (1.13x against 1.77x): a strict xfail naming the open cause (tree verification and
  draft overheads that grow with batch x draft tokens beyond the roofline's GEMM rows). The same page's plain
  vLLM baseline (1.66 -> 1.78 s/req, 1.07x) is matched by the plain step (1.06x), so the miss is specific to
  the speculative step: ~4 ms per step at batch 8, ~36 us per extra verified tree token, which no published
  source prices (tree-mask attention, top-k tree building and per-sequence verification on the host); a
  term fitted to this one pair would make the test circular, so it stays a strict xfail.
- DeepSeek-V3 MTP on the expert-parallel path (the realistic deployment): the same §5.4.3 figure (1.8x TPS at
  85-90 % acceptance) on DeepSeek's own decode replica shape (EP144 on H800, DP attention, open-source week
  day 6) and SGLang's prefill-size replica (EP32), at 4-16 sequences per GPU (the per-GPU load of the TP8
  test above: 64-256 sequences on 8 GPUs is 8-32 per GPU). The report states no batch; at larger per-GPU
  batches the model's EP speed-up falls (expert GEMMs and MLA attention turn compute-bound, the all-to-all
  volume doubles), which a second test pins.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from planner.perf.points import _instance, efficiency_of, engine_calibration, operating_point
from planner.perf.roofline import iteration_time
from planner.perf.speculative import itl_quantile_s, spec_cost, spec_step, speedup, verify_step
from planner.schema.speculative import SpeculativeDecoding


@pytest.fixture(scope="module")
def cat():
    from planner.catalog import load_catalog

    return load_catalog()


def _eff(engine: str = "default"):
    return efficiency_of(engine_calibration(engine)[0])


def test_tokens_per_step_overall_and_per_position() -> None:
    # E = 1 + sum_i prod_{j<=i} a_j
    assert SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=0.9).tokens_per_step() == pytest.approx(1.9)
    overall = SpeculativeDecoding(method="eagle", num_speculative_tokens=3, acceptance=0.8)
    assert overall.tokens_per_step() == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    per = SpeculativeDecoding(method="eagle", num_speculative_tokens=3, acceptance=[0.9, 0.7, 0.5])
    assert per.tokens_per_step() == pytest.approx(1 + 0.9 + 0.63 + 0.315)


@pytest.mark.parametrize("bad", [
    {"method": "eagle", "num_speculative_tokens": 3, "acceptance": [0.9, 0.8]},
    {"method": "draft_model", "num_speculative_tokens": 2, "acceptance": 0.7},
    {"method": "ngram", "num_speculative_tokens": 2, "acceptance": 1.5},
    {"method": "mtp", "num_speculative_tokens": 1, "acceptance": 0.9, "acceptance_rate": 0.9},
    {"method": "eagle", "num_speculative_tokens": 4, "acceptance": 0.7, "verify_tokens": 3},
])
def test_bad_speculative_options_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        SpeculativeDecoding.model_validate(bad)


def test_schema_shows_the_option() -> None:
    from planner.schema.instance import Instance

    text = json.dumps(Instance.model_json_schema())
    assert "SpeculativeDecoding" in text and "num_speculative_tokens" in text and "draft_model" in text


def test_verify_of_one_token_is_the_decode_step(cat) -> None:
    inst = _instance(cat.models["llama-3.1-70b"], cat.devices["h100-sxm"], 4, "fp8", "fp8")
    eff = _eff()
    b = np.array([1.0, 8.0, 64.0, 256.0])
    assert np.allclose(verify_step(inst, eff, b, 3000.0, 1).total_s,
                       iteration_time(inst, eff, decode_batch=b, decode_context=3000.0).total_s)


def test_speculation_pays_at_small_batches_and_stops_when_compute_bound(cat) -> None:
    m = cat.models["llama-3.1-8b"]
    inst = _instance(m, cat.devices["h100-sxm"], 1, "bf16", "bf16")
    cost = spec_cost(SpeculativeDecoding(method="eagle", num_speculative_tokens=5, acceptance=0.6), m, inst, "bf16")
    s = speedup(cost, inst, _eff(), np.array([1.0, 512.0]), 500.0)
    assert s[0] > 1.5 and s[1] < 1.0


def test_itl_is_the_burst_step_and_tpot_its_share() -> None:
    assert itl_quantile_s(0.06, 2.5, 0.99) == pytest.approx(0.06)
    assert itl_quantile_s(0.06, 2.5, None) == pytest.approx(0.024)


def test_decode_point_keeps_the_cheaper_of_plain_and_speculative(cat) -> None:
    ds, dev = cat.models["deepseek-v3"], cat.devices["h200-sxm"]
    kw = dict(role="decode", weight_precision="fp8", kv_precision="fp8", input_tokens=2000, output_tokens=500,
              ttft_target_ms=None, tpot_target_ms=50.0)
    plain = operating_point(ds, dev, 8, **kw)
    spec = operating_point(ds, dev, 8, speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=0.875), **kw)
    assert spec.detail["spec_tokens_per_step"] == pytest.approx(1.875)
    assert spec.instance_seconds_per_request < plain.instance_seconds_per_request
    assert spec.detail["plain_instance_seconds_per_request"] == pytest.approx(plain.instance_seconds_per_request)
    assert spec.tpot_ms == pytest.approx(spec.detail["spec_step_ms"] / 1.875) and spec.tpot_ms <= 50.0
    # an ITL target (every gap, p99) just above the plain batch-1 step forbids the longer burst step: plain is kept
    t1_ms = 1e3 * float(iteration_time(_instance(ds, dev, 8, "fp8", "fp8"), _eff(), decode_batch=1.0, decode_context=2250.0).total_s)
    tight = operating_point(ds, dev, 8, speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=0.875),
                            itl_target_ms=t1_ms * 1.001, **{**kw, "tpot_target_ms": None})
    assert tight.feasible and tight.max_batch == 1 and "spec_tokens_per_step" not in tight.detail


@pytest.mark.parametrize("acceptance", [0.85, 0.90])
@pytest.mark.parametrize("batch", [64.0, 128.0, 256.0])
def test_deepseek_v3_mtp_reproduces_1_8x_tps(cat, acceptance: float, batch: float) -> None:
    ds = cat.models["deepseek-v3"]
    inst = _instance(ds, cat.devices["h800"], 8, "fp8", "fp8")
    cost = spec_cost(SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=acceptance), ds, inst, "fp8",
                     kv_precision="fp8")
    s = float(speedup(cost, inst, _eff(), batch, 1500.0))
    assert s == pytest.approx(1.8, rel=0.20), s


def _fit_acceptance(model, inst, eff, target: float, k: int, v: int) -> float:
    lo, hi = 0.01, 0.999
    for _ in range(50):
        a = (lo + hi) / 2
        c = spec_cost(SpeculativeDecoding(method="eagle", num_speculative_tokens=k, acceptance=a, verify_tokens=v), model, inst, "bf16")
        lo, hi = (a, hi) if float(speedup(c, inst, eff, 1.0, 300.0)) < target else (lo, a)
    return a


def test_sglang_eagle3_batch_64_speedup_from_the_batch_1_figure(cat) -> None:
    m = cat.models["llama-3.1-8b"]
    inst = _instance(m, cat.devices["h100-sxm"], 1, "bf16", "bf16")
    eff = _eff("sglang")
    a = _fit_acceptance(m, inst, eff, 373.25 / 158.34, k=5, v=8)
    cost = spec_cost(SpeculativeDecoding(method="eagle", num_speculative_tokens=5, acceptance=a, verify_tokens=8), m, inst, "bf16")
    s64 = float(speedup(cost, inst, eff, 64.0, 300.0))
    assert s64 == pytest.approx(1.38, rel=0.20), s64
    assert s64 < 373.25 / 158.34  # the compute-bound verify step eats most of the gain


@pytest.mark.parametrize(("k", "v"), [(1, 2), (3, 4)])
def test_sglang_deepseek_mtp_batch_32_speedup_from_the_batch_1_figure(cat, k: int, v: int) -> None:
    ds = cat.models["deepseek-v3"]
    inst = _instance(ds, cat.devices["h200-sxm"], 8, "fp8", "fp8")
    eff = _eff("sglang")
    lo, hi = 0.01, 0.999
    for _ in range(50):
        a = (lo + hi) / 2
        c = spec_cost(SpeculativeDecoding(method="mtp", num_speculative_tokens=k, acceptance=a, verify_tokens=v), ds, inst, "fp8",
                      kv_precision="fp8")
        lo, hi = (a, hi) if float(speedup(c, inst, eff, 1.0, 1500.0)) < 1.8 else (lo, a)
    assert float(speedup(c, inst, eff, 1.0, 1500.0)) == pytest.approx(1.8, rel=0.02)
    s32 = float(speedup(c, inst, eff, 32.0, 1500.0))
    assert s32 == pytest.approx(1.5, rel=0.20), s32


@pytest.mark.xfail(strict=True, reason="tree verification and draft overheads growing with batch x draft tokens are not "
                                       "modelled: predicted latency ratio batch 8 / batch 1 is 1.13x against 1.77x measured")
def test_gpustack_qwen3_8b_eagle3_latency_batch_8_over_batch_1(cat) -> None:
    m = cat.models["qwen3-8b"]
    inst = _instance(m, cat.devices["h100-sxm"], 1, "fp8", "fp8")
    cost = spec_cost(SpeculativeDecoding(method="eagle", num_speculative_tokens=4, acceptance=0.7, verify_tokens=16), m, inst, "fp8",
                     kv_precision="fp8")
    t, _ = spec_step(cost, inst, _eff("sglang"), np.array([1.0, 8.0]), 400.0)
    assert float(t[1] / t[0]) == pytest.approx(1.10 / 0.62, rel=0.20)


def test_simulator_emits_bursts(cat) -> None:
    """A decode pool yielding E = 2.5 tokens per 50 ms step: per-request TPOT ~ 20 ms, p99 ITL = the 50 ms step."""
    import pandas as pd

    from planner.simulate import PoolSpec, ServiceRoute, replay_requests, simulate

    def pf(n: int) -> float:
        return 1e-4 * n

    pools = [PoolSpec("dec", "decode", 1, prefill_time_s=pf, step_time_s=lambda b: 0.05, max_batch=8, tokens_per_step=2.5)]
    log = pd.DataFrame([(0.1 * i, 100, 201) for i in range(20)], columns=["arrival_s", "input_tokens", "output_tokens"])
    res = simulate(pools, [ServiceRoute("s", decode="dec")], replay_requests(log))
    s = res.services["s"]
    assert s.tpot.mean == pytest.approx(0.05 / 2.5, rel=0.02)
    assert res.quantile("pool", "dec", "itl", 0.99) == pytest.approx(0.05, rel=0.01)
    assert res.histograms["pool:dec:itl"].mean == pytest.approx(0.05 / 2.5, rel=0.05)


# --- shared (unified) pools -------------------------------------------------------------------
_UNI = dict(role="unified", weight_precision="fp8", kv_precision="fp8", input_tokens=2000, output_tokens=500,
            ttft_target_ms=2000.0, tpot_target_ms=20.0)


def test_verify_step_with_a_chunk_of_one_token_each_is_the_iteration(cat) -> None:
    inst = _instance(cat.models["llama-3.1-70b"], cat.devices["h100-sxm"], 4, "fp8", "fp8")
    eff = _eff()
    b, q = np.array([1.0, 16.0, 128.0]), np.array([512.0, 64.0, 2048.0])
    kw = dict(prefill_tokens=q, prefill_cached=300.0, prefill_prompts=np.array([1.0, 1.0, 2.0]))
    assert np.allclose(verify_step(inst, eff, b, 2500.0, 1, **kw).total_s,
                       iteration_time(inst, eff, decode_batch=b, decode_context=2500.0, **kw).total_s)
    # V tokens per sequence: GEMM rows B V + q, KV read once per sequence
    v3 = verify_step(inst, eff, b, 2500.0, 3, **kw)
    assert (v3.total_s > verify_step(inst, eff, b, 2500.0, 1, **kw).total_s).all()


def test_burst_itl_of_a_unified_instance() -> None:
    from planner.perf.speculative import burst_itl_quantile_s
    from planner.queueing import itl_quantile_s as plain_itl

    u, tc, tp = np.array([0.005, 0.2, 0.6]), 0.08, 0.03
    assert np.allclose(burst_itl_quantile_s(0.99, u, tc, tp, 1.0), plain_itl(0.99, u, tc, tp))
    assert np.allclose(burst_itl_quantile_s(None, u, tc, tp, 1.0), plain_itl(None, u, tc, tp))
    # E = 2.5: gaps are t_chunk with share u/E, t_plain (1-u)/E, 0 otherwise
    assert np.allclose(burst_itl_quantile_s(0.99, u, tc, tp, 2.5), [tp, tc, tc])
    assert np.allclose(burst_itl_quantile_s(0.5, u, tc, tp, 2.5), [0.0, 0.0, 0.0])
    assert np.allclose(burst_itl_quantile_s(None, u, tc, tp, 2.5), (u * tc + (1 - u) * tp) / 2.5)


def test_unified_point_speculates_and_keeps_the_cheaper(cat) -> None:
    m, dev = cat.models["llama-3.1-70b"], cat.devices["h100-sxm"]
    spec = SpeculativeDecoding(method="eagle", num_speculative_tokens=3, acceptance=0.7)
    e = spec.tokens_per_step()
    plain = operating_point(m, dev, 4, **_UNI)
    sp = operating_point(m, dev, 4, speculative=spec, **_UNI)
    assert plain.feasible and sp.feasible and "spec_tokens_per_step" not in plain.detail
    assert sp.detail["spec_tokens_per_step"] == pytest.approx(e)
    assert sp.instance_seconds_per_request < 0.8 * plain.instance_seconds_per_request
    assert sp.detail["plain_instance_seconds_per_request"] == pytest.approx(plain.instance_seconds_per_request)
    assert sp.tpot_ms <= 20.0 and sp.ttft_ms <= 2000.0
    # requests finish at B E / OSL per iteration: instance-seconds = OSL t_mean / (B E)
    assert sp.instance_seconds_per_request == pytest.approx(500 * sp.detail["mean_step_ms"] / 1e3 / (sp.max_batch * e), rel=1e-9)
    # the lane share counts E tokens per sequence and iteration
    assert sp.detail["chunk_iteration_share"] == pytest.approx(
        sp.max_batch * e * sp.detail["prefill_tokens"] / 500 / sp.detail["prefill_chunk_tokens"], rel=1e-9)
    # the chunk-carrying iteration is the ITL tail (p99): it includes the verify of V tokens and the draft
    assert sp.detail["itl_ms"] in (pytest.approx(sp.detail["step_ms"]), pytest.approx(sp.detail["decode_only_step_ms"]))
    assert sp.detail["spec_step_ms"] == pytest.approx(sp.detail["decode_only_step_ms"])
    # an ITL target (p99 of every gap) 5 % above the plain batch-1 step: the speculative burst step at
    # batch 1 (verify 4 tokens + 3 draft passes, ~6 % longer) cannot meet it, plain small chunks can
    inst = _instance(m, dev, 4, "fp8", "fp8")
    t1_ms = 1e3 * float(iteration_time(inst, _eff(), decode_batch=1.0, decode_context=2250.0).total_s)
    tight = operating_point(m, dev, 4, speculative=spec, **{**_UNI, "tpot_target_ms": None, "ttft_target_ms": None,
                                                           "itl_target_ms": 1.05 * t1_ms})
    assert tight.feasible and "spec_tokens_per_step" not in tight.detail and tight.detail.get("spec_rejected") == 2.0


def test_unified_speculation_stops_paying_when_compute_bound(cat) -> None:
    """A loose TPOT target lets the plain unified point run large, compute-bound batches where the
    V-fold verify costs more than the E tokens it yields: plain is kept (or wins by less)."""
    m, dev = cat.models["llama-3.1-8b"], cat.devices["h100-sxm"]
    spec = SpeculativeDecoding(method="eagle", num_speculative_tokens=5, acceptance=0.6, verify_tokens=8)
    kw = {**_UNI, "weight_precision": "bf16", "kv_precision": "bf16", "input_tokens": 300, "output_tokens": 300, "tpot_target_ms": 200.0,
          "ttft_target_ms": 10000.0}
    loose = operating_point(m, dev, 1, speculative=spec, **kw)
    assert "spec_tokens_per_step" not in loose.detail and loose.detail.get("spec_rejected") == 3.0
    tight = operating_point(m, dev, 1, speculative=spec, **{**kw, "tpot_target_ms": 8.0})
    assert tight.feasible and tight.detail.get("spec_tokens_per_step") is not None


def test_simulator_unified_pool_emits_bursts() -> None:
    """A unified pool yielding E = 2 tokens per iteration: per-request TPOT ~ half the iteration, half the gaps ~0."""
    import pandas as pd

    from planner.simulate import PoolSpec, ServiceRoute, replay_requests, simulate

    def pf(n: int) -> float:
        return 1e-4 * n

    def it(b: int, chunk: int) -> float:
        return 0.04 + 1e-5 * chunk

    pools = [PoolSpec("uni", "unified", 1, prefill_time_s=pf, step_time_s=lambda b: 0.04, max_batch=16, chunk_tokens=256,
                      iteration_time_s=it, tokens_per_step=2.0)]
    log = pd.DataFrame([(0.5 * i, 100, 201) for i in range(12)], columns=["arrival_s", "input_tokens", "output_tokens"])
    res = simulate(pools, [ServiceRoute("s", unified="uni")], replay_requests(log))
    s = res.services["s"]
    assert s.tpot.mean == pytest.approx(0.04 / 2.0, rel=0.05)
    assert res.quantile("pool", "uni", "itl", 0.99) == pytest.approx(0.04, rel=0.05)
    assert res.quantile("pool", "uni", "itl", 0.25) < 1e-3


# --- expert-parallel replicas -------------------------------------------------------------------
def _ep_rep(cat, ep: int, device: str = "h800"):
    from planner.perf.calibration import load_calibration
    from planner.perf.moe import Parallelism, ep_replica, moe_params

    return ep_replica(cat.models["deepseek-v3"], cat.devices[device], Parallelism(tp=1, ep=ep, dp=ep), "fp8", "fp8",
                      moe_params(load_calibration(None)))


def test_ep_verify_scales_expert_rows_and_all_to_all_with_b_times_v(cat) -> None:
    from planner.perf.moe import ep_iteration_time

    rep, eff = _ep_rep(cat, 32), _eff("sglang")
    b = np.array([4.0, 32.0, 96.0])
    one = ep_iteration_time(rep, eff, decode_batch=b, decode_context=1500.0)
    assert np.allclose(ep_iteration_time(rep, eff, decode_batch=b, decode_context=1500.0, tokens_per_seq=1.0).total_s, one.total_s)
    v2 = ep_iteration_time(rep, eff, decode_batch=b, decode_context=1500.0, tokens_per_seq=2.0)
    dbl = ep_iteration_time(rep, eff, decode_batch=2 * b, decode_context=1500.0)
    assert np.allclose(v2.a2a_s, dbl.a2a_s) and np.allclose(v2.expert_s, dbl.expert_s)
    # the V queries of a sequence share its KV: cheaper than twice the sequences
    assert (v2.total_s < dbl.total_s).all() and (v2.total_s > one.total_s).all()


@pytest.mark.parametrize("ep", [32, 144])
@pytest.mark.parametrize("acceptance", [0.85, 0.90])
@pytest.mark.parametrize("batch", [4.0, 8.0, 16.0])
def test_deepseek_v3_mtp_on_expert_parallel_replicas_reproduces_1_8x_tps(cat, ep: int, acceptance: float, batch: float) -> None:
    from planner.perf.moe import ep_speedup

    rep = _ep_rep(cat, ep)
    cost = spec_cost(SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=acceptance), cat.models["deepseek-v3"],
                     rep.rank, "fp8", kv_precision="fp8")
    s = float(ep_speedup(cost, rep, _eff(), batch, 1500.0))
    assert s == pytest.approx(1.8, rel=0.20), s


def test_ep_mtp_speedup_falls_at_compute_bound_batches(cat) -> None:
    from planner.perf.moe import ep_speedup

    rep = _ep_rep(cat, 144)
    cost = spec_cost(SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=0.875), cat.models["deepseek-v3"],
                     rep.rank, "fp8", kv_precision="fp8")
    s = ep_speedup(cost, rep, _eff(), np.array([4.0, 128.0]), 1500.0)
    assert s[0] > 1.5 and s[1] < 1.2


def test_ep_decode_point_speculates_with_the_draft_in_memory(cat) -> None:
    from planner.perf.moe import Parallelism, ep_operating_point, replica_kv_capacity_bytes

    ds, dev = cat.models["deepseek-v3"], cat.devices["h100-sxm"]
    par = Parallelism(tp=1, ep=32, dp=32)
    kw = dict(role="decode", weight_precision="fp8", kv_precision="bf16", input_tokens=2000, output_tokens=500, ttft_target_ms=None,
              tpot_target_ms=30.0, engine="sglang")
    spec = SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance=0.875)
    plain = ep_operating_point(ds, dev, par, **kw)
    sp = ep_operating_point(ds, dev, par, speculative=spec, **kw)
    assert sp.detail["spec_tokens_per_step"] == pytest.approx(1.875)
    assert sp.instance_seconds_per_request < plain.instance_seconds_per_request
    assert sp.tpot_ms == pytest.approx(sp.detail["spec_step_ms"] / 1.875) and sp.tpot_ms <= 30.0
    # instance-seconds = OSL t_spec / (E B_rank dp)
    assert sp.instance_seconds_per_request == pytest.approx(500 * sp.detail["spec_step_ms"] / 1e3 / (1.875 * sp.max_batch))
    # memory: the MTP layer's weights come off the replica's KV room, its KV is added per sequence
    from planner.perf.calibration import load_calibration
    from planner.perf.moe import moe_params

    room = replica_kv_capacity_bytes(ds, dev, par, "fp8", "bf16", moe_params(load_calibration(None)))
    assert room * 0.95 < sp.detail["spec_kv_capacity_bytes"] < room
    assert sp.kv_bytes_per_request == pytest.approx(plain.kv_bytes_per_request * (1 + 1 / ds.num_layers))
    # a draft model is not modelled on EP replicas: plain
    dm = ep_operating_point(ds, dev, par, speculative=SpeculativeDecoding(method="draft_model", num_speculative_tokens=2,
                                                                         acceptance=0.7, draft_model="llama-3.1-8b"), **kw)
    assert dm.instance_seconds_per_request == pytest.approx(plain.instance_seconds_per_request) and "spec_tokens_per_step" not in dm.detail


def test_capacity_rows_of_speculative_points_hold_the_draft_weights() -> None:
    """Shared pools and EP replicas speculate in the capacity table, and a speculative row's pool KV
    capacity is the instance's less the draft's weights (plain rows keep the full capacity)."""
    from pathlib import Path

    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    path = str(Path(__file__).resolve().parent.parent / "instances" / "deepseek-v3-wide-ep.yaml")
    base = build_capacity_tables(load_instance(path)).points
    t = build_capacity_tables(load_instance(path, {"services.api.speculative": {"method": "mtp", "num_speculative_tokens": 1,
                                                                                "acceptance": 0.85}})).points
    spec = t[t["spec_method"] == "mtp"]
    assert set(spec["role"]) == {"decode", "unified"} and spec["config"].str.contains("ep").any()
    merged = spec.merge(base, on=["service", "bucket", "role", "config"], suffixes=("", "_base"))
    assert (merged["kv_capacity_bytes"] < merged["kv_capacity_bytes_base"]).all()
    assert (merged["instance_seconds_per_request"] < merged["instance_seconds_per_request_base"]).all()
    ds_layers = 61  # DeepSeek-V3: the MTP layer is 1/61 of the weights; the KV room shrinks by at most a few %
    assert (merged["kv_capacity_bytes"] > merged["kv_capacity_bytes_base"] * (1 - 3 / ds_layers) - 1e10).all()
    plain = t[(t["spec_method"] == "") & (t["role"] != "prefill")].merge(base, on=["service", "bucket", "role", "config"],
                                                                          suffixes=("", "_base"))
    assert np.allclose(plain["kv_capacity_bytes"], plain["kv_capacity_bytes_base"])
