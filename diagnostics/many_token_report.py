"""The many-token table from one or more `tokensde meanfield table --out DIR` sweep folders: one
markdown row per system (d, beta, start, n; `inf` is the limit), the figure of the minority-mass
law against n, and the rate at which the particles' mean minority mass approaches the limit's
(`meanfield.absorption.gap_slope`: every n, a bootstrap over the noise paths that all n share).

    python3 diagnostics/many_token_report.py OUT DIR [DIR ...]

Writes OUT/table.md (every system), OUT/table_dD.md and OUT/table_dD_iid.md (one dimension; its
i.i.d. starts and the limit), OUT/rates.md and OUT/minority.png; reads only what the folders
hold.
A system held by several folders (the limit is in each) is reported from the one with the
most paths.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from tokensde.io.store import check_output
from tokensde.meanfield import table_frame
from tokensde.meanfield.absorption import gap_slope
from tokensde.model.checks import ParameterError
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


def path_masses(folders: list[str]) -> dict[tuple[int, float], dict[int, np.ndarray]]:
    """Per (d, beta), i.i.d. starts: each n's per-path minority masses (nan: undecided), from the
    folder with the most paths; every n of a (d, beta) is on the noise paths of one path seed."""
    rows = pd.concat([load_table(f) for f in folders], ignore_index=True)
    rows = rows[(rows["status"] == "ok") & (rows["start"] == "iid") & (rows["n"] > 0)]
    rows = rows.sort_values("runs", ascending=False, kind="stable").drop_duplicates(
        ["d", "beta", "n"])
    out: dict[tuple[int, float], dict[int, np.ndarray]] = {}
    for (d, beta), g in rows.groupby(["d", "beta"]):
        assert g["path_seed"].nunique() == 1, f"d {d} beta {beta}: cells on different paths"
        out[(int(d), float(beta))] = {int(r["n"]): np.asarray(r["minority_runs"], float)
                                      for _, r in g.iterrows()}
    return out


def rates(masses: dict[tuple[int, float], dict[int, np.ndarray]], boots: int = 4000) -> list[str]:
    """Per (d, beta): the slope of log(1/2 - mean minority) against log n over every n
    (`gap_slope`: least squares, 95 % percentile interval of a bootstrap over noise paths, each
    path drawn with every n that holds it). Where runs are undecided the fit is given twice, with
    them counted as one cluster (m = 0) and as an even split (m = 1/2), the two ends they allow."""
    out = ["| d | beta | n (paths) | gap 1/2 - mean | slope [95 % path bootstrap] |",
           "|---|---|---|---|---|"]

    def fit(m: dict[int, np.ndarray]) -> str:
        try:
            r = gap_slope(m, boots=boots)
        except ParameterError:
            return "- (a gap of 0)"
        return f"{r['slope']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"

    for (d, beta), m in sorted(masses.items()):
        ns = sorted(m)
        undecided = sum(int(np.isnan(m[n]).sum()) for n in ns)
        where = ", ".join(f"{n} ({len(m[n])})" for n in ns)
        if undecided:
            gaps = "-"
            slope = (f"{undecided} undecided runs as m = 0: "
                     f"{fit({n: np.nan_to_num(v, nan=0.0) for n, v in m.items()})}; as m = 1/2: "
                     f"{fit({n: np.nan_to_num(v, nan=0.5) for n, v in m.items()})}")
        else:
            gaps = ", ".join(f"{0.5 - m[n].mean():.3g}" for n in ns)
            slope = fit(m)
        out.append(f"| {d} | {beta:g} | {where} | {gaps} | {slope} |")
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
    (out / "rates.md").write_text("\n".join(rates(path_masses(a.folders))) + "\n")
    plot_meanfield(tab, out / "minority.png")
    print((out / "table.md").read_text())
    print((out / "rates.md").read_text())


if __name__ == "__main__":
    main()
