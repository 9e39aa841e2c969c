"""Token geometry at initialisation: pairwise cosine similarity of tokens across depth, per arm.

For images `x` and a freshly initialised model, the token states `X^k` (batch, n, D) after the
embedding (k = 0) and after each block give `cos_ij^k = <x_i, x_j> / (|x_i| |x_j|)`, pairs i < j.
Per arm and depth: a histogram of the cosines on [-1, 1], their mean, and the fractions *near +1*
(`cos > 1 - tol`, merged, spec §7) and *near -1* (`cos < -1 + tol`, antipodal).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis import clusters
from ..io.store import atomic_write, header
from ..model.params import ParameterError, _check_int, _check_real
from .init import Arm, make_model
from .model import ViTConfig

_KIND_GEOMETRY = "tokensde.vit.geometry"


def pair_cosines(x: torch.Tensor) -> torch.Tensor:
    """Cosines `<x_i, x_j>/(|x_i||x_j|)`, i < j, of tokens `(batch, n, D)`; flat, batch n(n-1)/2.

    Args:
        x: Tokens `(batch, n, D)`.

    Returns:
        The cosines of all pairs, flat: `(batch n(n-1)/2,)`.
    """
    u = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-30)
    return clusters.upper_pairs(u @ u.transpose(-1, -2)).reshape(-1).clamp(-1.0, 1.0)


@torch.no_grad()
def _arm_geometry(cfg: ViTConfig, arm: Arm, images: torch.Tensor, seeds: list[int],
                 bins: int, tol: float) -> dict[str, Any]:
    """Cosine statistics across depth for `arm`, pooled over models of `seeds` and all images."""
    per_depth: list[list[torch.Tensor]] = [[] for _ in range(cfg.depth + 1)]
    for s in seeds:
        states = make_model(cfg, arm, s).eval().tokens(images)
        for k, x in enumerate(states):
            per_depth[k].append(pair_cosines(x.double()))
    hist, near_pos, near_neg, mean = [], [], [], []
    for parts in per_depth:
        c = torch.cat(parts).numpy()
        hist.append(np.histogram(c, bins=bins, range=(-1.0, 1.0))[0].tolist())
        pos, neg = clusters.pair_fractions(c, tol)
        near_pos.append(pos)
        near_neg.append(neg)
        mean.append(float(c.mean()))
    return {"hist": hist, "near_pos": near_pos, "near_neg": near_neg, "mean": mean}


def geometry(cfg: ViTConfig, arms: list[Arm], images: torch.Tensor, seeds: list[int],
             bins: int = 40, tol: float = 0.05) -> dict[str, Any]:
    """Per arm: histograms `(depth+1, bins)` of token cosines and the fractions near +-1.

    Args:
        cfg: The ViT's shape.
        arms: The value-initialisation arms.
        images: Images `(batch, channels, H, W)` fed to every model.
        seeds: One freshly initialised model per seed and arm.
        bins: Histogram bins on [-1, 1].
        tol: A cosine within `tol` of +1 or -1 counts as near it.

    Returns:
        `edges`, `tol`, `depths`, `seeds`, `images` and `arms` (per arm: `hist`, `near_pos`,
        `near_neg`, `mean` at each depth).
    """
    _check_int("bins", bins, 2)
    if not 0 < _check_real("tol", tol, 0.0, strict=True) < 1:
        raise ParameterError(f"tol must be in (0, 1); got {tol!r}")
    return {"edges": np.linspace(-1.0, 1.0, bins + 1).tolist(), "tol": tol,
            "depths": list(range(cfg.depth + 1)), "seeds": list(seeds),
            "images": int(images.shape[0]),
            "arms": {a.name: _arm_geometry(cfg, a, images, seeds, bins, tol) for a in arms}}


def _geometry_study(arms: list[Arm], dataset: str = "fashion-mnist",
                   data_dir: str | Path | None = None, images: int = 64, seeds: int = 3,
                   patch: int | None = None, model: dict[str, Any] | None = None, bins: int = 40,
                   tol: float = 0.05, out: str | Path | None = None) -> dict[str, Any]:
    """Token geometry at initialisation on the first test images of a data set, per arm.

    Args:
        arms: The value-initialisation arms (`parse_arms`).
        dataset: `fashion-mnist`, `cifar10` or `digits`.
        data_dir: Where the data set lives (None: its default place).
        images: Test images fed to each model.
        seeds: Models per arm (seeds `0 .. seeds - 1`).
        patch: Patch side (None: the data set's default).
        model: Other `ViTConfig` fields (dim, depth, heads, ...).
        bins: Histogram bins on [-1, 1].
        tol: A cosine within `tol` of +1 or -1 counts as near it.
        out: A directory to write `geometry.json` into (None: write nothing).

    Returns:
        The `geometry` result with a header (kind, data set, data, model), as saved.

    Raises:
        ParameterError: `images` or `seeds` is below 1, or another argument is out of range.
    """
    from .compare import _model_config
    from .data import load_dataset

    if images < 1 or seeds < 1:
        raise ParameterError(f"images and seeds must be >= 1; got {images!r}, {seeds!r}")
    _check_int("bins", bins, 2)  # before the data set is read (`geometry` checks them again)
    if not 0 < _check_real("tol", tol, 0.0, strict=True) < 1:
        raise ParameterError(f"tol must be in (0, 1); got {tol!r}")
    data = load_dataset(dataset, data_dir, test_subset=images)
    cfg = _model_config(data, patch, **(model or {}))
    result = geometry(cfg, arms, data.x_test, list(range(seeds)), bins, tol)
    doc = {**header(_KIND_GEOMETRY, dataset=dataset, data=data.info, model=cfg.to_dict()),
           **result}
    if out is not None:
        text = json.dumps(doc, indent=1) + "\n"
        atomic_write(Path(out) / "geometry.json", lambda tmp: tmp.write_text(text))
    return doc
