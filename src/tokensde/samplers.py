"""Samplers of the unit-time layer noise `xi_i = V y_i` for each noise law (spec §2, §4).

`full` draws the d x d matrix V itself (through the law's strategy object, `tokensde.noise`);
`fast` draws `(V y_1..V y_n)` directly as `sigma C Z` with `C C^T = Y Y^T` (exact in law for
Gaussian V, `n d` normals instead of `d^2`). A law lists the exact samplers it allows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .noise import apply_matrices as apply_matrices
from .params import ModelParams, ParameterError
from .rng import RunStreams

Sampler = Callable[[torch.Tensor, ModelParams, RunStreams], torch.Tensor]
SAMPLERS: tuple[str, ...] = ("auto", "fast", "full", "gram")


def value_matrices(p: ModelParams, rs: RunStreams, dtype: torch.dtype) -> torch.Tensor:
    """One value-noise matrix per run, `(runs, d, d)`, of the law `p.noise_law`."""
    return p.noise_law.matrices(rs, dtype)


def full_noise(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """Noise `xi_i = V y_i` by drawing the whole value matrix (any law); `d^2` draws per run."""
    return p.noise_law.draw(y, rs)


def gram_factor(y: torch.Tensor) -> torch.Tensor:
    """`C` with `C C^T = Y Y^T` for each run (rank-deficient Gram matrices included, no jitter).

    Cholesky where it succeeds; for the runs where it fails (merged or antipodal tokens make
    `Y Y^T` singular) `C = R^T` from the QR factorisation `Y^T = Q R`, which always exists.
    Each run's factor depends on that run alone, never on the others in its batch.
    """
    c, info = torch.linalg.cholesky_ex(y @ y.transpose(-1, -2))
    bad = info != 0
    n_bad = int(bad.sum())
    if n_bad == 0:
        return c
    if n_bad == bad.numel():
        r = torch.linalg.qr(y.transpose(-1, -2), mode="r")[1]
        return _pad_columns(r.transpose(-1, -2), y.shape[-2])
    r = torch.linalg.qr(y[bad].transpose(-1, -2), mode="r")[1]
    c[bad] = _pad_columns(r.transpose(-1, -2), y.shape[-2])
    return c


def _pad_columns(c: torch.Tensor, n: int) -> torch.Tensor:
    """Zero-pad `(runs, n, k)` factors to `(runs, n, n)` (k = min(n, d) < n when n > d)."""
    k = c.shape[-1]
    return c if k == n else torch.nn.functional.pad(c, (0, n - k))


def fast_noise(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """Exact-in-law Gaussian matrix noise `sigma C Z`, `Z` standard normal `(runs, n, d)`."""
    z = rs.normal(y.shape[-2], p.d, dtype=y.dtype)
    return (gram_factor(y) @ z).mul_(p.sigma)


def fast_applicable(p: ModelParams) -> bool:
    """The fast sampler is exact for Gaussian matrix noise only (the laws that list 'fast')."""
    return "fast" in p.noise_law.samplers and "fast" in p.attention_kind.samplers


def gram_applicable(p: ModelParams) -> bool:
    """The Gram-space sampler needs rotation-invariant attention and Gaussian matrix noise."""
    return p.rotation_invariant


def choose_sampler(p: ModelParams, sampler: str = "auto") -> str:
    """Resolve `sampler` to 'fast', 'full' or 'gram' for these parameters, or raise ParameterError.

    `auto` takes `gram` when it applies and `d >= 4 n` (its cost per layer, `n^3`, does not grow
    with d; benchmarks/bench_gram.py measures it level with `fast` near d = 2n), else `fast` for
    Gaussian matrix noise when `n < d` (its cost `n^2 d` beats `n d^2`), else `full`.
    """
    if sampler not in SAMPLERS:
        raise ParameterError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    if sampler == "auto":
        if gram_applicable(p) and p.d >= 4 * p.n:
            return "gram"
        return "fast" if fast_applicable(p) and p.n < p.d else "full"
    if sampler == "fast" and not fast_applicable(p):
        raise ParameterError("sampler='fast' needs noise='matrix' with law='gaussian'; got "
                             f"noise={p.noise!r}, law={p.law!r} (use sampler='full')")
    if sampler == "gram" and p.heads > 1:
        raise ParameterError(f"sampler='gram' needs heads = 1 (one common value matrix); got "
                             f"heads={p.heads} (use sampler='fast' or 'full')")
    if sampler == "gram" and p.norm != "post":
        raise ParameterError(f"sampler='gram' needs norm='post' (tokens on the sphere); got "
                             f"norm={p.norm!r} (use sampler='fast' or 'full')")
    if sampler == "gram" and p.qk_law.random:
        raise ParameterError(f"sampler='gram' needs qk='identity' (with random query/key forms "
                             f"the Gram matrix alone is not simulated); got qk={p.qk!r} (use "
                             f"sampler='fast' or 'full')")
    if sampler == "gram" and not gram_applicable(p):
        raise ParameterError("sampler='gram' needs Gaussian matrix noise and rotation-invariant "
                             "attention (Q^T K = c I, mean none/identity/a I)")
    return sampler


NOISE_SAMPLERS: dict[str, Sampler] = {"fast": fast_noise, "full": full_noise}


def noise_sampler(sampler: str, p: ModelParams) -> Sampler:
    """The sampler `sampler` ('fast' or 'full'); with `heads > 1` it draws each head's noise
    independently from outputs `(runs, heads, n, d)` and returns `heads^(-1/2) sum_h V_h y^h`."""
    one = NOISE_SAMPLERS[sampler]
    if p.heads == 1:
        return one

    def heads(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
        xi = one(y[:, 0], p, rs)
        for h in range(1, p.heads):
            xi.add_(one(y[:, h], p, rs))
        return xi.mul_(p.heads ** -0.5)

    return heads
