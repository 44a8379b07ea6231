"""Device profiles: GPUs, accelerators and CPU servers, every figure with a source.

A profile lives in ``models/hardware/<id>.yaml``. Every numeric figure that is set must be
named in ``sources`` (a datasheet, a measurement, a price page) or in ``assumptions`` (a
default we chose, with the reason). A profile missing a figure the planner needs is
*incomplete*: it can only be selected when the instance supplies the figure through
``catalog.device_overrides``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from planner.schema.common import (
    Fraction,
    NonNegFloat,
    PosFloat,
    PosInt,
    Precision,
    StrictModel,
)

DeviceKind = Literal["gpu", "accelerator", "cpu"]
Confidence = Literal["high", "medium", "low"]

# Figures the planner needs before a device can serve LLM phases (GPU / accelerator).
REQUIRED_FOR_SERVING: tuple[str, ...] = (
    "memory_gb",
    "memory_bandwidth_gb_per_s",
    "peak_tflops_dense",
    "busy_power_w",
    "idle_power_w",
)
# ... and before it can be costed (at least one price).
PRICE_FIELDS: tuple[str, ...] = ("purchase_usd", "rental_usd_per_hour")

# Fields that are metadata, not figures; they need no source.
_META_FIELDS = {"id", "name", "kind", "vendor", "form_factor", "sources", "confidence", "assumptions", "notes", "launch_year"}


def _fallback(precision: str) -> tuple[str, ...]:
    """The precisions whose peak a GEMM at ``precision`` runs at, in order: its own, then wider ones of
    its kind (fp4 → fp8 → bf16; int8 → bf16); an unknown precision at bf16."""
    return {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "int8": ("int8", "bf16")}.get(precision, ("bf16",))


class DeviceProfile(StrictModel):
    """One device type (per device: one GPU, one accelerator chip, or one CPU server)."""

    id: str
    """Stable id used on the command line, e.g. ``h100-sxm``."""
    name: str
    """Human-readable name, e.g. ``NVIDIA H100 SXM5 80GB``."""
    kind: DeviceKind
    vendor: str
    form_factor: str = ""
    launch_year: int | None = None

    # --- memory ---------------------------------------------------------------------------
    memory_gb: PosFloat | None = None
    """Device memory usable by the model (HBM, or host DRAM for a CPU server), GB (1e9 bytes)."""
    memory_bandwidth_gb_per_s: PosFloat | None = None
    """Peak memory bandwidth, GB/s (1e9 bytes/s)."""

    # --- compute --------------------------------------------------------------------------
    peak_tflops_dense: dict[Precision, PosFloat] = {}
    """Dense (no 2:4 sparsity) peak tensor throughput per precision, TFLOP/s (int8: TOP/s)."""
    gemm_efficiency_factor: dict[Precision, PosFloat] = {}
    """Measured sustained GEMM efficiency of this device relative to the calibration's reference
    device (H100 SXM), per compute precision: ``eta_inf(device, p) / eta_inf(h100-sxm, p)``, where
    ``eta_inf`` is the large-row asymptote of the fitted ``eta(m) = eta_inf m / (m + M_half)`` over
    a kernel table (achieved FLOP/s / dense datasheet peak) measured on the device itself in the
    same engine version. The roofline runs the GEMMs at ``F_p x factor[p]`` and attention at
    ``F_bf16 x factor[bf16]`` (:func:`planner.perf.roofline.instance_arrays`), i.e. it multiplies the
    engine's fitted ``eta_f`` (fitted on H100 SXM rows) for this device. A precision not listed
    (no measured table, or no reference measurement: fp4) keeps 1. H100 SXM is 1 by construction."""

    # --- interconnect ---------------------------------------------------------------------
    scaleup_bw_gb_per_s_bidir: PosFloat | None = None
    """Scale-up link (NVLink, xGMI, ...) bandwidth per device, both directions together, GB/s."""
    scaleup_latency_us: NonNegFloat | None = None
    """One-hop latency of a scale-up collective step, microseconds."""
    devices_per_node: PosInt = 8
    """Devices in one scale-up domain (node); tensor parallelism beyond it crosses the network."""
    pcie_bw_gb_per_s: PosFloat | None = None
    """Host link (PCIe) bandwidth per device, one direction, GB/s; used for KV offload to host."""
    nic_bw_gb_per_s: PosFloat | None = None
    """Scale-out network bandwidth per device, one direction, GB/s; used for KV transfer."""

    # --- power ----------------------------------------------------------------------------
    tdp_w: PosFloat | None = None
    """Thermal design power (board), W."""
    busy_power_w: PosFloat | None = None
    """Average power while serving, W (often below TDP; see assumptions)."""
    idle_power_w: NonNegFloat | None = None
    """Power while provisioned but idle, W."""
    host_power_w: NonNegFloat = 0.0
    """Host share (CPU, DRAM, NICs, fans) attributed to each device, W."""

    # --- CPU servers ----------------------------------------------------------------------
    cores: PosInt | None = None
    """Physical cores (CPU servers)."""

    # --- prices ---------------------------------------------------------------------------
    purchase_usd: PosFloat | None = None
    """Purchase price per device (server share included where stated), USD."""
    amortization_years: PosFloat = 4.0
    """Years over which the purchase is amortised."""
    cost_of_capital_rate: Fraction = 0.0
    """Annual cost of capital used to annuitise the purchase (0 = straight line)."""
    rental_usd_per_hour: PosFloat | None = None
    """Rental price per device-hour, USD."""
    software_license_usd_per_month: NonNegFloat = 0.0
    """Software licence per device per month (e.g. NVIDIA AI Enterprise), USD."""
    operations_usd_per_month: NonNegFloat = 0.0
    """Per-device operations (hands, spares, support contract) per month, USD."""
    procurement_limit: PosInt | None = None
    """Most devices of this type that can be bought or rented (None = unlimited)."""

    # --- provenance -----------------------------------------------------------------------
    sources: dict[str, str]
    """Per figure (field name): where the number comes from."""
    assumptions: dict[str, str] = {}
    """Per figure (field name): a value we assumed rather than found, and why."""
    confidence: Confidence
    notes: str = ""

    @model_validator(mode="after")
    def _every_figure_has_a_source(self) -> DeviceProfile:
        unsourced = [
            name
            for name in self.figure_fields_set()
            if name not in self.sources and name not in self.assumptions
        ]
        if unsourced:
            raise ValueError(
                "figures without a source or an assumption: "
                + ", ".join(sorted(unsourced))
                + " (add an entry to 'sources' or 'assumptions' for each)"
            )
        return self

    def figure_fields_set(self) -> list[str]:
        """Names of the numeric figures this profile sets (explicitly, not by default)."""
        names = []
        for name in self.model_fields_set:
            if name in _META_FIELDS:
                continue
            value = getattr(self, name)
            if value is None or value == {}:
                continue
            names.append(name)
        return names

    def missing_for_serving(self) -> list[str]:
        """Figures needed to serve LLM phases that this profile lacks."""
        if self.kind == "cpu":
            need: tuple[str, ...] = ("memory_gb", "cores", "busy_power_w", "idle_power_w")
        else:
            need = REQUIRED_FOR_SERVING
        missing = [f for f in need if getattr(self, f) in (None, {})]
        if all(getattr(self, f) is None for f in PRICE_FIELDS):
            missing.append("purchase_usd or rental_usd_per_hour")
        return missing

    @property
    def complete(self) -> bool:
        return not self.missing_for_serving()

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak FLOP/s at a precision, falling back to the nearest wider precision.

        A device without fp8 tensor cores runs fp8 weights by upcasting to bf16 (weight-only
        quantisation, e.g. vLLM's Marlin W8A16 kernels on the A100): memory traffic at fp8, compute at
        bf16. Floating-point formats never fall back to int8: fp8 or fp4 data does not run on integer
        tensor cores (before, an A100's fp8 prefill was priced at its 624 int8 TOPS, 1.8x too fast).
        """
        for p in _fallback(precision):
            tflops = self.peak_tflops_dense.get(p)  # type: ignore[call-overload]
            if tflops is not None:
                return tflops * 1e12
        return None

    def gemm_factor(self, precision: str) -> float:
        """:attr:`gemm_efficiency_factor` at the precision whose peak :meth:`peak_flops` uses
        (the same fallback to a wider precision); 1.0 where none is measured."""
        for p in _fallback(precision):
            if self.peak_tflops_dense.get(p) is not None:  # type: ignore[call-overload]
                return float(self.gemm_efficiency_factor.get(p, 1.0))  # type: ignore[call-overload]
        return 1.0
