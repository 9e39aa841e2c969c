"""The decided test without an n x n array: every pair within `tol` of +1 or -1, in O(n log n).

A run is *decided* when every pair of tokens has `1 - |<x_i, x_j>| < tol` (spec §7: all tokens in
one pole). The dense test forms the `n x n` Gram matrix; here the same decision comes from the
geometry of the tokens up to sign, with a certificate, and the dense formula is evaluated only on
the pairs the certificate cannot settle.

Exact arithmetic. Write `δ'_ij in [0, pi/2]` for the angle between the lines of `x_i` and `x_j`,
so `|<x_i, x_j>| = cos δ'_ij` for unit tokens and the pair passes iff `δ'_ij < A(tol)`,
`A(t) = arccos(1 - t) = 2 asin(sqrt(t / 2))`.

- **Circle** (`decided_circle`): with `φ_i = θ_i mod pi` (θ_i the angle of `x_i`), `δ'_ij` is the
  distance of `φ_i, φ_j` on the circle `R / pi Z`. *Lemma*: for `a <= pi / 3`, every pair is
  closer than `a` iff all `φ_i` lie in an arc shorter than `a`, i.e. iff the largest gap between
  consecutive sorted `φ` exceeds `pi - a`. (If all are in such an arc, each pair is. Conversely,
  all points lie within `a` of `φ_1`: unrolled to an interval, two points `ℓ < 2a <= pi - a`
  apart are `min(ℓ, pi - ℓ) = ℓ` apart on the circle, so `ℓ < a` for every pair, and the arc
  from the least to the greatest is shorter than `a`.) `tol <= 1/2` gives `A(tol) <= pi / 3`.
- **Sphere and above** (`decided_cap`): if the run is decided, every token is within `A(tol)` of
  the line of `x_1`; flip each token to the side of `x_1` (`u_i = sign<x_i, x_1> x_i`, which keeps
  every `|<x_i, x_j>|`) and take the centre `m` of the flipped tokens. With `θ_i` the angle of `u_i`
  to `m`, `δ'_ij <= θ_i + θ_j`: if `2 max θ < A(tol)` the run is decided; a pair whose own gap is
  at least tol shows it is not; otherwise only the pairs with `θ_i + θ_j >= A(tol)` (both in the
  outer rim of the cap) can fail, and the dense formula is evaluated on those alone.

Floating point. The dense test computes `g = 1 - |fl(<x_i, x_j>)|`, within `E = (d + 2) u (1 +
ν)^2 + 2ν + ν^2` of `1 - cos δ'_ij` (u the unit roundoff of the tokens' dtype, ν the largest
`||x_i| - 1|`). The certificates above are applied with `tol - E` (to say decided) and `tol + E`
(to say not), and every computed angle carries an error bound (`_ANGLE_ERR`), so outside a band of
width about `1e-14` around `tol` the decision is the dense test's by proof; inside it (or with
`tol + E > 1/2`) the dense formula is evaluated on the candidate pairs, in row blocks. Either
way the answer is the dense test's, in `O(n log n)` work and `O(n)` memory except inside that
band and, on the sphere, in the window where the cap certificate is inconclusive (`O(P^2)` for
the `P` rim tokens, in row blocks of `ROW_BLOCK` rows).

`decided_tokens` dispatches by a fixed rule: dense for `n <= DENSE_MAX` (bit for bit the earlier
test), the circle test for `d = 2`, the cap test otherwise.
"""

from __future__ import annotations

import math

import torch

__all__ = ["decided_tokens"]

_DENSE_MAX = 256  # n at or below which the decided test forms the n x n gaps (the earlier test)
_ROW_BLOCK = 1024  # rows of the dense formula evaluated at once on candidate pairs
_ANGLE_ERR = 1e-13  # bound on the error of a computed angle (radians), float64 atan2 / asin


def _dense_decided(x: torch.Tensor, tol: float) -> torch.Tensor:
    """`(runs,)`: every pair `i != j` has `1 - |<x_i, x_j>| < tol`, from the `n x n` gaps.

    Args:
        x: `(runs, n, d)` tokens.
        tol: the tolerance, in (0, 1/2].

    Returns:
        Boolean `(runs,)`.
    """
    gap = 1.0 - (x @ x.transpose(-1, -2)).abs()
    gap.diagonal(dim1=-2, dim2=-1).fill_(0.0)
    return (gap < tol).flatten(1).all(-1)


