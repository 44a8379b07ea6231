"""Performance model: hand computations, invariants, operating points (fixture profiles)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.perf import operating_point
from planner.perf.calibration import PUBLISHED_DEFAULT
from planner.perf.points import efficiency_of, engine_calibration
from planner.perf.roofline import (
    RESERVE_GB,
    U_MEM,
    Efficiency,
    allreduce_s,
    causal_pairs,
    instance_arrays,
    iteration_time,
    kv_bytes,
    max_batch,
    memory_per_device_bytes,
)

FIXTURES = Path(__file__).parent / "data" / "perf_catalog"
CAT = load_catalog(FIXTURES)
L70 = CAT.models["llama-3.1-70b"]
L8 = CAT.models["llama-3.1-8b"]
MIX = CAT.models["mixtral-8x7b"]
H100 = CAT.devices["h100-sxm"]
EFF = efficiency_of(PUBLISHED_DEFAULT)


def test_kv_bytes_per_token_llama70b_by_hand() -> None:
    # 2 (K and V) x 80 layers x 8 KV heads x 128 head dim x 2 bytes
    assert L70.kv_bytes_per_token("bf16") == 2 * 80 * 8 * 128 * 2 == 327_680
    inst = instance_arrays(L70, H100, 4, "bf16", "bf16")
    assert float(kv_bytes(inst, 1000)) == 327_680_000


def test_70b_bf16_does_not_fit_one_80gb_device_but_fits_four() -> None:
    one = instance_arrays(L70, H100, 1, "bf16", "bf16")
    assert L70.weight_bytes("bf16") > 80e9
    assert max_batch(one, 128) == 0
    four = instance_arrays(L70, H100, 4, "bf16", "bf16")
    # (80 GB x 0.9 - 141.1 GB / 4 - 3 GB) x 4 devices of KV, / (1024 tokens x 327,680 B)
    free = (80 * 2**30 * 0.9956 * U_MEM - L70.weight_bytes("bf16") / 4 - RESERVE_GB * 1e9) * 4  # memory the driver reports (round 9)
    assert int(max_batch(four, 1024)) == int(free // (1024 * 327_680))
    op = operating_point(L70, H100, 1, role="decode", weight_precision="bf16", kv_precision="bf16", input_tokens=1000,
                         output_tokens=200, ttft_target_ms=None, tpot_target_ms=100)
    assert not op.feasible and "do not fit" in op.reason and op.bound == "memory_capacity"


def test_decode_step_batch1_is_weight_streaming_by_hand() -> None:
    inst = instance_arrays(L8, H100, 1, "bf16", "bf16")
    step = iteration_time(inst, EFF, decode_batch=1, decode_context=1)
    # bytes: every weight but the input embedding table, plus one token's KV
    streamed = (L8.params_total() - L8.vocab_size * L8.hidden_size) * 2 + 131_072
    assert float(step.memory_s) == pytest.approx(streamed / (3350e9 * PUBLISHED_DEFAULT.eta_b))
    assert float(step.comm_s) == 0.0  # tp 1: no all-reduce


def test_ring_allreduce_by_hand() -> None:
    inst = instance_arrays(L70, H100, 8, "bf16", "bf16")
    # 2 (tp-1)/tp x 1 MB / 450 GB/s + 2 x 3 us (one-shot within the NVLink domain: 2 steps)
    expected = 2 * 7 / 8 * 1e6 / 450e9 + 2 * 3e-6
    assert float(allreduce_s(inst, 1e6)) == pytest.approx(expected)
    # + the engine's software latency per all-reduce
    assert float(allreduce_s(inst, 1e6, 5e-6)) == pytest.approx(expected + 5e-6)
    # at half the datasheet link bandwidth the wire time doubles; hops and software latency do not
    assert float(allreduce_s(inst, 1e6, 5e-6, 0.5)) == pytest.approx(2 * 2 * 7 / 8 * 1e6 / 450e9 + 2 * 3e-6 + 5e-6)


def test_pcie_only_cards_ring_over_pcie_by_hand() -> None:
    """No scale-up link (a PCIe card without NVLink): the all-reduce is a ring of 2 (tp-1) steps over
    PCIe inside the node, not the NVLink domain's 2-step one-shot."""
    pcie = H100.model_copy(update={"scaleup_bw_gb_per_s_bidir": None, "pcie_bw_gb_per_s": 64.0, "devices_per_node": 8})
    inst = instance_arrays(L70, pcie, 4, "bf16", "bf16")
    assert float(allreduce_s(inst, 1e6)) == pytest.approx(2 * 3 / 4 * 1e6 / 64e9 + 2 * 3 * 3e-6)
    nvlink = instance_arrays(L70, H100, 4, "bf16", "bf16")
    assert float(allreduce_s(nvlink, 1e6)) == pytest.approx(2 * 3 / 4 * 1e6 / 450e9 + 2 * 3e-6)


