"""Multi-token figures and tables from a saved `multi_token` sweep table (never re-simulates).

- `plot_outcomes`: P(single-cluster / bipolar / other / undecided) vs beta, one panel per (n, d),
  95% Wilson bars, the two-token threshold beta_c(d) = arccosh(d - 2)/2 marked;
- `plot_hybrid`: the same probabilities vs the noise scale sigma of the hybrid model;
- `_plot_minority`: law of the minority side of bipolar states, with the law it would have if
  every token picked its side by a fair coin (reference, not a prediction);
- `markdown_table`: one statistic with its interval as an (n, d) x beta table for the README;
  `readme_tables`: the tables of every model in the table.

    tokensde sweep plot SWEEP_DIR OUT_DIR [--prefix multi_token]   # `make_all` + `readme_tables`
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from scipy.special import comb

from ..model.checks import ParameterError
from ..theory.two_tokens import beta_c
from .style import _save

_OUTCOMES = (("single", "#c0392b", "o"), ("bipolar", "#2c7a4b", "s"),
            ("hovering", "#76b07a", "D"), ("other", "#8e44ad", "^"),
            ("undecided", "#7f8c8d", "x"))


_NEEDED = ("model", "n", "d", "beta", "runs")  # the columns of a multi_token sweep table we read


def _check_multi_table(df: pd.DataFrame) -> pd.DataFrame:
    """`df` if it is a `multi_token` sweep table (it has the `_NEEDED` columns), else
    ParameterError saying what it lacks and which sweeps are drawn."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"the table must be a pandas DataFrame; got {type(df).__name__}")
    missing = [c for c in _NEEDED if c not in df.columns]
    if missing:
        raise ParameterError(
            f"the sweep table lacks the column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} of a multi_token sweep (it is a sweep of another kind): "
            "sweep plot draws multi_token sweeps (outcome probabilities) and two_token sweeps "
            "(P_anti)")
    return df


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of status 'ok' (a table read by `sweep.store._ok_rows` has no others)."""
    return df[df["status"] == "ok"].copy()


def _errorbar(ax: Any, x: np.ndarray, rows: pd.DataFrame, name: str, color: str,
              marker: str) -> None:
    if f"p_{name}" not in rows.columns:  # tables made before 'hovering' existed
        return
    p = rows[f"p_{name}"].to_numpy()
    err = np.vstack([p - rows[f"p_{name}_lo"].to_numpy(), rows[f"p_{name}_hi"].to_numpy() - p])
    ax.errorbar(x, p, yerr=np.clip(err, 0, None), color=color, marker=marker, ms=4, lw=1.2,
                capsize=2, label=name)


def _caption(rows: pd.DataFrame) -> str:
    r = rows.iloc[0]
    return (f"runs={int(r['runs'])}, horizon T={r['horizon']:g}, dt={r['dt']}, tol={r['tol']:g}, "
            f"motion window={r['window']:g}T, attention={r['attention']}")


def _plot_outcomes(df: pd.DataFrame, path: str | Path, model: str = "noise") -> Path:
    """Outcome probabilities vs beta, one panel per (n, d), for one `model`."""
    df = _ok(df)
    df = df[df["model"] == model]
    if df.empty:
        raise ValueError(f"the table has no finished cells of model {model!r}")
    if model == "hybrid":
        df = df[df["sigma"] == df["sigma"].max()]
    ns, ds = sorted(df["n"].unique()), sorted(df["d"].unique())
    fig = Figure(figsize=(2.7 * len(ds) + 1, 2.1 * len(ns) + 1), layout="constrained")
    axes = fig.subplots(len(ns), len(ds), sharex=True, sharey=True, squeeze=False)
    for (i, n), (j, d) in ((a, b) for a in enumerate(ns) for b in enumerate(ds)):
        ax = axes[i, j]
        rows = df[(df["n"] == n) & (df["d"] == d)].sort_values("beta")
        if rows.empty:
            ax.set_axis_off()
            continue
        for name, color, marker in _OUTCOMES:
            _errorbar(ax, rows["beta"].to_numpy(), rows, name, color, marker)
        if model != "flow" and beta_c(d) > 0:
            ax.axvline(beta_c(d), color="k", ls=":", lw=1)
        ax.set_title(f"n={n}, d={d}", fontsize=9)
        ax.set_ylim(-0.03, 1.03)
        if (df["beta"] > 0).all():
            ax.set_xscale("log", base=2)
    for ax in axes[-1]:
        ax.set_xlabel(r"$\beta$")
    for ax in axes[:, 0]:
        ax.set_ylabel("probability")
    axes[0, 0].legend(fontsize=7, loc="center left")
    label = {"noise": "pure-noise model (M = 0, sigma = {s:g})", "flow": "deterministic flow "
             "(sigma = 0, M = I)", "hybrid": "hybrid model (M = I, sigma = {s:g})"}[model]
    fig.suptitle(f"Outcome at absorption: {label.format(s=df['sigma'].max())}; "
                 f"dotted: two-token beta_c(d); hovering: undecided runs that stay bipolar at "
                 f"the looser tolerance (a subset of undecided)\n{_caption(df)}", fontsize=9)
    return _save(fig, path, dpi=110, style=False)


def _plot_hybrid(df: pd.DataFrame, path: str | Path) -> Path:
    """Hybrid model: outcome probabilities vs sigma, one panel per (n, d, beta)."""
    df = _ok(df)
    df = df[df["model"] == "hybrid"]
    if df.empty:
        raise ValueError("the table has no finished cells of model 'hybrid'")
    keys = sorted({(int(r.n), int(r.d), float(r.beta)) for r in df.itertuples()})
    fig = Figure(figsize=(max(6.0, 3.2 * len(keys) + 0.5), 3.4), layout="constrained")
    axes = fig.subplots(1, len(keys), sharey=True, squeeze=False)
    for ax, (n, d, b) in zip(axes[0], keys, strict=True):
        rows = df[(df["n"] == n) & (df["d"] == d) & (df["beta"] == b)].sort_values("sigma")
        for name, color, marker in _OUTCOMES:
            _errorbar(ax, rows["sigma"].to_numpy(), rows, name, color, marker)
        ax.set(title=f"n={n}, d={d}, beta={b:g}", xlabel=r"noise scale $\sigma$",
               ylim=(-0.03, 1.03))
    axes[0, 0].set_ylabel("probability")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Hybrid model (M = I): noise turned down to the deterministic flow at "
                 f"sigma = 0\n{_caption(df)}", fontsize=9)
    return _save(fig, path, dpi=110, style=False)


def _coin_minority_law(n: int) -> np.ndarray:
    """P(minority = m), m = 1..n//2, if each of n tokens picks a side by a fair coin, given
    both sides non-empty."""
    m = np.arange(1, n // 2 + 1)
    w = comb(n, m) * np.where(2 * m == n, 1.0, 2.0)
    return w / w.sum()


def _plot_minority(df: pd.DataFrame, path: str | Path, model: str = "noise", min_bipolar: int = 20
                  ) -> Path:
    """Law of the minority side size of bipolar states at the largest beta, one panel per n."""
    df = _ok(df)
    df = df[(df["model"] == model) & (df["n"] >= 4)]
    df = df[df["beta"] == df["beta"].max()]
    ns = sorted(df["n"].unique())
    if not ns:
        raise ValueError(f"the table has no {model!r} cells with n >= 4")
    fig = Figure(figsize=(max(6.0, 3.0 * len(ns) + 0.5), 3.2), layout="constrained")
    axes = fig.subplots(1, len(ns), squeeze=False)
    for ax, n in zip(axes[0], ns, strict=True):
        m = np.arange(1, n // 2 + 1)
        for r in df[df["n"] == n].sort_values("d").itertuples():
            counts = np.asarray(r.minority, dtype=float)
            if counts.sum() >= min_bipolar:
                ax.plot(m, counts / counts.sum(), "o-", ms=3, lw=1,
                        label=f"d={r.d} ({int(counts.sum())})")
        ax.plot(m, _coin_minority_law(n), "k--", lw=1, label="fair coins")
        ax.set(title=f"n={n}", xlabel="minority side size m", ylim=(0, None))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("P(m | bipolar)")
    fig.suptitle(f"Minority side of bipolar states, {model} model, beta={df['beta'].max():g} "
                 f"(legend: bipolar runs)\n{_caption(df)}", fontsize=9)
    return _save(fig, path, dpi=110, style=False)


def _markdown_table(df: pd.DataFrame, stat: str = "bipolar", model: str = "noise",
                   keys: tuple[str, ...] = ("n", "d")) -> str:
    """`P(stat)` with its 95% Wilson interval and `u` = P(undecided); a row per value of `keys`,
    a column per beta."""
    df = _ok(df)
    df = df[df["model"] == model]
    betas = sorted(df["beta"].unique())
    head = "| " + " | ".join(keys) + " | " + " | ".join(f"beta={b:g}" for b in betas) + " |"
    lines = [head, "|" + "---|" * (len(betas) + len(keys))]
    for key, rows in df.groupby(list(keys)):
        cells = []
        for b in betas:
            r = rows[rows["beta"] == b]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            cells.append(f"{r[f'p_{stat}']:.2f} [{r[f'p_{stat}_lo']:.2f}, "
                         f"{r[f'p_{stat}_hi']:.2f}] u{r['p_undecided']:.2f}")
        lines.append("| " + " | ".join(f"{k:g}" for k in key) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _make_all(df: pd.DataFrame, out_dir: str | Path, prefix: str = "multi_token") -> list[Path]:
    """Every multi-token figure the table supports, as `OUT_DIR/<prefix>_<what>.png`; a table of
    another kind of sweep is refused (`_check_multi_table`)."""
    df = _check_multi_table(_ok(df))
    out = Path(out_dir)
    made = []
    for model in ("noise", "flow"):
        if (df["model"] == model).any():
            made.append(_plot_outcomes(df, out / f"{prefix}_{model}.png", model))
    if (df["model"] == "hybrid").any():
        made.append(_plot_hybrid(df, out / f"{prefix}_hybrid.png"))
    if ((df["model"] == "noise") & (df["n"] >= 4)).any():
        made.append(_plot_minority(df, out / f"{prefix}_minority.png"))
    return made


def _readme_tables(df: pd.DataFrame) -> str:
    """The README tables of a saved sweep table: `markdown_table` of P(bipolar) for the noise and
    hybrid models and of P(single) for the flow, each under a one-line heading; a table of
    another kind of sweep is refused (`_check_multi_table`)."""
    df = _check_multi_table(_ok(df))
    parts = []
    for model, stat, keys in (("noise", "bipolar", ("n", "d")), ("flow", "single", ("n", "d")),
                              ("hybrid", "bipolar", ("n", "d", "sigma"))):
        if (df["model"] == model).any():
            parts.append(f"\nP({stat}) [95% Wilson interval] u = P(undecided); model = {model}\n\n"
                         + _markdown_table(df, stat, model, keys))
    return "".join(parts)
