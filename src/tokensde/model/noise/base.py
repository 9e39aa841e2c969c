"""The noise-law strategy: what one law of the value matrices `V_k` gives the simulator (spec §2-§4).

A law is a `NoiseLaw` subclass in a module of its own that registers itself with
`@NOISE_LAWS.register`; `ModelParams(noise=...)` selects it by `name` and binds it to `d`, `law`,
`sigma` and `eps` (`ModelParams.noise_law`). Nothing here imports torch at run time: the methods
only use the methods of the tensors they are given, so `tokensde.model.params` stays torch-free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..checks import ParameterError, _check_choice, _check_real
from ..registry import Registry

if TYPE_CHECKING:
    import torch


class Streams(Protocol):
    """The draws a law takes, `(runs, *shape)` each (`tokensde.sim.rng.RunStreams` is one)."""

    def normal(self, *shape: int, dtype: torch.dtype = ...) -> torch.Tensor:
        """Standard normals."""
        ...

    def uniform(self, *shape: int, dtype: torch.dtype = ...) -> torch.Tensor:
        """U(0, 1) draws."""
        ...

    def sign(self, *shape: int, dtype: torch.dtype = ...) -> torch.Tensor:
        """Rademacher +-1 draws."""
        ...


def apply_matrices(y: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """`xi_i = V y_i` for each run: `(runs, n, d)` from `y` `(runs, n, d)` and `V` `(runs, d, d)`;
    with one matrix per head, `xi_i = sum_h V_h y^h_i` from `(runs, heads, n, d)` and
    `(runs, heads, d, d)`."""
    if V.dim() == 4:
        return (y @ V.transpose(-1, -2)).sum(-3)
    return y @ V.transpose(-1, -2)


def _projected(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(<x, y>, P_x y, |P_x y|^2)` token-wise, `P_x = I - x x^T`."""
    xy = (x * y).sum(-1, keepdim=True)
    py = y - xy * x
    return xy, py, (py * py).sum(-1, keepdim=True)


class NoiseLaw(ABC):
    """A law of the centred value noise `V` (one matrix per layer, shared by all tokens), bound to
    its parameters; the simulator sees the unit-time layer noise `xi_i = V y_i` only through it.

    A subclass sets `name` (the value of `ModelParams.noise`) and `laws` (the allowed values of
    `law`, the law of the entries) and defines `matrices` and `covariance`. It may override `draw`
    and `ito` with cheaper closed forms (the defaults follow from `matrices` and `covariance`),
    `samplers` (the exact samplers it allows besides 'full'), `uses_eps` and `scale`.
    """

    name: ClassVar[str]
    laws: ClassVar[tuple[str, ...]]
    uses_eps: ClassVar[bool] = False  # eps (not sigma) scales this law when given

    def __init__(self, d: int, law: str = "gaussian", sigma: float = 1.0,
                 eps: float | None = None) -> None:
        self.d = d
        self.law = _check_choice(f"law (for noise={self.name})", law, self.laws)
        self.sigma = _check_real("sigma", sigma, 0.0)
        self.eps = None if eps is None else self._check_eps(eps)

    def __repr__(self) -> str:
        eps = "" if self.eps is None else f", eps={self.eps!r}"
        return f"{type(self).__name__}(d={self.d}, law={self.law!r}, sigma={self.sigma!r}{eps})"

    def _check_eps(self, eps: float) -> float:
        if not self.uses_eps:
            takes = " or ".join(f"noise={n!r}" for n in NOISE_LAWS.names()
                                if NOISE_LAWS.get(n).uses_eps)
            raise ParameterError(f"eps must be given only with {takes} (sigma scales {self.name} "
                                 f"noise); got {eps!r}")
        return _check_real("eps", eps, 0.0)

    @property
    def scale(self) -> float:
        """Standard deviation scale of the noise (`sigma`)."""
        return self.sigma

    @property
    def samplers(self) -> tuple[str, ...]:
        """Samplers exact for this law: 'full' always; 'fast' and 'gram' (Gaussian V) if listed."""
        return ("full",)

    @abstractmethod
    def matrices(self, rs: Streams, dtype: torch.dtype) -> torch.Tensor:
        """One value-noise matrix `V` per run, `(runs, d, d)`."""

    @abstractmethod
    def covariance(self, y: torch.Tensor) -> torch.Tensor:
        """`Sigma(y) = Cov(V y)`, `(..., d, d)` for attention outputs `y` `(..., d)` (spec §3)."""

    def draw(self, y: torch.Tensor, rs: Streams) -> torch.Tensor:
        """The layer noise `xi_i = V y_i` `(runs, n, d)`, drawing V itself (sampler 'full')."""
        return apply_matrices(y, self.matrices(rs, y.dtype))

    def ito(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Ito drift `-P_x Sigma(y) x - tr(P_x Sigma(y)) x / 2` that keeps `|x| = 1` (spec §3)."""
        s = self.covariance(y)
        sx = (s @ x.unsqueeze(-1)).squeeze(-1)
        xsx = (x * sx).sum(-1, keepdim=True)
        trace = s.diagonal(dim1=-2, dim2=-1).sum(-1, keepdim=True) - xsx
        return -(sx - xsx * x) - 0.5 * trace * x


NOISE_LAWS: Registry[NoiseLaw] = Registry("noise")
