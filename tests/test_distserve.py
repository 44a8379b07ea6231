"""DistServe's motivating example on the planner's own performance model (issue 13, acceptance).

DistServe (Zhong et al., OSDI '24, §2, Figure 1): OPT-13B, one A100-80GB per instance, 512 input /
64 output tokens, Poisson arrivals, TTFT P90 <= 0.4 s, TPOT P90 <= 0.04 s (per-request TPOT). They
measured a colocated (vLLM) GPU at 1.6 req/s within the SLO, a prefill-only GPU at 5.6 and a
decode-only GPU at 10: 2 prefill + 1 decode = 3.3 req/s per GPU, about 2x. The instance is
tests/data/instances/distserve_opt13b.yaml (synthetic fixed-length traffic given by rate).

What the planner's model says (``planner solve`` on that file, ``--set
services.chat.traffic.rate_per_s=10|30``), with the round-9 calibration (memory as the driver
reports it, per-engine KV pools): per GPU, prefill about 12 req/s unqueued (batch 1 at 10 req/s),
decode about 28 req/s, unified about 6.5 req/s (77 % of its instances busy at peak). The plans:
2 shared vs 3 disaggregated GPUs at 10 req/s (the prefill pool's TTFT cap of 0.62 rounds it up to
two instances: the shared pool wins), 6 shared vs 5 disaggregated at 30 (disaggregated wins).
Disaggregated is feasible (it was not with the fixed 16-prompt prefill batch: TTFT 1265 ms), but
the ratio is 0.7-1.2x, not 1.6-2.6x: the model's colocated GPU sustains about 4x DistServe's
measured 1.6 req/s (chunked prefill with a per-request TPOT, a calibrated 2025 engine), its
decode-only GPU about 2.8x the measured 10. The published ratio is a property of 2023 vLLM's
colocated scheduler, which the model does not reproduce; the strict xfail below records that gap
and fails if it closes. (Before round 9 the model gave 3 vs 3 at 10 req/s.)

Round 10 of planner/perf/README.md (refitted calibration): 3 shared vs 3 disaggregated at 10 req/s
again, 6 vs 5 at 30. 10 req/s on two unified GPUs sits at the TTFT p90 cap: the pooled (``default``)
calibration's TTFT overhead 89 -> 97 ms, per-layer overhead 70 -> 73 us, eta_b 1.00 -> 0.99 and eta_f
0.590 -> 0.589 together push it over (each alone does not; the old ``default`` block restores 2 vs 3).
The per-GPU figures above are round 9's and move by a few per cent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.instance import load_instance
from planner.optimize.solve import settings_from_instance
from planner.solve_instance import solve_instance

INSTANCE = Path(__file__).resolve().parent / "data" / "instances" / "distserve_opt13b.yaml"


def _devices(rate: float) -> dict[str, int]:
    r = load_instance(INSTANCE, {"services.chat.traffic.rate_per_s": rate})
    out = solve_instance(r, settings_from_instance(r.instance)).result
    assert all(p.feasible for p in out.architectures.values()), {a: p.diagnosis for a, p in out.architectures.items()}
    return {a: sum(pl.devices for pl in p.pools) for a, p in out.architectures.items()}


@pytest.fixture(scope="module")
def devices() -> dict[float, dict[str, int]]:
    return {rate: _devices(rate) for rate in (10.0, 30.0)}


def test_disaggregated_is_feasible_and_wins_at_30_req_s(devices: dict[float, dict[str, int]]) -> None:
    d = devices[30.0]
    assert d["disaggregated"] < d["shared"], d


def test_model_figures(devices: dict[float, dict[str, int]]) -> None:
    """The figures in the module docstring (a change in the model shows here)."""
    assert devices[10.0] == {"shared": 3, "disaggregated": 3}  # round 10 (round 9: 2 vs 3; see the docstring)
    assert devices[30.0] == {"shared": 6, "disaggregated": 5}


@pytest.mark.xfail(strict=True, reason="the model's colocated (chunked-prefill) GPU sustains ~4x DistServe's measured "
                   "1.6 req/s, so the published 1.6-2.6x is not reached: see the module docstring")
@pytest.mark.parametrize("rate", [10.0, 30.0])
def test_published_ratio(devices: dict[float, dict[str, int]], rate: float) -> None:
    d = devices[rate]
    assert 1.6 <= d["shared"] / d["disaggregated"] <= 2.6, d
