"""Reload / recompute load coefficients follow the utilisation caps when the latency check tightens them."""

from __future__ import annotations

import pytest
from test_agents_mip import RHO_PF, _tables

from planner.agents.prep import refresh_caps
from planner.optimize.prepare import prepare
from planner.optimize.solve import tighten_prepared


def test_refresh_caps_scales_reload_and_recompute_loads_by_the_tightening_factor() -> None:
    prep = prepare(_tables(20.0, reload_s=0.05, recompute_s=2.0))
    pf = prep.tool.pf
    row = pf.iloc[0]
    # hand: one call per LLM call x 0.05 s x busy share 1 / 0.8 = 0.0625; recompute 2.0 / 0.8 = 2.5 instance-s per (req/s)
    assert row["rl_load"] == pytest.approx(0.05 / RHO_PF) and row["rc_load"] == pytest.approx(2.0 / RHO_PF)
    pool = str(prep.points["pool"].iat[int(row["j"])])
    tight = tighten_prepared(prep, {pool: 2.0})  # caps of the prefill pool halved: 0.8 -> 0.4
    out = refresh_caps(tight.tool, tight.points).pf.iloc[0]
    assert out["rho"] == pytest.approx(RHO_PF / 2)
    assert out["rl_load"] == pytest.approx(0.05 / (RHO_PF / 2)) and out["rc_load"] == pytest.approx(2.0 / (RHO_PF / 2))
    assert out["rl_energy_j"] == row["rl_energy_j"] and bool(out["off_ok"]) == bool(row["off_ok"])  # energy and masks unchanged
    assert prep.tool.pf.iloc[0]["rl_load"] == pytest.approx(0.05 / RHO_PF)  # the original is untouched
