"""Time to decision of two tokens (spec §5): how long a pair stays undecided, from theory.

A pair is *decided* once `1 - |rho| < tol`. In `z = artanh(rho)` the §5 diffusion has bounded
coefficients, and the decision time is the exit time of `[-z_tol, z_tol]`,
`z_tol = artanh(1 - tol)`. Its survival function `S(t) = P(tau > t)` solves the backward equation
`u_t = a u' + b^2 u''/2`, `u(0) = 1` inside and `u = 0` on the edges, averaged over the initial law.
It is computed here by finite differences in z, stepped in time by Crank-Nicolson; its tail
decays at the principal rate `kappa_0` (`decision_rate`), the top eigenvalue of the symmetrised
generator. `survival_law` and `principal_rate` take any coefficient object of
`tokensde.theory.coefficients` (with bounded `z` coefficients); `survival`, `decision_rate` and
`median_time` are the spec model's. The probability of deciding antipodal (`p_anti_at_tol`) is
the first-passage engine's (`tokensde.theory.first_passage`).

As `tol -> 0`, `kappa_0` tends to the slower of the two boundary rates (`boundary_rates`): near an
attracting edge the log-gap is a Brownian motion with drift `-mu` (the Lyapunov exponent) and
variance `s^2` per unit time, whose first-passage tail decays like `exp(-mu^2 t / (2 s^2))`:
merged `mu = sigma^2 (d - 1)`, `s^2 = 4 sigma^2`; antipodal `mu = -lambda_anti`,
`s^2 = 8 sigma^2 / (1 + sech 2beta)`. Near `beta_c`, `mu -> 0` and decisions take ever longer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import linalg, special

from ..model.params import ParameterError, _check_int, _check_real
from . import first_passage as fp
from .coefficients import RhoDiffusion, _SpecPair
from .first_passage import PAIR_TOL
from .two_tokens import _as_floats, check_rho0, lyapunov_antipodal

__all__ = ["decision_rate", "median_time", "p_anti_at_tol", "survival", "survival_law"]

_NODES = 1200  # interior grid nodes in z (at least; more where the drift is strong)


def _boundary_rates(beta: float, d: float, sigma: float = 1.0) -> dict[str, float]:
    """Tail rates `mu^2 / (2 s^2)` of the time to reach a small gap at each attracting edge
    (nan for an edge that repels)."""
    b, dd, s = _check_real("beta", beta), _check_real("d", d, 2.0), _check_real("sigma", sigma)
    lam = float(lyapunov_antipodal(b, dd, s))
    s_anti = 8.0 * s * s / (1.0 + 1.0 / math.cosh(min(2.0 * b, 700.0)))
    return {"merged": (s * s * (dd - 1.0)) ** 2 / (8.0 * s * s),
            "antipodal": lam * lam / (2.0 * s_anti) if lam < 0 else math.nan}


_MAX_NODES = 200_000  # finite-difference nodes beyond which the law is refused (memory, time)
_MAX_WORK = 3e8  # time steps x nodes beyond which `survival` is refused (tens of seconds)


def _node_count(model: RhoDiffusion, tol: float, nodes: int) -> int:
    """Nodes for central differences with positive off-diagonals (`h < b^2 / |a|`); refused by
    name when more than `_MAX_NODES` (large `d`)."""
    if not model.bounded_z:
        raise ParameterError("mlp_sigma must be 0 for the decision-time law: with MLP noise the "
                             "z coefficients are unbounded")
    edge = math.atanh(1.0 - tol)
    a_max, b2_min = model.noise_bound()
    n = max(nodes, int(2.0 * edge * a_max / (0.5 * b2_min)) + 1)
    if n > _MAX_NODES:
        raise ParameterError(f"d must be small enough for the decision-time grid (it needs {n} "
                             f"nodes at d={model.d:g}, tol={tol:g}; at most {_MAX_NODES})")
    return n


def _generator(model: RhoDiffusion, tol: float, nodes: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Nodes `z`, and the generator symmetrised by a diagonal similarity (same eigenvalues):
    diagonal, off-diagonal, and the node spacing."""
    edge = math.atanh(1.0 - tol)
    n = _node_count(model, tol, nodes)
    z = np.linspace(-edge, edge, n + 2)[1:-1]
    h = z[1] - z[0]
    a, b = model.z_coefficients(z)
    diff = 0.5 * b * b / (h * h)
    up, down = diff + 0.5 * a / h, diff - 0.5 * a / h  # A[i, i+1], A[i, i-1]
    diag = -2.0 * diff
    # D_{i+1} / D_i = sqrt(A[i, i+1] / A[i+1, i]) makes D A D^-1 symmetric, off-diagonal:
    off = np.sqrt(up[:-1] * down[1:])
    return z, diag, off, h


