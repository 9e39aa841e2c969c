"""Gram-space sampler vs fast vs full, side by side in one run: time per layer and throughput.

    python benchmarks/bench_gram.py             # full table, d in {16..4096}, n in {2, 8, 32}
    python benchmarks/bench_gram.py --quick     # a smaller table, for a smoke run

Times only the layer loop (`model.run_batch`, `gram.run_batch_gram`) on a prepared batch, network
scheme, float64, CPU unless `--device`. Columns: microseconds per run and layer (`us/rl`, i.e. the
time per layer divided by the batch size), runs*layers per second, and the ratios fast/gram,
full/gram and gram(d)/gram(d=16). Each sampler runs the batch that `simulate` would take
(`model.default_batch`); `full` takes fewer runs at large d so that memory stays < 4 GB.
Each measurement is the best of `--repeats` rounds (3), and a round times every sampler once.
Targets (issue 5): gram(d=4096)/gram(d=16) <= 1.5; fast/gram >= 100 at (n, d) = (8, 1024).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from _bench import require_at_least

import tokensde
from tokensde import ModelParams, TimeGrid
from tokensde.sim.batch import Draws, default_batch, run_batch
from tokensde.sim.gram import noise_factor, recompress, run_batch_gram
from tokensde.sim.layers import normalize
from tokensde.sim.rng import RunStreams

FULL_BYTES = 4 * 2**30


def _layers_for(seconds_per_layer: float, budget: float, most: int) -> int:
    return int(max(1, min(most, budget / max(seconds_per_layer, 1e-9))))


def time_layers(sampler: str, x: torch.Tensor, p: ModelParams, steps: int, device: str,
                seed: int) -> float:
    """Seconds per layer of `steps` layers of `sampler` on the batch `x` (network scheme)."""
    rs = RunStreams(seed, x.shape[0], device=device)
    grid = TimeGrid(steps, 1e-3)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    if sampler == "gram":
        run_batch_gram(x, p, grid, rs, "network")
    else:
        run_batch(x, p, grid, Draws.of(p, "network", rs, x.dtype), sampler, "network")
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def time_interleaved(cases: dict[str, tuple[str, torch.Tensor]], p: ModelParams, budget: float,
                     device: str, most: int = 400, repeats: int = 3) -> dict[str, float]:
    """Seconds per layer of each case `label: (sampler, batch)`: the best of a probe and `repeats`
    rounds of about `budget / repeats` seconds each. Each round times every case once, so load from
    elsewhere falls on all of them alike, and the minimum is the least disturbed."""
    best = {k: time_layers(s, x, p, 2, device, 1) for k, (s, x) in cases.items()}
    steps = {k: _layers_for(t, budget / repeats, most) for k, t in best.items()}
    for r in range(repeats):
        for k, (s, x) in cases.items():
            best[k] = min(best[k], time_layers(s, x, p, steps[k], device, 2 + r))
    return best


def time_sampler(sampler: str, x: torch.Tensor, p: ModelParams, budget: float, device: str,
                 most: int = 400, repeats: int = 3) -> float:
    """Seconds per layer of one sampler on this batch (see `time_interleaved`)."""
    return time_interleaved({sampler: (sampler, x)}, p, budget, device, most, repeats)[sampler]


def runs_for(sampler: str, p: ModelParams, runs: int, device: str) -> int:
    """Batch size: what `simulate` would take for `runs` runs, and for `full` few enough runs
    that V stays < 4 GB and a layer takes bounded time."""
    if sampler == "full":
        fit = FULL_BYTES // (4 * 8 * p.d * p.d)
        return int(max(1, min(runs, fit, 2**26 // (p.d * p.d))))
    return default_batch(runs, p, sampler, torch.float64, device)


def bench(ns: list[int], ds: list[int], runs: dict[int, int], budget: float, device: str,
          samplers: tuple[str, ...], repeats: int = 3) -> list[dict[str, float]]:
    """One row per (n, d): microseconds per run-layer of each sampler."""
    rows = []
    for n in ns:
        for d in ds:
            p = ModelParams(n=n, d=d, beta=1.0)
            row: dict[str, float] = {"n": n, "d": d}
            for s in samplers:
                row[f"{s}_runs"] = runs_for(s, p, runs[n], device)
            g = torch.Generator(device=device).manual_seed(n * 100_003 + d)
            x = normalize(torch.randn(max(int(row[f"{s}_runs"]) for s in samplers), n, d,
                                      generator=g, dtype=torch.float64, device=device))
            cases = {}
            for s in samplers:
                xs = x[: int(row[f"{s}_runs"])]
                cases[s] = (s, recompress(xs) if s == "gram" else xs)
            for s, t in time_interleaved(cases, p, budget, device, repeats=repeats).items():
                row[s] = 1e6 * t / row[f"{s}_runs"]
            rows.append(row)
            print(_line(row, rows, samplers), flush=True)
    return rows


def _base(row: dict[str, float], rows: list[dict[str, float]]) -> dict[str, float]:
    """The row of the same n with d = 16, the reference of the d-independence target."""
    return next(r for r in rows if r["n"] == row["n"] and r["d"] == 16)


def _line(row: dict[str, float], rows: list[dict[str, float]], samplers: tuple[str, ...]) -> str:
    base = _base(row, rows)
    cells = [f"{int(row['n']):>3} {int(row['d']):>5}"]
    for s in samplers:
        cells.append(f"{row[s]:>11.2f} {1e6 / row[s]:>11.0f} ({int(row[s + '_runs']):>5})")
    if "gram" in samplers:
        for s in samplers:
            if s != "gram":
                cells.append(f"{row[s] / row['gram']:>10.1f}")
        cells.append(f"{row['gram'] / base['gram']:>9.2f}")
    return " ".join(cells)


def _header(samplers: tuple[str, ...]) -> str:
    cells = ["  n     d"]
    for s in samplers:
        cells.append(f"{s + ' us/rl':>11} {s + ' rl/s':>11} ( runs)")
    if "gram" in samplers:
        cells += [f"{s + '/gram':>10}" for s in samplers if s != "gram"]
        cells.append(f"{'gram/d16':>9}")
    return " ".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n in {2, 8}, d in {16, 1024}")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--budget", type=float, default=0.4, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--samplers", default="gram,fast,full")
    args = ap.parse_args()
    require_at_least(ap, ("--threads", args.threads, 1), ("--repeats", args.repeats, 1),
                     ("--budget", args.budget, 1e-3))
    samplers = tuple(args.samplers.split(","))
    if not samplers or set(samplers) - {"gram", "fast", "full"}:
        ap.error(f"--samplers must be a comma-separated subset of gram,fast,full; got {args.samplers}")
    torch.set_num_threads(args.threads)
    ns, ds = ([2, 8], [16, 1024]) if args.quick else ([2, 8, 32], [16, 64, 256, 1024, 4096])
    runs = {2: 16384, 8: 4096, 32: 1024}  # at most; each sampler takes simulate's batch
    load0 = os.getloadavg()
    cpu = platform.processor() or platform.machine()
    print(f"tokensde {tokensde.__version__}, torch {torch.__version__}, {cpu}, "
          f"device {args.device}, threads {args.threads}, float64, network scheme, beta 1")
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
          f"(cores: {os.cpu_count()})")
    print("us/rl = microseconds per run and layer; rl/s = runs*layers per second\n")
    print(_header(samplers))
    t0 = time.perf_counter()
    rows = bench(ns, ds, runs, args.budget, args.device, samplers, args.repeats)
    load1 = os.getloadavg()
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average after: "
          f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if "gram" in samplers and "fast" in samplers:
        _targets(rows)
        if (8, 1024) in {(int(r["n"]), int(r["d"])) for r in rows}:
            _draw_ceiling(rows, args.device)


def _targets(rows: list[dict[str, float]]) -> None:
    by = {(int(r["n"]), int(r["d"])): r for r in rows}
    for n in sorted({k[0] for k in by}):
        if (n, 4096) not in by:
            continue
        for d0 in sorted({16, min(d for (m, d) in by if m == n and d >= 2 * n)}):
            ratio = by[(n, 4096)]["gram"] / by[(n, d0)]["gram"]
            print(f"target gram(d=4096)/gram(d={d0}) <= 1.5 at n={n}: {ratio:.2f} "
                  f"{'met' if ratio <= 1.5 else 'NOT met'}")
    if (8, 1024) in by:
        r = by[(8, 1024)]["fast"] / by[(8, 1024)]["gram"]
        print(f"target fast/gram >= 100 at (n, d) = (8, 1024): {r:.0f} "
              f"{'met' if r >= 100 else 'NOT met'}")


def time_draws(n: int, d: int, runs: dict[str, int], device: str, repeats: int = 5
               ) -> dict[str, float]:
    """Seconds per run of one layer's random numbers alone, for batches of `runs[sampler]` runs:
    `fast` draws `n d` normals, `gram` its noise factor (`m^2 + m(m-1)/2` normals and `m` chi
    variates, m = min(n, d))."""
    rf, rg = (RunStreams(0, runs[s], device=device) for s in ("fast", "gram"))
    m = min(n, d)
    draws = {"fast": lambda: rf.normal(n, d), "gram": lambda: noise_factor(rg, m, d - m, m)}
    best = {}
    for name, draw in draws.items():
        draw()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(10):
                draw()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / 10)
        best[name] = min(times) / runs[name]
    return best


def _draw_ceiling(rows: list[dict[str, float]], device: str) -> None:
    """What the random numbers alone allow at (8, 1024): fast's whole layer over gram's draws."""
    row = next(r for r in rows if (r["n"], r["d"]) == (8, 1024))
    t = time_draws(8, 1024, {s: int(row[f"{s}_runs"]) for s in ("fast", "gram")}, device)
    print(f"at (8, 1024), random numbers alone: fast {1e6 * t['fast']:.1f} us/rl (8192 normals), "
          f"gram {1e6 * t['gram']:.2f} us/rl (92 normals, 8 chi); draws-only ratio "
          f"{t['fast'] / t['gram']:.0f}, fast/gram ceiling with gram's other work free "
          f"{row['fast'] / (1e6 * t['gram']):.0f}")


if __name__ == "__main__":
    main()
