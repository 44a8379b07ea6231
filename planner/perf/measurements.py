"""The measurements CSV (our normalised table of benchmark runs) and the converter from the
aiconfigurator format; other tools' files are read by :mod:`planner.perf.importers`.

Format — one row per closed-loop benchmark run (fixed concurrency, fixed lengths)::

    column          type    required  meaning
    device          str     yes       device id in models/hardware (e.g. h100-sxm)
    model           str     yes       model id in models/llm (e.g. llama-3.1-70b)
    engine          str     yes       serving engine: trtllm | vllm | sglang | <other> (other = default calibration)
    precision       str     yes       weight/activation precision: bf16 | fp8 | fp4 | int8
    tp              int     yes*      tensor-parallel degree of one replica (agg mode)
    concurrency     int     yes*      users in the closed loop (requests in flight)
    isl, osl        int     yes       input / output tokens per request (fixed)
    ttft_ms         float   yes**     measured mean time to first token (includes closed-loop queueing)
    tpot_ms         float   yes**     measured mean time per output token after the first
    kv_precision    str     no        KV-cache precision (empty: the checkpoint's published default on
                                      the engine, planner.perf.kv_infer.published_default_kv)
    kv_precision_source str no        stated | checkpoint | default | inferred (planner.perf.kv_infer;
                                      empty: stated when kv_precision is given, else default)
    mode            str     no        agg (default, one pool) | disagg (separate prefill/decode workers)
    prefill_tp, prefill_workers       disagg: TP degree and number of prefill workers
    decode_tp, decode_workers         disagg: TP degree and number of decode workers
    decode_batch                      disagg: concurrency per decode worker
    load            str     no        closed (default: fixed concurrency) | open (request rate) | burst
                                      (all requests at t = 0); only closed rows are predicted and fitted
    request_rate_per_s float no       open-loop rows: the arrival rate the benchmark was run at
    id              str     no        a row label carried to the output
    harness         str     no        the benchmark tool/setup that produced the row (closed-loop replay
                                      parameters are fitted per harness; planner.perf.calibration)

    *  agg rows; disagg rows give the prefill_/decode_ columns instead (concurrency =
       decode_batch x decode_workers when empty).
    ** needed by ``calibrate`` and for errors in ``validate-perf``; predictions need neither.

Closed loop: each of ``concurrency`` users sends its next request as soon as the previous one
finishes, so TTFT includes the queueing inside the loop (:mod:`planner.perf.closed_loop`).
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem
from planner.perf.kv_infer import KV_SOURCES, published_default_kv
from planner.perf.names import device_id, model_ref
from planner.textio import text_stream

REQUIRED = ("device", "model", "engine", "precision", "isl", "osl")
OPTIONAL = (
    "id", "tp", "concurrency", "ttft_ms", "tpot_ms", "kv_precision", "mode", "prefill_tp",
    "prefill_workers", "decode_tp", "decode_workers", "decode_batch", "load", "request_rate_per_s", "harness",
    "kv_precision_source",
)
COLUMNS = ("id", "device", "model", "engine", "precision", "kv_precision", "mode", "load", "tp", "concurrency", "request_rate_per_s",
           "isl", "osl", "prefill_tp", "prefill_workers", "decode_tp", "decode_workers", "decode_batch", "ttft_ms", "tpot_ms", "harness",
           "kv_precision_source")
_INT_FIELDS = ("tp", "concurrency", "isl", "osl", "prefill_tp", "prefill_workers", "decode_tp", "decode_workers", "decode_batch")
_FLOAT_FIELDS = ("ttft_ms", "tpot_ms", "request_rate_per_s")
PRECISIONS = ("bf16", "fp8", "fp4", "int8")
LOADS = ("closed", "open", "burst")
"""How a benchmark sent its requests (``load`` column; :mod:`planner.perf.importers.common`)."""
MAX_TOKENS_PER_REQUEST = 10_000_000.0
"""Upper bound of a run's mean input or output tokens per request (10M: far above any context window); beyond it
a value is a typo or a corrupted file, and it overflows the predictor (1e308 tokens gave inf and NaN)."""
MAX_LATENCY_MS = 86_400_000.0
"""Upper bound of a run's mean TTFT or TPOT: one day."""
MAX_CONCURRENCY = 1_000_000
"""Upper bound of a closed-loop run's concurrency (a million users of one server is a typo)."""
MAX_TP = 4096
"""Upper bound of a tensor-parallel degree (as the importers: a whole number from 1 to 4096)."""
BOUNDS: dict[str, tuple[float, float, str]] = {
    "ttft_ms": (0.0, MAX_LATENCY_MS, "ms"), "tpot_ms": (0.0, MAX_LATENCY_MS, "ms"),
    "isl": (0.0, MAX_TOKENS_PER_REQUEST, "tokens"), "osl": (0.0, MAX_TOKENS_PER_REQUEST, "tokens"),
    "concurrency": (0.0, MAX_CONCURRENCY, "users"), "decode_batch": (0.0, MAX_CONCURRENCY, "users"),
    "prefill_workers": (0.0, MAX_CONCURRENCY, "workers"), "decode_workers": (0.0, MAX_CONCURRENCY, "workers"),
    "tp": (0.0, MAX_TP, ""), "prefill_tp": (0.0, MAX_TP, ""), "decode_tp": (0.0, MAX_TP, ""),
    "request_rate_per_s": (0.0, math.inf, "req/s"),
}
"""Open-closed range ``(lo, hi]`` of each number of a measurements row: the bounds the benchmark importers
apply (:func:`planner.perf.importers.common.summary_row`). A row with a value outside (negative, zero,
infinite or absurd: TTFT -154 ms, 0 ms, inf, 1e308; isl 1e30) is skipped with the reason
(``skip_reason``), never predicted nor fitted."""


