"""Llama at init (docs/real.md, Llama): RoPE's effect and the gated block made dominant.

    python diagnostics/real_llama.py rope --width 64 --inits 500
    python diagnostics/real_llama.py whatif --width 64 --inits 500 --mlp-scale 6

`rope`: the same inits and inputs with the rotary embedding at the real positions and at position 0
(`RealSpec(rope=False)`), each against the same tokensde prediction, and their paired difference
per init. `whatif`: `RealSpec(mlp_scale=c)` against the mapped model and against two wrong kernels at
the same mlp_sigma (ReLU; the gated kernel at Llama's own q). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from tokensde.model.mlp.swiglu import swiglu_at
from tokensde.real.experiment import agreement, layer_threshold, measure_real, run_real
from tokensde.real.mapping import map_network
from tokensde.real.measure import summarise
from tokensde.real.models import RealSpec
from tokensde.real.predict import predict
from tokensde.sim.rng import derive_seed

KEYS = ("max_abs_z", "at_layer_z", "threshold", "agrees", "z")


def _against(real: pd.DataFrame, pred: dict) -> dict:
    t = pd.concat([real, summarise(pred).assign(side="network", frac=0.0)])
    a = agreement(t)
    return {k: a[k] for k in KEYS}


def rope(spec: RealSpec, inits: int, seed: int) -> dict:
    """Real positions against position 0, same inits and inputs, one prediction."""
    t0 = time.perf_counter()
    on, x0, net = measure_real(spec, inits, 2, seed)
    off, x0_off, _ = measure_real(replace(spec, rope=False), inits, 2, seed)
    assert torch.equal(x0, x0_off)
    t1 = time.perf_counter()
    m = map_network(net)
    _, pred = predict(m, x0, derive_seed(seed, 3), "network")
    out: dict = {}
    for name, per in (("rope", on), ("position 0", off)):
        out[name] = _against(summarise(per).assign(side="real", frac=0.0), pred)
        out[name]["cos_L"] = float(per["cos_mean"][:, -1].mean())
    diff = on["cos_mean"][:, 1:] - off["cos_mean"][:, 1:]
    se = diff.std(0, ddof=1) / math.sqrt(inits)
    z = diff.mean(0) / se
    out["paired rope - position 0"] = {
        "mean": diff.mean(0).tolist(), "se": se.tolist(), "z": z.round(3).tolist(),
        "max_abs_z": float(np.abs(z).max()), "max_abs_diff": float(np.abs(diff.mean(0)).max()),
        "threshold": layer_threshold(spec.layers)}
    out["wall_s"] = {"real (both)": round(t1 - t0, 1),
                     "network": round(time.perf_counter() - t1, 1)}
    return out


def whatif(spec: RealSpec, inits: int, seed: int) -> dict:
    """The mapped model and two wrong kernels at the same mlp_sigma, on the same real runs."""
    t0 = time.perf_counter()
    run = run_real(spec, inits, 2, seed)
    m, p = run.mapping, run.mapping.params
    out: dict = {"params": {"sigma": p.sigma, "mlp": p.mlp, "mlp_sigma": p.mlp_sigma},
                 "mapped": {k: run.agreement[k] for k in KEYS},
                 "wall_s": round(time.perf_counter() - t0, 1)}
    real = run.table[run.table.side == "real"]
    c = real[real.stat == "cos_mean"]
    out["real cos_L"] = float(c["mean"].iloc[-1])
    law = m.law
    q0 = law.d * law.shrink * law.var_1 / spec.mlp_scale ** 2  # Llama's own gate variance
    for name, mlp in (("relu kernel", "relu"), ("gated kernel at Llama's q", swiglu_at(q0))):
        _, pred = predict(replace(m, params=p.with_(mlp=mlp)), run.embeddings,
                          derive_seed(seed, 3), "network")
        out[name] = _against(real, pred)
        out[name]["cos_L"] = float(pred["cos_mean"][:, -1].mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("rope", "whatif"))
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--inits", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mlp-scale", type=float, default=6.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    spec = RealSpec(arch="llama", width=a.width, layers=a.layers, heads=4, ctx=64,
                    mlp_scale=a.mlp_scale if a.what == "whatif" else 1.0)
    print(json.dumps((rope if a.what == "rope" else whatif)(spec, a.inits, a.seed), indent=1))


if __name__ == "__main__":
    main()
