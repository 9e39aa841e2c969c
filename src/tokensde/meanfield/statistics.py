"""Statistics of a weighted token system at absorption, and of its attention field.

At absorption (every pair of live nodes within `tol` of +1 or -1) the measure is one atom or two
antipodal atoms. The *minority mass* is the weight of the lighter of the two (0 for one atom); the
*atoms* are the classes of nodes within `atom_tol` of each other; the *time to two atoms* is the
depth time of the decision.
"""

from __future__ import annotations

import numpy as np
import torch

from ..analysis.clusters import _check_gap_tol
from ..model.checks import ParameterError
from ..model.params import ModelParams
from ..sim.layers import _attention_output
from .flow import merge_nodes
from .merge import _check_nodes

__all__ = ["arc_masses", "minority_mass"]


def minority_mass(x: torch.Tensor, w: torch.Tensor) -> np.ndarray:
    """`(runs,)`: the weight on the side of `<x_1, x_j> < 0` or of `> 0`, whichever is smaller,
    node 1 the heaviest; `x` `(runs, K, d)`, `w` `(runs, K)` (zero weights: padding).

    Args:
        x: Nodes `(runs, K, d)` of decided systems.
        w: Their weights `(runs, K)`.

    Returns:
        The minority mass of each run, `(runs,)`.
    """
    _check_nodes(x, w)
    if not bool(((w >= 0).all(-1) & (w.sum(-1) > 0)).all()):
        raise ParameterError("w must be weights >= 0 with a positive sum in every run")
    ref = x[torch.arange(x.shape[0]), w.argmax(-1)]
    side = (x @ ref.unsqueeze(-1)).squeeze(-1) < 0
    m = (w * side).sum(-1) / w.sum(-1)
    return torch.minimum(m, 1.0 - m).numpy()


def _atom_count(x: torch.Tensor, w: torch.Tensor, atom_tol: float = 1e-3) -> np.ndarray:
    """`(runs,)`: live nodes left after merging those with `1 - <x_i, x_j> < atom_tol`
    (`flow.merge_nodes`, transitive through the smallest-index link)."""
    return (merge_nodes(x, w, _check_gap_tol(atom_tol, "atom_tol"))[1] > 0).sum(-1).numpy()


def _arc_counts(x: torch.Tensor, w: torch.Tensor, starts: np.ndarray, length: float = np.pi
               ) -> np.ndarray:
    """d = 2: the weight of nodes with angle in `[a, a + length)`, `a` in `starts` (node counting,
    first order in the spacing); `(runs, m)` from `x` `(runs, K, 2)`, `w` `(runs, K)`."""
    ang = np.arctan2(x[..., 1].numpy(), x[..., 0].numpy())[..., None]
    inside = (ang - np.asarray(starts)) % (2 * np.pi) < length
    wn = (w / w.sum(-1, keepdim=True)).numpy()[..., None]
    return (wn * inside).sum(-2)


def arc_masses(x: torch.Tensor, w: torch.Tensor, starts: np.ndarray, length: float = np.pi
               ) -> np.ndarray:
    """d = 2, nodes in their counter-clockwise order (the flow, a circle diffeomorphism isotopic to
    the identity, keeps it; nodes must not have been merged): the mass of each arc
    `[a, a + length)`, `a` in `starts` `(m,)`, from the piecewise-linear cumulative mass through
    the node angles (each node's weight split half to each side), second order in the spacing.
    `(runs, m)` from `x` `(runs, K, 2)` and `w` `(runs, K)`."""
    ang = np.unwrap(np.arctan2(x[..., 1].numpy(), x[..., 0].numpy()), axis=-1)
    wn = (w / w.sum(-1, keepdim=True)).numpy()
    out = np.empty((x.shape[0], len(starts)))
    for r in range(x.shape[0]):
        a, m = ang[r], wn[r]
        # cumulative mass at the nodes; the mass between node k and k+1 is (m_k + m_{k+1}) / 2
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (m[:-1] + m[1:]))])
        a_ext = np.concatenate([a - 2 * np.pi, a, a + 2 * np.pi])
        c_ext = np.concatenate([cum - 1.0, cum, cum + 1.0])
        lo = (np.asarray(starts) - a[0]) % (2 * np.pi) + a[0]
        out[r] = np.interp(lo + length, a_ext, c_ext) - np.interp(lo, a_ext, c_ext)
    return out


def _field_at(points: torch.Tensor, x: torch.Tensor, w: torch.Tensor, p: ModelParams
             ) -> torch.Tensor:
    """The attention field `y(z) = sum_k w_k e^{beta <z, x_k>} x_k / sum_k w_k e^{beta <z, x_k>}`
    of the measure `sum_k w_k delta_{x_k}` at test points `points` `(m, d)`: `(runs, m, d)`."""
    z = points.to(x).expand(x.shape[0], *points.shape)
    both = torch.cat([z, x], -2)
    wz = torch.cat([torch.zeros(z.shape[:-1], dtype=x.dtype), w], -1)
    return _attention_output(both, p, weights=wz)[:, :points.shape[0]]
