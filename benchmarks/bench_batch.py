"""Batch size on the CPU: simulate's cache-sized default vs the memory-sized one, side by side.

    python benchmarks/bench_batch.py [--budget 1] [--repeats 3] [--threads 1]

For each (sampler, n, d) it times the layer loop (network scheme, float64) at the batch that
`model.default_batch` now picks on the CPU (the largest per-layer tensor within CACHE_BYTES, whole
run blocks) and at the batch of the memory rule (the noise workspace within BATCH_BYTES; the CPU
default before, still the rule on CUDA), in interleaved rounds as in bench_gram.py.
Columns: microseconds per run and layer, and old/new (> 1: the cache-sized batch is faster).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from _bench import banner, require_at_least
from bench_gram import time_interleaved

from tokensde import ModelParams
from tokensde.sim.batch import default_batch
from tokensde.sim.gram import recompress
from tokensde.sim.layers import normalize

RUNS = 100_000  # an experiment large enough that neither rule takes all runs at once
CASES = [("fast", 2, 16), ("fast", 2, 1024), ("fast", 8, 256), ("fast", 8, 1024),
         ("fast", 32, 64), ("full", 8, 64), ("gram", 8, 1024), ("gram", 32, 1024)]


def compare(sampler: str, n: int, d: int, budget: float, repeats: int) -> dict[str, float]:
    """Microseconds per run-layer at the new (CPU) and the old (memory-sized) default batch."""
    p = ModelParams(n=n, d=d, beta=1.0)
    sizes = {rule: default_batch(RUNS, p, sampler, torch.float64, dev)
             for rule, dev in (("new", "cpu"), ("old", "cuda"))}
    g = torch.Generator().manual_seed(n * 100_003 + d)
    x = normalize(torch.randn(max(sizes.values()), n, d, generator=g, dtype=torch.float64))
    if sampler == "gram":
        x = recompress(x)
    cases = {rule: (sampler, x[:b]) for rule, b in sizes.items()}
    secs = time_interleaved(cases, p, budget, "cpu", repeats=repeats)
    return {**{f"{r}_runs": float(b) for r, b in sizes.items()},
            **{r: 1e6 * secs[r] / sizes[r] for r in sizes}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args()
    require_at_least(ap, ("--threads", args.threads, 1), ("--repeats", args.repeats, 1),
                     ("--budget", args.budget, 1e-3))
    print(banner(args.threads, "float64"))
    print(f"{'sampler':>7} {'n':>3} {'d':>5} {'new runs':>9} {'new us/rl':>10} "
          f"{'old runs':>9} {'old us/rl':>10} {'old/new':>8}")
    t0 = time.perf_counter()
    for sampler, n, d in CASES:
        r = compare(sampler, n, d, args.budget, args.repeats)
        print(f"{sampler:>7} {n:>3} {d:>5} {int(r['new_runs']):>9} {r['new']:>10.2f} "
              f"{int(r['old_runs']):>9} {r['old']:>10.2f} {r['old'] / r['new']:>8.2f}", flush=True)
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
