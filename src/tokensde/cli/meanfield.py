"""`tokensde meanfield ...`: the many-token limit on common noise paths (docs/meanfield.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from ._common import JSON, SEED, check_run, emit_json, user_errors

meanfield_app = typer.Typer(no_args_is_help=True, add_completion=False,
                            help="n particles and the many-token limit (K weighted nodes) on "
                                 "common noise paths (docs/meanfield.md).")


@meanfield_app.command("table")
def table(
    d: list[int] = typer.Option([2], "--d", help="Dimensions (repeat the option)."),
    beta: list[float] = typer.Option([3.0], "--beta", help="Attention strengths (repeat)."),
    n: list[int] = typer.Option([16, 64], "--n", help="Particle counts (repeat)."),
    start: list[str] = typer.Option(["iid", "quasi"], "--start", help="iid | quasi (repeat)."),
    K: int = typer.Option(128, "--K", help="Limit nodes."),
    runs: int = typer.Option(32, "--runs", help="Noise paths a cell."),
    T: float = typer.Option(40.0, "--time", help="Horizon (depth time)."),
    dt: float = typer.Option(0.02, "--dt", help="Layer step dt = alpha^2."),
    tol: float = typer.Option(1e-4, "--tol", help="Decided when 1 - |<x_i, x_j>| < tol."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda."),
    out: Path = typer.Option(None, "--out", help="Directory for table.parquet, minority.parquet."),
    seed: int = SEED,
    json_out: bool = JSON,
) -> None:
    """P(bipolar) and the minority mass at absorption, particles against the limit (n = 0);
    one line per system on stderr as each cell ends."""
    from ..io.store import check_output
    from ..meanfield.absorption import run_table, table_budget, write_tables

    with user_errors():
        if out is not None:
            check_output(out, "--out", directory=True)
        check_run(table_budget(d, beta, n, K, start, runs, T, dt), device)
        tab, minority = run_table(d, beta, n, K, start, runs, seed, T, dt, tol, device=device,
                                  log=lambda line: typer.echo(line, err=True))
        if out is not None:
            write_tables(out, tab, minority, ds=d, betas=beta, ns=n, starts=start, K=K,
                         runs=runs, seed=seed, T=T, dt=dt, tol=tol)
    if json_out:
        emit_json(tab.to_dict(orient="records"))
        return
    cols = ["d", "beta", "start", "n", "runs", "p_decided", "p_bipolar", "p_bipolar_lo",
            "minority_mean", "minority_lo", "minority_hi", "t_decided_median"]
    typer.echo("n = 0 is the limit (K nodes); intervals 95 % (Wilson, t)")
    typer.echo(tab[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))


@meanfield_app.command("convergence")
def convergence(
    beta: list[float] = typer.Option([1.0, 3.0], "--beta", help="Attention strengths (repeat)."),
    K: list[int] = typer.Option([8, 16, 32, 64, 128], "--K", help="Node counts (repeat)."),
    time: list[float] = typer.Option([0.5, 2.0, 4.0], "--time", help="Depth times (repeat)."),
    K_ref: int = typer.Option(512, "--K-ref", help="Reference node count."),
    dt: float = typer.Option(0.02, "--dt", help="Layer step."),
    seed: int = SEED,
    json_out: bool = JSON,
) -> None:
    """d = 2, uniform start, one noise path: the error of K trapezoid nodes against K_ref."""
    from ..meanfield.convergence import fit_rate, node_convergence

    with user_errors():
        import pandas as pd
        df = pd.concat([node_convergence(b, K, time, K_ref, dt, seed) for b in beta])
    if json_out:
        emit_json(df.to_dict(orient="records"))
        return
    typer.echo(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    for (b, t), g in df.groupby(["beta", "T"]):
        typer.echo(f"beta {b:g}, T {t:g}: arc-mass (interpolated) slope "
                   f"{fit_rate(g['K'], g['arc_err_interp']):.2f} in log K")


def register(app: typer.Typer) -> None:
    """Add `tokensde meanfield ...` to `app`."""
    app.add_typer(meanfield_app, name="meanfield")
