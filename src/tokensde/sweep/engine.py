"""Sweep orchestration: run (or resume) a sweep cell by cell, and report its progress.

A sweep (`tokensde.sweep.config`: the TOML file, cell ids and seeds) runs its cells on a backend
(`tokensde.sweep.backends`: a local pool or Ray) into a sweep directory
(`tokensde.sweep.store`), each finished cell written at once. A SIGKILL therefore loses at most
the cells in flight. `run` on an existing DIR checks that it holds the same sweep and skips
finished cells (failed cells are retried). Before any cell runs, the cells' memory and work are
checked against the machine.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Generator, Iterable
from contextlib import closing
from typing import Any

from ..model.params import ParameterError, _check_int
from ..sim.budget import (
    DEFAULT_TIME_MODEL,
    GIB,
    WARN_HOURS,
    Budget,
    BudgetError,
    BudgetWarning,
    TimeModel,
    available_memory,
    check_budget,
    format_seconds,
)
from .backends import _check_backend, _run_local, _run_ray, _worker_bounds
from .config import Cell, SweepConfig, SweepError, _Row
from .store import _SweepDir

_OnCell = Callable[[_Row, dict[str, int]], None]


def _tasks(config: SweepConfig, cells: Iterable[Cell]) -> list[_Row]:
    return [{"kind": config.kind, "module": config.module, "id": c.id, "index": c.index,
             "params": c.params, "seed": c.seed} for c in cells]


def _cell_budgets(config: SweepConfig, cells: Iterable[Cell]) -> list[tuple[Cell, Budget]]:
    """The memory and work of each cell whose kind estimates them (`ExperimentKind.budget`); a
    cell whose estimate fails is left out (it fails with its message when it runs)."""
    from .kinds import get_kind

    estimate = get_kind(config.kind, config.module).budget
    out = []
    if estimate is not None:
        for c in cells:
            try:
                out.append((c, estimate(dict(c.params))))
            except (ParameterError, ValueError):
                continue
    return out


def _check_cells(budgets: list[tuple[Cell, Budget]], workers: int, have: int | None = None,
                warn: bool = True, model: TimeModel | None = None, yes: bool = False) -> float:
    """Before any cell runs: refuse (BudgetError) a sweep one of whose cells cannot fit in the
    memory available or, unless `yes`, is estimated (`model`, default this machine's
    `io.calibration.time_model()`, one core a worker) longer than TOKENSDE_MAX_HOURS run to its
    horizon; with `warn`, a BudgetWarning when the cells need more than WARN_HOURS on `workers`
    workers. `have`: bytes available to one cell (default `budget.available_memory()`).
    Returns the estimate of all the cells on `workers` workers: the sum of the cells' over
    `workers`, or the longest cell's if more."""
    have = available_memory() if have is None else have
    model = _time_model(budgets) if model is None else model
    for c, b in budgets:
        try:
            check_budget(b, have, model=model, warn=False, yes=yes)
        except BudgetError as err:
            raise BudgetError(f"cell {c.index} ({c.id}, {c.params}): {err}") from None
    each = [model.seconds(b.steps, b.work) for _, b in budgets]
    seconds = max([sum(each) / workers, *each])  # the longest cell, at least
    if warn and seconds > 3600 * WARN_HOURS:
        warnings.warn(f"the {len(budgets)} cells left need about {format_seconds(seconds)} on "
                      f"{workers} worker{'s' * (workers > 1)} ({model.source}; runs that stop "
                      "once decided take less)",
                      BudgetWarning,
                      stacklevel=3)
    return seconds


def _time_model(budgets: list[tuple[Cell, Budget]]) -> TimeModel:
    """This machine's time model (`io.calibration.time_model`) when there are cells to time."""
    if not budgets:
        return DEFAULT_TIME_MODEL
    from ..io.calibration import time_model

    return time_model()


def _ordered(todo: list[Cell], order: Callable[[list[Cell]], list[Cell]] | None) -> list[Cell]:
    if order is None:
        return todo
    new = list(order(list(todo)))
    if sorted(c.id for c in new) != sorted(c.id for c in todo):
        raise SweepError("a sweep order must return a permutation of the cells it is given")
    return new


def _rows(tasks: list[_Row], workers: int, backend: str, address: str | None
          ) -> Generator[_Row, None, None]:
    if backend == "ray":
        return _run_ray(tasks, workers, address)
    return _run_local(tasks, workers)


