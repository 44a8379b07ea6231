"""Bad instance files (issue 2): one message per problem naming file, field path and fix,
exit code 2, no traceback unless ``--debug``; a property test that corrupted files never
crash. Everything goes through the CLI (``planner check-instance``, ``planner schema``)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main

DATA = Path(__file__).resolve().parent / "data" / "instances"
VALID = DATA / "valid_minimal.yaml"


def _base() -> dict[str, Any]:
    return yaml.safe_load(VALID.read_text(encoding="utf-8"))


def _check(path: Path, *extra: str) -> Result:
    return CliRunner().invoke(main, [*extra, "check-instance", str(path)])


def _write(tmp_path: Path, data: Any, name: str = "instance.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _bad(result: Result, path: Path) -> list[str]:
    """Assert the bad-input contract and return the problem lines."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error:")
    problems = [ln for ln in lines if str(path) in ln]
    assert problems, result.stderr
    for line in problems:
        assert "(fix: " in line, line
    return problems


def _mutated(tmp_path: Path, edit: Any) -> Path:
    data = _base()
    edit(data)
    return _write(tmp_path, data)


def test_valid_minimal_instance_passes() -> None:
    result = _check(VALID)
    assert result.exit_code == 0, result.output
    assert "valid" in result.stdout
    assert "1 service(s), 2 candidate device(s), 1 scenario(s)" in result.stdout


def test_unknown_key_lists_the_valid_fields(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["services"]["chat"].__setitem__("modle", "llama-3.1-8b"))
    (line,) = _bad(_check(path), path)
    assert f"{path}: services.chat.modle: unknown field" in line
    from planner.schema.instance import Service

    assert "model" in Service.model_fields and "traffic" in Service.model_fields
    assert "valid fields here: " + ", ".join(sorted(Service.model_fields)) in line


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d.__setitem__("servces", {}))
    (line,) = _bad(_check(path), path)
    from planner.schema.instance import Instance

    assert "services" in Instance.model_fields
    assert "servces: unknown field" in line and "valid fields here: " + ", ".join(sorted(Instance.model_fields)) in line


def test_unknown_key_in_a_list_item(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["services"]["chat"]["traffic"]["lengths"][1].__setitem__("wieght", 0.3))
    lines = _bad(_check(path), path)
    assert any("services.chat.traffic.lengths[1].wieght: unknown field" in ln and "weight" in ln for ln in lines)


def test_wrong_type(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["options"].__setitem__("redundancy", "two"))
    (line,) = _bad(_check(path), path)
    assert f"{path}: options.redundancy:" in line and "valid integer" in line and "'two'" in line


def test_a_list_where_a_mapping_belongs(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d.__setitem__("services", ["chat"]))
    (line,) = _bad(_check(path), path)
    assert f"{path}: services:" in line and "dictionary" in line


def test_unit_inside_a_number(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["catalog"]["device_overrides"]["l40s"].__setitem__("memory_gb", "80 GB"))
    (line,) = _bad(_check(path), path)
    assert f"{path}: catalog.device_overrides.l40s.memory_gb:" in line
    assert "'80 GB'" in line and "plain number without units" in line


def test_unknown_model(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["services"]["chat"].__setitem__("model", "llama-9b"))
    (line,) = _bad(_check(path), path)
    assert f"{path}: services.chat.model: unknown model 'llama-9b'" in line
    assert "use one of:" in line and "llama-3.1-8b" in line


def test_unknown_device(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["catalog"]["devices"].__setitem__(0, "h100-sxm5"))
    (line,) = _bad(_check(path), path)
    assert f"{path}: catalog.devices[0]: unknown device 'h100-sxm5'" in line
    assert "h100-sxm" in line.split("use one of:")[1]


def test_negative_price_in_a_device_override(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["catalog"]["device_overrides"]["l40s"].__setitem__("rental_usd_per_hour", -1))
    (line,) = _bad(_check(path), path)
    assert f"{path}: catalog.device_overrides.l40s.rental_usd_per_hour:" in line
    assert "greater than 0" in line and "(got -1)" in line


def test_negative_cost_setting(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["costs"].__setitem__("ops_usd_per_pool_month", -500))
    (line,) = _bad(_check(path), path)
    assert "costs.ops_usd_per_pool_month" in line and "greater than or equal to 0" in line


