"""A sparse mixed-integer linear model built from numpy arrays and solved by HiGHS (highspy).

The horizon MIP (:mod:`planner.horizon.model`) has one family of constraints per formula, each family
thousands of rows that differ only in their indices. Building them as numpy index arrays and one
sparse matrix is two orders of magnitude faster than building them term by term in pyomo (the
example instance: pyomo build ~300 s, this ~1 s); the formulas are documented where each family is
built.

A model is variable *blocks* (an n-dimensional array of columns each: ``block.col[k, p]`` is the
column of ``n[k, p]``) and *linear expressions* (:class:`Expr`: a sparse matrix over the columns and
a constant per row). A constraint family is ``lo ≤ expr ≤ hi`` row by row. The model itself is
immutable once :meth:`LinearModel.finish` is called; each solve takes its own column bounds,
integrality and row bounds (:class:`Bounds`), so a re-solve with other bounds never edits the model.
HiGHS keeps the model from its first solve: a re-solve hands over only the bounds that changed and
starts from the last basis (the example's LP re-solves take a fifth of a cold start; same optima).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

INF = np.inf


@dataclass(frozen=True)
class Block:
    """Columns of one variable array: ``col`` has the block's shape and holds column indices."""

    name: str
    col: np.ndarray

    @property
    def size(self) -> int:
        return int(self.col.size)


@dataclass
class Expr:
    """Rows of linear expressions ``A @ v + c`` over the model's columns (``A`` sparse, ``c`` per row)."""

    A: sp.csr_matrix
    c: np.ndarray

    def __add__(self, other: Expr) -> Expr:
        return Expr((self.A + other.A).tocsr(), self.c + other.c)

    def __sub__(self, other: Expr) -> Expr:
        return Expr((self.A - other.A).tocsr(), self.c - other.c)

    def scale(self, f: np.ndarray | float) -> Expr:
        """Row ``r`` times ``f[r]`` (or every row times a scalar)."""
        f_arr = np.broadcast_to(np.asarray(f, dtype=float), self.c.shape)
        return Expr((sp.diags(f_arr) @ self.A).tocsr(), self.c * f_arr)

    def rows(self, idx: np.ndarray) -> Expr:
        return Expr(self.A[idx].tocsr(), self.c[idx])

    def value(self, v: np.ndarray) -> np.ndarray:
        return np.asarray(self.A @ v).ravel() + self.c


@dataclass
class Bounds:
    """What one solve may change: column bounds, integrality (1 = integer) and row bounds."""

    col_lb: np.ndarray
    col_ub: np.ndarray
    integer: np.ndarray
    row_lb: np.ndarray
    row_ub: np.ndarray

    def copy(self) -> Bounds:
        return replace(self, col_lb=self.col_lb.copy(), col_ub=self.col_ub.copy(), integer=self.integer.copy(),
                       row_lb=self.row_lb.copy(), row_ub=self.row_ub.copy())


