"""Figure `meanfield`: the minority mass at absorption for n particles against the many-token limit
(K weighted nodes), on common noise paths (docs/meanfield.md). Computed directly (no sweep file):
at quick size a few seconds."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..io.report import Image, Section, Table, _interval
from .context import Context, FigureSpec, _saved_or

# size -> run_table arguments
_MEANFIELD_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"ds": [2], "betas": [3.0], "ns": [16], "K": 32, "runs": 4, "T": 20.0, "dt": 0.05},
    "quick": {"ds": [2], "betas": [3.0], "ns": [16, 64], "K": 32, "runs": 6, "T": 30.0,
              "dt": 0.05},
    "full": {"ds": [2, 3], "betas": [1.0, 3.0, 6.0], "ns": [16, 64, 256], "K": 64, "runs": 20,
             "T": 30.0},
}


def _meanfield_data(ctx: Context) -> tuple[pd.DataFrame, bool]:
    """Load or compute (and save) the table of `MEANFIELD_SIZES[ctx.size]` under `data/meanfield-<size>/`."""
    from ..io.store import read_parquet
    from ..meanfield.absorption import _KIND_TABLE, run_table, write_tables

    args = {**_MEANFIELD_SIZES[ctx.size], "seed": ctx.seed}

    def load(path: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
        t, meta = read_parquet(path / "table.parquet", _KIND_TABLE)
        return t.to_pandas(), meta

    def make() -> tuple[pd.DataFrame, dict[str, Any]]:
        table, minority = run_table(**args)
        return table, {"minority": minority}

    def save(obj: tuple[pd.DataFrame, dict[str, Any]], path: Any) -> None:
        write_tables(path, obj[0], obj[1]["minority"], **args)

    (table, _), reused = _saved_or(ctx.data_path("meanfield"), load, make, save, ctx,
                                  lambda saved: all(saved[1].get(k) == v for k, v in args.items())
                                  and "k_decided" in saved[0].columns)  # by the reporting rule
    return table, reused


def _draw_meanfield(ctx: Context, spec: FigureSpec, table: pd.DataFrame, reused: bool) -> Section:
    """The minority-mass law against n with the limit, and the table behind it."""
    from ..meanfield.absorption import _bipolar_text
    from ..plots.meanfield import plot_meanfield

    png = plot_meanfield(table, ctx.figures / f"{spec.name}.png")
    rows = [[int(r["d"]), r["beta"], r["start"], "limit" if r["n"] == 0 else int(r["n"]),
             int(r["K"]), int(r["runs"]), r["p_decided"], _bipolar_text(r), r["minority_mean"],
             _interval(r["minority_lo"], r["minority_hi"]), r["minority_q10"],
             r["t_decided_median"], r["horizon"]] for r in table.to_dict("records")]
    tab = Table("meanfield", "n particles and the limit (K weighted nodes) on the same noise "
                "paths, each run until every pair of live nodes is within tol of +-1 (at most "
                "to the horizon): P(bipolar) over the decided runs [95 % Wilson], with the bounds "
                "that counting every undecided run each way allows ('undecided': no run "
                "decided), the mean minority mass over decided runs (95 % t) and its 10 % "
                "quantile",
                ["d", "beta", "start", "n", "nodes", "runs", "decided", "P(bipolar)",
                 "minority mass", "95%", "q10", "median t", "horizon"], rows)
    note = ("The uniform start is antipodally symmetric and the common-noise flow keeps that "
            "symmetry (y(-x) = -y(x)), so the limit ends as two antipodal atoms of mass 1/2 each "
            "on every path: P(bipolar) = 1 and minority mass 1/2 (an equispaced start on the circle, "
            "itself symmetric, keeps it too). i.i.d. particles fall short of 1/2 by the "
            "asymmetry of their random sample, amplified by the flow (the symmetric state is "
            "unstable), so their law approaches the limit's only slowly as n grows; at beta = 1, "
            "d = 3 most particle runs end as one atom up to n = 256 (docs/meanfield.md).")
    return Section(spec.name, spec.title, spec.claim, status="ok", note=note, tables=[tab],
                   images=[Image(png, "Minority mass at absorption against n; star: the limit.")],
                   provenance={"reused": reused, "size": ctx.size, **_MEANFIELD_SIZES[ctx.size],
                               "seed": ctx.seed,
                               "command": "tokensde meanfield table (docs/meanfield.md)"})
