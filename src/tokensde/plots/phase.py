"""The two-token phase diagram (spec §5): Monte Carlo P_anti over (beta, d) against the theory.

The table is that of a `two_token` sweep (`tokensde.sweep.two_token`: one
`two_token_mc.monte_carlo` cell per (beta, d)); the plotting functions only read such a table (a
DataFrame, e.g. loaded from a saved file) and evaluate the exact theory (a few seconds of CPU
for the contours of the heatmap, kept for the process). They never simulate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..theory import two_tokens as tt
from .style import _COLORS, _TOKEN_COLORS, _new_figure, _save, _styled


def _start_of(df: pd.DataFrame) -> str | float:
    """The initial condition of the table: 'uniform' or its one `rho0`."""
    if (df["init"] == "uniform").all():
        return "uniform"
    rho0 = df["rho0"].unique()
    if len(rho0) != 1:
        raise ValueError("the table mixes initial conditions; plot one rho0 at a time")
    return float(rho0[0])


def _theory_of(df: pd.DataFrame, beta: np.ndarray, d: float) -> np.ndarray:
    """Exact `P_anti` at `beta` for dimension `d`, for the initial condition used in `df`."""
    start = _start_of(df)
    if isinstance(start, str):  # 'uniform'
        return np.asarray(tt.p_anti_uniform(beta, d))
    return np.asarray(tt.p_anti(beta, d, start))


@functools.lru_cache(maxsize=8)
def _theory_grid(start: str | float, betas: tuple[float, ...], ds: tuple[float, ...]
                 ) -> np.ndarray:
    """Exact `P_anti` on the grid `ds x betas` (rows: d) from `start` ('uniform' or `rho0`),
    kept for the process: a redraw of the same grid (a resumed sweep) does not recompute it."""
    b = np.asarray(betas)
    rows = [tt.p_anti_uniform(b, dd) if isinstance(start, str) else tt.p_anti(b, dd, start)
            for dd in ds]
    grid = np.array(rows, dtype=float)
    grid.setflags(write=False)
    return grid


def _edges(centres: np.ndarray) -> np.ndarray:
    c = np.asarray(centres, dtype=float)
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = (c[1:] + c[:-1]) / 2
    return np.concatenate([[2 * c[0] - mid[0]], mid, [2 * c[-1] - mid[-1]]])


def _init_label(df: pd.DataFrame) -> str:
    if (df["init"] == "uniform").all():
        return "uniform random pair"
    return f"rho0 = {df['rho0'].iloc[0]:g}"


def _draw_heatmap(ax: Any, df: pd.DataFrame) -> Any:
    """MC `P_anti` over the (beta, d) grid, the critical curve `beta_c(d)` and theory contours."""
    # dropna=False keeps the cells where no run decided (p_anti nan) on the grid
    table = df.pivot_table(index="d", columns="beta", values="p_anti", dropna=False)
    undecided = df.pivot_table(index="d", columns="beta", values="p_undecided", dropna=False)
    betas, ds = table.columns.to_numpy(float), table.index.to_numpy(float)
    vals = table.to_numpy(float)  # nan where no run decided (docs/reporting.md)
    vmax = max(0.5, float(np.nanmax(vals))) if np.isfinite(vals).any() else 1.0
    mesh = ax.pcolormesh(_edges(betas), _edges(ds), table.to_numpy(), vmin=0, vmax=vmax,
                         cmap="viridis", shading="flat")
    # uneven spacings of d can put the lowest cell edge below d = 2, where no theory exists
    fine_d = np.linspace(max(_edges(ds)[0], 2.0), _edges(ds)[-1], 200)
    ax.plot(tt.beta_c(np.maximum(fine_d, 2.0)), fine_d, color="white", lw=2.2,
            label=r"$\beta_c(d) = \frac{1}{2}\,\mathrm{arccosh}(d-2)$")
    # the contours of a smooth surface: a 60 x 80 grid (one engine call per point) suffices
    fb = np.linspace(_edges(betas)[0], _edges(betas)[-1], 60)
    contour_d = np.linspace(fine_d[0], fine_d[-1], 80)
    grid = _theory_grid(_start_of(df), tuple(np.maximum(fb, 0.0).tolist()),
                        tuple(contour_d.tolist()))
    cs = ax.contour(fb, contour_d, grid, levels=[0.05, 0.1, 0.2, 0.3, 0.4], colors="white",
                    linewidths=0.7, linestyles="dashed")
    ax.clabel(cs, fontsize=6, fmt="%.2g")
    if betas.size * ds.size <= 160:
        for i, dd in enumerate(ds):
            for j, b in enumerate(betas):
                v, u = table.iat[i, j], undecided.iat[i, j]
                if np.isfinite(v):
                    mark = "*" if u > 0.01 else ""
                    ax.text(b, dd, f"{v:.2f}{mark}", ha="center", va="center", fontsize=5.5,
                            color="white" if v < 0.6 * vmax else "black")
    ax.set(xlabel=r"$\beta$", ylabel="d", xlim=(_edges(betas)[0], _edges(betas)[-1]),
           ylim=(_edges(ds)[0], _edges(ds)[-1]),
           title=f"Monte Carlo $P_{{anti}}$ ({_init_label(df)}); dashed: theory")
    ax.grid(False)
    ax.legend(loc="upper left", fontsize=7, labelcolor="white")
    return mesh


def _draw_curves(ax: Any, df: pd.DataFrame, ds: Sequence[int] | None = None) -> None:
    """Theory curves `P_anti(beta)` at fixed d with the Monte Carlo points and Wilson bars."""
    ds = _pick_ds(df) if ds is None else list(ds)
    betas = df["beta"].to_numpy(float)
    fb = np.linspace(0.0, betas.max() * 1.05, 300)
    for i, d in enumerate(ds):
        colour = _TOKEN_COLORS[i % len(_TOKEN_COLORS)]
        sub = df[df["d"] == d].sort_values("beta")
        ax.plot(fb, _theory_of(df, fb, d), color=colour, lw=1.3, label=f"d = {d}")
        yerr = np.vstack([sub["p_anti"] - sub["ci_lo"], sub["ci_hi"] - sub["p_anti"]])
        ax.errorbar(sub["beta"], sub["p_anti"], yerr=yerr, fmt="o", color=colour, ms=3.5,
                    capsize=2, lw=1)
        ax.axvline(tt.beta_c(d), color=colour, lw=0.8, ls=":")
    ax.plot([], [], color=_COLORS["theory"], lw=1.3, label="theory (scale function)")
    ax.errorbar([], [], yerr=[], fmt="o", color=_COLORS["theory"], label="network MC, 95% Wilson")
    ax.set(xlabel=r"$\beta$", ylabel=r"$P_{anti}$", ylim=(-0.01, None),
           title=r"theory vs simulation at fixed d (dotted: $\beta_c$)")
    ax.legend(fontsize=7)


def _pick_ds(df: pd.DataFrame, k: int = 3) -> list[int]:
    ds = sorted(df["d"].unique())
    idx = np.unique(np.round(np.linspace(0, len(ds) - 1, min(k, len(ds)))).astype(int))
    return [int(ds[i]) for i in idx]


def _caption(df: pd.DataFrame) -> str:
    first = df.iloc[0]
    per_d = (df["dt"] * df["d"]).to_numpy(float)
    dts = (f"{per_d[0]:.3g}/d" if np.allclose(per_d, per_d[0])
           else ", ".join(f"{x:g}" for x in sorted(df["dt"].unique())))
    what = "full d-dim network" if first["engine"] == "network" else "reduced 1-D diffusion"
    return (f"{what} (softmax, Gaussian matrix noise, sigma=1), {int(first['runs'])} runs per "
            f"cell, T = {first['T']:g}, dt = {dts}, tol = {first['tol']:g}, seeded per cell; "
            f"* = more than 1% undecided at T; tokensde "
            f"{first['version']}")


def _plot_phase_diagram(df: pd.DataFrame, path: str | Path, *, ds: Sequence[int] | None = None,
                       caption: str | None = None) -> Path:
    """Two panels from a saved `two_token` sweep table: the heatmap with `beta_c(d)`, and the curves."""
    with _styled():
        fig = _new_figure(11.0, 4.4)
        ax0, ax1 = fig.subplots(1, 2, width_ratios=[1.15, 1])
        mesh = _draw_heatmap(ax0, df)
        fig.colorbar(mesh, ax=ax0, label=r"$P_{anti}$ (Monte Carlo)")
        _draw_curves(ax1, df, ds)
        fig.suptitle(caption or _caption(df), fontsize=7.5)
    return _save(fig, path)


def _plot_phase_over_d(df: pd.DataFrame, path: str | Path) -> Path:
    """A `two_token` sweep table whose betas sit at offsets from `beta_c(d)`, d on a log scale: left, the
    Monte Carlo `P_anti` over `(beta, d)` with `beta_c(d)`; right, `P_anti` against
    `beta - beta_c(d)` for every d with the exact curves (theory at the tolerance, dashed)."""
    df = df.assign(offset=np.round(df["beta"] - df["beta_c"], 6))
    rho0 = float(df["rho0"].iloc[0])
    ds = sorted(int(d) for d in df["d"].unique())
    with _styled():
        fig = _new_figure(11.0, 4.4)
        ax0, ax1 = fig.subplots(1, 2, width_ratios=[1.0, 1.1])
        sc = ax0.scatter(df["beta"], df["d"], c=df["p_anti"], cmap="viridis", vmin=0, vmax=1,
                         s=90, marker="s", edgecolors="none")
        fine = np.geomspace(min(ds), max(ds), 200)
        ax0.plot(tt.beta_c(fine), fine, color=_COLORS["theory"], lw=1.5,
                 label=r"$\beta_c(d)$")
        ax0.set(xscale="linear", yscale="log", xlabel=r"$\beta$", ylabel="d (log scale)",
                title=f"Monte Carlo $P_{{anti}}$, $\\rho_0 = {rho0:g}$")
        ax0.legend(fontsize=7, loc="upper left")
        fig.colorbar(sc, ax=ax0, label=r"$P_{anti}$")
        off = np.linspace(df["offset"].min() - 0.1, df["offset"].max() + 0.1, 200)
        for i, d in enumerate(ds):
            colour = _TOKEN_COLORS[i % len(_TOKEN_COLORS)]
            sub = df[df["d"] == d].sort_values("offset")
            bc = tt.beta_c(d)
            ax1.plot(off, tt.p_anti(np.maximum(off + bc, 0.0), d, rho0), color=colour, lw=1.1,
                     label=f"d = {d}")
            yerr = np.vstack([sub["p_anti"] - sub["ci_lo"], sub["ci_hi"] - sub["p_anti"]])
            ax1.errorbar(sub["offset"], sub["p_anti"], yerr=yerr, fmt="o", color=colour, ms=3,
                         capsize=2, lw=1)
            bad = sub[sub["outside"].astype(bool)]
            ax1.scatter(bad["offset"], bad["p_anti"], s=80, facecolors="none",
                        edgecolors="red", lw=1.2)
        ax1.scatter([], [], s=80, facecolors="none", edgecolors="red",
                    label="interval excludes theory at tol")
        ax1.axvline(0.0, color="black", lw=0.8, ls=":")
        ax1.set(xlabel=r"$\beta - \beta_c(d)$", ylabel=r"$P_{anti}$",
                title="theory (lines) vs network (95% Wilson)")
        ax1.legend(fontsize=6.5, ncol=2)
        fig.suptitle(_caption(df), fontsize=7.5)
    return _save(fig, path)


def _plot_theory_vs_mc(df: pd.DataFrame, path: str | Path, ds: Sequence[int] | None = None
                      ) -> Path:
    """The theory-vs-simulation panel alone."""
    with _styled():
        fig = _new_figure(5.5, 4.0)
        _draw_curves(fig.subplots(), df, ds)
    return _save(fig, path)


def _plot_decision_times(two: dict[str, np.ndarray], many: dict[str, np.ndarray],
                        path: str | Path, tol2: float, tol_n: float,
                        horizons: tuple[float, float] = (math.inf, math.inf)) -> Path:
    """Survival `P(still undecided at t)`: two-token cells (steps) against the exact survival
    (dashed); many-token cells (steps). Keys: `'beta,d'` and `'n,d,beta'`; values are
    decision times (nan: undecided at the horizon) and, for two tokens, `'theory:...'` curves
    on the grid `'t'`."""
    from ..theory import decision_time as absorption

    with _styled():
        fig = _new_figure(11.0, 4.2)
        ax0, ax1 = fig.subplots(1, 2)
        for i, (key, times) in enumerate(sorted((k, v) for k, v in two.items() if "," in k
                                                and not k.startswith("t"))):
            beta, d = (float(v) for v in key.split(","))
            colour = _TOKEN_COLORS[i % len(_TOKEN_COLORS)]
            _survival_steps(ax0, times, colour, f"beta={beta:g}, d={d:g}", horizons[0])
            grid = np.linspace(0.0, float(np.nanmax(times)) if np.isfinite(times).any() else 1.0,
                               200)
            ax0.plot(grid, absorption.survival(grid, beta, d, "uniform", tol2), color=colour,
                     ls="--", lw=1)
        ax0.plot([], [], color=_COLORS["theory"], ls="--", label="exact survival (§5 diffusion)")
        ax0.set(yscale="log", ylim=(1e-3, 1.2), xlabel="depth time t",
                ylabel="P(undecided at t)",
                title=f"two tokens, uniform pair, tol = {tol2:g}: network vs theory")
        ax0.legend(fontsize=7)
        for i, (key, times) in enumerate(sorted(many.items())):
            _survival_steps(ax1, times, _TOKEN_COLORS[i % len(_TOKEN_COLORS)],
                            "n={}, d={}, beta={}".format(*key.split(",")), horizons[1])
        ax1.set(yscale="log", ylim=(1e-3, 1.2), xlabel="depth time t",
                ylabel="P(undecided at t)",
                title=f"many tokens, tol = {tol_n:g} (the curve ends at the maximum horizon)")
        ax1.legend(fontsize=7)
    return _save(fig, path)


def _survival_steps(ax: Any, times: np.ndarray, colour: str, label: str,
                    horizon: float = math.inf) -> None:
    """Empirical survival as steps; runs undecided at `horizon` hold the last level up to it."""
    t = np.sort(np.where(np.isnan(times), np.inf, times))
    n = len(t)
    done = t[np.isfinite(t)]
    x = np.concatenate([[0.0], done])
    y = 1.0 - np.arange(len(x)) / n
    if len(done) < n and math.isfinite(horizon):
        x, y = np.append(x, horizon), np.append(y, y[-1])
    ax.step(x, np.maximum(y, 0.5 / n), where="post", color=colour, lw=1.4, label=label)


def _plot_sweep(df: pd.DataFrame, out_dir: str | Path, prefix: str = "phase") -> Path:
    """The figure of a `two_token` sweep table: `plot_phase_over_d` when its cells sit at
    `beta_offset` from `beta_c(d)`, else `plot_phase_diagram`; `OUT_DIR/<prefix>.png`."""
    path = Path(out_dir) / f"{prefix}.png"
    if "beta_offset" in df.columns and df["beta_offset"].notna().all():
        return _plot_phase_over_d(df, path)
    return _plot_phase_diagram(df, path)
