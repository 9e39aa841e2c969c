"""`tokensde real ARCH`: a real Transformer at init, measured at every layer over independent
inits, against tokensde's discrete network at the same depth and its depth limit (docs/real.md).
It prints each layer's z and exits 1 when the largest |z| passes the Sidak threshold for the
number of layers (family-wise false-alarm rate 5 % when the model is exact). `tokensde real module
FILE.py:FUNC` does the same for a torch network of the user's (tokensde.real.introspect)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ._applies import ARCHS as ARCH_COMMANDS  # the options each reads: _applies.COMMANDS
from ._common import JSON, SEED, YES, check_run, emit_json, fail, progress_bar, user_errors

_MAX_THREADS = 1024

# options shared by the family runs and `real module`
_SDE_STEPS_OPT = typer.Option(64, "--sde-steps", help="Euler steps of the limit.")
_SDE_RUNS_OPT = typer.Option(32, "--sde-runs", help="Runs of the limit.")
_THREADS = typer.Option(1, "--threads", help="torch threads (1: fastest on a shared machine; "
                       "docs/benchmarks.md).")
_FORCE = typer.Option(False, "--force", help="Replace the results in an existing --out folder.")


def _run(arch: str, layers: int, width: int, heads: int, ctx: int, inits: int, inputs: int,
         out: Path, seed: int, vocab: int | None, norm_first: bool, residual_scaling: bool,
         centring: bool, qk: bool, mlp: bool, bias: bool, value_scale: float, sde_steps: int,
         as_json: bool, value_law: str = "product", sde_runs: int = 32, threads: int = 1,
         force: bool = False, yes: bool = False) -> None:
    from ..io.outputs import _guard_output
    from ..real.models import INSTALL_HINT, MissingExtraError, RealSpec, has_transformers

    if arch != "torch-encoder" and not has_transformers():
        fail(INSTALL_HINT)
    with user_errors():
        spec = RealSpec(arch=arch, layers=layers, width=width, heads=heads, ctx=ctx, vocab=vocab,
                        norm_first=norm_first, residual_scaling=residual_scaling,
                        centring=centring, qk=qk, mlp=mlp, bias=bias, value_scale=value_scale,
                        value_law=value_law)
        _guard_output(out, "--out", directory=True, force=force)
        import torch

        from ..model.checks import _check_int

        torch.set_num_threads(_check_int("--threads", threads, 1, _MAX_THREADS))
        from ..real.experiment import real_budget, run_real

        check_run(real_budget(spec, inits, inputs, sde_steps, sde_runs), yes=yes)

        images = None
        if arch == "vit":
            from ..vit.data import load_dataset

            images = load_dataset("fashion-mnist").x_test
        try:
            with progress_bar(inits, f"real {arch}: inits") as bar:
                run = run_real(spec, inits, inputs, seed, sde_steps=sde_steps, sde_runs=sde_runs,
                               progress=bar, images=images)
        except MissingExtraError:
            fail(INSTALL_HINT)
        head = (f"{arch}, L={layers}, d={width}, {heads} heads, n={spec.tokens}, {inits} inits x "
                f"{inputs} inputs ({run.meta['init_note']})")
        limit = ("yes (branches scaled by 1/sqrt(L)): SDE drawn" if run.mapping.has_limit else
                 "none (no residual scaling: collapse by layer count)")
        _report(run, out, head, limit, as_json)


def _report(run: Any, out: Path, head: str, limit: str, as_json: bool) -> None:
    """Write the run's table (real.parquet), figure (real.png) and mapping (mapping.json) into
    `out`, print the summary (or JSON) and the verdict, and exit 1 when it disagrees."""
    from ..io.store import atomic_write
    from ..plots.real import _plot_real
    from ..real.experiment import save_run

    with user_errors():
        out.mkdir(parents=True, exist_ok=True)
        table = save_run(run, out / "real.parquet")
        a = run.agreement
        title = (f"{head}: max |z| {a['max_abs_z']:.2f} {'<=' if a['agrees'] else '>'} "
                 f"{a['threshold']:.2f}{'' if a['agrees'] else ' DISAGREES'}")
        fig = _plot_real(run.table, out / "real.png", title)
        mapping = json.dumps({"rows": [list(map(str, r)) for r in run.mapping.rows],
                              **run.meta}, indent=1, default=str)
        atomic_write(out / "mapping.json", lambda tmp: tmp.write_text(mapping))
    summary = {"table": str(table), "figure": str(fig), "agreement": a,
               "has_limit": run.mapping.has_limit, "wall_s": run.meta["wall_s"]}
    if as_json:
        emit_json(summary)
        _verdict_exit(a)
        return
    c = run.table[run.table.stat == "cos_mean"]
    final = {s: float(c[c.side == s]["mean"].iloc[-1]) for s in c.side.unique()}
    typer.echo(f"mean token cosine at layer {run.mapping.law.layers}: " + ", ".join(
        f"{s} {v:.4f}" for s, v in final.items()))
    typer.echo(f"agreement: {a['within']}/{a['layers']} layers within 3 combined SE "
               f"({a['fraction_within']:.0%}); largest |real - tokensde| = "
               f"{a['max_abs_diff']:.4f} at layer {a['at_layer']}")
    for line in _verdict_lines(a):
        typer.echo(line)
    typer.echo(f"depth limit: {limit}")
    typer.echo(f"wrote {table}, {fig}, {out / 'mapping.json'}")
    _verdict_exit(a)


def _verdict_lines(a: dict) -> list[str]:
    """The per-layer z, the verdict against the Sidak threshold and the inits that would
    resolve the largest unresolved gap, as printed lines.

    Args:
        a: `tokensde.real.experiment.agreement`'s dictionary.

    Returns:
        The lines.
    """
    zs = ", ".join(f"{i + 1}: {z:+.2f}" for i, z in enumerate(a["z"]))
    rule = (f"Sidak threshold {a['threshold']:.2f} for {a['layers']} layers: "
            f"|z| > Phi^-1(1 - a/2), a = 1 - (1 - {a['fwer']:g})^(1/{a['layers']}); "
            f"false alarm at most {a['fwer']:.0%} when the model is exact")
    head = (f"agrees: largest |z| = {a['max_abs_z']:.2f} at layer {a['at_layer_z']}" if a["agrees"]
            else f"DISAGREES at layers {', '.join(map(str, a['disagree_at']))}: largest |z| = "
                 f"{a['max_abs_z']:.2f} at layer {a['at_layer_z']}")
    lines = [f"z = (real - tokensde) / combined SE, by layer: {zs}", f"{head} ({rule})"]
    if a["unresolved_layer"] is not None:
        need = a["inits_to_resolve"]
        lines.append(f"largest gap not yet resolved: layer {a['unresolved_layer']}, z = "
                     f"{a['unresolved_z']:+.2f}: a gap of this size reaches the threshold at "
                     + ("no finite number of inits (z = 0)" if need == float("inf") else
                        f"about {need:.0f} inits ({a['units']} now)"))
    return lines


def _verdict_exit(a: dict) -> None:
    if not a.get("agrees", True):
        raise typer.Exit(1)


def _make_command(arch: str) -> Callable[..., None]:
    """The command `tokensde real <arch>`."""
    def command(
        layers: int = typer.Option(12, "--layers", help="Number of blocks L."),
        width: int = typer.Option(256, "--width", help="d_model."),
        heads: int = typer.Option(4, "--heads", help="Attention heads (divides width)."),
        ctx: int = typer.Option(64, "--ctx", help="Tokens per input (ViT: from the patches)."),
        inits: int = typer.Option(32, "--inits", help="Independent inits S (the unit)."),
        inputs: int = typer.Option(2, "--inputs", help="Inputs per init B."),
        out: Path = typer.Option(..., "--out", help="Output directory."),
        seed: int = SEED,
        vocab: int = typer.Option(None, "--vocab", show_default="the model's", help="Vocabulary."),
        norm_first: bool = typer.Option(True, "--norm-first/--norm-last",
                                        help="torch-encoder: pre-LN or post-LN."),
        residual_scaling: bool = typer.Option(
            True, "--residual-scaling/--no-residual-scaling",
            help="gpt2: the 1/sqrt(2L) init of the residual projections."),
        centring: bool = typer.Option(True, "--centring/--no-centring",
                                      help="LayerNorm's mean subtraction (off: RMS)."),
        qk: bool = typer.Option(True, "--qk/--no-qk", help="Query/key weights (off: zero)."),
        mlp: bool = typer.Option(True, "--mlp/--no-mlp", help="MLP block (off: output zero)."),
        bias: bool = typer.Option(True, "--bias/--no-bias", help="torch-encoder: Linear biases."),
        value_scale: float = typer.Option(1.0, "--value-scale", help="Multiply W_V's init."),
        value_law: str = typer.Option(
            "product", "--value-law",
            help="gpt2: each head's value path W_O W_V as built (product) or a Gaussian matrix "
                 "of the same entry variance (gaussian, the mapping's law)."),
        sde_steps: int = _SDE_STEPS_OPT, sde_runs: int = _SDE_RUNS_OPT,
        threads: int = _THREADS, force: bool = _FORCE,
        as_json: bool = JSON,
        yes: bool = YES,
    ) -> None:
        _run(arch, layers, width, heads, ctx, inits, inputs, out, seed, vocab, norm_first,
             residual_scaling, centring, qk, mlp, bias, value_scale, sde_steps, as_json,
             value_law, sde_runs, threads, force, yes)

    command.__doc__ = (f"{arch} at init: token cosines at every layer over independent inits, "
                       "against tokensde's network and depth limit.")
    return command


def _run_module(factory: str, ctx: int | None, inits: int, inputs: int, out: Path, seed: int,
                blocks: str | None, depth_scaled: bool, read_seeds: int, sde_steps: int,
                sde_runs: int, threads: int, force: bool, as_json: bool, yes: bool) -> None:
    """`tokensde real module FILE:FUNC`: `introspect.run_own` on the user's factory, checked
    (file, function, network, inputs) and estimated before the run, written and judged as the
    family runs are."""
    from ..io.outputs import _guard_output

    with user_errors():
        _guard_output(out, "--out", directory=True, force=force)
        import torch

        from ..model.checks import _check_int

        torch.set_num_threads(_check_int("--threads", threads, 1, _MAX_THREADS))
        from ..real.introspect import IntrospectionError, own_budget, prepare_own, run_own

        where = f"FACTORY {factory}"
        try:
            make, feed, read, size = prepare_own(factory, ctx, inputs, seed, blocks,
                                                 ("FACTORY", "--ctx"))
            check_run(own_budget(read, size, inits, inputs, sde_steps, sde_runs, depth_scaled),
                      yes=yes)
            with progress_bar(inits, f"real module {read.cls}: inits") as bar:
                run = run_own(make, feed, inits, inputs, seed, blocks, depth_scaled, read_seeds,
                              sde_steps=sde_steps, sde_runs=sde_runs, progress=bar)
        except IntrospectionError as err:
            msg = str(err)
            fail(msg if msg.startswith(("FACTORY", "--")) else f"{where}: {msg}")
        run.meta["factory"] = factory
        b = read.blocks[0]
        head = (f"{read.cls} ({Path(factory).name}), L={read.layers}, d={b.d}, {b.heads} heads, "
                f"n={read.tokens}, {inits} inits x {inputs} inputs")
        limit = ("stated (--depth-scaled): SDE drawn" if run.meta["sde"] else
                 "stated (--depth-scaled), not drawn: the MLP's hidden bias has no limit"
                 if depth_scaled else "not stated (--depth-scaled when the branches' variances "
                 "scale as 1/L)")
        _report(run, out, head, limit, as_json)


def _module_command(
    factory: str = typer.Argument(
        ..., metavar="FACTORY",
        help="FILE.py:FUNC, a function FUNC(seed) -> torch.nn.Module in FILE (FILE alone: make). "
             "The file is imported from its path: its code runs, as any import's does (give "
             "only files you trust). "
             "It may define inputs(batch, seed) -> the network's input; else give --ctx."),
    ctx: int = typer.Option(None, "--ctx", show_default="the file's inputs()",
                            help="Tokens of Gaussian inputs (batch, ctx, d), entries N(0, 1), for a "
                                 "network whose forward takes embeddings and a file without "
                                 "inputs()."),
    inits: int = typer.Option(32, "--inits", help="Independent inits S (the unit)."),
    inputs: int = typer.Option(2, "--inputs", help="Inputs per init B."),
    out: Path = typer.Option(..., "--out", help="Output directory."),
    seed: int = SEED,
    blocks: str = typer.Option(None, "--blocks", show_default="the one list found",
                               help="Attribute path of the list of residual blocks (e.g. "
                                    "encoder.layer)."),
    depth_scaled: bool = typer.Option(
        False, "--depth-scaled",
        help="The branches' variances scale as 1/L (as GPT-2's init): the curve has a depth "
             "limit, drawn too. One network at one depth cannot show it: you state it."),
    read_seeds: int = typer.Option(3, "--read-seeds", help="Inits the weights' variances are "
                                   "read from."),
    sde_steps: int = _SDE_STEPS_OPT, sde_runs: int = _SDE_RUNS_OPT,
    threads: int = _THREADS, force: bool = _FORCE,
    as_json: bool = JSON,
    yes: bool = YES,
) -> None:
    """Your own torch Transformer at init (docs/own-transformer.md): its blocks read, mapped and
    predicted, token cosines at every layer over independent inits against tokensde's network."""
    _run_module(factory, ctx, inits, inputs, out, seed, blocks, depth_scaled, read_seeds,
                sde_steps, sde_runs, threads, force, as_json, yes)


def register(app: typer.Typer) -> None:
    """Add the `real` sub-app (one command per architecture of `_applies.ARCHS`, and `module`)
    to `app`."""
    sub = typer.Typer(no_args_is_help=True,
                      # the backslash keeps Rich from reading `[real]` as a markup tag (it printed "(extra )")
                      help="Real Transformers at init against tokensde (needs the extra: "
                           "pip install 'tokensde\\[real]').")
    for arch in ARCH_COMMANDS:
        sub.command(arch)(_make_command(arch))
    sub.command("module")(_module_command)
    app.add_typer(sub, name="real")
