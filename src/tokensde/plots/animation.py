"""Tokens in motion: an animated GIF of tokens on the circle (d = 2) and the sphere (d = 3) across
depth, from the saved table of figure `tokens-in-motion` (never re-simulates).

Input: a Parquet table written by `tokensde.io.store.write_parquet` with header kind
`MOTION_KIND`, columns d, frame, t, token, x, y, z (one row per dimension, frame and token; z = 0
on the circle). Each frame shows the tokens at one depth time with a short trail, coloured by
the cluster they end in; two clusters that are antipodal within `tol` are joined by a dashed
diameter. The sphere is drawn in orthographic projection from a view that turns slowly about
the vertical axis; tokens on the far side are pale.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.animation import PillowWriter
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba_array

from ..analysis.clusters import _check_gap_tol, _cluster_labels, analyze, is_antipodal
from ..io.store import atomic_write
from ..model.checks import ParameterError, _check_int
from .style import _check_figure, _new_figure, _styled, _token_color

__all__ = ["animate_motion"]

_MOTION_KIND = "tokensde.tokens_in_motion"
_COLUMNS = ("d", "frame", "t", "token", "x", "y", "z")
_ELEVATION = np.radians(20.0)  # of the sphere's view
_TURN = np.pi / 2  # the view turns this far about the vertical axis over the animation
_PLANE = np.eye(3)  # the circle's view: the plane itself


def _read_motion(path: str | os.PathLike) -> pd.DataFrame:
    """The saved table of token positions at `path`, its settings in `attrs['settings']`.

    Args:
        path: A Parquet file written for figure `tokens-in-motion`.

    Returns:
        The table (columns `COLUMNS`).

    Raises:
        FileNotFoundError: No file at `path` (names the command that makes it).
        StoreError: The file is damaged, foreign or lacks a column.
    """
    from ..io.store import StoreError, read_parquet

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no saved tokens-in-motion table at {path}; the animation is drawn from saved "
            "data only: make it with `tokensde figure tokens-in-motion --out DIR` (it writes "
            "DIR/data/tokens-in-motion-<size>.parquet)")
    table, meta = read_parquet(path, _MOTION_KIND)
    df = table.to_pandas()
    missing = [c for c in _COLUMNS if c not in df.columns]
    if missing:
        raise StoreError(f"{path} lacks the columns {missing}; delete it to recompute it")
    df.attrs["settings"] = meta.get("settings")
    return df


def _positions(table: pd.DataFrame, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Depth times `(K,)` and token positions `(K, n, d)` of dimension `d` in `table`."""
    rows = table[table["d"] == d].sort_values(["frame", "token"])
    if rows.empty:
        raise ParameterError(f"d must be one of {sorted(set(table['d']))} in this table; got {d}")
    K, n = rows["frame"].nunique(), rows["token"].nunique()
    xyz = rows[["x", "y", "z"]].to_numpy(np.float64).reshape(K, n, 3)[..., :d]
    return rows["t"].to_numpy(np.float64)[::n], xyz


def _formation(table: pd.DataFrame, d: int, tol: float) -> list[dict[str, Any]]:
    """Per frame of dimension `d`: depth time, cluster label of each token (tokens within
    1 - <x_i, x_j> < tol, chained), pairs of antipodal clusters of two or more tokens each
    (1 + <x_a, x_b> < tol, as token indices), the number of clusters, the largest cluster and
    whether the tokens are bipolar (exactly two clusters, antipodal)."""
    times, xs = _positions(table, d)
    gram = np.einsum("kid,kjd->kij", xs, xs)
    labels = _cluster_labels(gram, tol)
    rep = analyze(gram, tol)
    out = []
    for k, t in enumerate(times):
        roots, sizes = np.unique(labels[k], return_counts=True)
        roots = roots[sizes >= 2]  # a formation is made of clusters, not of lone tokens
        anti = is_antipodal(gram[k][np.ix_(roots, roots)], tol)
        pairs = [(int(roots[a]), int(roots[b])) for a, b in zip(*np.nonzero(np.triu(anti)),
                                                                strict=True)]
        out.append({"t": float(t), "labels": labels[k], "pairs": pairs,
                    "clusters": int(rep.n_clusters[k]), "antipodal_pairs": len(pairs),
                    "largest": int(rep.cluster_sizes[k, 0]), "bipolar": bool(rep.bipolar[k])})
    return out


def _final_colors(labels: np.ndarray) -> list[str]:
    """A colour per token: that of its final cluster, clusters ranked by size."""
    roots, counts = np.unique(labels, return_counts=True)
    rank = {int(r): i for i, r in enumerate(roots[np.lexsort((roots, -counts))])}
    return [_token_color(rank[int(lab)]) for lab in labels]


def _view(k: int, frames: int) -> np.ndarray:
    """Orthographic projection `(3, 3)`: rows right, up and towards the viewer."""
    az = np.radians(35.0) + _TURN * k / max(frames - 1, 1)
    ce, se = np.cos(_ELEVATION), np.sin(_ELEVATION)
    return np.array([[-np.sin(az), np.cos(az), 0.0],
                     [-se * np.cos(az), -se * np.sin(az), ce],
                     [ce * np.cos(az), ce * np.sin(az), se]])


