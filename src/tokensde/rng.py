"""Reproducible random streams, one per block of runs, so numbers never depend on batching.

Runs are cut into fixed blocks of `RUN_BLOCK`; block `b` draws everything from its own
`torch.Generator` seeded by `SeedSequence([seed, b])`. A batch is a whole number of blocks, so a
run's randomness depends only on `(seed, its block, its place in the block)`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .params import check_int

RUN_BLOCK = 256


def block_seed(seed: int, block: int) -> int:
    """The 63-bit seed of block `block` under root seed `seed`."""
    state = np.random.SeedSequence([int(seed), int(block)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


def derive_seed(seed: int, *keys: int) -> int:
    """A child seed in [0, 2^63) of `seed` for integer `keys` (a sub-experiment, a cell)."""
    state = np.random.SeedSequence([int(seed), *map(int, keys)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


def n_blocks(runs: int) -> int:
    """Number of run blocks covering `runs` runs."""
    return math.ceil(runs / RUN_BLOCK)


class RunStreams:
    """Random draws for runs `[start, stop)` of a `runs`-run experiment, block by block.

    Every draw has a leading `runs`-axis of length `stop - start`; `start` must be a block boundary.
    """

    def __init__(self, seed: int, runs: int, start: int = 0, stop: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        seed = check_int("seed", seed, 0)
        stop = runs if stop is None else stop
        if start % RUN_BLOCK or not 0 <= start < stop <= runs:
            raise ValueError(f"run range [{start}, {stop}) must start on a block of {RUN_BLOCK}")
        self.device = torch.device(device)
        self.sizes: list[int] = []
        self.gens: list[torch.Generator] = []
        for b in range(start // RUN_BLOCK, n_blocks(stop)):
            lo, hi = b * RUN_BLOCK, min((b + 1) * RUN_BLOCK, stop)
            g = torch.Generator(device=self.device)
            g.manual_seed(block_seed(seed, b))
            self.gens.append(g)
            self.sizes.append(hi - lo)

    @property
    def runs(self) -> int:
        """Number of runs these streams serve."""
        return sum(self.sizes)

    def _draw(self, fn, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
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
