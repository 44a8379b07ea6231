"""A file-system error on a path the user gave is bad input (exit 2, the path and a fix), not an internal error:
``planner examples FILE/sub`` and ``planner deploy PLAN --out FILE/sub`` were "internal error: NotADirectoryError"
(exit 1). An OSError without a file name stays an internal error."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from planner.cli import main, path_error_message


def test_an_output_folder_under_a_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x", encoding="utf-8")
    res = CliRunner().invoke(main, ["examples", str(afile / "sub")])
    assert res.exit_code == 2, res.output
    assert str(afile / "sub") in res.output and "fix:" in res.output and "internal error" not in res.output


def test_the_message_names_both_paths_of_a_rename() -> None:
    msg = path_error_message(FileExistsError(17, "File exists", "/a", None, "/b"))
    assert "/a -> /b" in msg and "File exists" in msg


def test_examples_quiet_prints_nothing_and_the_hint_is_a_note(tmp_path: Path) -> None:
    quiet = CliRunner().invoke(main, ["-q", "examples", str(tmp_path / "q")])
    assert quiet.exit_code == 0 and quiet.output == "" and (tmp_path / "q" / "enterprise-chat.yaml").is_file()
    loud = CliRunner().invoke(main, ["examples", str(tmp_path / "l")])
    assert loud.exit_code == 0 and "copied " in loud.output and "next: planner solve" in loud.output


def test_speculation_note_wording_at_the_edges() -> None:
    """The note said "18-18 % fewer" for one figure and "up to batch 0 on the best config" where it never pays."""
    from types import SimpleNamespace

    import pandas as pd

    from planner.perf.speculative import speculation_notes

    spec = SimpleNamespace(method="draft_model", num_speculative_tokens=3, tokens_per_step=lambda: 2.5)
    inst = SimpleNamespace(services={"chat": SimpleNamespace(speculative=spec)})
    pts = pd.DataFrame({"service": ["chat", "chat"], "role": ["decode", "decode"], "feasible": [True, True],
                        "spec_method": ["draft_model", "draft_model"], "instance_seconds_per_request": [0.82, 0.82],
                        "plain_instance_seconds_per_request": [1.0, 1.0], "spec_breakeven_batch": [0.0, 0.0]})
    (line,) = speculation_notes(inst, pts)
    assert "18 % fewer" in line and "18-18" not in line and "up to batch 0" not in line and "at no batch" in line


def test_a_full_disk_is_exit_2_with_its_own_fix() -> None:
    import errno

    msg = path_error_message(OSError(errno.ENOSPC, "No space left on device"))
    assert "the output (its file system)" in msg and "free space" in msg
    res = CliRunner().invoke(main, ["convert-measurements", str(Path(__file__).parent / "data" / "benchmarks" / "vllm_bench_serve_closed.json"),
                                    "--device", "h100-sxm", "--engine", "vllm", "-o", "/dev/full"])
    assert res.exit_code == 2 and "No space left" in res.output and "internal error" not in res.output, res.output


def test_a_horizon_result_given_as_a_plan_says_what_it_is(tmp_path: Path) -> None:
    """check / html / deploy read plans through load_plan: a horizon.json printed ten schema errors, each telling
    the user to regenerate the plan with `planner solve`."""
    import json

    hz = tmp_path / "horizon.json"
    hz.write_text(json.dumps({"periods": [], "slots": [], "architectures": {}}), encoding="utf-8")
    for command in (["check", str(hz)], ["html", str(hz)]):
        res = CliRunner().invoke(main, command)
        assert res.exit_code == 2 and "plan over time" in res.output and "--evaluate" in res.output, (command, res.output)
        assert res.output.count("fix:") == 1


def test_non_finite_rel_tol_and_negative_horizon_seed_are_usage_errors() -> None:
    res = CliRunner().invoke(main, ["validate-goodput", "x.csv", "--rel-tol", "nan"])
    assert res.exit_code == 2 and "finite" in res.output
    res = CliRunner().invoke(main, ["horizon", "x.yaml", "--seed", "-1"])
    assert res.exit_code == 2 and "--seed" in res.output


def test_left_by_the_review_helpers_small_wordings() -> None:
    """A row that does not fit memory got the generic "fix the rows (catalog ids ...)"; the horizon regret table
    did not show the held solve's gap beside the re-plan's (a regret within them is rounding)."""
    from types import SimpleNamespace

    from planner.cli.cmd_horizon import _regret_records, _regret_table
    from planner.cli.cmd_perf import _none_predicted_fix

    assert "more memory" in _none_predicted_fix("weights and one sequence's KV do not fit the device memory at this tp")
    assert "catalog ids" in _none_predicted_fix("unknown model 'x'")
    g = SimpleNamespace(label="5 %/month", held_usd=100.0, held_gap=0.031, replanned_usd=99.0, replanned_gap=0.042,
                        regret_usd=1.0, status="ok")
    text = "\n".join(_regret_table("regret", [g]))
    assert "held gap" in text and "3.1%" in text and "4.2%" in text
    assert _regret_records([g])[0]["held_gap"] == 0.031
