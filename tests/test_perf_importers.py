"""Users' benchmark results as input (planner/perf/importers): name mapping of systems and
checkpoints, one fixture per tool format read back to the measured row it carries, auto-detection,
open-loop runs set aside, exit-2 errors naming the missing option, and where `calibrate` writes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.perf.importers import detect_format
from planner.perf.names import device_id, model_ref

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "tests" / "data" / "benchmarks"
FIXTURES = ROOT / "tests" / "data" / "perf_catalog"
SILICON = ROOT / "models" / "measured" / "silicon_h100_dense.csv"
ENV = {"PLANNER_MODELS_DIR": str(FIXTURES)}


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), env=env or ENV)
    return res.exit_code, res.stdout, res.stderr


# --------------------------------------------------------------------------- names -> catalog ids

CATALOG_IDS = frozenset({"h100-sxm", "h200-sxm", "b200", "gb200", "b300", "gb300", "a100-sxm-80gb", "l40s", "mi300x", "mi355x", "rtx-pro-6000"})


@pytest.mark.parametrize(("name", "expected"), [
    ("h100_sxm", "h100-sxm"), ("h200_sxm", "h200-sxm"), ("b200_sxm", "b200"), ("gb200_sxm", "gb200"),
    ("b300_sxm", "b300"), ("gb300_sxm", "gb300"), ("a100_sxm", "a100-sxm-80gb"), ("l40s", "l40s"), ("mi300x", "mi300x"),
    ("mi355x", "mi355x"), ("rtx_pro_6000_server", "rtx-pro-6000"), ("rtxpro6000_blackwell_server", "rtx-pro-6000"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("B300-SXM-270GB", "b300"), ("h20", None), ("h800_sxm", None), ("gh200", None),
])  # fmt: skip
def test_system_names_map_to_catalog_ids(name: str, expected: str | None) -> None:
    assert device_id(name, CATALOG_IDS) == expected


HF = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "Qwen/Qwen3-32B": "qwen3-32b",
      "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b", "openai/gpt-oss-120b": "gpt-oss-120b"}


@pytest.mark.parametrize(("name", "model", "weights", "kv"), [
    ("Qwen/Qwen3-32B-NVFP4", "qwen3-32b", "fp4", None),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", "fp8", None),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b", "fp8", None),
    ("amd/Llama-3.1-70B-Instruct-FP8-KV", "llama-3.1-70b", "fp8", "fp8"),
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "llama-3.1-8b", "int8", None),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b", "int4", None),
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", "fp8", None),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b", None, None),
    ("openai/gpt-oss-120b", "gpt-oss-120b", None, None),
    ("qwen3-32b", "qwen3-32b", None, None),
    ("deepseek-ai/DeepSeek-R1", None, None, None),
])  # fmt: skip
def test_checkpoint_names_map_to_base_model_and_precision(name: str, model: str | None, weights: str | None, kv: str | None) -> None:
    ref = model_ref(name, HF)
    assert (ref.model_id, ref.weight_precision, ref.kv_precision) == (model, weights, kv)


SILICON_HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,batch_size,"
                  "tp_size,silicon_ttft_ms,silicon_tpot_ms\n")


def test_convert_maps_systems_and_quantised_checkpoints_and_names_the_rest(tmp_path: Path) -> None:
    src = tmp_path / "silicon_new.csv"
    src.write_text(SILICON_HEADER +  # mapping test rows: the latencies are not used
                   "r1,x,trtllm,1.2,Qwen/Qwen3-32B-NVFP4,b200_sxm,,agg,1024,128,,8,1,100,10\n"
                   "r2,x,vllm,0.12,nvidia/Llama-3.1-8B-Instruct-FP8,h200_sxm,fp8,agg,1024,128,fp8,8,1,100,10\n"
                   "r3,x,sglang,0.5,deepseek-ai/DeepSeek-R1,h20_sxm,fp8,agg,1024,128,fp8_block,8,8,100,10\n"
                   "r4,x,vllm,0.12,Qwen/Qwen3-32B,gb200_sxm,,agg,1024,128,,8,2,100,10\n"
                   "r5,x,trtllm,1.2,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,int4_wo,8,2,100,10\n")
    out = tmp_path / "conv.csv"
    code, stdout, err = run("convert-measurements", str(src), "-o", str(out))
    assert code == 0 and "wrote 5 rows" in stdout
    rows = {r["id"]: r for r in _csv_rows(out)}
    assert (rows["r1"]["device"], rows["r1"]["model"], rows["r1"]["precision"]) == ("b200", "qwen3-32b", "fp4")
    assert (rows["r2"]["device"], rows["r2"]["model"], rows["r2"]["precision"], rows["r2"]["kv_precision"]) == ("h200-sxm", "llama-3.1-8b", "fp8", "bf16")
    # issue 25: TensorRT-LLM runs ModelOpt NVFP4 checkpoints with their FP8 KV cache (published default)
    assert (rows["r1"]["kv_precision"], rows["r1"]["kv_precision_source"]) == ("fp8", "default") and rows["r4"]["device"] == "gb200"
    # unmapped rows are kept under their own names, counted and named (PLANNER_MODELS_DIR adds the fixture
    # profiles to the shipped catalog, so gb200 maps); DeepSeek-R1 is DeepSeek-V3's architecture (issue 25)
    assert (rows["r3"]["device"], rows["r3"]["model"]) == ("h20_sxm", "deepseek-v3")
    assert "warning: 2 of 5 rows do not map to the catalog" in err and "precision 'int4_wo' (1 row)" in err
    assert "device 'h20_sxm' (1 row)" in err and "DeepSeek-R1" not in err and "gb200" not in err


def test_shipped_rows_and_the_h200_quantised_checkpoint_map() -> None:
    """The 199 H200 rows (same source and format as the shipped H100 file; see tests/data/benchmarks/SOURCE.md)
    include the quantised checkpoint nvidia/Llama-3.1-8B-Instruct-FP8: every row must map. The file itself is
    not in the repository, so the check runs on the H100 file plus that checkpoint's name."""
    from planner.catalog import load_catalog
    from planner.perf.importers import unmapped_lines
    from planner.perf.measurements import convert_silicon

    cat = load_catalog()
    rows = convert_silicon(SILICON, {m.hf_id: m.id for m in cat.models.values()}, device_ids=frozenset(cat.devices))
    assert len(rows) == 584 and unmapped_lines(rows, cat) == []
    assert model_ref("nvidia/Llama-3.1-8B-Instruct-FP8", {m.hf_id: m.id for m in cat.models.values()}).model_id == "llama-3.1-8b"


