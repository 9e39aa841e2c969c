"""The MLP-block strategy: a random two-layer MLP `W_2 phi(W_1 x)` added to every layer (docs/variants.md §5).

An activation is an `Activation` subclass in a module of its own that registers itself with
`@MLPS.register`; `ModelParams(mlp=...)` selects it by `name`. `W_1` (`m x d`) has standard
Gaussian entries, so a unit token's pre-activations are standard normal; `W_2` (`d x m`) has
Gaussian entries of variance `mlp_sigma^2 / (m kappa(1))`, so a unit token's MLP output has
variance `mlp_sigma^2` per coordinate. Both are drawn afresh every layer, shared by the tokens.
Given the tokens, the outputs of two tokens then have cross-covariance
`mlp_sigma^2 khat(<x_i, x_j>) I` for every width `m`, with `khat = kappa / kappa(1)` and

    kappa(rho) = E[phi(u) phi(v)],   (u, v) standard normal with correlation rho,

the dual kernel of `phi`. Nothing here imports torch at run time.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..registry import Registry
from ..tabulate import Table

if TYPE_CHECKING:
    import torch


class Activation(ABC):
    """The activation `phi` of the MLP block, with its normalised dual kernel `khat`.

    A subclass sets `name` and `second_moment` (`kappa(1) = E phi(u)^2`) and defines `__call__`
    (torch), `kernel` (numpy) and `kernel_t` (torch).
    """

    name: ClassVar[str]
    active: ClassVar[bool] = True
    second_moment: ClassVar[float]

    @abstractmethod
    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """`phi(z)` entry-wise."""

    @abstractmethod
    def kernel(self, rho: np.ndarray) -> np.ndarray:
        """`khat(rho) = E[phi(u) phi(v)] / E[phi(u)^2]` for correlations `rho` in [-1, 1]."""

    def check_width(self, width: int) -> None:
        """Refuse a hidden width `mlp_width` this activation cannot read (ParameterError naming
        it); every width by default."""
        return None

    def complement(self, w: np.ndarray) -> np.ndarray:
        """`1 - khat(1 - w)`; a subclass makes it accurate for small `w` (near-merged pairs)."""
        return 1.0 - self.kernel(1.0 - np.asarray(w, dtype=float))

    def slope_at_one(self) -> float:
        """`khat'(1) = E[phi'(u)^2] / E[phi(u)^2]`; by default a difference quotient."""
        h = 1e-6
        return float(self.complement(np.array([h]))[0] / h)

    def kernel_t(self, rho: torch.Tensor) -> torch.Tensor:
        """`khat` on a tensor (the SDE's noise covariance); tabulated unless overridden."""
        table = type(self).__dict__.get("_table")
        if table is None:
            table = Table(self.kernel)
            type.__setattr__(type(self), "_table", table)
        return table(rho)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _NoMLP(Activation):
    """No MLP block (the model of spec §2)."""

    name = "none"
    active = False
    second_moment = 0.0

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """Never called: there is no block."""
        raise NotImplementedError("mlp='none' has no activation")

    def kernel(self, rho: np.ndarray) -> np.ndarray:
        """Zero: no MLP noise."""
        return np.zeros_like(np.asarray(rho, dtype=float))


MLPS: Registry[Activation] = Registry("mlp")
MLPS.register(_NoMLP)


def add_scaled_family(base: str, make: Callable[[float], Any]) -> None:
    """Register the names `<base>(q=<q>)` (q finite, > 0) in `MLPS`, each resolved to the class
    `make(q)` (made once per q by `make`, not registered).

    Args:
        base: the family's name, e.g. 'gelu'.
        make: the class of the activation at pre-activation variance q.
    """
    form = re.compile(re.escape(base) + r"\(q=([^()]+)\)")

    def resolve(name: str) -> Any:
        match = form.fullmatch(name)
        if match is None:
            return None
        try:
            q = float(match.group(1))
        except ValueError:
            return None
        return make(q) if math.isfinite(q) and q > 0 else None

    MLPS.add_family(f"{base}(q=<q>) with q > 0", resolve)