def _pairs_pass(x: torch.Tensor, tol: float, rows: int = _ROW_BLOCK) -> bool:
    """`1 - |<x_i, x_j>| < tol` for every pair `i != j` of one run's tokens `x` `(n, d)`: the
    dense formula in blocks of `rows` rows (memory `rows x n`).

    Args:
        x: `(n, d)` tokens.
        tol: the tolerance.
        rows: rows per block.

    Returns:
        True when every pair passes.
    """
    n = x.shape[0]
    for lo in range(0, n, rows):
        gap = 1.0 - (x[lo:lo + rows] @ x.T).abs()
        gap[:, lo:lo + rows].diagonal().fill_(0.0)
        if not bool((gap < tol).all()):
            return False
    return True


def _angle_of_gap(t: float) -> float:
    """`A(t) = arccos(1 - t) = 2 asin(sqrt(t / 2))`: the angle whose `1 - cos` is `t` (0 for
    t <= 0, pi for t >= 2).

    Args:
        t: a gap `1 - cos`.

    Returns:
        The angle in [0, pi].
    """
    if t <= 0.0:
        return 0.0
    return 2.0 * math.asin(min(1.0, math.sqrt(t / 2.0)))


def _rounding_margin(x: torch.Tensor) -> float:
    """`E`: a bound on `|fl(1 - |<x_i, x_j>|) - (1 - cos δ'_ij)|` for the tokens `x`, from
    their dtype's unit roundoff u and their largest norm defect ν (module docstring).

    Args:
        x: `(runs, n, d)` tokens.

    Returns:
        E.
    """
    u = float(torch.finfo(x.dtype).eps) / 2
    nu = float((torch.linalg.vector_norm(x.double(), dim=-1) - 1.0).abs().max()) + 8e-16
    d = x.shape[-1]
    return (d + 2) * u * (1 + nu) ** 2 / (1 - (d + 2) * u) + 2 * nu + nu * nu + 8e-16


def _circle_verdict(x: torch.Tensor, tol: float, margin: float) -> torch.Tensor:
    """Per run of circle tokens `(runs, n, 2)`: 1 decided, 0 not, -1 inside the rounding band,
    from the largest gap of the sorted angles mod pi (the lemma of the module docstring).

    Args:
        x: `(runs, n, 2)` tokens.
        tol: the tolerance.
        margin: `rounding_margin(x)`.

    Returns:
        int8 `(runs,)`.
    """
    xd = x.double()
    theta = torch.atan2(xd[..., 1], xd[..., 0])  # (-pi, pi]
    phi = torch.where(theta < 0, theta + math.pi, theta).sort(-1).values  # [0, pi]
    gaps = torch.diff(phi, dim=-1, append=phi[..., :1] + math.pi)
    arc = math.pi - gaps.max(-1).values  # shortest arc of R / pi Z holding every phi
    err = 4 * _ANGLE_ERR
    yes = arc + err < _angle_of_gap(tol - margin)
    no = arc - err >= _angle_of_gap(tol + margin)
    if tol + margin > 0.5:  # the lemma needs A(tol + E) <= pi / 3
        no = torch.zeros_like(no)
    return torch.where(yes, 1, torch.where(no, 0, -1)).to(torch.int8)


