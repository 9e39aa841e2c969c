"""Which bias terms the torch encoder's prediction needs: the real network measured once (torch's
default init, biases on), then predicted from the same embeddings and seed by the mapping without
biases, with linear2's bias only (`bias_sigma`) and with both (`bias_sigma`, `mlp_bias`).

    python diagnostics/real_bias_terms.py --inits 512 --width 128 --layers 12
    python diagnostics/real_bias_terms.py --paired --inits 200 --width 128 --layers 12

Prints, per model, the per-layer z of the mean token cosine, the largest |z| against the Sidak
threshold for the layers (docs/real.md), the cosine at the last layer and the wall time.
`--paired`: the real network alone, each init built once more with linear1's bias, linear2's bias
or both set to zero (every other weight and the inputs the same), and the mean over inits of the
paired differences of the mean token cosine (default init minus the one without), with their
standard errors: what each bias does to the real network.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from tokensde.real import RealSpec, build, hidden_states, make_inputs
from tokensde.real.experiment import agreement, measure_real
from tokensde.real.mapping import map_network, to_model
from tokensde.real.measure import directions_gram, gram_stats, summarise
from tokensde.real.predict import predict
from tokensde.sim.rng import derive_seed


def paired(spec: RealSpec, inits: int, inputs: int, seed: int) -> None:
    """Print the paired effects on the real network of zeroing each bias (module docstring)."""
    zero = {"linear1 bias": ("linear1",), "linear2 bias": ("linear2",),
            "both": ("linear1", "linear2")}
    cos: dict[str, list[np.ndarray]] = {k: [] for k in ("default", *zero)}
    t0 = time.perf_counter()
    for s in range(inits):
        x = make_inputs(spec, inputs, derive_seed(seed, 2, s))
        for name in cos:
            net = build(spec, derive_seed(seed, 1, s))
            with torch.no_grad():
                for block in net.blocks:
                    for lin in zero.get(name, ()):
                        getattr(block, lin).bias.zero_()
            h = hidden_states(net, x)
            cos[name].append(gram_stats(directions_gram(h))["cos_mean"].mean(0))
    base = np.stack(cos["default"])
    print(f"real network, {inits} inits x {inputs} inputs, {time.perf_counter() - t0:.1f} s; "
          f"mean token cosine at layer {spec.layers}: {base[:, -1].mean():.4f}")
    for name in zero:
        dl = base - np.stack(cos[name])
        mean, se = dl.mean(0), dl.std(0, ddof=1) / np.sqrt(inits)
        print(f"effect of the {name}: " + ", ".join(
            f"layer {k}: {mean[k]:+.4f} ({se[k]:.4f})" for k in range(1, spec.layers + 1)))


def main() -> None:
    """Parse the arguments, measure, predict three ways and print one line per model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inits", type=int, default=512)
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--norm-last", action="store_true")
    ap.add_argument("--no-mlp", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paired", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    spec = RealSpec(arch="torch-encoder", width=a.width, heads=a.heads, layers=a.layers,
                    norm_first=not a.norm_last, mlp=not a.no_mlp)
    if a.paired:
        paired(spec, a.inits, a.inputs, a.seed)
        return
    t0 = time.perf_counter()
    per, x0, net = measure_real(spec, a.inits, a.inputs, a.seed)
    print(f"real side: {a.inits} inits x {a.inputs} inputs, {time.perf_counter() - t0:.1f} s")
    law = map_network(net).law
    real = summarise(per).assign(side="real")
    variants = [("no biases", replace(law, var_b1=0.0, var_b2=0.0)),
                ("linear2 bias only", replace(law, var_b1=0.0)), ("both biases", law)]
    if a.no_mlp:  # linear2's weight is zero: linear1's bias acts on nothing (var_b1 = 0)
        variants = variants[:2]
    for name, variant in variants:
        t1 = time.perf_counter()
        _, pred = predict(to_model(variant), x0, derive_seed(a.seed, 3))
        t = pd.concat([real, summarise(pred).assign(side="network")])
        g = agreement(t)
        c = t[(t.stat == "cos_mean") & (t.layer == a.layers)].set_index("side")["mean"]
        print(f"{name}: max |z| {g['max_abs_z']:.2f} (threshold {g['threshold']:.2f}), z "
              f"{g['z']}, cosine at layer {a.layers}: real {c['real']:.4f}, network "
              f"{c['network']:.4f}; {time.perf_counter() - t1:.1f} s", flush=True)


if __name__ == "__main__":
    main()
