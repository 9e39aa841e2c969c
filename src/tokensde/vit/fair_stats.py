"""The fair protocol's statistics: paired gaps to the baseline arm, each at its chosen rate, and
whether the baseline has levelled off (plateau)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.stats import t_interval
from .compare import _BASELINE
from .fair_choice import _setup_columns

_LAST_THIRD = 1 / 3


def _gap(x: np.ndarray, base: pd.Series, seeds: np.ndarray) -> tuple[float, float, float, int]:
    paired = base.reindex(seeds).to_numpy(float)
    diff = 100.0 * (x - paired)
    diff = diff[np.isfinite(diff)]
    if len(diff) < 2:
        return math.nan, math.nan, math.nan, len(diff)
    return (*t_interval(diff), len(diff))


def _fair_gaps(seeds: pd.DataFrame, chosen: pd.DataFrame, fixed_lr: float | None = 2e-3,
              baseline: str = _BASELINE) -> pd.DataFrame:
    """Per set-up, budget and arm, at the arm's chosen rate: mean test accuracy (points) and the
    paired gap to `baseline` at *its* chosen rate, `mean +- t_{0.975,S-1} sd/sqrt(S)` over the
    seeds both finished; with `gap_fixed*` the same gap with both at `fixed_lr` (if in the grid)."""
    key = [*_setup_columns(seeds), "epochs"]
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


def _plateau(seeds: pd.DataFrame, chosen: pd.DataFrame, arm: str = _BASELINE) -> dict[str, Any]:
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
    back = max(1, round(E * _LAST_THIRD))
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
