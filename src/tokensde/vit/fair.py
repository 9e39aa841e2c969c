"""The fair protocol, as the sweep kind `vit_fair`: each arm at its own best learning rate, trained
to a plateau.

One cell trains `seeds` attention-only ViTs (training seeds `seed0 .. seed0 + seeds - 1`) of one
value-matrix arm at one peak learning rate `lr` for a budget of `epochs` epochs (warm-up over the
first 10 % of the steps, then cosine decay to 0 at the end of the budget, so every budget is a
complete schedule), all at once (`stack.train_stack`). After every epoch it records the accuracy on
a *validation* split — the `val_subset` training images after the first `train_subset` — and on
the test images.

The choice (`choose_lr`): for each arm and budget, the rate of the grid with the highest mean
validation accuracy at the end of training (over the seeds). It reads the validation columns only;
the test accuracy at the chosen rate is what is reported (`fair_gaps`). Pairing is as in the depth
sweep: every arm of a training seed starts from the same non-value weights and sees the same data
order and augmentation, so `acc(arm) - acc(default)` over seeds is a paired difference, each arm
at its own chosen rate.

`poison_test = true` replaces the test labels by a fixed random permutation of them: a control that
the choice and the validation numbers do not move (tests/test_vit_fair.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..analysis.stats import t_interval
from ..model.params import ParameterError, check_choice
from ..sweep.engine import Cell, OnCell, SweepConfig, SweepDir, load_table, run_sweep
from ..sweep.kinds import ExperimentKind, Param, choice, integer, real, register
from .compare import BASELINE
from .data import DATASETS, ImageData, load_dataset
from .depth import DEVICE_ENV, PATCH, SWEEPS, check_arm, json_rows, sized_config
from .init import arm_order
from .model import ViTConfig
from .stack import Member, StackedViT, train_stack
from .train import TrainConfig

KIND = "vit_fair"
FAIR_SWEEPS = ("fair", "fair-wide", "fair-tiny", "fair-pilot", "fair-cifar")
# Columns that identify a training set-up (rows equal on all of them are comparable).
SETUP = ("depth", "dataset", "data_dir", "train_subset", "val_subset", "test_subset", "dim",
         "heads", "patch", "batch_size", "seeds", "seed0", "poison_test")
# What the learning-rate choice may read: nothing about the test images.
VAL_COLUMNS = ("arm", "epochs", "lr", "train_seed", "val_acc")
POISON_SEED = 20261204
LAST_THIRD = 1 / 3


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{key} must be true or false; got {value!r}")
    return value


PARAMS: dict[str, Param] = {
    "arm": Param(check_arm, doc="value-matrix arm, e.g. default, noise:0, hybrid:0, identity"),
    "lr": real(0.0, strict=True, doc="peak AdamW learning rate of the grid"),
    "epochs": integer(1, doc="training budget in epochs (the cosine ends at its last step)"),
    "seeds": integer(1, 12, "models per cell: training seeds seed0 .. seed0 + seeds - 1"),
    "seed0": integer(0, 0, "first training seed"),
    "depth": integer(1, 24, "number of blocks L (branch scale 1/sqrt(L))"),
    "dataset": choice(DATASETS, "fashion-mnist"),
    "data_dir": Param(lambda k, v: str(v), "", "data set directory or .npz file ('' = default)"),
    "train_subset": integer(1, 5000, "first N training images"),
    "val_subset": integer(1, 2000, "the next N training images: the validation split"),
    "test_subset": integer(0, 2000, "first N test images (0 = all)"),
    "dim": integer(2, 64, "token width D"),
    "heads": integer(1, 1),
    "patch": integer(0, 0, "patch side (0: 7 for fashion-mnist, 4 otherwise)"),
    "batch_size": integer(1, 128),
    "poison_test": Param(_flag, False, "control: test labels permuted (the choice must not move)"),
}


@functools.lru_cache(maxsize=2)
def _data(dataset: str, data_dir: str, train: int, val: int, test: int) -> ImageData:
    return load_dataset(dataset, data_dir or None, train, test or None, val)


def cell_data(cell: dict[str, Any]) -> ImageData:
    """The images of a cell (cached per process), test labels permuted if `poison_test`."""
    data = _data(cell["dataset"], cell["data_dir"], cell["train_subset"], cell["val_subset"],
                 cell["test_subset"])
    if not cell["poison_test"]:
        return data
    gen = torch.Generator().manual_seed(POISON_SEED)
    y = data.y_test[torch.randperm(len(data.y_test), generator=gen)]
    return dataclasses.replace(data, y_test=y)


def cell_config(cell: dict[str, Any], data: ImageData) -> ViTConfig:
    """The attention-only ViTConfig of a cell (as the depth sweep builds it)."""
    return ViTConfig(image_size=data.image_size, channels=data.channels,
                     patch=cell["patch"] or PATCH[cell["dataset"]], dim=cell["dim"],
                     depth=cell["depth"], heads=cell["heads"], classes=data.classes, norm="rms",
                     residual_scale=True, block="attention-only")


def fair_cell(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train the cell's `seeds` models; validation and test accuracy after every epoch.

    Lists are per training seed; the curves are flattened seed-major (`seeds x epochs`)."""
    del seed  # training randomness comes from the training seeds (paired arms)
    device = check_choice(DEVICE_ENV, os.environ.get(DEVICE_ENV, "cpu"), ("cpu", "cuda"))
    data = cell_data(cell)
    cfg = cell_config(cell, data)
    seeds = list(range(cell["seed0"], cell["seed0"] + cell["seeds"]))
    members = [Member(cell["arm"], s, cell["lr"]) for s in seeds]
    train = TrainConfig(epochs=cell["epochs"], batch_size=cell["batch_size"], lr=cell["lr"])
    test: list[list[float]] = [[] for _ in seeds]

    def on_epoch(stack: StackedViT, epoch: int) -> None:
        acc = stack.accuracy(data.x_test, data.y_test)
        for r in range(len(seeds)):
            test[r].append(float(acc[r]))

    t0 = time.perf_counter()
    _, rec = train_stack(data, cfg, members, train, device, on_epoch)
    return {"train_seeds": seeds, "val_acc": [c[-1] for c in rec["val"]],
            "test_acc": [c[-1] for c in test], "val_curve": [a for c in rec["val"] for a in c],
            "test_curve": [a for c in test for a in c], "train_loss": rec["train_loss"],
            "train_s": time.perf_counter() - t0, "device": device, "tokens": cfg.n_tokens}


