"""Random biases of a layer (docs/variants.md §5, "Biases"): the output bias of the MLP sublayer, a
common vector added to every token, and the hidden bias of the MLP block.

With `alpha = sqrt(dt)` the MLP sublayer of a layer adds `alpha (xi_i + bias_sigma g)` to token `i`,
`xi_i = W_2 phi(W_1 u_i + mlp_bias c)` the block's output (zero with mlp='none'), `g` standard
normal in R^d and `c` standard normal in R^m, both drawn once per layer and run and shared by the
tokens. They come from streams of their own (`rs.derived(BIAS_STREAM)`), so a run's other draws
(initial tokens, value noise, query/key forms, MLP weights) are those of the run without biases.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..model.params import ModelParams, ParameterError
from .rng import RunStreams
from .samplers import _gram_factor, _mlp_scale, _Sampler

_BIAS_STREAM = 0x42494153  # `derive_seed` key of the streams of the biases ("BIAS")


def _check_bias(p: ModelParams, scheme: str) -> None:
    """Refuse biases where `scheme` has no step for them (a ParameterError naming the parameter).

    Args:
        p: the model parameters.
        scheme: 'network' or 'sde'.

    Returns:
        None; raises ParameterError for `mlp_bias > 0` with scheme='sde' (the limit's MLP kernel
        would change) and for `bias_sigma > 0` with scheme='sde' and a norm other than 'pre'
        (the post-norm limit needs an Ito term `-(d-1)/2 bias_sigma^2 x dt` that the SDE step
        does not have).
    """
    if scheme != "sde":
        return
    if p.mlp_bias > 0:
        raise ParameterError(f"mlp_bias (the MLP block's hidden bias) is carried by scheme="
                             f"'network' only; got mlp_bias={p.mlp_bias:g} with scheme='sde'")
    if p.bias_sigma > 0 and p.norm != "pre":
        raise ParameterError(f"bias_sigma with scheme='sde' needs norm='pre' (the post- and "
                             f"peri-norm limits of the bias have no SDE step here); got "
                             f"bias_sigma={p.bias_sigma:g} with norm={p.norm!r}")


def _hidden_biased(u: torch.Tensor, p: ModelParams, sampler: str, mlp_rs: RunStreams,
                  c: torch.Tensor) -> torch.Tensor:
    """MLP block output `W_2 phi(W_1 u_i + mlp_bias c)` `(runs, n, d)` with the hidden bias `c`.

    Args:
        u: block inputs `(runs, n, d)` (unit tokens).
        p: the model parameters (`mlp_bias`, the activation, `mlp_sigma`, the width m).
        sampler: 'fast' (pre-activations `C_X Z_1` with `C_X C_X^T = U U^T`, output
            `s C_H Z_2`) or 'full' (both weight matrices drawn); the draws from `mlp_rs` are
            those of `samplers._mlp_noise_fast` / `mlp_noise_full`, in the same order.
        mlp_rs: the streams of the MLP weights.
        c: standard normal hidden biases `(runs, 1, m)`.

    Returns:
        The block output, `W_2` of entry standard deviation `samplers._mlp_scale(p)`.
    """
    shift = c.mul(p.mlp_bias)
    if sampler == "full":
        w1 = mlp_rs.normal(p.mlp_hidden, p.d, dtype=u.dtype)
        h = p.mlp_block(u @ w1.transpose(-1, -2) + shift)
        w2 = mlp_rs.normal(p.d, p.mlp_hidden, dtype=u.dtype)
        return (h @ w2.transpose(-1, -2)).mul_(_mlp_scale(p))
    pre = mlp_rs.normal(p.n, p.mlp_hidden, dtype=u.dtype)
    z = mlp_rs.normal(p.n, p.d, dtype=u.dtype)
    h = p.mlp_block(_gram_factor(u) @ pre + shift)
    return (_gram_factor(h) @ z).mul_(_mlp_scale(p))


def _mlp_branch(p: ModelParams, sampler: str, block: _Sampler | None, mlp_rs: RunStreams | None,
               bias_rs: RunStreams | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The branch of the MLP sublayer, `u -> W_2 phi(W_1 u + mlp_bias c) + bias_sigma g`.

    Args:
        p: the model parameters.
        sampler: 'fast' or 'full' (network), or 'sde' (the limit's kernel noise, `block`).
        block: the MLP block's sampler (`samplers._mlp_sampler`), None with mlp='none'.
        mlp_rs: the streams of the MLP weights (None with mlp='none').
        bias_rs: the streams of the biases (`rs.derived(BIAS_STREAM)`), needed when
            `p.has_bias`.

    Returns:
        A function of the block inputs `u` `(runs, n, d)` giving the branch output (broadcast
        over the tokens when there is only the bias), or None when the layer has neither a block
        nor an output bias.
    """
    if p.has_bias and bias_rs is None:
        raise ParameterError(f"bias_sigma={p.bias_sigma:g}, mlp_bias={p.mlp_bias:g} draw "
                             "biases: pass their streams (bias_rs = rs.derived(BIAS_STREAM))")
    plain = None if block is None or mlp_rs is None else block
    if not p.has_bias:
        if plain is None or mlp_rs is None:
            return None
        weights = mlp_rs
        return lambda u: plain(u, p, weights)

    def branch(u: torch.Tensor) -> torch.Tensor:
        assert bias_rs is not None
        out = None
        if plain is not None and mlp_rs is not None:
            if p.mlp_bias > 0:
                c = bias_rs.normal(1, p.mlp_hidden, dtype=u.dtype)
                out = _hidden_biased(u, p, sampler, mlp_rs, c)
            else:
                out = plain(u, p, mlp_rs)
        if p.bias_sigma == 0:
            assert out is not None
            return out
        g = bias_rs.normal(1, p.d, dtype=u.dtype).mul_(p.bias_sigma)
        return g.expand_as(u) if out is None else out.add_(g)

    return branch