def test_link_efficiency_slows_only_tp_communication() -> None:
    slow = Efficiency(0.5, 0.8, 0.0, 0.0, 0.0, 0.0, 0.4)
    fast = Efficiency(0.5, 0.8, 0.0, 0.0, 0.0, 0.0, 1.0)
    one = instance_arrays(L70, H100, 1, "bf16", "bf16")
    eight = instance_arrays(L70, H100, 8, "bf16", "bf16")
    kw = {"decode_batch": 8, "decode_context": 2048, "prefill_tokens": 4096}
    assert float(iteration_time(one, slow, **kw).total_s) == pytest.approx(float(iteration_time(one, fast, **kw).total_s))
    s8, f8 = iteration_time(eight, slow, **kw), iteration_time(eight, fast, **kw)
    assert float(s8.compute_s) == pytest.approx(float(f8.compute_s))
    # 2 all-reduces per layer of (8 + 4096) tokens x d x 2 bytes: wire time x 1/0.4
    wire = 2 * L70.num_layers * 2 * 7 / 8 * (8 + 4096) * L70.hidden_size * 2 / 450e9
    assert float(s8.comm_s - f8.comm_s) == pytest.approx(wire * (1 / 0.4 - 1), rel=1e-9)


def test_windowed_causal_pairs_match_profile() -> None:
    from planner.schema.llm import LLMProfile

    for n, h, w in [(100, 0, 4096), (3000, 2000, 4096), (5000, 0, 128), (10, 9000, 128), (700, 50, 128)]:
        assert float(causal_pairs(n, h, w)) == pytest.approx(LLMProfile._causal_pairs(n, h, w))
    assert float(causal_pairs(100, 20, np.inf)) == pytest.approx(100 * 140 / 2)


def test_gemm_and_attention_rooflines_add() -> None:
    # decode batch 64 at 8k context (attention KV-bound) plus 4096 prefill tokens (GEMMs
    # compute-bound): the two kernels run one after the other, so their times add
    inst = instance_arrays(L70, H100, 8, "bf16", "bf16")
    eff = Efficiency(0.5, 0.8, 0.0, 0.0)
    step = iteration_time(inst, eff, decode_batch=64, decode_context=8192, prefill_tokens=4096)
    # GEMM rows: 64 decode + 4096 prefill + M_half 64 (bf16); the output head only for the
    # prompt's last token, so 4095 prefill rows skip V d parameters
    head = 128256 * 8192
    assert float(inst.p_lm_head) == head
    gemm_c = 2 * (float(inst.p_matmul) * (64 + 4096 + 64) - head * 4095) / (8 * float(inst.flops_peak) * 0.5)
    attn_c = float(inst.attn_pair_flops) * (64 * 8192 + 4096 * 4096 / 2) / (8 * float(inst.attn_flops_peak) * 0.5)
    attn_m = float(64 * kv_bytes(inst, 8192) + kv_bytes(inst, 4096)) / (8 * 3350e9 * 0.8)  # bf16 KV: no dequant factor
    gemm_m = float(inst.w_shared_bytes) / (8 * 3350e9 * 0.8)
    expected = max(gemm_c, gemm_m) + max(attn_c, attn_m) + float(step.comm_s)
    assert float(step.total_s) == pytest.approx(expected)
    # host time per sequence adds per running sequence, not divided by tp
    with_seq = iteration_time(inst, Efficiency(0.5, 0.8, 0.0, 0.0, 10e-6), decode_batch=64, decode_context=8192, prefill_tokens=4096)
    assert float(with_seq.total_s - step.total_s) == pytest.approx(65 * 10e-6)


def test_tp_across_nodes_uses_the_nic() -> None:
    inside = instance_arrays(L70, H100, 8, "bf16", "bf16")
    across = instance_arrays(L70, H100, 16, "bf16", "bf16")
    assert float(inside.link_bytes_per_s) == 450e9
    assert float(across.link_bytes_per_s) == 50e9


