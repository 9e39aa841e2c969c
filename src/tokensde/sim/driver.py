"""The one batch driver above the layer loop: runs cut into batches, each with its run streams,
its recorder and its stopping rule, then marched (`loop._march`, through the caller's sampler).

`run_blocks` owns what every sampler of many runs repeats around `march`: the batches of runs
`[first, last)` (whole `RUN_BLOCK`s, so that numbers never depend on the batch size), the
batch's random streams (`rng.RunStreams`, or the caller's), the batch's `loop._Recorder`
(`observe._Observations.batch`), the rule that takes decided runs out (`loop._DecidedStop`, made by
`Block.stopping` with the streams it must thin) and, after the march, the layer at which each
run was decided and the progress of the layers that decided runs did not need. `simulate`,
`meanfield.flow.run_coupled`, `analysis.level_samples.coupled_samples` and the coupled
step-error runs (`analysis.step_coupled`) drive their batches through it; the caller's
`advance(block)` makes the batch's start and sampler and marches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from .loop import _DecidedStop, _Progress, _Recorder, _StopTest
from .observe import _Observations
from .rng import RunStreams

_T = TypeVar("_T")

# the streams of runs [lo, hi) of a batch (default: `RunStreams(seed, runs, lo, hi, device)`)
Streams = Callable[[int, int], RunStreams]


@dataclass(frozen=True)
class Decision:
    """`until='decided'` of a batch: every pair of tokens within `tol` of +1 or -1, tested
    every `every` layers and at the last, of the directions `x / |x|` when `directions`
    (tokens off the sphere: the residual stream of norm 'pre' or 'peri')."""

    tol: float
    every: int
    directions: bool = False


@dataclass
class Block:
    """One batch of runs `[start, stop)` of `run_blocks`: its streams, its recorder (None: no
    record) and, once `advance` asks for it (`stopping`, `use`), its stopping rule `stop_test`."""

    start: int
    stop: int
    streams: RunStreams
    recorder: _Recorder[Any] | None
    decision: Decision | None
    stop_test: _StopTest[Any] | None = None

    @property
    def size(self) -> int:
        """Runs in the batch."""
        return self.stop - self.start

    def stopping(self, *retain: Callable[[torch.Tensor], None]) -> _DecidedStop | None:
        """The batch's `loop._DecidedStop` at the driver's decision, which drops decided runs from each
        of `retain` (the batch's streams); None for the horizon."""
        d = self.decision
        if d is None:
            return None

        def keep(mask: torch.Tensor) -> None:
            for f in retain:
                f(mask)
        return self.use(_DecidedStop(d.tol, d.every, self.size, keep, directions=d.directions))

    def use(self, rule: _StopTest[Any]) -> Any:
        """Take `rule` (a `loop._StopTest` of the caller's own) as the batch's stopping rule."""
        self.stop_test = rule
        return rule


def run_blocks(runs: int, batch_size: int, advance: Callable[[Block], _T], *, seed: int = 0,
               device: torch.device | str = "cpu", first: int = 0, last: int | None = None,
               streams: Streams | None = None, book: _Observations | None = None,
               guard: Callable[[int, Any], None] | None = None,
               decision: Decision | None = None, decided_at: np.ndarray | None = None,
               steps: int = 0, progress: _Progress | None = None) -> list[_T]:
    """`advance(block)` for each batch of `batch_size` runs of `[first, last)` of a `runs`-run
    experiment, in order; the list of what it returns.

    Args:
        runs: the runs of the whole experiment (the streams of the last partial block depend
            on it).
        batch_size: runs per batch: a multiple of `RUN_BLOCK` with the default streams.
        advance: makes the batch's start and sampler and marches it, with `block.recorder` and
            the rule of `block.stopping(...)` (or `block.use(rule)`).
        seed: the root seed of the default streams.
        device: where the default streams draw.
        first: the first run (a multiple of `RUN_BLOCK` with the default streams).
        last: one past the last run (default `runs`).
        streams: the streams of runs `[lo, hi)`, or None for `RunStreams(seed, runs, lo, hi,
            device)`.
        book: the observations, whose row 0 is run `first` (`Observations.batch` makes each
            batch's recorder), or None.
        guard: sees every state recorded first (`Observations.batch`).
        decision: `until='decided'` (`Decision`), or None for the horizon.
        decided_at: filled with the layer at which each run of `[first, last)` was decided (-1:
            never), where a batch had a stopping rule.
        steps: the layers of a run (the progress of the layers decided runs did not need).
        progress: told, after a batch with a stopping rule, the run-layers left undone.

    Returns:
        `advance`'s result for each batch.
    """
    last = runs if last is None else last
    out = []
    for lo in range(first, last, batch_size):
        hi = min(lo + batch_size, last)
        rs = RunStreams(seed, runs, lo, hi, device) if streams is None else streams(lo, hi)
        rec = None if book is None else book.batch(lo - first, hi - lo, guard)
        block = Block(lo, hi, rs, rec, decision)
        out.append(advance(block))
        if block.stop_test is not None:
            _account(block.stop_test.decided_at, lo - first, decided_at, steps, progress)
    return out


def _account(layer: np.ndarray, at: int, decided_at: np.ndarray | None, steps: int,
             progress: _Progress | None) -> None:
    """The layers of decision of one batch (row `at` on) into `decided_at`, and the run-layers
    they left undone to `progress`."""
    if decided_at is not None:
        decided_at[at:at + len(layer)] = layer
    if progress is not None:
        progress(int(np.where(layer >= 0, steps - layer, 0).sum()))


__all__ = ["Block", "Decision", "Streams", "run_blocks"]
