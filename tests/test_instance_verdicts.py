"""Regression on the example instances (instances/*.yaml): each solves, its plan passes
:func:`planner.optimize.check_plan`, and the architecture that wins is the one recorded in
instances/README.md. A new example instance joins through the glob and must be added to
EXPECTED_WINNER (the test fails until it is).

Why each verdict holds is in instances/README.md; the margins move with the perf model's
calibration. Most winners are structural (integer rounding of several pools favours one shared
pool; long prompts at scale with a tight token interval favour separate prefill/decode pools);
enterprise-chat is a near thing (within ~10%) and is pinned to catch a change in the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.optimize.check import check_plan

INSTANCES = Path(__file__).resolve().parents[1] / "instances"

EXPECTED_WINNER: dict[str, str] = {
    # 5 req/s of 70B on MI300X, planned on the busiest minute at any start (381 requests). A near thing
    # (`verdict.confidence`: decode steps 1 % slower flip it). Shared by 13.8 % ($10,185 against $11,813/month) since the
    # unified point is chosen by least tau/rho rather than highest throughput (issue 24 item 7: the highest-throughput
    # pair spent the TTFT wait budget), the same at 4, 8 and 16 buckets; it was disaggregated by about 9 % before
    "enterprise-chat": "shared",
    # Since buckets pay their mean work (issue 24 item 0, planner.capacity.bucket_work / mix_work): the unified point
    # runs the service's mean lengths with TTFT checked at each bucket's representative prompt, instead of every
    # request of a bucket priced as its longest. Shared $87,909 vs disaggregated $93,039 (2026-12-06 culprit pools; $95,158 2026-12-05 TTFT mixture; $99,395 before; power refit; measured GEMM efficiency: its
    # L40S prefill is gone; $110,919 before), both meet in simulation
    # (disaggregated $114,416 before the peak simulation measured steady state, planner.verify.run_window)
    # (was disaggregated $169,739 vs shared $222,215, the shared lane priced at each bucket's longest prompt)
    # Disaggregated since the simulated shared lane does the prefill work its points priced (2026-12-06,
    # planner.simulate.adapter.unified_lane: the chunk from the length mix's mean input, not the bucket's longest):
    # replayed bursts then need 13 tp4 H100 instead of 10 to meet the 500 ms p99 TTFT in the peak simulation,
    # shared $112,851 against disaggregated $93,039 (17.6 %); shared by 5.5 % before. Since a prefill pool waits for the
    # log's replayed bursts (planner.workload.replay_wait) and the simulated check holds every latency group:
    # shared $129,480 (15 tp4) against disaggregated $114,225 (4 decode + 47 prefill H100 tp1), 11.8 %. Since the shared
    # pool's chunked-prefill lanes wait the log's bursts too (planner.pool_latency) and refining bisects four rounds:
    # shared $121,136 (28 H100 tp2), 5.7 %
    "code-completion-8b": "disaggregated",
    # a near tie since the per-sub-bin work and H200's measured GEMM efficiency: $149,209 vs $152,368 (2.1 %; 2026-12-06 culprit pools; 0.8 % before; $0.15 dearer with the pool's one chunk)
    "agentic-assistant": "shared",
    # 121k-token prompts at a 15 s p99 TTFT and 60 ms token interval. Shared since buckets pay their mean work: before,
    # the unified point ran every request of the top bucket at its 121k-token representative (no unified point
    # fitted, then $963,932); now at the service's mean lengths with TTFT at the representative prompt:
    # shared $69,962 vs disaggregated $89,312 at the shipped 4 buckets, both meet in simulation
    "long-context-assistant": "shared",
    # NVIDIA-only, 40 ms token interval, ~12 req/s of long prompts. Shared since buckets pay their mean work (as
    # long-context-assistant): $89,340 vs disaggregated $105,240 at 4 buckets (2026-12-05 power refit) (B200's measured GEMM efficiency 0.85-0.88;
    # $77,984 / $94,641 before), both meet in simulation (was
    # disaggregated $342,538 vs shared $455,604, every request of a bucket planned at its longest)
    "long-document-nvidia": "shared",
    # `planner solve` plans the length log's own ~5 req/s (H100/H200, bought): one shared pool; the same instance's
    # `horizon` (the ServeGen fleet, hundreds of req/s) is planned by `planner horizon` (tests/test_horizon.py)
    "fleet-horizon": "shared",
    # DeepSeek-V3 at 300 req/s of 2,000/500 tokens on H100/H200: the shared pool can only be TP8 on H200 (DeepSeek's
    # 671 GB of fp8 weights do not fit 8 H100; expert-parallel replicas cannot run a unified pool), the
    # disaggregated plan decodes on an expert-parallel replica with DP attention (planner.perf.moe)
    "deepseek-v3-wide-ep": "disaggregated",
    # Qwen2.5-VL-7B, one ~1,196-token image per request (ServeGen mm-image x20, ~24 req/s): 4 H100 in one pool, the
    # vision tower inline (encode_unified); disaggregated needs 4 H100 in two pools and NICs (~11 % more); 11 L40S
    # before L40S's measured GEMM efficiency (0.75-0.80 of H100 SXM's per peak FLOP)
    "multimodal-image": "shared",
}

FILES = sorted(INSTANCES.glob("*.yaml"))


def test_expected_winners_cover_both_architectures() -> None:
    winners = {EXPECTED_WINNER[f.stem] for f in FILES if f.stem in EXPECTED_WINNER}
    assert {"shared", "disaggregated"} <= winners


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_example_instance_verdict_and_plan(path: Path, solved_example) -> None:
    """``planner solve`` (the session's solve, tests/conftest.py, shared with the browser test of
    each report) exits 0, and its plan.json has the expected winner, passes ``check_plan`` and meets
    in simulation."""
    assert path.stem in EXPECTED_WINNER, f"new example instance {path.name}: add its expected winner to EXPECTED_WINNER"
    solved = solved_example(path.stem)
    assert solved.exit_code == 0, solved.output
    result = solved.plan()
    assert result.verdict is not None
    assert result.verdict.winner == EXPECTED_WINNER[path.stem], result.verdict.reasons
    winner = result.architectures[result.verdict.winner]
    assert winner.feasible
    assert check_plan(result) == []
    # every feasible plan meets its targets in the simulation at peak (issue 7), and the reasons
    # say why an architecture without a plan has none
    for arch, plan in result.architectures.items():
        if plan.feasible and plan.simulation is not None:
            assert plan.simulation.met, (arch, plan.simulation.findings)
        if not plan.feasible and plan.diagnosis:
            assert any(r.startswith(f"{arch} has no plan:") for r in result.verdict.reasons), result.verdict.reasons


def test_deepseek_wide_ep_plan_decodes_with_expert_parallelism(solved_example) -> None:
    """The DeepSeek-V3 example's disaggregated plan decodes on expert-parallel replicas (EP over whole
    nodes, one DP attention rank per GPU) and the plan names the parallelism of every pool."""
    plan = solved_example("deepseek-v3-wide-ep").json()
    dis = plan["architectures"]["disaggregated"]
    pools = {p["role"]: p for p in dis["pools"] if p["instances"] > 0}
    assert pools["decode"]["parallelism"] == "tp1·ep32·dp32"
    assert pools["decode"]["tp"] == 32 and pools["decode"]["devices"] == 32 * pools["decode"]["instances"]
    assert all(p["parallelism"] for p in dis["pools"])
    assert plan["architectures"]["shared"]["pools"][0]["parallelism"] == "tp8"


EXPECTED_COST_USD_PER_MONTH = {
    # (shared, disaggregated) per month, as README's and instances/README.md's tables state them (2026-12-06, night;
    # code-completion's shared plan since its lanes wait the log's bursts, long-context's since the descent merges shared
    # pools, 2026-12-06 late; both disaggregated plans since a decode pool's slots wait the bursts, a phase is re-solved
    # without its most tightened pool and the simulated KV transfer is charged at the representative, 2026-12-07;
    # agentic's and long-context's shared plans since the peak check runs c² times longer for a renewal of CV c and
    # its interval counts the bursts' correlation, 2026-12-07 late: their former plans miss at seeds 0-2 in such runs;
    # code-completion's and long-context's shared plans since a unified point's fixed TTFT overhead is the engine's,
    # not the chunks between its bucket's mean and representative prompts counted twice, 2026-12-07 morning;
    # code-completion's shared loser since a shared pool's bursts add their backlog beyond a Poisson stream's to the TTFT
    # at load, planner.pool_latency.burst_sets_wait, 2026-12-07; and since the loops' step 8 re-solves a shared plan's one
    # tightened pool without its configuration, planner.optimize.tighten._by_tightening: 27 H100 tp2, 2026-12-07 later)
    "agentic-assistant": (149_207, 152_368),
    "code-completion-8b": (116_979, 99_395),
    "deepseek-v3-wide-ep": (460_818, 246_804),
    "enterprise-chat": (10_157, 10_356),
    "fleet-horizon": (7_045, 8_300),
    "long-context-assistant": (90_029, 117_138),
    "long-document-nvidia": (83_773, 105_240),
    "multimodal-image": (12_876, 14_535),
}
"""Regression tolerance: 2 %. The solve is deterministic (seeded simulation, HiGHS at its MIP gap), so a move beyond it
is a change of the model or of the loop: re-derive README's and instances/README.md's figures and say why in the
commit (the verdict is the product)."""


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_example_costs_are_the_documented_ones(path: Path, solved_example) -> None:
    assert path.stem in EXPECTED_COST_USD_PER_MONTH, f"new example instance {path.name}: add its costs to EXPECTED_COST_USD_PER_MONTH"
    result = solved_example(path.stem).plan()
    for arch, want in zip(("shared", "disaggregated"), EXPECTED_COST_USD_PER_MONTH[path.stem], strict=True):
        plan = result.architectures[arch]
        assert plan.feasible and plan.costs is not None, arch
        assert plan.costs.total_usd_per_month == pytest.approx(want, rel=0.02), (path.stem, arch)
