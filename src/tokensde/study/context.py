"""Where the study's results live, how big to make them, how saved results are reused, and what
a figure is (`FigureSpec`).

A figure's data step looks for its saved result under `OUT/data/` (named after the figure and
the size) and computes and saves it only when it is absent or was made with other settings
(`saved_or`); the drawing step writes `OUT/figures/`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..io.report import Section
from ..io.store import StoreError
from ..model.params import ParameterError, _check_choice, _check_int
from ..sim.budget import ANNOUNCE_S, estimate_line

if TYPE_CHECKING:
    import pandas as pd

STUDY_SIZES: tuple[str, ...] = ("tiny", "quick", "full")
SWEEP_DIR = Path(__file__).parent / "sweeps"
_SWEEPS_ENV = "TOKENSDE_SWEEPS"


@dataclass
class Context:
    """Where results live and how big to make them.

    `out/data/<figure>-<size>...` holds saved results, `out/figures/` the drawings.
    """

    out: Path
    size: str = "quick"
    seed: int = 0
    workers: int = 2
    progress: bool = True
    log: Callable[[str], None] = field(default=lambda s: None)
    yes: bool = False  # run sweeps estimated longer than TOKENSDE_MAX_HOURS
    force: bool = False  # replace a saved result made with other settings (`saved_or`)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.size = _check_choice("size", self.size, STUDY_SIZES)
        self.seed = _check_int("seed", self.seed, 0)
        self.workers = _check_int("workers", self.workers, 1)

    @property
    def data(self) -> Path:
        """Directory of saved results."""
        return self.out / "data"

    @property
    def figures(self) -> Path:
        """Directory of figure files."""
        return self.out / "figures"

    def data_path(self, name: str, suffix: str = "") -> Path:
        """`out/data/<name>-<size><suffix>`."""
        return self.data / f"{name}-{self.size}{suffix}"

    @property
    def size_flag(self) -> str:
        """The `tokensde figure` option that selects this size (for provenance commands)."""
        return {"quick": " --quick", "full": "", "tiny": " --size tiny"}[self.size]


@dataclass(frozen=True)
class FigureSpec:
    """A figure: name, title, the claim it supports, `data(ctx) -> (result, reused)` (its saved
    result, computed and saved first when absent) and `draw(ctx, spec, result, reused)` (its
    figures, tables and provenance as a report section)."""

    name: str
    title: str
    claim: str
    data: Callable[[Context], tuple[Any, bool]]
    draw: Callable[[Context, FigureSpec, Any, bool], Section]

    def build(self, ctx: Context) -> Section:
        """The figure's section: its saved result (computed when absent), drawn."""
        result, reused = self.data(ctx)
        return self.draw(ctx, self, result, reused)


@contextmanager
def _process_map(workers: int) -> Iterator[Callable[..., Any]]:
    """A `map` over `workers` processes (one torch thread each; at most one per CPU), or the
    builtin map."""
    workers = min(workers, os.cpu_count() or 1)
    if workers <= 1:
        yield map
        return
    import multiprocessing as mp

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=_one_thread) as ex:
        yield ex.map


def _one_thread() -> None:
    """Limit torch to one thread in this process."""
    import torch

    torch.set_num_threads(1)


def _saved_or(path: Path, load: Callable[[Path], Any], make: Callable[[], Any],
             save: Callable[[Any, Path], Any], ctx: Context,
             fresh: Callable[[Any], bool] = lambda obj: True) -> tuple[Any, bool]:
    """`(load(path), True)` when the result is saved (and `fresh(saved)`: made with the same
    settings), else `(make(), False)` after saving it. A saved result made with other settings
    (another seed) is finished work: it is replaced only with `ctx.force`, else ParameterError
    before any work (the output guard, `io.outputs`)."""
    if path.exists():
        try:
            saved = load(path)
            current = fresh(saved)
        except Exception as err:  # any damage to a saved file: name it and say what to do
            raise StoreError(f"{path} is not a readable saved result of this figure "
                             f"({type(err).__name__}: {err}); delete it to recompute it") from err
        if current:
            ctx.log(f"reusing {path}")
            return saved, True
        if not ctx.force:
            raise ParameterError(f"--out: {path} holds this figure's result made with other "
                                 "settings (another --seed or size of its runs); pass --force "
                                 "to replace it, or choose another --out")
        ctx.log(f"{path} was made with other settings; recomputing it (--force)")
    ctx.log(f"computing {path.name}")
    obj = make()
    save(obj, path)
    return obj, False


