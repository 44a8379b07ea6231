"""A saved calibration reads back as it was: SGLang's automatic KV reserve (an empty ``memory_fraction``)
survives ``save_calibration`` (it was dropped, and the field's 0.9 default came back in its place)."""

from __future__ import annotations

from pathlib import Path

from planner.perf.calibration import load_calibration, save_calibration


def test_sglang_automatic_reserve_survives_a_round_trip(tmp_path: Path) -> None:
    shipped = load_calibration()
    assert shipped is not None
    assert shipped.engines["sglang"].memory_fraction is None  # the shipped file says null
    assert shipped.engines["vllm"].memory_fraction == 0.9
    out = tmp_path / "cal.yaml"
    save_calibration(shipped, out)
    back = load_calibration(str(out))
    assert back is not None
    assert back.engines["sglang"].memory_fraction is None
    assert back.engines["vllm"].memory_fraction == 0.9
    assert back.model_dump() == shipped.model_dump()
