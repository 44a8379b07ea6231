"""``planner deploy``: launch settings for every target from every example plan, every emitted flag
and YAML key in the engine's own list (planner/data/engine_flags/), and bad input as one line, exit 2.

The example plans come from the session's solves (tests/conftest.py ``solved_example``), shared with
the verdict regression, so no example is solved twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main
from planner.deploy.flags import TARGETS, engine_flags, unknown_flags
from planner.deploy.targets import yaml_keys

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "instances").glob("*.yaml"))


def _allowed_yaml_keys(target: str) -> set[str]:
    data = engine_flags(target)
    out: set[str] = set()
    for keys in data.get("yaml_keys", {}).values():
        out |= set(keys)
    return out


@pytest.mark.parametrize("stem", EXAMPLES)
def test_deploy_writes_every_target_from_every_example(stem: str, solved_example, tmp_path: Path) -> None:
    from planner.catalog import load_catalog
    from planner.deploy import build_deployment, write_deployment

    solved = solved_example(stem)
    assert solved.exit_code == 0, solved.output
    plan = solved.plan()
    catalog = load_catalog()
    for target in TARGETS:
        for arch in sorted(a for a, ap in plan.architectures.items() if ap.feasible and ap.pools):
            dep = build_deployment(plan, catalog, target, architecture=arch, plan_file=str(solved.out_dir / "plan.json"))
            written = write_deployment(dep, tmp_path / target / arch)
            names = {p.name for p in written}
            assert {"settings.json", "NOTES.md"} <= names
            # every pool of the architecture is launched with its replicas
            pools = plan.architectures[arch].pools
            launched = {c.pool: c for c in dep.commands}
            for pool in pools:
                assert pool.name in launched, (target, arch, pool.name)
                assert launched[pool.name].replicas == pool.instances
            # every flag is in the engine's list, every YAML key in its key list
            for c in dep.commands:
                assert unknown_flags(target, c.argv, kind=c.kind) == [], (target, arch, c.pool, c.argv)
            allowed = _allowed_yaml_keys(target)
            for name, doc in dep.yaml_docs.items():
                assert yaml_keys(doc) - allowed == set(), (target, name)
                assert yaml.safe_load((tmp_path / target / arch / name).read_text()) == doc
            settings = json.loads((tmp_path / target / arch / "settings.json").read_text())
            assert settings["architecture"] == arch and len(settings["pools"]) == len(pools)


def test_enterprise_chat_vllm_settings_follow_the_plan(solved_example, tmp_path: Path) -> None:
    """The numbers of the vLLM command are the plan's: TP, replicas, fp8 weights and KV, the batch cap
    formed from the pool's operating points (B = 1 / sum s_i / B_i), memory fraction U_MEM."""
    from planner.deploy.pools import mixed_batch
    from planner.perf.roofline import U_MEM

    solved = solved_example("enterprise-chat")
    plan = solved.plan()
    r = CliRunner().invoke(main, ["deploy", str(solved.out_dir / "plan.json"), "--target", "vllm", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    settings = json.loads((tmp_path / "settings.json").read_text())
    arch = plan.verdict.winner
    assert settings["architecture"] == arch
    for pool in plan.architectures[arch].pools:
        cmd = next(c for c in settings["commands"] if c["pool"] == pool.name)
        argv = cmd["argv"]
        assert argv[0] == "meta-llama/Llama-3.1-70B"
        assert argv[argv.index("--tensor-parallel-size") + 1] == str(pool.tp)
        assert argv[argv.index("--quantization") + 1] == "fp8"
        assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
        assert float(argv[argv.index("--gpu-memory-utilization") + 1]) == pytest.approx(U_MEM)
        assert cmd["replicas"] == pool.instances
        rows = [(p, rt) for rt in plan.architectures[arch].routing if rt.pool == pool.name
                for p in plan.capacity.points if (p["service"], p["bucket"], p["role"], p["config"]) ==
                (rt.service, rt.bucket, rt.role, rt.config)]
        caps = [float(p["max_batch"]) for p, _ in rows]
        if pool.role == "prefill":
            shares = [rt.rate_peak_per_s * rt.share for _, rt in rows]
        else:
            demand = {(d["service"], d["bucket"]): d for d in plan.capacity.demand}
            shares = [rt.rate_peak_per_s * rt.share * demand[(p["service"], p["bucket"])]["output_tokens_rep"] for p, rt in rows]
        b = int(argv[argv.index("--max-num-seqs") + 1])
        assert b == int(mixed_batch(caps, shares) + 1e-9)
        assert min(caps) <= b <= max(caps)
        if pool.role in ("prefill", "decode"):
            assert json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_connector"] == "NixlConnector"


def test_mixed_batch_is_the_harmonic_cap() -> None:
    from planner.deploy.pools import mixed_batch

    assert mixed_batch([100.0], [3.0]) == pytest.approx(100.0)
    # half the resident sequences at a cap of 100, half at 50: each uses 1/100 or 1/50 of the step budget
    assert mixed_batch([100.0, 50.0], [1.0, 1.0]) == pytest.approx(1 / (0.5 / 100 + 0.5 / 50))


def test_flag_check_catches_an_unknown_flag() -> None:
    assert unknown_flags("vllm", ["m", "--max-num-seqs", "4", "--max-batch-size", "4"]) == ["--max-batch-size"]
    assert unknown_flags("sglang", ["--max-num-seqs", "4"]) == ["--max-num-seqs"]
    assert unknown_flags("dynamo", ["--is-prefill-worker", "--max-num-seqs", "8"]) == []


def test_every_flag_file_names_its_source() -> None:
    for target in TARGETS:
        d = engine_flags(target)
        assert d["repository"].startswith("https://github.com/") and len(d["commit"]) == 40 and d["path"] and d["version"]


def _run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["deploy", *args])
    return r.exit_code, r.output


def test_bad_input_is_one_line_exit_2(solved_example, tmp_path: Path) -> None:
    solved = solved_example("enterprise-chat")
    plan_file = solved.out_dir / "plan.json"
    code, out = _run(str(plan_file), "--target", "ollama", "--out", str(tmp_path / "a"))
    assert code == 2 and out.strip().startswith("error:") and "--target" in out and len(out.strip().splitlines()) == 1

    data = solved.plan_data()
    data["planner_version"] = "0.0.1"
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    code, out = _run(str(old), "--target", "vllm", "--out", str(tmp_path / "b"))
    assert code == 2 and "planner_version" in out and len(out.strip().splitlines()) == 1

    data = solved.plan_data()
    data["verdict"]["winner"] = None
    for ap in data["architectures"].values():
        ap["feasible"] = False
    none = tmp_path / "none.json"
    none.write_text(json.dumps(data))
    code, out = _run(str(none), "--target", "sglang", "--out", str(tmp_path / "c"))
    assert code == 2 and "no feasible architecture" in out and len(out.strip().splitlines()) == 1

    code, out = _run(str(plan_file), "--target", "vllm", "--architecture", "hybrid", "--out", str(tmp_path / "d"))
    assert code == 2 and out.startswith("error:") and len(out.strip().splitlines()) == 1


def test_what_a_target_cannot_express_goes_to_stderr_and_notes(solved_example, tmp_path: Path) -> None:
    """enterprise-chat runs on MI300X: TensorRT-LLM cannot run it, and says so (stderr and NOTES.md)."""
    solved = solved_example("enterprise-chat")
    r = CliRunner().invoke(main, ["deploy", str(solved.out_dir / "plan.json"), "--target", "trtllm", "--out", str(tmp_path)])
    assert r.exit_code == 0
    assert "warning:" in r.stderr and "NVIDIA GPUs only" in r.stderr
    assert "NVIDIA GPUs only" in (tmp_path / "NOTES.md").read_text()


def test_speculative_settings_are_emitted(tmp_path: Path) -> None:
    """A service with EAGLE speculation: the decode pool that chose it gets each engine's own speculative
    flags/keys (checked against the lists), and a pool mixing speculative and plain buckets says so."""
    from planner.catalog import load_catalog
    from planner.deploy import build_deployment

    text = (ROOT / "instances" / "enterprise-chat.yaml").read_text(encoding="utf-8")
    text = text.replace("    weight_precision: fp8 ", "    speculative: {method: eagle, num_speculative_tokens: 3, acceptance: 0.7, "
                        "draft_model: yuhuili/EAGLE3-LLaMA3.3-Instruct-70B}\n    weight_precision: fp8 ", 1)
    # hand-written buckets (no length mix, so each bucket's decode point runs its own lengths): a log's buckets
    # share one decode point at the service's mean lengths (issue 24 item 0), which speculates for all or none
    traffic = text[text.index("    traffic:\n"):text.index("catalog:")]
    text = text.replace(traffic, "    traffic:\n      rate_per_s: 5.0\n      lengths:\n"
                        "        - {input_tokens: 600, output_tokens: 250, weight: 0.8}\n"
                        "        - {input_tokens: 8000, output_tokens: 400, weight: 0.2}\n", 1)
    inst = tmp_path / "spec.yaml"
    inst.write_text(text, encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(inst), "--out", str(tmp_path / "plan"), "--confidence", "off"])
    assert r.exit_code == 0, r.output
    from planner.report.plan_io import load_plan

    plan = load_plan(tmp_path / "plan" / "plan.json")
    spec_rows = [p for p in plan.capacity.points if p.get("role") == "decode" and p.get("spec_method") == "eagle"]
    assert spec_rows, "the long-prompt bucket's decode point speculates (KV-bandwidth-bound at its batch)"
    # the plan says which it chose: report.md lists the speculating and the plain buckets of the decode pool
    report = (tmp_path / "plan" / "report.md").read_text(encoding="utf-8")
    assert "Speculative decoding in decode:" in report and "plain decoding for" in report
    catalog = load_catalog()
    expect = {"vllm": "--speculative-config", "sglang": "--speculative-algorithm", "dynamo": "--speculative-config",
              "llm-d": "--speculative-config"}
    for target in TARGETS:
        # the disaggregated plan (the shared one wins enterprise-chat since the shared point is chosen by tau/rho)
        dep = build_deployment(plan, catalog, target, architecture="disaggregated", plan_file=str(tmp_path / "plan" / "plan.json"))
        for c in dep.commands:
            assert unknown_flags(target, c.argv, kind=c.kind) == [], (target, c.argv)
        for name, doc in dep.yaml_docs.items():
            assert yaml_keys(doc) - _allowed_yaml_keys(target) == set(), (target, name)
        if target in expect:
            dec = next(c for c in dep.commands if c.pool.startswith("decode:"))
            assert expect[target] in dec.argv
        else:
            assert any("speculative_config" in yaml_keys(doc) for doc in dep.yaml_docs.values())
        assert any("speculates for" in w for w in dep.warnings)
