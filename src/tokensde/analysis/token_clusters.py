"""Cluster statistics from the tokens themselves, without Gram matrices (for many tokens).

`analysis.clusters` works on Gram matrices, `n x n` per run; at `n = 65536` one of them takes
34 GB. The same statistics come from the tokens `(runs, n, d)`:

- **outcome** (`tokens_outcome`): the rule of `clusters._outcome_codes`, which `clusters.analyze`
  applies to Gram matrices: a run is *one cluster* or *bipolar* when it is decided
  (`sim.decide.decided_tokens`: every pair within tol of +1 or -1, O(n log n) on the circle), its
  two sides the signs of `<x_i, x_1>`; any other run is *undecided*. Many tokens spread round
  the circle form one chain of merged neighbours (at n = 65536 neighbours are 1e-4 apart), but
  most of their pairs are far apart: undecided, here and in `analyze` alike.
- **pair fractions** (`tokens_pair_fractions`): on the circle two tokens are merged iff their
  angles are closer than `A = arccos(1 - tol)`, merged or antipodal iff their angles mod pi are,
  so the counts come from the number of sorted angles within `A` of each (`searchsorted`,
  O(n log n)); a pair within a few rounding errors of `tol` may fall on either side. On the
  sphere and above, a decided run (every pair merged or antipodal: the absorbed state) has its
  counts from the sizes of its two sides, in O(n); the other runs are counted over row blocks,
  O(n^2) work in O(n) memory. The mean inner product is `(|sum x_i|^2 - n) / (n (n - 1))`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..model.checks import ParameterError, check_tol
from ..sim.decide import _ROW_BLOCK, _angle_of_gap, decided_tokens
from .clusters import _outcome_codes, _outcome_summary, is_antipodal, is_merged


def _as_tokens(x: Any) -> torch.Tensor:
    """Tokens as a float64 tensor `(runs, n, d)`, normalised; ParameterError naming `x` for
    tokens that are not finite, non-zero real vectors."""
    try:
        t = torch.as_tensor(np.asarray(x, dtype=np.float64) if not isinstance(x, torch.Tensor)
                            else x).double()
    except (TypeError, ValueError):
        raise ParameterError(f"x must be an array of tokens (runs, n, d); got "
                             f"{type(x).__name__}") from None
    if t.dim() == 2:
        t = t[None]
    if t.dim() != 3 or t.shape[1] < 1 or t.shape[2] < 2:
        raise ParameterError(f"x must have shape (runs, n, d) or (n, d), d >= 2; got "
                             f"{tuple(t.shape)}")
    norm = torch.linalg.vector_norm(t, dim=-1, keepdim=True)
    if not bool(torch.isfinite(t).all()) or not bool((norm > 0).all()):
        raise ParameterError("x must hold finite, non-zero tokens")
    return t / norm


def _close_pairs(angle: torch.Tensor, period: float, a: float) -> torch.Tensor:
    """Number of pairs `i < j` closer than `a` on the circle of length `period`, `(runs,)`
    (a < period / 2), from the sorted angles."""
    srt = angle.sort(-1).values
    ext = torch.cat([srt, srt + period], -1)
    upto = torch.searchsorted(ext.contiguous(), (srt + a).contiguous(), side="left")
    return (upto - torch.arange(srt.shape[-1]) - 1).sum(-1)


def _tokens_outcome(x: Any, tol: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """Outcome codes (`clusters.Outcome`: single, bipolar, undecided) and minority side sizes
    of runs of tokens `(runs, n, d)`, without Gram matrices: a run is single or bipolar only
    when it is decided (module docstring).

    Args:
        x: tokens `(runs, n, d)` (or one `(n, d)`).
        tol: a pair is merged when `1 - <x_i, x_j> < tol`, antipodal when `1 + <x_i, x_j> < tol`.

    Returns:
        `(outcome int8 (runs,), minority int64 (runs,))`, the minority 0 where not bipolar.
    """
    tol = check_tol(tol)
    t = _as_tokens(x)
    n = t.shape[1]
    done = decided_tokens(t, tol).cpu()
    m = ((t @ t[:, 0].unsqueeze(-1)).squeeze(-1) < 0).sum(-1)  # tokens opposite the first
    minor = torch.where(done & (m > 0), torch.minimum(m, n - m), 0)
    return _outcome_codes(done, m > 0), minor.numpy().astype(np.int64)


def _decided_counts(t: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Merged and antipodal pair counts of runs that are decided, `(runs,)` each, in O(n): with
    `m` tokens on the side of `x_1` (`<x_i, x_1> > 0`) and `n - m` opposite, `C(m, 2) + C(n - m,
    2)` and `m (n - m)`. In a decided run every pair is within `A = arccos(1 - tol) <= pi / 3` of
    0 or pi, so two tokens on one side are less than `2 A <= 2 pi / 3` apart, hence merged, and
    two on opposite sides antipodal. Meaningless for runs that are not decided."""
    n = t.shape[1]
    m = ((t @ t[:, 0].unsqueeze(-1)).squeeze(-1) > 0).sum(-1).double()
    return m * (m - 1) / 2 + (n - m) * (n - m - 1) / 2, m * (n - m)