def _num(text: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    value = float(text)
    return None if math.isnan(value) else value


def out_of_bounds(field: str, value: float) -> str:
    """Why ``value`` cannot be the row's ``field`` (:data:`BOUNDS`; ``""``: it can). The value itself stays in
    the row: the reason names the bound only, so rows skipped for one bound are counted together."""
    lo, hi, unit = BOUNDS[field]
    if math.isfinite(value) and lo < value <= hi:
        return ""
    top = "inf)" if math.isinf(hi) else f"{hi:,.0f}]"
    return f"{field} not in ({lo:g}, {top}" + (f" {unit}" if unit else "")


def header_hint(header: list[str]) -> str:
    """What a header that lacks our columns most likely is: another separator (``;``, tab), the
    aiconfigurator format, a measured-energy CSV."""
    joined = ",".join(header)
    for sep, name in ((";", "semicolons"), ("\t", "tabs")):
        if len(header) <= 2 and sep in joined and "device" in joined:
            return f" (the header is separated by {name}: a measurements CSV is comma-separated; save it with commas)"
    if "model_path" in header:
        return " (this looks like the aiconfigurator format: read it with --from-format silicon or auto)"
    if "energy_j_per_output_token" in header or "avg_power_w_per_gpu" in header:
        return " (this is a measured-energy CSV: check it with planner validate-energy, fit it with planner calibrate-energy)"
    return ""


def _parse_row(raw: dict[str | None, Any], i: int, path: Path, problems: list[Problem]) -> dict[str, Any]:
    """One CSV row as a dict: numbers parsed (a number outside :data:`BOUNDS` sets ``skip_reason``),
    defaults of ``kv_precision``, ``mode`` and ``load`` applied. Unparsable cells go to ``problems``."""
    row: dict[str, Any] = {k.strip(): (v or "").strip() if isinstance(v, str) else "" for k, v in raw.items() if k is not None}
    bad: list[str] = []
    for f in _INT_FIELDS + _FLOAT_FIELDS:
        if f not in row:
            row[f] = None
            continue
        try:
            value = _num(row[f])
        except ValueError:
            problems.append(Problem(str(path), f"line {i}: {f}", f"not a number: {row[f]!r}", "write a plain number or leave it empty"))
            continue
        if value is not None and (why := out_of_bounds(f, value)):
            bad.append(why)
            row[f] = value  # kept as read (a float): the row is skipped, never predicted
            continue
        if value is not None and f in _INT_FIELDS:
            if value != int(value):
                problems.append(Problem(str(path), f"line {i}: {f}", f"must be a non-negative integer, got {row[f]!r}", "write a whole number"))
                continue
            value = int(value)
        row[f] = value
    if bad:
        row["skip_reason"] = "; ".join(bad)
    row.setdefault("id", "")
    given_source = row.get("kv_precision_source") or ""
    if given_source and given_source not in KV_SOURCES:
        problems.append(Problem(str(path), f"line {i}: kv_precision_source", f"unknown source {given_source!r}", f"use one of {', '.join(KV_SOURCES)}"))
    if row.get("kv_precision"):
        row["kv_precision_source"] = given_source or "stated"
    else:
        row["kv_precision"] = published_default_kv(str(row.get("engine") or ""), str(row.get("precision") or ""))
        row["kv_precision_source"] = "default"
    row["mode"] = row.get("mode") or "agg"
    row["load"] = row.get("load") or "closed"
    if row["load"] not in LOADS:
        problems.append(Problem(str(path), f"line {i}: load", f"unknown load {row['load']!r}", f"use one of {', '.join(LOADS)}"))
    if row["mode"] == "disagg" and row.get("concurrency") is None and row.get("decode_batch") and row.get("decode_workers") and not bad:
        row["concurrency"] = row["decode_batch"] * row["decode_workers"]
    return row


def skipped_summary(rows: list[dict[str, Any]]) -> str:
    """``"3 rows: ttft_ms -154 not in (0, 86,400,000] ms; ..."``: the skip reasons of ``rows``, counted."""
    counts = Counter(str(r["skip_reason"]) for r in rows if r.get("skip_reason"))
    return "; ".join(f"{why} ({n} row{'' if n == 1 else 's'})" for why, n in counts.most_common(5)) + (" ..." if len(counts) > 5 else "")


def read_measurements(path: str | Path, supplied: Collection[str] = ()) -> list[dict[str, Any]]:
    """Rows of a measurements CSV as dicts (numbers parsed, blanks None). Structural problems
    (missing columns, unparsable numbers) raise one :class:`InputError` listing them all;
    rows whose content cannot be predicted are kept and explained by the predictor; a row with a
    number outside :data:`BOUNDS` is kept with its ``skip_reason`` (skipped and counted), and a file
    whose every row is so is one error. ``supplied``: required columns the caller fills from the
    command line (``--device``...), not required in the header."""
    p = Path(path)
    if not p.exists():
        raise InputError(Problem(str(p), "", "file does not exist", "check the path"))
    with text_stream(p) as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED if c not in header and c not in supplied]
        if missing:
            raise InputError(Problem(str(p), "header", f"missing column(s): {', '.join(missing)}{header_hint(header)}",
                                     f"the measurements CSV needs {', '.join(REQUIRED)} (see planner/perf/measurements.py)"))
        unknown = [c for c in header if c not in REQUIRED and c not in OPTIONAL]
        problems: list[Problem] = []
        if unknown:
            problems.append(Problem(str(p), "header", f"unknown column(s): {', '.join(unknown)}", f"use only {', '.join(COLUMNS)}"))
        rows = [_parse_row(raw, i, p, problems) for i, raw in enumerate(reader, start=2)]
        if problems:
            raise InputError(problems[:50])
    if rows and all(r.get("skip_reason") for r in rows):
        raise InputError(Problem(str(p), "", f"no row has usable numbers: {skipped_summary(rows)}",
                                 "latencies must be times in (0, 86,400,000] ms, lengths 1 to 10,000,000 tokens (the bounds of the importers)"))
    return rows


