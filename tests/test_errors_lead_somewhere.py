"""Every error's fix names something that exists, and notes say what a command did (issue 24 item 6):
``--on-bad-row`` for ``solve`` and the instance, a lower bound's hint, a ``.json`` that is not JSON, open-loop rows
that ``convert-measurements`` writes, ``examples`` run twice, and example instances that cite only shipped files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "data" / "sharegpt8k_lengths_rows00001-00200.csv"
BENCH = ROOT / "tests" / "data" / "benchmarks"

INSTANCE = """\
name: bad-rows
services:
  chat:
    model: llama-3.1-8b
    slo:
      ttft: {quantile: 0.99, target_ms: 5000}
      tpot: {quantile: 0.99, target_ms: 100}
    traffic:
      trace: log.csv
      format: lengths
      rate_per_s: RATE
      buckets: 2
catalog:
  devices: [h100-sxm]
  tp_degrees: [1]
options:
  architectures: [shared]
  verify: false
"""


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def bad_log_instance(tmp_path: Path) -> Path:
    (tmp_path / "log.csv").write_text(LOG.read_text(encoding="utf-8") + "abc,5,5,1\n", encoding="utf-8")
    inst = tmp_path / "inst.yaml"
    inst.write_text(INSTANCE.replace("RATE", "2"), encoding="utf-8")
    return inst


def test_solve_names_an_option_it_has_and_skips_bad_rows_with_it(bad_log_instance: Path) -> None:
    code, _out, err = run("solve", str(bad_log_instance), "--confidence", "off")
    assert code == 2 and "line 202" in err and "--on-bad-row skip" in err and "options.on_bad_row: skip" in err, err
    code, out, err = run("solve", str(bad_log_instance), "--confidence", "off", "--on-bad-row", "skip", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["verdict"]["winner"] == "shared" and plan["overrides"] == {"options.on_bad_row": "skip"}
    assert any("skipped 1 unusable row(s) of 201" in n for n in plan["notes"]), plan["notes"]


def test_the_instance_option_skips_bad_rows_too(bad_log_instance: Path) -> None:
    bad_log_instance.write_text(bad_log_instance.read_text(encoding="utf-8") + "  on_bad_row: skip\n", encoding="utf-8")
    code, out, err = run("solve", str(bad_log_instance), "--confidence", "off", "--json")
    assert code == 0, err
    assert any("skipped 1 unusable row(s)" in n for n in json.loads(out)["notes"])


@pytest.mark.parametrize(("rate", "want", "not_want"), [
    ("-5", "fix: give a value > 0)", "at most"),                 # a sign rule: the upper bound's reason is not quoted
    ("20000", "at most 10,000 req/s", "give a value >"),         # the upper bound: its reason is
])
def test_a_bound_hint_quotes_the_bound_that_was_crossed(tmp_path: Path, rate: str, want: str, not_want: str) -> None:
    inst = tmp_path / "inst.yaml"
    inst.write_text(INSTANCE.replace("RATE", rate).replace("trace: log.csv", "trace: " + str(LOG)), encoding="utf-8")
    code, _out, err = run("check-instance", str(inst))
    assert code == 2 and "rate_per_s" in err and want in err and not_want not in err, err


def test_a_nonzero_lower_bound_keeps_its_reason(tmp_path: Path) -> None:
    inst = tmp_path / "inst.yaml"
    inst.write_text(INSTANCE.replace("RATE", "2").replace("trace: log.csv", "trace: " + str(LOG)) + "  max_utilization: 0.001\n",
                    encoding="utf-8")
    code, _out, err = run("check-instance", str(inst))
    assert code == 2 and "give a value >= 0.01 (a cap on peak utilisation" in err, err


@pytest.mark.parametrize(("text", "want"), [("this is not json\n", "named .json but it is not JSON"),
                                            ('{"a": 1,\n', "not valid JSON"),
                                            ("", "named .json but empty")])
def test_a_json_file_that_is_not_json_is_not_called_a_csv(tmp_path: Path, text: str, want: str) -> None:
    bad = tmp_path / "run.json"
    bad.write_text(text, encoding="utf-8")
    code, _out, err = run("validate-perf", str(bad), "--device", "h100-sxm", "--engine", "vllm")
    assert code == 2 and want in err and "missing column" not in err, err


def test_convert_measurements_says_it_writes_open_loop_rows(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    code, _out, err = run("convert-measurements", str(BENCH / "vllm_bench_serve_open.json"), "--device", "h100-sxm", "--engine", "vllm",
                          "--model", "qwen3-32b", "--tp", "4", "-o", str(out))
    assert code == 0, err
    assert "written with load=open" in err and "set aside," not in err, err
    with out.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(r["load"] == "open" for r in rows)


def test_examples_twice_counts_the_files_it_would_write(tmp_path: Path) -> None:
    code, out, err = run("examples", str(tmp_path / "ex"))
    assert code == 0, err
    written = sum(1 for p in (tmp_path / "ex").rglob("*") if p.is_file())
    code, _out, err = run("examples", str(tmp_path / "ex"))
    assert code == 2 and f"({written} of the {written} files to write do)" in err, err


def test_example_instances_cite_only_files_a_user_has() -> None:
    for path in sorted((ROOT / "instances").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert "SOURCES.md" not in text and "shared/data" not in text, path.name


def test_every_row_bad_points_at_the_reader_not_at_skipping(tmp_path: Path) -> None:
    """A CSV read as JSON lines: every row fails, and --on-bad-row skip would leave no rows at all ("the log holds
    no usable request rows"), so the fix names the format and columns instead."""
    log = tmp_path / "log.csv"
    log.write_text("timestamp,input_tokens,output_tokens\n1,10,20\n2,30,40\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["characterize", str(log), "--format", "tracelab"])
    assert res.exit_code == 2
    assert "3 of 3 rows cannot be used" in res.stderr and "skipping them leaves nothing" in res.stderr and "--format" in res.stderr
    assert "fix: repair those rows" not in res.stderr
