"""`tokensde figure NAME`: one command per figure of the study, each backed by a saved result.

Every figure has a data step and a drawing step. The data step looks for its saved result under
`OUT/data/` (named after the figure and the size) and computes and saves it only when it is
absent; the drawing step reads that result and writes `OUT/figures/`. A figure therefore never
re-runs a simulation that has a saved result, and an interrupted run keeps what it finished.

Each builder returns a `tokensde.report.Section` (figures, tables with parameters, seeds,
version and intervals), which `tokensde reproduce` assembles into the HTML report. Figures whose
code lives in other modules (two-token phase diagram, multi-token sweeps, ViT) are drawn through
those modules' public functions; when a module is absent the section says exactly what is
missing.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import typer

from .._version import __version__
from ..params import ModelParams, ParameterError, check_choice, check_int
from ..report import Image, Section, Table, interval
from ..rng import derive_seed
from ._common import JSON, SEED, SIZE, WORKERS, emit_json, fail, user_errors

SIZES: tuple[str, ...] = ("tiny", "quick", "full")
DEFAULT_OUT = Path("results")


@dataclass
class Context:
    """Where results live and how big to make them.

    `out/data/<figure>-<size>...` holds saved results, `out/figures/` the drawings.
    """

    out: Path
    size: str = "quick"
    seed: int = 0
    workers: int = 2
    progress: bool = True
    log: Callable[[str], None] = field(default=lambda s: None)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.size = check_choice("size", self.size, SIZES)
        self.seed = check_int("seed", self.seed, 0)
        self.workers = check_int("workers", self.workers, 1)

    @property
    def data(self) -> Path:
        """Directory of saved results."""
        return self.out / "data"

    @property
    def figures(self) -> Path:
        """Directory of figure files."""
        return self.out / "figures"

    def data_path(self, name: str, suffix: str = "") -> Path:
        """`out/data/<name>-<size><suffix>`."""
        return self.data / f"{name}-{self.size}{suffix}"


class MissingError(RuntimeError):
    """A piece of the study (module, function or saved result) is not available."""


@dataclass(frozen=True)
class FigureSpec:
    """A figure: its name, title, the claim it supports and its builder."""

    name: str
    title: str
    claim: str
    build: Callable[[Context], Section]
    needs: str = ""


def _need(module: str, *names: str, issue: str = "") -> Any:
    """Import `module` and check it defines `names`, or raise MissingError saying what is needed."""
    where = f" ({issue})" if issue else ""
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise MissingError(f"module {module}{where} is not available: {err}") from err
    absent = [n for n in names if not hasattr(mod, n)]
    if absent:
        raise MissingError(f"{module}{where} does not define {', '.join(absent)}")
    return mod


@contextmanager
def _pool(workers: int) -> Iterator[Callable[..., Any]]:
    """A `map` over `workers` processes (one torch thread each), or the builtin map."""
    if workers <= 1:
        yield map
        return
    import multiprocessing as mp

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=_one_thread) as ex:
        yield ex.map


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _write_json(path: Path, doc: dict[str, Any]) -> Path:
    from ..store import atomic_write
    from ._common import to_jsonable

    return atomic_write(path, lambda tmp: tmp.write_text(json.dumps(to_jsonable(doc), indent=1)))


def _saved_or(path: Path, load: Callable[[Path], Any], make: Callable[[], Any],
              save: Callable[[Any, Path], Any], ctx: Context,
              fresh: Callable[[Any], bool] = lambda obj: True) -> tuple[Any, bool]:
    """`(load(path), True)` when the result is saved (and `fresh(saved)`: made with the same
    settings), else `(make(), False)` after saving it."""
    if path.exists():
        saved = load(path)
        if fresh(saved):
            ctx.log(f"reusing {path}")
            return saved, True
        ctx.log(f"{path} was made with other settings; recomputing it")
    ctx.log(f"computing {path.name}")
    obj = make()
    save(obj, path)
    return obj, False


# ------------------------------------------------------------------------------- convergence

def cached_map(cache: Path, inner: Callable[..., Any]) -> Callable[..., Any]:
    """A `map` for `run_convergence` that keeps each finished chunk in `cache/<task_key>.npz`
    and reuses it, so an interrupted diagnostic resumes where it stopped."""
    from ..convergence import samples_from_arrays, samples_to_arrays, task_key
    from ..store import atomic_write

    def load(path: Path) -> Any:
        with np.load(path, allow_pickle=False) as z:
            return samples_from_arrays(z)

    def save(path: Path, part: Any) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:  # a handle: savez would append .npz to the name
                np.savez(fh, **samples_to_arrays(part))  # type: ignore[arg-type]

        atomic_write(path, write)

    def map_fn(fn: Callable[..., Any], jobs: Any) -> Iterator[Any]:
        jobs = list(jobs)
        paths = [cache / f"{task_key(j)}.npz" for j in jobs]
        todo = [j for j, p in zip(jobs, paths, strict=True) if not p.exists()]
        fresh = iter(inner(fn, todo))
        for path in paths:
            if path.exists():
                yield load(path)
                continue
            part = next(fresh)
            save(path, part)
            yield part

    return map_fn


def convergence_data(ctx: Context) -> tuple[Any, bool]:
    """The saved convergence result of this size (computed and saved if absent; finished chunks
    of an interrupted computation are kept under `data/convergence-<size>.parts/`)."""
    from ..convergence import SIZES, ConvergenceResult, run_convergence
    from ._common import progress_bar

    size = SIZES[ctx.size]
    parts = ctx.data_path("convergence", ".parts")

    def make() -> Any:
        total = sum(size.weak_runs.values()) + sum(size.strong_runs.values())
        with _pool(ctx.workers) as pool, progress_bar(total, "convergence runs",
                                                       ctx.progress) as bar:
            res = run_convergence(ctx.size, seed=ctx.seed, map_fn=cached_map(parts, pool),
                                  progress=bar)
        return res

    def save(res: Any, path: Path) -> None:
        _write_json(path, res.to_dict())
        write_points_csv(res, path.with_suffix(".csv"))
        shutil.rmtree(parts, ignore_errors=True)

    def load(path: Path) -> Any:
        return ConvergenceResult.from_dict(json.loads(path.read_text()), str(path))

    def fresh(res: Any) -> bool:
        want = json.loads(json.dumps(size.to_dict()))
        return res.settings.get("size") == want and res.settings.get("seed") == ctx.seed

    return _saved_or(ctx.data_path("convergence", ".json"), load, make, save, ctx, fresh)


def write_points_csv(res: Any, path: Path) -> Path:
    """The error points of a ConvergenceResult as CSV (one row per problem, law, kind, L)."""
    import pandas as pd

    from ..store import atomic_write

    df = pd.DataFrame(res.points)
    return atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))


def convergence_tables(res: Any) -> list[Table]:
    """Fitted orders and the error points behind them, with parameters, runs and seeds."""
    probs = {m["name"]: m for m in res.problems}
    version = res.settings.get("version", __version__)
    fit_rows = []
    for f in res.fits:
        m = probs[f["problem"]]
        p = m["params"]
        runs, seed, ref = ((m["weak_runs"], m["weak_seed"], m["weak_ref_steps"])
                           if f["kind"] == "weak" else
                           (m["strong_runs"], m["strong_seed"], m["strong_ref_steps"]))
        lv = f["levels"]
        fit_rows.append([
            f["problem"], p["n"], p["d"], p["beta"], m["T"], f["law"], f["kind"], f["label"],
            f["order"], interval(f["boot_lo"], f["boot_hi"]), interval(f["ci_lo"], f["ci_hi"]),
            f"{lv[0]}–{lv[-1]} ({len(lv)})" if lv else "none resolved", runs, ref, seed,
            version])
    pt_rows = []
    for q in res.points:
        if q["kind"] == "reference_correction":
            continue
        m = probs[q["problem"]]
        seed = m["weak_seed"] if q["kind"] == "weak" else m["strong_seed"]
        pt_rows.append([q["problem"], q["law"], q["kind"], q["label"], q["L"], q["error"],
                        q["se"], interval(q["ci_lo"], q["ci_hi"]), q["used"], q["runs"], seed])
    ref_rows = [[q["problem"], q["label"], q["value"], q["value_se"], q["error"], q["se"],
                 probs[q["problem"]]["weak_ref_steps"], q["runs"]]
                for q in res.points if q["kind"] == "reference_correction"]
    return [
        Table("convergence-fits", "Fitted orders: error ~ C L^-order (least squares on log-log; "
              "95% Poisson-bootstrap interval over runs, and t-interval from the residuals)",
              ["problem", "n", "d", "beta", "T", "law", "error", "statistic", "order",
               "bootstrap 95%", "t 95%", "levels fitted", "runs", "ref steps", "seed",
               "version"], fit_rows),
        Table("convergence-points", "Every error point (95% Monte Carlo interval; 'fitted' = "
              f"resolved above {res.settings['resolve_z']:g} s.e. and used in the fit)",
              ["problem", "law", "error", "statistic", "L", "error value", "s.e.", "95%",
               "fitted", "runs", "seed"], pt_rows),
        Table("convergence-reference", "SDE reference: Richardson value 2f(h) - f(2h) and the "
              "correction f(h) - f(2h) it applies (small next to the weak errors fitted)",
              ["problem", "statistic", "reference value", "s.e.", "correction", "s.e.",
               "fine steps", "runs"], ref_rows),
    ]


def build_convergence(ctx: Context) -> Section:
    """Weak and strong errors of the L-layer network against the SDE, log-log."""
    from ..plots.convergence import plot_convergence

    res, reused = convergence_data(ctx)
    png = plot_convergence(res, ctx.figures / "convergence.png")
    spec = FIGURES["convergence"]
    from ..plots.convergence import fit_label

    note = "Fitted orders, Gaussian law (95% bootstrap intervals):\n" + "\n".join(
        f"  {f['problem']}, {f['kind']} {f['label']}: {fit_label(f)}"
        for f in res.fits if f["law"] == "gaussian")
    return Section(
        "convergence", spec.title, spec.claim, note=note,
        images=[Image(png, "Weak errors (per statistic) and strong error vs layers L; filled "
                           "markers: resolved points with 95% MC intervals; hollow triangles: "
                           "upper limits where Monte Carlo noise hides the error.")],
        tables=convergence_tables(res),
        provenance={"settings": res.settings, "problems": res.problems, "reused": reused,
                    "data": str(ctx.data_path("convergence", ".json")),
                    "command": f"tokensde figure convergence --out {ctx.out}"
                               + _size_flag(ctx)})


def _size_flag(ctx: Context) -> str:
    return {"quick": " --quick", "full": "", "tiny": " --size tiny"}[ctx.size]


# ------------------------------------------------------------------------------ trajectories

TRAJ_TOKENS = 6


def trajectory_setups(seed: int) -> list[tuple[str, str, ModelParams, np.ndarray]]:
    """(key, title, params, initial tokens) of the four trajectory panels: d = 2, 3 x noise/flow."""
    out = []
    for d in (2, 3):
        rng = np.random.default_rng(derive_seed(seed, 7, d))
        x0 = rng.normal(size=(TRAJ_TOKENS, d))
        x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
        noise = ModelParams(n=TRAJ_TOKENS, d=d, beta=1.0, sigma=1.0)
        flow = ModelParams(n=TRAJ_TOKENS, d=d, beta=1.0, mean="identity", sigma=0.0)
        out.append((f"d{d}-noise", f"d = {d}: random network (M = 0, sigma = 1)", noise, x0))
        out.append((f"d{d}-flow", f"d = {d}: deterministic flow (M = I, sigma = 0)", flow, x0))
    return out


def _sim_results(ctx: Context, name: str, setups: list[tuple[str, str, ModelParams, Any]],
                 run: Callable[[ModelParams, Any, int], Any], settings: dict[str, Any]
                 ) -> tuple[list[tuple[str, Any]], bool]:
    """Load or simulate (and save) each panel's result; `settings` (horizon, runs, ...) and the
    panel's parameters and seed are stored with the result and must match for it to be reused."""
    from ..store import load_result, save_result

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


