"""One reading of the width of the embeddings a vision tower hands the LLM: the encode phase prices them
(:func:`planner.perf.encoder.encoder_from_config`) and the instance check compares them with the model's
hidden size (:func:`planner.instance.encoder_out_width`) through :func:`planner.perf.encoder.recorded_out_width`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.instance import encoder_out_width
from planner.perf.encoder import encoder_from_config, encoder_path, load_encoder, recorded_out_width

QWEN = "Qwen--Qwen2.5-VL-7B-Instruct"
TOWER = {"hidden_size": 1280, "depth": 32, "intermediate_size": 3420, "patch_size": 14, "spatial_merge_size": 2,
         "temporal_patch_size": 2, "hidden_act": "silu"}
"""A Qwen2.5-VL-7B-like tower without ``out_hidden_size``."""


def _both(tmp_path: Path, config: dict[str, Any]) -> tuple[int, int | None]:
    """(width the encode phase prices, width the instance check reads) of ``config``."""
    path = tmp_path / "tower_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return encoder_from_config(config, "tower", str(path)).out_hidden_size, encoder_out_width(path.name, tmp_path)


def test_llm_width_only_in_text_config_is_read_by_both(tmp_path: Path) -> None:
    config = {"vision_config": dict(TOWER), "text_config": {"hidden_size": 3584}}
    assert _both(tmp_path, config) == (3584, 3584)  # priced at the tower's 1,280 before
    assert load_encoder(str(tmp_path / "tower_config.json")).out_hidden_size == 3584


@pytest.mark.parametrize(("config", "width"), [
    ({"vision_config": {**TOWER, "out_hidden_size": 2048}, "hidden_size": 3584, "text_config": {"hidden_size": 4096}}, 2048),
    ({"vision_config": dict(TOWER), "hidden_size": 3584, "text_config": {"hidden_size": 4096}}, 3584),
    ({"vision_config": {**TOWER, "out_hidden_size": 0}, "text_config": {"hidden_size": 4096}}, 4096),
    ({"vision_config": {**TOWER, "out_hidden_size": True}, "hidden_size": "wide", "text_config": {"hidden_size": 4096}}, 4096),
])
def test_the_order_is_tower_output_then_model_then_text_config(tmp_path: Path, config: dict[str, Any], width: int) -> None:
    assert _both(tmp_path, config) == (width, width)


def test_without_a_recorded_width_pricing_falls_back_to_the_tower_and_the_check_skips(tmp_path: Path) -> None:
    config = {"vision_config": dict(TOWER), "text_config": {"vocab_size": 10}}
    assert recorded_out_width(config) is None
    assert _both(tmp_path, config) == (1280, None)


def test_shipped_encoder_unchanged() -> None:
    path = encoder_path(QWEN)
    config = json.loads(path.read_text(encoding="utf-8"))
    assert config["vision_config"]["out_hidden_size"] == 3584
    assert load_encoder(QWEN).out_hidden_size == 3584
    assert encoder_out_width(QWEN, path.parent) == 3584
    assert recorded_out_width(config) == 3584
