"""Cluster analysis of token configurations from their Gram matrices (spec §7), batched over runs.

Every function takes Gram matrices `gram` `(runs, n, n)` (or one `(n, n)`) of unit tokens,
`G_ij = <x_i, x_j>`, and works on the *gaps* `1 - G_ij` (distance to merged) and `1 + G_ij`
(distance to antipodal), whose logarithms are what relaxes linearly in depth time:

- `i, j` are *merged* if `1 - G_ij < tol`, *antipodal* if `1 + G_ij < tol`;
- *clusters* are the connected components of the merged graph, *poles* those of the
  merged-or-antipodal graph (clusters up to sign);
- a configuration is *decided* when every pair is merged or antipodal (`1 - |G_ij| < tol`).

Outcome at the horizon (`outcome_codes`, the one rule that `analyze`, `classify_clusters`,
`token_clusters._tokens_outcome`, the command line and the mean-field statistics share): a
decided run is *single* when no pair is antipodal (one cluster) and *bipolar* otherwise (two
antipodal clusters, the absorbing formations of the noisy dynamics). Any other configuration is
*other* if it is frozen — no inner product moved by more than `move_tol` since an earlier
checkpoint `before` (e.g. metastable clusters of the deterministic flow) — and *undecided* if it
is still moving (or if no earlier checkpoint is given). The rule is on pairs, not on the
components of the merged graph: tokens spread round the circle form one chain of merged
neighbours (one component) once their spacing is below `arccos(1 - tol)`, though most of their
pairs are far apart; such a run is not decided.

In float64 a Gram entry resolves gaps down to about 1e-16, so `tol` must lie in
[`TOL_MIN`, `TOL_MAX`]; `log_gaps` gives the gaps in log10 space for histograms.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..model.checks import _check_int, _require, check_tol
from ..model.params import ParameterError, _check_real

if TYPE_CHECKING:
    import torch

# inner products as a numpy array or a torch tensor: the pair helpers below work on either
_Inner = TypeVar("_Inner", np.ndarray, "torch.Tensor")

# Floor of the log-gap scale: a float64 Gram cannot resolve 1 - G below ~1e-16.
_LOG_GAP_FLOOR = -16.0


class Outcome(IntEnum):
    """Outcome of one run at the horizon."""

    SINGLE = 0
    BIPOLAR = 1
    OTHER = 2
    UNDECIDED = 3


OUTCOME_NAMES: tuple[str, ...] = tuple(o.name.lower() for o in Outcome)


def _as_gram(gram: Any, name: str = "gram") -> np.ndarray:
    """Gram matrices as a float64 array `(runs, n, n)`; a single `(n, n)` gets a runs axis;
    ParameterError naming `name` when they are not finite real square matrices."""
    try:
        g = np.asarray(gram.cpu() if hasattr(gram, "cpu") else gram, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be an array of real numbers (runs, n, n); got "
                             f"{type(gram).__name__}") from None
    if g.ndim == 2:
        g = g[None]
    if g.ndim != 3 or g.shape[-1] != g.shape[-2] or g.shape[-1] < 1:
        raise ParameterError(f"{name} must have shape (runs, n, n) or (n, n); got {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ParameterError(f"{name} must be finite")
    return g


def _check_gap_tol(tol: Any, name: str = "tol") -> float:
    """A tolerance on a gap `1 -+ G_ij` (in [0, 2]): a finite number in (0, 2], else
    ParameterError naming `name`. Cheap for a plain float (the pair helpers run every layer)."""
    if type(tol) is float and 0.0 < tol <= 2.0:
        return tol
    t = _check_real(name, tol, 0.0, strict=True)
    _require(t <= 2.0, name, "a number in (0, 2] (gaps 1 -+ G_ij lie in [0, 2])", tol)
    return t


def _closure(adj: np.ndarray) -> np.ndarray:
    """Reflexive-transitive closure of boolean adjacency `(runs, n, n)` by repeated squaring."""
    n = adj.shape[-1]
    r = adj | np.eye(n, dtype=bool)
    for _ in range(max(1, int(np.ceil(np.log2(max(n, 2)))))):
        r = (r.astype(np.float32) @ r.astype(np.float32)) > 0
    return r


def _component_labels(adj: np.ndarray) -> np.ndarray:
    """Label of each node: the smallest index in its connected component, `(runs, n)`."""
    return np.argmax(_closure(adj), axis=-1)


def is_merged(g: _Inner, tol: float) -> _Inner:
    """Elementwise `1 - g < tol`: inner products `g` of merged pairs (spec §7).

    Args:
        g: Inner products, a numpy array or a torch tensor of any shape.
        tol: The merged tolerance.

    Returns:
        A boolean array (or tensor) of the shape of `g`.
    """
    tol = _check_gap_tol(tol)
    return 1.0 - g < tol


def is_antipodal(g: _Inner, tol: float) -> _Inner:
    """Elementwise `1 + g < tol`: inner products `g` of antipodal pairs (spec §7).

    Args:
        g: Inner products, a numpy array or a torch tensor of any shape.
        tol: The antipodal tolerance.

    Returns:
        A boolean array (or tensor) of the shape of `g`.
    """
    tol = _check_gap_tol(tol)
    return 1.0 + g < tol


def _merged(gram: Any, tol: float) -> np.ndarray:
    """Boolean `(runs, n, n)`: `1 - G_ij < tol`."""
    return is_merged(_as_gram(gram), check_tol(tol))


def _antipodal(gram: Any, tol: float) -> np.ndarray:
    """Boolean `(runs, n, n)`: `1 + G_ij < tol`."""
    return is_antipodal(_as_gram(gram), check_tol(tol))


def _cluster_labels(gram: Any, tol: float) -> np.ndarray:
    """Cluster label of each token (smallest index in its cluster), `(runs, n)`."""
    return _component_labels(_merged(gram, tol))


def _pole_labels(gram: Any, tol: float) -> np.ndarray:
    """Pole label of each token (clusters up to sign), `(runs, n)`."""
    return _component_labels(_merged(gram, tol) | _antipodal(gram, tol))


def _count_labels(labels: np.ndarray) -> np.ndarray:
    """Number of distinct labels per run, `(runs,)`: labels are roots, so count `label_i == i`."""
    return (labels == np.arange(labels.shape[-1])).sum(-1)


def _label_sizes(labels: np.ndarray) -> np.ndarray:
    """Component sizes per run, sorted descending and zero-padded, `(runs, n)`."""
    n = labels.shape[-1]
    sizes = (labels[..., None] == np.arange(n)).sum(-2)
    return -np.sort(-sizes, axis=-1)


def upper_pairs(gram: _Inner) -> _Inner:
    """Off-diagonal entries `G_ij, i < j` (row-major), of Gram matrices `(..., n, n)`:
    `(..., n(n-1)/2)`, a numpy array or a torch tensor like `gram`.

    Args:
        gram: Gram matrices `(..., n, n)`, numpy or torch.

    Returns:
        The entries above the diagonal, `(..., n(n-1)/2)`, of the type of `gram`.
    """
    i, j = np.triu_indices(gram.shape[-1], k=1)
    return gram[..., i, j]


def pair_fractions(pairs: Any, tol: float) -> tuple[float, float]:
    """Fractions `(merged, antipodal)` of the inner products `pairs` (any shape, e.g. from
    `upper_pairs`; compared in float64, as `analyze` does): `1 - G_ij < tol`, `1 + G_ij < tol`.

    Args:
        pairs: Inner products `G_ij`, any shape (numpy or torch).
        tol: The merged / antipodal tolerance.

    Returns:
        `(merged, antipodal)`: the fractions of `pairs` within `tol` of +1 and of -1.
    """
    tol = _check_gap_tol(tol)
    try:
        g = np.asarray(pairs.cpu() if hasattr(pairs, "cpu") else pairs, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"pairs must be an array of inner products; got "
                             f"{type(pairs).__name__}") from None
    _require(g.size > 0, "pairs", "non-empty (no pair: no fraction)", "an empty array")
    _require(bool(np.all(np.isfinite(g))), "pairs", "finite", "non-finite entries")
    return float(is_merged(g, tol).mean()), float(is_antipodal(g, tol).mean())


def antipodal_fraction(gram: Any, tol: float) -> np.ndarray:
    """Fraction of pairs `i < j` that are antipodal, `(runs,)` (nan for n = 1).

    Args:
        gram: Gram matrices `(runs, n, n)`.
        tol: A pair is antipodal when `1 + G_ij < tol`.

    Returns:
        The fraction of antipodal pairs of each run, `(runs,)`.
    """
    tol = check_tol(tol)
    g = _as_gram(gram)
    pairs = upper_pairs(g)
    if pairs.shape[-1] == 0:
        return np.full(g.shape[0], np.nan)
    return is_antipodal(pairs, tol).mean(-1)


def effective_rank(gram: Any) -> np.ndarray:
    """Participation ratio of the Gram spectrum, `(tr G)^2 / tr(G^2)`, `(runs,)`: 1 on one pole,
    n for orthonormal tokens.

    Args:
        gram: Gram matrices `(runs, n, n)`.

    Returns:
        The participation ratio of each run, `(runs,)`.
    """
    g = _as_gram(gram)
    tr = np.trace(g, axis1=-2, axis2=-1)
    _require(bool(np.all(tr > 0)), "gram", "Gram matrices of a positive trace (tokens not all "
            "zero)", f"a trace of {float(tr.min()):g}")
    return tr * tr / (g * g).sum((-2, -1))


def _log_gaps(gram: Any) -> np.ndarray:
    """`log10(1 - |G_ij|)` for pairs `i < j`, floored at LOG_GAP_FLOOR, `(runs, n(n-1)/2)`."""
    gap = 1.0 - np.abs(upper_pairs(_as_gram(gram)))
    with np.errstate(divide="ignore"):
        return np.maximum(np.log10(np.maximum(gap, 0.0)), _LOG_GAP_FLOOR)


def inner_product_histogram(gram: Any, bins: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of pairwise inner products `G_ij, i < j` over all runs on [-1, 1]:
    `(counts (bins,), edges (bins + 1,))`.

    Args:
        gram: Gram matrices `(runs, n, n)`.
        bins: Number of equal bins on [-1, 1].

    Returns:
        `(counts, edges)`: counts `(bins,)` and bin edges `(bins + 1,)`.
    """
    edges = np.linspace(-1.0, 1.0, _check_int("bins", bins, 1) + 1)
    counts, _ = np.histogram(np.clip(upper_pairs(_as_gram(gram)), -1.0, 1.0), bins=edges)
    return counts, edges