def _sim_table(key: str, caption: str, panels: list[tuple[str, Any]]) -> Table:
    rows = []
    for title, r in panels:
        p = r.params
        rows.append([title, p.n, p.d, p.beta, p.mean_kind, p.noise_scale, r.grid.T, r.grid.dt,
                     r.grid.steps, r.runs, r.sampler, r.seed, r.extra.get("version", __version__)
                     if hasattr(r, "extra") else __version__])
    return Table(key, caption, ["panel", "n", "d", "beta", "mean", "sigma", "T", "dt", "layers",
                                "runs", "sampler", "seed", "version"], rows)


def build_trajectories(ctx: Context) -> Section:
    """Token paths on the circle and the sphere: noisy network vs deterministic flow."""
    from .. import simulate
    from ..plots.trajectories import animate_trajectories, plot_trajectories

    T, dt = 6.0, 0.01

    def run(p: ModelParams, init: Any, k: int) -> Any:
        return simulate(p, T=T, dt=dt, runs=1, init=init, seed=derive_seed(ctx.seed, 8, k),
                        checkpoints=121, record=("gram", "tokens"), sampler="full")

    panels, reused = _sim_results(ctx, "trajectories", trajectory_setups(ctx.seed), run,
                                  {"T": T, "dt": dt, "checkpoints": 121})
    png = plot_trajectories(panels, ctx.figures / "trajectories.png")
    gif = animate_trajectories(panels, ctx.figures / "trajectories.gif",
                               max_frames={"tiny": 12, "quick": 60, "full": 121}[ctx.size])
    spec = FIGURES["trajectories"]
    return Section(
        "trajectories", spec.title, spec.claim,
        images=[Image(png, "Whole paths of one run from shared initial tokens; on the circle the "
                           "radius is depth time (inside t = 0, outside t = T)."),
                Image(gif, "Animation: positions with a short trail, one frame per checkpoint.")],
        tables=[_sim_table("trajectories", "Simulations behind the trajectories", panels)],
        provenance={"reused": reused, "data": str(ctx.data_path("trajectories")),
                    "command": f"tokensde figure trajectories --out {ctx.out}"
                               + _size_flag(ctx)})


