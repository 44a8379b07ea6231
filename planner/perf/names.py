"""Names in benchmark files -> catalog ids: systems/GPUs -> device ids, checkpoints -> model id
plus the precision the checkpoint's name states.

Devices (:func:`device_id`): aiconfigurator's ``systems/*.yaml`` names (``h100_sxm``,
``h200_sxm``, ``b200_sxm``, ``gb200_sxm``, ``b300_sxm``, ``gb300_sxm``, ``a100_sxm``, ``l40s``,
``rtx_pro_6000_server``, ``mi300x``...; also ``-`` for ``_`` and a vendor prefix such as
``NVIDIA``/``AMD Instinct``) are looked up in :data:`DEVICE_ALIASES`, then taken as they are
when they are a catalog id. Anything else is unmapped (``None``): it is counted and named,
never guessed (``h20``, ``h800_sxm`` and ``gh200`` have no catalog profile).

Checkpoints (:func:`model_ref`): a Hugging Face path or a served model name. Quantisation
suffixes are read off the end of the name (:data:`QUANT_SUFFIXES`): ``-FP8``,
``-FP8-dynamic``, ``-FP8-block`` -> fp8 weights; ``-NVFP4``, ``-FP4``, ``-MXFP4`` -> fp4;
``-quantized.w8a8``, ``-INT8`` -> int8; ``-FP8-KV`` -> fp8 weights *and* fp8 KV cache (AMD Quark
checkpoints state it in the name); ``-AWQ``, ``-GPTQ``, ``-w4a16``, ``-INT4`` -> int4 (not a
precision the performance model has: the row stays unmapped). The rest (``-Instruct``,
``-Chat``, ``-hf``, a ``Meta-`` prefix) is dropped and the base name is matched against the
catalog ids and ``hf_id``s. KV precision is returned only where the name states it; the
caller keeps its own rule otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEVICE_ALIASES: dict[str, str] = {
    "a100-sxm": "a100-sxm-80gb",
    "a100-sxm4-80gb": "a100-sxm-80gb",
    "a100-80gb-sxm": "a100-sxm-80gb",
    "h100-sxm": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb-hbm3": "h100-sxm",
    "h100-sxm-80gb": "h100-sxm",
    "h100-pcie": "h100-pcie",
    "h100-nvl": "h100-nvl",
    "h200-sxm": "h200-sxm",
    "h200-sxm-141gb": "h200-sxm",
    "h200": "h200-sxm",
    "b200-sxm": "b200",
    "b200-sxm-180gb": "b200",
    "gb200-sxm": "gb200",
    "gb200-nvl72": "gb200",
    "b300-sxm": "b300",
    "b300-sxm-270gb": "b300",
    "gb300-sxm": "gb300",
    "gb300-nvl72": "gb300",
    "l40s": "l40s",
    "l4": "l4",
    "rtx-pro-6000-server": "rtx-pro-6000",
    "rtx-pro-6000": "rtx-pro-6000",
    "rtxpro6000-blackwell-server": "rtx-pro-6000",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "mi355x": "mi355x",
    "gaudi3": "gaudi3",
    "gaudi-3": "gaudi3",
}
"""Normalised system/GPU name -> catalog device id (aiconfigurator ``systems/*.yaml`` names,
MLPerf system names without the count, ``nvidia-smi`` names)."""

_VENDOR_PREFIX = re.compile(r"^(nvidia|amd-instinct|amd|intel)-")


def _norm_device(name: str) -> str:
    s = re.sub(r"[\s_]+", "-", name.strip().lower())
    return _VENDOR_PREFIX.sub("", s)


def device_id(name: str, catalog_ids: set[str] | frozenset[str] = frozenset()) -> str | None:
    """The catalog device id a system/GPU name stands for, or ``None`` when unmapped."""
    s = _norm_device(name)
    if s in DEVICE_ALIASES:
        return DEVICE_ALIASES[s]
    if s in catalog_ids:
        return s
    return None


@dataclass(frozen=True)
class ModelRef:
    """What a checkpoint name says: the base model's catalog id (``None``: unmapped), and the
    weight / KV precision the name states (``None``: not stated)."""

    model_id: str | None
    weight_precision: str | None = None
    kv_precision: str | None = None


MODEL_ALIASES: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "Qwen/Qwen3-32B": "qwen3-32b",
}
"""Known Hugging Face paths -> model ids (the rest go through :func:`model_ref`'s rules)."""

QUANT_SUFFIXES: tuple[tuple[str, str, str | None], ...] = (
    (r"[-_.]fp8[-_.]kv", "fp8", "fp8"),
    (r"[-_.](nvfp4|mxfp4|fp4)", "fp4", None),
    (r"[-_.]fp8([-_.](dynamic|static|block))?", "fp8", None),
    (r"[-_.](quantized[-_.])?(w8a8|w8a16)", "int8", None),
    (r"[-_.]int8", "int8", None),
    (r"[-_.](awq|gptq([-_.]int4)?|(quantized[-_.])?w4a16|int4)", "int4", None),
    (r"[-_.](bf16|fp16)", "bf16", None),
)
"""(regex at the end of the name, weight precision, KV precision or None). Matched in order."""

_VARIANT = re.compile(r"[-_.](instruct|chat|hf|base|it)$")


def _base_name(name: str) -> str:
    s = name.strip().split("/")[-1].lower()
    s = re.sub(r"^meta-(llama)", r"\1", s)
    return s


def model_ref(name: str, hf_ids: dict[str, str] | None = None) -> ModelRef:
    """Catalog model id and stated precisions of a checkpoint name; ``hf_ids`` maps each
    catalog model's ``hf_id`` to its id (ids themselves are matched too)."""
    if name in MODEL_ALIASES:
        return ModelRef(MODEL_ALIASES[name])
    catalog: dict[str, str] = {}
    for hf, mid in (hf_ids or {}).items():
        catalog[mid] = mid
        if hf:
            catalog[_VARIANT.sub("", _base_name(hf))] = mid
    s = _base_name(name)
    weight: str | None = None
    kv: str | None = None
    changed = True
    while changed:
        changed = False
        stripped = _VARIANT.sub("", s)
        if stripped != s:
            s, changed = stripped, True
        for pattern, wp, kvp in QUANT_SUFFIXES:
            m = re.search(pattern + "$", s)
            if m:
                s = s[: m.start()]
                weight = weight or wp
                kv = kv or kvp
                changed = True
                break
    return ModelRef(catalog.get(s), weight, kv)