register(ExperimentKind(KIND, fair_cell, PARAMS,
                        "train one arm at one learning rate and budget over seeds (stacked); "
                        "validation and test accuracy per epoch"))


# ----------------------------------------------------------------------------- running

def fair_config(size: str | os.PathLike = "fair", **params: Any) -> SweepConfig:
    """The packaged sweep `size` (FAIR_SWEEPS, or a TOML path of kind vit_fair), with fixed
    parameters replaced by `params` (None values are ignored)."""
    return sized_config(size, KIND, FAIR_SWEEPS, SWEEPS / f"vit-{size}.toml", params)


def check_data(config: SweepConfig) -> None:
    """Load the images of every data set-up of `config` once, so that a missing or bad data file
    stops the sweep with its message before any cell runs."""
    seen = set()
    for c in config.cells():
        key = tuple(c.params[k] for k in ("dataset", "data_dir", "train_subset", "val_subset",
                                          "test_subset"))
        if key not in seen:
            seen.add(key)
            _data(*key)


def _prior_choices(out: str | os.PathLike) -> pd.DataFrame:
    """The complete choices (`choose_lr`) of the cells already finished in `out` (none if it
    holds no sweep yet)."""
    sd = SweepDir(out)
    if not sd.exists() or not any(sd.cells_dir.glob("*.parquet")):
        return pd.DataFrame()
    seeds = per_seed(load_table(out))
    if seeds.empty:
        return pd.DataFrame()
    chosen = choose_lr(seeds, planned_cells(out))
    return chosen[chosen["complete"]]


def promising_first(cells: list[Cell], chosen: pd.DataFrame) -> list[Cell]:
    """Cells by budget; within one, the rates nearest (in log2) to the arm's choice at the
    largest smaller budget with a complete grid first, then the smaller rate, then grid order.
    A partial run of a long budget thus holds every arm near its likely rate."""
    setup = _setup(chosen)
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


