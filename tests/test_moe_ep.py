"""Expert parallelism with DP attention (planner/perf/moe.py): constraints, hand-checkable pieces of the step
model, memory, capacity-table rows, calibration hook, CLI — and the acceptance figures of issue 19.

Acceptance reference (issue 19): SGLang team, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert
Parallelism on 96 H100 GPUs", LMSYS blog, 2025-05-05 (lmsys.org/blog/2025-05-05-large-scale-ep; source
github.com/lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md). Setup as the blog states it: DeepSeek-V3
(fp8 checkpoint), 8 x H100 per node over InfiniBand; prefill measured on 4 nodes (EP32, DP attention), decode on
9 nodes (EP72, DP attention, 256 sequences per GPU at a 2,000-token KV length); headline 52.3 k input and 22.3 k
output tokens/s per node for 2,000-token inputs (prefill alone: 54,543 per node at 2K; decode 22,282); up to 5x
the output throughput of TP16 on the same GPUs. The model's parameters are the published defaults of
MoECalibration (planner/perf/calibration.py), none set for these tests, and since issue 25 item 7 none taken from
that blog: ``ep_imbalance`` 1.11 is TensorRT-LLM's measured EPLB imbalance (tech blog 4, Table 1) and
``tbo_overlap`` 1.0 DeepSeek's profile-data. Out of sample the decode lands +20 % (inside +-25 %), the prefill
+41 % (outside: a miss, recorded as a strict xfail, not tuned away; planner/perf/README.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.cli import main
from planner.errors import InputError
from planner.perf.calibration import Calibration, MoECalibration
from planner.perf.estimate import estimate_expert_parallel
from planner.perf.moe import (
    COMBINE_BYTES_PER_ELEMENT,
    DISPATCH_BYTES_PER_ELEMENT,
    Parallelism,
    a2a_s,
    check_parallelism,
    ep_iteration_time,
    ep_operating_point,
    ep_replica,
    experts_per_gpu,
    fit_moe_calibration,
    kv_capacity_per_rank_bytes,
    predict_moe_rows,
)
from planner.perf.points import efficiency_of, engine_calibration, operating_point
from planner.perf.roofline import RESERVE_GB, U_MEM, instance_arrays, kv_capacity_bytes
from planner.schema.capacity import config_devices

CAT = load_catalog()
DS = CAT.models["deepseek-v3"]
H100 = CAT.devices["h100-sxm"]
H800 = CAT.devices["h800"]
P = MoECalibration()
EFF = efficiency_of(engine_calibration("sglang")[0])

# LMSYS blog 2025-05-05 (module docstring)
BLOG_PREFILL_TOKENS_PER_S_PER_NODE = 52_300.0
BLOG_DECODE_TOKENS_PER_S_PER_NODE = 22_300.0
ISL, OSL = 2000, 100  # 2,000-token inputs; decode KV length 2,000 (blog decode table): context ISL + OSL/2


def _point(par: Parallelism, role: str, device=H100):  # noqa: ANN001, ANN202
    return ep_operating_point(DS, device, par, role=role, weight_precision="fp8", kv_precision="bf16", input_tokens=ISL,
                              output_tokens=OSL, ttft_target_ms=None, tpot_target_ms=None, engine="sglang")


# --- parallelism and memory ----------------------------------------------------------------------------
def test_experts_per_gpu_counts_redundant_slots() -> None:
    # 256 routed + 32 redundant = 288 slots (DeepSeek day 6, the blog): EP72 -> 4, EP32 -> 9, EP144 -> 2
    assert [experts_per_gpu(DS, ep, P) for ep in (32, 72, 144, 8)] == [9, 4, 2, 36]


@pytest.mark.parametrize(("model", "par", "fragment"), [
    ("llama-3.1-70b", Parallelism(1, 8, 8), "dense"),
    ("deepseek-v3", Parallelism(1, 296, 296), "exceeds the 288 expert slots"),
    ("deepseek-v3", Parallelism(1, 12, 12), "not a multiple of the 8-device node"),
    ("deepseek-v3", Parallelism(2, 32, 8), "EP 32 != dp 8 x tp 2"),
    ("deepseek-v3", Parallelism(16, 32, 2), "attention tp 16 exceeds"),
])
def test_engine_constraints_are_named(model: str, par: Parallelism, fragment: str) -> None:
    assert fragment in check_parallelism(CAT.models[model], H100, par, P)
    assert check_parallelism(DS, H100, Parallelism(1, 72, 72), P) == ""
    assert check_parallelism(DS, H100, Parallelism(2, 32, 16), P) == ""


def test_replica_memory_adds_up() -> None:
    """Weights per GPU = non-expert weights / attention tp + its expert slots; the replica holds every routed
    expert at least once; MLA's latent is not split by attention tp."""
    for par in (Parallelism(1, 32, 32), Parallelism(1, 72, 72), Parallelism(2, 32, 16)):
        rep = ep_replica(DS, H100, par, "fp8", "bf16", P)
        w_routed = DS.weight_bytes_routed_experts("fp8")
        w_ne = DS.weight_bytes("fp8") - w_routed
        per_expert = w_routed / DS.moe.num_experts  # type: ignore[union-attr]
        assert rep.weights_per_gpu_bytes == pytest.approx(w_ne / par.tp + experts_per_gpu(DS, par.ep, P) * per_expert)
        assert rep.expert_bytes_per_gpu * par.ep >= w_routed
        assert rep.kv_gpus == 1
        free = float(rep.rank.memory_bytes) * U_MEM - rep.weights_per_gpu_bytes - RESERVE_GB * 1e9 - rep.buffer_bytes
        assert kv_capacity_per_rank_bytes(rep) == pytest.approx(free)


