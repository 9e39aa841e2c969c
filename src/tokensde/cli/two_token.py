"""`tokensde two-token ...`: exact antipodal probabilities, beta_c, and Monte Carlo (spec §5-§6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ._common import JSON, SEED, YES, check_run, comma_numbers, depth_grid, emit_json, user_errors
from ._options import time_option, tol_option, until_option

_two_token_app = typer.Typer(no_args_is_help=True, add_completion=False,
                            help="Two tokens: exact antipodal probability, phase boundary, "
                                 "Monte Carlo of the full network (spec §5-§6).")

_KIND_MC = "tokensde.two_token_mc"


# options that several two-token commands declare alike: constants, or a factory where each
# command has its own default (mc and hybrid share all of these)
def _rho0(default: str) -> Any:
    return typer.Option(default, "--rho0", help="Initial <x1, x2> in [-1, 1], or 'uniform'.")


def _dim(default: Any) -> Any:
    """--d of the commands that run the network (`...`: required)."""
    return typer.Option(default, "--d", help="Dimension (integer >= 2).")


_RHO0 = _rho0("0")
_RUNS = typer.Option(1000, "--runs", help="Independent runs (>= 1).")
_BETA = typer.Option(..., "--beta", help="Interaction strength (>= 0).")
_TIME = time_option(40.0)
_OUT = typer.Option(None, "--out", help="Also save the result (JSON with parameters, version).")
_FORCE = typer.Option(False, "--force", help="Replace an existing --out file.")
_QUIET = typer.Option(False, "--no-progress", help="No progress bar on stderr.")
_ENGINE = typer.Option("network", "--engine",
                      help="network (full d-dimensional network) | reduced (1-D rho diffusion).")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _check_out(out: Path | None, force: bool) -> None:
    """--out can take the JSON result: writable, and no finished file replaced without --force
    (checked before any run)."""
    if out is not None:
        from ..io.outputs import _guard_output

        _guard_output(out, "--out", force=force, suffixes=(".json",))


def _save(result: dict[str, Any], out: Path) -> str:
    from ..io.store import header, write_json

    write_json(out, header(_KIND_MC, **result), indent=2)
    return str(out)


def _run(fn: Any, steps: int, quiet: bool, json_out: bool, **kwargs: Any) -> dict[str, Any]:
    from ..io.progress import progress_bar

    with progress_bar(steps, "layers", not (quiet or json_out)) as bar:
        return fn(progress=bar, **kwargs).to_dict()


def _step_error(result: dict[str, Any], step: Any) -> None:
    """Put the step error `step` (`analysis.step_error.StepError`) of the estimate of `result`
    beside its Monte Carlo error, in `result['step_error']`."""
    from ..analysis.step_error import mc_error

    est = result["estimate"]
    result["step_error"] = step.to_dict(mc_error(est["p"], est["decided"]))


def _warn_step(r: dict[str, Any]) -> None:
    """A warning on stderr when the step error of `r` is not below its Monte Carlo error."""
    step = r.get("step_error")
    if step is not None and step["verdict"] == "not below":
        typer.echo(f"warning: {step['text']}", err=True)


def _show_outcome(r: dict[str, Any]) -> None:
    est = r["estimate"]
    decided = r.get("until") == "decided"
    to = "until decided, at most to" if decided else "to"
    typer.echo(f"{r['model']} model, {r['engine']}: {r['counts']['runs']} runs {to} T = "
               f"{_fmt(r['T'])} ({r['steps']} layers, dt = {_fmt(r['dt'])}), seed {r['seed']}")
    typer.echo(f"  antipodal  {est['text']}")
    if "step_error" in r:
        typer.echo(f"  step       {r['step_error']['text']}")
    c = r["counts"]
    typer.echo(f"  counts     {c['antipodal']} antipodal, {c['merged']} merged, "
               f"{c['undecided']} undecided (tol {_fmt(r['tol'])})")
    if decided:
        typer.echo(f"  t_decided  median {_fmt(r['t_decided_median'])}, 90% "
                   f"{_fmt(r['t_decided_q90'])}")
    target = r.get("theory_at_tol", r["theory"])
    lo, hi = est["bounds"]
    verdict = ("within" if lo <= target <= hi else "OUTSIDE") + " what these runs allow"
    if "theory_at_tol" in r:
        typer.echo(f"  theory     {_fmt(r['theory_at_tol'])} at tol ({verdict}), "
                   f"{_fmt(r['theory'])} as tol -> 0")
    else:
        typer.echo(f"  theory     {_fmt(r['theory'])} ({verdict})")


@_two_token_app.command("prob")
def _prob_cmd(
    beta: float = _BETA,
    d: float = typer.Option(..., "--d", help="Dimension (any real >= 2)."),
    rho0: str = _RHO0,
    json_out: bool = JSON,
) -> None:
    """Exact probability that the pair ends antipodal (scale function of spec §5)."""
    from ..theory import two_tokens as tt

    with user_errors():
        r0 = tt.check_rho0(rho0)
        p = tt.p_anti_uniform(beta, d) if isinstance(r0, str) else tt.p_anti(beta, d, r0)
        p = float(p) + 0.0  # no -0.0 (P_anti just above beta_c underflows to -0)
        result = {"p_anti": p, "beta": beta, "d": d, "rho0": r0, "beta_c": tt.beta_c(d),
                  "antipodal_attracts": tt.antipodal_attracts(beta, d)}
    if json_out:
        emit_json(result)
        return
    typer.echo(f"P_anti(beta={_fmt(beta)}, d={_fmt(d)}, rho0={r0}) = {p:.8g}")
    verdict = ("antipodal pairs attract (beta > beta_c)" if result["antipodal_attracts"] else
               "pairs that do not start antipodal merge almost surely (beta <= beta_c)")
    if r0 in (-1.0, 1.0):
        verdict += f"; rho0 = {r0:g} is a fixed point: the pair stays " + (
            "antipodal" if r0 == -1.0 else "merged")
    typer.echo(f"beta_c({_fmt(d)}) = {result['beta_c']:.8g}: {verdict}")


@_two_token_app.command("critical")
def _critical_cmd(
    d: float = typer.Option(..., "--d", help="Dimension (any real >= 2)."),
    json_out: bool = JSON,
) -> None:
    """Critical interaction beta_c(d) = arccosh(d - 2)/2: antipodal attracts iff beta > beta_c."""
    from ..theory import two_tokens as tt

    with user_errors():
        bc = tt.beta_c(d)
    if json_out:
        emit_json({"beta_c": bc, "d": d})
        return
    typer.echo(f"beta_c({_fmt(d)}) = {bc:.8g}  (antipodal pairs attract iff cosh(2 beta) > "
               f"{_fmt(d - 2)})")


@_two_token_app.command("mc")
def _mc_cmd(
    beta: float = _BETA, d: int = _dim(...), rho0: str = _RHO0, runs: int = _RUNS,
    time: float = time_option(200.0),
    until: str = until_option("decided"),
    dt: float | None = typer.Option(None, "--dt", show_default="0.05/d",
                                    help="Layer step dt = alpha^2."),
    seed: int = SEED,
    sigma: float = typer.Option(1.0, "--sigma", help="Matrix noise scale (>= 0)."),
    tol: float = tol_option(),
    sampler: str = typer.Option("auto", "--sampler", help="auto | fast | full."),
    mlp: str = typer.Option("none", "--mlp", help="Random MLP block: none | relu | gelu (each run "
                            "then tested every layer; docs/variants.md §5)."),
    mlp_sigma: float = typer.Option(1.0, "--mlp-sigma", help="Output scale of the MLP block."),
    engine: str = _ENGINE, out: Path | None = _OUT, force: bool = _FORCE, quiet: bool = _QUIET,
    json_out: bool = JSON, yes: bool = YES,
) -> None:
    """Monte Carlo of the two-token network (softmax, matrix noise) against the exact P_anti
    (with an MLP block: against the exact first-passage probability at --tol)."""

    from ..analysis import pair_monte_carlo as mc
    from ..analysis.step_coupled import _pair_step
    from ..model.checks import _check_int
    from ..model.params import _MAX_SIZE
    from ..sim.options import Execution, StepControl
    from ..theory import two_tokens as tt
    from ..theory.coefficients import pair_model
    from ..theory.first_passage import hitting_probability

    with user_errors():
        _check_out(out, force)
        dt = tt.default_dt(_check_int("d", d, 2, _MAX_SIZE)) if dt is None else dt
        grid = depth_grid(time, dt)
        stopping, outcome_tol = mc._pair_stopping(until, tol)
        execution = Execution(sampler=sampler)
        check_run(mc.pair_budget(mc.spec_params(beta, d, sigma, mlp=mlp, mlp_sigma=mlp_sigma),
                                 tt.check_rho0(rho0), grid, runs, engine, stopping, execution,
                                 StepControl()), yes=yes)  # StepControl: `pair_step`'s runs
        result = _run(mc.monte_carlo, grid.steps, quiet, json_out, beta=beta, d=d,
                      rho0=tt.check_rho0(rho0), runs=runs, T=time, dt=dt, seed=seed,
                      sigma=sigma, stopping=stopping, outcome_tol=outcome_tol, engine=engine,
                      execution=execution, mlp=mlp, mlp_sigma=mlp_sigma)
        model = pair_model(beta, d, sigma=sigma, mlp=mlp, mlp_sigma=mlp_sigma)
        result["theory_at_tol"] = hitting_probability(model, tt.check_rho0(rho0), tol)
        _step_error(result, _pair_step(mc.spec_params(beta, d, sigma, mlp=mlp, mlp_sigma=mlp_sigma),
                                      tt.check_rho0(rho0), result, engine, tol, until, seed))
        if out is not None:
            result["out"] = _save(result, out)
    _warn_step(result)
    if json_out:
        emit_json(result)
    else:
        _show_outcome(result)


@_two_token_app.command("grid")
def _grid_cmd(
    out_dir: Path = typer.Option(..., "--out", help="Sweep directory of the grid (resumed if it "
                                 "exists)."),
    out: Path = typer.Option(..., "--figure", help="Phase diagram (PNG), drawn from the table."),
    betas: str = typer.Option("0.3,0.6,0.9,1.2,1.5,1.8,2.1,2.4,2.7,3.0", "--betas",
                              help="Comma-separated betas."),
    ds: str = typer.Option("3,4,5,6,8,10", "--ds", help="Comma-separated dimensions."),
    rho0: str = _rho0("uniform"),
    runs: int = typer.Option(200, "--runs", help="Runs per cell (>= 1)."),
    time: float = time_option(30.0, always_decided=True),
    seed: int = SEED,
    engine: str = _ENGINE,
    workers: int = typer.Option(1, "--workers", help="Parallel cells (1: in this process)."),
    quiet: bool = _QUIET,
) -> None:
    """Monte Carlo P_anti over a (beta, d) grid (dt = 0.05/d) as a `two_token` sweep in --out
    (every finished cell saved; the same command resumes), then the phase diagram drawn from
    the sweep's table. Prints the table's path and the figure's."""
    from ..io.store import check_output
    from ..plots.phase import _plot_phase_diagram
    from ..plots.style import _check_figure
    from ..sweep.store import _ok_rows, _SweepDir
    from ..sweep.two_token import grid_config
    from .sweep import _run_resumable

    with user_errors():
        _check_figure(out, "--figure")
        check_output(out_dir, "--out", directory=True)
        cfg = grid_config(comma_numbers("--betas", betas), comma_numbers("--ds", ds, int), rho0,
                          runs=runs, T=time, seed=seed, engine=engine)
        _run_resumable(cfg, out_dir, workers, quiet=quiet)
        typer.echo(str(_SweepDir(out_dir).table_path))
        typer.echo(str(_plot_phase_diagram(_ok_rows(out_dir), out)))


