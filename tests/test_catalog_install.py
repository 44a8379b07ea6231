"""The catalog as an installed tool sees it (issue 18): shipped profiles through importlib.resources,
PLANNER_MODELS_DIR / catalog.path adding and replacing profiles with a note, clear errors for a
missing folder or an empty catalog, `planner examples`, `planner --version` and the versions a
plan records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from planner import catalog as catalog_module
from planner.catalog import load_catalog, shipped_models_dir
from planner.cli import main
from planner.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def _user_catalog(tmp_path: Path) -> Path:
    """A user folder: a new device (a renamed H200) and an H100 at another rental price."""
    folder = tmp_path / "mycat"
    (folder / "hardware").mkdir(parents=True)
    l4 = yaml.safe_load((ROOT / "models" / "hardware" / "h200-sxm.yaml").read_text(encoding="utf-8"))
    l4["id"] = "my-l4"
    (folder / "hardware" / "my-l4.yaml").write_text(yaml.safe_dump(l4, sort_keys=False), encoding="utf-8")
    h100 = yaml.safe_load((ROOT / "models" / "hardware" / "h100-sxm.yaml").read_text(encoding="utf-8"))
    h100["rental_usd_per_hour"] = 1.23
    (folder / "hardware" / "h100-sxm.yaml").write_text(yaml.safe_dump(h100, sort_keys=False), encoding="utf-8")
    return folder


def test_shipped_catalog_is_found_through_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    assert shipped_models_dir().resolve() == (ROOT / "models").resolve()
    cat = load_catalog()
    assert len(cat.devices) >= 20 and len(cat.models) >= 12
    assert cat.notes == () and cat.version.startswith("sha256:") and len(cat.version) == len("sha256:") + 12


def test_user_folder_adds_and_replaces_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    shipped = load_catalog()
    monkeypatch.setenv("PLANNER_MODELS_DIR", str(_user_catalog(tmp_path)))
    cat = load_catalog()
    assert set(cat.devices) == set(shipped.devices) | {"my-l4"}
    assert cat.devices["h100-sxm"].rental_usd_per_hour == 1.23
    assert len(cat.notes) == 1 and "'h100-sxm'" in cat.notes[0] and "replaces" in cat.notes[0]
    assert cat.version != shipped.version
    res = CliRunner().invoke(main, ["catalog", "devices"])
    assert res.exit_code == 0 and "my-l4" in res.output and "note: catalog: device 'h100-sxm'" in res.output


def test_missing_user_folder_names_it_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANNER_MODELS_DIR", str(tmp_path / "nope"))
    res = CliRunner().invoke(main, ["catalog", "devices"])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and str(tmp_path / "nope") in line and "PLANNER_MODELS_DIR" in line and "fix:" in line


def test_empty_catalog_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "models"
    (empty / "hardware").mkdir(parents=True)
    (empty / "llm").mkdir()
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    monkeypatch.setattr(catalog_module, "shipped_models_dir", lambda: empty)
    with pytest.raises(InputError) as exc:
        load_catalog()
    text = exc.value.render()
    assert str(empty) in text and "no device" in text and "no model" in text and "PLANNER_MODELS_DIR" in text


def test_unknown_id_never_offers_an_empty_list() -> None:
    cat = catalog_module.Catalog({}, {}, {}, {}, folders=(Path("/x/models"),))
    with pytest.raises(InputError) as exc:
        cat.device("h100-sxm")
    text = exc.value.render()
    assert "use one of: )" not in text and "/x/models" in text


def test_instance_catalog_path_adds_a_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    _user_catalog(tmp_path)
    data = yaml.safe_load((ROOT / "instances" / "enterprise-chat.yaml").read_text(encoding="utf-8"))
    for svc in data["services"].values():
        svc["traffic"]["trace"] = str(ROOT / "instances" / svc["traffic"]["trace"])
    data["catalog"]["devices"] = ["my-l4"]
    data["catalog"]["path"] = "mycat"
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    from planner.instance import load_instance

    resolved = load_instance(path)
    assert "my-l4" in resolved.devices
    assert any("h100-sxm" in n for n in resolved.catalog.notes)
    data["catalog"]["path"] = "missing"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(InputError, match="catalog.path"):
        load_instance(path)


def test_examples_list_and_copy(tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(main, ["examples", "--list"])
    names = sorted(p.name for p in (ROOT / "instances").glob("*.yaml"))
    assert listed.exit_code == 0 and all(n in listed.output for n in names)
    dest = tmp_path / "my-plan"
    res = runner.invoke(main, ["examples", str(dest)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in dest.glob("*.yaml")) == names
    for name in names:  # every log an example reads is there, next to its SOURCE note
        data = yaml.safe_load((dest / name).read_text(encoding="utf-8"))
        for svc in data["services"].values():
            if "trace" not in svc["traffic"]:
                continue  # traffic given by rate and lengths (deepseek-v3-wide-ep)
            trace = dest / svc["traffic"]["trace"]
            assert trace.is_file() and trace.read_bytes() == (ROOT / "instances" / svc["traffic"]["trace"]).read_bytes()
    assert (dest / "instance.schema.json").is_file()
    assert "$schema=instance.schema.json" in (dest / "enterprise-chat.yaml").read_text(encoding="utf-8")
    again = runner.invoke(main, ["examples", str(dest)])
    assert again.exit_code == 2 and "--force" in again.output and "Traceback" not in again.output
    assert runner.invoke(main, ["examples", str(dest), "--force"]).exit_code == 0
    check = runner.invoke(main, ["check-instance", str(dest / "enterprise-chat.yaml")])
    assert check.exit_code == 0, check.output


def test_version_names_package_and_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    from planner import __version__

    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0
    assert f"planner {__version__}" in res.output and f"catalog {load_catalog().version}" in res.output


def test_plan_records_both_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_MODELS_DIR", raising=False)
    from planner import __version__

    res = CliRunner().invoke(main, ["solve", str(ROOT / "instances" / "enterprise-chat.yaml"), "--json", "--set", "options.verify=false"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["planner_version"] == __version__ and plan["catalog_version"] == load_catalog().version


def test_wheel_package_data_covers_every_catalog_and_example_file() -> None:
    """Each file under models/ and instances/ matches a package-data pattern (or the wheel would miss it)."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["planner"]
    for top in ("models", "instances"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = f"{top}/{path.relative_to(ROOT / top).as_posix()}"
                assert any(fnmatch.fnmatchcase(rel, pat) and rel.count("/") == pat.count("/") for pat in patterns), rel


def test_plan_notes_a_profile_that_replaces_a_shipped_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANNER_MODELS_DIR", str(_user_catalog(tmp_path)))
    res = CliRunner().invoke(main, ["solve", str(ROOT / "instances" / "enterprise-chat.yaml"), "--json", "--set", "options.verify=false"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert any("device 'h100-sxm'" in n and "replaces" in n for n in plan["notes"])
    assert plan["catalog_version"] == load_catalog().version
