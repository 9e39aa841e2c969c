"""`simulate` against a previous version of the package, interleaved in one process.

    git worktree add /tmp/prev 8c570ff
    python benchmarks/bench_facade.py --previous /tmp/prev/src/tokensde [--rounds 7] [--quick]

The previous package is imported under another name (`tokensde_previous`, through a symbolic
link), so that both versions run the same configurations in the same process, one after the
other in each round: load from other processes falls on both alike. Each configuration is timed
`--rounds` times per version; the table gives the median wall time of each and the speed ratio
previous / current (>= 1: the current version is as fast or faster) with the range over rounds
of the per-round ratio. Every pair of runs is checked to give the same final tokens, bit for
bit, so the two time the same work.
"""

from __future__ import annotations

import importlib
import inspect
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from _bench import banner, check_common, parser

import tokensde

# (name, model fields, grid, runs, options): the sampler benchmark's networks, the Gram sampler,
# a run to decision, and small n over many layers, where a fixed cost per call or layer shows
CASES: list[tuple[str, dict[str, Any], dict[str, Any], int, dict[str, Any]]] = [
    ("fast n=8 d=128", {"n": 8, "d": 128, "beta": 1.0}, {"layers": 20}, 1000,
     {"sampler": "fast"}),
    ("full n=2 d=64", {"n": 2, "d": 64, "beta": 1.0}, {"layers": 20}, 1000, {"sampler": "full"}),
    ("gram n=4 d=512", {"n": 4, "d": 512, "beta": 1.0}, {"layers": 50}, 1000,
     {"sampler": "gram"}),
    ("decided n=2 d=4", {"n": 2, "d": 4, "beta": 2.0}, {"T": 8.0, "dt": 0.02}, 1000,
     {"until": "decided", "tol": 1e-6}),
    ("n=16 d=3, 11 checkpoints", {"n": 16, "d": 3, "beta": 3.0}, {"layers": 200}, 200,
     {"checkpoints": 11}),
    ("n=2 d=2, 2000 layers, 1 run", {"n": 2, "d": 2, "beta": 1.0}, {"layers": 2000}, 1, {}),
]
GROUPS = {"initial": ("init", "rho0", "weights"), "stopping": ("until", "tol", "decide_every"),
          "recording": ("checkpoints", "record"),
          "execution": ("sampler", "attention_eval", "dtype", "batch_size")}
NAMES = {"initial": "InitialState", "stopping": "StoppingRule", "recording": "Recording",
         "execution": "Execution"}


def load_previous(path: Path) -> ModuleType:
    """The package at `path` (a `tokensde` folder), imported as `tokensde_previous`."""
    if not (path / "__init__.py").is_file():
        raise SystemExit(f"--previous must be a tokensde package folder; got {path}")
    link = Path(tempfile.mkdtemp()) / "tokensde_previous"
    link.symlink_to(path.resolve(), target_is_directory=True)
    sys.path.insert(0, str(link.parent))
    return importlib.import_module("tokensde_previous")


def runner(pkg: ModuleType, fields: dict[str, Any], grid: dict[str, Any], runs: int,
           opts: dict[str, Any]) -> Callable[[], Any]:
    """A call of `pkg.simulate` on this configuration, spelled the way `pkg` takes it."""
    sim = importlib.import_module(f"{pkg.__name__}.sim.simulate")
    params = importlib.import_module(f"{pkg.__name__}.model.params")
    p = params.ModelParams(**fields)
    if "execution" not in inspect.signature(sim.simulate).parameters:  # loose keywords
        return lambda: sim.simulate(p, runs=runs, seed=0, **grid, **opts)
    objs = importlib.import_module(f"{pkg.__name__}.sim.options")
    kw = {g: getattr(objs, NAMES[g])(**{k: opts[k] for k in keys if k in opts})
          for g, keys in GROUPS.items() if any(k in opts for k in keys)}
    g = params.TimeGrid.make(**grid)
    return lambda: sim.simulate(p, g, runs=runs, seed=0, **kw)


def main() -> None:
    ap = parser(__doc__, "2 rounds of the first two configurations", rounds=7)
    ap.add_argument("--previous", type=Path, required=True,
                    help="the previous version's tokensde package folder")
    args = ap.parse_args()
    check_common(ap, args)
    prev = load_previous(args.previous)
    cases = CASES[:2] if args.quick else CASES
    rounds = 2 if args.quick else args.rounds
    print(banner(args.threads, f"previous {getattr(prev, '__version__', '?')} "
                 f"({args.previous}), {rounds} rounds"))
    print("| configuration | runs | previous (s) | current (s) | previous / current | range |")
    print("|---|---|---|---|---|---|")
    for name, fields, grid, runs, opts in cases:
        calls = {"previous": runner(prev, fields, grid, runs, opts),
                 "current": runner(tokensde, fields, grid, runs, opts)}
        # warm-up, and the same work: the final state (a frame of the span for the Gram sampler)
        finals = {k: getattr(r, "state", None) if hasattr(r, "state") else r.x
                  for k, r in ((k, f()) for k, f in calls.items())}
        if not np.array_equal(finals["previous"], finals["current"]):
            raise SystemExit(f"{name}: the two versions give different tokens")
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(rounds):
            for k, f in calls.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        ratio = [a / b for a, b in zip(times["previous"], times["current"], strict=True)]
        print(f"| {name} | {runs} | {statistics.median(times['previous']):.3f} | "
              f"{statistics.median(times['current']):.3f} | {statistics.median(ratio):.3f} | "
              f"{min(ratio):.2f} to {max(ratio):.2f} |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