class _Panel:
    """The artists of one dimension's panel, made once and moved frame by frame."""

    def __init__(self, ax: Axes, xs: np.ndarray, colors: list[str], sphere: bool,
                 trail: int) -> None:
        self.ax, self.xs, self.sphere, self.trail = ax, xs, sphere, trail
        self.rgba = to_rgba_array(colors)
        s = np.linspace(0, 2 * np.pi, 181)
        self.ring = np.vstack([np.cos(s), np.sin(s), np.zeros_like(s)])
        ax.plot(self.ring[0], self.ring[1], color="#b5b5b5", lw=0.9)
        self.equator = [ax.plot([], [], ls, color="#d0d0d0", lw=0.7)[0] for ls in ("-", ":")]
        self.trails = [ax.plot([], [], color=c, lw=1.0, alpha=0.45)[0] for c in colors]
        self.diameters = ax.plot([], [], "--", color="#555555", lw=0.9)[0]
        self.dots = ax.scatter(np.zeros(len(colors)), np.zeros(len(colors)), s=36,
                               edgecolors="white", linewidths=0.5, zorder=3)
        ax.set_aspect("equal")
        ax.set_xlim(-1.12, 1.12)
        ax.set_ylim(-1.12, 1.12)
        ax.set_axis_off()

    def update(self, k: int, form: dict[str, Any], view: np.ndarray) -> None:
        """Show frame `k`: projected trails, antipodal diameters and tokens (far ones pale)."""
        p = np.einsum("ij,knj->kni", view[:, :self.xs.shape[2]], self.xs)  # (K, n, 3)
        if self.sphere:  # the equator, far half dotted
            eq = view @ self.ring
            for line, front in zip(self.equator, (True, False), strict=True):
                keep = (eq[2] >= 0) == front
                line.set_data(np.where(keep, eq[0], np.nan), np.where(keep, eq[1], np.nan))
        lo = max(0, k - self.trail)
        for i, line in enumerate(self.trails):
            line.set_data(p[lo:k + 1, i, 0], p[lo:k + 1, i, 1])
        seg = [[p[k, a, j], p[k, b, j], np.nan] for a, b in form["pairs"] for j in (0, 1)]
        self.diameters.set_data(np.ravel(seg[0::2]), np.ravel(seg[1::2]))
        depth = p[k, :, 2] if self.sphere else np.ones(p.shape[1])
        order = np.argsort(depth, kind="stable")  # far tokens first
        near = depth[order] >= 0
        rgba = self.rgba[order].copy()
        rgba[~near, 3] = 0.35
        self.dots.set_offsets(p[k, order, :2])
        self.dots.set_facecolor([(r, g, b, a) for r, g, b, a in rgba.tolist()])
        self.dots.set_sizes(np.where(near, 36.0, 20.0))
        pairs = form["antipodal_pairs"]
        self.ax.set_title(("sphere, d = 3" if self.sphere else "circle, d = 2")
                          + f"\n{form['clusters']} clusters, {pairs} antipodal pair"
                          + ("" if pairs == 1 else "s")
                          + (" (bipolar)" if form["bipolar"] else ""), fontsize=9)


def animate_motion(source: str | os.PathLike | pd.DataFrame, path: str | os.PathLike,
                   tol: float = 1e-3, fps: int = 10, trail: int = 4, dpi: int = 80) -> Path:
    """Animated GIF of the saved token positions: one frame per depth time, a panel per
    dimension (circle d = 2, sphere d = 3).

    Args:
        source: The saved table (a Parquet file of `read_motion`) or the table itself.
        path: The GIF to write.
        tol: Merged when 1 - <x_i, x_j> < tol, antipodal when 1 + <x_i, x_j> < tol.
        fps: Frames per second.
        trail: Frames of past positions drawn behind each token.
        dpi: Resolution of the frames.

    Returns:
        The path written; the GIF has one frame per depth time of the table.
    """
    tol = _check_gap_tol(tol)
    fps, trail, dpi = _check_int("fps", fps, 1), _check_int("trail", trail, 0), _check_int("dpi", dpi, 1)
    path = _check_figure(path, "path")
    if path.suffix.lower() != ".gif":
        raise ParameterError(f"path must end in .gif (an animated GIF); got {str(path)!r}")
    table = source if isinstance(source, pd.DataFrame) else _read_motion(source)
    dims = sorted(int(d) for d in set(table["d"]))
    bad = [d for d in dims if d not in (2, 3)]
    if bad:
        raise ParameterError(f"d must be 2 or 3 in a tokens-in-motion table; got {bad}")
    data = [(d, _positions(table, d)[1], _formation(table, d, tol)) for d in dims]
    frames = min(len(f) for _, _, f in data)
    colors = [_final_colors(f[-1]["labels"]) for _, _, f in data]
    s = table.attrs.get("settings") or {}
    head = (f"n = {s['n']} tokens, beta = {s['beta']:g}, one noise path per panel\n"
            if {"n", "beta"} <= set(s) else "")
    with _styled():
        fig = _new_figure(3.3 * len(dims), 3.75 + 0.2 * bool(head))
        panels = [_Panel(fig.add_subplot(1, len(dims), j + 1), xs, c, d == 3, trail)
                  for j, ((d, xs, _), c) in enumerate(zip(data, colors, strict=True))]

        def write(tmp: Path) -> None:
            gif = tmp.with_suffix(".gif")  # Pillow picks the format from the suffix
            writer = PillowWriter(fps=fps)
            with writer.saving(fig, str(gif), dpi):
                for k in range(frames):
                    fig.suptitle(f"{head}depth time t = {data[0][2][k]['t']:.2f}", fontsize=10)
                    for panel, (d, _, form) in zip(panels, data, strict=True):
                        panel.update(k, form[k], _view(k, frames) if d == 3 else _PLANE)
                    writer.grab_frame()
            os.replace(gif, tmp)

        return atomic_write(path, write)
