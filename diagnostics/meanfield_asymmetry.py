"""Is the symmetric limit stable? The K-node limit from the nearly uniform start
`f(x) ∝ exp(kappa <e_1, x>)` (a von Mises-Fisher density, antipodally asymmetric by about kappa) on
common noise paths: the minority mass at absorption as kappa -> 0. If the law stays spread as
kappa -> 0 instead of tending to 1/2, the symmetric limit (kappa = 0: exactly 1/2) is unstable
and the limits n -> infinity and t -> infinity do not commute.

    python3 diagnostics/meanfield_asymmetry.py out/meanfield_asym [--d 3 --beta 1 --runs 16]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from tokensde.io.store import check_output, header, write_parquet
from tokensde.meanfield.absorption import absorption_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    options: tuple[tuple[str, type, object], ...] = (
        ("--d", int, 3), ("--beta", float, 1.0), ("--K", int, 72), ("--runs", int, 16),
        ("--T", float, 40.0), ("--dt", float, 0.02), ("--seed", int, 0))
    for flag, kind, default in options:
        ap.add_argument(flag, type=kind, default=default, help=f"default {default}")
    ap.add_argument("--kappas", type=float, nargs="+", default=[0.3, 0.1, 0.03, 0.01, 0.0])
    a = ap.parse_args()
    out = check_output(a.out, "out", directory=True)
    torch.set_num_threads(1)
    rows, t0 = [], time.perf_counter()
    e1 = [1.0] + [0.0] * (a.d - 1)
    for kappa in a.kappas:
        mixture = None if kappa == 0 else [(1.0, kappa, e1)]
        r, _ = absorption_table(a.d, a.beta, [], a.K, "iid", a.runs, a.seed, a.T, a.dt,
                                merge_tol=1e-6, mixture=mixture)
        rows.append({"kappa": kappa, **r[0]})
        print(f"kappa {kappa:g}: decided {r[0]['p_decided']:.3f}, P(bipolar) "
              f"{r[0]['p_bipolar']:.3f} [{r[0]['p_bipolar_lo']:.3f}, {r[0]['p_bipolar_hi']:.3f}], "
              f"minority mean {r[0]['minority_mean']:.4f} [{r[0]['minority_lo']:.4f}, "
              f"{r[0]['minority_hi']:.4f}], q10 {r[0]['minority_q10']:.4f}, median t "
              f"{r[0]['t_decided_median']:.3g}", flush=True)
    print(f"wall {time.perf_counter() - t0:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(pd.DataFrame(rows), out / "asymmetry.parquet",
                  header("meanfield_asymmetry", **{k: v for k, v in vars(a).items() if k != "out"}))


if __name__ == "__main__":
    main()
