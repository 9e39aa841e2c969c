"""`mlp='swiglu'`: the gated block `W_2 (silu(W_1 x) * W_3 x)` of Llama-type decoders
(`silu(z) = z / (1 + e^-z)`), with `W_1`, `W_3`, `W_2` independent (docs/mlp_theory.md §6).

A hidden unit reads two pre-activations, a gate `a = <w_1, x>` and an input `b = <w_3, x>`,
independent standard normals for a unit token. For two unit tokens of cosine `rho` the pairs
`(a_x, a_y)` and `(b_x, b_y)` are independent, each of correlation `rho`, so

    E[h(x) h(y)] = E[silu(a_x) silu(a_y)] E[b_x b_y] = rho kappa(rho),
    khat(rho) = rho kappa(rho) / kappa(1),

`kappa` the dual kernel of silu (of `silu(sqrt(q) .)` at gate variance q, `swiglu(q=<q>)`),
computed by two-dimensional Gauss-Hermite quadrature.

The samplers draw one block of `m = mlp_width` standard normal pre-activations per token and
hidden layer and `W_2` with `m` columns. A gated block reads them as `m/2` gates (the first half)
and `m/2` inputs (the second half): `mlp_width` is the width of the fused `[W_1; W_3]`, twice
the gated width, and must be even. `__call__` returns the `m/2` products followed by `m/2` zero
units, so the hidden layer keeps the width `W_2` is drawn for and the zero units add nothing:
the output `W_2 h` has exactly the law of the gated block with `m/2` independent units.
`second_moment` is the mean square over those `m` units, `E silu(a)^2 / 2`, so that
`mlp_scale = mlp_sigma / sqrt(m kappa(1))` still gives a unit token an output of variance
`mlp_sigma^2` per coordinate.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..checks import ParameterError, _check_real
from .base import MLPS, Activation, add_scaled_family

__all__ = ["swiglu_at"]

if TYPE_CHECKING:
    import torch

_NODES = 64  # Gauss-Hermite nodes per axis: error < 1e-12 against 128 nodes for q <= 4 (tested)
_CHUNK = 128  # correlations evaluated at once (NODES^2 points each)
_SWITCH = 1e-3  # below this distance to rho = 1 the kernel's Taylor series at 1 is used
_U, _W = np.polynomial.hermite_e.hermegauss(_NODES)
_W = _W / math.sqrt(2.0 * math.pi)


def _silu(z: np.ndarray) -> np.ndarray:
    """`z sigmoid(z)`, overflow-free for large |z|."""
    return z * 0.5 * (1.0 + np.tanh(0.5 * z))


def _silu_kernel(rho: np.ndarray, q: float = 1.0) -> np.ndarray:
    """`kappa_q(rho) = E[silu(sqrt(q) u) silu(sqrt(q) v)]`, `(u, v)` standard normal of
    correlation `rho` (`v = rho u + sqrt(1 - rho^2) w`), by a `NODES x NODES` Gauss-Hermite
    rule in `(u, w)`."""
    r = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)
    flat = r.reshape(-1)
    s = math.sqrt(q)
    fu = _W * _silu(s * _U)  # (N,)
    out = np.empty_like(flat)
    for lo in range(0, len(flat), _CHUNK):
        c = flat[lo:lo + _CHUNK, None, None]
        v = c * _U[:, None] + np.sqrt(1.0 - c * c) * _U[None, :]  # (k, N_u, N_w)
        out[lo:lo + _CHUNK] = np.einsum("i,kij,j->k", fu, _silu(s * v), _W)
    return out.reshape(r.shape)


def _sigmoid_derivatives(n: int) -> list[np.polynomial.Polynomial]:
    """`sigma^(k)` as polynomials in `sigma` for k = 0..n: `P_0 = s`,
    `P_(k+1) = P_k'(s) s (1 - s)`."""
    s = np.polynomial.Polynomial([0.0, 1.0])
    polys = [s]
    for _ in range(n):
        polys.append(polys[-1].deriv() * s * (1.0 - s))
    return polys


def _silu_derivative(n: int, z: np.ndarray) -> np.ndarray:
    """`silu^(n)(z) = z sigma^(n)(z) + n sigma^(n-1)(z)` (Leibniz; `sigma` the logistic)."""
    sig = 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=float)))
    polys = _sigmoid_derivatives(n)
    out = z * polys[n](sig)
    return out + n * polys[n - 1](sig) if n > 0 else out


_U1, _W1 = np.polynomial.hermite_e.hermegauss(200)
_W1 = _W1 / math.sqrt(2.0 * math.pi)


@cache
def _taylor_ratios(q: float) -> tuple[float, ...]:
    """`kappa_q^(n)(1) / kappa_q(1) = q^n E[silu^(n)(sqrt(q) u)^2] / E[silu(sqrt(q) u)^2]`,
    n = 1..5 (Price's theorem)."""
    s = math.sqrt(q)
    second = float((_W1 * _silu(s * _U1) ** 2).sum())
    return tuple(q ** n * float((_W1 * _silu_derivative(n, s * _U1) ** 2).sum()) / second
                 for n in range(1, 6))


class _SwiGLU(Activation):
    """The SwiGLU unit `silu(sqrt(q) a) b` on pre-activations split into gates `a` and inputs
    `b` (module docstring); `q = 1` is `mlp='swiglu'`, other q the family `swiglu(q=<q>)`."""

    name = "swiglu"
    q: ClassVar[float] = 1.0
    second_moment = 0.5 * float(_silu_kernel(np.array(1.0)))

    def check_width(self, width: int) -> None:
        """An even `mlp_width` (gates and inputs, half each)."""
        if width % 2:
            raise ParameterError(f"mlp_width must be even with mlp={self.name!r} (the fused "
                                 f"[W_1; W_3]: gates and inputs, half each); got {width}")

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """`[silu(sqrt(q) a) * b, 0]` for `z = [a, b]` on the last axis (halves)."""
        import torch

        half = z.shape[-1] // 2
        if 2 * half != z.shape[-1]:
            raise ParameterError(f"mlp={self.name!r} needs an even number of pre-activations; "
                                 f"got {z.shape[-1]}")
        a = z[..., :half] * math.sqrt(self.q)
        h = a * torch.sigmoid(a) * z[..., half:]
        return torch.cat([h, torch.zeros_like(h)], -1)

    def kernel(self, rho: np.ndarray) -> np.ndarray:
        """`rho kappa_q(rho) / kappa_q(1)`."""
        r = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)
        return r * _silu_kernel(r, self.q) / (2.0 * self.second_moment)

    def complement(self, w: np.ndarray) -> np.ndarray:
        """`1 - khat(1 - w) = w + c - w c`, `c = 1 - kappa(1 - w) / kappa(1)` by its Taylor
        series at 1 below `SWITCH`, the kernel above."""
        w = np.asarray(w, dtype=float)
        out = np.asarray(1.0 - self.kernel(1.0 - w), dtype=float)
        small = w < _SWITCH
        ws = w[small]
        c = np.zeros_like(ws)
        for n, t in enumerate(_taylor_ratios(self.q), start=1):
            c += (-1.0) ** (n + 1) * t * ws ** n / math.factorial(n)
        out[small] = ws + c - ws * c
        return out

    def slope_at_one(self) -> float:
        """`khat'(1) = 1 + kappa'(1) / kappa(1)`."""
        return 1.0 + _taylor_ratios(self.q)[0]

    def __reduce__(self) -> tuple:
        return _gated_instance, (self.q,)


MLPS.register(_SwiGLU)

@cache
def _gated_class(q: float) -> type[_SwiGLU]:
    if q == 1.0:
        return _SwiGLU
    return type(f"SwiGLU_{q:.6g}", (_SwiGLU,), {
        "name": f"swiglu(q={q:.6g})", "q": q,
        "second_moment": 0.5 * float(_silu_kernel(np.array(1.0), q))})


def _gated_instance(q: float) -> _SwiGLU:
    return _gated_class(q)()


add_scaled_family("swiglu", _gated_class)


def swiglu_at(q: float) -> str:
    """The `mlp` name of SwiGLU with gate pre-activations of variance `q`: `swiglu(q=<q>)` (6
    significant digits; `'swiglu'` for q = 1)."""
    q = _check_real("q (SwiGLU gate pre-activation variance)", q, 0.0, strict=True)
    return "swiglu" if q == 1.0 else f"swiglu(q={q:.6g})"
