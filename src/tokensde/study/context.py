"""Where the study's results live, how big to make them, how saved results are reused, and what
a figure is (`FigureSpec`).

A figure's data step looks for its saved result under `OUT/data/` (named after the figure and
the size) and computes and saves it only when it is absent or was made with other settings
(`saved_or`); the drawing step writes `OUT/figures/`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..params import check_choice, check_int
from ..report import Section

SIZES: tuple[str, ...] = ("tiny", "quick", "full")


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

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.size = check_choice("size", self.size, SIZES)
        self.seed = check_int("seed", self.seed, 0)
        self.workers = check_int("workers", self.workers, 1)

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
def process_map(workers: int) -> Iterator[Callable[..., Any]]:
    """A `map` over `workers` processes (one torch thread each), or the builtin map."""
    if workers <= 1:
        yield map
        return
    import multiprocessing as mp

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=one_thread) as ex:
        yield ex.map


def one_thread() -> None:
    """Limit torch to one thread in this process."""
    import torch

    torch.set_num_threads(1)


def saved_or(path: Path, load: Callable[[Path], Any], make: Callable[[], Any],
             save: Callable[[Any, Path], Any], ctx: Context,
             fresh: Callable[[Any], bool] = lambda obj: True) -> tuple[Any, bool]:
    """`(load(path), True)` when the result is saved (and `fresh(saved)`: made with the same
    settings), else `(make(), False)` after saving it."""
    if path.exists():
        saved = load(path)
        if fresh(saved):
            ctx.log(f"reusing {path}")
            return saved, True
        ctx.log(f"{path} was made with other settings; recomputing it")
    ctx.log(f"computing {path.name}")
    obj = make()
    save(obj, path)
    return obj, False
