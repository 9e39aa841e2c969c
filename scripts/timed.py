#!/usr/bin/env python3
"""Run a command, then print its wall time and CPU time (user + system of it and its children).

    python3 scripts/timed.py --label "quick set" [--cpu-budget S] -- CMD ARG...

Exits with the command's code; with `--cpu-budget S`, also fails (exit 1) when the command's CPU
time, in seconds of the reference machine A, passes S. CI sets the budget of the quick test set
this way (.ci/run): CPU time, unlike wall time, does not depend on how many cores the machine has
or on what else runs on it, and the scale to machine A (`reference_scale`: a fixed workload of
Python and numpy, timed here and on A) makes the bound the same on a faster or slower machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

# CPU seconds of `_reference_work` on machine A (docs/benchmarks.md: the 2-vCPU Intel Xeon guest,
# family 6, model 167), median of 5
REFERENCE_A_S = 0.85


def _reference_work() -> float:
    """CPU seconds of a fixed workload: a Python loop and small numpy matrix products."""
    import numpy as np

    t0 = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i * i % 7
    a = np.random.default_rng(0).standard_normal((64, 64))
    for _ in range(10_000):
        a = np.tanh(a @ a.T / 64)
    return time.process_time() - t0


def reference_scale(repeats: int = 3) -> float:
    """This machine's CPU time over machine A's for the same work (below 1: faster than A)."""
    return statistics.median(_reference_work() for _ in range(repeats)) / REFERENCE_A_S


def main(argv: list[str] | None = None) -> int:
    """Run the command and report its times; the exit code says whether it passed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="command")
    ap.add_argument("--cpu-budget", type=float, default=None,
                    help="fail when the command's CPU time (s) passes this bound")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command after --")
    if args.cpu_budget is not None and not args.cpu_budget > 0:
        ap.error(f"--cpu-budget must be a positive number of seconds; got {args.cpu_budget}")
    scale = reference_scale() if args.cpu_budget is not None else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = subprocess.call(cmd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{args.label}: {wall:.0f} s wall, {cpu:.0f} s CPU on {os.cpu_count()} cores",
          flush=True)
    if scale is None:
        return code
    on_a = cpu / scale
    print(f"{args.label}: {on_a:.0f} s CPU on machine A (this machine takes {scale:.2f}x A's "
          f"time for the reference work), budget {args.cpu_budget:.0f} s", flush=True)
    if code == 0 and on_a > args.cpu_budget:
        print(f"{args.label}: CPU time {on_a:.0f} s (machine A) is over its budget of "
              f"{args.cpu_budget:.0f} s (mark the longest tests slow: with "
              "TOKENSDE_TEST_CPU_LOG=FILE each test's CPU time is written to FILE)",
              file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
