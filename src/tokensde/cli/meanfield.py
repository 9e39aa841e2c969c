"""`tokensde meanfield ...`: the many-token limit on common noise paths (docs/meanfield.md)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import typer

from ._common import JSON, SEED, YES, check_run, emit_json, user_errors
from ._options import time_option, tol_option, until_option

# the table's decision tolerance, looser than the 1e-8 of the other commands
_TABLE_TOL = 1e-4

_meanfield_app = typer.Typer(no_args_is_help=True, add_completion=False,
                            help="n particles and the many-token limit (K weighted nodes) on "
                                 "common noise paths (docs/meanfield.md).")


@_meanfield_app.command("table")
def _table(
    d: list[int] = typer.Option([2], "--d", help="Dimensions (repeat the option)."),
    beta: list[float] = typer.Option([3.0], "--beta", help="Attention strengths (repeat)."),
    n: list[int] = typer.Option([16, 64], "--n", help="Particle counts (repeat)."),
    start: list[str] = typer.Option(["iid", "quasi"], "--start", help="iid | quasi | mixture "
                                    "(repeat): i.i.d. uniform, quasi-uniform, or i.i.d. from the "
                                    "law of --mixture (the limit then starts from its density)."),
    mixture: str = typer.Option("1:1:0", "--mixture", help="Law of --start mixture: von Mises "
                                "components MASS:KAPPA:ANGLE separated by ';' (ANGLE in degrees "
                                "from e_1 in the e_1, e_2 plane); 1:1:0 is one law of "
                                "concentration 1 about e_1, not antipodally symmetric."),
    K: int = typer.Option(128, "--K", help="Limit nodes."),
    runs: int = typer.Option(32, "--runs", help="Noise paths a cell."),
    T: float = time_option(40.0),
    until: str = until_option("decided", ("decided",)),
    dt: float = typer.Option(0.02, "--dt", help="Layer step dt = alpha^2."),
    tol: float = tol_option(_TABLE_TOL, "Looser than the 1e-8 of the other commands: the limit "
                            "takes about twice the depth to decide at 1e-8, and more runs stay "
                            "undecided by --time (docs/absorption.md)."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda."),
    out: Path = typer.Option(None, "--out", help="Sweep folder of the table: every finished "
                             "system is saved there, and the same command resumes it."),
    force: bool = typer.Option(False, "--force", help="Delete what --out holds (another table, "
                               "older results, finished cells) and start over."),
    seed: int = SEED,
    json_out: bool = JSON,
    yes: bool = YES,
) -> None:
    """P(bipolar) and the minority mass at absorption, particles against the limit (n = 0), run
    as a `meanfield` sweep: one line per system on stderr as each ends; SIGINT or SIGTERM keeps
    the finished systems and prints the command that resumes."""
    import shutil
    import tempfile

    from ..io.outputs import _clear_results, _guard_output
    from ..meanfield.absorption import _bipolar_text, table_budget
    from ..meanfield.kind import table_config, table_frame
    from ..model.params import ParameterError, _check_choice
    from ..sim.options import Execution
    from ..sweep import load_table
    from .sweep import _run_resumable

    with user_errors():
        _check_choice("--until", until, ("decided",))
        _check_options(d, beta, n, start, K, runs, T, dt, tol, device, seed)
        _check_mixture(mixture, d)  # checked whatever --start, like every option
        mix = mixture if "mixture" in start else None
        if out is not None:
            _guard_output(out, "--out", directory=True, force=force, resumable=True)
        check_run(table_budget(d, beta, n, K, start, runs, T, dt,
                               execution=Execution(device=device)), device, yes=yes)
        cfg = table_config(d, beta, n, K, start, runs, seed, T, dt, tol, device, mix)
        cfg.cells()  # every cell validated before anything is written
        if out is not None and force:
            if _done(out) is None:
                raise ParameterError(f"--out: {out} is in use by a running sweep; wait for it, "
                                     "or choose another --out")
            _clear_results(out, "--out")
        where = out if out is not None else Path(tempfile.mkdtemp(prefix="tokensde-meanfield-"))
        resume = _command(d, beta, n, start, K, runs, T, dt, tol, device, seed, json_out, where,
                          mix)
        try:
            summary = _run_resumable(cfg, where, quiet=True, resume=resume, on_cell=_log,
                                    yes=yes, estimate=False)  # check_run said it
            rows = load_table(where)
        except BaseException:
            if out is None and not _done(where):  # a temporary folder is kept only for its cells
                shutil.rmtree(where, ignore_errors=True)
            raise
        if out is None:
            shutil.rmtree(where, ignore_errors=True)
    tab = table_frame(rows)
    failed = rows[rows["status"] != "ok"]
    for r in failed.to_dict("records"):
        typer.echo(f"error: system d {r['d']} beta {r['beta']:g} {r['start']} n {r['n']} "
                   f"failed: {r['error']}", err=True)
    if json_out:
        emit_json(tab.to_dict(orient="records"))
    elif len(tab):
        tab.insert(5, "P(bipolar)", [_bipolar_text(r) for r in tab.to_dict("records")])
        cols = ["d", "beta", "start", "n", "runs", "p_decided", "P(bipolar)", "minority_mean",
                "minority_lo", "minority_hi", "t_decided_median"]
        typer.echo("n = 0 is the limit (K nodes); P(bipolar) over the decided runs with its 95 % "
                   "Wilson interval, and, where runs are undecided, the bounds with all of them "
                   "counted each way; minority mass over decided runs (95 % t)")
        typer.echo(tab[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if out is not None:
        typer.echo(f"saved in {out} ({summary['ran']} systems run, {summary['skipped']} reused)",
                   err=True)
    if len(failed):
        raise typer.Exit(1)


def _check_options(d: list[int], beta: list[float], n: list[int], start: list[str], K: int,
                   runs: int, T: float, dt: float, tol: float, device: str, seed: int) -> None:
    """Every option of `meanfield table` in its range, before any work; ParameterError naming
    the option otherwise."""
    from ..meanfield.absorption import STARTS
    from ..meanfield.kind import _check_device
    from ..model.params import _MAX_SIZE, _check_choice, _check_int, _check_real
    from ..sim.options import _resolve_device

    for v in d:
        _check_int("--d", v, 2, _MAX_SIZE)
    for b in beta:
        _check_real("--beta", b, 0.0)
    for m in n:
        _check_int("--n", m, 2, _MAX_SIZE)
    for st in start:
        _check_choice("--start", st, STARTS)
    _check_int("--K", K, 2, _MAX_SIZE)
    _check_int("--runs", runs, 1)
    _check_int("--seed", seed, 0)
    for name, x in (("--time", T), ("--dt", dt), ("--tol", tol)):
        _check_real(name, x, 0.0, strict=True)
    _check_device("--device", device)
    _resolve_device(device, "--device")


def _check_mixture(text: str, d: list[int]) -> str:
    """`--mixture` parsed in every dimension of the table (ParameterError naming it)."""
    from ..meanfield.absorption import _parse_mixture
    from ..model.params import ParameterError

    try:
        for v in d:
            _parse_mixture(text, v)
    except ParameterError as e:
        raise ParameterError(f"--mixture: {e}") from None
    return text


def _done(out: Path) -> int | None:
    """Finished cells of the sweep in `out` (0 when it is no readable sweep), None while another
    process runs it."""
    from ..sweep import sweep_status

    try:
        st = sweep_status(out)
    except (OSError, ValueError):
        return 0
    return None if st["running"] else int(st["done"])


def _log(row: dict[str, Any]) -> None:
    """The line of a finished system on stderr."""
    from ..meanfield.absorption import _system_line

    if row["status"] == "ok":
        typer.echo(_system_line(row), err=True)


def _command(d: list[int], beta: list[float], n: list[int], start: list[str], K: int, runs: int,
             T: float, dt: float, tol: float, device: str, seed: int, json_out: bool,
             out: Path, mixture: str | None = None) -> str:
    """The `tokensde meanfield table` command line of these options, writing into `out`."""
    words = ["tokensde", "meanfield", "table"]
    for flag, values in (("--d", d), ("--beta", beta), ("--n", n), ("--start", start)):
        for v in values:
            words += [flag, repr(v) if isinstance(v, float) else str(v)]
    words += ["--K", str(K), "--runs", str(runs), "--time", repr(T), "--dt", repr(dt),
              "--tol", repr(tol), "--device", device, "--seed", str(seed), "--out", str(out)]
    if mixture is not None:
        words += ["--mixture", mixture]
    return shlex.join(words + (["--json"] if json_out else []))


@_meanfield_app.command("convergence")
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
    from ..meanfield.convergence import _MIN_FIT_POINTS, fit_rate, node_convergence

    with user_errors():
        import pandas as pd
        df = pd.concat([node_convergence(b, K, time, K_ref, dt, seed) for b in beta])
    if json_out:
        emit_json(df.to_dict(orient="records"))
        return
    typer.echo(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    for (b, t), g in df.groupby(["beta", "T"]):
        slope = (f"{fit_rate(g['K'], g['arc_err_interp']):.2f} in log K"
                 if g.loc[g["arc_err_interp"] > 0, "K"].nunique() >= _MIN_FIT_POINTS
                 else f"not fitted (it needs {_MIN_FIT_POINTS} or more distinct --K with an "
                      "error > 0)")
        typer.echo(f"beta {b:g}, T {t:g}: arc-mass (interpolated) slope {slope}")


def register(app: typer.Typer) -> None:
    """Add `tokensde meanfield ...` to `app`."""
    app.add_typer(_meanfield_app, name="meanfield")
