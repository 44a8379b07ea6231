"""Fidelity and speed of the performance model (prints; not part of the test gate).

    python benchmarks/bench_perf_fidelity.py

1. Shared H100 data (models/measured/silicon_h100_dense.csv, 584 closed-loop rows):
   out of sample by model (fit on two models, predict the third, rotate) and in sample (fit
   and score on all rows). Targets: TPOT MAPE <= 15 %, TTFT MAPE <= 30 % out of sample.
   H100 -> H200 (models/measured/silicon_h200_dense.csv, 199 rows; round 9): fit on the H100
   rows only and predict the H200 rows (transfer; targets TPOT <= 15 %, TTFT <= 30 %), and fit on
   both (in sample). Round 10: every figure per group (device, model, engine, harness = one benchmark
   series of one engine version, precision): H100 out of sample by model, H100 in sample (shipped file),
   H100 -> H200, in sample on both, and meas/floor (median measured TPOT over the model's TPOT at 100 %
   of every datasheet figure with no overheads; :func:`floor_calibration`). Then the transfer with and
   without the H200 groups the H100 rows cannot inform (README round 10 says why); the headline is the
   full figure. The FP8 checkpoint nvidia/Llama-3.1-8B-Instruct-FP8 is read as llama-3.1-8b at fp8
   (passed to the converter as a known Hugging Face id).
2. MLPerf Llama-2-70B Offline per-accelerator throughput (models/measured/mlperf_llama2-70b_public.csv).
   Offline = throughput with no latency target: each accelerator group runs data-parallel
   replicas of tp devices; we take the best tp in {1, 2, 4, 8} (the submissions choose their
   own) and predict OSL / (unified instance-seconds per request at the largest batch that fits)
   / tp. Precision (the rows say "not stated"): fp8 weights for H100/H200 and AMD (NVIDIA's and
   AMD's v4.1/v5.0 Llama-2-70B submissions are FP8), fp4 for B200 (NVIDIA's B200 submissions
   use FP4); KV fp8 for all (the submissions quantise the KV cache too; assumption).
   WORKLOAD ASSUMPTION: OpenOrca ISL 294 / OSL 284 mean tokens per request (the MLPerf
   llama2-70b reference dataset means as recalled; a search of the stored corpus found no
   source — UNVERIFIED; the printed error scales roughly with OSL). Engine: trtllm for NVIDIA,
   vllm for AMD rows.
3. Speed of operating_point (target well under 1 s per 1,000 points).

Profiles come from models/ when present, else from tests/data/perf_catalog (fixtures).
"""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path

import numpy as np

from planner.catalog import load_catalog
from planner.perf import operating_point
from planner.perf.calibration import PUBLISHED_DEFAULT, Calibration, load_calibration
from planner.perf.closed_loop import engine_slots
from planner.perf.fit import ENGINE_SCHEDULERS, fit_calibration
from planner.perf.measurements import convert_silicon
from planner.perf.names import device_id
from planner.perf.validate import calibration_for_rows, mape, predict_prepared, prepare_rows

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "models" / "measured" / "silicon_h100_dense.csv"
DATA_H200 = ROOT / "models" / "measured" / "silicon_h200_dense.csv"
CHECKPOINTS = {"nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b"}
"""Quantised checkpoints of catalog models in the H200 file (the precision comes from its quant column)."""
MLPERF = ROOT / "models" / "measured" / "mlperf_llama2-70b_public.csv"
MLPERF_PRECISION = {"b200": "fp4"}
"""Weight precision per device (default fp8); see the module docstring."""


def catalog():
    try:
        cat = load_catalog()
        if {"h100-sxm"} <= set(cat.devices) and {"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"} <= set(cat.models):
            return cat, "models/"
    except Exception:  # noqa: BLE001 - fall back to the fixtures while models/ is incomplete
        pass
    return load_catalog(ROOT / "tests" / "data" / "perf_catalog"), "tests/data/perf_catalog"


def score(rows, cat, cal, mask):
    prep = prepare_rows(rows, cat)
    ttft, tpot, _, _ = predict_prepared(prep, cal)
    mt = np.array([r["ttft_ms"] for r in rows], dtype=float)
    mp = np.array([r["tpot_ms"] for r in rows], dtype=float)
    return mape(ttft[mask], mt[mask]), mape(tpot[mask], mp[mask])


