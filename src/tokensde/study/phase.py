"""Two-token figures: `phase-diagram`, `theory-vs-simulation`, `phase-over-d`, `decision-times`.

The Monte Carlo grids are sweeps of kind `two_token` (`tokensde.sweep.two_token`), packaged as
`sweeps/phase-<size>.toml` and `sweeps/phase-d-<size>.toml` and run like every sweep into
`OUT/sweeps/<stem>/` (resumable cell by cell, on `workers` processes); the decision times are
`simulate(..., stopping=StoppingRule(until='decided'))` runs saved under
`data/decision-times-<size>.npz`. Each section compares the network with the exact theory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..io.report import Image, Section, Table
from ..model.params import ModelParams, TimeGrid
from ..sim.rng import derive_seed
from ..theory.first_passage import PAIR_TOL
from .context import (
    _STEP_CAPTION,
    _STEP_COLUMN,
    Context,
    FigureSpec,
    _one_thread,
    _run_packaged_sweep,
    _saved_or,
    _step_text,
    _SweepRun,
)


def _phase_data(ctx: Context) -> tuple[_SweepRun, bool]:
    """The phase grid over (beta, d) from uniform pairs: sweep `phase-<size>.toml`."""
    run = _run_packaged_sweep(ctx, (f"phase-{ctx.size}",))
    return run, run.reused


def _phase_d_data(ctx: Context) -> tuple[_SweepRun, bool]:
    """The two-token grid over d from 3 to 4096 (betas at offsets from beta_c(d), pairs from
    rho0 = -0.9, Gram sampler): sweep `phase-d-<size>.toml`."""
    run = _run_packaged_sweep(ctx, (f"phase-d-{ctx.size}",))
    return run, run.reused


_NEAR_BETA_C = 0.3  # cells this close to beta_c(d) relax slowly and are reported apart


def _pair_estimate(r: dict[str, Any]) -> Any:
    """The rule for undecided runs (`stats.estimate_with_undecided`) on a two_token row's
    counts (so tables of cells saved by earlier versions are reported the same way)."""
    from ..analysis.stats import estimate_with_undecided

    return estimate_with_undecided(int(r["antipodal"]), int(r["merged"]), int(r["runs"]))


def _pair_parts(r: dict[str, Any], e: Any) -> tuple[str, str, str, str]:
    """A two_token row's estimate and 95 % interval (`pair_estimate(r).parts()`), the step error
    of P_anti beside them (`context._step_text`), and the bounds the undecided runs allow."""
    p, ci, bounds = e.parts()
    return p, ci, _step_text(r, "p_anti"), bounds


def _outside(df: Any, theory: str = "theory_tol") -> Any:
    """Per row: the theory lies outside the bounds that the row's undecided runs allow."""
    return df.apply(lambda r: not _pair_estimate(r).contains(r[theory]), axis=1).astype(bool)


def _phase_table(df: Any) -> Table:
    recs = df.to_dict("records")
    ests = [_pair_estimate(r) for r in recs]
    rows = [[r["beta"], int(r["d"]), r["beta_c"], int(r["runs"]), r["T"], r["dt"], *_pair_parts(r, e),
             r["theory_tol"], r["theory"], "" if e.contains(r["theory_tol"]) else "outside",
             e.undecided, r["t_decided_median"], r["t_decided_q90"], int(r["seed"]),
             r["version"]] for r, e in zip(recs, ests, strict=True)]
    return Table("phase-grid", "Two tokens from uniform positions: Monte Carlo P(antipodal) of the "
                 "full network over the decided runs (95% Wilson), each run stopped once decided "
                 "(1 - |rho| < tol) or at the maximum horizon T, with the bounds that the runs "
                 "still undecided at T allow (all of them merged .. all antipodal), against the "
                 "exact probability of reaching the antipodal tolerance first ('theory at tol', "
                 "what the runs measure) and its tol -> 0 limit P_anti (docs/reporting.md)"
                 + _STEP_CAPTION,
                 ["beta", "d", "beta_c(d)", "runs", "max T", "dt", "P_anti (decided)", "95%",
                  _STEP_COLUMN, "with undecided", "theory at tol", "P_anti (tol -> 0)", "theory",
                  "undecided at T", "median t_decided", "90% t_decided", "seed", "version"],
                 rows,
                 note="Rows marked 'outside' have theory at tol outside the bounds that the "
                      "interval and the undecided runs allow.",
                 flagged=[i for i, (r, e) in enumerate(zip(recs, ests, strict=True))
                          if not e.contains(r["theory_tol"])])


