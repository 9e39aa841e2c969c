"""Observers: statistics of the state that `simulate` keeps at checkpoints, run by run.

An `Observer` is a name and `observe(layer, t, x)`, a statistic of a batch's state `x`
`(runs_in_batch, n, w)` after layer `layer` (depth time `t = layer * dt`) that returns a tensor
`(runs_in_batch, ...)`: a function `fn(x)` of the state alone, or a subclass that reads the
layer and the time too. It may name its own checkpoints, else it takes the `Recording`'s;
`simulate(..., recording=Recording(observe=[...]))` calls it at exactly those layers and keeps
its outputs in `SimResult.observed[name]`, `(runs, C, ...)`. The records 'gram' and 'tokens'
are the two built-in observers (`builtin_observers`), so a statistic at every layer costs its
own size per run and layer, not an n x n Gram matrix. `Observations` holds the outputs and makes
the one recorder (`loop._Recorder`) each batch's layer loop calls.

An observer reads coordinates in R^d unless it is declared `invariant=True`: a function of the
inner products `X X^T` alone (of the tokens' norms and angles, not of their coordinates). Only
invariant observers run under the Gram sampler, which holds the tokens in a frame of their span
and not in R^d; `sampler='auto'` takes it only when every output is invariant
(`coordinate_outputs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..model.params import ParameterError
from .layers import normalize

_RECORDS: tuple[str, ...] = ("gram", "tokens")  # the built-in observers, asked for by `record=`


@dataclass(frozen=True)
class Observer:
    """A statistic kept at checkpoints: `observe(layer, t, x)` `(runs_in_batch, ...)` of the
    state `x` `(runs_in_batch, n, w)` after layer `layer`, at depth time `t = layer * dt`.

    Give `fn(x)` for a statistic of the state alone (`observe` calls it), or subclass and
    override `observe(layer, t, x)` to read the layer and the time too. `checkpoints` names the
    observer's own layers (as `Recording.checkpoints`: an int C >= 2 evenly spaced, layer
    indices, or None for the `Recording`'s); its outputs in `SimResult.observed[name]` are
    `(runs, K_own, ...)` and `SimResult.observed_layers(name)` gives those layers. `simulate`
    calls it at exactly those layers, once per batch of runs.

    `observe` must act run by run (row `r` of its output a function of row `r` of `x` alone), so
    that the result does not depend on the batch size; it gets the state `simulate` records as
    'tokens': the tokens in R^d (w = d), the residual stream with norm 'pre' or 'peri' (radii
    included). An observer declared `invariant=True` promises that its output depends on `x`
    only through `x x^T` (so it is unchanged by `x -> x O` for every orthogonal `O`, and by zero
    columns appended to `x`); it may then also run under sampler='gram', which passes the state
    in an isometric frame of the tokens' span (`w <= n`: inner products and norms are those in
    R^d, coordinates are not). `simulate` checks the declaration at the observer's first call
    (one more call, on the state turned by a random rotation: `check_invariance`) and refuses
    an observer that fails it. Without the declaration the Gram sampler refuses the observer
    and `auto` does not take it. A run stopped at its decision (`until='decided'`, layer `k`)
    is observed once more, `observe(k, k dt, x_k)`, when it has checkpoints after `k`, and
    that output fills them: no observer is called at a layer after its run's decision.

    Args:
        name: the key of the outputs in `SimResult.observed` (not 'gram' or 'tokens', which are
            asked for by `record=`).
        fn: the statistic of the state, a callable from a torch tensor to a torch tensor (None
            in a subclass that overrides `observe`).
        invariant: the output is a function of the inner products alone (see above).
        checkpoints: the observer's own layers, or None for the `Recording`'s.
        check: test `invariant=True` at the first call (`check_invariance`); False for a
            statistic invariant in exact arithmetic but ill-conditioned, which the rounding of
            a rotated state moves beyond the test's tolerance (the square roots of near-zero
            Gram eigenvalues of an effective rank, `real.predict`).
    """

    name: str
    fn: Callable[[Any], torch.Tensor] | None = None
    invariant: bool = False
    checkpoints: int | Sequence[int] | None = None
    check: bool = True

    def observe(self, layer: int, t: float, x: Any) -> torch.Tensor:
        """The statistic of the state `x` after layer `layer` (depth time `t`): `fn(x)`."""
        assert self.fn is not None  # checked when made
        return self.fn(x)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError(f"observe: an observer's name must be a non-empty string; got "
                                 f"{self.name!r}")
        own = type(self).observe is not Observer.observe
        if not (callable(self.fn) or (self.fn is None and own)):
            raise ParameterError(f"observe: observer {self.name!r} needs a callable fn(x) -> "
                                 f"tensor (runs_in_batch, ...), or a subclass of Observer that "
                                 f"overrides observe(layer, t, x); got {self.fn!r}")
        for field in ("invariant", "check"):
            if not isinstance(getattr(self, field), bool):
                raise ParameterError(f"observe: observer {self.name!r} needs {field}=True or "
                                     f"False; got {getattr(self, field)!r}")
        object.__setattr__(self, "checkpoints", _own_checkpoints(self.name, self.checkpoints))


def _own_checkpoints(name: str, ck: object) -> int | tuple[int, ...] | None:
    """An observer's checkpoints as given (an int, None) or as a tuple of ints; ParameterError
    naming the observer for anything else (the layers are checked against the horizon by
    `options._observer_layers`)."""
    if ck is None or (isinstance(ck, int | np.integer) and not isinstance(ck, bool)):
        return None if ck is None else int(ck)
    if isinstance(ck, Iterable) and not isinstance(ck, str | bytes):
        out = tuple(ck)
        if all(isinstance(k, int | np.integer) and not isinstance(k, bool) for k in out):
            return tuple(int(k) for k in out)
    raise ParameterError(f"observe: observer {name!r} takes checkpoints None, a count C >= 2 or "
                         f"layer indices; got {ck!r}")


#: What `simulate(observe=...)` takes: one observer, a sequence of them, or `{name: fn}`.
_ObserveSpec = Observer | Sequence[Observer] | Mapping[str, Callable[[torch.Tensor], torch.Tensor]]


def _check_observers(observe: object) -> tuple[Observer, ...]:
    """The user's observers as a tuple: None, one `Observer`, a sequence of them, or a mapping
    `{name: fn}`; ParameterError naming `observe` for anything else, a name given twice or a
    built-in name ('gram', 'tokens': use `record=`).

    Args:
        observe: what `simulate` got as `observe`.

    Returns:
        The observers, in the order given.
    """
    if observe is None:
        return ()
    if isinstance(observe, Observer):
        given: tuple[object, ...] = (observe,)
    elif isinstance(observe, Mapping):
        given = tuple(Observer(k, f) for k, f in observe.items())
    elif isinstance(observe, Sequence) and not isinstance(observe, str | bytes):
        given = tuple(observe)
    else:
        raise ParameterError(f"observe must be None, an Observer, a sequence of Observers or a "
                             f"mapping {{name: fn}}; got {observe!r}")
    seen: set[str] = set()
    out: list[Observer] = []
    for o in given:
        if not isinstance(o, Observer):
            raise ParameterError(f"observe must hold Observer(name, fn) objects; got {o!r}")
        if o.name in _RECORDS:
            raise ParameterError(f"observe: the name {o.name!r} is a built-in record; ask for it "
                                 f"with record=({o.name!r},) or give the observer another name")
        if o.name in seen:
            raise ParameterError(f"observe: the name {o.name!r} is given twice; names must be "
                                 f"distinct")
        seen.add(o.name)
        out.append(o)
    return tuple(out)


def _gram_post(x: torch.Tensor) -> torch.Tensor:
    return x @ x.transpose(-1, -2)


def _gram_directions(x: torch.Tensor) -> torch.Tensor:
    u = normalize(x)
    return u @ u.transpose(-1, -2)


def _tokens(x: torch.Tensor) -> torch.Tensor:
    return x


def _builtin_observers(record: Sequence[str], norm: str) -> tuple[Observer, ...]:
    """The observers of `record` (any of 'gram', 'tokens'): 'gram' `X X^T` `(runs, n, n)` (of the
    directions `x_i / |x_i|` with norm 'pre' or 'peri'), 'tokens' the state itself.

    Args:
        record: the names asked for, in `RECORDS`.
        norm: `ModelParams.norm`, 'post', 'pre' or 'peri'.

    Returns:
        The observers, in the order of `RECORDS`.
    """
    gram = _gram_post if norm == "post" else _gram_directions
    table = {"gram": Observer("gram", gram, invariant=True), "tokens": Observer("tokens", _tokens)}
    return tuple(table[r] for r in _RECORDS if r in record)


def _coordinate_outputs(record: Sequence[str], observers: Sequence[Observer]) -> tuple[str, ...]:
    """The outputs that read coordinates in R^d, by name: the record 'tokens' and every observer
    not declared invariant (a function of `x` beyond `x x^T`). The Gram sampler refuses them.

    Args:
        record: the built-in records asked for.
        observers: the user's observers.

    Returns:
        Their names, records first.
    """
    return tuple(o.name for o in (*_builtin_observers(record, "post"), *observers)
                 if not o.invariant)


def _random_rotation(w: int, dtype: torch.dtype, device: torch.device | str = "cpu",
                    seed: int = 0) -> torch.Tensor:
    """A random orthogonal `w x w` matrix (QR of a seeded Gaussian matrix, signs fixed)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(w, w, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r)).where(torch.diagonal(r) != 0, torch.ones(()))
    return q.to(dtype=dtype, device=device)


