"""Stationary order parameter against independent token noise, and the threshold it gives
(docs/token-noise.md).

    python diagnostics/token_noise_threshold.py [--d 2] [--attention usa] [--beta 1]
        [--ns 256 1024 4096] [--ratios 0.6 0.8 0.9 0.95 1.05 1.1 1.2 1.4] [--runs 4]
        [--T 100] [--burn 50] [--dt 0.05] [--scheme network] [--seed 0]
        [--starts uniform ordered] [--json out.json]

`mean='identity'` (M = I), no common noise (sigma = 0), `token_noise = ratio * tau_c` with
`tau_c = study.noise_threshold.critical_token_noise(beta, d, attention)`. For each (n, ratio): `r` and
`n E r^2`, time averages over depth [burn, T], mean and standard error over the runs, from i.i.d.
uniform tokens and, below the threshold, also from every token at e_1 (two starts: where they
disagree the run has not relaxed); `r_MV` the ordered stationary law of the n -> infinity limit
(`study.noise_threshold.mean_field_order`). Then two readings of the threshold at each n:

- ordered side: `r^2 ~ c (tau_c^2 - tau^2)` fitted over the ordered-start rows with
  `4/n < E r^2 < 0.55` (`study.noise_threshold.threshold_from_scan`), 95 % t interval;
- disordered side: linear fluctuation theory gives `1 / (n E r^2) = 1 - tau_c^2 / tau^2`; a line in
  `1/tau^2` through the rows with ratio > 1 and its zero, 95 % t interval.
"""

from __future__ import annotations

import argparse
import json
import time

from tokensde.study.noise_threshold import (
    critical_token_noise,
    mean_field_order,
    stationary_order,
    threshold_from_fluctuations,
    threshold_from_scan,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--attention", default="usa")
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--ns", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--ratios", type=float, nargs="+",
                    default=[0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.4])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--T", type=float, default=100.0)
    ap.add_argument("--burn", type=float, default=50.0)
    ap.add_argument("--dt", type=float, default=0.05)
    ap.add_argument("--scheme", default="network")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--starts", nargs="+", default=["uniform", "ordered"],
                    choices=["uniform", "ordered"], help="starts below the threshold")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tau_c = critical_token_noise(a.beta, a.d, a.attention)
    print(f"d = {a.d}, {a.attention}, beta = {a.beta:g}: theory tau_c = {tau_c:.4f} "
          f"(critical coupling a/tau^2 = {1 / tau_c**2:.4f}); runs = {a.runs}, T = {a.T:g}, "
          f"burn = {a.burn:g}, dt = {a.dt:g}, scheme {a.scheme}, seed {a.seed}", flush=True)
    mv = {q: mean_field_order(q * tau_c, a.beta, a.d, a.attention) for q in a.ratios}
    print("| n | tau / tau_c | tau | start | r | r_MV | n E r^2 | 1/(1 - (tau_c/tau)^2) | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    rows = []
    for n in a.ns:
        got = []
        for q in a.ratios:
            for start in a.starts if q < 1 else ("uniform",):
                e = stationary_order(q * tau_c, n, a.d, a.beta, a.attention, runs=a.runs,
                                     T=a.T, burn=a.burn, dt=a.dt, scheme=a.scheme, seed=a.seed,
                                     start=start)
                oz = f"{1 / (1 - q**-2):.2f}" if q > 1 else ""
                print(f"| {n} | {q:g} | {e.token_noise:.4f} | {start} | {e.r:.4f} +- {e.se:.4f} "
                      f"| {mv[q]:.4f} | {n * e.r2:.2f} +- {n * e.r2_se:.2f} | {oz} | "
                      f"{e.wall_s:.1f} |", flush=True)
                got.append(e)
        rows.append((n, got))
    print("\n| n | ordered-side fit of tau_c (95 % t) | disordered-side fit of tau_c (95 % t) |")
    print("|---|---|---|")
    out = []
    for n, got in rows:
        o = threshold_from_scan([e for e in got if e.start == "ordered"])
        dis = threshold_from_fluctuations([e for e in got if e.token_noise > tau_c])
        print(f"| {n} | {o[0]:.4f} [{o[1]:.4f}, {o[2]:.4f}] | "
              f"{dis[0]:.4f} [{dis[1]:.4f}, {dis[2]:.4f}] |")
        out.append({"n": n, "ordered": o, "disordered": dis,
                    "rows": [e.to_dict() for e in got]})
    print(f"\ntheory tau_c = {tau_c:.4f}; total wall {time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tau_c": tau_c, "args": vars(a), "scans": out}, f, indent=1)


if __name__ == "__main__":
    main()