# -------------------------------------------------------------------------------- histograms

HIST_RUNS = {"tiny": 40, "quick": 400, "full": 2000}


def histogram_setups() -> list[tuple[str, str, ModelParams, str]]:
    """(key, title, params, init) of the histogram rows: beta below and above beta_c(d = 4)."""
    d = 4
    bc = 0.5 * math.acosh(d - 2)
    return [(f"beta{b:g}", f"beta = {b:g} ({'<' if b < bc else '>'} beta_c = {bc:.2f})",
             ModelParams(n=8, d=d, beta=b, sigma=1.0), "uniform") for b in (0.3, 2.0)]


def build_histograms(ctx: Context) -> Section:
    """The law of pairwise inner products across depth, below and above beta_c."""
    from .. import simulate
    from ..plots.histograms import pair_fractions, pair_products, plot_histograms

    T, dt = 8.0, 1.0 / 64
    ck = [0, 8, 16, 32, 64, 128, 256, 512]

    def run(p: ModelParams, init: Any, k: int) -> Any:
        return simulate(p, T=T, dt=dt, runs=HIST_RUNS[ctx.size], init=init,
                        seed=derive_seed(ctx.seed, 9, k), checkpoints=ck)

    panels, reused = _sim_results(ctx, "histograms", histogram_setups(), run,
                                  {"T": T, "dt": dt, "runs": HIST_RUNS[ctx.size],
                                   "checkpoints": ck})
    png = plot_histograms(panels, ctx.figures / "histograms.png", columns=5)
    rows = []
    for title, r in panels:
        rho = pair_products(np.asarray(r.gram))
        for c, t in enumerate(r.times):
            vals = rho[:, c].ravel()
            merged, anti = pair_fractions(vals)
            lo_m, hi_m = _wilson(merged, vals.size)
            lo_a, hi_a = _wilson(anti, vals.size)
            rows.append([title, float(t), vals.size, float(vals.mean()), merged,
                         (lo_m, hi_m), anti, (lo_a, hi_a), r.runs, r.seed])
    spec = FIGURES["histograms"]
    return Section(
        "histograms", spec.title, spec.claim,
        images=[Image(png, "Fraction of token pairs per bin (log scale), all runs pooled.")],
        tables=[_sim_table("histogram-sims", "Simulations behind the histograms", panels),
                Table("histogram-fractions", "Pairs merged (> 1 - 1e-3) and antipodal "
                      "(< -1 + 1e-3) across depth; Wilson 95% intervals over pooled pairs "
                      "(pairs of one run are correlated: read them as descriptive)",
                      ["panel", "t", "pairs", "mean <x_i,x_j>", "merged", "95%", "antipodal",
                       "95%", "runs", "seed"], rows)],
        provenance={"reused": reused, "data": str(ctx.data_path("histograms")),
                    "command": f"tokensde figure histograms --out {ctx.out}" + _size_flag(ctx)})


def _wilson(p: float, n: int) -> tuple[float, float]:
    from ..stats import wilson

    lo, hi = wilson(round(p * n), n)
    return float(lo), float(hi)


# ----------------------------------------------------------- two tokens (issue 3's modules)

# dt "default": tokensde.two_tokens.default_dt(d) = 0.05 / d (network bias in P_anti ~ 0.003).
# Every run stops once decided (1 - |rho| < 1e-8); T is the maximum horizon.
PHASE_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"betas": (0.25, 1.0, 2.0), "ds": (3, 5), "runs": 40, "T": 10.0, "dt": 0.05},
    "quick": {"betas": tuple(np.round(np.linspace(0.1, 2.5, 9), 3)), "ds": (3, 4, 6, 10),
              "runs": 300, "T": 200.0, "dt": "default"},
    "full": {"betas": tuple(np.round(np.linspace(0.05, 3.0, 16), 3)),
             "ds": (3, 4, 5, 6, 8, 10, 16), "runs": 2000, "T": 200.0, "dt": "default"},
}
KIND_PHASE = "tokensde.phase-grid"


def phase_data(ctx: Context) -> tuple[Any, bool]:
    """The saved Monte Carlo phase grid (pandas), computed cell by cell and saved as it goes."""
    cfg = PHASE_SIZES[ctx.size]
    return _grid_data(ctx, "phase", cfg, "uniform", cfg["betas"])