def predictions(rows, cat, cal):
    """Predicted TTFT and TPOT (ms) of every row under ``cal``."""
    ttft, tpot, _, _ = predict_prepared(prepare_rows(rows, cat), cal)
    return ttft, tpot


def group_key(r):
    """(device, model, engine, harness, precision): one benchmark series of one engine version."""
    return (r["device"], r["model"], r["engine"], (r.get("harness") or "-").replace("aic-auto-gap-analysis/", "aic/"), r["precision"])


def floor_calibration():
    """Every engine at 100 % of the datasheet FLOP/s, bandwidth and link figures with no overheads
    (its own scheduler and KV rules): the fastest the model lets a row run. ``measured / floor`` near
    or below 1 means the row ran faster than the stated work allows at the datasheet peaks."""
    ideal = {"eta_f": 1.0, "eta_b": 1.0, "eta_link": 1.0, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0,
             "allreduce_overhead_us": 0.0, "step_overhead_ms": 0.0, "ttft_overhead_ms": 0.0}
    engines = {e: PUBLISHED_DEFAULT.model_copy(update={**ideal, **sched}) for e, sched in ENGINE_SCHEDULERS.items()}
    return Calibration(name="floor", engines=engines)


def kv_limited(rows, cat, cal):
    """Rows where the engine's KV pool (its rules, the row's KV precision) holds fewer requests than
    the benchmark's concurrency, i.e. where the model predicts a wait for a KV slot."""
    prep = prepare_rows(rows, cat)
    out = np.zeros(len(rows), bool)
    if prep.agg_inst is not None:
        eng, _ = calibration_for_rows(prep, prep.agg_idx, cal)
        isl = np.array([rows[i]["isl"] for i in prep.agg_idx], dtype=float)
        osl = np.array([rows[i]["osl"] for i in prep.agg_idx], dtype=float)
        users = np.array([rows[i]["concurrency"] for i in prep.agg_idx], dtype=float)
        out[prep.agg_idx] = engine_slots(prep.agg_inst, eng, isl, osl) < users
    return out


def group_table(rows, columns, meas_t, meas_p, floor_p, title):
    """Per-group MAPE of TTFT / TPOT for each (label, (ttft, tpot)) in ``columns`` (NaN where not scored)."""
    keys = sorted({group_key(r) for r in rows})
    print(f"\n{title}")
    head = " ".join(f"{lab:>15s}" for lab, _ in columns)
    print(f"{'device':9s} {'model':13s} {'engine':6s} {'harness':24s} {'prec':4s} {'rows':>4s} {head} {'meas/floor':>10s}")
    for k in keys:
        m = np.array([group_key(r) == k for r in rows])
        cells = []
        for _, (t, p) in columns:
            a, b = mape(t[m], meas_t[m]), mape(p[m], meas_p[m])
            cells.append(f"{a:7.1f} /{b:6.1f}" if np.isfinite(a) else f"{'-':>15s}")
        fl = float(np.nanmedian(meas_p[m] / floor_p[m]))
        print(f"{k[0]:9s} {k[1]:13s} {k[2]:6s} {k[3]:24s} {k[4]:4s} {int(m.sum()):4d} {' '.join(cells)} {fl:10.2f}")


