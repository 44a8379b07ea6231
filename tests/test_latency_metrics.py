"""Latency metrics as the field defines them (DESIGN §3, issue 13): the analytic TTFT, per-request
TPOT, per-gap ITL and E2E of a chunked-prefill (unified) instance against the discrete-event
simulator; the Poisson quantile they use; the chosen prefill batch; the non-gated FFN count; the
SLO schema's new fields.

The simulated instance is hand-built so that the analytic model's inputs are known exactly: one
unified instance, a decode-only iteration of ``T_PLAIN`` s at any batch, an iteration carrying a
prompt (``N_IN`` tokens, one chunk) ``T_CHUNK`` s, Poisson arrivals at ``RATE``. Then the lane's
utilisation is ``rho = RATE T_CHUNK``, the chunk share of iterations ``u = RATE t_mean`` with
``t_mean = u T_CHUNK + (1 - u) T_PLAIN`` (so ``u = RATE T_PLAIN / (1 - RATE (T_CHUNK - T_PLAIN))``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from planner.cli import main
from planner.perf.points import operating_point
from planner.queueing import itl_quantile_s, md1_wait_quantile_s, poisson_quantile, tpot_quantile_s
from planner.schema.hardware import DeviceProfile
from planner.schema.llm import LLMProfile
from planner.simulate.arrivals import synthetic_requests
from planner.simulate.engine import simulate
from planner.simulate.spec import PoolSpec, ServiceRoute, SimConfig

ROOT = Path(__file__).resolve().parents[1]
T_PLAIN, T_CHUNK = 0.020, 0.080
N_IN, N_OUT = 512, 33
RATE = 3.0
SEEDS = (1, 2, 3)


def _sim(seed: int):  # type: ignore[no-untyped-def]
    pool = PoolSpec("u", "unified", 1, prefill_time_s=lambda n: T_CHUNK - T_PLAIN, step_time_s=[0.0] + [T_PLAIN] * 256,
                    max_batch=256, chunk_tokens=N_IN,
                    iteration_time_s=lambda b, chunk: T_CHUNK if chunk else T_PLAIN)
    route = ServiceRoute("s", unified="u")
    stream = synthetic_requests(RATE, 4000.0, input_tokens=[N_IN], output_tokens=[N_OUT], seed=seed)
    return simulate([pool], [route], stream, SimConfig(warmup_s=100.0))


@pytest.fixture(scope="module")
def runs():  # type: ignore[no-untyped-def]
    return [_sim(s) for s in SEEDS]


def _u() -> float:
    return RATE * T_PLAIN / (1.0 - RATE * (T_CHUNK - T_PLAIN))


def _close(analytic: float, sims: list[float], tol: float = 0.15) -> None:
    sim = float(np.mean(sims))
    assert abs(analytic / sim - 1.0) <= tol, (analytic, sims)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_tpot_quantile_per_request_matches_simulation(runs, q: float) -> None:  # type: ignore[no-untyped-def]
    a = float(tpot_quantile_s(q, N_OUT, _u(), 1.0, T_CHUNK, T_PLAIN))
    _close(a, [r.histograms["service:s:tpot"].quantile(q) for r in runs])


def test_tpot_mean_matches_simulation(runs) -> None:  # type: ignore[no-untyped-def]
    a = float(tpot_quantile_s(None, N_OUT, _u(), 1.0, T_CHUNK, T_PLAIN))
    _close(a, [r.histograms["service:s:tpot"].mean for r in runs], 0.05)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_itl_quantile_per_gap_matches_simulation(runs, q: float) -> None:  # type: ignore[no-untyped-def]
    a = float(itl_quantile_s(q, _u(), T_CHUNK, T_PLAIN))
    _close(a, [r.histograms["pool:u:itl"].quantile(q) for r in runs])


def test_itl_mean_matches_simulation(runs) -> None:  # type: ignore[no-untyped-def]
    a = float(itl_quantile_s(None, _u(), T_CHUNK, T_PLAIN))
    _close(a, [r.histograms["pool:u:itl"].mean for r in runs], 0.05)


def _ttft_analytic(q: float) -> float:
    """Lane wait (M/D/1 at rho = RATE T_CHUNK, service T_CHUNK) + the prompt's own chunk iteration."""
    return float(md1_wait_quantile_s(q, RATE * T_CHUNK, T_CHUNK)) + T_CHUNK


