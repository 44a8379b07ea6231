"""Encode phase of multimodal requests (issue 26 item 3): the vision tower's size and FLOPs from its
config, encode operating points, and hand-solved micro-instances where a separate encode pool wins
and where it does not (the MIP chooses, :mod:`planner.optimize.model` ``encode_host``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from micro_tables import micro_tables

from planner.optimize import SolveSettings, solve_tables
from planner.perf.encoder import DEFAULT_ENCODER_ETA_F, LAYER_OVERHEAD_S, encode_point, load_encoder
from planner.schema.capacity import CapacityTables

QWEN = "Qwen--Qwen2.5-VL-7B-Instruct"


def test_qwen25_vl_tower_size_matches_the_published_675m() -> None:
    enc = load_encoder(QWEN)
    # Qwen2.5-VL technical report (arXiv:2502.13923) Table 1: ViT 675M; derived from the config's vision_config
    assert enc.params / 1e6 == pytest.approx(675, rel=0.01)
    assert (enc.hidden_size, enc.depth, enc.spatial_merge_size, enc.out_hidden_size) == (1280, 32, 2, 3584)
    # FLOPs per LLM token: 4 patches x (2 x GEMM params + attention) + 2 x merger params, by hand
    h, n = 1280, 1196 * 4
    blk = 4 * h * h + 3 * h * 3420
    emb = 3 * 2 * 14 * 14 * h
    mrg = (4 * h) ** 2 + 4 * h * 3584
    per_patch = 2 * (32 * blk + emb) + 4 * h * (4 * n + 28 * 64)
    assert enc.flops_per_token(1196) == pytest.approx(4 * per_patch + 2 * mrg)


def test_encode_time_is_the_roofline_by_hand() -> None:
    from planner.catalog import load_catalog

    enc = load_encoder(QWEN)
    h100 = load_catalog().devices["h100-sxm"]
    ep = encode_point(enc, h100, 1, tokens=1196.0, items=1.0)
    t = 1196 * enc.flops_per_token(1196) / (989.4e12 * DEFAULT_ENCODER_ETA_F) + 32 * LAYER_OVERHEAD_S
    assert ep.feasible and ep.bound == "compute"
    assert ep.encode_s == pytest.approx(t)
    assert 0.010 < ep.encode_s < 0.020  # ~6.7 TFLOP per 1,196-token image: ~15 ms on one H100
    assert ep.embedding_bytes == pytest.approx(1196 * 3584 * 2)
    two = encode_point(enc, h100, 2, tokens=1196.0, items=1.0)
    assert two.encode_s < ep.encode_s  # tp devices share the FLOPs
    cpu = load_catalog().devices["xeon6-6980p"]
    assert not encode_point(enc, cpu, 1, tokens=1196.0, items=1.0).feasible  # no dense FLOP/s figure for the CPU


def _encode_micro(*, ops_pool: float) -> CapacityTables:
    """micro_tables (one unified g/tp1 pool: 10 req/s peak, tau 1 s, cap 0.5 -> 20 instances at $2/h) plus
    an encode phase: inline on g (tau 0.5 s, cap 0.5 -> +10 g) or a separate pool on a cheap device c
    (tau 1 s, cap 0.5 -> 20 c at $0.5/h, NIC $40 a month each, embeddings 1 MB per request at $0/GB)."""
    t = micro_tables(ops_pool=ops_pool)
    demand = t.demand.assign(encode_tokens_mean=1000.0, encode_items_mean=1.0)
    base = t.points.iloc[0].to_dict()
    enc = {**base, "kv_bytes_per_request": 0.0, "max_batch": 1, "energy_j_per_request": 0.0, "ttft_ms": 100.0, "tpot_ms": 0.0}
    points = pd.concat([t.points, pd.DataFrame([
        {**enc, "role": "encode_unified", "instance_seconds_per_request": 0.5},
        {**enc, "role": "encode", "config": "c/tp1", "device": "c", "instance_seconds_per_request": 1.0, "kv_transfer_bytes_per_request": 1e6},
    ])], ignore_index=True)
    cfg_c = {**t.configs.iloc[0].to_dict(), "config": "c/tp1", "device": "c", "equipment_usd_per_device_hour": 0.5}
    configs = pd.concat([t.configs, pd.DataFrame([cfg_c])], ignore_index=True)
    return CapacityTables(demand=demand, points=points, configs=configs, costs=t.costs)


def _solve(tables: CapacityTables):  # noqa: ANN202
    res = solve_tables(tables, SolveSettings(architectures=("shared",), shared_single_device_type=False, mip_gap=0.0, confidence="off"))
    return res.result.architectures["shared"]


def test_separate_encode_pool_wins_when_its_device_is_cheaper() -> None:
    plan = _solve(_encode_micro(ops_pool=0.0))
    pools = {(p.role, p.device): p.instances for p in plan.pools if p.instances > 0}
    # inline: 30 g x ($2 x 730 + $15) = $44,250; separate: 20 g x $1,475 + 20 c x ($0.5 x 730 + $15 + $40 NIC) = $37,900
    assert pools == {("unified", "g"): 20, ("encode", "c"): 20}
    assert plan.costs.total_usd_per_month == pytest.approx(20 * 1475 + 20 * (365 + 15 + 40))
    assert plan.costs.network_nic_usd_per_month == pytest.approx(20 * 40)
    enc = [r for r in plan.routing if r.role.startswith("encode")]
    assert [(r.role, r.share) for r in enc] == [("encode", pytest.approx(1.0))]


def test_inline_encode_wins_when_a_pool_costs_more_than_the_saving() -> None:
    plan = _solve(_encode_micro(ops_pool=10_000.0))
    pools = {(p.role, p.device): p.instances for p in plan.pools if p.instances > 0}
    # inline: $44,250 + one pool $10,000 = $54,250; separate: $37,900 + two pools $20,000 = $57,900
    assert pools == {("unified", "g"): 30}
    assert plan.costs.total_usd_per_month == pytest.approx(30 * 1475 + 10_000)
    enc = [r for r in plan.routing if r.role.startswith("encode")]
    assert [(r.role, r.share) for r in enc] == [("encode_unified", pytest.approx(1.0))]
    p = next(p for p in plan.pools if p.instances > 0)
    assert p.busy_instances_peak == pytest.approx(10 * 1.5)  # LLM 10 x 1 s + encode 10 x 0.5 s ride in the one pool


def test_text_only_tables_build_the_same_model() -> None:
    from planner.optimize.model import build_model
    from planner.optimize.prepare import prepare

    built = build_model(prepare(micro_tables()))
    assert len(built.model.encode_host) == 0
    assert sorted(built.route_keys) == [(0, "decode"), (0, "prefill")]
    assert math.isclose(_solve(micro_tables()).costs.total_usd_per_month, 20 * 1475)


# --- workload: per-modality tokens -----------------------------------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
MM_TRACE = ROOT / "instances" / "traces" / "servegen_multimodal_mm-image_chunk-5-trace.csv"


def test_servegen_multimodal_image_tokens_match_source_md() -> None:
    from planner.workload import characterize_file

    c = characterize_file(MM_TRACE)["default"]
    img = c.modalities["image"]
    # SOURCE.md: image_tokens mean 1172.7, p50/p90/p99/max 1196; image_count mean 1.0; no audio or video
    assert round(img.tokens.mean, 1) == 1172.7 and img.tokens.p50 == img.tokens.max == 1196.0
    assert img.items_per_request == pytest.approx(1.0)
    assert set(c.modalities) == {"image"}
    assert c.to_profile().modalities["image"] == img


def test_generic_log_modality_columns(tmp_path) -> None:  # noqa: ANN001
    from planner.workload import characterize_file

    path = tmp_path / "mm.csv"
    pd.DataFrame({"t": [0, 1, 2, 3], "i": [100, 1300, 200, 1400], "o": [10, 20, 30, 40], "img": [0, 1196, None, 1196],
                  "n": [0, 1, 0, 2]}).to_csv(path, index=False)
    c = characterize_file(path, "generic", {"time": "t", "input": "i", "output": "o", "image_tokens": "img", "image_count": "n"})["default"]
    assert c.modalities["image"].tokens.mean == pytest.approx(598.0)  # missing = 0
    assert c.modalities["image"].items_per_request == pytest.approx(0.75)
    text = characterize_file(path, "generic", {"time": "t", "input": "i", "output": "o"})["default"]
    assert text.modalities == {}


# --- capacity table from the example instance ------------------------------------------------
def test_multimodal_instance_capacity_rows() -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    t = build_capacity_tables(load_instance(ROOT / "instances" / "multimodal-image.yaml"))
    assert (t.demand["encode_tokens_mean"].round(1) == 1172.7).all()
    enc = t.points[t.points["role"].str.startswith("encode")]
    assert set(enc["role"]) == {"encode", "encode_prefill", "encode_unified"}
    h100 = enc[(enc["config"] == "h100-sxm/tp1") & (enc["role"] == "encode")].iloc[0]
    assert h100["instance_seconds_per_request"] == pytest.approx(0.01551, rel=1e-3)  # 6.52 TFLOP at 50 % of 989 TFLOP/s + 2.3 ms
    assert h100["kv_transfer_bytes_per_request"] == pytest.approx(1172.66 * 3584 * 2, rel=1e-4)
    inline = enc[(enc["config"] == "h100-sxm/tp1") & (enc["role"] == "encode_prefill")].iloc[0]
    assert inline["kv_transfer_bytes_per_request"] == 0.0


def test_text_only_instance_has_no_encode_columns() -> None:
    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance

    t = build_capacity_tables(load_instance(ROOT / "instances" / "enterprise-chat.yaml"))
    assert "encode_tokens_mean" not in t.demand.columns
    assert not t.points["role"].str.startswith("encode").any()


def test_unknown_encoder_is_one_error_line(tmp_path) -> None:  # noqa: ANN001
    from click.testing import CliRunner

    from planner.cli import main

    text = (ROOT / "instances" / "multimodal-image.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "mm.yaml"
    bad.write_text(text.replace("encoder: Qwen--Qwen2.5-VL-7B-Instruct", "encoder: no-such-tower")
                   .replace("traces/", str(ROOT / "instances" / "traces") + "/"), encoding="utf-8")
    res = CliRunner().invoke(main, ["solve", str(bad)])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    assert "encode.encoder" in res.output and "no-such-tower" in res.output


def test_separate_placement_plans_an_encode_pool_and_deploy_says_it_is_not_emitted(tmp_path) -> None:  # noqa: ANN001
    from click.testing import CliRunner

    from planner.cli import main

    out = tmp_path / "plan"
    res = CliRunner().invoke(main, ["solve", str(ROOT / "instances" / "multimodal-image.yaml"), "--set", "services.vqa.encode.placement=separate",
                                    "--set", "options.architectures=[shared]", "--out", str(out)])
    assert res.exit_code == 0, res.output
    plan = __import__("json").loads((out / "plan.json").read_text(encoding="utf-8"))["architectures"]["shared"]
    assert {p["role"] for p in plan["pools"]} == {"encode", "unified"}
    assert {r["role"] for r in plan["routing"]} == {"encode", "unified"}
    assert "separate encode pool" in (out / "report.md").read_text(encoding="utf-8")
    # the peak simulation visits the encode pool first (planner.simulate.adapter: role encode), as busy as planned
    assert "encoded in the separate pool encode:" in plan["simulation"]["method"]
    sim_enc = [p for p in plan["simulation"]["pools"] if p["role"] == "encode"]
    assert len(sim_enc) == 1 and 0.85 < sim_enc[0]["utilization_sim"] / sim_enc[0]["utilization_plan"] < 1.1, sim_enc
    dep = CliRunner().invoke(main, ["deploy", str(out / "plan.json"), "--target", "vllm", "--out", str(tmp_path / "dep")])
    assert dep.exit_code == 0, dep.output
    assert "encode (vision-tower) pool" in (tmp_path / "dep" / "NOTES.md").read_text(encoding="utf-8")


def test_a_bucket_without_a_feasible_encode_point_is_diagnosed() -> None:
    t = _encode_micro(ops_pool=0.0)
    enc = t.points["role"].str.startswith("encode")
    pts = t.points.assign(feasible=~enc, reason=[("encode 2000 ms reaches the TTFT target 1000 ms" if e else "") for e in enc])
    res = solve_tables(CapacityTables(demand=t.demand, points=pts, configs=t.configs, costs=t.costs),
                       SolveSettings(architectures=("shared",), confidence="off")).result.architectures["shared"]
    assert not res.feasible
    (d,) = res.diagnosis
    assert d.constraint == "route" and "encode phase" in d.message and "2000 ms" in d.message


def test_the_peak_simulation_runs_the_inline_encode_the_plan_priced(solved_example) -> None:  # noqa: ANN001
    """multimodal-image's tower runs inline (15.5 ms per request in the pool that prefills it): the simulator adds it to
    each request's prompt work in that pool (planner.simulate.adapter.inline_encode_tokens), so the simulated pools are
    about as busy as the plan says — before, without it, the shared pool's simulated utilisation was 0.54 against 0.79
    planned and the prefill pool's 0.50 against 0.82."""
    from planner.simulate.adapter import plan_to_sim_by_bucket

    ex = solved_example("multimodal-image")
    plan = ex.plan()
    for arch in ("shared", "disaggregated"):
        a = plan.architectures[arch]
        assert {r.role for r in a.routing} >= {"encode_unified" if arch == "shared" else "encode_prefill"}
        sim = plan_to_sim_by_bucket(plan, arch)
        pool = {ps.name: ps for ps in sim.pools}
        for route in sim.routes:
            host = pool[route.unified or route.prefill or ""]
            per_token_s = (host.prefill_time_s(1000) / 1000 if host.role == "prefill" else
                           (host.iteration_time_s(0, host.chunk_tokens) - host.iteration_time_s(0, 0)) / host.chunk_tokens)
            assert route.encode_tokens * per_token_s == pytest.approx(0.0155, rel=0.01)  # the encode point's 15.5 ms
        assert a.simulation is not None and "inline encode simulated as prompt work" in a.simulation.method
        for p in a.simulation.pools:
            if p.role in ("unified", "prefill"):
                assert p.utilization_sim is not None and p.utilization_sim / p.utilization_plan > 0.85, p


