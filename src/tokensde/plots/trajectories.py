"""Tokens moving on the circle (d = 2) and the sphere (d = 3): noisy network vs deterministic flow.

Input: `SimResult`s recorded with `record=('gram', 'tokens')` and several checkpoints, in R^d
coordinates (not the Gram sampler's frame). The still figure draws whole paths: on the circle the
radius encodes depth time (a spiral from t = 0 inside to t = T outside); on the sphere the paths
are drawn on a wireframe. The animation (GIF, matplotlib's PillowWriter) shows positions with a
short trail, frame by checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.animation import PillowWriter
from matplotlib.axes import Axes

from ..io.store import atomic_write
from .style import _COLORS, _new_figure, _save, _styled, _token_color

_Panel = tuple[str, Any]  # (title, SimResult)


def _token_paths(result: Any, run: int = 0) -> np.ndarray:
    """Token coordinates of one run across checkpoints, `(K, n, d)`; ValueError if not recorded."""
    if result.tokens is None:
        raise ValueError("trajectories need a result recorded with record=('gram', 'tokens')")
    toks = np.asarray(result.tokens[run])
    if toks.shape[-1] != result.params.d:
        raise ValueError("trajectories need tokens in R^d coordinates (sampler 'fast' or 'full', "
                         f"not the Gram frame); got width {toks.shape[-1]} for d={result.params.d}")
    return toks


def _circle_paths(ax: Axes, toks: np.ndarray, times: np.ndarray) -> None:
    theta = np.unwrap(np.arctan2(toks[..., 1], toks[..., 0]), axis=0)
    r = 0.35 + 0.65 * times / max(times[-1], 1e-12)
    ring = np.linspace(0, 2 * np.pi, 200)
    for rr, ls in ((r[0], ":"), (r[-1], "-")):
        ax.plot(rr * np.cos(ring), rr * np.sin(ring), ls, color="#c8c8c8", lw=0.8)
    for i in range(toks.shape[1]):
        c = _token_color(i)
        ax.plot(r * np.cos(theta[:, i]), r * np.sin(theta[:, i]), color=c, lw=1.2)
        ax.plot(r[0] * np.cos(theta[0, i]), r[0] * np.sin(theta[0, i]), "o", mfc="white", mec=c)
        ax.plot(r[-1] * np.cos(theta[-1, i]), r[-1] * np.sin(theta[-1, i]), "o", color=c, ms=6)
    ax.set_aspect("equal")
    ax.set_xlim(-1.08, 1.08)
    ax.set_ylim(-1.08, 1.08)
    ax.set_axis_off()


def _sphere(ax: Any) -> None:
    u, v = np.mgrid[0:2 * np.pi:25j, 0:np.pi:13j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="#d5d5d5",
                      lw=0.4)
    ax.set_box_aspect((1, 1, 1))
    ax.set_axis_off()
    ax.view_init(elev=22, azim=35)


def _sphere_paths(ax: Any, toks: np.ndarray) -> None:
    _sphere(ax)
    for i in range(toks.shape[1]):
        c = _token_color(i)
        ax.plot(toks[:, i, 0], toks[:, i, 1], toks[:, i, 2], color=c, lw=0.8, alpha=0.85)
        ax.scatter(*toks[0, i], s=14, facecolors="white", edgecolors=c, depthshade=False)
        ax.scatter(*toks[-1, i], s=30, color=c, depthshade=False)


def _grid(panels: Sequence[_Panel]) -> tuple[list[int], int]:
    dims = sorted({res.params.d for _, res in panels})
    for d in dims:
        if d not in (2, 3):
            raise ValueError(f"trajectories are drawn for d = 2 or 3; got d = {d}")
    ncol = max(sum(res.params.d == d for _, res in panels) for d in dims)
    return dims, ncol


def _axes(fig: Any, panels: Sequence[_Panel]) -> list[tuple[Any, str, Any]]:
    dims, ncol = _grid(panels)
    out = []
    for row, d in enumerate(dims):
        col = 0
        for title, res in panels:
            if res.params.d != d:
                continue
            proj = "3d" if d == 3 else None
            ax = fig.add_subplot(len(dims), ncol, row * ncol + col + 1, projection=proj)
            out.append((ax, title, res))
            col += 1
    return out


def _describe(res: Any) -> str:
    p = res.params
    kind = "deterministic flow" if p.noise_scale == 0 else f"noise sigma={p.noise_scale:g}"
    return f"d={p.d}, n={p.n}, beta={p.beta:g}, mean={p.mean_kind}, {kind}"


def _plot_trajectories(panels: Sequence[_Panel], path: str | Path, run: int = 0) -> Path:
    """Whole token paths of run `run`, one panel per (title, result); rows by dimension."""
    with _styled():
        dims, ncol = _grid(panels)
        fig = _new_figure(3.6 * ncol, 3.5 * len(dims))
        for ax, title, res in _axes(fig, panels):
            toks = _token_paths(res, run)
            if res.params.d == 2:
                _circle_paths(ax, toks, res.times)
                ax.set_title(f"{title}\n(radius = depth time, T = {res.times[-1]:g})",
                             fontsize=9)
            else:
                _sphere_paths(ax, toks)
                ax.set_title(f"{title} (T = {res.times[-1]:g})", fontsize=9)
            text = ax.text2D if hasattr(ax, "text2D") else ax.text
            text(0.5, -0.04, _describe(res), transform=ax.transAxes, ha="center", fontsize=7,
                 color="#555555")
        fig.suptitle("Tokens across depth: hollow = start, filled = end, one colour per token",
                     fontsize=9, color=_COLORS["theory"])
    return _save(fig, path)


def _short(res: Any) -> str:
    kind = "deterministic flow" if res.params.noise_scale == 0 else "random network"
    return f"{kind}, d = {res.params.d}"


def _frame(fig: Any, axes: list[tuple[Any, str, Any]], paths: list[np.ndarray], k: int,
           trail: int) -> None:
    fig.suptitle(f"depth time t = {axes[0][2].times[k]:.2f}", fontsize=10)
    for (ax, _, res), toks in zip(axes, paths, strict=True):
        ax.cla()
        lo = max(0, k - trail)
        if res.params.d == 2:
            ring = np.linspace(0, 2 * np.pi, 200)
            ax.plot(np.cos(ring), np.sin(ring), color="#c8c8c8", lw=0.8)
            for i in range(toks.shape[1]):
                c = _token_color(i)
                ax.plot(toks[lo:k + 1, i, 0], toks[lo:k + 1, i, 1], color=c, lw=1.0, alpha=0.6)
                ax.plot(toks[k, i, 0], toks[k, i, 1], "o", color=c, ms=6)
            ax.set_aspect("equal")
            ax.set_xlim(-1.15, 1.15)
            ax.set_ylim(-1.15, 1.15)
            ax.set_axis_off()
        else:
            _sphere(ax)
            for i in range(toks.shape[1]):
                c = _token_color(i)
                ax.plot(toks[lo:k + 1, i, 0], toks[lo:k + 1, i, 1], toks[lo:k + 1, i, 2],
                        color=c, lw=1.0, alpha=0.6)
                ax.scatter(*toks[k, i], s=30, color=c, depthshade=False)
        ax.set_title(_short(res), fontsize=9)


def _animate_trajectories(panels: Sequence[_Panel], path: str | Path, run: int = 0,
                         fps: int = 10, trail: int = 8, max_frames: int = 60, dpi: int = 80
                         ) -> Path:
    """Animated GIF of the tokens of run `run`, one frame per (sub-sampled) checkpoint."""
    K = min(len(res.checkpoints) for _, res in panels)
    frames = np.unique(np.round(np.linspace(0, K - 1, min(K, max_frames))).astype(int))
    with _styled():
        dims, ncol = _grid(panels)
        fig = _new_figure(3.2 * ncol, 3.2 * len(dims) + 0.3)
        axes = _axes(fig, panels)
        paths = [_token_paths(res, run) for _, _, res in axes]

        def write(tmp: Path) -> None:
            gif = tmp.with_suffix(".gif")  # Pillow picks the format from the suffix
            writer = PillowWriter(fps=fps)
            with writer.saving(fig, str(gif), dpi):
                for k in frames:
                    _frame(fig, axes, paths, int(k), trail)
                    writer.grab_frame()
            os.replace(gif, tmp)

        return atomic_write(Path(path), write)