def _motion(gram: Any, before: Any) -> np.ndarray:
    """Largest change of an inner product between two checkpoints, `max_ij |G_ij - B_ij|`,
    `(runs,)`."""
    g, b = _as_gram(gram), _as_gram(before, "before")
    if g.shape != b.shape:
        raise ParameterError(f"before must have the shape of gram {g.shape}; got {b.shape}")
    return np.abs(g - b).max((-2, -1))


@dataclass(frozen=True)
class ClusterReport:
    """Per-run cluster analysis at tolerance `tol`; arrays have a leading runs axis."""

    tol: float
    n_clusters: np.ndarray
    n_poles: np.ndarray
    cluster_sizes: np.ndarray
    antipodal_fraction: np.ndarray
    effective_rank: np.ndarray
    moved: np.ndarray | None
    outcome: np.ndarray

    @property
    def bipolar(self) -> np.ndarray:
        """Boolean `(runs,)`: one pole split into two antipodal clusters."""
        return self.outcome == Outcome.BIPOLAR

    @property
    def sides(self) -> np.ndarray:
        """Sizes `(major, minor)` of the two sides of each run, `(runs, 2)`; 0 where not bipolar."""
        return np.where(self.bipolar[:, None], self.cluster_sizes[:, :2], 0)

    def counts(self) -> dict[str, int]:
        """Number of runs in each outcome."""
        return {name: int((self.outcome == o).sum()) for name, o in zip(OUTCOME_NAMES, Outcome,
                                                                         strict=True)}