def _block_counts(t: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Merged and antipodal pair counts `(runs,)` from every pair, over row blocks (O(n^2) work,
    O(n) memory)."""
    runs, n, _ = t.shape
    merged = torch.zeros(runs, dtype=torch.float64)
    anti = torch.zeros(runs, dtype=torch.float64)
    for lo in range(0, n, _ROW_BLOCK):
        g = t[:, lo:lo + _ROW_BLOCK] @ t.transpose(-1, -2)  # rows lo.., all columns
        upper = torch.arange(n) > torch.arange(lo, min(lo + _ROW_BLOCK, n)).unsqueeze(-1)
        merged += (is_merged(g, tol) & upper).sum((-2, -1))
        anti += (is_antipodal(g, tol) & upper).sum((-2, -1))
    return merged, anti


def _tokens_pair_fractions(x: Any, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run: the fractions of pairs `i < j` merged and antipodal, and the mean inner
    product, from tokens `(runs, n, d)` (circle: sorted angles; else the two sides of a decided
    run, row blocks for the others).

    Args:
        x: tokens `(runs, n, d)`.
        tol: the merged / antipodal tolerance.

    Returns:
        `(merged, antipodal, mean_inner)`, each `(runs,)` (nan for n = 1).
    """
    tol = check_tol(tol)
    t = _as_tokens(x)
    runs, n, d = t.shape
    pairs = n * (n - 1) / 2
    s = t.sum(-2)
    mean = ((s * s).sum(-1) - n) / (2 * pairs) if pairs else torch.full((runs,), math.nan)
    if d == 2:
        a = _angle_of_gap(tol)
        theta = torch.atan2(t[..., 1], t[..., 0])
        near = _close_pairs(theta, 2 * math.pi, a)
        either = _close_pairs(torch.where(theta < 0, theta + math.pi, theta), math.pi, a)
        merged, anti = near.double(), (either - near).double()
    else:
        merged, anti = _decided_counts(t, tol)
        left = decided_tokens(t, tol).cpu().logical_not().nonzero().flatten()
        for r in left.tolist():  # undecided runs: every pair, in row blocks
            merged[r], anti[r] = _block_counts(t[r:r + 1], tol)
    if not pairs:
        nan = np.full(runs, math.nan)
        return nan, nan, nan
    return (merged / pairs).numpy(), (anti / pairs).numpy(), mean.numpy()


def _token_summary(x: Any, tol: float, exact: bool = False) -> dict[str, Any]:
    """`clusters._pair_summary` from the final tokens `(runs, n, d)` instead of Gram matrices
    (`tokens_pair_fractions`, `tokens_outcome`: O(n log n) per run on the circle);
    `{'pairs': 0}` for one token.

    Args:
        x: tokens `(runs, n, d)`.
        tol: the merged / antipodal tolerance.
        exact: every run the same (no interval).

    Returns:
        The summary of `clusters._outcome_summary`.
    """
    n = np.shape(x)[-2]
    if n < 2:
        return {"pairs": 0}
    merged, antipodal, mean = _tokens_pair_fractions(x, tol)
    return _outcome_summary(n * (n - 1) // 2, float(mean.mean()), float(merged.mean()),
                           float(antipodal.mean()), _tokens_outcome(x, tol)[0], exact)
