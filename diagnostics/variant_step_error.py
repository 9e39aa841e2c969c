r"""The step error of the variant, MLP and multi-token numbers that README and the docs quote.

    OMP_NUM_THREADS=1 nice -n 10 python diagnostics/variant_step_error.py \
        --out diagnostics/variant_step_error.jsonl

Each cell is one quoted probability, at the step and horizon of the sweep that made it
(`variants-guide.toml`: n = 2, d = 4, uniform start, dt = 0.02, until decided at 1e-8 or T = 100;
`mlp-full.toml`: a pair at rho0 = -0.5, d = 4, first passage within tol, dt = 0.00025, T = 60,
tested every 4 fine layers, the coarsest step, where the sweep tests every layer;
`multi_token_step.toml`: n = 32, d = 3 and n = 8, d = 8 at beta = 4, uniform start, dt = 0.02,
until decided at 1e-8 or T = 100).
`analysis.measure_step_error` runs it coupled at dt, 2 dt and 4 dt on one path per run and gives
the step error of P at dt (second-order form, its paired standard error and the order check).
One JSON line per cell; a cell already in `--out` is skipped (resumable).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from tokensde import __version__
from tokensde.analysis import measure_step_error
from tokensde.model.params import ModelParams

SPEC = {"n": 2, "d": 4, "beta": 3.0}
MLP = {**SPEC, "mlp": "relu", "mlp_sigma": 0.3}
CELLS = {
    "spec": (SPEC, {"init": "uniform", "T": 100.0, "dt": 0.02, "tol": 1e-8}),
    "goe-fixed-1head": ({**SPEC, "qk": "goe", "qk_scale": 0.5},
                        {"init": "uniform", "T": 100.0, "dt": 0.02, "tol": 1e-8}),
    "goe-redrawn": ({**SPEC, "qk": "goe", "qk_scale": 0.5, "qk_redraw": "layer"},
                    {"init": "uniform", "T": 100.0, "dt": 0.02, "tol": 1e-8}),
    "mlp-tol0.1": (MLP, {"init": "pair", "rho0": -0.5, "T": 60.0, "dt": 0.00025, "tol": 0.1,
                         "every": 1}),
    "mlp-tol0.003": (MLP, {"init": "pair", "rho0": -0.5, "T": 60.0, "dt": 0.00025,
                           "tol": 0.003, "every": 1}),
    "bipolar-n32-d3": ({"n": 32, "d": 3, "beta": 4.0},
                       {"init": "uniform", "T": 100.0, "dt": 0.02, "tol": 1e-8}),
    "bipolar-n8-d8": ({"n": 8, "d": 8, "beta": 4.0},
                      {"init": "uniform", "T": 100.0, "dt": 0.02, "tol": 1e-8, "runs": 12000}),
}


def measure(name: str, runs: int, seed: int) -> dict:
    """One cell's coupled step error of P(bipolar) (antipodal for two tokens)."""
    params, run = CELLS[name]
    runs = run.get("runs", runs)
    t0 = time.process_time()
    e = measure_step_error(ModelParams(**params), run["T"], run["dt"], runs, seed,
                           init=run["init"], rho0=run.get("rho0"), tol=run["tol"],
                           until="decided", decide_every=run.get("every"))["p_bipolar"]
    step, step_se = e.estimate()
    return {"cell": name, "params": params, "run": run, "runs": runs, "seed": seed,
            "version": __version__, "p": [e.fine, e.coarse, e.coarse4],
            "step": step, "step_se": step_se, "order": e.order_text(),
            "cpu_s": round(time.process_time() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=4401)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    done = set()
    if args.out.exists():
        done = {json.loads(line)["cell"] for line in args.out.read_text().splitlines() if line}
    for name in args.cells.split(","):
        if name in done:
            continue
        r = measure(name, args.runs, args.seed)
        with args.out.open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(f"{name}: P(dt) {r['p'][0]:.3f}  step error {r['step']:+.4f} +- "
              f"{r['step_se']:.4f}  ({r['order']}; {r['cpu_s']} CPU s)", flush=True)
        assert math.isfinite(r["step_se"]) or r["runs"] < 2


if __name__ == "__main__":
    main()