def test_mla_latent_is_not_split_by_tensor_parallelism() -> None:
    """Under TP every rank keeps the whole MLA latent: the replica's KV capacity is one device's free memory."""
    inst = instance_arrays(DS, H100, 16, "fp8", "bf16")
    free_one = float(inst.memory_bytes) * U_MEM - DS.weight_bytes("fp8") / 16 - RESERVE_GB * 1e9
    assert float(kv_capacity_bytes(inst)) == pytest.approx(free_one)
    dense = instance_arrays(CAT.models["llama-3.1-70b"], H100, 4, "fp8", "fp8")
    assert float(dense.kv_heads) == 8.0  # grouped-query attention still splits by KV heads


# --- the all-to-all, by hand ------------------------------------------------------------------------------
def test_low_latency_all_to_all_by_hand() -> None:
    """EP72 decode, 256 tokens per rank: a (N-1)/N of the a = 8 copies per token cross the NIC (N = 9 nodes)."""
    rep = ep_replica(DS, H100, Parallelism(1, 72, 72), "fp8", "bf16", P)
    per_copy = DS.hidden_size * (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)
    nic = 256 * 8 * 8 / 9 * per_copy / (0.8 * 50e9)
    nvl = 256 * 8 / 9 * per_copy / (0.77 * 450e9)
    expected = 58 * (P.ep_imbalance * max(nic, nvl) + 2 * 12e-6)
    assert float(a2a_s(rep, 256.0, "low_latency")) == pytest.approx(expected, rel=1e-12)


def test_normal_all_to_all_sends_one_copy_per_destination_node() -> None:
    """EP32 prefill (4 nodes): (N-1)(1 - (1-1/N)^a) RDMA copies per token, all a copies over NVLink."""
    rep = ep_replica(DS, H100, Parallelism(1, 32, 32), "fp8", "bf16", P)
    per_copy = DS.hidden_size * (DISPATCH_BYTES_PER_ELEMENT + COMBINE_BYTES_PER_ELEMENT)
    remote = 3 * (1 - 0.75 ** 8)
    nic = 16000 * remote * per_copy / (0.8 * 50e9)
    nvl = 16000 * 8 * per_copy / (0.77 * 450e9)
    assert float(a2a_s(rep, 16000.0, "normal")) == pytest.approx(58 * (P.ep_imbalance * max(nic, nvl) + 24e-6), rel=1e-12)


