"""How well K nodes (or n particles) carry the limit measure on one common noise path.

`node_convergence`: d = 2, trapezoid nodes, uniform start; at depth times `times` the error of
the attention field at test points and of the half-circle masses, against a reference of `K_ref`
nodes driven by the same value matrices. `particle_convergence`: the same errors for n i.i.d.
uniform particles against the limit. Rates are least-squares slopes of log error on log K
(`fit_rate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..model.checks import ParameterError, _check_int, _check_real, _real_array, _require
from ..model.params import ModelParams, TimeGrid
from ..sim.budget import GIB, MEMORY_ENV, available_memory
from ..sim.options import StoppingRule
from ..sim.rng import derive_seed
from .flow import run_coupled
from .quadrature import circle_rule, sample_initial
from .statistics import _arc_counts, _field_at, arc_masses

__all__ = ["field_error_at", "fit_rate", "node_convergence", "particle_convergence"]

_TEST_POINTS = 64
_ARC_STARTS = np.array([0.0, np.pi / 2, np.pi, 3 * np.pi / 2])  # the four quarter-circles
_ARC = np.pi / 2  # half-circles carry exactly 1/2 from an antipodally symmetric start (docs)


_MIN_FIT_POINTS = 2  # a slope needs two points at distinct k
_NODE_BYTES = 1024  # memory a node of a system takes while it runs (state, weights, temporaries)


def _max_nodes() -> int:
    """The most nodes (or particles) one system may have: NODE_BYTES a node within
    `sim.budget.available_memory()` (TOKENSDE_MEMORY sets it)."""
    return max(2, available_memory() // _NODE_BYTES)


def _non_empty(values: Any) -> bool:
    """Whether `values` is a non-empty sequence or 1-D array (not a string, nor a scalar)."""
    seq = isinstance(values, Sequence) and not isinstance(values, str | bytes)
    return (seq or (isinstance(values, np.ndarray) and values.ndim == 1)) and len(values) > 0


def _check_nodes(name: str, value: Any, minimum: int) -> int:
    """`value` as a node count from `minimum` to `max_nodes()`, or ParameterError naming `name`
    with that range and where its top comes from."""
    count = _check_int(name, value, minimum)
    top = _max_nodes()
    _require(count <= top, name, f"an integer from {minimum} to {top} (about {_NODE_BYTES} bytes "
            f"a node fill the {available_memory() / GIB:.1f} GiB of memory available; "
            f"{MEMORY_ENV} sets it)", value)
    return count


def fit_rate(k: Sequence[float], err: Sequence[float]) -> float:
    """Least-squares slope of `log err` on `log k` (the algebraic order is minus this), over the
    points whose error is finite and > 0 (an error of exactly 0 has no logarithm).

    Args:
        k: Node (or particle) counts, finite and > 0.
        err: The error at each count, as many as `k`.

    Returns:
        The slope.

    Raises:
        ParameterError: `k` and `err` differ in length, `k` holds a value that is not finite
            and > 0, or fewer than MIN_FIT_POINTS points with an error that is finite and > 0
            sit at distinct counts (the slope would be undefined).
    """
    kk, ee = _real_array("k", k).ravel(), _real_array("err", err).ravel()
    _require(kk.size == ee.size, "k and err", "of the same length", (kk.size, ee.size))
    _require(bool(np.all(np.isfinite(kk) & (kk > 0))), "k", "finite numbers > 0", k)
    ok = np.isfinite(ee) & (ee > 0)
    _require(np.unique(kk[ok]).size >= _MIN_FIT_POINTS, "err",
            f"finite and > 0 at {_MIN_FIT_POINTS} or more distinct k (a slope needs "
            f"{_MIN_FIT_POINTS} points)", err)
    return float(np.polyfit(np.log(kk[ok]), np.log(ee[ok]), 1)[0])


def _states(p: ModelParams, T: float, dt: float, systems: list, seed: int
            ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    grid = TimeGrid.make(T=T, dt=dt)
    r = run_coupled(p, grid, systems, runs=1, seed=seed, stopping=StoppingRule(),
                    merge_tol=None)
    return list(zip(r.x, r.w, strict=True))


def field_error_at(state: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor],
                   p: ModelParams) -> float:
    """Max over `_TEST_POINTS` equispaced points of the circle of `|y_state(z) - y_ref(z)|`
    (`statistics._field_at`; one run each)."""
    a = 2 * np.pi * np.arange(_TEST_POINTS) / _TEST_POINTS
    pts = torch.as_tensor(np.stack([np.cos(a), np.sin(a)], -1))
    return float((_field_at(pts, *state, p) - _field_at(pts, *ref, p)).norm(dim=-1).max())


def _errors(state: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor],
            p: ModelParams, ordered: bool) -> dict[str, float]:
    hm, hr = _arc_counts(*state, _ARC_STARTS, _ARC), arc_masses(*ref, _ARC_STARTS, _ARC)
    out = {"field_err": field_error_at(state, ref, p),
           "arc_err_count": float(np.abs(hm - hr).max())}
    if ordered:
        out["arc_err_interp"] = float(np.abs(arc_masses(*state, _ARC_STARTS, _ARC) - hr).max())
    return out


def node_convergence(beta: float, Ks: Sequence[int], times: Sequence[float], K_ref: int = 2048,
                     dt: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """d = 2, uniform start, trapezoid nodes: errors of K nodes against `K_ref` nodes on one path,
    one row per (time, K): `field_err` (max over 64 test points of |y_K - y_ref|),
    `arc_err_count` (the four quarter-circle masses by node counting), `arc_err_interp` (by the
    piecewise-linear cumulative mass). (Half-circles carry exactly 1/2 here: the uniform start
    is antipodally symmetric and the flow keeps that symmetry.)

    Args:
        beta: Attention strength.
        Ks: Node counts to test.
        times: Depth times at which the errors are measured.
        K_ref: Nodes of the reference (larger than every K).
        dt: Layer step.
        seed: Seed of the common noise path.

    Returns:
        A DataFrame, one row per (time, K): `beta`, `T`, `K`, `field_err`, `arc_err_count`,
        `arc_err_interp`.
    """
    _require(_non_empty(Ks), "Ks", "a non-empty sequence of node counts", Ks)
    Ks = [_check_nodes("Ks", k, 2) for k in Ks]
    _require(_non_empty(times), "times", "a non-empty sequence of depth times", times)
    times = [_check_real("times", t, 0.0, strict=True) for t in times]
    K_ref = _check_nodes("K_ref", K_ref, 3)
    if max(Ks) >= K_ref:
        raise ParameterError(f"K_ref must exceed every K; got K_ref = {K_ref}, max K = {max(Ks)}")
    p = ModelParams(n=2, d=2, beta=beta)
    rows = []
    for T in times:
        systems = [(f"K{k}", *circle_rule(k)) for k in (*Ks, K_ref)]
        st = _states(p, T, dt, systems, seed)
        for k, s in zip(Ks, st[:-1], strict=True):
            rows.append({"beta": beta, "T": T, "K": k, **_errors(s, st[-1], p, True)})
    return pd.DataFrame(rows)


def particle_convergence(beta: float, ns: Sequence[int], T: float, draws: int = 16,
                         K_ref: int = 512, dt: float = 0.02, seed: int = 0) -> pd.DataFrame:
    """d = 2: `draws` i.i.d. uniform samples of n particles and the `K_ref`-node limit, all on one
    common path (`run_coupled(shared_path=True)`); one row per (n, draw): `field_err` and
    `arc_err_count` of `node_convergence`.

    Args:
        beta: Attention strength.
        ns: Particle counts.
        T: Depth time at which the errors are measured.
        draws: Independent samples of n particles per n.
        K_ref: Nodes of the limit.
        dt: Layer step.
        seed: Seed of the common noise path and of the samples.

    Returns:
        A DataFrame, one row per (n, draw): `field_err` and `arc_err_count`.
    """
    _require(_non_empty(ns), "ns", "a non-empty sequence of particle counts", ns)
    ns = [_check_nodes("ns", n, 1) for n in ns]
    draws, K_ref = _check_int("draws", draws, 1), _check_nodes("K_ref", K_ref, 2)
    p = ModelParams(n=2, d=2, beta=beta)
    grid = TimeGrid.make(T=T, dt=dt)
    kw: dict = {"seed": seed, "stopping": StoppingRule(), "merge_tol": None}
    lim = run_coupled(p, grid, [("limit", *circle_rule(K_ref))], runs=1, **kw)
    ref = (lim.x[0], lim.w[0])
    rows = []
    for n in ns:
        rng = np.random.default_rng(derive_seed(seed, n))
        x0 = np.stack([sample_initial(n, 2, rng) for _ in range(draws)])
        r = run_coupled(p, grid, [(f"n{n}", x0, None)], runs=draws, shared_path=True, **kw)
        for j in range(draws):
            rows.append({"beta": beta, "T": T, "n": n, "draw": j,
                         **_errors((r.x[0][j:j + 1], r.w[0][j:j + 1]), ref, p, False)})
    return pd.DataFrame(rows)
