"""`tokensde simulate`: run the batched network or SDE and summarise the final configurations."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import typer

from ..analysis.clusters import Outcome, classify_clusters, pair_fractions, upper_pairs
from ..io.progress import progress_bar
from ..model.checks import check_tol
from ..model.params import Attention, Law, ModelParams, Noise, ParameterError, TimeGrid, real_array
from ._common import YES, check_run, emit_json, user_errors


def _name_or_npy(param: str, value: str, names: tuple[str, ...]) -> str | np.ndarray:
    """`value` if it is one of `names`, else the real array in the .npy file it names."""
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
    return real_array(f"{param} (from {path})", a)


def pair_summary(gram: np.ndarray, tol: float, exact: bool = False) -> dict[str, Any]:
    """Fractions of token pairs merged and antipodal, and the probabilities that a run ends in
    one cluster or bipolar by the rule for undecided runs (`stats.estimate_with_undecided`:
    over the runs whose every pair is within tol of +-1, with the bounds the others allow;
    `exact`: every run the same, no interval), of Gram matrices `(runs, n, n)`."""
    rho = upper_pairs(gram)
    if rho.size == 0:
        return {"pairs": 0}
    merged, antipodal = pair_fractions(rho, tol)
    return _outcome_summary(int(rho.shape[1]), float(rho.mean()), merged, antipodal,
                            classify_clusters(gram, tol), exact)


def token_summary(x: np.ndarray, tol: float, exact: bool = False) -> dict[str, Any]:
    """`pair_summary` from the final tokens `(runs, n, d)` instead of Gram matrices, in
    O(n log n) per run on the circle (`analysis.token_clusters`).

    Args:
        x: tokens `(runs, n, d)`.
        tol: the merged / antipodal tolerance.
        exact: every run the same (no interval).

    Returns:
        The summary of `pair_summary`.
    """
    from ..analysis.token_clusters import tokens_outcome, tokens_pair_fractions

    n = x.shape[-2]
    if n < 2:
        return {"pairs": 0}
    merged, antipodal, mean = tokens_pair_fractions(x, tol)
    return _outcome_summary(n * (n - 1) // 2, float(mean.mean()), float(merged.mean()),
                            float(antipodal.mean()), tokens_outcome(x, tol)[0], exact)


def _outcome_summary(pairs: int, mean: float, merged: float, antipodal: float,
                     outcome: np.ndarray, exact: bool) -> dict[str, Any]:
    from ..analysis.stats import estimate_with_undecided

    runs = len(outcome)
    decided = int((outcome != Outcome.UNDECIDED).sum())
    counts = {o: int((outcome == o).sum()) for o in (Outcome.SINGLE, Outcome.BIPOLAR)}
    return {
        "pairs": pairs,
        "mean_inner_product": mean,
        "frac_pairs_merged": merged,
        "frac_pairs_antipodal": antipodal,
        "frac_runs_one_cluster": counts[Outcome.SINGLE] / runs,
        "frac_runs_bipolar": counts[Outcome.BIPOLAR] / runs,
        "frac_runs_undecided": 1.0 - decided / runs,
        **{f"p_{name}": estimate_with_undecided(k, decided - k, runs, exact=exact).to_dict()
           for name, k in (("one_cluster", counts[Outcome.SINGLE]),
                           ("bipolar", counts[Outcome.BIPOLAR]))},
    }


DEFAULT_CHECKPOINTS = 11


def _max_time(time: float | None, max_time: float | None, layers: int | None,
              alpha: float | None, dt: float | None) -> float | None:
    """The depth time given by --time or --max-time; ParameterError naming the options when
    both are given, or either with --layers / --alpha."""
    if max_time is not None and time is not None:
        raise ParameterError(f"give --time or --max-time, not both; got {time} and {max_time}")
    t, name = (time, "--time") if max_time is None else (max_time, "--max-time")
    if dt is not None:
        t, name = (t, name) if t is not None else (dt, "--dt")
    if t is not None and (layers is not None or alpha is not None):
        given = "--layers" if layers is not None else "--alpha"
        raise ParameterError(f"give the depth as --layers (with --alpha) or as --time (or "
                             f"--max-time) with --dt, not both; got {given} and {name} {t}")
    return time if max_time is None else max_time


def decision_summary(res: Any) -> dict[str, Any]:
    """Fraction of runs decided, and the median and 90 % quantile of the time to decision
    (nan past the horizon), for a result run with until='decided'."""
    if res.decided_at is None:
        return {}
    from ..sweep.kinds import decision_stats

    st = decision_stats(res.decided_at, res.grid.steps, res.grid.dt, res.runs)
    return {"until": "decided", **{k: st[k] for k in ("p_decided", "t_decided_median",
                                                      "t_decided_q90", "run_layers")}}


def _model_params(value_init: str | None, law: str | None, sigma: float | None,
                  **kw: Any) -> ModelParams:
    """`ModelParams` from the options; `--value-init` sets law and sigma, so it excludes both."""
    if value_init is None:
        return ModelParams(law=cast(Law, "gaussian" if law is None else law),
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


def simulate_cmd(
    n: int = typer.Option(8, "--n", help="Number of tokens (>= 1)."),
    d: int = typer.Option(3, "--d", help="Dimension of each token (>= 2)."),
    beta: float = typer.Option(3.0, "--beta", help="Interaction strength (>= 0)."),
    attention: str = typer.Option("softmax", "--attention", help="softmax | usa."),
    causal: bool = typer.Option(False, "--causal", help="Causal mask (j <= i)."),
    noise: str = typer.Option("matrix", "--noise", help="matrix | scalar | symmetric."),
    law: str | None = typer.Option(None, "--law", help="gaussian (default) | uniform (matrix) | "
                                   "rademacher (scalar)."),
    sigma: float | None = typer.Option(None, "--sigma", help="Noise scale of matrix/symmetric "
                                       "noise (default 1)."),
    value_init: str | None = typer.Option(None, "--value-init", help="Value-init preset pytorch | "
                                          "gpt2 | gaussian: sets --law and --sigma for --d "
                                          "(docs/variants.md)."),
    eps: float | None = typer.Option(None, "--eps", help="Scalar noise scale (--noise scalar only; "
                                     "default sigma)."),
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
    mlp_width: int | None = typer.Option(None, "--mlp-width", help="Hidden units of the MLP "
                                         "block (default 4 d)."),
    token_noise: float = typer.Option(0.0, "--token-noise", help="Independent noise tau >= 0 of "
                                      "each token (docs/token-noise.md; default 0: none)."),
    mean: str = typer.Option("none", "--mean", help="Mean value part M: none | identity | FILE.npy"),
    layers: int | None = typer.Option(None, "--layers", help="Number of layers L."),
    alpha: float | None = typer.Option(None, "--alpha", help="Residual scale (with --layers; "
                                        "default 1/sqrt(L))."),
    time: float | None = typer.Option(None, "--time", help="Depth time T (with --dt; T/dt must be whole)."),
    dt: float | None = typer.Option(None, "--dt", help="Layer step dt = alpha^2 (with --time)."),
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
    checkpoints: int | None = typer.Option(None, "--checkpoints", help="Evenly spaced records, "
                                            "ends included, in [2, layers + 1] (default: 11, "
                                            "or layers + 1 when fewer)."),
    tol: float = typer.Option(1e-3, "--tol", help="Merged/antipodal tolerance on inner "
                              "products, in [1e-12, 0.5] (float32: >= 1.2e-4)."),
    until: str = typer.Option("horizon", "--until", help="horizon (every run to the end) | "
                              "decided (each run stops once every pair is within --tol of +-1)."),
    max_time: float | None = typer.Option(None, "--max-time", help="Maximum depth time for "
                                          "--until decided (with --dt; same as --time)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
    out: Path | None = typer.Option(None, "--out", help="Save results (.npz) with parameters."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a summary figure (PNG)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out or --plot file."),
    yes: bool = YES,
) -> None:
    """Simulate RUNS independent deep random-attention networks and summarise the final tokens."""
    from ..io.outputs import guard_output
    from ..io.store import save_result
    from ..plots.style import check_figure
    from ..sim.options import GRAM_RECORD_MAX, Execution, InitialState, Recording, StoppingRule
    from ..sim.simulate import simulate, simulation_budget

    with user_errors():
        time = _max_time(time, max_time, layers, alpha, dt)
        if layers is None and alpha is None and time is None and dt is None:
            layers = 1000
        check_tol(tol, "tol", dtype)
        if out is not None:
            guard_output(out, "--out", force=force, suffixes=(".npz",))
        if plot is not None:
            check_figure(plot, "--plot")
            guard_output(plot, "--plot", force=force)
            if n > GRAM_RECORD_MAX:
                raise ParameterError(f"--plot draws pairwise inner products from Gram matrices, "
                                     f"recorded up to n = {GRAM_RECORD_MAX}; got n = {n}")
        # the names as typed: ModelParams checks them
        p = _model_params(value_init, law, sigma, n=n, d=d, beta=beta,
                          attention=cast(Attention, attention), causal=causal,
                          noise=cast(Noise, noise), eps=eps, heads=heads, qk=qk,
                          qk_scale=qk_scale, qk_redraw=qk_redraw, qk_samples=qk_samples,
                          norm=norm, mlp=mlp, mlp_sigma=mlp_sigma, mlp_width=mlp_width,
                          token_noise=token_noise,
                          mean=_name_or_npy("mean", mean, ("none", "identity")))
        grid = TimeGrid.make(layers, alpha, time, dt, exact=True)
        if checkpoints is None:
            checkpoints = min(DEFAULT_CHECKPOINTS, grid.steps + 1)
        x0 = _name_or_npy("init", init, ("uniform", "pair"))
        # the library's option objects, made once: the budget and the run see the same ones
        options: dict[str, Any] = {"initial": InitialState(x0, rho0),
                   "stopping": StoppingRule.decided(tol) if until == "decided" else
                   StoppingRule(until),
                   "recording": Recording(checkpoints=checkpoints),
                   "execution": Execution(sampler, attention_eval, device, dtype)}
        check_run(simulation_budget(p, grid, runs, **options), device,
                  {"layers": "--layers (or --time / --dt)"}, yes=yes)
        with progress_bar(grid.steps * runs, "run-layers", not json_out) as bar:
            res = simulate(p, grid, runs=runs, seed=seed, scheme=scheme, progress=bar, **options)
        # the default record: Gram matrices up to GRAM_RECORD_MAX tokens, the tokens above
        exact = _identical_runs(p, init)
        pairs = (pair_summary(res.gram[:, -1], tol, exact) if res.gram is not None
                 else token_summary(res.x, tol, exact))
        summary = {"runs": runs, "n": n, "d": d, "beta": beta, "layers": grid.steps,
                   "dt": grid.dt, "T": grid.T, "sampler": res.sampler,
                   "attention_eval": res.extra["attention_eval"], "scheme": scheme,
                   "seed": seed, **pairs,
                   **decision_summary(res),
                   "wall_s": res.wall_s}
        if out is not None:
            summary["out"] = str(save_result(res, out))
        if plot is not None:
            from ..plots.simulation import plot_simulation

            summary["plot"] = str(plot_simulation(res, plot, tol))
    if json_out:
        emit_json(summary)
    else:
        _print_table(summary)


def register(app: typer.Typer) -> None:
    """Add `simulate` to `app`."""
    app.command("simulate")(simulate_cmd)
