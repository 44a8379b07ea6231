"""``planner deploy PLAN.json --target T --out DIR``: a plan turned into engine launch settings.

Flow (one way, after the report stage): the plan file (:func:`planner.report.plan_io.load_plan`)
-> one :class:`~planner.deploy.pools.PoolLaunch` per pool of the chosen architecture (model,
precisions, parallelism, batch cap, token budget, memory fraction, replicas, speculation; the
formulas are in :mod:`planner.deploy.pools`) -> the target's files
(:mod:`planner.deploy.targets`) whose flags and keys are the engine's own, as listed with their
version in ``planner/data/engine_flags/`` (:mod:`planner.deploy.flags`).

Written to ``DIR``: the target's launch script / YAML files, ``settings.json`` (the same settings
as data: per pool its numbers and argv, and the flag list's source), and ``NOTES.md`` (how each
number was derived; *warnings* for what the plan needs and the target cannot express, which the
CLI also prints on stderr).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from planner.deploy.flags import TARGETS, source_line
from planner.deploy.targets import Deployment

if TYPE_CHECKING:
    from planner.catalog import Catalog
    from planner.schema.plan import PlanResult

__all__ = ["TARGETS", "Deployment", "build_deployment", "deploy_plan", "write_deployment"]


def _error(file: str, path: str, message: str, fix: str) -> Exception:
    from planner.errors import InputError, Problem

    return InputError(Problem(file, path, message, fix))


def choose_architecture(plan: PlanResult, requested: str | None, plan_file: str) -> str:
    """The requested architecture, or the plan's winner; an error when it is absent or infeasible."""
    feasible = sorted(a for a, ap in plan.architectures.items() if ap.feasible and ap.pools)
    if requested is None:
        if plan.verdict.winner is None or plan.verdict.winner not in feasible:
            raise _error(plan_file, "verdict.winner", "the plan has no feasible architecture to deploy",
                         "re-solve the instance with more devices, a larger budget or looser targets (see `planner solve`'s diagnosis)")
        return str(plan.verdict.winner)
    if requested not in plan.architectures:
        raise _error(plan_file, "architectures", f"the plan has no {requested!r} architecture",
                     f"use --architecture {' or '.join(feasible) or '(none feasible)'}")
    if requested not in feasible:
        raise _error(plan_file, f"architectures.{requested}.feasible", f"the {requested} architecture has no feasible plan",
                     f"use --architecture {' or '.join(feasible)}" if feasible else "re-solve the instance")
    return requested


def check_version(plan: PlanResult, plan_file: str) -> None:
    """A plan from another planner version is refused: its capacity columns may mean something else."""
    from planner import __version__
    from planner.schema.plan import PlanResult as _PR

    current_schema = _PR.model_fields["schema_version"].default
    if plan.schema_version != current_schema:
        raise _error(plan_file, "schema_version", f"plan schema {plan.schema_version!r}, this planner reads {current_schema!r}",
                     "regenerate the plan with this version of `planner solve`")
    if plan.planner_version and plan.planner_version != __version__:
        raise _error(plan_file, "planner_version", f"plan written by planner {plan.planner_version}, this is planner {__version__}",
                     "regenerate the plan with this version of `planner solve`")