def _outcome_codes(decided: Any, split: Any, frozen: Any = None) -> np.ndarray:
    """The outcome rule, `(runs,)` int8 codes of `Outcome`: single = decided and not split,
    bipolar = decided and split, other = not decided and frozen, undecided = the rest.

    Args:
        decided: boolean `(runs,)`: every pair within tol of +1 or -1 (`1 - |G_ij| < tol`).
        split: boolean `(runs,)`: some token (of positive weight) lies on the side opposite the
            first, `<x_i, x_1> < 0` (in a decided run: some pair is antipodal).
        frozen: boolean `(runs,)`, or None (nothing known to be frozen).

    Returns:
        The outcome codes.
    """
    def flags(a: Any) -> np.ndarray:
        return np.asarray(a.cpu() if hasattr(a, "cpu") else a, dtype=bool).reshape(-1)

    done, two = flags(decided), flags(split)
    if done.shape != two.shape:
        raise ParameterError(f"decided and split must have one flag per run; got shapes "
                             f"{done.shape} and {two.shape}")
    rest = np.zeros_like(done) if frozen is None else flags(frozen)
    out = np.where(rest, Outcome.OTHER, Outcome.UNDECIDED)
    out = np.where(done & two, Outcome.BIPOLAR, out)
    return np.where(done & ~two, Outcome.SINGLE, out).astype(np.int8)


