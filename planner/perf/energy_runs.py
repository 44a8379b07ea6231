"""Measured serving-energy runs (the ML.ENERGY CSV format) and their prediction.

The file is read as shipped (``models/measured/measured_energy.csv``, columns described in
``models/measured/SOURCE_energy.md``); only rows with ``record_type = serving_steady_state`` are
predictable: one vLLM server on ``gpu_count`` GPUs, ``--max-num-seqs = batch_cap_max_num_seqs``,
every request submitted at t = 0, energy and throughput taken in the steady state while the
running batch sits at the cap.

**Throughput** (:func:`predict_runs`): the steady state is the closed loop of
:func:`planner.perf.closed_loop.predict_agg` with ``N = cap`` users (a finished request is
replaced at once by a waiting one), on the instance of the row's GPUs, with the row's engine
calibration (``vllm`` of the shipped latency fit). The engine runs ``D = min(cap, slots)``
sequences; a slot's cycle ``T_cyc`` serves one request of ``OSL`` output tokens, prefill of the
next prompt included (chunked prefill: every iteration carries ``p = D ISL / I`` prompt tokens
beside the decode batch), so::

    output tokens/s = D OSL / T_cyc

**Power**: the mean iteration of that cycle (``D (OSL-1)/I`` decode sequences at context ``ISL +
OSL/2`` plus ``p`` prompt tokens) gives the roofline's compute / memory / total times and so the
load ``L`` of :mod:`planner.perf.power`; ``J per output token = P(L) x gpu_count / (tokens/s)``.

Configuration mapping (stated, not fitted):

- **Model** and **GPU**: through the project's one name resolver, :mod:`planner.perf.names`
  (:func:`~planner.perf.names.model_ref`: ``Qwen3-30B-A3B-Instruct-2507`` -> ``qwen3-30b-a3b``,
  ``Qwen3-Coder-30B-A3B-Instruct`` and ``Llama-3.3-70B`` -> the catalog profile of the identical
  architecture; :func:`~planner.perf.names.device_variant`: ``H100-SXM5-80GB`` -> ``h100-sxm``,
  ``B200``, ``H200-SXM-141GB``, and ``A100-SXM4-40GB`` -> ``a100-sxm-80gb`` as the 40 GB part,
  :func:`~planner.perf.names.variant_profile`: ``memory_gb = 40`` and its HBM2's 1,555 GB/s, the same chip
  and TDP; until 2026-12-05 the 80 GB part's 2,039 GB/s, which the shipped power calibration had absorbed). A model the resolver does not map but whose ``config.json`` is shipped
  (``models/llm/configs/``) is predicted on the profile :mod:`planner.hf_config` derives from it
  (:meth:`planner.catalog.Catalog.resolve_model`; issue 25: Phi-3-small, its block-sparse layers
  counted dense, exact up to 1,024 tokens of context), the output row saying so (``profile``).
  The Nemotron-Nano v2 runs (Mamba-2 hybrids) are predicted on their catalog profiles
  (``models/llm/nemotron-nano-*-v2.yaml``: the SSM state in fp32, as the runs were served,
  ``--mamba-ssm-cache-dtype float32``; :mod:`planner.perf.roofline` for the state's memory and
  traffic); a
  model with neither is skipped with that reason, and one whose config shows a layer kind the
  planner cannot model is skipped naming it. A vision-language checkpoint (its prompt's
  image/video tokens are not recorded) never maps.
- **Precision**: ``bfloat16`` -> bf16, ``fp8`` -> fp8, ``mxfp4`` -> fp4; KV cache bf16 (vLLM's
  default ``kv_cache_dtype=auto`` keeps the activation dtype). A precision the model's profile does
  not support (``mxfp4`` on a dense bf16 checkpoint) is predicted at the model's native precision,
  and the run says so (:data:`APPROX_PRECISION`).
- **Parallelism**: a TP run spans all ``gpu_count`` GPUs with ``tp = gpu_count``. A run whose stated
  layout differs (``tensor_parallel 8 x pipeline_parallel 2`` on 16 GPUs: the 17 Leaderboard v2 runs
  of Mixtral-8x22B on A100 and Llama-3.1-405B on H100) is predicted the same way, as TP over all
  its GPUs (no pipeline bubble, no stage-to-stage transfer), and the run says so
  (:data:`APPROX_PARALLEL`; the shipped fit keeps them). An
  expert-parallel MoE run (``expert_parallel = gpu_count``) is one replica of
  :mod:`planner.perf.moe` with the experts spread over all ``G = gpu_count`` GPUs and attention
  tensor-parallel over the same GPUs, ``Parallelism(tp = G, ep = G, dp = 1)``: vLLM's
  ``--tensor-parallel-size G --enable-expert-parallel``. The files record ``tensor_parallel = 1,
  data_parallel = 1`` for these runs, but attention data-parallel over the GPUs cannot be what
  ran: each GPU would hold all of bf16 Qwen3-235B's attention weights plus an eighth of its
  experts (about 73 GB of 80) and no KV for the measured 256 sequences. vLLM's defaults replace
  the large-deployment ones (:data:`VLLM_EP`: no redundant EPLB expert slots, no two-batch
  overlap; imbalance and all-to-all efficiencies stay the published defaults of
  :class:`~planner.perf.calibration.MoECalibration`). The running batch is the cap, or what the
  KV memory holds at ``ISL + OSL`` tokens; the mean iteration is
  :func:`planner.perf.moe.ep_iteration_time` with prompt tokens as for TP
  (:func:`_predict_ep`). ``expert_parallel_as_tp=True`` predicts them as TP over all GPUs
  instead (the roofline without the expert-parallel terms: no all-to-all, experts split by TP).
- **Measured J per output token** must be what the run's other figures give, ``avg_power_w_per_gpu
  x gpu_count / output_throughput_tok_per_s``, within :data:`JTOK_RTOL` (the shipped rows agree within
  1e-5, the rounding of their printed digits, so the rule leaves the shipped fit set as it is). A row
  beyond carries the contradiction, both figures named (:attr:`RunConfig.inconsistency`): the power
  fit skips it with that reason (``skip_inconsistent``: one of the figures is wrong, and the fit would
  learn from the one and be checked on the other); ``planner validate-energy`` predicts it and flags
  and counts it.
- **Input length**: not recorded in the v3.0 files; per task the assumed mean prompt length
  :data:`TASK_INPUT_TOKENS` (chat template and system prompt included).
- **Multimodal runs** (issue 25): where the benchmark's own code fixes the image tokens of a
  request, the row is predicted with a *derived input size* (:data:`DERIVED_INPUTS`, every number
  with its source): the checkpoint's LLM backbone (a catalog profile of the same layer shapes),
  prompt = image tokens + text tokens, and the vision tower's encode time added to the cycle
  (:func:`vit_gflop`, :func:`_encode_s`). Fixed by the model: Gemma 3 (256 tokens per image at any
  size), LLaVA-1.5 (576); fixed by the data set: Leaderboard v2's COCO images (longest side
  640 px) for LLaVA-NeXT's tiling. The other multimodal runs stay skipped, each naming what is
  missing (:data:`MULTIMODAL_INPUTS`, :data:`UNDERIVED_MULTIMODAL`): their image tokens follow
  a resolution the files do not record (VisionArena uploads, LLaVA-Video-178K frames), or their
  LLM backbone has no profile.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.errors import InputError
from planner.perf.calibration import Calibration, EngineCalibration, MoECalibration
from planner.perf.closed_loop import EngineArrays, predict_agg
from planner.perf.moe import (
    EPReplica,
    Parallelism,
    ep_iteration_time,
    ep_replica,
    kv_capacity_per_rank_bytes,
)
from planner.perf.names import AmbiguousName, device_variant, model_ref, variant_profile
from planner.perf.roofline import InstanceArrays, instance_arrays, iteration_time
from planner.perf.validate import engine_arrays
from planner.schema.llm import LLMProfile
from planner.textio import text_stream

REQUIRED_COLUMNS: tuple[str, ...] = (
    "source", "record_type", "task", "gpu", "gpu_count", "tensor_parallel", "model", "engine", "precision",
    "batch_cap_max_num_seqs", "input_tokens", "output_tokens", "output_throughput_tok_per_s",
    "energy_j_per_output_token", "avg_power_w_per_gpu",
)
"""Columns a measurement file must carry (the ML.ENERGY export's names)."""

PRECISION_MAP: dict[str, str] = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "mxfp4": "fp4", "fp4": "fp4",
                                 "model default (not stated)": "bf16"}
