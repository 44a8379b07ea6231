"""The encode phase in reports: where each multimodal bucket's vision-tower work runs (issue 26 item 3).

Rows come from the plan's routing (roles ``encode`` — a separate encode pool — and ``encode_prefill`` /
``encode_unified`` — inline in that pool) joined with the capacity snapshot's encode points
(:mod:`planner.capacity_encode`): encode time per request (``ttft_ms``: the tower's roofline time, plus the
embedding transfer for a separate pool), busy instance-seconds per request, embedding bytes sent.
"""

from __future__ import annotations

from typing import Any

ENCODE_COLUMNS: tuple[str, ...] = ("architecture", "service", "bucket", "where", "pool", "share", "encode_ms", "instance_s_per_request",
                                   "embedding_mb_per_request")


def encode_rows(result: Any) -> list[dict[str, Any]]:
    """One row per (architecture, service, bucket, encode point routed)."""
    pts = {(p.get("service"), p.get("bucket"), p.get("role"), p.get("config")): p for p in result.capacity.points
           if str(p.get("role", "")).startswith("encode")}
    out = []
    for arch, plan in result.architectures.items():
        if not plan.feasible:
            continue
        for r in plan.routing:
            if not str(r.role).startswith("encode") or r.share <= 0:
                continue
            p = pts.get((r.service, r.bucket, r.role, r.config), {})
            out.append({
                "architecture": arch, "service": r.service, "bucket": r.bucket,
                "where": "separate encode pool" if r.role == "encode" else f"inline in the {str(r.role).removeprefix('encode_')} pool",
                "pool": r.pool, "share": float(r.share), "encode_ms": float(p.get("ttft_ms", float("nan"))),
                "instance_s_per_request": float(p.get("instance_seconds_per_request", float("nan"))),
                "embedding_mb_per_request": float(p.get("kv_transfer_bytes_per_request", 0.0) or 0.0) / 1e6,
            })
    return out


def encode_lines(result: Any, arch: str) -> list[str]:
    """Plain sentences for ``arch`` (empty for text-only plans)."""
    return [f"Encode phase of {r['service']}/{r['bucket']}: {r['where']} {r['pool']} ({r['share']:.0%} of requests; "
            f"{r['encode_ms']:.1f} ms and {r['instance_s_per_request']:.3g} instance-s per request"
            + (f", {r['embedding_mb_per_request']:.2f} MB of embeddings sent to prefill" if r["embedding_mb_per_request"] > 0 else "") + ")"
            for r in encode_rows(result) if r["architecture"] == arch]
