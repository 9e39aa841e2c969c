"""Figure `multi-token`: outcome probabilities of n tokens from a resumable sweep.

The sweep files are package data (`tokensde/study/sweeps/*.toml`): per size, the first of
`SWEEPS[size]` found by `context._sweep_file` (the package's sweeps, or the directory named by the
environment variable `TOKENSDE_SWEEPS`). The sweep runs into `OUT/sweeps/<file stem>/`, whose
finished cells are reused; the figures read its table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..io.report import Image, Section, Table, _interval
from .context import (
    _STEP_CAPTION,
    _STEP_COLUMN,
    Context,
    FigureSpec,
    _run_packaged_sweep,
    _step_text,
    _sweep_file,
    _SweepRun,
)

# the outcomes whose step error a multi_token cell measures, by the key of its step columns
_STEP_KEYS = {"single": "p_one_cluster", "bipolar": "p_bipolar"}
# sweep files tried for each size, in order
_SWEEPS: dict[str, tuple[str, ...]] = {
    "tiny": ("smoke",),
    "quick": ("multi-token-quick", "quick", "smoke"),
    "full": ("multi-token-full", "multi-token", "full", "multi-token-quick"),
}


def _sweep_config(ctx: Context) -> Path:
    """The multi-token sweep file of this size (`context._sweep_file` of `SWEEPS[size]`)."""
    return _sweep_file(_SWEEPS[ctx.size])


def _multi_data(ctx: Context) -> tuple[_SweepRun, bool]:
    """Run (or resume) this size's sweep under `OUT/sweeps/`; reused when no cell had to run."""
    run = _run_packaged_sweep(ctx, _SWEEPS[ctx.size])
    return run, run.reused


def _draw_multi(ctx: Context, spec: FigureSpec, run: _SweepRun, reused: bool) -> Section:
    """Multi-token outcome probabilities from a sweep (finished cells are reused)."""
    from ..plots.multi import _plot_hybrid, _plot_outcomes

    df = run.table
    images = []
    for model in ("noise", "flow"):
        if (df["model"] == model).any():
            images.append(Image(_plot_outcomes(df, ctx.figures / f"multi-token-{model}.png",
                                              model),
                                f"Outcome probabilities at the horizon, model = {model} "
                                "(95% Wilson bars)."))
    if (df["model"] == "hybrid").any():
        images.append(Image(_plot_hybrid(df, ctx.figures / "multi-token-hybrid.png"),
                            "Hybrid model: outcome probabilities vs noise scale."))
    cfg, summary = run.config, run.summary
    note = "" if cfg.stem == _SWEEPS[ctx.size][0] else (
        f"Sweep file {_SWEEPS[ctx.size][0]}.toml not found; used {cfg.name} instead.")
    return Section(spec.name, spec.title, spec.claim, images=images, note=note,
                   tables=[_multi_table(df)],
                   provenance={"sweep": str(cfg), "dir": str(run.dir),
                               "sweep_wall_s": round(run.wall_s, 1), "reused": reused,
                               "cells": {k: summary.get(k) for k in ("total", "ran", "skipped")},
                               "command": run.command(ctx.workers)})


def _multi_table(df: Any) -> Table:
    keys = [c for c in ("model", "n", "d", "beta", "sigma") if c in df.columns]
    stats = [s for s in ("single", "bipolar", "hovering", "other", "undecided")
             if f"p_{s}" in df.columns]
    cols = [*keys, "runs"]
    for s in stats:
        cols += [f"P({s})", "95%", *([_STEP_COLUMN] if s in _STEP_KEYS else [])]
    times = [c for c in ("t_decided_median", "t_decided_q90") if c in df.columns]
    tail = [c for c in ("horizon", "tol", "dt", "seed", "version") if c in df.columns]
    cols += [{"t_decided_median": "median t_decided",
              "t_decided_q90": "90% t_decided"}[c] for c in times] + tail
    rows = []
    for r in df.sort_values(keys).to_dict("records"):
        row = [r[k] for k in keys] + [r.get("runs")]
        for s in stats:
            row += [r[f"p_{s}"], _interval(r.get(f"p_{s}_lo"), r.get(f"p_{s}_hi"))]
            row += [_step_text(r, _STEP_KEYS[s])] if s in _STEP_KEYS else []
        row += [r[c] for c in times + tail]
        rows.append([_plain(v) for v in row])
    return Table("multi-token", "Outcome probabilities per sweep cell (95% Wilson). Each run stops "
                 "once decided (every pair within tol of +-1) or at the maximum horizon; "
                 "'undecided' runs were still moving there ('hovering': those of them that stay "
                 "bipolar at the looser tolerance over the last window, antipodal gaps that "
                 "hover instead of closing), and the decision-time quantiles count them as "
                 "later than the horizon (blank when past it)" + _STEP_CAPTION, cols, rows)


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v
