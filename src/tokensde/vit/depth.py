"""The ViT depth sweep: value-noise arms x depths x seeds x blocks, as the sweep kind `vit_depth`.

One cell trains one model: block kind, arm, depth L and training seed `train_seed`. Before training,
the *untrained* model of the cell is fed a fixed batch of test images (the first `probe_images`) and
the token geometry after its last block is recorded (`geometry_at_init`): the fraction of token
pairs with cosine within `tol` of +1 (`init_near_pos`) and of -1 (`init_near_neg`), the mean cosine
and the effective rank `(tr G)^2 / tr G^2` of the tokens' cosine matrix G, averaged over images.
Then it trains for `epochs` and records the test accuracy after every epoch.

Pairing: every arm of a (block, depth, train_seed) trains from the same non-value weights, on the
same data order and augmentation, so `acc(arm) - acc(default)` is a paired difference. The training
randomness therefore comes from `train_seed` (a grid parameter); the per-cell seed that the sweep
engine derives from the cell's hash is not used.

Blocks (both with the branch scale r = 1/sqrt(L), heads = 1 unless given, no biases in attention):
- `attention-only`: spec §2, `x <- N(x + r V A(x) x)` on the sphere of radius sqrt(D);
- `standard`: pre-norm ViT block, `x + r Proj(Attn(LN x))`, then `x + r MLP(LN x)`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..analysis import clusters
from ..analysis.stats import t_interval
from ..model.params import ParameterError, _check_choice, _check_real
from ..sweep.config import SweepConfig
from ..sweep.engine import _OnCell, run_sweep
from ..sweep.kinds import ExperimentKind, Param, _choice, _integer, real, register
from ..sweep.store import load_table
from .compare import _BASELINE, DataSpec
from .data import DATASETS
from .geometry import pair_cosines
from .init import Arm, _arm_order, make_model
from .model import _BLOCKS, ViT, ViTConfig
from .train import TrainConfig, _evaluate, make_optimizer, train_epoch

KIND = "vit_depth"
_DEVICE_ENV = "TOKENSDE_VIT_DEVICE"  # torch device of the training runs (default cpu)
_SWEEPS = Path(__file__).parent / "sweeps"
_DEPTH_SWEEPS = ("tiny", "quick", "full", "long")
_PATCH = {"fashion-mnist": 7, "cifar10": 4, "digits": 4}
_NORM = {"attention-only": "rms", "standard": "layer"}
# Columns that identify a training set-up: rows that agree on all of them (and on train_seed) are
# paired across arms.
_SETUP = ("block", "depth", "dataset", "data_dir", "train_subset", "test_subset", "epochs", "dim",
         "heads", "patch", "batch_size", "lr", "probe_images", "tol")


def _check_arm(key: str, value: Any) -> str:
    """The canonical name of the arm `value` (ParameterError naming `key` if it is none)."""
    try:
        return Arm.parse(str(value)).name
    except ParameterError as err:
        raise ParameterError(f"{key}: {err}") from err


def _tol(key: str, value: Any) -> float:
    x = _check_real(key, value, 0.0, strict=True)
    if x >= 1.0:
        raise ParameterError(f"{key} must be in (0, 1); got {value!r}")
    return x


_PARAMS: dict[str, Param] = {
    "block": _choice(_BLOCKS, doc="attention-only (spec §2) or standard (pre-norm with MLP)"),
    "arm": Param(_check_arm, doc="value-matrix arm, e.g. default, noise:0, hybrid:0, identity, shared"),
    "depth": _integer(1, doc="number of blocks L (branch scale 1/sqrt(L))"),
    "train_seed": _integer(0, doc="seed of the weights, data order and augmentation (paired)"),
    "dataset": _choice(DATASETS, "fashion-mnist"),
    "data_dir": Param(lambda k, v: str(v), "", "data set directory ('' = the default place)"),
    "train_subset": _integer(0, 5000, "first N training images (0 = all)"),
    "test_subset": _integer(0, 2000, "first N test images (0 = all)"),
    "epochs": _integer(1, 3),
    "dim": _integer(2, 64, "token width D"),
    "heads": _integer(1, 1),
    "patch": _integer(0, 0, "patch side (0: 7 for fashion-mnist, 4 otherwise)"),
    "batch_size": _integer(1, 128),
    "lr": real(0.0, 2e-3, strict=True, doc="peak AdamW learning rate"),
    "probe_images": _integer(1, 64, "test images fed to the untrained model"),
    "tol": Param(_tol, 0.05, "pairs with cosine within tol of +1 / -1 count as merged / antipodal"),
}


def _cell_config(cell: dict[str, Any], image_size: int, channels: int,
                classes: int) -> ViTConfig:
    """The ViTConfig of a normalised cell for images of this shape."""
    patch = cell["patch"] or _PATCH[cell["dataset"]]
    return ViTConfig(image_size=image_size, channels=channels, patch=patch, dim=cell["dim"],
                     depth=cell["depth"], heads=cell["heads"], classes=classes,
                     norm=_NORM[cell["block"]], residual_scale=True, block=cell["block"])


def _data_spec(cell: dict[str, Any]) -> DataSpec:
    """Which images a cell trains and tests on."""
    return DataSpec(cell["dataset"], cell["data_dir"] or None, cell["train_subset"] or None,
                    cell["test_subset"] or None)


def _token_geometry(x: torch.Tensor, tol: float) -> dict[str, float]:
    """Of tokens `(batch, n, D)`: fractions of pairs with cosine > 1 - tol and < -1 + tol, mean
    cosine, and the effective rank `(tr G)^2 / tr G^2` of each image's cosine matrix, averaged."""
    cos = pair_cosines(x.double()).numpy()
    u = torch.nn.functional.normalize(x.double(), dim=-1)
    rank = clusters.effective_rank((u @ u.transpose(-1, -2)).numpy())
    near_pos, near_neg = clusters.pair_fractions(cos, tol)
    return {"near_pos": near_pos, "near_neg": near_neg, "mean_cos": float(cos.mean()),
            "rank": float(rank.mean())}


