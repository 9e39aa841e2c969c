"""The many-token figure shows undecided runs (`plots.meanfield.plot_meanfield`): the band that
they allow for the mean minority mass, a ring on the cell, and their fraction below."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from tokensde.plots import meanfield as mf_plot


def table(p_decided: float) -> pd.DataFrame:
    rows = []
    for n, m in ((16, 0.3), (64, 0.4), (0, 0.5)):
        rows.append({"d": 2, "beta": 1.0, "start": "iid", "n": n, "minority_mean": m,
                     "minority_lo": m - 0.02, "minority_hi": m + 0.02,
                     "p_decided": 1.0 if n != 64 else p_decided})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("p_decided", [0.6, 1.0])
def test_undecided_runs_get_the_band_they_allow(monkeypatch, tmp_path, p_decided):
    figs = []

    def keep(fig, path):
        figs.append(fig)
        return Path(path)

    monkeypatch.setattr(mf_plot, "_save", keep)
    mf_plot.plot_meanfield(table(p_decided), tmp_path / "f.png")
    top, low = figs[0].axes[0], figs[0].axes[1]
    bands = [c for c in top.collections if isinstance(c, PolyCollection)]
    if p_decided == 1.0:
        assert not bands
        return
    ys = np.concatenate([p.vertices[:, 1] for b in bands for p in b.get_paths()])
    # at n = 64: 0.4 x 0.6 (undecided as one cluster) to that + 0.5 x 0.4 (as an even split)
    assert np.isclose(ys, 0.24).any() and np.isclose(ys, 0.24 + 0.2).any()
    assert ys.max() <= 0.5 + 1e-12
    undecided = np.concatenate([ln.get_ydata() for ln in low.lines])
    assert np.isclose(undecided, 0.4).any()
