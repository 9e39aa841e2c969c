"""`tokensde vit ...`: the value-noise experiment on a small Vision Transformer.

    tokensde vit compare --out DIR        # arms x seeds, accuracy table and figure
    tokensde vit geometry --out DIR       # token cosine similarity across depth at initialisation
    tokensde vit plot --out DIR           # redraw the figures from the saved files
    tokensde vit depth --size quick --out DIR   # the depth sweep (sweep kind vit_depth), report
    tokensde vit depth-report DIR         # redraw the depth sweep's tables and figures
    tokensde vit fair --out DIR           # each arm at its own validated rate, 1-30 epochs
    tokensde vit fair-report DIR [MORE]   # the fair protocol's tables and figures
    tokensde vit export-data --out F.npz  # a data subset in one file (for another machine)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ._common import YES, check_estimate, check_output, emit_json, progress_bar, user_errors
from .sweep import _run_with_bar

_DEFAULT_ARMS = "default,noise:0,noise:0.1,identity,shared"

_Arms = Annotated[str, typer.Option(help="Comma-separated arms: default, noise:LAM, hybrid:LAM, "
                                        "gaussian:VAR, identity, shared.")]
_Dataset = Annotated[str, typer.Option(help="fashion-mnist, cifar10 or digits.")]
_DataDir = Annotated[Path | None, typer.Option(help="Directory of the data set files.",
                                              show_default="Debian's, for fashion-mnist")]
_Out = Annotated[Path, typer.Option(help="Output directory (runs, tables, figures).")]
_Dim = Annotated[int, typer.Option(help="Token width D.")]
_Depth = Annotated[int, typer.Option(help="Number of blocks L.")]
_Heads = Annotated[int, typer.Option(help="Attention heads.")]
_Patch = Annotated[int | None, typer.Option(help="Patch side.", show_default="7, 4, 4 by data set")]
_MlpRatio = Annotated[int, typer.Option(help="MLP hidden width / D.")]
_Norm = Annotated[str, typer.Option(help="layer or rms.")]
Block = Annotated[str, typer.Option(help="standard (pre-norm, MLP) or attention-only (spec).")]
_ResScale = Annotated[bool, typer.Option(help="Scale residual branches by 1/sqrt(depth).")]
_Json = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def _compare_cmd(
    arms: _Arms = _DEFAULT_ARMS,
    seeds: Annotated[int, typer.Option(help="Number of seeds (seed0, seed0+1, ...).")] = 4,
    seed0: Annotated[int, typer.Option(help="First seed.")] = 0,
    epochs: Annotated[int, typer.Option(help="Training epochs per run.")] = 10,
    dataset: _Dataset = "fashion-mnist",
    data_dir: _DataDir = None,
    train_subset: Annotated[int | None, typer.Option(
        help="Train on the first N training images (0 = all).",
        show_default="10000; digits: all")] = None,
    test_subset: Annotated[int, typer.Option(help="Test on the first N (0 = all).")] = 0,
    dim: _Dim = 64, depth: _Depth = 6, heads: _Heads = 4, patch: _Patch = None,
    mlp_ratio: _MlpRatio = 2, norm: _Norm = "layer", block: Block = "standard",
    residual_scale: _ResScale = False,
    batch_size: Annotated[int | None, typer.Option(help="Batch size.",
                                                   show_default="128; digits: 32")] = None,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate.")] = 2e-3,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay (matrices).")] = 0.05,
    warmup: Annotated[float, typer.Option(help="Fraction of steps with linear warm-up.")] = 0.1,
    label_smoothing: Annotated[float, typer.Option(help="Label smoothing.")] = 0.1,
    augment: Annotated[bool, typer.Option(help="Random shifts (and flips for cifar10).")] = True,
    threads: Annotated[int, typer.Option(help="torch threads per run.")] = 1,
    jobs: Annotated[int, typer.Option(help="Runs trained in parallel processes.")] = 2,
    out: _Out = Path("vit-compare"),
    json_out: _Json = False,
    progress: Annotated[bool, typer.Option(help="Progress bar on stderr.")] = True,
    yes: bool = YES,
) -> None:
    """Train every arm on every seed; write the accuracy table (paired gap to default, 95 % t-CI).
    The estimate (a few timed steps) is printed first; above TOKENSDE_MAX_HOURS, refused."""
    from ..plots.vit import _plot_accuracy
    from ..vit import compact, format_table
    from ..vit.compare import compare_plan
    from ..vit.estimate import vit_budget

    with user_errors():
        check_output(out, "--out", directory=True)
        plan = compare_plan(
            arms, seeds, dataset, data_dir, seed0=seed0, train_subset=train_subset,
            test_subset=test_subset, batch_size=batch_size, patch=patch,
            model={"dim": dim, "depth": depth, "heads": heads, "mlp_ratio": mlp_ratio,
                   "norm": norm, "residual_scale": residual_scale, "block": block},
            train={"epochs": epochs, "lr": lr, "weight_decay": weight_decay, "warmup": warmup,
                   "label_smoothing": label_smoothing, "augment": augment})
        check_estimate(vit_budget(plan, out, threads, jobs), yes)
        with progress_bar(plan.total_steps, f"vit compare ({len(plan.arms)} arms x {seeds} "
                          "seeds)", progress) as update:
            summary = plan.run(out, threads, jobs, update)
        figure = _plot_accuracy(out / "summary.json", out / "accuracy.png")
    if json_out:
        emit_json(compact(summary))
    else:
        typer.echo(f"{dataset}: train {plan.data.info['train']}, test {plan.data.info['test']}; "
                   f"{epochs} epochs\n")
        typer.echo(format_table(summary))
        typer.echo(f"wrote {out / 'summary.json'}, {out / 'table.md'}, {figure}")


def _geometry_cmd(
    arms: _Arms = _DEFAULT_ARMS,
    dataset: _Dataset = "fashion-mnist",
    data_dir: _DataDir = None,
    images: Annotated[int, typer.Option(help="Test images fed to each model.")] = 64,
    seeds: Annotated[int, typer.Option(help="Models per arm (seeds 0..S-1).")] = 3,
    dim: _Dim = 64, depth: _Depth = 6, heads: _Heads = 4, patch: _Patch = None,
    mlp_ratio: _MlpRatio = 2, norm: _Norm = "layer", block: Block = "standard",
    residual_scale: _ResScale = False,
    bins: Annotated[int, typer.Option(help="Histogram bins on [-1, 1].")] = 40,
    tol: Annotated[float, typer.Option(help="'Near +-1' means within tol.")] = 0.05,
    out: _Out = Path("vit-geometry"),
    json_out: _Json = False,
    force: Annotated[bool, typer.Option(help="Replace the results in an existing --out.")] = False,
) -> None:
    """Token cosine similarity across depth at initialisation, per arm, on real test images."""
    from ..io.outputs import _guard_output
    from ..plots.vit import _plot_geometry
    from ..vit import parse_arms
    from ..vit.geometry import _geometry_study

    with user_errors():
        _guard_output(out, "--out", directory=True, force=force)
        result = _geometry_study(parse_arms(arms), dataset, data_dir, images, seeds, patch,
                                {"dim": dim, "depth": depth, "heads": heads,
                                 "mlp_ratio": mlp_ratio, "norm": norm,
                                 "residual_scale": residual_scale, "block": block}, bins, tol,
                                out)
        figure = _plot_geometry(out / "geometry.json", out / "geometry.png")
    if json_out:
        emit_json({"arms": {a: {k: v[k] for k in ("near_pos", "near_neg", "mean")}
                            for a, v in result["arms"].items()},
                   "dataset": dataset, "depths": result["depths"], "tol": tol})
        return
    typer.echo(f"fraction of token pairs with cosine > {1 - tol:g} (near +1) by depth "
               f"0..{depth}:")
    for a, v in result["arms"].items():
        typer.echo(f"  {a:>16}: " + " ".join(f"{q:.2f}" for q in v["near_pos"]))
    typer.echo(f"wrote {out / 'geometry.json'}, {figure}")


def _plot_cmd(out: _Out = Path("vit-compare")) -> None:
    """Redraw accuracy.png / geometry.png from summary.json / geometry.json in DIR."""
    from ..plots.vit import _redraw

    with user_errors():
        done = _redraw(out)
    typer.echo("wrote " + ", ".join(map(str, done)))


def _depth_cmd(
    size: Annotated[str, typer.Option(help="quick, full, or a TOML sweep file of kind "
                                           "vit_depth.")] = "quick",
    out: _Out = Path("vit-depth"),
    workers: Annotated[int, typer.Option(help="Cells (training runs) in parallel.")] = 2,
    backend: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (backend ray).")]
    = None,
    dataset: Annotated[str | None, typer.Option(help="Replace the sweep's data set: "
                                                     "fashion-mnist, cifar10 or digits.")] = None,
    data_dir: _DataDir = None,
    epochs: Annotated[int | None, typer.Option(help="Replace the epochs per run.")] = None,
    train_subset: Annotated[int | None, typer.Option(
        help="Replace the training subset (0 = all).")] = None,
    test_subset: Annotated[int | None, typer.Option(help="Replace the test subset (0 = all).")]
    = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    yes: bool = YES,
) -> None:
    """Run (or resume) the ViT depth sweep: arms x depths x seeds x blocks, one training run a
    cell; then write gaps.json, gaps.md and the figures into --out (estimate printed first)."""
    from ..vit.depth import _depth_config, _run_depth
    from ..vit.estimate import depth_budget

    def start(bar: Any) -> dict[str, Any]:
        check_output(out, "--out", directory=True)
        cfg = _depth_config(size, dataset=dataset,
                           data_dir=None if data_dir is None else str(data_dir), epochs=epochs,
                           train_subset=train_subset, test_subset=test_subset)
        check_estimate(depth_budget(cfg, out, workers, backend), yes)
        return _run_depth(cfg, out, workers, backend, address, bar.cell, bar.start)

    _run_with_bar(start, out, "gaps.md", "runs", quiet)


def _depth_report_cmd(
    out: Annotated[Path, typer.Argument(help="Depth sweep directory (the report goes here).")],
    also: Annotated[list[Path] | None, typer.Option(
        help="Another depth sweep directory whose cells are pooled in (repeatable).")] = None,
) -> None:
    """Rebuild gaps.json, gaps.md and the figures of a (finished or partial) depth sweep."""
    from ..vit.depth import _depth_report

    with user_errors():
        files = _depth_report(out, also=also or ())
    typer.echo((out / "gaps.md").read_text())
    typer.echo("wrote " + ", ".join(files.values()))


def _fair_cmd(
    out: _Out = Path("vit-fair"),
    size: Annotated[str, typer.Option(help="fair, fair-wide (its grid widened at 1 and 3 "
                                           "epochs), fair-tiny, fair-pilot, fair-cifar, or a TOML "
                                           "sweep file of kind vit_fair.")] = "fair",
    device: Annotated[str, typer.Option(help="Torch device of the training: cpu or cuda "
                                             "(sets TOKENSDE_VIT_DEVICE for the workers).")]
    = "cpu",
    workers: Annotated[int, typer.Option(help="Cells in parallel processes (on a GPU: many, "
                                              "e.g. 16).")] = 1,
    data_dir: Annotated[Path | None, typer.Option(
        help="Data set directory or a .npz file from `tokensde vit export-data`.")] = None,
    train_subset: Annotated[int | None, typer.Option(help="Replace the training images.")]
    = None,
    val_subset: Annotated[int | None, typer.Option(help="Replace the validation images.")]
    = None,
    test_subset: Annotated[int | None, typer.Option(help="Replace the test images (0 = all).")]
    = None,
    with_: Annotated[list[Path] | None, typer.Option(
        "--with", help="A fair sweep that widens this one's grid, reported with it (repeat "
                       "for more).")] = None,
    figures: Annotated[bool, typer.Option(help="Draw the figures (needs matplotlib).")] = True,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    yes: bool = YES,
) -> None:
    """Run (or resume) the fair protocol: every arm at every rate of the grid and every budget,
    the rate chosen per arm on the validation split; then write fair.json, fair.md, figures
    (with the sweeps given by --with)."""
    import os

    from ..model.checks import _check_choice
    from ..vit.depth import _DEVICE_ENV
    from ..vit.estimate import fair_budget
    from ..vit.fair import _fair_config
    from ..vit.fair_run import _run_fair

    def start(bar: Any) -> dict[str, Any]:
        check_output(out, "--out", directory=True)
        _check_choice("device", device, ("cpu", "cuda"))
        cfg = _fair_config(size, data_dir=None if data_dir is None else str(data_dir),
                          train_subset=train_subset, val_subset=val_subset,
                          test_subset=test_subset)
        os.environ[_DEVICE_ENV] = device
        check_estimate(fair_budget(cfg, out, workers, device), yes)
        return _run_fair(cfg, out, workers, bar.cell, bar.start, figures=figures,
                        more=with_ or ())

    _run_with_bar(start, out, "fair.md", "cells", quiet)


def _fair_report_cmd(
    out: Annotated[Path, typer.Argument(help="Fair sweep directory (the report goes here).")],
    more: Annotated[list[Path] | None, typer.Argument(
        help="Fair sweeps that widen its grid (e.g. vit-fair-wide), reported with it.")] = None,
    figures: Annotated[bool, typer.Option(help="Draw the figures (needs matplotlib).")] = True,
) -> None:
    """Rebuild fair.json, fair.md and the figures of a (finished or partial) fair sweep, with the
    sweeps that widen its grid."""
    from ..vit.fair_report import _fair_report

    with user_errors():
        files = _fair_report(out, figures=figures, more=more or ())
    typer.echo((out / "fair.md").read_text())
    typer.echo("wrote " + ", ".join(files.values()))


def _export_data_cmd(
    out: Annotated[Path, typer.Option(help="The .npz file to write.")],
    dataset: _Dataset = "fashion-mnist",
    data_dir: _DataDir = None,
    train: Annotated[int, typer.Option(help="First N training images (training and "
                                            "validation splits come from these).")] = 7000,
    test: Annotated[int, typer.Option(help="First N test images.")] = 2000,
    force: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Write the first N training and test images of a data set into one compressed .npz file,
    which --data-dir accepts on a machine without the data set."""
    from ..io.outputs import _guard_output
    from ..vit.data import _export_npz

    with user_errors():
        _guard_output(out, "--out", force=force, suffixes=(".npz",))
        info = _export_npz(dataset, out, train, test, data_dir)
    typer.echo(f"wrote {info['path']}: {dataset}, {train} training + {test} test images, "
               f"{info['bytes'] / 2**20:.1f} MiB")


def register(app: typer.Typer) -> None:
    """Add the `vit` sub-app (compare, geometry, plot) to `app`."""
    sub = typer.Typer(no_args_is_help=True, help="Value-matrix noise in a small Vision Transformer.")
    sub.command("compare")(_compare_cmd)
    sub.command("geometry")(_geometry_cmd)
    sub.command("plot")(_plot_cmd)
    sub.command("depth")(_depth_cmd)
    sub.command("depth-report")(_depth_report_cmd)
    sub.command("fair")(_fair_cmd)
    sub.command("fair-report")(_fair_report_cmd)
    sub.command("export-data")(_export_data_cmd)
    app.add_typer(sub, name="vit")
