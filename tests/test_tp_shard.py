"""A tensor-parallel degree GPU engines cannot start is no candidate (planner.perf.points.tp_shard_problem): with
`tp_degrees: [3]` enterprise-chat got a plan on 3-GPU replicas of Llama-3.1-70B (64 attention heads), which vLLM,
SGLang and TensorRT-LLM refuse at start-up."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.perf.points import tp_shard_problem

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("model", "device", "tp", "bad"), [
    ("llama-3.1-70b", "h100-sxm", 1, ""), ("llama-3.1-70b", "h100-sxm", 8, ""),
    ("llama-3.1-70b", "h100-sxm", 16, ""),            # 16 KV ranks: the 8 KV heads replicated twice
    ("llama-3.1-70b", "h100-sxm", 3, "64 attention heads"), ("llama-3.1-70b", "h100-sxm", 6, "64 attention heads"),
    ("qwen2.5-vl-7b", "h100-sxm", 8, "28 attention heads"),  # 28 heads: TP 1, 2 or 4 (and 7, 14, 28)
    ("qwen2.5-vl-7b", "h100-sxm", 4, ""),
    ("deepseek-v3", "h200-sxm", 8, ""),                # MLA: one latent KV, not split
    ("llama-3.1-70b", "trainium2", 3, ""),             # not a GPU: its stack's own rules
])
def test_tp_degrees_by_hand(model: str, device: str, tp: int, bad: str) -> None:
    cat = load_catalog()
    problem = tp_shard_problem(cat.model(model), cat.device(device), tp)
    assert (bad in problem and problem != "") if bad else problem == ""


def test_a_tp_degree_no_engine_starts_gets_a_diagnosis(tmp_path: Path) -> None:
    inst = tmp_path / "e.yaml"
    text = (ROOT / "instances" / "enterprise-chat.yaml").read_text(encoding="utf-8")
    assert "tp_degrees:" in text
    lines = [("  tp_degrees: [3]" if ln.strip().startswith("tp_degrees:") else ln) for ln in text.splitlines()]
    inst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.copytree(ROOT / "instances" / "traces", tmp_path / "traces")
    r = CliRunner().invoke(main, ["solve", str(inst), "--confidence", "off"])
    assert r.exit_code == 3, r.output
    assert "tensor parallelism 3 does not divide llama-3.1-70b's 64 attention heads" in r.output
    e = CliRunner().invoke(main, ["estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "3", "--isl", "100",
                                  "--osl", "10", "--concurrency", "1"])
    assert e.exit_code == 2 and "use --tp 1 or 2 or 4 or 8" in e.output and "Traceback" not in e.output