def run_fair(config: SweepConfig, out: str | os.PathLike, workers: int = 1,
             on_cell: OnCell | None = None, on_start: Any = None,
             figures: bool = True, more: Sequence[str | os.PathLike] = ()) -> dict[str, Any]:
    """Run (or resume) a fair sweep into `out` (its data checked first, `check_data`), the
    promising cells first (`promising_first`, from the choices finished at the start), then
    write its report with the sweeps `more` that widen its grid (`fair_report`)."""
    for m in more:
        if SweepDir(m).manifest()["config"].get("kind") != KIND:
            raise ParameterError(f"--with {m}: not a sweep of kind {KIND!r}")
    check_merge([(str(out), pd.DataFrame([c.params for c in config.cells()])),
                 *((str(m), planned_cells(m)) for m in more)])
    check_data(config)
    chosen = _prior_choices(out)
    summary = run_sweep(config, out, workers=workers, on_cell=on_cell, on_start=on_start,
                        order=functools.partial(promising_first, chosen=chosen))
    return {**summary, "report": fair_report(out, figures=figures, more=more)}


# ----------------------------------------------------------------------------- analysis

def _setup(df: pd.DataFrame) -> list[str]:
    return [c for c in SETUP if c in df.columns]


def per_seed(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, training seed): set-up, arm, lr, epochs, train_seed, val_acc,
    test_acc (fractions) and the per-epoch curves `val_curve`, `test_curve` (lists)."""
    table = table[table["status"] == "ok"] if "status" in table.columns else table
    rows = []
    for _, c in table.iterrows():
        E = int(c["epochs"])
        val, test = np.asarray(c["val_curve"], float), np.asarray(c["test_curve"], float)
        for i, s in enumerate(c["train_seeds"]):
            rows.append({**{k: c[k] for k in _setup(table)}, "arm": c["arm"], "lr": c["lr"],
                         "epochs": E, "train_seed": int(s), "val_acc": float(c["val_acc"][i]),
                         "test_acc": float(c["test_acc"][i]),
                         "val_curve": val[i * E:(i + 1) * E], "test_curve": test[i * E:(i + 1) * E]})
    return pd.DataFrame(rows)


def choose_lr(seeds: pd.DataFrame, planned: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per set-up, arm and budget: the rate with the highest mean validation accuracy at the end
    of training (ties: the smaller rate) among the rates that *every* arm of that budget has
    finished (`common`: the whole grid once the sweep is done, so that a partial sweep never lets
    one arm choose from more rates than another), the mean validation accuracy of every finished
    rate, and whether the choice lies on an edge of `common`; `complete` is False where some rate
    of the budget's grid has not finished yet. The grid of a budget is its rates in `planned`
    (the cells of the sweeps, `planned_cells`), or without it every rate of `seeds` at any
    budget. Reads the set-up and VAL_COLUMNS only."""
    val = seeds[[*_setup(seeds), *VAL_COLUMNS]]
    budget = [*_setup(seeds), "epochs"]
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
    cols = [*_setup(seeds), "arm", "epochs"]
    return pd.DataFrame(rows).sort_values(cols, kind="stable").reset_index(drop=True)


def _gap(x: np.ndarray, base: pd.Series, seeds: np.ndarray) -> tuple[float, float, float, int]:
    paired = base.reindex(seeds).to_numpy(float)
    diff = 100.0 * (x - paired)
    diff = diff[np.isfinite(diff)]
    if len(diff) < 2:
        return math.nan, math.nan, math.nan, len(diff)
    return (*t_interval(diff), len(diff))