def test_h800_nvlink_slows_the_in_node_all_to_all() -> None:
    """Inside one node the all-to-all is NVLink-bound: H800's 200 GB/s per direction against H100's 450."""
    lat = 58 * 2 * 12e-6
    t100 = float(a2a_s(ep_replica(DS, H100, Parallelism(1, 8, 8), "fp8", "bf16", P), 128.0, "low_latency")) - lat
    t800 = float(a2a_s(ep_replica(DS, H800, Parallelism(1, 8, 8), "fp8", "bf16", P), 128.0, "low_latency")) - lat
    assert t800 / t100 == pytest.approx(450 / 200)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 255), ctx=st.integers(100, 8000))
def test_decode_step_grows_with_batch_and_hides_at_most_the_all_to_all(b: int, ctx: int) -> None:
    rep = ep_replica(DS, H100, Parallelism(1, 72, 72), "fp8", "bf16", P)
    s1 = ep_iteration_time(rep, EFF, decode_batch=float(b), decode_context=float(ctx))
    s2 = ep_iteration_time(rep, EFF, decode_batch=float(b + 1), decode_context=float(ctx))
    assert float(s2.total_s) >= float(s1.total_s) - 1e-12
    # the step is never shorter than its compute alone, nor than its all-to-all alone
    assert float(s1.total_s) >= float(s1.a2a_s) * 0.999
    assert 0.0 <= float(s1.exposed_a2a_s()) <= float(s1.a2a_s) + 1e-12


# --- acceptance: SGLang's 96-H100 deployment (LMSYS blog 2025-05-05) ------------------------------------------
def _prefill_tokens_per_s_per_node() -> float:
    op = _point(Parallelism(1, 32, 32), "prefill")
    assert op.feasible, op.reason
    return ISL / op.instance_seconds_per_request / 32 * 8


def _decode_tokens_per_s_per_node() -> float:
    op = _point(Parallelism(1, 72, 72), "decode")
    assert op.feasible, op.reason
    assert op.detail["batch_per_rank"] == 256  # DeepEP's per-rank limit, the blog's 256 sequences per GPU
    return OSL / op.instance_seconds_per_request / 72 * 8


def test_acceptance_decode_output_throughput_per_node_within_25pct() -> None:
    """Decode EP72 / DP72 on 9 H100 nodes: within +-25 % of 22.3 k output tokens/s per node (model: 26.7 k, +19.9 %,
    out of sample since issue 25 item 7; +4.6 % with the previous, SGLang-fitted 1.18 / 0.75)."""
    got = _decode_tokens_per_s_per_node()
    assert got == pytest.approx(BLOG_DECODE_TOKENS_PER_S_PER_NODE, rel=0.25)


@pytest.mark.xfail(strict=True, reason="out-of-sample miss (issue 25 item 7): with ep_imbalance 1.11 (TensorRT-LLM) and "
                   "tbo_overlap 1.0 (DeepSeek profile-data) the model gives 73.8 k input tokens/s per node, +41 % over SGLang's "
                   "52.3 k; SGLang's own TBO ablation shows its prefill hides less communication than full overlap")
def test_acceptance_prefill_input_throughput_per_node_within_25pct() -> None:
    """Prefill EP32 / DP32 on 4 H100 nodes, 8 prompts of 2,000 tokens per GPU (16,384-token budget): within +-25 % of
    52.3 k input tokens/s per node. Misses out of sample (see the xfail reason); it passed (+14 %) only with the
    parameters fitted to the same blog."""
    got = _prefill_tokens_per_s_per_node()
    assert got == pytest.approx(BLOG_PREFILL_TOKENS_PER_S_PER_NODE, rel=0.25)


def test_out_of_sample_landing_is_as_reported() -> None:
    """Where the independent parameters land on SGLang's figures, as planner/perf/README.md reports it: decode +19.9 %,
    prefill +41.2 % (so a change that moves them has to update the report)."""
    assert _decode_tokens_per_s_per_node() / BLOG_DECODE_TOKENS_PER_S_PER_NODE == pytest.approx(1.199, abs=0.01)
    assert _prefill_tokens_per_s_per_node() / BLOG_PREFILL_TOKENS_PER_S_PER_NODE == pytest.approx(1.412, abs=0.01)