def test_moe_weights_read_grow_with_batch() -> None:
    inst = instance_arrays(MIX, H100, 2, "bf16", "bf16")
    t = [float(iteration_time(inst, EFF, decode_batch=b, decode_context=512).memory_s) for b in (1, 2, 8, 64)]
    assert t[0] < t[1] < t[2] < t[3]
    # at batch 1, 2 of 8 experts are read: W_read = W_shared + W_experts x 2/8
    b_w = 2
    w_read = (MIX.params_total() - MIX.vocab_size * MIX.hidden_size) * b_w - MIX.params_routed_experts() * b_w * (1 - 2 / 8)
    one = float(iteration_time(inst, EFF, decode_batch=1, decode_context=0).memory_s)
    assert one == pytest.approx(w_read / (2 * 3350e9 * PUBLISHED_DEFAULT.eta_b))


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 512), db=st.integers(0, 256), c=st.integers(1, 32_000), dc=st.integers(0, 8000), tp=st.sampled_from([1, 2, 4, 8]))
def test_step_time_non_decreasing_in_batch_and_context(b: int, db: int, c: int, dc: int, tp: int) -> None:
    inst = instance_arrays(L70, H100, tp, "fp8", "bf16")
    base = float(iteration_time(inst, EFF, decode_batch=b, decode_context=c).total_s)
    assert float(iteration_time(inst, EFF, decode_batch=b + db, decode_context=c).total_s) >= base
    assert float(iteration_time(inst, EFF, decode_batch=b, decode_context=c + dc).total_s) >= base


@settings(max_examples=40, deadline=None)
@given(factor=st.floats(1.0, 4.0), b=st.integers(1, 256), n=st.integers(0, 8192))
def test_more_bandwidth_never_slower(factor: float, b: int, n: int) -> None:
    slow = instance_arrays(L8, H100, 2, "bf16", "bf16")
    fast_dev = H100.model_copy(update={"memory_bandwidth_gb_per_s": 3350 * factor})
    fast = instance_arrays(L8, fast_dev, 2, "bf16", "bf16")
    t_slow = float(iteration_time(slow, EFF, decode_batch=b, decode_context=2000, prefill_tokens=n).total_s)
    t_fast = float(iteration_time(fast, EFF, decode_batch=b, decode_context=2000, prefill_tokens=n).total_s)
    assert t_fast <= t_slow


@settings(max_examples=40, deadline=None)
@given(kv_gb=st.floats(0.0, 500.0))
def test_tp_never_increases_per_device_memory(kv_gb: float) -> None:
    used = [float(memory_per_device_bytes(instance_arrays(L70, H100, tp, "bf16", "bf16"), kv_gb * 1e9)) for tp in (1, 2, 4, 8, 16)]
    assert all(a >= b for a, b in zip(used, used[1:], strict=False))


def test_decode_point_meets_tpot_and_is_largest_batch() -> None:
    kw = dict(role="decode", weight_precision="bf16", kv_precision="bf16", input_tokens=2000, output_tokens=300, ttft_target_ms=None)
    op = operating_point(L70, H100, 8, tpot_target_ms=30, **kw)  # type: ignore[arg-type]
    assert op.feasible and op.tpot_ms <= 30
    assert op.instance_seconds_per_request == pytest.approx(300 * op.tpot_ms / 1e3 / op.max_batch)
    from planner.perf.power import device_power_w
    # power follows the step's roofline shares and rows (issue 20)

    d = op.detail
    p_w = device_power_w(H100, d["compute_ms"], d["memory_ms"], d["step_ms"], d["batch"])
    assert op.energy_j_per_request == pytest.approx(p_w * 8 * op.instance_seconds_per_request)
    inst = instance_arrays(L70, H100, 8, "bf16", "bf16")
    over = float(iteration_time(inst, efficiency_of(engine_calibration("default")[0]), decode_batch=op.max_batch + 1, decode_context=2150).total_s)
    assert op.bound == "memory_capacity" or over * 1e3 > 30
    tight = operating_point(L70, H100, 8, tpot_target_ms=1.0, **kw)  # type: ignore[arg-type]
    assert not tight.feasible and "batch 1" in tight.reason


