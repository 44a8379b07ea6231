"""Review of check-instance against solve (planner.instance.resolve_instance): the model's context, the
speculative draft and MTP module, the encode phase's tokens and tower width, a VL config.json as model,
and the fix of a file that does not exist (planner.validation.read_mapping)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main
from planner.errors import InputError, Problem
from planner.instance import load_instance
from planner.instance_checks import check_workload
from planner.validation import read_mapping
from planner.workload.context import CONTEXT_ERROR_SHARE

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ROOT / "instances"
CHAT = INSTANCES / "enterprise-chat.yaml"
MULTIMODAL = INSTANCES / "multimodal-image.yaml"
QWEN_VL_CONFIG = ROOT / "models" / "encoders" / "Qwen--Qwen2.5-VL-7B-Instruct_config.json"


def _write(tmp_path: Path, source: Path, changes: dict[str, Any], drop_scenarios: bool = True, remove: tuple[str, ...] = ()) -> Path:
    """``source`` with its first service's fields ``changes`` (``remove`` left out; traces made absolute),
    written to ``tmp_path``."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    svc = next(iter(data["services"].values()))
    svc.update(changes)
    for key in remove:
        svc.pop(key, None)
    trace = svc["traffic"].get("trace")
    if trace:
        svc["traffic"]["trace"] = str(source.parent / trace)
    if drop_scenarios:
        data.pop("scenarios", None)
    out = tmp_path / source.name
    out.write_text(yaml.safe_dump(data), encoding="utf-8")
    return out


def _problems(path: Path) -> list[Problem]:
    """What check-instance rejects: the instance itself, then its workload (planner.instance_checks)."""
    with pytest.raises(InputError) as exc:
        check_workload(load_instance(path))
    return exc.value.problems


def _check_instance(path: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["check-instance", str(path)])
    return r.exit_code, r.output


# --- item 1: the model's maximum context ---------------------------------------------------------

def test_hand_written_lengths_beyond_the_context_are_an_error_in_check_instance_and_solve(tmp_path: Path) -> None:
    path = tmp_path / "ctx.yaml"
    path.write_text(yaml.safe_dump({
        "name": "ctx",
        "services": {"s": {"model": "phi-3-mini-4k", "slo": {"ttft": {"quantile": 0.99, "target_ms": 5000},
                                                             "tpot": {"quantile": 0.99, "target_ms": 50}},
                           "traffic": {"rate_per_s": 2.0, "lengths": [{"input_tokens": 1000, "output_tokens": 200, "weight": 0.5},
                                                                      {"input_tokens": 16000, "output_tokens": 200, "weight": 0.5}]}}},
        "catalog": {"devices": ["h100-sxm"], "tp_degrees": [1, 2], "pricing": "rent"}}), encoding="utf-8")
    (p,) = _problems(path)
    assert p.path == "services.s.traffic.lengths[1]"
    assert "16,200" in p.message and "4,096" in p.message and "max_context_tokens" in p.message
    for command in (["check-instance", str(path)], ["solve", str(path), "-q", "--no-cache"]):
        r = CliRunner().invoke(main, command)
        assert r.exit_code == 2 and "services.s.traffic.lengths[1]" in r.output, r.output


def test_a_log_mostly_beyond_the_context_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, INSTANCES / "long-context-assistant.yaml", {"model": "phi-3-mini-4k", "weight_precision": "bf16"})
    (p,) = _problems(path)
    assert p.path.endswith(".traffic") and "4,096 tokens" in p.message and "engine rejects" in p.message
    share = int(p.message.split("about ")[1].split("%")[0])
    assert share > 100 * CONTEXT_ERROR_SHARE


def test_a_log_partly_beyond_the_context_is_a_note_that_reaches_the_plan(tmp_path: Path) -> None:
    path = _write(tmp_path, CHAT, {"model": "phi-3-mini-4k", "weight_precision": "bf16", "speculative": None})
    from planner.capacity import build_capacity_tables

    resolved = load_instance(path)
    (note,) = check_workload(resolved)
    # the Azure conversation log: 457 of its 5,985 requests exceed 4,096 tokens (counted from the CSV); the
    # estimate from the profile's finest length bins is a little above that
    assert "services.chat" in note and "of 5,985" in note and "engine rejects" in note
    assert 457 <= int(note.split("(~")[1].split(" of")[0].replace(",", "")) < 700
    assert note in build_capacity_tables(resolved).meta["notes"]  # the plan's notes
    printed = CliRunner().invoke(main, ["check-instance", str(path)])
    assert printed.exit_code == 0 and f"note: {note}" in printed.output  # check-instance says what solve will note


def test_shipped_instances_carry_no_context_note() -> None:
    for path in sorted(INSTANCES.glob("*.yaml")):
        assert check_workload(load_instance(path)) == [], path


# --- item 2: check-instance catches what solve rejects -------------------------------------------

