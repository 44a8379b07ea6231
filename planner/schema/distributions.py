"""Forecast distributions for Monte Carlo studies: ``NAME(a,b[,c])``.

=================================  ==============================================================
``normal(mean, sd)``               Gaussian; draws are clipped at 0 from below (multipliers and prices are ≥ 0)
``lognormal(mean, sd)``            log-normal with this **mean and sd of the value itself** (not of its log):
                                   ``σ² = ln(1 + sd²/mean²)``, ``μ = ln(mean) − σ²/2`` — right-skewed growth
``uniform(low, high)``             uniform on [low, high]
``triangular(low, mode, high)``    triangular
``growth(rate, sd, years)``        compound growth over a horizon: ``(1 + g)^years`` with the annual rate
                                   ``g ~ normal(rate, sd)`` clipped at −0.99 — e.g. ``growth(0.5,0.2,2)``
                                   for 50 % ± 20 % a year over two years (a traffic multiplier)
=================================  ==============================================================

Every distribution also gives a low/high probe (:meth:`Distribution.quantiles`, sampled
10th and 90th percentiles) used by the tornado and to validate values before solving.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

ARITY: dict[str, int] = {"normal": 2, "lognormal": 2, "uniform": 2, "triangular": 3, "growth": 3}
_PATTERN = re.compile(r"^\s*([a-z]+)\s*\(([^()]*)\)\s*$")


@dataclass(frozen=True)
class Distribution:
    name: str
    args: tuple[float, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(f'{a:g}' for a in self.args)})"

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        a = self.args
        if self.name == "normal":
            return np.maximum(rng.normal(a[0], a[1], n), 0.0)
        if self.name == "lognormal":
            sigma2 = math.log1p((a[1] / a[0]) ** 2)
            return rng.lognormal(math.log(a[0]) - sigma2 / 2, math.sqrt(sigma2), n)
        if self.name == "uniform":
            return rng.uniform(a[0], a[1], n)
        if self.name == "triangular":
            return rng.triangular(a[0], a[1], a[2], n)
        if self.name == "growth":
            g = np.maximum(rng.normal(a[0], a[1], n), -0.99)
            return np.power(1.0 + g, a[2])
        raise ValueError(f"unknown distribution {self.name!r}")

    def quantiles(self, lo: float = 0.1, hi: float = 0.9, *, seed: int = 0, n: int = 20000) -> tuple[float, float]:
        """Sampled quantiles (deterministic for a seed): the tornado's low and high values."""
        draws = self.sample(np.random.default_rng(seed), n)
        return float(np.quantile(draws, lo)), float(np.quantile(draws, hi))

    def support_probe(self) -> tuple[float, float]:
        """Extreme plausible values (0.1 % and 99.9 % quantiles), to validate against the schema."""
        return self.quantiles(0.001, 0.999)


def parse_distribution(text: str) -> Distribution:
    """Parse ``NAME(a,b[,c])``; raises ValueError with what is wrong."""
    m = _PATTERN.match(text)
    if not m:
        raise ValueError(f"cannot read distribution {text!r}: expected NAME(a,b[,c]) with NAME one of {', '.join(ARITY)}")
    name, body = m.group(1), m.group(2)
    if name not in ARITY:
        raise ValueError(f"unknown distribution {name!r}: use one of {', '.join(ARITY)}")
    try:
        args = tuple(float(v) for v in body.split(",")) if body.strip() else ()
    except ValueError as exc:
        raise ValueError(f"{name}(...) needs numbers, got {body!r}") from exc
    if len(args) != ARITY[name]:
        raise ValueError(f"{name} takes {ARITY[name]} numbers, got {len(args)}")
    if not all(math.isfinite(a) for a in args):
        raise ValueError(f"{name}(...) arguments must be finite")
    if name in ("normal", "lognormal", "growth") and args[1] < 0:
        raise ValueError(f"{name}: the sd must be ≥ 0")
    if name == "lognormal" and args[0] <= 0:
        raise ValueError("lognormal: the mean must be > 0")
    if name == "uniform" and not args[0] < args[1]:
        raise ValueError("uniform: low must be < high")
    if name == "triangular" and not (args[0] <= args[1] <= args[2] and args[0] < args[2]):
        raise ValueError("triangular: need low ≤ mode ≤ high and low < high")
    if name == "growth" and args[2] <= 0:
        raise ValueError("growth: years must be > 0")
    return Distribution(name=name, args=args)
