"""`qk='wigner'` and `qk='goe'` (docs/variants.md §3): a symmetric form, `Q = I`, `K = I + s R`.

Both have independent entries on and above the diagonal with the covariance of the Gaussian
orthogonal ensemble, `Cov(R_ab, R_ce) = delta_ac delta_be + delta_ae delta_bc` (off-diagonal
variance 1, diagonal 2): `goe` Gaussian entries, `R = (G + G^T)/sqrt(2)` (a rotation-invariant law);
`wigner` Rademacher entries, `+-1` off the diagonal and `+-sqrt(2)` on it (not rotation invariant).

The compression `B^T R B` of a GOE matrix to an orthonormal d x m frame `B` is an m x m GOE matrix
with the same entry variances (`B^T G B` is an m x m standard Gaussian matrix, and
`B^T R B = (B^T G B + (B^T G B)^T)/sqrt(2)`), which the Gram sampler draws.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..noise import Streams
from .base import QK_LAWS, QKLaw, _FrameStreams

if TYPE_CHECKING:
    import torch


@QK_LAWS.register
class _WignerQK(QKLaw):
    """Symmetric with independent Rademacher entries (off-diagonal +-1, diagonal +-sqrt(2))."""

    name = "wigner"

    def entries(self, rs: Streams, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Independent centred unit-variance entries `(runs, *shape)`."""
        return rs.sign(*shape, dtype=dtype)

    def fluctuation(self, rs: Streams, lead: tuple[int, ...], dtype: torch.dtype
                    ) -> torch.Tensor:
        """`R_ab = R_ba = E_ab` (a < b), `R_aa = sqrt(2) E_aa`, from the upper triangle of unit
        entries `E` `(runs, *lead, d, d)`."""
        return _symmetric(self.entries(rs, (*lead, self.d, self.d), dtype))


def _symmetric(e: torch.Tensor) -> torch.Tensor:
    """`R_ab = R_ba = e_ab` (a < b), `R_aa = sqrt(2) e_aa` from unit entries `e` `(..., k, k)`."""
    diag = e.diagonal(dim1=-2, dim2=-1) * math.sqrt(2.0)
    r = e.triu(1)
    return (r + r.transpose(-1, -2)).diagonal_scatter(diag, dim1=-2, dim2=-1)


@QK_LAWS.register
class _GOEQK(_WignerQK):
    """The Gaussian orthogonal ensemble `(G + G^T)/sqrt(2)`; rotation invariant."""

    name = "goe"
    rotation_invariant = True

    def entries(self, rs: Streams, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Standard normal entries."""
        return rs.normal(*shape, dtype=dtype)

    def frame_fluctuation(self, rs: _FrameStreams, lead: tuple[int, ...], m: int,
                          dtype: torch.dtype) -> torch.Tensor:
        """An m x m GOE matrix `(runs, *lead, m, m)`, the law of `B^T R B` (module docstring)."""
        return _symmetric(self.entries(rs, (*lead, m, m), dtype))
