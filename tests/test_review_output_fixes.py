"""Output defects a README review found (2026-12-06): the speculation note's signed range, the
`evaluate` "(missed)" tag on the metric that met, `examples --list` descriptions against the
instances, `-q` and the horizon note, and mixed precision within a column or line."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_speculation_gain_range_reads_in_words() -> None:
    """It printed "-92-67 % fewer instance-seconds" for a range from 92 % more to 67 % fewer."""
    import pandas as pd

    from planner.perf.speculative import gain_phrase, speculation_notes

    assert gain_phrase(-92, 67) == "from 92 % more to 67 % fewer instance-seconds per request than plain"
    assert gain_phrase(12, 67) == "12–67 % fewer instance-seconds per request than plain"
    assert gain_phrase(18, 18) == "18 % fewer instance-seconds per request than plain"
    assert gain_phrase(-40, -5) == "5–40 % more instance-seconds per request than plain"
    assert gain_phrase(0, 0) == "as many instance-seconds per request as plain"
    spec = SimpleNamespace(method="eagle", num_speculative_tokens=3, tokens_per_step=lambda: 2.53)
    inst = SimpleNamespace(services={"chat": SimpleNamespace(speculative=spec)})
    pts = pd.DataFrame({"service": ["chat"] * 2, "role": ["decode"] * 2, "feasible": [True] * 2, "spec_method": ["eagle"] * 2,
                        "instance_seconds_per_request": [1.92, 0.33], "plain_instance_seconds_per_request": [1.0, 1.0],
                        "spec_breakeven_batch": [64.0, 64.0]})
    (line,) = speculation_notes(inst, pts)
    assert "from 92 % more to 67 % fewer" in line and "-92" not in line


def test_bucket_work_prices_the_plain_alternative_alike() -> None:
    """A bucket's row re-priced its speculative point at the bucket's lengths but left the plain
    alternative at the service's means, so the note compared unlike work (enterprise-chat with EAGLE:
    "-92-67 %" where every chosen point saves)."""
    from planner.capacity import bucket_work

    op = SimpleNamespace(feasible=True, instance_seconds_per_request=0.8, energy_j_per_request=100.0, kv_bytes_per_request=1e6,
                         detail={"plain_instance_seconds_per_request": 1.0, "spec_tokens_per_step": 2.5})
    work = bucket_work(op, "decode", (1000.0, 200.0), [(1.0, 1000.0, 600.0)], 0.0)  # the bucket's outputs 3x the service's
    assert work["instance_seconds_per_request"] == pytest.approx(2.4)
    assert work["plain_instance_seconds_per_request"] == pytest.approx(3.0)  # the same 20 % saving as at the means
    plain_op = SimpleNamespace(feasible=True, instance_seconds_per_request=0.8, energy_j_per_request=100.0, kv_bytes_per_request=1e6,
                               detail={})
    assert "plain_instance_seconds_per_request" not in bucket_work(plain_op, "decode", (1000.0, 200.0), [(1.0, 1000.0, 600.0)], 0.0)


def test_missed_tag_follows_the_metric_that_misses() -> None:
    """`evaluate` at x3 printed "TTFT inf/2,000 ms, per-token 60.0/60 ms (missed)": the tag after the met metric."""
    from planner.studies.simulated import latency_detail

    line = latency_detail("chat", "inf", 2000.0, "60.0", 60.0, ttft_missed=True, tok_missed=False)
    assert line == "chat: TTFT inf/2,000 ms (missed), per-token 60.0/60 ms"
    assert latency_detail("chat", "671", 2000.0, "61.0", 60.0, ttft_missed=False, tok_missed=True).endswith("per-token 61.0/60 ms (missed)")
    assert "(missed)" not in latency_detail("chat", "671", 2000.0, "59.9", 60.0, ttft_missed=False, tok_missed=False)


def test_examples_list_states_devices_and_targets_of_the_instance() -> None:
    """enterprise-chat and long-context-assistant were "on rented Hopper-class GPUs" with MI300X in their
    catalogs (and plans); long-document-nvidia's ITL target was "time per output token"."""
    from planner.examples import list_examples

    items = {ex.file: ex for ex in list_examples()}
    for name, ex in items.items():
        data = yaml.safe_load((ROOT / "instances" / name).read_text(encoding="utf-8"))
        assert ex.devices == tuple(data["catalog"]["devices"])
        text = ex.description.lower()
        if "hopper" in text:
            assert all(d.startswith(("h100", "h200")) for d in ex.devices), name
        if "nvidia gpus only" in text:
            assert not any(d.startswith("mi") for d in ex.devices), name
        slo = {k for svc in data["services"].values() for k in svc["slo"]}
        if "time per output token" in text:
            assert "tpot" in slo, name
        if "inter-token latency" in text:
            assert "itl" in slo, name
    assert "mi300x" in items["enterprise-chat.yaml"].devices and "MI300X" in items["enterprise-chat.yaml"].description
    assert items["long-document-nvidia.yaml"].targets == ("assistant: TTFT p99 30,000 ms, ITL p99 40 ms",)
    out = CliRunner().invoke(main, ["examples", "--list"]).output
    assert "devices h100-sxm, h200-sxm, mi300x; chat: TTFT p99 2,000 ms, ITL p99 60 ms" in out


