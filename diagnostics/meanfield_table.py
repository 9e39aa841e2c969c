"""The many-token table of issue 23: P(bipolar) and the minority-mass law at absorption for n
particles (i.i.d. and quasi-uniform starts) and the K-node limit, on common noise paths.

CPU (what docs/meanfield.md reports):
    python3 diagnostics/meanfield_table.py out/meanfield_cpu --runs 48 --ns 16 64 256
GPU, the full-size table (n up to 4096, 1000 paths a cell, float32, <= 8 min by --budget):
    python3 diagnostics/meanfield_table.py out/meanfield_gpu --device cuda --dtype float32 \
        --runs 1000 --ns 16 64 256 1024 4096 --K 1024 --batch 125 --merge-tol 1e-5 --budget 400
Writes table.parquet (one row per d, beta, start, n; n = 0 is the limit) and minority.parquet
(per-run minority masses), each with the parameters and package version in its header.
"""

from __future__ import annotations

import argparse
import time

import torch

from tokensde.io.store import check_output
from tokensde.meanfield.absorption import STARTS, run_table, write_tables
from tokensde.sim.options import Execution, StoppingRule


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output directory (created)")
    ap.add_argument("--ds", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--betas", type=float, nargs="+", default=[1.0, 3.0, 6.0])
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--starts", nargs="+", default=list(STARTS), choices=STARTS)
    ap.add_argument("--K", type=int, default=256, help="limit nodes (default 256)")
    ap.add_argument("--runs", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--T", type=float, default=40.0, help="horizon (depth time)")
    ap.add_argument("--dt", type=float, default=0.02)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--merge-tol", type=float, default=1e-10,
                    help="merge nodes with 1 - <x_i, x_j> below this (< tol)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--batch", type=int, default=None, help="runs advanced together")
    ap.add_argument("--budget", type=float, default=None, help="seconds; no new cell after")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    out = check_output(a.out, "out", directory=True)
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    table, minority = run_table(a.ds, a.betas, a.ns, a.K, a.starts, a.runs, a.seed, a.T, a.dt,
                                stopping=StoppingRule.decided(a.tol), merge_tol=a.merge_tol,
                                execution=Execution(device=a.device, dtype=a.dtype,
                                                    batch_size=a.batch),
                                budget_s=a.budget, log=lambda line: print(line, flush=True))
    wall = time.perf_counter() - t0
    write_tables(out, table, minority, **{k: v for k, v in vars(a).items() if k != "out"},
                 wall_s=wall)
    cols = ["d", "beta", "start", "n", "runs", "p_decided", "p_bipolar", "p_bipolar_lo",
            "minority_mean", "minority_lo", "minority_hi", "minority_q10", "minority_q50",
            "t_decided_median", "wall_s"]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wall {wall:.1f} s")


if __name__ == "__main__":
    main()