def agreement(df: Any, level: float = 0.95) -> tuple[str, str]:
    """Section status and a sentence: 'ok' when the number of cells whose interval excludes the
    theory is what chance explains (`stats.chance_explains`), for the cells away from beta_c
    (|beta - beta_c| > NEAR_BETA_C) and for all cells; else 'disagrees'."""
    from ..analysis.stats import chance_excess, chance_explains

    far = (df["beta"] - df["beta_c"]).abs() > _NEAR_BETA_C
    out = _outside(df) if len(df) else df.get("outside")
    parts, ok = [], True
    for label, sel in (("away from beta_c", far), ("all cells", far | ~far)):
        k, n = int(out[sel].sum()), int(sel.sum())
        if n == 0:
            continue
        fine = chance_explains(k, n, level)
        ok &= fine
        parts.append(f"{label}: {k} of {n} intervals exclude the theory (chance alone gives "
                     f"{k} or more with probability {chance_excess(k, n, level):.3g}; "
                     f"{'explained by chance' if fine else 'MORE THAN CHANCE EXPLAINS'})")
    rule = ("A section is ok when, under a correct theory, at least that many misses would "
            "happen with probability >= 1% (binomial with p = 0.05).")
    return ("ok" if ok else "disagrees"), "; ".join(parts) + ". " + rule


def _phase_section(ctx: Context, spec: FigureSpec, run: _SweepRun, reused: bool,
                   plot: Callable[[Any, Path], Path], caption: str) -> Section:
    df = run.table.sort_values(["d", "beta"], ignore_index=True)
    png = plot(df, ctx.figures / f"{spec.name}.png")
    horizon = ", ".join(f"{t:g}" for t in sorted(df["T"].unique()))
    far = (df["beta"] - df["beta_c"]).abs() > _NEAR_BETA_C
    und_far = float(df.loc[far, "p_undecided"].max()) if far.any() else 0.0
    und = float(df["p_undecided"].max())
    status, agree = agreement(df)
    return Section(spec.name, spec.title, spec.claim, status=status,
                   note=f"Runs stop once decided; maximum horizon T = {horizon}. Largest "
                        f"undecided fraction at T: {und_far:.4f} away from beta_c, {und:.4f} "
                        f"over the grid. {agree}",
                   images=[Image(png, caption)], tables=[_phase_table(df)],
                   provenance={**run.provenance(ctx.workers, reused),
                               "figure": f"tokensde figure {spec.name} --out {ctx.out}"
                                         + ctx.size_flag})


def _draw_phase(ctx: Context, spec: FigureSpec, run: _SweepRun, reused: bool) -> Section:
    """P_anti over (beta, d) with the boundary beta_c(d)."""
    from ..plots.phase import _plot_phase_diagram

    return _phase_section(ctx, spec, run, reused, _plot_phase_diagram,
                          "Monte Carlo P(antipodal) over (beta, d) and the exact boundary "
                          "beta_c(d) = arccosh(d - 2)/2.")


def _draw_theory(ctx: Context, spec: FigureSpec, run: _SweepRun, reused: bool) -> Section:
    """Exact P_anti(beta) curves against the Monte Carlo points."""
    from ..plots.phase import _plot_theory_vs_mc

    return _phase_section(ctx, spec, run, reused, _plot_theory_vs_mc,
                          "Exact P_anti (lines) vs Monte Carlo of the full network (points, 95% "
                          "Wilson).")


def _draw_phase_d(ctx: Context, spec: FigureSpec, run: _SweepRun, reused: bool) -> Section:
    """P_anti against beta - beta_c(d) for d over three decades (Gram sampler)."""
    from ..plots.phase import _plot_phase_over_d

    return _phase_section(ctx, spec, run, reused, _plot_phase_over_d,
                          "Monte Carlo P(antipodal) from rho0 = -0.9 with the exact boundary "
                          "beta_c(d) over three decades of d (Gram sampler, cost per layer "
                          "independent of d), and against beta - beta_c(d) with the exact "
                          "curves.")


# ---------------------------------------------------------------------------- decision times

# per size: the two-token cases (beta, d), the many-token cases (n, d, beta), runs a case and the
# maximum depth times; at the quick size 200 runs put the survival curve within a 95% band of
# half-width at most 0.07 of the exact law at every t
_DECISION_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"two": ((1.0, 4),), "many": ((8, 3, 4.0),), "runs": 60, "T2": 40.0, "Tn": 20.0},
    "quick": {"two": ((0.4, 3), (1.0, 4), (2.0, 4), (2.5, 10)),
              "many": ((8, 3, 1.0), (8, 3, 4.0), (16, 3, 2.0), (8, 8, 4.0)), "runs": 200,
              "T2": 200.0, "Tn": 100.0},
    "full": {"two": ((0.4, 3), (1.0, 4), (2.0, 4), (1.6, 10), (2.5, 10)),
             "many": ((8, 3, 1.0), (8, 3, 4.0), (16, 3, 2.0), (8, 8, 4.0), (32, 3, 4.0)),
             "runs": 2000, "T2": 300.0, "Tn": 300.0},
}
DECISION_TOL = {"two": PAIR_TOL, "many": PAIR_TOL}


