"""The two-token phase grid (spec §5): Monte Carlo P_anti of the full network over (beta, d).

`mc_grid` runs one `two_token_mc.monte_carlo` cell per (beta, d), each with a seed derived from
the root seed and the cell's own values, and returns one row per cell (columns `COLUMNS`) with
the exact theory beside it. `saved_grid` hands the table to a writer after every cell (an
interrupted grid resumes from what was written); `csv_grid` keeps it in a CSV file. The figures
of `tokensde.plots.phase` read these tables.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from . import absorption
from . import two_tokens as tt
from .rng import derive_seed
from .two_token_mc import PairOutcome, monte_carlo

COLUMNS: tuple[str, ...] = (
    "beta", "d", "init", "rho0", "engine", "runs", "T", "dt", "steps", "root_seed", "seed",
    "tol", "antipodal",
    "merged", "undecided", "p_anti", "ci_lo", "ci_hi", "p_merged", "p_undecided", "theory",
    "theory_tol", "outside", "until", "t_decided_median", "t_decided_q90", "decision_rate",
    "beta_c", "wall_s", "version")


def cell_seed(seed: int, beta: float, d: int, rho0: float | str) -> int:
    """Seed of one grid cell, from the root seed and the cell's own values (not its position)."""
    r = 3_000_000 if rho0 == "uniform" else round((float(rho0) + 1.0) * 1e6)
    return derive_seed(seed, round(beta * 1e6), int(d), r)


def _row(out: PairOutcome, beta: float, d: int, root_seed: int) -> dict[str, Any]:
    r = out.to_dict()
    at_tol = absorption.p_anti_at_tol(beta, d, out.rho0, out.tol)
    return {
        "beta": beta, "d": d, "init": "uniform" if out.rho0 == "uniform" else "pair",
        "rho0": math.nan if out.rho0 == "uniform" else float(out.rho0), "engine": out.engine,
        "runs": out.runs, "T": out.T, "dt": out.dt, "steps": out.steps, "root_seed": root_seed,
        "seed": out.seed, "tol": out.tol,
        "antipodal": out.antipodal, "merged": out.merged, "undecided": out.undecided,
        "p_anti": out.p_anti, "ci_lo": r["ci"][0], "ci_hi": r["ci"][1],
        "p_merged": r["p_merged"], "p_undecided": r["undecided"], "theory": out.theory,
        "theory_tol": at_tol, "outside": not r["ci"][0] <= at_tol <= r["ci"][1],
        "until": r["until"], "t_decided_median": r.get("t_decided_median", math.nan),
        "t_decided_q90": r.get("t_decided_q90", math.nan),
        "decision_rate": absorption.decision_rate(beta, d, out.tol) if d <= 64 else math.nan,
        "beta_c": tt.beta_c(d), "wall_s": out.wall_s, "version": r["version"],
    }


def mc_grid(betas: Iterable[float] | Callable[[int], Iterable[float]], ds: Iterable[int],
            rho0: float | str = "uniform", *,
            runs: int = 400, T: float = 200.0, dt: float | Callable[[int], float] | None = None,
            seed: int = 0, tol: float = 1e-8, engine: str = "network", sampler: str = "auto",
            until: str = "decided",
            done: pd.DataFrame | None = None,
            on_row: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """Monte Carlo `P_anti` for every (beta, d) cell, one row per cell (columns `COLUMNS`).

    `betas` and `dt` may be functions of d; the default `dt` is `two_tokens.default_dt(d)` (the
    network's step error grows with d). Cells already in
    `done` (same beta and d) are kept, not recomputed; `on_row(row)` is called after each new
    cell, so an interrupted grid loses nothing already computed.
    """
    rho0 = tt.check_rho0(rho0)
    rows = [] if done is None else done.to_dict("records")
    have = {(float(r["beta"]), int(r["d"])) for r in rows}
    for d in ds:
        step = tt.default_dt(int(d)) if dt is None else dt(int(d)) if callable(dt) else dt
        for beta in betas(int(d)) if callable(betas) else betas:
            if (float(beta), int(d)) in have:
                continue
            out = monte_carlo(float(beta), int(d), rho0, runs=runs, T=T, dt=step,
                              seed=cell_seed(seed, beta, d, rho0), tol=tol, engine=engine,
                              sampler=sampler, until=until)
            row = _row(out, float(beta), int(d), seed)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return pd.DataFrame(rows, columns=list(COLUMNS)).sort_values(["d", "beta"],
                                                                 ignore_index=True)


def saved_grid(betas: Iterable[float] | Callable[[int], Iterable[float]], ds: Iterable[int],
               rho0: float | str = "uniform", *, write: Callable[[pd.DataFrame], object],
               done: pd.DataFrame | None = None, **kwargs: Any) -> pd.DataFrame:
    """`mc_grid(betas, ds, rho0, done=done, **kwargs)` that hands the table so far to `write`
    after every new cell and the whole table at the end, so an interrupted grid loses no
    finished cell (pass the saved table as `done` to resume)."""
    rows: list[dict[str, Any]] = [] if done is None else done.to_dict("records")

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        write(pd.DataFrame(rows, columns=list(COLUMNS)))

    df = mc_grid(betas, ds, rho0, done=done, on_row=keep, **kwargs)
    write(df)
    return df


def csv_grid(table: str | os.PathLike, betas: Iterable[float], ds: Iterable[int],
             rho0: float | str = "uniform", **kwargs: Any) -> pd.DataFrame:
    """`saved_grid` kept in the CSV file `table`: the cells already in it are reused, and the
    file is rewritten (atomically) after every new cell and at the end."""
    from .store import atomic_write

    path = Path(table)

    def write(df: pd.DataFrame) -> None:
        atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))

    done = pd.read_csv(path) if path.exists() else None
    return saved_grid(betas, ds, rho0, write=write, done=done, **kwargs)