"""Measured precision -> planner precision (v2 rows state none: the 2024 checkpoints are bf16)."""

TASK_INPUT_TOKENS: dict[str, float] = {
    "lm-arena-chat": 250.0,
    "gpqa": 300.0,
    "sourcegraph-fim": 2000.0,
    "llm-chat": 250.0,
    "llm-code": 250.0,
}
"""Assumed mean prompt tokens per task (the files do not record them). Chat: LMArena / ShareGPT
first turns are short (a few hundred tokens with template and system prompt); GPQA: one
multiple-choice question with four options (~200-300 tokens) and the template; Sourcegraph FIM:
code context before and after the cursor (~2k tokens assumed). The chat and GPQA runs are decode
dominated (OSL 350-9,500), so their prediction barely moves with this; the FIM runs (OSL ~250) do."""

MULTIMODAL_INPUTS: dict[str, str] = {
    "image-chat": ("1 image per request (ML.ENERGY benchmark configs/vllm/image-chat/benchmark.yaml: num_images 1), a user "
                   "upload from lmarena-ai/VisionArena-Chat sent at its own resolution (mlenergy/llm/datasets.py process_image: "
                   "re-encoded as JPEG, not resized); the file records neither the resolution nor the prompt tokens, and "
                   "the image tokens follow the resolution (Qwen3-VL: one per 32x32 pixels; Llama-4: 144 per 336-pixel tile)"),
    "video-chat": ("1 video per request from lmms-lab/LLaVA-Video-178K (caption split), 32 frames sampled "
                   "(mlenergy/llm/datasets.py LLaVAVideoDataset num_frames 32); the file records neither the frame "
                   "resolution nor the prompt tokens, and the video tokens follow the resolution"),
    "mllm-chat": ("Leaderboard v2 multimodal chat: 1 COCO train2017 image per request with a LLaVA-Instruct conversation "
                  "(leaderboard-v2 benchmark/mllm_text_generation/chat/llava_conversation/sample.py, scripts/benchmark_client.py); "
                  "the file records no prompt tokens"),
}
"""What a multimodal run sent (ML.ENERGY benchmark, ``ml-energy/benchmark`` at the commit of
``models/measured/SOURCE_energy.md``) and what the measurement file lacks to turn it into prompt
tokens. The count of images is known for image-chat (1) and of frames for video-chat (32), but a
vision tower's tokens scale with the pixels, and the runs' images are user uploads of unrecorded size.

Why no assumed size: on the 73 v3.0 image-chat runs whose LLM backbone has a catalog profile (Qwen3-VL
8B/32B/30B-A3B/235B-A22B and Qwen3-Omni mapped to their Qwen3 text twins, Llama-4 Scout and Maverick),
an assumed mean prompt of 300, 1,100 or 2,000 tokens (one image of 0.3-2 MP at Qwen3-VL's 32x32 pixels per
token, plus the text) gives J per output token MAPE 16.9, 23.3 and 34.8 % (tokens/s 36.6, 26.3, 23.5 %):
the unrecorded size moves the error by 18 points, more than the 20 % target, and picking the size from
that sweep would fit on the rows that check it. Measured 2026-12 with the shipped power calibration
(issue 25 report)."""

