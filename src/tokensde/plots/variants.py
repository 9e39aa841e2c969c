"""Two tokens under the model variants of docs/variants.md, from a saved `multi_token` sweep
with n = 2 (the study's `variants-<size>.toml`): P(antipodal) at absorption against beta for
heads and random query/key forms, with the exact curve of the spec model; and, at a fixed
horizon, the fraction of near-antipodal pairs for the three normalisation placements. Reads the
table only; never simulates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..theory import two_tokens as tt
from .style import _new_figure, _save, _styled


def _value(row: dict[str, Any], key: str, default: Any) -> Any:
    v = row.get(key, default)
    return default if v is None or (isinstance(v, float) and np.isnan(v)) else v


def _arm(row: dict[str, Any]) -> str:
    """The variant a cell runs, in words (parameters at their defaults are absent or nan)."""
    norm = _value(row, "norm", "post")
    if row.get("until") == "horizon":
        return f"{norm}-norm"
    heads, qk = int(_value(row, "heads", 1)), _value(row, "qk", "identity")
    if qk == "identity":
        return f"spec model (Q = K = I), H = {heads}"
    scale = _value(row, "qk_scale", 1.0)
    if _value(row, "qk_redraw", "run") == "layer":
        return f"{qk} forms (s = {scale:g}) redrawn every layer, H = {heads}"
    return f"{qk} forms (s = {scale:g}) fixed per run, H = {heads}"


def _forms_redrawn(row: dict[str, Any]) -> float | None:
    """The scale of a cell's GOE forms when they are redrawn every layer (an exact two-token
    theory exists then, `tokensde.theory.redrawn_forms`), else None."""
    if _value(row, "qk", "identity") == "goe" and _value(row, "qk_redraw", "run") == "layer":
        return float(_value(row, "qk_scale", 1.0))
    return None


def _variant_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The table with an `arm` column, sorted by arm and beta."""
    out = df.assign(arm=[_arm(r) for r in df.to_dict("records")])
    return out.sort_values(["arm", "beta"], ignore_index=True)


def _panel(ax: Any, rows: pd.DataFrame) -> None:
    for k, (name, g) in enumerate(rows.groupby("arm", sort=True)):
        p = g["p_bipolar"].to_numpy()
        err = np.vstack([p - g["p_bipolar_lo"].to_numpy(), g["p_bipolar_hi"].to_numpy() - p])
        ax.errorbar(g["beta"].to_numpy() + 0.02 * (k - 2), p, yerr=np.clip(err, 0, None),
                    marker="os^vDP<>"[k % 8], ms=4, lw=1.1, capsize=2, label=name)
    ax.set_xlabel(r"$\beta$")
    ax.legend(fontsize=7, loc="upper left")


def _plot_variants(df: pd.DataFrame, path: str | Path) -> Path:
    """Left: P(antipodal) at absorption per variant with the spec model's exact curve; right:
    near-antipodal fraction at a fixed horizon for post-, pre- and peri-norm (95 % Wilson)."""
    rows = df if "arm" in df.columns else _variant_rows(df)
    absorbed, horizon = rows[rows["until"] != "horizon"], rows[rows["until"] == "horizon"]
    d = int(rows["d"].iloc[0])
    with _styled():
        fig = _new_figure(12.0, 4.6)
        ax0, ax1 = fig.subplots(1, 2)
        if len(absorbed):
            _panel(ax0, absorbed)
            b = np.linspace(0.0, float(absorbed["beta"].max()) * 1.05, 200)
            ax0.plot(b, tt.p_anti_uniform(b, d), color="k", lw=1, ls="--",
                     label="exact P_anti, spec model")
            scales = {_forms_redrawn(r) for r in absorbed.to_dict("records")} - {None}
            s = next(iter(scales), None)
            if s is not None:
                from ..theory.redrawn_forms import p_first_forms

                tol = float(absorbed["tol"].iloc[0])
                bb = np.linspace(0.1, float(absorbed["beta"].max()) * 1.05, 20)
                ax0.plot(bb, [p_first_forms(x, d, "uniform", tol, s) for x in bb], color="k",
                         lw=1, ls="-.", label=f"exact, goe forms (s = {s:g}) redrawn every layer")
            ax0.axvline(float(tt.beta_c(d)), color="0.6", lw=0.8, ls=":")
            ax0.legend(fontsize=7, loc="upper left")
            ax0.set_ylabel(f"P(antipodal), tol {absorbed['tol'].iloc[0]:g}")
            ax0.set_title(f"at absorption (until decided, T <= "
                          f"{absorbed['T'].max():g})", fontsize=9)
        if len(horizon):
            _panel(ax1, horizon)
            ax1.set_ylabel(f"P(within {horizon['tol'].iloc[0]:g} of antipodal at T)")
            ax1.set_title(f"normalisation placement, fixed horizon T = "
                          f"{horizon['T'].iloc[0]:g}", fontsize=9)
        fig.suptitle(f"two tokens, d = {d}, uniform start, pure noise; "
                     f"{int(rows['runs'].iloc[0])} runs a cell; dotted: beta_c(d)", fontsize=8)
    return _save(fig, path)
