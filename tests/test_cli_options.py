"""Global CLI options (--debug, -q, -v before or after the subcommand), progress off when not a
terminal, versioned JSON of the study commands, solve --out tables (CSV + Parquet, KV capacity)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = str(ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml")
TRACE = str(ROOT / "instances" / "traces" / "azure2023_conv_min00-20.csv")
INFEASIBLE = ["--set", "services.chat.slo.tpot.target_ms=0.5"]


@pytest.mark.parametrize("args", [["--debug", "solve", MINIMAL, *INFEASIBLE], ["solve", MINIMAL, *INFEASIBLE, "--debug"]])
def test_debug_before_or_after_the_subcommand_keeps_exit_3(args: list[str]) -> None:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, r.output
    assert "Traceback" in r.output and "InfeasibleError" in r.output
    assert "slo_tpot" in r.output


def test_without_debug_no_traceback() -> None:
    r = CliRunner().invoke(main, ["solve", MINIMAL, *INFEASIBLE])
    assert r.exit_code == 3 and "Traceback" not in r.output


def test_quiet_and_verbose_are_accepted_everywhere() -> None:
    for args in (["-q", "catalog", "devices"], ["catalog", "devices", "-q"], ["catalog", "-v", "devices"], ["check-instance", MINIMAL, "-v"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, (args, r.output)


def test_budget_json_is_a_versioned_object_and_no_progress_bar_off_a_terminal() -> None:
    # the JSON envelope and the progress bar are checked, not the plans: no peak simulation and a coarse
    # multiplier (14.7 s -> 4.8 s as a process; the budget numbers are tested in test_studies.py and test_one_path.py)
    r = CliRunner().invoke(main, ["budget", MINIMAL, "--budgets", "3000,12000", "--json", "--set", "options.verify=false",
                                  "--rel-tol", "0.1"])
    assert r.exit_code == 0, r.output
    assert "budget(s)" not in r.output  # the progress bar's label: not printed when stderr is not a terminal
    data = json.loads(r.output)
    assert data["schema_version"] == "1"
    assert [row["budget_usd_per_month"] for row in data["budgets"]] == [3000.0, 12000.0]


def test_verbose_reports_steps_on_stderr() -> None:
    r = CliRunner().invoke(main, ["sweep", MINIMAL, "--set", "services.chat.traffic.rate_multiplier=1,2", "-v", "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert "bisecting verdict flips along 1 path(s):" in r.stderr
    q = CliRunner().invoke(main, ["sweep", MINIMAL, "--set", "services.chat.traffic.rate_multiplier=1,2", "-q", "--jobs", "1"])
    assert q.exit_code == 0 and q.stderr == ""


def test_characterize_json_carries_schema_version() -> None:
    r = CliRunner().invoke(main, ["characterize", TRACE, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema_version"] == "1" and data["requests"] > 0


def test_solve_out_writes_parquet_and_kv_capacity(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["solve", MINIMAL, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    csv_pools = pd.read_csv(tmp_path / "pools.csv")
    pq_pools = pd.read_parquet(tmp_path / "pools.parquet")
    assert list(csv_pools.columns) == list(pq_pools.columns) and len(csv_pools) == len(pq_pools)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "costs.csv"), pd.read_parquet(tmp_path / "costs.parquet"))
    holds_kv = pq_pools[pq_pools["role"] != "prefill"]
    assert len(holds_kv)
    # KV capacity = (instances - redundancy) x per-instance memory fit: positive, and the peak fits in it
    assert (holds_kv["kv_capacity_bytes"] > 0).all()
    assert (holds_kv["kv_bytes_peak"] <= holds_kv["kv_capacity_bytes"]).all()
    assert (pq_pools.loc[pq_pools["role"] == "prefill", "kv_capacity_bytes"] == 0).all()


def test_debug_after_subcommand_in_a_real_process() -> None:
    """The exit code survives --debug in a real process (not only under CliRunner)."""
    p = subprocess.run([sys.executable, "-m", "planner", "solve", MINIMAL, *INFEASIBLE, "--debug"], capture_output=True, text=True,
                       cwd=ROOT, check=False)
    assert p.returncode == 3, p.stderr[-2000:]
    assert "Traceback" in p.stderr


def test_a_command_loads_its_own_module_only() -> None:
    """``planner solve`` imports ``cmd_solve`` and not the other command modules (issue 27: start-up);
    a command defined in a module of another name (``check-instance`` in ``cmd_catalog``) still resolves,
    and listing the commands loads them all."""
    import subprocess
    import sys

    code = (
        "import sys, click\n"
        "from planner.cli import main\n"
        "ctx = click.Context(main)\n"
        "assert main.get_command(ctx, 'solve') is not None\n"
        "print(sorted(m for m in sys.modules if m.startswith('planner.cli.cmd_')))\n"
        "assert main.get_command(ctx, 'check-instance') is not None\n"
        "assert main.get_command(ctx, 'no-such-command') is None\n"
        "print(len(main.list_commands(ctx)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "['planner.cli.cmd_solve']"
    assert int(out[1]) >= 20


def test_commands_run_with_a_larger_gc_threshold_and_restore_it() -> None:
    """While a command runs, the young generation is collected every GC_GEN0_THRESHOLD allocations (issue 27:
    0.18 -> 0.07 s of a cold solve); the caller's thresholds are back afterwards, also when the command fails."""
    import gc

    import click
    from click.testing import CliRunner

    from planner.cli import GC_GEN0_THRESHOLD, main

    seen: list[tuple[int, ...]] = []

    @click.command("gc-probe")
    @click.option("--fail", is_flag=True)
    def probe(fail: bool) -> None:
        seen.append(gc.get_threshold())
        if fail:
            raise RuntimeError("boom")

    before = gc.get_threshold()
    main.add_command(probe)
    try:
        assert CliRunner().invoke(main, ["gc-probe"]).exit_code == 0
        assert CliRunner().invoke(main, ["gc-probe", "--fail"]).exit_code == 1
    finally:
        main.commands.pop("gc-probe")
    assert seen == [(GC_GEN0_THRESHOLD, *before[1:])] * 2
    assert gc.get_threshold() == before and before[0] != GC_GEN0_THRESHOLD