MULTIMODAL_TASKS: frozenset[str] = frozenset(MULTIMODAL_INPUTS)
"""Tasks whose prompts carry images or video (token counts not in the files)."""


def vit_gflop(patches: float, layers: int, hidden: int, ffn: int, projector_flops: float = 0.0) -> float:
    """FLOPs of one ViT forward pass over ``patches`` tokens, GFLOP::

        F = 2 N L (4 h^2 + 2 h i)  +  4 h N^2 L  +  F_proj

    (q, k, v, o and a two-matrix MLP per block; attention scores and values over all ``N`` patches;
    norms, biases and the patch embedding left out, < 1 %). ``F_proj``: the projector into the LLM."""
    n = float(patches)
    return (2.0 * n * layers * (4.0 * hidden**2 + 2.0 * hidden * ffn) + 4.0 * hidden * n * n * layers + projector_flops) / 1e9


@dataclass(frozen=True)
class DerivedInput:
    """A multimodal run's prompt derived from what its benchmark sent (the file records no input length)."""

    backbone: str
    """Catalog profile of the LLM that runs the prompt (same layer shapes as the checkpoint's language model)."""
    image_tokens: float
    """LLM tokens of the request's image (one image per request), fixed by the model or by the data set's image size."""
    text_tokens: float
    """Text part of the prompt, chat template included."""
    encoder_gflop: float
    """Vision tower FLOPs per request (:func:`vit_gflop`)."""
    how: str
    """The derivation, every number with its source."""


_VISIONARENA_TEXT = ("text 94.3 tokens: the mean first user turn of lmarena-ai/VisionArena-Chat (vLLM PR #15748: 94,327 "
                     "'Total input tokens' over 1,000 of its prompts, text only, Qwen2 tokenizer), + 9 for Gemma's chat template")
_LLAVA_TEXT = ("text 80 tokens ASSUMED: the benchmark's 22-word system prompt (~25 tokens, mllm_text_generation/chat/scripts/"
               "benchmark_client.py SYSTEM_PROMPT), the concatenated human turns of a LLaVA-Instruct conversation_58k sample "
               "(~45, not recorded) and the chat template (~10)")
_CLIP_336 = vit_gflop(577, 23, 1024, 4096)
"""CLIP ViT-L/14 at 336 px (LLaVA-1.5, Liu et al. 2023 'Improved Baselines'): 24 x 24 patches + CLS = 577 tokens, width 1024,
MLP 4096; 23 of its 24 blocks run (llava-hf configs: vision_feature_layer -2, the output of the second-to-last block)."""

DERIVED_INPUTS: dict[tuple[str, str], DerivedInput] = {
    ("image-chat", "google/gemma-3-12b-it"): DerivedInput(
        "gemma-3-12b", 260.0, 103.0, vit_gflop(4096, 27, 1152, 4304, 2.0 * 256 * 1152 * 3840),
        "1 image per request (ML.ENERGY configs/vllm/image-chat/benchmark.yaml num_images 1); Gemma 3 resizes every image "
        "to 896 x 896 (shipped config vision_config image_size 896, patch 14: 4,096 SigLIP patches) and pools it to "
        "mm_tokens_per_image 256 (models/llm/configs/google--gemma-3-12b-it_config.json), + <start_of_image>, <end_of_image> "
        "and two newline tokens = 260, whatever the upload's size (vLLM's pan-and-scan is off unless asked for); "
        f"{_VISIONARENA_TEXT}; tower: SigLIP 27 blocks, width 1152, MLP 4304 (same config)"),
    ("image-chat", "google/gemma-3-27b-it"): DerivedInput(
        "gemma-3-27b", 260.0, 103.0, vit_gflop(4096, 27, 1152, 4304, 2.0 * 256 * 1152 * 5376),
        "as gemma-3-12b-it: 256 pooled image tokens + 4 delimiters (models/llm/configs/google--gemma-3-27b-it_config.json "
        f"mm_tokens_per_image 256, the same SigLIP tower); {_VISIONARENA_TEXT}"),
    ("mllm-chat", "llava-hf/llava-1.5-7b-hf"): DerivedInput(
        "codellama-7b", 576.0, 80.0, _CLIP_336 + 2.0 * 576 * (1024 * 4096 + 4096 * 4096) / 1e9,
        "1 COCO image per request (leaderboard-v2 benchmark/mllm_text_generation/chat: llava_conversation/sample.py, "
        "benchmark_client.py one image_url); LLaVA-1.5 feeds CLIP ViT-L/14-336's 24 x 24 = 576 patch features (CLS dropped) "
        f"at any image size; {_LLAVA_TEXT}; backbone Vicuna-7B v1.5, a Llama 2 7B fine-tune: the layer shapes of "
        "codellama-7b (32 layers, hidden 4096, 32 heads, FFN 11008; vocabulary 32,064 vs 32,016, 0.01 % of the weights)"),
    ("mllm-chat", "llava-hf/llava-1.5-13b-hf"): DerivedInput(
        "codellama-13b", 576.0, 80.0, _CLIP_336 + 2.0 * 576 * (1024 * 5120 + 5120 * 5120) / 1e9,
        f"as llava-1.5-7b-hf (576 image tokens); {_LLAVA_TEXT}; backbone Vicuna-13B v1.5 (Llama 2 13B): the layer shapes of "
        "codellama-13b (40 layers, hidden 5120, 40 heads, FFN 13824)"),
    ("mllm-chat", "llava-hf/llama3-llava-next-8b-hf"): DerivedInput(
        "llama-3.1-8b", 2340.0, 80.0, 5 * _CLIP_336 + 2.0 * 2880 * (1024 * 4096 + 4096 * 4096) / 1e9,
        "1 COCO train2017 image per request (as llava-1.5); COCO images are at most 640 px on the longer side, taken as "
        "640 x 480 (the commonest COCO size; 640 x 427 gives 2,144 tokens, -8 %); LLaVA-NeXT 'anyres' (grid pinpoints "
        "336x672 ... 1008x336) picks the 672 x 672 grid = 2 x 2 tiles of 336 px + the 336 px overview, 5 CLIP passes; "
        "tokens (vLLM's llava_next feature size): overview 576 + tiles unpadded to the 4:3 aspect 36 x 48 = 1,728 + 36 row "
        f"newlines = 2,340; {_LLAVA_TEXT}; backbone Llama 3 8B: the layer shapes of llama-3.1-8b"),
}
"""Multimodal checkpoints whose prompt tokens follow from what the benchmark sent (module docstring).
Keyed by (task, model as written in the file). Not fitted: no number here was chosen by looking at the
runs' measured throughput or energy."""