def write_measurements(rows: list[dict[str, Any]], path: str | Path) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})


# --- converter from aiconfigurator's silicon_*.csv -----------------------------------------
def silicon_kv_precision(backend: str, quant: str) -> str:
    """KV precision of an aiconfigurator row (the source does not record it). TensorRT-LLM runs
    of per-tensor ``fp8`` checkpoints (NVIDIA ModelOpt FP8, which quantise the KV cache to FP8 and
    TensorRT-LLM takes the KV dtype from the checkpoint) -> fp8; everything else -> bf16 (vLLM and
    SGLang ``kv_cache_dtype=auto`` = the activation dtype; ``fp8_block`` checkpoints carry no KV
    scales). ASSUMPTION, consistent with the KV-capacity knees of the shipped H100 rows (the
    qwen3-32b TensorRT-LLM tp1 TTFT jumps where ~290k tokens — fp8 KV — no longer fit; the
    llama-3.1-70b vLLM tp2 rows need bf16 KV to show theirs). A checkpoint name that states its
    KV precision (``-FP8-KV``) wins (:func:`planner.perf.names.model_ref`). Since issue 25 the
    rule is :func:`planner.perf.kv_infer.published_default_kv` (fp4 ModelOpt checkpoints carry FP8
    KV too), and a row whose concurrency and TTFT rule it out gets an inferred type
    (:func:`planner.perf.kv_infer.infer_kv`)."""
    return published_default_kv(backend, quant)


def silicon_harness(data_source: str) -> str:
    """The harness of an aiconfigurator row from its ``silicon_data_source``: the ``source_file``
    path without the device directory and the model file name (``aic-auto-gap-analysis/data/
    h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv`` -> ``aic-auto-gap-analysis/vllm/0.12.0``; a bare file
    name such as ``2026-04-06.csv`` -> ``2026-04-06``). Rows of one harness share how the benchmark
    was run (request count, warm-up, client), whatever the device."""
    m = re.search(r"source_file=([^;]+)", data_source or "")
    if not m:
        return ""
    parts = [x for x in m.group(1).strip().split("/") if x]
    if len(parts) == 1:
        return re.sub(r"\.csv$", "", parts[0])
    parts = parts[:-1]
    if "data" in parts:
        i = parts.index("data")
        parts = parts[i - 1:i] + parts[i + 2:]
    return "/".join(parts[-3:])