def analyze(gram: Any, tol: float = 1e-4, before: Any = None, move_tol: float | None = None
            ) -> ClusterReport:
    """Clusters, poles, antipodal fraction, effective rank and outcome of each run.

    The outcome is `outcome_codes` of the pairs: single or bipolar only when every pair is
    within `tol` of +1 or -1. `before`: Gram matrices at an earlier checkpoint; a configuration
    that is neither single nor bipolar is *other* if `max |G - before| <= move_tol` (default
    `tol`), else *undecided*.

    Args:
        gram: Gram matrices `(runs, n, n)` (numpy or torch) of unit tokens.
        tol: A pair is merged when `1 - G_ij < tol`, antipodal when `1 + G_ij < tol`.
        before: Gram matrices `(runs, n, n)` at an earlier checkpoint, or None.
        move_tol: The largest change from `before` of a configuration that counts as settled
            (default `tol`).

    Returns:
        A `ClusterReport`: clusters, poles, cluster sizes, antipodal fraction, effective rank and
        outcome code of each run.
    """
    g = _as_gram(gram)
    tol = check_tol(tol)
    mtol = tol if move_tol is None else _check_real("move_tol", move_tol, 0.0)
    near1, near_1 = is_merged(g, tol), is_antipodal(g, tol)
    clusters = _component_labels(near1)
    poles = _component_labels(near1 | near_1)
    n_clusters, n_poles = _count_labels(clusters), _count_labels(poles)
    moved = None if before is None else _motion(g, before)
    frozen = None if moved is None else moved <= mtol
    decided = (near1 | near_1 | np.eye(g.shape[-1], dtype=bool)).all((-2, -1))
    return ClusterReport(
        tol=tol, n_clusters=n_clusters, n_poles=n_poles, cluster_sizes=_label_sizes(clusters),
        antipodal_fraction=antipodal_fraction(g, tol), effective_rank=effective_rank(g),
        moved=moved, outcome=_outcome_codes(decided, (g[:, 0] < 0).any(-1), frozen),
    )


def classify_clusters(gram: Any, tol: float = 1e-4, before: Any = None, move_tol: float | None = None
             ) -> np.ndarray:
    """Outcome code (`Outcome`) of each run, `(runs,)`; see `analyze`.

    Args:
        gram: Gram matrices `(runs, n, n)`.
        tol: The merged / antipodal tolerance of `analyze`.
        before: Gram matrices at an earlier checkpoint, or None.
        move_tol: The largest change from `before` that counts as settled (default `tol`).

    Returns:
        The outcome code of each run, `(runs,)` (values of `Outcome`).
    """
    return analyze(gram, tol, before, move_tol).outcome


