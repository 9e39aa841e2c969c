"""One layer of the random-attention network and of its SDE limit (spec §1-§3), as pure functions.

Shapes: tokens `x` are `(runs, n, d)` unit vectors; attention weights `(runs, n, n)`. The layer noise
is always handled in *unit-time* form `xi_i = V y_i` (entry variance `sigma^2`); a layer of step
`dt` adds `sqrt(dt) * xi`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..model.params import ModelParams, ParameterError
from .expansion import expansion_output

__all__ = ["network_step", "normalize", "weights_from_logits"]


def normalize(z: torch.Tensor) -> torch.Tensor:
    """Token-wise projection onto the unit sphere, `N(z) = z / |z|`."""
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)


def _normalize_(z: torch.Tensor) -> torch.Tensor:
    """`normalize` in place (for a temporary the caller owns); returns `z`."""
    return z.div_(torch.linalg.vector_norm(z, dim=-1, keepdim=True))


def _normalize_branch(z: torch.Tensor) -> torch.Tensor:
    """Peri-norm of a branch output, `N(z) = z / |z|` token-wise, with `N(0) = 0`.

    A ReLU block's output is exactly zero for a token whose `m` hidden pre-activations are all
    negative (probability `2^-m` per token and layer, the same for the `full`, `fast` and `gram`
    samplers, which all give that token an exact zero row). `z / |z|` has no limit as `z -> 0`;
    `0` is the `eps -> 0` limit of the norm layers networks use, `z / sqrt(|z|^2 + eps)`, which is
    0 at `z = 0` for every `eps`: that sublayer leaves the token where it is (so does an output
    whose norm underflows to 0). Elsewhere the result equals `normalize(z)` bit for bit.
    """
    r = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    return torch.where(r > 0, z / r, torch.zeros((), dtype=z.dtype, device=z.device))


def _as(a, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(a, dtype=like.dtype, device=like.device)  # params arrays are read-only


def _attention_logits(x: torch.Tensor, p: ModelParams, forms: torch.Tensor | None = None
                     ) -> torch.Tensor:
    """Logits `beta <Q x_i, K x_j>`, shape `(runs, n, n)`, or `(runs, heads, n, n)` with
    `heads > 1` (no mask); with a random qk law, `beta <x_i, A x_j>` for the drawn forms `A`
    `forms` `(runs, d, d)` or `(runs, heads, d, d)` (`tokensde.model.qk.QKDraws`)."""
    xt = x.transpose(-1, -2)
    if p.qk_law.random:
        if forms is None:
            raise ParameterError(f"qk={p.qk!r} draws a query/key form per run: pass the drawn "
                                 "forms (tokensde.model.qk.QKDraws) to the attention")
        xs = x if forms.dim() == 3 else x.unsqueeze(-3)
        return p.beta * (xs @ forms @ xs.transpose(-1, -2))
    qk = p.qk_matrix()
    if qk is None or qk.ndim == 2:  # one form for every head
        logits = p.beta * (x @ xt if qk is None else x @ _as(qk, x) @ xt)
        return logits if p.heads == 1 else logits.unsqueeze(-3).expand(
            *logits.shape[:-2], p.heads, *logits.shape[-2:])
    # one form per head: x (runs, n, d) times [qk_1 | ... | qk_H] (d, heads d) in one product
    xq = x @ _as(qk.transpose(1, 0, 2).reshape(p.d, -1), x)
    return p.beta * (xq.unflatten(-1, (p.heads, p.d)).transpose(-2, -3) @ xt.unsqueeze(-3))


def _log_token_weights(weights: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """`log(n w_j / sum_l w_l)` shaped to add to `logits` `(runs, [heads,] n, n)` along `j`, from
    token weights `weights` `(n,)` or `(runs, n)` (non-negative, a positive sum)."""
    w = weights.to(dtype=logits.dtype, device=logits.device)
    lw = (w * (w.shape[-1] / w.sum(-1, keepdim=True))).log().unsqueeze(-2)
    return lw.unsqueeze(-3) if logits.dim() == 4 and lw.dim() == 3 else lw


def weights_from_logits(logits: torch.Tensor, p: ModelParams, top: float | None = None,
                        weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weights of the attention kind `p.attention_kind` (`tokensde.model.attention`: softmax
    `A_ij = exp(l_ij) / sum_l exp(l_il)`, USA `exp(l_ij) / n`, ...); with `p.causal` the entries
    j > i are masked (logit -inf, weight zero) for every kind. `top`, when given, is every row's
    largest logit, known beforehand, and replaces the row maxima. Token weights `weights` `(n,)`
    or `(runs, n)` make `A_ij ∝ w_j exp(l_ij)` (softmax) or `w_j exp(l_ij) / sum_l w_l` (USA):
    the logits gain `log(n w_j / sum w)`, so integer weights equal repeated tokens."""
    if weights is not None:
        if top is not None:
            raise ParameterError("token weights change the rows' largest logits: pass top=None")
        logits = logits + _log_token_weights(weights, logits)
    if p.causal:
        n = logits.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(mask, float("-inf"))
    return p.attention_kind.weights(logits, top)


