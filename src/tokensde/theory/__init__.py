"""Exact results for two tokens (numpy/scipy only): the phase boundary, Lyapunov exponents,
antipodal probabilities, the hybrid model and the time to decision.

`tokensde.theory` is also reachable from the package root (`tokensde.theory.beta_c(10)`).
`tokensde.theory.mlp_block` holds two tokens with the random MLP block (docs/mlp_theory.md:
`mlp_block.p_first`, the probability of reaching a tolerance first); `tokensde.theory.token_noise`
the stability of the uniform state when every token has its own noise (`critical_coupling`).
Names not in `__all__` are internal. They load on first use (PEP 562), so a command that needs
one result imports only its module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from . import mlp_block, token_noise
    from .decision_time import decision_rate, median_time, p_anti_at_tol, survival
    from .two_tokens import (
        antipodal_attracts,
        beta_c,
        default_dt,
        hybrid_eps2_c,
        hybrid_lyapunov,
        hybrid_p_anti,
        lyapunov_antipodal,
        lyapunov_merged,
        p_anti,
        p_anti_reference,
        p_anti_uniform,
        rho_drift_diffusion,
        uniform_pair_density,
    )

__all__ = [
    "antipodal_attracts",
    "beta_c",
    "decision_rate",
    "default_dt",
    "hybrid_eps2_c",
    "hybrid_lyapunov",
    "hybrid_p_anti",
    "lyapunov_antipodal",
    "lyapunov_merged",
    "median_time",
    "mlp_block",
    "p_anti",
    "p_anti_at_tol",
    "p_anti_reference",
    "p_anti_uniform",
    "rho_drift_diffusion",
    "survival",
    "token_noise",
    "uniform_pair_density",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
