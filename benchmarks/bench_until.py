"""Until decided against a fixed horizon: the same sweep cells, seeds and maximum horizon.

Every cell of a multi-token sweep file is run twice in one process, one mode right after the
other (so both see the same machine load): `until='horizon'` steps every run to T, and
`until='decided'` takes each run out once every pair of tokens is within `tol` of +-1. The table
gives the run-layers stepped, the wall time and the runs still undecided at T in each mode.

    OMP_NUM_THREADS=1 python benchmarks/bench_until.py [--config FILE.toml] [--T 300] [--every 1]
        [--csv out.csv]

`--config` defaults to the study's multi-token-guide.toml (package data, `tokensde/study/sweeps/`).

`--every K` runs every K-th cell only (a quicker look; the ratios are then of that subset).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from tokensde.study.context import SWEEP_DIR
from tokensde.sweep.config import SweepConfig
from tokensde.sweep.kinds import get_kind

MODES = ("horizon", "decided")


def run_cell(kind, params: dict, seed: int, mode: str, T: float | None) -> dict:
    """One cell in one mode: wall time, run-layers stepped and outcome counts."""
    cell = {**params, "until": mode, **({} if T is None else {"T": T})}
    t0 = time.perf_counter()
    out = kind(cell, seed)
    runs = int(cell["runs"])
    return {"mode": mode, "wall_s": time.perf_counter() - t0, "run_layers": out["run_layers"],
            "undecided": out["k_undecided"], "other": out["k_other"], "bipolar": out["k_bipolar"],
            "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--config", type=Path, default=SWEEP_DIR / "multi-token-guide.toml")
    ap.add_argument("--T", type=float, default=None, help="maximum horizon (default: the file's)")
    ap.add_argument("--every", type=int, default=1, help="run every K-th cell only")
    ap.add_argument("--csv", type=Path, default=None, help="write the per-cell table here")
    args = ap.parse_args()
    if args.every < 1:
        sys.exit("--every must be an integer >= 1")
    torch.set_num_threads(1)
    cfg = SweepConfig.load(args.config)
    kind = get_kind(cfg.kind, cfg.module)
    cells = cfg.cells()[:: args.every]
    rows = []
    t0 = time.perf_counter()
    for i, c in enumerate(cells):
        for mode in MODES if i % 2 == 0 else MODES[::-1]:
            rows.append({**{k: c.params[k] for k in ("model", "n", "d", "beta", "sigma")},
                         **run_cell(kind, dict(c.params), c.seed, mode, args.T)})
        print(f"cell {i + 1}/{len(cells)}  {time.perf_counter() - t0:7.1f} s", file=sys.stderr)
    df = pd.DataFrame(rows)
    if args.csv:
        df.to_csv(args.csv, index=False)
    tot = df.groupby("mode")[["wall_s", "run_layers", "undecided", "other", "bipolar",
                              "runs"]].sum()
    T = args.T if args.T is not None else cfg.params.get("T", "file")
    print(f"{args.config.name}: {len(cells)} cells, max horizon T = {T}, tol = "
          f"{cells[0].params['tol']:g}, torch {torch.__version__}, 1 thread")
    print("| mode | wall s | run-layers | undecided at T | other | bipolar | runs |")
    print("|---|---|---|---|---|---|---|")
    for mode in MODES:
        r = tot.loc[mode]
        print(f"| {mode} | {r.wall_s:.1f} | {int(r.run_layers):,} | {int(r.undecided)} | "
              f"{int(r.other)} | {int(r.bipolar)} | {int(r.runs)} |")
    h, d = tot.loc["horizon"], tot.loc["decided"]
    print(f"horizon / decided: wall {h.wall_s / d.wall_s:.2f}x, run-layers "
          f"{h.run_layers / d.run_layers:.2f}x (target: wall >= 3x, no more undecided: "
          f"{int(d.undecided)} <= {int(h.undecided)})")


if __name__ == "__main__":
    main()
