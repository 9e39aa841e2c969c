"""`attention='usa'` (unnormalised self-attention, spec §1): `A_ij = exp(l_ij) / n`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..checks import _require
from .base import ATTENTION_KINDS, AttentionKind

if TYPE_CHECKING:
    import torch

# Unnormalised (USA) attention weighs tokens by exp(beta <x_i, x_j>), so a layer's |z|^2 overflows
# once beta passes log(largest float) / 2: about 354.9 in float64 and 44.4 in float32. The bounds
# keep a margin of about 5 (noise scales up to ~100).
_USA_BETA_MAX: dict[str, float] = {"float64": 345.0, "float32": 39.0}


def _check_usa_beta(beta: float, dtype: str = "float64") -> float:
    """`beta` if USA attention stays finite in `dtype` ('float64' or 'float32'), else raise."""
    top = _USA_BETA_MAX[dtype]
    wider = "" if dtype == "float64" else f"; float64 allows <= {_USA_BETA_MAX['float64']:g}"
    _require(beta <= top, f"beta (attention=usa, {dtype})", f"<= {top:g} (exp(beta) makes the "
            f"tokens overflow {dtype} from about beta = {math.log(np.finfo(dtype).max) / 2:.0f}"
            f"{wider})", beta)
    return beta


@ATTENTION_KINDS.register
class _Usa(AttentionKind):
    """Exponential weights divided by the number of tokens, not by the row sum."""

    name = "usa"

    def check_dtype(self, dtype: str) -> None:
        """beta <= `USA_BETA_MAX[dtype]` (`check_usa_beta`)."""
        _check_usa_beta(self.beta, dtype)

    def weights(self, logits: torch.Tensor, top: float | None = None) -> torch.Tensor:
        """`exp(l_ij) / n` (`top` is not needed)."""
        return logits.exp() / logits.shape[-1]
