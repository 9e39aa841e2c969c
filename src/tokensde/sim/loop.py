"""The layer loop shared by the samplers: apply a layer `steps` times, record at checkpoints, and
(optionally) take runs out of the batch once they are decided.

`batch.run_batch` (tokens in R^d) and `gram.run_batch_gram` (tokens in a Gram-space frame) differ
only in the layer they pass to `march`; the coupled levels (`sim.coupled`) pass one fine step of
every scheme, and the mean-field flow (`meanfield.flow.run_coupled`) one layer of several weighted
token systems, with its own stopping `Rule` (node merging, a decision per system).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from .decide import decided_tokens

# Called after each layer with the number of runs just advanced (total: runs * steps).
Progress = Callable[[int], None]


class Rows(Protocol):
    """A batch state `march` carries: `shape[0]` runs, a boolean mask `(runs,)` selects rows
    (`x[mask]`). A tensor `(runs, ...)` is one."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def __getitem__(self, mask: torch.Tensor) -> Any: ...


S = TypeVar("S", bound=Rows)


class Rule(Protocol[S]):
    """What `march` asks of a stopping rule: every `every` layers and at the last it calls
    `check(k, x, rows)` (`rows`: the batch rows of `x`), which returns the state to go on with
    (`x` itself, or, say, with merged nodes) and the boolean `(runs,)` of rows that leave now;
    march then sets `layer[gone] = k`, calls `keep(gone, x_gone)`, and `retain(live)` with the
    rows that stay. At the end it calls `keep(rows, x)` with the rows left and returns `final`.
    `Stop` is one; `meanfield.flow` has another."""

    every: int
    layer: np.ndarray
    final: S | None

    def check(self, k: int, x: S, rows: torch.Tensor) -> tuple[S, torch.Tensor]: ...

    def keep(self, rows: torch.Tensor, x: S) -> None: ...

    def retain(self, live: torch.Tensor) -> None: ...


class Stop:
    """Take each run out of its batch once it is decided: every pair of tokens within `tol` of
    +1 or -1 (`1 - |<x_i, x_j>| < tol`), tested every `every` layers and at the last.

    `layer` `(runs,)` holds the layer at which each run of the batch was decided (-1: never) and
    `final` its state then (or at the horizon); `retain` drops runs from the random streams.
    """

    def __init__(self, tol: float, every: int, runs: int, retain: Callable[[torch.Tensor], None],
                 directions: bool = False) -> None:
        self.tol, self.every, self.retain, self.directions = tol, every, retain, directions
        self.layer = np.full(runs, -1, dtype=np.int64)
        self.final: torch.Tensor | None = None

    def decided(self, x: torch.Tensor) -> torch.Tensor:
        """Boolean `(runs,)`: every pair `i != j` has `1 - |<x_i, x_j>| < tol` (of the directions
        `x_i / |x_i|` when `directions`: tokens off the sphere, docs/variants.md §4), without
        an n x n array above `decide.DENSE_MAX` tokens (`decide.decided_tokens`)."""
        if self.directions:
            x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        return decided_tokens(x, self.tol)

    def check(self, k: int, x: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
        """`march`'s test at layer `k`: the state unchanged and the rows `decided`."""
        return x, self.decided(x)

    def keep(self, rows: torch.Tensor, x: torch.Tensor) -> None:
        """Store the states `x` of batch rows `rows`."""
        if self.final is None:
            self.final = torch.empty((len(self.layer), *x.shape[1:]), dtype=x.dtype,
                                     device=x.device)
        self.final[rows] = x


def march(
    x: S,
    steps: int,
    layer: Callable[[S], S],
    checkpoints: np.ndarray,
    record: Callable[..., None],
    progress: Progress | None = None,
    view: Callable[[S], S] = lambda t: t,
    stop: Rule[S] | None = None,
) -> S:
    """Apply `layer` `steps` times to `x`, calling `record(c, view(x))` at checkpoint number `c`
    (layer indices `checkpoints`, 0 = the start) and `progress(runs)` after each layer.

    With `stop` (a `Rule`, e.g. `Stop`), every `stop.every` layers and at the last, the rule
    checks the state (it may replace it) and decided runs leave the batch; `record(c, xc, rows)`
    then gets the batch rows of `xc`, and a decided run's later checkpoints record its state at
    decision. Returns the final state, `view`ed and in batch order (`stop.final`) when `stop` is
    given.
    """
    ck = {int(k): c for c, k in enumerate(checkpoints)}
    rows = torch.arange(x.shape[0])
    rec = record if stop is None else (lambda c, xc: record(c, xc, rows))
    if 0 in ck:
        rec(ck[0], view(x))
    for k in range(1, steps + 1):
        x = layer(x)
        if k in ck:
            rec(ck[k], view(x))
        if progress is not None:
            progress(x.shape[0])
        if stop is not None and (k % stop.every == 0 or k == steps):
            x, done = stop.check(k, x, rows)
            if bool(done.any()):
                gone, vd = rows[done.cpu()], view(x)[done]
                stop.layer[gone.numpy()] = k
                stop.keep(gone, vd)
                for later, c in ck.items():
                    if later > k:
                        record(c, vd, gone)
                live = ~done
                x, rows = x[live], rows[live.cpu()]
                stop.retain(live)
                if x.shape[0] == 0:
                    break
    if stop is None:
        return x
    if x.shape[0]:
        stop.keep(rows, view(x))
    assert stop.final is not None  # every run was kept, at its decision or here
    return stop.final