# Over d on a log scale with the Gram sampler (cost per layer independent of d): betas at fixed
# offsets from beta_c(d), pairs from rho0 = -0.9, where P_anti jumps at beta_c for every d.
PHASE_D_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"offsets": (-0.5, 1.0), "ds": (3, 16), "runs": 40, "T": 40.0, "dt": "default",
             "rho0": -0.9},
    "quick": {"offsets": (-0.5, 0.25, 1.0), "ds": (3, 16, 128), "runs": 200, "T": 60.0,
              "dt": "default", "rho0": -0.9},
    "full": {"offsets": (-0.5, -0.25, 0.25, 0.5, 1.0), "ds": (3, 16, 64, 256, 1024, 4096),
             "runs": 1000, "T": 60.0, "dt": "default", "rho0": -0.9},
}


def phase_d_data(ctx: Context) -> tuple[Any, bool]:
    """The two-token grid over d from 3 to 4096 (betas at offsets from beta_c(d))."""
    from ..two_tokens import beta_c

    cfg = PHASE_D_SIZES[ctx.size]

    def betas(d: int) -> list[float]:
        return [round(float(beta_c(d)) + o, 6) for o in cfg["offsets"] if beta_c(d) + o >= 0]

    return _grid_data(ctx, "phase-d", cfg, cfg["rho0"], betas, sampler="gram")


def _grid_data(ctx: Context, name: str, cfg: dict[str, Any], rho0: Any, betas: Any,
               sampler: str = "auto") -> tuple[Any, bool]:
    import pandas as pd

    from ..store import header, read_parquet, write_parquet

    phase = _need("tokensde.phase_grid", "mc_grid", issue="issue 3")
    path = ctx.data_path(name, ".parquet")
    settings = json.loads(json.dumps({"size": ctx.size, "seed": ctx.seed, "rho0": rho0,
                                      "until": "decided", "sampler": sampler,
                                      **{k: list(v) if isinstance(v, tuple) else v
                                         for k, v in cfg.items()}}))
    done = None
    if path.exists():
        table, meta = read_parquet(path, KIND_PHASE)
        if {k: meta.get(k) for k in settings} == settings:
            done = table.to_pandas()
            want = sum(len(betas(d) if callable(betas) else betas) for d in cfg["ds"])
            if len(done) >= want:
                ctx.log(f"reusing {path}")
                return done, True
            ctx.log(f"resuming {path}: {len(done)} of {want} cells saved")
        else:
            ctx.log(f"{path} was made with other settings; recomputing it")
    meta = header(KIND_PHASE, **settings)
    rows = [] if done is None else done.to_dict("records")

    def on_row(row: dict[str, Any]) -> None:
        rows.append(row)
        write_parquet(pd.DataFrame(rows), path, meta)

    dt = cfg["dt"]
    if dt == "default":
        dt = _need("tokensde.two_tokens", "default_dt", issue="issue 3").default_dt
    df = phase.mc_grid(betas, cfg["ds"], rho0, runs=cfg["runs"], T=cfg["T"], dt=dt,
                       seed=ctx.seed, done=done, on_row=on_row, sampler=sampler)
    write_parquet(df, path, meta)
    return df, False


NEAR_BETA_C = 0.3  # cells this close to beta_c(d) relax slowly and are reported apart


def _phase_table(df: Any) -> Table:
    recs = df.to_dict("records")
    rows = [[r["beta"], int(r["d"]), r["beta_c"], int(r["runs"]), r["T"], r["dt"], r["p_anti"],
             (r["ci_lo"], r["ci_hi"]), r["theory_tol"], r["theory"],
             "outside" if r["outside"] else "", r["p_undecided"], r["t_decided_median"],
             r["t_decided_q90"], int(r["seed"]), r["version"]] for r in recs]
    return Table("phase-grid", "Two tokens from uniform positions: Monte Carlo P(antipodal) of the "
                 "full network (95% Wilson), each run stopped once decided (1 - |rho| < tol) or "
                 "at the maximum horizon T, against the exact probability of reaching the "
                 "antipodal tolerance first ('theory at tol', what the runs measure) and its "
                 "tol -> 0 limit P_anti; 'undecided' is the fraction still moving at T",
                 ["beta", "d", "beta_c(d)", "runs", "max T", "dt", "P_anti (MC)", "95%",
                  "theory at tol", "P_anti (tol -> 0)", "interval", "undecided at T",
                  "median t_decided", "90% t_decided", "seed", "version"], rows,
                 note="Rows marked 'outside' have a 95% interval that excludes the theory at "
                      "tol.", flagged=[i for i, r in enumerate(recs) if r["outside"]])


def agreement(df: Any, level: float = 0.95) -> tuple[str, str]:
    """Section status and a sentence: 'ok' when the number of cells whose interval excludes the
    theory is what chance explains (`stats.chance_explains`), for the cells away from beta_c
    (|beta - beta_c| > NEAR_BETA_C) and for all cells; else 'disagrees'."""
    from ..stats import chance_excess, chance_explains

    far = (df["beta"] - df["beta_c"]).abs() > NEAR_BETA_C
    parts, ok = [], True
    for label, sel in (("away from beta_c", far), ("all cells", far | ~far)):
        k, n = int(df.loc[sel, "outside"].sum()), int(sel.sum())
        if n == 0:
            continue
        fine = chance_explains(k, n, level)
        ok &= fine
        parts.append(f"{label}: {k} of {n} intervals exclude the theory (chance alone gives "
                     f"{k} or more with probability {chance_excess(k, n, level):.3g}; "
                     f"{'explained by chance' if fine else 'MORE THAN CHANCE EXPLAINS'})")
    rule = ("A section is ok when, under a correct theory, at least that many misses would "
            "happen with probability >= 1% (binomial with p = 0.05).")
    return ("ok" if ok else "disagrees"), "; ".join(parts) + ". " + rule