@_two_token_app.command("hybrid")
def _hybrid_cmd(
    beta: float = _BETA,
    eps: float | None = typer.Option(None, "--eps", help="Scalar noise scale; runs Monte Carlo."),
    d: int = _dim(3), rho0: str = _RHO0, runs: int = _RUNS,
    time: float = _TIME,
    dt: float = typer.Option(0.01, "--dt", help="Layer step dt = alpha^2."),
    seed: int = SEED, tol: float = tol_option(extra=" at the horizon"),
    engine: str = _ENGINE, out: Path | None = _OUT, force: bool = _FORCE, quiet: bool = _QUIET,
    json_out: bool = JSON, yes: bool = YES,
) -> None:
    """Hybrid model of §6 (USA, M = I, scalar noise): threshold eps^2 = 2 e^-beta; MC with --eps."""
    import math

    from ..analysis import pair_monte_carlo as mc
    from ..analysis.step_error import StepError
    from ..sim.options import StoppingRule
    from ..theory import two_tokens as tt

    with user_errors():
        _check_out(out, force)
        eps2_c = tt.hybrid_eps2_c(beta)
        result: dict[str, Any] = {"beta": beta, "eps2_c": eps2_c, "eps_c": math.sqrt(eps2_c)}
        if eps is not None:
            grid = depth_grid(time, dt)
            check_run(mc.pair_budget(mc._hybrid_params(beta, eps, d), tt.check_rho0(rho0), grid,
                                     runs, engine, StoppingRule()), yes=yes)
            steps = grid.steps
            lam_m, lam_p = tt.hybrid_lyapunov(beta, eps)
            result.update(eps=eps, lyapunov_antipodal=lam_m, lyapunov_merged=lam_p,
                          regime="antipodal" if lam_m < 0 else "merged" if lam_m > 0 else
                          "critical")
            result["mc"] = _run(mc.hybrid_monte_carlo, steps, quiet, json_out, beta=beta,
                                eps=eps, d=d, rho0=tt.check_rho0(rho0), runs=runs, T=time,
                                dt=dt, seed=seed, tol=tol, engine=engine)
            _step_error(result["mc"], StepError(None, math.nan, dt,
                                                "the hybrid model is not calibrated"))
            if out is not None:
                result["out"] = _save(result, out)
    if json_out:
        emit_json(result)
        return
    typer.echo(f"hybrid threshold at beta = {_fmt(beta)}: eps^2 = 2 e^-beta = {eps2_c:.8g} "
               f"(eps_c = {math.sqrt(eps2_c):.8g})")
    if eps is not None:
        typer.echo(f"eps = {_fmt(eps)}: exponent of log(1+rho) at -1 = "
                   f"{result['lyapunov_antipodal']:.6g}, of log(1-rho) at +1 = "
                   f"{result['lyapunov_merged']:.6g} -> {result['regime']}")
        _show_outcome(result["mc"])


def register(app: typer.Typer) -> None:
    """Add the `two-token` command group to `app`."""
    app.add_typer(_two_token_app, name="two-token")
