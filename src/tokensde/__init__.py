"""tokensde: token dynamics of deep Transformers at random initialisation.

Simulate the deep random-attention network and its SDE limit, measure clustering, and show it.

`simulate` and `SimResult` are loaded on first use, so that importing the package, or a module of
its torch-free core (`params`, `stats`, `two_tokens`, `absorption`), does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .model.params import ModelParams, ParameterError, TimeGrid

if TYPE_CHECKING:
    from .sim.result import SimResult
    from .sim.simulate import simulate

__all__ = ["ModelParams", "ParameterError", "SimResult", "TimeGrid", "__version__", "simulate"]


def __getattr__(name: str) -> Any:
    """`simulate` (from `model`) and `SimResult` (from `result`), imported when first asked for."""
    if name == "simulate":
        from .sim.simulate import simulate

        return simulate
    if name == "SimResult":
        from .sim.result import SimResult

        return SimResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
