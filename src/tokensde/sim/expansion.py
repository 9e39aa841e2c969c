"""Attention in O(n) on the circle and the sphere: the kernel `exp(beta <x, y>)` by harmonics.

On S^1 (d = 2) and S^2 (d = 3) the softmax kernel has a positive, fast-converging expansion in
harmonics of the two points,

    d = 2:  exp(beta cos t) = I_0(beta) + 2 sum_{k >= 1} I_k(beta) cos(k t)
            (basis 1, cos k theta, sin k theta: cos k(a - b) = cos ka cos kb + sin ka sin kb)
    d = 3:  exp(beta <x, y>) = sum_l (2l + 1) i_l(beta) P_l(<x, y>)
                             = 4 pi sum_l i_l(beta) sum_m Y_lm(x) Y_lm(y)

(I_k the modified Bessel functions, i_l the modified spherical Bessel functions, Y_lm the real
orthonormal spherical harmonics). Truncated at order K, the kernel is `Phi diag(lam) Phi^T` with
`Phi` `(n, R)`, R = 2K + 1 (d = 2) or (K + 1)^2 (d = 3) basis functions of the tokens. The
attention of n (weighted) tokens then needs only the moments of the vector measure
`sum_j w_j (1, x_j) delta_{x_j}` against the basis:

    (Z_i, N_i) = sum_j w_j exp(beta <x_i, x_j>) (1, x_j) = Phi_i diag(lam) Phi^T [w, w x]

in O(n R) work and memory instead of O(n^2): softmax `y_i = N_i / Z_i`, USA `y_i = N_i / sum w`.
The coefficients are kept scaled by `e^{-beta}` (`scipy.special.ive`), so beta up to 1e3 and more
does not overflow; the scale cancels in the softmax ratio.

**Truncation bound** (`kernel_tail`, proved in docs/fast-attention.md): the truncated kernel
differs from `exp(beta <x, y>)` by at most `e^beta tau_d(beta, K)` for every pair of unit vectors,

    tau_2 = 2 exp(beta (cosh s - 1) - (K + 1) s),          s = asinh((K + 1) / beta),
    tau_3 = (2K + 3) exp(beta (cosh s - 1) - (K + 1) s),   s = max(asinh((K + 1) / beta),
                                                                     2 / (2K + 3)),

(a Chernoff bound on the positive generating functions `sum_k I_k(b) u^k = exp(b (u + 1/u) / 2)`
and `sum_l i_l(b) u^l <= exp(b (u + 1/u) / 2)`, u = e^s >= 1). Hence, with the cancellation scale
`S_i = e^beta sum_j w_j / Z_i` (softmax; `e^beta` for USA), every token's output satisfies
`|y_i - y_i^K| <= 2 tau S_i / (1 - tau S_i)` (softmax) and `tau S_i` (USA): `error_bound` is
`2 tau`, the error relative to `S_i` to first order. `S_i <= min(sum w / w_i, e^{2 beta})`: with
equal weights no token loses more than log10(n) digits to cancellation.

**Precision.** The moments and outputs are computed in float64 whatever the run's dtype, and the
default truncation tolerance is `max(2^-53, u / S)` (`default_tol`, u the unit roundoff of the
run's dtype, S the cancellation bound of its weights), so float32 outputs carry float32 accuracy.
A softmax token whose bound `min(sum w / w_i, e^{2 beta})` exceeds `cancellation_limit()` (where
float64 rounding alone could cost more than AUTO_CANCELLATION: a light or weightless token at
large beta) takes its output from the dense sum over all tokens instead, O(n) each.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError

__all__ = [
    "auto_uses_expansion", "basis_size", "default_tol", "expansion_output", "truncation_order",
    "unit_roundoff",
]

_EVALUATORS: tuple[str, ...] = ("auto", "dense", "expansion")
_EXPANSION_DIMS: tuple[int, ...] = (2, 3)
_EXPANSION_KINDS: tuple[str, ...] = ("softmax", "usa")
# Tokens go in blocks whose largest basis slab (2K + 1 rows) takes about SLAB_BYTES (a core's
# cache), at least BLOCK_MIN token-runs (fewer cost more in per-slab overhead than they save);
# with more than one block, each block's basis is computed twice (moments, then outputs)
_SLAB_BYTES = 1 << 20
_BLOCK_MIN = 2048
_MAX_ORDER = 20000  # far above any order a finite beta <= 1e6 and tol >= 1e-300 needs

# `auto` (simulate's attention_eval='auto') takes the expansion (float64 or float32) when it applies
# and n >= max(AUTO_MIN_N[d], AUTO_PER_BASIS[d] * R), R the number of basis functions at the run's
# beta and its default tolerance (`expansion_basis`). The dense attention costs
# ~ n^2 and the expansion ~ n R plus a fixed overhead; benchmarks/bench_attention.py (one run,
# float64, one thread, beta = 1, 3, 6) measured them level at n ~ 190-210 on the circle (3.7-6.1
# R) and n ~ 430-950 on the sphere (0.8-1.5 R): the rule sits at or a little above those
# crossovers (docs/fast-attention.md has the table). Fixed numbers, never a timing at run time,
# so one seed gives the same run on every machine.
_AUTO_MIN_N: dict[int, int] = {2: 256, 3: 512}
_AUTO_PER_BASIS: dict[int, float] = {2: 4.0, 3: 1.5}
# `auto` also stays dense when cancellation could cost more than this (relative to the output
# scale 1): eps(float64) * min(sum w / min w, e^{2 beta}) > AUTO_CANCELLATION
_AUTO_CANCELLATION = 1e-9
# numbers of one chunk of the dense sums that replace the outputs of light tokens (`_dense_rows`)
_REPAIR_NUMBERS = 1 << 22


def unit_roundoff(dtype: torch.dtype) -> float:
    """`2^-53` (float64) or `2^-24` (float32): the default truncation tolerance of `dtype`.

    Args:
        dtype: torch.float64 or torch.float32.

    Returns:
        Half the machine epsilon of `dtype`.
    """
    return float(torch.finfo(dtype).eps) / 2


def _log_cancellation(beta: float, weights: np.ndarray | torch.Tensor | None = None,
                     n: int = 1) -> float:
    """`log S`, `S = min(sum w / min w, e^{2 beta})`: the largest cancellation scale `S_i` of a
    softmax output (module docstring), the largest over the runs of `weights` `(n,)` or `(runs,
    n)` (a zero weight: `e^{2 beta}`); equal weights (None) give `min(n, e^{2 beta})`.

    Args:
        beta: the effective interaction strength, >= 0.
        weights: the token weights (>= 0), or None.
        n: the number of tokens when `weights` is None.

    Returns:
        `log S` (finite; 0 for one token).
    """
    spread = float(n)
    if weights is not None:
        w = np.asarray(weights.detach().cpu() if isinstance(weights, torch.Tensor) else weights,
                       dtype=np.float64)
        low = float(w.min()) if w.size else 1.0
        spread = math.inf if low <= 0 else float((w.sum(-1) / w.min(-1)).max())
    return min(math.log(max(spread, 1.0)), 2.0 * beta)


def default_tol(dtype: torch.dtype, log_s: float) -> float:
    """The default truncation tolerance (relative to the cancellation scale) of a run in `dtype`
    whose cancellation scale is at most `e^{log_s}`: `max(u_64, u / S)`, u the unit roundoff of
    `dtype`. The expansion works in float64, so float64 outputs keep the float64 truncation
    tolerance (they lose at most log10 S digits, as float64 rounding does) and float32 outputs
    are truncated finely enough to carry float32 accuracy whatever the cancellation.

    Args:
        dtype: the run's dtype (float64 or float32).
        log_s: `log S` (`log_cancellation`).

    Returns:
        The tolerance for `truncation_order`.
    """
    u64 = unit_roundoff(torch.float64)
    return max(u64, unit_roundoff(dtype) * math.exp(-log_s))


def _cancellation_limit() -> float:
    """`AUTO_CANCELLATION / (2 u_64)` (about 4.5e6): the largest cancellation scale S whose float64
    rounding, about `2 u_64 S` in an output, stays within AUTO_CANCELLATION."""
    return _AUTO_CANCELLATION / (2 * unit_roundoff(torch.float64))


def _kernel_tail(beta: float, order: int, d: int) -> float:
    """`tau_d(beta, K)`: a bound on `e^{-beta} |exp(beta t) - K-term expansion|` over t in [-1, 1].

    d = 2: `2 sum_{k > K} e^{-beta} I_k(beta) <= 2 exp(beta (cosh s - 1) - (K + 1) s)`, s =
    asinh((K + 1) / beta), from `sum_k I_k(b) e^{ks} = exp(b cosh s)` (all terms positive).
    d = 3: `sum_{l > K} (2l + 1) e^{-beta} i_l(beta) <= (2K + 3) exp(beta (cosh s - 1) - (K + 1)
    s)`, s = max(asinh((K + 1) / beta), 2 / (2K + 3)), from `i_l(b) = b^l / (2^{l + 1} l!)
    int_{-1}^1 e^{bt} (1 - t^2)^l dt`, whence `sum_l i_l(b) e^{ls} <= exp(b cosh s)`, and `(2l + 1)
    e^{-ls}` decreasing in l >= K + 1 for that s. Both are 0 at beta = 0 (the kernel is 1).

    Args:
        beta: the effective interaction strength, >= 0.
        order: the truncation order K (modes |k| <= K, or degrees l <= K), >= 0.
        d: 2 or 3.

    Returns:
        The bound tau (a float in [0, inf)).
    """
    if beta == 0.0:
        return 0.0
    k1 = order + 1
    s = math.asinh(k1 / beta)
    if d == 3:
        s = max(s, 2.0 / (2 * order + 3))
    # beta (cosh s - 1) = 2 beta sinh(s/2)^2, without cancellation for small s
    expo = 2.0 * beta * math.sinh(s / 2) ** 2 - k1 * s
    front = 2.0 if d == 2 else float(2 * order + 3)
    if expo > 709.0:  # beyond a float: no order this small bounds the tail
        return math.inf
    return front * math.exp(expo) if expo > -745.0 else 0.0


def _error_bound(beta: float, order: int, d: int) -> float:
    """`2 tau_d(beta, K)`: the truncation error of every output relative to its cancellation scale.

    `|y_i - y_i^K| <= 2 tau S_i / (1 - tau S_i)` (softmax, S_i = e^beta sum w / Z_i) and
    `tau S_i` (USA, S_i = e^beta): to first order `error_bound * S_i`.

    Args:
        beta: the effective interaction strength, >= 0.
        order: the truncation order K, >= 0.
        d: 2 or 3.

    Returns:
        The bound `2 tau`.
    """
    return 2.0 * _kernel_tail(beta, order, d)


@lru_cache(maxsize=256)
def truncation_order(beta: float, d: int, tol: float) -> int:
    """The least order K with `error_bound(beta, K, d) <= tol`.

    Args:
        beta: the effective interaction strength, >= 0.
        d: 2 or 3.
        tol: the tolerance relative to the cancellation scale, > 0.

    Returns:
        K (0 at beta = 0).
    """
    if not tol > 0.0:
        raise ParameterError(f"tol must be > 0; got {tol!r}")
    # K ~ sqrt(2 beta log(1/tol)) at large beta: walk up in steps of 1, then of ~1.5 % of K
    # (the bound decreases in K), then back down to the least order that meets tol
    order = 0
    while _error_bound(beta, order, d) > tol:
        order += 1 if order < 64 else max(1, order // 64)
        if order > _MAX_ORDER:
            raise ParameterError(f"beta={beta!r} with tol={tol!r} needs more than {_MAX_ORDER} "
                                 "modes: use attention_eval='dense'")
    while order > 0 and _error_bound(beta, order - 1, d) <= tol:
        order -= 1
    return order


def basis_size(d: int, order: int) -> int:
    """Number of basis functions R at order K: 2K + 1 (circle), (K + 1)^2 (sphere).

    Args:
        d: 2 or 3.
        order: K >= 0.

    Returns:
        R.
    """
    return 2 * order + 1 if d == 2 else (order + 1) ** 2


@lru_cache(maxsize=256)
def _scaled_bessel(beta: float, order: int, d: int) -> np.ndarray:
    """`e^{-beta} I_k(beta)` (d = 2) or `e^{-beta} i_l(beta)` (d = 3) for k, l = 0..K
    (read-only: cached)."""
    from scipy.special import ive

    k = np.arange(order + 1, dtype=np.float64)
    if beta == 0.0:
        c = (k == 0).astype(np.float64)
    elif d == 2:
        c = np.asarray(ive(k, beta), dtype=np.float64)
    else:
        c = np.asarray(ive(k + 0.5, beta), dtype=np.float64) * math.sqrt(math.pi / (2 * beta))
    c.setflags(write=False)
    return c


def _kernel_weights(beta: float, order: int, d: int, dtype: torch.dtype = torch.float64,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """`lam` with `e^{-beta} exp(beta <x, y>) ~ sum_r lam_r phi_r(x) phi_r(y)` (`harmonic_basis`).

    d = 2: `(I_0, 2 I_1, ..., 2 I_K, 2 I_1, ..., 2 I_K) e^{-beta}`; d = 3: `4 pi i_l e^{-beta}`
    repeated 2l + 1 times, l = 0..K.

    Args:
        beta: the effective interaction strength, >= 0.
        order: K >= 0.
        d: 2 or 3.
        dtype: the dtype of the result.
        device: its device.

    Returns:
        `(R,)` tensor.
    """
    c = _scaled_bessel(beta, order, d)
    if d == 2:
        lam = np.concatenate([c[:1], 2 * c[1:], 2 * c[1:]])
    else:
        lam = np.repeat(4 * math.pi * c, 2 * np.arange(order + 1) + 1)
    return torch.tensor(lam, dtype=dtype, device=device)


def _harmonic_basis(x: torch.Tensor, order: int) -> torch.Tensor:
    """Basis functions of unit tokens: `(1, cos k t, sin k t)` (d = 2) or real `Y_lm` (d = 3).

    d = 2: `cos k t + i sin k t = (x_1 + i x_2)^k`, k = 1..K (no angles). d = 3: the real
    orthonormal spherical harmonics of degree l <= K, degree l in columns l^2 .. (l+1)^2 - 1 as
    `(Y_l0, Y_l1^c..Y_ll^c, Y_l1^s..Y_ll^s)`, from the stable forward recurrence in l of the
    normalised associated Legendre polynomials divided by sin^m (polynomials in x_3), times Re
    and Im of `(x_1 + i x_2)^m`: no angles, no division. `sum_m Y_lm(x) Y_lm(y) = (2l+1)
    P_l(<x,y>) / 4 pi`.

    Args:
        x: `(..., n, d)` unit vectors, d = 2 or 3.
        order: K >= 0.

    Returns:
        `(..., n, R)` tensor, R = `basis_size(d, order)`.
    """
    return torch.cat([slab for _, slab in _slabs(x, order)], -2).transpose(-1, -2)


def _slabs(x: torch.Tensor, order: int) -> Iterator[tuple[int, torch.Tensor]]:
    """The basis of `harmonic_basis` in slabs `(first column, (..., rows, n))`, each row a basis
    function contiguous over the tokens: one slab on the circle, one per degree on the sphere
    (so that a slab of a block of tokens stays in cache while it is used)."""
    d = x.shape[-1]
    if d == 2:
        out = x.new_empty(*x.shape[:-2], 2 * order + 1, x.shape[-2])
        out[..., 0, :] = 1.0
        _powers(x[..., 0], x[..., 1], out[..., 1:order + 1, :], out[..., order + 1:, :])
        yield 0, out
        return
    if d != 3:
        raise ParameterError(f"the harmonic expansion needs d in {_EXPANSION_DIMS}; got d = {d}")
    yield from _sphere_slabs(x, order)


def _powers(a: torch.Tensor, b: torch.Tensor, re: torch.Tensor, im: torch.Tensor) -> None:
    """Fill `re`, `im` `(..., K, n)` with Re and Im of `(a + i b)^k`, k = 1..K, by doubling:
    powers m+1..2m are powers 1..m times the m-th (ceil(log2 K) products, each power rounded
    through at most that many products; |a + ib| <= 1, so nothing grows)."""
    top = re.shape[-2]
    if top == 0:
        return
    re[..., 0, :] = a
    im[..., 0, :] = b
    m = 1
    while m < top:
        s = min(m, top - m)
        rm, imm = re[..., m - 1:m, :], im[..., m - 1:m, :]
        lo_r, lo_i = re[..., :s, :], im[..., :s, :]
        torch.mul(lo_r, rm, out=re[..., m:m + s, :]).sub_(lo_i * imm)
        torch.mul(lo_r, imm, out=im[..., m:m + s, :]).add_(lo_i * rm)
        m += s


@lru_cache(maxsize=64)
def _legendre_steps(order: int, dtype: torch.dtype, device: torch.device
                    ) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """`(a_lm, b_lm)` `(l - 1, 1)` of `q_lm = a_lm z q_{l-1,m} - b_lm q_{l-2,m}`, m = 0..l-2,
    for l = 0..K (on `device`, made once)."""
    steps = []
    for deg in range(order + 1):
        m = np.arange(max(deg - 1, 0), dtype=np.float64)
        a = np.sqrt((4 * deg * deg - 1) / (deg * deg - m * m))
        b = np.sqrt((2 * deg + 1) * ((deg - 1) ** 2 - m * m)
                    / ((2 * deg - 3) * (deg * deg - m * m)))
        steps.append(tuple(torch.tensor(c[:, None], dtype=dtype, device=device) for c in (a, b)))
    return tuple((a, b) for a, b in steps)


def _sphere_slabs(x: torch.Tensor, order: int) -> Iterator[tuple[int, torch.Tensor]]:
    """Real spherical harmonics of degree l, `(..., 2l + 1, n)` at column l^2, l = 0..K."""
    a, b, z = x.unbind(-1)
    lead, n = x.shape[:-2], x.shape[-2]
    root2 = math.sqrt(2.0)
    # Re and Im of (a + i b)^m, m = 0..K (|a + ib| <= 1: no growth), times sqrt 2 for m >= 1
    re = x.new_empty(*lead, order + 1, n)
    im = torch.empty_like(re)
    re[..., 0, :] = 1.0
    im[..., 0, :] = 0.0
    _powers(a, b, re[..., 1:, :], im[..., 1:, :])
    re[..., 1:, :] *= root2
    im *= root2
    # q_lm = (orthonormal P_l^m) / sin^m theta, m = 0..l: a polynomial in z; one (l + 1, n) block
    # per degree, by the forward recurrence in l (stable), q_l,l-1 = sqrt(2l+1) z q_l-1,l-1 and
    # the constant sectoral q_ll = q_l-1,l-1 sqrt((2l+1) / 2l), q_00 = 1 / sqrt(4 pi)
    sectoral = 1.0 / math.sqrt(4 * math.pi)
    q_prev2 = x.new_empty(*lead, 0, n)
    q_prev = torch.full_like(z, sectoral).unsqueeze(-2)
    yield 0, q_prev
    zc = z.unsqueeze(-2)
    steps = _legendre_steps(order, x.dtype, x.device)
    for deg in range(1, order + 1):
        sectoral *= math.sqrt((2 * deg + 1) / (2 * deg))
        q = x.new_empty(*lead, deg + 1, n)
        if deg >= 2:
            al, bl = steps[deg]
            low = q[..., :deg - 1, :]
            torch.mul(q_prev[..., :deg - 1, :], zc, out=low)
            low.mul_(al).sub_(bl * q_prev2[..., :deg - 1, :])
        torch.mul(z, math.sqrt(2 * deg + 1), out=q[..., deg - 1, :]).mul_(q_prev[..., deg - 1, :])
        q[..., deg, :] = sectoral
        slab = x.new_empty(*lead, 2 * deg + 1, n)
        torch.mul(q, re[..., :deg + 1, :], out=slab[..., :deg + 1, :])
        torch.mul(q[..., 1:, :], im[..., 1:deg + 1, :], out=slab[..., deg + 1:, :])
        yield deg * deg, slab
        q_prev2, q_prev = q_prev, q


def _expansion_refusal(p: ModelParams) -> str | None:
    """Why the expansion does not apply to `p` (a message naming the parameter), or None.

    It covers softmax and USA attention, d = 2 or 3, one head, no causal mask and query/key
    form `Q^T K = c I` with c >= 0 (identity, or Q/K given as such).

    Args:
        p: the model parameters.

    Returns:
        A message, or None when the expansion applies.
    """
    use = " (use attention_eval='dense')"
    if p.d not in _EXPANSION_DIMS:
        return f"attention_eval='expansion' needs d in {_EXPANSION_DIMS}; got d = {p.d}{use}"
    if p.attention not in _EXPANSION_KINDS:
        return (f"attention_eval='expansion' covers attention in {_EXPANSION_KINDS}; got "
                f"attention={p.attention!r}{use}")
    if p.heads != 1:
        return f"attention_eval='expansion' needs heads = 1; got heads = {p.heads}{use}"
    if p.causal:
        return f"attention_eval='expansion' needs causal=False (no mask){use}"
    if p.qk_law.random:
        return (f"attention_eval='expansion' needs the identity query/key form; got the random "
                f"qk={p.qk!r}{use}")
    if _qk_scale(p) is None:
        return ("attention_eval='expansion' needs Q^T K = c I (c >= 0); got Q/K with another "
                f"form{use}")
    return None


def _qk_scale(p: ModelParams) -> float | None:
    """c with `Q^T K = c I` and c >= 0 (1 for the identity), else None.

    Args:
        p: the model parameters.

    Returns:
        c, or None.
    """
    qk = p.qk_matrix()
    if qk is None:
        return 1.0
    if qk.ndim != 2:
        return None
    c = float(np.trace(qk)) / qk.shape[0]
    if c < 0 or np.max(np.abs(qk - c * np.eye(qk.shape[0]))) > 1e-12 * max(1.0, abs(c)):
        return None
    return c


def _check_expansion(p: ModelParams) -> float:
    """Raise ParameterError unless the expansion applies to `p`; return the effective beta.

    Args:
        p: the model parameters.

    Returns:
        `beta c` for `Q^T K = c I`.
    """
    why = _expansion_refusal(p)
    if why is not None:
        raise ParameterError(why)
    c = _qk_scale(p)
    assert c is not None
    return p.beta * c


def expansion_output(x: torch.Tensor, p: ModelParams, weights: torch.Tensor | None = None,
                     tol: float | None = None, order: int | None = None) -> torch.Tensor:
    """`y_i = sum_j A_ij x_j` by the truncated harmonic expansion of the kernel, O(n R).

    Softmax: `A_ij = w_j e^{l_ij} / sum_l w_l e^{l_il}`; USA: `A_ij = w_j e^{l_ij} / sum_l w_l`
    (w = 1 without weights), as `layers._attention_output`. The moments and outputs are computed
    in float64 whatever x's dtype (the result has x's dtype; tokens of another dtype are first
    normalised in float64, a change within their own rounding). Error: `error_bound(beta, K, d) *
    S_i` to first order (module docstring), K the least order meeting `tol`, plus the float64
    rounding, about `2 u_64 S_i`. Softmax tokens whose scale bound `min(sum w / w_i, e^{2 beta})`
    passes `cancellation_limit()` (a weight 0 or a light token at large beta, where the rounding
    alone could cost more than AUTO_CANCELLATION) get their outputs from the dense sum instead,
    O(n) each.

    Args:
        x: `(runs, n, d)` unit tokens, d = 2 or 3.
        p: the model parameters (`_check_expansion` must pass).
        weights: token weights `(n,)` or `(runs, n)`, or None.
        tol: the truncation tolerance relative to the cancellation scale (default:
            `default_tol(x.dtype, log S)`, S at most `cancellation_limit()`: float64's unit
            roundoff for float64 tokens, float32's divided by S for float32 tokens).
        order: the truncation order; with `tol` as well it must meet it (else ParameterError).

    Returns:
        `(runs, n, d)` tensor of x's dtype.
    """
    beta = _check_expansion(p)
    d = x.shape[-1]
    if d != p.d:
        raise ParameterError(f"tokens have d = {d}, the parameters d = {p.d}")
    log_s = _log_cancellation(beta, weights, x.shape[-2])
    limit = math.log(_cancellation_limit())
    if order is None:
        order = truncation_order(beta, d, default_tol(x.dtype, min(log_s, limit))
                                 if tol is None else tol)
    elif tol is not None and _error_bound(beta, order, d) > tol:
        raise ParameterError(f"order {order} bounds the truncation error by "
                             f"{_error_bound(beta, order, d):.3g} > tol = {tol:g} at beta = "
                             f"{beta:g}, d = {d}: need order >= {truncation_order(beta, d, tol)}")
    x64 = x.to(torch.float64)
    if x.dtype != torch.float64:  # unit to float64 rounding: the harmonics assume |x| = 1
        x64 = x64 / x64.norm(dim=-1, keepdim=True)
    y = _expand(x64, p.attention, beta, weights, order)
    if p.attention == "softmax" and log_s > limit and weights is not None:
        w = weights.to(dtype=torch.float64, device=x.device).expand(x.shape[:-1])
        light = w * _cancellation_limit() < w.sum(-1, keepdim=True)  # S_i may pass the limit
        if bool(light.any()):
            _dense_rows(x64, w, beta, light, y)
    return y.to(x.dtype)


def _dense_rows(x: torch.Tensor, w: torch.Tensor, beta: float, rows: torch.Tensor,
                y: torch.Tensor) -> None:
    """Overwrite the softmax outputs `y` of the tokens in `rows` `(runs, n)` by the dense sum
    `sum_j w_j e^{beta (<x_i, x_j> - m_i)} x_j / sum_j w_j e^{beta (<x_i, x_j> - m_i)}`, m_i the
    largest exponent among tokens of weight > 0 (no cancellation, no overflow): O(n) per row, in
    chunks of REPAIR_NUMBERS numbers."""
    r_all, i_all = rows.nonzero(as_tuple=True)
    n = x.shape[-2]
    step = max(1, _REPAIR_NUMBERS // (n * x.shape[-1]))
    for lo in range(0, len(r_all), step):
        r, i = r_all[lo:lo + step], i_all[lo:lo + step]
        xs = x[r]  # (m, n, d)
        g = beta * (xs @ x[r, i].unsqueeze(-1)).squeeze(-1)  # (m, n)
        g = g - torch.where(w[r] > 0, g, -math.inf).amax(-1, keepdim=True)
        k = w[r] * torch.exp(g)
        y[r, i] = (k.unsqueeze(-1) * xs).sum(-2) / k.sum(-1, keepdim=True)


def _expand(x: torch.Tensor, attention: str, beta: float, weights: torch.Tensor | None,
            order: int) -> torch.Tensor:
    """`expansion_output` at truncation order `order`, in x's dtype."""
    d = x.shape[-1]
    lam = _kernel_weights(beta, order, d, x.dtype, x.device)
    if weights is None:
        w = torch.ones(x.shape[:-1], dtype=x.dtype, device=x.device)
    else:
        w = weights.to(dtype=x.dtype, device=x.device).expand(x.shape[:-1])
    v = torch.cat([w.unsqueeze(-2), w.unsqueeze(-2) * x.transpose(-1, -2)], -2)  # (runs, 1+d, n)
    n, r = x.shape[-2], basis_size(d, order)
    runs = max(1, math.prod(x.shape[:-2]))
    widest = 2 * order + 1  # rows of the largest slab
    block = max(1, max(_BLOCK_MIN, _SLAB_BYTES // (widest * x.element_size())) // runs)
    moments = v.new_zeros(*v.shape[:-1], r)  # (runs, 1 + d, R): sum_j w_j (1, x_j) phi_r(x_j)
    if n <= block:  # one block: its slabs are kept for the second product
        kept = list(_slabs(x, order))
        for lo, slab in kept:
            moments[..., lo:lo + slab.shape[-2]] = v @ slab.transpose(-1, -2)
        scaled = moments * lam
        zn = sum((scaled[..., lo:lo + slab.shape[-2]] @ slab for lo, slab in kept),
                 torch.zeros_like(v))
    else:  # tokens in blocks, the slabs of each computed once per pass: memory O(block R)
        for t in range(0, n, block):
            vt = v[..., t:t + block]
            for lo, slab in _slabs(x[..., t:t + block, :], order):
                moments[..., lo:lo + slab.shape[-2]] += vt @ slab.transpose(-1, -2)
        scaled = moments * lam
        zn = torch.zeros_like(v)  # (runs, 1 + d, n): e^{-beta} (Z_i, N_i)
        for t in range(0, n, block):
            out = zn[..., t:t + block]
            for lo, slab in _slabs(x[..., t:t + block, :], order):
                out += scaled[..., lo:lo + slab.shape[-2]] @ slab
    if attention == "softmax":
        return (zn[..., 1:, :] / zn[..., :1, :]).transpose(-1, -2).contiguous()
    scale = math.exp(beta) / w.sum(-1, keepdim=True).unsqueeze(-1)
    return (zn[..., 1:, :] * scale).transpose(-1, -2).contiguous()


def _expansion_basis(p: ModelParams, dtype: torch.dtype,
                    weights: np.ndarray | torch.Tensor | None = None) -> int:
    """R, the basis functions `expansion_output` takes for a run of `p` in `dtype` with these
    weights at its default tolerance (`default_tol`); ParameterError where it does not apply.

    Args:
        p: the model parameters.
        dtype: the run's dtype.
        weights: the run's token weights, or None.

    Returns:
        R.
    """
    beta = _check_expansion(p)
    log_s = _log_cancellation(beta, weights, p.n)
    return basis_size(p.d, truncation_order(beta, p.d, default_tol(dtype, log_s)))


def auto_uses_expansion(p: ModelParams, dtype: torch.dtype,
                        weights: np.ndarray | torch.Tensor | None = None) -> bool:
    """The fixed rule of `attention_eval='auto'`: expansion iff it applies, n >= the crossover
    `max(AUTO_MIN_N[d], AUTO_PER_BASIS[d] * R)` (R at the run's default tolerance,
    `expansion_basis`), and its float64 rounding costs at most AUTO_CANCELLATION (cancellation
    scale at most `cancellation_limit()`, so that no output needs the dense sum); float32 and
    float64 runs alike (the expansion works in float64).

    Args:
        p: the model parameters.
        dtype: the run's dtype.
        weights: the run's token weights, or None.

    Returns:
        True when `auto` takes the expansion.
    """
    if dtype not in (torch.float64, torch.float32) or _expansion_refusal(p) is not None:
        return False
    beta = _check_expansion(p)
    if p.n < _AUTO_MIN_N[p.d]:
        return False
    if _log_cancellation(beta, weights, p.n) > math.log(_cancellation_limit()):
        return False  # tokens whose outputs would need the dense sum
    try:
        r = _expansion_basis(p, dtype, weights)
    except ParameterError:  # more modes than the expansion allows: dense
        return False
    return p.n >= _AUTO_PER_BASIS[p.d] * r


def _choose_evaluator(p: ModelParams, attention_eval: str = "auto", sampler: str = "full",
                     dtype: torch.dtype = torch.float64,
                     weights: np.ndarray | torch.Tensor | None = None) -> str:
    """Resolve `attention_eval` to 'dense' or 'expansion', or raise ParameterError.

    'auto' follows `auto_uses_expansion`, and is dense with the Gram sampler (tokens in an
    n-dimensional frame); 'expansion' is refused by name where it does not apply.

    Args:
        p: the model parameters.
        attention_eval: 'auto', 'dense' or 'expansion'.
        sampler: the resolved sampler ('fast', 'full' or 'gram').
        dtype: the run's dtype.
        weights: the run's token weights, or None.

    Returns:
        'dense' or 'expansion'.
    """
    if attention_eval not in _EVALUATORS:
        raise ParameterError(f"attention_eval must be one of {', '.join(_EVALUATORS)}; got "
                             f"{attention_eval!r}")
    if attention_eval == "dense":
        return "dense"
    if attention_eval == "expansion":
        if sampler == "gram":
            raise ParameterError("attention_eval='expansion' does not apply to sampler='gram' "
                                 "(its tokens live in an n-dimensional frame); use "
                                 "sampler='fast' or 'full', or attention_eval='dense'")
        _check_expansion(p)
        return "expansion"
    return "expansion" if sampler != "gram" and auto_uses_expansion(p, dtype, weights) else "dense"