@dataclass
class LinearModel:
    """Variable blocks, then constraint families and an objective; :meth:`finish` freezes the matrix."""

    n_cols: int = 0
    blocks: dict[str, Block] = field(default_factory=dict)
    _lb: list[np.ndarray] = field(default_factory=list)
    _ub: list[np.ndarray] = field(default_factory=list)
    _int: list[np.ndarray] = field(default_factory=list)
    _rows: list[sp.csr_matrix] = field(default_factory=list)
    _rlo: list[np.ndarray] = field(default_factory=list)
    _rhi: list[np.ndarray] = field(default_factory=list)
    families: dict[str, slice] = field(default_factory=dict)
    """Row range of each constraint family."""
    n_rows: int = 0
    cost: np.ndarray | None = None
    offset: float = 0.0
    A: sp.csc_matrix | None = None
    _highs: Any = None
    """The HiGHS instance holding this model since its first solve (re-solves change bounds and warm-start)."""
    _loaded: Bounds | None = None
    """The bounds ``_highs`` holds."""

    def forget_solver(self) -> None:
        """Drop the HiGHS instance and its basis: the next solve starts from the model alone, so what it returns does
        not depend on what was solved before it (another architecture, solved here or in a forked process)."""
        self._highs = None
        self._loaded = None

    def var(self, name: str, shape: tuple[int, ...], *, lb: float | np.ndarray = 0.0, ub: float | np.ndarray = INF,
            integer: bool = False) -> Block:
        size = int(np.prod(shape)) if shape else 1
        col = np.arange(self.n_cols, self.n_cols + size, dtype=np.int64).reshape(shape)
        self.n_cols += size
        self._lb.append(np.broadcast_to(np.asarray(lb, dtype=float), shape).ravel().copy())
        self._ub.append(np.broadcast_to(np.asarray(ub, dtype=float), shape).ravel().copy())
        self._int.append(np.full(size, 1 if integer else 0, dtype=np.int32))
        b = Block(name, col)
        self.blocks[name] = b
        return b

    def expr(self, n_rows: int, rows: np.ndarray | list[int], cols: np.ndarray | list[int], vals: np.ndarray | list[float] | float,
             const: np.ndarray | float = 0.0) -> Expr:
        """``n_rows`` expressions from (row, column, coefficient) triplets (repeats add up) and a constant per row."""
        r_a, c_a, v_a = np.broadcast_arrays(np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64),
                                            np.asarray(vals, dtype=float))
        r, c, v = r_a.ravel(), c_a.ravel(), v_a.ravel()
        keep = v != 0.0
        A = sp.csr_matrix((v[keep], (r[keep], c[keep])), shape=(n_rows, self.n_cols))
        A.sum_duplicates()
        return Expr(A, np.broadcast_to(np.asarray(const, dtype=float), (n_rows,)).astype(float).copy())

    def zero(self, n_rows: int) -> Expr:
        return Expr(sp.csr_matrix((n_rows, self.n_cols)), np.zeros(n_rows))

    def constrain(self, name: str, e: Expr, lo: float | np.ndarray = -INF, hi: float | np.ndarray = INF) -> None:
        """Rows ``lo ≤ e ≤ hi`` (the expression's constant moves to the bounds)."""
        m = e.A.shape[0]
        if m == 0:
            return
        A = e.A
        if A.shape[1] < self.n_cols:  # expressions made before later blocks were declared
            A = sp.csr_matrix((A.data, A.indices, A.indptr), shape=(m, self.n_cols))
        self._rows.append(A)
        self._rlo.append(np.broadcast_to(np.asarray(lo, dtype=float), (m,)) - e.c)
        self._rhi.append(np.broadcast_to(np.asarray(hi, dtype=float), (m,)) - e.c)
        self.families[name] = slice(self.n_rows, self.n_rows + m)
        self.n_rows += m

    def minimize(self, e: Expr) -> None:
        """Objective: the sum of the rows of ``e``."""
        A = e.A
        self.cost = np.asarray(A.sum(axis=0)).ravel()
        if self.cost.size < self.n_cols:
            self.cost = np.concatenate([self.cost, np.zeros(self.n_cols - self.cost.size)])
        self.offset = float(e.c.sum())

    def finish(self) -> Bounds:
        rows = [sp.csr_matrix((r.data, r.indices, r.indptr), shape=(r.shape[0], self.n_cols)) for r in self._rows]
        self.A = (sp.vstack(rows).tocsc() if rows else sp.csc_matrix((0, self.n_cols)))
        self.A.sort_indices()
        if self.cost is None:
            self.cost = np.zeros(self.n_cols)
        return Bounds(np.concatenate(self._lb) if self._lb else np.zeros(0), np.concatenate(self._ub) if self._ub else np.zeros(0),
                      np.concatenate(self._int) if self._int else np.zeros(0, dtype=np.int32),
                      np.concatenate(self._rlo) if self._rlo else np.zeros(0), np.concatenate(self._rhi) if self._rhi else np.zeros(0))

    @property
    def nonzeros(self) -> int:
        return int(self.A.nnz) if self.A is not None else 0


