"""Figure `tokens-in-motion`: the saved table of token positions and the GIF drawn from it."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image as PILImage

from tokensde.model.checks import ParameterError
from tokensde.plots.animation import _formation, _read_motion, animate_motion
from tokensde.study import FIGURES, Context
from tokensde.study.animation import (
    _MOTION_DIMS,
    _MOTION_FRAMES,
    _MOTION_TOKENS,
    _NAME,
    MOTION_T,
    _motion_data,
    _motion_layers,
    _motion_table,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny-size data step, run once: (context, table)."""
    ctx = Context(tmp_path_factory.mktemp("motion"), "tiny", seed=3, workers=1, progress=False)
    table, reused = _motion_data(ctx)
    assert reused is False
    return ctx, table


def test_the_saved_positions_lie_on_the_circle_and_the_sphere(tiny):
    _, table = tiny
    frames = _MOTION_FRAMES["tiny"]
    assert len(table) == len(_MOTION_DIMS) * frames * _MOTION_TOKENS
    xyz = table[["x", "y", "z"]].to_numpy()
    np.testing.assert_allclose(np.linalg.norm(xyz, axis=1), 1.0, rtol=0, atol=1e-10)
    assert np.all(table.loc[table["d"] == 2, "z"] == 0.0)  # the circle lies in the plane z = 0
    for d in _MOTION_DIMS:
        t = np.sort(table.loc[table["d"] == d, "t"].unique())
        np.testing.assert_allclose(t, np.linspace(0.0, MOTION_T, frames), atol=1e-12)


def test_the_start_is_spread_and_the_tokens_move(tiny):
    # i.i.d. uniform tokens: 24 of them are not yet one cluster; the noise moves every token
    _, table = tiny
    for d in _MOTION_DIMS:
        form = _formation(table, d, 1e-3)
        assert form[0]["clusters"] > _MOTION_TOKENS // 2
        rows = table[table["d"] == d]
        first = rows[rows["frame"] == 0][["x", "y", "z"]].to_numpy()
        last = rows[rows["frame"] == rows["frame"].max()][["x", "y", "z"]].to_numpy()
        assert np.min(np.linalg.norm(first - last, axis=1)) > 1e-3


def test_same_seed_same_table_other_seed_other_table(tiny):
    _, table = tiny
    again = _motion_table(3, _MOTION_FRAMES["tiny"])
    np.testing.assert_array_equal(again[["x", "y", "z"]].to_numpy(),
                                  table[["x", "y", "z"]].to_numpy())
    other = _motion_table(4, _MOTION_FRAMES["tiny"])
    assert not np.allclose(other[["x", "y", "z"]].to_numpy(), table[["x", "y", "z"]].to_numpy())


def test_the_saved_table_is_reused_and_read_back_exactly(tiny, monkeypatch):
    ctx, table = tiny
    monkeypatch.setattr("tokensde.study.animation._motion_table",
                        lambda *a, **k: pytest.fail("re-ran a saved simulation"))
    again, reused = _motion_data(ctx)
    assert reused is True
    np.testing.assert_array_equal(again[["x", "y", "z"]].to_numpy(),
                                  table[["x", "y", "z"]].to_numpy())
    assert again.attrs["settings"]["seed"] == 3


def test_the_gif_has_one_frame_per_depth_time(tiny):
    ctx, table = tiny
    sec = FIGURES[_NAME].draw(ctx, FIGURES[_NAME], table, False)
    gif = sec.images[0].path
    assert gif.suffix == ".gif" and sec.provenance["reused"] is False
    with PILImage.open(gif) as im:
        assert im.format == "GIF"
        assert im.n_frames == _MOTION_FRAMES["tiny"]
    assert sec.tables[0].rows[0][:3] == [_MOTION_TOKENS, 2, 3.0]


def test_the_drawing_refuses_a_missing_data_file(tmp_path):
    missing = tmp_path / "data" / "tokens-in-motion-quick.parquet"
    with pytest.raises(FileNotFoundError, match=r"no saved tokens-in-motion table.*tokensde figure"):
        animate_motion(missing, tmp_path / "motion.gif")
    with pytest.raises(FileNotFoundError, match="no saved tokens-in-motion table"):
        _read_motion(missing)
    assert not (tmp_path / "motion.gif").exists()


def test_bad_drawing_options_are_refused(tiny, tmp_path):
    _, table = tiny
    with pytest.raises(ParameterError, match=r"path must end in \.gif"):
        animate_motion(table, tmp_path / "motion.png")
    with pytest.raises(ParameterError, match="fps"):
        animate_motion(table, tmp_path / "motion.gif", fps=0)


def test_layers_are_evenly_spaced_with_both_ends():
    assert _motion_layers(5, 800) == [0, 200, 400, 600, 800]
    assert _motion_layers(2, 7) == [0, 7]
    with pytest.raises(ParameterError, match="frames"):
        _motion_layers(1, 800)


def _table(frames: list[np.ndarray]):
    """A motion table of one dimension from positions `(n, d)` per frame."""
    import pandas as pd

    rows = []
    for k, xs in enumerate(frames):
        for i, x in enumerate(xs):
            rows.append({"d": xs.shape[1], "frame": k, "t": 0.5 * k, "token": i, "x": x[0],
                         "y": x[1], "z": x[2] if xs.shape[1] == 3 else 0.0})
    return pd.DataFrame(rows)


def test_formation_counts_clusters_and_antipodal_pairs_of_known_configurations():
    e = np.array([0.6, 0.0, 0.8])
    spread = np.eye(3)[[0, 1, 2, 0]] * [[1], [1], [1], [-1]]  # +e1, e2, e3, -e1: no clusters
    bipolar = np.array([e, e, e, -e, -e])
    # a near-antipodal pair of clusters, off by an angle of 0.1: 1 + <x, y> = 1 - cos(0.1) > 1e-3
    tilt = np.array([0.6 * np.cos(0.1) + 0.8 * np.sin(0.1), 0.0,
                     0.8 * np.cos(0.1) - 0.6 * np.sin(0.1)])
    three = np.array([e, e, -tilt, -tilt, [0.0, 1.0, 0.0]])
    form = _formation(_table([np.vstack([spread, [e]]), bipolar, three]), 3, 1e-3)
    assert [f["clusters"] for f in form] == [5, 2, 3]
    # lone tokens +e1, -e1 are antipodal but no formation; two clusters of two or more are
    assert [f["antipodal_pairs"] for f in form] == [0, 1, 0]
    assert [f["largest"] for f in form] == [1, 3, 2]
    assert [f["bipolar"] for f in form] == [False, True, False]
    assert form[1]["pairs"] == [(0, 3)] and [f["t"] for f in form] == [0.0, 0.5, 1.0]
