"""Figures `trajectories` and `histograms`: single simulations of few tokens, saved per panel.

Each panel is one `tokensde.sim.simulate.simulate` call saved under `data/<figure>-<size>/<panel>.npz`
with the settings that made it; a saved panel is reused only when those settings match.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from .._version import __version__
from ..io.report import Image, Section, Table
from ..model.params import ModelParams, TimeGrid
from ..sim.rng import derive_seed
from .context import Context, FigureSpec, _saved_or

_Panels = list[tuple[str, Any]]  # (panel title, SimResult)


def _sim_results(ctx: Context, name: str, setups: list[tuple[str, str, ModelParams, Any]],
                run: Callable[[ModelParams, Any, int], Any], settings: dict[str, Any]
                ) -> tuple[_Panels, bool]:
    """Load or simulate (and save) each panel's result; `settings` (horizon, runs, ...) and the
    panel's parameters and seed are stored with the result and must match for it to be reused."""
    from ..io.store import load_result, save_result

    panels, all_reused = [], True
    for k, (key, title, p, init) in enumerate(setups):
        path = ctx.data_path(name) / f"{key}.npz"
        spec = json.loads(json.dumps({"figure": name, "panel": key, "seed": ctx.seed,
                                      "params": p.to_dict(), **settings}))

        def make(p: ModelParams = p, init: Any = init, k: int = k, spec: Any = spec) -> Any:
            res = run(p, init, k)
            res.extra["figure_spec"] = spec
            return res

        res, reused = _saved_or(path, load_result, make, save_result, ctx,
                               functools.partial(_same_spec, spec))
        all_reused &= reused
        panels.append((title, res))
    return panels, all_reused


def _same_spec(spec: Any, res: Any) -> bool:
    return res.extra.get("figure_spec") == spec


def _sim_table(key: str, caption: str, panels: _Panels) -> Table:
    """One row per panel: the parameters, grid, runs, sampler, seed and version behind it."""
    rows = []
    for title, r in panels:
        p = r.params
        rows.append([title, p.n, p.d, p.beta, p.mean_kind, p.noise_scale, r.grid.T, r.grid.dt,
                     r.grid.steps, r.runs, r.sampler, r.seed, r.extra.get("version", __version__)
                     if hasattr(r, "extra") else __version__])
    return Table(key, caption, ["panel", "n", "d", "beta", "mean", "sigma", "T", "dt", "layers",
                                "runs", "sampler", "seed", "version"], rows)


# ------------------------------------------------------------------------------ trajectories

_TRAJ_TOKENS = 6
TRAJ_T, TRAJ_DT, TRAJ_CHECKPOINTS = 6.0, 0.01, 121


def _trajectory_setups(seed: int) -> list[tuple[str, str, ModelParams, np.ndarray]]:
    """(key, title, params, initial tokens) of the four trajectory panels: d = 2, 3 x noise/flow."""
    out = []
    for d in (2, 3):
        rng = np.random.default_rng(derive_seed(seed, 7, d))
        x0 = rng.normal(size=(_TRAJ_TOKENS, d))
        x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
        noise = ModelParams(n=_TRAJ_TOKENS, d=d, beta=1.0, sigma=1.0)
        flow = ModelParams(n=_TRAJ_TOKENS, d=d, beta=1.0, mean="identity", sigma=0.0)
        out.append((f"d{d}-noise", f"d = {d}: random network (M = 0, sigma = 1)", noise, x0))
        out.append((f"d{d}-flow", f"d = {d}: deterministic flow (M = I, sigma = 0)", flow, x0))
    return out


def _trajectories_data(ctx: Context) -> tuple[_Panels, bool]:
    """One run per trajectory panel, recording the tokens at 121 checkpoints (saved per panel)."""
    from ..sim.options import Execution, InitialState, Recording
    from ..sim.simulate import simulate

    def run(p: ModelParams, init: Any, k: int) -> Any:
        return simulate(p, TimeGrid.make(T=TRAJ_T, dt=TRAJ_DT), runs=1,
                        seed=derive_seed(ctx.seed, 8, k), initial=InitialState(init),
                        recording=Recording(checkpoints=TRAJ_CHECKPOINTS, record=("gram", "tokens")),
                        execution=Execution(sampler="full"))

    return _sim_results(ctx, "trajectories", _trajectory_setups(ctx.seed), run,
                       {"T": TRAJ_T, "dt": TRAJ_DT, "checkpoints": TRAJ_CHECKPOINTS})


