"""Acceptance test: Mélange's toy example (arXiv:2404.14527, §4) through measured capacity.

Two GPU types (A10G $1.01/h — declared in the instance, it is not in the catalog — and A100
$3.67/h), 2x2 length buckets with traffic shares [[0.25, 0.125], [0.375, 0.25]] and the
requests/s one GPU sustains within SLO per bucket, A10G [[5, 1], [10, 5]] and A100
[[20, 2], [50, 20]] (``tests/data/melange/``, SOURCE.md there). At every integer rate
1–40 req/s the planner's cheapest plan must equal a brute force over device counts written
here independently of the planner; at 16 req/s it is 5 x A10G, $5.05/h, as published.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "melange"
INSTANCE = DATA / "melange-toy.yaml"
CAPACITY = DATA / "capacity.csv"
BASE_RATE = 16.0
"""``traffic.rate_per_s`` of the instance file."""

PRICE_PER_H = {"a10g": 1.01, "a100": 3.67}
SHARES = [0.25, 0.125, 0.375, 0.25]  # buckets b0..b3 = [[short in, short out], [short, long], [long, short], [long, long]]
RATE_PER_GPU = {"a10g": [5.0, 1.0, 10.0, 5.0], "a100": [20.0, 2.0, 50.0, 20.0]}


def _fits(rate_per_s: float, n_a10g: int, n_a100: int) -> bool:
    """Can ``n_a10g`` A10Gs and ``n_a100`` A100s carry the load, each bucket's traffic split freely
    between the two types (one GPU's time is shared by the requests routed to it)?

    With two types the best split fills the A10Gs first with the buckets where an A10G is
    relatively strongest (largest A10G / A100 rate ratio), splitting at most one bucket, and
    sends the rest to the A100s (exchange argument: moving load of a relatively weaker
    bucket onto the A10Gs never frees more A100 time)."""
    order = sorted(range(4), key=lambda b: RATE_PER_GPU["a10g"][b] / RATE_PER_GPU["a100"][b], reverse=True)
    room_a10g = float(n_a10g)  # GPU-seconds per second
    need_a100 = 0.0
    for b in order:
        load = rate_per_s * SHARES[b]  # requests/s of bucket b
        on_a10g = min(load, room_a10g * RATE_PER_GPU["a10g"][b])
        room_a10g -= on_a10g / RATE_PER_GPU["a10g"][b]
        need_a100 += (load - on_a10g) / RATE_PER_GPU["a100"][b]
    return need_a100 <= n_a100 + 1e-9


def brute_force(rate_per_s: float) -> tuple[float, int, int]:
    """Cheapest (USD/h, A10Gs, A100s) by enumerating every device count up to a sure bound."""
    bound = math.ceil(rate_per_s) + 1  # one A10G per request/s always suffices (its slowest bucket does 1/s)
    best = (math.inf, -1, -1)
    for n1, n2 in itertools.product(range(bound + 1), repeat=2):
        cost = n1 * PRICE_PER_H["a10g"] + n2 * PRICE_PER_H["a100"]
        if cost < best[0] - 1e-9 and _fits(rate_per_s, n1, n2):
            best = (cost, n1, n2)
    return best


def test_brute_force_reproduces_the_paper() -> None:
    assert brute_force(16.0) == (pytest.approx(5.05), 5, 0)


def _tables_and_settings() -> tuple[object, object, float]:
    from planner.capacity import build_capacity_tables, read_measured_capacity
    from planner.instance import load_instance
    from planner.studies.source import settings_for

    resolved = load_instance(INSTANCE)
    tables = read_measured_capacity(CAPACITY, build_capacity_tables(resolved))
    return tables, settings_for(resolved), resolved.instance.costs.hours_per_month


def test_plan_equals_brute_force_at_every_rate_1_to_40() -> None:
    """One built model, re-solved at each rate (the sweep path: rates patched, persistent HiGHS)."""
    from planner.studies.source import TableSource
    from planner.studies.sweep import solve_scenario

    tables, settings, hours = _tables_and_settings()
    source = TableSource.from_tables(tables, settings)  # type: ignore[arg-type]
    path = "services.chat.traffic.rate_multiplier"
    for rate in range(1, 41):
        summaries, _reused = solve_scenario(source, {path: rate / BASE_RATE}, headroom=40 / BASE_RATE)
        s = summaries["shared"]
        assert s.feasible, rate
        cost, n1, n2 = brute_force(float(rate))
        assert s.total_usd_per_month is not None
        assert s.total_usd_per_month / hours == pytest.approx(cost, rel=1e-6), rate
        assert s.devices.get("a10g", 0) == n1 and s.devices.get("a100", 0) == n2, (rate, s.devices, (n1, n2))


@pytest.mark.parametrize("rate", [16, 20])
def test_full_solve_path_gives_the_brute_force_plan(rate: int) -> None:
    """``planner solve --capacity`` at the published rate and at 20 req/s, where the A100 is filled to exactly 100 %."""
    out = CliRunner().invoke(main, ["solve", str(INSTANCE), "--capacity", str(CAPACITY), "--json",
                                    "--set", f"services.chat.traffic.rate_per_s={rate}"])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)["architectures"]["shared"]
    devices: dict[str, int] = {}
    for p in plan["pools"]:
        devices[p["device"]] = devices.get(p["device"], 0) + p["devices"]
    cost, n1, n2 = brute_force(float(rate))
    assert devices == {k: v for k, v in (("a10g", n1), ("a100", n2)) if v}
    assert plan["costs"]["total_usd_per_month"] / 730.0 == pytest.approx(cost, rel=1e-6)
    assert all(lat["ttft_met"] and lat["tpot_met"] for lat in plan["latency"])
    if rate == 16:
        assert (n1, n2) == (5, 0) and cost == pytest.approx(5.05)
    else:
        assert max(p["utilization_peak"] for p in plan["pools"]) == pytest.approx(1.0)  # a full measured pool is a plan
