"""Review fixes: a plan simulated with another instance, an evaluate --set that changes the model, the HTML
verdict's per-token difference, another command's JSON given as a plan, the HTML simulated wait's quantile,
and the tool phase's two reload / recompute figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_report_labels import _Tables  # the HTML tables parser of the report-label tests

from planner.cli import main

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"


def _one_error_line(res: Any) -> str:
    """The exit code is 2 and the message one ``error:`` line with no traceback; returns it."""
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in res.output, res.output
    return err


# --- 1. simulate --plan with another instance's plan ------------------------------------------------------


def test_simulate_refuses_a_plan_solved_for_another_instance(solved_example: Any) -> None:
    """It simulated multimodal-image's vqa service under agentic-assistant, said "met yes" and exited 0; only a
    trailing note said the service is not in the instance."""
    mm = solved_example("multimodal-image")
    assert mm.exit_code == 0, mm.output
    other = ROOT / "instances" / "agentic-assistant.yaml"
    res = CliRunner().invoke(main, ["simulate", str(other), "--plan", str(mm.out_dir / "plan.json"), "--scenario", "peak",
                                    "--duration", "10"])
    err = _one_error_line(res)
    assert "'multimodal-image'" in err and "'agentic-assistant'" in err and "'vqa'" in err, err
    assert str(mm.instance) in err and f"planner solve {other}" in err, err  # the fixes: its own instance, or re-solve
    assert res.stdout == ""  # nothing simulated


def test_simulate_still_takes_the_plans_own_instance(solved_example: Any) -> None:
    mm = solved_example("multimodal-image")
    res = CliRunner().invoke(main, ["simulate", str(mm.instance), "--plan", str(mm.out_dir / "plan.json"), "--scenario", "peak",
                                    "--duration", "5", "--json"])
    assert res.exit_code == 0, res.output
    assert not any("not in" in n for n in json.loads(res.stdout)["notes"])


# --- 2. evaluate --set that changes what the held pools serve -----------------------------------------------


def test_evaluate_names_the_set_that_changes_the_model(solved_example: Any) -> None:
    """The error said "evaluate with the instance the plan was solved for (--instance)" though no other instance was
    given: the --set changed the model the held pools serve."""
    ag = solved_example("agentic-assistant")
    assert ag.exit_code == 0, ag.output
    res = CliRunner().invoke(main, ["evaluate", str(ag.out_dir / "plan.json"), "--set", "services.agent.model=llama-3.1-8b"])
    err = _one_error_line(res)
    assert "--set services.agent.model=llama-3.1-8b changes what the held pools serve" in err, err
    assert "--instance" not in err and "drop it, or re-solve" in err, err
    assert "planner solve" in err and "--set services.agent.model=llama-3.1-8b --out DIR" in err, err


# --- 3. the HTML verdict's difference per 1M tokens -----------------------------------------------------------


def test_html_verdict_gives_a_small_per_token_difference_to_three_digits(solved_example: Any) -> None:
    """agentic-assistant: "per 1M tokens $0.128 against $0.129 ($0 per 1M tokens less)"; the terminal said 0.001."""
    from planner.report.html import verdict_sentence

    plan = solved_example("agentic-assistant").plan()
    v = plan.verdict
    assert not v.tie_rule and v.runner_up is not None
    for margin, shown in ((0.0010583884626223423, "$0.00106"), (0.0042, "$0.0042"), (0.0123, "$0.0123"), (1.5, "$1.5")):
        text = verdict_sentence(plan.model_copy(update={"verdict": v.model_copy(update={"margin_usd_per_million_tokens": margin})}))
        assert f"({shown} per 1M tokens less)" in text, text


def test_html_report_does_not_say_zero_per_token_difference(solved_example: Any, tmp_path: Path) -> None:
    ag = solved_example("agentic-assistant")
    out = tmp_path / "x.html"
    res = CliRunner().invoke(main, ["html", str(ag.out_dir / "plan.json"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    margin = ag.plan().verdict.margin_usd_per_million_tokens
    text = out.read_text(encoding="utf-8")
    if 0 < margin < 0.005:
        assert "($0 per 1M tokens less)" not in text
        assert f"(${margin:.3g} per 1M tokens less)" in text


# --- 4. another command's JSON where a plan.json is read --------------------------------------------------------


@pytest.mark.parametrize("command", [["check"], ["html"], ["simulate", str(MINIMAL), "--plan"], ["evaluate"]])
def test_a_sweep_output_is_named_as_such(command: list[str], tmp_path: Path) -> None:
    """A `planner sweep --json` output gave 6 field errors, each "regenerate the plan with this version of `planner solve`"."""
    sweep = tmp_path / "sweep.json"
    res = CliRunner().invoke(main, ["sweep", str(MINIMAL), "--set", "services.chat.traffic.rate_multiplier=1,2", "--jobs", "1", "--json"])
    assert res.exit_code == 0, res.output
    sweep.write_text(res.stdout, encoding="utf-8")
    args = [*command, str(sweep)] + (["-o", str(tmp_path / "x.html")] if command == ["html"] else [])
    err = _one_error_line(CliRunner().invoke(main, args))
    assert "this is the output of `planner sweep --json`, not a plan.json" in err, err
    assert "planner solve INSTANCE --out DIR" in err and "regenerate" not in err, err


@pytest.mark.parametrize(("doc", "command"), [
    ({"schema_version": "1", "budgets": []}, "planner budget --json"),
    ({"schema_version": "1", "architecture": "shared", "instances": {}, "rows": []}, "planner evaluate --json"),
    ({"schema_version": "1", "objective": "max", "scenarios": [], "weights": [], "winner": None, "rows": [], "plans": {}},
     "planner solve-robust --json"),
    ({"instance": "x", "plan": "p", "architecture": "shared", "arrivals": "a", "duration_s": 1, "seed": 0,
      "model_swap_reload": {}, "notes": [], "scenarios": {}}, "planner simulate --json"),
    ({"schema_version": 1, "instance": "x", "evaluated": "h.json", "architecture": "shared", "regret": []},
     "planner horizon --evaluate --json"),
    ({"schema_version": 1, "instance": "x", "sweep": []}, "planner horizon --sweep --json"),
])
def test_other_outputs_are_named(doc: dict[str, Any], command: str, tmp_path: Path) -> None:
    f = tmp_path / "out.json"
    f.write_text(json.dumps(doc), encoding="utf-8")
    err = _one_error_line(CliRunner().invoke(main, ["check", str(f)]))
    assert f"this is the output of `{command}`, not a plan.json" in err, err


def test_a_plan_with_a_wrong_field_is_still_a_plan(solved_example: Any, tmp_path: Path) -> None:
    from planner.report.plan_io import other_output

    data = solved_example("multimodal-image").plan_data()
    assert other_output(data) is None
    data["rows"] = []  # an extra key of a sweep's: still a plan with a bad field, not a sweep
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    err = _one_error_line(CliRunner().invoke(main, ["check", str(f)]))
    assert "rows: Extra inputs are not permitted" in err and "regenerate the plan" in err, err


# --- 5. the HTML simulated wait's quantile ------------------------------------------------------------------


def test_html_simulated_pool_wait_names_its_quantile(solved_example: Any) -> None:
    """"wait analytic" read "p99 …", "wait simulated" a bare figure (`planner simulate` says "wait p99 ms"); the
    simulated figure is the histogram's quantile at the pool's own ``quantile`` (planner.verify._simulated_pools)."""
    from planner.report.html import render_html

    plan = solved_example("multimodal-image").plan()
    arch = plan.architectures["disaggregated"]
    assert arch.simulation is not None and arch.simulation.pools
    pools = [p.model_copy(update={"quantile": 0.95}) if i == 0 else p for i, p in enumerate(arch.simulation.pools)]
    arch = arch.model_copy(update={"simulation": arch.simulation.model_copy(update={"pools": pools})})
    plan = plan.model_copy(update={"architectures": {**plan.architectures, "disaggregated": arch}})
    parsed = _Tables()
    parsed.feed(render_html(plan=plan))
    for name, a in plan.architectures.items():
        assert a.simulation is not None
        rows = parsed.tables[f"table-peak-sim-pools-{name}"]["body"]
        for row, p in zip(rows, a.simulation.pools, strict=True):
            label = f"p{p.quantile * 100:g} "
            assert row[4].startswith(label) and row[5].startswith(label), (row, p.quantile)
            assert re.fullmatch(rf"{label}[0-9.,]+ ms", row[5]), row
    assert parsed.tables["table-peak-sim-pools-disaggregated"]["body"][0][5].startswith("p95 ")


# --- 6. the tool phase's reload / recompute figures -------------------------------------------------------------


def test_tool_tables_say_which_reload_and_recompute_time_they_give(solved_example: Any) -> None:
    """agentic-assistant printed "recompute ms 2,784" in the tool table and "recompute 2,786 ms" in the policy table:
    two quantities, not one rounded twice. The tool table's is the request-weighted mean over the routed points at the
    buckets' mean lengths (ToolPhaseRow.recompute_ms: 2,457 and 3,112 ms for the two buckets); the policy reason's
    is the TTFT check's at one point, at its bucket's representative lengths (recompute_ms_rep). The table now says
    "(mean)" and the reason the context its figure is for, the bucket's representative input + output tokens."""
    from planner.agents.report import tool_phase_lines, tool_phase_markdown

    plan = solved_example("agentic-assistant").plan()
    rep_context = {round(float(d["input_tokens_rep"]) + float(d["output_tokens_rep"])) for d in plan.capacity.demand}
    seen = 0
    for arch in plan.architectures.values():
        if arch.tool_phase is None:
            continue
        text = "\n".join(tool_phase_lines(arch))
        assert "reload ms (mean)" in text and "recompute ms (mean)" in text, text
        assert "| reload ms (mean) | recompute ms (mean) |" in "\n".join(tool_phase_markdown(arch))
        for row in arch.tool_phase.tools:
            for alt in row.alternatives:
                for m in re.finditer(r"(reload|recompute) [0-9,]+ ms( \(([0-9,]+) tokens\))? \+", alt.reason):
                    assert m.group(3) is not None, alt.reason  # the figure says the context it is for
                    assert int(m.group(3).replace(",", "")) in rep_context, (alt.reason, rep_context)
                    seen += 1
    assert seen > 0


def test_error_band_names_an_uncalibrated_engine_on_a_calibrated_device() -> None:
    """The H100 is calibrated (vLLM, SGLang, TensorRT-LLM rows): a plan on its ``default`` engine was told it ran on an
    "uncalibrated device" (review of 2026-12-06); it is the engine that has no band there."""
    from planner.perf.calibration import error_band

    src = error_band("h100-sxm", "default")[2]
    assert src.startswith("uncalibrated engine: default on h100-sxm (calibrated there: ")
    assert error_band("b200", "default")[2].startswith("uncalibrated device: ")
    assert error_band("h100-sxm", "vllm")[2].startswith("calibrated:h100-sxm/vllm")


def test_a_saturated_pools_headroom_says_routing_is_held() -> None:
    """deepseek-v3-wide-ep: 'traffic 0.1 % above the forecast saturates it' beside evaluate's plan headroom ×1.1 (the plan
    re-routes to its top-up pool): the sentence says it holds the routing and where the plan's headroom is."""
    from planner.report.explain import saturation_explanation

    why = saturation_explanation("prefill:x", 3, "h100-sxm/tp8", 0.999)
    assert "saturates it with the plan's routing held" in why and "planner evaluate PLAN.json" in why
