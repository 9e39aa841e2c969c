"""Figure `convergence`: weak and strong errors of the L-layer network against its SDE limit.

The computation is `tokensde.analysis.convergence.run_convergence`; here it is saved (JSON and CSV under
`data/convergence-<size>.*`, finished chunks under `data/convergence-<size>.parts/` so that an
interrupted run resumes), drawn and tabulated.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..io.report import Image, Section, Table, _interval
from .context import Context, FigureSpec, _process_map, _saved_or


def _cached_map(cache: Path, inner: Callable[..., Any]) -> Callable[..., Any]:
    """A `map` for `run_convergence` that keeps each finished chunk in `cache/<task_key>.npz`
    and reuses it, so an interrupted diagnostic resumes where it stopped."""
    from ..analysis.convergence import _task_key
    from ..analysis.level_samples import _samples_from_arrays, _samples_to_arrays
    from ..io.store import atomic_write

    def load(path: Path) -> Any:
        with np.load(path, allow_pickle=False) as z:
            return _samples_from_arrays(z)

    def save(path: Path, part: Any) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:  # a handle: savez would append .npz to the name
                np.savez(fh, **_samples_to_arrays(part))  # type: ignore[arg-type]

        atomic_write(path, write)

    def map_fn(fn: Callable[..., Any], jobs: Any) -> Iterator[Any]:
        jobs = list(jobs)
        paths = [cache / f"{_task_key(j)}.npz" for j in jobs]
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
    """Weak and strong errors of the networks against the SDE, and their orders, at `ctx.size`.

    The saved convergence result of this size, computed and saved if absent; finished chunks of
    an interrupted computation are kept under `data/convergence-<size>.parts/`.

    Args:
        ctx: The study context (output directory, size, seed, workers).

    Returns:
        `(result, reused)`: the `ConvergenceResult`, and whether it was read from a saved file.
    """
    from ..analysis.convergence import _CONVERGENCE_SIZES, ConvergenceResult, run_convergence
    from ..io.progress import progress_bar
    from ..io.store import write_json

    size = _CONVERGENCE_SIZES[ctx.size]
    parts = ctx.data_path("convergence", ".parts")

    def make() -> Any:
        total = sum(size.weak_runs.values()) + sum(size.strong_runs.values())
        with _process_map(ctx.workers) as pool, progress_bar(total, "convergence runs",
                                                            ctx.progress) as bar:
            res = run_convergence(size, seed=ctx.seed, map_fn=_cached_map(parts, pool),
                                  progress=bar)
        return res

    def save(res: Any, path: Path) -> None:
        write_json(path, res.to_dict())
        _write_points_csv(res, path.with_suffix(".csv"))
        shutil.rmtree(parts, ignore_errors=True)

    def load(path: Path) -> Any:
        return ConvergenceResult.from_dict(json.loads(path.read_text()), str(path))

    def fresh(res: Any) -> bool:
        want = json.loads(json.dumps(size.to_dict()))
        return res.settings.get("size") == want and res.settings.get("seed") == ctx.seed

    return _saved_or(ctx.data_path("convergence", ".json"), load, make, save, ctx, fresh)


def _write_points_csv(res: Any, path: Path) -> Path:
    """The error points of a ConvergenceResult as CSV (one row per problem, law, kind, L)."""
    import pandas as pd

    from ..io.store import atomic_write

    df = pd.DataFrame(res.points)
    return atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))


def _convergence_tables(res: Any) -> list[Table]:
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
            f["order"], _interval(f["boot_lo"], f["boot_hi"]), _interval(f["ci_lo"], f["ci_hi"]),
            f"{lv[0]}–{lv[-1]} ({len(lv)})" if lv else "none resolved", runs, ref, seed,
            version])
    pt_rows = []
    for q in res.points:
        if q["kind"] == "reference_correction":
            continue
        m = probs[q["problem"]]
        seed = m["weak_seed"] if q["kind"] == "weak" else m["strong_seed"]
        pt_rows.append([q["problem"], q["law"], q["kind"], q["label"], q["L"], q["error"],
                        q["se"], _interval(q["ci_lo"], q["ci_hi"]), q["used"], q["runs"], seed])
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


def _draw_convergence(ctx: Context, spec: FigureSpec, res: Any, reused: bool) -> Section:
    """Weak and strong errors of the L-layer network against the SDE, log-log."""
    from ..plots.convergence import _fit_label, plot_convergence

    png = plot_convergence(res, ctx.figures / "convergence.png")
    note = "Fitted orders, Gaussian law (95% bootstrap intervals):\n" + "\n".join(
        f"  {f['problem']}, {f['kind']} {f['label']}: {_fit_label(f)}"
        for f in res.fits if f["law"] == "gaussian")
    return Section(
        spec.name, spec.title, spec.claim, note=note,
        images=[Image(png, "Weak errors (per statistic) and strong error vs layers L; filled "
                           "markers: resolved points with 95% MC intervals; hollow triangles: "
                           "upper limits where Monte Carlo noise hides the error.")],
        tables=_convergence_tables(res),
        provenance={"settings": res.settings, "problems": res.problems, "reused": reused,
                    "data": str(ctx.data_path("convergence", ".json")),
                    "command": f"tokensde figure convergence --out {ctx.out}" + ctx.size_flag})
