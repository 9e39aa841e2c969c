"""Must-shows of issue 23 on one noise path (d = 2, uniform start): (1) K trapezoid nodes against a
K_ref-node reference at several depth times (attention-field error, quarter-circle masses by node
counting and by the interpolated cumulative mass); (2) n i.i.d. particles against the limit
(RMS over draws) with the fitted rate in n.

    python3 diagnostics/meanfield_convergence.py out/meanfield_convergence
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

from tokensde.io.store import check_output, header, write_parquet
from tokensde.meanfield.convergence import fit_rate, node_convergence, particle_convergence


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output directory")
    ap.add_argument("--betas", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--Ks", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    ap.add_argument("--times", type=float, nargs="+", default=[0.5, 2.0, 4.0, 8.0])
    ap.add_argument("--K-ref", type=int, default=1024)
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--T", type=float, default=2.0, help="depth time of the particle test")
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--dt", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = check_output(a.out, "out", directory=True)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    nodes = pd.concat([node_convergence(b, a.Ks, a.times, a.K_ref, a.dt, a.seed) for b in a.betas])
    t1 = time.perf_counter()
    parts = pd.concat([particle_convergence(b, a.ns, a.T, a.draws, a.K_ref, a.dt, a.seed)
                       for b in a.betas])
    t2 = time.perf_counter()
    pd.set_option("display.width", 200)
    print(nodes.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    for (b, t), g in nodes.groupby(["beta", "T"]):
        print(f"nodes beta {b:g} T {t:g}: slope in log K: arc count "
              f"{fit_rate(g['K'], g['arc_err_count']):.2f}, "
              f"arc interp {fit_rate(g['K'], g['arc_err_interp']):.2f}; field err at K = 64: "
              f"{float(g.loc[g['K'] == 64, 'field_err'].iloc[0]) if (g['K'] == 64).any() else np.nan:.3g}")
    rms = parts.groupby(["beta", "n"])[["field_err", "arc_err_count"]].apply(
        lambda g: np.sqrt((g**2).mean())).reset_index()
    print(rms.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    for b, g in rms.groupby("beta"):
        print(f"particles beta {b:g} T {a.T:g}: field rms slope {fit_rate(g['n'], g['field_err']):.3f}, "
              f"arc rms slope {fit_rate(g['n'], g['arc_err_count']):.3f} (n^-1/2: -0.5)")
    print(f"wall: nodes {t1 - t0:.1f} s, particles {t2 - t1:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    meta = header("meanfield_convergence", **{k: v for k, v in vars(a).items() if k != "out"})
    write_parquet(nodes, out / "nodes.parquet", meta)
    write_parquet(parts, out / "particles.parquet", meta)


if __name__ == "__main__":
    main()
