"""The fair protocol's report: the fair sweeps read together, the choice, gaps and plateau saved
as `fair.json`, the markdown tables (`fair.md`) and the figures."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..model.params import ParameterError
from ..sweep.store import _SweepDir, load_table
from .compare import _BASELINE
from .depth import _json_rows
from .fair import KIND
from .fair_choice import _check_merge, _choose_lr, _per_seed, _planned_cells
from .fair_stats import _fair_gaps, _plateau
from .init import _arm_order

_KIND_FAIR = "tokensde.vit.fair-report"
REPORT, TABLE_MD = "fair.json", "fair.md"


def _pts(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:+.1f}"


def _arm_rows(by: pd.DataFrame, arms: list[str], budgets: list[Any],
              fmt: Callable[[pd.Series], str]) -> list[str]:
    """Markdown rows `| arm | fmt(row at budget e) ... |` of `by` (indexed by arm, epochs)."""
    return ["| " + arm + " | " + " | ".join(fmt(by.loc[(arm, e)]) if (arm, e) in by.index else ""
                                         for e in budgets) + " |" for arm in arms]


def _fair_table(gaps: pd.DataFrame, chosen: pd.DataFrame, level: dict[str, Any]) -> str:
    """Markdown: arms x budgets (test accuracy at the per-arm rate; gap to default with its 95 %
    paired interval), the chosen rates, the validation accuracy over the grid, the plateau."""
    budgets = sorted(gaps["epochs"].unique())
    head = "| arm | " + " | ".join(f"{e} ep" for e in budgets) + " |"
    rule = "|---|" + "---|" * len(budgets)
    by = gaps.set_index(["arm", "epochs"])
    lines = ["**Test accuracy at each arm's own learning rate** (chosen on the validation split), "
             "and the gap to `default` in points with its 95 % paired t-interval "
             f"(paired seeds: {int(gaps['pairs'].max()) if len(gaps) else 0})", "", head, rule]
    lines += _arm_rows(by, _arm_order(gaps["arm"]), budgets, lambda r: (
        f"{r['acc']:.1f} %" if r.name[0] == _BASELINE else
        f"{r['acc']:.1f} %, {_pts(r['gap'])} [{_pts(r['gap_lo'])}, {_pts(r['gap_hi'])}]")
        + ("" if r["complete"] else " †"))
    if not gaps["complete"].all():
        lines += ["", "† the rates were chosen from the part of the grid that every arm has "
                  "finished (the sweep has not finished this budget)."]
    if gaps["gap_fixed"].notna().any():
        lines += ["", "Gap to `default` with **both at 2e-3** (the earlier protocol), same runs:",
                  "", head, rule]
        lines += _arm_rows(by, [a for a in _arm_order(gaps["arm"]) if a != _BASELINE], budgets,
                           lambda r: "not run" if not np.isfinite(r["gap_fixed"]) else
                           f"{_pts(r['gap_fixed'])} [{_pts(r['gap_fixed_lo'])}, "
                           f"{_pts(r['gap_fixed_hi'])}]")
    ch = chosen.set_index(["arm", "epochs"])
    every = sorted({float(g) for col in ("grid", "plan") if col in chosen
                    for grid in chosen[col] for g in grid})
    lines += ["", "**Chosen peak learning rate** (highest mean validation accuracy; * = on the "
              "edge of the grid; † = chosen from a partial grid, the sweep has not finished)", "",
              head, rule]
    lines += _arm_rows(ch, _arm_order(chosen["arm"]), budgets, lambda r: (
        f"{r['lr']:.2g}{'*' if r['edge'] else ''}{'' if r['complete'] else '†'}"))
    lines += ["", "**Validation accuracy (%) over the grid** (mean over seeds; – not in this "
              "budget's grid, … not run yet)", "",
              "| arm | epochs | " + " | ".join(f"{x:.2g}" for x in every) + " |",
              "|---|---|" + "---|" * len(every)]
    for arm in _arm_order(chosen["arm"]):
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


def _load_fair(dirs: Sequence[str | os.PathLike]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                           list[dict[str, Any]]]:
    """The per-seed rows (`per_seed`), the planned cells (`check_merge`) and the configs of the
    fair sweeps in `dirs` together: the first, and sweeps that widen its grid."""
    if not dirs:
        raise ParameterError("give at least one fair sweep directory")
    configs, tables = [], []
    for d in dirs:
        config = _SweepDir(d).manifest()["config"]
        if config.get("kind") != KIND:
            raise ParameterError(f"{d} holds a sweep of kind {config.get('kind')!r}, not {KIND!r}")
        configs.append(config)
        table = load_table(d)
        if len(table):
            tables.append(table)
    plan = _check_merge([(str(d), _planned_cells(d)) for d in dirs])
    seeds = _per_seed(pd.concat(tables, ignore_index=True)) if tables else pd.DataFrame()
    if seeds.empty:
        raise ParameterError(f"{', '.join(map(str, dirs))}: no finished cells yet")
    return seeds, plan, configs


def _by_arm(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its rows stably reordered so that the arms come in display order."""
    rank = {a: i for i, a in enumerate(_arm_order(table["arm"]))}
    return table.iloc[np.argsort(table["arm"].map(rank).to_numpy(), kind="stable")]


def _fair_report(out: str | os.PathLike, figures: bool = True,
                more: Sequence[str | os.PathLike] = ()) -> dict[str, str]:
    """From the (finished or partial) fair sweep in `out`, and those in `more` that widen its
    grid (`load_fair`): the choice, the gaps and the plateau (`fair.json`, with a header naming
    the sweeps), the markdown tables (`fair.md`) and, with `figures`, `fair_lr.png` and
    `fair_gaps.png`, all written into `out`; return the file paths."""
    from ..io.store import atomic_write, header

    out = Path(out)
    seeds, plan, configs = _load_fair([out, *more])
    chosen = _choose_lr(seeds, plan)
    gaps = _fair_gaps(seeds, chosen)
    level = _plateau(seeds, chosen)
    doc = header(_KIND_FAIR, sweep=configs[0], more=[{"path": str(m), "config": c} for m, c in
                                                    zip(more, configs[1:], strict=True)],
                 chosen=_json_rows(_by_arm(chosen)), gaps=_json_rows(_by_arm(gaps)), plateau=level)
    files = {"report": atomic_write(out / REPORT, lambda tmp: tmp.write_text(
        json.dumps(doc, indent=1) + "\n"))}
    md = _fair_table(gaps, chosen, level)
    files["table"] = atomic_write(out / TABLE_MD, lambda tmp: tmp.write_text(md))
    if figures:
        from ..plots.vit_fair import _draw_fair

        files.update(_draw_fair(doc, out))
    return {k: str(v) for k, v in files.items()}