def _phase_section(ctx: Context, key: str, plot: Callable[[Any, Path], Path], caption: str,
                   data: Callable[[Context], tuple[Any, bool]] = phase_data,
                   name: str = "phase") -> Section:
    df, reused = data(ctx)
    png = plot(df, ctx.figures / f"{key}.png")
    spec = FIGURES[key]
    horizon = ", ".join(f"{t:g}" for t in sorted(df["T"].unique()))
    far = (df["beta"] - df["beta_c"]).abs() > NEAR_BETA_C
    und_far = float(df.loc[far, "p_undecided"].max()) if far.any() else 0.0
    und = float(df["p_undecided"].max())
    status, agree = agreement(df)
    return Section(key, spec.title, spec.claim, status=status,
                   note=f"Runs stop once decided; maximum horizon T = {horizon}. Largest "
                        f"undecided fraction at T: {und_far:.4f} away from beta_c, {und:.4f} "
                        f"over the grid. {agree}",
                   images=[Image(png, caption)], tables=[_phase_table(df)],
                   provenance={"reused": reused, "size": (PHASE_SIZES if name == "phase"
                                                          else PHASE_D_SIZES)[ctx.size],
                               "data": str(ctx.data_path(name, ".parquet")),
                               "command": f"tokensde figure {key} --out {ctx.out}"
                                          + _size_flag(ctx)})


def build_phase(ctx: Context) -> Section:
    """P_anti over (beta, d) with the boundary beta_c(d)."""
    phase = _need("tokensde.plots.phase", "plot_phase_diagram", issue="issue 3")
    return _phase_section(ctx, "phase-diagram", phase.plot_phase_diagram,
                          "Monte Carlo P(antipodal) over (beta, d) and the exact boundary "
                          "beta_c(d) = arccosh(d - 2)/2.")


def build_phase_d(ctx: Context) -> Section:
    """P_anti against beta - beta_c(d) for d over three decades (Gram sampler)."""
    phase = _need("tokensde.plots.phase", "plot_phase_over_d", issue="issue 13")
    return _phase_section(ctx, "phase-over-d", phase.plot_phase_over_d,
                          "Monte Carlo P(antipodal) from rho0 = -0.9 with the exact boundary "
                          "beta_c(d) over three decades of d (Gram sampler, cost per layer "
                          "independent of d), and against beta - beta_c(d) with the exact "
                          "curves.", data=phase_d_data, name="phase-d")


DECISION_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"two": ((1.0, 4),), "many": ((8, 3, 4.0),), "runs": 60, "T2": 40.0, "Tn": 20.0},
    "quick": {"two": ((0.4, 3), (1.0, 4), (2.0, 4), (2.5, 10)),
              "many": ((8, 3, 1.0), (8, 3, 4.0), (16, 3, 2.0), (8, 8, 4.0)), "runs": 400,
              "T2": 200.0, "Tn": 100.0},
    "full": {"two": ((0.4, 3), (1.0, 4), (2.0, 4), (1.6, 10), (2.5, 10)),
             "many": ((8, 3, 1.0), (8, 3, 4.0), (16, 3, 2.0), (8, 8, 4.0), (32, 3, 4.0)),
             "runs": 2000, "T2": 300.0, "Tn": 300.0},
}
DECISION_TOL = {"two": 1e-8, "many": 1e-8}


def decision_data(ctx: Context) -> tuple[dict[str, dict[str, np.ndarray]], bool]:
    """Decision times of two-token cells (uniform pairs) and of multi-token cells, saved."""
    from ..experiments import auto_dt
    from ..model import simulate
    from ..two_tokens import default_dt

    cfg = DECISION_SIZES[ctx.size]
    path = ctx.data_path("decision-times", ".npz")
    stamp = json.dumps({"cfg": cfg, "tol": DECISION_TOL, "seed": ctx.seed}, sort_keys=True)

    def make() -> dict[str, dict[str, np.ndarray]]:
        _one_thread()
        out: dict[str, dict[str, np.ndarray]] = {"two": {}, "many": {}}
        for k, (beta, d) in enumerate(cfg["two"]):
            res = simulate(ModelParams(n=2, d=d, beta=beta), T=cfg["T2"], dt=default_dt(d),
                           runs=cfg["runs"], seed=derive_seed(ctx.seed, 13, k),
                           until="decided", tol=DECISION_TOL["two"])
            out["two"][f"{beta:g},{d}"] = res.decision_times()
        for k, (n, d, beta) in enumerate(cfg["many"]):
            res = simulate(ModelParams(n=n, d=d, beta=beta), T=cfg["Tn"], dt=auto_dt(d, "auto"),
                           runs=cfg["runs"], seed=derive_seed(ctx.seed, 14, k),
                           until="decided", tol=DECISION_TOL["many"])
            out["many"][f"{n},{d},{beta:g}"] = res.decision_times()
        return out

    def save(obj: dict[str, dict[str, np.ndarray]], where: Path) -> None:
        from ..store import atomic_write

        arrays = {f"{g}|{k}": v for g, part in obj.items() for k, v in part.items()}

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, stamp=np.array(stamp), **arrays)  # type: ignore[arg-type]

        atomic_write(where, write)

    def load(where: Path) -> dict[str, Any]:
        with np.load(where, allow_pickle=False) as z:
            obj: dict[str, Any] = {"two": {}, "many": {}, "stamp": str(z["stamp"])}
            for key in z.files:
                if "|" in key:
                    g, k = key.split("|")
                    obj[g][k] = z[key]
        return obj

    return _saved_or(path, load, make, save, ctx, lambda o: o.get("stamp") == stamp)


