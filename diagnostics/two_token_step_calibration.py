"""Calibrate the step error of the two-token network's P_anti at two steps, against the exact value.

    OMP_NUM_THREADS=1 nice -n 10 python diagnostics/two_token_step_calibration.py [--runs 20000]

For each key `(beta, d, rho0)` of `KEYS` the network (softmax, Gaussian matrix noise, sigma 1, the
fast sampler, each run until decided at tol 1e-8 or T) runs at the steps `dt = 0.2/d` and `0.4/d`;
the bias `b(dt) = P_MC(dt) - P_anti` (exact, spec §5) is fitted as `c dt` (weighted least squares
through the origin, first order in dt), and the ratio of the two biases is printed against 2 (the
first-order check). One JSON line per key: the rows of `tokensde.analysis.step_error.CALIBRATION`.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from tokensde.analysis.pair_monte_carlo import monte_carlo

KEYS = [(2.0, 4, -0.5), (1.0, 3, 0.0), (2.5, 10, 0.0), (3.0, 3, 0.5), (2.0, 5, 0.0)]


def measure(beta: float, d: int, rho0: float, runs: int, T: float, seed: int) -> dict:
    """Both steps of one key, and the fitted first-order coefficient."""
    rows = []
    for k, scale in enumerate((0.2, 0.4)):
        dt = scale / d
        t0 = time.perf_counter()
        r = monte_carlo(beta, d, rho0, runs=runs, T=T, dt=dt, seed=seed + k, tol=1e-8,
                        sampler="fast", until="decided").to_dict()
        est = r["estimate"]
        p, n = est["p"], est["decided"]
        se = math.sqrt(p * (1 - p) / n)
        rows.append({"dt": dt, "p": p, "se": se, "undecided": est["undecided"],
                     "bias": p - r["theory"], "theory": r["theory"],
                     "wall_s": round(time.perf_counter() - t0, 1)})
    w = [(row["dt"] / row["se"]) ** 2 for row in rows]
    c = sum(row["bias"] * row["dt"] / row["se"] ** 2 for row in rows) / sum(w)
    c_se = 1 / math.sqrt(sum(w))
    b1, b2 = rows[0]["bias"], rows[1]["bias"]
    z_linear = (b2 - 2 * b1) / math.hypot(rows[1]["se"], 2 * rows[0]["se"])
    return {"beta": beta, "d": d, "rho0": rho0, "runs": runs, "T": T, "seed": seed,
            "c": c, "c_se": c_se, "z_linear": z_linear, "steps": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--T", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=500)
    ap.add_argument("--first", type=int, default=0, help="Skip the keys before this index.")
    args = ap.parse_args()
    for i, (beta, d, rho0) in enumerate(KEYS):
        if i < args.first:
            continue
        print(json.dumps(measure(beta, d, rho0, args.runs, args.T, args.seed + 10 * i)),
              flush=True)


if __name__ == "__main__":
    main()
