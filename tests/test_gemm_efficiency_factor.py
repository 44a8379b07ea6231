"""Per-device measured GEMM efficiency relative to the calibration's reference device (issue 25,
goodput): ``DeviceProfile.gemm_efficiency_factor`` and its use in the roofline."""

from __future__ import annotations

import pytest

from planner.catalog import load_catalog
from planner.perf.roofline import GEMM_M_HALF_TOKENS, instance_arrays
from planner.schema.hardware import DeviceProfile

CAT = load_catalog()


def test_reference_device_is_one_by_construction() -> None:
    h100 = CAT.devices["h100-sxm"]
    assert h100.gemm_factor("bf16") == 1.0 and h100.gemm_factor("fp8") == 1.0
    inst = instance_arrays(CAT.models["llama-3.1-8b"], h100, 1, "fp8", "fp8")
    assert float(inst.flops_peak) == pytest.approx(1979e12)
    assert float(inst.attn_flops_peak) == pytest.approx(989.4e12)


def test_power_capped_board_runs_below_its_datasheet() -> None:
    """L40S (350 W): TensorRT-LLM 1.3.0rc20's measured fp8 GEMM asymptote is 0.489 of its dense peak
    against the H100 SXM's 0.616 in the same version, bf16 0.595 vs 0.791 (the shipped figures)."""
    l40s = CAT.devices["l40s"]
    assert l40s.gemm_efficiency_factor == {"bf16": 0.753, "fp8": 0.795}
    assert "1.3.0rc20" in l40s.sources["gemm_efficiency_factor"]
    inst = instance_arrays(CAT.models["llama-3.1-8b"], l40s, 1, "fp8", "fp8")
    assert float(inst.flops_peak) == pytest.approx(733e12 * 0.795)
    assert float(inst.attn_flops_peak) == pytest.approx(362.05e12 * 0.753)
    # M_half keeps the datasheet ratio (the tile argument), not the scaled peaks' ratio
    assert float(inst.gemm_m_half) == pytest.approx(GEMM_M_HALF_TOKENS * 733 / 362.05)


def test_unmeasured_precision_or_device_keeps_one() -> None:
    b200 = CAT.devices["b200"]
    assert b200.gemm_factor("fp4") == 1.0  # no reference measurement: H100 has no fp4 tensor cores
    assert b200.gemm_factor("fp8") == pytest.approx(0.875)
    # the H100 PCIe / NVL boards have no measured table: 1, stated as an assumption
    for dev in ("h100-pcie", "h100-nvl"):
        d = CAT.devices[dev]
        assert d.gemm_factor("fp8") == 1.0 and "gemm_efficiency_factor" in d.assumptions
    # a device with no fp8 peak runs fp8 weights at bf16 and takes the bf16 factor
    a = DeviceProfile(id="x", name="x", kind="gpu", vendor="v", peak_tflops_dense={"bf16": 100.0},
                      gemm_efficiency_factor={"bf16": 0.5}, sources={"peak_tflops_dense": "s", "gemm_efficiency_factor": "s"},
                      confidence="low")
    assert a.gemm_factor("fp8") == 0.5


def test_a_factor_needs_a_source() -> None:
    with pytest.raises(ValueError, match="gemm_efficiency_factor"):
        DeviceProfile(id="x", name="x", kind="gpu", vendor="v", peak_tflops_dense={"bf16": 100.0},
                      gemm_efficiency_factor={"bf16": 0.5}, sources={"peak_tflops_dense": "s"}, confidence="low")


