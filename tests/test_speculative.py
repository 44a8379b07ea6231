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
  draft overheads that grow with batch x draft tokens beyond the roofline's GEMM rows).
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
