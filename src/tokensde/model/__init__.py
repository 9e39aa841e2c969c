"""What is simulated, torch-free: parameters, validation and the strategy families.

`ModelParams` and `TimeGrid` describe a model and its depth; every bad value raises
`ParameterError`. The families `attention`, `noise`, `qk` and `mlp` are registries of named
strategies (a new noise law or attention kind is one module). Names not in `__all__` are internal.
"""

from __future__ import annotations

from . import attention, mlp, noise, qk
from .attention import ATTENTION_KINDS
from .checks import ParameterError, check_tol
from .mlp import MLPS
from .noise import NOISE_LAWS
from .params import NORMS, VALUE_INIT_PRESETS, ModelParams, TimeGrid, value_init_preset
from .qk import QK_LAWS
from .registry import Registry

__all__ = [
    "ATTENTION_KINDS",
    "MLPS",
    "NOISE_LAWS",
    "NORMS",
    "QK_LAWS",
    "VALUE_INIT_PRESETS",
    "ModelParams",
    "ParameterError",
    "Registry",
    "TimeGrid",
    "attention",
    "check_tol",
    "mlp",
    "noise",
    "qk",
    "value_init_preset",
]