def fair_gaps(seeds: pd.DataFrame, chosen: pd.DataFrame, fixed_lr: float | None = 2e-3,
              baseline: str = BASELINE) -> pd.DataFrame:
    """Per set-up, budget and arm, at the arm's chosen rate: mean test accuracy (points) and the
    paired gap to `baseline` at *its* chosen rate, `mean +- t_{0.975,S-1} sd/sqrt(S)` over the
    seeds both finished; with `gap_fixed*` the same gap with both at `fixed_lr` (if in the grid)."""
    key = [*_setup(seeds), "epochs"]
    by_arm = chosen.set_index([*key, "arm"])
    pick, whole = by_arm["lr"], by_arm["complete"]
    rows = []
    for k, g in seeds.groupby(key, sort=True):
        kk = k if isinstance(k, tuple) else (k,)
        if (*kk, baseline) not in pick.index:
            continue
        by = {(a, lr): h.set_index("train_seed")["test_acc"] for (a, lr), h in
              g.groupby(["arm", "lr"])}
        base_lr = pick[(*kk, baseline)]
        for arm in g["arm"].unique():
            if (*kk, arm) not in pick.index:
                continue
            lr = pick[(*kk, arm)]
            acc = by[(arm, lr)]
            gap = _gap(acc.to_numpy(), by[(baseline, base_lr)], acc.index.to_numpy()) \
                if arm != baseline else (math.nan,) * 3 + (0,)
            fixed = (math.nan,) * 3 + (0,)
            if fixed_lr is not None and (arm, fixed_lr) in by and (baseline, fixed_lr) in by \
                    and arm != baseline:
                f = by[(arm, fixed_lr)]
                fixed = _gap(f.to_numpy(), by[(baseline, fixed_lr)], f.index.to_numpy())
            rows.append({**dict(zip(key, kk, strict=True)), "arm": arm, "lr": lr,
                         "seeds": len(acc), "acc": 100.0 * float(acc.mean()),
                         "acc_sd": 100.0 * float(acc.std(ddof=1)) if len(acc) > 1 else math.nan,
                         "gap": gap[0], "gap_lo": gap[1], "gap_hi": gap[2], "pairs": gap[3],
                         "half_width": (gap[2] - gap[1]) / 2, "gap_fixed": fixed[0],
                         "gap_fixed_lo": fixed[1], "gap_fixed_hi": fixed[2],
                         "complete": bool(whole[(*kk, arm)] and whole[(*kk, baseline)])})
    return pd.DataFrame(rows)


def plateau(seeds: pd.DataFrame, chosen: pd.DataFrame, arm: str = BASELINE) -> dict[str, Any]:
    """Has `arm` levelled off? At the largest budget E and its chosen rate: the test accuracy
    after epoch E minus after epoch E - round(E/3) (the change over the last third of that run),
    and the change from the next smaller budget to E (both chosen rates), each a mean over paired
    seeds with its 95 % t-interval, in points."""
    ch = chosen.set_index(["arm", "epochs"])
    pick = ch["lr"]
    mine = seeds[seeds["arm"] == arm]
    if mine.empty:
        return {}
    budgets = sorted(mine["epochs"].unique())
    E = int(budgets[-1])
    if (arm, E) not in pick.index:
        return {}
    last = mine[(mine["epochs"] == E) & (mine["lr"] == pick[(arm, E)])]
    back = max(1, round(E * LAST_THIRD))
    out: dict[str, Any] = {"arm": arm, "epochs": E, "lr": float(pick[(arm, E)]), "window": back,
                           "complete": bool(ch.loc[(arm, E), "complete"])}
    if E > back:
        change = np.array([100.0 * (c[-1] - c[-1 - back]) for c in last["test_curve"]])
        out["last_third"] = list(t_interval(change))
        out["curve"] = [100.0 * float(x) for x in np.mean(np.stack(last["test_curve"].to_list()),
                                                          axis=0)]
    if len(budgets) > 1:
        prev = int(budgets[-2])
        if (arm, prev) in pick.index:
            before = mine[(mine["epochs"] == prev) & (mine["lr"] == pick[(arm, prev)])]
            b = before.set_index("train_seed")["test_acc"]
            a = last.set_index("train_seed")["test_acc"]
            both = a.index.intersection(b.index)
            out["from_budget"] = prev
            out["budget_change"] = list(t_interval(100.0 * (a[both] - b[both]).to_numpy()))
    return out


# ----------------------------------------------------------------------------- report

KIND_FAIR = "tokensde.vit.fair-report"
REPORT, TABLE_MD = "fair.json", "fair.md"


def _pts(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:+.1f}"


