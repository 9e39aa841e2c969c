"""Weak order of tokensde's discrete GPT-2 model against its own SDE limit (docs/real.md).

    python diagnostics/real_weak_order.py run --cache /tmp/real_weak --minutes 33   # resumable
    python diagnostics/real_weak_order.py fit --cache /tmp/real_weak \\
        --out benchmarks/results/real-order --figure docs/real_weak_order.png

The model: `tokensde.real.map_network` of GPT-2 at width 256, 4 heads, 64 tokens (pre-norm,
causal, GELU MLP of width 1024, query/key forms redrawn every layer, Gaussian value law). Its
parameters do not depend on L, so the network of L layers (dt = 1/L) has the SDE as its limit.
The levels are L = 12, 24, 48, 96, 192. One change: the SDE draws one query/key form per head and
step (`qk_samples = 1`, where `predict` uses 2); the limit is the same. Float32 (2.7 times
faster than float64 here; the errors are 1e-3 and larger, rounding is 1e-7).

Design: coupled runs (`tokensde.sim.coupled_states`, pre-norm). Every level and
the reference share one Brownian path per run. The reference is the SDE (its Euler step is the
residual update) on 384 fine steps and on 192, Richardson-extrapolated: `2 f(384) - f(192)`.
Initial tokens: the embeddings of real GPT-2 inits. Init `i` is built under
`derive_seed(seed, 1, i)` and reads `INPUTS` token sequences drawn under `derive_seed(seed, 2, i)`;
one run per sequence. Runs go in blocks of `INITS_PER_BLOCK` inits; block `b` draws its noise
from `RunStreams(derive_seed(seed, 3, b), runs)` (query/key and MLP streams derived from it, as
`coupled_samples` does). Each block is cached as CACHE/block_<b>.npz, so `run` resumes.

Statistic: the mean over pairs i < j of the token cosine, at depth fractions f = k/12 (k = 1..12).
Error: `E(L) = E[net_L - (2 fine - half)]`, per run, averaged over the runs of an init; the init is
the independent unit (SE over inits). Reported at f = 1 and averaged over the 12 fractions.
Fit: `|E| = C L^-p` over the levels resolved at 3 SE (and on the side of the finest resolved
level's sign, `convergence.weak_levels_used`), least squares of log |E| on log L (`fit_order`), with a
t interval (dof = levels - 2) and a Poisson bootstrap over inits (400 replicates,
seed `derive_seed(seed, 5)`). Everything single-threaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from tokensde.analysis.clusters import upper_pairs
from tokensde.analysis.convergence import (
    RESOLVE_Z,
    fit_order,
    poisson_weights,
    weak_levels_used,
    weighted_means,
)
from tokensde.real import RealSpec, build, hidden_states, make_inputs, map_network
from tokensde.real.mapping import Mapping
from tokensde.real.measure import directions_gram
from tokensde.real.predict import initial_state
from tokensde.sim import CoupledState, OnLayers, coupled_states
from tokensde.sim.rng import MLP_STREAM, QK_STREAM, RunStreams, derive_seed

LEVELS = (12, 24, 48, 96, 192)
REF_STEPS = 384
FRACTIONS = 12
INPUTS = 4  # token sequences (runs) per init
INITS_PER_BLOCK = 4


def spec_of(args: argparse.Namespace) -> RealSpec:
    """The GPT-2 whose embeddings start the runs (its 12 blocks do not enter)."""
    return RealSpec(arch="gpt2", layers=12, width=args.width, heads=args.heads, ctx=args.ctx,
                    value_law="gaussian")


def model(args: argparse.Namespace) -> Mapping:
    """The mapped model, with one query/key draw per head and SDE step."""
    m = map_network(build(spec_of(args), 0))
    assert m.has_limit, "the mapped GPT-2 must have a depth limit"
    return dataclasses.replace(m, params=m.params.with_(qk_samples=1))


def cosine_mean(x: torch.Tensor) -> torch.Tensor:
    """Mean pairwise cosine of the token directions, per run."""
    return upper_pairs(directions_gram(x)).mean(-1)


def run_block(args: argparse.Namespace, m: Mapping, b: int) -> dict[str, np.ndarray]:
    """Block `b`: its inits' embeddings, then every level and both references, coupled."""
    spec = spec_of(args)
    x0 = []
    for i in range(b * INITS_PER_BLOCK, (b + 1) * INITS_PER_BLOCK):
        net = build(spec, derive_seed(args.seed, 1, i))
        h = hidden_states(net, make_inputs(spec, INPUTS, derive_seed(args.seed, 2, i)))
        x0.append(initial_state(m, h[:, 0]))
    x = torch.cat(x0).to(torch.float32)
    runs = x.shape[0]
    rs = RunStreams(derive_seed(args.seed, 3, b), runs)
    every = REF_STEPS // FRACTIONS
    net = np.empty((len(LEVELS), FRACTIONS, runs))
    fine, half = np.empty((FRACTIONS, runs)), np.empty((FRACTIONS, runs))

    def keep(j: int, s: CoupledState, rows: torch.Tensor) -> None:
        k = j // every - 1
        fine[k], half[k] = cosine_mean(s.fine).numpy(), cosine_mean(s.half).numpy()
        for a, L in enumerate(LEVELS):
            net[a, k] = cosine_mean(s.nets["gaussian", L]).numpy()

    coupled_states(x, m.params, 1.0, LEVELS, REF_STEPS, rs, ("gaussian",),
                   qk_rs=rs.derived(QK_STREAM), mlp_rs=rs.derived(MLP_STREAM),
                   recorder=OnLayers(range(every, REF_STEPS + 1, every), keep))
    return {"net": net, "fine": fine, "half": half, "x0_cos": cosine_mean(x).numpy()}


