"""`tokensde simulate`: run the batched network or SDE and summarise the final configurations."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from ._common import YES, check_run, emit_json, progress_bar, user_errors
from ._options import time_option, tol_option, until_option

if TYPE_CHECKING:  # numpy, the model and torch load when a run starts (tests/test_cli_startup.py)
    import numpy as np

    from ..model.params import ModelParams, _Attention, _Law, _Noise


def _name_or_npy(param: str, value: str, names: tuple[str, ...]) -> str | np.ndarray:
    """`value` if it is one of `names`, else the real array in the .npy file it names."""
    import numpy as np

    from ..model.params import ParameterError, _real_array

    if value in names:
        return value
    path = Path(value)
    allowed = ", ".join(f"'{n}'" for n in names) + " or a .npy file holding one real array"
    if not path.is_file():
        raise ParameterError(f"{param} must be {allowed}; got {value!r}")
    try:
        a = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ParameterError(f"{param} must be {allowed}; {path} is not a readable .npy file "
                             "(not an array file, or one holding Python objects)") from err
    if not isinstance(a, np.ndarray):
        a.close()
        raise ParameterError(f"{param} must be {allowed}; {path} is an .npz archive (save one "
                             "array with numpy.save)")
    return _real_array(f"{param} (from {path})", a)


_DEFAULT_CHECKPOINTS = 11


def _check_depth(time: float | None, layers: int | None, alpha: float | None,
                 dt: float | None) -> None:
    """ParameterError naming the options: no depth, or both --layers / --alpha and --time."""
    from ..model.params import ParameterError

    t, name = (time, "--time") if time is not None else (dt, "--dt")
    if t is None and layers is None and alpha is None:
        raise ParameterError("give the depth: --layers L (residual scale 1/sqrt(L), depth time "
                             "1), or the horizon --time T (with the step --dt, or without: the "
                             "step is then chosen); e.g. tokensde simulate --n 2 --beta 1 --time "
                             "20 --dt 0.02 --until decided")
    if dt is not None and time is None:
        raise ParameterError(f"--dt {dt} needs the horizon --time T")
    if t is not None and (layers is not None or alpha is not None):
        given = "--layers" if layers is not None else "--alpha"
        raise ParameterError(f"give the depth as --layers (with --alpha) or as --time with "
                             f"--dt, not both; got {given} and {name} {t}")


def _decision_summary(res: Any) -> dict[str, Any]:
    """Fraction of runs decided, and the median and 90 % quantile of the time to decision
    (nan past the horizon), for a result run with until='decided'."""
    if res.decided_at is None:
        return {}
    from ..sweep.kinds import _decision_stats

    st = _decision_stats(res.decided_at, res.grid.steps, res.grid.dt, res.runs)
    return {"until": "decided", **{k: st[k] for k in ("p_decided", "t_decided_median",
                                                      "t_decided_q90", "run_layers")}}


def _model_params(value_init: str | None, law: str | None, sigma: float | None,
                  **kw: Any) -> ModelParams:
    """`ModelParams` from the options; `--value-init` sets law and sigma, so it excludes both."""
    from ..model.params import ModelParams, ParameterError

    if value_init is None:
        return ModelParams(law=cast("_Law", "gaussian" if law is None else law),
                           sigma=1.0 if sigma is None else sigma, **kw)
    given = [f"--{k}" for k, v in (("law", law), ("sigma", sigma)) if v is not None]
    if given:
        raise ParameterError(f"--value-init sets the law and sigma; give it without "
                             f"{' and '.join(given)} (got --value-init {value_init})")
    return ModelParams.from_preset(value_init, **kw)


def _identical_runs(p: ModelParams, init: str) -> bool:
    """Whether every run is the same (no value noise, no random forms or MLP block, a fixed
    start): its fractions are exact, with no interval."""
    return (p.noise_scale == 0 and p.qk == "identity" and not p.mlp_block.active
            and init != "uniform")


def _print_table(summary: dict[str, Any]) -> None:
    width = max(map(len, summary))
    for key, value in summary.items():
        shown = (value["text"] if isinstance(value, dict) and "text" in value else
                 f"{value:.6g}" if isinstance(value, float) else str(value))
        typer.echo(f"{key:<{width}}  {shown}")
        if isinstance(value, dict) and "step_error" in value:
            typer.echo(f"{'':<{width}}  {value['step_error']['text']}")
        if isinstance(value, dict) and "extrapolated" in value:
            typer.echo(f"{'':<{width}}  dt -> 0: {value['extrapolated']['text']}")


def _warn_steps(summary: dict[str, Any]) -> None:
    """A warning on stderr for each probability whose step error is not below its Monte Carlo
    error."""
    for key, value in summary.items():
        step = value.get("step_error") if isinstance(value, dict) else None
        if step is not None and step["verdict"] == "not below":
            typer.echo(f"warning: {key}: {step['text']}", err=True)


def _simulate_cmd(
    n: int = typer.Option(8, "--n", help="Number of tokens (>= 1)."),
    d: int = typer.Option(3, "--d", help="Dimension of each token (>= 2)."),
    beta: float = typer.Option(3.0, "--beta", help="Interaction strength (>= 0)."),
    attention: str = typer.Option("softmax", "--attention", help="softmax | usa."),
    causal: bool = typer.Option(False, "--causal", help="Causal mask (j <= i)."),
    noise: str = typer.Option("matrix", "--noise", help="matrix | scalar | symmetric."),
    law: str | None = typer.Option(None, "--law", show_default="gaussian",
                                   help="gaussian | uniform (matrix) | rademacher (scalar)."),
    sigma: float | None = typer.Option(None, "--sigma", show_default="1",
                                       help="Noise scale of matrix/symmetric noise."),
    value_init: str | None = typer.Option(None, "--value-init", help="Value-init preset pytorch | "
                                          "gpt2 | gaussian: sets --law and --sigma for --d "
                                          "(docs/variants.md)."),
    eps: float | None = typer.Option(None, "--eps", show_default="sigma",
                                     help="Scalar noise scale (--noise scalar only)."),
    heads: int = typer.Option(1, "--heads", help="Attention heads (>= 1), each with its own "
                              "value noise of variance sigma^2/heads (docs/variants.md)."),
    qk: str = typer.Option("identity", "--qk", help="Query/key law: identity | gaussian | wigner "
                           "| goe (A = I + s R per head; docs/variants.md)."),
    qk_scale: float = typer.Option(1.0, "--qk-scale", help="Scale s > 0 of a random --qk law."),
    qk_redraw: str = typer.Option("run", "--qk-redraw", help="run (forms fixed for a run) | "
                                  "layer (drawn afresh every layer)."),
    qk_samples: int = typer.Option(8, "--qk-samples", help="Draws of the --qk law per SDE step "
                                   "(--scheme sde with --qk-redraw layer)."),
    norm: str = typer.Option("post", "--norm", help="Normalisation: post (tokens on the sphere) | "
                             "pre | peri (docs/variants.md)."),
    mlp: str = typer.Option("none", "--mlp", help="Random MLP block after attention: none | relu "
                            "| gelu (docs/variants.md)."),
    mlp_sigma: float = typer.Option(1.0, "--mlp-sigma", help="Output scale of the MLP block "
                                    "(per coordinate, for a unit token; >= 0)."),
    mlp_width: int | None = typer.Option(None, "--mlp-width", show_default="4 d",
                                         help="Hidden units of the MLP block."),
    token_noise: float = typer.Option(0.0, "--token-noise", help="Independent noise tau >= 0 of "
                                      "each token, 0 for none (docs/token-noise.md)."),
    mean: str = typer.Option("none", "--mean", help="Mean value part M: none | identity | FILE.npy"),
    layers: int | None = typer.Option(None, "--layers", show_default="none: give --layers or "
                                      "--time", help="Number of layers L (depth time L alpha^2)."),
    alpha: float | None = typer.Option(None, "--alpha", show_default="1/sqrt(L)",
                                       help="Residual scale (with --layers)."),
    time: float | None = time_option(None, "none: give --layers or --time"),
    dt: float | None = typer.Option(None, "--dt", show_default="chosen from the problem",
                                    help="Layer step dt = alpha^2 with --time (T/dt must be "
                                    "whole); without it the step is chosen so that the step "
                                    "error is below the Monte Carlo error (docs/simulate.md)."),
    init: str = typer.Option("uniform", "--init", help="uniform | pair | FILE.npy"),
    rho0: float | None = typer.Option(None, "--rho0", help="Initial <x1,x2> for --init pair."),
    runs: int = typer.Option(1000, "--runs", help="Independent runs (>= 1)."),
    seed: int = typer.Option(0, "--seed", help="Root seed (>= 0)."),
    sampler: str = typer.Option("auto", "--sampler", help="auto | fast | full | gram."),
    attention_eval: str = typer.Option("auto", "--attention-eval", help="How the attention is "
                                       "evaluated: auto | dense | expansion (O(n) at d = 2, 3; "
                                       "docs/fast-attention.md)."),
    scheme: str = typer.Option("network", "--scheme", help="network (discrete) | sde (limit)."),
    dtype: str = typer.Option("float64", "--dtype", help="float64 | float32."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N."),
    checkpoints: int | None = typer.Option(None, "--checkpoints", show_default="11, or layers "
                                            "+ 1 when fewer", help="Evenly spaced records, ends "
                                            "included, in [2, layers + 1]."),
    tol: float = tol_option(extra=", also at the horizon; in [1e-12, 0.5], float32: >= 1.2e-4"),
    until: str = until_option("horizon"),
    step_error: bool = typer.Option(True, "--step-error/--no-step-error", help="Measure the "
                                    "step error of each probability on min(runs, 200) extra runs "
                                    "coupled at dt, 2 dt and 4 dt (layers a multiple of 4, else "
                                    "dt and 2 dt)."),
    extrapolate: bool = typer.Option(False, "--extrapolate", help="Run every run coupled at dt, "
                                     "2 dt and 4 dt and report the Richardson value P(dt -> 0) "
                                     "with its paired error (about 1.75 times the work more)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
    out: Path | None = typer.Option(None, "--out", help="Save results (.npz) with parameters."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a summary figure (PNG)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out or --plot file."),
    yes: bool = YES,
) -> None:
    """Simulate RUNS independent deep random-attention networks and summarise the final tokens."""
    from ..model.checks import check_tol
    from ..model.params import ParameterError

    with user_errors():
        check_tol(tol, "--tol", dtype)
        _check_depth(time, layers, alpha, dt)  # a bare command says what it needs, torch unloaded
        from ..analysis.step_coupled import _grid_or_chosen, _step_summary, simulate_with_step_error
        from ..io.outputs import _guard_output
        from ..io.store import save_result
        from ..plots.style import _check_figure
        from ..sim.options import (
            _GRAM_RECORD_MAX,
            Execution,
            InitialState,
            Recording,
            StepControl,
            StoppingRule,
        )
        from ..sim.simulate import simulation_budget
        if out is not None:
            _guard_output(out, "--out", force=force, suffixes=(".npz",))
        if plot is not None:
            _check_figure(plot, "--plot")
            _guard_output(plot, "--plot", force=force)
            if n > _GRAM_RECORD_MAX:
                raise ParameterError(f"--plot draws pairwise inner products from Gram matrices, "
                                     f"recorded up to n = {_GRAM_RECORD_MAX}; got n = {n}")
        # the names as typed: ModelParams checks them
        p = _model_params(value_init, law, sigma, n=n, d=d, beta=beta,
                          attention=cast("_Attention", attention), causal=causal,
                          noise=cast("_Noise", noise), eps=eps, heads=heads, qk=qk,
                          qk_scale=qk_scale, qk_redraw=qk_redraw, qk_samples=qk_samples,
                          norm=norm, mlp=mlp, mlp_sigma=mlp_sigma, mlp_width=mlp_width,
                          token_noise=token_noise,
                          mean=_name_or_npy("mean", mean, ("none", "identity")))
        x0 = _name_or_npy("init", init, ("uniform", "pair"))
        InitialState(x0, rho0)  # before a pilot runs
        grid, chosen = _grid_or_chosen(p, layers, alpha, time, dt, runs, seed, scheme, init=x0,
                                      rho0=rho0, tol=tol, until=until, device=device,
                                      dtype=Execution(dtype=dtype).torch_dtype)
        if chosen is not None:
            typer.echo(f"step: {chosen.why}", err=True)
        if checkpoints is None:
            checkpoints = min(_DEFAULT_CHECKPOINTS, grid.steps + 1)
        # the library's option objects, made once: the budget and the run see the same ones
        options: dict[str, Any] = {"initial": InitialState(x0, rho0),
                   "stopping": StoppingRule.decided(tol) if until == "decided" else
                   StoppingRule(until),
                   "recording": Recording(checkpoints=checkpoints),
                   "execution": Execution(sampler, attention_eval, device, dtype)}
        # a chosen step has its error from the pilot: no coupled subsample beside the run
        step = StepControl(estimate=step_error and chosen is None, extrapolate=extrapolate,
                           tol=tol)
        check_run(simulation_budget(p, grid, runs, step=step, scheme=scheme, **options), device,
                  {"layers": "--layers (or --time / --dt)"}, yes=yes)
        with progress_bar(grid.steps * runs, "run-layers", not json_out) as bar:
            res = simulate_with_step_error(p, grid, runs=runs, seed=seed, scheme=scheme,
                                           progress=bar, step=step, **options)
        # the default record: Gram matrices up to GRAM_RECORD_MAX tokens, the tokens above
        exact = _identical_runs(p, init)
        from ..analysis.clusters import _pair_summary
        from ..analysis.token_clusters import _token_summary

        pairs = (_pair_summary(res.gram[:, -1], tol, exact) if res.gram is not None
                 else _token_summary(res.state, tol, exact))
        steps = _step_summary(pairs, res, chosen, extrapolate)
        summary = {"runs": runs, "n": n, "d": d, "beta": beta, "layers": grid.steps,
                   "dt": grid.dt, "T": grid.T, "sampler": res.sampler,
                   "attention_eval": res.extra["attention_eval"], "scheme": scheme,
                   "seed": seed, **pairs,
                   **_decision_summary(res),
                   **({"step_choice": chosen.why} if chosen is not None else {}),
                   **({"step_coupled_runs": steps["coupled_runs"]} if steps["coupled_runs"]
                      else {}),
                   "wall_s": res.wall_s}
        if out is not None:
            summary["out"] = str(save_result(res, out))
        if plot is not None:
            from ..plots.simulation import _plot_simulation

            summary["plot"] = str(_plot_simulation(res, plot, tol))
    _warn_steps(summary)
    if json_out:
        emit_json(summary)
    else:
        _print_table(summary)


def register(app: typer.Typer) -> None:
    """Add `simulate` to `app`."""
    app.command("simulate")(_simulate_cmd)
