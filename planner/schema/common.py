"""Shared pieces of every schema: the strict base model, enumerations, constrained types."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Precision = Literal["bf16", "fp8", "fp4", "int8"]
"""Numeric precision of weights, activations or KV cache."""

PRECISION_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5, "int8": 1.0}
"""Bytes per element for each precision (fp4 packs two values per byte)."""

Role = Literal["prefill", "decode", "unified", "encode", "encode_prefill", "encode_unified"]
"""What an instance does: prompt processing, token generation, or both (shared pool); the encode phase of
multimodal requests (:mod:`planner.capacity_encode`) runs in a separate ``encode`` pool or rides in a prefill /
unified pool (routing rows ``encode_prefill`` / ``encode_unified``)."""

Architecture = Literal["shared", "disaggregated", "hybrid"]
"""Serving architecture: one unified pool, separate prefill/decode pools, or both routed by bucket."""

Pricing = Literal["rent", "buy"]

NonNegFloat = Annotated[float, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]
PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Quantile = Annotated[float, Field(gt=0, lt=1)]
"""A quantile level strictly between 0 and 1 (0.99 = p99)."""


class StrictModel(BaseModel):
    """Base of every input model: unknown keys are errors, values are frozen, fields documented."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )


# --- bounds with reasons, and lists without duplicates (issue 16) -------------------------------

MAX_PEAK_RATE_PER_S = 1e4
"""Largest planned peak request rate of one service, requests/s (after ``rate_multiplier``).

Sensible: ~10,000 req/s is 860 M requests a day, tens of thousands of accelerators for a 70B
model; a solve of ``enterprise-chat`` at 5e4 req/s takes about a minute, and the discrete-event
check simulates every instance. Above it, plan one region or cluster (a share of the traffic)
and replicate the plan."""

MAX_REDUNDANCY = 64
"""Most spare instances per pool (N+k). Beyond a handful, spares size the plan rather than the
load; use ``options.max_utilization`` for headroom instead."""

MAX_BUCKETS = 32
"""Most length buckets when characterising a log. 4–8 are typical; the MIP and the capacity
table grow linearly with them (1,000 buckets took 40–75 s on ``enterprise-chat``), and beyond
~32 the buckets of a real log hold too few requests for their quantile representatives to
mean anything."""


def bounded(*, why: str, gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None) -> Any:
    """A :func:`pydantic.Field` with numeric ``limits`` (``gt``, ``ge``, ``lt``, ``le``) and the reason
    for them; :mod:`planner.validation` prints the reason as the fix when a value is out of bounds,
    and ``planner schema`` publishes it (``bounds_reason``)."""
    return Field(json_schema_extra={"bounds_reason": why}, gt=gt, ge=ge, lt=lt, le=le)


def _no_duplicates(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    dup: list[Any] = []
    for v in values:
        if v in seen and v not in dup:
            dup.append(v)
        seen.add(v)
    if dup:
        raise ValueError(f"lists {', '.join(repr(v) for v in dup)} more than once; fix: list each value once")
    return values


UniqueItems = AfterValidator(_no_duplicates)
"""Use as ``Annotated[list[X], UniqueItems, Field(json_schema_extra={"uniqueItems": True})]``: a
repeated entry (a device listed twice) is an input error, never a silently doubled candidate."""
