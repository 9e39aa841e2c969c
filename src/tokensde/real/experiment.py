"""One experiment: S independent inits of a real network x B inputs each, measured at every layer,
against tokensde's discrete network at the real depth and (when the init has one) its depth limit.

`run_real(spec, inits, inputs, seed)` returns a `RealRun`: the tidy table (one row per side, layer
and statistic: mean over units, standard error, t interval, number of units), the mapping and the
agreement of the mean token cosine (`agreement`): each layer's z, and whether the largest |z|
passes the Sidak threshold for the number of layers (a family-wise false-alarm rate of at most 5 %
when the model is exact).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy import stats as st

from ..model.checks import _check_int, _require
from ..sim.budget import Budget
from ..sim.rng import derive_seed
from .mapping import Mapping, _spec_law_note, map_network
from .measure import _TOL, directions_gram, gram_stats, summarise
from .models import RealSpec, build, hidden_states, make_inputs
from .predict import _SDE_RUNS, _SDE_STEPS, _prediction_execution, predict

__all__ = ["KIND", "RealRun", "agreement", "layer_threshold", "measure_real", "predicted_run",
           "real_budget", "real_run_cost", "run_real", "save_run"]

KIND = "tokensde-real"
_SIDES: tuple[str, ...] = ("real", "network", "sde")
_AGREE_SE = 3.0  # a layer agrees when |real - network| <= AGREE_SE combined standard errors
_FWER = 0.05  # family-wise false-alarm rate of the verdict "disagrees" when the model is exact


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


def layer_threshold(layers: int, fwer: float = _FWER) -> float:
    """Sidak threshold `c = Phi^-1(1 - a/2)`, `a = 1 - (1 - fwer)^(1/K)`, for K layers' z.

    Args:
        layers: the number K of layers tested.
        fwer: the family-wise false-alarm rate, in (0, 1).

    Returns:
        c such that, when every z is standard normal (the model exact, many inits),
        `P(max_k |z_k| > c) <= fwer`: equal to fwer for independent layers, and at most fwer
        for correlated ones (Sidak's inequality for jointly normal z).
    """
    k = _check_int("layers", layers, 1)
    _require(0 < fwer < 1, "fwer", "in (0, 1)", fwer)
    a = -math.expm1(math.log1p(-fwer) / k)
    return float(st.norm.isf(a / 2))


def agreement(table: pd.DataFrame, stat: str = "cos_mean", k: float = _AGREE_SE,
              fwer: float = _FWER) -> dict[str, Any]:
    """Layers 1..L of `stat`, real against the discrete prediction, `z_l = diff_l / se_l`.

    Args:
        table: the tidy table of `run_real` (sides 'real' and 'network').
        stat: the statistic compared.
        k: the per-layer band, in combined standard errors `se = sqrt(se_real^2 + se_net^2)`,
            of the count `within`.
        fwer: the family-wise false-alarm rate of the verdict (`layer_threshold`).

    Returns:
        `layers`, `within` (|z| <= k), `fraction_within`, the largest |difference| and its layer
        (`max_abs_diff`, `at_layer`, `diff_over_se_at_max`), the per-layer `z`, `max_abs_z` and
        its layer `at_layer_z`, the Sidak `threshold` for `layers` layers at `fwer`, `agrees`
        (max |z| <= threshold), `disagree_at` (layers past it) and, for the largest difference
        whose |z| is at most the threshold (not resolved), `unresolved_layer`, its `z`, and
        `inits_to_resolve` = `units (threshold / |z|)^2`, the inits at which a gap of that
        size would sit at the threshold (None when every layer is resolved; inf at z = 0).
    """
    t = table[table.stat == stat]
    r = t[t.side == "real"].set_index("layer")
    p = t[t.side == "network"].set_index("layer")
    layers = [i for i in r.index if i > 0 and i in p.index]
    diff = np.array([r.at[i, "mean"] - p.at[i, "mean"] for i in layers])
    se = np.array([np.hypot(r.at[i, "se"], p.at[i, "se"]) for i in layers])
    with np.errstate(divide="ignore", invalid="ignore"):  # se = 0: z is 0 or +-inf
        z = np.where(se > 0, diff / se, np.where(diff == 0, 0.0, np.sign(diff) * np.inf))
    within = np.abs(z) <= k
    worst = int(np.argmax(np.abs(diff))) if len(diff) else 0
    out: dict[str, Any] = {
        "stat": stat, "layers": len(layers), "within": int(within.sum()),
        "fraction_within": float(within.mean()) if len(diff) else float("nan"),
        "max_abs_diff": float(np.abs(diff).max()) if len(diff) else float("nan"),
        "at_layer": int(layers[worst]) if len(diff) else -1,
        "diff_over_se_at_max": float(z[worst]) if len(diff) else float("nan")}
    if not len(diff):
        return out
    thr = layer_threshold(len(layers), fwer)
    az = np.abs(z)
    zi = int(np.argmax(az))
    units = int(r.loc[layers, "units"].min()) if "units" in r else 0
    open_ = [j for j in range(len(layers)) if not az[j] > thr]
    gap = max(open_, key=lambda j: abs(diff[j])) if open_ else None
    need = None
    if gap is not None:
        need = math.inf if az[gap] == 0 else float(math.ceil(units * (thr / az[gap]) ** 2))
    out.update({
        "z": [round(float(v), 3) for v in z], "max_abs_z": float(az[zi]),
        "at_layer_z": int(layers[zi]), "threshold": thr, "fwer": fwer,
        "agrees": bool(np.all(az <= thr)),
        "disagree_at": [int(layers[j]) for j in range(len(layers)) if az[j] > thr],
        "unresolved_layer": None if gap is None else int(layers[gap]),
        "unresolved_z": None if gap is None else float(z[gap]),
        "units": units, "inits_to_resolve": need})
    return out


def measure_real(spec: RealSpec, inits: int, inputs: int, seed: int, tol: float = _TOL,
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


_QK_DRAW_UNITS = 400  # work units (`sim.budget.estimate_work`) per number of the prediction's
# random query/key forms: drawing them is most of its time (measured, torch-encoder width 256)
_INIT_STEPS = 1000  # layer steps (`sim.budget.TimeModel.c0`) of building and measuring one init


def real_run_cost(inits: int, per_init: int, layers: int, n: int, d: int, heads: int, qk: bool,
                  sde_steps: int, sde_runs: int, biased: bool = False,
                  sde: bool = True) -> tuple[float, float]:
    """(work, layer steps) of a real run of `inits x per_init` inputs besides the arithmetic of
    its forward passes: the budgets of the plans `simulate` runs for its predictions
    (`predict.predict`; `sim.simulate.plan_run` with predict's options), the network's
    (`layers` layers, every input a run of `n` tokens in R^d, `heads` heads) and the depth
    limit's (`sde_steps` Euler steps, `min(sde_runs, runs)` runs), plus QK_DRAW_UNITS per
    number of the random query/key forms (`qk`: `heads x d^2` a run and layer); and
    `inits x (layers + INIT_STEPS)` layer steps of the forward blocks (the inputs of an init
    together) and the building of each model.

    Args:
        inits: independent initialisations.
        per_init: inputs per initialisation.
        layers: the network's depth.
        n: tokens per input.
        d: the width.
        heads: attention heads.
        qk: the query/key forms are random (drawn per run and layer).
        sde_steps: Euler steps of the depth limit.
        sde_runs: inputs the depth limit starts from, at most.
        biased: the mapped model has biases (`predict` then takes the fast sampler).
        sde: the depth limit is drawn too.

    Returns:
        `(work, steps)` in `sim.budget`'s units.
    """
    runs = inits * per_init
    from ..model.params import ModelParams, TimeGrid
    from ..sim.options import InitialState, Recording
    from ..sim.simulate import plan_run

    p = ModelParams(n=n, d=d, heads=heads)
    sde_steps = _check_int("sde_steps", sde_steps, 1)
    sde_runs = _check_int("sde_runs", sde_runs, 2)  # as run_real checks it
    execution = _prediction_execution(biased)  # as `predict` runs, recording every layer
    work = float(_QK_DRAW_UNITS * runs * layers * heads * d * d * qk)
    steps = float(inits * (layers + _INIT_STEPS))
    plans = [("network", TimeGrid.make(layers=layers), runs)]
    if sde:
        plans.append(("sde", TimeGrid(sde_steps, 1.0 / sde_steps), min(sde_runs, runs)))
    for scheme, grid, r in plans:
        b = plan_run(p, grid, r, scheme=scheme, initial=InitialState.tokens(np.ones((n, d))),
                     recording=Recording(range(grid.steps + 1), ()), execution=execution).budget()
        work, steps = work + b.work, steps + b.steps
    return work, steps


def real_budget(spec: RealSpec, inits: int = 32, inputs: int = 2, sde_steps: int = _SDE_STEPS,
                sde_runs: int = 32, sde: bool | None = None) -> Budget:
    """Memory and work of `run_real` before it runs. Memory: one model's float32 weights
    (`layers (4 + 2 mlp_ratio) width^2 + vocabulary width`; Llama's SwiGLU: 3 mlp_ratio) and one
    init's hidden states at every layer, plus per init its inputs' float64 tokens `n x width`
    and Gram matrices `(layers + 1) x n x n`; work (`budget.estimate_work`): the forward
    passes, `inits x inputs x layers x n x width x (n + (4 + 2 mlp_ratio) width)`, the
    predictions' (`real_run_cost`: the plans of the network's and the depth limit's
    simulations; the depth limit's only where it is drawn: `sde`, default `spec.depth_scaled`,
    as `run_real`); layer steps: `inits x (layers + INIT_STEPS)` forward blocks (the inputs of
    an init together) and the building of a model, and the predictions'."""
    inits, inputs = _check_int("inits", inits, 2), _check_int("inputs", inputs, 1)
    mlp_mats = 3 if spec.arch == "llama" else 2  # SwiGLU: gate, input and output projections
    n, w, L, m = spec.tokens, spec.width, spec.layers, 4 + mlp_mats * spec.mlp_ratio
    fixed = 4 * (L * m * w * w + spec.vocabulary * w + inputs * (L + 1) * n * w)
    per_init = 8 * inputs * (n * w + (L + 1) * n * n)
    runs = inits * inputs
    # the HuggingFace models' biases are zero at init: only torch-encoder's are mapped
    work, steps = real_run_cost(inits, inputs, L, n, w, spec.heads, spec.qk, sde_steps, sde_runs,
                                spec.arch == "torch-encoder" and spec.bias,
                                spec.depth_scaled if sde is None else sde)
    return Budget(f"this {spec.arch} run", fixed + per_init * inits, per_init, inits,
                  float(runs) * L * n * w * (n + m * w) + work,
                  f"{inits} inits x {inputs} inputs, {L} layers, width {w}, {n} tokens, "
                  f"vocabulary {spec.vocabulary}",
                  ("inits", "inputs", "layers", "width", "ctx", "vocab", "sde_runs"),
                  longer=("inits", "inputs", "layers", "width", "ctx", "sde_steps", "sde_runs"),
                  steps=steps)


def run_real(spec: RealSpec, inits: int = 32, inputs: int = 2, seed: int = 0, tol: float = _TOL,
             sde: bool | None = None, sde_steps: int = _SDE_STEPS, sde_runs: int = _SDE_RUNS,
             progress: Callable[[int], None] | None = None,
             images: torch.Tensor | None = None) -> RealRun:
    """Measure `inits` x `inputs` runs of the real network `spec` and predict them (module docstring).

    Args:
        spec: the architecture and its size.
        inits: independent initialisations.
        inputs: inputs per initialisation.
        seed: root seed of the inits and inputs.
        tol: the clustering tolerance of the statistics.
        sde: also draw the depth limit (default: when the init has one, `Mapping.has_limit`).
        sde_steps: Euler steps of the depth limit.
        sde_runs: embeddings (the first ones) the depth limit starts from.
        progress: called with the number of inits done, or None.
        images: what ViT reads (`make_inputs`), or None.

    Returns:
        A `RealRun`: the per-layer table (real, network and SDE sides), the mapping, the
        embeddings and the verdict (`agreement`).
    """
    inits = _check_int("inits", inits, 2)
    inputs = _check_int("inputs", inputs, 1)
    seed = _check_int("seed", seed, 0)
    sde_steps = _check_int("sde_steps", sde_steps, 1)
    sde_runs = _check_int("sde_runs", sde_runs, 2)
    _require(0 < tol < 1, "tol", "in (0, 1)", tol)
    t0 = time.perf_counter()
    per, x0, net = measure_real(spec, inits, inputs, seed, tol, progress, images)
    t_real = time.perf_counter() - t0
    radius2 = float((x0 ** 2).sum(-1).mean()) / spec.width
    m = map_network(net, radius2)
    use_sde = m.has_limit if sde is None else sde
    meta = {"spec": spec.to_dict(), "inits": inits, "inputs": inputs, "seed": seed,
            "init_note": _spec_law_note(spec),
            "seeds": {"init s": "derive_seed(seed, 1, s)", "inputs s": "derive_seed(seed, 2, s)",
                      "network": derive_seed(seed, 3), "sde": derive_seed(seed, 4)}}
    return predicted_run(per, x0, m, spec.layers, seed, tol, use_sde, sde_steps, sde_runs,
                         t_real, meta)


def predicted_run(per: pd.DataFrame, x0: torch.Tensor, m: Mapping, layers: int, seed: int,
                  tol: float, use_sde: bool, sde_steps: int, sde_runs: int, t_real: float,
                  meta: dict[str, Any]) -> RealRun:
    """The `RealRun` of measured real statistics `per` (`measure_real`'s per-init rows) and the
    predictions of `m` from the embeddings `x0`: the network at `derive_seed(seed, 3)` and, with
    `use_sde`, the depth limit at `derive_seed(seed, 4)` from the first `sde_runs` embeddings.

    Args:
        per: the real side's per-init statistics (`measure_real`).
        x0: the embeddings the predictions start from.
        m: the mapped model.
        layers: the network's depth.
        seed: the root seed.
        tol: the clustering tolerance of the statistics.
        use_sde: also draw the depth limit.
        sde_steps: Euler steps of the depth limit.
        sde_runs: embeddings the depth limit starts from.
        t_real: the real side's wall time, in seconds.
        meta: the caller's fields of the run's header.

    Returns:
        The `RealRun`, its `meta` completed with the common fields and its verdict
        (`agreement`).
    """
    frames = [summarise(per).assign(side="real", frac=lambda f: f.layer / layers)]
    t1 = time.perf_counter()
    _, pred = predict(m, x0, derive_seed(seed, 3), "network", tol=tol)
    frames.append(summarise(pred).assign(side="network", frac=lambda f: f.layer / layers))
    t_net = time.perf_counter() - t1
    t_sde = 0.0
    if use_sde:
        t2 = time.perf_counter()
        _, lim = predict(m, x0[:sde_runs], derive_seed(seed, 4), "sde", steps=sde_steps, tol=tol)
        frames.append(summarise(lim).assign(side="sde", frac=lambda f: f.layer / sde_steps))
        t_sde = time.perf_counter() - t2
    table = pd.concat(frames, ignore_index=True)[
        ["side", "layer", "frac", "stat", "mean", "se", "lo", "hi", "units"]]
    meta = {**meta, "tol": tol, "sde": bool(use_sde), "sde_steps": sde_steps,
            "sde_runs": min(sde_runs, len(x0)), "has_limit": m.has_limit,
            "params": m.params.to_dict(), "radius2": m.radius2,
            "approximated": list(m.law.notes),
            "wall_s": {"real": round(t_real, 2), "network": round(t_net, 2),
                       "sde": round(t_sde, 2)}}
    run = RealRun(table, m, meta, embeddings=x0)
    run.agreement = agreement(table)
    run.meta["agreement"] = run.agreement
    return run


def save_run(run: RealRun, path: Any) -> Any:
    """Write the run's table to Parquet with the header (kind, version, spec, seeds, agreement).

    Args:
        run: the run of `run_real`.
        path: the output file.

    Returns:
        The path written.
    """
    from ..io.store import header, write_parquet

    return write_parquet(run.table, path, header(KIND, **run.meta))
