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
    """Base of every input model: unknown keys are errors, values are frozen, fields documented.

    A field's documentation is the string literal under it (an attribute docstring). It reaches the JSON
    Schema through :func:`json_schema`, which reads it when a schema is asked for, not through pydantic's
    ``use_attribute_docstrings`` (which parses every model's source when the class is created: ~35 ms of
    every ``planner`` command's start-up for its ~75 models, issue 27)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
    )


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of ``model`` (``model_json_schema()``) with each field's attribute docstring as its
    ``description`` where the field sets none — the schema pydantic gives with ``use_attribute_docstrings``:
    the field's docstring in the class that annotates it (the nearest in the MRO, as pydantic copies an
    inherited field's description and takes a re-annotated one's from the subclass), added to the field's
    property before pydantic sorts the schema's keys (:class:`_DocumentedSchema`)."""
    return model.model_json_schema(schema_generator=_documented_schema(model))


def _documented_schema(root: type[BaseModel]) -> Any:
    from pydantic.json_schema import GenerateJsonSchema

    class _DocumentedSchema(GenerateJsonSchema):
        def sort(self, value: Any, parent_key: str | None = None) -> Any:
            if parent_key is None and isinstance(value, dict):  # the whole schema, once, before its keys are sorted
                _add_field_docs(value, root)
            return super().sort(value, parent_key)

    return _DocumentedSchema


def _add_field_docs(schema: dict[str, Any], root: type[BaseModel]) -> None:
    """Add the attribute docstrings of ``root``'s fields and of every model it nests (its ``$defs``, by class
    name) to their properties in ``schema``, in place."""
    import typing

    seen: dict[str, type[BaseModel]] = {}
    todo: list[Any] = [root]
    while todo:
        t = todo.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            if seen.setdefault(t.__name__, t) is not t:
                continue
            todo.extend(f.annotation for f in t.model_fields.values())
        else:
            todo.extend(typing.get_args(t))
    defs = schema.get("$defs", {})
    docs: dict[type, dict[str, str]] = {}  # per annotating class: its attribute docstrings, its source parsed once
    for name, cls in seen.items():
        target = schema if cls is root else defs.get(name)
        props = target.get("properties", {}) if isinstance(target, dict) else {}
        for field, info in cls.model_fields.items():
            prop = props.get(info.alias or field)
            if info.description is not None or not isinstance(prop, dict) or "description" in prop:
                continue
            owner = next((k for k in cls.__mro__ if field in k.__dict__.get("__annotations__", {})), None)
            if owner is not None and owner not in docs:
                docs[owner] = _attribute_docstrings(owner)
            doc = docs[owner].get(field) if owner is not None else None
            if doc:
                prop["description"] = doc


def _attribute_docstrings(cls: type) -> dict[str, str]:
    """Per field of ``cls``: the string literal under its annotation, as pydantic reads it
    (``use_attribute_docstrings``; its own parser, from the class's source)."""
    from pydantic._internal._docs_extraction import extract_docstrings_from_cls

    return extract_docstrings_from_cls(cls, use_inspect=True)


# --- bounds with reasons, and lists without duplicates (issue 16) -------------------------------

MAX_PEAK_RATE_PER_S = 1e4
"""Largest planned peak request rate of one service, requests/s (after ``rate_multiplier``).

Sensible: ~10,000 req/s is 860 M requests a day, tens of thousands of accelerators for a 70B
model; the discrete-event check at peak simulates every instance and every request of its window
(enterprise-chat at ×1,024, ~6,500 req/s: ~2 M requests per architecture, ~6 minutes on 2 cores,
measured 2026-12-06 through ``planner budget``'s probe). Above it, plan one region or cluster (a share of the traffic)
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
