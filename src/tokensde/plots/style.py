"""The shared look of every tokensde figure: palette, fonts, figure factory and atomic saving.

Figures are built on `matplotlib.figure.Figure` directly (no pyplot state, no GUI backend).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
from matplotlib.figure import Figure

from ..io.store import atomic_write, check_output

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

_COLORS: dict[str, str] = {
    "gaussian": "#1f5a99",
    "uniform": "#d9822b",
    "theory": "#222222",
    "noise": "#1f5a99",
    "deterministic": "#8c8c8c",
    "merged": "#b03a2e",
    "antipodal": "#2c7a4b",
    "undecided": "#b8a200",
    "accent": "#6b3fa0",
    "grid": "#e4e4e4",
}
# qualitative colours for tokens (colour-blind friendly, Okabe-Ito order)
_TOKEN_COLORS: tuple[str, ...] = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9",
                                 "#d55e00", "#f0e442", "#000000")
_SEQUENTIAL = "viridis"

_RC: dict[RcKeyType, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": _COLORS["grid"],
    "grid.linewidth": 0.6,
    "axes.edgecolor": "#555555",
    "axes.axisbelow": True,
    "legend.frameon": False,
    "legend.fontsize": 8.0,
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "lines.linewidth": 1.6,
    "lines.markersize": 4.5,
    "figure.dpi": 110,
    "savefig.dpi": 130,
    "savefig.bbox": "standard",  # constrained layout already fits; "tight" redraws
    "image.cmap": _SEQUENTIAL,
}


def _token_color(i: int) -> str:
    """Colour of token `i` (cycles)."""
    return _TOKEN_COLORS[i % len(_TOKEN_COLORS)]


@contextmanager
def _styled() -> Iterator[None]:
    """Apply the tokensde rcParams inside the block."""
    with mpl.rc_context(_RC):
        yield


def _new_figure(width: float = 7.0, height: float = 4.0) -> Figure:
    """A blank figure of `width x height` inches with constrained layout and the tokensde look.

    Build it inside `styled()` so that axes added later pick up the rcParams too.
    """
    return Figure(figsize=(width, height), layout="constrained")


# the formats matplotlib writes (its Agg, PDF, PS, SVG and PGF backends)
_FIGURE_SUFFIXES: tuple[str, ...] = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg",
                                    ".jpeg", ".tif", ".tiff", ".webp", ".gif", ".pgf")


def _check_figure(path: str | os.PathLike, name: str) -> Path:
    """`path` if a figure can be written there (`check_output`) in a format that `save` knows
    (`_FIGURE_SUFFIXES`); ParameterError naming `name` otherwise, before anything is drawn."""
    return check_output(path, name, suffixes=_FIGURE_SUFFIXES)


def _save(fig: Figure, path: str | os.PathLike, dpi: int | None = None, tight: bool = False,
         style: bool = True) -> Path:
    """Write `fig` to `path` (format from the suffix, png without one) atomically; return the
    path. Every figure of tokensde is written here.

    `dpi` defaults to the style's; `tight` crops to the drawn content (`bbox_inches`); `style`
    draws under the tokensde rcParams (tick label sizes, hence tick counts, are read at draw
    time), `False` under the current ones, for a figure not built in `styled()`.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    bbox = "tight" if tight else None
    with _styled() if style else nullcontext():
        return atomic_write(path, lambda tmp: fig.savefig(
            tmp, format=fmt, dpi=dpi or _RC["savefig.dpi"], bbox_inches=bbox))