def _tbo_gain(par: Parallelism, **kw: float) -> float:
    on = ep_iteration_time(ep_replica(DS, H100, par, "fp8", "bf16", P), EFF, **kw)
    off = ep_iteration_time(ep_replica(DS, H100, par, "fp8", "bf16", P.model_copy(update={"tbo_overlap": 0.0})), EFF, **kw)
    assert bool(on.tbo)
    return float(off.total_s) / float(on.total_s)


def test_two_batch_overlap_against_the_published_ablation() -> None:
    """Out of sample: SGLang measured TBO gains of +27-35 % (prefill, same tokens per device) and +25.5 % (decode, 256
    sequences per GPU). At the default ``tbo_overlap`` 1.0 (DeepSeek's profiles) the model's gains are larger,
    +52 % and +43 %: SGLang hides less of the all-to-all than full overlap. 0.75 (the previous default, fitted to these
    gains) reproduces them — kept here as the measure of how far the independent value sits from SGLang's stack."""
    assert P.tbo_overlap == 1.0
    assert _tbo_gain(Parallelism(1, 32, 32), prefill_tokens=8000.0, prefill_prompts=4.0) == pytest.approx(1.516, abs=0.01)
    assert _tbo_gain(Parallelism(1, 72, 72), decode_batch=256.0, decode_context=2000.0) == pytest.approx(1.425, abs=0.01)
    fitted = P.model_copy(update={"tbo_overlap": 0.75})

    def gain(par: Parallelism, **kw: float) -> float:
        on = ep_iteration_time(ep_replica(DS, H100, par, "fp8", "bf16", fitted), EFF, **kw)
        off = ep_iteration_time(ep_replica(DS, H100, par, "fp8", "bf16", fitted.model_copy(update={"tbo_overlap": 0.0})), EFF, **kw)
        return float(off.total_s) / float(on.total_s)
    assert 1.25 <= gain(Parallelism(1, 32, 32), prefill_tokens=8000.0, prefill_prompts=4.0) <= 1.36
    assert gain(Parallelism(1, 72, 72), decode_batch=256.0, decode_context=2000.0) == pytest.approx(1.255, abs=0.03)


def test_acceptance_wide_ep_beats_best_tp_only_by_2x_in_output_throughput() -> None:
    """The wide-EP decode replica against the best TP-only decode on the same H100s (TP8 does not fit 671 GB of fp8
    weights; TP16 and TP32 span nodes, as the blog's TP16 baseline did): >= 2x output tokens/s per GPU."""
    ep = _decode_tokens_per_s_per_node() / 8
    best_tp = 0.0
    for tp in (8, 16, 32):
        op = operating_point(DS, H100, tp, role="decode", weight_precision="fp8", kv_precision="bf16", input_tokens=ISL,
                             output_tokens=OSL, ttft_target_ms=None, tpot_target_ms=None, engine="sglang")
        if op.feasible:
            best_tp = max(best_tp, OSL / op.instance_seconds_per_request / tp)
    assert best_tp > 0
    assert ep >= 2.0 * best_tp


def test_unified_points_are_infeasible_under_expert_parallelism() -> None:
    op = _point(Parallelism(1, 32, 32), "unified")
    assert not op.feasible and "separate pools" in op.reason


# --- calibration hook ---------------------------------------------------------------------------------------
def _rows() -> list[dict[str, object]]:
    base = {"model": "deepseek-v3", "device": "h100-sxm", "tp": 1, "precision": "fp8", "kv_precision": "bf16", "engine": "sglang"}
    return [{**base, "ep": 72, "dp": 72, "role": "decode", "isl": 2000, "osl": 100, "batch_per_rank": b, "step_ms": 0.0} for b in (64, 128, 256)] + \
           [{**base, "ep": 32, "dp": 32, "role": "prefill", "isl": 2000, "osl": 1, "batch_per_rank": m, "step_ms": 0.0} for m in (2, 8)]