def test_prefill_point_components_add_up() -> None:
    op = operating_point(L70, H100, 8, role="prefill", weight_precision="bf16", kv_precision="bf16", input_tokens=4000,
                         output_tokens=200, ttft_target_ms=5000, tpot_target_ms=None)
    d = op.detail
    assert op.feasible and op.kv_transfer_bytes_per_request == 4000 * 327_680
    assert op.ttft_ms == pytest.approx(d["prefill_ms"] + d["transfer_ms"] + d["first_step_ms"] + d["ttft_overhead_ms"])
    assert d["transfer_ms"] == pytest.approx(4000 * 327_680 / (8 * 50e9) * 1e3)
    cached = operating_point(L70, H100, 8, role="prefill", weight_precision="bf16", kv_precision="bf16", input_tokens=4000,
                             output_tokens=200, cached_prefix_share=0.75, ttft_target_ms=5000, tpot_target_ms=None)
    assert cached.instance_seconds_per_request < op.instance_seconds_per_request


def test_unified_interference_costs_against_pure_decode() -> None:
    kw = dict(weight_precision="bf16", kv_precision="bf16", input_tokens=4000, output_tokens=200, ttft_target_ms=None, tpot_target_ms=40)
    dec = operating_point(L70, H100, 8, role="decode", **kw)  # type: ignore[arg-type]
    uni = operating_point(L70, H100, 8, role="unified", **kw)  # type: ignore[arg-type]
    assert uni.feasible and uni.tpot_ms <= 40
    assert uni.max_batch < dec.max_batch  # the prefill chunk takes part of each iteration
    assert uni.ttft_ms > 0 and uni.detail["ttft_iterations"] >= 1


def test_engine_slots_pool_and_admission_by_hand() -> None:
    """TensorRT-LLM: 0.9 x (M - W - reserve), ISL+OSL reserved; vLLM: 0.9 M - W - reserve at ISL+OSL/2."""
    from planner.perf.closed_loop import engine_slots
    from planner.perf.fit import ENGINE_SCHEDULERS
    from planner.perf.roofline import RESERVE_GB, U_MEM, instance_arrays
    from planner.perf.validate import engine_arrays

    inst = instance_arrays(L8, H100, 1, "bf16", "bf16")
    isl, osl = np.array([2048.0]), np.array([512.0])
    kv_tok = 2 * 32 * 8 * 128 * 2  # 131,072 B per token (llama-3.1-8b, bf16)
    m, w = float(inst.memory_bytes), float(inst.weight_bytes)
    for engine, pool, held in (("trtllm", U_MEM * (m - w - RESERVE_GB * 1e9), 2560.0), ("vllm", U_MEM * m - w - RESERVE_GB * 1e9, 2304.0)):
        cal = PUBLISHED_DEFAULT.model_copy(update=ENGINE_SCHEDULERS[engine])
        slots = float(engine_slots(inst, engine_arrays([cal]), isl, osl)[0])
        assert slots == np.floor(pool / (kv_tok * held))


# --- unified (chunked-prefill) point: lane, chunk cap, chunk attention -----------------------
def test_prefill_prompts_split_attention_pairs_by_hand() -> None:
    """m prompts of n/m tokens: attention pairs m (n/m)(n/m + 2h)/2; the GEMMs add only the
    output head for the m - 1 extra last tokens."""
    inst = instance_arrays(L70, H100, 8, "bf16", "bf16")
    eff = efficiency_of(engine_calibration("default")[0])
    n, h, m = 8000.0, 1000.0, 4.0
    one = iteration_time(inst, eff, prefill_tokens=n, prefill_cached=h)
    four = iteration_time(inst, eff, prefill_tokens=n, prefill_cached=h, prefill_prompts=m)
    a_pair = float(inst.attn_pair_flops) / (8 * float(inst.attn_flops_peak) * eff.eta_f)
    head = 2 * float(inst.p_lm_head) * (m - 1) / (8 * float(inst.flops_peak) * eff.eta_f)
    expected = a_pair * (n * (n + 2 * h) / 2 - m * (n / m) * (n / m + 2 * h) / 2) - head
    assert float(one.compute_s - four.compute_s) == pytest.approx(expected, rel=1e-9)


