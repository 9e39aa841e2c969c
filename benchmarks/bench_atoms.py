"""The statistics of a decided run on the sphere (atom count and minority mass) at large n: wall
time and peak memory, by the grid of certified cubes and by the pair test of `--old`.

A decided state of n tokens on S^2 is built: two antipodal caps of angular radius 0.004 about a
random axis (every pair within 3.2e-5 of +-1, checked by `sim.decide.decided_tokens` at the
table's `tol = 1e-4`), with a random split. `atom_count` (merge distance `atom_tol = 1e-3`, the
table's) and `minority_mass` are timed in a fresh process, which reports its peak resident set
(`ru_maxrss`) above its level after the imports and a warm-up at n = 512. `--old` forces the
pair test of every node pair in neighbouring cubes of side `sqrt(2 atom_tol)` (the path kept for
tolerances at rounding level, `merge._pair_leads`); both give the same atoms and mass.

    OMP_NUM_THREADS=1 python benchmarks/bench_atoms.py [--n 16384] [--runs 1] [--old] [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from _bench import banner, check_common, parser

CHILD = r"""
import json, math, resource, sys, time
import torch
from tokensde.meanfield import merge
from tokensde.meanfield.statistics import atom_count, minority_mass
from tokensde.sim.decide import decided_tokens

n, runs, old, threads = map(int, sys.argv[1:5])
torch.set_num_threads(threads)
if old:
    merge._CERTIFY_ULPS = math.inf  # every tolerance on the pair-testing path


def state(n, runs, seed):
    g = torch.Generator().manual_seed(seed)
    axis = torch.randn(runs, 1, 3, generator=g, dtype=torch.float64)
    axis = axis / axis.norm(dim=-1, keepdim=True)
    r = 0.004 * torch.rand(runs, n, 1, generator=g, dtype=torch.float64).sqrt()
    v = torch.randn(runs, n, 3, generator=g, dtype=torch.float64)
    v = v - (v * axis).sum(-1, keepdim=True) * axis
    v = v / v.norm(dim=-1, keepdim=True)
    x = torch.cos(r) * axis + torch.sin(r) * v
    side = torch.where(torch.rand(runs, n, generator=g) < 0.3, -1.0, 1.0).to(x)
    x = x * side.unsqueeze(-1)
    w = torch.full((runs, n), 1.0 / n, dtype=torch.float64)
    return x, w


x, w = state(512, runs, 1)
atom_count(x, w), minority_mass(x, w)
x, w = state(n, runs, 0)
assert bool(decided_tokens(x, 1e-4).all())
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
atoms = atom_count(x, w)
t_atoms = time.perf_counter() - t0
mass = minority_mass(x, w)
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"atoms": atoms.tolist(), "mass": mass.tolist(), "t_atoms": t_atoms,
                  "wall": wall, "mib": (peak - base) / 1024}))
"""


def main() -> None:
    ap = parser(__doc__, "n = 2048", n=16384, runs=1)
    ap.add_argument("--old", action="store_true", help="the pair test of every node pair in "
                    "neighbouring cubes (for comparison)")
    args = ap.parse_args()
    check_common(ap, args)
    n = 2048 if args.quick else args.n
    print(banner(args.threads, f"decided state on S^2, n = {n}, runs = {args.runs}"), end="")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(args.runs),
                          str(int(args.old)), str(args.threads)],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"the run failed:\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    how = "pair test (--old)" if args.old else "certified cubes"
    print(f"{how}: n = {n}, atoms {res['atoms']}, minority mass "
          f"{', '.join(f'{m:.4f}' for m in res['mass'])}; atom count {res['t_atoms']:.3f} s, "
          f"both statistics {res['wall']:.3f} s, peak memory above the warm-up "
          f"{res['mib']:.1f} MiB")


if __name__ == "__main__":
    main()
