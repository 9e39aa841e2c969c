"""The attention-kind strategy: attention weights from the logits `l_ij = beta <Q x_i, K x_j>` (spec §1).

A kind is an `AttentionKind` subclass in a module of its own that registers itself with
`@ATTENTION_KINDS.register`; `ModelParams(attention=...)` selects it by `name` and binds it to
`beta` (`ModelParams.attention_kind`). The causal mask is not the kind's business: `layers` sets the
masked logits to -inf before calling `weights`. Nothing here imports torch at run time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from ..registry import Registry

if TYPE_CHECKING:
    import torch


class AttentionKind(ABC):
    """How a row of logits becomes attention weights, bound to `beta`.

    A subclass sets `name` (the value of `ModelParams.attention`) and defines `weights`; it may
    override `check_dtype` (a bound on beta so that the weights stay finite) and `samplers` (the
    samplers it allows; 'gram' needs weights that are a function of the logits alone).
    """

    name: ClassVar[str]
    samplers: ClassVar[tuple[str, ...]] = ("fast", "full", "gram")

    def __init__(self, beta: float) -> None:
        self.beta = beta
        self.check_dtype("float64")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(beta={self.beta!r})"

    def check_dtype(self, dtype: str) -> None:  # noqa: B027 (a hook: most kinds never overflow)
        """Raise ParameterError if the weights overflow `dtype` ('float64' | 'float32') at beta."""

    @abstractmethod
    def weights(self, logits: torch.Tensor, top: float | None = None) -> torch.Tensor:
        """Weights `(..., n, n)` from logits (masked entries are -inf and get weight 0); `top`,
        when given, is every row's largest logit, known beforehand."""


ATTENTION_KINDS: Registry[AttentionKind] = Registry("attention")
