"""Where a plan's facility energy goes: by pool and phase, busy vs provisioned-but-idle, and the
emissions when the instance gives a grid carbon intensity.

Per pool ``p`` (points ``i`` routed to it; ``x_i`` the routed share, ``λ_i`` the mean rate,
``τ_i`` instance-seconds per request, ``E_i`` the point's device energy per request from
:mod:`planner.perf.power`, ``η`` the PUE, ``H`` hours per month)::

    busy_p = η Σ_i λ_i x_i (E_i + τ_i tp_i P^host) · 3600 H / 3.6e6                       kWh/month
    idle_p = η H / 1000 (n_p tp_p (P^idle + P^host) − Σ_i λ_i x_i τ_i tp_i (P^idle + P^host))  kWh/month

the same terms as :func:`planner.optimize.extract.energy_kwh_per_month`, split by pool, so
``Σ_p (busy_p + idle_p) + tool phase = facility kWh/month`` (checked by a test). Each pool's
``wh_per_1k_tokens`` is its share of the plan's Wh per 1k tokens (its energy over all the
plan's tokens), so the pools' figures add up to the plan's. Emissions::

    kg CO2e / month = facility kWh/month x carbon_g_per_kwh / 1000
    g CO2e / 1M tokens = facility kWh/month x carbon_g_per_kwh / tokens x 1e6

Grid intensity is an instance input (``costs.carbon_g_per_kwh``; none = not reported): it is a
property of the site and hour that the planner cannot know.
"""

from __future__ import annotations

import numpy as np

from planner.optimize.model import Built
from planner.schema.plan import EnergyReport, PlanResult, PoolEnergy
from planner.units import J_PER_KWH, SECONDS_PER_HOUR


def energy_report(built: Built, x: np.ndarray, n: np.ndarray, tokens_per_month: float, facility_kwh_per_month: float) -> EnergyReport:
    """The plan's energy by pool (module docstring); ``facility_kwh_per_month`` is the plan's
    total (:func:`planner.optimize.extract.energy_kwh_per_month`), whose remainder after the
    pools is the tool phase."""
    prep = built.prep
    c = prep.tables.costs
    H = float(c.hours_per_month)
    pue = float(c.pue)
    cfg = prep.tables.configs.drop_duplicates("config").set_index("config")
    pts = prep.points
    pools = prep.pools
    ptc = cfg.reindex(pts["config"].to_numpy())
    lam = pts["rate_mean_per_s"].to_numpy(float) * np.asarray(x, dtype=float)
    tau_tp = pts["instance_seconds_per_request"].to_numpy(float) * pts["tp"].to_numpy(float)
    host = ptc["host_power_w"].to_numpy(float)
    idle_host = ptc["idle_power_w"].to_numpy(float) + host
    busy_pt = lam * (pts["energy_j_per_request"].to_numpy(float) + tau_tp * host) * SECONDS_PER_HOUR * H / J_PER_KWH
    used_w_pt = lam * tau_tp * idle_host
    index = {name: j for j, name in enumerate(pools["pool"].tolist())}
    j_of = np.array([index[p] for p in pts["pool"]], dtype=int) if len(pts) else np.zeros(0, dtype=int)
    busy_p = np.bincount(j_of, weights=busy_pt, minlength=len(pools)) * pue
    used_p = np.bincount(j_of, weights=used_w_pt, minlength=len(pools))
    pc = cfg.reindex(pools["config"].to_numpy())
    prov_w = np.asarray(n, dtype=float) * pools["tp"].to_numpy(float) * (pc["idle_power_w"].to_numpy(float) + pc["host_power_w"].to_numpy(float))
    idle_p = pue * H / 1e3 * (prov_w - used_p)
    rows = []
    for j, name in enumerate(pools["pool"].tolist()):
        if n[j] <= 0 and busy_p[j] <= 0:
            continue
        total = float(busy_p[j] + idle_p[j])
        rows.append(PoolEnergy(pool=name, role=str(pools["role"].iat[j]), busy_kwh_per_month=float(busy_p[j]),
                               idle_kwh_per_month=float(idle_p[j]),
                               wh_per_1k_tokens=total * 1e6 / tokens_per_month if tokens_per_month > 0 else None))
    busy = float(busy_p.sum())
    idle = float(idle_p.sum())
    # The tool phase is what the facility total holds beyond the pools; a residue below 1e-9 of the total is the
    # rounding of two sums of the same terms (it printed as "tool phase 4.55e-13 kWh"), not energy.
    rest = facility_kwh_per_month - busy - idle
    tool = rest if rest > 1e-9 * max(abs(facility_kwh_per_month), 1.0) else 0.0
    return EnergyReport(facility_kwh_per_month=facility_kwh_per_month, busy_kwh_per_month=busy, idle_kwh_per_month=idle,
                        tool_phase_kwh_per_month=tool, pools=rows)


def emissions(report: EnergyReport, tokens_per_month: float, carbon_g_per_kwh: float | None) -> EnergyReport:
    """The report with its emissions at ``carbon_g_per_kwh`` (unchanged when ``None``)."""
    if carbon_g_per_kwh is None:
        return report
    kwh = report.facility_kwh_per_month
    return report.model_copy(update={
        "carbon_g_per_kwh": float(carbon_g_per_kwh), "emissions_kg_per_month": kwh * carbon_g_per_kwh / 1e3,
        "emissions_g_per_million_tokens": kwh * carbon_g_per_kwh / tokens_per_month * 1e6 if tokens_per_month > 0 else None})


def with_emissions(result: PlanResult, carbon_g_per_kwh: float | None) -> PlanResult:
    """Every plan of ``result`` with its emissions (the instance's ``costs.carbon_g_per_kwh``)."""
    if carbon_g_per_kwh is None:
        return result
    archs = {a: p.model_copy(update={"energy": emissions(p.energy, p.tokens_per_month, carbon_g_per_kwh)}) if p.energy is not None else p
             for a, p in result.architectures.items()}
    return result.model_copy(update={"architectures": archs})
