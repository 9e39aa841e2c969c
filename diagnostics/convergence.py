"""Convergence of the L-layer network to its SDE limit: weak and strong errors, fitted orders.

    python diagnostics/convergence.py                      # full size, ~4-5 min on 2 free cores
    python diagnostics/convergence.py --size quick         # the size `reproduce --quick` uses
    python diagnostics/convergence.py --docs               # also refresh docs/convergence.png

For L = 4 ... 1024 layers over depth time T, on Brownian paths shared with a fine-step SDE
reference (`tokensde.analysis.convergence`): the weak error of smooth statistics at T (two tokens:
E[rho_T], E[rho_T^2]; eight tokens: mean and mean square of the pairwise inner products) against
the Richardson-extrapolated projected Euler SDE, and the strong (pathwise) RMS token error at T/4
and T against the finest SDE path; Gaussian and uniform value laws side by side. Orders are the
least-squares slopes of log|error| on log L with Poisson-bootstrap intervals over runs; weak
errors enter a fit only where they exceed 3 Monte Carlo standard errors.

Writes, under OUT (default results/full, the layout `tokensde reproduce` reads, so a later
`tokensde reproduce --full --out results/full` reuses this run):
    OUT/data/convergence-<size>.json   every point and fit, parameters, seeds, version
    OUT/data/convergence-<size>.csv    the error points, one per row
    OUT/data/convergence-<size>-fits.csv  the fitted orders
    OUT/figures/convergence.png        the log-log figure
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

from tokensde.io.store import atomic_write
from tokensde.plots.convergence import plot_convergence
from tokensde.study import Context
from tokensde.study.convergence import convergence_data

DOCS = Path(__file__).resolve().parent.parent / "docs" / "convergence.png"


def fits_frame(res) -> pd.DataFrame:
    """The fitted orders as a table."""
    cols = ["problem", "law", "kind", "statistic", "order", "order_se", "boot_lo", "boot_hi",
            "ci_lo", "ci_hi", "constant", "levels", "runs"]
    return pd.DataFrame([{c: f.get(c) for c in cols} for f in res.fits], columns=cols)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="full", choices=("tiny", "quick", "full"))
    ap.add_argument("--out", type=Path, default=Path("results/full"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--docs", action="store_true", help="copy the figure to docs/convergence.png")
    args = ap.parse_args(argv)
    ctx = Context(args.out, args.size, args.seed, args.workers,
                  log=lambda s: print(s, file=sys.stderr))
    t0 = time.perf_counter()
    res, reused = convergence_data(ctx)
    wall = time.perf_counter() - t0
    fig = plot_convergence(res, ctx.figures / "convergence.png")
    fits = fits_frame(res)
    fits_csv = ctx.data_path("convergence", "-fits.csv")
    atomic_write(fits_csv, lambda tmp: fits.to_csv(tmp, index=False))
    if args.docs:
        shutil.copyfile(fig, DOCS)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(fits.drop(columns=["constant", "ci_lo", "ci_hi"]).to_string(
            index=False, float_format=lambda v: f"{v:.3f}"))
    cpu = sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
              for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(f"\n{'reused saved result' if reused else 'computed'} in {wall:.0f} s wall, {cpu:.0f} s "
          f"CPU (all processes, {args.workers} workers); figure {fig}; tables "
          f"{ctx.data_path('convergence', '.json')}, {fits_csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
