"""Noise laws of the value matrices (spec §2-§3): one module per law, each registering a `NoiseLaw`.

`ModelParams(noise=name)` resolves the law through `NOISE_LAWS` (`ModelParams.noise_law`). To add a
law, write one module here defining a `NoiseLaw` subclass decorated with `@NOISE_LAWS.register`
and import it below; its `name` becomes a valid `noise`.
"""

from __future__ import annotations

from . import matrix, scalar, symmetric
from .base import NOISE_LAWS, NoiseLaw, Streams, apply_matrices
from .entries import ENTRY_LAWS, entry_law

__all__ = ["ENTRY_LAWS", "NOISE_LAWS", "NoiseLaw", "Streams", "apply_matrices", "entry_law",
           "matrix", "scalar", "symmetric"]
