"""`tokensde token-noise ...`: the threshold of independent token noise and the stationary order
parameter across it (docs/token-noise.md); a thin shell over `tokensde.study.token_noise`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..model.params import ParameterError
from ._common import JSON, SEED, YES, check_run, comma_numbers, emit_json, user_errors

token_noise_app = typer.Typer(no_args_is_help=True, add_completion=False,
                              help="Independent token noise: the theory's threshold and the "
                                   "simulated order parameter (docs/token-noise.md).")

KIND_ORDER = "tokensde.token_noise_order"

BETA = typer.Option(1.0, "--beta", help="Attention strength (> 0).")
DIM = typer.Option(2, "--d", help="Dimension (integer >= 2).")
ATTENTION = typer.Option("usa", "--attention", help="usa | softmax.")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _check_model(beta: float, d: int, attention: str) -> tuple[float, int, str]:
    from ..model.checks import check_choice, check_int, check_real
    from ..model.params import MAX_SIZE
    from ..theory.token_noise import ATTENTIONS

    return (check_real("--beta", beta, 0.0, strict=True), check_int("--d", d, 2, MAX_SIZE),
            check_choice("--attention", attention, ATTENTIONS))


@token_noise_app.command("theory")
def theory_cmd(
    beta: float = BETA, d: int = DIM, attention: str = ATTENTION,
    mean_scale: float = typer.Option(1.0, "--mean-scale", help="a in M = a I (> 0)."),
    branch: bool = typer.Option(True, "--branch/--no-branch", help="Also find where the "
                                "limit's ordered branch ends (about a second)."),
    json_out: bool = JSON,
) -> None:
    """The critical coupling K_c = a / tau_c^2, the critical token noise tau_c, beta_*(d) and
    the end of the many-token limit's ordered branch (tau_s / tau_c)."""
    from ..model.checks import check_real
    from ..study.token_noise import theory_summary

    with user_errors():
        beta, d, attention = _check_model(beta, d, attention)
        a = check_real("--mean-scale", mean_scale, 0.0, strict=True)
        r = theory_summary(beta, d, attention, a, branch=branch)
    if json_out:
        emit_json(r)
        return
    m = "I" if a == 1 else f"{_fmt(a)} I"
    typer.echo(f"{attention} attention, beta = {_fmt(beta)}, d = {d}, M = {m}, sigma = 0")
    typer.echo(f"  K_c    = {r['K_c']:.8g}  (critical coupling a / tau^2)")
    typer.echo(f"  tau_c  = {r['tau_c']:.8g}  (ordered below, uniform state stable above)")
    kind = ("" if r["continuous"] is None else
            " (continuous here)" if r["continuous"] else " (discontinuous here)")
    typer.echo(f"  beta_* = {r['beta_star']:.8g}  (USA: continuous transition for "
               f"beta <= beta_*){kind}")
    if r["branch_end"] is not None:
        end = r["branch_end"]
        what = ("ends at tau_c" if end == 1.0 else
                f"reaches tau = {_fmt(end * r['tau_c'])}: both laws stable in between")
        typer.echo(f"  tau_s / tau_c = {end:.4g}  (the limit's ordered branch {what})")


