"""Memory and time of a run, estimated before it starts and checked against this machine.

`estimate_memory` counts the bytes of the arrays a run holds (`runs x n x width` tokens, `runs x
checkpoints x n x n` Gram matrices kept, and one block of layer workspace); `estimate_work` its
arithmetic in work units per run and layer (`heads x n x (width (n + width) + SCORE_UNITS n)`,
the scores, their softmax and the noise applied, plus RUN_UNITS of bookkeeping). The time is a
central estimate, `seconds = c0 x steps + c1 x work` (`TimeModel`): `steps` layer steps run one
after another, each with a fixed cost c0 whatever its size, and c1 seconds per work unit. The
coefficients are fitted (`fit_time_model`) to a few tiny timed runs on this machine
(`tokensde.io.calibration`), else DEFAULT_TIME_MODEL. `check_budget` refuses, naming the
parameters that drive the size and how many runs would fit, a run whose memory exceeds what is
available, and one whose estimate exceeds `TOKENSDE_MAX_HOURS` (default 24) unless told `yes`;
it warns from WARN_HOURS. `available_memory` reads `TOKENSDE_MEMORY`, else /proc/meminfo's
MemAvailable and a cgroup v2 limit.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..model.params import ParameterError

__all__ = [
    "ANNOUNCE_S",
    "CPU_RATE",
    "CUDA_RATE",
    "CUDA_TIME_MODEL",
    "DEFAULT_TIME_MODEL",
    "EXPANSION_UNITS",
    "GIB",
    "MAX_HOURS",
    "MAX_HOURS_ENV",
    "MEMORY_ENV",
    "RUN_UNITS",
    "SAMPLER_STEPS",
    "SCORE_UNITS",
    "WARN_HOURS",
    "Budget",
    "BudgetError",
    "BudgetWarning",
    "Memory",
    "TimeModel",
    "available_memory",
    "cgroup_room",
    "check_budget",
    "cpu_rate",
    "estimate_line",
    "estimate_memory",
    "estimate_work",
    "fit_time_model",
    "format_seconds",
    "max_hours",
    "meminfo_available",
    "parse_bytes",
]

GIB = 2**30
# units per second of the plain n w (n + w) count at the fast end (one CPU core did 1e8 at n = 8,
# d = 3 to 2e9 at n = d = 64, sampler full): for callers that give `check_budget` a rate instead
# of a TimeModel, a bound that ignores the fixed cost per layer
CPU_RATE = 1e10  # per core
CUDA_RATE = 1e13
# the work units of `estimate_work` beyond the n w (n + w) multiply-adds, set so that one unit
# takes about the same time on every code path (measured on one CPU core, float64): the softmax
# of a score (exp, sum, divide), the bookkeeping of a run in a layer (its draws, the
# normalisation, slicing) and, with the O(n) attention, a moment of a basis function
SCORE_UNITS = 25
RUN_UNITS = 1500
EXPANSION_UNITS = 8
# the fixed cost of a layer step by sampler, in steps of the full sampler's: the Gram sampler and
# the fast one (n < d) do more small operations a layer (measured at n = 2: 30, 96 and 119 us)
SAMPLER_STEPS = {"full": 1.0, "fast": 3.0, "gram": 3.0}
MAX_HOURS = 24.0  # default of TOKENSDE_MAX_HOURS: a bounded run estimated longer is refused
WARN_HOURS = 0.1  # a run estimated at least this long (6 min) is announced by a BudgetWarning
ANNOUNCE_S = 5.0  # the command line prints estimates from this many seconds (`estimate_line`)
MAX_HOURS_ENV = "TOKENSDE_MAX_HOURS"
MEMORY_ENV = "TOKENSDE_MEMORY"
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class BudgetError(ParameterError):
    """A run that cannot fit in memory or finish within the time limit; the message says why."""


class BudgetWarning(RuntimeWarning):
    """A run that will take long (an estimate of at least WARN_HOURS)."""


class Memory(NamedTuple):
    """Bytes a run holds: `kept` (tokens and records, for all runs) and `workspace` (one block
    of runs advanced together); `total` is their sum."""

    kept: int
    workspace: int

    @property
    def total(self) -> int:
        """kept + workspace."""
        return self.kept + self.workspace


def estimate_memory(runs: int, n: int, width: int, checkpoints: int, *, block: int,
                    record: Sequence[str] = ("gram",), heads: int = 1, full: bool = False,
                    mlp: int = 0, itemsize: int = 8, basis: int = 0) -> Memory:
    """Bytes of `runs` systems of `n` tokens of `width` numbers: the state `runs x n x width`,
    `runs x checkpoints x n x n` Gram matrices and `runs x checkpoints x n x width` tokens as
    `record` asks, and a workspace of `block` runs (4 token-sized tensors, the scores n x n, the
    noise: width^2 per run with the `full` sampler, else 2 n max(n, width), `mlp` numbers of an
    MLP block, and per extra head its output and noise). With `basis` = R > 0 (the O(n)
    attention, `expansion.expansion_output`) the scores are replaced by its moments and outputs,
    `(1 + width) (2 n + R)` per run, a float64 copy of the tokens, and one slab of basis functions
    shared by the block, `R x max(BLOCK_MIN, n)` numbers at most, all in float64 (the expansion
    works in float64 whatever `itemsize`).

    Args:
        runs: number of runs.
        n: tokens per run.
        width: numbers per token.
        checkpoints: records kept per run.
        block: runs advanced together.
        record: what is recorded ('gram', 'tokens').
        heads: attention heads.
        full: the noise is a width x width matrix per run (else an n x n factor).
        mlp: numbers of an MLP block per run.
        itemsize: bytes per number.
        basis: basis functions of the O(n) attention (0: dense scores).

    Returns:
        `Memory(kept, workspace)` in bytes.
    """
    from .expansion import _BLOCK_MIN

    kept = runs * (n * width + checkpoints * n * n * ("gram" in record)
                   + checkpoints * n * width * ("tokens" in record))
    noise = width * width if full else 2 * n * max(n, width)
    scores = 0 if basis else n * n
    layer = block * (4 * n * width + scores + noise + mlp
                     + (heads - 1) * (n * width + (width * width if full else 0)))
    wide = 0  # float64 numbers of the expansion
    if basis:
        wide = block * ((1 + width) * (2 * n + basis) + n * width) + (
            basis * max(_BLOCK_MIN, n) if block else 0)
    return Memory(kept * itemsize, layer * itemsize + wide * 8)


def estimate_work(runs: int, layers: int, n: int, width: int, heads: int = 1, mlp: int = 0,
                  basis: int = 0) -> float:
    """Work units of `runs x layers` steps: `heads x n x (width (n + width) + SCORE_UNITS n)`
    (scores n^2 width and their softmax, noise applied n width^2), or `n (EXPANSION_UNITS R (1 +
    width) + width^2)` with the O(n) attention of `basis` = R functions, plus RUN_UNITS and `mlp`
    per run and layer.

    Args:
        runs: number of runs.
        layers: layers per run.
        n: tokens per run.
        width: numbers per token.
        heads: attention heads.
        mlp: MLP work per run and layer.
        basis: basis functions of the O(n) attention (0: dense).

    Returns:
        The work in units of about equal time (`TimeModel.c1` seconds each).
    """
    if basis:
        per = n * (EXPANSION_UNITS * basis * (1 + width) + width * width)
    else:
        per = heads * n * (width * (n + width) + SCORE_UNITS * n)
    return float(runs) * layers * (per + RUN_UNITS + mlp)


@dataclass(frozen=True)
class TimeModel:
    """Seconds of a run, `c0 x steps + c1 x work`: `c0` seconds of fixed cost per layer step
    (`Budget.steps`), `c1` seconds per work unit (`estimate_work`); `source` says where the
    coefficients come from ('calibrated on this machine', or why the defaults are used)."""

    c0: float
    c1: float
    source: str = "default coefficients"

    def seconds(self, steps: float, work: float) -> float:
        """c0 x steps + c1 x work."""
        return self.c0 * steps + self.c1 * work


# calibrated on the project's machine (a 2-core VM, float64, torch 2.13, one thread): about 36 us
# a layer step whatever its size, 4e9 work units a second
DEFAULT_TIME_MODEL = TimeModel(3.6e-5, 2.5e-10, "default coefficients (not calibrated here)")
# a CUDA device is not calibrated: a layer launches tens of kernels, ~1e13 units a second
CUDA_TIME_MODEL = TimeModel(3e-4, 1 / CUDA_RATE, "default coefficients of a CUDA device")


def fit_time_model(samples: Sequence[tuple[float, float, float]],
                   source: str = "calibrated on this machine") -> TimeModel:
    """The `TimeModel` of least relative error on `samples` of `(steps, work, seconds)`: minimises
    `sum ((c0 steps + c1 work) / seconds - 1)^2` over c0, c1 >= 0.

    Args:
        samples: at least 2 timed runs, each `(steps, work, seconds)` with seconds > 0, steps and
            work >= 0.
        source: what the fitted model says of itself.

    Returns:
        The fitted model.
    """
    rows = []
    for s in samples:
        steps, work, sec = (float(v) for v in s)
        if not (sec > 0 and steps >= 0 and work >= 0 and math.isfinite(sec + steps + work)):
            raise ParameterError(f"samples must be (steps >= 0, work >= 0, seconds > 0), all "
                                 f"finite; got {s!r}")
        rows.append((steps / sec, work / sec))
    if len(rows) < 2:
        raise ParameterError(f"samples must hold at least 2 timed runs; got {len(rows)}")
    # normal equations of min |A c - 1|^2, A's rows (steps, work) / seconds
    a = sum(r[0] * r[0] for r in rows)
    b = sum(r[0] * r[1] for r in rows)
    d = sum(r[1] * r[1] for r in rows)
    e = sum(r[0] for r in rows)
    f = sum(r[1] for r in rows)
    det = a * d - b * b
    c0 = (e * d - b * f) / det if det > 0 else -1.0
    c1 = (a * f - b * e) / det if det > 0 else -1.0
    if c0 < 0 or c1 < 0:  # the best fit on a boundary: one coefficient alone
        one = [(e / a if a else math.inf, 0.0), (0.0, f / d if d else math.inf)]
        c0, c1 = min((c for c in one if math.isfinite(c[0] + c[1])),
                     key=lambda c: sum((c[0] * r[0] + c[1] * r[1] - 1) ** 2 for r in rows))
    return TimeModel(c0, c1, source)


def format_seconds(seconds: float) -> str:
    """A duration for people: '40 s', '3.2 min', '5.1 h', '1.2e+03 days'."""
    if seconds < 60:
        return f"{seconds:.2g} s"
    if seconds < 3600:
        return f"{seconds / 60:.2g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.2g} h"
    return f"{seconds / 86400:.2g} days"


def parse_bytes(text: str, name: str = MEMORY_ENV) -> int:
    """A byte count written as a number with an optional binary suffix: '512M', '8G', '1.5GiB'."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        value = float(t[:len(t) - len(unit)])
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"{name} must be a positive byte count such as 512M, 8G or "
                             f"1073741824; got {text!r}")
    return int(value * _UNITS[unit])