def _check_first_passage(beta: float, d: float, tol: float,
                        sigma: float) -> tuple[float, float, float, float]:
    """Validated `(beta, d, tol, sigma)` of a first-passage question; ParameterError names each."""
    b = _check_real("beta", beta)
    dd = _check_real("d", d, 2.0)
    t = _check_real("tol", tol, 0.0, strict=True)
    if not 1e-14 <= t <= 0.5:
        raise ParameterError(f"tol must be a number in [1e-14, 0.5]; got {tol!r}")
    s = _check_real("sigma", sigma, 0.0, strict=True)
    return b, dd, t, s


def decision_rate(beta: float, d: float, tol: float = PAIR_TOL, sigma: float = 1.0,
                  nodes: int = _NODES) -> float:
    """Principal rate `kappa_0`: `P(tau > t) ~ C exp(-kappa_0 t)` for the decision time at `tol`.

    Args:
        beta: Attention strength.
        d: Dimension.
        tol: The decision tolerance.
        sigma: Scale of the value noise.
        nodes: Grid nodes of the finite-difference generator.

    Returns:
        `kappa_0`, the slowest decay rate of the survival function.
    """
    b, dd, t, s = _check_first_passage(beta, d, tol, sigma)
    return _principal_rate(_SpecPair(b, dd, s), t, nodes)


def _principal_rate(model: RhoDiffusion, tol: float, nodes: int = _NODES) -> float:
    """`kappa_0` of any `rho` diffusion with bounded `z` coefficients: minus the top eigenvalue
    of its generator on `[-z_tol, z_tol]` with absorbing edges."""
    _, diag, off, _ = _generator(model, tol, _check_int("nodes", nodes, 50))
    top = linalg.eigh_tridiagonal(diag, off, select="i", select_range=(len(diag) - 1,
                                                                        len(diag) - 1),
                                  eigvals_only=True)
    return float(-top[0])


def _initial_weights(z: np.ndarray, d: float, rho0: float | str) -> np.ndarray:
    """Probability of each node under the initial law (a point mass is split linearly)."""
    w = np.zeros_like(z)
    if rho0 == "uniform":
        a = 0.5 * (d - 1.0)
        h = z[1] - z[0]
        edges = np.tanh(np.concatenate([[z[0] - h / 2], z + h / 2]))
        cdf = special.betainc(a, a, 0.5 * (1.0 + np.clip(edges, -1.0, 1.0)))
        w = np.diff(cdf)
        return w / w.sum()
    z0 = math.atanh(max(-1.0 + 1e-300, min(1.0 - 1e-16, float(rho0))))
    k = np.searchsorted(z, z0)
    if k == 0 or k == len(z):
        return w  # starts decided
    f = (z0 - z[k - 1]) / (z[k] - z[k - 1])
    w[k - 1], w[k] = 1.0 - f, f
    return w


def survival(times: np.ndarray, beta: float, d: float, rho0: float | str = "uniform",
             tol: float = PAIR_TOL, sigma: float = 1.0, nodes: int = _NODES) -> np.ndarray:
    """`P(tau > t)` at each of `times` for the §5 pair started at `rho0` (or 'uniform').

    The backward equation `u_t = A u` (A the finite-difference generator) is stepped by
    Crank-Nicolson, after four implicit-Euler steps that damp the jump of `u(0) = 1` at the
    edges; `S(t) = sum_i w_i u_i(t)` with `w` the initial law on the nodes.

    Args:
        times: Depth times `(K,)`, increasing.
        beta: Attention strength.
        d: Dimension.
        rho0: Initial inner product, or 'uniform'.
        tol: The decision tolerance.
        sigma: Scale of the value noise.
        nodes: Grid nodes of the finite-difference generator.

    Returns:
        `P(tau > t)` at each time, `(K,)`.
    """
    b, dd, t, s = _check_first_passage(beta, d, tol, sigma)
    return survival_law(_SpecPair(b, dd, s), times, rho0, t, nodes)