@pytest.mark.parametrize("q", [0.9, 0.99])
def test_ttft_quantile_matches_simulation(runs, q: float) -> None:  # type: ignore[no-untyped-def]
    _close(_ttft_analytic(q), [r.histograms["service:s:ttft"].quantile(q) for r in runs])


@pytest.mark.parametrize("q", [0.9, 0.99])
def test_e2e_quantile_matches_simulation(runs, q: float) -> None:  # type: ignore[no-untyped-def]
    """E2E ~ TTFT + (o - 1) TPOT at the same level (the unified point's rule: quantiles added)."""
    a = _ttft_analytic(q) + (N_OUT - 1) * float(tpot_quantile_s(q, N_OUT, _u(), 1.0, T_CHUNK, T_PLAIN))
    _close(a, [r.histograms["service:s:e2e"].quantile(q) for r in runs])


def test_tpot_quantile_is_honest_for_short_outputs() -> None:
    """The quantile of a per-request mean tends to the mean for long outputs, not for short ones."""
    u = 0.1
    short = float(tpot_quantile_s(0.99, 9, u, 1.0, 0.1, 0.02))
    long = float(tpot_quantile_s(0.99, 2001, u, 1.0, 0.1, 0.02))
    mean = 0.02 + u * 0.08
    assert short > long > mean
    assert long / mean - 1.0 < 0.1


def test_poisson_quantile_is_exact_at_any_mean() -> None:
    for mu in (0.0, 0.3, 2.0, 7.5, 39.0):
        for q in (0.5, 0.9, 0.99):
            k, cdf, pmf = 0, math.exp(-mu), math.exp(-mu)
            while cdf < q:
                k += 1
                pmf *= mu / k
                cdf += pmf
            assert float(poisson_quantile(q, mu)) == k
    # large means (the Cornish-Fisher approximation used before was within one count): exact now
    for mu in (40.5, 50.0, 400.0, 12_345.6):
        for q in (0.5, 0.9, 0.99, 0.999):
            ks = np.arange(0, int(mu * 3))
            logp = -mu + ks * math.log(mu) - np.array([math.lgamma(k + 1) for k in ks])
            cdf = np.cumsum(np.exp(logp))
            exact = int(np.searchsorted(cdf, q))  # first k with cdf(k) >= q
            assert float(poisson_quantile(q, mu)) == exact, (mu, q)
    assert np.array_equal(poisson_quantile(0.99, [0.0, 2.0, 400.0]), [0.0, 6.0, float(poisson_quantile(0.99, 400.0))])


# --- the prefill batch is chosen -----------------------------------------------------------------

def _opt13b_a100() -> tuple[LLMProfile, DeviceProfile]:
    m = LLMProfile(**yaml.safe_load((ROOT / "models/llm/opt-13b.yaml").read_text()))
    d = DeviceProfile(**yaml.safe_load((ROOT / "models/hardware/a100-sxm-80gb.yaml").read_text()))
    return m, d


def _prefill(**kw: float | None):  # type: ignore[no-untyped-def]
    m, d = _opt13b_a100()
    return operating_point(m, d, 1, role="prefill", weight_precision="bf16", kv_precision="bf16", input_tokens=512,
                           output_tokens=64, tpot_target_ms=None, **kw)  # type: ignore[arg-type]


def test_tiny_rate_picks_one_prompt_per_batch() -> None:
    """At a trickle of traffic a batch only adds its own length to TTFT: batch 1."""
    op = _prefill(ttft_target_ms=400.0, ttft_quantile=0.9, rate_per_s=0.01)
    assert op.feasible and op.detail["prompts_per_batch"] == 1.0
    one = _prefill(ttft_target_ms=400.0, ttft_quantile=0.9, rate_per_s=0.01)
    assert op.ttft_ms == one.ttft_ms