def test_quiet_drops_the_horizon_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """`planner solve instances/fleet-horizon.yaml --json -q` printed "note: ... has a horizon section" on stderr."""
    import planner.solve_instance
    from planner.errors import InputError, Problem

    def stop(*_a: object, **_k: object) -> None:  # the note is printed before this; no solve needed
        raise InputError(Problem("", "", "stopped by the test", ""))

    monkeypatch.setattr(planner.solve_instance, "settings_from_instance", stop)
    inst = str(ROOT / "instances" / "fleet-horizon.yaml")
    loud = CliRunner().invoke(main, ["solve", inst, "--json"])
    assert loud.exit_code == 2 and "has a horizon section" in loud.stderr
    quiet = CliRunner().invoke(main, ["solve", inst, "--json", "-q"])
    assert quiet.exit_code == 2 and "horizon section" not in quiet.stderr and "stopped by the test" in quiet.stderr


def test_columns_and_lines_keep_one_precision() -> None:
    """validate-energy printed "5" beside "4.91" and "12.8 %, ... 12 %, power 9.45 %"; budget "19" beside "42.2"."""
    from planner.cli.output import fixed, sig, table

    assert [sig(v) for v in (19.0, 42.2, 0.484, 1.5, 1024.0, 9.996)] == ["19.0", "42.2", "0.484", "1.50", "1,024", "10.0"]
    assert [fixed(v) for v in (5.0, 4.91, 12.0, 9.45, 0.00194)] == ["5.0", "4.9", "12.0", "9.4", "0.0"]
    assert sig(float("nan")) == "-" and fixed(None) == "-"
    lines = table(["x", "y"], [[19.0, 5.0], [42.2, 4.91]], formats={0: sig, 1: fixed}).splitlines()
    assert lines[2].split() == ["19.0", "5.0"] and lines[3].split() == ["42.2", "4.9"]


def test_validate_energy_prints_percentages_to_one_decimal(tmp_path: Path) -> None:
    import re

    out = CliRunner().invoke(main, ["validate-energy", str(ROOT / "models" / "measured" / "measured_energy.csv")])
    assert out.exit_code == 0, out.output
    pooled = next(line for line in out.output.splitlines() if line.startswith("pooled:"))
    assert re.fullmatch(r"pooled: MAPE J per output token \d+\.\d %, output tokens/s \d+\.\d %, power \d+\.\d % over .*", pooled)
    rows = [line for line in out.output.splitlines() if line.startswith(("A100", "H100"))]
    assert rows and all(re.search(r"\s\d+\.\d\s+\d+\.\d\s+\d+\.\d$", r) for r in rows)
