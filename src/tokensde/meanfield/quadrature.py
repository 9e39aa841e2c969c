"""Quadrature nodes on the unit sphere S^{d-1} and the weights an initial density gives them.

A rule is `(nodes (K, d), weights (K,))` with weights summing to 1, so that
`sum_k w_k f(x_k) ≈ ∫ f dsigma` for the uniform probability `sigma`:

- d = 2, `circle`: the trapezoid rule at angles `2 pi (k + phase) / K`; exact for trigonometric
  polynomials of degree < K, spectrally accurate for smooth (analytic) f.
- d = 3, `gauss`: Gauss-Legendre in `z = cos(theta)` (m nodes) times the trapezoid rule in the
  azimuth (2m nodes), K = 2 m^2 nodes; exact for spherical polynomials of degree <= 2m - 1.
- d = 3, `fibonacci`: the Fibonacci lattice, equal weights (a low-discrepancy set, no exactness).
- any d, `qmc`: a scrambled Sobol' set mapped through the normal inverse CDF and normalised,
  equal weights (randomised quasi-Monte Carlo; error about K^-1 up to logs for smooth f).

numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special, stats

from ..model.checks import ParameterError, _check_int, _check_real, _real_array, _require

__all__ = ["circle_rule", "sample_initial", "sphere_rule"]

_RULES: tuple[str, ...] = ("auto", "circle", "gauss", "fibonacci", "qmc")


def circle_rule(K: int, phase: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid rule on the circle: `x_k = (cos a_k, sin a_k)`, `a_k = 2 pi (k + phase)/K`, `w_k = 1/K`."""
    K = _check_int("K", K, 1)
    phase = _check_real("phase", phase, -math.inf)
    a = 2.0 * np.pi * (np.arange(K) + phase) / K
    return np.stack([np.cos(a), np.sin(a)], -1), np.full(K, 1.0 / K)