@token_noise_app.command("order")
def order_cmd(
    beta: float = BETA, d: int = DIM, attention: str = ATTENTION,
    n: int = typer.Option(256, "--n", help="Tokens (integer >= 1)."),
    taus: str | None = typer.Option(None, "--taus", help="Comma-separated token noise values "
                                    "tau (>= 0); or give --ratios."),
    ratios: str | None = typer.Option(None, "--ratios", help="Comma-separated tau / tau_c "
                                      "(> 0; default 0.8,1.25 when --taus is not given)."),
    runs: int = typer.Option(4, "--runs", help="Independent runs per value (>= 2)."),
    time: float = typer.Option(60.0, "--time", help="Horizon in depth time (> --burn)."),
    burn: float = typer.Option(30.0, "--burn", help="Depth time left out of the average "
                               "(>= 0)."),
    dt: float = typer.Option(0.05, "--dt", help="Layer step (> 0, <= --time)."),
    samples: int = typer.Option(61, "--samples", help="Checkpoints over [0, T] (>= 2)."),
    scheme: str = typer.Option("network", "--scheme", help="network | sde."),
    start: str = typer.Option("uniform", "--start", help="uniform | ordered (every token at "
                              "e_1)."),
    seed: int = SEED,
    out: Path | None = typer.Option(None, "--out", help="Also save the rows (JSON)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
    json_out: bool = JSON, yes: bool = YES,
) -> None:
    """The stationary order parameter r = |(1/n) sum_i x_i| (M = I, sigma = 0), time-averaged
    from depth burn to T, mean and standard error over runs, at each token noise, against tau_c."""
    from ..io.store import header, write_json
    from ..model.checks import check_choice, check_int, check_real
    from ..model.params import MAX_SIZE
    from ..study.token_noise import critical_token_noise, order_budget, resolve_taus, stationary_order
    from ._common import depth_grid

    with user_errors():
        beta, d, attention = _check_model(beta, d, attention)
        n = check_int("--n", n, 1, MAX_SIZE)
        if taus is not None and ratios is not None:
            raise ParameterError(f"give one of --taus and --ratios; got --taus {taus!r} and "
                                 f"--ratios {ratios!r}")
        if taus is not None:
            values = [check_real("--taus", t, 0.0) for t in comma_numbers("--taus", taus)]
        else:
            qs = [check_real("--ratios", q, 0.0, strict=True)
                  for q in comma_numbers("--ratios", ratios or "0.8,1.25")]
            values = resolve_taus(None, qs, beta, d, attention)
        runs = check_int("--runs", runs, 2)
        burn = check_real("--burn", burn, 0.0)
        grid = depth_grid(time, dt)
        if not burn < grid.T:
            raise ParameterError(f"--burn must be < --time = {_fmt(grid.T)}; got {_fmt(burn)}")
        samples = check_int("--samples", samples, 2)
        if samples > grid.steps + 1:
            raise ParameterError(f"--samples must be an integer from 2 to {grid.steps + 1} (the "
                                 f"layers --time / --dt, plus 1); got {samples}")
        scheme = check_choice("--scheme", scheme, ("network", "sde"))
        start = check_choice("--start", start, ("uniform", "ordered"))
        seed = check_int("--seed", seed, 0)
        if out is not None:
            from ..io.outputs import guard_output

            guard_output(out, "--out", force=force, suffixes=(".json",))
        check_run(order_budget(max(values), n, d, beta, attention, runs, grid.T, grid.dt,
                               samples, len(values)),
                  flags={"T": "--time", "taus": "--taus or --ratios"}, yes=yes)
        tau_c = critical_token_noise(beta, d, attention)
        rows = [stationary_order(t, n, d, beta, attention, runs=runs, T=grid.T, burn=burn,
                                 dt=grid.dt, scheme=scheme, seed=seed, samples=samples,
                                 start=start).to_dict() for t in values]
        for r in rows:
            r["ratio"] = r["token_noise"] / tau_c
        result: dict[str, Any] = {"beta": beta, "d": d, "attention": attention, "n": n,
                                  "tau_c": tau_c, "seed": seed, "rows": rows}
        if out is not None:
            write_json(out, header(KIND_ORDER, **result), indent=2)
            result["out"] = str(out)
    if json_out:
        emit_json(result)
        return
    typer.echo(f"{attention} attention, beta = {_fmt(beta)}, d = {d}, n = {n}, M = I, sigma = 0: "
               f"tau_c = {tau_c:.6g}; r over depth [{_fmt(burn)}, {_fmt(grid.T)}], {runs} runs, "
               f"{scheme}, {start} start, seed {seed}")
    typer.echo(f"  {'tau':>9} {'tau/tau_c':>9} {'r':>8} {'se':>8} {'n E r^2':>9} "
               f"{'drift':>8} {'wall_s':>7}")
    for r in rows:
        typer.echo(f"  {r['token_noise']:9.5g} {r['ratio']:9.4g} {r['r']:8.4f} {r['se']:8.4f} "
                   f"{n * r['r2']:9.4g} {r['drift']:8.4f} {r['wall_s']:7.2f}")
    typer.echo(f"  (uniform tokens give r ~ 1/sqrt(n) = {n ** -0.5:.4f}, n E r^2 ~ 1)")
    if out is not None:
        typer.echo(f"saved {out}")


def register(app: typer.Typer) -> None:
    """Add the `token-noise` command group to `app`."""
    app.add_typer(token_noise_app, name="token-noise")
