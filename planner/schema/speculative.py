"""Speculative decoding as a service option (``services.<name>.speculative``).

A draft proposes ``num_speculative_tokens`` (k) tokens per sequence per step; the target model
verifies them (and samples one more) in one forward pass. How many tokens a step yields follows
from the acceptance rate: overall (each proposed token accepted with probability ``a`` once the
ones before it were) or per position (``a_1 .. a_k``, each conditional on the earlier ones)::

    E = 1 + sum_{i=1..k} prod_{j<=i} a_j        (overall a: E = (1 - a^(k+1)) / (1 - a))

The cost model is in :mod:`planner.perf.speculative`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.schema.common import Fraction, StrictModel

SpecMethod = Literal["mtp", "eagle", "draft_model", "ngram"]


class SpeculativeDecoding(StrictModel):
    """Speculative decoding of one service (the planner offers it next to plain decoding and keeps
    the cheaper of the two per operating point)."""

    method: SpecMethod
    """``mtp`` (the model's own multi-token-prediction module, e.g. DeepSeek-V3), ``eagle`` (an
    EAGLE/EAGLE-3 draft head: one decoder layer on the target's features), ``draft_model`` (a smaller
    model of the catalog) or ``ngram`` (prompt lookup, no draft model)."""
    num_speculative_tokens: int = Field(ge=1, le=16)
    """Tokens proposed per sequence per step (k): sequential draft passes per step."""
    acceptance: Fraction | list[Fraction]
    """Acceptance rate of a proposed token: one overall rate, or one per position (k values, each
    conditional on the tokens before it being accepted; DeepSeek-V3 reports 0.85-0.90 for its
    MTP token)."""
    verify_tokens: int | None = Field(default=None, ge=2, le=128)
    """Tokens verified per sequence per step (a draft tree: SGLang ``--speculative-num-draft-tokens``);
    default ``k + 1`` (a chain)."""
    draft_model: str = ""
    """``draft_model``: the catalog id of the draft model (``planner catalog models``), required.
    ``eagle``: the draft head's Hugging Face id (used by ``planner deploy``), optional."""
    source: str = ""
    """Where the acceptance rate comes from (a measurement on your traffic, a paper)."""

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeDecoding:
        if isinstance(self.acceptance, list) and len(self.acceptance) != self.num_speculative_tokens:
            raise ValueError(f"acceptance has {len(self.acceptance)} per-position rates for num_speculative_tokens "
                             f"{self.num_speculative_tokens}: give one rate per proposed token, or one overall rate")
        if self.method == "draft_model" and not self.draft_model:
            raise ValueError("method draft_model needs draft_model: the catalog id of the draft model")
        if self.verify_tokens is not None and self.verify_tokens < self.num_speculative_tokens + 1:
            raise ValueError(f"verify_tokens {self.verify_tokens} < num_speculative_tokens + 1 = {self.num_speculative_tokens + 1}")
        return self

    def rates(self) -> list[float]:
        """Per-position conditional acceptance rates ``a_1 .. a_k``."""
        if isinstance(self.acceptance, list):
            return [float(a) for a in self.acceptance]
        return [float(self.acceptance)] * self.num_speculative_tokens

    def tokens_per_step(self) -> float:
        """Expected tokens a verify step yields per sequence, ``E = 1 + sum_i prod_{j<=i} a_j``."""
        e, p = 1.0, 1.0
        for a in self.rates():
            p *= a
            e += p
        return e
