"""Attention heads: the exact fast sampler against full, side by side in one run, same seeds.

    python benchmarks/bench_heads.py [--n 8] [--d 128] [--heads 4] [--budget 1] [--repeats 3]
        [--threads 1] [--quick]

For `heads` (and `heads = 1` for reference) it times the layer loop (`model.run_batch`, network
scheme, float64, CPU) of one prepared batch of tokens with each sampler: `full` draws one d x d
value matrix per head, `fast` one factorisation of each head's n x n Gram matrix and n d normals
per head (docs/variants.md §2). Each head has its own random query/key pair `I + G/sqrt(d)`. Both
samplers run on the same batch with the same seeds, in interleaved rounds as in bench_gram.py (so
load from elsewhere falls on both alike; best of `--repeats`). Columns: microseconds per run and
layer, and full/fast. Target (issue 14): full/fast >= 5 at (n, d, heads) = (8, 128, 4).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from _bench import banner, parser, require_at_least
from bench_gram import time_interleaved

from tokensde import ModelParams
from tokensde.sim.layers import normalize

TARGET = 5.0
RUNS = 512  # one batch, the same for both samplers


def head_params(n: int, d: int, heads: int, seed: int = 14) -> ModelParams:
    """Softmax, beta = 1, Gaussian matrix noise; head h has `Q_h, K_h = I + G/sqrt(d)`."""
    g = np.random.default_rng(seed)
    qk = np.eye(d) + g.standard_normal((2, heads, d, d)) / np.sqrt(d)
    return ModelParams(n=n, d=d, beta=1.0, heads=heads, Q=qk[0] if heads > 1 else qk[0, 0],
                       K=qk[1] if heads > 1 else qk[1, 0])


def compare(n: int, d: int, heads: int, runs: int, budget: float, repeats: int
            ) -> dict[str, float]:
    """Microseconds per run-layer of `fast` and `full` on one batch of `runs` runs."""
    p = head_params(n, d, heads)
    g = torch.Generator().manual_seed(n * 100_003 + d)
    x = normalize(torch.randn(runs, n, d, generator=g, dtype=torch.float64))
    secs = time_interleaved({s: (s, x) for s in ("fast", "full")}, p, budget, "cpu",
                            repeats=repeats)
    return {s: 1e6 * t / runs for s, t in secs.items()}


def main() -> None:
    ap = parser(__doc__, "64 runs, budget 0.1 s")
    ap.add_argument("--d", type=int, default=128, help="dimension (default 128)")
    ap.add_argument("--heads", type=int, default=4, help="heads (default 4; 1 is always run too)")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"runs in the batch (default {RUNS})")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.budget = min(args.runs, 64), min(args.budget, 0.1)
    require_at_least(ap, ("--n", args.n, 1), ("--d", args.d, 2), ("--heads", args.heads, 1),
                     ("--runs", args.runs, 1), ("--threads", args.threads, 1),
                     ("--repeats", args.repeats, 1), ("--budget", args.budget, 1e-3))
    print(banner(args.threads, f"float64, network scheme, {args.runs} runs"))
    print(f"{'n':>3} {'d':>5} {'heads':>5} {'fast us/rl':>11} {'full us/rl':>11} {'full/fast':>10}")
    t0 = time.perf_counter()
    ratio = {}
    for heads in sorted({args.heads, 1}, reverse=True):
        r = compare(args.n, args.d, heads, args.runs, args.budget, args.repeats)
        ratio[heads] = r["full"] / r["fast"]
        print(f"{args.n:>3} {args.d:>5} {heads:>5} {r['fast']:>11.2f} {r['full']:>11.2f} "
              f"{ratio[heads]:>9.1f}x", flush=True)
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average after {os.getloadavg()[0]:.2f}")
    if (args.n, args.d, args.heads) == (8, 128, 4):
        met = "met" if ratio[4] >= TARGET else "NOT met"
        print(f"target full/fast >= {TARGET:g} at (n, d, heads) = (8, 128, 4): "
              f"{ratio[4]:.1f} {met}")


if __name__ == "__main__":
    main()
