"""Redraw the phase figure of independent token noise (docs/token_noise_phase.png) from
recorded readings, without simulating.

    python diagnostics/token_noise_phase_figure.py [--sde d2_b3.json ...]
        [--png docs/token_noise_phase.png]

The network-scheme readings (disordered side, n = 1024, dt = 0.025 / tau_c^2; intervals of 2
standard errors, normal quantile) and the two-start scans at beta = 1 and 5 are the numbers of
docs/token-noise.md, typed in below. Each `--sde` file is a `--json` output of
`token_noise_phase.py --scheme sde`; its rows are refitted here with t intervals
(`study.noise_threshold.threshold_from_fluctuations`). The middle panel also draws the threshold
of the network scheme at the readings' step (`theory.token_noise.step_threshold`), and sorts the
two-start outcomes with `plots.token_noise._hysteresis_kind`: bistability only inside the limit's
window where the starts still differed over a horizon twice as long in a run whose step moves the
threshold by less than 1 %.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from tokensde.plots.token_noise import plot_token_noise_phase
from tokensde.study.noise_threshold import (
    OrderEstimate,
    critical_token_noise,
    ordered_branch_end,
    threshold_from_fluctuations,
)
from tokensde.theory.token_noise import beta_star, step_threshold

# docs/token-noise.md, "The phase diagram": (beta, measured tau_c, low, high), network scheme
NETWORK = [(0.5, 1.0152, 0.9876, 1.0420), (1.0, 1.0734, 1.0524, 1.0940),
           (2.0, 1.2949, 1.2801, 1.3096), (3.0, 1.6894, 1.6778, 1.7010),
           (5.0, 3.2644, 3.2396, 3.2890)]
# docs/token-noise.md, "Hysteresis above beta_*": (beta, ratio, lower end of the difference's
# interval); beta = 5 at dt = 0.0025 / tau_c^2 (network: the threshold moves by +0.73 %), over
# depth [25, 50] / tau_c^2, and again over [50, 100] at 1.03 and 1.045 (seed 1)
SCANS = [(5.0, q, lo) for q, lo in ((0.98, 0.272), (1.0, 0.399), (1.01, 0.499), (1.02, 0.540),
                                     (1.03, 0.592), (1.04, 0.608), (1.05, 0.595), (1.06, 0.575),
                                     (1.08, 0.292))] + \
        [(1.0, q, lo) for q, lo in ((0.9, -0.012), (0.95, -0.031), (0.98, -0.089), (1.0, -0.109),
                                     (1.02, -0.083), (1.04, -0.037), (1.06, -0.030),
                                     (1.08, -0.021), (1.1, -0.018), (1.15, -0.008))]
LONGER = [(5.0, 1.03, 0.488), (5.0, 1.045, 0.570)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sde", nargs="*", default=[])
    ap.add_argument("--png", default="docs/token_noise_phase.png")
    ap.add_argument("--beta-max", type=float, default=6.5)
    a = ap.parse_args()
    d = 2
    thresholds = [{"beta": b, "tau": t, "low": lo, "high": hi,
                   "label": "network, dt = 0.025/tau_c^2 (2 SE)"} for b, t, lo, hi in NETWORK]
    for fn in a.sde:
        with open(fn) as f:
            data = json.load(f)
        if data["args"]["d"] != d:
            continue
        for th in data["thresholds"]:
            rows = [OrderEstimate(**r) for r in th["rows"]]
            est, lo, hi = threshold_from_fluctuations(rows)
            print(f"beta {th['beta']:g}: {est:.4f} [{lo:.4f}, {hi:.4f}] (95 % t), ratio "
                  f"{est / th['tau_c']:.4f} [{lo / th['tau_c']:.4f}, {hi / th['tau_c']:.4f}]")
            thresholds.append({"beta": th["beta"], "tau": est, "low": lo, "high": hi,
                               "label": "sde, dt = 0.025/tau_c^2 (95 % t)", "marker": "D",
                               "color": "#27ae60"})
    bstar = beta_star(d)
    grid = [float(b) for b in np.linspace(bstar, a.beta_max, 14)]
    ends = [(b, ordered_branch_end(b, d)) for b in grid]
    longer = {(b, q) for b, q, lo in LONGER if lo > 0}
    hyst = [{"beta": b, "ratio": q, "apart": lo > 0, "confirmed": (b, q) in longer}
            for b, q, lo in SCANS] + [{"beta": b, "ratio": q, "apart": lo > 0, "confirmed": True}
                                      for b, q, lo in LONGER if (b, q) not in
                                      {(s[0], s[1]) for s in SCANS}]
    betas = np.linspace(0.25, a.beta_max, 27)
    curve = [(float(b), step_threshold(float(b), d, 0.025 / critical_token_noise(float(b), d)**2)
              / critical_token_noise(float(b), d)) for b in betas]
    path = plot_token_noise_phase(a.png, d=d, branch_end=ends, thresholds=thresholds,
                                  hysteresis=hyst, step_curve=curve,
                                  step_label="network scheme's threshold at dt = 0.025/tau_c^2",
                                  beta_max=a.beta_max)
    print(f"wrote {path}")
    assert all(math.isfinite(q) for _, q in curve)


if __name__ == "__main__":
    main()