def test_chunks_of_a_prompt_add_up_to_the_unchunked_prefill_compute() -> None:
    """Chunk j attends over the j q earlier tokens (Sarathi-Serve): n/q chunks at the mean
    position carry exactly the FLOPs of the whole prompt in one pass, plus what each extra
    iteration's GEMMs pay again: the M_half padding rows and the output head's one row."""
    from planner.perf.points import _chunk_step
    from planner.perf.roofline import GEMM_M_HALF_TOKENS

    inst = instance_arrays(L70, H100, 8, "bf16", "bf16")
    eff = efficiency_of(engine_calibration("default")[0])
    n, cached, q = 32000.0, 2000.0, 1000.0
    chunk = _chunk_step(inst, eff, np.zeros(1), 0.0, np.array([q]), n, cached)
    whole = iteration_time(inst, eff, prefill_tokens=n, prefill_cached=cached)
    extra = 2 * (n / q - 1) * (float(inst.p_matmul) * GEMM_M_HALF_TOKENS + float(inst.p_lm_head)) / (8 * float(inst.flops_peak) * eff.eta_f)
    assert float(chunk.compute_s[0]) * n / q == pytest.approx(float(whole.compute_s) + extra, rel=1e-9)


def test_lane_wait_is_the_md1_quantile_of_planner_queueing() -> None:
    from planner.perf.points import lane_wait_quantile_s
    from planner.queueing import md1_wait_cdf, mg1_wait_quantile_s

    service = 2.5
    for rho in (0.005, 0.3, 0.7, 0.95):
        got = float(lane_wait_quantile_s(0.99, np.array([rho]), np.array([service]))[0])
        assert got == pytest.approx(mg1_wait_quantile_s(0.99, rho / service, service), rel=1e-9, abs=1e-12)
        if got > 0:  # the exact M/D/1 distribution puts 99 % at the quantile
            assert md1_wait_cdf(got, rho / service, service) == pytest.approx(0.99, abs=2e-4)
    assert np.isinf(lane_wait_quantile_s(0.99, np.array([1.0]), np.array([service]))[0])


def test_unified_point_is_consistent_by_hand() -> None:
    """ITL p99 cap on the chunk-carrying iteration (more than 1 % of gaps carry a chunk; before
    the ITL metric existed this was the "tpot" target's reading), throughput B/(OSL t_mean), TTFT
    = lane wait + ceil(n/q) chunk iterations + overhead; one token more per chunk would break the cap."""
    from planner.perf.points import _chunk_step

    kw = dict(weight_precision="fp8", kv_precision="fp8", input_tokens=16000, output_tokens=400, ttft_target_ms=20000,
              tpot_target_ms=None, itl_target_ms=40)
    op = operating_point(L70, H100, 4, role="unified", **kw)  # type: ignore[arg-type]
    d = op.detail
    assert op.feasible and d["itl_ms"] <= 40 and d["itl_ms"] == pytest.approx(d["step_ms"])
    assert op.instance_seconds_per_request == pytest.approx(400 * d["mean_step_ms"] / 1e3 / op.max_batch)
    assert d["mean_step_ms"] == pytest.approx(d["chunk_iteration_share"] * d["step_ms"] + (1 - d["chunk_iteration_share"]) * d["decode_only_step_ms"])
    assert d["chunk_iteration_share"] == pytest.approx(op.max_batch * 16000 / 400 / d["prefill_chunk_tokens"])
    assert op.ttft_ms == pytest.approx(d["lane_wait_ms"] + np.ceil(16000 / d["prefill_chunk_tokens"]) * d["step_ms"] + d["ttft_overhead_ms"])
    assert d["lane_utilization"] == pytest.approx(16000 / d["prefill_chunk_tokens"] * d["step_ms"] / 1e3 / op.instance_seconds_per_request)
    inst = instance_arrays(L70, H100, 4, "fp8", "fp8")
    eff = efficiency_of(engine_calibration("default")[0])
    bigger = _chunk_step(inst, eff, np.array([float(op.max_batch)]), 16000 + 200, np.array([d["prefill_chunk_tokens"] + 1]), 16000, 0.0)
    assert float(bigger.total_s[0]) * 1e3 > 40
    # unified costs more instance-time than prefill + decode here: small chunks reread the
    # prompt's KV and pay the per-iteration overheads, and the lane queues per instance
    pre = operating_point(L70, H100, 4, role="prefill", **kw)  # type: ignore[arg-type]
    dec = operating_point(L70, H100, 4, role="decode", **kw)  # type: ignore[arg-type]
    assert op.instance_seconds_per_request > pre.instance_seconds_per_request + dec.instance_seconds_per_request


def test_unified_ttft_infeasible_names_the_chunk_cap() -> None:
    kw = dict(weight_precision="fp8", kv_precision="fp8", input_tokens=120000, output_tokens=400, ttft_target_ms=5000,
              tpot_target_ms=None, itl_target_ms=40)
    op = operating_point(L70, H100, 8, role="unified", **kw)  # type: ignore[arg-type]
    assert not op.feasible and "ITL target" in op.reason and "TTFT" in op.reason