# --------------------------------------------------------------------------- one fixture per format


def _silicon_row(row_id: str) -> dict:
    from planner.perf.measurements import convert_silicon

    rows = [r for r in convert_silicon(SILICON, {m.hf_id: m.id for m in load_catalog().models.values()}) if r["id"] == row_id]
    assert len(rows) == 1
    return rows[0]


CASES = [
    ("vllm_bench_serve_closed.json", "vllm", ["--device", "h100-sxm", "--engine", "vllm"],
     "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x1024_c32_tp4_epnone_38"),
    ("sglang_bench_serving.jsonl", "sglang", ["--device", "h100-sxm", "--model", "Qwen/Qwen3-32B", "--tp", "2"],
     "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1"),
    ("profile_export_aiperf.json", "aiperf", ["--engine", "trtllm", "--tp", "1"],
     "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_trtllm_agg_4096x128_c8_tp1_epnone_7"),
    ("profile_export_genai_perf.json", "aiperf", ["--device", "h100-sxm", "--tp", "1"],
     "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1"),
    ("profile_export_aiperf.csv", "aiperf", ["--device", "h100-sxm", "--tp", "2", "--engine", "trtllm", "--model", "meta-llama/Llama-3.1-8B-Instruct",
                                             "--concurrency", "16"],
     "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c16_tp2_epnone_52"),
    ("profile_export_genai_perf.csv", "aiperf", ["--device", "h100-sxm", "--tp", "4", "--engine", "sglang", "--model", "qwen3-32b", "--concurrency", "64"],
     "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c64_tp4_epnone_5"),
    ("llmperf_summary.json", "llmperf", ["--device", "h100-sxm", "--tp", "4", "--engine", "vllm", "--precision", "fp8"],
     "2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep1_260"),
]


@pytest.mark.parametrize(("fixture", "fmt", "args", "row_id"), CASES, ids=[c[0] for c in CASES])
def test_each_format_reads_back_the_measured_row(tmp_path: Path, fixture: str, fmt: str, args: list[str], row_id: str) -> None:
    assert detect_format(BENCH / fixture) == fmt
    out = tmp_path / "rows.csv"
    code, _, err = run("convert-measurements", str(BENCH / fixture), *args, "-o", str(out))
    assert code == 0, err
    got = [r for r in _csv_rows(out) if r["load"] == "closed"]
    assert len(got) == 1
    row, want = got[0], _silicon_row(row_id)
    for key in ("device", "model", "engine", "precision", "kv_precision", "mode"):
        assert row[key] == str(want[key]), key
    for key in ("tp", "concurrency", "isl", "osl"):
        assert int(row[key]) == want[key], key
    # means as written by the tool (the CSV exports round to 2 decimals)
    assert float(row["ttft_ms"]) == pytest.approx(want["ttft_ms"], rel=2e-4)
    assert float(row["tpot_ms"]) == pytest.approx(want["tpot_ms"], rel=1e-3)


