r"""Encoder (vision tower) profile and encode operating points (issue 26 item 3).

A multimodal request carries images (or video frames) that a vision transformer turns into LLM
tokens before prefill. This module reads the tower from a Hugging Face ``config.json``
(its ``vision_config`` block), derives parameters and FLOPs per LLM token, and prices the encode
work on a device with a roofline.

Tower (ViT with patch merger, as Qwen2-VL / Qwen2.5-VL)
--------------------------------------------------------
``vision_config``: width ``h`` (``hidden_size``), blocks ``L`` (``depth``), MLP width ``i``
(``intermediate_size``), patch ``p`` (``patch_size``), temporal patch ``t`` (``temporal_patch_size``,
1 when absent), spatial merge ``m`` (``spatial_merge_size``, 1 when absent), output width ``o``
(``out_hidden_size``: the LLM's hidden size), attention window ``w`` pixels (``window_size``) and
the full-attention blocks (``fullatt_block_indexes``; all blocks when absent).

- parameters per block ``P_blk = 4 h² + g h i`` (q, k, v, o projections; MLP with ``g = 3`` matrices
  when gated, ``hidden_act`` silu, else ``g = 2``); patch embedding ``P_emb = 3 t p² h``; merger
  ``P_mrg = (h m²)² + h m² o`` (two linear layers on ``m²`` concatenated patches);
  ``P = L P_blk + P_emb + P_mrg`` (norms and biases left out: < 0.1 %). Qwen2.5-VL-7B: 676 M
  (published: 675 M).
- one LLM token is ``m²`` patches. FLOPs per patch: ``2 (L P_blk + P_emb)`` for the GEMMs plus
  attention ``4 h ctx`` per block (scores and values), ``ctx`` the patches a patch attends to: the
  whole image (``N = m² · tokens_per_item`` patches) in full-attention blocks, the window
  ``(w / p)²`` patches (at most ``N``) in the others. FLOPs per LLM token
  ``f = m² (2 (L P_blk + P_emb) + 4 h (L_full N + L_win min((w/p)², N))) + 2 P_mrg``.

Encode time of one request on an instance of ``tp`` devices (roofline, batch of one item at a
time: an image is already ``N`` ≈ 4,800 GEMM rows, compute-bound, so batching items gains nothing)::

    F = tokens · f                                      FLOPs of the request's items
    t_compute = F / (tp · F_peak(precision) · eta_F)
    t_memory  = items · (P · b_w + 4 N h b_w) / (tp · BW · eta_B)   weights once per item + activations
    t_encode  = max(t_compute, t_memory) + items · L · t_layer

``eta_F`` = :data:`DEFAULT_ENCODER_ETA_F` unless the service sets ``encode.efficiency``; ``eta_B`` =
:data:`ENCODER_ETA_B`; ``t_layer`` = :data:`LAYER_OVERHEAD_S`. A device without a dense FLOP/s figure for
the precision (the CPU profiles leave AMX unset) gets an infeasible point naming the field.

Embeddings sent from a separate encode pool to the prefill pool: ``tokens · o · b_w`` bytes, at
``costs.network.kv_link_gb_per_s`` (else the device NIC), priced per GB like KV transfer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem
from planner.schema.common import PRECISION_BYTES

DEFAULT_ENCODER_ETA_F = 0.5
"""Achieved fraction of dense peak FLOP/s in the tower's GEMMs. ASSUMPTION: the H100 calibration of
the LLM path (``models/calibration/h100_dense.yaml``) fits eta_f 0.59-0.62 for 4,096-8,192-wide GEMMs;
a 1,280-wide ViT runs narrower GEMMs and unfused attention, so we take 0.5 (about 15 % below).
No measured encoder throughput is in our data: the encode times are +-30 % estimates; set
``encode.efficiency`` from a measurement."""
ENCODER_ETA_B = 0.9
"""Achieved fraction of peak memory bandwidth for the memory-bound check (the LLM calibration fits
0.98-0.99; 0.9 is a conservative round value)."""
LAYER_OVERHEAD_S = 72.6e-6
"""Kernel-launch and small-op time per block per item: the H100 calibration's ``layer_overhead_us``
(72.6 µs, ``models/calibration/h100_dense.yaml``, fitted on LLM layers)."""
ENCODER_DIR = "encoders"
"""Catalog subfolder of encoder configs (``models/encoders``)."""


@dataclass(frozen=True)
class EncoderProfile:
    """A vision tower read from a ``vision_config`` block (module docstring)."""

    name: str
    hidden_size: int
    depth: int
    intermediate_size: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    out_hidden_size: int
    window_patches: float
    """Patches in an attention window, ``(window_size / patch_size)²`` (inf: full attention everywhere)."""
    full_attention_blocks: int
    gated_mlp: bool
    source: str

    @property
    def block_params(self) -> float:
        h, i = self.hidden_size, self.intermediate_size
        return 4.0 * h * h + (3.0 if self.gated_mlp else 2.0) * h * i

    @property
    def embed_params(self) -> float:
        return 3.0 * self.temporal_patch_size * self.patch_size**2 * self.hidden_size

    @property
    def merger_params(self) -> float:
        hm = self.hidden_size * self.spatial_merge_size**2
        return float(hm * hm + hm * self.out_hidden_size) if self.spatial_merge_size > 1 else float(self.hidden_size * self.out_hidden_size)

    @property
    def params(self) -> float:
        return self.depth * self.block_params + self.embed_params + self.merger_params

    @property
    def patches_per_token(self) -> int:
        return self.spatial_merge_size**2

    def flops_per_token(self, tokens_per_item: float) -> float:
        """FLOPs per LLM token of an item of ``tokens_per_item`` tokens (module docstring)."""
        n = max(tokens_per_item, 1.0) * self.patches_per_token
        full = self.full_attention_blocks
        win = self.depth - full
        attn = 4.0 * self.hidden_size * (full * n + win * min(self.window_patches, n))
        per_patch = 2.0 * (self.depth * self.block_params + self.embed_params) + attn
        return self.patches_per_token * per_patch + 2.0 * self.merger_params

    def embedding_bytes_per_token(self, precision: str) -> float:
        return self.out_hidden_size * PRECISION_BYTES[precision]


def _positive_int(value: Any) -> int | None:
    """``value`` as a width when it is a positive number (not true/false); None otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and math.isfinite(value):
        return int(value)
    return None