def run(args: argparse.Namespace) -> None:
    """Missing blocks in order until `--blocks` are done or `--minutes` have passed."""
    m = model(args)
    t_start = time.perf_counter()
    for b in range(args.blocks):
        path = args.cache / f"block_{b}.npz"
        if path.exists():
            continue
        if time.perf_counter() - t_start > 60 * args.minutes:
            print(f"stopping at block {b}: {args.minutes} min passed", flush=True)
            return
        t0 = time.perf_counter()
        out = run_block(args, m, b)
        np.savez(path, **out, seconds=time.perf_counter() - t0)
        e = out["net"][:, -1] - (2 * out["fine"][-1] - out["half"][-1])
        print(f"block {b}: {time.perf_counter() - t0:.1f} s, E(f=1) per level "
              f"{np.round(e.mean(-1), 4).tolist()}", flush=True)


def load(args: argparse.Namespace
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Per-init means of the differences `(inits, levels, FRACTIONS)`, of the reference and of
    fine - half `(inits, FRACTIONS)`, of the network `(inits, levels, FRACTIONS)`; and the total
    seconds of the blocks."""
    paths = sorted(args.cache.glob("block_*.npz"), key=lambda p: int(p.stem.split("_")[1]))
    if not paths:
        raise SystemExit("no blocks cached; run `run` first")
    diffs, refs, rich, nets, secs = [], [], [], [], 0.0
    for p in paths:
        z = np.load(p)
        ref = 2 * z["fine"] - z["half"]  # (F, runs)
        d = z["net"] - ref[None]  # (levels, F, runs)
        shape = (INITS_PER_BLOCK, INPUTS)
        diffs.append(d.reshape(*d.shape[:2], *shape).mean(-1).transpose(2, 0, 1))
        refs.append(ref.reshape(ref.shape[0], *shape).mean(-1).T)
        rich.append((z["fine"] - z["half"]).reshape(ref.shape[0], *shape).mean(-1).T)
        nets.append(z["net"].reshape(*d.shape[:2], *shape).mean(-1).transpose(2, 0, 1))
        secs += float(z["seconds"])
    return (np.concatenate(diffs), np.concatenate(refs), np.concatenate(rich),
            np.concatenate(nets), secs)


def summary(per_init: np.ndarray, lv: np.ndarray, w: np.ndarray) -> dict:
    """E, SE, resolution and the order fit for per-init errors `(inits, levels)`."""
    n = per_init.shape[0]
    e = per_init.mean(0)
    se = per_init.std(0, ddof=1) / math.sqrt(n)
    used = weak_levels_used(e, se)
    rows = [{"L": int(L), "E": float(e[k]), "se": float(se[k]),
             "z": float(e[k] / se[k]), "resolved": bool(abs(e[k]) >= RESOLVE_Z * se[k]),
             "used": bool(used[k])} for k, L in enumerate(lv)]
    out: dict = {"rows": rows, "levels_used": [int(L) for L in lv[used]]}
    boot = weighted_means(per_init.T, w)  # (B, levels)
    out["fit"] = order_fit(lv, e, boot, used)
    # without the finest level (its step count is the Richardson half grid's)
    out["fit_coarser"] = order_fit(lv, e, boot, used & (lv < lv.max()))
    # the local order per doubling, log2(E(L) / E(2L)), with a bootstrap interval
    out["pairs"] = []
    for k in range(len(lv) - 1):
        ratio = boot[:, k] / boot[:, k + 1]
        q = np.log2(ratio[ratio > 0])
        lo, hi = (np.quantile(q, [0.025, 0.975]) if len(q) > 0.9 * len(ratio)
                  else (math.nan, math.nan))
        est = math.log2(e[k] / e[k + 1]) if e[k] / e[k + 1] > 0 else math.nan
        out["pairs"].append({"L": int(lv[k]), "p": est, "boot_lo": float(lo),
                             "boot_hi": float(hi)})
    return out


def order_fit(lv: np.ndarray, e: np.ndarray, boot: np.ndarray, used: np.ndarray) -> dict | None:
    """`fit_order` over the levels `used` (None with fewer than 3)."""
    if used.sum() < 3:
        return None
    f = fit_order(lv[used], e[used], boot[:, used])
    return {"levels": [int(L) for L in lv[used]], "order": f.order, "se": f.se, "t_lo": f.ci_lo,
            "t_hi": f.ci_hi, "boot_lo": f.boot_lo, "boot_hi": f.boot_hi, "constant": f.constant}


def fit(args: argparse.Namespace) -> dict:
    """E(L) with SE at f = 1 and averaged over f; the fitted orders; written and printed."""
    d, ref, rich, net, secs = load(args)
    lv = np.array(LEVELS)
    w = poisson_weights(d.shape[0], 400, derive_seed(args.seed, 5))
    out = {"model": {"arch": "gpt2", "width": args.width, "heads": args.heads,
                     "tokens": args.ctx, "params": model(args).params.to_dict()},
           "design": {"levels": list(LEVELS), "ref_steps": REF_STEPS,
                      "reference": "2 SDE(384 steps) - SDE(192 steps), coupled",
                      "inits": int(d.shape[0]), "inputs_per_init": INPUTS,
                      "runs": int(d.shape[0] * INPUTS), "seed": args.seed,
                      "resolve_z": RESOLVE_Z, "bootstrap": 400, "block_seconds": secs},
           "reference": {"f1": float(ref[:, -1].mean()),
                         "f1_se": float(ref[:, -1].std(ddof=1) / math.sqrt(len(ref))),
                         "avg": float(ref.mean()),
                         "avg_se": float(ref.mean(1).std(ddof=1) / math.sqrt(len(ref)))},
           "fine_minus_half": {
               "f1": float(rich[:, -1].mean()),
               "f1_se": float(rich[:, -1].std(ddof=1) / math.sqrt(len(rich))),
               "avg": float(rich.mean()),
               "avg_se": float(rich.mean(1).std(ddof=1) / math.sqrt(len(rich)))},
           "network_f1": [float(v) for v in net[:, :, -1].mean(0)],
           "f1": summary(d[:, :, -1], lv, w),
           "avg": summary(d.mean(-1), lv, w)}
    print(json.dumps(out, indent=1))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "real_weak_order.json").write_text(json.dumps(out, indent=1) + "\n")
        # per init: E[net_L - (2 fine - half)] at each level and fraction (what the fit reads)
        np.savez_compressed(args.out / "per_init.npz", diff=d, levels=lv)
        lines = ["statistic,L,E,se,z,resolved,used"]
        for key in ("f1", "avg"):
            lines += [f"{key},{r['L']},{r['E']:.6g},{r['se']:.4g},{r['z']:.3f},"
                      f"{r['resolved']},{r['used']}" for r in out[key]["rows"]]
        (args.out / "real_weak_order.csv").write_text("\n".join(lines) + "\n")
    if args.figure is not None:
        figure(out, args.figure)
    return out


def figure(out: dict, path: Path) -> None:
    """|E(L)| against L, log-log, 95 % intervals; unresolved levels open; the fitted lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    floor = 1e-5  # where an interval that holds 0 is drawn down to
    for key, label, c, dx in (("f1", "at f = 1", "C0", 0.97), ("avg", "mean over f = k/12", "C1",
                                                                1.03)):
        s = out[key]
        for r in s["rows"]:
            lo, hi = r["E"] - 1.96 * r["se"], r["E"] + 1.96 * r["se"]
            a, b = sorted((abs(lo), abs(hi))) if lo * hi > 0 else (floor, max(abs(lo), abs(hi)))
            x = r["L"] * dx
            ax.plot([x, x], [a, b], color=c, lw=1.5)
            ax.plot(x, max(abs(r["E"]), floor), "o", color=c,
                    mfc=c if r["resolved"] else "white", ms=6)
        f = s["fit"]
        if f is not None:
            L = np.array(s["levels_used"], dtype=float)
            g = np.geomspace(L[0], L[-1], 20)
            ax.plot(g, f["constant"] * g ** (-f["order"]), "--", color=c,
                    label=f"{label}: p = {f['order']:.2f} [{f['boot_lo']:.2f}, "
                          f"{f['boot_hi']:.2f}]")
        else:
            ax.plot([], [], "--", color=c, label=f"{label}: fewer than 3 levels resolved")
    signs = {np.sign(r["E"]) for k in ("f1", "avg") for r in out[k]["rows"]}
    note = {-1.0: " (E < 0 at every L)", 1.0: " (E > 0 at every L)"}.get(next(iter(signs)), "")
    ax.set(xscale="log", yscale="log", xlabel="layers L",
           ylabel="|E(L)| = |E[net_L] - E[SDE]|, mean token cosine",
           title=f"tokensde GPT-2 model (d = {out['model']['width']}) against its SDE limit\n"
                 + (note.strip(" ()") if len(signs) == 1 else "signs differ")
                 + f", {out['design']['inits']} inits x {out['design']['inputs_per_init']}")
    ax.set_xticks(list(LEVELS), [str(L) for L in LEVELS])
    ax.minorticks_off()
    ax.plot([], [], "o", color="gray", mfc="white", label="open: not resolved at 3 SE")
    ax.plot([], [], "-", color="gray", label="bars: 95 % (1.96 SE over inits)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("phase", choices=("run", "fit"))
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=33.0,
                    help="start no new block after this many minutes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--figure", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.cache.mkdir(parents=True, exist_ok=True)
    {"run": run, "fit": fit}[args.phase](args)


if __name__ == "__main__":
    main()
