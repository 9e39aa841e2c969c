"""The layer loop shared by the samplers: apply a layer `steps` times, hand the state to one
`Recorder` at the layers it names, and (optionally) take runs out of the batch once they are
decided.

`batch.run_batch` (tokens in R^d) and `gram.run_batch_gram` (tokens in a Gram-space frame) differ
only in the layer they pass to `march`; the coupled levels (`sim.coupled`) pass one fine step of
every scheme, the mean-field flow (`meanfield.flow.run_coupled`) one layer of several weighted
token systems, with its own stopping `StopTest` (node merging, a decision per system), and the
reduced two-token paths (`sim.reduced`) one Euler step of a numpy state, one `z` per run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from .decide import decided_tokens

# Called after each layer with the number of runs just advanced (total: runs * steps).
_Progress = Callable[[int], None]


class _Rows(Protocol):
    """A batch state `march` carries: `shape[0]` runs, a boolean mask `(runs,)` selects rows
    (`x[mask]`). A tensor `(runs, ...)` is one."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def __getitem__(self, mask: torch.Tensor) -> Any: ...


_S = TypeVar("_S", bound=_Rows)
_V = TypeVar("_V", contravariant=True)  # what a recorder is handed: a state or its view


class _StopTest(Protocol[_S]):
    """What `march` asks of a stopping rule: every `every` layers and at the last it calls
    `check(k, x, rows)` (`rows`: the batch rows of `x`), which returns the state to go on with
    (`x` itself, or, say, with merged nodes) and the boolean `(runs,)` of rows that leave now;
    march then sets `decided_at[gone] = k`, calls `keep(gone, x_gone)`, and `retain(live)` with the
    rows that stay. At the end it calls `keep(rows, x)` with the rows left and returns `final`.
    `DecidedStop` is one; `meanfield.flow` has another."""

    every: int
    decided_at: np.ndarray
    final: _S | None

    def check(self, k: int, x: _S, rows: torch.Tensor) -> tuple[_S, torch.Tensor]: ...

    def keep(self, rows: torch.Tensor, x: _S) -> None: ...

    def retain(self, live: torch.Tensor) -> None: ...


class _DecidedStop:
    """Take each run out of its batch once it is decided: every pair of tokens within `tol` of
    +1 or -1 (`1 - |<x_i, x_j>| < tol`), tested every `every` layers and at the last.

    `decided_at` `(runs,)` holds the layer at which each run of the batch was decided (-1: never) and
    `final` its state then (or at the horizon); `retain` drops runs from the random streams.
    """

    def __init__(self, tol: float, every: int, runs: int, retain: Callable[[torch.Tensor], None],
                 directions: bool = False) -> None:
        self.tol, self.every, self.retain, self.directions = tol, every, retain, directions
        self.decided_at = np.full(runs, -1, dtype=np.int64)
        self.final: torch.Tensor | None = None

    def decided(self, x: torch.Tensor) -> torch.Tensor:
        """Boolean `(runs,)`: every pair `i != j` has `1 - |<x_i, x_j>| < tol` (of the directions
        `x_i / |x_i|` when `directions`: tokens off the sphere, docs/variants.md §4), without
        an n x n array above `decide._DENSE_MAX` tokens (`decide.decided_tokens`)."""
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
            self.final = torch.empty((len(self.decided_at), *x.shape[1:]), dtype=x.dtype,
                                     device=x.device)
        self.final[rows] = x


class _Recorder(Protocol[_V]):
    """What `march` records through, one object with a fixed signature: `layers`, the sorted
    layer indices (0 = the start) at which it wants the state; `at(k, x, rows)` with the state
    `x` (`view`ed) of batch rows `rows` (a tensor of row indices) after layer `k`; `left(k, x,
    rows)` when the rows `rows` leave the batch at layer `k` (decided), in state `x`, so that
    it may fill their later records. `observe._Observations` makes one per batch of `simulate`."""

    layers: np.ndarray

    def at(self, k: int, x: _V, rows: torch.Tensor) -> None: ...

    def left(self, k: int, x: _V, rows: torch.Tensor) -> None: ...


class OnLayers:
    """The plainest `Recorder`: `fn(k, x, rows)` at each layer of `layers`; rows that leave
    the batch are not called again."""

    def __init__(self, layers: Iterable[int], fn: Callable[[int, Any, torch.Tensor], None]
                 ) -> None:
        self.layers = np.unique(np.asarray(list(layers), dtype=np.int64))
        self.fn = fn

    def at(self, k: int, x: Any, rows: torch.Tensor) -> None:
        """Call `fn`."""
        self.fn(k, x, rows)

    def left(self, k: int, x: Any, rows: torch.Tensor) -> None:
        """Nothing: a run that left is not recorded again."""


def _march(
    x: _S,
    steps: int,
    layer: Callable[[_S], _S],
    recorder: _Recorder[_S] | None = None,
    progress: _Progress | None = None,
    view: Callable[[_S], _S] = lambda t: t,
    stop_test: _StopTest[_S] | None = None,
) -> _S:
    """Apply `layer` `steps` times to `x`, calling `recorder.at(k, view(x), rows)` at each layer
    `k` of `recorder.layers` (0 = the start; `rows` the batch rows of the state) and
    `progress(runs)` after each layer.

    With `stop_test` (a `StopTest`, e.g. `DecidedStop`), every `stop_test.every` layers and at
    the last, the rule checks the state (it may replace it) and decided runs leave the batch, after
    `recorder.left(k, view(x)[done], gone)`. Returns the final state, `view`ed and in batch
    order (`stop_test.final`) when `stop_test` is given.
    """
    ck = frozenset() if recorder is None else frozenset(int(k) for k in recorder.layers)
    rows = torch.arange(x.shape[0])
    if 0 in ck:
        recorder.at(0, view(x), rows)  # type: ignore[union-attr]
    for k in range(1, steps + 1):
        x = layer(x)
        if k in ck:
            recorder.at(k, view(x), rows)  # type: ignore[union-attr]
        if progress is not None:
            progress(x.shape[0])
        if stop_test is not None and (k % stop_test.every == 0 or k == steps):
            x, done = stop_test.check(k, x, rows)
            if bool(done.any()):
                gone, vd = rows[done.cpu()], view(x)[done]
                stop_test.decided_at[gone.numpy()] = k
                stop_test.keep(gone, vd)
                if recorder is not None:
                    recorder.left(k, vd, gone)
                live = ~done
                x, rows = x[live], rows[live.cpu()]
                stop_test.retain(live)
                if x.shape[0] == 0:
                    break
    if stop_test is None:
        return x
    if x.shape[0]:
        stop_test.keep(rows, view(x))
    assert stop_test.final is not None  # every run was kept, at its decision or here
    return stop_test.final