def recorded_out_width(config: dict[str, Any]) -> int | None:
    """Width of the embeddings the tower hands the LLM, as a Hugging Face config records it: the tower's
    ``vision_config.out_hidden_size``, else the language model's ``hidden_size`` (top level, else
    ``text_config.hidden_size``, where a config that nests its language model keeps it); None when
    none is recorded. The one reading of the output width: :func:`encoder_from_config` prices the
    embeddings at it and :func:`planner.instance.encoder_out_width` checks it against the model."""
    vision, text = config.get("vision_config"), config.get("text_config")
    for block, key in ((vision, "out_hidden_size"), (config, "hidden_size"), (text, "hidden_size")):
        width = _positive_int(block.get(key)) if isinstance(block, dict) else None
        if width is not None:
            return width
    return None


def encoder_from_config(config: dict[str, Any], name: str, source: str) -> EncoderProfile:
    """The tower of a Hugging Face config (its ``vision_config`` block); :class:`InputError` naming the missing key.

    Output width ``o``: :func:`recorded_out_width`, else (no width recorded) the tower's own ``hidden_size``."""
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        raise InputError(Problem(file=source, path="vision_config", message="no vision_config block: not a multimodal config",
                                 fix="give the config.json of a vision-language model (e.g. Qwen/Qwen2.5-VL-7B-Instruct)"))

    def need(key: str, *alts: str) -> int:
        for k in (key, *alts):
            v = vc.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
                return int(v)
        raise InputError(Problem(file=source, path=f"vision_config.{key}", message=f"missing or not a positive number: {key}",
                                 fix="use the model's config.json unchanged"))

    depth = need("depth", "num_hidden_layers")
    patch = need("patch_size", "spatial_patch_size")
    window = vc.get("window_size")
    full_idx = vc.get("fullatt_block_indexes")
    full = len(full_idx) if isinstance(full_idx, list) and window else depth
    hidden = need("hidden_size", "embed_dim")
    return EncoderProfile(
        name=name, hidden_size=hidden, depth=depth, intermediate_size=need("intermediate_size"), patch_size=patch,
        temporal_patch_size=int(vc.get("temporal_patch_size") or 1), spatial_merge_size=int(vc.get("spatial_merge_size") or 1),
        out_hidden_size=recorded_out_width(config) or hidden,
        window_patches=(float(window) / patch) ** 2 if window else math.inf, full_attention_blocks=min(full, depth),
        gated_mlp=str(vc.get("hidden_act", "gelu")).lower() in ("silu", "swiglu"), source=source,
    )


