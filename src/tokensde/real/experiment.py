"""One experiment: S independent inits of a real network x B inputs each, measured at every layer,
against tokensde's discrete network at the real depth and (when the init has one) its depth limit.

`run_real(spec, inits, inputs, seed)` returns a `RealRun`: the tidy table (one row per side, layer
and statistic: mean over units, standard error, t interval, number of units), the mapping and the
agreement of the mean token cosine (`agreement`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..model.checks import check_int, require
from ..sim.budget import Budget, estimate_work
from ..sim.rng import derive_seed
from .mapping import Mapping, map_network, spec_law_note
from .measure import TOL, directions_gram, gram_stats, summarise
from .models import RealSpec, build, hidden_states, make_inputs
from .predict import SDE_RUNS, SDE_STEPS, predict

KIND = "tokensde-real"
SIDES: tuple[str, ...] = ("real", "network", "sde")
AGREE_SE = 3.0  # a layer agrees when |real - network| <= AGREE_SE combined standard errors


@dataclass
class RealRun:
    """The result of `run_real`: `table` (columns side, layer, frac, stat, mean, se, lo, hi,
    units), `mapping`, `meta` (spec, sizes, seeds, wall times), `agreement` and the
    `embeddings` the predictions start from."""

    table: pd.DataFrame
    mapping: Mapping
    meta: dict[str, Any]
    agreement: dict[str, Any] = field(default_factory=dict)
    embeddings: torch.Tensor | None = None  # (inits * inputs, n, d), what the predictions start from


def agreement(table: pd.DataFrame, stat: str = "cos_mean", k: float = AGREE_SE) -> dict[str, Any]:
    """Layers 1..L of `stat`, real against the discrete prediction: the fraction whose difference
    is within `k` combined standard errors `sqrt(se_real^2 + se_net^2)`, and the largest difference."""
    t = table[table.stat == stat]
    r = t[t.side == "real"].set_index("layer")
    p = t[t.side == "network"].set_index("layer")
    layers = [i for i in r.index if i > 0 and i in p.index]
    diff = np.array([r.at[i, "mean"] - p.at[i, "mean"] for i in layers])
    se = np.array([np.hypot(r.at[i, "se"], p.at[i, "se"]) for i in layers])
    within = np.abs(diff) <= k * se
    worst = int(np.argmax(np.abs(diff))) if len(diff) else 0
    return {"stat": stat, "layers": len(layers), "within": int(within.sum()),
            "fraction_within": float(within.mean()) if len(diff) else float("nan"),
            "max_abs_diff": float(np.abs(diff).max()) if len(diff) else float("nan"),
            "at_layer": int(layers[worst]) if len(diff) else -1,
            "diff_over_se_at_max": float(diff[worst] / se[worst]) if len(diff) else float("nan")}


def measure_real(spec: RealSpec, inits: int, inputs: int, seed: int, tol: float = TOL,
                 progress: Callable[[int], None] | None = None,
                 images: torch.Tensor | None = None) -> tuple[dict[str, np.ndarray], torch.Tensor, Any]:
    """Per-init statistics `{stat: (inits, L + 1)}` (each the mean over the init's `inputs`), the
    embeddings `(inits * inputs, n, d)` and the last network built. Init s is built under seed
    `derive_seed(seed, 1, s)` and reads inputs drawn under `derive_seed(seed, 2, s)`."""
    per: dict[str, list[np.ndarray]] = {}
    x0 = []
    net = None
    for s in range(inits):
        net = build(spec, derive_seed(seed, 1, s))
        h = hidden_states(net, make_inputs(spec, inputs, derive_seed(seed, 2, s), images))
        for k, v in gram_stats(directions_gram(h), tol).items():
            per.setdefault(k, []).append(v.mean(0))
        x0.append(h[:, 0].to(torch.float64))
        if progress is not None:
            progress(1)
    return {k: np.stack(v) for k, v in per.items()}, torch.cat(x0), net


def real_budget(spec: RealSpec, inits: int = 32, inputs: int = 2, sde_steps: int = SDE_STEPS,
                sde_runs: int = 32) -> Budget:
    """Memory and work of `run_real` before it runs. Memory: one model's float32 weights
    (`layers (4 + 2 mlp_ratio) width^2 + vocabulary width`) and one init's hidden states at every
    layer, plus per init its inputs' float64 tokens `n x width` and Gram matrices `(layers + 1) x
    n x n`; work (`budget.estimate_work`): the forward passes, `inits x inputs x layers x n x
    width x (n + (4 + 2 mlp_ratio) width)`, the network's prediction and the depth limit's."""
    inits, inputs = check_int("inits", inits, 2), check_int("inputs", inputs, 1)
    n, w, L, m = spec.tokens, spec.width, spec.layers, 4 + 2 * spec.mlp_ratio
    fixed = 4 * (L * m * w * w + spec.vocabulary * w + inputs * (L + 1) * n * w)
    per_init = 8 * inputs * (n * w + (L + 1) * n * n)
    runs = inits * inputs
    work = (float(runs) * L * n * w * (n + m * w) + estimate_work(runs, L, n, w)
            + estimate_work(min(sde_runs, runs), check_int("sde_steps", sde_steps, 1), n, w))
    return Budget(f"this {spec.arch} run", fixed + per_init * inits, per_init, inits, work,
                  f"{inits} inits x {inputs} inputs, {L} layers, width {w}, {n} tokens, "
                  f"vocabulary {spec.vocabulary}", ("inits", "inputs", "layers", "width", "ctx"),
                  longer=("inits", "inputs", "layers", "width", "ctx"))


def run_real(spec: RealSpec, inits: int = 32, inputs: int = 2, seed: int = 0, tol: float = TOL,
             sde: bool | None = None, sde_steps: int = SDE_STEPS, sde_runs: int = SDE_RUNS,
             progress: Callable[[int], None] | None = None,
             images: torch.Tensor | None = None) -> RealRun:
    """Measure `inits` x `inputs` of `spec` and predict them (module docstring). `sde`: draw the
    depth limit (default: when the init has one, `Mapping.has_limit`), from the first `sde_runs`
    embeddings on `sde_steps` Euler steps. `images`: what ViT reads (`make_inputs`)."""
    inits = check_int("inits", inits, 2)
    inputs = check_int("inputs", inputs, 1)
    seed = check_int("seed", seed, 0)
    sde_steps = check_int("sde_steps", sde_steps, 1)
    sde_runs = check_int("sde_runs", sde_runs, 2)
    require(0 < tol < 1, "tol", "in (0, 1)", tol)
    t0 = time.perf_counter()
    per, x0, net = measure_real(spec, inits, inputs, seed, tol, progress, images)
    t_real = time.perf_counter() - t0
    radius2 = float((x0 ** 2).sum(-1).mean()) / spec.width
    m = map_network(net, radius2)
    L = spec.layers
    frames = [summarise(per).assign(side="real", frac=lambda f: f.layer / L)]
    t1 = time.perf_counter()
    _, pred = predict(m, x0, derive_seed(seed, 3), "network", tol=tol)
    frames.append(summarise(pred).assign(side="network", frac=lambda f: f.layer / L))
    t_net = time.perf_counter() - t1
    use_sde = m.has_limit if sde is None else sde
    t_sde = 0.0
    if use_sde:
        t2 = time.perf_counter()
        _, lim = predict(m, x0[:sde_runs], derive_seed(seed, 4), "sde", steps=sde_steps, tol=tol)
        frames.append(summarise(lim).assign(side="sde", frac=lambda f: f.layer / sde_steps))
        t_sde = time.perf_counter() - t2
    table = pd.concat(frames, ignore_index=True)[
        ["side", "layer", "frac", "stat", "mean", "se", "lo", "hi", "units"]]
    meta = {"spec": spec.to_dict(), "inits": inits, "inputs": inputs, "seed": seed, "tol": tol,
            "sde": bool(use_sde), "sde_steps": sde_steps, "sde_runs": min(sde_runs, len(x0)),
            "has_limit": m.has_limit, "params": m.params.to_dict(), "radius2": radius2,
            "approximated": list(m.law.notes), "init_note": spec_law_note(spec),
            "seeds": {"init s": "derive_seed(seed, 1, s)", "inputs s": "derive_seed(seed, 2, s)",
                      "network": derive_seed(seed, 3), "sde": derive_seed(seed, 4)},
            "wall_s": {"real": round(t_real, 2), "network": round(t_net, 2),
                       "sde": round(t_sde, 2)}}
    run = RealRun(table, m, meta, embeddings=x0)
    run.agreement = agreement(table)
    run.meta["agreement"] = run.agreement
    return run


def save_run(run: RealRun, path: Any) -> Any:
    """Write the table to Parquet with the header (kind, version, spec, seeds, agreement)."""
    from ..io.store import header, write_parquet

    return write_parquet(run.table, path, header(KIND, **run.meta))