UNDERIVED_MULTIMODAL: dict[str, str] = {
    "qwen/qwen3-vl": ("Qwen3-VL's image/video tokens follow the pixels (one token per 32 x 32 pixels after smart_resize); "
                      "the upload/frame resolutions are not recorded anywhere public we found"),
    "qwen/qwen3-omni": "Qwen3-Omni's vision tokens follow the pixels (as Qwen3-VL); the resolutions are not recorded",
    "meta-llama/llama-4": ("Llama 4's image tokens follow the upload's size and aspect (144 per 336 px tile, up to 16 tiles "
                           "+ overview); the VisionArena upload sizes are not recorded"),
    "nvidia/nvidia-nemotron-nano": ("its LLM (Nemotron-Nano-12B-v2, a Mamba-2 hybrid) has a profile, but the image tokens follow the "
                                    "upload's size (tiles of 512 x 512 px, up to 12: the VL model card) and the VisionArena upload "
                                    "sizes are not recorded"),
    "facebook/chameleon": ("the image is a fixed 1,024 VQ tokens, but Chameleon's language model has no catalog profile "
                           "and we found no citable config.json for it"),
    "microsoft/phi-3-vision": ("its HD crops follow the image size, and its LLM (Phi-3-mini-128k: no sliding window) has no "
                               "catalog profile"),
}
"""Why the other multimodal checkpoints are skipped (prefix of the lower-cased model name -> what is missing)."""


def _underived_reason(model: str) -> str:
    low = model.lower()
    return next((why for prefix, why in UNDERIVED_MULTIMODAL.items() if low.startswith(prefix)), "")


def _encode_s(derived: DerivedInput, device: Any, gpus: int) -> float:
    """Vision-tower time of one request on ``gpus`` devices (tower sharded like the LLM), s:
    ``F / (gpus x F_peak,bf16 x eta_F)``, ``eta_F`` = :data:`planner.perf.encoder.DEFAULT_ENCODER_ETA_F`
    (the encoder module's stated assumption, not fitted here). 0 when the device has no bf16 peak."""
    from planner.perf.encoder import DEFAULT_ENCODER_ETA_F

    peak = float((getattr(device, "peak_tflops_dense", None) or {}).get("bf16") or 0.0)
    return derived.encoder_gflop * 1e9 / (gpus * peak * 1e12 * DEFAULT_ENCODER_ETA_F) if peak > 0 else 0.0


STATED_UNMODELLED: dict[str, str] = {"mamba": "state-space (Mamba) layers", "state-space": "state-space layers",
                                      "linear attention": "linear-attention layers", "rwkv": "RWKV recurrent layers"}
"""Words of a run's stated architecture (``notes``: ``architecture=...``) -> the layer kind the
planner cannot model (as :data:`planner.hf_config.HYBRID_TYPES`), for models without a config."""


def config_profile(name: str, catalog: Catalog) -> LLMProfile | None:
    """The profile of a model the name resolver does not map but whose ``config.json`` is shipped
    (:meth:`planner.catalog.Catalog.resolve_model`, step 4), or ``None`` (no config, or one the
    planner cannot model: :func:`_unknown_model_reason` names why)."""
    if not name.strip() or name.strip().lower().endswith(".json"):
        return None  # a run names a checkpoint, never a path to read
    try:
        profile = catalog.resolve_model(name)
    except InputError:
        return None
    if any(profile is m for m in catalog.models.values()):
        return None  # the resolver's answer after all (reached only if model_ref and resolve_model disagree)
    if profile.id in catalog.models:  # a derived id that happens to name a catalog profile: keep them apart
        profile = profile.model_copy(update={"id": f"{profile.id}@config"})
    return profile


CONFIG_PROFILE = "derived from its shipped config.json (planner.hf_config; no published parameter count to check it against)"
"""The ``profile`` of a row predicted on a config-derived profile (:func:`config_profile`)."""


def _unknown_model_reason(name: str, catalog: Catalog, notes: str = "") -> str:
    """Why a model the name resolver does not map and no shipped config describes cannot be
    predicted: the piece of its architecture the planner cannot model when a shipped config says
    so (:meth:`planner.catalog.Catalog.resolve_model`) or the run's stated architecture does
    (``notes`` ``architecture=Mamba-Transformer Hybrid``: :data:`STATED_UNMODELLED`), else that
    it has no profile."""
    from planner.hf_config import UnsupportedArchitecture

    try:
        catalog.resolve_model(name)
    except UnsupportedArchitecture as exc:
        return f"model {name!r}: {exc.problems[0].path}: {exc.problems[0].message}"
    except InputError:
        pass
    stated = next((part.split("=", 1)[1].strip() for part in notes.split(";") if part.strip().startswith("architecture=")), "")
    lacking = next((what for word, what in STATED_UNMODELLED.items() if word in stated.lower()), "")
    if lacking:
        return f"model {name!r}: the run states architecture {stated!r}: {lacking}, which the planner cannot model"
    return f"model {name!r} is not in the catalog (no profile and no shipped config.json; add one: models/llm/README.md)"


