"""The engines' own flag and key lists (``planner/data/engine_flags/<target>.json``).

Each file names the engine version, repository, commit and path the list was read from (the
engines' argument definitions: vLLM ``EngineArgs.add_cli_args``, SGLang ``ServerArgs``,
``trtllm-serve``'s click options and LLM-API keys, Dynamo's worker and frontend parsers, the
llm-d-modelservice chart's values). :func:`unknown_flags` checks an emitted command against them,
so a renamed flag fails the tests instead of reaching a user.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

TARGETS: tuple[str, ...] = ("vllm", "sglang", "trtllm", "dynamo", "llm-d")


@cache
def engine_flags(target: str) -> dict[str, Any]:
    """The flag file of ``target`` (one of :data:`TARGETS`)."""
    text = resources.files("planner").joinpath("data", "engine_flags", f"{target}.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def allowed_flags(target: str, *, kind: str = "flags") -> set[str]:
    """Flags a command of ``target`` may carry: its own list plus the list it inherits (Dynamo and
    llm-d workers take vLLM's engine flags)."""
    data = engine_flags(target)
    out = set(data.get(kind, []))
    if kind == "flags" and data.get("inherits"):
        out |= set(engine_flags(data["inherits"]).get("flags", []))
    return out


def flags_in(argv: list[str]) -> list[str]:
    """The option names of a command line (``--x`` / ``-x`` tokens; ``--x=v`` gives ``--x``)."""
    out = []
    for tok in argv:
        if tok.startswith("-") and len(tok) > 1 and not tok[1].isdigit():
            out.append(tok.split("=", 1)[0])
    return out


def unknown_flags(target: str, argv: list[str], *, kind: str = "flags") -> list[str]:
    """Flags of ``argv`` that ``target``'s list (``kind``: ``flags``, ``frontend_flags``,
    ``disaggregated_flags``, ``router``) does not have."""
    if kind == "router":
        allowed = set(engine_flags(target).get("router", {}).get("flags", []))
    else:
        allowed = allowed_flags(target, kind=kind)
    return [f for f in flags_in(argv) if f not in allowed]


def source_line(target: str) -> str:
    """One line naming the engine, version, repository, commit and path of ``target``'s list."""
    d = engine_flags(target)
    return f"{d['engine']} {d['version']}: {d['repository']} @ {d['commit']} ({d['path']})"
