"""Weak order of the L-layer network with a random MLP block against its SDE limit (docs/variants.md §5).

    python diagnostics/mlp_weak_order.py [--mlp relu] [--mlp-sigma 1] [--d 4] [--runs 65536] [--seed 0]

Four tokens, beta = 2, T = 1, softmax attention with identity Q, K, value noise sigma = 1 and an
MLP block of width 4d: the convergence machinery of `tokensde.analysis.convergence` (networks at
L = 4 ... 64 and the Richardson-extrapolated fine SDE, ref_steps = 256, coupled through one value
path and one Gaussian path of the block, `coupled_states`) for the mean and mean square of the
pairwise inner products at T, Gaussian and uniform value laws. Prints the weak errors, the SDE
values and the fitted weak orders with their bootstrap intervals (95 %).
"""

from __future__ import annotations

import argparse
import time

from heads_weak_order import LEVELS, STATS, weak_orders  # noqa: F401 (LEVELS: the levels used)

from tokensde import ModelParams
from tokensde.analysis.convergence import Problem


def problem(mlp: str, mlp_sigma: float, d: int) -> Problem:
    """Four uniform tokens in R^d, beta = 2, T = 1, with the MLP block `mlp` at `mlp_sigma`."""
    p = ModelParams(n=4, d=d, beta=2.0, mlp=mlp, mlp_sigma=mlp_sigma)
    return Problem(f"mlp-{mlp}-{mlp_sigma:g}-d{d}", p, T=1.0, init="uniform",
                   statistics=dict(STATS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlp", default="relu")
    ap.add_argument("--mlp-sigma", type=float, default=1.0)
    ap.add_argument("--d", type=int, default=4)
    ap.add_argument("--runs", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    prob = problem(a.mlp, a.mlp_sigma, a.d)
    weak_orders(prob.name, prob, a.runs, a.seed)
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