def minority_law(report: ClusterReport, n: int) -> np.ndarray:
    """Counts of the minority side size `m = 1..n//2` over the bipolar runs, `(n//2,)`.

    Args:
        report: The `analyze` result of runs of `n` tokens.
        n: Number of tokens.

    Returns:
        Counts `(n//2,)`: entry `m - 1` is the number of bipolar runs whose smaller pole holds `m`
        tokens.
    """
    n = _check_int("n", n, 1)
    minor = report.sides[report.bipolar, 1]
    return np.bincount(minor, minlength=n // 2 + 1)[1:n // 2 + 1]


def tolerance_report(gram: Any, tol: float = 1e-4, before: Any = None,
                     move_tol: float | None = None, factor: float = 10.0) -> dict[str, Any]:
    """How outcomes move when `tol` is divided and multiplied by `factor` (move_tol scales with it).

    Returns the outcome counts at `tol / factor`, `tol`, `tol * factor` and the fraction of runs
    whose outcome differs from the one at `tol`.

    Args:
        gram: Gram matrices `(runs, n, n)`.
        tol: The tolerance of `analyze`.
        before: Gram matrices at an earlier checkpoint, or None.
        move_tol: The settled tolerance of `analyze` (default `tol`); scaled with `tol`.
        factor: How far `tol` is moved each way (> 1).

    Returns:
        `tol`, `factor`, `counts` (the outcome counts at `tol`), `counts_down` / `counts_up` (at
        `tol / factor` and `tol * factor`) and `changed_down` / `changed_up` (the fraction of runs
        whose outcome changes).
    """
    tol = check_tol(tol)
    f = _check_real("factor", factor, 1.0, strict=True)
    mtol = tol if move_tol is None else move_tol
    base = analyze(gram, tol, before, mtol)
    out: dict[str, Any] = {"tol": tol, "factor": f, "counts": base.counts()}
    for label, scale in (("down", 1.0 / f), ("up", f)):
        other = analyze(gram, check_tol(tol * scale, f"tol * {scale:g}"), before, mtol * scale)
        out[f"counts_{label}"] = other.counts()
        out[f"changed_{label}"] = float((other.outcome != base.outcome).mean())
    return out


def _outcome_summary(pairs: int, mean: float, merged: float, antipodal: float,
                    outcome: np.ndarray, exact: bool = False) -> dict[str, Any]:
    """The summary of a batch of runs that `tokensde simulate` prints: pair counts and fractions
    (given), the fractions of runs by outcome (`outcome_codes`), and P(one cluster), P(bipolar)
    by the rule for undecided runs (`stats.estimate_with_undecided`: over the decided runs, with
    the bounds the others allow; `exact`: every run the same, no interval).

    Args:
        pairs: the number of pairs per run.
        mean: the mean inner product.
        merged: the fraction of pairs merged.
        antipodal: the fraction of pairs antipodal.
        outcome: the outcome codes `(runs,)`.
        exact: every run the same.

    Returns:
        The summary, JSON-ready.
    """
    from .stats import estimate_with_undecided

    runs = len(outcome)
    counts = {o: int((outcome == o).sum()) for o in (Outcome.SINGLE, Outcome.BIPOLAR)}
    decided = counts[Outcome.SINGLE] + counts[Outcome.BIPOLAR]
    return {
        "pairs": pairs,
        "mean_inner_product": mean,
        "frac_pairs_merged": merged,
        "frac_pairs_antipodal": antipodal,
        "frac_runs_one_cluster": counts[Outcome.SINGLE] / runs,
        "frac_runs_bipolar": counts[Outcome.BIPOLAR] / runs,
        "frac_runs_undecided": 1.0 - decided / runs,
        **{f"p_{name}": estimate_with_undecided(k, decided - k, runs, exact=exact).to_dict()
           for name, k in (("one_cluster", counts[Outcome.SINGLE]),
                           ("bipolar", counts[Outcome.BIPOLAR]))},
    }


def _pair_summary(gram: Any, tol: float, exact: bool = False) -> dict[str, Any]:
    """`outcome_summary` of Gram matrices `(runs, n, n)`: fractions of pairs with `1 - G_ij <
    tol` and `1 + G_ij < tol`, outcomes by `classify_clusters` (the rule `outcome_codes`, as
    `token_clusters._token_summary`); `{'pairs': 0}` for one token."""
    g = _as_gram(gram)
    rho = upper_pairs(g)
    if rho.size == 0:
        return {"pairs": 0}
    m, a = pair_fractions(rho, tol)
    return _outcome_summary(int(rho.shape[1]), float(rho.mean()), m, a, classify_clusters(g, tol),
                           exact)
