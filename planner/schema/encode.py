"""The encode phase of a multimodal service (``services.<name>.encode``).

Image, audio and video inputs pass through an encoder (a vision / audio tower) before the LLM
prefills them. The planner offers two places for that work and the MIP chooses per bucket
(:mod:`planner.perf.encoder` for the time per request, :mod:`planner.optimize.model` for the
phase): inline in the prefill (or unified) pool that prefills the request, which pays the encode
time on top, or a separate ``encode`` pool on any catalog device, which sends the embeddings
(tokens x hidden size x bytes) to the prefill pool, priced like KV transfer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.schema.common import NonNegFloat, Precision, StrictModel

Modality = Literal["image", "audio", "video"]
MODALITIES: tuple[str, ...] = ("image", "audio", "video")


class EncodePhase(StrictModel):
    """Encoder of one multimodal service."""

    encoder: str = Field(min_length=1)
    """Encoder config id: ``models/encoders/<id>_config.json``, a Hugging Face ``config.json`` with a
    ``vision_config`` block (``planner catalog`` ships ``Qwen--Qwen2.5-VL-7B-Instruct``); a path to
    such a file also works (relative to the instance)."""
    tokens_per_request: dict[Modality, NonNegFloat] = {}
    """Mean encoder-output (LLM) tokens per request by modality. Default: the trace's
    ``image_tokens`` / ``audio_tokens`` / ``video_tokens`` (ServeGen multimodal files, or those
    columns of a generic log); given here they win over the trace."""
    items_per_request: dict[Modality, NonNegFloat] = {}
    """Mean images / clips per request by modality (per-item overhead). Default: the trace's
    ``*_count``, else 1 per request with tokens."""
    precision: Precision = "bf16"
    """Precision the tower runs in (weights and embeddings sent to the LLM)."""
    efficiency: float | None = Field(default=None, gt=0, le=1)
    """Achieved fraction of the device's dense peak FLOP/s in the tower's GEMMs. Default
    :data:`planner.perf.encoder.DEFAULT_ENCODER_ETA_F` (an assumption, stated there)."""
    placement: Literal["auto", "inline", "separate"] = "auto"
    """Where the encode work may run: ``auto`` (the MIP chooses per bucket between a separate ``encode``
    pool and the prefill / unified pool), ``inline`` (always in the prefill / unified pool) or
    ``separate`` (always a separate encode pool: E/P/D, e.g. to price it against ``auto``)."""
