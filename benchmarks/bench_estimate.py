"""The time estimate against the time measured: measured / estimated over a grid of runs.

Each case is estimated the way its command estimates it before the work (`sim.budget.TimeModel`
from this machine's calibration, `io.calibration.time_model`, applied to the budget's layer
steps and work), then run once in this process after a warm-up of the same code path; the table
gives the estimate, the wall time and this process's CPU time (which another process's load does
not inflate) and their ratios to the estimate, marked `OUT` when wall/estimated is outside
[1/3, 3] (the target). Cases: the
fixed cost of deep small runs, the fast, full and Gram samplers at small and large n, the SDE,
the O(n) attention by expansion at n = 4096 (and dense attention at n = 1024), two-token Monte
Carlo (network to the horizon, and the reduced engine), a meanfield table, a real
torch-encoder run at init, and `vit compare` training runs on the bundled digits (its estimate
from a few timed steps of the model, `vit.estimate`, not from the calibration).

    OMP_NUM_THREADS=1 python benchmarks/bench_estimate.py [--quick] [--threads 1] [--csv out.csv]
        [--only sim|vit]

`--quick`: a third of the layers of each case (a smoke run, under a minute).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd
import torch
from _bench import banner

from tokensde.analysis import monte_carlo
from tokensde.analysis.pair_monte_carlo import pair_budget, spec_params
from tokensde.io import time_model
from tokensde.meanfield.absorption import run_table, table_budget
from tokensde.model.params import ModelParams, TimeGrid
from tokensde.real import RealSpec, run_real
from tokensde.real.experiment import real_budget
from tokensde.sim import Execution, Recording, StoppingRule, simulate
from tokensde.sim.simulate import simulation_budget
from tokensde.vit import compare_plan, vit_budget

# name, ModelParams fields, layers, runs, simulate options
SIM_CASES: list[tuple[str, dict, int, int, dict]] = [
    ("deep tiny (n=2, d=3, full)", {"n": 2, "d": 3}, 30_000, 1, {"sampler": "full"}),
    ("deep tiny gram (n=2, d=3)", {"n": 2, "d": 3}, 6_000, 1, {"sampler": "gram"}),
    ("small n, many runs (n=8, d=3)", {"n": 8, "d": 3}, 300, 1000, {}),
    ("fast (n=128, d=16)", {"n": 128, "d": 16}, 60, 16, {"sampler": "fast"}),
    ("full (n=d=64)", {"n": 64, "d": 64}, 60, 32, {"sampler": "full"}),
    ("gram (n=d=32)", {"n": 32, "d": 32}, 150, 16, {"sampler": "gram"}),
    ("gram (n=128, d=3)", {"n": 128, "d": 3}, 60, 8, {"sampler": "gram"}),
    ("SDE (n=16, d=3)", {"n": 16, "d": 3}, 1500, 64, {"scheme": "sde"}),
    ("dense attention (n=1024, d=3)", {"n": 1024, "d": 3}, 6, 1, {"attention_eval": "dense"}),
    ("expansion (n=4096, d=3)", {"n": 4096, "d": 3}, 30, 1, {"attention_eval": "expansion"}),
]
# name, vit compare model fields, batch size, epochs, seeds (digits: 1437 training images)
VIT_CASES: list[tuple[str, dict, int, int, int]] = [
    ("vit digits (D=64, depth 6, 5 tokens)", {"dim": 64, "depth": 6, "heads": 4}, 32, 6, 2),
    ("vit digits (D=128, depth 8, batch 128)", {"dim": 128, "depth": 8, "heads": 4}, 128, 4, 1),
    ("vit digits patch 2 (D=64, depth 4, 17 tokens)", {"dim": 64, "depth": 4, "heads": 4}, 32,
     6, 1),
    ("vit digits attention-only (D=32, depth 12)", {"dim": 32, "depth": 12, "heads": 2,
                                                    "block": "attention-only"}, 64, 12, 1),
]
# name, monte_carlo options (beta 1, d 3), depth time
MC_CASES: list[tuple[str, dict, float]] = [
    ("two-token mc, network to T", {"runs": 400, "stopping": StoppingRule()}, 20.0),
    ("two-token mc, reduced engine", {"runs": 20_000, "engine": "reduced"}, 200.0),
]


def sim_case(model, name: str, fields: dict, layers: int, runs: int, opts: dict) -> dict:
    p, grid = ModelParams(**fields), TimeGrid.make(layers)
    two = Recording(checkpoints=2)
    how = Execution(sampler=opts.get("sampler", "auto"),
                    attention_eval=opts.get("attention_eval", "auto"))
    scheme = opts.get("scheme", "network")
    b = simulation_budget(p, grid, runs, recording=two, execution=how)
    with warnings.catch_warnings():  # the SDE step of so few layers is large: said once
        warnings.simplefilter("ignore")
        simulate(p, TimeGrid.make(max(2, layers // 100)), runs=runs, scheme=scheme,
                 recording=two, execution=how)
    t0 = clock()
    simulate(p, grid, runs=runs, scheme=scheme, recording=two, execution=how)
    return row(name, b, model, since(t0))


def mc_case(model, name: str, opts: dict, T: float) -> dict:
    d, dt = 3, 0.05 / 3
    grid = TimeGrid.make(T=T, dt=dt)
    b = pair_budget(spec_params(1.0, d), 0.0, grid, opts["runs"], opts.get("engine", "network"),
                    opts.get("stopping", StoppingRule.decided()))
    monte_carlo(1.0, d, **{**opts, "runs": min(opts["runs"], 50)}, T=T / 10, dt=dt)  # warm
    t0 = clock()
    monte_carlo(1.0, d, **opts, T=T, dt=dt)
    return row(name, b, model, since(t0))


def meanfield_case(model, T: float) -> dict:
    args = {"ds": [2], "betas": [3.0], "ns": [16, 64], "K": 128, "starts": ["iid"], "runs": 16,
            "T": T, "dt": 0.02}
    b = table_budget(args["ds"], args["betas"], args["ns"], args["K"], args["starts"],
                     args["runs"], args["T"], args["dt"])
    near = StoppingRule.decided(1e-9)
    run_table(**{**args, "T": 0.1}, stopping=near)  # warm
    t0 = clock()
    run_table(**args, stopping=near)  # runs decided this close to +-1 are few: near the bound
    return row("meanfield table (K=128, n=16, 64)", b, model, since(t0))


def real_case(model, layers: int) -> dict:
    spec = RealSpec(arch="torch-encoder", layers=layers, width=256, heads=4, ctx=64)
    b = real_budget(spec, 4, 2, 64, 32)
    run_real(RealSpec(arch="torch-encoder", layers=2, width=32, heads=4, ctx=8), 2, 2,
             sde_steps=4, sde_runs=2)  # warm
    t0 = clock()
    run_real(spec, 4, 2, sde_steps=64, sde_runs=32)
    return row(f"real torch-encoder (L={layers}, width 256)", b, model, since(t0))


def vit_case(name: str, fields: dict, batch: int, epochs: int, seeds: int) -> dict:
    """`vit compare` of one arm: estimated as the command does (a few timed steps of the model,
    `vit.estimate.vit_budget`), then trained (jobs 1, 1 thread) into a temporary folder."""
    patch = 2 if "patch 2" in name else None
    plan = compare_plan("default", seeds, "digits", batch_size=batch, patch=patch, model=fields,
                        train={"epochs": epochs})
    with tempfile.TemporaryDirectory() as tmp:
        b, model = vit_budget(plan, Path(tmp), 1, 1)
        t0 = clock()
        plan.run(tmp, 1, 1)
        return row(name, b, model, since(t0))


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(t0: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU seconds (this process) since `t0`."""
    return time.perf_counter() - t0[0], time.process_time() - t0[1]


