"""The query/key-law strategy: how the bilinear form `A = Q^T K` of each head is drawn (docs/variants.md §3).

A law is a `QKLaw` subclass in a module of its own that registers itself with `@QK_LAWS.register`;
`ModelParams(qk=...)` selects it by `name` and binds it to `d`, `scale`, `redraw` and `samples`
(`ModelParams.qk_law`). The random laws draw `A = I + scale R`, `R` centred with `Var <u, R v> = 1`
for orthonormal unit vectors `u, v`. Nothing here imports torch at run time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..checks import ParameterError, _check_choice, _check_int, _check_real
from ..noise import Streams
from ..registry import Registry

__all__ = ["QK_LAWS", "QK_REDRAWS", "QK_SAMPLES", "QKDraws", "QKLaw"]

if TYPE_CHECKING:
    import torch

QK_REDRAWS: tuple[str, ...] = ("run", "layer")
QK_SAMPLES = 8  # default Monte Carlo draws of the law per SDE step with redraw='layer'


class _FrameStreams(Streams, Protocol):
    """Streams that also draw gamma variates (for chi-distributed Bartlett diagonals;
    `tokensde.sim.rng.RunStreams` is one)."""

    def standard_gamma(self, shape_param: torch.Tensor) -> torch.Tensor:
        """Gamma(`shape_param`, 1) variates `(runs, k)` for a shape vector `(k,)`."""
        ...


class QKLaw(ABC):
    """A law of the query/key form, bound to `d`, `scale` (> 0), `redraw` ('run': fixed for a run;
    'layer': drawn afresh every layer) and `samples` (draws per SDE step with redraw='layer').

    A subclass sets `name`, `rotation_invariant` (the law of `R` is that of `O^T R O` for every
    orthogonal `O`) and defines `fluctuation`; a rotation-invariant law also defines
    `frame_fluctuation`, the law of its compression to an m-dimensional subspace (the Gram
    sampler's frame).
    """

    name: ClassVar[str]
    random: ClassVar[bool] = True
    rotation_invariant: ClassVar[bool] = False

    def __init__(self, d: int, scale: float = 1.0, redraw: str = "run",
                 samples: int = QK_SAMPLES) -> None:
        self.d = d
        self.scale = _check_real("qk_scale", scale, 0.0, strict=True)
        self.redraw = _check_choice("qk_redraw", redraw, QK_REDRAWS)
        self.samples = _check_int("qk_samples", samples, 1)
        self.check_options()
        if self.samples != QK_SAMPLES and self.redraw != "layer":
            raise ParameterError(f"qk_samples (Monte Carlo draws of the qk law per SDE step) is "
                                 f"used only with qk_redraw='layer'; got qk_samples={samples!r} "
                                 f"with qk_redraw={redraw!r}")

    def check_options(self) -> None:  # noqa: B027 (a hook: the random laws take every option)
        """Raise ParameterError for options this law does not use."""

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(d={self.d}, scale={self.scale!r}, "
                f"redraw={self.redraw!r}, samples={self.samples})")

    @abstractmethod
    def fluctuation(self, rs: Streams, lead: tuple[int, ...], dtype: torch.dtype
                    ) -> torch.Tensor:
        """Centred `R` `(runs, *lead, d, d)` with `Var <u, R v> = 1` for orthonormal `u, v`."""

    def draw(self, rs: Streams, heads: int, dtype: torch.dtype) -> torch.Tensor:
        """`A = I + scale R`, one per run `(runs, d, d)`, or per run and head `(runs, heads, d, d)`."""
        r = self.fluctuation(rs, () if heads == 1 else (heads,), dtype).mul_(self.scale)
        r.diagonal(dim1=-2, dim2=-1).add_(1.0)
        return r

    def frame_fluctuation(self, rs: _FrameStreams, lead: tuple[int, ...], m: int,
                          dtype: torch.dtype) -> torch.Tensor:
        """The compression `B^T R B` `(runs, *lead, m, m)` of `R` to an orthonormal d x m frame
        `B` (`m <= d`), drawn without `R`. Only a rotation-invariant law has one that does not
        depend on `B` (`O^T R O` has the law of `R`, so `B^T R B` has that of the top-left m x m
        block of `R`); the others raise ParameterError."""
        raise ParameterError(f"qk={self.name!r} is not rotation invariant: the law of its "
                             "compression to the tokens' span depends on the span")

    def frame_draw(self, rs: _FrameStreams, heads: int, m: int, dtype: torch.dtype
                   ) -> torch.Tensor:
        """`B^T A B = I_m + scale B^T R B` (`frame_fluctuation`), one per run `(runs, m, m)` or per
        run and head `(runs, heads, m, m)`: the form the logits `<u_i, B^T A B u_j>` of tokens with
        frame coordinates `u` see."""
        r = self.frame_fluctuation(rs, () if heads == 1 else (heads,), m, dtype).mul_(self.scale)
        r.diagonal(dim1=-2, dim2=-1).add_(1.0)
        return r


class _IdentityQK(QKLaw):
    """No random form: `Q^T K` of the given `Q`, `K` (identity by default); draws nothing."""

    name = "identity"
    random = False

    def check_options(self) -> None:
        """qk_scale, qk_redraw and qk_samples must keep their defaults."""
        given = [(k, v) for k, v, default in (("qk_scale", self.scale, 1.0),
                                              ("qk_redraw", self.redraw, "run"),
                                              ("qk_samples", self.samples, QK_SAMPLES))
                 if v != default]
        if given:
            random = ", ".join(n for n in QK_LAWS.names() if n != "identity")
            raise ParameterError(f"{given[0][0]} is used only with a random qk law ({random}); "
                                 f"got {given[0][0]}={given[0][1]!r} with qk='identity'")

    def fluctuation(self, rs: Streams, lead: tuple[int, ...], dtype: torch.dtype
                    ) -> torch.Tensor:
        """Never called: the identity law draws nothing."""
        raise ParameterError("qk='identity' draws no query/key form")


QK_LAWS: Registry[QKLaw] = Registry("qk")
QK_LAWS.register(_IdentityQK)


class _BatchStreams(Streams, Protocol):
    """Streams that can drop runs (`tokensde.sim.rng.RunStreams` is one)."""

    def retain(self, mask: torch.Tensor) -> None:
        """Serve only the runs where `mask` is True."""
        ...


class QKDraws:
    """The random forms of one batch of runs: drawn once (redraw='run') or at every call of `next`
    (redraw='layer'), `heads` per run, from their own streams `rs`."""

    def __init__(self, law: QKLaw, heads: int, rs: _BatchStreams, dtype: torch.dtype) -> None:
        self.law, self.heads, self.rs, self.dtype = law, heads, rs, dtype
        self.fixed = law.draw(rs, heads, dtype) if law.redraw == "run" else None

    def next(self) -> torch.Tensor:
        """The forms of the next layer, `(runs, d, d)` or `(runs, heads, d, d)`."""
        return self.law.draw(self.rs, self.heads, self.dtype) if self.fixed is None else self.fixed

    def retain(self, mask: torch.Tensor) -> None:
        """Keep only the runs where `mask` `(runs,)` is True (runs decided early)."""
        self.rs.retain(mask)
        if self.fixed is not None:
            self.fixed = self.fixed[mask.to(self.fixed.device)]
