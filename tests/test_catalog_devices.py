"""Device profiles in models/hardware: ids, sources, datasheet dense figures, completeness, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import apply_device_overrides, load_catalog
from planner.cli import main
from planner.errors import InputError
from planner.schema.hardware import DeviceProfile

HARDWARE = Path(__file__).resolve().parent.parent / "models" / "hardware"

REQUIRED_IDS = [
    "a100-sxm-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h800", "h200-sxm", "b200", "gb200", "b300", "gb300", "l40s", "l4",
    "rtx-pro-6000", "mi300x", "mi325x", "mi355x", "gaudi3",
    "trainium2", "inferentia2", "sn40l", "corsair", "tpu-v6e", "n300", "p150a",
    "xeon6-6980p", "epyc-9965",
]  # fmt: skip

# Expected incompleteness: id -> exactly the figures missing_for_serving() must report.
PRICE = "purchase_usd or rental_usd_per_hour"
INCOMPLETE = {
    "l4": [PRICE],
    "h800": [PRICE],  # sold only in China in 2023: no sourced price (models/hardware/h800.yaml notes)
    "mi355x": [PRICE],
    "b300": [PRICE],
    "gb300": [PRICE],
    "corsair": [PRICE],
    "trainium2": ["busy_power_w", "idle_power_w"],
    "inferentia2": ["busy_power_w", "idle_power_w", PRICE],
    "tpu-v6e": ["busy_power_w", "idle_power_w", PRICE],
    "sn40l": ["busy_power_w", "idle_power_w", PRICE],
    "xeon6-6980p": [PRICE],
    "epyc-9965": [PRICE],
}


def _raw(device_id: str) -> dict:
    return yaml.safe_load((HARDWARE / f"{device_id}.yaml").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- loading, provenance


@pytest.mark.parametrize("device_id", REQUIRED_IDS)
def test_required_id_loads_from_its_own_file(catalog, device_id):
    device = catalog.device(device_id)
    assert device.id == device_id
    assert catalog.device_files[device_id].name == f"{device_id}.yaml"


def test_catalog_holds_only_expected_profiles(catalog):
    assert sorted(catalog.devices) == sorted(REQUIRED_IDS)


@pytest.mark.parametrize("device_id", REQUIRED_IDS)
def test_every_set_figure_has_a_nonempty_source_or_assumption(catalog, device_id):
    device = catalog.device(device_id)
    fields = set(DeviceProfile.model_fields)
    for name in device.figure_fields_set():
        text = device.sources.get(name) or device.assumptions.get(name)
        assert text and len(text) > 15, f"{device_id}.{name} has no meaningful source"
    # a provenance entry for a field that does not exist is a typo hiding an unsourced figure
    assert set(device.sources) <= fields, set(device.sources) - fields
    assert set(device.assumptions) <= fields, set(device.assumptions) - fields
    # and every provenance entry describes a figure that is actually set
    assert set(device.sources) | set(device.assumptions) <= set(device.figure_fields_set())


@pytest.mark.parametrize("device_id", REQUIRED_IDS)
def test_power_follows_the_uniform_rule_and_is_an_assumption(catalog, device_id):
    """busy = 0.7 TDP and idle = 0.2 TDP for every device with a TDP; never claimed as sourced."""
    d = catalog.device(device_id)
    if d.tdp_w is None:
        assert d.busy_power_w is None and d.idle_power_w is None
        return
    assert d.busy_power_w == pytest.approx(0.7 * d.tdp_w)
    assert d.idle_power_w == pytest.approx(0.2 * d.tdp_w)
    for name in ("busy_power_w", "idle_power_w", "host_power_w"):
        assert name in d.assumptions and name not in d.sources, f"{device_id}.{name} must be an assumption"
    assert "0.7 x TDP" in d.assumptions["busy_power_w"]
    assert "0.2 x TDP" in d.assumptions["idle_power_w"]


def test_host_share_rule(catalog):
    # 2.8 kW host (8.4 kW measured 8xH100 node - 8 x 700 W) shared by the devices of a server
    for device_id in ("h100-sxm", "b200", "mi300x", "l4", "gaudi3"):
        assert catalog.device(device_id).host_power_w == pytest.approx(350.0)
    assert catalog.device("trainium2").host_power_w == pytest.approx(2800 / 16)
    assert catalog.device("inferentia2").host_power_w == pytest.approx(2800 / 12, abs=0.05)
    assert catalog.device("gb200").host_power_w == pytest.approx(120_000 / 72 - 1200, abs=0.05)


def test_amortization_years_is_stated_wherever_a_purchase_price_is(catalog):
    for d in catalog.devices.values():
        if d.purchase_usd is not None:
            assert "amortization_years" in d.model_fields_set, d.id
            assert "amortization_years" in d.assumptions, d.id


# --------------------------------------------------------------------------- datasheet figures


DENSE = {
    # id: (bf16, fp8, fp4) dense TFLOP/s from the datasheets (sparse / 2 where NVIDIA quotes sparse)
    "a100-sxm-80gb": (312, None, None),
    "h100-sxm": (989.4, 1979, None),
    "h100-pcie": (756.5, 1513, None),
    "h100-nvl": (835.5, 1670.5, None),
    "h200-sxm": (989.5, 1979, None),
    "b200": (2250, 4500, 9000),
    "gb200": (2500, 5000, 10000),
    "b300": (2250, 4500, 13125),  # Blackwell Ultra: dense FP4 is not sparse / 2 (18,000 sparse)
    "gb300": (2500, 5000, 15000),  # NVIDIA Blackwell Ultra blog: 15 PF dense NVFP4
    "mi355x": (2512.5, 5025, 10050),  # dense: AMD's 20.1 PF FP4 headline counts sparsity (ISSCC 2026: 5 PF FP8 dense)
    "l40s": (362.05, 733, None),
    "l4": (121, 242.5, None),
    "mi300x": (1307.4, 2614.9, None),
    "mi325x": (1307.4, 2614.9, None),
    "gaudi3": (1835, 1835, None),
    "trainium2": (667, 1299, None),
    "tpu-v6e": (918, None, None),
}


@pytest.mark.parametrize("device_id", sorted(DENSE))
def test_dense_tflops_equal_datasheet(catalog, device_id):
    flops = catalog.device(device_id).peak_tflops_dense
    for precision, expected in zip(("bf16", "fp8", "fp4"), DENSE[device_id], strict=True):
        assert flops.get(precision) == expected, f"{device_id} {precision}"


def test_known_traps_are_avoided(catalog):
    h100 = catalog.device("h100-sxm")
    assert h100.peak_tflops_dense["bf16"] != 1979  # LLM-Viewer's sparse "FP16"
    gb200 = catalog.device("gb200")
    assert gb200.memory_bandwidth_gb_per_s == pytest.approx(8000)  # 576 TB/s / 72, not aiconfigurator's 13.4 TB/s
    b200 = catalog.device("b200")
    assert b200.memory_gb == 180  # usable, not the marketed 192
    assert b200.memory_bandwidth_gb_per_s == 7700
    assert catalog.device("h100-nvl").memory_bandwidth_gb_per_s == 3900  # not gpu.blog's 4.8 TB/s
    assert catalog.device("h200-sxm").memory_gb == 141
    assert catalog.device("mi300x").memory_bandwidth_gb_per_s == 5300
    assert catalog.device("b300").memory_gb == 270  # usable (MLPerf B300-SXM-270GB), not the marketed 288
    assert catalog.device("b300").peak_tflops_dense["int8"] < 200  # Blackwell Ultra cut INT8: never the bf16 fallback
    assert catalog.device("gb300").host_power_w == pytest.approx(130_000 / 72 - 1400, abs=0.05)


def test_fp8_falls_back_to_bf16_compute_on_a100(catalog):
    a100 = catalog.device("a100-sxm-80gb")
    assert "fp8" not in a100.peak_tflops_dense
    # fp8 weights run upcast (W8A16): bf16 tensor rate, never the int8 one (624 TOPS; fp8 data does not run on
    # integer tensor cores); fp4 likewise; int8 itself at its own rate
    assert a100.peak_flops("fp8") == pytest.approx(312e12)
    assert a100.peak_flops("fp4") == pytest.approx(312e12)
    assert a100.peak_flops("int8") == pytest.approx(624e12)
    assert a100.peak_flops("bf16") == pytest.approx(312e12)
    assert a100.gemm_factor("fp8") == a100.gemm_factor("bf16")


@pytest.mark.parametrize("device_id", REQUIRED_IDS)
def test_units_are_plausible(catalog, device_id):
    """Catches TB/s typed as GB/s, GiB vs bytes, sparse vs dense ordering, one-vs-two-direction mixups."""
    d = catalog.device(device_id)
    assert d.memory_bandwidth_gb_per_s is not None and 250 <= d.memory_bandwidth_gb_per_s <= 200_000
    assert d.memory_gb is not None and 1 <= d.memory_gb <= 2048
    flops = d.peak_tflops_dense
    if "bf16" in flops and "fp8" in flops:
        assert flops["fp8"] >= flops["bf16"]
    if "fp8" in flops and "fp4" in flops:
        # 2x on Blackwell and CDNA 4; Blackwell Ultra (B300/GB300) doubled FP4 only: ~2.9-3x its FP8
        assert 2 * flops["fp8"] * 0.999 <= flops["fp4"] <= 3 * flops["fp8"]
    if d.pcie_bw_gb_per_s is not None:
        assert d.pcie_bw_gb_per_s in (32, 64, 128)  # Gen4 / Gen5 / Gen6 x16, one direction
    if d.kind != "cpu":
        assert d.cores is None
    else:
        assert d.cores and d.devices_per_node == 1 and not flops


def test_cpu_servers_are_two_socket_figures(catalog):
    xeon, epyc = catalog.device("xeon6-6980p"), catalog.device("epyc-9965")
    assert xeon.cores == 2 * 128 and epyc.cores == 2 * 192
    for cpu in (xeon, epyc):
        assert cpu.memory_bandwidth_gb_per_s == pytest.approx(2 * 12 * 6400e6 * 8 / 1e9)
        assert cpu.tdp_w == 2 * 500
        assert "2-socket" in cpu.name
        assert "memory_gb" in cpu.assumptions  # DRAM size is a configuration choice


# --------------------------------------------------------------------------- completeness


@pytest.mark.parametrize("device_id", REQUIRED_IDS)
def test_completeness_is_reported_with_the_missing_fields(catalog, device_id):
    d = catalog.device(device_id)
    assert d.missing_for_serving() == INCOMPLETE.get(device_id, [])
    assert d.complete is (device_id not in INCOMPLETE)


def test_override_completes_an_incomplete_profile_and_is_sourced_to_the_instance(catalog):
    l4 = catalog.device("l4")
    fixed = apply_device_overrides(l4, {"rental_usd_per_hour": 0.8}, "inst.yaml", "catalog.device_overrides.l4")
    assert fixed.complete
    assert fixed.sources["rental_usd_per_hour"] == "instance override (inst.yaml)"
    assert not l4.complete  # the catalog copy is untouched


# --------------------------------------------------------------------------- validation failures


def _write(tmp_path: Path, name: str, data: dict) -> Path:
    folder = tmp_path / "hardware"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_unsourced_figure_fails_naming_field_and_file(tmp_path):
    data = _raw("h100-sxm")
    del data["sources"]["memory_bandwidth_gb_per_s"]
    path = _write(tmp_path, "h100-sxm", data)
    with pytest.raises(InputError) as exc:
        load_catalog(tmp_path)
    text = exc.value.render()
    assert "memory_bandwidth_gb_per_s" in text and "without a source" in text
    assert str(path) in text


def test_unknown_key_fails_naming_the_key(tmp_path):
    data = _raw("b200")
    data["memory_bw_tb_per_s"] = 7.7
    _write(tmp_path, "b200", data)
    with pytest.raises(InputError) as exc:
        load_catalog(tmp_path)
    text = exc.value.render()
    assert "memory_bw_tb_per_s" in text
    assert "memory_bandwidth_gb_per_s" in text  # the fix lists the valid fields


def test_sparse_precision_key_is_rejected(tmp_path):
    data = _raw("b200")
    data["peak_tflops_dense"]["fp16"] = 2250
    _write(tmp_path, "b200", data)
    with pytest.raises(InputError) as exc:
        load_catalog(tmp_path)
    assert "peak_tflops_dense" in exc.value.render()


FIGURE_PAIRS = sorted(
    (device_id, name)
    for device_id in REQUIRED_IDS
    for name in DeviceProfile.model_validate(_raw(device_id)).figure_fields_set()
)


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(FIGURE_PAIRS))
def test_removing_any_provenance_entry_fails_validation_naming_that_field(pair):
    device_id, name = pair
    data = _raw(device_id)
    data.get("sources", {}).pop(name, None)
    data.get("assumptions", {}).pop(name, None)
    with pytest.raises(ValueError, match=name):
        DeviceProfile.model_validate(data)


# --------------------------------------------------------------------------- CLI


def test_cli_devices_json_lists_every_id_with_sources(monkeypatch):
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    result = CliRunner().invoke(main, ["catalog", "devices", "--json"])
    assert result.exit_code == 0, result.output
    devices = {d["id"]: d for d in json.loads(result.output)["devices"]}
    assert set(REQUIRED_IDS) <= set(devices)
    for device_id in REQUIRED_IDS:
        entry = devices[device_id]
        assert entry["sources"], device_id
        assert entry["file"] == f"{device_id}.yaml"
        assert entry["complete"] is (device_id not in INCOMPLETE)
        assert entry["missing"] == INCOMPLETE.get(device_id, [])
    assert devices["h100-sxm"]["peak_tflops_dense"]["bf16"] == 989.4


def test_cli_devices_table_runs_and_shows_every_id(monkeypatch):
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    result = CliRunner().invoke(main, ["catalog", "devices"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for device_id in REQUIRED_IDS:
        assert any(line.split()[:1] == [device_id] for line in lines), device_id
    assert "Dense FLOP/s" in result.output


def test_cli_bad_profile_exits_2_with_one_message(tmp_path, monkeypatch):
    data = _raw("gb200")
    del data["sources"]["memory_gb"]
    _write(tmp_path, "gb200", data)
    monkeypatch.setenv("PLANNER_MODELS_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["catalog", "devices"])
    assert result.exit_code == 2
    assert "memory_gb" in result.output and "gb200.yaml" in result.output
    assert "Traceback" not in result.output
