"""`tokensde token-noise ...`: the threshold of independent token noise and the stationary order
parameter across it (docs/token-noise.md); a thin shell over `tokensde.study.noise_threshold`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ._common import JSON, SEED, YES, check_run, comma_numbers, emit_json, user_errors

_token_noise_app = typer.Typer(no_args_is_help=True, add_completion=False,
                              help="Independent token noise: the theory's threshold and the "
                                   "simulated order parameter (docs/token-noise.md).")

_KIND_ORDER = "tokensde.token_noise_order"

_BETA = typer.Option(1.0, "--beta", help="Attention strength (> 0).")
_DIM = typer.Option(2, "--d", help="Dimension (integer >= 2).")
_ATTENTION = typer.Option("usa", "--attention", help="usa | softmax.")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _check_model(beta: float, d: int, attention: str) -> tuple[float, int, str]:
    from ..model.checks import _check_choice, _check_int, _check_real
    from ..model.params import _MAX_SIZE
    from ..theory.token_noise import ATTENTIONS

    return (_check_real("--beta", beta, 0.0, strict=True), _check_int("--d", d, 2, _MAX_SIZE),
            _check_choice("--attention", attention, ATTENTIONS))


_STEP_TOL = typer.Option(0.01, "--step-tol", help="Bound on the layer step's relative shift "
                        "of the threshold (in (0, 1)); sets the default --dt.")


@_token_noise_app.command("theory")
def _theory_cmd(
    beta: float = _BETA, d: int = _DIM, attention: str = _ATTENTION,
    mean_scale: float = typer.Option(1.0, "--mean-scale", help="a in M = a I (> 0)."),
    branch: bool = typer.Option(True, "--branch/--no-branch", help="Also find where the "
                                "limit's ordered branch ends (about a second)."),
    dt: float | None = typer.Option(None, "--dt", help="Also give each scheme's shift of the "
                                    "threshold at this layer step (> 0)."),
    step_tol: float = _STEP_TOL,
    json_out: bool = JSON,
) -> None:
    """The critical coupling K_c = a / tau_c^2, the critical token noise tau_c, beta_*(d) (USA),
    the end of the many-token limit's ordered branch (tau_s / tau_c) and the layer steps that
    keep each scheme's threshold within --step-tol."""
    from ..model.checks import _check_real
    from ..study.noise_threshold import _theory_summary

    with user_errors():
        beta, d, attention = _check_model(beta, d, attention)
        a = _check_real("--mean-scale", mean_scale, 0.0, strict=True)
        if dt is not None:
            dt = _check_real("--dt", dt, 0.0, strict=True)
        tol = _check_tol(step_tol)
        r = _theory_summary(beta, d, attention, a, branch=branch, dt=dt, tol=tol)
    if json_out:
        emit_json(r)
        return
    m = "I" if a == 1 else f"{_fmt(a)} I"
    typer.echo(f"{attention} attention, beta = {_fmt(beta)}, d = {d}, M = {m}, sigma = 0")
    typer.echo(f"  K_c    = {r['K_c']:.8g}  (critical coupling a / tau^2)")
    typer.echo(f"  tau_c  = {r['tau_c']:.8g}  (ordered below, uniform state stable above)")
    if r["beta_star"] is not None:
        kind = " (continuous here)" if r["continuous"] else " (discontinuous here)"
        typer.echo(f"  beta_* = {r['beta_star']:.8g}  (USA: continuous transition for "
                   f"beta <= beta_*){kind}")
    if r["branch_end"] is not None:
        end = r["branch_end"]
        what = ("ends at tau_c" if end == 1.0 else
                f"reaches tau = {_fmt(end * r['tau_c'])}: both laws stable in between")
        typer.echo(f"  tau_s / tau_c = {end:.4g}  (the limit's ordered branch {what})")
    if attention == "softmax":
        state = ("" if r["continuous"] is None else
                 ": continuous here" if r["continuous"] else ": not continuous here")
        typer.echo(f"  softmax has no beta_* (the USA bound does not apply){state}")
    steps = ", ".join(f"dt <= {v:g} ({k})" for k, v in r["steps"].items())
    typer.echo(f"  layer step for a threshold within {100 * r['tol']:g} %: {steps}")
    if r["shifts"] is not None:
        shifts = "; ".join(f"{k} {100 * v['exact']:+.3g} % (first order "
                           f"{100 * v['first_order']:+.3g} %)" for k, v in r["shifts"].items())
        typer.echo(f"  step's shift of the threshold at dt = {_fmt(r['dt'])}: {shifts}")


