"""The one place that maps names in benchmark files, instances and command lines to catalog ids:
systems/GPUs -> device ids, checkpoints -> model id plus the precision the checkpoint's name states.
Every reader (importers, the aiconfigurator silicon reader, the ML.ENERGY energy reader, MLPerf
results, instances' ``model:``) goes through :func:`resolve_device` / :func:`resolve_model` or their
lenient forms :func:`device_id` / :func:`model_ref` (``None`` for an unknown name, so a reader can
count and name the rows it skips).

**Devices.** A name is normalised (lower case; spaces and ``_`` -> ``-``; ``®``/``(R)`` marks and a
vendor prefix ``NVIDIA``/``AMD Instinct``/``AMD``/``Intel`` dropped; an MLPerf system name
``Vendor box (8x H100-SXM-80GB, TensorRT)`` reduced to the accelerator inside the brackets, its
count dropped). Then the longest leading run of ``-``-separated words that is a known name wins:
:data:`DEVICE_ALIASES` (aiconfigurator ``systems/*.yaml`` ids such as ``h100_sxm``, MLPerf accelerator
names such as ``H100-SXM-80GB``, ML.ENERGY names such as ``H100-SXM5-80GB``, ``H200-SXM-141GB``,
``B200``, ``nvidia-smi`` names such as ``NVIDIA H100 80GB HBM3``) or a catalog id. So
``MI300X-NPS1-SPX-192GB-750W`` is ``mi300x`` (partition mode, memory and power limit are trailing
words) and ``H200-SXM-141GB-CTS`` is ``h200-sxm`` (CTS: the same part with a custom thermal
solution and a higher power limit; the catalog's H200 figures are used). Nothing else is guessed:
``gh200``, ``h20``, ``gaudi2``, ``tpu-v5e`` are unmapped (no catalog profile). A name that is only
the start of several catalog ids (``H100``: ``h100-sxm``, ``h100-pcie``, ``h100-nvl``) is an
:class:`AmbiguousName` error listing them. A part sold with less memory than the catalog's
profile (``A100-SXM4-40GB`` against the 80 GB ``a100-sxm-80gb``) resolves to that profile with a
memory override (:func:`device_variant`), and :func:`variant_profile` builds that part's profile: its
memory and what else :data:`MEMORY_VARIANTS` lists for it (the A100 40 GB's HBM2 bandwidth).

**Models.** Organisation prefix dropped (``Qwen/``, ``meta-llama/``, a ``Meta-`` before ``Llama``),
then, repeatedly from the end: quantisation suffixes (:data:`QUANT_SUFFIXES`: ``-FP8``,
``-FP8-dynamic``, ``-NVFP4``, ``-MXFP4``, ``-AWQ``...; they set the weight / KV precision the
checkpoint states), variant suffixes (:data:`VARIANT_SUFFIXES`: ``-Instruct``, ``-Chat``, ``-it``,
``-hf``, ``-Base``, ``-Thinking``) and a release date (``-2507``, ``-0324``); a dotted version
(``-v0.1``) is kept at the end (versions may change the architecture). What is left is matched against catalog ids and the base names of their
``hf_id``; then :data:`SAME_ARCHITECTURE` maps checkpoints that are a **different training of an
identical architecture** (same layer count, widths, heads, experts, vocabulary: the figures the
planner uses) to the catalog profile of that architecture: ``Llama-3.3-70B`` -> ``llama-3.1-70b``,
``Qwen3-Coder-30B-A3B`` -> ``qwen3-30b-a3b``, ``DeepSeek-R1`` / ``DeepSeek-V3.1`` / ``-V3-0324`` ->
``deepseek-v3``. Only identical architectures are listed (``tests/test_hf_config.py`` derives both
configs where shipped and compares); ``DeepSeek-V3.2`` (sparse-attention indexer) and
``Qwen3-VL-*`` (vision tower) are not. A name that is only the start of several catalog ids
(``Qwen3``, ``Llama-3.1``) is an :class:`AmbiguousName` error listing them. ``-AWQ``/``-GPTQ``/int4
checkpoints resolve to the base model with weight precision ``int4``, a precision the performance
model does not have; callers treat it as unsupported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from planner.errors import InputError, Problem

if TYPE_CHECKING:
    from planner.schema.hardware import DeviceProfile

DeviceProfileT = TypeVar("DeviceProfileT", bound="DeviceProfile")


class AmbiguousName(InputError):
    """A device or model name that fits several catalog ids; the message lists them."""

    def __init__(self, kind: str, name: str, candidates: Iterable[str]) -> None:
        self.candidates = sorted(set(candidates))
        super().__init__(Problem("", kind, f"{kind} name {name!r} is ambiguous: it fits {', '.join(self.candidates)}",
                                 f"give one of: {', '.join(self.candidates)}"))


class UnknownName(InputError):
    """A device or model name that maps to no catalog id."""

    def __init__(self, kind: str, name: str, choices: Iterable[str]) -> None:
        ids = sorted(set(choices))
        super().__init__(Problem("", kind, f"unknown {kind} {name!r}",
                                 f"use one of: {', '.join(ids)}" if ids else "add a profile for it to the catalog"))


DEVICE_ALIASES: dict[str, str] = {
    # aiconfigurator systems/*.yaml ids (``_`` read as ``-``)
    "a100-sxm": "a100-sxm-80gb",
    "h100-sxm": "h100-sxm",
    "h200-sxm": "h200-sxm",
    "b200-sxm": "b200",
    "gb200-sxm": "gb200",
    "b300-sxm": "b300",
    "gb300-sxm": "gb300",
    "rtx-pro-6000-server": "rtx-pro-6000",
    # MLPerf accelerator names, ML.ENERGY names, nvidia-smi names
    "a100-sxm4-80gb": "a100-sxm-80gb",
    "a100-sxm4": "a100-sxm-80gb",
    "a100-80gb-sxm": "a100-sxm-80gb",
    "h100-sxm5": "h100-sxm",
    "h100-80gb-hbm3": "h100-sxm",
    "h100-sxm-80gb": "h100-sxm",
    "h100-pcie-80gb": "h100-pcie",
    "h100-80gb-pcie": "h100-pcie",
    "h100-nvl-94gb": "h100-nvl",
    "h200": "h200-sxm",
    "h200-sxm-141gb": "h200-sxm",
    "b200-sxm-180gb": "b200",
    "gb200-nvl72": "gb200",
    "b300-sxm-270gb": "b300",
    "gb300-nvl72": "gb300",
    "rtxpro6000-blackwell-server": "rtx-pro-6000",
    "rtx-pro-6000-blackwell-server-edition": "rtx-pro-6000",
    "gaudi-3": "gaudi3",
}
"""Normalised system/GPU name -> catalog device id. Catalog ids themselves need no entry."""

_VENDOR_PREFIX = re.compile(r"^(nvidia|amd-instinct|amd|intel|google)-")
_SYSTEM_ACCEL = re.compile(r"\(\s*\d+\s*x\s*([^,)]+)")
_COUNT_PREFIX = re.compile(r"^\d+\s*x\s*")
_MEMORY_GB = re.compile(r"(?:^|-)(\d+)gb(?:-|$)")


def normalise_device(name: str) -> str:
    """The comparable form of a device name (module docstring)."""
    s = name.strip()
    m = _SYSTEM_ACCEL.search(s)
    if m:
        s = m.group(1)
    s = s.replace("®", "").replace("(R)", "").replace("(r)", "").lower()
    s = _COUNT_PREFIX.sub("", s.strip())
    s = re.sub(r"[\s_]+", "-", s).strip("-")
    s = _VENDOR_PREFIX.sub("", s)
    return s


def _device_lookup(s: str, catalog_ids: set[str] | frozenset[str]) -> str | None:
    """The longest leading run of words of ``s`` that is an alias or a catalog id."""
    words = s.split("-")
    for n in range(len(words), 0, -1):
        head = "-".join(words[:n])
        if head in DEVICE_ALIASES:
            return DEVICE_ALIASES[head]
        if head in catalog_ids:
            return head
    return None


def _prefix_candidates(s: str, ids: Iterable[str]) -> list[str]:
    return sorted(i for i in ids if i.startswith(s + "-"))


def device_id(name: str, catalog_ids: set[str] | frozenset[str] = frozenset()) -> str | None:
    """The catalog device id a system/GPU name stands for, ``None`` when unmapped; an ambiguous
    name raises :class:`AmbiguousName`."""
    s = normalise_device(name)
    if not s:
        return None
    found = _device_lookup(s, catalog_ids)
    if found is not None:
        return found
    candidates = _prefix_candidates(s, set(catalog_ids) | set(DEVICE_ALIASES.values()))
    if len(candidates) > 1:
        raise AmbiguousName("device", name, candidates)
    return None


def resolve_device(name: str, catalog_ids: set[str] | frozenset[str]) -> str:
    """The catalog device id of ``name``; :class:`UnknownName` / :class:`AmbiguousName` otherwise."""
    found = device_id(name, catalog_ids)
    if found is None or found not in catalog_ids:
        raise UnknownName("device", name, catalog_ids)
    return found


def device_variant(name: str, memory_gb: dict[str, float]) -> tuple[str | None, float | None]:
    """``(catalog id, memory override in GB or None)``: the name's stated memory (``-40GB``)
    when it is more than 5 % below the profile's (``memory_gb``: id -> GB). A part with
    *more* memory than the profile is not an override (it stays unmapped data for the caller)."""
    dev = device_id(name, frozenset(memory_gb))
    if dev is None or dev not in memory_gb:
        return dev, None
    m = _MEMORY_GB.search(normalise_device(name))
    if m and float(m.group(1)) < 0.95 * memory_gb[dev]:
        return dev, float(m.group(1))
    return dev, None


MEMORY_VARIANTS: dict[tuple[str, float], dict[str, tuple[float, str]]] = {
    ("a100-sxm-80gb", 40.0): {
        "memory_bandwidth_gb_per_s": (
            1555.0,
            "A100 40G SXM4: 40 GB HBM2 (5 stacks, 2.4 Gb/s per pin), 1.555 TB/s: NVIDIA A100 datasheet via "
            "glennklockwood.com/garden/processors/A100; techpowerup.com/gpu-specs/a100-sxm4-40-gb.c3506: 1,555 GB/s "
            "(the 80 GB part's HBM2e: 2.039 TB/s; compute, NVLink, PCIe and 400 W are the same)"),
    },
}
"""What a smaller-memory part changes besides its memory, with the source of each figure:
``(catalog id, memory GB) -> {profile field: (value, source)}``. A memory variant not listed
keeps every other figure of its catalog profile."""


def variant_profile(device: DeviceProfileT, memory_gb: float | None) -> DeviceProfileT:
    """The catalog ``device`` as the part with ``memory_gb`` of memory (``None``: the profile itself),
    with the other figures that part differs in (:data:`MEMORY_VARIANTS`) and their sources."""
    if memory_gb is None:
        return device
    changed = MEMORY_VARIANTS.get((device.id, float(memory_gb)), {})
    update: dict[str, object] = {"memory_gb": float(memory_gb), **{k: v for k, (v, _) in changed.items()}}
    if changed:
        update["sources"] = {**device.sources, **{k: src for k, (_, src) in changed.items()}}
    return device.model_copy(update=update)


@dataclass(frozen=True)
class ModelRef:
    """What a checkpoint name says: the base model's catalog id (``None``: unmapped), and the
    weight / KV precision the name states (``None``: not stated)."""

    model_id: str | None
    weight_precision: str | None = None
    kv_precision: str | None = None


QUANT_SUFFIXES: tuple[tuple[str, str, str | None], ...] = (
    (r"[-_.]fp8[-_.]kv", "fp8", "fp8"),
    (r"[-_.](nvfp4|mxfp4|fp4)", "fp4", None),
    (r"[-_.]fp8([-_.](dynamic|static|block|static[-_.]pertensor))?", "fp8", None),
    (r"[-_.](quantized[-_.])?(w8a8|w8a16)", "int8", None),
    (r"[-_.]int8", "int8", None),
    (r"[-_.](awq|gptq([-_.]int4)?|(quantized[-_.])?w4a16|int4)", "int4", None),
    (r"[-_.](bf16|fp16)", "bf16", None),
)
"""(regex at the end of the name, weight precision, KV precision or None). Matched in order."""

VARIANT_SUFFIXES: tuple[str, ...] = (
    r"[-_.](instruct|chat|hf|base|it|thinking)",
    r"[-_.]\d{4}(\d{2})?",  # release date, YYMM or MMDD: -2507, -2407, -0324, -0528
)
"""Suffixes that name a fine-tune or a release of the same architecture."""

_VERSION = re.compile(r"[-_.](v\d+\.\d+)$")
"""A trailing dotted version (``-v0.1``, ``-v0.3``): kept, moved to the end of the base name
(``Mixtral-8x7B-Instruct-v0.1`` -> ``mixtral-8x7b-v0.1``), since versions can change the
architecture (Mistral-7B v0.1 has a 4k sliding window and 32,000 tokens, v0.3 neither and 32,768)."""

SAME_ARCHITECTURE: dict[str, str] = {
    "llama-3.3-70b": "llama-3.1-70b",
    "qwen3-coder-30b-a3b": "qwen3-30b-a3b",
    "deepseek-r1": "deepseek-v3",
    "deepseek-v3.1": "deepseek-v3",
    "deepseek-v3.1-terminus": "deepseek-v3",
    "codegemma-1.1-2b": "gemma-2b",
    "codegemma-2b": "gemma-2b",
    "codegemma-7b": "gemma-7b",
}
"""Base name -> catalog id of an identical architecture (module docstring). Each entry is
a different checkpoint whose config has the same figures as the catalog profile's source
(DeepSeek-R1, Llama-3.3-70B: configs shipped and compared in ``tests/test_hf_config.py``;
CodeGemma 2B / 7B: Gemma 2B / 7B further trained on code with the architecture unchanged, per the
CodeGemma report, arXiv 2406.11409; no CodeGemma config is shipped to compare)."""


def normalise_model(name: str) -> tuple[str, str | None, str | None]:
    """(base name, weight precision stated, KV precision stated) of a checkpoint name."""
    s = name.strip().rstrip("/").split("/")[-1].lower()
    s = re.sub(r"^meta-(llama)", r"\1", s)
    version = _VERSION.search(s)
    if version:
        s = s[: version.start()]
    weight: str | None = None
    kv: str | None = None
    changed = True
    while changed and s:
        changed = False
        for pattern in VARIANT_SUFFIXES:
            m = re.search(pattern + "$", s)
            if m and m.start() > 0:
                s, changed = s[: m.start()], True
                break
        if changed:
            continue
        for pattern, wp, kvp in QUANT_SUFFIXES:
            m = re.search(pattern + "$", s)
            if m and m.start() > 0:
                s = s[: m.start()]
                weight = weight or wp
                kv = kv or kvp
                changed = True
                break
    if version:
        s = f"{s}-{version.group(1)}"
    return s, weight, kv


def _model_table(hf_ids: dict[str, str]) -> dict[str, str]:
    """Comparable name -> catalog id, from ids and the base names of ``hf_id``s."""
    table: dict[str, str] = {}
    for hf, mid in hf_ids.items():
        table[mid] = mid
        if hf:
            table[normalise_model(hf)[0]] = mid
    return table


def model_ref(name: str, hf_ids: dict[str, str] | None = None) -> ModelRef:
    """Catalog model id and stated precisions of a checkpoint name; ``hf_ids`` maps each
    catalog model's ``hf_id`` to its id (ids themselves are matched too). Unknown: ``model_id``
    ``None``; a name that starts several catalog ids raises :class:`AmbiguousName`."""
    table = _model_table(hf_ids or {})
    if name.strip() in table.values():
        return ModelRef(name.strip())
    base, weight, kv = normalise_model(name)
    found = table.get(base)
    if found is None and _VERSION.search(base) is None:
        # the catalog may name the versioned checkpoint (mixtral-8x7b <- Mixtral-8x7B-v0.1)
        versioned = {mid for key, mid in table.items() if _VERSION.sub("", key) == base and _VERSION.search(key)}
        found = versioned.pop() if len(versioned) == 1 else None
    if found is None and base in SAME_ARCHITECTURE and SAME_ARCHITECTURE[base] in table.values():
        found = SAME_ARCHITECTURE[base]
    if found is None and base:
        candidates = sorted({mid for key, mid in table.items() if key.startswith(base + "-")})
        if len(candidates) > 1:
            raise AmbiguousName("model", name, candidates)
    return ModelRef(found, weight, kv)


def resolve_model(name: str, hf_ids: dict[str, str]) -> str:
    """The catalog model id of a checkpoint name or id; :class:`UnknownName` /
    :class:`AmbiguousName` otherwise."""
    ref = model_ref(name, hf_ids)
    if ref.model_id is None:
        raise UnknownName("model", name, hf_ids.values())
    return ref.model_id