def test_fit_recovers_balance_and_all_to_all_efficiency_from_measured_rows() -> None:
    truth = P.model_copy(update={"ep_imbalance": 1.35, "a2a_efficiency": 0.6})
    rows = _rows()
    for r, t in zip(rows, predict_moe_rows(rows, CAT.models, CAT.devices, truth, None), strict=True):
        r["step_ms"] = float(t)
    fitted = fit_moe_calibration(rows, CAT.models, CAT.devices, None)
    assert fitted.ep_imbalance == pytest.approx(1.35, rel=0.02)
    assert fitted.a2a_efficiency == pytest.approx(0.6, rel=0.02)
    assert fitted.source.startswith("fit: 5 expert-parallel rows")
    assert fit_moe_calibration([], CAT.models, CAT.devices, None) == P


def test_calibration_file_carries_moe_parameters(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "engines": {"sglang": {"eta_f": 0.6, "eta_b": 0.9, "step_overhead_ms": 0.0,
                                                                       "layer_overhead_us": 10.0}},
                                    "moe": {"ep_imbalance": 1.5, "tbo_overlap": 0.0}}), encoding="utf-8")
    cal = Calibration.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    assert cal.moe.ep_imbalance == 1.5 and cal.moe.redundant_experts is None and cal.moe.redundant_for(256) == 32
    slow = ep_operating_point(DS, H100, Parallelism(1, 72, 72), role="decode", weight_precision="fp8", kv_precision="bf16",
                              input_tokens=ISL, output_tokens=OSL, ttft_target_ms=None, tpot_target_ms=None, engine="sglang",
                              calibration=cal)
    assert slow.feasible and slow.detail["tbo"] == 0.0
    assert slow.tpot_ms > _point(Parallelism(1, 72, 72), "decode").tpot_ms
    assert Calibration.model_validate({"name": "x", "engines": {}}).moe == MoECalibration()


# --- estimate CLI and capacity rows --------------------------------------------------------------------------
def test_estimate_cli_prints_the_all_to_all_time() -> None:
    res = CliRunner().invoke(main, ["estimate", "--model", "deepseek-v3", "--device", "h100-sxm", "--ep", "32", "--dp", "32",
                                    "--precision", "fp8", "--isl", "2000", "--osl", "100", "--concurrency", "4096", "--engine", "sglang"])
    assert res.exit_code == 0, res.output
    assert "tp1·ep32·dp32, 4 node(s)" in res.output and "All-to-all (dispatch + combine" in res.output
    bad = CliRunner().invoke(main, ["estimate", "--model", "deepseek-v3", "--device", "h100-sxm", "--ep", "32", "--dp", "5",
                                    "--isl", "2000", "--osl", "100", "--concurrency", "64"])
    assert bad.exit_code == 2 and "divides 32" in bad.output and "Traceback" not in bad.output
    dense = CliRunner().invoke(main, ["estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--ep", "8",
                                      "--isl", "100", "--osl", "100", "--concurrency", "8"])
    assert dense.exit_code == 2 and "dense" in dense.output


def test_missing_nic_figure_uses_the_named_default_and_says_so() -> None:
    dev = H100.model_copy(update={"nic_bw_gb_per_s": None})
    res = estimate_expert_parallel(DS, dev, ep=16, dp=16, tp=None, precision="fp8", kv_precision="bf16", isl=1000, osl=100,
                                   concurrency=512, engine="sglang")
    assert res["nic_defaulted"] and res["nic_gb_per_s"] == 25.0
    with pytest.raises(InputError, match="one 1100-token sequence"):
        estimate_expert_parallel(CAT.models["qwen3-235b-a22b"], CAT.devices["l4"], ep=8, dp=8, tp=None, precision="bf16",
                                 kv_precision="bf16", isl=1000, osl=100, concurrency=8)


def test_config_names_give_devices_per_instance() -> None:
    assert config_devices("h100-sxm/tp4") == ("h100-sxm", 4)
    assert config_devices("h100-sxm/tp1-ep72-dp72") == ("h100-sxm", 72)
    assert config_devices("h100-sxm/tp2-ep32-dp16") == ("h100-sxm", 32)
    assert config_devices("weird")[1] == -1