def _arm_rows(by: pd.DataFrame, arms: list[str], budgets: list[Any],
              fmt: Callable[[pd.Series], str]) -> list[str]:
    """Markdown rows `| arm | fmt(row at budget e) ... |` of `by` (indexed by arm, epochs)."""
    return ["| " + arm + " | " + " | ".join(fmt(by.loc[(arm, e)]) if (arm, e) in by.index else ""
                                         for e in budgets) + " |" for arm in arms]


def fair_table(gaps: pd.DataFrame, chosen: pd.DataFrame, level: dict[str, Any]) -> str:
    """Markdown: arms x budgets (test accuracy at the per-arm rate; gap to default with its 95 %
    paired interval), the chosen rates, the validation accuracy over the grid, the plateau."""
    budgets = sorted(gaps["epochs"].unique())
    head = "| arm | " + " | ".join(f"{e} ep" for e in budgets) + " |"
    rule = "|---|" + "---|" * len(budgets)
    by = gaps.set_index(["arm", "epochs"])
    lines = ["**Test accuracy at each arm's own learning rate** (chosen on the validation split), "
             "and the gap to `default` in points with its 95 % paired t-interval "
             f"(paired seeds: {int(gaps['pairs'].max()) if len(gaps) else 0})", "", head, rule]
    lines += _arm_rows(by, arm_order(gaps["arm"]), budgets, lambda r: (
        f"{r['acc']:.1f} %" if r.name[0] == BASELINE else
        f"{r['acc']:.1f} %, {_pts(r['gap'])} [{_pts(r['gap_lo'])}, {_pts(r['gap_hi'])}]")
        + ("" if r["complete"] else " †"))
    if not gaps["complete"].all():
        lines += ["", "† the rates were chosen from the part of the grid that every arm has "
                  "finished (the sweep has not finished this budget)."]
    if gaps["gap_fixed"].notna().any():
        lines += ["", "Gap to `default` with **both at 2e-3** (the earlier protocol), same runs:",
                  "", head, rule]
        lines += _arm_rows(by, [a for a in arm_order(gaps["arm"]) if a != BASELINE], budgets,
                           lambda r: "not run" if not np.isfinite(r["gap_fixed"]) else
                           f"{_pts(r['gap_fixed'])} [{_pts(r['gap_fixed_lo'])}, "
                           f"{_pts(r['gap_fixed_hi'])}]")
    ch = chosen.set_index(["arm", "epochs"])
    every = sorted({float(g) for col in ("grid", "plan") if col in chosen
                    for grid in chosen[col] for g in grid})
    lines += ["", "**Chosen peak learning rate** (highest mean validation accuracy; * = on the "
              "edge of the grid; † = chosen from a partial grid, the sweep has not finished)", "",
              head, rule]
    lines += _arm_rows(ch, arm_order(chosen["arm"]), budgets, lambda r: (
        f"{r['lr']:.2g}{'*' if r['edge'] else ''}{'' if r['complete'] else '†'}"))
    lines += ["", "**Validation accuracy (%) over the grid** (mean over seeds; – not in this "
              "budget's grid, … not run yet)", "",
              "| arm | epochs | " + " | ".join(f"{x:.2g}" for x in every) + " |",
              "|---|---|" + "---|" * len(every)]
    for arm in arm_order(chosen["arm"]):
        for e in budgets:
            if (arm, e) in ch.index:
                r = ch.loc[(arm, e)]
                got = dict(zip(r["grid"], r["val_by_lr"], strict=True))
                lines.append(f"| {arm} | {e} | " + " | ".join(
                    "–" if g not in r.get("plan", every) else "…" if g not in got else
                    f"**{got[g]:.1f}**" if g == r["lr"] else f"{got[g]:.1f}" for g in every)
                    + " |")
    if level.get("last_third"):
        m, lo, hi = level["last_third"]
        mark = "" if level.get("complete", True) else " †"
        lines += ["", f"**Plateau**: `{level['arm']}` at {level['epochs']} epochs (lr "
                  f"{level['lr']:.2g}{mark}) changed by {_pts(m)} [{_pts(lo)}, {_pts(hi)}] points over "
                  f"its last {level['window']} epochs (test accuracy)."]
        if "budget_change" in level:
            m, lo, hi = level["budget_change"]
            lines[-1] += (f" From the {level['from_budget']}-epoch budget to the "
                          f"{level['epochs']}-epoch budget: {_pts(m)} [{_pts(lo)}, {_pts(hi)}].")
    return "\n".join(lines) + "\n"