def survival_law(model: RhoDiffusion, times: Any, rho0: float | str = "uniform",
                 tol: float = PAIR_TOL, nodes: int = _NODES) -> np.ndarray:
    """`P(tau > t)` at each of `times` for any `rho` diffusion with bounded `z` coefficients
    (see `survival`)."""
    tt = _as_floats("times", times)
    if tt.ndim != 1 or not np.all(np.isfinite(tt)) or np.any(tt < 0):
        raise ParameterError("times must be a 1-D array of finite numbers >= 0")
    z, diag, up, down = _tridiagonal(model, tol, _check_int("nodes", nodes, 50))
    w = _initial_weights(z, model.d, check_rho0(rho0))
    order = np.argsort(tt)
    out = np.empty_like(tt)
    u = np.ones_like(z)
    now, first = 0.0, True
    h_max = 0.02 / max(1.0, model.noise_bound()[0] / 4.0)
    work = math.ceil(float(tt.max(initial=0.0)) / h_max) * len(z)
    if work > _MAX_WORK:
        raise ParameterError(f"times must end by {_MAX_WORK * h_max / len(z):.4g} at d={model.d:g}"
                             f", tol={tol:g} (time steps x nodes <= {_MAX_WORK:g}); got "
                             f"{float(tt.max()):g}")
    for k in order:
        span = tt[k] - now
        steps = math.ceil(span / h_max - 1e-12) if span > 0 else 0
        for _ in range(steps):
            h = span / steps
            if first:
                for _ in range(4):
                    u = _implicit_step(u, diag, up, down, h / 4, 1.0)
                first = False
            else:
                u = _implicit_step(u, diag, up, down, h, 0.5)
        now = tt[k]
        out[k] = w @ u
    return np.clip(out, 0.0, 1.0)


def _tridiagonal(model: RhoDiffusion, tol: float, nodes: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Nodes and the generator's diagonal, super-diagonal `A[i, i+1]` and sub-diagonal
    `A[i+1, i]` (Dirichlet edges)."""
    z, diag, _, _ = _generator(model, tol, nodes)
    h = z[1] - z[0]
    a, b = model.z_coefficients(z)
    half = 0.5 * b * b / (h * h)
    return z, diag, (half + 0.5 * a / h)[:-1], (half - 0.5 * a / h)[1:]


def _implicit_step(u: np.ndarray, diag: np.ndarray, up: np.ndarray, down: np.ndarray,
                   h: float, theta: float) -> np.ndarray:
    """One theta-step of `u_t = A u`: `(I - theta h A) u' = (I + (1 - theta) h A) u`."""
    rhs = u.copy()
    if theta < 1.0:
        c = (1.0 - theta) * h
        rhs += c * diag * u
        rhs[:-1] += c * up * u[1:]
        rhs[1:] += c * down * u[:-1]
    band = np.zeros((3, len(u)))
    band[0, 1:] = -theta * h * up
    band[1] = 1.0 - theta * h * diag
    band[2, :-1] = -theta * h * down
    return linalg.solve_banded((1, 1), band, rhs)


def median_time(beta: float, d: float, rho0: float | str = "uniform", tol: float = PAIR_TOL,
                sigma: float = 1.0, t_max: float = 1e4) -> float:
    """Median decision time, to 0.1 % of the horizon searched (nan if more than half are
    undecided at `t_max`).

    Args:
        beta: Attention strength.
        d: Dimension.
        rho0: Initial inner product, or 'uniform'.
        tol: The decision tolerance.
        sigma: Scale of the value noise.
        t_max: The horizon searched.

    Returns:
        The median depth time to decision.
    """
    t_max = _check_real("t_max", t_max, 0.0, strict=True)
    span = 1.0
    while True:
        grid = np.linspace(0.0, span, 1001)
        try:
            surv = survival(grid, beta, d, rho0, tol, sigma)
        except ParameterError as err:
            if not str(err).startswith("times"):
                raise
            raise ParameterError(f"t_max must be at most {span / 4:g} here: the median is not "
                                 f"reached by then, and {err}") from None
        if surv[-1] <= 0.5:
            k = int(np.argmax(surv <= 0.5))
            lo, hi = surv[k - 1], surv[k]
            return float(grid[k - 1] + (lo - 0.5) / (lo - hi) * (grid[k] - grid[k - 1]))
        if span >= t_max:
            return math.nan
        span = min(4.0 * span, t_max)


def p_anti_at_tol(beta: float, d: float, rho0: float | str = "uniform", tol: float = PAIR_TOL,
                  sigma: float = 1.0) -> float:
    """Probability that the §5 pair reaches `1 + rho < tol` before `1 - rho < tol`: what a run
    stopped at decision with tolerance `tol` reports. It tends to `p_anti` as `tol -> 0` above
    `beta_c`, and to 0 below it; the difference is the chance that a pair once within `tol` of
    -1 leaves again (`first_passage.hitting_probability` on `SpecPair`).

    Args:
        beta: Attention strength.
        d: Dimension.
        rho0: Initial inner product, or 'uniform'.
        tol: The decision tolerance.
        sigma: Scale of the value noise.

    Returns:
        The probability of deciding antipodal.
    """
    b, dd, t, s = _check_first_passage(beta, d, tol, sigma)
    return fp.hitting_probability(_SpecPair(b, dd, s), rho0, t)
