"""Cost of the continuous noise factor against the former rounding-dependent rule, side by side.

The `fast` sampler factors `Y Y^T` by Cholesky where every pivot passes a fixed margin and by the
symmetric root (SVD) elsewhere (`tokensde.sim.samplers._gram_factor`). The former rule took
Cholesky wherever it happened to succeed and an unsigned QR factor where it failed, which made a
seeded run depend on the CPU. This script times `simulate` with each rule, alternating them, in
one process, and prints the ratio of CPU times (one thread, so that other load on the machine
changes both alike).

    python benchmarks/bench_factor.py            # about a minute on one core
"""

from __future__ import annotations

import time

import torch

import tokensde.sim.samplers as samplers
from tokensde import Execution, ModelParams, TimeGrid, simulate

CONFIGS = [
    dict(n=2, d=4, beta=2.0),
    dict(n=8, d=32, beta=1.0),
    dict(n=16, d=24, beta=4.0),
    dict(n=32, d=64, beta=1.0),
    dict(n=4, d=7, beta=1.0, mlp="relu", mlp_sigma=1.0),
]


def former_factor(y: torch.Tensor) -> torch.Tensor:
    """The former rule: Cholesky where it succeeds, `R^T` of an unsigned QR elsewhere."""
    c, info = torch.linalg.cholesky_ex(y @ y.transpose(-1, -2))
    bad = info != 0
    if bool(bad.any()):
        r = torch.linalg.qr(y[bad].transpose(-1, -2), mode="r")[1].transpose(-1, -2)
        c[bad] = torch.nn.functional.pad(r, (0, y.shape[-2] - r.shape[-1]))
    return c


def cpu_seconds(p: ModelParams, factor, repeats: int = 2) -> float:
    """Least CPU time of `repeats` runs: 512 runs, 200 layers, alpha 0.1, the fast sampler."""
    samplers._gram_factor = factor
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        simulate(p, TimeGrid.make(layers=200, alpha=0.1), runs=512, seed=0,
                 execution=Execution(sampler="fast"))
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    torch.set_num_threads(1)
    current = samplers._gram_factor
    print("| n | d | beta | MLP | former (s) | continuous (s) | continuous / former |")
    print("|---|---|---|---|---|---|---|")
    for kw in CONFIGS:
        p = ModelParams(**kw)
        old, new = cpu_seconds(p, former_factor), cpu_seconds(p, current)
        print(f"| {p.n} | {p.d} | {p.beta:g} | {p.mlp} | {old:.2f} | {new:.2f} | {new / old:.2f} |")
    samplers._gram_factor = current


if __name__ == "__main__":
    main()