def planned_cells(out: str | os.PathLike) -> pd.DataFrame:
    """The parameters of every cell of the sweep in `out` (finished or not), one row each."""
    return pd.DataFrame([c["params"] for c in SweepDir(out).manifest()["cells"]])


def _setups(plan: pd.DataFrame, setup: list[str]) -> set[tuple[Any, ...]]:
    return {tuple(v.item() if hasattr(v, "item") else v for v in r)
            for r in plan[setup].drop_duplicates().itertuples(index=False)}


def check_merge(plans: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The planned cells of sweeps `(name, cells)` reported together, checked: the set-ups of
    each sweep are those of the first, or some of them, or include them all (a sweep widens the
    other's grid; otherwise the parameters that differ are named), and no (set-up, arm, budget,
    rate) is planned twice. Returns them concatenated."""
    setup = _setup(plans[0][1])
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


def load_fair(dirs: Sequence[str | os.PathLike]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                           list[dict[str, Any]]]:
    """The per-seed rows (`per_seed`), the planned cells (`check_merge`) and the configs of the
    fair sweeps in `dirs` together: the first, and sweeps that widen its grid."""
    if not dirs:
        raise ParameterError("give at least one fair sweep directory")
    configs, tables = [], []
    for d in dirs:
        config = SweepDir(d).manifest()["config"]
        if config.get("kind") != KIND:
            raise ParameterError(f"{d} holds a sweep of kind {config.get('kind')!r}, not {KIND!r}")
        configs.append(config)
        table = load_table(d)
        if len(table):
            tables.append(table)
    plan = check_merge([(str(d), planned_cells(d)) for d in dirs])
    seeds = per_seed(pd.concat(tables, ignore_index=True)) if tables else pd.DataFrame()
    if seeds.empty:
        raise ParameterError(f"{', '.join(map(str, dirs))}: no finished cells yet")
    return seeds, plan, configs


def _by_arm(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its rows stably reordered so that the arms come in display order."""
    rank = {a: i for i, a in enumerate(arm_order(table["arm"]))}
    return table.iloc[np.argsort(table["arm"].map(rank).to_numpy(), kind="stable")]


def fair_report(out: str | os.PathLike, figures: bool = True,
                more: Sequence[str | os.PathLike] = ()) -> dict[str, str]:
    """From the (finished or partial) fair sweep in `out`, and those in `more` that widen its
    grid (`load_fair`): the choice, the gaps and the plateau (`fair.json`, with a header naming
    the sweeps), the markdown tables (`fair.md`) and, with `figures`, `fair_lr.png` and
    `fair_gaps.png`, all written into `out`; return the file paths."""
    from ..io.store import atomic_write, header

    out = Path(out)
    seeds, plan, configs = load_fair([out, *more])
    chosen = choose_lr(seeds, plan)
    gaps = fair_gaps(seeds, chosen)
    level = plateau(seeds, chosen)
    doc = header(KIND_FAIR, sweep=configs[0], more=[{"path": str(m), "config": c} for m, c in
                                                    zip(more, configs[1:], strict=True)],
                 chosen=json_rows(_by_arm(chosen)), gaps=json_rows(_by_arm(gaps)), plateau=level)
    files = {"report": atomic_write(out / REPORT, lambda tmp: tmp.write_text(
        json.dumps(doc, indent=1) + "\n"))}
    md = fair_table(gaps, chosen, level)
    files["table"] = atomic_write(out / TABLE_MD, lambda tmp: tmp.write_text(md))
    if figures:
        from ..plots.vit_fair import draw_fair

        files.update(draw_fair(doc, out))
    return {k: str(v) for k, v in files.items()}


def read_report(path: str | os.PathLike) -> dict[str, Any]:
    """The document saved by `fair_report` (a directory or its fair.json)."""
    from ..io.store import read_json

    p = Path(path)
    p = p / REPORT if p.is_dir() else p
    return read_json(p, KIND_FAIR, f"rebuild it with `tokensde vit fair-report {p.parent}`")