def encoder_path(ref: str, base: Path | None = None) -> Path:
    """The config file of an encoder id (``models/encoders/<id>_config.json`` in the catalog folders) or path."""
    from planner.catalog import models_dirs

    p = Path(ref)
    if base is not None and not p.is_absolute():
        cand = base / p
        if cand.is_file():
            return cand
    if p.is_file():
        return p
    for folder in reversed(models_dirs()):
        for name in (f"{ref}_config.json", f"{ref}.json"):
            cand = folder / ENCODER_DIR / name
            if cand.is_file():
                return cand
    raise InputError(Problem(file=ref, path="encode.encoder", message=f"encoder config {ref!r} not found",
                             fix="use an id of models/encoders/ (e.g. Qwen--Qwen2.5-VL-7B-Instruct) or a path to a config.json"))


def load_encoder(ref: str, base: Path | None = None) -> EncoderProfile:
    path = encoder_path(ref, base)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(Problem(file=str(path), path="", message=f"not a readable JSON config ({type(exc).__name__})",
                                 fix="use the model's config.json unchanged")) from None
    if not isinstance(config, dict):
        raise InputError(Problem(file=str(path), path="", message="expected a JSON object", fix="use the model's config.json unchanged"))
    return encoder_from_config(config, Path(ref).name.removesuffix("_config.json").removesuffix(".json"), str(path))


@dataclass(frozen=True)
class EncodePoint:
    """Encode work of one request on one instance (module docstring)."""

    feasible: bool
    reason: str
    bound: str
    encode_s: float
    """Instance-seconds one request's items take (t_encode)."""
    flops: float
    embedding_bytes: float
    energy_j: float
    weight_bytes: float


def encode_point(enc: EncoderProfile, device: Any, tp: int, *, tokens: float, items: float, precision: str = "bf16",
                 eta_f: float | None = None) -> EncodePoint:
    """Roofline encode time of a request with ``tokens`` LLM tokens in ``items`` images on ``tp`` devices."""
    b = PRECISION_BYTES[precision]
    eta = DEFAULT_ENCODER_ETA_F if eta_f is None else float(eta_f)
    items = max(items, 1.0)
    per_item = tokens / items
    flops = tokens * enc.flops_per_token(per_item)
    weights = enc.params * b
    emb = tokens * enc.embedding_bytes_per_token(precision)
    peak = (device.peak_tflops_dense or {}).get(precision)
    if not peak:
        return EncodePoint(False, f"{device.id}: no peak_tflops_dense.{precision} (the encoder needs a dense FLOP/s figure; "
                           "set it with catalog.device_overrides)", "compute", math.inf, flops, emb, 0.0, weights)
    act = 4.0 * per_item * enc.patches_per_token * enc.hidden_size * b  # patch activations in and out of a block (working set)
    mem_bytes = device.memory_gb * 1e9 * tp
    if weights + act > mem_bytes:
        return EncodePoint(False, f"encoder weights {weights / 1e9:.2f} GB + activations do not fit {mem_bytes / 1e9:g} GB",
                           "memory_capacity", math.inf, flops, emb, 0.0, weights)
    t_c = flops / (tp * float(peak) * 1e12 * eta)
    t_m = items * (weights + act) / (tp * float(device.memory_bandwidth_gb_per_s) * 1e9 * ENCODER_ETA_B)
    t = max(t_c, t_m) + items * enc.depth * LAYER_OVERHEAD_S
    power = float(device.busy_power_w or 0.0)
    return EncodePoint(True, "", "compute" if t_c >= t_m else "memory_bandwidth", t, flops, emb, power * tp * t, weights)


def transfer_ms(embedding_bytes: float, link_gb_per_s: float | None, nic_gb_per_s: float | None) -> float:
    """Time to send a request's embeddings to the prefill pool: bytes over the KV link (or the NIC; 0 when neither is known)."""
    bw = link_gb_per_s or nic_gb_per_s
    return embedding_bytes / (float(bw) * 1e9) * 1e3 if bw else 0.0
