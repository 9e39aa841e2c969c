"""The phase diagram of independent token noise over (beta, tau), beside the two-token phase
diagram of common noise (docs/token-noise.md, docs/token_noise_phase.png).

    python diagnostics/token_noise_phase.py [--d 2] [--attention usa] [--betas 0.5 1 2 3 5]
        [--n 1024] [--ratios 1.05 1.1 1.2 1.4] [--runs 4] [--T 100] [--burn 50] [--dt 0.025]
        [--seed 0] [--hysteresis h1.json h2.json] [--json out.json]
        [--png docs/token_noise_phase.png]

For each beta, a measured threshold from the disordered side: the uniform start at `token_noise
= ratio * tau_c` (`mean='identity'`, no common noise), and the zero of the line
`1 / (n E r^2) = A + B / tau^2` through those rows with a 95 % t interval
(`study.noise_threshold.threshold_from_fluctuations`). Times are in units of `1 / tau_c^2` as in
`token_noise_hysteresis.py`. The end of the limit's ordered branch, `tau_s / tau_c`
(`study.noise_threshold.ordered_branch_end`), on a grid of beta above `beta_*`. The JSON files of
`token_noise_hysteresis.py` add, for each ratio scanned, whether the two starts differed.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from tokensde.plots.token_noise import plot_token_noise_phase
from tokensde.study.noise_threshold import (
    critical_token_noise,
    ordered_branch_end,
    stationary_order,
    threshold_from_fluctuations,
)
from tokensde.theory.token_noise import beta_star


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--attention", default="usa")
    ap.add_argument("--betas", type=float, nargs="*", default=[0.5, 1, 2, 3, 5])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--ratios", type=float, nargs="+", default=[1.05, 1.1, 1.2, 1.4])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--T", type=float, default=100.0)
    ap.add_argument("--burn", type=float, default=50.0)
    ap.add_argument("--dt", type=float, default=0.025)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scheme", default="network", choices=("network", "sde"))
    ap.add_argument("--beta-max", type=float, default=6.5)
    ap.add_argument("--branch-points", type=int, default=14)
    ap.add_argument("--hysteresis", nargs="*", default=[])
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default="docs/token_noise_phase.png")
    a = ap.parse_args()
    t0 = time.perf_counter()
    bstar = beta_star(a.d)
    print(f"d = {a.d}, {a.attention}: beta_* = {bstar:.4f}; n = {a.n}, runs = {a.runs}, "
          f"T = {a.T:g}, burn = {a.burn:g}, dt = {a.dt:g} (units 1/tau_c^2), {a.scheme} scheme, "
          f"seed {a.seed}")
    print("| beta | theory tau_c | measured tau_c, disordered side (95 % t) | ratio | wall s |")
    print("|---|---|---|---|---|")
    thresholds = []
    for b in a.betas:
        tau_c = critical_token_noise(b, a.d, a.attention)
        s = 1 / tau_c**2
        rows = [stationary_order(q * tau_c, a.n, a.d, b, a.attention, runs=a.runs, T=a.T * s,
                                 burn=a.burn * s, dt=a.dt * s, seed=a.seed, start="uniform",
                                 scheme=a.scheme)
                for q in a.ratios]
        est, lo, hi = threshold_from_fluctuations(rows)
        print(f"| {b:g} | {tau_c:.4f} | {est:.4f} [{lo:.4f}, {hi:.4f}] | "
              f"{est / tau_c:.4f} [{lo / tau_c:.4f}, {hi / tau_c:.4f}] | "
              f"{sum(e.wall_s for e in rows):.0f} |", flush=True)
        thresholds.append({"beta": b, "tau": est, "low": lo, "high": hi, "tau_c": tau_c,
                           "label": "disordered side", "rows": [e.to_dict() for e in rows]})
    grid = [float(b) for b in np.linspace(bstar, a.beta_max, a.branch_points)]
    ends = [(b, ordered_branch_end(b, a.d, a.attention)) for b in grid]
    print("\nend of the limit's ordered branch, tau_s / tau_c: "
          + ", ".join(f"beta {b:.2f}: {q:.3f}" for b, q in ends))
    hyst = []
    for fn in a.hysteresis:
        with open(fn) as f:
            h = json.load(f)
        hyst += [{"beta": h["args"]["beta"], "ratio": r["ratio"],
                  "apart": r["difference"][1] > 0} for r in h["rows"]]
    path = plot_token_noise_phase(a.png, d=a.d, attention=a.attention, branch_end=ends,
                                  thresholds=thresholds, hysteresis=hyst, beta_max=a.beta_max)
    print(f"wrote {path}; total wall {time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"beta_star": bstar, "args": vars(a), "thresholds": thresholds,
                       "branch_end": ends, "hysteresis": hyst}, f, indent=1)


if __name__ == "__main__":
    main()