def _instance(tmp_path: Path, model: str, catalog: dict[str, object]) -> Path:
    data = {"name": "t", "services": {"s": {"model": model, "weight_precision": "fp8", "engine": "sglang",
                                            "slo": {"ttft": {"quantile": 0.99, "target_ms": 10000}, "itl": {"quantile": 0.99, "target_ms": 150}},
                                            "traffic": {"rate_per_s": 20, "interarrival_cv": 1.0,
                                                        "lengths": [{"input_tokens": 2000, "output_tokens": 200, "weight": 1.0}]}}},
            "catalog": {"devices": ["h100-sxm"], **catalog}}
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_capacity_tables_get_ep_rows_only_for_moe_services(tmp_path: Path) -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    dense = build_capacity_tables(load_instance(_instance(tmp_path, "llama-3.1-70b", {"tp_degrees": [4, 8]})))
    assert list(dense.configs["parallelism"]) == ["tp4", "tp8"] and list(dense.configs["tp"]) == [4, 8]
    moe = build_capacity_tables(load_instance(_instance(tmp_path, "deepseek-v3", {"tp_degrees": [8], "ep_degrees": [16, 72]})))
    cfg = moe.configs.set_index("config")
    assert list(cfg.index) == ["h100-sxm/tp8", "h100-sxm/tp1-ep16-dp16", "h100-sxm/tp1-ep72-dp72"]
    assert int(cfg.at["h100-sxm/tp1-ep72-dp72", "tp"]) == 72  # devices of one replica: rounding is in replicas
    pts = moe.points.set_index(["role", "config"])
    assert not bool(pts.at[("unified", "h100-sxm/tp1-ep72-dp72"), "feasible"])
    assert bool(pts.at[("decode", "h100-sxm/tp1-ep72-dp72"), "feasible"])
    # the replica's KV capacity: dp ranks of one GPU's free memory each
    rep = ep_replica(DS, H100, Parallelism(1, 72, 72), "fp8", "bf16", P)
    assert float(pts.at[("decode", "h100-sxm/tp1-ep72-dp72"), "kv_capacity_bytes"]) == pytest.approx(72 * kv_capacity_per_rank_bytes(rep))
    assert any("expert-parallel candidates" in n for n in moe.meta["notes"])  # type: ignore[attr-defined]
    none = build_capacity_tables(load_instance(_instance(tmp_path, "deepseek-v3", {"tp_degrees": [8], "ep_degrees": []})))
    assert list(none.configs["parallelism"]) == ["tp8"]
    auto = build_capacity_tables(load_instance(_instance(tmp_path, "deepseek-v3", {"tp_degrees": [8]})))  # MoE: default EP sizes
    assert list(auto.configs["parallelism"])[1:] == [f"tp1·ep{e}·dp{e}" for e in (8, 16, 32, 64, 72, 144)]
    assert math.isfinite(float(np.nanmin(moe.points["instance_seconds_per_request"])))


def test_measured_capacity_names_expert_parallel_configs(tmp_path: Path) -> None:
    """A measured capacity file carries an EP replica's parallelism; reading the planner's own frame back gives
    the same per-request replica time, and a tp column that is not the replica's GPUs is bad input."""
    from planner.capacity import (
        build_capacity_tables,
        measured_capacity_frame,
        read_measured_capacity,
    )
    from planner.instance import load_instance

    tables = build_capacity_tables(load_instance(_instance(tmp_path, "deepseek-v3", {"tp_degrees": [8], "ep_degrees": [72]})))
    frame = measured_capacity_frame(tables)
    ep_rows = frame[frame["parallelism"] == "tp1-ep72-dp72"]
    assert len(ep_rows) == 2 and set(ep_rows["tp"]) == {72}
    path = tmp_path / "m.csv"
    frame.to_csv(path, index=False)
    back = read_measured_capacity(path, tables).points
    got = back[(back["config"] == "h100-sxm/tp1-ep72-dp72") & (back["role"] == "decode")]
    want = tables.points[(tables.points["config"] == "h100-sxm/tp1-ep72-dp72") & (tables.points["role"] == "decode")]
    assert float(got["instance_seconds_per_request"].iloc[0]) == pytest.approx(float(want["instance_seconds_per_request"].iloc[0]))
    bad = frame.copy()
    bad.loc[bad["parallelism"] == "tp1-ep72-dp72", "tp"] = 8
    bad.to_csv(path, index=False)
    with pytest.raises(InputError, match="not the 72 GPUs"):
        read_measured_capacity(path, tables)


