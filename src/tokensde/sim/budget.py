"""Memory and time of a run, estimated before it starts and checked against this machine.

`estimate_memory` counts the bytes of the arrays a run holds (`runs x n x width` tokens, `runs x
checkpoints x n x n` Gram matrices kept, and one block of layer workspace); `estimate_work` its
arithmetic in flop-ish units, `runs x layers x heads x n x width x (n + width)` (the scores and the
noise applied, per token and layer). `check_budget` refuses, naming the parameters that drive the
size and how many runs would fit, a run whose memory exceeds what is available, and one whose work
needs more than `TOKENSDE_MAX_HOURS` (default 24) even at a fast rate; it warns from 6 minutes at
that rate (about an hour or more at a typical one).
`available_memory` reads `TOKENSDE_MEMORY`, else /proc/meminfo's MemAvailable and a cgroup v2
limit.
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
    "CPU_RATE",
    "CUDA_RATE",
    "GIB",
    "MAX_HOURS",
    "MAX_HOURS_ENV",
    "MEMORY_ENV",
    "WARN_HOURS",
    "Budget",
    "BudgetError",
    "BudgetWarning",
    "Memory",
    "available_memory",
    "cgroup_room",
    "check_budget",
    "cpu_rate",
    "estimate_memory",
    "estimate_work",
    "max_hours",
    "meminfo_available",
    "parse_bytes",
]

GIB = 2**30
# flop-ish units (estimate_work) per second, at the fast end so that a time estimate is a lower
# bound and a refusal never comes from a slow guess: one CPU core did 1e8 (n = 8, d = 3) to 2e9
# (n = d = 64, sampler full) in float64 on the project's machine (docs/reporting.md), and is
# taken as 1e10; a CUDA device as 1e13.
CPU_RATE = 1e10  # per core
CUDA_RATE = 1e13
MAX_HOURS = 24.0  # default of TOKENSDE_MAX_HOURS: a bounded run needing more is refused
WARN_HOURS = 0.1  # a run needing at least this long at the fast rate (an hour or more at a
# typical one) is announced
MAX_HOURS_ENV = "TOKENSDE_MAX_HOURS"
MEMORY_ENV = "TOKENSDE_MEMORY"
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class BudgetError(ParameterError):
    """A run that cannot fit in memory or finish within the time limit; the message says why."""


class BudgetWarning(RuntimeWarning):
    """A run that will take long (at least WARN_HOURS at the fast rate)."""


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
    `(1 + width) (2 n + R)` per run, and one slab of basis functions shared by the block,
    `R x max(BLOCK_MIN, n)` numbers at most.

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
    from .expansion import BLOCK_MIN

    kept = runs * (n * width + checkpoints * n * n * ("gram" in record)
                   + checkpoints * n * width * ("tokens" in record))
    noise = width * width if full else 2 * n * max(n, width)
    scores = (1 + width) * (2 * n + basis) if basis else n * n
    slab = basis * max(BLOCK_MIN, n) if basis and block else 0
    layer = block * (4 * n * width + scores + noise + mlp
                     + (heads - 1) * (n * width + (width * width if full else 0))) + slab
    return Memory(kept * itemsize, layer * itemsize)


def estimate_work(runs: int, layers: int, n: int, width: int, heads: int = 1, mlp: int = 0,
                  basis: int = 0) -> float:
    """Flop-ish units of `runs x layers` steps: `heads x n x width x (n + width)` (scores n^2
    width, noise applied n width^2), or `n (2 R (1 + width) + width^2)` with the O(n) attention
    of `basis` = R functions, plus `mlp` per run and layer.

    Args:
        runs: number of runs.
        layers: layers per run.
        n: tokens per run.
        width: numbers per token.
        heads: attention heads.
        mlp: MLP work per run and layer.
        basis: basis functions of the O(n) attention (0: dense).

    Returns:
        The work in flop-ish units.
    """
    if basis:
        return float(runs) * layers * (n * (2 * basis * (1 + width) + width * width) + mlp)
    return float(runs) * layers * (heads * n * width * (n + width) + mlp)


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
    """Flop-ish units per second of `threads` CPU cores (default: the cores this process may use)."""
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    return CPU_RATE * max(1, threads)


@dataclass(frozen=True)
class Budget:
    """What one run needs: `memory` bytes, of which `per_run` grow with `runs`; `work` flop-ish
    units, reached only when every run goes to the horizon unless `bounded` (runs that stop once
    decided: an upper bound). `detail` describes the sizes; `lower` names the parameters that
    drive the memory, the first being the one it is linear in (`runs` for a simulation), and
    `longer` those that drive the work."""

    what: str
    memory: int
    per_run: int
    runs: int
    work: float
    detail: str
    lower: tuple[str, ...] = ("runs",)
    bounded: bool = True
    longer: tuple[str, ...] = ("runs",)

    def most_runs(self, have: int) -> int:
        """How many runs fit in `have` bytes, the other sizes unchanged (0: not even one); a lower
        bound, since the workspace of fewer runs than a block is smaller."""
        fixed = self.memory - self.per_run * self.runs
        return max(0, (have - fixed) // self.per_run) if self.per_run > 0 else self.runs


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min"


def check_budget(b: Budget, have: int | None = None, where: str = "cpu", rate: float | None = None,
                 flag: Callable[[str], str] = str, limit_h: float | None = None,
                 warn: bool = True, have_is: str = "available") -> float:
    """Refuse `b` (BudgetError) when its memory exceeds `have` bytes (default
    `available_memory()`) of `where` memory, or when a bounded run needs more than `limit_h`
    hours (default `max_hours()`) at `rate` units/s (default `cpu_rate()`); with `warn`, a
    BudgetWarning above WARN_HOURS. `flag` spells a parameter as the caller's user knows it
    ('runs' -> '--runs'); `have_is` says what `have` is. Returns the time estimate in seconds."""
    have = available_memory() if have is None else have
    if b.memory > have:
        first, *rest = [flag(p) for p in b.lower]
        k = b.most_runs(have)
        fit = f"{k} fit at these sizes" if k >= 1 else "not even one fits"
        raise BudgetError(
            f"{b.what} needs at least {b.memory / GIB:.3g} GiB of {where} memory ({b.detail}), "
            f"more than the {have / GIB:.3g} GiB {have_is}: lower {first} ({fit})"
            + (f", {_or(rest)}" if rest else ""))
    seconds = b.work / (cpu_rate() if rate is None else rate)
    limit = max_hours() if limit_h is None else limit_h
    names = _or([flag(p) for p in b.longer])
    if b.bounded and seconds > 3600 * limit:
        raise BudgetError(
            f"{b.what} needs at least {_hours(seconds)} ({b.work:.3g} flop-ish units at "
            f"{(cpu_rate() if rate is None else rate):.3g}/s; {b.detail}), more than the "
            f"{limit:g} h limit ({MAX_HOURS_ENV}): lower {names}, or set {MAX_HOURS_ENV}=inf "
            "to run it anyway")
    if warn and seconds > 3600 * WARN_HOURS:
        bound = "at least" if b.bounded else "up to"
        warnings.warn(f"{b.what} will take {bound} about {_hours(seconds)} ({b.work:.3g} "
                      f"flop-ish units; {b.detail}); progress is shown on stderr when it is a "
                      "terminal",
                      BudgetWarning, stacklevel=2)
    return seconds
