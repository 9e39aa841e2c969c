"""Fast (exact-in-law n x d) vs full (d x d) noise sampler: run-layers per second, side by side.

    python benchmarks/bench_samplers.py [--runs 1000] [--layers 20] [--threads N]

Both samplers run the same network (n tokens, Gaussian matrix noise, softmax, beta = 1) for the
same seed-determined inputs, in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import time

import torch

from tokensde import Execution, ModelParams, TimeGrid, simulate

CASES = [(2, 64), (2, 128), (8, 128), (32, 64)]
TARGETS = {(2, 64): 10.0, (2, 128): 30.0, (8, 128): 8.0, (32, 64): 1.0}


def rate(p: ModelParams, sampler: str, runs: int, layers: int, dtype: str) -> float:
    """Best of 3 timings, in run-layers per second (one warm-up run first)."""
    simulate(p, TimeGrid.make(layers=2), runs=runs, execution=Execution(sampler=sampler, dtype=dtype))
    best = float("inf")
    for rep in range(3):
        t0 = time.perf_counter()
        simulate(p, TimeGrid.make(layers=layers), runs=runs, seed=rep,
                 execution=Execution(sampler=sampler, dtype=dtype))
        best = min(best, time.perf_counter() - t0)
    return runs * layers / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"R = {args.runs}, {args.layers} layers, torch {torch.__version__}, "
          f"{args.threads} threads")
    print("| n | d | dtype | full (run-layers/s) | fast (run-layers/s) | fast/full | target |")
    print("|---|---|---|---|---|---|---|")
    for n, d in CASES:
        p = ModelParams(n=n, d=d, beta=1.0)
        for dtype in ("float32", "float64"):
            full = rate(p, "full", args.runs, args.layers, dtype)
            fast = rate(p, "fast", args.runs, args.layers, dtype)
            print(f"| {n} | {d} | {dtype} | {full:,.0f} | {fast:,.0f} | {fast / full:.1f}x | "
                  f">= {TARGETS[(n, d)]:g}x |", flush=True)


if __name__ == "__main__":
    main()