EP_REASON = "expert-parallel run (attention data-parallel, experts over the GPUs): the roofline models tensor parallelism only"
"""Why an expert-parallel run was skipped before issue 25 (kept for callers that name it)."""

VLLM_EP = MoECalibration(redundant_experts=0, tbo_overlap=0.0,
                         source="vLLM 0.11 defaults: EPLB off (no redundant expert slots), dual-batch overlap off")
"""Expert-parallel parameters of a single-node vLLM server (module docstring)."""

ENGINE_MAP: dict[str, str] = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "tensorrt-llm": "trtllm"}


def stack_of(row: dict[str, Any]) -> str:
    """The serving stack of a row, ``<engine>-<version>`` (e.g. ``vllm-0.11.1``): each stack gets
    its own throughput calibration (per-step costs differ between engine versions)."""
    name = ENGINE_MAP.get(str(row.get("engine", "")).strip().lower(), str(row.get("engine", "")).strip().lower() or "default")
    version = str(row.get("engine_version", "")).strip()
    return f"{name}-{version}" if version else name


JTOK_RTOL = 0.01
"""Largest relative gap between a row's measured J per output token and ``avg_power_w_per_gpu x
gpu_count / output_throughput_tok_per_s`` (module docstring); 1 %, a thousand times the rounding of
the shipped rows' printed figures (at most 7.3e-6 apart)."""

JTOK_REASON = "measured J per output token contradicts avg_power_w_per_gpu x gpu_count / output tokens/s"
"""Head of the inconsistency (and skip reason in a fit) of a row beyond :data:`JTOK_RTOL` (the row's figures follow it)."""

APPROX_PARALLEL = "stated parallelism predicted as tensor parallelism over all GPUs"
"""Kind of approximation (:attr:`RunConfig.approximations`): a run whose ``tensor_parallel`` /
``pipeline_parallel`` / ``data_parallel`` differ from ``tp = gpu_count`` is predicted as TP over all its GPUs."""
APPROX_EP_AS_TP = "expert-parallel run predicted as tensor parallelism over all GPUs (--expert-parallel-as-tp)"
"""Kind of approximation: an expert-parallel run predicted as TP (``expert_parallel_as_tp``)."""
APPROX_PRECISION = "precision the model does not support, predicted at its native precision"
"""Kind of approximation: the run's precision is not among the model's supported weight precisions."""


def jtok_inconsistency(power_w_per_gpu: float, gpu_count: float, tok_per_s: float, j_per_tok: float) -> str:
    """The skip reason of a row whose J per output token is not ``P x G / (tokens/s)`` within
    :data:`JTOK_RTOL` (``''`` when it is)."""
    implied = power_w_per_gpu * gpu_count / tok_per_s if tok_per_s > 0 else math.inf
    if not (math.isfinite(implied) and implied > 0 and math.isfinite(j_per_tok)):  # the figures over- or underflow
        return (f"{JTOK_REASON}: {j_per_tok:g} J vs {power_w_per_gpu:g} W x {gpu_count:g} / {tok_per_s:g} tok/s, "
                "a product that is not a finite positive number of joules")
    gap = j_per_tok / implied - 1.0
    if abs(gap) <= JTOK_RTOL:
        return ""
    return (f"{JTOK_REASON}: {j_per_tok:g} J vs {power_w_per_gpu:g} W x {gpu_count:g} / {tok_per_s:g} tok/s = {implied:.4g} J "
            f"({100 * gap:+.1f} %, tolerance {100 * JTOK_RTOL:g} %)")


def parallel_approximation(row: dict[str, Any], gpu_count: int, *, ep_as_tp: bool) -> str:
    """How a TP-predicted run's stated layout differs from ``tp = gpu_count`` (``''`` when it does not):
    ``tensor_parallel`` other than ``gpu_count``, or ``pipeline_parallel`` / ``data_parallel`` above 1
    (blank: not stated). ``ep_as_tp``: the run is expert-parallel, predicted as TP on request."""
    if ep_as_tp:
        return f"{APPROX_EP_AS_TP}: expert_parallel {_num(row.get('expert_parallel')) or 1:g} on {gpu_count} GPUs predicted as tp {gpu_count}"
    tp, pp, dp = (_num(row.get(c)) for c in ("tensor_parallel", "pipeline_parallel", "data_parallel"))
    if (tp is None or tp == gpu_count) and (pp or 1) <= 1 and (dp or 1) <= 1:
        return ""
    stated = " x ".join(f"{name} {v:g}" for name, v in (("tensor_parallel", tp), ("pipeline_parallel", pp), ("data_parallel", dp))
                        if v is not None)
    return f"{APPROX_PARALLEL}: {stated} on {gpu_count} GPUs predicted as tp {gpu_count} (the roofline models tensor parallelism only)"


def approximation_kind(text: str) -> str:
    """The kind of one approximation (the text before its first ``': '``), for counting."""
    return text.split(": ", 1)[0]


ROW_MAXIMA: dict[str, float] = {"input_tokens": 1e7, "output_tokens": 1e7, "batch_cap_max_num_seqs": 1e6, "gpu_count": 4096.0,
                                 "output_throughput_tok_per_s": 1e9, "energy_j_per_output_token": 1e6, "avg_power_w_per_gpu": 1e5}
