"""Independent token noise (docs/token-noise.md): every token gets its own Gaussian increment.

With `tau = ModelParams.token_noise` the network layer reads

    x_i <- N(x_i + dt M y_i + sqrt(dt) V_k y_i + tau sqrt(dt) g_i),

`g_i` standard normal in R^d, independent over tokens, layers and runs, *not* projected to the
tangent space (the normalisation removes its radial part to first order in dt, and the draw then
does not depend on the state). The SDE step adds `tau sqrt(dt) P_x g_i` and the Ito drift
`-(d-1)/2 tau^2 x dt` (`sde.ito_correction`), the Euler-and-project scheme of the common noise.
The `g_i` come from streams of their own (`rs.derived(TOKEN_NOISE_STREAM)`), so a run's other
draws are those of the run with `token_noise = 0`, which draws nothing.
"""

from __future__ import annotations

import torch

from ..model.params import ModelParams, ParameterError
from .rng import RunStreams

_TOKEN_NOISE_STREAM = 0x544F4B4E  # `derive_seed` key of the streams of the token noise ("TOKN")


def _check_token_noise(p: ModelParams, sampler: str | None = None) -> None:
    """Refuse independent token noise where the step cannot carry it (a ParameterError naming
    the parameter and its allowed range); nothing to check when `token_noise = 0`.

    Args:
        p: the model parameters.
        sampler: the sampler asked for ('auto', 'fast', 'full', 'gram'), or None.

    Returns:
        None; raises ParameterError for `token_noise > 0` with a norm other than 'post' (the
        pre- and peri-norm layers have no token-noise step here) or with sampler='gram'.
    """
    tau = p.token_noise
    if tau == 0:
        return
    if p.norm != "post":
        raise ParameterError(f"token_noise > 0 needs norm='post' (tokens on the sphere); got "
                             f"token_noise={tau:g} with norm={p.norm!r} (the allowed value of "
                             "token_noise there is 0)")
    if sampler == "gram":
        raise ParameterError(f"sampler='gram' does not carry independent token noise; got "
                             f"token_noise={tau:g} (the allowed value is 0; use sampler='fast' "
                             "or 'full')")


def _token_noise_streams(p: ModelParams, rs: RunStreams) -> RunStreams | None:
    """The streams of the token noise of the runs of `rs`, `rs.derived(TOKEN_NOISE_STREAM)`, or
    None when `token_noise = 0` (nothing is drawn).

    Args:
        p: the model parameters.
        rs: the run streams of the batch.

    Returns:
        The derived streams, or None.
    """
    return rs.derived(_TOKEN_NOISE_STREAM) if p.token_noise > 0 else None


def _add_token_noise(xi: torch.Tensor, p: ModelParams, token_rs: RunStreams) -> torch.Tensor:
    """`xi_i += tau g_i` in place, `g_i` standard normal in R^d per token, from `token_rs`: the
    unit-time noise of a layer gains the token noise.

    Args:
        xi: the layer's unit-time noise `(runs, n, d)`, added to in place.
        p: the model parameters (`token_noise` is `tau`).
        token_rs: the streams of the token noise (`token_noise_streams`).

    Returns:
        `xi`.
    """
    g = token_rs.normal(p.n, p.d, dtype=xi.dtype)
    return xi.add_(g.to(xi.device), alpha=p.token_noise)