def run_sweep(config: SweepConfig | str | os.PathLike, out: str | os.PathLike, *,
              workers: int = 1, backend: str = "local", address: str | None = None,
              on_cell: _OnCell | None = None, on_start: Callable[[dict[str, int]], None] | None
              = None, order: Callable[[list[Cell]], list[Cell]] | None = None,
              yes: bool = False, on_estimate: Callable[[float, str, bool], None] | None = None
              ) -> dict[str, Any]:
    """Run (or resume) a sweep into directory `out`; return a summary.

    Each finished cell is written at once; `on_start(counts)` is called before the first cell and
    `on_cell(row, counts)` after each, with counts `total`, `done`, `failed`, `skipped`.
    `order(todo)` may reorder the cells still to run (a permutation of them): which cells finish
    first, never what they hold nor the table, which is in grid order.

    Args:
        config: A `SweepConfig` or the path of a TOML sweep file.
        out: The sweep directory (created, or resumed when it holds the same sweep).
        workers: Cells run at once.
        backend: 'local' (a process pool) or 'ray'.
        address: The Ray cluster address (backend 'ray'), or None for a local Ray.
        on_cell: Called after each cell with its row and the counts, or None.
        on_start: Called once with the counts before the first cell, or None.
        order: Reorders the cells still to run, or None (grid order).
        yes: Run cells estimated longer than TOKENSDE_MAX_HOURS (`check_cells`).
        on_estimate: Called once before the first cell with the seconds the cells left are
            estimated to take on the workers used, where the estimate comes from, and whether
            it is an upper bound (runs that stop once decided), or None.

    Returns:
        The counts (`total`, `done`, `failed`, `skipped`, `ran`), `rows`, `dir`, `table`,
        `backend`, the workers used and asked and their bounds, the memory of a cell and `wall_s`.
    """
    cfg = config if isinstance(config, SweepConfig) else SweepConfig.load(config)
    workers = _check_int("workers", workers, 1)
    backend = _check_backend(backend, address)
    cells = cfg.cells()
    sd = _SweepDir(out)
    sd.check_same(cfg, cells)  # before the lock: a foreign folder is left untouched
    t0 = time.perf_counter()
    budgets = _cell_budgets(cfg, cells)
    # a Ray cluster at an address has memory of its own, not known here
    have = available_memory() if backend == "local" or not address else sys.maxsize
    if not sd.exists():  # refused before the directory is made, so a smaller sweep can use it
        _check_cells(budgets, 1, have, warn=False, model=_time_model(budgets), yes=yes)
    with sd.lock():
        meta = sd.prepare(cfg, cells)
        parts = sd.parts(meta)
        sd.clean()
        ok = {i for i, t in parts.items() if t.column("status")[0].as_py() == "ok"}
        todo = _ordered([c for c in cells if c.id not in ok], order)
        counts = {"total": len(cells), "done": len(ok), "failed": 0, "skipped": len(ok),
                  "ran": 0}
        if on_start is not None:
            on_start(dict(counts))
        budgets = [(c, b) for c, b in budgets if c.id not in ok]
        cell_bytes = max((b.memory for _, b in budgets), default=0)
        bounds = _worker_bounds(workers, len(todo), backend, address, cell_bytes, have)
        used = max(1, min(bounds.values()))
        model = _time_model(budgets)
        seconds = _check_cells(budgets, used, have, model=model, yes=yes)
        if on_estimate is not None and budgets:
            on_estimate(seconds, model.source, not all(b.bounded for _, b in budgets))
        if bounds.get("memory", used) < min(workers, len(todo), bounds.get("cpus", workers)):
            warnings.warn(f"{used} worker{'s' * (used > 1)} of {workers} asked: a cell needs up "
                          f"to {cell_bytes / GIB:.3g} GiB, {have / GIB:.3g} GiB available",
                          BudgetWarning, stacklevel=2)
        # closing: an interrupt stops the workers at once, not when the generator is collected
        with closing(_rows(_tasks(cfg, todo), used, backend, address)) as rows:
            for row in rows:
                sd.check_intact(meta, counts)
                sd.write_row(row, meta)
                counts["done"] += 1
                counts["ran"] += 1
                counts["failed"] += row["status"] != "ok"
                if on_cell is not None:
                    on_cell(row, dict(counts))
        sd.check_intact(meta, counts)
        parts = sd.parts(meta)
        if len(parts) != counts["done"]:
            raise SweepError(f"{sd.cells_dir} holds {len(parts)} finished cells, but this run "
                             f"counted {counts['done']}: cells were removed while the sweep "
                             "ran; run the same command again to recompute them")
        table = sd.write_table(meta, parts)
    return {**counts, "rows": len(parts), "dir": str(sd.path), "table": str(table),
            "backend": backend, "workers": used, "workers_asked": workers,
            "workers_bounds": bounds, "cell_memory_gib": cell_bytes / GIB,
            "wall_s": time.perf_counter() - t0}


def sweep_status(out: str | os.PathLike) -> dict[str, Any]:
    """Progress of the sweep in `out`: counts, failures, whether it is running now.

    Args:
        out: The sweep directory.

    Returns:
        `dir`, `name`, `kind`, `fingerprint`, `version`, the counts `total`, `done`, `failed`,
        `pending`, `running` (whether a run holds the directory now) and `failures` (cell, index,
        params and error of each failed cell).
    """
    sd = _SweepDir(out)
    meta = sd.manifest()
    parts = sd.parts(meta)
    failures = []
    for c in meta["cells"]:
        t = parts.get(c["id"])
        if t is not None and t.column("status")[0].as_py() != "ok":
            failures.append({"cell": c["id"], "index": c["index"], "params": c["params"],
                             "error": t.column("error")[0].as_py()})
    cfg = meta["config"]
    return {"dir": str(sd.path), "name": cfg.get("name"), "kind": cfg.get("kind"),
            "fingerprint": meta["fingerprint"], "version": meta.get("version"),
            "total": len(meta["cells"]), "done": len(parts), "failed": len(failures),
            "pending": len(meta["cells"]) - len(parts), "running": sd.running(),
            "failures": failures}
