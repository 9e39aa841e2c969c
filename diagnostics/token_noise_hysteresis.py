"""Hysteresis of the uniform state under independent token noise: the stationary order parameter
from an ordered start and from a uniform start, swept across the linear threshold
(docs/token-noise.md).

    python diagnostics/token_noise_hysteresis.py [--d 2] [--attention usa] [--beta 5]
        [--n 1024] [--ratios 0.98 1 1.02 1.04 1.06 1.08] [--runs 4] [--T 50] [--burn 25]
        [--dt 0.0025] [--scheme network] [--seed 0] [--json out.json]

`mean='identity'` (M = I), no common noise, `token_noise = ratio * tau_c`, `tau_c =
study.noise_threshold.critical_token_noise(beta, d, attention)`. Times are in units of `1 / tau_c^2`
(the noise's own time scale): the run has horizon `T / tau_c^2`, burn-in `burn / tau_c^2` and step
`dt / tau_c^2`, so one set of flags fits every beta. For each ratio: `r` (time average over
[burn, T], mean and standard error over runs) from every token at e_1 and from i.i.d. uniform
tokens, their difference with a 95 % t interval (Welch's degrees of freedom), each run's own `r`, each start's
drift (second half of [burn, T] minus first half, mean and standard error over runs: a start
still relaxing drifts), and `r_MV`, the ordered stationary law of the n -> infinity limit
(`study.noise_threshold.mean_field_order`, 0 where only the uniform law is stationary). The limit
has both branches on `(1, tau_s / tau_c)`; `study.noise_threshold.ordered_branch_end` finds
`tau_s / tau_c`.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from scipy import stats

from tokensde.study.noise_threshold import (
    critical_token_noise,
    mean_field_order,
    ordered_branch_end,
    stationary_order,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--attention", default="usa")
    ap.add_argument("--beta", type=float, default=5.0)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.98, 1, 1.02, 1.04, 1.06, 1.08])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--T", type=float, default=50.0)
    ap.add_argument("--burn", type=float, default=25.0)
    ap.add_argument("--dt", type=float, default=0.0025)
    ap.add_argument("--scheme", default="network")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tau_c = critical_token_noise(a.beta, a.d, a.attention)
    s = 1 / tau_c**2
    tsp = ordered_branch_end(a.beta, a.d, a.attention)
    print(f"d = {a.d}, {a.attention}, beta = {a.beta:g}, n = {a.n}: theory tau_c = {tau_c:.4f}, "
          f"limit's ordered branch up to tau_s / tau_c = {tsp:.3f}; runs = {a.runs}, "
          f"T = {a.T:g}, burn = {a.burn:g}, dt = {a.dt:g} (x 1/tau_c^2 = {s:.4g}), "
          f"scheme {a.scheme}, seed {a.seed}", flush=True)
    print("| tau / tau_c | tau | r_MV | r, ordered start | r, uniform start | difference (95 % t) "
          "| runs, ordered | runs, uniform | drift, ordered | drift, uniform | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    rows = []
    for q in a.ratios:
        mv = mean_field_order(q * tau_c, a.beta, a.d, a.attention)
        est = {start: stationary_order(q * tau_c, a.n, a.d, a.beta, a.attention, runs=a.runs,
                                       T=a.T * s, burn=a.burn * s, dt=a.dt * s,
                                       scheme=a.scheme, seed=a.seed, start=start)
               for start in ("ordered", "uniform")}
        o, u = est["ordered"], est["uniform"]
        # Welch's t quantile: the two starts' runs are treated as independent samples
        v_o, v_u = o.se**2, u.se**2
        dof = (v_o + v_u) ** 2 / max(v_o**2 / (o.runs - 1) + v_u**2 / (u.runs - 1), 1e-300)
        diff = o.r - u.r
        h = float(stats.t.ppf(0.975, max(dof, 1.0))) * math.hypot(o.se, u.se)
        print(f"| {q:g} | {q * tau_c:.4f} | {mv:.3f} | {o.r:.3f} ± {o.se:.3f} | "
              f"{u.r:.3f} ± {u.se:.3f} | {diff:.3f} [{diff - h:.3f}, {diff + h:.3f}] | "
              f"{' '.join(f'{v:.2f}' for v in o.run_r)} | {' '.join(f'{v:.2f}' for v in u.run_r)}"
              f" | {o.drift:+.3f} ± {o.drift_se:.3f} | {u.drift:+.3f} ± {u.drift_se:.3f}"
              f" | {o.wall_s + u.wall_s:.0f} |", flush=True)
        rows.append({"ratio": q, "r_MV": mv, "ordered": o.to_dict(), "uniform": u.to_dict(),
                     "difference": [diff, diff - h, diff + h]})
    apart = [row["ratio"] for row in rows if row["difference"][1] > 0]
    print(f"\nratios where the starts differ (95 % t): {apart}; limit's bistable window "
          f"(1, {tsp:.3f}); total wall {time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tau_c": tau_c, "spinodal": tsp, "args": vars(a), "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