def test_llmperf_inter_token_latency_is_not_taken_as_tpot(tmp_path: Path) -> None:
    data = json.loads((BENCH / "llmperf_summary.json").read_text())
    out = tmp_path / "rows.csv"
    code, _, _ = run("convert-measurements", str(BENCH / "llmperf_summary.json"), "--device", "h100-sxm", "--tp", "4", "--engine", "vllm", "-o", str(out))
    assert code == 0
    tpot = float(_csv_rows(out)[0]["tpot_ms"])
    itl_ms = 1e3 * data["results_inter_token_latency_s_mean"]  # e2e / osl: includes the first token
    assert tpot == pytest.approx(1e3 * (data["results_end_to_end_latency_s_mean"] - data["results_ttft_s_mean"]) / (data["results_number_output_tokens_mean"] - 1))
    assert abs(tpot / itl_ms - 1) > 0.005


def test_validate_perf_predicts_imported_runs_like_the_silicon_rows(tmp_path: Path) -> None:
    code, out, _ = run("validate-perf", str(BENCH / "vllm_bench_serve_closed.json"), "--device", "h100-sxm", "--engine", "vllm", "--json")
    assert code == 0
    imported = json.loads(out)
    # the same run as a silicon row, without the silicon file's harness (the closed-loop replay parameters are
    # fitted per harness: a user's own benchmark tool is another harness)
    conv = tmp_path / "silicon.csv"
    code, _, _ = run("convert-measurements", str(SILICON), "-o", str(conv))
    assert code == 0
    rows = [r for r in _csv_rows(conv) if r["id"] == "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x1024_c32_tp4_epnone_38"]
    assert len(rows) == 1
    rows[0]["harness"] = ""
    one = tmp_path / "one.csv"
    with one.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerow(rows[0])
    code, out, _ = run("validate-perf", str(one), "--json")
    assert code == 0
    want = json.loads(out)["rows"][0]
    assert imported["rows"][0]["pred_ttft_ms"] == pytest.approx(want["pred_ttft_ms"])
    assert imported["rows"][0]["pred_tpot_ms"] == pytest.approx(want["pred_tpot_ms"])
    assert imported["summary"]["inputs"]["formats"] == {str(BENCH / "vllm_bench_serve_closed.json"): "vllm"}


