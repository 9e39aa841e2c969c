"""Token geometry at initialisation: pairwise cosine similarity of tokens across depth, per arm.

For images `x` and a freshly initialised model, the token states `X^k` (batch, n, D) after the
embedding (k = 0) and after each block give `cos_ij^k = <x_i, x_j> / (|x_i| |x_j|)`, pairs i < j.
Per arm and depth: a histogram of the cosines on [-1, 1], their mean, and the fractions *near +1*
(`cos > 1 - tol`, merged, spec §7) and *near -1* (`cos < -1 + tol`, antipodal).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..analysis import clusters
from ..model.params import ParameterError, check_int, check_real
from .init import Arm, make_model
from .model import ViTConfig

KIND_GEOMETRY = "tokensde.vit.geometry"


def pair_cosines(x: torch.Tensor) -> torch.Tensor:
    """Cosines `<x_i, x_j>/(|x_i||x_j|)`, i < j, of tokens `(batch, n, D)`; flat, batch n(n-1)/2."""
    u = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-30)
    return clusters.upper_pairs(u @ u.transpose(-1, -2)).reshape(-1).clamp(-1.0, 1.0)


@torch.no_grad()
def arm_geometry(cfg: ViTConfig, arm: Arm, images: torch.Tensor, seeds: list[int],
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
    """Per arm: histograms `(depth+1, bins)` of token cosines and the fractions near +-1."""
    check_int("bins", bins, 2)
    if not 0 < check_real("tol", tol, 0.0, strict=True) < 1:
        raise ParameterError(f"tol must be in (0, 1); got {tol!r}")
    return {"edges": np.linspace(-1.0, 1.0, bins + 1).tolist(), "tol": tol,
            "depths": list(range(cfg.depth + 1)), "seeds": list(seeds),
            "images": int(images.shape[0]),
            "arms": {a.name: arm_geometry(cfg, a, images, seeds, bins, tol) for a in arms}}
