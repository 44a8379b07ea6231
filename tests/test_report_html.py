"""The HTML report: verdict sentence, charts as inline SVG, no external URLs, numbers from the plan, CLI."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from planner.agents.extract import PARTLY
from planner.cli import main
from planner.report import charts
from planner.report.html import render_html, verdict_sentence, write_html
from planner.schema.plan import (
    COST_TERMS,
    ArchitecturePlan,
    CapacitySnapshot,
    CostBreakdown,
    LatencyPrediction,
    PlanResult,
    PoolPlan,
    SolverInfo,
    Verdict,
)
from planner.schema.workload import ToolLatency, ToolStats
from planner.simulate.results import PoolResult, ServiceResult, SimResult
from planner.simulate.stats import Summary

# ---------------------------------------------------------------------------------------------
# hand-made inputs (shared with test_report_html_browser.py)


def _costs(equipment: float, busy: float, idle: float, nic: float, pools: float, types: float, devices: float,
           idle_capacity: float) -> CostBreakdown:
    terms = dict(equipment_usd_per_month=equipment, power_busy_usd_per_month=busy, power_idle_usd_per_month=idle,
                 network_nic_usd_per_month=nic, network_transfer_usd_per_month=0.0, ops_pools_usd_per_month=pools,
                 ops_device_types_usd_per_month=types, ops_devices_usd_per_month=devices, licenses_usd_per_month=0.0)
    return CostBreakdown(**terms, total_usd_per_month=sum(terms.values()), idle_capacity_usd_per_month=idle_capacity)


def _pool(role: str, n: int, mean: float, peak: float, cap: float, cost: float) -> PoolPlan:
    return PoolPlan(name=f"{role}:h100/tp1:llama", role=role, device="h100", tp=1, config="h100/tp1", model="llama",
                    instances=n, devices=n, redundancy=0, busy_instances_mean=mean * n, busy_instances_peak=peak * n,
                    utilization_mean=mean, utilization_peak=peak, utilization_cap=cap, cost_usd_per_month=cost)


def _latency(ttft: float, tpot: float) -> LatencyPrediction:
    return LatencyPrediction(service="chat", ttft_quantile=0.99, ttft_target_ms=2000.0, ttft_predicted_ms=ttft,
                             tpot_quantile=0.99, tpot_target_ms=80.0, tpot_predicted_ms=tpot, ttft_met=True, tpot_met=True,
                             method="hand-made")


def hand_plan(winner: str = "shared") -> PlanResult:
    """Two architectures with round numbers. Shared: 4 unified H100 ($17,753.39/month);
    disaggregated: 3 decode + 1 prefill ($19,906.97/month). ``winner="disaggregated"`` swaps the
    ops-per-pool cost so that disaggregated is cheaper."""
    shared_costs = _costs(12_449.17, 44.56, 59.67, 0.0, 2_000.0, 3_000.0, 200.0, 8_701.2)
    disagg_costs = _costs(12_449.17, 28.88, 68.92, 160.0, 4_000.0, 3_000.0, 200.0, 10_049.57)
    if winner == "disaggregated":
        shared_costs = _costs(12_449.17, 44.56, 59.67, 0.0, 2_000.0, 3_000.0, 200.0 + 3_000.0, 8_701.2)
    solver = SolverInfo(status="optimal", gap=0.0, time_s=0.02, build_s=0.5, extract_s=0.03, variables=26, constraints=29)
    shared = ArchitecturePlan(
        architecture="shared", feasible=True, pools=[_pool("unified", 4, 0.3059, 0.7421, 0.84, shared_costs.total_usd_per_month)],
        latency=[_latency(201.96, 18.92)], costs=shared_costs, tokens_per_month=21.85e9,
        usd_per_million_tokens=shared_costs.total_usd_per_month / 21.85e3, energy_wh_per_1k_tokens=0.05918,
        power_kw_mean=1.77, solver=solver)
    disagg = ArchitecturePlan(
        architecture="disaggregated", feasible=True,
        pools=[_pool("decode", 3, 0.2020, 0.4904, 0.73, 11_680.0), _pool("prefill", 1, 0.1872, 0.4529, 0.87, 5_227.0)],
        latency=[_latency(522.77, 15.77)], costs=disagg_costs, tokens_per_month=21.85e9,
        usd_per_million_tokens=disagg_costs.total_usd_per_month / 21.85e3, energy_wh_per_1k_tokens=0.05553,
        power_kw_mean=1.66, solver=solver)
    plans = {"shared": shared, "disaggregated": disagg}
    win, run = (shared, disagg) if winner == "shared" else (disagg, shared)
    assert win.costs is not None and run.costs is not None
    margin = run.costs.total_usd_per_month - win.costs.total_usd_per_month
    diffs = {t: run.costs.terms()[t] - win.costs.terms()[t] for t in COST_TERMS}
    verdict = Verdict(winner=win.architecture, runner_up=run.architecture, margin_usd_per_month=margin,
                      margin_usd_per_million_tokens=margin / 21.85e3, margin_share=margin / run.costs.total_usd_per_month,
                      term_differences_usd_per_month=diffs,
                      reasons=["headline from the optimiser", "disaggregated pays more for per-pool operations (+$2,000)",
                               "the prefill pool runs at 19% of its capacity at mean load (81% idle)"], proven=True)
    return PlanResult(instance="hand", architectures=plans, verdict=verdict,
                      capacity=CapacitySnapshot(demand=[], points=[], configs=[], costs={}), notes=["hand-made plan for tests"])


def hand_sweep() -> pd.DataFrame:
    """Shared grows 6,000 $/month per unit of rate_multiplier, disaggregated 4,000 from a higher base:
    they cross where 12,000 + 6,000 m = 16,000 + 4,000 m, i.e. m = 2."""
    rows = []
    for m in (0.5, 1.0, 1.5, 2.5, 3.0):
        rows.append({"rate_multiplier": m, "architecture": "shared", "total_usd_per_month": 12_000 + 6_000 * m})
        rows.append({"rate_multiplier": m, "architecture": "disaggregated", "total_usd_per_month": 16_000 + 4_000 * m})
    df = pd.DataFrame(rows)
    win = df.loc[df.groupby("rate_multiplier")["total_usd_per_month"].idxmin(), ["rate_multiplier", "architecture"]]
    return df.merge(win.rename(columns={"architecture": "winner"}), on="rate_multiplier")


def hand_tornado() -> pd.DataFrame:
    return pd.DataFrame([
        {"parameter": "rate_multiplier", "low_label": "0.5x", "high_label": "2x", "low_usd_per_month": 12_000.0,
         "high_usd_per_month": 29_000.0, "base_usd_per_month": 17_753.0},
        {"parameter": "electricity_usd_per_kwh", "low_label": "0.05", "high_label": "0.2", "low_usd_per_month": 17_700.0,
         "high_usd_per_month": 17_860.0, "base_usd_per_month": 17_753.0},
    ])


def hand_frontier() -> list[dict[str, object]]:
    return [
        {"budget_usd_per_month": 20_000.0, "traffic_multiplier": 1.1, "total_usd_per_month": 19_100.0, "mix": "unified 4x h100"},
        {"budget_usd_per_month": 40_000.0, "traffic_multiplier": 2.6, "total_usd_per_month": 39_200.0, "mix": "unified 9x h100"},
        {"budget_usd_per_month": 80_000.0, "traffic_multiplier": 5.7, "total_usd_per_month": 78_500.0,
         "mix": "prefill 5x h100, decode 13x h100"},
    ]


def hand_simulation() -> SimResult:
    ttft = Summary(n=1000, mean=0.21, p50=0.18, p90=0.35, p99=0.61, max=1.2)
    tpot = Summary(n=1000, mean=0.019, p50=0.018, p90=0.024, p99=0.031, max=0.05)
    e2e = Summary(n=1000, mean=4.0, p50=3.5, p90=7.0, p99=12.0, max=20.0)
    svc = ServiceResult(service="chat", ttft=ttft, tpot=tpot, e2e=e2e, completed=1000, unfinished=0, rejected=0,
                        ttft_attainment=0.999, tpot_attainment=1.0, slo_attainment=0.999, ttft_target_s=2.0,
                        ttft_quantile=0.99, tpot_target_s=0.08, tpot_quantile=0.99, ttft_met=True, tpot_met=True)
    wait = Summary(n=1000, mean=0.01, p50=0.0, p90=0.02, p99=0.1, max=0.3)
    pool = PoolResult(name="unified:h100/tp1:llama", role="unified", instances=4, wait=wait, utilization=0.31,
                      slot_utilization=0.2, kv_utilization=0.1, preemptions=0, kv_blocked_admissions=0, rejected=0,
                      recompute_s=0.0, queue_max=3)
    return SimResult(services={"chat": svc}, pools={pool.name: pool}, requests=1000, events=5000, wall_s=0.5,
                     sim_end_s=600.0, last_arrival_s=590.0)


def hand_tools() -> dict[str, ToolStats]:
    return {"bash": ToolStats(calls_per_request=0.8, latency=ToolLatency(mean_ms=900.0, p50_ms=400.0, p90_ms=2100.0, p99_ms=9000.0),
                              error_share=0.05, timeout_share=0.01, cpu_seconds_per_call=0.004),
            "read": ToolStats(calls_per_request=1.3, latency=ToolLatency(mean_ms=12.0, p50_ms=8.0, p90_ms=25.0, p99_ms=60.0))}


ALL_CHARTS = ["chart-latency", "chart-cost-terms", "chart-utilization", "chart-unit-costs", "chart-tools", "chart-sweep",
              "chart-tornado", "chart-frontier"]
"""Page order: with a plan, the simulated check comes right after the verdict."""


def full_report(path: Path, plan: PlanResult | None = None) -> Path:
    return write_html(path, plan=plan or hand_plan(), sweep=hand_sweep(), tornado=hand_tornado(), frontier=hand_frontier(),
                      simulation=hand_simulation(), tools=hand_tools())


# ---------------------------------------------------------------------------------------------
# parsing helper


class _Figures(HTMLParser):
    """Collects figure ids with the number of SVG elements and the caption text inside each."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, dict[str, object]] = {}
        self._cur: str | None = None
        self._in_caption = False
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(str(a["id"]))
        if tag == "figure":
            self._cur = str(a.get("id"))
            self.figures[self._cur] = {"svg_elements": 0, "caption": ""}
        elif self._cur and tag in ("path", "text", "rect", "use", "line", "polyline"):
            self.figures[self._cur]["svg_elements"] = int(self.figures[self._cur]["svg_elements"]) + 1  # type: ignore[call-overload]
        elif tag == "figcaption":
            self._in_caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._cur = None
        elif tag == "figcaption":
            self._in_caption = False

    def handle_data(self, data: str) -> None:
        if self._cur and self._in_caption:
            self.figures[self._cur]["caption"] = str(self.figures[self._cur]["caption"]) + data