def test_sweep_says_which_flips_it_searched() -> None:
    """`sweep` bisects flips between neighbouring grid values with different winners only, so it says so instead of
    "no verdict flip inside the swept range" (enterprise-chat: shared at x1 and x2, disaggregated from x1.47 to x1.76;
    issue 24 item 4)."""
    r = CliRunner().invoke(main, ["sweep", MINIMAL, "--set", "services.chat.traffic.rate_multiplier=1,2", "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert "inside the swept range" not in r.stdout
    assert ("verdict flips (bisection brackets)" in r.stdout
            or "no verdict flip between adjacent swept values of services.chat.traffic.rate_multiplier" in r.stdout)
    assert "is not searched: `planner solve --confidence exact` lists every window" in r.stdout


def test_budget_text_says_why_a_budget_has_no_plan() -> None:
    """The JSON's note on a budget below every plan's fixed costs is printed under the text table too ("max traffic
    x 0" alone read as a result). One architecture: the search halves the multiplier 20 times down to 2^-20, each a
    solve, and the note is the same whichever plans are candidates (9.0 s -> 3.0 s)."""
    r = CliRunner().invoke(main, ["budget", MINIMAL, "--budgets", "100", "--set", "options.verify=false", "--rel-tol", "0.1",
                                  "--set", "options.architectures=[shared]"])
    assert r.exit_code == 0, r.output
    assert "$100/month: the budget does not cover the fixed costs of any plan" in r.output


def test_solve_robust_worst_refuses_weights_it_would_ignore() -> None:
    r = CliRunner().invoke(main, ["solve-robust", MINIMAL, "--objective", "worst", "--weights", "1,0"])
    assert r.exit_code == 2 and "weights apply to --objective expected only" in r.stderr and "drop --weights" in r.stderr
