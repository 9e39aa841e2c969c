"""Attention kinds (spec §1): one module per kind, each registering an `AttentionKind`.

`ModelParams(attention=name)` resolves the kind through `ATTENTION_KINDS`
(`ModelParams.attention_kind`). To add a kind, write one module here defining an `AttentionKind`
subclass decorated with `@ATTENTION_KINDS.register` and import it below; its `name` becomes a valid
`attention`. The causal mask (`ModelParams.causal`) applies to every kind, in `layers`.
"""

from __future__ import annotations

from . import softmax, usa
from .base import ATTENTION_KINDS, AttentionKind

__all__ = ["ATTENTION_KINDS", "AttentionKind", "softmax", "usa"]
