"""The options of `simulate`, one small frozen object per concern.

`InitialState` (where the tokens start, and their weights), `StoppingRule` (when a run stops),
`Recording` (what is kept, and at which layers) and `Execution` (how it is computed: the
sampler, the attention evaluator, the device, the dtype, the batch size). Each checks what it
can when made; `simulate` checks the rest against the model, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from ..model.checks import check_tol
from ..model.params import ParameterError, _check_int, _check_real
from .expansion import _EVALUATORS
from .observe import _RECORDS, Observer, _check_observers, _ObserveSpec
from .samplers import _SAMPLERS

__all__ = ["Execution", "InitialState", "Recording", "StepControl", "StoppingRule", "default_record"]

# the default record: Gram matrices (n x n per run and checkpoint) up to this many tokens, the
# tokens (n x d) above (one Gram matrix of 65536 tokens takes 34 GB)
_GRAM_RECORD_MAX = 1024
_DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}


def default_record(n: int) -> tuple[str, ...]:
    """What `simulate` records by default: `('gram',)` for `n <= GRAM_RECORD_MAX`, else
    `('tokens',)` (O(n d) per checkpoint instead of O(n^2)).

    Args:
        n: the number of tokens.

    Returns:
        The record tuple.
    """
    return ("gram",) if n <= _GRAM_RECORD_MAX else ("tokens",)


def _resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'float64' / 'float32' (or a torch dtype) to a torch dtype."""
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if dtype not in _DTYPES:
        raise ParameterError(f"dtype must be one of {', '.join(_DTYPES)}; got {dtype!r}")
    return _DTYPES[dtype]


