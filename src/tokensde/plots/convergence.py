"""Log-log convergence figure: weak and strong errors of the L-layer network against the SDE.

Reads a `tokensde.analysis.convergence.ConvergenceResult` (or its JSON dict); never simulates. Resolved
points carry 95% Monte Carlo intervals; a point whose error is within `RESOLVE_Z` standard errors
of zero is drawn as an upper limit (hollow down-triangle at |e| + 1.96 se) and left out of the fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from ..analysis.convergence import _LEVEL_Z, ConvergenceResult
from .style import _COLORS, _new_figure, _save, _styled

__all__ = ["plot_convergence"]

_GUIDE = {"weak": 1.0, "strong": 0.5}


def _result(data: ConvergenceResult | dict[str, Any]) -> ConvergenceResult:
    return data if isinstance(data, ConvergenceResult) else ConvergenceResult.from_dict(data)


def _rows(res: ConvergenceResult, problem: str, law: str, kind: str, stat: str
          ) -> list[dict[str, Any]]:
    return [p for p in res.points if (p["problem"], p["law"], p["kind"], p["statistic"])
            == (problem, law, kind, stat)]


def _fit_label(fit: dict[str, Any]) -> str:
    """'order 1.02 [0.95, 1.09]' (bootstrap 95% interval) or 'no fit (...)'."""
    if fit.get("order") is None:
        return f"no fit ({len(fit.get('levels', []))} resolved levels)"
    return f"order {fit['order']:.2f} [{fit['boot_lo']:.2f}, {fit['boot_hi']:.2f}]"


def _series(ax: Axes, rows: list[dict[str, Any]], fit: dict[str, Any], color: str, marker: str,
            label: str, draw_fit: bool = True) -> None:
    """One curve: resolved points with 95% bars, upper limits, and the fitted line."""
    L = np.array([r["L"] for r in rows], dtype=float)
    e = np.abs([r["error"] for r in rows])
    half = _LEVEL_Z * np.array([r["se"] for r in rows])
    ok = np.array([r["resolved"] for r in rows])
    used = np.array([r["used"] for r in rows])
    ax.errorbar(L[ok], e[ok], yerr=half[ok], fmt=marker, color=color, ms=4.5, capsize=2, lw=1.0)
    if (~ok).any():
        ax.plot(L[~ok], e[~ok] + half[~ok], "v", color=color, mfc="none", ms=5)
    if (ok & ~used).any():  # resolved but outside the fitted range: white centre
        ax.plot(L[ok & ~used], e[ok & ~used], marker, color="white", ms=2)
    if draw_fit and fit.get("order") is not None:
        lf = np.array(fit["levels"], dtype=float)
        ax.plot(lf, fit["constant"] * lf ** -fit["order"], "-", color=color, lw=1.3,
                label=f"{label}: {_fit_label(fit)}")
    elif draw_fit:
        ax.plot([], [], marker, color=color, label=f"{label}: {_fit_label(fit)}")
    else:
        ax.plot(L, e, ":", color=color, lw=1.0, label=label)


def _panel(ax: Axes, res: ConvergenceResult, problem: str, kind: str, stats: list[str]) -> None:
    for law in res.settings["laws"]:
        for k, stat in enumerate(stats):
            rows = _rows(res, problem, law, kind, stat)
            if not rows:
                continue
            fit = res.fit(problem, law, kind, stat)
            pathwise = kind == "weak" or law == "gaussian"
            if not pathwise and k < len(stats) - 1:
                continue
            t = rows[0].get("t")
            label = law if t is None or len(stats) == 1 else f"{law}, t={t:g}"
            if not pathwise:
                label = f"{law}, t={t:g} (quantile-coupled: no pathwise limit)"
            marker = "o" if k == len(stats) - 1 else "s"
            color = _COLORS[law] if k == len(stats) - 1 else _COLORS["accent"]
            _series(ax, rows, fit, color, marker, label, draw_fit=pathwise)
    _guide(ax, res, problem, kind, stats[-1])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("layers L")
    ax.legend(loc="best", fontsize=6.5)


def _guide(ax: Axes, res: ConvergenceResult, problem: str, kind: str, stat: str) -> None:
    rows = [r for r in _rows(res, problem, "gaussian", kind, stat) if r["resolved"]]
    if not rows:
        return
    L0, e0 = rows[0]["L"], abs(rows[0]["error"])
    L = np.array([r["L"] for r in _rows(res, problem, "gaussian", kind, stat)], dtype=float)
    p = _GUIDE[kind]
    ax.plot(L, 1.6 * e0 * (L / L0) ** -p, "--", color="#9a9a9a", lw=0.9,
            label=f"slope -{p:g} guide")


def _title(res: ConvergenceResult, problem: str) -> str:
    meta = next(m for m in res.problems if m["name"] == problem)
    pp = meta["params"]
    return f"n={pp['n']}, d={pp['d']}, beta={pp['beta']:g}, T={meta['T']:g}"


def plot_convergence(data: ConvergenceResult | dict[str, Any], path: str | Path) -> Path:
    """Weak errors of each statistic and the strong errors, one row per problem, log-log."""
    res = _result(data)
    problems = [m["name"] for m in res.problems]
    panels = []
    for prob in problems:
        def keys(kind: str, prob: str = prob) -> list[str]:
            return list(dict.fromkeys(p["statistic"] for p in res.points
                                      if p["problem"] == prob and p["kind"] == kind))
        strong = sorted(keys("strong"), key=lambda s: s != "rms_token_error")[::-1]
        panels.append([("weak", [s]) for s in keys("weak")] + [("strong", strong)])
    ncol = max(len(row) for row in panels)
    with _styled():
        fig = _new_figure(3.4 * ncol, 3.1 * len(problems))
        axes = fig.subplots(len(problems), ncol, squeeze=False)
        for i, prob in enumerate(problems):
            for j in range(ncol):
                ax = axes[i][j]
                if j >= len(panels[i]):
                    ax.set_visible(False)
                    continue
                kind, stats = panels[i][j]
                _panel(ax, res, prob, kind, stats)
                if kind == "weak":
                    label = next(p["label"] for p in res.points if p["problem"] == prob
                                 and p["statistic"] == stats[0])
                    ax.set_title(f"weak: {label}", fontsize=9)
                else:
                    ax.set_title("strong: rms token error (shared path)", fontsize=9)
                if j == 0:
                    ax.set_ylabel(f"{_title(res, prob)}\n|error|")
        fig.suptitle("L-layer network vs SDE on shared Brownian paths (95% MC intervals; "
                     "hollow triangles: upper limits, not fitted)", fontsize=9)
    return _save(fig, path)
