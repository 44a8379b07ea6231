"""Encode-phase rows of the capacity table (multimodal services, ``services.<name>.encode``).

Demand (only when a service sets ``encode``; text-only tables keep their columns): per row
``encode_tokens_mean`` — the encoder-output tokens per request the vision tower produces (image +
video tokens of the workload profile, :class:`planner.schema.workload.ModalityStats`, or
``encode.tokens_per_request``) — and ``encode_items_mean`` (images / clips per request). The
service's means are applied to every bucket (ServeGen publishes no joint of text and image tokens).

Points, per demand row with encode work and per configuration ``c`` (:mod:`planner.perf.encoder`):

- role ``encode`` — a separate encode pool on ``c`` (unless ``encode.placement`` is ``inline``):
  ``instance_seconds_per_request = t_encode``, ``kv_transfer_bytes_per_request`` = the embeddings sent to
  the prefill pool (``tokens · out_hidden · bytes``, priced per GB and carried by a NIC like KV transfer),
  ``ttft_ms = t_encode + transfer``;
- roles ``encode_prefill`` / ``encode_unified`` — the same work riding in the prefill / unified pool on
  ``c`` (unless ``encode.placement`` is ``separate``; the MIP puts its load in that pool and lets it carry only
  requests that pool prefills):
  ``instance_seconds_per_request = t_encode`` on the pool's ``tp`` devices, no transfer.

Each has ``max_batch`` 1 and ``energy_j_per_request`` = busy power x tp x t_encode. APPROXIMATIONS (stated):
the queueing cap of an encode point uses the TTFT target minus its own ``ttft_ms`` as its budget, like a
prefill point, so the encode and prefill stages each fit the TTFT target on their own when the caps are set (the
plan's check adds them, :func:`planner.pool_latency.bucket_latency`, and queues an inline encode in a prefill pool
with its prompt, :mod:`planner.inline_encode`, and a unified pool's lane carries it as prompt work); the tower's weights (≈1.4 GB for
Qwen2.5-VL-7B) are not subtracted from an inline pool's KV capacity; an inline encode on a unified pool
stalls that iteration's decode steps, which the TPOT prediction does not include.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from planner.errors import InputError, Problem

ENCODE_ROLES: tuple[str, ...] = ("encode", "encode_prefill", "encode_unified")
DEMAND_ENCODE_COLUMNS: tuple[str, ...] = ("encode_tokens_mean", "encode_items_mean")
VISION_MODALITIES: tuple[str, ...] = ("image", "video")
"""Modalities the vision tower encodes (video frames go through the same ViT with temporal patches)."""


def encode_demand(resolved: Any, demand: pd.DataFrame, profiles: dict[str, Any]) -> pd.DataFrame:
    """``demand`` with :data:`DEMAND_ENCODE_COLUMNS` when a service sets ``encode``; unchanged otherwise."""
    services = resolved.instance.services
    if not any(s.encode is not None for s in services.values()):
        return demand
    tokens: dict[str, tuple[float, float]] = {}
    for name, svc in services.items():
        enc = svc.encode
        if enc is None:
            tokens[name] = (0.0, 0.0)
            continue
        mods = getattr(profiles[name], "modalities", {}) or {}
        audio = enc.tokens_per_request.get("audio", mods["audio"].tokens.mean if "audio" in mods else 0.0)
        if audio > 0:
            raise InputError(Problem(file=str(resolved.path), path=f"services.{name}.encode",
                                     message=f"the workload has {audio:g} audio tokens per request but planner.perf.encoder models vision towers only",
                                     fix="plan the audio encoder separately, or set encode.tokens_per_request.audio: 0"))
        tok = items = 0.0
        for m in VISION_MODALITIES:
            t = float(enc.tokens_per_request.get(m, mods[m].tokens.mean if m in mods else 0.0))
            n = float(enc.items_per_request.get(m, mods[m].items_per_request if m in mods else (1.0 if t > 0 else 0.0)))
            tok += t
            items += n
        if tok <= 0:
            raise InputError(Problem(file=str(resolved.path), path=f"services.{name}.encode",
                                     message="the service sets encode but neither its trace nor encode.tokens_per_request gives image or video tokens",
                                     fix="use a multimodal trace (ServeGen multimodal, or image_tokens columns of a generic log) or set encode.tokens_per_request.image"))
        tokens[name] = (tok, max(items, 1.0))
    out = demand.copy()
    out["encode_tokens_mean"] = [tokens[str(s)][0] for s in out["service"]]
    out["encode_items_mean"] = [tokens[str(s)][1] for s in out["service"]]
    return out


def encode_points(resolved: Any, demand: pd.DataFrame, configs: pd.DataFrame, extra_columns: dict[str, Any]) -> list[dict[str, Any]]:
    """Encode operating points (module docstring); ``extra_columns`` fills the table's optional columns."""
    from planner.perf.encoder import encode_point, load_encoder, transfer_ms

    if "encode_tokens_mean" not in demand.columns:
        return []
    inst = resolved.instance
    base = Path(resolved.base_dir)
    link = inst.costs.network.kv_link_gb_per_s
    rows: list[dict[str, Any]] = []
    towers: dict[str, Any] = {}
    for rec in demand.to_dict("records"):
        tok = float(rec["encode_tokens_mean"])
        if tok <= 0:
            continue
        service, bucket = str(rec["service"]), str(rec["bucket"])
        enc = inst.services[service].encode
        if enc.encoder not in towers:
            towers[enc.encoder] = load_encoder(enc.encoder, base)
        tower = towers[enc.encoder]
        items = float(rec["encode_items_mean"])
        ttft_t = float(rec["ttft_target_ms"])
        for cfg in configs.to_dict("records"):
            device, tp, config = str(cfg["device"]), int(cfg["tp"]), str(cfg["config"])
            if "-ep" in config.rsplit("/", 1)[-1]:
                continue  # expert-parallel replicas: the tower runs on tp-only configurations
            dev = resolved.devices[device]
            ep = encode_point(tower, dev, tp, tokens=tok, items=items, precision=enc.precision, eta_f=enc.efficiency)
            enc_ms = ep.encode_s * 1e3
            for role in ENCODE_ROLES:
                if (role == "encode" and enc.placement == "inline") or (role != "encode" and enc.placement == "separate"):
                    continue
                own = role == "encode"
                ttft = enc_ms + (transfer_ms(ep.embedding_bytes, link, dev.nic_bw_gb_per_s) if own else 0.0)
                feasible, reason = ep.feasible, ep.reason
                if feasible and ttft >= ttft_t:
                    eff = "default, planner.perf.encoder.DEFAULT_ENCODER_ETA_F" if enc.efficiency is None else f"{enc.efficiency:g} of the peak"
                    feasible, reason = False, (f"encode on {device} tp{tp} takes {ttft:,.0f} ms, at or above the TTFT target "
                                               f"{ttft_t:,g} ms ({tok:,.0f} encoder tokens per request at "
                                               f"services.{service}.encode.efficiency: {eff})")
                rows.append({
                    **extra_columns,
                    "service": service, "bucket": bucket, "role": role, "config": config, "device": device, "tp": tp,
                    "feasible": bool(feasible), "reason": reason, "bound": ep.bound,
                    "instance_seconds_per_request": float(ep.encode_s), "max_batch": 1, "kv_bytes_per_request": 0.0,
                    "kv_transfer_bytes_per_request": float(ep.embedding_bytes) if own else 0.0,
                    "energy_j_per_request": float(ep.energy_j) if math.isfinite(ep.encode_s) else 0.0,
                    "ttft_ms": float(ttft), "tpot_ms": 0.0, "service_time_cv": 0.0,
                    "source": f"roofline:encoder {tower.name} ({tower.params / 1e6:.0f} M params, {ep.flops / 1e12:.2f} TFLOP/request)",
                })
    return rows