def _gauss_sphere_rule(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Product rule on S^2, `2 m^2` nodes: Gauss-Legendre in `z` (m nodes) times the trapezoid
    rule in the azimuth (2m nodes, half-step offset); exact for polynomials of degree <= 2m - 1."""
    m = _check_int("m", m, 1)
    z, gw = np.polynomial.legendre.leggauss(m)
    phi = 2.0 * np.pi * (np.arange(2 * m) + 0.5) / (2 * m)
    zz, pp = np.meshgrid(z, phi, indexing="ij")
    r = np.sqrt(np.clip(1.0 - zz**2, 0.0, None))
    x = np.stack([r * np.cos(pp), r * np.sin(pp), zz], -1).reshape(-1, 3)
    w = np.repeat(gw / 2.0, 2 * m) / (2 * m)
    return x, w


def _fibonacci_rule(K: int) -> tuple[np.ndarray, np.ndarray]:
    """Fibonacci lattice on S^2: `z_k = 1 - (2k + 1)/K`, azimuth `k` times the golden angle."""
    K = _check_int("K", K, 1)
    k = np.arange(K)
    z = 1.0 - (2.0 * k + 1.0) / K
    phi = k * np.pi * (3.0 - math.sqrt(5.0))
    r = np.sqrt(np.clip(1.0 - z**2, 0.0, None))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], -1), np.full(K, 1.0 / K)


def _qmc_rule(K: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scrambled Sobol' points in (0,1)^d through the normal inverse CDF, normalised; `w_k = 1/K`."""
    K, d, seed = _check_int("K", K, 1), _check_int("d", d, 2), _check_int("seed", seed, 0)
    u = stats.qmc.Sobol(d, scramble=True, seed=np.random.default_rng(seed)).random(K)
    g = stats.norm.ppf(np.clip(u, 1e-12, 1.0 - 1e-12))
    return g / np.linalg.norm(g, axis=-1, keepdims=True), np.full(K, 1.0 / K)


def _default_rule(d: int) -> str:
    """The rule `auto` picks: circle (d = 2), gauss (d = 3), qmc (d > 3)."""
    return {2: "circle", 3: "gauss"}.get(d, "qmc")


def sphere_rule(K: int, d: int, rule: str = "auto", seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """About `K` nodes of `rule` on S^{d-1} (gauss rounds to `2 m^2`, `m = round(sqrt(K/2))`).

    Args:
        K: About how many nodes.
        d: Dimension of the sphere's ambient space.
        rule: 'auto' (by d), 'circle', 'gauss', 'fibonacci' or 'qmc'.
        seed: Seed of the 'qmc' scrambling.

    Returns:
        `(nodes (K', d), weights (K',))`, weights summing to 1.
    """
    K, d, seed = _check_int("K", K, 1), _check_int("d", d, 2), _check_int("seed", seed, 0)
    if rule not in _RULES:
        raise ParameterError(f"rule must be one of {', '.join(_RULES)}; got {rule!r}")
    rule = _default_rule(d) if rule == "auto" else rule
    if rule == "circle":
        if d != 2:
            raise ParameterError(f"rule='circle' needs d = 2; got d = {d}")
        return circle_rule(K)
    if rule in ("gauss", "fibonacci") and d != 3:
        raise ParameterError(f"rule={rule!r} needs d = 3; got d = {d}")
    if rule == "gauss":
        return _gauss_sphere_rule(max(1, round(math.sqrt(K / 2))))
    if rule == "fibonacci":
        return _fibonacci_rule(K)
    return _qmc_rule(K, d, seed)


def _quasi_uniform(n: int, d: int, seed: int = 0) -> np.ndarray:
    """`n` equal-weight, evenly spread points on S^{d-1} `(n, d)`: equispaced (d = 2), Fibonacci
    (d = 3), scrambled Sobol' (d > 3); the quasi-uniform particle start."""
    n, d, seed = _check_int("n", n, 1), _check_int("d", d, 2), _check_int("seed", seed, 0)
    rule = {2: "circle", 3: "fibonacci"}.get(d, "qmc")
    return sphere_rule(n, d, rule, seed)[0]


# A von Mises(-Fisher) mixture: components (mass, concentration kappa, mean direction (d,)).
_Component = tuple[float, float, Sequence[float]]


def _vmf_density(x: np.ndarray, kappa: float, mu: np.ndarray) -> np.ndarray:
    """Density of vMF(mu, kappa) against the uniform probability on S^{d-1}:
    `exp(kappa (<mu, x> - 1)) / E_sigma[exp(kappa (x_1 - 1))]`, with
    `E_sigma[exp(kappa x_1)] = Gamma(d/2) (kappa/2)^(1 - d/2) I_{d/2-1}(kappa)`; `x` finite
    points `(..., d)`, `kappa >= 0`, `mu` a unit vector `(d,)`."""
    x = _real_array("x", x)
    _require(x.ndim >= 1 and x.shape[-1] >= 2 and bool(np.all(np.isfinite(x))), "x",
            "finite points (..., d), d >= 2", f"shape {x.shape}" if x.ndim else x)
    d = x.shape[-1]
    kappa = _check_real("kappa", kappa, 0.0)
    mu = _real_array("mu", mu)
    _require(mu.shape == (d,) and bool(np.all(np.isfinite(mu))) and
            abs(float(np.linalg.norm(mu)) - 1.0) < 1e-6, "mu", f"a unit vector of length d = {d}",
            mu)
    if kappa == 0.0:
        return np.ones(x.shape[:-1])
    nu = d / 2.0 - 1.0
    log_norm = (special.gammaln(d / 2.0) - nu * math.log(kappa / 2.0)
                + math.log(special.ive(nu, kappa)))
    return np.exp(kappa * (x @ mu - 1.0) - log_norm)


def _check_mixture(mixture: Sequence[_Component], d: int) -> list[tuple[float, float, np.ndarray]]:
    """Components with masses > 0 (normalised to sum 1), kappa >= 0 and unit mean directions."""
    if len(mixture) == 0:
        raise ParameterError("mixture must hold at least one (mass, kappa, mean) component")
    out = []
    for i, comp in enumerate(mixture):
        if len(comp) != 3:
            raise ParameterError(f"mixture[{i}] must be (mass, kappa, mean direction); got {comp!r}")
        mass = _check_real(f"mixture[{i}] mass", comp[0], 0.0, strict=True)
        kappa = _check_real(f"mixture[{i}] kappa", comp[1], 0.0)
        mu = np.asarray(comp[2], dtype=np.float64)
        norm = float(np.linalg.norm(mu)) if mu.shape == (d,) else 0.0
        if not math.isfinite(norm) or norm == 0.0:
            raise ParameterError(f"mixture[{i}] mean must be a non-zero vector of length d = {d}")
        out.append((mass, kappa, mu / norm))
    total = sum(c[0] for c in out)
    return [(m / total, k, mu) for m, k, mu in out]


def _density_weights(nodes: np.ndarray, weights: np.ndarray,
                    mixture: Sequence[_Component] | None = None) -> np.ndarray:
    """Node weights `w_k f(x_k)` of the initial density `f` (None: uniform, f = 1), renormalised to
    sum 1; `f` a von Mises(-Fisher) mixture against the uniform probability."""
    nodes, weights = _real_array("nodes", nodes), _real_array("weights", weights)
    _require(nodes.ndim == 2 and bool(np.all(np.isfinite(nodes))), "nodes",
            "finite points (K, d)", f"shape {nodes.shape}")
    _require(weights.shape == nodes.shape[:1] and bool(np.all(np.isfinite(weights)))
            and bool(np.all(weights >= 0)) and float(weights.sum()) > 0, "weights",
            f"finite, >= 0, not all 0, one per node ({nodes.shape[0]})", weights)
    if mixture is None:
        return weights / weights.sum()
    f = sum(m * _vmf_density(nodes, k, mu) for m, k, mu in _check_mixture(mixture, nodes.shape[-1]))
    w = weights * f
    return w / w.sum()


def sample_initial(n: int, d: int, rng: np.random.Generator,
                   mixture: Sequence[_Component] | None = None) -> np.ndarray:
    """`n` i.i.d. points `(n, d)` of the initial law: uniform, or a von Mises mixture (d = 2, 3)."""
    n, d = _check_int("n", n, 1), _check_int("d", d, 2)
    _require(isinstance(rng, np.random.Generator), "rng", "a numpy Generator "
            "(np.random.default_rng(seed))", rng)
    if mixture is None:
        g = rng.standard_normal((n, d))
        return g / np.linalg.norm(g, axis=-1, keepdims=True)
    comps = _check_mixture(mixture, d)
    if d not in (2, 3):
        raise ParameterError(f"i.i.d. von Mises particles are drawn for d = 2 or 3; got d = {d}")
    which = rng.choice(len(comps), size=n, p=[c[0] for c in comps])
    out = np.empty((n, d))
    for c, (_, kappa, mu) in enumerate(comps):
        idx = np.flatnonzero(which == c)
        out[idx] = _vmf_sample(len(idx), kappa, mu, rng)
    return out


def _vmf_sample(n: int, kappa: float, mu: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """vMF(mu, kappa) draws in d = 2 (von Mises angle) or d = 3 (exact inverse CDF of <mu, x>)."""
    d = mu.shape[0]
    if d == 2:
        a = rng.vonmises(math.atan2(mu[1], mu[0]), kappa, n) if kappa > 0 else rng.uniform(
            -np.pi, np.pi, n)
        return np.stack([np.cos(a), np.sin(a)], -1)
    u = rng.uniform(size=n)
    t = (1.0 + np.log(u + (1.0 - u) * np.exp(-2.0 * kappa)) / kappa) if kappa > 0 else 2 * u - 1
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    r = np.sqrt(np.clip(1.0 - t**2, 0.0, None))
    local = np.stack([r * np.cos(phi), r * np.sin(phi), t], -1)
    # rotate e_3 to mu (Householder reflection; a reflection keeps the law, vMF is symmetric)
    e = np.array([0.0, 0.0, 1.0])
    v = e - mu
    nv = float(v @ v)
    return local if nv < 1e-30 else local - 2.0 * np.outer(local @ v, v) / nv
