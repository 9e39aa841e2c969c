"""The random MLP block of each layer (docs/variants.md §5): one module per activation, each
registering an `Activation`.

`ModelParams(mlp=name, mlp_sigma=s, mlp_width=m)` resolves it through `MLPS`
(`ModelParams.mlp_block`). `none` (the default) adds no block. To add an activation, write one
module here defining an `Activation` subclass decorated with `@MLPS.register` and import it below;
`add_scaled_family` adds its `name(q=<q>)` forms.
"""

from __future__ import annotations

from . import gelu, relu, swiglu
from .base import MLPS, Activation, add_scaled_family

__all__ = ["MLPS", "Activation", "add_scaled_family", "gelu", "relu", "swiglu"]
