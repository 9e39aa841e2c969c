"""Real network against its prediction: the two sides of a default `tokensde real gpt2` run, timed
side by side in one run.

    python benchmarks/bench_real.py [--layers 12] [--width 256] [--inits 32] [--inputs 2]
        [--threads 1] [--quick]

Times, for GPT-2 (4 heads, 64 tokens) at the default size of the command, the real side (build
each init from GPT2Config and run its inputs, hidden states and statistics at every layer), the
discrete prediction (tokensde's network by the Gram sampler, one run per input) and the depth limit
(the SDE, 64 Euler steps, 32 runs: the defaults), all inside one `run_real`. Prints the seconds of each, their
ratios to the real side (and of the whole prediction), the total and the load; target: the total
of a default run <= 180 s on 2 cores. Needs the [real] extra.
"""

from __future__ import annotations

import os
import time

from _bench import banner, check_common, parser

from tokensde.real import RealSpec, run_real
from tokensde.real.models import INSTALL_HINT, has_transformers

TARGET_S = 180.0


def main() -> None:
    ap = parser(__doc__ or "", "L = 4, width 64, 8 inits", n=64)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--inits", type=int, default=32)
    ap.add_argument("--inputs", type=int, default=2)
    args = ap.parse_args()
    check_common(ap, args, ("--layers", args.layers, 1), ("--width", args.width, 4),
                 ("--inits", args.inits, 2), ("--inputs", args.inputs, 1))
    if not has_transformers():
        ap.error(INSTALL_HINT)
    if args.quick:
        args.layers, args.width, args.inits = 4, 64, 8
    print(banner(args.threads, f"GPT-2 L={args.layers} d={args.width} n={args.n} "
                               f"{args.inits} inits x {args.inputs} inputs"))
    spec = RealSpec(arch="gpt2", layers=args.layers, width=args.width, heads=4, ctx=args.n)
    t0 = time.perf_counter()
    run = run_real(spec, args.inits, args.inputs, seed=0)
    total = time.perf_counter() - t0
    w = run.meta["wall_s"]
    print(f"{'side':<28}{'seconds':>10}{'/ real':>10}")
    w = {**w, "prediction": w["network"] + w["sde"]}
    for name, key in (("real networks", "real"), ("tokensde network (Gram)", "network"),
                      ("depth limit (SDE)", "sde"), ("prediction (network + SDE)", "prediction")):
        print(f"{name:<28}{w[key]:>10.1f}{w[key] / w['real']:>10.2f}")
    print(f"{'total':<28}{total:>10.1f}   target <= {TARGET_S:.0f} s: "
          f"{'met' if total <= TARGET_S else 'NOT met'}; load average after "
          f"{os.getloadavg()[0]:.2f}")
    a = run.agreement
    print(f"agreement: {a['within']}/{a['layers']} layers within 3 SE, largest difference "
          f"{a['max_abs_diff']:.4f}")


if __name__ == "__main__":
    main()
