"""Shared pieces of every schema: the strict base model, enumerations, constrained types."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Precision = Literal["bf16", "fp8", "fp4", "int8"]
"""Numeric precision of weights, activations or KV cache."""

PRECISION_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5, "int8": 1.0}
"""Bytes per element for each precision (fp4 packs two values per byte)."""

Role = Literal["prefill", "decode", "unified"]
"""What an instance does: prompt processing, token generation, or both (shared pool)."""

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
