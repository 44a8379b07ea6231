"""``--json`` output is JSON and nothing else: HiGHS's warnings on a model update between solves (tiny
coefficients at 1e-6 of the traffic) went to stdout ahead of it (pyomo leaves HiGHS's console log on after a
solve; :func:`planner.optimize.highs._counting_highs` turns it off)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_sweep_json_at_tiny_traffic_is_json() -> None:
    # a subprocess: HiGHS writes to the process's own stdout (file descriptor 1), which CliRunner does not capture
    out = subprocess.run([sys.executable, "-m", "planner", "sweep", str(ROOT / "instances" / "enterprise-chat.yaml"),
                          "--set", "services.chat.traffic.rate_multiplier=0.000001,0.00001", "--jobs", "1", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["rows"]) == 4 and "WARNING" not in out.stdout