def build_decisions(ctx: Context) -> Section:
    """How long runs stay undecided: two tokens against the exact survival, many tokens."""
    from .. import absorption
    from ..stats import censored_quantiles

    phase = _need("tokensde.plots.phase", "plot_decision_times", issue="issue 13")
    data, reused = decision_data(ctx)
    cfg = DECISION_SIZES[ctx.size]
    png = phase.plot_decision_times(data["two"], data["many"],
                                    ctx.figures / "decision-times.png", DECISION_TOL["two"],
                                    DECISION_TOL["many"], (cfg["T2"], cfg["Tn"]))
    rows = []
    for key, t in sorted(data["two"].items()):
        beta, d = (float(v) for v in key.split(","))
        q = censored_quantiles(t, [0.5, 0.9])
        th = absorption.median_time(beta, d, "uniform", DECISION_TOL["two"])
        rows.append(["2", d, beta, len(t), float(np.isnan(t).mean()), q[0], th, q[1],
                     absorption.decision_rate(beta, d, DECISION_TOL["two"]),
                     absorption.boundary_rates(beta, d)["antipodal"]])
    for key, t in sorted(data["many"].items()):
        n, d_text, beta_text = key.split(",")
        q = censored_quantiles(t, [0.5, 0.9])
        rows.append([n, float(d_text), float(beta_text), len(t), float(np.isnan(t).mean()), q[0], None,
                     q[1], None, None])
    table = Table("decision-times", "Time to decision (every pair within tol of +-1): median "
                  "and 90% quantile over runs (blank when past the maximum horizon), the exact "
                  "median and tail rate kappa_0 of the two-token diffusion at this tol, and the "
                  "tol -> 0 antipodal rate mu^2/(2 s^2), which vanishes at beta_c",
                  ["n", "d", "beta", "runs", "undecided at T", "median t", "median (theory)",
                   "90% t", "tail rate (theory)", "antipodal rate, tol -> 0"], rows)
    spec = FIGURES["decision-times"]
    return Section("decision-times", spec.title, spec.claim, images=[Image(
        png, "Fraction of runs still undecided at depth time t. Left: two tokens from a uniform "
             "pair, network (steps) and the exact survival of the §5 diffusion (dashed). Right: "
             "many tokens (pure noise).")], tables=[table],
        provenance={"reused": reused, "size": cfg, "tol": DECISION_TOL,
                    "data": str(ctx.data_path("decision-times", ".npz")),
                    "command": f"tokensde figure decision-times --out {ctx.out}"
                               + _size_flag(ctx)})


def build_theory(ctx: Context) -> Section:
    """Exact P_anti(beta) curves against the Monte Carlo points."""
    phase = _need("tokensde.plots.phase", "plot_theory_vs_mc", issue="issue 3")
    return _phase_section(ctx, "theory-vs-simulation", phase.plot_theory_vs_mc,
                          "Exact P_anti (lines) vs Monte Carlo of the full network (points, 95% "
                          "Wilson).")


# ------------------------------------------------------------- multi-token (issue 4's sweep)

# sweep files tried for each size, in order (issue 4 ships examples/sweeps/*.toml)
SWEEPS: dict[str, tuple[str, ...]] = {
    "tiny": ("smoke",),
    "quick": ("multi-token-quick", "quick", "smoke"),
    "full": ("multi-token-full", "multi-token", "full", "multi-token-quick"),
}


# examples/sweeps of the source tree this package runs from (an editable install)
SOURCE_SWEEPS = Path(__file__).resolve().parents[3] / "examples" / "sweeps"


def sweep_config(ctx: Context) -> Path:
    """The sweep file of this size: the first of `SWEEPS[size]` in $TOKENSDE_SWEEPS, else in
    ./examples/sweeps or the source tree's examples/sweeps."""
    env = os.environ.get("TOKENSDE_SWEEPS")
    roots = [Path(env)] if env else [Path.cwd() / "examples" / "sweeps", SOURCE_SWEEPS]
    for name in SWEEPS[ctx.size]:
        for root in roots:
            if (root / f"{name}.toml").exists():
                return root / f"{name}.toml"
    raise MissingError(f"no sweep file among {', '.join(n + '.toml' for n in SWEEPS[ctx.size])} "
                       f"in {' or '.join(map(str, roots))} (issue 4 ships examples/sweeps/*.toml; "
                       "run from the repository root or set TOKENSDE_SWEEPS)")


def build_multi(ctx: Context) -> Section:
    """Multi-token outcome probabilities from a sweep (finished cells are reused)."""
    sweep = _need("tokensde.sweep", "run_sweep", "read_table", issue="issue 4")
    multi = _need("tokensde.plots.multi", "plot_outcomes", "load", issue="issue 4")
    cfg = sweep_config(ctx)
    out = ctx.out / "sweeps" / cfg.stem
    t0 = time.perf_counter()
    summary = sweep.run_sweep(cfg, out, workers=ctx.workers)
    wall = time.perf_counter() - t0
    df = multi.load(out)
    images = []
    for model in ("noise", "flow"):
        if (df["model"] == model).any():
            images.append(Image(multi.plot_outcomes(df, ctx.figures / f"multi-token-{model}.png",
                                                    model),
                                f"Outcome probabilities at the horizon, model = {model} "
                                "(95% Wilson bars)."))
    if (df["model"] == "hybrid").any() and hasattr(multi, "plot_hybrid"):
        images.append(Image(multi.plot_hybrid(df, ctx.figures / "multi-token-hybrid.png"),
                            "Hybrid model: outcome probabilities vs noise scale."))
    spec = FIGURES["multi-token"]
    note = "" if cfg.stem == SWEEPS[ctx.size][0] else (
        f"Sweep file {SWEEPS[ctx.size][0]}.toml not found; used {cfg.name} instead.")
    return Section("multi-token", spec.title, spec.claim, images=images, note=note,
                   tables=[_multi_table(df)],
                   provenance={"sweep": str(cfg), "dir": str(out), "sweep_wall_s": round(wall, 1),
                               "reused": summary.get("ran", 1) == 0,
                               "cells": {k: summary.get(k) for k in ("total", "ran", "skipped")},
                               "command": f"tokensde sweep run {cfg} --out {out} "
                                          f"--workers {ctx.workers}"})


def _multi_table(df: Any) -> Table:
    keys = [c for c in ("model", "n", "d", "beta", "sigma") if c in df.columns]
    stats = [s for s in ("single", "bipolar", "hovering", "other", "undecided")
             if f"p_{s}" in df.columns]
    cols = [*keys, "runs"]
    for s in stats:
        cols += [f"P({s})", "95%"]
    times = [c for c in ("t_decided_median", "t_decided_q90") if c in df.columns]
    tail = [c for c in ("horizon", "tol", "dt", "seed", "version") if c in df.columns]
    cols += [{"t_decided_median": "median t_decided",
              "t_decided_q90": "90% t_decided"}[c] for c in times] + tail
    rows = []
    for r in df.sort_values(keys).to_dict("records"):
        row = [r[k] for k in keys] + [r.get("runs")]
        for s in stats:
            row += [r[f"p_{s}"], interval(r.get(f"p_{s}_lo"), r.get(f"p_{s}_hi"))]
        row += [r[c] for c in times + tail]
        rows.append([_plain(v) for v in row])
    return Table("multi-token", "Outcome probabilities per sweep cell (95% Wilson). Each run stops "
                 "once decided (every pair within tol of +-1) or at the maximum horizon; "
                 "'undecided' runs were still moving there ('hovering': those of them that stay "
                 "bipolar at the looser tolerance over the last window, antipodal gaps that "
                 "hover instead of closing), and the decision-time quantiles count them as "
                 "later than the horizon (blank when past it)", cols, rows)


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