def main() -> None:
    cat, where = catalog()
    print(f"profiles from {where}")
    hf = {**{m.hf_id: m.id for m in cat.models.values()}, **CHECKPOINTS}
    rows = convert_silicon(DATA, hf)
    models = np.array([r["model"] for r in rows])
    mt = np.array([r["ttft_ms"] for r in rows], dtype=float)
    mp = np.array([r["tpot_ms"] for r in rows], dtype=float)
    print("\n== H100 closed-loop data: OUT OF SAMPLE by model (fit on the other two) ==")
    print(f"{'held-out model':16s} {'rows':>5s} {'TTFT MAPE %':>12s} {'TPOT MAPE %':>12s}")
    errs_t, errs_p, n_all = [], [], 0
    oos_t, oos_p = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    for held in sorted(set(models)):
        test = models == held
        t0 = time.perf_counter()
        cal = fit_calibration(rows, cat, name="oos", data_file=DATA, train_mask=~test)
        fit_s = time.perf_counter() - t0
        t, p = predictions(rows, cat, cal)
        oos_t[test], oos_p[test] = t[test], p[test]
        a, b = mape(t[test], mt[test]), mape(p[test], mp[test])
        print(f"{held:16s} {int(test.sum()):5d} {a:12.1f} {b:12.1f}   (fit {fit_s:.1f} s)")
        errs_t.append(a * test.sum())
        errs_p.append(b * test.sum())
        n_all += int(test.sum())
    print(f"{'pooled':16s} {n_all:5d} {sum(errs_t) / n_all:12.1f} {sum(errs_p) / n_all:12.1f}   targets: TTFT <= 30, TPOT <= 15")

    print("\n== H100 closed-loop data: IN SAMPLE (shipped calibration models/calibration/h100_dense.yaml) ==")
    shipped = load_calibration(ROOT / "models" / "calibration" / "h100_dense.yaml")
    a, b = score(rows, cat, shipped, np.ones(len(rows), bool))
    print(f"all rows: TTFT MAPE {a:.1f} %, TPOT MAPE {b:.1f} %")
    a, b = score(rows, cat, None, np.ones(len(rows), bool))
    print(f"uncalibrated published defaults: TTFT MAPE {a:.1f} %, TPOT MAPE {b:.1f} %")

    print("\n== H100 -> H200: fit on H100 only, predict H200 (transfer) / fit on both (in sample) ==")
    both = convert_silicon(DATA, hf) + convert_silicon(DATA_H200, hf)
    dev = np.array([r["device"] for r in both])
    bt = np.array([r["ttft_ms"] for r in both], dtype=float)
    bp = np.array([r["tpot_ms"] for r in both], dtype=float)
    t0 = time.perf_counter()
    only_h100 = fit_calibration(both, cat, name="h100-only", data_file=DATA, train_mask=dev == "h100-sxm")
    t_fit1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    on_both = fit_calibration(both, cat, name="both", data_file=DATA)
    t_fit2 = time.perf_counter() - t0
    tr_t, tr_p = predictions(both, cat, only_h100)
    in_t, in_p = predictions(both, cat, on_both)
    _, fl_p = predictions(both, cat, floor_calibration())
    h1 = dev == "h100-sxm"
    oos_both_t = np.concatenate([oos_t, np.full(int((~h1).sum()), np.nan)])
    oos_both_p = np.concatenate([oos_p, np.full(int((~h1).sum()), np.nan)])
    ship_t, ship_p = predictions(both, cat, shipped)
    ship_t[~h1], ship_p[~h1] = np.nan, np.nan
    tr_t_h2, tr_p_h2 = np.where(h1, np.nan, tr_t), np.where(h1, np.nan, tr_p)
    group_table(both, [("H100 oos", (oos_both_t, oos_both_p)), ("H100 in sample", (ship_t, ship_p)),
                       ("H100->H200", (tr_t_h2, tr_p_h2)), ("in sample both", (in_t, in_p))],
                bt, bp, fl_p, "TTFT / TPOT MAPE % per group (harness = benchmark series of one engine version; "
                "meas/floor = median measured TPOT / the model at 100 % of datasheet figures, no overheads)")
    h2 = ~h1
    a, b = mape(tr_t[h2], bt[h2]), mape(tr_p[h2], bp[h2])
    c, f = mape(in_t[h2], bt[h2]), mape(in_p[h2], bp[h2])
    print(f"\nH200 all rows: transfer TTFT {a:.1f} % / TPOT {b:.1f} % (targets <= 30 / <= 15; fit {t_fit1:.1f} s); "
          f"in sample {c:.1f} / {f:.1f} (fit {t_fit2:.1f} s)")
    c, f = mape(in_t[h1], bt[h1]), mape(in_p[h1], bp[h1])
    print(f"H100 rows, fitted on both: TTFT {c:.1f} % / TPOT {f:.1f} %")
    # groups that the H100 rows cannot inform (README round 10 says why); the headline is the full figure
    sgl = np.array([r["engine"] == "sglang" and "0.5.6" in (r.get("harness") or "") for r in both]) & h2
    fp8ck = np.array([r["engine"] == "vllm" and r["model"] == "llama-3.1-8b" for r in both]) & h2
    bf16_kv_short = h2 & kv_limited(both, cat, only_h100) & np.array([r["engine"] == "vllm" for r in both])
    print("H200 transfer without the groups the H100 rows cannot inform (README round 10; headline = all rows):")
    for label, drop in (("all 199 rows (headline)", np.zeros(len(both), bool)),
                        ("without SGLang 0.5.6 (no aggregated runs of it on H100)", sgl),
                        ("  and without the Llama-3.1-8B-FP8 vLLM rows (TPOT near the floor)", sgl | fp8ck),
                        ("  and without the vLLM rows KV-limited at bf16 KV (KV dtype)", sgl | fp8ck | bf16_kv_short)):
            keep = h2 & ~drop
            print(f"  {label:70s} {int(keep.sum()):4d} rows  TTFT {mape(tr_t[keep], bt[keep]):6.1f} %  TPOT {mape(tr_p[keep], bp[keep]):5.1f} %")
    shared = h2 & np.array([r["model"] == "llama-3.1-70b" and r["engine"] == "vllm" for r in both])
    for label, keep in (("Llama-3.1-70B vLLM (the harness both devices share)", shared),
                        ("  without its rows KV-limited at bf16 KV", shared & ~bf16_kv_short)):
        print(f"  {label:70s} {int(keep.sum()):4d} rows  TTFT {mape(tr_t[keep], bt[keep]):6.1f} %  TPOT {mape(tr_p[keep], bp[keep]):5.1f} %")

    print("\n== MLPerf Llama-2-70B Offline, tokens/s per accelerator (ISL 294 / OSL 284 assumed, best tp, KV fp8) ==")
    if "llama-2-70b" not in cat.models:
        print("no llama-2-70b profile; skipped")
    else:
        model = cat.models["llama-2-70b"]
        with MLPERF.open(newline="", encoding="utf-8") as fh:
            recs = [r for r in csv.DictReader(fh) if r["benchmark"].startswith("llama2-70b") and r["scenario"] == "Offline"]
        print(f"{'round':6s} {'accelerator':20s} {'measured':>9s} {'predicted':>9s} {'error %':>8s}")
        errs = []
        for r in recs:
            dev_id = device_id(r["accelerator"], frozenset(cat.devices))  # the one name resolver (planner/perf/names.py)
            if dev_id is None or dev_id not in cat.devices:
                print(f"{r['round']:6s} {r['accelerator']:20s} {float(r['per_accel_derived']):9.0f} {'-':>9s}  no profile")
                continue
            engine = "vllm" if "AMD" in r["submitter"] else "trtllm"
            wp = MLPERF_PRECISION.get(dev_id, "fp8")
            best = None
            for tp in (1, 2, 4, 8):
                if tp > int(r["n_accel"]):
                    continue
                op = operating_point(model, cat.devices[dev_id], tp, role="unified", weight_precision=wp, kv_precision="fp8",
                                     input_tokens=294, output_tokens=284, ttft_target_ms=None, tpot_target_ms=None, engine=engine)
                if op.feasible and (best is None or 284 / op.instance_seconds_per_request / tp > best[0]):
                    best = (284 / op.instance_seconds_per_request / tp, tp, op)
            meas = float(r["per_accel_derived"])
            if best is None:
                print(f"{r['round']:6s} {r['accelerator']:20s} {meas:9.0f} {'-':>9s}  infeasible at every tp")
                continue
            pred, tp, op = best
            errs.append(abs(pred / meas - 1))
            print(f"{r['round']:6s} {r['accelerator']:20s} {meas:9.0f} {pred:9.0f} {100 * (pred / meas - 1):8.1f}  ({wp}, tp {tp}, batch {op.max_batch}, {op.bound})")
        if errs:
            print(f"mean absolute error {100 * sum(errs) / len(errs):.1f} % over {len(errs)} rows")

    print("\n== operating_point speed ==")
    dev = cat.devices["h100-sxm"]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        n = 0
        for m in cat.models.values():
            for tp in (1, 2, 4, 8):
                for role in ("prefill", "decode", "unified"):
                    for isl in np.linspace(100, 8000, 10):
                        operating_point(m, dev, tp, role=role, weight_precision="bf16", kv_precision="bf16", input_tokens=float(isl),  # type: ignore[arg-type]
                                        output_tokens=300, ttft_target_ms=2000, tpot_target_ms=50)
                        n += 1
        times.append((time.perf_counter() - t0) / n * 1000)
    print(f"median {statistics.median(times) * 1000:.0f} ms per 1,000 points ({n} points per run)")


if __name__ == "__main__":
    main()
