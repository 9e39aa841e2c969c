"""Reproducible random streams, one per block of runs, so numbers never depend on batching.

Runs are cut into fixed blocks of `RUN_BLOCK`; block `b` draws everything from its own
`torch.Generator` seeded by `SeedSequence([seed, b])`. A batch is a whole number of blocks, so a
run's randomness depends only on `(seed, its block, its place in the block)` and, in a last
partial block, on that block's size (the number of runs): each draw fills the whole block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..model.params import _check_int

__all__ = ["MLP_STREAM", "QK_STREAM", "RunStreams", "derive_seed"]

_RUN_BLOCK = 256
# `derive_seed` keys of streams for the same runs (`RunStreams.derived`); `sim.simulate`
# re-exports them
QK_STREAM = 0x514B  # the random query/key forms
MLP_STREAM = 0x4D4C50  # the MLP blocks' weights


def _block_seed(seed: int, block: int) -> int:
    """The 63-bit seed of block `block` under root seed `seed`."""
    state = np.random.SeedSequence([int(seed), int(block)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


def derive_seed(seed: int, *keys: int) -> int:
    """A child seed in [0, 2^63) of `seed` for integer `keys` (a sub-experiment, a cell).

    Args:
        seed: the parent seed, an integer >= 0.
        *keys: integers naming the child (a cell index, a stream key).

    Returns:
        The child seed, fixed by `(seed, keys)` on any machine.
    """
    state = np.random.SeedSequence([int(seed), *map(int, keys)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


def _n_blocks(runs: int) -> int:
    """Number of run blocks covering `runs` runs."""
    return math.ceil(runs / _RUN_BLOCK)


class RunStreams:
    """Random draws for runs `[start, stop)` of a `runs`-run experiment, block by block.

    Every draw has a leading `runs`-axis over the runs still served. `start` must be a block
    boundary. `retain(mask)` drops runs (those decided early): a block with a run left still draws
    for all its runs and hands out only the rows of the runs left, so a run's numbers never depend
    on which other runs are still served; a block with none left stops drawing.
    """

    def __init__(self, seed: int, runs: int, start: int = 0, stop: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        seed = _check_int("seed", seed, 0)
        stop = runs if stop is None else stop
        if start % _RUN_BLOCK or not 0 <= start < stop <= runs:
            raise ValueError(f"run range [{start}, {stop}) must start on a block of {_RUN_BLOCK}")
        self.device = torch.device(device)
        self.seed, self.span = seed, (runs, start, stop)
        self.sizes: list[int] = []
        self.gens: list[torch.Generator] = []
        self.keep: list[torch.Tensor | None] = []
        self.full: list[int] = []
        for b in range(start // _RUN_BLOCK, _n_blocks(stop)):
            lo, hi = b * _RUN_BLOCK, min((b + 1) * _RUN_BLOCK, stop)
            g = torch.Generator(device=self.device)
            g.manual_seed(_block_seed(seed, b))
            self.gens.append(g)
            self.sizes.append(hi - lo)
            self.full.append(hi - lo)
            self.keep.append(None)

    def derived(self, key: int) -> RunStreams:
        """Independent streams for the same runs (as at construction), of seed
        `derive_seed(seed, key)`."""
        return RunStreams(derive_seed(self.seed, key), *self.span, device=self.device)

    @property
    def runs(self) -> int:
        """Number of runs these streams serve."""
        return sum(self.sizes)

    def retain(self, mask: torch.Tensor) -> None:
        """Serve only the runs where `mask` `(runs,)` is True (in the order of the runs served)."""
        mask = mask.to(device="cpu", dtype=torch.bool)
        if mask.shape != (self.runs,):
            raise ValueError(f"mask must have shape ({self.runs},); got {tuple(mask.shape)}")
        kept: tuple[list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [])
        lo = 0
        for size, gen, keep, full in zip(self.sizes, self.gens, self.keep, self.full, strict=True):
            m = mask[lo:lo + size]
            lo += size
            left = int(m.sum())
            if left == 0:
                continue
            rows = keep if left == size else (
                torch.arange(full) if keep is None else keep)[m]
            for acc, v in zip(kept, (left, gen, rows, full), strict=True):
                acc.append(v)
        self.sizes, self.gens, self.keep, self.full = (list(k) for k in kept)

    def per_block(self, draw: Callable[[int, torch.Generator], torch.Tensor]) -> torch.Tensor:
        """`draw(block_size, generator)` for every block, rows of the runs served, concatenated."""
        parts = []
        for full, gen, keep in zip(self.full, self.gens, self.keep, strict=True):
            t = draw(full, gen)
            parts.append(t if keep is None else t[keep.to(t.device)])
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _draw(self, fn, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if any(k is not None for k in self.keep):
            return self.per_block(lambda full, gen: fn((full, *shape), generator=gen, dtype=dtype,
                                                       device=self.device))
        out = torch.empty((self.runs, *shape), dtype=dtype, device=self.device)
        lo = 0
        for size, gen in zip(self.sizes, self.gens, strict=True):
            fn((size, *shape), generator=gen, dtype=dtype, device=self.device, out=out[lo:lo + size])
            lo += size
        return out

    def normal(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Standard normals of shape `(runs, *shape)`."""
        return self._draw(torch.randn, shape, dtype)

    def uniform(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """U(0, 1) draws of shape `(runs, *shape)`."""
        return self._draw(torch.rand, shape, dtype)

    def sign(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Rademacher +-1 draws of shape `(runs, *shape)`."""
        return torch.where(self.uniform(*shape, dtype=dtype) < 0.5, -1.0, 1.0).to(dtype)

    def standard_gamma(self, shape_param: torch.Tensor) -> torch.Tensor:
        """Gamma(`shape_param`, 1) variates `(runs, k)` for a shape vector `(k,)`."""
        return self.per_block(lambda full, gen: torch._standard_gamma(
            shape_param.expand(full, -1).contiguous(), generator=gen))
