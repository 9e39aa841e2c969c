"""The many-token table from one or more `tokensde meanfield table --out DIR` sweep folders: one
markdown row per system (d, beta, start, n; `inf` is the limit), the figure of the minority-mass
law against n, and the rate at which the particles' mean minority mass approaches the limit's.

    python3 diagnostics/many_token_report.py OUT DIR [DIR ...]

Writes OUT/table.md (every system), OUT/table_dD.md and OUT/table_dD_iid.md (one dimension; its
i.i.d. starts and the limit), OUT/rates.md and OUT/minority.png; reads only what the folders
hold.
A system held by several folders (the limit is in each) is reported from the one with the
most paths.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from tokensde.io.store import check_output
from tokensde.meanfield import table_frame
from tokensde.plots.meanfield import plot_meanfield
from tokensde.sweep import load_table


def combined(folders: list[str]) -> pd.DataFrame:
    """The finished systems of every folder, with their wall time, one row per (d, beta, start, n)."""
    parts = [table_frame(load_table(f)) for f in folders]
    tab = pd.concat(parts, ignore_index=True)
    key = ["d", "beta", "start", "n"]
    # a system in several folders (the limit is in each): the one with the most paths
    tab = tab.sort_values("runs", ascending=False, kind="stable").drop_duplicates(key)
    return tab.sort_values(["d", "beta", "start", "n"], key=lambda c: c.replace(0, 10**9)
                           if c.name == "n" else c).reset_index(drop=True)


def row_text(r: pd.Series) -> str:
    """One markdown row."""
    n = "inf" if r["n"] == 0 else str(int(r["n"]))
    if r["k_decided"] == 0:
        pb, mm = "undecided", "-"
    else:
        pb = (f"{int(r['k_bipolar'])}/{int(r['k_decided'])} = {r['p_bipolar']:.3f} "
              f"[{r['p_bipolar_lo']:.3f}, {r['p_bipolar_hi']:.3f}]")
        mm = f"{r['minority_mean']:.4f} [{r['minority_lo']:.4f}, {r['minority_hi']:.4f}]"
    t = "-" if not np.isfinite(r["t_decided_median"]) else f"{r['t_decided_median']:.1f}"
    return (f"| {int(r['d'])} | {r['beta']:g} | {r['start']} | {n} | {int(r['runs'])} | "
            f"{1 - r['p_decided']:.3f} | {pb} | [{r['p_bipolar_bound_lo']:.3f}, "
            f"{r['p_bipolar_bound_hi']:.3f}] | {mm} | {t} | {r['wall_s']:.0f} |")


def rates(tab: pd.DataFrame) -> list[str]:
    """Per (d, beta), i.i.d. starts: the slope of log(1/2 - mean minority) against log n, by
    weighted least squares over the n whose gap to 1/2 is resolved (its 95 % interval above 0),
    with a 95 % interval from the fit's standard error."""
    out = ["| d | beta | n used | gap 1/2 - mean at those n | slope [95 %] |", "|---|---|---|---|---|"]
    iid = tab[(tab["start"] == "iid") & (tab["n"] > 0) & (tab["k_decided"] > 1)]
    for (d, beta), g in iid.groupby(["d", "beta"]):
        gap, gap_lo = 0.5 - g["minority_mean"], 0.5 - g["minority_hi"]
        ok = gap_lo > 0
        g, gap = g[ok], gap[ok]
        if len(g) < 3:
            out.append(f"| {d} | {beta:g} | {len(g)} | - | not resolved |")
            continue
        se = (g["minority_hi"] - g["minority_lo"]) / (2 * 1.96) / gap  # of log(gap)
        x, y, wts = np.log(g["n"].to_numpy(float)), np.log(gap.to_numpy()), 1 / se.to_numpy() ** 2
        X = np.stack([np.ones_like(x), x], 1)
        cov = np.linalg.inv(X.T @ (wts[:, None] * X))
        coef = cov @ X.T @ (wts * y)
        resid = y - X @ coef
        chi2 = float((wts * resid**2).sum()) / max(1, len(x) - 2)
        half = 1.96 * math.sqrt(cov[1, 1] * max(1.0, chi2))
        gaps = ", ".join(f"{v:.3g}" for v in gap)
        out.append(f"| {d} | {beta:g} | {', '.join(str(int(n)) for n in g['n'])} | {gaps} | "
                   f"{coef[1]:.2f} [{coef[1] - half:.2f}, {coef[1] + half:.2f}] |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output directory (created)")
    ap.add_argument("folders", nargs="+", help="sweep folders of `tokensde meanfield table`")
    a = ap.parse_args()
    out = check_output(a.out, "out", directory=True)
    out.mkdir(parents=True, exist_ok=True)
    tab = combined(a.folders)
    head = ("| d | beta | start | n | paths | undecided | P(bipolar) among decided [95 % Wilson] | "
            "bounds | minority mean [95 % t] | median t | wall s |\n"
            "|---:|---:|---|---:|---:|---:|---|---|---|---:|---:|")
    def write(name: str, part: pd.DataFrame) -> None:
        (out / name).write_text(head + "\n" + "\n".join(row_text(r) for _, r in part.iterrows())
                                + "\n")

    write("table.md", tab)
    for d in sorted(tab["d"].unique()):
        write(f"table_d{d}.md", tab[tab["d"] == d])
        write(f"table_d{d}_iid.md", tab[(tab["d"] == d) & (tab["start"] == "iid")])
    (out / "rates.md").write_text("\n".join(rates(tab)) + "\n")
    plot_meanfield(tab, out / "minority.png")
    print((out / "table.md").read_text())
    print((out / "rates.md").read_text())


if __name__ == "__main__":
    main()
