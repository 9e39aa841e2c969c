"""A statistic at every layer: an observer against recorded Gram matrices (peak memory), and the
default record before and after observers (wall time).

Memory: the mean cosine `(|sum_i x_i|^2 - n) / (n (n - 1))` of every run at every layer, kept by
an observer (`Recording(observe=..., record=())`) or computed from the Gram matrices recorded at
every layer (`record=('gram',)`); each in a fresh process, which reports its peak resident set
(`ru_maxrss`) above its level after the imports and a small warm-up run. Both give the same
statistic (the largest difference is printed).

Speed: `simulate` with its default record (Gram matrices at the start and the end) by the source
tree here and by `--before` (a git revision, extracted with `git archive`), in fresh processes,
interleaved `--rounds` times (each the fastest of 5 calls); the table gives the fastest of each,
their ratio and the median of the rounds' ratios, and checks that both trees give the same bits.
`--before` may also be a folder holding a source tree (`DIR/src/tokensde`).

    OMP_NUM_THREADS=1 python benchmarks/bench_observer.py [--runs 100000] [--n 8] [--d 3]
        [--layers 50] [--speed-runs 5000] [--rounds 7] [--before HEAD] [--speed-only] [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from _bench import banner, check_common, parser

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, inspect, json, resource, sys, time
import torch
import tokensde
from tokensde import ModelParams

mode, runs, n, d, layers, threads = sys.argv[1], *map(int, sys.argv[2:7])
torch.set_num_threads(threads)
p = ModelParams(n=n, d=d, beta=1.0)


def default_run(layers, runs, seed):
    # simulate with its default record, by this tree or by --before (the trees before the time
    # grid take the layers as a keyword)
    if "grid" not in inspect.signature(tokensde.simulate).parameters:
        return tokensde.simulate(p, layers=layers, runs=runs, seed=seed)
    return tokensde.simulate(p, tokensde.TimeGrid.make(layers=layers), runs=runs, seed=seed)


def every_layer(layers, runs, record, observe=()):
    # `record` and the observers `observe` at every layer (this tree only)
    return tokensde.simulate(p, tokensde.TimeGrid.make(layers=layers), runs=runs,
                             recording=tokensde.Recording(range(layers + 1), record, observe))


def mean_cosine(x):
    s = x.sum(-2)
    return ((s * s).sum(-1) - n) / (n * (n - 1))


if mode != "speed":  # the tree before observers has no tokensde.sim.observe
    from tokensde.sim import Observer
    every_layer(2, 2, None, [Observer("c", mean_cosine)])
else:
    default_run(2, 2, 1)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if mode == "observe":
    r = every_layer(layers, runs, (), [Observer("cos", mean_cosine)])
    kept, stat = r.observed["cos"].nbytes, r.observed["cos"].mean(0)
elif mode == "gram":
    r = every_layer(layers, runs, ("gram",))
    kept, stat = r.gram.nbytes, ((r.gram.sum((-1, -2)) - n) / (n * (n - 1))).mean(0)
wall = time.perf_counter() - t0
if mode == "speed":  # the default record, fastest of 5
    wall = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        r = default_run(layers, runs, 0)
        wall = min(wall, time.perf_counter() - t0)
    kept, stat = r.gram.nbytes, r.gram[:, -1].mean((0,)).ravel()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
final = r.state if hasattr(r, "state") else r.x  # the final state, in a frame for the Gram sampler
digest = hashlib.sha256(final.tobytes() + (r.gram.tobytes() if r.gram is not None else b"")).hexdigest()
print(json.dumps({"base_kb": base, "peak_kb": peak, "kept": kept, "wall": wall,
                  "stat": stat.tolist(), "digest": digest, "file": __import__("tokensde").__file__}))
"""


