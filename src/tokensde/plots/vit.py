"""Figures of the ViT experiment, drawn from saved files only (`summary.json`, `geometry.json`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..io.store import _check_meta, _read_json
from .style import _save


def _read(source: str | os.PathLike | dict[str, Any], kind: str) -> dict[str, Any]:
    if isinstance(source, dict):
        return _check_meta(source, kind, "summary")
    path = Path(source)
    cmd = "compare" if kind.endswith("compare") else "geometry"
    return _read_json(path, kind, f"re-run `tokensde vit {cmd} --out {path.parent}` to rewrite it"
                     + (" (finished runs are reused)" if cmd == "compare" else ""))


def _title(s: dict[str, Any]) -> str:
    m, t = s["model"], s["train"]
    return (f"{s['dataset']} (train {s['data']['train']}, test {s['data']['test']}); ViT "
            f"D={m['dim']}, L={m['depth']}, {m['block']}, {m['norm']} norm; "
            f"{len(s['seeds'])} seeds, {t['epochs']} epochs")


def _plot_accuracy(summary: str | os.PathLike | dict[str, Any], out: str | os.PathLike) -> Path:
    """Left: test accuracy vs epoch per arm (mean +- sd over seeds); right: gap to default."""
    s = _read(summary, "tokensde.vit.compare")
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax, bx = fig.subplots(1, 2)
    for name, arm in s["arms"].items():
        c = 100 * np.array(arm["curves"], dtype=float)
        e = np.arange(1, c.shape[1] + 1)
        line, = ax.plot(e, c.mean(0), marker="o", ms=3, label=name)
        if c.shape[0] > 1:
            sd = c.std(0, ddof=1)
            ax.fill_between(e, c.mean(0) - sd, c.mean(0) + sd, color=line.get_color(), alpha=0.15)
        p = s["paired"].get(name)
        if p is not None:
            m = 100 * np.array([q["mean"] for q in p["per_epoch"]], dtype=float)
            lo = 100 * np.array([np.nan if q["lo"] is None else q["lo"] for q in p["per_epoch"]],
                                dtype=float)
            hi = 100 * np.array([np.nan if q["hi"] is None else q["hi"] for q in p["per_epoch"]],
                                dtype=float)
            bx.plot(e, m, marker="o", ms=3, color=line.get_color(), label=name)
            bx.fill_between(e, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set(xlabel="epoch", ylabel="test accuracy (%)", title="accuracy (band: ± 1 sd)")
    ax.legend(fontsize=8)
    bx.axhline(0.0, color="k", lw=0.8)
    bx.set(xlabel="epoch", ylabel="accuracy − default (points)",
           title="paired gap to default (band: 95 % t-interval)")
    if s["paired"]:
        bx.legend(fontsize=8)
    for axis in (ax, bx):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(_title(s), fontsize=9)
    return _save(fig, out, tight=True, style=False)


def _plot_geometry(geometry: str | os.PathLike | dict[str, Any], out: str | os.PathLike) -> Path:
    """Per arm: histogram of token cosines vs depth (heat map); last panel: fraction near +-1."""
    g = _read(geometry, "tokensde.vit.geometry")
    arms = g["arms"]
    fig = Figure(figsize=(3.3 * (len(arms) + 1), 3.6), layout="constrained")
    axes = fig.subplots(1, len(arms) + 1, squeeze=False)
    edges, depths = np.array(g["edges"]), np.array(g["depths"])
    for ax, (name, a) in zip(axes[0], arms.items(), strict=False):
        h = np.array(a["hist"], dtype=float)
        h = h / np.maximum(h.sum(1, keepdims=True), 1)
        ax.pcolormesh(np.append(depths, depths[-1] + 1) - 0.5, edges, h.T, cmap="viridis",
                      norm=PowerNorm(0.5, vmin=0.0, vmax=max(h.max(), 1e-9)), shading="flat")
        ax.plot(depths, a["mean"], color="w", lw=1)
        ax.set(title=name, xlabel="depth (block)", ylim=(-1, 1))
    axes[0][0].set_ylabel("token cosine similarity")
    last = axes[0][-1]
    for name, a in arms.items():
        line, = last.plot(depths, a["near_pos"], marker="o", ms=3, label=f"{name} ≈ +1")
        last.plot(depths, a["near_neg"], ls="--", color=line.get_color())
    last.set(xlabel="depth (block)", ylabel=f"fraction of pairs (tol {g['tol']:g})",
             title="near +1 (solid), near −1 (dashed)", ylim=(-0.02, 1.02))
    last.legend(fontsize=7)
    m = g["model"]
    fig.suptitle(f"token geometry at initialisation: {g['dataset']}, {g['images']} images x "
                 f"{len(g['seeds'])} models; ViT D={m['dim']}, L={m['depth']}, {m['block']}",
                 fontsize=9)
    return _save(fig, out, tight=True, style=False)


def _redraw(folder: str | os.PathLike) -> list[Path]:
    """Redraw `accuracy.png` and `geometry.png` from `summary.json` and `geometry.json` in
    `folder`, each where its file is present.

    Args:
        folder: The output directory of `tokensde vit compare` or `tokensde vit geometry`.

    Returns:
        The figures written.

    Raises:
        FileNotFoundError: `folder` holds neither file.
    """
    folder = Path(folder)
    done = []
    if (folder / "summary.json").is_file():
        done.append(_plot_accuracy(folder / "summary.json", folder / "accuracy.png"))
    if (folder / "geometry.json").is_file():
        done.append(_plot_geometry(folder / "geometry.json", folder / "geometry.png"))
    if not done:
        raise FileNotFoundError(f"{folder} holds neither summary.json nor geometry.json")
    return done