@pytest.mark.parametrize("quantile", [0, 1, 1.5, 99, -0.5])
def test_quantile_outside_open_unit_interval(tmp_path: Path, quantile: float) -> None:
    path = _mutated(tmp_path, lambda d: d["services"]["chat"]["slo"]["tpot"].__setitem__("quantile", quantile))
    (line,) = _bad(_check(path), path)
    assert f"{path}: services.chat.slo.tpot.quantile:" in line
    assert "than 0" in line or "than 1" in line


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    (line,) = _bad(_check(path), path)
    assert "file does not exist" in line and "check the path" in line


def test_missing_trace_file(tmp_path: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["services"]["chat"]["traffic"] = {"trace": "logs/missing.csv", "format": "azure"}

    path = _mutated(tmp_path, edit)
    (line,) = _bad(_check(path), path)
    assert f"{path}: services.chat.traffic.trace: file 'logs/missing.csv' does not exist" in line
    assert str(tmp_path / "logs" / "missing.csv") in line
    assert "relative to the instance file" in line


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nservices:\n  chat: {model: llama-3.1-8b\ncatalog: {}\n", encoding="utf-8")
    (line,) = _bad(_check(path), path)
    assert "is not valid YAML" in line and "line 4" in line


@pytest.mark.parametrize("text", ["", "   \n# only a comment\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text, encoding="utf-8")
    (line,) = _bad(_check(path), path)
    assert "is empty" in line


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    (line,) = _bad(_check(path), path)
    assert "not a mapping" in line


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bytes.yaml"
    path.write_bytes(b"name: \xff\xfe\x00 x\n")
    (line,) = _bad(_check(path), path)
    assert "cannot be read" in line or "not valid YAML" in line


def test_infinite_number_is_rejected(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["services"]["chat"]["traffic"].__setitem__("rate_per_s", float("inf")))
    (line,) = _bad(_check(path), path)
    assert "services.chat.traffic.rate_per_s: inf is not a finite number" in line


def test_bad_scenario_override(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["scenarios"].__setitem__("shrink", {"services.chat.traffic.rate_multiplier": -1}))
    (line,) = _bad(_check(path), path)
    assert "scenarios.shrink.services.chat.traffic.rate_multiplier" in line and "greater than 0" in line


def test_override_provenance_must_be_a_mapping(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["catalog"]["device_overrides"]["l40s"].__setitem__("sources", "my quote"))
    (line,) = _bad(_check(path), path)
    assert "catalog.device_overrides.l40s.sources: must be a mapping" in line


def test_scenario_path_that_cannot_apply_names_the_scenario(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["scenarios"].__setitem__("odd", {"services.chat.traffic.lengths.7.weight": 1}))
    (line,) = _bad(_check(path), path)
    assert f"{path}: scenarios.odd.services.chat.traffic.lengths.7.weight: cannot descend" in line


def test_override_of_a_service_the_instance_lacks_names_its_services(tmp_path: Path) -> None:
    """An override never creates a service (issue 24 item 6: an error whose fix exists): before, the new, empty
    service got "give exactly one of 'trace' ... got none (fix: see the message)"."""
    path = _mutated(tmp_path, lambda d: d["scenarios"].__setitem__("typo", {"services.chta.traffic.buckets": 8}))
    (line,) = _bad(_check(path), path)
    assert "scenarios.typo.services.chta.traffic.buckets: the instance has no service 'chta' (its services: chat)" in line
    assert "fix: use one of them, e.g. services.chat.traffic.buckets" in line


def test_non_string_key(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["scenarios"].__setitem__("odd", {1: 2}))
    (line,) = _bad(_check(path), path)
    assert f"{path}: scenarios.odd.1: key 1 must be a string" in line


def test_several_problems_are_all_listed_at_once(tmp_path: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["services"]["chat"]["modle"] = "x"  # unknown key
        d["services"]["chat"]["model"] = "gpt-5"  # missing reference
        d["services"]["chat"]["slo"]["ttft"]["quantile"] = 1.2  # quantile
        d["catalog"]["devices"].append("tpu-v99")  # missing reference
        d["catalog"]["device_overrides"]["l40s"]["rental_usd_per_hour"] = -1  # negative price
        d["costs"]["electricity_usd_per_kwh"] = "0.12 USD"  # unit in a number

    path = _mutated(tmp_path, edit)
    result = _check(path)
    lines = _bad(result, path)
    assert result.stderr.startswith("error: 6 problems found:")
    expected = [
        "services.chat.modle: unknown field",
        "services.chat.model: unknown model 'gpt-5'",
        "services.chat.slo.ttft.quantile",
        "catalog.devices[2]: unknown device 'tpu-v99'",
        "catalog.device_overrides.l40s.rental_usd_per_hour",
        "costs.electricity_usd_per_kwh",
    ]
    for fragment in expected:
        assert sum(fragment in ln for ln in lines) == 1, (fragment, result.stderr)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda d: d["services"]["chat"].__setitem__("modle", "x"))
    result = _check(path, "--debug")
    # the traceback is printed and the exit code stays that of bad input (2)
    assert result.exit_code == 2 and "Traceback (most recent call last)" in result.output and "InputError" in result.output
    # end to end: the real console shows a Python traceback
    proc = subprocess.run(
        [sys.executable, "-c", "from planner.cli import main; main()", "--debug", "check-instance", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback (most recent call last)" in proc.stderr
    assert "services.chat.modle" in proc.stderr


def test_schema_command_prints_the_instance_json_schema(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False  # unknown keys are errors in editors too
    assert set(schema["required"]) >= {"name", "services", "catalog"}
    # costs may be left out: every cost field has a default that says where it comes from
    assert "costs" not in schema["required"]
    assert "EIA" in schema["$defs"]["Costs"]["properties"]["electricity_usd_per_kwh"]["description"]
    out = tmp_path / "instance.schema.json"
    result = CliRunner().invoke(main, ["schema", "-o", str(out)])
    assert result.exit_code == 0 and json.loads(out.read_text(encoding="utf-8")) == schema
    quantile = schema["$defs"]["LatencyTarget"]["properties"]["quantile"]
    assert quantile["exclusiveMinimum"] == 0 and quantile["exclusiveMaximum"] == 1


def test_schema_to_an_unwritable_place_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["schema", "-o", str(tmp_path / "no" / "such" / "dir" / "s.json")])
    assert result.exit_code in (1, 2)
    assert "Traceback" not in result.stderr


# --- property: corrupted files never crash ------------------------------------------------

def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((*prefix, i))
            out.extend(_paths(v, (*prefix, i)))
    return out


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


BASE = _base()
BASE_TEXT = VALID.read_text(encoding="utf-8")
PATHS = _paths(BASE)
MAPPING_PATHS = [()] + [p for p in PATHS if isinstance(_parent(BASE, (*p, None)), dict)]

def _field_names() -> list[str]:
    from planner.schema.hardware import DeviceProfile
    from planner.schema.instance import Instance

    names = set(DeviceProfile.model_fields)
    stack: list[Any] = [Instance]
    while stack:
        model = stack.pop()
        for name, field in model.model_fields.items():
            names.add(name)
            for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
                if isinstance(arg, type) and hasattr(arg, "model_fields") and arg.__name__ not in names:
                    names.add(arg.__name__)
                    stack.append(arg)
    return sorted(names)


FIELD_NAMES = _field_names()
keys = st.one_of(st.text(min_size=1, max_size=10), st.sampled_from(FIELD_NAMES))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["80 GB", "-1", "1e400", "h100-sxm", "llama-3.1-8b", "", "0.99", "~", "../x.csv"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)), max_leaves=6)


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["delete", "replace", "insert", "truncate", "bytes", "several"]))
    if kind == "truncate":
        cut = draw(st.integers(0, len(BASE_TEXT)))
        return BASE_TEXT[:cut].encode()
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    data = copy.deepcopy(BASE)
    rounds = draw(st.integers(2, 5)) if kind == "several" else 1
    for _ in range(rounds):
        op = draw(st.sampled_from(["delete", "replace", "insert"])) if kind == "several" else kind
        live = _paths(data)
        if op == "insert" or not live:
            holders = [p for p in [(), *live] if isinstance(_parent(data, (*p, None)), dict)]
            target = _parent(data, (*draw(st.sampled_from(holders)), None))
            target[draw(keys)] = draw(values)
            continue
        path = draw(st.sampled_from(live))
        parent = _parent(data, path)
        if op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(values)
    try:
        return yaml.safe_dump(data, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, UnicodeEncodeError):
        return BASE_TEXT.encode()[: len(BASE_TEXT) // 2]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=corrupted())
def test_corrupted_instances_never_produce_a_traceback(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corrupted.yaml"
        path.write_bytes(content)
        result = _check(path)
    assert result.exit_code in (0, 2), (result.exit_code, result.output, content[:300])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code == 2:
        assert result.stderr.startswith("error:")
        assert str(path) in result.stderr
