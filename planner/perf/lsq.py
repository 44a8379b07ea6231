"""The one fitting routine of every calibration: bounded nonlinear least squares (``scipy``).

``planner calibrate`` (:mod:`planner.perf.fit`), ``planner calibrate-energy``
(:mod:`planner.perf.power_fit`) and ``planner calibrate-moe`` (:mod:`planner.perf.moe`) all call
:func:`fit_least_squares`: minimise ``sum_i rho(r_i(x)^2)`` over ``lower <= x <= upper`` with
``scipy.optimize.least_squares`` (trust-region reflective, ``"trf"``, the scipy method that honours
bounds; numeric two-point Jacobian), where ``r(x)`` is the caller's residual vector and ``rho`` its
loss (``"linear"``: plain least squares; ``"soft_l1"``: ``2 f^2 (sqrt(1 + r^2/f^2) - 1)``, a residual
beyond ``f_scale`` pulls by about its sign). The caller chooses the residuals, e.g. the
least-absolute-deviation residuals ``sign(l) sqrt(|l| + eps)`` of :func:`planner.perf.fit.lad_residuals`
whose squares sum to ``sum |l|``.

The result names every parameter that ended on (within :data:`BOUND_RTOL` of the range of) one of its
bounds: such a value is the bound, not an estimate — the data did not pin it (e.g. three rows that
put prefill efficiency at 100 % of peak and an overhead at 0). Callers turn these into warnings that
the CLI prints and the calibration file records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

RANK_RTOL = 1e-6
"""Relative singular-value threshold of :attr:`LsqResult.rank`."""
BOUND_RTOL = 1e-3
"""A parameter within this fraction of its range (or of ``max(1, |bound|)`` when the range is
unbounded on the other side) from a bound counts as on that bound."""


@dataclass(frozen=True)
class LsqResult:
    """Outcome of :func:`fit_least_squares`."""

    x: np.ndarray
    """Fitted parameters (in the caller's space, inside the bounds)."""
    residuals: np.ndarray
    """``r(x)`` at the fitted parameters."""
    cost: float
    """``0.5 sum rho(r^2)`` (scipy's cost, loss applied)."""
    at_bound: tuple[str, ...]
    """Names of the parameters that ended on a bound, with which one: ``"eta_f (upper 1)"``."""
    nfev: int
    status: str
    """scipy's termination message."""
    rank: int = 0
    """Numerical rank of the Jacobian at the solution (singular values above :data:`RANK_RTOL` of the
    largest, columns scaled to unit norm): fewer than the parameters means the residuals do not
    determine them all (e.g. fewer residuals than parameters)."""
    undetermined: tuple[str, ...] = ()
    """Parameters whose Jacobian column is (numerically) zero: moving them does not change any residual."""


def on_bound(names: Sequence[str], x: np.ndarray, lower: np.ndarray, upper: np.ndarray, rtol: float = BOUND_RTOL) -> tuple[str, ...]:
    """The parameters of ``x`` within ``rtol`` (module docstring) of a finite bound, as ``"name (lower v)"``."""
    out = []
    for n, v, lo, hi in zip(names, x, lower, upper, strict=True):
        span = hi - lo if np.isfinite(hi - lo) else max(1.0, abs(lo) if np.isfinite(lo) else abs(hi))
        if np.isfinite(lo) and v - lo <= rtol * span:
            out.append(f"{n} (lower {lo:g})")
        elif np.isfinite(hi) and hi - v <= rtol * span:
            out.append(f"{n} (upper {hi:g})")
    return tuple(out)


def fit_least_squares(residual_fn: Callable[[np.ndarray], np.ndarray], x0: Sequence[float] | np.ndarray, *, names: Sequence[str],
                      lower: Sequence[float] | np.ndarray, upper: Sequence[float] | np.ndarray, loss: str = "linear",
                      f_scale: float = 1.0, max_nfev: int | None = None, x_scale: str | float | Sequence[float] | np.ndarray = "jac",
                      diff_step: float | None = None, ftol: float = 1e-8, xtol: float = 1e-8, gtol: float = 1e-8) -> LsqResult:
    """Minimise ``sum rho(residual_fn(x)^2)`` within the bounds (module docstring); ``x0`` is moved
    strictly inside the bounds first (trf starts from an interior point)."""
    lo = np.asarray(lower, dtype=float)
    hi = np.asarray(upper, dtype=float)
    if lo.shape != hi.shape or lo.shape != (len(names),) or np.any(lo >= hi):
        raise ValueError("fit_least_squares: one (lower < upper) pair per named parameter")
    span = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
    x = np.clip(np.asarray(x0, dtype=float), lo + 1e-9 * span, hi - 1e-9 * span)
    sol = least_squares(residual_fn, x, bounds=(lo, hi), method="trf", loss=loss, f_scale=f_scale, max_nfev=max_nfev,
                        x_scale=x_scale, diff_step=diff_step, ftol=ftol, xtol=xtol, gtol=gtol)
    res = np.asarray(sol.fun, dtype=float)
    rank, flat = jacobian_rank(np.asarray(sol.jac, dtype=float), names)
    return LsqResult(x=np.asarray(sol.x, dtype=float), residuals=res, cost=float(sol.cost),
                     at_bound=on_bound(names, sol.x, lo, hi), nfev=int(sol.nfev), status=str(sol.message), rank=rank, undetermined=flat)


def jacobian_rank(jac: np.ndarray, names: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """``(rank, zero-column names)`` of ``jac`` (rows = residuals, columns = parameters), each nonzero
    column scaled to unit norm so that the parameters' units do not matter; rank counts singular values
    above :data:`RANK_RTOL` of the largest (a Jacobian with fewer rows than columns has rank <= rows)."""
    norms = np.linalg.norm(jac, axis=0) if jac.size else np.zeros(len(names))
    top = float(norms.max()) if norms.size else 0.0
    flat = tuple(n for n, c in zip(names, norms, strict=True) if not c > 1e-12 * max(top, 1e-300))
    live = norms > 1e-12 * max(top, 1e-300)
    if not live.any():
        return 0, flat
    sv = np.linalg.svd(jac[:, live] / norms[live], compute_uv=False)
    return int((sv > RANK_RTOL * sv[0]).sum()), flat


__all__ = ["BOUND_RTOL", "LsqResult", "fit_least_squares", "on_bound"]


def fit_warnings(what: str, sol: LsqResult, n_params: int, at_bound: tuple[str, ...] | None = None) -> list[str]:
    """The warnings of one fit, the same words for every calibration (``calibrate``, ``calibrate-energy``,
    ``calibrate-moe``): parameters on a bound (``at_bound``, default the solver's; pass the bounds in the
    parameters' own units when the solver saw them scaled), parameters without effect, and a Jacobian of lower
    rank than the parameters (the rows do not determine them all)."""
    bound = sol.at_bound if at_bound is None else at_bound
    out = []
    if bound:
        out.append(f"{what}: {', '.join(bound)} ended on a bound (a bound, not an estimate: the rows do not determine it)")
    if sol.undetermined:
        out.append(f"{what}: {', '.join(sol.undetermined)} changed no residual (left at the starting value, not an estimate)")
    if sol.rank < n_params:
        out.append(f"{what}: the rows determine only {sol.rank} of the {n_params} fitted parameters (Jacobian rank {sol.rank}); "
                   "give more rows (models, batch sizes, lengths)")
    return out
