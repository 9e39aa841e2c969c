"""Samplers of the unit-time layer noise `xi_i = V y_i` for each noise law (spec §2, §4).

`full` draws the d x d matrix V itself (through the law's strategy object, `tokensde.model.noise`);
`fast` draws `(V y_1..V y_n)` directly as `sigma C Z` with `C C^T = Y Y^T` (exact in law for
Gaussian V, `n d` normals instead of `d^2`). A law lists the exact samplers it allows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..model.noise import apply_matrices as apply_matrices
from ..model.params import ModelParams, ParameterError
from ..model.qk import QK_LAWS
from .rng import RunStreams

__all__ = ["PIVOT_MARGIN", "choose_sampler", "mlp_noise_sde"]

_Sampler = Callable[[torch.Tensor, ModelParams, RunStreams], torch.Tensor]
_SAMPLERS: tuple[str, ...] = ("auto", "fast", "full", "gram")


def _full_noise(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """Noise `xi_i = V y_i` by drawing the whole value matrix (any law); `d^2` draws per run."""
    return p.noise_law.draw(y, rs)


#: A run's Gram matrix is factored by Cholesky only when every pivot (the squared distance of a
#: row from the span of the rows before it) is at least this fraction of that row's squared
#: length, i.e. every row lies at least 3 % of its length away from the span before it. Elsewhere
#: (merged or antipodal tokens, more rows than columns) the factor is the symmetric square root.
#: The choice is a fixed margin of the run's own state, far above rounding, so a rounding-level
#: change of the input never changes the factor by more than rounding error amplified by at most
#: about PIVOT_MARGIN^(-1/2) = 32 per factor.
PIVOT_MARGIN = 1e-3


def _sym_root(y: torch.Tensor) -> torch.Tensor:
    """The symmetric square root `(Y Y^T)^(1/2) = U diag(s) U^T` `(runs, n, n)` of each run's Gram
    matrix, from the thin SVD `Y = U diag(s) W^T`.

    Continuous (Lipschitz in the Frobenius norm) in `Y` `(runs, n, k)`, rank deficiency included,
    and invariant to the signs and the basis the SVD picks within a singular subspace. The SVD of
    `Y` itself keeps the absolute precision of `Y`: two rows `delta` apart get rows about `delta`
    apart, down to rounding (an eigen-decomposition of `Y Y^T` leaves them up to
    `eps |Y|^2 / gap` apart, enough to split merged tokens over a few layers).

    Args:
        y: the rows `(runs, n, k)`.

    Returns:
        `U diag(s) U^T`, `(runs, n, n)`.
    """
    if y.shape[-2] == 2:
        return _pair_root(y)
    u, s, _ = torch.linalg.svd(y, full_matrices=False)
    return (u * s.unsqueeze(-2)) @ u.transpose(-1, -2)


def _pair_root(y: torch.Tensor) -> torch.Tensor:
    """`sym_root` of two rows in closed form: `(G + w I) / sqrt(tr G + 2 w)`, `w = sqrt(det G)`
    `= |a| |b - (<a, b> / |a|^2) a|` (the area the rows span, without the cancellation of
    `|a|^2 |b|^2 - <a, b>^2`); 0 for two zero rows."""
    k = y @ y.transpose(-1, -2)
    a, b = y[..., 0, :], y[..., 1, :]
    aa = k[..., 0, 0]
    coef = torch.where(aa > 0, k[..., 0, 1] / torch.where(aa > 0, aa, 1.0), 0.0)
    w = aa.sqrt() * torch.linalg.vector_norm(b - coef.unsqueeze(-1) * a, dim=-1)
    root = k + w[..., None, None] * torch.eye(2, dtype=y.dtype, device=y.device)
    scale = (k.diagonal(dim1=-2, dim2=-1).sum(-1) + 2 * w).sqrt()
    return root / torch.where(scale > 0, scale, 1.0)[..., None, None]


def _psd_root(k: torch.Tensor) -> torch.Tensor:
    """The symmetric square root `G^(1/2)` of positive semi-definite `G` `(runs, n, n)`, negative
    rounding eigenvalues set to 0 (continuous in `G`; a zero eigenvalue's root has about half the
    digits of `G`)."""
    w, u = torch.linalg.eigh(k)
    return (u * w.clamp(min=0.0).sqrt().unsqueeze(-2)) @ u.transpose(-1, -2)


def _well_pivoted(pivots: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`(runs,)`: every row is well pivoted, `pivots^2 >= PIVOT_MARGIN * lengths` row by row, for
    the diagonal `pivots` `(runs, n)` of a triangular factor and the squared row lengths `lengths`
    `(runs, n)` (a nan pivot, from a failed Cholesky, is not well pivoted)."""
    return (pivots.square() >= PIVOT_MARGIN * lengths).all(-1)


