"""Exact P_anti (spec §5): vectorised scale-function quadrature vs adaptive scipy `quad`, side by side.

    python benchmarks/bench_theory.py [--grid 50] [--sample 100] [--rho0 -0.2]

Rows: one point (best of many calls), a grid x grid (beta, d) theory grid at fixed rho0, and the
same grid averaged over a uniform random initial pair. The `quad` reference
(`theory.p_anti_reference`, nested adaptive quadrature) is timed on `--sample` random grid
points and scaled to the grid; its values also give the largest deviation of the fast quadrature.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from tokensde import theory as tt

TARGETS = {"one point": 5e-3, "grid": 2.0}


def best_time(fn, repeat: int) -> float:
    """Best wall time of `repeat` calls of `fn()` (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=int, default=50)
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--rho0", type=float, default=-0.2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n = args.grid
    beta, d = np.meshgrid(np.linspace(0.0, 5.0, n), np.linspace(2.0, 30.0, n), indexing="ij")
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(n * n, size=min(args.sample, n * n), replace=False)
    bs, ds = beta.ravel()[pick], d.ravel()[pick]

    one_fast = best_time(lambda: tt.p_anti(2.0, 4, -0.5), 200)
    one_ref = best_time(lambda: tt.p_anti_reference(2.0, 4, -0.5), 5)
    grid_fast = best_time(lambda: tt.p_anti(beta, d, args.rho0), 3)
    uni_fast = best_time(lambda: tt.p_anti_uniform(beta, d), 3)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # quad's own accuracy warnings near the critical line
        warnings.simplefilter("ignore")
        ref = np.array([tt.p_anti_reference(b, dd, args.rho0)
                        for b, dd in zip(bs, ds, strict=True)])
    grid_ref = (time.perf_counter() - t0) / len(pick) * n * n
    err = np.max(np.abs(tt.p_anti(bs, ds, args.rho0) - ref))

    print(f"exact P_anti, numpy {np.__version__}; quad reference timed on {len(pick)} of the "
          f"{n}x{n} points (beta in [0, 5], d in [2, 30], rho0 = {args.rho0:g})")
    print("| case | vectorised | scipy quad | quad/vectorised | target |")
    print("|---|---|---|---|---|")
    print(f"| one point | {one_fast * 1e3:.3f} ms | {one_ref * 1e3:.1f} ms | "
          f"{one_ref / one_fast:.0f}x | < {TARGETS['one point'] * 1e3:g} ms |")
    print(f"| {n}x{n} grid | {grid_fast:.3f} s | {grid_ref:.1f} s (scaled) | "
          f"{grid_ref / grid_fast:.0f}x | < {TARGETS['grid']:g} s |")
    print(f"| {n}x{n} grid, uniform rho0 | {uni_fast:.3f} s | - | - | - |")
    print(f"max |vectorised - quad| on the sample: {err:.1e}")


if __name__ == "__main__":
    main()