def build_deployment(plan: PlanResult, catalog: Catalog, target: str, *, architecture: str | None = None,
                     plan_file: str = "plan.json") -> Deployment:
    """The settings of ``architecture`` (default: the winner) of ``plan`` for ``target`` (pure: no files written)."""
    from planner.deploy.pools import instance_services, kv_precisions_of, pool_launch
    from planner.deploy.targets import (
        _common_warnings,
        emit_dynamo,
        emit_llmd,
        emit_sglang,
        emit_trtllm,
        emit_vllm,
        encode_settings,
    )

    if target not in TARGETS:
        raise _error("", "--target", f"unknown target {target!r}", f"use one of: {', '.join(TARGETS)}")
    check_version(plan, plan_file)
    arch = choose_architecture(plan, architecture, plan_file)
    services = instance_services(plan.instance_path, Path(plan_file), plan.overrides) if plan.instance_path else None
    kv = kv_precisions_of(services) if services is not None else None
    all_pools = plan.architectures[arch].pools
    empty = [p for p in all_pools if p.instances <= 0]
    live = [p for p in all_pools if p.instances > 0]
    if not live:
        raise _error(plan_file, f"architectures.{arch}.pools", f"every pool of the {arch} architecture has 0 instances: nothing to launch",
                     "re-solve the instance (a solved plan's pools have at least one instance), or fix the hand-edited instances")
    encode = [p for p in live if p.role == "encode"]  # issue 26: a separate vision-tower pool
    pools = [pool_launch(plan, arch, p, catalog, kv, services, plan_file) for p in live if p.role != "encode"]
    if not pools:
        raise _error(plan_file, f"architectures.{arch}.pools", f"the {arch} architecture has no LLM pool with instances",
                     "re-solve the instance")
    order = {"prefill": 0, "decode": 1, "unified": 2}
    pools.sort(key=lambda p: (order[p.role], p.pool))
    dep = Deployment(target=target, architecture=arch)
    if empty:
        dep.warnings.append(f"{', '.join(p.name for p in empty)}: 0 instances in the plan, not launched (a hand-edited plan? "
                            "re-solve it if that pool's traffic must be served)")
    if encode:
        encode_settings(pools, encode, target, dep)
    _common_warnings(pools, target, dep)
    header = [f"planner deploy: {plan.instance} ({arch} architecture) for {target}",
              f"flags as in {source_line(target)}", "every number: see NOTES.md and settings.json"]
    emitters = {"vllm": emit_vllm, "sglang": emit_sglang, "trtllm": emit_trtllm}
    if target in emitters:
        emitters[target](pools, dep, header)
    elif target == "dynamo":
        emit_dynamo(pools, dep, header, plan.instance)
    else:
        emit_llmd(pools, dep, header, plan.instance)
    tool = plan.architectures[arch].tool_phase
    if tool is not None and tool.cpu_pools:
        dep.notes.append("the plan's CPU pool for tool calls (and its KV tier) is not an engine setting: provision it separately "
                         f"({', '.join(f'{c.instances} x {c.server}' for c in tool.cpu_pools)})")
    dep.files["settings.json"] = json.dumps({
        "target": target, "architecture": arch, "instance": plan.instance, "planner_version": plan.planner_version,
        "flags_source": source_line(target),
        "pools": [asdict(p) for p in pools],
        "commands": [asdict(c) for c in dep.commands],
        "warnings": dep.warnings, "notes": dep.notes,
    }, indent=2) + "\n"
    dep.files["NOTES.md"] = _notes_md(plan, dep, pools)
    return dep


def _notes_md(plan: PlanResult, dep: Deployment, pools: list) -> str:
    lines = [f"# {plan.instance}: {dep.architecture} architecture on {dep.target}", "",
             f"Flags and keys as in {source_line(dep.target)}.", "",
             "| pool | replicas | devices/replica | TP | EP | DP | batch cap | token budget | chunk | max model length | memory fraction | model | weights | KV |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in pools:
        lines.append(f"| {p.pool} | {p.instances} | {p.gpus_per_instance} | {p.tp} | {p.ep} | {p.dp} | {p.max_seqs} | "
                     f"{p.token_budget} | {p.chunk_tokens or '-'} | {p.max_model_tokens or 'model default'} | {p.memory_fraction:.2f} | "
                     f"{p.hf_id} | {p.weight_precision} | {p.kv_precision} |")
    lines += ["", "## Warnings: what the plan needs and the target cannot express", ""]
    lines += [f"- {w}" for w in dep.warnings] or ["- none"]
    lines += ["", "## How the numbers were derived", "",
              "- batch cap: B = 1 / sum_i (s_i / B_i) over the pool's buckets (B_i: the operating point's latency-limited batch; "
              "s_i: share of resident sequences, peak rate x output tokens); token budget: B x V + prefill chunk (unified), "
              "max_batch x prompt tokens (prefill; expert-parallel prefill: m prompts per DP rank), B x V (decode; V tokens verified "
              "per step: 1, k + 1 for k speculative tokens, the draft tree's verify_tokens); max model length: the longest request "
              "(input + output) where the plan records every length; memory fraction: the planner's "
              "u_mem (planner/perf/roofline.py U_MEM). Formulas: planner/deploy/pools.py.", ""]
    lines += [f"- {n}" for n in dep.notes]
    return "\n".join(lines) + "\n"


def write_deployment(dep: Deployment, out_dir: str | Path) -> list[Path]:
    """Write every file of ``dep`` into ``out_dir`` (created); the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in dep.files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        if name.endswith(".sh"):
            path.chmod(0o755)
        written.append(path)
    return written


def deploy_plan(plan_file: str | Path, target: str, out_dir: str | Path, *, architecture: str | None = None,
                catalog: Catalog | None = None) -> tuple[Deployment, list[Path]]:
    """Read ``plan_file``, build the target's settings and write them to ``out_dir``."""
    from planner.catalog import load_catalog
    from planner.report.plan_io import load_plan

    if target not in TARGETS:
        raise _error("", "--target", f"unknown target {target!r}", f"use one of: {', '.join(TARGETS)}")
    plan = load_plan(plan_file)
    dep = build_deployment(plan, catalog or load_catalog(), target, architecture=architecture, plan_file=str(plan_file))
    return dep, write_deployment(dep, out_dir)
