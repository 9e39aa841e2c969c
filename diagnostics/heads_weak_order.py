"""Weak order of the L-layer network with attention heads against its SDE limit (docs/variants.md §2).

    python diagnostics/heads_weak_order.py [--heads 2] [--runs 16384] [--seed 0] [--alone]

Four tokens in d = 3, beta = 2, T = 1, heads with their own random Q_h, K_h (fixed seed): the
convergence machinery of `tokensde.analysis.convergence` (one Brownian path per head shared by the networks
at L = 4 ... 64 and the Richardson-extrapolated fine SDE, ref_steps = 256) for the mean and mean
square of the pairwise inner products at T, Gaussian and uniform value laws. Prints the fitted weak
orders with their bootstrap intervals, and the heads = 1 problem with the same Q_1, K_1 alongside.
"""

from __future__ import annotations

import argparse

import numpy as np

from tokensde import ModelParams
from tokensde.analysis.convergence import Problem, coupled_samples, summarise

LEVELS = (4, 8, 16, 32, 64)
STATS = {"pair_mean": "E mean<x_i,x_j>", "pair_square_mean": "E mean<x_i,x_j>^2"}


def problem(heads: int) -> Problem:
    """Four tokens, d = 3, beta = 2, T = 1, per-head Q, K = I + 0.5 G (G standard normal)."""
    g = np.random.default_rng(14)
    q = np.eye(3) + 0.5 * g.standard_normal((max(heads, 2), 3, 3))
    k = np.eye(3) + 0.5 * g.standard_normal((max(heads, 2), 3, 3))
    qk = (q[:heads], k[:heads]) if heads > 1 else (q[0], k[0])
    p = ModelParams(n=4, d=3, beta=2.0, heads=heads, Q=qk[0], K=qk[1])
    return Problem(f"heads{heads}", p, T=1.0, init="uniform", statistics=dict(STATS))


def weak_orders(tag: str, prob: Problem, runs: int, seed: int,
                laws: tuple[str, ...] = ("gaussian", "uniform")) -> None:
    """Print the weak errors of `prob`'s networks at LEVELS against its SDE (and the reference
    value of each statistic), and the fitted weak orders with their bootstrap intervals."""
    s = coupled_samples(prob, LEVELS, ref_steps=256, runs=runs, seed=seed, laws=laws)
    points, fits = summarise(s, s, prob, seed=seed)
    for r in points:
        if r["kind"] == "weak":
            print(f"{tag} {r['law']:8s} {r['statistic']:16s} L={r['L']:3d} "
                  f"err={r['error']:+.3e} se={r['se']:.1e}")
        elif r["kind"] == "reference_correction":
            print(f"{tag} sde      {r['statistic']:16s} value={r['value']:+.5f} "
                  f"se={r['value_se']:.1e} fine-coarse={r['error']:+.2e} se={r['se']:.1e}")
    for f in fits:
        if f["kind"] == "weak":
            print(f"{tag} {f['law']:8s} {f['statistic']:16s} order={f['order']} "
                  f"boot=[{f.get('boot_lo')}, {f.get('boot_hi')}] levels={f.get('levels')}",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alone", action="store_true", help="skip the heads = 1 comparison")
    a = ap.parse_args()
    for heads in (a.heads,) if a.alone else (a.heads, 1):
        weak_orders(f"heads={heads}", problem(heads), a.runs, a.seed)


if __name__ == "__main__":
    main()