def row(name: str, b, model, took: tuple[float, float]) -> dict:
    est = model.seconds(b.steps, b.work)
    ratio = took[0] / est
    return {"case": name, "steps": b.steps, "work": b.work, "estimated_s": est,
            "wall_s": took[0], "cpu_s": took[1], "wall/estimated": ratio,
            "cpu/estimated": took[1] / est, "within 3x": "yes" if 1 / 3 <= ratio <= 3 else "OUT"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a third of the layers of each case")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--csv", help="also write the table here")
    ap.add_argument("--only", choices=("sim", "vit"), help="only the simulation-side cases "
                    "(simulate, two-token, meanfield, real) or only the ViT training cases")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be >= 1; got {args.threads}")
    sys.stdout.write(banner(args.threads, "measured / estimated time"))
    model = time_model()
    sys.stdout.write(f"time model: c0 = {model.c0 * 1e6:.3g} us a layer step, c1 = "
                     f"{model.c1:.3g} s a work unit ({model.source}); torch threads "
                     f"{torch.get_num_threads()}\n\n")
    cut = 3 if args.quick else 1
    rows = []
    if args.only != "vit":
        rows += [sim_case(model, name, f, max(2, L // cut), r, o)
                 for name, f, L, r, o in SIM_CASES]
        rows += [mc_case(model, name, o, T / cut) for name, o, T in MC_CASES]
        rows += [meanfield_case(model, 4.0 / cut), real_case(model, 12 // cut)]
    if args.only != "sim":
        rows += [vit_case(name, f, b, max(1, e // cut), s) for name, f, b, e, s in VIT_CASES]
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3g}".format):
        sys.stdout.write(table.to_string(index=False) + "\n")
    ratios, cpu = table["wall/estimated"], table["cpu/estimated"]
    sys.stdout.write(f"\nwall/estimated from {ratios.min():.2f} to {ratios.max():.2f} (CPU time "
                     f"of this process: {cpu.min():.2f} to {cpu.max():.2f}); wall outside [1/3, "
                     f"3]: {int((table['within 3x'] == 'OUT').sum())} of {len(table)}; load "
                     f"average after {os.getloadavg()[0]:.2f}\n")
    if args.csv:
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
