"""Does a run's block of random streams change the law? The undecided share of the n = 8, d = 8,
beta = 4 cell (until decided at tol 1e-8, T = 100, dt = 0.02) in cells of 200 runs (one partial
block) against cells of 256 (one full block), printed every 10 cells (docs/multi-token.md).

    OMP_NUM_THREADS=1 python diagnostics/multi_token_block_check.py
"""

from __future__ import annotations

import time

import numpy as np

from tokensde import ModelParams, StoppingRule, TimeGrid, simulate

MODEL = ModelParams(n=8, d=8, beta=4.0)
GRID = TimeGrid.make(T=100.0, dt=0.02)


def undecided(runs: int, seed: int) -> np.ndarray:
    """Per run: undecided at the horizon."""
    res = simulate(MODEL, GRID, runs=runs, seed=seed, stopping=StoppingRule.decided(1e-8))
    return res.decided_at < 0


def main() -> None:
    small: list[np.ndarray] = []
    full: list[np.ndarray] = []
    t0 = time.time()
    for k in range(50):
        small.append(undecided(200, 5000 + k))
        if k < 39:
            full.append(undecided(256, 7000 + k))
        if k % 10 == 9:
            a, b = np.concatenate(small), np.concatenate(full)
            se = np.sqrt(a.var() / a.size + b.var() / b.size)
            print(f"{k + 1} cells: blocks of 200 {a.mean():.4f} ({a.size} runs), blocks of 256 "
                  f"{b.mean():.4f} ({b.size}), difference {b.mean() - a.mean():+.4f} ± {se:.4f}, "
                  f"{time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
