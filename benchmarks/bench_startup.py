"""Start-up time of the command line: commands that need no torch, timed in fresh processes.

Each command runs `--repeats` times in a new Python process, interleaved with `python3 -c pass`
(the interpreter alone); the table gives the median wall time, the median CPU time of the child
(user + system, which another process's load inflates less than the wall time) and both as a
ratio to the bare interpreter. The target: `tokensde --help` and `tokensde two-token prob --beta
1 --d 3 --rho0 0` under 1 s of wall time on a quiet 2-core machine. A command whose process
imported torch, pandas or matplotlib is marked (tests/test_cli_startup.py asserts that none does).

    python benchmarks/bench_startup.py [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

# (label, python code): each runs the console script's entry point, as `tokensde ...` does
CLI = "import sys; from tokensde.cli import main; sys.argv = ['tokensde', *sys.argv[1:]]; main()"
HEAVY = ("torch", "pandas", "matplotlib")
COMMANDS: tuple[tuple[str, list[str]], ...] = (
    ("python3 -c pass", ["-c", "pass"]),
    ("tokensde --help", ["-c", CLI, "--help"]),
    ("tokensde simulate --help", ["-c", CLI, "simulate", "--help"]),
    ("tokensde two-token prob --beta 1 --d 3 --rho0 0",
     ["-c", CLI, "two-token", "prob", "--beta", "1", "--d", "3", "--rho0", "0"]),
    ("tokensde two-token critical --d 10", ["-c", CLI, "two-token", "critical", "--d", "10"]),
    ("tokensde simulate (no depth: refused)", ["-c", CLI, "simulate"]),
)
PROBE = ("import atexit, sys; atexit.register(lambda: print('HEAVY', *[m for m in {heavy!r} "
         "if m in sys.modules], file=sys.__stderr__)); {code}")


def run_once(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the child) of `python3 ARGS`, output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False, env={**os.environ, "COLUMNS": "100"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def heavy_modules(args: list[str]) -> list[str]:
    """The modules of HEAVY that the process of `python3 ARGS` had imported when it exited."""
    code = PROBE.format(heavy=HEAVY, code=args[1])
    out = subprocess.run([sys.executable, "-c", code, *args[2:]], capture_output=True, text=True,
                         check=False)
    line = next((ln for ln in out.stderr.splitlines() if ln.startswith("HEAVY")), "HEAVY")
    return line.split()[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="runs of each command (default 7)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 repeats")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    if repeats < 1:
        ap.error(f"--repeats must be >= 1; got {repeats}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"before {os.getloadavg()[0]:.2f}, Python {platform.python_version()}, {repeats} "
          "repeats, interleaved\n")
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in COMMANDS}
    for _, argv in COMMANDS:  # warm the file cache once
        run_once(argv)
    for _ in range(repeats):
        for label, argv in COMMANDS:
            times[label].append(run_once(argv))
    base_wall = statistics.median(w for w, _ in times[COMMANDS[0][0]])
    base_cpu = statistics.median(c for _, c in times[COMMANDS[0][0]])
    width = max(len(label) for label, _ in COMMANDS)
    print(f"{'command':<{width}}  {'wall s':>7} {'x pass':>7}  {'cpu s':>7} {'x pass':>7}  heavy "
          "imports")
    for label, argv in COMMANDS:
        wall = statistics.median(w for w, _ in times[label])
        cpu = statistics.median(c for _, c in times[label])
        heavy = "" if argv[0:2] == ["-c", "pass"] else ", ".join(heavy_modules(argv)) or "none"
        print(f"{label:<{width}}  {wall:7.3f} {wall / base_wall:7.1f}  {cpu:7.3f} "
              f"{cpu / base_cpu:7.1f}  {heavy}")
    print(f"\nload average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
