"""service_profile: trace, profile file and rate sources; overrides and multipliers; caching."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from planner.errors import InputError
from planner.instance import ResolvedInstance
from planner.schema.instance import Instance
from planner.workload import characterize_file, peak_rate_per_s, service_profile, write_profile

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "instances" / "traces"


def resolved(tmp_path: Path, traffic: dict[str, Any], **svc: Any) -> ResolvedInstance:
    data = {
        "name": "t",
        "services": {"chat": {"model": "m", "slo": {"ttft": {"target_ms": 1000}, "tpot": {"target_ms": 50}}, "traffic": traffic, **svc}},
        "catalog": {"devices": ["d"]},
        "costs": {"electricity_usd_per_kwh": 0.1, "pue": 1.2, "ops_usd_per_pool_month": 0, "ops_usd_per_device_type_month": 0, "network": {"nic_usd_per_device_month": 0}},
    }
    inst = Instance.model_validate(data)
    return ResolvedInstance(instance=inst, path=tmp_path / "inst.yaml", raw=data, catalog=None, devices={}, models={})  # type: ignore[arg-type]


@pytest.fixture
def tdir(tmp_path: Path) -> Path:
    for f in ("azure2023_conv_min00-20.csv", "tracelab_example_claude_session.jsonl"):
        shutil.copy(TRACES / f, tmp_path / f)
    return tmp_path


def test_trace_source_with_multipliers(tdir: Path) -> None:
    base = service_profile(resolved(tdir, {"trace": "azure2023_conv_min00-20.csv"}), "chat")
    assert base.service == "chat"
    assert peak_rate_per_s(base, "60s") == pytest.approx(381 / 60)  # busiest minute at any start (353 aligned)
    scaled = service_profile(resolved(tdir, {"trace": "azure2023_conv_min00-20.csv", "rate_multiplier": 2, "input_length_multiplier": 1.5, "output_length_multiplier": 0.5}), "chat")
    assert peak_rate_per_s(scaled, "60s") == pytest.approx(2 * 381 / 60)
    assert scaled.arrivals.rate_mean_per_s == pytest.approx(2 * base.arrivals.rate_mean_per_s)
    assert scaled.input_tokens.p99 == pytest.approx(1.5 * base.input_tokens.p99)
    for b0, b1 in zip(base.buckets, scaled.buckets, strict=True):
        assert b1.input_tokens == pytest.approx(1.5 * b0.input_tokens)
        assert b1.output_tokens_mean == pytest.approx(0.5 * b0.output_tokens_mean)
        assert b1.weight == b0.weight


def test_peak_and_cv_overrides(tdir: Path) -> None:
    p = service_profile(resolved(tdir, {"trace": "azure2023_conv_min00-20.csv", "peak_rate_per_s": 9.0, "peak_window": "1s", "interarrival_cv": 2.0}), "chat")
    assert peak_rate_per_s(p, "1s") == 9.0 and p.arrivals.interarrival_cv == 2.0
    assert any("traffic.peak_rate_per_s" in n for n in p.arrivals.notes)


def test_profile_file_source(tdir: Path) -> None:
    c = characterize_file(tdir / "azure2023_conv_min00-20.csv")["default"]
    write_profile(c.to_profile(), tdir / "p.yaml")
    p = service_profile(resolved(tdir, {"profile": "p.yaml", "rate_multiplier": 3}), "chat")
    assert p.arrivals.rate_peak_per_s["1s"] == pytest.approx(45)
    assert p.buckets == c.buckets


def test_rate_source_and_peak_defaults(tdir: Path) -> None:
    lengths = [{"input_tokens": 1000, "output_tokens": 200, "weight": 0.75}, {"input_tokens": 8000, "output_tokens": 400, "weight": 0.25}]
    p = service_profile(resolved(tdir, {"rate_per_s": 4.0, "lengths": lengths}), "chat")
    assert all(v == 4.0 for v in p.arrivals.rate_peak_per_s.values())
    assert any("mean rate" in n for n in p.arrivals.notes)
    assert p.input_tokens.mean == pytest.approx(0.75 * 1000 + 0.25 * 8000)
    assert p.input_tokens.p50 == 1000 and p.input_tokens.p90 == 8000
    q = service_profile(resolved(tdir, {"rate_per_s": 4.0, "peak_rate_per_s": 10.0, "lengths": lengths, "rate_multiplier": 1.5}), "chat")
    assert peak_rate_per_s(q, "60s") == pytest.approx(15.0) and q.arrivals.rate_mean_per_s == pytest.approx(6.0)


def test_tools_from_trace_or_service(tdir: Path) -> None:
    p = service_profile(resolved(tdir, {"trace": "tracelab_example_claude_session.jsonl"}, tools_from_trace=True), "chat")
    assert set(p.tools) == {"Bash", "WebFetch", "WebSearch", "Write"}
    q = service_profile(resolved(tdir, {"trace": "tracelab_example_claude_session.jsonl"}), "chat")
    assert q.tools == {}
    with pytest.raises(InputError, match="no tool calls"):
        service_profile(resolved(tdir, {"trace": "azure2023_conv_min00-20.csv"}, tools_from_trace=True), "chat")


def test_lengths_trace_needs_peak_rate(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_text("num_prefill_tokens,num_decode_tokens\n10,2\n20,3\n30,4\n")
    with pytest.raises(InputError, match="no timestamps"):
        service_profile(resolved(tmp_path, {"trace": "l.csv"}), "chat")
    p = service_profile(resolved(tmp_path, {"trace": "l.csv", "peak_rate_per_s": 5.0}), "chat")
    assert peak_rate_per_s(p, "60s") == 5.0 and p.arrivals.timestamps == "missing"


def test_missing_window_is_an_input_error(tdir: Path) -> None:
    p = service_profile(resolved(tdir, {"trace": "azure2023_conv_min00-20.csv"}), "chat")
    with pytest.raises(InputError, match="no peak over 5s"):
        peak_rate_per_s(p, "5s")


def test_characterisation_is_cached_and_invalidated(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    shutil.copy(TRACES / "azure2023_code_min00-20.csv", f)
    a = characterize_file(f)
    assert characterize_file(f) is a
    text = f.read_text().splitlines()
    f.write_text("\n".join(text[:100]) + "\n")
    b = characterize_file(f)
    assert b is not a and b["default"].requests == 99