def _attention_weights(x: torch.Tensor, p: ModelParams, forms: torch.Tensor | None = None,
                      weights: torch.Tensor | None = None) -> torch.Tensor:
    """Attention weights `(runs, n, n)` of tokens `x` (spec §1; `forms`: see `attention_logits`;
    token `weights`: see `weights_from_logits`)."""
    return weights_from_logits(_attention_logits(x, p, forms), p, weights=weights)


def _attention_output(x: torch.Tensor, p: ModelParams, forms: torch.Tensor | None = None,
                     weights: torch.Tensor | None = None, evaluator: str = "dense"
                     ) -> torch.Tensor:
    """`y_i = sum_j A_ij x_j`, shape `(runs, n, d)`; with `heads > 1` one output per head,
    `y^h_i = sum_j A^h_ij x_j`, shape `(runs, heads, n, d)` (`forms`: see `attention_logits`;
    token `weights` `(n,)` or `(runs, n)`: `A_ij ∝ w_j exp(l_ij)`, see `weights_from_logits`).
    `evaluator`: 'dense' (the n x n weights) or 'expansion' (unit tokens at d = 2, 3 in O(n),
    `expansion.expansion_output`; refused by name where it does not apply)."""
    if evaluator == "expansion":
        if forms is not None:
            raise ParameterError("attention_eval='expansion' needs the identity query/key form; "
                                 "got drawn forms (use attention_eval='dense')")
        return expansion_output(x, p, weights)
    if evaluator != "dense":
        raise ParameterError(f"evaluator must be 'dense' or 'expansion'; got {evaluator!r}")
    a = _attention_weights(x, p, forms, weights)
    return a @ (x if p.heads == 1 else x.unsqueeze(-3))


def _mean_part(y: torch.Tensor, p: ModelParams) -> torch.Tensor | None:
    """`M y_i` for the deterministic value part, or None when M = 0; per-head outputs
    `(runs, heads, n, d)` enter through their average `M (1/heads) sum_h y^h_i`."""
    if not p.has_mean:
        return None
    if p.heads > 1:
        y = y.mean(-3)
    if p.mean_kind == "identity":
        return y
    return y @ _as(p.M, y).T


def _tangent(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`P_x v = v - <x, v> x` token-wise."""
    return v - (x * v).sum(-1, keepdim=True) * x


def _residual_step(
    x: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float
) -> torch.Tensor:
    """Residual update `x + dt M y + sqrt(dt) xi` with `xi = V y`, not normalised: the pre-norm
    layer (docs/variants.md §4), where `y` is the attention output of `N(x)`."""
    z = (dt**0.5 * xi).add_(x)  # one batch-sized temporary, reused to the end
    my = _mean_part(y, p)
    if my is not None:
        z.add_(dt * my)
    return z


def network_step(
    x: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float
) -> torch.Tensor:
    """Discrete layer `x <- N(x + dt M y + sqrt(dt) xi)` with `xi = V y` (spec §2)."""
    return _normalize_(_residual_step(x, y, xi, p, dt))


def _peri_norm_step(
    x: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float
) -> torch.Tensor:
    """Peri-norm layer `x + sqrt(dt) N(sqrt(dt) M y + xi)`: the branch output `W y`,
    `W = sqrt(dt) M + V`, normalised before the residual scale (docs/variants.md §4; `N(0) = 0`,
    see `normalize_branch`)."""
    my = _mean_part(y, p)
    branch = xi if my is None else xi + dt**0.5 * my
    return x + dt**0.5 * _normalize_branch(branch)


_NORM_STEPS = {"post": network_step, "pre": _residual_step, "peri": _peri_norm_step}


def _mlp_input(x: torch.Tensor, p: ModelParams) -> torch.Tensor:
    """What the MLP block sees: the tokens (post-norm) or the normalised residual stream."""
    return x if p.norm == "post" else normalize(x)


def _mlp_step(x: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float) -> torch.Tensor:
    """The MLP sublayer after attention, with block output `xi = W_2 phi(W_1 u)`:
    `N(x + sqrt(dt) xi)` (post), `x + sqrt(dt) xi` (pre), `x + sqrt(dt) N(xi)` (peri, with
    `N(0) = 0`: a token whose ReLU hidden units are all off stays put, see `normalize_branch`)."""
    if p.norm == "peri":
        return x + dt**0.5 * _normalize_branch(xi)
    z = x + dt**0.5 * xi
    return _normalize_(z) if p.norm == "post" else z


def _layer_step(x: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float,
               mlp: Callable[[torch.Tensor], torch.Tensor] | None = None,
               step: Callable[..., torch.Tensor] = network_step) -> torch.Tensor:
    """One layer: the attention sublayer `x' = step(x, y, xi, p, dt)` (spec §2; `step` one of
    `NORM_STEPS`), then, with an MLP block whose output at the block input `u` is `mlp(u)`, the MLP
    sublayer `mlp_step(x', mlp(mlp_input(x')), p, dt)` (docs/variants.md §5)."""
    x = step(x, y, xi, p, dt)
    return x if mlp is None else _mlp_step(x, mlp(_mlp_input(x, p)), p, dt)
