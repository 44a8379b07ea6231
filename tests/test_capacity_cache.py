"""The on-disk capacity-table cache (planner.capacity_cache): a hit gives the very tables a rebuild
gives; a changed device profile, a changed log, an override or a changed calibration misses;
a corrupt entry is rebuilt; the optimiser's prepared tables are cached the same way;
``planner solve`` uses it unless ``--no-cache``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from planner.capacity import build_capacity_tables
from planner.capacity_cache import cache_dir, cache_key, cached_capacity_tables
from planner.catalog import _load_catalog_cached
from planner.cli import main
from planner.instance import load_instance

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"


def _same(a, b) -> None:
    for name in ("demand", "points", "configs"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert a.costs == b.costs and a.meta == b.meta


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """An instance with its own catalog folder holding a copy of the L40S profile, and a log."""
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    (tmp_path / "mycat" / "hardware").mkdir(parents=True)
    profile = tmp_path / "mycat" / "hardware" / "l40s.yaml"
    shutil.copy(ROOT / "models" / "hardware" / "l40s.yaml", profile)
    log = tmp_path / "log.csv"
    log.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.2:.1f},{300 + 37 * i % 900},{50 + 11 * i % 200}\n" for i in range(300)),
                   encoding="utf-8")
    data = yaml.safe_load(MINIMAL.read_text(encoding="utf-8"))
    data["catalog"]["path"] = "mycat"
    data["catalog"]["device_overrides"] = {}
    data["services"]["chat"]["traffic"] = {"trace": "log.csv", "columns": {"time": "arrival_s", "input": "input_tokens",
                                                                            "output": "output_tokens"}, "buckets": 2}
    inst = tmp_path / "inst.yaml"
    inst.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    _load_catalog_cached.cache_clear()  # the in-process catalog memo would hide the edits below
    yield inst, profile, log
    _load_catalog_cached.cache_clear()


def test_hit_gives_the_rebuilt_tables_and_a_changed_profile_misses(setup, tmp_path: Path) -> None:
    inst, profile, _log = setup
    store = tmp_path / "cache"
    resolved = load_instance(inst)
    first, status = cached_capacity_tables(resolved, directory=store)
    assert status == "miss" and len(list(store.glob("*.pkl"))) == 1
    again, status = cached_capacity_tables(load_instance(inst), directory=store)
    assert status == "hit"
    _same(again, first)
    _same(again, build_capacity_tables(resolved))

    text = profile.read_text(encoding="utf-8")
    assert "rental_usd_per_hour:" in text
    lines = [("rental_usd_per_hour: 9.75" if ln.startswith("rental_usd_per_hour:") else ln) for ln in text.splitlines()]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _load_catalog_cached.cache_clear()
    changed = load_instance(inst)
    assert cache_key(changed) != cache_key(resolved)
    tables, status = cached_capacity_tables(changed, directory=store)
    assert status == "miss" and len(list(store.glob("*.pkl"))) == 2
    price = tables.configs.set_index("config").at["l40s/tp1", "equipment_usd_per_device_hour"]
    assert price == pytest.approx(9.75)
    assert first.configs.set_index("config").at["l40s/tp1", "equipment_usd_per_device_hour"] != pytest.approx(9.75)


def test_a_changed_log_an_override_or_a_calibration_misses(setup, tmp_path: Path) -> None:
    inst, _profile, log = setup
    base = cache_key(load_instance(inst))
    assert cache_key(load_instance(inst)) == base  # deterministic
    assert cache_key(load_instance(inst, {"services.chat.traffic.rate_multiplier": 1.5})) != base
    log.write_text(log.read_text(encoding="utf-8").replace(",300,", ",3000,", 1), encoding="utf-8")
    assert cache_key(load_instance(inst)) != base
    changed_log = cache_key(load_instance(inst))
    calibration = tmp_path / "my.calibration.yaml"
    shutil.copy(ROOT / "models" / "calibration" / "h100_dense.yaml", calibration)
    data = yaml.safe_load(inst.read_text(encoding="utf-8"))
    data["calibration"] = calibration.name
    inst.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with_cal = cache_key(load_instance(inst))
    assert with_cal != changed_log
    calibration.write_text(calibration.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert cache_key(load_instance(inst)) != with_cal


def test_a_corrupt_entry_is_rebuilt(setup, tmp_path: Path) -> None:
    inst, _profile, _log = setup
    store = tmp_path / "cache"
    resolved = load_instance(inst)
    good, _ = cached_capacity_tables(resolved, directory=store)
    (entry,) = store.glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    tables, status = cached_capacity_tables(resolved, directory=store)
    assert status == "miss"
    _same(tables, good)
    assert cached_capacity_tables(resolved, directory=store)[1] == "hit"


def test_least_recently_used_entries_are_pruned(tmp_path: Path) -> None:
    import os

    from planner.capacity_cache import _prune

    for i in range(5):
        f = tmp_path / f"{i}.pkl"
        f.write_bytes(b"x")
        os.utime(f, (1000 + i, 1000 + i))
    _prune(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.glob("*.pkl")) == ["2.pkl", "3.pkl", "4.pkl"]


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PLANNER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "planner"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "planner"


def test_solve_writes_the_cache_and_no_cache_leaves_it_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "cache"
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(store))
    runner = CliRunner()
    r = runner.invoke(main, ["solve", str(MINIMAL), "--no-cache", "--confidence", "off", "--json"])
    assert r.exit_code == 0, r.output
    assert not store.exists()
    cold = runner.invoke(main, ["solve", str(MINIMAL), "--confidence", "off", "--json"])
    assert cold.exit_code == 0, cold.output
    assert len(list(store.glob("*.pkl"))) == 3  # capacity tables, prepared tables, the plan (planner.plan_cache)
    warm = runner.invoke(main, ["solve", str(MINIMAL), "--confidence", "off", "--json"])
    assert warm.exit_code == 0, warm.output
    import json

    def costs(out: str) -> dict[str, float]:
        data = json.loads(out)
        return {a: p["costs"]["total_usd_per_month"] for a, p in data["architectures"].items() if p.get("costs")}

    assert costs(warm.output) == costs(cold.output) == costs(r.output)


def test_prepared_tables_hit_gives_what_prepare_gives_and_max_utilization_misses(setup, tmp_path: Path) -> None:
    from planner.capacity_cache import cached_prepared, prepared_key
    from planner.optimize.prepare import prepare

    inst, _profile, _log = setup
    store = tmp_path / "cache"
    resolved = load_instance(inst)
    tables, _ = cached_capacity_tables(resolved, directory=store)
    first, status = cached_prepared(resolved, tables, None, directory=store)
    assert status == "miss"
    again, status = cached_prepared(load_instance(inst), tables, None, directory=store)
    assert status == "hit"
    fresh = prepare(tables, max_utilization=None)
    for name in ("points", "demand", "pools"):
        pd.testing.assert_frame_equal(getattr(again, name), getattr(fresh, name))
        pd.testing.assert_frame_equal(getattr(again, name), getattr(first, name))
    assert again.caps_method == fresh.caps_method
    assert prepared_key(resolved, 0.5) != prepared_key(resolved, None)
    capped, status = cached_prepared(resolved, tables, 0.5, directory=store)
    assert status == "miss"
    assert float(capped.points["rho"].max()) <= 0.5 < float(fresh.points["rho"].max())
