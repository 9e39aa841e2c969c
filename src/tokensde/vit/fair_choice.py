"""The fair protocol's choice of learning rate: per-seed rows, each arm's best rate on the
validation split, and the planned cells of the sweeps read together.

The choice reads the set-up columns and `_VAL_COLUMNS` only: nothing about the test images.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..model.params import ParameterError
from ..sweep.store import _SweepDir

# Columns that identify a training set-up (rows equal on all of them are comparable).
_SETUP = ("depth", "dataset", "data_dir", "train_subset", "val_subset", "test_subset", "dim",
         "heads", "patch", "batch_size", "seeds", "seed0", "poison_test")
# What the learning-rate choice may read: nothing about the test images.
_VAL_COLUMNS = ("arm", "epochs", "lr", "train_seed", "val_acc")


def _setup_columns(df: pd.DataFrame) -> list[str]:
    """The columns of `SETUP` that `df` has: rows equal on them are comparable."""
    return [c for c in _SETUP if c in df.columns]


def _per_seed(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, training seed): set-up, arm, lr, epochs, train_seed, val_acc,
    test_acc (fractions) and the per-epoch curves `val_curve`, `test_curve` (lists)."""
    table = table[table["status"] == "ok"] if "status" in table.columns else table
    rows = []
    for _, c in table.iterrows():
        E = int(c["epochs"])
        val, test = np.asarray(c["val_curve"], float), np.asarray(c["test_curve"], float)
        for i, s in enumerate(c["train_seeds"]):
            rows.append({**{k: c[k] for k in _setup_columns(table)}, "arm": c["arm"], "lr": c["lr"],
                         "epochs": E, "train_seed": int(s), "val_acc": float(c["val_acc"][i]),
                         "test_acc": float(c["test_acc"][i]),
                         "val_curve": val[i * E:(i + 1) * E], "test_curve": test[i * E:(i + 1) * E]})
    return pd.DataFrame(rows)


def _choose_lr(seeds: pd.DataFrame, planned: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per set-up, arm and budget: the rate with the highest mean validation accuracy at the end
    of training (ties: the smaller rate) among the rates that *every* arm of that budget has
    finished (`common`: the whole grid once the sweep is done, so that a partial sweep never lets
    one arm choose from more rates than another), the mean validation accuracy of every finished
    rate, and whether the choice lies on an edge of `common`; `complete` is False where some rate
    of the budget's grid has not finished yet. The grid of a budget is its rates in `planned`
    (the cells of the sweeps, `planned_cells`), or without it every rate of `seeds` at any
    budget. Reads the set-up and VAL_COLUMNS only."""
    val = seeds[[*_setup_columns(seeds), *_VAL_COLUMNS]]
    budget = [*_setup_columns(seeds), "epochs"]
    every = sorted(float(x) for x in val["lr"].unique())
    grids = None if planned is None else {
        (k if isinstance(k, tuple) else (k,)): sorted(set(map(float, g["lr"])))
        for k, g in planned.groupby(budget, sort=True)}
    rows = []
    for k, g in val.groupby(budget, sort=True):
        kk = k if isinstance(k, tuple) else (k,)
        common = sorted(set.intersection(*(set(map(float, h["lr"])) for _, h in
                                           g.groupby("arm"))))
        if grids is not None and kk not in grids:
            raise ParameterError(f"no planned cells for the set-up and budget {kk} of finished "
                                 "cells; pass the cells of every sweep read (planned_cells)")
        grid = every if grids is None else grids[kk]
        for arm, h in g.groupby("arm", sort=True):
            curve = h.groupby("lr")["val_acc"].agg(["mean", "count"]).sort_index()
            best = float(curve.loc[common, "mean"].idxmax())  # first maximum: the smaller rate
            rows.append({**dict(zip(budget, kk, strict=True)), "arm": arm, "lr": best,
                         "val": 100.0 * float(curve.loc[best, "mean"]),
                         "grid": [float(x) for x in curve.index],
                         "val_by_lr": [100.0 * float(x) for x in curve["mean"]],
                         "seeds_by_lr": [int(x) for x in curve["count"]], "plan": grid,
                         "common": common,
                         "edge": len(common) > 1 and best in (common[0], common[-1]),
                         "complete": common == grid})
    cols = [*_setup_columns(seeds), "arm", "epochs"]
    return pd.DataFrame(rows).sort_values(cols, kind="stable").reset_index(drop=True)


def _planned_cells(out: str | os.PathLike) -> pd.DataFrame:
    """The parameters of every cell of the sweep in `out` (finished or not), one row each."""
    return pd.DataFrame([c["params"] for c in _SweepDir(out).manifest()["cells"]])


def _setups(plan: pd.DataFrame, setup: list[str]) -> set[tuple[Any, ...]]:
    return {tuple(v.item() if hasattr(v, "item") else v for v in r)
            for r in plan[setup].drop_duplicates().itertuples(index=False)}


def _check_merge(plans: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The planned cells of sweeps `(name, cells)` reported together, checked: the set-ups of
    each sweep are those of the first, or some of them, or include them all (a sweep widens the
    other's grid; otherwise the parameters that differ are named), and no (set-up, arm, budget,
    rate) is planned twice. Returns them concatenated."""
    setup = _setup_columns(plans[0][1])
    ref = _setups(plans[0][1], setup)
    for name, plan in plans[1:]:
        mine = _setups(plan, setup)
        if not (mine <= ref or ref <= mine):
            a, b = sorted(ref - mine, key=str)[0], sorted(mine - ref, key=str)[0]
            diff = [f"{k}: {x!r} in {plans[0][0]}, {y!r} in {name}"
                    for k, x, y in zip(setup, a, b, strict=True) if x != y]
            raise ParameterError(f"{name} and {plans[0][0]} are not one set-up, so neither widens "
                                 f"the other's grid ({'; '.join(diff)})")
    plan = pd.concat([p.assign(_sweep=n) for n, p in plans], ignore_index=True)
    key = [*setup, "arm", "epochs", "lr"]
    twice = plan[plan.duplicated(key, keep=False)]
    if len(twice):
        r = twice.iloc[0]
        where = twice.merge(twice.iloc[[0]][key])["_sweep"].tolist()
        raise ParameterError(f"the cell arm {r['arm']}, {r['epochs']} epochs, lr {r['lr']:g} is "
                             f"planned by {' and '.join(where)}; give each cell once")
    return plan.drop(columns="_sweep")
