"""Check the measured step error of two-token P_anti against the exact value, at five keys.

    OMP_NUM_THREADS=1 nice -n 10 python diagnostics/two_token_step_calibration.py [--runs 20000]

For each key `(beta, d, rho0)` of `KEYS` the network (softmax, Gaussian matrix noise, sigma 1,
each run until decided at tol 1e-8 or T = 60) runs coupled at the steps `dt = 0.2/d`, `2 dt` and
`4 dt` (`analysis.measure_step_error`). Printed per key, one JSON line: the three
probabilities, `b1 = P(2 dt) - P(dt)`, `b2 = P(4 dt) - P(2 dt)`, the order check `b2 - 2 b1`,
the step error the command would report (`Paired.estimate`) beside the true one `P(dt) - P_anti`
(`P_anti` at the tolerance, `theory.decision_time.p_anti_at_tol`; its error is that of P(dt)),
and both Richardson values, each with its paired standard error. Nothing is committed from it:
the command measures the step error at run time.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from tokensde.analysis import mc_error, measure_step_error
from tokensde.analysis.pair_monte_carlo import spec_params
from tokensde.theory.decision_time import p_anti_at_tol

KEYS = [(2.0, 4, -0.5), (1.0, 3, 0.0), (2.5, 10, 0.0), (3.0, 3, 0.5), (2.0, 5, 0.0)]
T = 60.0


def check(beta: float, d: int, rho0: float, runs: int, seed: int) -> dict:
    """The coupled estimates of one key at `dt = 0.2 / d` against the exact value."""
    dt = 0.2 / d
    t0 = time.process_time()
    e = measure_step_error(spec_params(beta, d), T, dt, runs, seed, init="pair", rho0=rho0,
                until="decided")["p_bipolar"]
    exact = float(p_anti_at_tol(beta, d, rho0, 1e-8))
    step, step_se = e.estimate()
    ex = e.extrapolated()
    r = {"beta": beta, "d": d, "rho0": rho0, "dt": dt, "runs": runs, "seed": seed,
         "exact": exact, "p": [e.fine, e.coarse, e.coarse4],
         "b1": [e.bias, e.bias_se], "b2": [e.bias4, e.bias4_se],
         "order": [e.order, e.order_se], "order_text": e.order_text(),
         "step_reported": [step, step_se],
         "step_true": [e.fine - exact, mc_error(e.fine, e.decided)],
         "richardson1": [e.richardson, e.richardson_se],
         "richardson2": [e.richardson2, e.richardson2_se],
         "reported": [ex["p"], ex["se"]], "cpu_s": round(time.process_time() - t0, 1)}
    r["z_step"] = (step - r["step_true"][0]) / math.hypot(step_se, r["step_true"][1])
    r["z_reported"] = (ex["p"] - exact) / ex["se"]
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=600)
    ap.add_argument("--first", type=int, default=0, help="Skip the keys before this index.")
    args = ap.parse_args()
    for i, (beta, d, rho0) in enumerate(KEYS):
        if i >= args.first:
            print(json.dumps(check(beta, d, rho0, args.runs, args.seed + i)), flush=True)


if __name__ == "__main__":
    main()