# ---------------------------------------------------------------------- ViT (issue 6's runs)

def vit_summary_path(ctx: Context) -> Path:
    """Where a saved ViT comparison of this size lives (its summary.json)."""
    compare = _need("tokensde.vit.compare", "SUMMARY", issue="issue 6")
    return ctx.out / "vit" / ctx.size / compare.SUMMARY


def build_vit(ctx: Context) -> Section:
    """ViT accuracy by value-matrix initialisation, read from a saved comparison."""
    plots = _need("tokensde.plots.vit", "plot_accuracy", issue="issue 6")
    path = vit_summary_path(ctx)
    reused = path.exists()
    if not reused:
        run_vit(ctx, path.parent)
    summary = json.loads(path.read_text())
    png = plots.plot_accuracy(summary, ctx.figures / "vit.png")
    spec = FIGURES["vit"]
    return Section("vit", spec.title, spec.claim,
                   images=[Image(png, "Test accuracy per epoch by value initialisation, and the "
                                      "paired gap to the default (95% t-interval).")],
                   tables=[_vit_table(summary)],
                   provenance={"summary": str(path), "reused": reused,
                               "model": summary.get("model"),
                               "train": summary.get("train"), "seeds": summary.get("seeds")})


# Per size: data set, seeds, epochs and the model fields that differ from ViTConfig's defaults.
VIT_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"dataset": "digits", "seeds": 2, "epochs": 1, "model": {"depth": 2, "dim": 16}},
    "quick": {"dataset": "digits", "seeds": 2, "epochs": 4, "model": {}},
    "full": {"dataset": "fashion-mnist", "seeds": 4, "epochs": 10, "model": {}},
}
VIT_ARMS = "default,noise:0,noise:0.1,identity,shared"


def run_vit(ctx: Context, out: Path) -> None:
    """Train the ViT comparison of this size (standard ViT, arms x seeds) into `out`."""
    from ..vit import DataSpec, TrainConfig, compare, parse_arms
    from ..vit.compare import DATA_DEFAULTS, model_config, save_summary

    size = VIT_SIZES[ctx.size]
    defaults = DATA_DEFAULTS[size["dataset"]]
    spec = DataSpec(size["dataset"], None, defaults["train_subset"] or None, None)
    model_cfg = model_config(spec.load(), **size["model"])
    train_cfg = TrainConfig(epochs=size["epochs"], batch_size=defaults["batch_size"])
    ctx.log(f"training the ViT comparison: {size['dataset']}, {size['seeds']} seeds, "
            f"{size['epochs']} epochs")
    summary = compare(spec, model_cfg, train_cfg, parse_arms(VIT_ARMS),
                      list(range(size["seeds"])), out, jobs=ctx.workers)
    save_summary(summary, out)


def _vit_table(s: dict[str, Any]) -> Table:
    from ..stats import t_interval

    rows = []
    for name, arm in s.get("arms", {}).items():
        _, lo, hi = t_interval(np.asarray(arm.get("runs", []), dtype=float))
        gap = s.get("paired", {}).get(name) or {}
        rows.append([name, _num(arm.get("mean")), _num(arm.get("sd")), interval(lo, hi),
                     _num(gap.get("mean")), interval(gap.get("lo"), gap.get("hi")),
                     len(s.get("seeds", [])), json.dumps(s.get("seeds", [])), s.get("epochs"),
                     s.get("dataset"), s.get("version")])
    return Table("vit", "Final test accuracy per arm (mean, sd, 95% t-interval over seeds) and "
                 "the paired gap to the default initialisation (95% t-interval)",
                 ["arm", "accuracy", "sd", "95%", "gap to default", "95%", "seeds", "seed list",
                  "epochs", "dataset", "version"], rows)


def build_vit_depth(ctx: Context) -> Section:
    """The ViT depth sweep (sweep kind vit_depth) of this size: gaps to default against depth."""
    from ..vit.depth import depth_config, run_depth

    out = ctx.out / "sweeps" / f"vit-depth-{ctx.size}"
    summary = run_depth(depth_config(ctx.size), out, workers=ctx.workers)
    figs = summary["report"]
    gaps = _need("tokensde.vit.depth", "read_gaps").read_gaps(out)
    images = [Image(Path(figs["depth_gaps"]), "Paired gap to the default initialisation against "
                    "depth, per arm and block (95% t-interval; open markers: the interval "
                    "contains 0)."),
              Image(Path(figs["collapse"]), "The gap against the fraction of token pairs merged "
                    "(within tol of +1) after the last block of the untrained model."),
              Image(Path(figs["curves"]), "Test accuracy of the default arm after each epoch: "
                    "whether training had levelled off.")]
    if "lambda" in figs:
        images.insert(1, Image(Path(figs["lambda"]), "The gap against the noise amplitude λ at "
                               "fixed depth, without (pure noise) and with the mean part M = I."))
    spec = FIGURES["vit-depth"]
    return Section("vit-depth", spec.title, spec.claim, images=images,
                   tables=[_vit_depth_table(gaps)],
                   provenance={"dir": str(out), "reused": summary["ran"] == 0,
                               "cells": {k: summary[k] for k in ("total", "ran", "skipped")},
                               "sweep_wall_s": round(summary["wall_s"], 1),
                               "command": f"tokensde vit depth --size {ctx.size} --out {out} "
                                          f"--workers {ctx.workers}"})


def _vit_depth_table(gaps: Any) -> Table:
    cols = ["block", "depth", "arm", "seeds", "accuracy %", "gap to default (points)", "95%",
            "merged at init", "antipodal at init", "effective rank at init", "model"]
    rows = [[r["block"], r["depth"], r["arm"], r["seeds"], r["acc"], _num(r["gap"]),
             interval(r["gap_lo"], r["gap_hi"]), r["init_near_pos"], r["init_near_neg"],
             r["init_rank"], r["model"]] for r in gaps.to_dict("records")]
    return Table("vit-depth", "Per block, depth and arm: mean test accuracy, the paired gap to "
                 "the default arm over training seeds (95% t-interval), and the token geometry of "
                 "the untrained model after its last block (pairs within tol of +1 / -1, "
                 "participation-ratio rank)", cols, rows)


