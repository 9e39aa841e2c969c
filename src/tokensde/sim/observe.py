"""Observers: statistics of the state that `simulate` keeps at its checkpoints, run by run.

An `Observer` is a name and a function `fn(x)` of a batch's state `x` `(runs_in_batch, n, w)`
that returns a tensor `(runs_in_batch, ...)`;
`simulate(..., recording=Recording(observe=[...]))` evaluates it at every checkpoint and
keeps its outputs in `SimResult.observed[name]`, `(runs, K, ...)`. The records 'gram' and
'tokens' are the two built-in observers (`builtin_observers`), so a statistic at every layer
costs its own size per run and layer, not an n x n Gram matrix.

An observer reads coordinates in R^d unless it is declared `invariant=True`: a function of the
inner products `X X^T` alone (of the tokens' norms and angles, not of their coordinates). Only
invariant observers run under the Gram sampler, which holds the tokens in a frame of their span
and not in R^d; `sampler='auto'` takes it only when every output is invariant
(`coordinate_outputs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..model.params import ParameterError
from .layers import normalize

RECORDS: tuple[str, ...] = ("gram", "tokens")  # the built-in observers, asked for by `record=`


@dataclass(frozen=True)
class Observer:
    """A statistic kept at every checkpoint: `fn(x)` `(runs_in_batch, ...)` of the state `x`
    `(runs_in_batch, n, w)`.

    `fn` must act run by run (row `r` of its output a function of row `r` of `x` alone), so that
    the result does not depend on the batch size; it gets the state `simulate` records as
    'tokens': the tokens in R^d (w = d), the residual stream with norm 'pre' or 'peri' (radii
    included). An observer declared `invariant=True` promises that `fn(x)` depends on `x` only
    through `x x^T` (so `fn(x O) = fn(x)` for every orthogonal `O`, and zero columns appended to
    `x` change nothing); it may then also run under sampler='gram', which passes the state in an
    isometric frame of the tokens' span (`w <= n`: inner products and norms are those in R^d,
    coordinates are not). `simulate` checks the declaration once (`check_invariance`: the
    first record's state turned by a random rotation) and refuses an observer that fails it.
    Without the declaration the Gram sampler refuses the observer and `auto` does not take it.
    A run stopped at its decision (`until='decided'`) keeps, at its later checkpoints, `fn` of
    its state at decision.

    Args:
        name: the key of the outputs in `SimResult.observed` (not 'gram' or 'tokens', which are
            asked for by `record=`).
        fn: the statistic, a callable from a torch tensor to a torch tensor.
        invariant: `fn` is a function of the inner products alone (see above).
    """

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    invariant: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError(f"observe: an observer's name must be a non-empty string; got "
                                 f"{self.name!r}")
        if not callable(self.fn):
            raise ParameterError(f"observe: observer {self.name!r} needs a callable fn(x) -> "
                                 f"tensor (runs_in_batch, ...); got {self.fn!r}")
        if not isinstance(self.invariant, bool):
            raise ParameterError(f"observe: observer {self.name!r} needs invariant=True or False; "
                                 f"got {self.invariant!r}")


#: What `simulate(observe=...)` takes: one observer, a sequence of them, or `{name: fn}`.
ObserveSpec = Observer | Sequence[Observer] | Mapping[str, Callable[[torch.Tensor], torch.Tensor]]


def check_observers(observe: object) -> tuple[Observer, ...]:
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
        if o.name in RECORDS:
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


def builtin_observers(record: Sequence[str], norm: str) -> tuple[Observer, ...]:
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
    return tuple(table[r] for r in RECORDS if r in record)


def coordinate_outputs(record: Sequence[str], observers: Sequence[Observer]) -> tuple[str, ...]:
    """The outputs that read coordinates in R^d, by name: the record 'tokens' and every observer
    not declared invariant (a function of `x` beyond `x x^T`). The Gram sampler refuses them.

    Args:
        record: the built-in records asked for.
        observers: the user's observers.

    Returns:
        Their names, records first.
    """
    return tuple(o.name for o in (*builtin_observers(record, "post"), *observers)
                 if not o.invariant)


def random_rotation(w: int, dtype: torch.dtype, device: torch.device | str = "cpu",
                    seed: int = 0) -> torch.Tensor:
    """A random orthogonal `w x w` matrix (QR of a seeded Gaussian matrix, signs fixed)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(w, w, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r)).where(torch.diagonal(r) != 0, torch.ones(()))
    return q.to(dtype=dtype, device=device)