def _cholesky_or(k: torch.Tensor, fallback: torch.Tensor | None,
                 root: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Cholesky factors of `k` `(runs, n, n)`, and `root(fallback)` for the runs not well pivoted."""
    c, info = torch.linalg.cholesky_ex(k)
    pivots = torch.where((info == 0).unsqueeze(-1), c.diagonal(dim1=-2, dim2=-1), torch.nan)
    bad = ~_well_pivoted(pivots, k.diagonal(dim1=-2, dim2=-1))
    if bool(bad.any()):
        c[bad] = root((k if fallback is None else fallback)[bad])
    return c


def _gram_factor(y: torch.Tensor) -> torch.Tensor:
    """`C` `(runs, n, n)` with `C C^T = Y Y^T` for each run of `Y` `(runs, n, k)`.

    The Cholesky factor where the run is well pivoted by the margin `PIVOT_MARGIN`; the symmetric
    root `sym_root` elsewhere (always when `n > k`). Each run's factor depends on that run alone,
    and a rounding-level change of `Y` moves `C` by rounding error only (amplified by at most about
    `PIVOT_MARGIN^(-1/2)`): no branch on a rounding-level quantity.

    Args:
        y: the rows whose Gram matrix is factored, `(runs, n, k)`.

    Returns:
        The factor `C`, `(runs, n, n)`.
    """
    if y.shape[-2] > y.shape[-1]:
        return _sym_root(y)
    return _cholesky_or(y @ y.transpose(-1, -2), y, _sym_root)


def _gaussian_image(y: torch.Tensor, cols: int, rs: RunStreams) -> torch.Tensor:
    """A draw of `Y G` `(runs, n, cols)` for `G` `(k, cols)` standard normal, `Y` `(runs, n, k)`.

    With `n >= k`, `G` itself is drawn (`k cols` normals, linear in `Y`); with `n < k`, the exact
    law `C Z` with `C C^T = Y Y^T` (`gram_factor`) and `Z` `(n, cols)` standard normal (`n cols`
    normals). The choice depends on the shapes alone.

    Args:
        y: the rows, `(runs, n, k)`.
        cols: the number of columns of `G`.
        rs: the run streams the normals come from.

    Returns:
        The draw, `(runs, n, cols)`.
    """
    n, k = y.shape[-2:]
    if n >= k:
        return y @ rs.normal(k, cols, dtype=y.dtype)
    return _gram_factor(y) @ rs.normal(n, cols, dtype=y.dtype)


def _fast_noise(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """Exact-in-law Gaussian matrix noise `xi_i = V y_i` `(runs, n, d)`: `sigma C Z` with
    `C C^T = Y Y^T` when `n < d` (`n d` normals), `Y V^T` with `V` drawn when `n >= d`."""
    return _gaussian_image(y, p.d, rs).mul_(p.sigma)


def _fast_applicable(p: ModelParams) -> bool:
    """The fast sampler is exact for Gaussian matrix noise only (the laws that list 'fast')."""
    return "fast" in p.noise_law.samplers and "fast" in p.attention_kind.samplers


def _gram_applicable(p: ModelParams) -> bool:
    """The Gram-space sampler needs every piece of a layer rotation invariant
    (`ModelParams.rotation_invariant`) and Gaussian matrix noise."""
    return p.rotation_invariant


def _gram_refusal(p: ModelParams) -> str | None:
    """Why `sampler='gram'` does not apply to `p` (a message naming the parameter), or None."""
    use = " (use sampler='fast' or 'full')"
    if p.token_noise > 0:
        return (f"sampler='gram' does not carry independent token noise; got token_noise="
                f"{p.token_noise:g} (the allowed value is 0){use}")
    if p.has_bias:
        return (f"sampler='gram' does not carry the biases; got bias_sigma={p.bias_sigma:g}, "
                f"mlp_bias={p.mlp_bias:g}{use}")
    law = p.qk_law
    if law.random and not law.rotation_invariant:
        invariant = ", ".join(n for n in QK_LAWS.names()
                              if QK_LAWS.get(n).random and QK_LAWS.get(n).rotation_invariant)
        return (f"sampler='gram' needs a rotation-invariant qk law ({invariant}, or 'identity'); "
                f"got qk={p.qk!r}, whose law changes under rotations, so the logits given the "
                f"tokens depend on more than their Gram matrix{use}")
    if law.random and law.redraw != "layer":
        return (f"sampler='gram' needs qk_redraw='layer' with a random qk law (a form fixed for "
                f"the run makes the logits depend on more than the tokens' Gram matrix); got "
                f"qk={p.qk!r}, qk_redraw={p.qk_redraw!r}{use}")
    qk = p.qk_matrix()
    if qk is not None and qk.ndim == 3:
        return (f"sampler='gram' needs one query/key form Q^T K = c I shared by the heads; got "
                f"Q/K per head, shape {qk.shape} (fixed forms per head make the Gram matrix "
                f"alone not Markov){use}")
    if not _gram_applicable(p):
        return ("sampler='gram' needs Gaussian matrix noise and rotation-invariant attention "
                "(Q^T K = c I, mean none/identity/a I)")
    return None


def choose_sampler(p: ModelParams, sampler: str = "auto", coordinates: bool = False) -> str:
    """Resolve `sampler` to 'fast', 'full' or 'gram' for these parameters.

    `auto` takes `gram` when it applies, `norm='post'` (pre/peri-norm take it only when asked
    for, so that their earlier `auto` runs keep their numbers) and `d >= 4 n` (its cost per
    layer, `n^3`, `heads n^3` with a random form per head, plus `n^2 m` for an MLP block of width
    m (4 d by default), does not grow with d otherwise; benchmarks/bench_gram.py measures it
    level with `fast` near d = 2n, and with heads, forms redrawn every layer or a block it was
    no slower than `fast` at n = 8, d = 32), else `fast` for Gaussian matrix noise when `n < d`
    (its cost `n^2 d` beats `n d^2`), else `full`.

    Args:
        p: the model parameters.
        sampler: 'auto', 'fast', 'full' or 'gram'.
        coordinates: an output reads coordinates in R^d (the 'tokens' record, an observer not
            declared invariant), which the Gram sampler does not hold: `auto` then never takes
            it (docs/gram.md, "What a Gram run returns").

    Returns:
        The sampler that runs: 'fast', 'full' or 'gram'.

    Raises:
        ParameterError: `sampler` is not one of those, or does not apply to `p` (the message
            says why and which sampler to use).
    """
    if sampler not in _SAMPLERS:
        raise ParameterError(f"sampler must be one of {', '.join(_SAMPLERS)}; got {sampler!r}")
    if sampler == "auto":
        if not coordinates and _gram_applicable(p) and p.norm == "post" and p.d >= 4 * p.n:
            return "gram"
        return "fast" if _fast_applicable(p) and p.n < p.d else "full"
    if sampler == "fast" and not _fast_applicable(p):
        raise ParameterError("sampler='fast' needs noise='matrix' with law='gaussian'; got "
                             f"noise={p.noise!r}, law={p.law!r} (use sampler='full')")
    if sampler == "gram":
        why = _gram_refusal(p)
        if why is not None:
            raise ParameterError(why)
    return sampler


def _scheme_params(p: ModelParams, scheme: str) -> ModelParams:
    """The parameters `scheme` steps: `p`, except that the SDE of forms redrawn every layer
    averages the attention over the qk law with `qk_samples` draws per head and step, i.e. steps
    `heads * qk_samples` heads (docs/variants.md §3)."""
    if scheme == "sde" and p.qk_law.random and p.qk_redraw == "layer":
        return p.with_(heads=p.heads * p.qk_samples)
    return p


_NOISE_SAMPLERS: dict[str, _Sampler] = {"fast": _fast_noise, "full": _full_noise}


def _psd_factor(k: torch.Tensor) -> torch.Tensor:
    """`C` with `C C^T = G` for positive semi-definite `G` `(runs, n, n)`: Cholesky for the runs
    well pivoted by the margin `PIVOT_MARGIN`, the symmetric root `_psd_root` for the others.

    Args:
        k: the matrices, `(runs, n, n)`.

    Returns:
        The factors, `(runs, n, n)`.
    """
    return _cholesky_or(k, None, _psd_root)


def _mlp_scale(p: ModelParams) -> float:
    """Entry standard deviation of `W_2`: `mlp_sigma / sqrt(m kappa(1))`."""
    return p.mlp_sigma / (p.mlp_hidden * p.mlp_block.second_moment) ** 0.5


def _mlp_noise_full(x: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """MLP output `W_2 phi(W_1 x_i)` `(runs, n, d)` with both weight matrices drawn (docs/variants.md §5)."""
    w1 = rs.normal(p.mlp_hidden, p.d, dtype=x.dtype)
    h = p.mlp_block(x @ w1.transpose(-1, -2))
    w2 = rs.normal(p.d, p.mlp_hidden, dtype=x.dtype)
    return (h @ w2.transpose(-1, -2)).mul_(_mlp_scale(p))


def _mlp_noise_fast(x: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """The law of `mlp_noise_full` without d-sized weights where the tokens are fewer: the
    pre-activations `X W_1^T` and, given `H = phi(X W_1^T)`, the output `s H W_2^T` are each drawn
    by `gaussian_image` (the weights themselves when the rows outnumber the columns)."""
    h = p.mlp_block(_gaussian_image(x, p.mlp_hidden, rs))
    return _gaussian_image(h, p.d, rs).mul_(_mlp_scale(p))


def _mlp_noise_given(x: torch.Tensor, p: ModelParams, pre: torch.Tensor, z: torch.Tensor,
                    divide: float = 1.0) -> torch.Tensor:
    """`mlp_noise_fast` with its standard normals given, `pre` `(runs, n, m)` for the hidden
    pre-activations `C_X pre` and `z` `(runs, n, d)` for the output: `(s / divide) C_H z`,
    `C_H C_H^T = H H^T`, `H = phi(C_X pre)` (`divide`: sqrt(k) when `z` sums k normals)."""
    h = p.mlp_block(_gram_factor(x) @ pre)
    return (_gram_factor(h) @ z).mul_(_mlp_scale(p) / divide)


def _mlp_kernel_noise(x: torch.Tensor, p: ModelParams, z: torch.Tensor) -> torch.Tensor:
    """The depth limit's MLP noise driven by standard normals `z` `(runs, n, d)`: `mlp_sigma C z`
    with `C C^T = khat(X X^T)`, cross-covariance `mlp_sigma^2 khat(<x_i, x_j>) I`."""
    k = p.mlp_block.kernel_t(x @ x.transpose(-1, -2))
    return (_psd_factor(k) @ z).mul_(p.mlp_sigma)


def mlp_noise_sde(x: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """`mlp_kernel_noise` with `z` drawn from `rs`."""
    return _mlp_kernel_noise(x, p, rs.normal(p.n, p.d, dtype=x.dtype))


_MLP_SAMPLERS: dict[str, Callable[[torch.Tensor, ModelParams, RunStreams], torch.Tensor]] = {
    "fast": _mlp_noise_fast, "full": _mlp_noise_full, "sde": mlp_noise_sde}


def _mlp_sampler(sampler: str, scheme: str) -> _Sampler:
    """The MLP-block noise of `scheme` ('sde': the kernel limit) with `sampler` ('fast', 'full')."""
    return _MLP_SAMPLERS["sde" if scheme == "sde" else sampler]


def _noise_sampler(sampler: str, p: ModelParams) -> _Sampler:
    """The sampler `sampler` ('fast' or 'full'); with `heads > 1` it draws each head's noise
    independently from outputs `(runs, heads, n, d)` and returns `heads^(-1/2) sum_h V_h y^h`."""
    one = _NOISE_SAMPLERS[sampler]
    if p.heads == 1:
        return one

    def heads(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
        xi = one(y[:, 0], p, rs)
        for h in range(1, p.heads):
            xi.add_(one(y[:, h], p, rs))
        return xi.mul_(p.heads ** -0.5)

    return heads
