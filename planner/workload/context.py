"""Requests beyond the model's context window (input + output tokens > the profile's ``max_context_tokens``).

An engine rejects such a request (vLLM: "This model's maximum context length is ..."), so a plan for it
is a plan for traffic no deployment serves. Hand-written ``traffic.lengths`` are checked exactly where
the instance is resolved (:func:`planner.instance.resolve_instance`); a log's or a profile's requests
are counted here, on the workload profile the capacity table is built from (:func:`context_findings`:
``planner.capacity`` for every planning command, :func:`planner.instance_checks.check_workload` for
``planner check-instance``).

**Rule**: more than :data:`CONTEXT_ERROR_SHARE` of the requests beyond the context is an error (the
plan would be for traffic that cannot be served); fewer is a note in the plan naming the share, the
requests planned as if served. **How approximate**: the share is read from each bucket's fine length
sub-bins (``length_mix``: input representative + mean output, :mod:`planner.workload.buckets` item 5), not
from each request: on the Azure conversation log against a 4,096-token context it says ~543 of 5,985
where the CSV counts 457 (errs high, by about a sub-bin's width)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.errors import Problem

if TYPE_CHECKING:
    from planner.instance import ResolvedInstance
    from planner.schema.instance import Service
    from planner.schema.llm import LLMProfile
    from planner.schema.workload import WorkloadProfile

CONTEXT_ERROR_SHARE = 0.5
"""A log or profile with more than this share of its requests beyond the model's context is an error;
with fewer, a note (module docstring)."""


def context_share(profile: WorkloadProfile, context: int) -> float:
    """Estimated share of a profile's requests whose input + output tokens exceed ``context``: per bucket,
    the sub-bins of its ``length_mix`` (input representative + mean output) beyond it, weighted by their
    shares (the bucket's own means when it has no mix)."""
    share = 0.0
    for b in profile.buckets:
        mix = b.length_mix or [(1.0, b.input_tokens_mean, b.output_tokens_mean)]
        share += b.weight * sum(w for w, inp, out in mix if inp + out > context)
    return share


def context_finding(name: str, svc: Service, model: LLMProfile, profile: WorkloadProfile, file: str) -> tuple[Problem | None, str | None]:
    """(error, note) for a log's or profile's requests beyond the context (rule: :data:`CONTEXT_ERROR_SHARE`)."""
    ctx = model.max_context_tokens
    share = context_share(profile, ctx)
    total = profile.arrivals.requests
    source = svc.traffic.trace or svc.traffic.profile or "the traffic"
    what = (f"about {share:.0%} of the requests of {source} (~{round(share * total):,} of {total:,}) need more context "
            f"(input + output tokens) than {svc.model} offers ({ctx:,} tokens, max_context_tokens)")
    if share > CONTEXT_ERROR_SHARE:
        return Problem(file, f"services.{name}.traffic", f"{what}: an engine rejects them, so the plan would be for traffic it cannot serve",
                       "plan a model with a longer context, or traffic whose requests fit (e.g. traffic.input_length_multiplier)"), None
    if share > 0:
        return None, f"services.{name}: {what}: an engine rejects them; they are planned as if served"
    if profile.input_tokens.max > ctx:
        return None, (f"services.{name}: the longest input of {source} ({profile.input_tokens.max:,.0f} tokens) exceeds the context of "
                      f"{svc.model} ({ctx:,} tokens): an engine rejects such requests; they are planned as if served")
    return None, None


def context_findings(resolved: ResolvedInstance, profiles: dict[str, Any]) -> tuple[list[Problem], list[str]]:
    """Errors and notes for every service whose traffic is a log or a profile (hand-written lengths are the
    instance's own check), from the ``profiles`` the caller built (:func:`planner.workload.service_profile`)."""
    problems: list[Problem] = []
    notes: list[str] = []
    for name, svc in resolved.instance.services.items():
        model = resolved.models.get(svc.model)
        if model is None or svc.traffic.lengths or name not in profiles:
            continue
        problem, note = context_finding(name, svc, model, profiles[name], str(resolved.path))
        problems.extend([problem] if problem else [])
        notes.extend([note] if note else [])
    return problems, notes