#: how far `fn(x O)` may be from `fn(x)` for an observer declared invariant, in units of the
#: dtype's epsilon times (1 + the largest output)
_INVARIANCE_EPS = 1e4


def _check_invariance(observers: Sequence[Observer], x: Any, layer: int = 0,
                     t: float = 0.0) -> None:
    """ParameterError naming the first user observer declared `invariant=True` whose output
    changes when the state `x` `(runs, n, w)` after layer `layer` (time `t`) is rotated,
    `x -> x O` with a random orthogonal `O` (`random_rotation`), beyond rounding
    (`_INVARIANCE_EPS`); the built-in records are invariant by construction and not tested, nor
    is a state that is not a floating-point tensor, nor an observer made with `check=False`. One
    extra call of each such observer."""
    users = [o for o in observers if o.invariant and o.check and o.name not in _RECORDS]
    if not users or not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return
    xr = x @ _random_rotation(x.shape[-1], x.dtype, x.device)
    for o in users:
        a, b = o.observe(layer, t, x), o.observe(layer, t, xr)
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) \
                or a.shape != b.shape:
            continue  # record() names the observer's shape error
        if a.is_floating_point() or a.is_complex():
            a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
            gap = float((a64 - b64).abs().max()) if a64.numel() else 0.0
            eps = torch.finfo(a.dtype if a.is_floating_point() else torch.float64).eps
            scale = 1.0 + float(a64.abs().max()) if a64.numel() else 1.0
            bad = not gap <= _INVARIANCE_EPS * eps * scale
        else:
            gap, bad = math.nan, not bool(torch.equal(a, b))
        if bad:
            raise ParameterError(
                f"observe: observer {o.name!r} is declared invariant=True, but its output "
                f"changes when the tokens are rotated (x -> x O, O a random orthogonal matrix; "
                f"largest change {gap:.3g}): it reads coordinates, not only the inner products "
                f"x x^T; declare it Observer({o.name!r}, fn) (invariant=False), which runs "
                f"with the tokens in R^d")


