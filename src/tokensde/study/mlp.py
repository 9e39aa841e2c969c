"""Figure `mlp`: two tokens with a random MLP block (docs/variants.md §5), from the packaged sweep
`mlp-<size>.toml` (kind `two_token`): every cell against the exact probability of first coming
within tol of antipodal (`tokensde.theory.mlp_block`, the spec model's by `absorption`)."""

from __future__ import annotations

from typing import Any

from ..io.report import Image, Section, Table
from .context import _STEP_CAPTION, _STEP_COLUMN, Context, FigureSpec, _run_packaged_sweep, _SweepRun
from .phase import _pair_estimate, _pair_parts


def _mlp_data(ctx: Context) -> tuple[_SweepRun, bool]:
    """Run (or resume) `mlp-<size>.toml` under `OUT/sweeps/`."""
    run = _run_packaged_sweep(ctx, (f"mlp-{ctx.size}",))
    return run, run.reused


def _draw_mlp(ctx: Context, spec: FigureSpec, run: _SweepRun, reused: bool) -> Section:
    """P(first within tol of antipodal) per arm against beta and against tol, with theory."""
    from ..analysis.stats import chance_excess, chance_explains
    from ..plots.mlp import _mlp_rows, _plot_mlp

    df = _mlp_rows(run.table)
    png = _plot_mlp(df, ctx.figures / f"{spec.name}.png")
    recs = df.to_dict("records")
    ests = [_pair_estimate(r) for r in recs]
    rows: list[list[Any]] = [
        [r["arm"], r["beta"], r["tol"], r["dt"], r["T"], int(r["runs"]), *_pair_parts(r, e),
         r["theory_tol"], r["theory"], e.undecided,
         "" if e.contains(r["theory_tol"]) else "outside", int(r["seed"])]
        for r, e in zip(recs, ests, strict=True)]
    flagged = [i for i, (r, e) in enumerate(zip(recs, ests, strict=True))
               if not e.contains(r["theory_tol"])]
    k, n = len(flagged), len(recs)
    ok = chance_explains(k, n)
    table = Table("mlp", "Two tokens with and without a random MLP block: Monte Carlo of the "
                  "network, each run tested every layer until <x_1, x_2> is first within tol of "
                  "-1 or +1, at most to depth time T (over the decided runs, 95 % Wilson; "
                  "'undecided at T': neither yet; 'with undecided': the bounds those runs allow, "
                  "docs/reporting.md), against the exact first-passage probability ('theory at tol') and its "
                  "tol -> 0 limit (0 with the block: -1 is never reached for d >= 3)"
                  + _STEP_CAPTION,
                  ["model", "beta", "tol", "dt", "max T", "runs", "P(antipodal first)", "95%",
                   _STEP_COLUMN, "with undecided", "theory at tol", "tol -> 0", "undecided at T",
                   "interval", "seed"], rows, flagged=flagged)
    note = (f"{k} of {n} intervals exclude the theory (chance alone gives {k} or more with "
            f"probability {chance_excess(k, n):.3g}; "
            f"{'explained by chance' if ok else 'MORE THAN CHANCE EXPLAINS'}). With the block the "
            "probability falls with tol like tol^((d-3)/2) instead of levelling off at P_anti: "
            "an antipodal pair is pushed apart by about mlp_sigma^2 (d - 1) dt per layer, so a "
            "network cannot resolve antipodality finer than that, and the layer step must be "
            "small against tol (docs/variants.md §5).")
    return Section(spec.name, spec.title, spec.claim, status="ok" if ok else "disagrees",
                   note=note, tables=[table],
                   images=[Image(png, "P(first within tol of antipodal) with and without an "
                                      "MLP block.")],
                   provenance=run.provenance(ctx.workers, reused))
