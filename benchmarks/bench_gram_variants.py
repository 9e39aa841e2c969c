"""The Gram sampler against fast for the rotation-invariant variants, side by side in one run.

    python benchmarks/bench_gram_variants.py [--n 8] [--d 1024] [--runs 256] [--layers 20]
        [--rounds 3] [--threads 1] [--quick]

For each variant (an MLP block at the default width 4d and at width 64, 4 heads sharing the
identity form, GOE forms redrawn every layer with 4 heads; docs/variants.md §2, §3, §5) it times
`simulate` (network scheme, float64, CPU) with `sampler='fast'` and `sampler='gram'`, in
interleaved rounds (best of `--rounds`), and prints microseconds per run and layer and fast/gram.
`fast` with forms redrawn every layer draws `heads` d x d forms per run and layer, so it runs 16
runs there; every other measurement runs `--runs`.
"""

from __future__ import annotations

import time

from _bench import banner, check_common, parser

from tokensde import Execution, ModelParams, TimeGrid, simulate

CASES: dict[str, dict[str, object]] = {
    "MLP relu, width 4d": {"mlp": "relu"},
    "MLP relu, width 64": {"mlp": "relu", "mlp_width": 64},
    "4 heads sharing I": {"heads": 4},
    "GOE forms redrawn, 4 heads": {"qk": "goe", "qk_redraw": "layer", "heads": 4},
}
FORMS_RUNS = 16  # fast with forms redrawn every layer holds heads x d x d forms per run


def best_us(p: ModelParams, sampler: str, runs: int, layers: int, best: float) -> float:
    """The better of `best` and one timed `simulate`, in microseconds per run and layer."""
    t = time.perf_counter()
    simulate(p, TimeGrid.make(layers=layers), runs=runs, seed=0, execution=Execution(sampler=sampler))
    return min(best, 1e6 * (time.perf_counter() - t) / (runs * layers))


def main() -> None:
    ap = parser(__doc__, "64 runs, 5 layers, 1 round", runs=256, rounds=3)
    ap.add_argument("--d", type=int, default=1024, help="dimension (default 1024)")
    ap.add_argument("--layers", type=int, default=20, help="layers (default 20)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.layers, args.rounds = min(args.runs, 64), min(args.layers, 5), 1
    check_common(ap, args, ("--d", args.d, 2), ("--layers", args.layers, 1))
    print(banner(args.threads, f"float64, network scheme, n = {args.n}, d = {args.d}, "
                               f"{args.layers} layers, best of {args.rounds}"))
    print(f"{'variant':28s} {'fast us/rl':>11} {'gram us/rl':>11} {'fast/gram':>10}")
    t0 = time.perf_counter()
    for name, kw in CASES.items():
        p = ModelParams(n=args.n, d=args.d, beta=1.0, **kw)  # type: ignore[arg-type]
        runs = {"fast": min(args.runs, FORMS_RUNS) if "qk" in kw else args.runs,
                "gram": args.runs}
        best = {"fast": float("inf"), "gram": float("inf")}
        for _ in range(args.rounds):
            for s in ("fast", "gram"):
                best[s] = best_us(p, s, runs[s], args.layers, best[s])
        print(f"{name:28s} {best['fast']:11.1f} {best['gram']:11.1f} "
              f"{best['fast'] / best['gram']:10.1f}", flush=True)
    print(f"\nwall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
