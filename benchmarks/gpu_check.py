"""CPU vs CUDA for the fast, full and Gram samplers: throughput ratios, and the same law on CUDA.

    python benchmarks/gpu_check.py          # about 2 minutes on one H200; prints, exits 1 on a failure
    python benchmarks/gpu_check.py --device cpu   # dry run of this script without a GPU

Without CUDA (and no --device) it runs nothing and says so. Throughput: runs*layers per second of
the layer loop (as in bench_gram.py), CPU with all its threads vs the device, float64. Law: two tokens
(d = 4, beta = 2, rho0 = -0.5, T = 6, dt = 0.02) simulated on CUDA and on the CPU with each sampler;
a KS test on rho at t = 1 and a two-proportion test on the merged fraction at T must not reject.
Until decided: the same pair run on the device until `1 - |rho| < 1e-8`: P(antipodal) against the
exact first-passage value, and each decided run equal to the device's fixed-horizon run at its
decision layer. ViT depth sweep: two digits cells (attention-only, depth 4) trained on the device
(TOKENSDE_VIT_DEVICE) and on the CPU: the geometry at initialisation equal, the accuracies close.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_gram import time_sampler

from tokensde import Execution, InitialState, ModelParams, Recording, StoppingRule, TimeGrid, simulate
from tokensde.sim.gram import recompress
from tokensde.sim.layers import normalize

# (sampler, n, d, runs on CPU, runs on CUDA)
SPEED = [
    ("fast", 8, 1024, 256, 4096),
    ("full", 8, 256, 64, 1024),
    ("gram", 8, 1024, 2048, 65536),
    ("gram", 32, 4096, 256, 16384),
]
LAW_RUNS = 4000
DEVICE_ENV = "TOKENSDE_VIT_DEVICE"  # the training device of the vit_depth kind (docs/vit.md)


def throughput(sampler: str, n: int, d: int, runs: int, device: str) -> float:
    """Runs*layers per second of `sampler` on `device`."""
    p = ModelParams(n=n, d=d, beta=1.0)
    g = torch.Generator(device=device).manual_seed(0)
    x = normalize(torch.randn(runs, n, d, generator=g, dtype=torch.float64, device=device))
    if sampler == "gram":
        x = recompress(x)
    return runs / time_sampler(sampler, x, p, budget=1.5, device=device)


def outcome(sampler: str, device: str, seed: int) -> tuple[np.ndarray, int]:
    """rho at t = 1 `(runs,)` and the number of merged pairs at T = 6."""
    res = simulate(ModelParams(n=2, d=4, beta=2.0), TimeGrid.make(T=6.0, dt=0.02), runs=LAW_RUNS, seed=seed,
                   initial=InitialState.pair(-0.5), recording=Recording(checkpoints=[50, 300]),
                   execution=Execution(sampler=sampler, device=device))
    rho = res.rho()
    return rho[:, 0], int((rho[:, 1] > 1 - 1e-3).sum())


def law_ok(sampler: str, device: str) -> bool:
    """`device` vs CPU two-sample tests for one sampler; prints the p-values."""
    rc, mc = outcome(sampler, device, seed=1)
    rp, mp = outcome(sampler, "cpu", seed=2)
    ks = stats.ks_2samp(rc, rp).pvalue
    pool = (mc + mp) / (2 * LAW_RUNS)
    z = (mc - mp) / LAW_RUNS / math.sqrt(2 * pool * (1 - pool) / LAW_RUNS)
    pz = 2 * stats.norm.sf(abs(z))
    ok = ks > 1e-3 and pz > 1e-3
    print(f"  {sampler:>4}: merged device {mc / LAW_RUNS:.3f} CPU {mp / LAW_RUNS:.3f} (p = {pz:.3f}); "
          f"KS on rho(t=1) p = {ks:.3f}  {'ok' if ok else 'FAIL'}", flush=True)
    return ok


def until_ok(sampler: str, device: str) -> bool:
    """Runs stopped at decision on `device`: P(antipodal) against the exact value at tol, and
    every decided run's state equal to the fixed-horizon run's at its decision layer."""
    from tokensde.theory.decision_time import p_anti_at_tol

    kw = dict(runs=LAW_RUNS, seed=3, initial=InitialState.pair(-0.5),
              execution=Execution(sampler=sampler, device=device))
    p, grid = ModelParams(n=2, d=4, beta=2.0), TimeGrid.make(T=20.0, dt=0.02)
    stop = simulate(p, grid, stopping=StoppingRule.decided(1e-8, 5), **kw)
    full = simulate(p, grid, recording=Recording(checkpoints=list(range(0, 1001, 5))), **kw)
    at = stop.decided_at
    done = np.flatnonzero(at >= 0)
    same = bool(np.array_equal(full.gram[done, at[done] // 5], stop.final_gram()[done]))
    anti = int((stop.final_gram()[:, 0, 1] < 0).sum())
    theory = p_anti_at_tol(2.0, 4, -0.5, 1e-8)
    z = (anti / LAW_RUNS - theory) / math.sqrt(theory * (1 - theory) / LAW_RUNS)
    pz = 2 * stats.norm.sf(abs(z))
    ok = same and pz > 1e-3 and len(done) > 0.9 * LAW_RUNS
    print(f"  {sampler:>4}: until decided: antipodal {anti / LAW_RUNS:.3f} theory {theory:.3f} "
          f"(p = {pz:.3f}), decided {len(done) / LAW_RUNS:.3f}, equal to the fixed-horizon run "
          f"at decision: {same}  {'ok' if ok else 'FAIL'}", flush=True)
    return ok


def vit_depth_ok(device: str) -> bool:
    """The sweep kind vit_depth on `device`: geometry at init (measured on the CPU) identical,
    test accuracy within 5 points of the CPU run's (float32 training differs in rounding)."""
    from tokensde.sweep import get_kind

    kind = get_kind("vit_depth")
    cell = {"block": "attention-only", "arm": "default", "depth": 4, "train_seed": 0,
            "dataset": "digits", "dim": 32, "train_subset": 0, "test_subset": 0,
            "batch_size": 32, "epochs": 3}
    rows = {}
    for dev in ("cpu", device.split(":")[0]):
        os.environ[DEVICE_ENV] = dev
        rows[dev] = kind(cell, 0)
    os.environ.pop(DEVICE_ENV)
    cpu, gpu = rows["cpu"], rows[device.split(":")[0]]
    same_geo = all(cpu[k] == gpu[k] for k in cpu if k.startswith("init_"))
    ok = same_geo and abs(cpu["acc"] - gpu["acc"]) < 0.05 and gpu["device"] == device.split(":")[0]
    print(f"  vit_depth: accuracy CPU {cpu['acc']:.3f} device {gpu['acc']:.3f} "
          f"({gpu['train_s']:.1f} s), geometry at init equal: {same_geo}  "
          f"{'ok' if ok else 'FAIL'}", flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="device compared with the CPU (default cuda)")
    dev = ap.parse_args().device
    if dev.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing run (gpu_check needs a GPU)")
        return 0
    t0 = time.perf_counter()
    name = torch.cuda.get_device_name(dev) if dev.startswith("cuda") else dev
    print(f"device: {name}; CPU threads: {torch.get_num_threads()}; "
          f"torch {torch.__version__}; float64")
    print(f"{'sampler':>7} {'n':>3} {'d':>5} {'CPU rl/s':>12} {'dev rl/s':>12} {'dev/CPU':>9}")
    failures = 0
    for sampler, n, d, runs_cpu, runs_gpu in SPEED:
        try:
            cpu = throughput(sampler, n, d, runs_cpu, "cpu")
            gpu = throughput(sampler, n, d, runs_gpu if dev.startswith("cuda") else runs_cpu,
                             dev)
            print(f"{sampler:>7} {n:>3} {d:>5} {cpu:>12.0f} {gpu:>12.0f} {gpu / cpu:>9.1f}",
                  flush=True)
        except Exception as err:  # report and go on: one run should say everything it can
            failures += 1
            print(f"{sampler:>7} {n:>3} {d:>5} FAILED: {type(err).__name__}: {err}", flush=True)
    print("same law on the device as on the CPU (two tokens, d = 4, beta = 2, rho0 = -0.5):")
    for sampler in ("fast", "full", "gram"):
        try:
            failures += not law_ok(sampler, dev)
        except Exception as err:
            failures += 1
            print(f"  {sampler:>4}: FAILED: {type(err).__name__}: {err}", flush=True)
    print("runs stopped at decision on the device (same pair, tol = 1e-8, dt = 0.02):")
    for sampler in ("fast", "full", "gram"):
        try:
            failures += not until_ok(sampler, dev)
        except Exception as err:
            failures += 1
            print(f"  {sampler:>4}: FAILED: {type(err).__name__}: {err}", flush=True)
    print("ViT depth sweep cell trained on the device (digits, attention-only, depth 4):")
    try:
        failures += not vit_depth_ok(dev)
    except Exception as err:
        failures += 1
        print(f"  vit_depth: FAILED: {type(err).__name__}: {err}", flush=True)
    print(f"wall {time.perf_counter() - t0:.0f} s; {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