def test_calibrate_moe_cli_fits_and_writes_the_moe_block(tmp_path: Path) -> None:
    import pandas as pd

    truth = P.model_copy(update={"ep_imbalance": 1.3, "a2a_efficiency": 0.7})
    rows = _rows()
    for r, t in zip(rows, predict_moe_rows(rows, CAT.models, CAT.devices, truth, None), strict=True):
        r["step_ms"] = float(t)
    csv = tmp_path / "ep.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    out = tmp_path / "c.yaml"
    res = CliRunner().invoke(main, ["calibrate-moe", str(csv), "--calibration", "none", "-o", str(out)])
    assert res.exit_code == 0, res.output
    cal = Calibration.model_validate(yaml.safe_load(out.read_text(encoding="utf-8")))
    assert cal.moe.ep_imbalance == pytest.approx(1.3, rel=0.02) and cal.moe.a2a_efficiency == pytest.approx(0.7, rel=0.02)
    pd.DataFrame([{**rows[0], "ep": 12, "dp": 12}]).to_csv(csv, index=False)
    bad = CliRunner().invoke(main, ["calibrate-moe", str(csv), "-o", str(out)])
    assert bad.exit_code == 2 and "row 2" in bad.output and "Traceback" not in bad.output
    for hostile in ({"ep": 1e308}, {"ep": 2.5}):  # one short line, never the 300-digit replica or a truncated one
        pd.DataFrame([{**rows[0], **hostile}]).to_csv(csv, index=False)
        bad = CliRunner().invoke(main, ["calibrate-moe", str(csv), "-o", str(out)])
        assert bad.exit_code == 2 and "whole numbers from 1 to 4096" in bad.output and len(bad.output.splitlines()) == 1


def test_expert_gemms_pad_only_the_experts_a_step_touches() -> None:
    """Issue 25: an expert slot no token is routed to runs no GEMM, so the small-M penalty
    (``M_half`` rows per GEMM) is paid on the ``e (1 - exp(-rows/e))`` touched slots only, as the
    weight reads are. Llama-4 Maverick fp8 on 8 H100 (16 slots per GPU) at batch 8: ~1.2 rows per
    GPU touch ~1.1 slots; padding all 16 would cost ~14x the compute."""
    from planner.perf.moe import _expert_s
    from planner.perf.roofline import GEMM_M_HALF_TOKENS

    mav = CAT.models["llama-4-maverick-17b-128e"]
    rep = ep_replica(mav, H100, Parallelism(8, 8, 1), "fp8", "bf16", MoECalibration(redundant_experts=0, tbo_overlap=0.0))
    e = float(rep.experts_per_gpu)
    assert e == 16.0
    inst = rep.rank
    m_half = GEMM_M_HALF_TOKENS * float(inst.flops_peak) / float(inst.attn_flops_peak)
    for tokens in (8.0, 128.0, 4096.0):
        rows = rep.params.ep_imbalance * tokens * rep.experts_per_token / rep.par.tp
        touched = 1.0 - math.exp(-rows / e)
        _t, c, m = _expert_s(rep, EFF, np.asarray(tokens))
        hand = 2.0 * rep.expert_params * rep.layers_moe * (rows + e * touched * m_half) / (float(inst.flops_peak) * EFF.eta_f)
        assert float(c) == pytest.approx(hand, rel=1e-12)
        all_slots = 2.0 * rep.expert_params * rep.layers_moe * (rows + e * m_half) / (float(inst.flops_peak) * EFF.eta_f)
        assert float(c) <= all_slots  # equal once every slot is touched (batch 4096)
        if tokens == 8.0:
            assert float(c) < 0.2 * all_slots
