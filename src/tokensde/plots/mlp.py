"""Two tokens with a random MLP block (docs/variants.md §5), from a saved `two_token` sweep (the
study's `mlp-<size>.toml`): the probability of first coming within `tol` of antipodal, against
beta and against tol, with the exact first-passage curves of `tokensde.theory.mlp_block`. Reads the
table only; never simulates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..theory.coefficients import pair_model
from ..theory.first_passage import hitting_probability
from .style import _new_figure, _save, _styled


def _arm(row: dict[str, Any]) -> str:
    """The model a cell runs, in words (the MLP fields are absent or nan for the spec model)."""
    mlp = row.get("mlp")
    if not isinstance(mlp, str) or mlp == "none":
        return "spec model (no MLP)"
    return f"{mlp} MLP, mlp_sigma = {float(row['mlp_sigma']):g}"


def _mlp_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The table with an `arm` column and a `panel` column: 'tol' for the cells at the beta with
    the most tolerances, 'beta' for the others; sorted."""
    star = df.groupby("beta")["tol"].nunique().idxmax()
    out = df.assign(arm=[_arm(r) for r in df.to_dict("records")],
                    panel=np.where(df["beta"] == star, "tol", "beta"))
    return out.sort_values(["panel", "arm", "beta", "tol"], ignore_index=True)


def _theory_curve(row: dict[str, Any], beta: Any, tol: Any) -> np.ndarray:
    """Exact P(within tol of -1 before within tol of +1) of the arm of `row` (vectorised)."""
    d, rho0 = float(row["d"]), row["rho0"]
    r0: float | str = rho0 if isinstance(rho0, str) else float(rho0)
    mlp = row.get("mlp")
    name = mlp if isinstance(mlp, str) else "none"
    scale = float(row["mlp_sigma"]) if isinstance(mlp, str) else 1.0
    b, t = np.broadcast_arrays(np.asarray(beta, float), np.asarray(tol, float))
    return np.array([hitting_probability(pair_model(bb, d, mlp=name, mlp_sigma=scale), r0, tt)
                     for bb, tt in
                     zip(b.ravel(), t.ravel(), strict=True)]).reshape(b.shape)


def _points(ax: Any, g: pd.DataFrame, x: str, k: int, label: str) -> None:
    p = g["p_anti"].to_numpy()
    err = np.vstack([p - g["ci_lo"].to_numpy(), g["ci_hi"].to_numpy() - p])
    ax.errorbar(g[x].to_numpy(), p, yerr=np.clip(err, 0, None), ls="none", marker="os^vD"[k % 5],
                ms=4, capsize=2, color=f"C{k}", label=label)


def _plot_mlp(df: pd.DataFrame, path: str | Path) -> Path:
    """Left: P(first within tol of antipodal) against beta per arm, exact curves; right: the same
    against tol at one beta, the curves continued to tol = 1e-8 (95 % Wilson intervals)."""
    rows = df if "arm" in df.columns else _mlp_rows(df)
    color = {name: k for k, name in enumerate(sorted(rows["arm"].unique()))}  # one per arm
    with _styled():
        fig = _new_figure(12.0, 4.6)
        ax0, ax1 = fig.subplots(1, 2)
        for name, g in rows[rows["panel"] == "beta"].groupby("arm", sort=True):
            k = color[name]
            _points(ax0, g, "beta", k, name)
            b = np.linspace(max(0.05, 0.9 * g["beta"].min()), 1.05 * g["beta"].max(), 40)
            ax0.plot(b, _theory_curve(g.iloc[0].to_dict(), b, g["tol"].iloc[0]), color=f"C{k}",
                     lw=1)
        ax0.set_xlabel(r"$\beta$")
        for name, g in rows[rows["panel"] == "tol"].groupby("arm", sort=True):
            k = color[name]
            _points(ax1, g, "tol", k, name)
            t = np.geomspace(1e-8, 1.2 * g["tol"].max(), 50)
            ax1.plot(t, _theory_curve(g.iloc[0].to_dict(), g["beta"].iloc[0], t), color=f"C{k}",
                     lw=1)
        ax1.set_xscale("log")
        ax1.set_xlabel("tol")
        for ax in (ax0, ax1):
            ax.set_ylabel("P(within tol of antipodal first)")
            ax.set_ylim(0, None)
            ax.legend(fontsize=7, loc="best")
        r = rows.iloc[0]
        ax0.set_title(f"tol = {rows[rows['panel'] == 'beta']['tol'].max():g}", fontsize=9)
        ax1.set_title(f"beta = {rows[rows['panel'] == 'tol']['beta'].max():g}; lines: exact "
                      "first passage", fontsize=9)
        fig.suptitle(f"two tokens, d = {int(r['d'])}, rho0 = {r['rho0']}, every layer tested; "
                     f"{int(r['runs'])} runs a cell", fontsize=8)
    return _save(fig, path)
