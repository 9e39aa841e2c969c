"""Gram sampler, whole process: `simulate --sampler gram` at d = 16 against d = 10^6.

    OMP_NUM_THREADS=1 python benchmarks/bench_gram_width.py [--n 8] [--large 1000000]
        [--runs 500] [--time 20] [--dt 0.01] [--rounds 3] [--threads 1] [--quick]

Runs the command line as a fresh process for each measurement,

    python -c "from tokensde.cli import main; main()" simulate --sampler gram --n N --d D
        --runs R --time T --dt DT --json

at d = 16 and at d = `--large`, in interleaved rounds (round 1: small then large, round 2: large
then small, ...; so load from elsewhere falls on both alike). Each process is timed from start to
exit: wall time, CPU time (user + system) and peak resident memory, read from the child's own
`os.wait4` resource usage. So start-up, the uniform initial tokens, the layer loop and the summary
all count. The child imports the same `tokensde` as this script and runs with `--threads` torch
threads (`OMP_NUM_THREADS`). `--quick`: 100 runs, T = 10, 2 rounds, for a smoke run.
Target: best wall time at the large d <= 1.3x of that at d = 16 (docs/absorption.md, "Any d at
the cost of n").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import banner, check_common, parser

import tokensde

SMALL = 16
TARGET = 1.3


def run_once(args: argparse.Namespace, d: int) -> dict[str, float]:
    """One `simulate` process at dimension `d`: wall s, CPU s, peak RSS (MiB)."""
    cmd = [sys.executable, "-c", "from tokensde.cli import main; main()", "simulate",
           "--sampler", "gram", "--n", str(args.n), "--d", str(d), "--runs", str(args.runs),
           "--time", repr(args.time), "--dt", repr(args.dt), "--json"]
    src = str(Path(tokensde.__file__).resolve().parents[1])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"d = {d}: exit {proc.returncode}\n{err.read().decode(errors='replace')}")
        summary = json.loads(out.read())
    if summary["d"] != d or summary["sampler"] != "gram":
        sys.exit(f"d = {d}: unexpected summary {summary}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mib": usage.ru_maxrss / 1024, "layers": summary["layers"]}


def main() -> None:
    ap = parser(__doc__, "100 runs, T = 10, 2 rounds", runs=500, rounds=3)
    ap.add_argument("--large", type=int, default=1_000_000, help="the large d (default 10^6)")
    ap.add_argument("--time", type=float, default=20.0, help="depth time T (default 20)")
    ap.add_argument("--dt", type=float, default=0.01, help="layer step (default 0.01)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.time, args.rounds = min(args.runs, 100), min(args.time, 10.0), 2
    check_common(ap, args, ("--large", args.large, SMALL), ("--time", args.time, 1e-9),
                 ("--dt", args.dt, 1e-9))
    print(banner(args.threads, f"float64, network scheme, n = {args.n}, {args.runs} runs, "
                               f"T = {args.time:g}, dt = {args.dt:g}, whole processes"))
    print(f"{'round':>5} {'d':>9} {'layers':>7} {'wall s':>7} {'cpu s':>7} {'peak RSS MiB':>13}")
    t0 = time.perf_counter()
    rows: dict[int, list[dict[str, float]]] = {SMALL: [], args.large: []}
    for r in range(args.rounds):
        for d in (SMALL, args.large) if r % 2 == 0 else (args.large, SMALL):
            m = run_once(args, d)
            rows[d].append(m)
            print(f"{r + 1:>5} {d:>9} {m['layers']:>7} {m['wall_s']:>7.2f} {m['cpu_s']:>7.2f} "
                  f"{m['rss_mib']:>13.0f}", flush=True)
    print()
    for d, ms in rows.items():
        walls = [m["wall_s"] for m in ms]
        print(f"d = {d:>9}: wall {min(walls):.2f}-{max(walls):.2f} s, peak RSS "
              f"{max(m['rss_mib'] for m in ms):.0f} MiB")
    best = {d: min(m["wall_s"] for m in ms) for d, ms in rows.items()}
    ratio = best[args.large] / best[SMALL]
    met = "met" if ratio <= TARGET else "NOT met"
    print(f"best wall d = {args.large} / d = {SMALL}: {ratio:.2f}x (target <= {TARGET:g}: {met})")
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
