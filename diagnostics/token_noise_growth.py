"""The threshold of independent token noise from the growth rate of a first-mode perturbation.

    python diagnostics/token_noise_growth.py [--d 3] [--attention usa] [--beta 3] [--n 4096]
        [--ratios 0.9 0.95 1.05 1.1] [--eps 0.05] [--runs 8] [--T 4] [--dt 0.005] [--seed 0]
        [--fit-from 0.5] [--json out.json]

The tokens start i.i.d. from the density `1 + d eps <x, e_1>` on the sphere (a pure degree-1
perturbation of the uniform law, `E x = eps e_1`), with `M = I`, `sigma = 0` and
`token_noise = ratio * tau_c`. An observer keeps `m(t) = (1/n) sum_i <x_i, e_1>` of every run at
every layer. Linearised around the uniform law, `E m(t) = eps e^{lambda t}` with
`lambda = (d - 1)(c_1 / beta - tau^2 / 2)` (`theory.token_noise.mode_growth_rate`), which changes
sign at `tau_c` whatever the higher terms of the dynamics are, once the amplitude is small.
The rate is the least-squares slope of `log` of the run-averaged `m(t)` over depth
`[fit_from T, T]` (default: the second half), with a jackknife standard error over the runs;
the threshold is the zero of a line of the rates in
`tau^2`, with a 95 % t interval from the rates' errors. Unlike the fluctuation
reading of `threshold_from_fluctuations`, nothing here assumes Gaussian fluctuations.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

from tokensde import Execution, InitialState, ModelParams, Recording, TimeGrid, simulate
from tokensde.sim import Observer
from tokensde.study.noise_threshold import critical_token_noise
from tokensde.theory.token_noise import mode_growth_rate


def perturbed_start(n: int, d: int, eps: float, runs: int, seed: int) -> np.ndarray:
    """`(runs, n, d)` i.i.d. tokens of density `1 + d eps <x, e_1>` (rejection from uniform)."""
    rng = np.random.default_rng(seed)
    out = np.empty((runs, n, d))
    for r in range(runs):
        kept: list[np.ndarray] = []
        while sum(len(k) for k in kept) < n:
            z = rng.standard_normal((2 * n, d))
            z /= np.linalg.norm(z, axis=1, keepdims=True)
            keep = rng.uniform(size=2 * n) * (1 + d * eps) < 1 + d * eps * z[:, 0]
            kept.append(z[keep])
        out[r] = np.concatenate(kept)[:n]
    return out


def growth_rate(t: np.ndarray, m: np.ndarray) -> tuple[float, float]:
    """Slope of `log` of the run-averaged `m(t)` over `t`, and its jackknife standard error over
    the runs (each run left out in turn)."""
    design = np.stack([np.ones_like(t), t], 1)

    def slope(rows: np.ndarray) -> float:
        return float(np.linalg.lstsq(design, np.log(rows.mean(0)), rcond=None)[0][1])

    k = len(m)
    loo = np.array([slope(np.delete(m, r, axis=0)) for r in range(k)])
    return slope(m), float(math.sqrt((k - 1) / k * ((loo - loo.mean()) ** 2).sum()))


def root(tau2: np.ndarray, rate: np.ndarray, se: np.ndarray, runs: int
         ) -> tuple[float, float, float]:
    """Zero of the weighted line `rate = A + B tau^2`, in `tau`, with a 95 % t interval (delta
    method on `tau_c^2 = -A / B`; the rates' jackknife errors have `runs - 1` degrees of
    freedom)."""
    from scipy import stats

    w = 1 / se**2
    X = np.stack([np.ones_like(tau2), tau2], 1)
    cov = np.linalg.inv(X.T @ (X * w[:, None]))
    A, B = cov @ (X.T @ (w * rate))
    r2 = -A / B
    grad = np.array([-1 / B, A / B**2])
    s = math.sqrt(float(grad @ cov @ grad))
    q = float(stats.t.ppf(0.975, runs - 1))
    return math.sqrt(r2), math.sqrt(max(r2 - q * s, 0.0)), math.sqrt(r2 + q * s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--attention", default="usa")
    ap.add_argument("--beta", type=float, default=3.0)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.9, 0.95, 1.05, 1.1])
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--T", type=float, default=4.0)
    ap.add_argument("--dt", type=float, default=0.005)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fit-from", type=float, default=0.5,
                    help="fit the rate over depth [fit_from * T, T] (default 0.5)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tau_c = critical_token_noise(a.beta, a.d, a.attention)
    grid = TimeGrid.make(T=a.T, dt=a.dt)
    x0 = perturbed_start(a.n, a.d, a.eps, a.runs, a.seed)
    keep = Recording(checkpoints=range(grid.steps + 1), record=(),
                     observe=[Observer("m", lambda x: x[..., 0].mean(-1))])
    print(f"d = {a.d}, {a.attention}, beta = {a.beta:g}: theory tau_c = {tau_c:.4f}; n = {a.n}, "
          f"eps = {a.eps:g}, {a.runs} runs, T = {a.T:g}, dt = {a.dt:g}, rate fitted over "
          f"[{a.fit_from * a.T:g}, {a.T:g}], seed {a.seed}")
    print("| tau / tau_c | tau | theory rate | measured rate (2 SE) | m(T) | wall s |")
    print("|---|---|---|---|---|---|")
    rows = []
    for q in a.ratios:
        t0 = time.perf_counter()
        p = ModelParams(n=a.n, d=a.d, beta=a.beta, attention=a.attention, mean="identity",
                        sigma=0.0, token_noise=q * tau_c)
        res = simulate(p, grid, runs=a.runs, seed=a.seed, initial=InitialState.tokens(x0),
                       recording=keep, execution=Execution(sampler="full"))
        m = res.observed["m"]
        t = np.arange(grid.steps + 1) * grid.dt
        late = t >= a.fit_from * a.T
        rate, se = growth_rate(t[late], m[:, late])
        theory = mode_growth_rate(a.beta, a.d, 1.0, q * tau_c, a.attention)
        wall = time.perf_counter() - t0
        rows.append({"ratio": q, "tau": q * tau_c, "theory": theory, "rate": rate, "se": se,
                     "m_end": float(m[:, -1].mean()), "wall_s": wall})
        print(f"| {q:g} | {q * tau_c:.4f} | {theory:+.4f} | {rate:+.4f} ± {2 * se:.4f} | "
              f"{m[:, -1].mean():.4f} | {wall:.0f} |", flush=True)
    tau2 = np.array([r["tau"] ** 2 for r in rows])
    est, lo, hi = root(tau2, np.array([r["rate"] for r in rows]),
                       np.array([max(r["se"], 1e-9) for r in rows]), a.runs)
    print(f"threshold from the rates: tau_c = {est:.4f} [{lo:.4f}, {hi:.4f}] (95 % t), theory "
          f"{tau_c:.4f}; measured / theory {est / tau_c:.4f} [{lo / tau_c:.4f}, {hi / tau_c:.4f}]")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "tau_c": tau_c, "rows": rows,
                       "threshold": [est, lo, hi]}, f, indent=2)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