def test_unqueued_choice_takes_the_cheapest_batch_within_ttft() -> None:
    """Without a rate the batch minimises instance-seconds per request among those whose unqueued
    TTFT meets the target: with no target that is the token budget's 16 prompts of 512."""
    free = _prefill(ttft_target_ms=None)
    assert free.detail["prompts_per_batch"] == free.detail["prompts_per_batch_max"] == 16.0
    tight = _prefill(ttft_target_ms=400.0)
    assert tight.feasible and 1.0 < tight.detail["prompts_per_batch"] < 16.0
    assert tight.ttft_ms <= 400.0
    assert tight.instance_seconds_per_request >= free.instance_seconds_per_request


def test_prefill_feasible_where_the_fixed_batch_was_not() -> None:
    """Issue 13: a fixed 16-prompt batch gave TTFT 1265 ms > 400 ms on DistServe's example."""
    op = _prefill(ttft_target_ms=400.0, ttft_quantile=0.9, rate_per_s=10.0)
    assert op.feasible and op.ttft_ms < 400.0


# --- non-gated feed-forward ----------------------------------------------------------------------

def test_non_gated_ffn_counts_two_matrices() -> None:
    m, _ = _opt13b_a100()
    assert abs(m.params_total() / 12.85e9 - 1.0) < 0.02
    gated = m.model_copy(update={"ffn_gated": True})
    assert gated.params_total() - m.params_total() == m.num_layers * m.hidden_size * m.ffn_size


# --- schema --------------------------------------------------------------------------------------

def _validate(tmp_path: Path, slo: dict) -> tuple[int, str]:  # type: ignore[type-arg]
    raw = yaml.safe_load((ROOT / "tests/data/instances/valid_minimal.yaml").read_text())
    raw["services"]["chat"]["slo"] = slo
    f = tmp_path / "i.yaml"
    f.write_text(yaml.safe_dump(raw))
    r = CliRunner().invoke(main, ["check-instance", str(f)])
    return r.exit_code, r.output


def test_schema_accepts_any_subset_and_means(tmp_path: Path) -> None:
    code, out = _validate(tmp_path, {"ttft": {"quantile": 0.9, "target_ms": 400},
                                     "tpot": {"statistic": "mean", "target_ms": 40},
                                     "itl": {"quantile": 0.99, "target_ms": 100}, "e2e": {"quantile": 0.5, "target_ms": 9000}})
    assert code == 0, out
    code, out = _validate(tmp_path, {"itl": {"target_ms": 50}})
    assert code == 0, out


@pytest.mark.parametrize(("slo", "needle"), [
    ({}, "at least one latency target"),
    ({"ttft": {"statistic": "mean", "target_ms": 400}}, "give a quantile"),
    ({"ttft": {"quantile": 0.9, "target_ms": 400}, "tpot": {"statistic": "p90", "target_ms": 40}}, "statistic"),
    ({"ttft": {"quantile": 0.9, "target_ms": 400}, "tbt": {"target_ms": 40}}, "tbt"),
    ({"tpot": {"quantile": 1.5, "target_ms": 40}}, "quantile"),
    ({"itl": {"quantile": 0.9, "statistic": "mean", "target_ms": 40}}, "a mean target has no quantile"),
])
def test_schema_rejects_bad_targets_with_exit_2(tmp_path: Path, slo: dict, needle: str) -> None:  # type: ignore[type-arg]
    code, out = _validate(tmp_path, slo)
    assert code == 2, out
    assert "services.chat.slo" in out and needle in out, out


# --- E2E -------------------------------------------------------------------------------------------

