"""Cost of independent token noise: stationary runs at n = 1024 and 4096, and the quick report
section.

Each size is one `tokensde.study.noise_threshold.stationary_order` call (M = I, sigma = 0, USA, d =
2, beta = 1, token noise 0.8 tau_c, the network scheme, the O(n) attention that `auto` takes at
this n), timed after a short warm-up: wall time in all and per layer (all runs of a layer
together) and per run-layer. Then the `token-noise` section of the quick reproduction
(`token-noise-quick.toml`, one worker) is built from nothing in a fresh folder and timed, and
once more to show that a second call only redraws.

    OMP_NUM_THREADS=1 python benchmarks/bench_token_noise.py [--n 1024,4096] [--runs 4]
        [--T 40] [--dt 0.05] [--quick]

`--quick`: n = 256 and T = 2 only, no section (a smoke run of a few seconds).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from _bench import banner, require_at_least

from tokensde.study.noise_threshold import critical_token_noise, stationary_order


def _sizes(ap: argparse.ArgumentParser, text: str) -> list[int]:
    try:
        ns = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--n must be comma-separated integers; got {text!r}")
    if not ns or min(ns) < 1:
        ap.error(f"--n must name integers >= 1; got {text!r}")
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", default="1024,4096", help="token counts (default 1024,4096)")
    ap.add_argument("--runs", type=int, default=4, help="runs per size (default 4)")
    ap.add_argument("--T", type=float, default=40.0, help="depth time per size (default 40)")
    ap.add_argument("--dt", type=float, default=0.05, help="layer step (default 0.05)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--quick", action="store_true", help="n = 256, T = 2, no section")
    args = ap.parse_args()
    require_at_least(ap, ("--runs", args.runs, 2), ("--T", args.T, 0.1),
                     ("--dt", args.dt, 1e-6), ("--threads", args.threads, 1))
    ns = [256] if args.quick else _sizes(ap, args.n)
    T = 2.0 if args.quick else args.T
    sys.stdout.write(banner(args.threads, "token noise"))
    tau = 0.8 * critical_token_noise(1.0, 2, "usa")
    stationary_order(tau, 64, runs=2, T=1.0, burn=0.5, dt=0.05, samples=11,  # warm-up
                     scheme="network", step_tol=None)
    layers = round(T / args.dt)
    if layers < 1:
        ap.error(f"--dt must be <= --T = {T:g}; got {args.dt:g}")
    print(f"stationary runs: USA, d = 2, beta = 1, M = I, sigma = 0, tau = 0.8 tau_c = "
          f"{tau:.4f}, {args.runs} runs, T = {T:g}, dt = {args.dt:g} ({layers} layers), "
          "network scheme")
    print("| n | attention | wall s | ms / layer | us / run-layer | r |")
    print("|---|---|---|---|---|---|")
    for n in ns:
        t0 = time.perf_counter()
        e = stationary_order(tau, n, runs=args.runs, T=T, burn=T / 2, dt=args.dt,
                             scheme="network", step_tol=None,
                             samples=min(11, layers + 1))
        wall = time.perf_counter() - t0
        print(f"| {n} | {e.attention_eval} | {wall:.2f} | {1e3 * wall / layers:.2f} | "
              f"{1e6 * wall / (layers * args.runs):.1f} | {e.r:.3f} |", flush=True)
    if args.quick:
        return
    import tokensde.study as study

    with tempfile.TemporaryDirectory() as tmp:
        for what in ("from nothing", "again (reused)"):
            t0 = time.perf_counter()
            _, sections, _ = study.reproduce(tmp, "quick", workers=1, only=["token-noise"])
            wall = time.perf_counter() - t0
            sec = sections[0]
            print(f"quick section 'token-noise', {what}: {wall:.1f} s ({sec.status}, "
                  f"{len(sec.tables[0].rows)} cells, 1 worker)", flush=True)
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