"""Upper bounds of a run's numbers, far above any real one (10M-token requests, a million sequences in a batch,
100 kW per GPU): beyond them a value is a typo, and 1e308 overflowed the roofline (a RuntimeWarning and NaN)."""


def _num(text: str | None) -> float | None:
    if text is None or str(text).strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


def read_energy_runs(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an ML.ENERGY-format CSV as dicts (strings as in the file). Raises ``InputError``
    naming the file and the missing columns."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: file does not exist (check the path)")
    with text_stream(p) as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{p}: missing column(s) {', '.join(missing)} (the ML.ENERGY export format is expected; "
                             f"see models/measured/SOURCE_energy.md)")
        return [dict(r) for r in reader]


@dataclass
class RunConfig:
    """One predictable run, resolved against the catalog."""

    index: int
    device: str
    model: str
    tp: int
    gpu_count: int
    precision: str
    cap: float
    isl: float
    osl: float
    engine: str
    """Serving stack (:func:`stack_of`), the key of its throughput calibration."""
    meas_tok_per_s: float
    meas_j_per_tok: float
    meas_power_w_per_gpu: float
    replica: EPReplica | None = None
    """The expert-parallel replica of an EP run (``None``: a TP instance, ``tp = gpu_count``)."""
    kv_bytes_per_sequence: float = 0.0
    """KV bytes of one sequence at ``ISL + OSL`` (bf16; EP runs: sizes the per-rank batch)."""
    derived_input: str = ""
    """How a multimodal run's prompt was derived (:data:`DERIVED_INPUTS`); empty: recorded or a task mean."""
    encode_s: float = 0.0
    """Vision-tower time per request on the run's GPUs (:func:`_encode_s`; 0 for text runs)."""
    profile: str = "catalog"
    """Where the model's profile comes from: ``catalog`` (``models/llm/``) or :data:`CONFIG_PROFILE`."""
    inconsistency: str = ""
    """The measured J per output token contradicts power x GPUs / tokens/s (:func:`jtok_inconsistency`); ``''``: consistent."""
    approximations: tuple[str, ...] = ()
    """Where the prediction departs from what the row states (:data:`APPROX_PARALLEL`,
    :data:`APPROX_EP_AS_TP`, :data:`APPROX_PRECISION`; kind before the first ``': '``)."""


