"""Figure `tokens-in-motion`: n tokens on the circle (d = 2) and on the sphere (d = 3) across
depth, one common noise path each, as an animated GIF.

The data step runs one `simulate` per dimension (seeded, tokens recorded at evenly spaced
layers) and saves the positions as one table, `data/tokens-in-motion-<size>.parquet` (one row
per dimension, frame and token; the circle sits in the plane z = 0), with the settings that
made it in its header; a saved table is reused only when those settings match. The drawing
step (`tokensde.plots.animation`) reads that table and never simulates.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..io.report import Image, Section, Table
from ..model.params import ModelParams, TimeGrid, _check_int
from ..sim.rng import derive_seed
from .context import Context, FigureSpec, _saved_or

if TYPE_CHECKING:
    import pandas as pd

_NAME = "tokens-in-motion"
_MOTION_TOKENS = 24
_MOTION_BETA = 3.0
MOTION_T, MOTION_DT = 8.0, 0.01
_MOTION_DIMS = (2, 3)
# frames of the animation per study size (evenly spaced layers, the first and the last included)
_MOTION_FRAMES = {"tiny": 6, "quick": 81, "full": 161}
_MOTION_TOL = 1e-3  # merged when 1 - <x_i, x_j> < tol, antipodal when 1 + <x_i, x_j> < tol


def _motion_settings(seed: int, frames: int) -> dict[str, Any]:
    """The settings a saved table must carry to be reused: seed, frames, n, beta, T, dt, dims."""
    p = _motion_params(_MOTION_DIMS[-1])
    return {"seed": int(seed), "frames": int(frames), "n": p.n, "beta": p.beta, "T": MOTION_T,
            "dt": MOTION_DT, "dims": list(_MOTION_DIMS), "sigma": p.noise_scale,
            "mean": p.mean_kind, "noise": f"{p.noise}/{p.law}", "attention": p.attention,
            "initial": "uniform", "sampler": "full"}


def _motion_params(d: int) -> ModelParams:
    """The model of the animation in dimension d: `MOTION_TOKENS` tokens, beta = `_MOTION_BETA`,
    pure-noise values (no mean part, sigma = 1)."""
    return ModelParams(n=_MOTION_TOKENS, d=d, beta=_MOTION_BETA, sigma=1.0)


def _motion_layers(frames: int, layers: int) -> list[int]:
    """`frames` evenly spaced layer indices from 0 to `layers` (rounded, both ends included)."""
    frames = _check_int("frames", frames, 2)
    return sorted({int(k) for k in np.round(np.linspace(0, layers, frames))})


def _motion_table(seed: int = 0, frames: int = _MOTION_FRAMES["quick"]) -> pd.DataFrame:
    """Positions x_i(t_k) of `MOTION_TOKENS` tokens at `frames` depth times t_k in [0, T], one
    run per d in `MOTION_DIMS` (pure-noise values M = 0, sigma = 1, beta = `_MOTION_BETA`,
    i.i.d. uniform start).

    Args:
        seed: Root seed; the run for dimension d uses `derive_seed(seed, 15, d)`.
        frames: Number of recorded depth times (>= 2), evenly spaced layers from 0 to T / dt.

    Returns:
        A DataFrame with columns d, frame, t, token, x, y, z (z = 0 on the circle), one row per
        dimension, frame and token, and the settings in `attrs['settings']`.
    """
    import pandas as pd

    from ..sim.options import Execution, InitialState, Recording
    from ..sim.simulate import simulate

    seed = _check_int("seed", seed, 0)
    grid = TimeGrid.make(T=MOTION_T, dt=MOTION_DT)
    layers = _motion_layers(frames, grid.steps)
    parts = []
    for d in _MOTION_DIMS:
        res = simulate(_motion_params(d), grid, runs=1, seed=derive_seed(seed, 15, d),
                       initial=InitialState("uniform"),
                       recording=Recording(checkpoints=layers, record=("tokens",)),
                       execution=Execution(sampler="full"))
        if res.tokens is None:
            raise RuntimeError("simulate kept no tokens though record=('tokens',) asked for them")
        toks = np.asarray(res.tokens[0], dtype=np.float64)  # (K, n, d)
        K, n = toks.shape[:2]
        xyz = np.zeros((K, n, 3))
        xyz[..., :d] = toks
        parts.append(pd.DataFrame({
            "d": np.full(K * n, d), "frame": np.repeat(np.arange(K), n),
            "t": np.repeat(np.asarray(res.times, dtype=np.float64), n),
            "token": np.tile(np.arange(n), K),
            "x": xyz[..., 0].ravel(), "y": xyz[..., 1].ravel(), "z": xyz[..., 2].ravel()}))
    table = pd.concat(parts, ignore_index=True)
    table.attrs["settings"] = _motion_settings(seed, frames)
    return table


def _motion_data(ctx: Context) -> tuple[pd.DataFrame, bool]:
    """The saved table of `motion_table(ctx.seed, MOTION_FRAMES[ctx.size])` under
    `data/tokens-in-motion-<size>.parquet`, computed and saved first when absent or made with
    other settings."""
    from ..io.store import header, write_parquet
    from ..plots.animation import _MOTION_KIND, _read_motion

    frames = _MOTION_FRAMES[ctx.size]
    settings = _motion_settings(ctx.seed, frames)

    def save(table: pd.DataFrame, path: Path) -> Path:
        return write_parquet(table, path, header(_MOTION_KIND, settings=table.attrs["settings"]))

    return _saved_or(ctx.data_path(_NAME, ".parquet"), _read_motion,
                    lambda: _motion_table(ctx.seed, frames), save, ctx,
                    lambda table: table.attrs.get("settings") == settings)


def _draw_motion(ctx: Context, spec: FigureSpec, table: pd.DataFrame, reused: bool) -> Section:
    """The animation from the saved table, with the settings and the formation across depth."""
    from ..plots.animation import _formation, animate_motion

    gif = animate_motion(ctx.data_path(_NAME, ".parquet"), ctx.figures / f"{_NAME}.gif",
                         tol=_MOTION_TOL)
    s = table.attrs["settings"]
    rows = []
    for d in _MOTION_DIMS:
        form = _formation(table, d, _MOTION_TOL)
        K = len(form)
        for k in sorted({0, K // 8, K // 4, K // 2, (3 * K) // 4, K - 1}):
            f = form[k]
            rows.append([d, f["t"], f["clusters"], f["antipodal_pairs"], f["largest"],
                         f["bipolar"]])
    caption = (f"One run per panel: n = {s['n']} tokens, beta = {s['beta']:g}, value noise "
               f"sigma = {s['sigma']:g} (no mean part, M = 0), a frame every "
               f"{s['T'] / (s['frames'] - 1):g} of depth time up to T = {s['T']:g}. Colour: "
               "the cluster a token ends in; dashed diameter: two clusters of two or more "
               f"tokens antipodal within {_MOTION_TOL:g}; on the sphere, pale dots lie on the "
               "far side of a slowly turning view.")
    formation_caption = (
        f"The formation across depth: clusters (tokens chained by 1 - <x_i, x_j> < "
        f"{_MOTION_TOL:g}), pairs of antipodal clusters of two or more tokens, the largest "
        f"cluster, and the outcome rule of tokensde.analysis.clusters.analyze at tol = "
        f"{_MOTION_TOL:g} (bipolar: every pair within tol of +1 or -1, some pair antipodal)")
    return Section(
        spec.name, spec.title, spec.claim, images=[Image(gif, caption)],
        tables=[Table("motion-settings", "The simulations behind the animation",
                      ["n", "d", "beta", "sigma", "mean", "T", "dt", "frames", "sampler",
                       "seed", "run seed"],
                      [[s["n"], d, s["beta"], s["sigma"], s["mean"], s["T"], s["dt"],
                        s["frames"], s["sampler"], s["seed"], derive_seed(s["seed"], 15, d)]
                       for d in _MOTION_DIMS]),
                Table("motion-formation", formation_caption,
                      ["d", "t", "clusters", "antipodal pairs", "largest", "bipolar"], rows)],
        provenance={"reused": reused, "data": str(ctx.data_path(_NAME, ".parquet")),
                    "command": f"tokensde figure {_NAME} --out {ctx.out}" + ctx.size_flag})
