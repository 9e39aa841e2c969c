"""Value-matrix initialisation arms. Each arm rewrites the value matrices `V_k` and nothing else.

PyTorch's default `nn.Linear` init draws `V_ab ~ U(-b, b)`, `b = 1/sqrt(D)`: a centred random
matrix of entry variance `1/(3D)`, the "intrinsic noise" of spec §2. A block adds `r V_k y` to its
residual stream (`y = A(x) x`, `r` the branch scale, 1/sqrt(L) with residual scaling). The arms,
each with the model of the theory it is (`_ARM_MODELS`):

- `default`: that draw, untouched (= `noise:1`);
- `noise:LAM`: the default draw times `LAM` (`noise:0` gives V = 0); `suppressed:LAM` is read as
  the same arm;
- `hybrid:LAM`: `V_k = r I + LAM V_k^default`, so the block adds `r^2 y + r LAM V y`: the mean part
  M = I at the drift scale plus the noise (spec §2, hybrid model);
- `gaussian:VAR`: `V_ab ~ N(0, VAR / D)` (`gaussian:0.3333` matches the default's variance);
- `identity`: `V = I`, no noise: the deterministic attention flow at the branch scale;
- `shared`: layer 0's default draw copied into every layer (one random matrix for all depths).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ..model.params import ParameterError, _check_real
from ..sim.rng import derive_seed
from .model import ViT, ViTConfig, build_vit

ARM_KINDS: tuple[str, ...] = ("default", "noise", "hybrid", "gaussian", "identity", "shared")
_WITH_VALUE = ("noise", "hybrid", "gaussian")
_ALIASES = {"suppressed": "noise"}
_VALUE_STREAM = 7  # child-seed key of the random draws an arm adds (gaussian)
_ARM_FORMS = ("default, noise:LAM, hybrid:LAM, gaussian:VAR, identity or shared (LAM, VAR >= 0; "
             "suppressed:LAM = noise:LAM)")
# Which model of the theory (spec §2) each arm is, in one line: "short name: detail".
_ARM_MODELS: dict[str, str] = {
    "default": "pure noise: M = 0, PyTorch's random V (entry variance 1/(3D))",
    "noise": "pure noise: M = 0, LAM times the default draw (LAM = 0: V = 0, no value signal)",
    "hybrid": "hybrid: mean part M = I at the drift scale r^2 plus LAM times the default noise",
    "gaussian": "pure noise: M = 0, Gaussian entries of variance VAR/D",
    "identity": "deterministic flow: V = I, no noise, at the branch scale r",
    "shared": "coherent noise: one random V repeated at every depth (not independent over layers)",
}


def _arm_order(arms: Iterable[str]) -> list[str]:
    """The distinct arm labels in display order: by kind as in ARM_KINDS, then by label."""
    rank = {kind: i for i, kind in enumerate(ARM_KINDS)}
    rank.update({alias: rank[kind] for alias, kind in _ALIASES.items()})

    def key(arm: str) -> tuple[int, str]:
        return (rank.get(arm.partition(":")[0], len(ARM_KINDS)), arm)

    return sorted(set(arms), key=key)


@dataclass(frozen=True)
class Arm:
    """One value-matrix initialisation arm of the ViT: `kind` in ARM_KINDS and, for noise / hybrid
    / gaussian, its number."""

    kind: str
    value: float | None = None

    @classmethod
    def parse(cls, text: str) -> Arm:
        """Read one arm of ARM_FORMS, e.g. `noise:0.5` or `hybrid:0`."""
        kind, sep, num = str(text).strip().partition(":")
        kind = _ALIASES.get(kind, kind)
        if kind not in ARM_KINDS or bool(sep) != (kind in _WITH_VALUE):
            raise ParameterError(f"arm must be one of {_ARM_FORMS}; got {text!r}")
        if kind not in _WITH_VALUE:
            return cls(kind)
        name = "gaussian variance VAR" if kind == "gaussian" else "noise factor LAM"
        return cls(kind, _check_real(f"arm {text!r}: {name}", num, 0.0))

    @property
    def name(self) -> str:
        """Canonical label, e.g. `noise:0.1`."""
        return self.kind if self.value is None else f"{self.kind}:{self.value:g}"

    @property
    def model(self) -> str:
        """The model of the theory this arm is, in one line."""
        return _ARM_MODELS[self.kind]

    @property
    def noise_factor(self) -> float | None:
        """LAM of a `noise` / `hybrid` arm (1 for `default`), else None."""
        return 1.0 if self.kind == "default" else self.value if self.kind in ("noise", "hybrid") \
            else None


def parse_arms(text: str | list[str]) -> list[Arm]:
    """A comma-separated list (or a list) of arms, canonical names unique.

    Args:
        text: Arm names separated by commas, or a list of names.

    Returns:
        The arms, in the order given.

    Raises:
        ParameterError: A name is unknown or given twice.
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    arms = [Arm.parse(t) for t in items if str(t).strip()]
    names = [a.name for a in arms]
    if not arms or len(set(names)) != len(names):
        raise ParameterError(f"arms must be a non-empty list of distinct arms ({_ARM_FORMS}); "
                             f"got {text!r}")
    return arms


def value_weights(model: ViT) -> list[torch.Tensor]:
    """The value matrices `V_k` (D x D), one per block, in depth order.

    Args:
        model: The ViT.

    Returns:
        The value matrices, one `(D, D)` weight parameter per block (the model's own, not copies).
    """
    layers = [block.get_submodule("attn.v") for block in model.blocks]
    return [v.weight for v in layers if isinstance(v, nn.Linear)]


def apply_value_init(model: ViT, arm: Arm | str, seed: int) -> ViT:
    """Overwrite the value matrices of `model` in place according to `arm`; return `model`.

    Args:
        model: The ViT to change.
        arm: The arm (or its name, e.g. 'noise:0.1').
        seed: Seed of the arm's own draws.

    Returns:
        `model`.
    """
    arm = arm if isinstance(arm, Arm) else Arm.parse(arm)
    weights = value_weights(model)
    gen = torch.Generator().manual_seed(derive_seed(seed, _VALUE_STREAM))
    r = model.cfg.branch_scale
    lam = 0.0 if arm.value is None else arm.value
    with torch.no_grad():
        first = weights[0].detach().clone()
        for w in weights:
            if arm.kind == "noise":
                w.mul_(lam)
            elif arm.kind == "hybrid":
                w.mul_(lam).add_(r * torch.eye(*w.shape, dtype=w.dtype))
            elif arm.kind == "gaussian":
                std = math.sqrt(lam / w.shape[1])
                w.copy_(std * torch.randn(w.shape, generator=gen, dtype=w.dtype))
            elif arm.kind == "identity":
                w.copy_(torch.eye(*w.shape, dtype=w.dtype))
            elif arm.kind == "shared":
                w.copy_(first)
    return model


def make_model(cfg: ViTConfig, arm: Arm | str, seed: int) -> ViT:
    """The default-initialised ViT of `seed` with the value matrices set by `arm`.

    Args:
        cfg: The ViT's shape.
        arm: The arm (or its name).
        seed: Seed of the default initialisation and of the arm's draws.

    Returns:
        The ViT.
    """
    return apply_value_init(build_vit(cfg, seed), arm, seed)