def test_an_inline_encode_in_a_prefill_pool_is_one_job_with_its_prompt() -> None:
    """planner.inline_encode.fold_inline_encode, by hand: half a bucket's requests encode inline (20 ms) in the pool that
    prefills all of them (100 ms), so each request the host prefills carries 10 ms more; the encode row leaves the
    routing (the pool queues one arrival per request, not two), the busy time is kept, a unified host without lane
    columns (a measured point) is not folded."""
    from planner.inline_encode import FOLDED_COLUMN, fold_inline_encode
    from planner.pool_latency import pool_latency

    rows = pd.DataFrame({
        "service": ["s"] * 4, "bucket": ["b"] * 4, "pool": ["pf", "pf", "u", "u"],
        "role": ["prefill", "encode_prefill", "unified", "encode_unified"],
        "instance_seconds_per_request": [0.100, 0.020, 0.050, 0.020], "ttft_ms": [200.0, 20.0, 300.0, 20.0],
        "rate_peak_per_s": [5.0] * 4, "max_batch": [1, 1, 8, 1], "service_time_cv": [0.0] * 4, "interarrival_cv": [1.0] * 4,
        "ttft_quantile": [0.99] * 4})
    share = [1.0, 0.5, 1.0, 1.0]
    folded, x = fold_inline_encode(rows, share)
    assert folded["instance_seconds_per_request"].tolist() == pytest.approx([0.110, 0.020, 0.050, 0.020])
    assert folded["ttft_ms"].tolist() == pytest.approx([210.0, 20.0, 300.0, 20.0])
    assert x.tolist() == [1.0, 0.0, 1.0, 1.0] and bool(folded[FOLDED_COLUMN].all())
    again, x2 = fold_inline_encode(folded, x)
    assert again is folded and x2.tolist() == x.tolist()  # folded once, whoever hands the frame on
    plain = rows.assign(role=["prefill", "prefill", "unified", "encode_unified"])
    assert fold_inline_encode(plain, share)[0] is plain  # nothing to fold: the same frame
    pf = pool_latency(rows.iloc[:2], np.array(share[:2]), {"pf": 1}, 0).iloc[0]
    assert pf["arrival_rate_per_s"] == pytest.approx(5.0)  # one arrival per request (7.5 as two jobs)
    assert pf["utilization_peak"] == pytest.approx(5.0 * 0.110)  # the busy time of both rows
    assert pf["mean_service_s"] == pytest.approx(0.110)