def test_unknown_draft_model_gives_the_message_solve_gives(tmp_path: Path) -> None:
    from planner.perf.speculative import draft_profile

    path = _write(tmp_path, CHAT, {"speculative": {"method": "draft_model", "num_speculative_tokens": 3, "acceptance": 0.7,
                                                   "draft_model": "llama-9-tiny"}})
    (p,) = _problems(path)
    base = load_instance(CHAT)
    spec = yaml.safe_load(path.read_text())["services"]["chat"]["speculative"]
    from planner.schema.speculative import SpeculativeDecoding

    with pytest.raises(InputError) as solve_error:
        draft_profile(base, "chat", SpeculativeDecoding.model_validate(spec))
    (q,) = solve_error.value.problems
    assert (p.path, p.message, p.fix) == (q.path, q.message, q.fix)
    assert _check_instance(path)[0] == 2


@pytest.mark.parametrize(("draft", "words"), [("llama-3.1-405b", "not smaller"), ("llama-3.1-70b", "not smaller"),
                                              ("qwen3-0.6b", "same tokenizer")])
def test_a_draft_larger_than_the_target_or_of_another_vocabulary_is_rejected(tmp_path: Path, draft: str, words: str) -> None:
    path = _write(tmp_path, CHAT, {"speculative": {"method": "draft_model", "num_speculative_tokens": 3, "acceptance": 0.7,
                                                   "draft_model": draft}})
    (p,) = _problems(path)
    assert p.path == "services.chat.speculative.draft_model" and words in p.message and draft in p.message


def test_a_smaller_draft_of_the_same_family_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, CHAT, {"speculative": {"method": "draft_model", "num_speculative_tokens": 3, "acceptance": 0.7,
                                                   "draft_model": "llama-3.1-8b"}})
    assert check_workload(load_instance(path)) == []


@pytest.mark.parametrize(("tokens", "words"), [({"image": 0}, "neither its trace nor encode.tokens_per_request"),
                                               ({"audio": 500}, "500 audio tokens")])
def test_encode_tokens_solve_rejects_are_rejected_by_check_instance(tmp_path: Path, tokens: dict[str, float], words: str) -> None:
    data = yaml.safe_load(MULTIMODAL.read_text())
    encode = {**next(iter(data["services"].values()))["encode"], "tokens_per_request": tokens}
    path = _write(tmp_path, MULTIMODAL, {"encode": encode})
    (p,) = _problems(path)
    assert p.file == str(path) and p.path == "services.vqa.encode" and words in p.message
    code, output = _check_instance(path)
    assert code == 2 and words in output


# --- item 3: mtp needs the model's own MTP module --------------------------------------------------

def test_mtp_on_a_model_without_an_mtp_module_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, CHAT, {"speculative": {"method": "mtp", "num_speculative_tokens": 2, "acceptance": 0.8}})
    (p,) = _problems(path)
    assert p.path == "services.chat.speculative.method" and "multi-token-prediction" in p.message
    assert "eagle" in p.fix and "draft_model" in p.fix


def test_mtp_on_deepseek_v3_is_accepted() -> None:
    load_instance(INSTANCES / "deepseek-v3-wide-ep.yaml",
                  {"services.api.speculative": {"method": "mtp", "num_speculative_tokens": 1, "acceptance": 0.85}})


# --- item 4: the tower must fit the model ---------------------------------------------------------

def test_a_vision_tower_of_another_width_than_the_model_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, MULTIMODAL, {"model": "llama-3.1-8b"})
    (p,) = _problems(path)
    assert p.path == "services.vqa.encode.encoder" and "3,584" in p.message and "4,096" in p.message and "llama-3.1-8b" in p.message


# --- item 5: a VL config.json as model with encode --------------------------------------------------

def test_a_vl_config_as_model_with_encode_points_to_the_catalog_profile_and_encode_encoder(tmp_path: Path) -> None:
    path = _write(tmp_path, MULTIMODAL, {"model": str(QWEN_VL_CONFIG)})
    (p,) = _problems(path)
    assert p.path == "services.vqa.model"
    assert "not modelled" not in p.message
    assert "encode.encoder" in p.fix and "qwen2.5-vl-7b" in p.fix and "text-only checkpoint" not in p.fix


def test_a_vl_config_as_model_without_encode_keeps_its_message(tmp_path: Path) -> None:
    path = _write(tmp_path, MULTIMODAL, {"model": str(QWEN_VL_CONFIG)}, remove=("encode",))
    (p,) = _problems(path)
    assert "not modelled" in p.message and "text-only checkpoint" in p.fix


# --- item 6: the fix of a missing file matches the lookup made -------------------------------------

def test_a_missing_absolute_file_lists_its_folder_not_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text("a: 1\n")
    with pytest.raises(InputError) as exc:
        read_mapping(tmp_path / "nosuch.yaml")
    (p,) = exc.value.problems
    assert "current directory" not in p.fix and str(tmp_path) in p.fix and "default.yaml" in p.fix


def test_a_missing_relative_file_names_the_current_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        read_mapping(Path("sub") / "nosuch.yaml")
    (p,) = exc.value.problems
    assert f"current directory, {os.getcwd()}" in p.fix


def test_an_unknown_calibration_name_is_not_sent_to_the_current_directory() -> None:
    from planner.perf.calibration import load_calibration

    with pytest.raises(InputError) as exc:
        load_calibration("nosuch")
    (p,) = exc.value.problems
    assert "current directory" not in p.fix and "calibration" in p.fix
