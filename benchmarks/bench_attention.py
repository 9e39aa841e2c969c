"""Attention on the circle and the sphere: dense (n x n) against the O(n) harmonic expansion.

    python benchmarks/bench_attention.py [--beta 6] [--ns 256,1024,...] [--dense-max 16384]
        [--small 8,16,...] [--repeats 3] [--threads 1] [--quick]

For d = 2 and d = 3, one run of n uniform unit tokens (float64, CPU, softmax, identity query/key),
it times one attention evaluation `y = attention_output(x)` with each evaluator, interleaved
(dense, expansion, dense, ... best of `--repeats`, so load from elsewhere falls on both alike),
and one network layer (attention, a d x d Gaussian value matrix applied to every `y_i`, the
residual step and the normalisation). Dense above 4096 tokens runs in blocks of 4096 rows (its
float64 logits at n = 65536 would take 34 GB), and stops at `--dense-max`. Printed: the times in
ms, the ratio dense / expansion, the fitted log-log slopes in n (over n >= 1024; target < 1.15
for the expansion), the crossover n (from `--small` sizes as well) and the ratio at n = 4096
(target >= 20 at d = 2). The truncation order is the float64 default at `--beta`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from _bench import banner, require_at_least

from tokensde import ModelParams
from tokensde.sim.expansion import basis_size, expansion_output, truncation_order, unit_roundoff
from tokensde.sim.layers import network_step, normalize, weights_from_logits

BLOCK = 4096  # rows of the dense logits computed at once
SLOPE_TARGET = 1.15
RATIO_TARGET = 20.0


def dense_output(x: torch.Tensor, p: ModelParams) -> torch.Tensor:
    """`attention_output` (dense), in blocks of BLOCK query rows above BLOCK tokens."""
    if x.shape[-2] <= BLOCK:
        return weights_from_logits(p.beta * (x @ x.transpose(-1, -2)), p) @ x
    out = torch.empty_like(x)
    for lo in range(0, x.shape[-2], BLOCK):
        rows = x[..., lo:lo + BLOCK, :]
        out[..., lo:lo + BLOCK, :] = weights_from_logits(
            p.beta * (rows @ x.transpose(-1, -2)), p) @ x
    return out


def layer(attend: Callable[[torch.Tensor], torch.Tensor], p: ModelParams
          ) -> Callable[[torch.Tensor], torch.Tensor]:
    """One post-norm network layer (dt = 0.01, sigma = 1) with attention `attend`."""
    def step(x: torch.Tensor) -> torch.Tensor:
        y = attend(x)
        v = torch.randn(x.shape[0], p.d, p.d, dtype=x.dtype)
        return network_step(x, y, y @ v.transpose(-1, -2), p, 0.01)
    return step


def best_of(fns: list[Callable[[], object]], repeats: list[int]) -> list[float]:
    """Best wall time (s) of each of `fns`, called in interleaved rounds (`fns[k]` in the first
    `repeats[k]` of them)."""
    best = [float("inf")] * len(fns)
    for rnd in range(max(repeats)):
        for k, f in enumerate(fns):
            if rnd < repeats[k]:
                t0 = time.perf_counter()
                f()
                best[k] = min(best[k], time.perf_counter() - t0)
    return best


def slope(ns: list[int], ts: list[float], least: int = 1024) -> float:
    """Least-squares slope of log t against log n over n >= `least`."""
    pts = [(n, t) for n, t in zip(ns, ts, strict=True) if n >= least and np.isfinite(t)]
    if len(pts) < 2:
        return float("nan")
    a = np.log(np.array(pts))
    return float(np.polyfit(a[:, 0], a[:, 1], 1)[0])


def tokens(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """`n` uniform unit tokens in R^d, one run."""
    g = torch.Generator().manual_seed(seed)
    return normalize(torch.randn(1, n, d, generator=g, dtype=torch.float64))


def sweep(d: int, beta: float, ns: list[int], dense_max: int, repeats: int, layers: bool
          ) -> dict[str, list[float]]:
    """Times (s) of dense and expansion attention (and layers) at each n."""
    p = ModelParams(n=2, d=d, beta=beta)  # n does not enter the attention functions
    out: dict[str, list[float]] = {"dense": [], "expansion": [], "dense_layer": [],
                                   "expansion_layer": []}
    for n in ns:
        x = tokens(n, d)
        fns: list[Callable[[], object]] = [lambda x=x: expansion_output(x, p)]
        if layers:
            fns.append(lambda x=x: layer(lambda u: expansion_output(u, p), p)(x))
        if n <= dense_max:
            fns.append(lambda x=x: dense_output(x, p))
            if layers:
                fns.append(lambda x=x: layer(lambda u: dense_output(u, p), p)(x))
        slow = min(repeats, 2) if n >= 8192 else repeats  # dense takes seconds there
        t = best_of(fns, [repeats] * (1 + layers) + [slow] * (len(fns) - 1 - layers))
        t += [float("nan")] * (2 * (1 + layers) - len(t))
        if layers:
            out["expansion"].append(t[0])
            out["expansion_layer"].append(t[1])
            out["dense"].append(t[2])
            out["dense_layer"].append(t[3])
        else:
            out["expansion"].append(t[0])
            out["dense"].append(t[1])
    return out


def crossover(ns: list[int], dense: list[float], exp: list[float]) -> float:
    """The n where dense and expansion cost the same (log-log interpolation between the last
    size where dense wins and the first where the expansion does), nan if none in range."""
    for k in range(1, len(ns)):
        r0, r1 = dense[k - 1] / exp[k - 1], dense[k] / exp[k]
        if r0 < 1.0 <= r1:
            f = -np.log(r0) / (np.log(r1) - np.log(r0))
            return float(np.exp(np.log(ns[k - 1]) + f * (np.log(ns[k]) - np.log(ns[k - 1]))))
    return float(ns[0]) if dense[0] >= exp[0] else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: d = 2, 3 at n = 256, 1024, 4096, one repeat")
    ap.add_argument("--beta", type=float, default=6.0, help="interaction strength (default 6)")
    ap.add_argument("--ns", default="256,1024,4096,16384,65536", help="token counts")
    ap.add_argument("--small", default="8,16,32,64,128,256,512",
                    help="token counts for the crossover (attention only)")
    ap.add_argument("--dense-max", type=int, default=16384, help="largest n for dense")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds (best of)")
    args = ap.parse_args()
    require_at_least(ap, ("--threads", args.threads, 1), ("--repeats", args.repeats, 1),
                     ("--dense-max", args.dense_max, 1))
    ns = [int(v) for v in args.ns.split(",")]
    small = [int(v) for v in args.small.split(",")]
    if args.quick:
        ns, small, args.repeats, args.dense_max = [256, 1024, 4096], [16, 64, 256], 1, 4096
    print(banner(args.threads, f"beta {args.beta:g}, float64, one run"))
    for d in (2, 3):
        order = truncation_order(args.beta, d, unit_roundoff(torch.float64))
        r = basis_size(d, order)
        print(f"d = {d}: order {order}, {r} basis functions (float64 tolerance)")
        big = sweep(d, args.beta, ns, args.dense_max, args.repeats, layers=True)
        print(f"{'n':>7} {'dense ms':>10} {'exp ms':>9} {'ratio':>7} | {'layer dense':>11} "
              f"{'layer exp':>10} {'ratio':>7}")
        for k, n in enumerate(ns):
            de, ex = big["dense"][k], big["expansion"][k]
            dl, el = big["dense_layer"][k], big["expansion_layer"][k]
            print(f"{n:>7} {1e3 * de:>10.3f} {1e3 * ex:>9.3f} {de / ex:>7.1f} | "
                  f"{1e3 * dl:>11.3f} {1e3 * el:>10.3f} {dl / el:>7.1f}")
        se, sd = slope(ns, big["expansion"]), slope(ns, big["dense"])
        sel = slope(ns, big["expansion_layer"])
        ok = "meets" if se < SLOPE_TARGET else "MISSES"
        print(f"slopes in n (n >= 1024): expansion {se:.3f} ({ok} < {SLOPE_TARGET}), expansion "
              f"layer {sel:.3f}, dense {sd:.3f}")
        if 4096 in ns:
            k = ns.index(4096)
            ratio = big["dense"][k] / big["expansion"][k]
            goal = f" (target >= {RATIO_TARGET:g}: {'met' if ratio >= RATIO_TARGET else 'MISSED'})"
            print(f"ratio at n = 4096: {ratio:.1f}" + (goal if d == 2 else ""))
        few = sweep(d, args.beta, small, max(small), max(args.repeats, 5), layers=False)
        print("small n: " + ", ".join(f"{n}: {de / ex:.2f}" for n, de, ex in
                                      zip(small, few["dense"], few["expansion"], strict=True))
              + " (dense / expansion)")
        nc = crossover(small + ns, few["dense"] + big["dense"], few["expansion"] + big["expansion"])
        print(f"crossover n ~ {nc:.0f} = {nc / r:.2f} x the {r} basis functions\n")


if __name__ == "__main__":
    main()