def test_e2e_target_binds_the_unified_point() -> None:
    """E2E ~ TTFT + (o - 1) TPOT at the E2E level: a target below it makes the point infeasible and says so."""
    m, d = _opt13b_a100()
    kw = dict(weight_precision="bf16", kv_precision="bf16", input_tokens=512, output_tokens=64, ttft_target_ms=400.0,
              ttft_quantile=0.9, tpot_target_ms=40.0, tpot_quantile=0.9)
    free = operating_point(m, d, 1, role="unified", **kw)  # type: ignore[arg-type]
    assert free.feasible and free.detail["e2e_ms"] >= free.ttft_ms + 63 * free.detail["decode_only_step_ms"]
    tighter = operating_point(m, d, 1, role="unified", e2e_target_ms=0.8 * free.detail["e2e_ms"], e2e_quantile=0.9, **kw)  # type: ignore[arg-type]
    assert tighter.feasible and tighter.detail["e2e_ms"] <= 0.8 * free.detail["e2e_ms"]
    assert tighter.instance_seconds_per_request > free.instance_seconds_per_request  # a smaller batch or chunk
    tight = operating_point(m, d, 1, role="unified", e2e_target_ms=0.2 * free.detail["e2e_ms"], e2e_quantile=0.9, **kw)  # type: ignore[arg-type]
    assert not tight.feasible and "E2E" in tight.reason
    loose = operating_point(m, d, 1, role="unified", e2e_target_ms=2.0 * free.detail["e2e_ms"], e2e_quantile=0.9, **kw)  # type: ignore[arg-type]
    assert loose.feasible and loose.instance_seconds_per_request == pytest.approx(free.instance_seconds_per_request)


def test_simulated_e2e_check_reports_a_miss() -> None:
    from types import SimpleNamespace

    from planner.simulate.stats import LogHistogram
    from planner.verify import _e2e_check

    h = LogHistogram()
    for x in np.linspace(1.0, 3.0, 1001):
        h.add(float(x))
    h.flush()
    route = SimpleNamespace(e2e_target_s=2.5, e2e_quantile=0.9)
    assert "E2E" in _e2e_check("shared", "chat", route, h, 0)          # p90 = 2.8 s > 2.5 s
    assert _e2e_check("shared", "chat", SimpleNamespace(e2e_target_s=2.9, e2e_quantile=0.9), h, 0) == ""
    assert _e2e_check("shared", "chat", SimpleNamespace(e2e_target_s=2.1, e2e_quantile=math.nan), h, 0) == ""  # mean 2.0 s
    assert _e2e_check("shared", "chat", SimpleNamespace(e2e_target_s=math.inf, e2e_quantile=0.9), h, 0) == ""


def test_impossible_itl_target_is_diagnosed_by_name(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "tests/data/instances/valid_minimal.yaml").read_text())
    raw["services"]["chat"]["slo"] = {"ttft": {"quantile": 0.99, "target_ms": 2000}, "itl": {"quantile": 0.99, "target_ms": 1}}
    raw["options"]["verify"] = False
    f = tmp_path / "i.yaml"
    f.write_text(yaml.safe_dump(raw))
    r = CliRunner().invoke(main, ["solve", str(f)])
    assert r.exit_code == 3, r.output
    assert "ITL target 1 ms is below the fastest decode step" in r.output, r.output


def test_no_ttft_mean_tpot_and_e2e_solve_verify_and_round_trip(tmp_path: Path) -> None:
    """A service with no TTFT target, a mean TPOT and a p90 E2E: solved, simulated, written and
    re-checked (unset targets travel through plan.json as null and come back as inf)."""
    raw = yaml.safe_load((ROOT / "tests/data/instances/valid_minimal.yaml").read_text())
    raw["services"]["chat"]["slo"] = {"tpot": {"statistic": "mean", "target_ms": 60}, "e2e": {"quantile": 0.9, "target_ms": 30000}}
    f = tmp_path / "i.yaml"
    f.write_text(yaml.safe_dump(raw))
    r = CliRunner().invoke(main, ["solve", str(f), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "TPOT mean" in r.output
    c = CliRunner().invoke(main, ["check", str(tmp_path / "out" / "plan.json")])
    assert c.exit_code == 0, c.output
