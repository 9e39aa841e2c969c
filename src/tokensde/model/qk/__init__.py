"""Laws of the query/key form `A = Q^T K` of the logits `beta <x_i, A x_j>` (docs/variants.md §3): one
module per law, each registering a `QKLaw`.

`ModelParams(qk=name, qk_scale=s, qk_redraw='run'|'layer')` resolves the law through `QK_LAWS`
(`ModelParams.qk_law`). `identity` (the default) draws nothing: the form is `Q^T K` of the given
`Q`, `K` (identity when not given). The random laws draw `A = I + s R` per run and head, once per
run or afresh every layer. To add a law, write one module here defining a `QKLaw` subclass
decorated with `@QK_LAWS.register` and import it below.
"""

from __future__ import annotations

from . import gaussian, symmetric
from .base import QK_LAWS, QK_REDRAWS, QKDraws, QKLaw

__all__ = ["QK_LAWS", "QK_REDRAWS", "QKDraws", "QKLaw", "gaussian", "symmetric"]
