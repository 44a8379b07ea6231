"""Reload / recompute load coefficients follow the utilisation caps when the latency check tightens them."""

from __future__ import annotations

import pytest
from test_agents_mip import RHO_PF, _tables

from planner.agents.prep import refresh_caps
from planner.optimize.prepare import prepare
from planner.optimize.tighten import tighten_prepared


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


def test_tightening_a_pool_scales_its_reload_and_recompute_loads() -> None:
    """tighten_prepared divides rho by the factor; the tool phase's 1/rho coefficients follow."""
    from pathlib import Path

    import numpy as np

    from planner.capacity import build_capacity_tables
    from planner.instance import load_instance
    from planner.optimize.prepare import prepare
    from planner.optimize.tighten import tighten_prepared

    root = Path(__file__).resolve().parent.parent
    prep = prepare(build_capacity_tables(load_instance(root / "instances" / "agentic-assistant.yaml")))
    assert prep.tool is not None and len(prep.tool.pf)
    factors = {str(p): 2.0 for p in prep.points["pool"].unique()}
    tight = tighten_prepared(prep, factors)
    before, after = prep.tool.pf, tight.tool.pf
    for col in ("rl_load", "rc_load"):
        b, a = before[col].to_numpy(float), after[col].to_numpy(float)
        ok = np.isfinite(b)
        assert np.allclose(a[ok], 2.0 * b[ok])