def test_an_inline_encode_in_a_unified_pool_is_lane_work_of_its_prompt() -> None:
    """fold_inline_encode, by hand, for a unified host with lane columns: a 20 ms tower on a lane whose full chunk of
    512 tokens costs 40 ms beyond the 20 ms decode step is 20 · 512 / 40 = 256 prompt tokens of lane work (the
    simulator's inline_encode_tokens), so the host's prompt grows 1,000 → 1,256 tokens, its lane service by
    256 / 512 of the 60 ms iteration (+30 ms) and its TTFT by the tower's 20 ms; the encode row leaves the routing, and
    the host's own time per request (its decode, which fixes its output count) is kept."""
    from planner.inline_encode import fold_inline_encode

    rows = pd.DataFrame({
        "service": ["s", "s"], "bucket": ["b", "b"], "pool": ["u", "u"], "role": ["unified", "encode_unified"],
        "instance_seconds_per_request": [0.050, 0.020], "ttft_ms": [300.0, 20.0], "rate_peak_per_s": [5.0, 5.0],
        "max_batch": [8, 1], "prefill_tokens": [1000.0, 0.0], "prefill_tokens_rep": [1200.0, 0.0],
        "lane_service_ms": [1000 * 60.0 / 512, 0.0], "step_ms": [60.0, 60.0], "decode_only_step_ms": [20.0, 20.0],
        "prefill_chunk_tokens": [512.0, 512.0]})
    folded, x = fold_inline_encode(rows, [1.0, 1.0])
    assert x.tolist() == [1.0, 0.0]
    assert folded["prefill_tokens"].tolist() == pytest.approx([1256.0, 0.0])
    assert folded["prefill_tokens_rep"].tolist() == pytest.approx([1456.0, 0.0])
    assert folded["lane_service_ms"].tolist() == pytest.approx([1000 * 60.0 / 512 + 30.0, 0.0])
    assert folded["ttft_ms"].tolist() == pytest.approx([320.0, 20.0])
    assert folded["instance_seconds_per_request"].tolist() == pytest.approx([0.050, 0.020])


def test_the_disaggregated_multimodal_plan_is_predicted_as_simulated(solved_example) -> None:  # noqa: ANN001
    """multimodal-image's disaggregated plan encodes in its prefill pool: queued as one job per request, its TTFT p99 is
    predicted within 15 % of the peak simulation (517 against 536 ms; 418 with the tower as a second arrival, +28 %)."""
    plan = solved_example("multimodal-image").plan()
    sim = plan.architectures["disaggregated"].simulation
    assert sim is not None
    svc = sim.services[0]
    assert svc.ttft_disagreement is not None and abs(svc.ttft_disagreement) < 0.15, svc
