"""Laws of the entries of a value-noise draw (the `law` parameter), each centred with variance
`scale^2`: `ENTRY_LAWS[law](rs, shape, scale, dtype)` draws `(runs, *shape)`. A noise law lists the
ones it allows in `laws`; a new entry law is one more function registered here with `entry_law`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from .base import Streams

if TYPE_CHECKING:
    import torch

_EntryLaw = Callable[[Streams, tuple[int, ...], float, "torch.dtype"], "torch.Tensor"]
ENTRY_LAWS: dict[str, _EntryLaw] = {}


def entry_law(name: str) -> Callable[[_EntryLaw], _EntryLaw]:
    """Decorator: register an entry law as `name`."""
    def add(fn: _EntryLaw) -> _EntryLaw:
        ENTRY_LAWS[name] = fn
        return fn
    return add


@entry_law("gaussian")
def gaussian(rs: Streams, shape: tuple[int, ...], scale: float, dtype: torch.dtype
             ) -> torch.Tensor:
    """`N(0, scale^2)` entries."""
    return scale * rs.normal(*shape, dtype=dtype)


@entry_law("uniform")
def _uniform(rs: Streams, shape: tuple[int, ...], scale: float, dtype: torch.dtype
            ) -> torch.Tensor:
    """`U(-a, a)` entries, `a = scale sqrt(3)` (variance scale^2)."""
    a = scale * math.sqrt(3.0)
    return a * (2.0 * rs.uniform(*shape, dtype=dtype) - 1.0)


@entry_law("rademacher")
def _rademacher(rs: Streams, shape: tuple[int, ...], scale: float, dtype: torch.dtype
               ) -> torch.Tensor:
    """`scale * (+-1)` entries."""
    return scale * rs.sign(*shape, dtype=dtype)