class _Observations:
    """The outputs of `observers` for `runs` runs, observer `i` at its layers `layers[i]`,
    `(runs, K_i, ...)` on the CPU; each array is made at the observer's first output (its shape
    and dtype). `batch(start)` is the `loop._Recorder` of one batch of runs; `dt` makes the
    depth times `t = layer * dt` the observers get."""

    def __init__(self, observers: Sequence[Observer], runs: int,
                 layers: Sequence[np.ndarray], dt: float) -> None:
        self.observers = tuple(observers)
        self.runs, self.dt = runs, dt
        self.layers = [np.asarray(a, dtype=np.int64) for a in layers]
        # layer -> column, per observer
        self.column = [{int(k): c for c, k in enumerate(a)} for a in self.layers]
        self.store: dict[str, torch.Tensor] = {}
        self.checked: set[str] = set()  # the declared invariances tested (at a first call)

    @property
    def every_layer(self) -> np.ndarray:
        """The layers at which any observer is called, sorted."""
        if not self.layers:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate(self.layers))

    def batch(self, start: int, size: int,
              guard: Callable[[int, Any], None] | None = None) -> _BatchRecorder:
        """The `loop._Recorder` of the runs `start:start + size`; `guard(k, x)` first sees every
        state recorded (to refuse, say, a non-finite one)."""
        return _BatchRecorder(self, start, size, guard)

    def output(self, i: int, k: int, x: Any, b: int) -> torch.Tensor:
        """Observer `i` at layer `k` on the state `x` of `b` runs, its declaration and the shape
        of its output checked."""
        o = self.observers[i]
        t = k * self.dt
        if o.invariant and o.name not in self.checked:
            self.checked.add(o.name)
            _check_invariance([o], x, k, t)
        out = o.observe(k, t, x)
        if not isinstance(out, torch.Tensor) or out.ndim == 0 or out.shape[0] != b:
            got = (f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor)
                   else type(out).__name__)
            raise ParameterError(f"observe: observer {o.name!r} must return a torch tensor "
                                 f"with one row per run, ({b}, ...), for a batch of {b} "
                                 f"runs; got {got}")
        return out

    def kept(self, i: int, out: torch.Tensor) -> torch.Tensor:
        """The array of observer `i`, made at its first output."""
        o = self.observers[i]
        kept = self.store.get(o.name)
        if kept is None:
            kept = torch.empty((self.runs, len(self.layers[i]), *out.shape[1:]), dtype=out.dtype)
            self.store[o.name] = kept
        elif kept.shape[2:] != out.shape[1:] or kept.dtype != out.dtype:
            b = out.shape[0]
            raise ParameterError(f"observe: observer {o.name!r} returned ({b}, "
                                 f"{', '.join(map(str, out.shape[1:]))}) {out.dtype} after "
                                 f"(runs, {', '.join(map(str, kept.shape[2:]))}) "
                                 f"{kept.dtype}: the shape and dtype must not change")
        return kept

    def arrays(self) -> dict[str, np.ndarray]:
        """The outputs as numpy arrays `(runs, K_i, ...)`, by name, in the observers' order."""
        return {o.name: self.store[o.name].numpy() for o in self.observers if o.name in self.store}

    def own_layers(self, default: np.ndarray) -> dict[str, list[int]]:
        """The layers of each observer whose layers are not `default`, by name."""
        return {o.name: a.tolist() for o, a in zip(self.observers, self.layers, strict=True)
                if not np.array_equal(a, default)}