def _num(v: Any) -> Any:
    return None if v is None else float(v)


# ----------------------------------------------------------------------------------- registry

FIGURES: dict[str, FigureSpec] = {s.name: s for s in (
    FigureSpec("phase-diagram", "Two tokens: phase diagram",
               "Antipodal pairs persist with positive probability iff cosh(2 beta) > d - 2; "
               "the Monte Carlo probability over (beta, d) changes where beta_c(d) says.",
               build_phase, "tokensde.plots.phase (issue 3)"),
    FigureSpec("theory-vs-simulation", "Two tokens: exact theory vs simulation",
               "The scale-function probability P_anti(beta, d) matches Monte Carlo of the full "
               "network within its intervals.", build_theory, "tokensde.plots.phase (issue 3)"),
    FigureSpec("phase-over-d", "Two tokens: the boundary over three decades of d",
               "P_anti is positive exactly above beta_c(d) = arccosh(d - 2)/2 for every d, and "
               "the network matches the exact probability at d up to 4096 (Gram sampler).",
               build_phase_d, "tokensde.gram + tokensde.plots.phase (issue 13)"),
    FigureSpec("decision-times", "How long runs stay undecided",
               "Each run is followed until it is absorbed. For two tokens the time to decision "
               "follows the exact survival law of the rho diffusion, whose tail slows down as "
               "beta approaches beta_c; many tokens can take far longer.", build_decisions,
               "tokensde.absorption (issue 13)"),
    FigureSpec("trajectories", "Tokens on the circle and the sphere",
               "Under the random network tokens cluster, and may split into antipodal groups; "
               "under the deterministic flow the same tokens merge into one cluster.",
               build_trajectories),
    FigureSpec("histograms", "Inner products across depth",
               "The law of pairwise inner products moves to +1 (merging) below beta_c and to "
               "both +1 and -1 (antipodal pairs) above it.", build_histograms),
    FigureSpec("multi-token", "Many tokens: outcome probabilities",
               "For n tokens the end states are one cluster or bipolar configurations, with "
               "probabilities that depend on beta, d and n.", build_multi,
               "tokensde.sweep + tokensde.plots.multi (issue 4)"),
    FigureSpec("convergence", "Depth limit: the network converges to the SDE",
               "The L-layer network is a consistent scheme for the SDE: weak error O(1/L) "
               "(expected order 1), strong error on a shared Brownian path O(L^-1/2).",
               build_convergence),
    FigureSpec("vit", "ViT: value initialisation and accuracy",
               "How the value-matrix initialisation (the noise law of the theory) affects a "
               "trained ViT's accuracy.", build_vit,
               "tokensde.vit + tokensde.plots.vit (issue 6)"),
    FigureSpec("vit-depth", "ViT: value noise against depth, in the network of the theory",
               "Suppressing the value-matrix noise at initialisation costs accuracy in the "
               "attention-only network of spec §2 (1/sqrt(L) residual scale, RMS "
               "re-normalisation), and the cost depends on depth; the standard pre-norm block "
               "is the contrast.", build_vit_depth, "tokensde.vit.depth (issue 12)"),
)}


def build_section(name: str, ctx: Context) -> Section:
    """Build one figure's section; a missing piece or an error becomes a section saying so."""
    spec = FIGURES[name]
    t0 = time.perf_counter()
    try:
        sec = spec.build(ctx)
    except MissingError as err:
        sec = Section(name, spec.title, spec.claim, status="missing",
                      note=f"Not available in this build: {err}. Needs {spec.needs or 'it'}.")
    except Exception as err:  # report the failure, keep the rest of the report
        tb = traceback.format_exception_only(type(err), err)[-1].strip()
        sec = Section(name, spec.title, spec.claim, status="failed",
                      note=f"Building this section failed: {tb}")
    sec.provenance.setdefault("wall_s", round(time.perf_counter() - t0, 2))
    return sec


# ----------------------------------------------------------------------------------- commands

def figure_cmd(
    name: str = typer.Argument(None, help="Figure name (see --list)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Results directory (data/ and figures/)."),
    quick: bool = typer.Option(False, "--quick", help="Quick size (the default is full)."),
    size: str = SIZE,
    seed: int = SEED,
    workers: int = WORKERS,
    list_: bool = typer.Option(False, "--list", help="List the figures and exit."),
    json_out: bool = JSON,
) -> None:
    """Draw one figure from its saved result (computing and saving the result if absent)."""
    if list_:
        _list(json_out)
        return
    with user_errors():
        if name is None:
            raise ParameterError("NAME is required: one of " + ", ".join(FIGURES))
        check_choice("NAME", name, tuple(FIGURES))
        from ..store import check_output

        check_output(out, "--out", directory=True)
        ctx = Context(out, size or ("quick" if quick else "full"), seed, workers,
                      log=lambda s: typer.echo(s, err=True))
        t0 = time.perf_counter()
        try:
            sec = FIGURES[name].build(ctx)
        except MissingError as err:
            fail(f"figure {name} is not available: {err}")
    files = [str(i.path) for i in sec.images]
    result = {"figure": name, "size": ctx.size, "files": files,
              "tables": {t.key: len(t.rows) for t in sec.tables},
              "reused": sec.provenance.get("reused"), "wall_s": round(time.perf_counter() - t0,
                                                                      2)}
    if json_out:
        emit_json(result)
        return
    for f in files:
        typer.echo(f)
    if sec.note:
        typer.echo(sec.note)


def _list(json_out: bool) -> None:
    if json_out:
        emit_json({n: {"title": s.title, "claim": s.claim} for n, s in FIGURES.items()})
        return
    width = max(map(len, FIGURES))
    for n, s in FIGURES.items():
        typer.echo(f"{n:<{width}}  {s.title}")


def register(app: typer.Typer) -> None:
    """Add `tokensde figure` to `app`."""
    app.command("figure")(figure_cmd)
