"""Issue 25, item 5: a KV type the measurement file does not record (planner/perf/kv_infer.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.perf.kv_infer import infer_kv, published_default_kv, queue_bound_ms
from planner.perf.measurements import read_measurements
from planner.perf.validate import validate

CAT = load_catalog()
ROW = {"id": "r", "device": "h100-sxm", "model": "llama-3.1-70b", "engine": "vllm", "precision": "fp8", "kv_precision": "bf16",
       "kv_precision_source": "default", "mode": "agg", "load": "closed", "tp": 2, "concurrency": 256, "isl": 1024, "osl": 1024,
       "ttft_ms": 300.0, "tpot_ms": 30.0}
"""70B fp8 on 2 H100: about 134 sequences of 1,536 mean tokens fit with bf16 KV, 268 with fp8."""


@pytest.mark.parametrize(("engine", "weights", "kv"), [("trtllm", "fp8", "fp8"), ("trtllm", "fp4", "fp8"), ("trtllm", "nvfp4", "fp8"),
                                                       ("trtllm", "bf16", "bf16"), ("vllm", "fp8", "bf16"), ("sglang", "fp4", "bf16")])
def test_published_default(engine: str, weights: str, kv: str) -> None:
    assert published_default_kv(engine, weights) == kv


def test_queue_bound() -> None:
    assert queue_bound_ms(10, 10, 100, 20.0) == 0.0
    assert queue_bound_ms(5, 10, 100, 20.0) == pytest.approx(2000.0)
    assert queue_bound_ms(0, 10, 100, 20.0) == float("inf")


def test_concurrency_that_bf16_cannot_hold_without_queueing_is_fp8() -> None:
    assert infer_kv(ROW, CAT) == ("fp8", "inferred")


def test_measured_queueing_keeps_the_default() -> None:
    assert infer_kv({**ROW, "ttft_ms": 20_000.0}, CAT) == ("bf16", "default")   # the wait is there: bf16 is possible
    assert infer_kv({**ROW, "concurrency": 64}, CAT) == ("bf16", "default")     # fits bf16


@pytest.mark.parametrize("change", [{"kv_precision_source": "stated"}, {"kv_precision_source": "checkpoint"}, {"ttft_ms": None},
                                    {"mode": "disagg"}, {"model": "no-such-model"}])
def test_stated_incomplete_or_unknown_rows_are_left_alone(change: dict) -> None:
    row = {**ROW, **change}
    assert infer_kv(row, CAT) == ("bf16", str(row["kv_precision_source"]))


def test_fp4_kv_only_for_tensorrt_llm_on_fp4_devices() -> None:
    # every type ruled out: the narrowest the engine and device allow
    tight = {**ROW, "concurrency": 4096, "ttft_ms": 1.0}
    assert infer_kv(tight, CAT) == ("fp8", "inferred")  # H100 has no fp4 tensor cores
    b200 = {**tight, "device": "b200", "engine": "trtllm", "precision": "fp4", "kv_precision": "fp8"}
    assert infer_kv(b200, CAT) == ("fp4", "inferred")


def _csv(tmp_path: Path, rows: list[dict]) -> Path:
    cols = ["id", "device", "model", "engine", "precision", "kv_precision", "tp", "concurrency", "isl", "osl", "ttft_ms", "tpot_ms"]
    path = tmp_path / "m.csv"
    path.write_text(",".join(cols) + "\n" + "".join(",".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def test_reader_marks_where_the_kv_type_came_from(tmp_path: Path) -> None:
    rows = read_measurements(_csv(tmp_path, [{**ROW, "kv_precision": ""}, {**ROW, "id": "s", "kv_precision": "bf16"},
                                             {**ROW, "id": "t", "engine": "trtllm", "kv_precision": ""}]))
    assert [(r["kv_precision"], r["kv_precision_source"]) for r in rows] == [("bf16", "default"), ("bf16", "stated"), ("fp8", "default")]


def test_validate_perf_marks_the_inferred_row_and_it_fixes_the_queueing(tmp_path: Path) -> None:
    path = _csv(tmp_path, [{**ROW, "kv_precision": ""}, {**ROW, "id": "s", "kv_precision": "bf16"}])
    res = validate(read_measurements(path), CAT, None)
    inferred, stated = res["rows"]
    assert (inferred["kv_precision"], inferred["kv_precision_source"]) == ("fp8", "inferred")
    assert (stated["kv_precision"], stated["kv_precision_source"]) == ("bf16", "stated")
    assert res["summary"]["kv_inferred_rows"] == ["r"]
    # with bf16 the closed loop queues for seconds; the inferred fp8 row predicts no queue
    assert stated["pred_ttft_ms"] > 5 * inferred["pred_ttft_ms"]
    out = CliRunner().invoke(main, ["validate-perf", str(path)])
    assert out.exit_code == 0, out.output
    assert "1 inferred" in out.output and "inferred-KV row" in out.output
    data = json.loads(CliRunner().invoke(main, ["validate-perf", str(path), "--json"]).output)
    assert data["rows"][0]["kv_precision_source"] == "inferred"


def test_unknown_kv_source_in_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("device,model,engine,precision,kv_precision,kv_precision_source,tp,concurrency,isl,osl\n"
                    "h100-sxm,llama-3.1-8b,vllm,bf16,bf16,guessed,1,1,10,10\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["validate-perf", str(path)])
    assert res.exit_code == 2 and "kv_precision_source" in res.output and res.output.count("\n") == 1, res.output