def _parse(text: str) -> _Figures:
    p = _Figures()
    p.feed(text)
    return p


def _visible_text(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)).replace("&amp;", "&")


# ---------------------------------------------------------------------------------------------
# tests


@pytest.fixture(scope="module")
def full_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The full report (plan + every optional section), rendered once for the module."""
    return full_report(tmp_path_factory.mktemp("report") / "r" / "report.html").read_text(encoding="utf-8")


def test_verdict_sentence_shared_first_and_numbers() -> None:
    s = verdict_sentence(hand_plan("shared"))
    assert s.startswith("Shared pool wins: $17,753/month against $19,907/month for disaggregated")
    assert "$2,154/month (10.8%) less" in s
    assert "$0.0986 per 1M tokens" in s  # 2,153.58 / 21,850 = 0.09856


def test_verdict_sentence_disaggregated_and_unproven() -> None:
    plan = hand_plan("disaggregated")
    s = verdict_sentence(plan)
    # shared now pays 3,000 more for per-device ops: 20,753.39 vs 19,906.97 -> margin 846.42
    assert s.startswith("Disaggregated wins: $19,907/month against $20,753/month for shared — $846/month (4.1%) less")
    unproven = plan.model_copy(update={"verdict": plan.verdict.model_copy(update={"proven": False})})
    assert verdict_sentence(unproven).endswith("(not proven optimal: the verdict may change with more solve time).")


def test_no_feasible_plan_shows_the_diagnosis() -> None:
    from planner.schema.plan import DiagnosisItem

    plan = hand_plan()
    diag = DiagnosisItem(service="chat", bucket="long", constraint="memory_fit", message="weights do not fit on h100/tp1",
                         fix="allow tp >= 2")
    archs = {k: a.model_copy(update={"feasible": False, "costs": None, "pools": [], "diagnosis": [diag]})
             for k, a in plan.architectures.items()}
    none = plan.model_copy(update={"architectures": archs, "verdict": Verdict(winner=None, reasons=["no architecture is feasible"])})
    assert verdict_sentence(none) == "No architecture has a feasible plan for hand: see the diagnosis below."
    text = render_html(plan=none)
    assert 'class="verdict none"' in text and "<figure" not in text
    assert "Why shared is infeasible" in text and "weights do not fit on h100/tp1" in text and "allow tp &gt;= 2" in text


def test_report_has_verdict_first_and_every_chart(full_text: str) -> None:
    text = full_text
    sentence = verdict_sentence(hand_plan())
    body = _visible_text(text[text.index("<body>"):])
    assert body.index("Shared pool wins") < body.index("Plan ")  # the verdict is the first thing after the title
    assert sentence.replace("&", "&amp;") in text or sentence in _visible_text(text)
    figs = _parse(text)
    assert list(figs.figures) == ALL_CHARTS
    for cid, info in figs.figures.items():
        assert int(info["svg_elements"]) > 20, cid  # type: ignore[call-overload]
        assert len(str(info["caption"]).strip()) > 30, cid
        assert f'<svg id="{cid}-svg"' in text
    # every id in the page is unique (several inline SVGs share matplotlib's element names)
    assert len(figs.ids) == len(set(figs.ids))


def test_report_is_self_contained(full_text: str) -> None:
    text = full_text
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert "http://" not in text and "https://" not in text
    assert "<script" not in text.lower() and "<link" not in text.lower() and "@import" not in text
    assert "<!DOCTYPE svg" not in text and "<?xml" not in text


def test_numbers_match_the_plan(tmp_path: Path) -> None:
    plan = hand_plan()
    text = _visible_text(render_html(plan=plan))
    # cost terms, rounded to whole dollars from $100 and 3 significant digits below
    for needle in ("$12,449", "$44.6", "$59.7", "$2,000", "$4,000", "$3,000", "$160", "$17,753", "$19,907", "$8,701",
                   "$10,050"):
        assert needle in text, needle
    # per-term difference runner-up minus winner and the margin
    assert "−$15.7" in text and "$2,154" in text
    # utilisation mean / peak / cap in %
    for needle in ("31%", "74%", "84%", "20%", "49%", "73%", "19%", "45%", "87%"):
        assert needle in text, needle
    # $/1M tokens = total / 21,850 (millions of tokens); Wh per 1k tokens
    assert "$0.813" in text and "$0.911" in text
    assert "0.0592 Wh" in text and "0.0555 Wh" in text
    # latency predictions with units and targets
    assert "202 ms" in text and "18.9 ms" in text and "523 ms" in text and "p99 ≤ 2,000 ms" in text
    assert "21.9 billion" in text and "1.77 kW" in text
    # the reasons after the headline, and the notes
    assert "disaggregated pays more for per-pool operations (+$2,000)" in text
    assert "headline from the optimiser" not in text
    assert "hand-made plan for tests" in text


def test_chart_text_matches_the_plan() -> None:
    chart = charts.cost_terms_chart(hand_plan())
    assert chart is not None
    assert "$17,753/month" in chart.svg and "$19,907/month" in chart.svg
    util = charts.utilization_chart(hand_plan())
    assert util is not None and "74%" in util.svg and "shared · unified 4× h100/tp1" in util.svg


def test_study_sections_numbers(full_text: str) -> None:
    text = _visible_text(full_text)
    assert "rate_multiplier ≈ 2" in text  # crossover by interpolation (hand-computed m = 2)
    assert "$20,000/month" in text and "5.7×" in text and "prefill 5x h100, decode 13x h100" in text  # frontier
    assert "610 ms" in text and "31 ms" in text and "99.9%" in text  # simulated p99 TTFT / TPOT, SLO attainment
    assert "bash" in text and "9,000 ms" in text and "5.0%" in text and "4 ms" in text  # tools


def test_crossover_exact_and_by_winner() -> None:
    sweep = hand_sweep()
    assert charts.sweep_parameter(sweep) == "rate_multiplier"
    assert charts.crossovers(sweep, "rate_multiplier") == [pytest.approx(2.0)]
    # one row per scenario: midpoint between 1.5 and 2.5 at the sweep's resolution
    by_winner = sweep.loc[sweep["architecture"] == sweep["winner"]].drop(columns="architecture")
    assert charts.crossovers(by_winner, "rate_multiplier") == [pytest.approx(2.0)]
    c = charts.sweep_chart(by_winner)
    assert c is not None and "shared wins" in c.svg and "disaggregated wins" in c.svg
    flat = sweep.loc[sweep["rate_multiplier"] < 2]
    assert charts.crossovers(flat, "rate_multiplier") == []
    c2 = charts.sweep_chart(flat)
    assert c2 is not None and "does not flip" in c2.caption


def test_optional_sections_absent_or_malformed_are_skipped() -> None:
    text = render_html(plan=hand_plan())
    for cid in ("chart-tools", "chart-latency", "chart-sweep", "chart-tornado", "chart-frontier"):
        assert cid not in text
    assert charts.tornado_chart(pd.DataFrame({"x": [1]})) is None
    assert charts.sweep_chart(pd.DataFrame({"x": [1.0, 2.0]})) is None
    samples = pd.DataFrame({"service": ["chat"] * 4, "metric": ["ttft", "ttft", "tpot", "tpot"], "latency_ms": [100, 300, 20, 30]})
    c = charts.latency_chart(samples, hand_plan())
    assert c is not None and "CDF" in c.caption and "target p99 2,000 ms" in c.svg
    # a study-only report (no plan) still renders
    study = render_html(sweep=hand_sweep(), title="Sweep")
    assert "chart-sweep" in study and "<h1>Sweep</h1>" in study


def test_report_of_a_solved_plan(tmp_path: Path) -> None:
    from planner.optimize import SolveSettings, solve_tables
    from planner.optimize.synthetic import synthetic_tables

    plan = solve_tables(synthetic_tables(), SolveSettings()).result
    text = render_html(plan=plan)
    winner = plan.architectures[str(plan.verdict.winner)]
    assert winner.costs is not None
    assert charts.usd(winner.costs.total_usd_per_month) + "/month" in _visible_text(text)
    assert verdict_sentence(plan).split(":")[0] in text
    assert set(_parse(text).figures) == {"chart-cost-terms", "chart-utilization", "chart-unit-costs"}


def test_cli_html_renders_plan_file(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(hand_plan().model_dump_json(), encoding="utf-8")
    out = tmp_path / "out" / "report.html"
    res = CliRunner().invoke(main, ["html", str(plan_file), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "verdict: shared" in res.output
    assert "Shared pool wins" in out.read_text(encoding="utf-8")
    # default output next to the plan
    res = CliRunner().invoke(main, ["html", str(plan_file)])
    assert res.exit_code == 0 and (tmp_path / "report.html").is_file()


def test_cli_html_bad_input_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["html", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "plan file not found" in res.output and "Traceback" not in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    res = CliRunner().invoke(main, ["html", str(bad)])
    assert res.exit_code == 2 and "not valid JSON" in res.output
    wrong = tmp_path / "wrong.json"
    data = json.loads(hand_plan().model_dump_json())
    data["verdict"]["winnner"] = "shared"
    wrong.write_text(json.dumps(data), encoding="utf-8")
    res = CliRunner().invoke(main, ["html", str(wrong)])
    assert res.exit_code == 2 and "verdict.winnner" in res.output and "regenerate the plan" in res.output


# ---------------------------------------------------------------------------------------------
# study and simulate commands (--html), the tool phase, one plan loader

MINIMAL = Path(__file__).resolve().parent / "data" / "instances" / "valid_minimal.yaml"
AGENTIC = Path(__file__).resolve().parent.parent / "instances" / "agentic-assistant.yaml"
RATE = "services.chat.traffic.rate_multiplier"


def _charts_ok(text: str, expected: list[str]) -> None:
    figs = _parse(text).figures
    assert list(figs) == expected
    for cid, info in figs.items():
        assert int(info["svg_elements"]) > 20, cid  # type: ignore[call-overload]
        assert f'<svg id="{cid}-svg"' in text


def test_study_adapters_map_the_studies_columns() -> None:
    from planner.report.html import frontier_frame, sweep_frame, tornado_frame

    torn = pd.DataFrame([{"path": RATE, "low": 0.5, "high": 8.0, "total_at_low_usd_per_month": 2_914.0,
                          "total_at_high_usd_per_month": 12_058.0, "base_total_usd_per_month": 3_601.0, "swing_usd_per_month": 9_144.0}])
    t = tornado_frame(torn)
    assert t[["parameter", "low_usd_per_month", "high_usd_per_month", "base_usd_per_month", "low_label", "high_label"]].iloc[0].tolist() \
        == [RATE, 2_914.0, 12_058.0, 3_601.0, "0.5", "8"]
    chart = charts.tornado_chart(t)
    assert chart is not None and "−$687" in chart.svg and "+$8,457" in chart.svg  # 2,914 − 3,601 and 12,058 − 3,601
    front = pd.DataFrame([{"budget_usd_per_month": 6_000.0, "max_traffic_multiplier": 3.03, "total_usd_per_month": 5_720.0,
                           "winner": "shared", "device_mix": "h100-sxm:2"},
                          {"budget_usd_per_month": 1.0, "max_traffic_multiplier": 0.0, "total_usd_per_month": None,
                           "winner": None, "device_mix": ""}])
    f = frontier_frame(front)
    assert f["traffic_multiplier"].tolist() == [3.03, 0.0] and f["mix"].tolist() == ["shared: h100-sxm:2", "no plan within budget"]
    # two swept parameters: the chart holds the second at its first value
    rows = pd.DataFrame([{"scenario": f"s{i}", RATE: m, "costs.pue": pue, "architecture": a, "total_usd_per_month": 1000 * m + pue,
                          "is_winner": a == "shared", "winner": "shared", "gap": 0.0}
                         for i, (m, pue) in enumerate([(1, 1.2), (2, 1.2), (1, 1.5), (2, 1.5)]) for a in ("shared", "disaggregated")])
    df, x, notes = sweep_frame(rows)
    assert x == RATE and set(df["costs.pue"]) == {1.2} and len(df) == 4 and "costs.pue = 1.2" in notes[0]


def test_study_report_headline_and_bisection_brackets() -> None:
    sweep = hand_sweep().assign(scenario=lambda d: "m=" + d["rate_multiplier"].astype(str),
                                is_winner=lambda d: d["architecture"] == d["winner"], margin_usd_per_month=1.0,
                                usd_per_million_tokens=0.1, device_mix="h100:4")
    cross = pd.DataFrame([{"path": "rate_multiplier", "low": 1.98, "high": 2.0, "winner_low": "shared", "winner_high": "disaggregated"}])
    text = render_html(sweep=sweep, crossovers=cross, title="Sweep")
    visible = _visible_text(text)
    assert ("Across 5 scenarios: shared pool wins 3 of 5, disaggregated wins 2 of 5. The verdict flips from shared to "
            "disaggregated between rate_multiplier = 1.98 and 2.") in visible
    assert 'id="verdict"' in text and "1.98 &lt; rate_multiplier &lt; 2" in text  # the bracket in the chart caption
    assert 'id="table-crossovers"' in text and 'id="table-sweep"' in text
    front = render_html(frontier=hand_frontier(), title="Budget")
    assert "Within the latency targets, $20,000/month serves 1.1× the forecast and $80,000/month serves 5.7× the forecast." \
        in _visible_text(front)


def test_simulation_per_scenario_rows_and_misses() -> None:
    ok = hand_simulation()
    bad_svc = ServiceResult(**{**ok.services["chat"].__dict__, "ttft_met": False, "completed": 0, "unfinished": 7,
                               "ttft": Summary(n=0, mean=float("nan"), p50=float("nan"), p90=float("nan"), p99=float("nan"),
                                               max=float("nan"))})
    bad = SimResult(services={"chat": bad_svc}, pools=ok.pools, requests=7, events=10, wall_s=0.1, sim_end_s=1.0, last_arrival_s=1.0)
    text = render_html(plan=hand_plan(), simulation={"normal": ok, "failure": bad})
    visible = _visible_text(text)
    assert "Latency targets missed in: failure/chat." in visible
    assert "normal · chat" in text and "failure · chat" in text and "no request completed (7 lost)" in text
    assert text.index('id="simulation"') < text.index('id="plan"')  # the simulated check right after the verdict


@pytest.fixture(scope="module")
def agentic_plan(tmp_path_factory: pytest.TempPathFactory, solved_example) -> tuple[PlanResult, str]:
    """``planner solve instances/agentic-assistant.yaml --html``, and the same instance's plan from
    another solve (the session's ``planner solve --out``, tests/conftest.py) to compare with."""
    out = tmp_path_factory.mktemp("agentic")
    res = CliRunner().invoke(main, ["solve", str(AGENTIC), "--html", str(out / "report.html")])
    assert res.exit_code == 0, res.output
    solved = solved_example("agentic-assistant")
    assert solved.exit_code == 0, solved.output
    return solved.plan(), (out / "report.html").read_text(encoding="utf-8")


def test_tool_phase_section_from_the_plan(agentic_plan: tuple[PlanResult, str]) -> None:
    plan, text = agentic_plan
    win = plan.architectures[str(plan.verdict.winner)]
    tp = win.tool_phase
    assert tp is not None and tp.tools and tp.cpu_pools
    _charts_ok(text, ["chart-cost-terms", "chart-utilization", "chart-unit-costs", "chart-tool-phase-latency", "chart-tool-policy"])
    visible = html.unescape(_visible_text(text))
    for r in tp.tools:
        alt = {a.policy: a for a in r.alternatives}
        # per tool: quantiles, KV per session, sessions in wait, reload, policy and each alternative's cost
        for needle in (charts.sig(r.latency_p99_ms) + " ms", charts.sig(r.kv_bytes_per_session / 1e9) + " GB",
                       charts.sig(r.sessions_in_wait_peak), charts.sig(r.reload_ms) + " ms", r.policy):
            assert needle in visible, (r.tool, needle)
        for pol in ("hold", "offload", "recompute"):
            a = alt[pol]
            if a.usd_per_month is not None:
                needle = f"{charts.usd(a.usd_per_month)}/month"
            else:  # a policy part of the routing allows reads as partial, not as "not possible" (the plan may use it)
                needle = a.reason if a.reason.startswith(PARTLY) else f"not possible: {a.reason}"
            assert needle in visible, (r.tool, pol, needle)
    # WebSearch's waits are partly offloaded on the tp4 pool: its offload alternative must not read "not possible"
    for r in tp.tools:
        off = next(a for a in r.alternatives if a.policy == "offload")
        if r.offload_share > 0 and off.usd_per_month is None:
            assert off.reason.startswith(PARTLY) and f"not possible: {off.reason}" not in visible, (r.tool, off.reason)
    cpu = tp.cpu_pools[0]
    assert cpu.server in visible and charts.usd(cpu.cost_usd_per_month) in visible
    assert f"KV tier: {charts.sig(tp.kv_tier_gb)} GB" in visible
    for st in tp.statements:
        assert st in visible or st.replace("&", "&amp;") in text


def test_tool_waiting_dominates_is_said_on_top(agentic_plan: tuple[PlanResult, str]) -> None:
    plan, _ = agentic_plan
    win = str(plan.verdict.winner)
    tp = plan.architectures[win].tool_phase
    assert tp is not None
    statement = "agent: tool waiting dominates — 40.0 s of tool wait per LLM call against 10.0 s of LLM time (80% of a session)."
    dom = plan.architectures[win].model_copy(update={"tool_phase": tp.model_copy(update={"statements": [statement]})})
    text = render_html(plan=plan.model_copy(update={"architectures": {**plan.architectures, win: dom}}))
    assert 'id="tool-dominance"' in text
    assert text.index('id="tool-dominance"') < text.index('id="plan"')
    assert 'id="tool-dominance"' not in render_html(plan=plan)  # 13% of a session: the LLM pools set the pace


def test_cli_sweep_and_budget_html(tmp_path: Path) -> None:
    out = tmp_path / "sweep.html"
    res = CliRunner().invoke(main, ["sweep", str(MINIMAL), "--set", f"{RATE}=0.5,2,8", "--jobs", "1", "--html", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    _charts_ok(text, ["chart-sweep", "chart-tornado"])
    assert "Across 3 scenarios" in _visible_text(text) and "<h1>Sweep: valid-minimal (3 scenarios)</h1>" in text
    out = tmp_path / "budget.html"
    # the report is checked, not the frontier's numbers (tests/test_studies.py and tests/test_one_path.py): no peak
    # simulation and a coarse multiplier, as tests/test_cli_options.py's budget JSON test (21 s -> 3.4 s)
    res = CliRunner().invoke(main, ["budget", str(MINIMAL), "--budgets", "3000,12000", "--set", "options.verify=false",
                                    "--rel-tol", "0.1", "--html", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    _charts_ok(text, ["chart-frontier"])
    assert 'id="table-frontier"' in text and "$3,000/month serves" in _visible_text(text)


def test_cli_simulate_html(tmp_path: Path) -> None:
    out = tmp_path / "sim.html"
    res = CliRunner().invoke(main, ["simulate", str(MINIMAL), "--duration", "30", "--scenario", "normal", "--scenario", "peak",
                                    "--html", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    _charts_ok(text, ["chart-latency", "chart-cost-terms", "chart-utilization", "chart-unit-costs"])
    assert "normal · chat" in text and "peak · chat" in text and 'id="verdict"' in text


@pytest.mark.parametrize("command", [["check"], ["simulate", str(MINIMAL), "--plan"], ["html"], ["evaluate"]])
def test_one_plan_loader_same_errors(command: list[str], tmp_path: Path) -> None:
    """Every command that reads plan.json gives the same error: file, field, fix; exit 2."""
    missing = CliRunner().invoke(main, [*command, str(tmp_path / "missing.json")])
    assert missing.exit_code == 2 and "missing.json: plan file not found: the path does not exist (fix: pass the plan.json" in missing.output
    wrong = tmp_path / "wrong.json"
    data = json.loads(hand_plan().model_dump_json())
    data["verdict"]["winnner"] = "shared"
    wrong.write_text(json.dumps(data), encoding="utf-8")
    res = CliRunner().invoke(main, [*command, str(wrong)])
    assert res.exit_code == 2 and "wrong.json: verdict.winnner: Extra inputs are not permitted" in res.output
    assert "regenerate the plan" in res.output and "Traceback" not in res.output


def test_plain_method_keeps_a_parenthesis_it_opens_balanced() -> None:
    """"(planner.x, more)" lost its "(" and left "more)" dangling in the HTML methods; a whole "(planner.x)" goes."""
    from planner.report.html import plain_method

    assert (plain_method("Erlang-C (planner.queueing.max_utilization, G/G/c wait quantile at peak, Allen-Cunneen), k lost")
            == "Erlang-C (G/G/c wait quantile at peak, Allen-Cunneen), k lost")
    assert (plain_method("at load (planner.pool_latency.unified_at_utilization_many: slot wait + TTFT at the cap)")
            == "at load (slot wait + TTFT at the cap)")
    assert plain_method("x (planner.queueing.max_utilization) y") == "x y"
    assert plain_method("uses planner.queueing.least_loaded_lane_wait_quantile_s here") == "uses least loaded lane wait quantile here"
    for text in ("a (planner.q.f, b) c (planner.r.g: d) e", "(planner.x.y)"):
        out = plain_method(text)
        assert out.count("(") == out.count(")"), out