def _resolve_device(device: str | torch.device, name: str = "device") -> torch.device:
    """A torch device, checking that CUDA (and device N of 'cuda:N') exists when asked for;
    ParameterError naming `name` otherwise."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ParameterError(f"{name} must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}") from err
    if dev.type not in ("cpu", "cuda"):
        raise ParameterError(f"{name} must be 'cpu' or 'cuda'; got {device!r}")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ParameterError(f"{name} {device!r} asked for, but CUDA is not available here")
        if dev.index is not None and dev.index >= count:
            raise ParameterError(f"{name} must be cuda:0 ... cuda:{count - 1} here; got {device!r}")
    return dev


def _resolve_checkpoints(checkpoints: int | Sequence[int] | None, steps: int) -> np.ndarray:
    """Layer indices to record: None -> [0, steps]; an int C >= 2 -> C evenly spaced (both ends
    included); a sequence -> those layer indices (whole numbers in [0, steps])."""
    if checkpoints is None:
        return np.array([0, steps])
    if isinstance(checkpoints, int | np.integer) and not isinstance(checkpoints, bool):
        if not 2 <= checkpoints <= steps + 1:
            raise ParameterError("checkpoints (a count C of evenly spaced records, the start and "
                                 f"the end included) must be an integer in [2, layers + 1 = "
                                 f"{steps + 1}]; got {checkpoints!r}")
        return np.unique(np.round(np.linspace(0, steps, int(checkpoints))).astype(int))
    bad = ParameterError(f"checkpoints must be layer indices in [0, {steps}] (whole numbers), a "
                         f"count C >= 2 or None; got {checkpoints!r}")
    if isinstance(checkpoints, str | bytes | bool) or not isinstance(checkpoints, Iterable):
        raise bad
    try:
        a = np.asarray(list(checkpoints), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise bad from err
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a != np.round(a)) \
            or a.min() < 0 or a.max() > steps:
        raise bad
    return np.unique(a.astype(int))


def _observer_layers(observers: Sequence[Observer], default: np.ndarray, steps: int
                    ) -> list[np.ndarray]:
    """The layers of each observer: its own `checkpoints` (`resolve_checkpoints`), or
    `default` (the `Recording`'s) where it names none; ParameterError naming the observer."""
    out = []
    for o in observers:
        if o.checkpoints is None:
            out.append(default)
            continue
        try:
            out.append(_resolve_checkpoints(o.checkpoints, steps))
        except ParameterError as err:
            raise ParameterError(f"observe: observer {o.name!r}: {err}") from None
    return out


def _check_token_weights(weights: Any, n: int, runs: int) -> np.ndarray | None:
    """Token weights as a float64 array `(n,)` or `(runs, n)`: finite, non-negative, each row of
    positive sum (None stays None); else ParameterError."""
    if weights is None:
        return None
    try:
        w = np.asarray(weights.cpu() if isinstance(weights, torch.Tensor) else weights,
                       dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"weights must be numbers of shape ({n},) or ({runs}, {n})") from err
    if w.shape not in ((n,), (runs, n)):
        raise ParameterError(f"weights must have shape ({n},) or ({runs}, {n}); got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(-1) <= 0):
        raise ParameterError("weights must be finite and >= 0, with a positive sum per run")
    return w


_UNTIL: tuple[str, ...] = ("horizon", "decided")
_DECIDE_DT = 0.05  # default test interval for until='decided', in depth time


def _decide_every(dt: float) -> int:
    """Layers between two decision tests: the most that stay within depth time `_DECIDE_DT`."""
    return max(1, int(_DECIDE_DT / dt + 1e-9))


# the decision tolerance of every command line tool and study (theory.first_passage.PAIR_TOL):
# a looser one counts formations that later dissolve (docs/absorption.md, "Which tolerance")
_DECIDE_TOL = 1e-8




@dataclass(frozen=True, eq=False)
class InitialState:
    """Where the tokens start, with their weights: `init='uniform'` (independent uniform points
    on the sphere), `'pair'` (two tokens with `<x_1, x_2> = rho0`) or an array `(n, d)` /
    `(runs, n, d)` (rows normalised); `weights` `(n,)` or `(runs, n)`, non-negative with a
    positive sum, make the attention `A_ij ∝ w_j exp(beta <Q x_i, K x_j>)` (integer weights equal
    repeated tokens; None: the unweighted model, bit for bit). Checked when made, as far as it
    can be without the model; it compares by identity, since it may hold arrays.

    `normalize=False` (`InitialState.as_is`) starts a pre- or peri-norm residual stream from the
    given array as it is, radii kept (`x_i`, not `x_i / |x_i|`); with post-norm, whose state
    lies on the unit sphere, `simulate` takes it only for unit tokens (norms within 1e-9 of 1:
    given as they are, not rounded again) and refuses others.

    Args:
        init: 'uniform', 'pair' or the initial tokens.
        rho0: the initial inner product of `init='pair'`, in [-1, 1].
        weights: token weights, or None.
        normalize: divide each given token by its norm (True), or keep it as it is (False: an
            array `init` only).
    """

    init: str | np.ndarray | torch.Tensor = "uniform"
    rho0: float | None = None
    weights: np.ndarray | torch.Tensor | None = None
    normalize: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.normalize, bool):
            raise ParameterError(f"normalize must be True or False; got {self.normalize!r}")
        if not self.normalize and isinstance(self.init, str):
            raise ParameterError(f"normalize=False keeps given tokens as they are: it needs an "
                                 f"array init, not init={self.init!r} (on the sphere already)")
        if isinstance(self.init, str):
            if self.init not in ("uniform", "pair"):
                raise ParameterError(f"init must be 'uniform', 'pair' or an array; got {self.init!r}")
            if self.init == "pair":
                if self.rho0 is None:
                    raise ParameterError("init='pair' needs rho0 in [-1, 1]")
                r = _check_real("rho0", self.rho0, -1.0)
                if r > 1.0:
                    raise ParameterError(f"rho0 must be a finite number in [-1, 1]; got {self.rho0!r}")
                object.__setattr__(self, "rho0", r)
            elif self.rho0 is not None:
                raise ParameterError("rho0 is only used with init='pair'")
        elif not isinstance(self.init, np.ndarray | torch.Tensor | Sequence):
            raise ParameterError(f"init must be 'uniform', 'pair' or an array; got "
                                 f"{type(self.init).__name__}")
        elif self.rho0 is not None:
            raise ParameterError("rho0 is only used with init='pair'")

    @classmethod
    def uniform(cls, weights: np.ndarray | torch.Tensor | None = None) -> InitialState:
        """Independent uniform tokens on the sphere."""
        return cls("uniform", None, weights)

    @classmethod
    def pair(cls, rho0: float) -> InitialState:
        """Two tokens at inner product `rho0` in [-1, 1]."""
        return cls("pair", rho0)

    @classmethod
    def tokens(cls, x: np.ndarray | torch.Tensor,
               weights: np.ndarray | torch.Tensor | None = None) -> InitialState:
        """The given tokens `(n, d)` or `(runs, n, d)`, with optional weights."""
        return cls(x, None, weights)

    @classmethod
    def as_is(cls, x: np.ndarray | torch.Tensor,
              weights: np.ndarray | torch.Tensor | None = None) -> InitialState:
        """The given residual stream `(n, d)` or `(runs, n, d)` as it is, not normalised (norm
        'pre' or 'peri'), with optional weights."""
        return cls(x, None, weights, normalize=False)


@dataclass(frozen=True)
class StoppingRule:
    """When a run stops: at the horizon (`until='horizon'`), or at the first test, every
    `decide_every` layers (default `decide_every(dt)`), at which every pair of tokens is within
    `tol` (default `DECIDE_TOL`) of +1 or -1 (`until='decided'`; the horizon is then a maximum).
    `tol` is checked against the run's dtype again by `simulate`."""

    until: str = "horizon"
    tol: float | None = None
    decide_every: int | None = None

    def __post_init__(self) -> None:
        if self.until not in _UNTIL:
            raise ParameterError(f"until must be one of {', '.join(_UNTIL)}; got {self.until!r}")
        if self.until == "horizon" and (self.tol is not None or self.decide_every is not None):
            raise ParameterError("tol and decide_every are only used with until='decided'")
        if self.tol is not None:
            object.__setattr__(self, "tol", check_tol(self.tol, "tol", "float64"))
        if self.decide_every is not None:
            object.__setattr__(self, "decide_every", _check_int("decide_every", self.decide_every, 1))

    @classmethod
    def decided(cls, tol: float | None = None, decide_every: int | None = None) -> StoppingRule:
        """Stop each run once it is decided (see the class)."""
        return cls("decided", tol, decide_every)


@dataclass(frozen=True)
class Recording:
    """What is kept, and when: `record` (any of 'gram', 'tokens'; None: `default_record(n)`,
    Gram matrices up to GRAM_RECORD_MAX tokens, tokens above) and the user's `observe`
    statistics at `checkpoints` (None: the start and the end; an int C >= 2: C evenly spaced
    layers; a sequence: those layer indices).

    Args:
        checkpoints: the layers recorded.
        record: the built-in records.
        observe: statistics kept beside `record`: an `Observer(name, fn)`, a sequence of them
            or a mapping `{name: fn}`, `fn(x)` `(runs_in_batch, ...)` of the state `x`
            `(runs_in_batch, n, d)` that `record=('tokens',)` would keep;
            `SimResult.observed[name]` holds its outputs `(runs, C, ...)`; an observer may name
            its own checkpoints (`Observer(name, fn, checkpoints=...)`, or a subclass reading
            the layer and the time in `observe(layer, t, x)`). An observer declared
            `Observer(name, fn, invariant=True)` (a function of the inner products alone) may
            run under the Gram sampler, which passes the state in a frame of the tokens' span;
            'tokens' and the other observers read coordinates in R^d, so `sampler='auto'` then
            does not take it and `sampler='gram'` refuses them. For every layer give
            `checkpoints=range(L + 1)`, and `record=()` to keep nothing else.
    """

    checkpoints: int | Sequence[int] | None = None
    record: tuple[str, ...] | None = None
    observe: _ObserveSpec | tuple[Observer, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.record, str):
            raise ParameterError(f"record must be a tuple of {_RECORDS}; got the string "
                                 f"{self.record!r} (write ({self.record!r},))")
        if self.record is not None:  # None: `default_record(n)`, resolved by `simulate`
            try:
                record = tuple(self.record)
            except TypeError as err:
                raise ParameterError(f"record must be a tuple of {_RECORDS} or None; got "
                                     f"{self.record!r}") from err
            bad = set(record) - set(_RECORDS)
            if bad:
                raise ParameterError(f"record must be a subset of {_RECORDS}; got {sorted(bad)}")
            object.__setattr__(self, "record", record)
        ck = self.checkpoints
        if ck is not None and not isinstance(ck, int | np.integer) and isinstance(ck, Iterable) \
                and not isinstance(ck, str | bytes):
            object.__setattr__(self, "checkpoints", tuple(ck))
        object.__setattr__(self, "observe", _check_observers(self.observe or None))

    @property
    def observers(self) -> tuple[Observer, ...]:
        """The user's observers, as checked when the recording was made."""
        return cast(tuple[Observer, ...], self.observe)

    def kept(self, n: int) -> tuple[str, ...]:
        """The built-in records of a run of `n` tokens (`default_record(n)` when None)."""
        return default_record(n) if self.record is None else tuple(self.record)


@dataclass(frozen=True)
class Execution:
    """How a run is computed; never what it computes in law nor what an output means: the
    sampler ('auto', 'fast', 'full', 'gram'; `simulate.resolve_sampler`: 'gram' holds the tokens
    up to a rotation only, so it runs when every output is a function of the inner products,
    and refuses the others), the attention evaluator ('auto', 'dense',
    'expansion'; `expansion._choose_evaluator`), the torch device, the dtype ('float64' or
    'float32') and the runs advanced together (None: `default_batch`; numbers never depend
    on it).

    Args:
        sampler: the exact sampler of the value noise.
        attention_eval: how the attention is evaluated, not which kernel (that is
            `ModelParams.attention`): 'dense' (n x n weights), 'expansion' (the O(n) harmonic
            expansion at d = 2, 3: softmax/USA, one head, identity query/key, no mask; refused
            by name elsewhere) or 'auto' (`expansion.auto_uses_expansion`: a fixed rule of n, d,
            beta and dtype, dense where the expansion does not apply).
        device: 'cpu', 'cuda' or 'cuda:N'.
        dtype: 'float64' or 'float32'.
        batch_size: runs per batch, or None.
    """

    sampler: str = "auto"
    attention_eval: str = "auto"
    device: str | torch.device = "cpu"
    dtype: str | torch.dtype = "float64"
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.sampler not in _SAMPLERS:
            raise ParameterError(f"sampler must be one of {', '.join(_SAMPLERS)}; got "
                                 f"{self.sampler!r}")
        if self.attention_eval not in _EVALUATORS:
            raise ParameterError(f"attention_eval must be one of {', '.join(_EVALUATORS)}; got "
                                 f"{self.attention_eval!r}")
        object.__setattr__(self, "dtype", str(_resolve_dtype(self.dtype)).removeprefix("torch."))
        object.__setattr__(self, "device", str(_resolve_device(self.device)))
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", _check_int("batch_size", self.batch_size, 1))

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype as a torch dtype."""
        return _DTYPES[str(self.dtype)]

    @property
    def torch_device(self) -> torch.device:
        """The device as a torch device."""
        return torch.device(self.device)


@dataclass(frozen=True)
class StepControl:
    """How the step error of the outcome probabilities (P(one cluster), P(bipolar)) is
    estimated beside a run (`analysis.step_coupled`): with `estimate`, `min(runs, coupled_runs)`
    extra runs of the model at `dt`, `2 dt` and `4 dt` on one path each (`dt` and `2 dt` where
    the layers are not a multiple of 4) measure the step error of P(dt) to second order,
    `(5 b1 - b2) / 3` with `b1 = P(2 dt) - P(dt)`, `b2 = P(4 dt) - P(2 dt)`, with its error and
    an order check (about 1.75 times their layers' work); with `extrapolate`, every run is also
    run coupled and the Richardson value `(8 P(dt) - 6 P(2 dt) + P(4 dt)) / 3` is reported with
    its error.

    Args:
        estimate: measure the step error.
        coupled_runs: the coupled runs at most (>= 2).
        extrapolate: run every run coupled and report the Richardson values.
        tol: the outcome tolerance of runs to the horizon (None: DECIDE_TOL; a run with
            `StoppingRule.decided` uses its own).
    """

    estimate: bool = True
    coupled_runs: int = 200
    extrapolate: bool = False
    tol: float | None = None

    def __post_init__(self) -> None:
        for name in ("estimate", "extrapolate"):
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(f"{name} must be True or False; got {getattr(self, name)!r}")
        object.__setattr__(self, "coupled_runs", _check_int("coupled_runs", self.coupled_runs, 2))
        if self.tol is not None:
            object.__setattr__(self, "tol", check_tol(self.tol, "tol", "float64"))

    def runs(self, runs: int) -> int:
        """The coupled runs beside a run of `runs` runs (0: none)."""
        if self.extrapolate:
            return runs
        return min(runs, self.coupled_runs) if self.estimate else 0
