"""The limit at K nodes against n particles for equal error, side by side in one run.

d = 2, uniform start, one common noise path to depth time T: the attention-field error (max
over 64 test points, against a K_ref-node reference) of K trapezoid nodes, and its RMS over
`--draws` i.i.d. samples of n particles, with the wall time of one system at each size. For each
target error the cheapest measured K and n that reach it are set side by side (and, when no
measured n reaches it, the n that the fitted n^-1/2 law needs and its time extrapolated from the
measured cost slope in n, marked as such).

    python3 benchmarks/bench_meanfield.py [--beta 1] [--T 2] [--quick]
"""

from __future__ import annotations

import time

import numpy as np
import torch
from _bench import banner, check_common, parser

from tokensde.meanfield.convergence import field_error_at, fit_rate
from tokensde.meanfield.flow import run_coupled
from tokensde.meanfield.quadrature import circle_rule, sample_initial
from tokensde.model.params import ModelParams, TimeGrid
from tokensde.sim.options import StoppingRule


def main() -> None:
    ap = parser(__doc__, "K in (8, 16, 32), n in (16, 64), 4 draws", runs=None)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--T", type=float, default=2.0)
    ap.add_argument("--dt", type=float, default=0.02)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--K-ref", type=int, default=512)
    a = ap.parse_args()
    check_common(ap, a, ("--draws", a.draws, 2))
    print(banner(a.threads, "bench_meanfield"))
    Ks, ns = ([8, 16, 32], [16, 64]) if a.quick else ([8, 16, 24, 32, 48, 64], [16, 64, 256, 1024])
    draws = 4 if a.quick else a.draws
    p = ModelParams(n=2, d=2, beta=a.beta)
    grid = TimeGrid.make(T=a.T, dt=a.dt)
    kw: dict = {"seed": 0, "stopping": StoppingRule(), "merge_tol": None}

    def timed(systems: list, runs: int = 1, shared: bool = False) -> tuple[float, object]:
        t0 = time.perf_counter()
        r = run_coupled(p, grid, systems, runs=runs, shared_path=shared, **kw)
        return time.perf_counter() - t0, r

    _, ref = timed([("ref", *circle_rule(a.K_ref))])
    refs = (ref.x[0], ref.w[0])
    rows = []
    for K in Ks:
        wall, r = timed([("K", *circle_rule(K))])
        rows.append(("limit", K, field_error_at((r.x[0], r.w[0]), refs, p), wall))
    rng = np.random.default_rng(1)
    for n in ns:
        x0 = np.stack([sample_initial(n, 2, rng) for _ in range(draws)])
        wall, r = timed([("n", x0, None)], runs=draws, shared=True)
        errs = [field_error_at((r.x[0][j:j + 1], r.w[0][j:j + 1]), refs, p) for j in range(draws)]
        rows.append(("particles", n, float(np.sqrt(np.mean(np.square(errs)))), wall / draws))
    print(f"d = 2, beta = {a.beta:g}, T = {a.T:g}, dt = {a.dt:g}, one path, reference K = "
          f"{a.K_ref}; particles: RMS over {draws} draws; wall: one system")
    print(f"{'system':>10} {'size':>6} {'field error':>12} {'wall s':>9}")
    for kind, size, err, wall in rows:
        print(f"{kind:>10} {size:>6} {err:12.3g} {wall:9.3f}")
    part = [(s, e, w) for k, s, e, w in rows if k == "particles"]
    lim = [(s, e, w) for k, s, e, w in rows if k == "limit"]
    slope = fit_rate([s for s, _, _ in part], [e for _, e, _ in part])
    cost = fit_rate([s for s, _, _ in part[-2:]], [w for _, _, w in part[-2:]])  # largest two
    c = float(np.exp(np.mean([np.log(e) + 0.5 * np.log(s) for s, e, _ in part])))
    print(f"particles: error slope in n {slope:.2f} (n^-1/2 expected), cost slope {cost:.2f} "
          "(between the two largest n)")
    for target in (1e-1, 3e-2, 1e-2, 1e-3):
        k = next(((s, w) for s, e, w in lim if e <= target), None)
        m = next(((s, w) for s, e, w in part if e <= target), None)
        if m is None:
            n_need = (c / target) ** 2
            s0, _, w0 = part[-1]
            m_txt = f"n ~ {n_need:.3g} (fit), ~{w0 * (n_need / s0) ** cost:.3g} s (extrapolated)"
        else:
            m_txt = f"n = {m[0]}, {m[1]:.3g} s"
        k_txt = "none measured" if k is None else f"K = {k[0]}, {k[1]:.3g} s"
        ratio = "" if k is None or m is None else f"  particles/limit time {m[1] / k[1]:.3g}"
        print(f"error <= {target:g}: limit {k_txt}; particles {m_txt}{ratio}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