def _flipped_cap(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(h, u, theta)`: `h_i = <x_i, x_1>`, the unit tokens flipped to the side of `x_1` and
    their angles to the normalised mean of the flipped tokens (float64)."""
    xd = x.double()
    xd = xd / torch.linalg.vector_norm(xd, dim=-1, keepdim=True)
    h = (xd @ xd[:, 0].unsqueeze(-1)).squeeze(-1)
    u = torch.where(h.unsqueeze(-1) < 0, -xd, xd)
    m = u.sum(-2, keepdim=True)
    m = m / torch.linalg.vector_norm(m, dim=-1, keepdim=True)
    chord = torch.linalg.vector_norm(u - m, dim=-1)
    theta = 2.0 * torch.asin((chord / 2).clamp(max=1.0))
    return h, u, theta


def _cap_verdict(x: torch.Tensor, tol: float, margin: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per run of tokens `(runs, n, d)`: 1 decided, 0 not, -1 to be settled on candidate pairs
    (the cap certificate of the module docstring), and the angles `theta` `(runs, n)` of the
    flipped tokens to their centre.

    Args:
        x: `(runs, n, d)` tokens.
        tol: the tolerance.
        margin: `rounding_margin(x)`.

    Returns:
        `(verdict int8 (runs,), theta (runs, n))`.
    """
    h, u, theta = _flipped_cap(x)
    mine = 8 * 2.0**-53  # error of a float64 gap below
    no_at = tol + margin + mine  # a gap computed at least this shows the dense test fails
    no = (1.0 - h.abs()).amax(-1) >= no_at
    # the two farthest tokens from the centre, and the farthest from the first: O(n) rejections
    k = theta.argmax(-1)
    for _ in range(2):
        far = u.gather(1, k.view(-1, 1, 1).expand(-1, 1, u.shape[-1]))
        gap = 1.0 - (u @ far.transpose(-1, -2)).squeeze(-1).abs()
        no |= gap.amax(-1) >= no_at
        k = gap.argmax(-1)
    yes = 2 * theta.amax(-1) + 2 * _ANGLE_ERR < _angle_of_gap(tol - margin)
    return torch.where(yes & ~no, 1, torch.where(no, 0, -1)).to(torch.int8), theta


def _rim_pass(x: torch.Tensor, theta: torch.Tensor, tol: float, margin: float) -> bool:
    """The dense formula on the pairs of one run that the cap certificate leaves open: tokens
    with `theta_i + max theta >= A(tol - E)` (every other pair is within tol by the triangle
    inequality).

    Args:
        x: `(n, d)` tokens of one run.
        theta: `(n,)` their angles to the centre (`cap_verdict`).
        tol: the tolerance.
        margin: `rounding_margin`.

    Returns:
        True when every candidate pair passes.
    """
    rim = theta + theta.max() + 2 * _ANGLE_ERR >= _angle_of_gap(tol - margin)
    return _pairs_pass(x[rim.to(x.device)], tol)


def decided_tokens(x: torch.Tensor, tol: float) -> torch.Tensor:
    """`(runs,)`: every pair `i != j` has `1 - |<x_i, x_j>| < tol`, the dense test's decision
    without its `n x n` array for `n > DENSE_MAX` (circle: sorted angles; else the cap).

    Args:
        x: `(runs, n, d)` tokens (unit up to rounding).
        tol: the tolerance, in (0, 1/2].

    Returns:
        Boolean `(runs,)` on the device of `x`.
    """
    runs, n, _ = x.shape
    if n <= _DENSE_MAX or runs == 0:
        return _dense_decided(x, tol)
    return _geometric_decided(x, tol)


def _geometric_decided(x: torch.Tensor, tol: float) -> torch.Tensor:
    """`decided_tokens` by the geometry at any `n`: sorted angles on the circle, the cap
    elsewhere, the dense formula on the pairs that the rounding band leaves open.

    Args:
        x: `(runs, n, d)` tokens (unit up to rounding), `runs >= 1`.
        tol: the tolerance, in (0, 1/2].

    Returns:
        Boolean `(runs,)` on the device of `x`.
    """
    d = x.shape[-1]
    margin = _rounding_margin(x)
    if d == 2:
        verdict = _circle_verdict(x, tol, margin)
        open_ = (verdict < 0).nonzero().flatten()
        if len(open_):
            v2, theta = _cap_verdict(x[open_], tol, margin)
            for j, r in enumerate(open_.tolist()):
                verdict[r] = v2[j] if v2[j] >= 0 else int(_rim_pass(x[r], theta[j], tol, margin))
    else:
        verdict, theta = _cap_verdict(x, tol, margin)
        for r in (verdict < 0).nonzero().flatten().tolist():
            verdict[r] = int(_rim_pass(x[r], theta[r], tol, margin))
    return (verdict > 0).to(x.device)
