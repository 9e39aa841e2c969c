"""Value-matrix initialisation arms. Each arm rewrites the value matrices `V_k` and nothing else.

PyTorch's default `nn.Linear` init draws `V_ab ~ U(-b, b)`, `b = 1/sqrt(D)`: a centred random
matrix of entry variance `1/(3D)`, the "intrinsic noise" of spec §2. The arms:

- `default`: that draw, untouched;
- `gaussian:VAR`: `V_ab ~ N(0, VAR / D)` (`gaussian:0.3333` matches the default's variance);
- `suppressed:LAM`: the default draw times `LAM` (`suppressed:0` gives V = 0);
- `identity`: `V = I`, no noise (the deterministic attention flow, M = I);
- `shared`: layer 0's default draw copied into every layer (one random matrix for all depths).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..params import ParameterError, check_real
from ..rng import derive_seed
from .model import ViT, ViTConfig, build_vit

ARM_KINDS: tuple[str, ...] = ("default", "gaussian", "suppressed", "identity", "shared")
_WITH_VALUE = ("gaussian", "suppressed")
VALUE_STREAM = 7  # child-seed key of the random draws an arm adds (gaussian)
ARM_FORMS = "default, gaussian:VAR, suppressed:LAM, identity or shared (VAR, LAM >= 0)"


@dataclass(frozen=True)
class ValueInit:
    """One arm: `kind` in ARM_KINDS and, for gaussian / suppressed, its number."""

    kind: str
    value: float | None = None

    @classmethod
    def parse(cls, text: str) -> ValueInit:
        """Read `default`, `gaussian:VAR`, `suppressed:LAM`, `identity` or `shared`."""
        kind, sep, num = str(text).strip().partition(":")
        if kind not in ARM_KINDS or bool(sep) != (kind in _WITH_VALUE):
            raise ParameterError(f"arm must be one of {ARM_FORMS}; got {text!r}")
        if kind not in _WITH_VALUE:
            return cls(kind)
        name = "gaussian variance VAR" if kind == "gaussian" else "suppression factor LAM"
        return cls(kind, check_real(f"arm {text!r}: {name}", num, 0.0))

    @property
    def name(self) -> str:
        """Canonical label, e.g. `suppressed:0.1`."""
        return self.kind if self.value is None else f"{self.kind}:{self.value:g}"


def parse_arms(text: str | list[str]) -> list[ValueInit]:
    """A comma-separated list (or a list) of arms, canonical names unique."""
    items = text.split(",") if isinstance(text, str) else list(text)
    arms = [ValueInit.parse(t) for t in items if str(t).strip()]
    names = [a.name for a in arms]
    if not arms or len(set(names)) != len(names):
        raise ParameterError(f"arms must be a non-empty list of distinct arms ({ARM_FORMS}); "
                             f"got {text!r}")
    return arms


def value_weights(model: ViT) -> list[nn.Parameter]:
    """The value matrices `V_k` (D x D), one per block, in depth order."""
    return [block.attn.v.weight for block in model.blocks]


def apply_value_init(model: ViT, arm: ValueInit | str, seed: int) -> ViT:
    """Overwrite the value matrices of `model` in place according to `arm`; return `model`."""
    arm = arm if isinstance(arm, ValueInit) else ValueInit.parse(arm)
    weights = value_weights(model)
    gen = torch.Generator().manual_seed(derive_seed(seed, VALUE_STREAM))
    with torch.no_grad():
        first = weights[0].detach().clone()
        for w in weights:
            if arm.kind == "suppressed":
                w.mul_(arm.value)
            elif arm.kind == "gaussian":
                std = math.sqrt(arm.value / w.shape[1])
                w.copy_(std * torch.randn(w.shape, generator=gen, dtype=w.dtype))
            elif arm.kind == "identity":
                w.copy_(torch.eye(*w.shape, dtype=w.dtype))
            elif arm.kind == "shared":
                w.copy_(first)
    return model


def make_model(cfg: ViTConfig, arm: ValueInit | str, seed: int) -> ViT:
    """The default-initialised ViT of `seed` with the value matrices set by `arm`."""
    return apply_value_init(build_vit(cfg, seed), arm, seed)
