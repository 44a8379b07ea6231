"""Argument and message review of the study / simulate / characterize commands: bad input is exit 2 with
one message naming the option (or file) and the fix, never a hang, a wrong answer or an internal error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from planner.cli import main

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = str(ROOT / "instances" / "enterprise-chat.yaml")
TRACES = ROOT / "instances" / "traces"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def usage_error(r: Result, option: str) -> str:
    """Exit 2 with one message naming ``option`` (no internal error, no traceback)."""
    assert r.exit_code == 2, r.output
    assert option in r.output, r.output
    assert "internal error" not in r.output and "Traceback" not in r.output
    return r.output


# 1. --rel-tol: finite, within 1e-6..0.5 (nan printed headroom 1; 0 or below never stopped)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "10", "1"])
def test_rel_tol_refused_by_evaluate_and_budget(tmp_path: Path, value: str) -> None:
    plan = str(tmp_path / "plan.json")  # never read: the option is refused first
    out = usage_error(run("evaluate", plan, "--rel-tol", value), "--rel-tol")
    assert "1e-06<=x<=0.5" in out
    usage_error(run("budget", INSTANCE, "--budgets", "10200", "--rel-tol", value), "--rel-tol")


def test_rel_tol_in_range_is_accepted_by_the_parser(tmp_path: Path) -> None:
    r = run("evaluate", str(tmp_path / "missing.json"), "--rel-tol", "0.05")
    assert "--rel-tol" not in r.output  # gets past the option (then: plan file not found)


def test_search_refuses_a_tolerance_that_never_or_always_stops() -> None:
    from planner.studies.search import largest_passing_multiplier

    for bad in (0.0, -1.0, math.nan, math.inf, 1.0, 10.0):
        with pytest.raises(ValueError, match="rel_tol"):
            largest_passing_multiplier(lambda m: m < 1.45, cap=16, rel_tol=bad)


def test_search_stops_when_the_bracket_cannot_be_split() -> None:
    from planner.studies.search import largest_passing_multiplier

    calls = 0

    def ok(m: float) -> bool:
        nonlocal calls
        calls += 1
        assert calls < 10_000, "the bisection does not stop"
        return m < 1.45

    m = largest_passing_multiplier(ok, cap=16, rel_tol=1e-300)  # below the float spacing
    assert m == pytest.approx(1.45, rel=1e-12) and m < 1.45


# 2. solve-robust --weights: finite, non-negative, positive sum


@pytest.mark.parametrize("weights", ["nan,1,1", "inf,1,1", "1,-1,1"])
def test_robust_weights_must_be_finite_and_non_negative(weights: str) -> None:
    out = usage_error(run("solve-robust", INSTANCE, "--weights", weights), "--weights")
    assert "finite, non-negative" in out


def test_robust_weights_all_zero_say_positive_sum() -> None:
    out = usage_error(run("solve-robust", INSTANCE, "--weights", "0,0,0"), "--weights")
    assert "positive sum" in out and "non-negative" not in out


def test_robust_weights_count_is_named() -> None:
    out = usage_error(run("solve-robust", INSTANCE, "--weights", "1,1"), "--weights")
    assert "2 weight(s) for 3 scenarios" in out


@pytest.mark.parametrize("weights", [[math.nan, 1.0], [math.inf, 1.0], [0.0, 0.0], [-1.0, 2.0]])
def test_solve_robust_library_refuses_bad_weights(weights: list[float]) -> None:
    from planner.studies.robust import solve_robust

    with pytest.raises(ValueError, match="finite, non-negative .* positive sum"):
        solve_robust([("a", None), ("b", None)], None, weights=weights)  # type: ignore[list-item, arg-type]


# 3. --seed: a non-negative integer (was "internal error: ValueError: expected non-negative integer", exit 1)


@pytest.mark.parametrize("args", [
    ["simulate", INSTANCE, "--seed", "-1"],
    ["evaluate", "plan.json", "--monte-carlo", "2", "--seed", "-1"],
    ["sweep", INSTANCE, "--monte-carlo", "2", "--seed", "-1"],
])
def test_negative_seed_is_a_usage_error(args: list[str]) -> None:
    usage_error(run(*args), "--seed")


# 4. simulate --duration / --load-gb-per-s: finite and > 0


@pytest.mark.parametrize("option", ["--duration", "--load-gb-per-s"])
@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_simulate_numbers_must_be_finite_and_positive(option: str, value: str) -> None:
    out = usage_error(run("simulate", INSTANCE, option, value), option)
    assert "x>0" in out


# 5. a horizon.json where a plan.json is read


def test_simulate_names_a_horizon_result(tmp_path: Path) -> None:
    horizon = tmp_path / "horizon.json"
    horizon.write_text(json.dumps({"schema_version": "1", "periods": 24, "slots": [], "architectures": {}}))
    out = usage_error(run("simulate", INSTANCE, "--plan", str(horizon)), "horizon")
    assert "plan over time" in out and "planner solve" in out and "planner horizon" in out
    assert "regenerate the plan" not in out and out.count("error") == 1


# 6. messages


def test_set_nan_says_finite_number() -> None:
    from planner.errors import InputError
    from planner.studies.spec import parse_sets

    for text in ("nan", "1,inf", ".nan", "1e999"):
        with pytest.raises(InputError, match="not a finite number"):
            parse_sets([f"services.chat.traffic.rate_multiplier={text}"])
    assert parse_sets(["a.name=nano"]).fixed == {"a.name": "nano"}  # text that is no number is left alone
    out = usage_error(run("sweep", INSTANCE, "--set", "services.chat.traffic.rate_multiplier=nan"), "rate_multiplier")
    assert "finite number" in out and "10000" not in out


def _one_instant_log(tmp_path: Path, rows: int) -> Path:
    log = tmp_path / "log.csv"
    log.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46.6805900,374,44\n" * rows)
    return log


@pytest.mark.parametrize("rows", [1, 3])
def test_one_instant_log_is_not_called_untimed(tmp_path: Path, rows: int) -> None:
    log = _one_instant_log(tmp_path, rows)
    out = usage_error(run("characterize", str(log), "--out", str(tmp_path / "p.yaml")), "no arrival span")
    assert "no timestamps" not in out
    inst = tmp_path / "inst.yaml"
    inst.write_text(Path(INSTANCE).read_text().replace("traces/azure2023_conv_min00-20.csv", str(log)))
    out = usage_error(run("check-instance", str(inst)), "no arrival span")
    assert "has no timestamps" not in out and out.count("no arrival span") == 1


def test_one_instant_log_with_a_given_peak_notes_it_once(tmp_path: Path) -> None:
    from planner.instance import load_instance
    from planner.workload.profile import service_profile

    log = _one_instant_log(tmp_path, 3)
    inst = tmp_path / "inst.yaml"
    inst.write_text(Path(INSTANCE).read_text().replace("traces/azure2023_conv_min00-20.csv", str(log)))
    profile = service_profile(load_instance(str(inst), {"services.chat.traffic.peak_rate_per_s": 5}), "chat")
    notes = profile.arrivals.notes
    assert any("no arrival span" in n for n in notes), notes
    assert not any("has no timestamps" in n or "fewer than two distinct" in n for n in notes), notes


def test_wrong_format_names_the_right_one() -> None:
    out = usage_error(run("characterize", str(TRACES / "azure2023_conv_min00-20.csv"), "--format", "mooncake"), "mooncake")
    assert "no columns" not in out and "--format azure" in out


def test_fleet_rate_file_is_named_with_its_command() -> None:
    out = usage_error(run("characterize", str(TRACES / "servegen_m-large_fleet_sum.csv")), "fleet rate file")
    assert "horizon.demand.fleet_file" in out and "planner horizon" in out and "pass --format" not in out
    out = usage_error(run("characterize", str(TRACES / "servegen_m-large_fleet_sum.csv"), "--format", "azure"), "fleet rate file")
    assert "horizon.demand.fleet_file" in out