def resolve_runs(rows: list[dict[str, Any]], catalog: Catalog, *, expert_parallel_as_tp: bool = False, skip_inconsistent: bool = False,
                 ) -> tuple[list[RunConfig], list[str], dict[tuple[str, str, int, str], InstanceArrays]]:
    """Each row's configuration, or the reason it cannot be predicted (``''`` when it can).
    Expert-parallel runs (``expert_parallel > 1`` with ``tensor_parallel < gpu_count``) are EP
    replicas of :mod:`planner.perf.moe`, or TP over all GPUs with ``expert_parallel_as_tp``.
    ``skip_inconsistent``: a row whose J per output token contradicts its power and throughput
    (:func:`jtok_inconsistency`) is skipped with that reason instead of carrying it."""
    runs: list[RunConfig] = []
    reasons: list[str] = []
    cache: dict[tuple[str, str, int, str], InstanceArrays] = {}
    memory = {k: float(d.memory_gb) for k, d in catalog.devices.items() if d.memory_gb}
    hf_ids = {m.hf_id: m.id for m in catalog.models.values()}
    from_config: dict[str, LLMProfile] = {}
    for i, r in enumerate(rows):
        reason = ""
        dev_id: str | None = None
        mem: float | None = None
        model_id: str | None = None
        derived = DERIVED_INPUTS.get((str(r.get("task")), str(r.get("model") or "")))
        try:
            dev_id, mem = device_variant(str(r.get("gpu") or ""), memory)
            model_id = derived.backbone if derived else model_ref(str(r.get("model") or ""), hf_ids).model_id
        except AmbiguousName as exc:
            reason = exc.problems[0].message
        if reason:
            pass
        elif r.get("record_type") != "serving_steady_state":
            reason = f"record_type {r.get('record_type')!r} is not a steady-state serving run"
        elif dev_id is None or dev_id not in catalog.devices:
            reason = f"GPU {r.get('gpu')!r} has no catalog device"
        elif str(r.get("task")) in MULTIMODAL_TASKS and _num(r.get("input_tokens")) is None and derived is None:
            why = _underived_reason(str(r.get("model") or ""))
            reason = (f"task {r.get('task')!r}: multimodal prompt, its image/video tokens are not recorded: "
                      f"{MULTIMODAL_INPUTS[str(r.get('task'))]}" + (f"; model {r.get('model')!r}: {why}" if why else ""))
        elif model_id is None:
            derived_profile = config_profile(str(r.get("model") or ""), catalog)
            if derived_profile is not None:
                model_id = derived_profile.id
                from_config[model_id] = derived_profile
            else:
                reason = _unknown_model_reason(str(r.get("model") or ""), catalog, str(r.get("notes") or ""))
        elif str(r.get("precision")) not in PRECISION_MAP:
            reason = f"precision {r.get('precision')!r} unknown"
        is_ep = not expert_parallel_as_tp and (_num(r.get("expert_parallel")) or 1) > 1 \
            and (_num(r.get("tensor_parallel")) or 1) < (_num(r.get("gpu_count")) or 1)
        isl = _num(r.get("input_tokens")) or (derived.image_tokens + derived.text_tokens if derived else None) \
            or TASK_INPUT_TOKENS.get(str(r.get("task")))
        osl = _num(r.get("output_tokens"))
        cap = _num(r.get("batch_cap_max_num_seqs"))
        count = _num(r.get("gpu_count"))
        meas = [_num(r.get(c)) for c in ("output_throughput_tok_per_s", "energy_j_per_output_token", "avg_power_w_per_gpu")]
        given = {"input_tokens": isl, "output_tokens": osl, "batch_cap_max_num_seqs": cap, "gpu_count": count,
                 "output_throughput_tok_per_s": meas[0], "energy_j_per_output_token": meas[1], "avg_power_w_per_gpu": meas[2]}
        bad = [f"{name} {v:g} not in (0, {ROW_MAXIMA[name]:g}]" for name, v in given.items()
               if v is not None and not (math.isfinite(v) and 0 < v <= ROW_MAXIMA[name])]
        if not reason and bad:
            reason = "; ".join(bad)
        if not reason and count is not None and (count != int(count) or count > 4096):
            reason = f"gpu_count {count:g} is not a whole number up to 4096"
        if not reason and isl is None:
            reason = f"task {r.get('task')!r}: input length not recorded (multimodal prompt tokens unknown)"
        if not reason and (not osl or not cap or not count or any(m is None or m <= 0 for m in meas)):
            reason = "missing output_tokens, batch cap, gpu_count or a measured figure"
        inconsistent = jtok_inconsistency(meas[2], count, meas[0], meas[1]) if count and meas[0] and meas[1] and meas[2] else ""
        if not reason and skip_inconsistent and inconsistent:
            reason = inconsistent
        approx: list[str] = []
        if not reason:
            assert dev_id is not None and model_id is not None
            prec = PRECISION_MAP[str(r["precision"])]
            model = catalog.models.get(model_id) or from_config.get(model_id)
            device = catalog.devices.get(dev_id)
            profile = "catalog" if model_id in catalog.models else CONFIG_PROFILE
            if model is None or device is None:
                reason = f"catalog lacks {model_id if model is None else dev_id}"
            elif prec not in model.supported_weight_precisions:
                approx.append(f"{APPROX_PRECISION}: precision {r['precision']!r} ({prec}) is not among {model_id}'s "
                              f"{', '.join(model.supported_weight_precisions)}, predicted at {model.native_weight_precision}")
                prec = model.native_weight_precision
            if not reason and is_ep:
                assert model is not None and device is not None and count is not None
                dev = variant_profile(device, mem)
                replica: EPReplica | None = None
                if not math.isfinite(count) or not 1 < count <= 4096 or count != int(count):
                    reason = f"expert-parallel run: gpu_count {count:g} is not a whole number of GPUs from 2 to 4096"
                else:
                    par = Parallelism(tp=int(count), ep=int(count), dp=1)
                    try:
                        replica = ep_replica(model, dev, par, prec, "bf16", VLLM_EP)
                    except ValueError as exc:
                        reason = f"expert-parallel run {par.label()}: {exc}"
                if not reason:
                    assert isl is not None and osl is not None and cap is not None
                    if (_num(r.get("pipeline_parallel")) or 1) > 1:
                        approx.append(f"{APPROX_PARALLEL}: pipeline_parallel {_num(r.get('pipeline_parallel')):g} of an expert-parallel "
                                      f"run on {int(count)} GPUs ignored (no pipeline bubble or stage transfer)")
                    runs.append(RunConfig(i, dev_id if mem is None else f"{dev_id}@{mem:g}", model_id, int(count), int(count), prec, cap,
                                          float(isl), float(osl), stack_of(r), float(meas[0] or 0), float(meas[1] or 0),
                                          float(meas[2] or 0), replica=replica,
                                          kv_bytes_per_sequence=model.kv_bytes_for_context(float(isl) + float(osl), "bf16"),
                                          derived_input=derived.how if derived and _num(r.get("input_tokens")) is None else "",
                                          encode_s=_encode_s(derived, device, int(count)) if derived else 0.0, profile=profile,
                                          approximations=tuple(approx), inconsistency=inconsistent))
            elif not reason:
                assert model is not None and device is not None and count is not None
                tp = int(count)
                key = (model_id, dev_id if mem is None else f"{dev_id}@{mem:g}", tp, prec)
                if key not in cache:
                    dev = variant_profile(device, mem)
                    try:
                        cache[key] = instance_arrays(model, dev, tp, prec, "bf16")
                    except ValueError as exc:
                        reason = str(exc)
                if not reason:
                    assert isl is not None and osl is not None and cap is not None
                    layout = parallel_approximation(r, tp, ep_as_tp=expert_parallel_as_tp and (_num(r.get("expert_parallel")) or 1) > 1
                                                    and (_num(r.get("tensor_parallel")) or 1) < tp)
                    approx = [layout, *approx] if layout else approx
                    engine = stack_of(r)
                    use_derived = derived is not None and _num(r.get("input_tokens")) is None
                    runs.append(RunConfig(i, key[1], model_id, tp, tp, prec, cap, float(isl), float(osl), engine,
                                          float(meas[0] or 0), float(meas[1] or 0), float(meas[2] or 0),
                                          derived_input=derived.how if derived and use_derived else "",
                                          encode_s=_encode_s(derived, device, tp) if derived else 0.0, profile=profile,
                                          approximations=tuple(approx), inconsistency=inconsistent))
        reasons.append(reason)
    return runs, reasons, cache


@dataclass(frozen=True)
class RunPrediction:
    """Per predictable run (arrays aligned with the ``runs`` list)."""

    tok_per_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    total_s: np.ndarray
    rows: np.ndarray
    """Tokens in the mean iteration (decode batch + prompt tokens)."""
    feasible: np.ndarray
    running: np.ndarray


def _engines(runs: list[RunConfig], calibration: Calibration | None) -> EngineArrays:
    from planner.perf.calibration import PUBLISHED_DEFAULT

    cals: list[EngineCalibration] = [calibration.for_engine(r.engine)[0] if calibration else PUBLISHED_DEFAULT for r in runs]
    return engine_arrays(cals)