def test_every_factor_is_the_shipped_measurement() -> None:
    """Each device's ``gemm_efficiency_factor`` is the TensorRT-LLM 1.3.0rc20 ``factor_vs_h100_sxm`` of the shipped
    measurement table (``models/measured/gemm_efficiency_aiconfigurator.csv``, produced by
    ``benchmarks/gemm_efficiency_aiconfigurator.py`` from aiconfigurator's kernel tables), and every device measured
    there carries it: a hand-edited factor or a new measurement not carried to the profiles fails."""
    from pathlib import Path

    import pandas as pd

    table = pd.read_csv(Path(__file__).resolve().parents[1] / "models" / "measured" / "gemm_efficiency_aiconfigurator.csv",
                        dtype={"version": str})
    rc20 = table[(table["framework"] == "trtllm") & (table["version"] == "1.3.0rc20") & table["own_device"]]
    assert len(rc20) >= 16
    measured = {(r.device, r.dtype): float(r.factor_vs_h100_sxm) for r in rc20.itertuples()}
    measured.update(_amd_maf_factors())  # boards aiconfigurator has no table for: AMD's published MAF
    for (dev, prec), factor in measured.items():
        assert CAT.devices[dev].gemm_efficiency_factor.get(prec) == pytest.approx(factor, abs=5e-4), (dev, prec)
    for dev in CAT.devices.values():
        for prec, factor in dev.gemm_efficiency_factor.items():
            if (dev.id, prec) not in measured:  # only the stated assumption of 1 (no table) is allowed
                assert factor == 1.0 and "gemm_efficiency_factor" in dev.assumptions, (dev.id, prec)


def _amd_maf_factors() -> dict[tuple[str, str], float]:
    """``(device, dtype) -> factor`` of ``models/measured/gemm_maf_amd.csv``, recomputed from its inputs: the
    MAF over the catalog's dense peak, over the H100 SXM's TensorRT-LLM 1.3.0rc20 asymptote of the
    aiconfigurator table (the reference of every other factor)."""
    from pathlib import Path

    import pandas as pd

    measured_dir = Path(__file__).resolve().parents[1] / "models" / "measured"
    maf = pd.read_csv(measured_dir / "gemm_maf_amd.csv")
    aic = pd.read_csv(measured_dir / "gemm_efficiency_aiconfigurator.csv", dtype={"version": str})
    ref = aic[(aic["device"] == "h100-sxm") & (aic["framework"] == "trtllm") & (aic["version"] == "1.3.0rc20")]
    ref_eta = dict(zip(ref["dtype"], ref["eta_inf"].astype(float), strict=True))
    out = {}
    for r in maf.itertuples():
        peak = CAT.devices[r.device].peak_tflops_dense[r.dtype]
        assert r.peak_dense_tflops == pytest.approx(peak), (r.device, r.dtype)
        assert r.h100_sxm_eta_inf == pytest.approx(ref_eta[r.dtype]), (r.device, r.dtype)
        assert r.maf_share_of_peak == pytest.approx(r.maf_tflops / peak, abs=5e-5)
        assert r.factor_vs_h100_sxm == pytest.approx(r.maf_tflops / peak / ref_eta[r.dtype], abs=5e-4)
        out[(r.device, r.dtype)] = float(r.factor_vs_h100_sxm)
    return out


def test_amd_boards_run_at_their_published_max_achievable_flops() -> None:
    """MI300X (750 W): AMD's Max-Achievable FLOPs are 0.54 (bf16) / 0.49 (fp8) of the datasheet dense peaks,
    against the H100 SXM's sustained 0.79 / 0.62 of its own; so its GEMMs run at peak x 0.685 / 0.791 (before:
    x 1, and MLPerf's MI300X rows came out +27 % Offline, +39 % Server; issue 25)."""
    factors = _amd_maf_factors()
    assert factors == {("mi300x", "bf16"): 0.685, ("mi300x", "fp8"): 0.791, ("mi325x", "bf16"): 0.815, ("mi325x", "fp8"): 0.944}
    mi300x = CAT.devices["mi300x"]
    assert "Max-Achievable FLOPs" in mi300x.sources["gemm_efficiency_factor"]
    inst = instance_arrays(CAT.models["llama-3.1-70b"], mi300x, 1, "fp8", "fp8")
    assert float(inst.flops_peak) == pytest.approx(2614.9e12 * 0.791)