def _decision_data(ctx: Context) -> tuple[dict[str, dict[str, np.ndarray]], bool]:
    """Decision times of two-token cells (uniform pairs) and of multi-token cells, saved."""
    from ..sim.options import StoppingRule
    from ..sim.simulate import simulate
    from ..sweep.kinds import _auto_dt
    from ..theory.two_tokens import default_dt

    cfg = _DECISION_SIZES[ctx.size]
    path = ctx.data_path("decision-times", ".npz")
    stamp = json.dumps({"cfg": cfg, "tol": DECISION_TOL, "seed": ctx.seed}, sort_keys=True)

    def make() -> dict[str, dict[str, np.ndarray]]:
        _one_thread()
        out: dict[str, dict[str, np.ndarray]] = {"two": {}, "many": {}}
        for k, (beta, d) in enumerate(cfg["two"]):
            res = simulate(ModelParams(n=2, d=d, beta=beta),
                           TimeGrid.make(T=cfg["T2"], dt=default_dt(d)), runs=cfg["runs"],
                           seed=derive_seed(ctx.seed, 13, k),
                           stopping=StoppingRule.decided(tol=DECISION_TOL["two"]))
            out["two"][f"{beta:g},{d}"] = res.decision_times()
        for k, (n, d, beta) in enumerate(cfg["many"]):
            res = simulate(ModelParams(n=n, d=d, beta=beta),
                           TimeGrid.make(T=cfg["Tn"], dt=_auto_dt(d, "auto")), runs=cfg["runs"],
                           seed=derive_seed(ctx.seed, 14, k),
                           stopping=StoppingRule.decided(tol=DECISION_TOL["many"]))
            out["many"][f"{n},{d},{beta:g}"] = res.decision_times()
        return out

    def save(obj: dict[str, dict[str, np.ndarray]], where: Path) -> None:
        from ..io.store import atomic_write

        arrays = {f"{g}|{k}": v for g, part in obj.items() for k, v in part.items()}

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, stamp=np.array(stamp), **arrays)  # type: ignore[arg-type]

        atomic_write(where, write)

    def load(where: Path) -> dict[str, Any]:
        with np.load(where, allow_pickle=False) as z:
            obj: dict[str, Any] = {"two": {}, "many": {}, "stamp": str(z["stamp"])}
            for key in z.files:
                if "|" in key:
                    g, k = key.split("|")
                    obj[g][k] = z[key]
        return obj

    return _saved_or(path, load, make, save, ctx, lambda o: o.get("stamp") == stamp)


def _draw_decisions(ctx: Context, spec: FigureSpec, data: dict[str, dict[str, np.ndarray]],
                   reused: bool) -> Section:
    """How long runs stay undecided: two tokens against the exact survival, many tokens."""
    from ..analysis.stats import _censored_quantiles
    from ..plots.phase import _plot_decision_times
    from ..theory import decision_time as absorption

    cfg = _DECISION_SIZES[ctx.size]
    png = _plot_decision_times(data["two"], data["many"], ctx.figures / "decision-times.png",
                              DECISION_TOL["two"], DECISION_TOL["many"], (cfg["T2"], cfg["Tn"]))
    rows = []
    for key, t in sorted(data["two"].items()):
        beta, d = (float(v) for v in key.split(","))
        q = _censored_quantiles(t, [0.5, 0.9])
        th = absorption.median_time(beta, d, "uniform", DECISION_TOL["two"])
        rows.append(["2", d, beta, len(t), float(np.isnan(t).mean()), q[0], th, q[1],
                     absorption.decision_rate(beta, d, DECISION_TOL["two"]),
                     absorption._boundary_rates(beta, d)["antipodal"]])
    for key, t in sorted(data["many"].items()):
        n, d_text, beta_text = key.split(",")
        q = _censored_quantiles(t, [0.5, 0.9])
        rows.append([n, float(d_text), float(beta_text), len(t), float(np.isnan(t).mean()), q[0], None,
                     q[1], None, None])
    table = Table("decision-times", "Time to decision (every pair within tol of +-1): median "
                  "and 90% quantile over runs (blank when past the maximum horizon), the exact "
                  "median and tail rate kappa_0 of the two-token diffusion at this tol, and the "
                  "tol -> 0 antipodal rate mu^2/(2 s^2), which vanishes at beta_c",
                  ["n", "d", "beta", "runs", "undecided at T", "median t", "median (theory)",
                   "90% t", "tail rate (theory)", "antipodal rate, tol -> 0"], rows)
    return Section(spec.name, spec.title, spec.claim, images=[Image(
        png, "Fraction of runs still undecided at depth time t. Left: two tokens from a uniform "
             "pair, network (steps) and the exact survival of the §5 diffusion (dashed). Right: "
             "many tokens (pure noise).")], tables=[table],
        provenance={"reused": reused, "size": cfg, "tol": DECISION_TOL,
                    "data": str(ctx.data_path("decision-times", ".npz")),
                    "command": f"tokensde figure decision-times --out {ctx.out}"
                               + ctx.size_flag})