@torch.no_grad()
def _geometry_at_init(model: ViT, images: torch.Tensor, tol: float) -> dict[str, float]:
    """`token_geometry` after the last block of `model` (as given: untrained) on `images`."""
    model.eval()
    return _token_geometry(model.tokens(images)[-1], tol)


def _depth_cell(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train one (block, arm, depth, train_seed) model; geometry at init, accuracy per epoch."""
    del seed  # the training seed is the grid parameter train_seed (see the module docstring)
    device = _check_choice(_DEVICE_ENV, os.environ.get(_DEVICE_ENV, "cpu"), ("cpu", "cuda"))
    data = _data_spec(cell).load()
    cfg = _cell_config(cell, data.image_size, data.channels, data.classes)
    train = TrainConfig(epochs=cell["epochs"], batch_size=cell["batch_size"], lr=cell["lr"],
                        seed=cell["train_seed"])
    model = make_model(cfg, cell["arm"], train.seed)
    geo = _geometry_at_init(model, data.x_test[:cell["probe_images"]], cell["tol"])
    model.to(device)
    opt = make_optimizer(model, train)
    curve, t0 = [], time.perf_counter()
    for epoch in range(train.epochs):
        rec = train_epoch(model, opt, data, train, epoch, device=device)
        curve.append(_evaluate(model, data.x_test, data.y_test, device)["acc"])
    return {"acc": curve[-1], "acc_curve": curve, "train_loss": rec["train_loss"],
            "train_s": time.perf_counter() - t0, "tokens": cfg.n_tokens, "device": device,
            **{f"init_{k}": v for k, v in geo.items()}}


register(ExperimentKind(KIND, _depth_cell, _PARAMS,
                        "train a ViT arm at one depth; token geometry at init, test accuracy"))


# ----------------------------------------------------------------------------- running

def _sized_config(size: str | os.PathLike, kind: str, sizes: Sequence[str], packaged: Path,
                 params: dict[str, Any]) -> SweepConfig:
    """The sweep `packaged` when `size` is one of `sizes`, else the TOML file `size`, checked to
    be of `kind`, with its fixed parameters replaced by the non-None `params`."""
    path = packaged if size in sizes else Path(size)
    if not path.is_file():
        raise FileNotFoundError(f"size must be one of {', '.join(sizes)} or a TOML sweep file of "
                                f"kind {kind!r}; got {str(size)!r}, which is neither (no such file)")
    cfg = SweepConfig.load(path)
    if cfg.kind != kind:
        raise ParameterError(f"size must be one of {', '.join(sizes)} or a TOML file of kind "
                             f"{kind!r}; {path} is of kind {cfg.kind!r}")
    given = {k: v for k, v in params.items() if v is not None}
    clash = sorted(k for k in given if any(k in b for b in cfg.grids))
    if clash:
        raise ParameterError(f"{', '.join(clash)} vary in the grid of {path}; edit a copy of "
                             "the TOML file instead")
    return dataclasses.replace(cfg, params={**cfg.params, **given})


def _depth_config(size: str | os.PathLike = "quick", **params: Any) -> SweepConfig:
    """The packaged sweep `size` ('quick' or 'full', or a TOML path), with fixed parameters
    replaced by `params` (e.g. `dataset='cifar10', data_dir=DIR`)."""
    return _sized_config(size, KIND, _DEPTH_SWEEPS, _SWEEPS / f"vit-depth-{size}.toml", params)


def _run_depth(config: SweepConfig, out: str | os.PathLike, workers: int = 1,
              backend: str = "local", address: str | None = None,
              on_cell: _OnCell | None = None,
              on_start: Any = None) -> dict[str, Any]:
    """Run (or resume) a depth sweep into `out` with the sweep engine, then write its tables and
    figures (`depth_report`); return the sweep summary with the report's files."""
    summary = run_sweep(config, out, workers=workers, backend=backend, address=address,
                        on_cell=on_cell, on_start=on_start)
    return {**summary, "report": _depth_report(out)}


# ----------------------------------------------------------------------------- analysis

def _setup_key(df: pd.DataFrame) -> list[str]:
    return [c for c in _SETUP if c in df.columns]


def _paired_gaps(df: pd.DataFrame, baseline: str = _BASELINE) -> pd.DataFrame:
    """Per set-up and arm: seeds, mean accuracy and geometry at init, and the paired gap to
    `baseline` in points, `mean +- t_{0.975,S-1} sd/sqrt(S)` over the seeds both arms finished."""
    df = df[df["status"] == "ok"] if "status" in df.columns else df
    key = _setup_key(df)
    base = df[df["arm"] == baseline].set_index([*key, "train_seed"])["acc"]
    rows = [_gap_row(g, base, key, baseline) for _, g in df.groupby([*key, "arm"], sort=True)]
    return pd.DataFrame(rows)


def _gap_row(g: pd.DataFrame, base: pd.Series, key: list[str], baseline: str) -> dict[str, Any]:
    arm = g["arm"].iloc[0]
    paired = base.reindex(pd.MultiIndex.from_frame(g[[*key, "train_seed"]])).to_numpy()
    diff = 100.0 * (g["acc"].to_numpy() - paired)
    diff = diff[np.isfinite(diff)]
    mean, lo, hi = t_interval(diff) if arm != baseline and len(diff) > 1 else (math.nan,) * 3
    init = {c: float(g[c].mean()) for c in g.columns if c.startswith("init_")}
    return {**{k: g[k].iloc[0] for k in key}, "arm": arm, "model": Arm.parse(arm).model,
            "lam": Arm.parse(arm).noise_factor, "seeds": len(g), "pairs": len(diff),
            "acc": 100.0 * float(g["acc"].mean()), "gap": mean, "gap_lo": lo, "gap_hi": hi,
            "half_width": (hi - lo) / 2, **init}


_KIND_GAPS = "tokensde.vit.depth-gaps"
GAPS, TABLE_MD = "gaps.json", "gaps.md"


def _span(x: pd.Series) -> str:
    return "none" if x.empty else f"{x.min()}" if x.min() == x.max() else f"{x.min()}–{x.max()}"


def _pts(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:+.1f}"


def _gap_table(gaps: pd.DataFrame, block: str = "attention-only") -> str:
    """Markdown: arms x depths, each cell `gap [lo, hi]` in points (paired over seeds); first
    row the default's accuracy; last column the model of the theory the arm is."""
    g = gaps[gaps["block"] == block]
    depths = sorted(g["depth"].unique())
    head = "| arm | " + " | ".join(f"L = {d}" for d in depths) + " | model |"
    lines = [f"**{block} block**: gap to `default` in points, 95 % paired t-interval "
             f"(paired seeds per cell: {_span(g.loc[g['arm'] != _BASELINE, 'pairs'])})", "", head,
             "|---|" + "---|" * (len(depths) + 1)]
    for arm, rows in g.groupby("arm", sort=False):
        by_depth = rows.set_index("depth")
        cells = []
        for d in depths:
            if d not in by_depth.index:
                cells.append("")
                continue
            r = by_depth.loc[d]
            cells.append(f"{r['acc']:.1f} %" if arm == _BASELINE else
                         f"{_pts(r['gap'])} [{_pts(r['gap_lo'])}, {_pts(r['gap_hi'])}]")
        name = "default (accuracy)" if arm == _BASELINE else arm
        model = rows["model"].iloc[0].split(":")[0]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {model} |")
    return "\n".join(lines) + "\n"


def _ordered(gaps: pd.DataFrame) -> pd.DataFrame:
    rank = {a: i for i, a in enumerate(_arm_order(gaps["arm"]))}
    return gaps.assign(_o=gaps["arm"].map(rank)).sort_values(
        ["block", "_o", "depth"]).drop(columns="_o").reset_index(drop=True)


def _pooled_table(out: str | os.PathLike, also: Sequence[str | os.PathLike] = ()) -> pd.DataFrame:
    """The finished cells of the depth sweep in `out` and of the sweeps in `also`, one row per
    cell id (a cell's numbers depend on its parameters only, so any sweep may have run it)."""
    from ..sweep.store import _SweepDir

    for d in (out, *also):
        kind = _SweepDir(d).manifest()["config"].get("kind")
        if kind != KIND:
            raise ParameterError(f"{d} holds a sweep of kind {kind!r}, not {KIND!r}")
    tables = [load_table(d) for d in (out, *also)]
    return pd.concat(tables, ignore_index=True).drop_duplicates("cell").reset_index(drop=True)


def _depth_report(out: str | os.PathLike, figures: bool = True,
                 also: Sequence[str | os.PathLike] = ()) -> dict[str, Any]:
    """From the sweep table in `out` (pooled with the sweeps in `also`): the paired gaps
    (`gaps.json`, with a header naming the sweeps), the markdown tables (`gaps.md`) and the
    figures, all written into `out`; return the file paths."""
    from ..io.store import atomic_write, header
    from ..plots.vit_depth import _draw_all
    from ..sweep.store import _SweepDir

    out = Path(out)
    table = _pooled_table(out, also)
    gaps = _ordered(_paired_gaps(table))
    sweeps = [_SweepDir(d).manifest()["config"] for d in (out, *also)]
    doc = header(_KIND_GAPS, sweep=sweeps[0], also=[str(d) for d in also], sweeps=sweeps,
                 rows=_json_rows(gaps))
    files = {"gaps": atomic_write(out / GAPS, lambda tmp: tmp.write_text(
        json.dumps(doc, indent=1) + "\n"))}
    md = "\n".join(_gap_table(gaps, b) for b in ("attention-only", "standard")
                   if b in set(gaps["block"]))
    files["table"] = atomic_write(out / TABLE_MD, lambda tmp: tmp.write_text(md))
    if figures:
        files.update(_draw_all(gaps, table, out))
    return {k: str(v) for k, v in files.items()}


def _json_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of `df` as plain JSON-ready dicts (nan as None)."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else
                 v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")]


def _read_gaps(path: str | os.PathLike) -> pd.DataFrame:
    """The gap table saved by `depth_report` (a directory or its gaps.json)."""
    from ..io.store import _read_json

    p = Path(path)
    p = p / GAPS if p.is_dir() else p
    doc = _read_json(p, _KIND_GAPS, f"rebuild it with `tokensde vit depth-report {p.parent}`")
    return pd.DataFrame(doc["rows"])
