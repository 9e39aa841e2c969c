"""Running a fair sweep: its data checked first, the promising cells first (near each arm's rate at
the smaller budgets), then its report."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..model.params import ParameterError
from ..sweep.config import Cell, SweepConfig
from ..sweep.engine import _OnCell, run_sweep
from ..sweep.store import _SweepDir, load_table
from .fair import KIND, _check_data
from .fair_choice import _check_merge, _choose_lr, _per_seed, _planned_cells, _setup_columns
from .fair_report import _fair_report


def _prior_choices(out: str | os.PathLike) -> pd.DataFrame:
    """The complete choices (`choose_lr`) of the cells already finished in `out` (none if it
    holds no sweep yet)."""
    sd = _SweepDir(out)
    if not sd.exists() or not any(sd.cells_dir.glob("*.parquet")):
        return pd.DataFrame()
    seeds = _per_seed(load_table(out))
    if seeds.empty:
        return pd.DataFrame()
    chosen = _choose_lr(seeds, _planned_cells(out))
    return chosen[chosen["complete"]]


def _promising_first(cells: list[Cell], chosen: pd.DataFrame) -> list[Cell]:
    """Cells by budget; within one, the rates nearest (in log2) to the arm's choice at the
    largest smaller budget with a complete grid first, then the smaller rate, then grid order.
    A partial run of a long budget thus holds every arm near its likely rate."""
    setup = _setup_columns(chosen)
    past: dict[tuple[Any, ...], list[tuple[int, float]]] = {}  # (set-up, arm) -> by budget
    if not chosen.empty:
        for _, r in chosen.sort_values("epochs").iterrows():
            past.setdefault((*(r[k] for k in setup), r["arm"]), []).append(
                (int(r["epochs"]), float(r["lr"])))

    def key(c: Cell) -> tuple[int, float, float, int]:
        E, lr = c.params["epochs"], c.params["lr"]
        before = [x for e, x in past.get((*(c.params[k] for k in setup), c.params["arm"]), [])
                  if e < E]
        near = round(abs(math.log2(lr / before[-1])), 9) if before else 0.0
        return (E, near, lr, c.index)

    return sorted(cells, key=key)


def _run_fair(config: SweepConfig, out: str | os.PathLike, workers: int = 1,
             on_cell: _OnCell | None = None, on_start: Any = None,
             figures: bool = True, more: Sequence[str | os.PathLike] = ()) -> dict[str, Any]:
    """Run (or resume) a fair sweep into `out` (its data checked first, `check_data`), the
    promising cells first (`promising_first`, from the choices finished at the start), then
    write its report with the sweeps `more` that widen its grid (`fair_report`)."""
    for m in more:
        if _SweepDir(m).manifest()["config"].get("kind") != KIND:
            raise ParameterError(f"--with {m}: not a sweep of kind {KIND!r}")
    _SweepDir(out).check_same(config, config.cells())  # another sweep in out: refused first
    _check_merge([(str(out), pd.DataFrame([c.params for c in config.cells()])),
                 *((str(m), _planned_cells(m)) for m in more)])
    _check_data(config)
    chosen = _prior_choices(out)
    summary = run_sweep(config, out, workers=workers, on_cell=on_cell, on_start=on_start,
                        order=functools.partial(_promising_first, chosen=chosen))
    return {**summary, "report": _fair_report(out, figures=figures, more=more)}
