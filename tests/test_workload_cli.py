"""`planner characterize`: JSON keys, profile round trip, bad input -> exit 2 with a clear message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.workload import read_profile

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "instances" / "traces"


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["characterize", *args])


def test_json_has_the_required_keys() -> None:
    r = run(str(TRACES / "tracelab_example_claude_session.jsonl"), "--json", "--buckets", "3")
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    for key in ("requests", "duration_s", "arrival_rate_mean_per_s", "arrival_rate_peak_per_s", "input_tokens", "output_tokens", "buckets", "tools"):
        assert key in j
    assert set(j["arrival_rate_peak_per_s"]) == {"1s", "60s", "600s"}
    assert set(j["input_tokens"]) >= {"mean", "p50", "p90", "p99", "max"}
    # 10 requests support 2 buckets of >= 5 (planner.workload.buckets item 7), and the notes say so
    assert len(j["buckets"]) == 2 and any("asked for 3 length buckets; the log's 10 requests support 2" in n for n in j["notes"])
    assert j["tools"]["calls"] == 9


def test_no_tools_key_without_tools() -> None:
    r = run(str(TRACES / "azure2023_code_min00-20.csv"), "--json", "--peak-quantile", "0.9")
    j = json.loads(r.stdout)
    assert "tools" not in j and j["peak_quantile"] == 0.9


def test_out_writes_a_profile_that_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    r = run(str(TRACES / "mooncake_conversation_min00-15.jsonl"), "--out", str(out))
    assert r.exit_code == 0, r.output
    p = read_profile(out)
    assert p.arrivals.requests == 2728 and p.arrivals.timestamps == "bucketed"
    assert p.cached_prefix_share == pytest.approx(0.3035, abs=1e-4)


def test_service_column_splits_services(tmp_path: Path) -> None:
    f = tmp_path / "s.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,model\n2023-11-16 18:00:00.0,10,1,a\n2023-11-16 18:00:01.0,20,2,b\n2023-11-16 18:00:02.0,30,3,a\n")
    r = run(str(f), "--service-column", "model", "--json")
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.stdout)["services"]) == {"a", "b"}


def bad(tmp_path: Path, name: str, text: str, *args: str):  # type: ignore[no-untyped-def]
    f = tmp_path / name
    f.write_text(text)
    r = run(str(f), *args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    return r.stderr


def test_empty_file(tmp_path: Path) -> None:
    assert "empty" in bad(tmp_path, "e.csv", "", "--format", "azure")


def test_header_only(tmp_path: Path) -> None:
    assert "no usable request rows" in bad(tmp_path, "h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n")


def test_missing_column(tmp_path: Path) -> None:
    err = bad(tmp_path, "m.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:00:00,5\n", "--format", "azure")
    assert "missing column" in err and "GeneratedTokens" in err


def test_unparsable_rows_with_line_numbers(tmp_path: Path) -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,10,1\n2023-11-16 18:00:01.0,abc,2\n2023-11-16 18:00:02.0,30\nnot-a-time,5,5\n2023-11-16 18:00:04.0,40,4\n"
    err = bad(tmp_path, "u.csv", text)
    assert "3 of 5 rows cannot be used" in err
    assert "line 3" in err and "'abc'" in err
    assert "line 4" in err and "wrong number of fields" in err
    assert "line 5" in err and "'not-a-time'" in err
    assert "--on-bad-row skip" in err
    f = tmp_path / "u.csv"
    r = run(str(f), "--on-bad-row", "skip", "--json")
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    assert j["requests"] == 2
    assert any("skipped 3" in n for n in j["notes"])


def test_negative_tokens(tmp_path: Path) -> None:
    err = bad(tmp_path, "n.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,10,1\n2023-11-16 18:00:01.0,-5,2\n")
    assert "negative" in err and "line 3" in err


def test_bad_jsonl_line(tmp_path: Path) -> None:
    err = bad(tmp_path, "b.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{broken\n', "--format", "mooncake")
    assert "line 2" in err


def test_unknown_format_and_generic_without_mapping(tmp_path: Path) -> None:
    assert "cannot tell the log format" in bad(tmp_path, "x.csv", "a,b\n1,2\n")
    assert "--columns" in bad(tmp_path, "y.csv", "a,b\n1,2\n", "--format", "generic")
    assert "unknown column key" in bad(tmp_path, "z.csv", "a,b\n1,2\n", "--columns", "tim=a,input=b,output=b")


def test_out_without_timestamps_is_refused(tmp_path: Path) -> None:
    err = bad(tmp_path, "l.csv", "num_prefill_tokens,num_decode_tokens\n10,2\n20,3\n", "--out", str(tmp_path / "p.yaml"))
    assert "no timestamps" in err


def test_unsorted_warns_but_succeeds(tmp_path: Path) -> None:
    f = tmp_path / "s.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:02.0,10,1\n2023-11-16 18:00:00.0,20,2\n2023-11-16 18:00:01.0,30,3\n")
    r = run(str(f))
    assert r.exit_code == 0
    assert "sorted by time" in r.stderr


def test_characterize_all_equal_timestamps_are_not_called_missing(tmp_path: Path) -> None:
    """50 requests all stamped 5: there are timestamps, but no span to take a rate over (it said "no timestamps")."""
    log = tmp_path / "same.csv"
    log.write_text("timestamp,input_tokens,output_tokens\n" + "5,100,20\n" * 50, encoding="utf-8")
    r = CliRunner().invoke(main, ["characterize", str(log), "--format", "generic", "--columns",
                                  "time=timestamp,input=input_tokens,output=output_tokens"])
    assert r.exit_code == 0, r.output
    assert "no arrival span (no timestamps, or every request at one instant)" in r.output and "no timestamps: lengths only" not in r.output