def silicon_precision(quant: str) -> str | None:
    """Weight precision of an aiconfigurator ``gemm_quant_mode``/``precision`` value: empty ->
    bf16, ``fp8``/``fp8_block``/``fp8_static`` -> fp8, ``fp4``/``nvfp4``/``mxfp4`` -> fp4,
    ``int8``/``int8_sq``/``w8a8*`` -> int8; ``None`` for anything else, in particular weight-only
    modes (``int8_wo``, ``int4_wo``, ``w4a16_mxfp4``: narrow weights with 16-bit compute, which no
    precision of the performance model describes)."""
    q = quant.strip().lower()
    if q.endswith("_wo") or q.startswith(("w4a16", "w8a16")):
        return None
    if q in ("", "bf16", "fp16", "float16", "bfloat16"):
        return "bf16"
    if q.startswith("fp8"):
        return "fp8"
    if q.startswith(("fp4", "nvfp4", "mxfp4", "w4a4_nvfp4")):
        return "fp4"
    if q.startswith(("int8", "w8a8", "sq")):
        return "int8"
    return None


def convert_silicon(path: str | Path, hf_ids: dict[str, str] | None = None, *, device_ids: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Rows of an aiconfigurator ``silicon_*.csv`` in our measurements format.

    Mapping: ``system`` -> catalog device id (:func:`planner.perf.names.device_id`: ``h100_sxm``
    -> h100-sxm, ``b200_sxm`` -> b200, ``gb200_sxm`` -> gb200, ...; unmapped names are kept as
    they are and the row is reported, not dropped); ``model_path`` -> the base model's id and the
    precision its name states (:func:`planner.perf.names.model_ref`: ``Qwen/Qwen3-32B-NVFP4`` ->
    qwen3-32b, fp4; ``nvidia/Llama-3.1-8B-Instruct-FP8`` -> llama-3.1-8b, fp8; unmapped paths
    are kept); ``backend`` -> engine; ``gemm_quant_mode``/``precision`` -> precision
    (:func:`silicon_precision`; the checkpoint name when the columns are empty);
    ``batch_size`` -> concurrency (every row is a closed loop); ``tp_size`` -> tp;
    ``silicon_ttft_ms``/``silicon_tpot_ms`` -> ttft_ms/tpot_ms; disagg rows keep their
    prefill_/decode_ tp, workers and decode batch. KV precision: the checkpoint name's if it
    states one, else :func:`silicon_kv_precision`.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(Problem(str(p), "", "file does not exist", "check the path"))
    out: list[dict[str, Any]] = []
    with text_stream(p) as fh:
        reader = csv.DictReader(fh)
        need = ("model_path", "system", "backend", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms")
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(Problem(str(p), "header", f"not an aiconfigurator silicon CSV: missing {', '.join(missing)}", "give a silicon_*.csv file"))
        for raw in reader:
            quant = (raw.get("gemm_quant_mode") or raw.get("precision") or "").strip().lower()
            model_path = raw["model_path"].strip()
            ref = model_ref(model_path, hf_ids)
            precision = silicon_precision(quant) if quant else (ref.weight_precision or "bf16")
            backend = raw["backend"].strip()
            system = raw["system"].strip()

            def i(name: str, raw: dict[str, str] = raw) -> int | None:
                v = _num(raw.get(name, ""))
                return None if v is None else int(v)

            mode = (raw.get("mode") or "agg").strip()
            row: dict[str, Any] = {
                "id": raw.get("id", ""),
                "device": device_id(system, device_ids) or system,
                "model": ref.model_id or model_path,
                "engine": backend,
                "precision": precision or quant,
                "kv_precision": ref.kv_precision or silicon_kv_precision(backend, quant or (ref.weight_precision or "")),
                "kv_precision_source": "checkpoint" if ref.kv_precision else "default",
                "mode": mode,
                "load": "closed",
                "tp": i("tp_size"),
                "concurrency": i("batch_size"),
                "isl": i("isl"),
                "osl": i("osl"),
                "prefill_tp": i("prefill_tp_size"),
                "prefill_workers": i("prefill_num_workers"),
                "decode_tp": i("decode_tp_size"),
                "decode_workers": i("decode_num_workers"),
                "decode_batch": i("decode_batch_size"),
                "ttft_ms": _num(raw.get("silicon_ttft_ms", "")),
                "tpot_ms": _num(raw.get("silicon_tpot_ms", "")),
            }
            row["harness"] = silicon_harness(raw.get("silicon_data_source", ""))
            if mode == "disagg" and row["concurrency"] is None and row["decode_batch"] and row["decode_workers"]:
                row["concurrency"] = row["decode_batch"] * row["decode_workers"]
            out.append(row)
    return out
