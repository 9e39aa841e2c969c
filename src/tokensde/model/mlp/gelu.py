"""`mlp='gelu'`: `phi(z) = z Phi(z)` (`Phi` the standard normal distribution function).

Its dual kernel is computed by one-dimensional Gauss-Hermite quadrature: for `v = rho u + s w`,
`s^2 = 1 - rho^2`, the inner expectation over `w` is closed, `E_w phi(a + s w) = a Phi(a/c) +
s^2 phi_N(a/c)/c` with `c^2 = 1 + s^2` (`phi_N` the normal density), so that
`kappa(rho) = E_u[phi(u) g(rho u)]`; `kappa(1) = E[u^2 Phi(u)^2] = 0.4252...`
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from scipy import special

from ..checks import _check_real
from .base import MLPS, Activation, add_scaled_family

__all__ = ["gelu_at"]

if TYPE_CHECKING:
    import torch

_U, _W = np.polynomial.hermite_e.hermegauss(160)
_W = _W / math.sqrt(2.0 * math.pi)


def _gelu(z: np.ndarray) -> np.ndarray:
    return z * special.ndtr(z)


def _smoothed(a: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """`E_w phi(a + s w)` for `w` standard normal."""
    c = np.sqrt(1.0 + s2)
    return a * special.ndtr(a / c) + s2 * np.exp(-0.5 * (a / c) ** 2) / (c * math.sqrt(2 * math.pi))


_SWITCH = 1e-3  # below this distance to rho = 1 the kernel's Taylor series at 1 is used


def _derivative(n: int, z: np.ndarray) -> np.ndarray:
    """`phi^(n)(z)`: `Phi + z phi_N` for n = 1, `P_n(z) phi_N(z)` above, `P_2 = 2 - z^2`,
    `P_(n+1) = P_n' - z P_n`."""
    dens = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    if n == 1:
        return np.asarray(special.ndtr(z) + z * dens)
    poly = np.polynomial.Polynomial([2.0, 0.0, -1.0])
    for _ in range(n - 2):
        poly = poly.deriv() - np.polynomial.Polynomial([0.0, 1.0]) * poly
    return np.asarray(poly(z) * dens)


@cache
def _taylor_at_one() -> tuple[float, ...]:
    second = float(_dual_kernel(np.array(1.0)))
    return tuple(float((_W * _derivative(n, _U) ** 2).sum()) / second for n in range(1, 6))


def _dual_kernel(rho: np.ndarray) -> np.ndarray:
    """`kappa(rho) = E[phi(u) phi(v)]` (not normalised)."""
    r = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)[..., None]
    return (_W * _gelu(_U) * _smoothed(r * _U, 1.0 - r * r)).sum(-1)


@MLPS.register
class _GELU(Activation):
    """Gaussian error linear unit (the exact form, not the tanh approximation)."""

    name = "gelu"
    second_moment = float(_dual_kernel(np.array(1.0)))

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """`z Phi(z) = z (1 + erf(z / sqrt 2)) / 2`."""
        return 0.5 * z * (1.0 + (z * 0.5**0.5).erf())

    def kernel(self, rho: np.ndarray) -> np.ndarray:
        """`kappa(rho) / kappa(1)` by the quadrature above."""
        return _dual_kernel(rho) / self.second_moment

    def taylor_at_one(self) -> tuple[float, ...]:
        """`khat^(n)(1) = E[phi^(n)(u)^2] / E[phi(u)^2]`, n = 1..5 (Price's theorem)."""
        return _taylor_at_one()

    def complement(self, w: np.ndarray) -> np.ndarray:
        """`1 - khat(1 - w)`: the Taylor series at 1 below `SWITCH`, the kernel above."""
        w = np.asarray(w, dtype=float)
        out = np.asarray(1.0 - self.kernel(1.0 - w), dtype=float)
        small = w < _SWITCH
        ws = w[small]
        acc = np.zeros_like(ws)
        for n, k in enumerate(self.taylor_at_one(), start=1):
            acc += (-1.0) ** (n + 1) * k * ws**n / math.factorial(n)
        out[small] = acc
        return out

    def slope_at_one(self) -> float:
        """`khat'(1) = E[phi'(u)^2] / E[phi(u)^2]`."""
        return self.taylor_at_one()[0]


def _dual_kernel_at(rho: np.ndarray, q: float) -> np.ndarray:
    """`kappa_q(rho) = E[phi(sqrt(q) u) phi(sqrt(q) v)]`: GELU fed pre-activations of variance q
    (`v = rho u + s w`; the inner expectation is `_smoothed` with `a = sqrt(q) rho u`, `s^2 = q s^2`)."""
    r = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)[..., None]
    s = math.sqrt(q)
    return (_W * _gelu(s * _U) * _smoothed(s * r * _U, q * (1.0 - r * r))).sum(-1)


class _ScaledGELU(Activation):
    """GELU of pre-activations of variance `q` (`phi(z) = gelu(sqrt(q) z)`, z standard): a real
    block whose first MLP layer has entry variance `q/d` on inputs of radius sqrt(d). A subclass
    per q is resolved from the name `gelu(q=<q>)` (`base.add_scaled_family`, `gelu_at`)."""

    name = "gelu(q)"
    q: ClassVar[float] = 1.0
    second_moment = float(_dual_kernel(np.array(1.0)))

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """`gelu(sqrt(q) z)`."""
        s = z * math.sqrt(self.q)
        return 0.5 * s * (1.0 + (s * 0.5**0.5).erf())

    def kernel(self, rho: np.ndarray) -> np.ndarray:
        """`kappa_q(rho) / kappa_q(1)` by the quadrature of `dual_kernel_at`."""
        return _dual_kernel_at(rho, self.q) / self.second_moment

    def __reduce__(self) -> tuple:
        return _scaled_instance, (self.q,)


@cache
def _scaled_class(q: float) -> type[_ScaledGELU]:
    return type(f"ScaledGELU_{q:.6g}", (_ScaledGELU,), {
        "name": f"gelu(q={q:.6g})", "q": q,
        "second_moment": float(_dual_kernel_at(np.array(1.0), q))})


add_scaled_family("gelu", _scaled_class)


def _scaled_instance(q: float) -> _ScaledGELU:
    return _scaled_class(q)()


def gelu_at(q: float) -> str:
    """The `mlp` name of GELU at pre-activation variance `q`: `gelu(q=<q>)` (6 significant
    digits; `'gelu'` itself for q = 1). `MLPS` resolves it by its form, so nothing is registered
    and a process that loads stored parameters naming one needs no call first."""
    q = _check_real("q (GELU pre-activation variance)", q, 0.0, strict=True)
    return "gelu" if q == 1.0 else f"gelu(q={q:.6g})"