def _sweep_file(names: tuple[str, ...]) -> Path:
    """The first of the sweep files `names` (stems) in the directory $TOKENSDE_SWEEPS when that
    is set, else the first of them in the package's `SWEEP_DIR`."""
    env = os.environ.get(_SWEEPS_ENV)
    roots = [Path(env)] if env else []
    for root in [*roots, SWEEP_DIR]:
        for name in names:
            if (root / f"{name}.toml").exists():
                return root / f"{name}.toml"
    raise FileNotFoundError(f"no sweep file among {', '.join(n + '.toml' for n in names)} in "
                            + " or ".join(str(r) for r in [*roots, SWEEP_DIR]))


@dataclass
class _SweepRun:
    """A finished (or resumed) sweep: its file, directory, run summary, wall time and the table
    of its finished cells."""

    config: Path
    dir: Path
    summary: dict[str, Any]
    wall_s: float
    table: pd.DataFrame

    @property
    def reused(self) -> bool:
        """True when no cell had to run."""
        return self.summary.get("ran", 1) == 0

    def command(self, workers: int) -> str:
        """The command line that runs (or resumes) this sweep by hand."""
        return f"tokensde sweep run {self.config} --out {self.dir} --workers {workers}"

    def provenance(self, workers: int, reused: bool) -> dict[str, Any]:
        """What a report section says about the sweep behind it: its file, folder, wall time and
        the command that resumes it."""
        return {"reused": reused, "sweep": str(self.config), "dir": str(self.dir),
                "sweep_wall_s": round(self.wall_s, 1), "command": self.command(workers)}


#: a report table's column of the step error beside a probability (`step_text`)
_STEP_COLUMN = "step error ± se"
_NOT_MEASURED = "not measured"
#: what a table with `STEP_COLUMN` says about it (ends its caption)
_STEP_CAPTION = ("; 'step error ± se': the step error P(dt) - P(0) of the probability beside it at "
                "the cell's layer step dt, measured on the cell's step_runs runs coupled at dt, "
                "2 dt and 4 dt, with its paired standard error ('not measured': the sweep file "
                "did not ask for it, docs/report.md)")


def _finite(value: Any) -> bool:
    """A finite real number (not None, NaN or a missing value of a table)."""
    try:
        return value is not None and math.isfinite(value)
    except TypeError:
        return False


def _step_text(row: Mapping[str, Any], key: str) -> str:
    """The report cell of the step error P(dt) - P(0) of probability `key` of a sweep row: 'b ±
    se' measured on the row's `step_runs` coupled runs (`step_<key>`, `step_<key>_se`), 'not
    measured' where the cell was run without `step_runs`, 'no coupled run decided' where its
    coupled runs decided none at every step."""
    if not _finite(row.get("step_runs")):
        return _NOT_MEASURED
    b, se = row.get(f"step_{key}"), row.get(f"step_{key}_se")
    if not _finite(b):
        return "no coupled run decided"
    return f"{b:+.4f} ± {se:.4f}"


def _estimate(ctx: Context) -> Callable[[float, str, bool], None]:
    def say(seconds: float, source: str, bound: bool) -> None:
        if seconds >= ANNOUNCE_S:
            ctx.log(estimate_line(seconds, source, bound))
    return say


def _run_packaged_sweep(ctx: Context, names: tuple[str, ...]) -> _SweepRun:
    """Run (or resume) the first sweep file of `names` (`sweep_file`) into `OUT/sweeps/<stem>/`
    on `ctx.workers` processes; its finished cells are reused."""
    from ..sweep.engine import run_sweep
    from ..sweep.store import _ok_rows

    cfg = _sweep_file(names)
    out = ctx.out / "sweeps" / cfg.stem
    ctx.log(f"sweep {cfg.name} -> {out}")
    t0 = time.perf_counter()
    summary = run_sweep(cfg, out, workers=ctx.workers, yes=ctx.yes, on_estimate=_estimate(ctx))
    return _SweepRun(cfg, out, summary, time.perf_counter() - t0,
                    _ok_rows(out).reset_index(drop=True))
