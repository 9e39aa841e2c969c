"""Weak order of pre- and peri-norm networks against their SDE limits (docs/variants.md §4), uncoupled.

    python diagnostics/norm_weak_order.py [--norm peri] [--runs 65536] [--seed 0]

Four uniform tokens in d = 4, beta = 2, T = 1, sigma = 1 (mean part M = I with --mean identity):
independent runs of the networks at L = 4 ... 64 (Gaussian and uniform value laws) and of the SDE
scheme at 256 and 128 steps (Richardson-extrapolated reference), each from its own seed; for the
mean and mean square of the pairwise inner products of the token directions at T, the weak error
of each level with its standard error (independent samples: the variances add), and the fitted
order over the levels resolved at 3 standard errors, with a 95 % interval from a bootstrap that
redraws every level's mean and the reference from their normal laws.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tokensde import ModelParams, TimeGrid, simulate
from tokensde.analysis.convergence import RESOLVE_Z, fit_order

LEVELS = (4, 8, 16, 32, 64)
STATS = ("pair_mean", "pair_square_mean")


def statistics(gram) -> np.ndarray:
    """Per-run mean and mean square of the pairwise inner products, `(2, runs)`."""
    g = np.asarray(gram)
    i, j = np.triu_indices(g.shape[-1], 1)
    pairs = g[:, i, j]
    return np.stack([pairs.mean(-1), (pairs**2).mean(-1)])


def mean_se(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means and standard errors over the last axis."""
    return v.mean(-1), v.std(-1, ddof=1) / np.sqrt(v.shape[-1])


def run(p: ModelParams, runs: int, seed: int, steps: int, scheme: str = "network") -> np.ndarray:
    """The statistics of `runs` runs to T = 1 in `steps` layers (or SDE steps)."""
    return statistics(simulate(p, TimeGrid.make(layers=steps), runs=runs, seed=seed,
                               scheme=scheme).final_gram())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--norm", default="peri", choices=("pre", "peri"))
    ap.add_argument("--mean", default="none", choices=("none", "identity"))
    ap.add_argument("--runs", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    p = ModelParams(n=4, d=4, beta=2.0, norm=a.norm, mean=a.mean)
    fine = run(p, a.runs, a.seed + 1, 256, "sde")
    half = run(p, a.runs, a.seed + 2, 128, "sde")
    (mf, sf), (mh, sh) = mean_se(fine), mean_se(half)
    ref, ref_se = 2 * mf - mh, np.sqrt(4 * sf**2 + sh**2)
    for s, name in enumerate(STATS):
        print(f"{a.norm} sde {name:16s} value={ref[s]:+.5f} se={ref_se[s]:.1e} "
              f"fine-coarse={mf[s] - mh[s]:+.2e}")
    rng = np.random.default_rng(a.seed)
    for law in ("gaussian", "uniform"):
        q = p.with_(law=law)
        nets = [mean_se(run(q, a.runs, a.seed + 10 + k, L)) for k, L in enumerate(LEVELS)]
        for s, name in enumerate(STATS):
            err = np.array([m[s] - ref[s] for m, _ in nets])
            se = np.array([np.hypot(e[s], ref_se[s]) for _, e in nets])
            for L, e, u in zip(LEVELS, err, se, strict=True):
                print(f"{a.norm} {law:8s} {name:16s} L={L:3d} err={e:+.3e} se={u:.1e}")
            used = np.abs(err) >= RESOLVE_Z * se
            lv = np.array(LEVELS)[used]
            if used.sum() < 3:
                print(f"{a.norm} {law:8s} {name:16s} order=None levels={lv.tolist()}")
                continue
            m_net = np.array([m[s] for m, _ in nets])[used]
            s_net = np.array([e[s] for _, e in nets])[used]
            boot = (m_net + s_net * rng.standard_normal((2000, used.sum()))
                    - (ref[s] + ref_se[s] * rng.standard_normal((2000, 1))))
            f = fit_order(lv, err[used], boot)
            print(f"{a.norm} {law:8s} {name:16s} order={f.order:.3f} "
                  f"boot=[{f.boot_lo:.3f}, {f.boot_hi:.3f}] levels={lv.tolist()}", flush=True)
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