def meminfo_available(path: str = "/proc/meminfo") -> int | None:
    """MemAvailable of `path` in bytes (None when it cannot be read)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_room(root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes left under the cgroup v2 memory limit at `root` (None: no limit, or not readable)."""
    try:
        limit = Path(root, "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int(Path(root, "memory.current").read_text()))
    except (OSError, ValueError):
        return None


def available_memory() -> int:
    """Bytes this process can still take: `TOKENSDE_MEMORY` when set (e.g. '8G'); else the smaller
    of MemAvailable (/proc/meminfo) and the room under a cgroup v2 limit; else physical memory."""
    given = os.environ.get(MEMORY_ENV)
    if given:
        return parse_bytes(given)
    known = [b for b in (meminfo_available(), cgroup_room()) if b is not None]
    if known:
        return min(known)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def max_hours() -> float:
    """The time limit of a bounded run, in hours: `TOKENSDE_MAX_HOURS` (a number > 0, or 'inf'),
    default MAX_HOURS."""
    text = os.environ.get(MAX_HOURS_ENV, "").strip()
    if not text:
        return MAX_HOURS
    try:
        h = float(text)
    except ValueError:
        h = math.nan
    if not h > 0:
        raise ParameterError(f"{MAX_HOURS_ENV} must be a number of hours > 0 or 'inf'; got "
                             f"{text!r}")
    return h


def cpu_rate(threads: int | None = None) -> float:
    """CPU_RATE x `threads` CPU cores (default: the cores this process may use), a fast rate of
    work units; the time estimate of the commands is a `TimeModel` instead."""
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    return CPU_RATE * max(1, threads)


@dataclass(frozen=True)
class Budget:
    """What one run needs: `memory` bytes, of which `per_run` grow with `runs`; `work` units
    (`estimate_work`) and `steps` layer steps run one after another (each with the fixed cost
    `TimeModel.c0`), reached only when every run goes to the horizon unless `bounded` (runs that
    stop once decided: an upper bound). `detail` describes the sizes; `lower` names the
    parameters that drive the memory, the first being the one it is linear in (`runs` for a
    simulation), and `longer` those that drive the time."""

    what: str
    memory: int
    per_run: int
    runs: int
    work: float
    detail: str
    lower: tuple[str, ...] = ("runs",)
    bounded: bool = True
    longer: tuple[str, ...] = ("runs",)
    steps: float = 0.0

    def most_runs(self, have: int) -> int:
        """How many runs fit in `have` bytes, the other sizes unchanged (0: not even one); a lower
        bound, since the workspace of fewer runs than a block is smaller."""
        fixed = self.memory - self.per_run * self.runs
        return max(0, (have - fixed) // self.per_run) if self.per_run > 0 else self.runs


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def estimate_line(seconds: float, source: str, bound: bool = False) -> str:
    """The line a command prints before its work: `estimate: about 3.2 min (source; ...)`;
    `bound`: runs may stop early and the estimate is an upper bound ('up to about')."""
    return (f"estimate: {'up to ' if bound else ''}about {format_seconds(seconds)} ({source}; "
            "measured/estimated within 3x in benchmarks/bench_estimate.py)")


def check_budget(b: Budget, have: int | None = None, where: str = "cpu", rate: float | None = None,
                 flag: Callable[[str], str] = str, limit_h: float | None = None,
                 warn: bool = True, have_is: str = "available", model: TimeModel | None = None,
                 yes: bool = False) -> float:
    """Refuse `b` (BudgetError) when its memory exceeds `have` bytes (default
    `available_memory()`) of `where` memory, or, unless `yes`, when a bounded run's estimate
    `model.seconds(b.steps, b.work)` (default DEFAULT_TIME_MODEL; `rate` units/s instead: `work /
    rate`) exceeds `limit_h` hours (default `max_hours()`); with `warn`, a BudgetWarning from
    WARN_HOURS. `flag` spells a parameter as the caller's user knows it ('runs' -> '--runs');
    `have_is` says what `have` is. Returns the time estimate in seconds."""
    have = available_memory() if have is None else have
    if b.memory > have:
        first, *rest = [flag(p) for p in b.lower]
        k = b.most_runs(have)
        fit = f"{k} fit at these sizes" if k >= 1 else "not even one fits"
        raise BudgetError(
            f"{b.what} needs at least {b.memory / GIB:.3g} GiB of {where} memory ({b.detail}), "
            f"more than the {have / GIB:.3g} GiB {have_is}: lower {first} ({fit})"
            + (f", {_or(rest)}" if rest else ""))
    if rate is not None:
        model = TimeModel(0.0, 1 / rate, f"{b.work:.3g} work units at {rate:.3g}/s")
    model = DEFAULT_TIME_MODEL if model is None else model
    seconds = model.seconds(b.steps, b.work)
    limit = max_hours() if limit_h is None else limit_h
    names = _or([flag(p) for p in b.longer])
    if b.bounded and seconds > 3600 * limit and not yes:
        raise BudgetError(
            f"{b.what} would take about {format_seconds(seconds)} ({model.source}; {b.detail}), "
            f"more than the {limit:g} h limit ({MAX_HOURS_ENV}): lower {names}, or pass --yes "
            f"(or set {MAX_HOURS_ENV}=inf) to run it anyway")
    if warn and seconds > 3600 * WARN_HOURS:
        bound = "about" if b.bounded else "up to about"
        warnings.warn(f"{b.what} will take {bound} {format_seconds(seconds)} ({model.source}; "
                      f"{b.detail}); progress is shown on stderr when it is a terminal",
                      BudgetWarning, stacklevel=2)
    return seconds