class _BatchRecorder:
    """The `loop._Recorder` of one batch of runs (`start:start + size`) of `Observations`."""

    def __init__(self, book: _Observations, start: int, size: int,
                 guard: Callable[[int, Any], None] | None) -> None:
        self.book, self.start, self.size, self.guard = book, start, size, guard
        self.layers = book.every_layer

    def _at(self, rows: torch.Tensor) -> slice | torch.Tensor:
        # march keeps the rows in order and only drops some: all of them are the whole batch
        if len(rows) == self.size:
            return slice(self.start, self.start + self.size)
        return rows + self.start

    def at(self, k: int, x: Any, rows: torch.Tensor) -> None:
        """Keep, for the batch rows `rows`, the output of every observer with a checkpoint at
        layer `k`."""
        if self.guard is not None:
            self.guard(k, x)
        book, at = self.book, self._at(rows)
        for i, col in enumerate(book.column):
            c = col.get(k)
            if c is not None:
                out = book.output(i, k, x, len(rows))
                book.kept(i, out)[at, c] = out.detach().cpu()

    def left(self, k: int, x: Any, rows: torch.Tensor) -> None:
        """The rows `rows` leave at layer `k` in state `x`: each observer with checkpoints after
        `k` is called once more, `observe(k, k dt, x)`, and its output fills them."""
        if self.guard is not None:
            self.guard(k, x)
        book, at = self.book, rows + self.start
        for i, a in enumerate(book.layers):
            later = np.flatnonzero(a > k)
            if later.size == 0:
                continue
            out = book.output(i, k, x, len(rows)).detach().cpu()
            kept = book.kept(i, out)
            cols = torch.from_numpy(later)
            kept[at.unsqueeze(1), cols.unsqueeze(0)] = out.unsqueeze(1).expand(
                -1, len(later), *out.shape[1:])