def _check_tol(step_tol: float) -> float:
    from ..model.checks import ParameterError, _check_real

    tol = _check_real("--step-tol", step_tol, 0.0, strict=True)
    if tol >= 1.0:
        raise ParameterError(f"--step-tol must be a number in (0, 1); got {_fmt(tol)}")
    return tol


@_token_noise_app.command("order")
def _order_cmd(
    beta: float = _BETA, d: int = _DIM, attention: str = _ATTENTION,
    n: int = typer.Option(256, "--n", help="Tokens (integer >= 1)."),
    taus: str | None = typer.Option(None, "--taus", help="Comma-separated token noise values "
                                    "tau (>= 0); or give --ratios."),
    ratios: str | None = typer.Option(None, "--ratios", show_default="0.8,1.25 without --taus",
                                      help="Comma-separated tau / tau_c (> 0)."),
    runs: int = typer.Option(4, "--runs", help="Independent runs per value (>= 2)."),
    time: float = typer.Option(60.0, "--time", help="Horizon in depth time (> --burn)."),
    burn: float = typer.Option(30.0, "--burn", help="Depth time left out of the average "
                               "(>= 0)."),
    dt: float | None = typer.Option(None, "--dt", show_default="the largest within --step-tol",
                                    help="Layer step (> 0, <= --time)."),
    samples: int = typer.Option(61, "--samples", help="Checkpoints over [0, T] (>= 2)."),
    scheme: str = typer.Option("auto", "--scheme", help="auto (the scheme with the smaller "
                               "step bias) | network | sde."),
    step_tol: float = _STEP_TOL,
    extrapolate: bool = typer.Option(False, "--extrapolate", help="Also run at --dt / 2 and "
                                     "report 2 X(dt/2) - X(dt) (Richardson; twice the work)."),
    start: str = typer.Option("uniform", "--start", help="uniform | ordered (every token at "
                              "e_1)."),
    seed: int = SEED,
    out: Path | None = typer.Option(None, "--out", help="Also save the rows (JSON)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
    json_out: bool = JSON, yes: bool = YES,
) -> None:
    """The stationary order parameter r = |(1/n) sum_i x_i| and the degree-2 q (M = I,
    sigma = 0), time-averaged from depth burn to T, mean and standard error over runs, at each
    token noise, against tau_c, with the layer step's shift of the threshold."""
    from ..io.store import header, write_json
    from ..model.checks import ParameterError, _check_choice, _check_int, _check_real
    from ..model.params import _MAX_SIZE
    from ..study.noise_threshold import (
        _order_budget,
        _resolve_taus,
        _step_plan,
        critical_token_noise,
        stationary_order,
    )
    from ._common import depth_grid

    with user_errors():
        beta, d, attention = _check_model(beta, d, attention)
        n = _check_int("--n", n, 1, _MAX_SIZE)
        if taus is not None and ratios is not None:
            raise ParameterError(f"give one of --taus and --ratios; got --taus {taus!r} and "
                                 f"--ratios {ratios!r}")
        if taus is not None:
            values = [_check_real("--taus", t, 0.0) for t in comma_numbers("--taus", taus)]
        else:
            qs = [_check_real("--ratios", q, 0.0, strict=True)
                  for q in comma_numbers("--ratios", ratios or "0.8,1.25")]
            values = _resolve_taus(None, qs, beta, d, attention)
        runs = _check_int("--runs", runs, 2)
        burn = _check_real("--burn", burn, 0.0)
        scheme = _check_choice("--scheme", scheme, ("auto", "network", "sde"))
        tol = _check_tol(step_tol)
        if dt is not None:
            dt = _check_real("--dt", dt, 0.0, strict=True)
        plan = _step_plan(beta, d, attention, scheme, dt, tol, token_noise=max(values))
        grid = depth_grid(time, plan.dt)
        if not burn < grid.T:
            raise ParameterError(f"--burn must be < --time = {_fmt(grid.T)}; got {_fmt(burn)}")
        samples = _check_int("--samples", samples, 2)
        if samples > grid.steps + 1:
            raise ParameterError(f"--samples must be an integer from 2 to {grid.steps + 1} (the "
                                 f"layers --time / --dt, plus 1); got {samples}")
        start = _check_choice("--start", start, ("uniform", "ordered"))
        seed = _check_int("--seed", seed, 0)
        if out is not None:
            from ..io.outputs import _guard_output

            _guard_output(out, "--out", force=force, suffixes=(".json",))
        if plan.warning:
            typer.echo(f"warning: {plan.warning}", err=True)
        # the budget counts both steps of --extrapolate: dt and dt / 2 cost 3 runs at dt
        check_run(_order_budget(max(values), n, d, beta, attention, runs, grid.T, grid.dt,
                               samples, len(values) * (3 if extrapolate else 1)),
                  flags={"T": "--time", "taus": "--taus or --ratios"}, yes=yes)
        tau_c = critical_token_noise(beta, d, attention)
        rows = [stationary_order(t, n, d, beta, attention, runs=runs, T=grid.T, burn=burn,
                                 dt=grid.dt, scheme=plan.scheme, seed=seed, samples=samples,
                                 start=start, extrapolate=extrapolate,
                                 step_tol=None).to_dict() for t in values]
        for r in rows:
            r["ratio"] = r["token_noise"] / tau_c
        result: dict[str, Any] = {"beta": beta, "d": d, "attention": attention, "n": n,
                                  "tau_c": tau_c, "seed": seed, "step": plan.to_dict(),
                                  "rows": rows}
        if out is not None:
            write_json(out, header(_KIND_ORDER, **result), indent=2)
            result["out"] = str(out)
    if json_out:
        emit_json(result)
        return
    how = "chosen by the step rule" if plan.chosen else "given"
    ext = ", extrapolated over dt and dt/2" if extrapolate else ""
    typer.echo(f"{attention} attention, beta = {_fmt(beta)}, d = {d}, n = {n}, M = I, sigma = 0: "
               f"tau_c = {tau_c:.6g}; r over depth [{_fmt(burn)}, {_fmt(grid.T)}], {runs} runs, "
               f"{start} start, seed {seed}")
    shift = rows[0]["step_shift"]
    typer.echo(f"  {plan.scheme} scheme, dt = {_fmt(grid.dt)} ({how}{ext}); step error: the "
               f"scheme's threshold sits {100 * shift:+.3g} % off tau_c (rule: "
               f"{100 * tol:g} %)")
    typer.echo(f"  {'tau':>9} {'tau/tau_c':>9} {'r':>8} {'se':>8} {'n E r^2':>9} {'q':>8} "
               f"{'se':>8} {'n E q^2':>9} {'drift':>8} {'step %':>7} {'wall_s':>7}")
    for r in rows:
        typer.echo(f"  {r['token_noise']:9.5g} {r['ratio']:9.4g} {r['r']:8.4f} {r['se']:8.4f} "
                   f"{n * r['r2']:9.4g} {r['q']:8.4f} {r['q_se']:8.4f} {n * r['q2']:9.4g} "
                   f"{r['drift']:8.4f} {100 * r['step_shift']:+7.2f} {r['wall_s']:7.2f}")
    typer.echo(f"  (uniform tokens give r, q ~ 1/sqrt(n) = {n ** -0.5:.4f}, n E r^2 ~ n E q^2 ~ 1; "
               "q ~ 1 for one cluster or two antipodal ones; se is the Monte Carlo error, "
               "step % the step's shift of the threshold)")
    if out is not None:
        typer.echo(f"saved {out}")


def register(app: typer.Typer) -> None:
    """Add the `token-noise` command group to `app`."""
    app.add_typer(_token_noise_app, name="token-noise")