def child(src: Path, mode: str, runs: int, n: int, d: int, layers: int, threads: int) -> dict:
    """Run `CHILD` in a fresh process importing tokensde from `src`."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, *map(str, (runs, n, d, layers,
                                                                          threads))],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"the {mode} run with {src} failed:\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(res["file"]).resolve().is_relative_to(src.resolve()), res["file"]
    return res


def extract(rev: str, into: Path) -> Path:
    """The `src` folder of git revision `rev`, extracted under `into`."""
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    ap = parser(__doc__ or "", "1000 runs, 10 layers, 1 round", n=8, runs=100_000, rounds=7)
    ap.add_argument("--d", type=int, default=3, help="dimension (default 3)")
    ap.add_argument("--layers", type=int, default=50, help="layers (default 50)")
    ap.add_argument("--speed-runs", type=int, default=5000,
                    help="runs of the speed comparison (default 5000)")
    ap.add_argument("--before", default="HEAD",
                    help="git revision, or folder with a src/ tree, to compare with (default HEAD)")
    ap.add_argument("--speed-only", action="store_true", help="skip the memory comparison")
    args = ap.parse_args()
    check_common(ap, args, ("--d", args.d, 1), ("--layers", args.layers, 1),
                 ("--speed-runs", args.speed_runs, 1))
    if args.quick:
        args.runs, args.layers, args.speed_runs, args.rounds = 1000, 10, 1000, 1
    n, d, L, th = args.n, args.d, args.layers, args.threads
    print(banner(th, f"n = {n}, d = {d}, {L} layers"))
    here = REPO / "src"

    if not args.speed_only:
        memory(here, args.runs, n, d, L, th)
    speed(here, args.before, args.speed_runs, args.rounds, n, d, L, th)


def memory(here: Path, runs: int, n: int, d: int, L: int, th: int) -> None:
    """The memory table: observer against Gram matrices at every layer."""
    obs = child(here, "observe", runs, n, d, L, th)
    gram = child(here, "gram", runs, n, d, L, th)
    diff = max(abs(a - b) for a, b in zip(obs["stat"], gram["stat"], strict=True))
    print(f"mean cosine at each of {L + 1} layers of {runs} runs (one process each):")
    print(f"{'':>22} {'kept MB':>10} {'peak extra MB':>14} {'wall s':>8}")
    for name, r in (("observer", obs), ("Gram matrices", gram)):
        print(f"{name:>22} {r['kept'] / 1e6:10.1f} {(r['peak_kb'] - r['base_kb']) / 1e3:14.1f} "
              f"{r['wall']:8.2f}")
    extra = [max(r["peak_kb"] - r["base_kb"], 1) for r in (obs, gram)]
    print(f"peak extra memory, Gram / observer: {extra[1] / extra[0]:.1f}x; kept arrays: "
          f"{gram['kept'] / obs['kept']:.0f}x; largest difference of the statistic: {diff:.1e}\n")


def speed(here: Path, rev: str, runs: int, rounds: int, n: int, d: int, L: int, th: int) -> None:
    """The speed table: the default record with the tree of `rev` and with `here`."""
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(rev) / "src" if Path(rev).is_dir() else extract(rev, Path(tmp))
        walls: dict[str, list[float]] = {"before": [], "after": []}
        digests = set()
        for _ in range(rounds):
            for name, src in (("before", before), ("after", here)):
                r = child(src, "speed", runs, n, d, L, th)
                walls[name].append(r["wall"])
                digests.add(r["digest"])
    b, a = min(walls["before"]), min(walls["after"])
    print(f"default record, {runs} runs, {L} layers, fastest of {rounds} "
          f"interleaved rounds: {rev} {b:.3f} s, this tree {a:.3f} s, speed ratio "
          f"(before / after) {b / a:.3f}; same bits: {len(digests) == 1}")
    ratios = sorted(x / y for x, y in zip(walls["before"], walls["after"], strict=True))
    print(f"  median of the {rounds} rounds' ratios {ratios[rounds // 2]:.3f}")
    print(f"  all walls: {rev} {[round(w, 3) for w in walls['before']]}, this tree "
          f"{[round(w, 3) for w in walls['after']]}")


if __name__ == "__main__":
    main()