def _predict_tp(runs: list[RunConfig], insts: dict[tuple[str, str, int, str], InstanceArrays],
                calibration: Calibration | None) -> RunPrediction:
    """TP runs: the closed loop of :func:`predict_agg` and its mean iteration (module docstring)."""
    if not runs:
        z = np.zeros(0)
        return RunPrediction(z, z, z, z, z, z.astype(bool), z)
    inst = InstanceArrays.stack([insts[(r.model, r.device, r.tp, r.precision)] for r in runs])
    eng = _engines(runs, calibration)
    cap = np.array([r.cap for r in runs])
    isl = np.array([r.isl for r in runs])
    osl = np.array([r.osl for r in runs])
    res = predict_agg(inst, eng, cap, isl, osl)
    d = res.running
    # the mean mixed iteration of the cycle (closed_loop.predict_agg, mixed prefill)
    steps = np.maximum(osl - 1.0, 1.0)
    q = np.maximum(eng.budget_tokens - d, 256.0)
    iters = steps + np.ceil(isl / q)
    p_avg = d * isl / iters
    d_avg = d * steps / iters
    step = iteration_time(inst, eng.efficiency(), decode_batch=d_avg, decode_context=isl + osl / 2.0, prefill_tokens=p_avg,
                          prefill_cached=(isl - p_avg) / 2.0)
    # multimodal runs: the D requests of a cycle each run the vision tower once on the same GPUs
    # (compute-bound), so the cycle grows by D t_enc and the mean iteration by D t_enc / I of compute
    enc = np.array([r.encode_s for r in runs]) * d
    tok = d * osl / np.maximum(res.cycle_s + enc, 1e-12)
    compute_s = np.asarray(step.compute_s) + enc / iters
    total_s = np.asarray(step.total_s) + enc / iters
    return RunPrediction(tok, compute_s, np.asarray(step.memory_s), total_s, d_avg + p_avg,
                         np.asarray(res.feasible, dtype=bool) & (d >= 1), d)


def _predict_ep(run: RunConfig, catalog_model_kv: float, calibration: Calibration | None) -> tuple[float, float, float, float, float, bool, float]:
    """One expert-parallel run: (tokens/s, compute_s, memory_s, total_s, rows per GPU, feasible,
    running sequences). Each of the ``dp`` ranks (1 here, module docstring) runs ``D_r = min(cap / dp, KV-limited)``
    sequences; its mean iteration carries ``d = D_r (OSL - 1) / I`` decode sequences and
    ``p = D_r ISL / I`` prompt tokens, ``I = OSL - 1 + ceil(ISL / q)`` iterations per cycle
    (``q`` = the engine's token budget less the decode batch, at least 256, as for TP); the cycle
    is ``I`` such iterations and ``tokens/s = dp D_r OSL / (I t)``."""
    from planner.perf.points import efficiency_of

    rep = run.replica
    assert rep is not None
    from planner.perf.calibration import PUBLISHED_DEFAULT

    cal = calibration.for_engine(run.engine)[0] if calibration else PUBLISHED_DEFAULT
    dp = rep.par.dp
    per_seq = catalog_model_kv
    kv_cap = kv_capacity_per_rank_bytes(rep)
    fit = math.floor(kv_cap / per_seq) if per_seq > 0 and kv_cap > 0 else 0
    d_rank = min(run.cap / dp, float(fit))
    if d_rank < 1.0:
        return 0.0, 0.0, 0.0, 0.0, 0.0, False, d_rank * dp
    steps = max(run.osl - 1.0, 1.0)
    q = max(float(cal.prefill_token_budget) - d_rank, 256.0)
    iters = steps + math.ceil(run.isl / q)
    p_avg = d_rank * run.isl / iters
    d_avg = d_rank * steps / iters
    st = ep_iteration_time(rep, efficiency_of(cal), decode_batch=d_avg, decode_context=run.isl + run.osl / 2.0, prefill_tokens=p_avg,
                           prefill_cached=(run.isl - p_avg) / 2.0)
    enc = d_rank * run.encode_s / iters  # vision-tower time per iteration (multimodal runs; as for TP)
    total = float(st.total_s) + enc
    tok = dp * d_rank * run.osl / max(iters * total, 1e-12)
    return tok, float(st.compute_s) + enc, float(st.memory_s), total, d_avg + p_avg, True, d_rank * dp


def predict_runs(runs: list[RunConfig], insts: dict[tuple[str, str, int, str], InstanceArrays],
                 calibration: Calibration | None) -> RunPrediction:
    """Steady-state throughput and the mean iteration's roofline times per run (module docstring):
    TP runs through :func:`predict_agg`, expert-parallel runs through :func:`_predict_ep`."""
    n = len(runs)
    tp_idx = [k for k, r in enumerate(runs) if r.replica is None]
    ep_idx = [k for k, r in enumerate(runs) if r.replica is not None]
    tp = _predict_tp([runs[k] for k in tp_idx], insts, calibration)
    out = {f: np.zeros(n) for f in ("tok_per_s", "compute_s", "memory_s", "total_s", "rows", "running")}
    feasible = np.zeros(n, dtype=bool)
    for j, k in enumerate(tp_idx):
        for f in out:
            out[f][k] = getattr(tp, f)[j]
        feasible[k] = tp.feasible[j]
    for k in ep_idx:
        r = runs[k]
        tok, c, m, t, rows, ok, running = _predict_ep(r, r.kv_bytes_per_sequence, calibration)
        out["tok_per_s"][k], out["compute_s"][k], out["memory_s"][k], out["total_s"][k] = tok, c, m, t
        out["rows"][k], out["running"][k], feasible[k] = rows, running, ok
    return RunPrediction(out["tok_per_s"], out["compute_s"], out["memory_s"], out["total_s"], out["rows"], feasible, out["running"])