def _draw_trajectories(ctx: Context, spec: FigureSpec, panels: _Panels, reused: bool) -> Section:
    """Token paths on the circle and the sphere: noisy network vs deterministic flow."""
    from ..plots.trajectories import _animate_trajectories, _plot_trajectories

    png = _plot_trajectories(panels, ctx.figures / "trajectories.png")
    gif = _animate_trajectories(panels, ctx.figures / "trajectories.gif",
                               max_frames={"tiny": 12, "quick": 60, "full": 121}[ctx.size])
    return Section(
        spec.name, spec.title, spec.claim,
        images=[Image(png, "Whole paths of one run from shared initial tokens; on the circle the "
                           "radius is depth time (inside t = 0, outside t = T)."),
                Image(gif, "Animation: positions with a short trail, one frame per checkpoint.")],
        tables=[_sim_table("trajectories", "Simulations behind the trajectories", panels)],
        provenance={"reused": reused, "data": str(ctx.data_path("trajectories")),
                    "command": f"tokensde figure trajectories --out {ctx.out}" + ctx.size_flag})


# -------------------------------------------------------------------------------- histograms

_HIST_RUNS = {"tiny": 40, "quick": 400, "full": 2000}
HIST_T, HIST_DT = 8.0, 1.0 / 64
_HIST_CHECKPOINTS = [0, 8, 16, 32, 64, 128, 256, 512]
_HIST_TOL = 1e-3  # merged / antipodal tolerance of the histogram figure and table


def _histogram_setups() -> list[tuple[str, str, ModelParams, str]]:
    """(key, title, params, init) of the histogram rows: beta below and above beta_c(d = 4)."""
    from ..theory.two_tokens import beta_c

    d = 4
    bc = beta_c(d)
    return [(f"beta{b:g}", f"beta = {b:g} ({'<' if b < bc else '>'} beta_c = {bc:.2f})",
             ModelParams(n=8, d=d, beta=b, sigma=1.0), "uniform") for b in (0.3, 2.0)]


def _histograms_data(ctx: Context) -> tuple[_Panels, bool]:
    """`HIST_RUNS[size]` runs per histogram row, Gram matrices at the checkpoints (saved)."""
    from ..sim.options import InitialState, Recording
    from ..sim.simulate import simulate

    def run(p: ModelParams, init: Any, k: int) -> Any:
        return simulate(p, TimeGrid.make(T=HIST_T, dt=HIST_DT), runs=_HIST_RUNS[ctx.size],
                        seed=derive_seed(ctx.seed, 9, k), initial=InitialState(init),
                        recording=Recording(checkpoints=_HIST_CHECKPOINTS))

    return _sim_results(ctx, "histograms", _histogram_setups(), run,
                       {"T": HIST_T, "dt": HIST_DT, "runs": _HIST_RUNS[ctx.size],
                        "checkpoints": _HIST_CHECKPOINTS})


def _draw_histograms(ctx: Context, spec: FigureSpec, panels: _Panels, reused: bool) -> Section:
    """The law of pairwise inner products across depth, below and above beta_c."""
    from ..analysis.clusters import pair_fractions, upper_pairs
    from ..plots.histograms import _plot_histograms

    png = _plot_histograms(panels, ctx.figures / "histograms.png", columns=5, tol=_HIST_TOL)
    rows = []
    for title, r in panels:
        rho = upper_pairs(np.asarray(r.gram))
        for c, t in enumerate(r.times):
            vals = rho[:, c].ravel()
            merged, anti = pair_fractions(vals, _HIST_TOL)
            lo_m, hi_m = _wilson(merged, vals.size)
            lo_a, hi_a = _wilson(anti, vals.size)
            rows.append([title, float(t), vals.size, float(vals.mean()), merged,
                         (lo_m, hi_m), anti, (lo_a, hi_a), r.runs, r.seed])
    return Section(
        spec.name, spec.title, spec.claim,
        images=[Image(png, "Fraction of token pairs per bin (log scale), all runs pooled.")],
        tables=[_sim_table("histogram-sims", "Simulations behind the histograms", panels),
                Table("histogram-fractions", "Pairs merged (> 1 - 1e-3) and antipodal "
                      "(< -1 + 1e-3) across depth; Wilson 95% intervals over pooled pairs "
                      "(pairs of one run are correlated: read them as descriptive)",
                      ["panel", "t", "pairs", "mean <x_i,x_j>", "merged", "95%", "antipodal",
                       "95%", "runs", "seed"], rows)],
        provenance={"reused": reused, "data": str(ctx.data_path("histograms")),
                    "command": f"tokensde figure histograms --out {ctx.out}" + ctx.size_flag})


def _wilson(p: float, n: int) -> tuple[float, float]:
    from ..analysis.stats import wilson

    lo, hi = wilson(round(p * n), n)
    return float(lo), float(hi)