#: how far `fn(x O)` may be from `fn(x)` for an observer declared invariant, in units of the
#: dtype's epsilon times (1 + the largest output)
INVARIANCE_EPS = 1e4


def check_invariance(observers: Sequence[Observer], x: torch.Tensor) -> None:
    """ParameterError naming the first user observer declared `invariant=True` whose output
    changes when the state `x` `(runs, n, w)` is rotated, `x -> x O` with a random orthogonal
    `O` (`random_rotation`), beyond rounding (`INVARIANCE_EPS`); the built-in records are
    invariant by construction and not tested. One extra call of each such observer."""
    users = [o for o in observers if o.invariant and o.name not in RECORDS]
    if not users or not x.is_floating_point():
        return
    xr = x @ random_rotation(x.shape[-1], x.dtype, x.device)
    for o in users:
        a, b = o.fn(x), o.fn(xr)
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) \
                or a.shape != b.shape:
            continue  # record() names the observer's shape error
        if a.is_floating_point() or a.is_complex():
            a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
            gap = float((a64 - b64).abs().max()) if a64.numel() else 0.0
            eps = torch.finfo(a.dtype if a.is_floating_point() else torch.float64).eps
            scale = 1.0 + float(a64.abs().max()) if a64.numel() else 1.0
            bad = not gap <= INVARIANCE_EPS * eps * scale
        else:
            gap, bad = math.nan, not bool(torch.equal(a, b))
        if bad:
            raise ParameterError(
                f"observe: observer {o.name!r} is declared invariant=True, but its output "
                f"changes when the tokens are rotated (x -> x O, O a random orthogonal matrix; "
                f"largest change {gap:.3g}): it reads coordinates, not only the inner products "
                f"x x^T; declare it Observer({o.name!r}, fn) (invariant=False), which runs "
                f"with the tokens in R^d")


class Observations:
    """The outputs of `observers` for `runs` runs at `checkpoints` checkpoints, `(runs, K, ...)`
    on the CPU; each array is made at the observer's first output (its shape and dtype)."""

    def __init__(self, observers: Sequence[Observer], runs: int, checkpoints: int) -> None:
        self.observers = tuple(observers)
        self.runs, self.k = runs, checkpoints
        self.store: dict[str, torch.Tensor] = {}
        self.checked = False  # the declared invariances, tested on the first record

    def record(self, at: slice | torch.Tensor, c: int, x: torch.Tensor) -> None:
        """Keep `fn(x)` of every observer for the runs `at` (a slice or indices of the runs) at
        checkpoint number `c`."""
        b = x.shape[0]
        if not self.checked:
            self.checked = True
            check_invariance(self.observers, x)
        for o in self.observers:
            out = o.fn(x)
            if not isinstance(out, torch.Tensor) or out.ndim == 0 or out.shape[0] != b:
                got = (f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor)
                       else type(out).__name__)
                raise ParameterError(f"observe: observer {o.name!r} must return a torch tensor "
                                     f"with one row per run, ({b}, ...), for a batch of {b} "
                                     f"runs; got {got}")
            kept = self.store.get(o.name)
            if kept is None:
                kept = torch.empty((self.runs, self.k, *out.shape[1:]), dtype=out.dtype)
                self.store[o.name] = kept
            elif kept.shape[2:] != out.shape[1:] or kept.dtype != out.dtype:
                raise ParameterError(f"observe: observer {o.name!r} returned ({b}, "
                                     f"{', '.join(map(str, out.shape[1:]))}) {out.dtype} after "
                                     f"(runs, {', '.join(map(str, kept.shape[2:]))}) "
                                     f"{kept.dtype}: the shape and dtype must not change")
            kept[at, c] = out.detach().cpu()

    def arrays(self) -> dict[str, np.ndarray]:
        """The outputs as numpy arrays `(runs, K, ...)`, by name, in the observers' order."""
        return {o.name: self.store[o.name].numpy() for o in self.observers if o.name in self.store}
