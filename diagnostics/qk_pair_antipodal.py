"""Two tokens with random query/key forms: P(antipodal) of the network against identity forms.

    python diagnostics/qk_pair_antipodal.py [--runs 1000] [--seed 0]

The pair of spec §5 (d = 4, beta = 2, rho0 = -0.5, dt = 0.0125), each run followed until decided
(tol = 1e-8, at most T = 200), for identity forms and for the qk laws of docs/variants.md §3 fixed
per run or redrawn every layer. Prints P(antipodal) with its 95 % Wilson interval and the fraction
left undecided.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from tokensde import InitialState, ModelParams, StoppingRule, TimeGrid, simulate
from tokensde.analysis.stats import wilson

CASES: list[dict[str, Any]] = [
    {}, {"qk": "goe", "qk_scale": 0.5}, {"qk": "goe", "qk_scale": 0.5, "qk_redraw": "layer"},
    {"qk": "goe", "qk_scale": 1.0}, {"qk": "goe", "qk_scale": 1.0, "qk_redraw": "layer"},
    {"qk": "gaussian", "qk_scale": 1.0, "qk_redraw": "layer"},
    {"qk": "wigner", "qk_scale": 1.0, "qk_redraw": "layer"},
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for kw in CASES:
        t0 = time.perf_counter()
        p = ModelParams(n=2, d=4, beta=2.0, **kw)
        r = simulate(p, TimeGrid.make(T=200, dt=0.0125), runs=a.runs, seed=a.seed,
                     initial=InitialState.pair(-0.5), stopping=StoppingRule.decided(tol=1e-8))
        k = int((r.final_gram()[:, 0, 1] < 0).sum())
        lo, hi = wilson(k, a.runs)
        label = ", ".join(f"{k}={v}" for k, v in kw.items()) or "identity"
        print(f"{label:45s} P_anti {k / a.runs:.3f} [{float(lo):.3f}, {float(hi):.3f}] "
              f"undecided {np.mean(r.decided_at < 0):.3f}  {time.perf_counter() - t0:.0f} s",
              flush=True)


if __name__ == "__main__":
    main()
