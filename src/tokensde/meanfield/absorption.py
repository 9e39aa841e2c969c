"""The laws over noise paths of what a token system looks like at absorption: n particles and the limit.

`absorption_table` drives, on each noise path, the K-node limit and particle systems of several n
(i.i.d. or quasi-uniform starts) with the same value matrices, each until decided (every pair of
live nodes within `tol` of +-1: one atom or two antipodal atoms) or the horizon T, and returns one
row per system: P(bipolar) (minority mass > 0) by the reporting rule for undecided runs
(`stats.estimate_with_undecided`: over the decided runs with its Wilson interval, and the bounds
that the undecided runs allow), the minority mass's mean (t interval) and quantiles, the atoms, and
the time to decision, with the undecided fraction.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.clusters import Outcome, _outcome_codes
from ..analysis.stats import Estimate, _censored_quantiles, estimate_with_undecided, t_interval
from ..io.store import check_output, header, write_parquet
from ..model.checks import ParameterError, _check_choice, _check_int, _check_real, _require
from ..model.params import ModelParams, TimeGrid
from ..sim.budget import Budget
from ..sim.options import _DECIDE_TOL, Execution, StoppingRule
from ..sim.rng import derive_seed
from .flow import MERGE_TOL, FlowPlan, FlowResult, run_coupled
from .quadrature import (
    _check_mixture,
    _Component,
    _density_weights,
    _quasi_uniform,
    sample_initial,
    sphere_rule,
)
from .statistics import _atom_count, minority_mass

__all__ = ["STARTS", "absorption_table", "gap_slope", "run_table", "table_budget", "write_tables"]

STARTS: tuple[str, ...] = ("iid", "quasi", "mixture")
# the `mixture` start's law when none is given: one von Mises(-Fisher) law of concentration 1
# about e_1 (`parse_mixture`), an antipodally asymmetric start
_DEFAULT_MIXTURE = "1:1:0"
_DEFAULT_STARTS: tuple[str, ...] = ("iid", "quasi")  # the uniform law's two starts
_LIMIT = 0  # the value of `n` that stands for the limit (n = infinity) in tables
_INIT_STREAM = 0x494E4954  # `derive_seed` key of the i.i.d. initial samples
# the tables' decision tolerance, looser than DECIDE_TOL: the limit's nodes decide slowly
# (docs/absorption.md)
_TABLE_TOL = 1e-4
_TABLE_STOP = StoppingRule.decided(_TABLE_TOL)


def _parse_mixture(text: str, d: int) -> list[_Component]:
    """A von Mises(-Fisher) mixture written `MASS:KAPPA:ANGLE[;MASS:KAPPA:ANGLE...]`: components of
    mass > 0, concentration kappa >= 0 and mean direction `(cos a, sin a, 0, ...)`, a the ANGLE in
    degrees from e_1 in the plane of e_1, e_2 (the density is `sum mass exp(kappa <mu, x>)`,
    normalised, `quadrature._vmf_density`).

    Args:
        text: The components, e.g. '1:1:0' (one law about e_1) or '0.7:4:0;0.3:4:90'.
        d: The dimension (>= 2).

    Returns:
        The components `(mass, kappa, mean)`, checked (`quadrature._check_mixture`).
    """
    d = _check_int("d", d, 2)
    form = "components MASS:KAPPA:ANGLE separated by ';' (mass > 0, kappa >= 0, angle in degrees)"
    _require(isinstance(text, str) and text.strip() != "", "mixture", form, text)
    comps: list[_Component] = []
    for part in text.split(";"):
        fields = part.split(":")
        _require(len(fields) == 3, "mixture", form, text)
        try:
            mass, kappa, angle = (float(f) for f in fields)
        except ValueError:
            raise ParameterError(f"mixture must be {form}; got {text!r}") from None
        a = math.radians(_check_real("mixture angle", angle))
        comps.append((mass, kappa, [math.cos(a), math.sin(a), *([0.0] * (d - 2))]))
    _check_mixture(comps, d)
    return comps


def _particle_starts(n: int, d: int, runs: int, start: str, seed: int,
                    mixture: Sequence[_Component] | None = None) -> np.ndarray:
    """Initial particles `(runs, n, d)`: i.i.d. from the initial law (run r from the stream
    `derive_seed(seed, INIT_STREAM, n, r)`; 'iid', or 'mixture' from `mixture`, default
    DEFAULT_MIXTURE), or the quasi-uniform set (`quasi_uniform`) for all."""
    _check_choice("start", start, STARTS)
    if start == "mixture" and mixture is None:
        mixture = _parse_mixture(_DEFAULT_MIXTURE, d)
    if start == "quasi":
        if mixture is not None:
            raise ParameterError("start='quasi' is the uniform law's quasi-uniform set; with a "
                                 "von Mises mixture use start='iid'")
        return np.broadcast_to(_quasi_uniform(n, d, seed), (runs, n, d)).copy()
    return np.stack([sample_initial(n, d, np.random.default_rng(
        derive_seed(seed, _INIT_STREAM, n, r)), mixture) for r in range(runs)])


def _system_stats(res: FlowResult, index: int) -> dict[str, Any]:
    """Statistics of system `index` of `res` over its runs (see the module docstring); P(bipolar)
    `p_bipolar` is over the decided runs (nan when none is), `p_bipolar_lo, _hi` its 95 % Wilson
    interval, `p_bipolar_bound_lo, _hi` the bounds with every undecided run counted each way.

    Args:
        res: The coupled run (`flow.run_coupled`).
        index: Which of its systems.

    Returns:
        One row: counts, P(bipolar), the minority mass, atoms and time to decision.
    """
    x, w = res.x[index], res.w[index]
    at = res.decided_at[index]
    runs = len(at)
    done = at >= 0
    m = minority_mass(x, w)
    atoms = _atom_count(x, w)
    outcome = _outcome_codes(done, m > 0)  # the one outcome rule (analysis.clusters)
    k_bi, k_done = int((outcome == Outcome.BIPOLAR).sum()), int(done.sum())
    est = estimate_with_undecided(k_bi, k_done - k_bi, runs)
    lo, hi = est.ci or (math.nan, math.nan)
    md = m[done]
    mean, mlo, mhi = t_interval(md) if len(md) > 1 else (math.nan, math.nan, math.nan)
    qs = np.quantile(md, [0.1, 0.5, 0.9]) if len(md) else [math.nan] * 3
    t = np.where(done, at * res.grid.dt, np.nan)
    tq = _censored_quantiles(t, [0.5, 0.9])
    return {"runs": runs, "p_decided": float(done.mean()), "k_decided": k_done,
            "k_bipolar": k_bi, "p_bipolar": est.p, "p_bipolar_lo": lo, "p_bipolar_hi": hi,
            "p_bipolar_bound_lo": est.bounds[0], "p_bipolar_bound_hi": est.bounds[1],
            "minority_mean": float(mean), "minority_lo": float(mlo), "minority_hi": float(mhi),
            "minority_q10": float(qs[0]), "minority_q50": float(qs[1]),
            "minority_q90": float(qs[2]), "atoms_mean": float(atoms[done].mean()) if done.any()
            else math.nan, "t_decided_median": tq[0], "t_decided_q90": tq[1],
            "horizon": res.grid.T}


def _bipolar_estimate(row: dict[str, Any]) -> Estimate:
    """P(bipolar) of a row of `system_stats` by the reporting rule: `k_bipolar` hits and
    `k_decided - k_bipolar` one-cluster runs of `runs` (`stats.estimate_with_undecided`).

    Args:
        row: A row with `k_bipolar`, `k_decided` and `runs`.

    Returns:
        The `Estimate`.
    """
    k, dec = int(row["k_bipolar"]), int(row["k_decided"])
    return estimate_with_undecided(k, dec - k, int(row["runs"]))


def _bipolar_text(row: dict[str, Any]) -> str:
    """P(bipolar) of a row as text: 'undecided' when no run decided (no probability); else the
    estimate over the decided runs with its 95 % Wilson interval, and, when some runs are
    undecided, the bounds with every undecided run counted each way.

    Args:
        row: A row of `system_stats` (`k_bipolar`, `k_decided`, `runs`).

    Returns:
        E.g. '0.75 [0.53, 0.89]' or '0.75 [0.53, 0.89] bounds [0.40, 0.95]' or 'undecided'.
    """
    est = _bipolar_estimate(row)
    if est.decided == 0:
        return "undecided"
    p, ci, bounds = est.parts()
    return f"{p} {ci}" + ("" if est.decided == est.runs else f" bounds {bounds}")


def absorption_table(d: int, beta: float, ns: Sequence[int], K: int, start: str = "iid",
                     runs: int = 100, seed: int = 0, T: float = 40.0, dt: float = 0.02, *,
                     stopping: StoppingRule = _TABLE_STOP, merge_tol: float | None = MERGE_TOL,
                     mixture: Sequence[_Component] | None = None,
                     execution: Execution = Execution(), with_limit: bool = True
                     ) -> tuple[list[dict[str, Any]], dict[int, np.ndarray]]:
    """Rows (one per system: the K-node limit, `n = LIMIT`, unless not `with_limit`, then each n of `ns`) of
    `system_stats` for `runs` common noise paths of the pure-noise model (M = 0, softmax, Gaussian
    matrix noise); and the per-run minority masses `{n: (runs,)}` (nan where undecided).

    Args:
        d: Dimension.
        beta: Attention strength.
        ns: Particle counts.
        K: Nodes of the limit measure.
        start: 'iid', 'quasi' (quasi-uniform) or 'mixture' (i.i.d. from `mixture`, default
            DEFAULT_MIXTURE) particle starts.
        runs: Number of common noise paths.
        seed: Root seed.
        T: Depth time of the horizon.
        dt: Layer step.
        stopping: `StoppingRule.decided(tol)`: each run until every system is decided at `tol`
            (None: DECIDE_TOL), tested (and merged) every `decide_every` layers (None: depth time
            0.05); default TABLE_TOL.
        merge_tol: Nodes closer than this merge (None: never).
        mixture: A von Mises-Fisher mixture for the initial law (None: uniform).
        execution: The device, the dtype, the runs advanced together (`batch_size`, None: all)
            and the attention evaluator (`run_coupled`'s).
        with_limit: Include the K-node limit.

    Returns:
        `(rows, masses)`: one row of statistics per system, and each system's minority mass per
        run `(runs,)` (nan where undecided), keyed by n (`LIMIT` for the limit).
    """
    d, K = _check_int("d", d, 2), _check_int("K", K, 2)
    beta = _check_real("beta", beta, 0.0)
    _require(not isinstance(ns, str), "ns", "a sequence of particle counts", ns)
    ns = [_check_int("ns", n, 2) for n in ns]
    runs, seed = _check_int("runs", runs, 1), _check_int("seed", seed, 0)
    tol = _table_tol(stopping)
    p = ModelParams(n=2, d=d, beta=beta)
    if _check_choice("start", start, STARTS) == "mixture" and mixture is None:
        mixture = _parse_mixture(_DEFAULT_MIXTURE, d)
    nodes, q = sphere_rule(K, d)
    systems: list[tuple[str, Any, Any]] = [("limit", nodes, _density_weights(nodes, q, mixture))
                                            ] if with_limit else []
    systems += [(f"n{n}", _particle_starts(n, d, runs, start, seed, mixture), None) for n in ns]
    res = run_coupled(p, TimeGrid.make(T=T, dt=dt), systems, runs=runs, seed=seed,
                      stopping=StoppingRule.decided(tol, stopping.decide_every),
                      merge_tol=merge_tol, execution=execution)
    rows, masses = [], {}
    for i, n in enumerate([_LIMIT, *ns] if with_limit else ns):
        st = _system_stats(res, i)
        rows.append({"d": d, "beta": beta, "n": n, "K": K if n == _LIMIT else n, "start": start,
                     "seed": seed, "tol": tol, **st})
        m = minority_mass(res.x[i], res.w[i])
        masses[n] = np.where(res.decided_at[i] >= 0, m, np.nan)
    return rows, masses


def _table_tol(stopping: StoppingRule) -> float:
    """The decision tolerance of a table's rule (DECIDE_TOL when None); ParameterError unless
    the rule is a `StoppingRule.decided` (the table is of systems at absorption)."""
    _require(isinstance(stopping, StoppingRule) and stopping.until == "decided", "stopping",
            "StoppingRule.decided(tol) (a table runs each system until it is decided)", stopping)
    return _DECIDE_TOL if stopping.tol is None else stopping.tol


def gap_slope(masses: dict[int, Sequence[float]], boots: int = 2000, seed: int = 0,
              level: float = 0.95) -> dict[str, Any]:
    """The slope b of `log(1/2 - E m_n) = a + b log n`, m_n the minority mass of n particles,
    by least squares over every n given (no n left out for its gap), with a percentile interval
    from a bootstrap over noise paths. Path r of every n is the same noise path (the first
    `len(masses[n])` paths of one table), so a replicate resamples paths, not cells: each path
    is drawn with all the n that hold it, within its stratum (the paths held by the same n).

    Args:
        masses: `{n: per-path minority masses}` (n >= 2; every run decided: no nan).
        boots: bootstrap replicates (>= 100).
        seed: the bootstrap's seed.
        level: the interval's coverage, in (0, 1).

    Returns:
        `slope`, `lo`, `hi`, `intercept`, `n`, `gap` and `paths` (per n, in increasing n),
        `boots`, and `degenerate` (replicates with a gap <= 0 at some n, left out).
    """
    _require(isinstance(masses, dict) and len(masses) >= 2, "masses",
            "a dict {n: per-path minority masses} with at least 2 particle counts", masses)
    ns = sorted(_check_int("n", n, 2) for n in masses)
    cols = [np.asarray(masses[n], dtype=np.float64) for n in ns]
    for n, c in zip(ns, cols, strict=True):
        _require(c.ndim == 1 and len(c) >= 2 and bool(np.all(np.isfinite(c)))
                and bool(np.all((c >= 0) & (c <= 0.5))), "masses",
                "per-path minority masses in [0, 1/2], at least 2 per n, every run decided",
                f"n = {n}: {c!r}")
    boots = _check_int("boots", boots, 100)
    level = _check_real("level", level, 0.0, strict=True)
    _require(level < 1, "level", "a coverage in (0, 1)", level)
    held = np.array([len(c) for c in cols])
    top = int(held.max())
    table = np.full((top, len(ns)), np.nan)
    for k, c in enumerate(cols):
        table[:len(c), k] = c
    logn = np.log(np.asarray(ns, dtype=np.float64))

    def fit(gap: np.ndarray) -> tuple[float, float]:
        b, a = np.polyfit(logn, np.log(gap), 1)
        return float(b), float(a)

    gap = 0.5 - np.array([c.mean() for c in cols])
    _require(bool(np.all(gap > 0)), "masses", "a mean minority mass below 1/2 at every n",
            dict(zip(ns, gap.tolist(), strict=True)))
    slope, intercept = fit(gap)
    # strata: paths held by the same set of n (the first `held` paths of each n)
    edges = np.unique(np.concatenate([[0], held]))
    strata = [np.arange(lo, hi) for lo, hi in itertools.pairwise(edges)]
    rng = np.random.default_rng(seed)
    slopes = []
    for _ in range(boots):
        pick = np.concatenate([rng.choice(s, len(s)) for s in strata])
        g = 0.5 - np.nanmean(table[pick], axis=0)
        if np.all(g > 0):
            slopes.append(fit(g)[0])
    q = (1 - level) / 2
    lo, hi = np.quantile(slopes, [q, 1 - q]) if slopes else (math.nan, math.nan)
    return {"slope": slope, "lo": float(lo), "hi": float(hi), "intercept": intercept,
            "n": ns, "gap": gap.tolist(), "paths": held.tolist(), "boots": boots,
            "degenerate": boots - len(slopes)}


_ROW_BYTES = 600  # a row of the long minority table while it is built (a Python dict)


def table_budget(ds: Sequence[int], betas: Sequence[float], ns: Sequence[int], K: int,
                 starts: Sequence[str] = _DEFAULT_STARTS, runs: int = 100, T: float = 40.0,
                 dt: float = 0.02, with_limit: bool = True,
                 execution: Execution = Execution()) -> Budget:
    """Memory and work of `run_table` before it runs: per cell (d, beta, start) the budget of
    the plan of its flow (`flow.FlowPlan.budget`: the systems of K nodes for the limit and of
    each n, their attention as `execution.attention_eval` takes it), the cells one after
    another (the memory of the largest), plus ROW_BYTES per run and system of the table kept;
    an upper bound (runs stop once decided)."""
    runs = _check_int("runs", runs, 1)
    sizes = [*([_check_int("K", K, 2)] if with_limit else []), *(_check_int("n", n, 2) for n in ns)]
    cells = len(ds) * len(betas) * len(starts)
    grid = TimeGrid.make(T=T, dt=dt)
    plans = [FlowPlan.of(ModelParams(n=2, d=_check_int("d", d, 2), beta=_check_real("beta", b, 0.0)),
                          grid, sizes, runs, execution) for d in ds for b in betas]
    bs = [p.budget() for p in plans]
    per_run = max(b.per_run for b in bs) + _ROW_BYTES * len(sizes) * cells
    return Budget("this table", per_run * runs, per_run, runs,
                  sum(b.work for b in bs) * len(starts),
                  f"{cells} cells (d, beta, start) of {runs} runs, "
                  + (f"the limit at K = {K}, " if with_limit else "")
                  + f"n = {', '.join(map(str, ns)) or 'none'}, {grid.steps} layers at most",
                  ("runs", "K", "n", "d"), bounded=False, longer=("runs", "K", "n", "time"),
                  steps=sum(b.steps for b in bs) * len(starts))


def _system_line(row: dict[str, Any]) -> str:
    """One line on a finished system: its cell, the decided fraction, P(bipolar) (`bipolar_text`)
    and the mean minority mass with its 95 % t interval.

    Args:
        row: A row of `absorption_table` (d, beta, start, n, the statistics, `wall_s`).

    Returns:
        The line.
    """
    return (f"d {row['d']} beta {row['beta']:g} {row['start']} n {row['n']}: decided "
            f"{row['p_decided']:.3f}, P(bipolar) {_bipolar_text(row)}, minority "
            f"{row['minority_mean']:.4f} [{row['minority_lo']:.4f}, {row['minority_hi']:.4f}], "
            f"{row['wall_s']:.0f} s")


def run_table(ds: Sequence[int], betas: Sequence[float], ns: Sequence[int], K: int,
              starts: Sequence[str] = _DEFAULT_STARTS, runs: int = 100, seed: int = 0, T: float = 40.0,
              dt: float = 0.02, *, stopping: StoppingRule = _TABLE_STOP,
              merge_tol: float | None = MERGE_TOL, execution: Execution = Execution(),
              budget_s: float | None = None, log: Callable[[str], None] | None = None
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`absorption_table` for every (d, beta, start) (`stopping`, `merge_tol`, `execution` as
    there): the rows, and the per-run minority masses in long form (d, beta, start, n, run,
    minority). With `budget_s`, no new cell starts once that many seconds have passed (the
    cells left out are simply absent from the table); `log` gets a line per system as each cell
    ends."""
    for st in starts:
        _check_choice("start", st, STARTS)
    t0 = time.perf_counter()
    rows, long = [], []
    for st in starts:  # i.i.d. starts (the question) first, then the quasi-uniform contrast
        for d in ds:
            for beta in betas:
                if budget_s is not None and time.perf_counter() - t0 > budget_s:
                    continue
                cell_seed = derive_seed(seed, d, round(1000 * beta))  # same paths for both starts
                tc = time.perf_counter()
                r, m = absorption_table(d, beta, ns, K, st, runs, cell_seed, T, dt,
                                        stopping=stopping, merge_tol=merge_tol,
                                        execution=execution)
                for row in r:
                    row["wall_s"] = time.perf_counter() - tc
                    if log is not None:
                        log(_system_line(row))
                rows += r
                for n, v in m.items():
                    long += [{"d": d, "beta": beta, "start": st, "n": n, "run": i,
                              "minority": float(x)} for i, x in enumerate(v)]
    return pd.DataFrame(rows), pd.DataFrame(long)


_KIND_TABLE = "meanfield_table"


def write_tables(out: str | os.PathLike, table: pd.DataFrame, minority: pd.DataFrame,
                 **params: Any) -> list[Path]:
    """Write `table.parquet` and `minority.parquet` under directory `out` (created), each with a
    header carrying `params` and the package version."""
    where = check_output(out, "out", directory=True)
    where.mkdir(parents=True, exist_ok=True)
    meta = header(_KIND_TABLE, **params)
    return [write_parquet(table, where / "table.parquet", meta),
            write_parquet(minority, where / "minority.parquet", meta)]
