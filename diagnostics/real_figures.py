"""Figures and the depth-limit fit of docs/real.md, from the tables of real_runs.py.

    python diagnostics/real_figures.py --runs /tmp/real_runs --docs docs

Writes DOCS/real_gpt2.png (GPT-2 at L = 12 ... 96 and the SDE, against depth fraction and layer),
DOCS/real_bert.png (BERT post-LN at L = 12, 24, 48) and prints, per GPT-2 depth, the largest
distance of the real curve to the depth limit over the recorded fractions, with the fitted order
of that distance in L (least squares of log distance on log L).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from tokensde.io.store import read_parquet
from tokensde.plots.real import plot_depths
from tokensde.real.experiment import KIND


def load(runs: Path, name: str) -> Any:
    """The table of case `name`."""
    table, _ = read_parquet(runs / f"{name}.parquet", KIND)
    return table.to_pandas()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--docs", type=Path, default=Path("docs"))
    args = ap.parse_args()
    depths = [L for L in (12, 24, 48, 96) if (args.runs / f"gpt2-L{L}.parquet").exists()]
    gpt = [(f"L={L}", load(args.runs, f"gpt2-L{L}")) for L in depths]
    print(plot_depths(gpt, args.docs / "real_gpt2.png",
                      "GPT-2 at init (d = 256, 4 heads, 64 tokens, 32 inits): real (dots), "
                      "tokensde network (lines), depth limit (dashed)"))
    ref = gpt[-1][1]
    lim = ref[(ref.stat == "cos_mean") & (ref.side == "sde")].sort_values("frac")
    dist = []
    for label, t in gpt:
        c = t[(t.stat == "cos_mean") & (t.side == "real") & (t.layer > 0)].sort_values("frac")
        sde = np.interp(c["frac"], lim["frac"], lim["mean"])
        gap = np.abs(c["mean"].to_numpy() - sde)
        k = int(np.argmax(gap))
        se = float(c["se"].to_numpy()[k])
        dist.append(float(gap[k]))
        print(f"{label}: max |real - SDE| = {gap[k]:.4f} at fraction {c['frac'].iloc[k]:.3f} "
              f"(real SE there {se:.4f}); final real {c['mean'].iloc[-1]:.4f}, SDE "
              f"{lim['mean'].iloc[-1]:.4f}")
    if len(depths) >= 3:
        slope = np.polyfit(np.log(depths), np.log(dist), 1)[0]
        print(f"fitted order of max |real - SDE| in L: {-slope:.2f} (distance ~ L^-{-slope:.2f})")
    bert = [(f"L={L}", load(args.runs, f"bert-L{L}")) for L in (12, 24, 48)
            if (args.runs / f"bert-L{L}.parquet").exists()]
    if bert:
        print(plot_depths(bert, args.docs / "real_bert.png",
                          "BERT post-LN at init (d = 256, 4 heads, 64 tokens): no depth limit"))
        for label, t in bert:
            c = t[(t.stat == "cos_mean") & (t.side == "real")].sort_values("layer")
            at12 = float(c[c.layer == 12]["mean"].iloc[0])
            print(f"BERT {label}: cosine at layer 12 = {at12:.4f}, at the last layer "
                  f"= {c['mean'].iloc[-1]:.4f}")


if __name__ == "__main__":
    main()