def test_fp8_kv_read_costs_dequant_factor_and_fp8_gemm_needs_more_rows() -> None:
    # decode-only step, KV-bound attention: an fp8 KV cache holds half the bytes but reads at
    # KV_DEQUANT_READ_FACTOR x their bf16-byte time (0.67 of the bf16 read, not 0.5)
    from planner.perf.roofline import GEMM_M_HALF_TOKENS, KV_DEQUANT_READ_FACTOR

    eff = Efficiency(0.5, 0.8, 0.0, 0.0)
    b16 = instance_arrays(L70, H100, 8, "bf16", "bf16")
    f8 = instance_arrays(L70, H100, 8, "bf16", "fp8")
    assert float(kv_bytes(f8, 8192)) == pytest.approx(float(kv_bytes(b16, 8192)) / 2)
    read = lambda inst: float(iteration_time(inst, eff, decode_batch=64, decode_context=8192).memory_s)  # noqa: E731
    w = float(b16.w_shared_bytes) / (8 * 3350e9 * 0.8)
    assert (read(f8) - w) / (read(b16) - w) == pytest.approx(KV_DEQUANT_READ_FACTOR / 2)
    # fp8 GEMMs: half-rate rows M_half scale with the peak ratio (64 bf16 -> 128 fp8 on H100)
    w8 = instance_arrays(L70, H100, 8, "fp8", "bf16")
    t = float(iteration_time(w8, eff, decode_batch=8).compute_s) - float(iteration_time(w8, eff, decode_batch=8, decode_context=0).compute_s)
    assert t == 0.0
    gemm = 2 * float(w8.p_matmul) * (8 + GEMM_M_HALF_TOKENS * 1979 / 989.4) / (8 * float(w8.flops_peak) * 0.5)
    assert float(iteration_time(w8, eff, decode_batch=8).compute_s) == pytest.approx(gemm)


def test_lad_residuals_square_to_absolute_log_ratio() -> None:
    """The fit's residuals: squares sum to sum |log(pred/meas)| + n eps, and keep the sign."""
    from planner.perf.fit import L1_EPS, lad_residuals

    ratios = np.array([2.0, 0.5, 1.0, 1.1])
    r = lad_residuals(np.log(ratios))
    assert float(r @ r) == pytest.approx(2 * np.log(2.0) + np.log(1.1) + 3 * L1_EPS)  # sign(0) = 0: an exact row adds 0
    assert r[0] == pytest.approx(-r[1]) and r[0] > 0 and r[2] == 0.0
    # a 2x error weighs like two 1.414x errors (absolute deviations), not four (squares)
    assert lad_residuals(np.log([2.0]))[0] ** 2 == pytest.approx(2 * lad_residuals(np.log([np.sqrt(2.0)]))[0] ** 2, rel=1e-3)


def test_gemm_m_half_is_one_instance_figure_every_step_model_reads() -> None:
    """``M_half`` lives in :class:`InstanceArrays` (``roofline.gemm_m_half_rows``): the dense and the
    speculative-verify step models charge ``2 P M_half / (tp F eta_f)`` of GEMM time from that field."""
    from dataclasses import replace

    from planner.perf.roofline import GEMM_M_HALF_TOKENS, gemm_m_half_rows
    from planner.perf.speculative import verify_step

    eff = Efficiency(0.5, 0.8, 0.0, 0.0)
    w8 = instance_arrays(L70, H100, 8, "fp8", "bf16")
    assert float(w8.gemm_m_half) == pytest.approx(gemm_m_half_rows(float(w8.flops_peak), float(w8.attn_flops_peak)))
    assert float(instance_arrays(L70, H100, 8, "bf16", "bf16").gemm_m_half) == pytest.approx(GEMM_M_HALF_TOKENS)
    zero = replace(w8, gemm_m_half=np.asarray(0.0))
    extra = 2 * float(w8.p_matmul) * float(w8.gemm_m_half) / (8 * float(w8.flops_peak) * 0.5)
    dense = float(iteration_time(w8, eff, decode_batch=8).compute_s) - float(iteration_time(zero, eff, decode_batch=8).compute_s)
    spec = float(verify_step(w8, eff, 8, 0.0, 1.0).compute_s) - float(verify_step(zero, eff, 8, 0.0, 1.0).compute_s)
    assert dense == pytest.approx(extra) and spec == pytest.approx(extra)
