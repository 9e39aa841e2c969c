"""The value path's product law, turned off (docs/real.md): GPT-2 at init with each head's
W_O^h W_V^h (as built) against the same networks with a Gaussian d x d value matrix of the same
entry variance per head and layer (`RealSpec(value_law='gaussian')`, the law the mapping gives
tokensde), and tokensde's discrete prediction (Gaussian: tokensde has no product law).

    python diagnostics/real_value_law.py [--layers 12] [--width 256] [--heads 4] [--inits 32]

Init s of both variants is built under the same seed (every other weight equal), so the
difference of the mean token cosine is paired per init; printed per layer with its standard
error, and the closed-form moments of the two value laws (tokensde.real.value).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

from tokensde.real import RealSpec, map_network
from tokensde.real.experiment import measure_real
from tokensde.real.predict import predict
from tokensde.real.value import value_moments
from tokensde.sim.rng import derive_seed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--inits", type=int, default=32)
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cos = {}
    for law in ("product", "gaussian"):
        spec = RealSpec(arch="gpt2", layers=args.layers, width=args.width, heads=args.heads,
                        ctx=args.ctx, value_law=law)
        per, x0, net = measure_real(spec, args.inits, args.inputs, args.seed)
        cos[law] = per["cos_mean"]
    m = map_network(net, None)
    _, pred = predict(m, x0, derive_seed(args.seed, 3), "network")
    net_cos = pred["cos_mean"]
    diff = cos["gaussian"] - cos["product"]
    se = diff.std(0, ddof=1) / math.sqrt(len(diff))
    law = m.law
    k = law.d // law.heads
    out = {"spec": {"layers": args.layers, "width": args.width, "heads": args.heads,
                    "ctx": args.ctx, "inits": args.inits, "inputs": args.inputs},
           "moments": {w: value_moments(k, law.d, law.var_o, law.var_v, w)
                       for w in ("product", "gaussian")},
           "layer": list(range(args.layers + 1)),
           "product": cos["product"].mean(0).round(5).tolist(),
           "gaussian": cos["gaussian"].mean(0).round(5).tolist(),
           "network": net_cos.mean(0).round(5).tolist(),
           "paired_diff": diff.mean(0).round(5).tolist(), "paired_se": se.round(5).tolist(),
           "max_abs_z": float(np.max(np.abs(diff.mean(0)[1:]) / se[1:])),
           "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