def test_open_loop_runs_are_set_aside_and_counted() -> None:
    code, out, err = run("validate-perf", str(BENCH / "vllm_bench_serve_closed.json"), str(BENCH / "vllm_bench_serve_open.json"),
                         str(BENCH / "sglang_bench_serving.jsonl"), "--device", "h100-sxm", "--engine", "vllm", "--model", "qwen3-32b", "--tp", "4", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["summary"]["rows"] == 2 and r["summary"]["inputs"]["set_aside"] == {"open": 2}
    assert "note: 2 rows set aside, open-loop runs (request rate)" in err


@pytest.mark.parametrize(("fixture", "args", "needle"), [
    ("vllm_bench_serve_closed.json", ["--engine", "vllm"], "does not say the device (fix: give --device"),
    ("vllm_bench_serve_closed.json", ["--device", "h100-sxm"], "does not say the engine (fix: give --engine"),
    ("sglang_bench_serving.jsonl", ["--device", "h100-sxm", "--tp", "2"], "does not say the model (fix: give --model"),
    ("llmperf_summary.json", ["--device", "h100-sxm", "--engine", "vllm"], "does not say the tensor-parallel degree (fix: give --tp"),
    ("profile_export_aiperf.csv", ["--device", "h100-sxm", "--engine", "trtllm", "--tp", "1", "--model", "qwen3-32b"], "give --concurrency"),
    ("vllm_bench_serve_closed.json", ["--device", "h200", "--engine", "vllm", "--model", "nope-1b"], "unknown model 'nope-1b'"),
    ("vllm_bench_serve_closed.json", ["--device", "tpu-v9", "--engine", "vllm"], "unknown device 'tpu-v9'"),
])  # fmt: skip
def test_missing_or_wrong_context_is_exit_2(fixture: str, args: list[str], needle: str) -> None:
    code, _, err = run("validate-perf", str(BENCH / fixture), *args)
    assert code == 2 and needle in err and "Traceback" not in err


def test_unknown_json_is_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    code, _, err = run("validate-perf", str(p))
    assert code == 2 and "none of the known benchmark results" in err
    p.write_text('[{"ttft_s": 0.1, "inter_token_latency_s": 0.01, "end_to_end_latency_s": 1.0}]')  # LLMPerf individual_responses.json
    code, _, err = run("validate-perf", str(p))
    assert code == 2 and "give its *_summary.json" in err


# --------------------------------------------------------------------------- calibration files belong to the user


def _small_measurements(tmp_path: Path) -> Path:
    """12 shipped H100 rows (qwen3-32b on vLLM) in our format: enough for a quick (pooled) fit."""
    from planner.perf.measurements import convert_silicon, write_measurements

    rows = [r for r in convert_silicon(SILICON, {"Qwen/Qwen3-32B": "qwen3-32b"}) if r["engine"] == "vllm" and r["model"] == "qwen3-32b"][:12]
    path = tmp_path / "mine.csv"
    write_measurements(rows, path)
    return path


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_calibrate_never_touches_models_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    models = tmp_path / "models"
    shutil.copytree(FIXTURES, models)
    before = _tree(models)
    data = _small_measurements(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    env = {"PLANNER_MODELS_DIR": str(models)}
    code, out, err = run("calibrate", str(data), env=env)
    assert code == 0, err
    assert (work / "mine.calibration.yaml").exists() and (work / "mine.measurements.csv").exists()
    assert _tree(models) == before
    # next to an instance, with the line to name it there
    inst = tmp_path / "plans" / "site.yaml"
    inst.parent.mkdir()
    inst.write_text("name: x\n")
    code, out, err = run("calibrate", str(data), "--instance", str(inst), "--name", "site-h100", env=env)
    assert code == 0, err
    assert (inst.parent / "site-h100.calibration.yaml").exists() and "calibration: site-h100.calibration.yaml" in out
    assert _tree(models) == before
    # only when asked
    code, out, err = run("calibrate", str(data), "--into-catalog", "--name", "mine", env=env)
    assert code == 0, err
    assert (models / "calibration" / "mine.yaml").exists()
    code, _, err = run("calibrate", str(data), "--into-catalog", "-o", str(tmp_path / "a.yaml"), env=env)
    assert code == 2 and "only one of" in err


def test_instance_names_its_calibration_and_the_tables_record_it(tmp_path: Path) -> None:
    from planner.capacity import build_capacity_tables
    from planner.errors import InputError
    from planner.instance import load_instance
    from planner.perf.calibration import calibration_dir, file_sha256

    shipped = calibration_dir() / "h100_dense.yaml"
    cal = yaml.safe_load(shipped.read_text())
    for eng in cal["engines"].values():
        eng["eta_b"] = round(eng["eta_b"] / 2, 6)  # half the achieved bandwidth: decode must get slower
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump(cal))
    inst = yaml.safe_load((ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml").read_text())
    (tmp_path / "default.yaml").write_text(yaml.safe_dump(inst))
    inst["calibration"] = "slow.yaml"
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(inst))
    base = build_capacity_tables(load_instance(tmp_path / "default.yaml"))
    own = build_capacity_tables(load_instance(tmp_path / "own.yaml"))
    assert base.meta["calibration"] == {"path": "models/calibration/h100_dense.yaml (shipped)", "sha256": file_sha256(shipped)}
    assert own.meta["calibration"] == {"path": "slow.yaml", "sha256": file_sha256(tmp_path / "slow.yaml")}
    assert f"performance calibration: slow.yaml (sha256 {file_sha256(tmp_path / 'slow.yaml')})" in own.meta["notes"]
    key = ["service", "bucket", "role", "config"]
    b = base.points.set_index(key)
    o = own.points.set_index(key).loc[b.index]
    decode = (b["role"] if "role" in b.columns else b.index.get_level_values("role")) == "decode"
    feasible = b["feasible"].to_numpy() & o["feasible"].to_numpy() & decode
    cost_own, cost_base = o["instance_seconds_per_request"].to_numpy()[feasible], b["instance_seconds_per_request"].to_numpy()[feasible]
    assert feasible.any() and (cost_own > cost_base).all()
    inst["calibration"] = "missing.yaml"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(inst))
    with pytest.raises(InputError, match="calibration: file 'missing.yaml' does not exist"):
        load_instance(tmp_path / "bad.yaml")


def test_vllm_append_result_file_is_read_line_by_line(tmp_path: Path) -> None:
    """`vllm bench serve --append-result` writes one JSON object per line into the same file (serve.py)."""
    closed = json.loads((BENCH / "vllm_bench_serve_closed.json").read_text())
    second = {**closed, "max_concurrency": 64, "tp": "8"}
    p = tmp_path / "appended.json"
    p.write_text(json.dumps(closed) + "\n" + json.dumps(second))
    assert detect_format(p) == "vllm"
    out = tmp_path / "rows.csv"
    code, _, err = run("convert-measurements", str(p), "--device", "h100-sxm", "--engine", "vllm", "-o", str(out))
    assert code == 0, err
    rows = _csv_rows(out)
    assert [(r["id"], r["tp"], r["concurrency"]) for r in rows] == [("appended.json#0", "4", "32"), ("appended.json#1", "8", "64")]
