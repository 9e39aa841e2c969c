"""Sweep engine overhead per cell: in-process, local process pool and Ray, side by side.

The cells are the `null` kind (a seeded uniform, no work), so every second measured is engine
cost: scheduling, pickling, the atomic Parquet write of each row and the final consolidation.
Start-up (pool or Ray instance, worker imports) is reported apart from the per-cell cost.

    OMP_NUM_THREADS=1 python benchmarks/bench_sweep.py [--cells 200] [--workers 2] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tokensde.sweep.config import SweepConfig
from tokensde.sweep.engine import run_sweep


def measure(cells: int, backend: str, workers: int, root: Path) -> dict[str, float]:
    """Run a `cells`-cell null sweep; return start-up and steady per-cell times."""
    cfg = SweepConfig.from_dict({"kind": "null", "seed": 1,
                                 "grid": {"x": [float(i) for i in range(cells)]}})
    stamps: list[float] = []
    t0 = time.perf_counter()
    summary = run_sweep(cfg, root / f"{backend}-{workers}", workers=workers, backend=backend,
                        on_cell=lambda row, counts: stamps.append(time.perf_counter()))
    total = time.perf_counter() - t0
    assert summary["done"] == cells and summary["failed"] == 0
    steady = (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)
    return {"startup_s": stamps[0] - t0, "per_cell_ms": 1e3 * steady,
            "finish_s": total - (stamps[-1] - t0), "total_s": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    runs = [("local", 1), ("local", args.workers)] + ([] if args.no_ray else
                                                      [("ray", args.workers)])
    print(f"null cells: {args.cells}; cores: {os.cpu_count()}; load average: "
          f"{os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        res = {(b, w): measure(args.cells, b, w, Path(tmp)) for b, w in runs}
    base = res[("local", 1)]["per_cell_ms"]
    print(f"{'backend':<8}{'workers':>8}{'start-up s':>12}{'per cell ms':>13}{'x in-proc':>11}"
          f"{'table s':>9}{'total s':>9}")
    for (b, w), r in res.items():
        print(f"{b:<8}{w:>8}{r['startup_s']:>12.2f}{r['per_cell_ms']:>13.2f}"
              f"{r['per_cell_ms'] / base:>11.2f}{r['finish_s']:>9.2f}{r['total_s']:>9.2f}")


if __name__ == "__main__":
    main()