@dataclass
class Solution:
    ok: bool
    status: str
    """``optimal``, ``feasible (...)`` or why there is no solution."""
    values: np.ndarray | None = None
    objective: float | None = None
    bound: float | None = None
    """The best lower bound HiGHS proved (the objective itself for an LP solved to optimality)."""
    wall_s: float = 0.0
    """Hand-over to HiGHS plus its run."""
    highs_s: float = 0.0
    note: str = ""
    """What was done to the solution after the solver (:mod:`planner.horizon.repair`), for the report."""

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None or abs(self.objective) <= 1e-9:
            return None
        return max(0.0, (self.objective - self.bound) / abs(self.objective))


def _quiet_highs() -> Any:
    """A ``highspy.Highs`` without its banner: the C++ constructor writes it to file descriptor 1, which would
    corrupt ``--json`` output, so descriptor 1 points at /dev/null while it runs."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def solve(model: LinearModel, b: Bounds, *, time_limit_s: float, mip_gap: float, options: dict[str, Any] | None = None) -> Solution:
    """One HiGHS run of ``model`` under bounds ``b`` (single thread, seed 0: reproducible); ``options`` are further
    HiGHS options (e.g. ``{"solver": "ipm"}``)."""
    import highspy

    assert model.A is not None and model.cost is not None, "call LinearModel.finish() first"
    t0 = time.perf_counter()
    A = model.A
    has_int = bool(b.integer.any())
    if model._highs is None or model._loaded is None:
        h = _quiet_highs()
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        h.passModel(model.n_cols, model.n_rows, int(A.nnz), int(highspy.MatrixFormat.kColwise), int(highspy.ObjSense.kMinimize),
                    model.offset, model.cost, b.col_lb, b.col_ub, b.row_lb, b.row_ub,
                    A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(float), b.integer.astype(np.int32))
        model._highs = h
    else:  # the same matrix: only what changed is handed over, and HiGHS starts from its last basis
        h = model._highs
        old = model._loaded
        cols = np.flatnonzero((old.col_lb != b.col_lb) | (old.col_ub != b.col_ub)).astype(np.int32)
        if cols.size:
            h.changeColsBounds(int(cols.size), cols, b.col_lb[cols], b.col_ub[cols])
        cols = np.flatnonzero(old.integer != b.integer).astype(np.int32)
        if cols.size:
            h.changeColsIntegrality(int(cols.size), cols, b.integer[cols].astype(np.uint8))
        rows = np.flatnonzero((old.row_lb != b.row_lb) | (old.row_ub != b.row_ub)).astype(np.int32)
        if rows.size:
            h.changeRowsBounds(int(rows.size), rows, b.row_lb[rows], b.row_ub[rows])
    model._loaded = b.copy()
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    for key, val in (options or {}).items():
        h.setOptionValue(key, val)
    run0 = float(h.getRunTime())  # HiGHS's run clock accumulates over the runs of one instance
    h.run()
    wall = time.perf_counter() - t0
    highs_s = float(h.getRunTime()) - run0
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    MS = highspy.HighsModelStatus
    if status == MS.kOptimal and has_solution:
        obj = float(info.objective_function_value)
        bound = float(info.mip_dual_bound) if has_int else obj
        return Solution(True, "optimal", np.asarray(h.getSolution().col_value, dtype=float), obj, bound, wall, highs_s)
    name = h.modelStatusToString(status)
    if has_solution:
        obj = float(info.objective_function_value)
        lower = float(info.mip_dual_bound) if has_int else None
        return Solution(True, f"feasible ({name}; best plan found, not proven optimal)",
                        np.asarray(h.getSolution().col_value, dtype=float), obj, lower, wall, highs_s)
    if status in (MS.kInfeasible, MS.kUnboundedOrInfeasible):
        return Solution(False, "infeasible", wall_s=wall, highs_s=highs_s)
    return Solution(False, name, wall_s=wall, highs_s=highs_s)
