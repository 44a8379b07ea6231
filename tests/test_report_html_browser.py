"""The HTML report in a real browser: headless Chromium driven over the DevTools protocol.

Chromium is started with ``--remote-debugging-pipe`` (commands on fd 3, replies on fd 4,
JSON messages separated by NUL bytes), so only the standard library is needed. The test
loads the report from a file: URL, collects console messages, uncaught exceptions and log
entries of level error, measures every chart in the rendered DOM, and saves a full-page
screenshot to ``test-artifacts/report_html.png``.

Skipped only when no Chromium binary is installed (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_report_html import ALL_CHARTS, full_report, hand_plan

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or "")
                 if p and os.access(p, os.X_OK)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
         "--remote-debugging-pipe"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does it)")


class DevTools:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``."""

    def __init__(self, binary: str, user_data_dir: Path) -> None:
        cmd_r, self._cmd_w = os.pipe()  # we write commands, chromium reads fd 3
        self._res_r, res_w = os.pipe()  # chromium writes replies on fd 4, we read

        def remap() -> None:  # in the child: put the pipe ends on fd 3 and 4
            a, b = os.dup(cmd_r), os.dup(res_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=remap, pass_fds=(3, 4), close_fds=True)
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._res_r], [], [], remaining)[0]:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._res_r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the DevTools pipe (exit code {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def send(self, method: str, session: str | None = None, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout_s
        while True:
            ev = self._read_message(deadline)
            if ev.get("method") == method:
                return ev
            self.events.append(ev)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._res_r):
            with contextlib.suppress(OSError):
                os.close(fd)


class Page:
    """One tab attached with a flat session; records console/log errors."""

    def __init__(self, dt: DevTools) -> None:
        self.dt = dt
        target = dt.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = dt.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            dt.send(f"{domain}.enable", session=self.session)
        dt.send("Emulation.setDeviceMetricsOverride", session=self.session, width=1100, height=900, deviceScaleFactor=1,
                mobile=False)

    def load(self, url: str) -> None:
        # the viewport of a 1100 px wide window (a previous screenshot may have enlarged it)
        self.dt.send("Emulation.setDeviceMetricsOverride", session=self.session, width=1100, height=900, deviceScaleFactor=1,
                     mobile=False)
        self.dt.events.clear()
        self.dt.send("Page.navigate", session=self.session, url=url)
        self.dt.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        res = self.dt.send("Runtime.evaluate", session=self.session, expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    def errors(self) -> list[str]:
        """Console calls of type error/assert, uncaught exceptions and log entries of level error."""
        out = []
        for ev in self.dt.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                det = p.get("exceptionDetails", {})
                out.append(f"exception: {det.get('text', '')} {det.get('exception', {}).get('description', '')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + str(p["entry"].get("text", "")) + " " + str(p["entry"].get("url", "")))
        return out

    def screenshot(self, path: Path) -> None:
        size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        self.dt.send("Emulation.setDeviceMetricsOverride", session=self.session, width=int(size[0]), height=int(size[1]),
                     deviceScaleFactor=1, mobile=False)
        data = self.dt.send("Page.captureScreenshot", session=self.session, format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    assert CHROMIUM is not None
    dt = DevTools(CHROMIUM, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield Page(dt)
    finally:
        dt.close()


# Size and content of every chart as the browser lays it out.
_MEASURE = """
Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const cap = f.querySelector('figcaption');
  return {id: f.id, width: r.width, height: r.height,
          shapes: svg ? svg.querySelectorAll('path, use, rect, line, polyline').length : 0,
          texts: svg ? Array.from(svg.querySelectorAll('text')).filter(t => t.getBBox().width > 0).length : 0,
          caption: cap ? cap.textContent : ''};
})
"""


def test_report_in_headless_chromium(page: Page, tmp_path: Path) -> None:
    report = full_report(tmp_path / "report.html")
    page.load(report.as_uri())
    assert page.errors() == []
    charts = page.evaluate(_MEASURE)
    assert [c["id"] for c in charts] == ALL_CHARTS
    for c in charts:
        assert c["width"] > 300 and c["height"] > 100, c
        assert c["shapes"] > 10 and c["texts"] > 3, c
        assert len(c["caption"]) > 30, c
    verdict = page.evaluate("document.getElementById('verdict').innerText")
    assert verdict.startswith("Shared pool wins: $17,753/month against $19,907/month for disaggregated")
    # the verdict is on the first screen
    assert page.evaluate("document.getElementById('verdict').getBoundingClientRect().bottom") < 300
    # nothing left the machine: every resource the page loaded is the file itself
    resources = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == []
    page.screenshot(ARTIFACTS / "report_html.png")
    assert (ARTIFACTS / "report_html.png").stat().st_size > 50_000


def test_console_errors_are_detected(page: Page, tmp_path: Path) -> None:
    """The error check can fail: a page that logs an error and throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom'); throw new Error('kaput');</script>"
                   "</body></html>", encoding="utf-8")
    page.load(bad.as_uri())
    errors = page.errors()
    assert any("boom" in e for e in errors) and any("kaput" in e for e in errors), errors


EXAMPLES = sorted((ROOT / "instances").glob("*.yaml"))


@pytest.mark.parametrize("instance", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_instance_report(page: Page, instance: Path, tmp_path: Path, solved_example) -> None:
    """``planner solve`` (the session's solve of the example, tests/conftest.py) then ``planner html``
    on each example instance, checked in the browser."""
    from click.testing import CliRunner

    from planner.cli import main
    from planner.report.html import load_plan, verdict_sentence

    solved = solved_example(instance.stem)
    assert solved.exit_code == 0, solved.output
    plan_file = solved.out_dir / "plan.json"
    res = CliRunner().invoke(main, ["html", str(plan_file), "-o", str(tmp_path / "report.html")])
    assert res.exit_code == 0, res.output
    plan = load_plan(plan_file)
    page.load((tmp_path / "report.html").as_uri())
    assert page.errors() == []
    charts = page.evaluate(_MEASURE)
    feasible = [a for a in plan.architectures.values() if a.feasible]
    expected = ["chart-cost-terms", "chart-utilization", "chart-unit-costs"] if feasible else []
    if any(a.tool_phase is not None and a.tool_phase.tools for a in plan.architectures.values()):
        expected += ["chart-tool-phase-latency", "chart-tool-policy"]
    assert [c["id"] for c in charts] == expected
    for c in charts:
        assert c["width"] > 300 and c["height"] > 100 and c["shapes"] > 10 and c["texts"] > 3, c
    assert page.evaluate("document.getElementById('verdict').innerText") == verdict_sentence(plan)
    assert page.evaluate("document.getElementById('verdict').getBoundingClientRect().bottom") < 300
    assert page.evaluate("document.documentElement.scrollWidth") <= 1100  # no table runs off a 1100 px window
    page.screenshot(ARTIFACTS / f"report_{instance.stem}.png")


def test_plan_only_report_renders(page: Page, tmp_path: Path) -> None:
    from planner.report.html import write_html

    report = write_html(tmp_path / "plan.html", plan=hand_plan("disaggregated"))
    page.load(report.as_uri())
    assert page.errors() == []
    charts = page.evaluate(_MEASURE)
    assert [c["id"] for c in charts] == ["chart-cost-terms", "chart-utilization", "chart-unit-costs"]
    assert all(c["width"] > 300 and c["shapes"] > 10 for c in charts)
    assert page.evaluate("document.getElementById('verdict').innerText").startswith("Disaggregated wins")


def test_study_report_in_headless_chromium(page: Page, tmp_path: Path) -> None:
    """``planner sweep --html`` on a 3-scenario sweep, then ``planner budget --html``: no console errors, charts drawn."""
    from click.testing import CliRunner

    from planner.cli import main

    inst = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
    rate = "services.chat.traffic.rate_multiplier"
    res = CliRunner().invoke(main, ["sweep", str(inst), "--set", f"{rate}=0.5,2,8", "--jobs", "1", "--html", str(tmp_path / "sweep.html")])
    assert res.exit_code == 0, res.output
    page.load((tmp_path / "sweep.html").as_uri())
    assert page.errors() == []
    charts = page.evaluate(_MEASURE)
    assert [c["id"] for c in charts] == ["chart-sweep", "chart-tornado"]
    for c in charts:
        assert c["width"] > 300 and c["height"] > 100 and c["shapes"] > 10 and c["texts"] > 3, c
    assert page.evaluate("document.getElementById('verdict').innerText").startswith("Across 3 scenarios:")
    assert page.evaluate("document.getElementById('verdict').getBoundingClientRect().bottom") < 300
    assert page.evaluate("performance.getEntriesByType('resource').map(e => e.name)") == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 1100
    page.screenshot(ARTIFACTS / "report_sweep.png")
    # the page is checked, not the frontier's numbers (tests/test_studies.py, tests/test_one_path.py): no peak simulation
    # and a coarse multiplier, as tests/test_cli_options.py's budget JSON test
    res = CliRunner().invoke(main, ["budget", str(inst), "--budgets", "3000,6000,12000", "--set", "options.verify=false",
                                    "--rel-tol", "0.1", "--html", str(tmp_path / "budget.html")])
    assert res.exit_code == 0, res.output
    page.load((tmp_path / "budget.html").as_uri())
    assert page.errors() == []
    charts = page.evaluate(_MEASURE)
    assert [c["id"] for c in charts] == ["chart-frontier"] and charts[0]["shapes"] > 10 and charts[0]["texts"] > 3
    page.screenshot(ARTIFACTS / "report_budget.png")


def test_simulate_report_in_headless_chromium(page: Page, tmp_path: Path) -> None:
    """``planner simulate --html``: the latency chart drawn with readable axes, the scenario verdict, the solve's own
    peak check (analytic against simulated) in the plan section, and no internal function names on the page."""
    from click.testing import CliRunner

    from planner.cli import main

    inst = ROOT / "tests" / "data" / "instances" / "valid_minimal.yaml"
    res = CliRunner().invoke(main, ["simulate", str(inst), "--duration", "60", "--scenario", "normal", "--scenario", "peak",
                                    "--html", str(tmp_path / "sim.html")])
    assert res.exit_code == 0, res.output
    page.load((tmp_path / "sim.html").as_uri())
    assert page.errors() == []
    charts = page.evaluate(_MEASURE)
    ids = [c["id"] for c in charts]
    assert ids[0] == "chart-latency" and "chart-utilization" in ids
    for c in charts:
        assert c["width"] > 300 and c["height"] > 100 and c["shapes"] > 10 and c["texts"] > 3, c
    assert page.evaluate("document.getElementById('simulation-verdict') !== null")
    assert page.evaluate("document.querySelectorAll('table[id^=\"table-peak-sim-\"]').length") >= 2
    text = page.evaluate("document.body.innerText")
    assert "planner." not in text  # captions and notes in words, not module paths
    # the TPOT axis tick labels do not overlap one another
    overlaps = page.evaluate("""
      (() => { const svg = document.querySelector('#chart-latency svg');
        const t = Array.from(svg.querySelectorAll('text')).map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
        let n = 0; for (let i = 0; i < t.length; i++) for (let j = i + 1; j < t.length; j++) {
          const a = t[i], b = t[j]; if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) n++; }
        return n; })()""")
    assert overlaps == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 1100
    page.screenshot(ARTIFACTS / "report_simulate.png")
