"""Device overrides merge provenance (``sources``, ``assumptions``) with the profile's own, per figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.catalog import apply_device_overrides, load_catalog
from planner.errors import InputError
from planner.instance import load_instance

ROOT = Path(__file__).resolve().parent.parent
TAG = "instance override (inst.yaml)"


def test_assumptions_of_an_override_are_merged_not_replacing_the_profiles() -> None:
    cpu = load_catalog().device("xeon6-6980p")
    assert "memory_gb" in cpu.assumptions and cpu.rental_usd_per_hour is None
    out = apply_device_overrides(cpu, {"rental_usd_per_hour": 2.6, "assumptions": {"rental_usd_per_hour": "2x amortisation"}},
                                 "inst.yaml", "catalog.device_overrides.xeon6-6980p")
    assert out.rental_usd_per_hour == 2.6 and out.complete
    assert out.assumptions["rental_usd_per_hour"] == f"{TAG}: 2x amortisation"
    assert out.assumptions["memory_gb"] == cpu.assumptions["memory_gb"]  # the profile's own kept
    assert out.sources == cpu.sources  # no generic source: the assumption is the figure's provenance
    assert set(out.assumptions) == set(cpu.assumptions) | {"rental_usd_per_hour"}


def test_an_overridden_figure_drops_the_profiles_stale_provenance() -> None:
    cpu = load_catalog().device("xeon6-6980p")
    assert "busy_power_w" in cpu.assumptions
    out = apply_device_overrides(cpu, {"busy_power_w": 640.0, "rental_usd_per_hour": 2.6,
                                       "sources": {"busy_power_w": "measured at the wall, 2025-05"}}, "inst.yaml", "p")
    assert "busy_power_w" not in out.assumptions  # the 0.7 x TDP rule described the old value
    assert out.sources["busy_power_w"] == f"{TAG}: measured at the wall, 2025-05"
    assert out.sources["rental_usd_per_hour"] == TAG
    assert out.sources["cores"] == cpu.sources["cores"] and out.assumptions["idle_power_w"] == cpu.assumptions["idle_power_w"]


def test_overrides_still_validate_every_figure() -> None:
    cpu = load_catalog().device("xeon6-6980p")
    with pytest.raises(InputError) as exc:
        apply_device_overrides(cpu, {"cores": -3}, "inst.yaml", "catalog.device_overrides.xeon6-6980p")
    assert "catalog.device_overrides.xeon6-6980p" in exc.value.render()


def test_agentic_example_states_its_cpu_prices_as_assumptions() -> None:
    r = load_instance(ROOT / "instances" / "agentic-assistant.yaml")
    for sid, price in (("xeon6-6980p", 2.60), ("epyc-9965", 2.80)):
        dev = r.devices[sid]
        assert dev.rental_usd_per_hour == price
        text = dev.assumptions["rental_usd_per_hour"]
        assert text.startswith("instance override (") and "agentic-assistant.yaml" in text and "quote" in text
        assert "memory_gb" in dev.assumptions  # the profile's own assumptions survive
    assert "$45,000" in r.devices["xeon6-6980p"].assumptions["rental_usd_per_hour"]
