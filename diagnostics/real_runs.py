"""Real Transformers at init against tokensde (docs/real.md): the runs behind its numbers.

    python diagnostics/real_runs.py --out /tmp/real_runs            # every case below
    python diagnostics/real_runs.py --out /tmp/real_runs --only gpt2-L12

Each case is one `tokensde.real.run_real` (S inits x B inputs); its table goes to
OUT/<case>.parquet, and one line per case (agreement of the mean token cosine with the discrete
prediction, the final cosine on both sides, wall times) to OUT/summary.jsonl.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tokensde.real import RealSpec, run_real, save_run
from tokensde.vit.data import load_dataset

G = {"arch": "gpt2", "width": 256, "heads": 4, "ctx": 64}
CASES: dict[str, dict] = {
    "gpt2-L12": {**G, "layers": 12},
    "gpt2-L24": {**G, "layers": 24},
    "gpt2-L48": {**G, "layers": 48},
    "gpt2-L96": {**G, "layers": 96},
    "gpt2-w768-L12": {**G, "width": 768, "heads": 12, "layers": 12},
    "gpt2-L12-noscale": {**G, "layers": 12, "residual_scaling": False},
    "gpt2-L12-value2": {**G, "layers": 12, "value_scale": 2.0},
    "torch-pre-L12": {"arch": "torch-encoder", "width": 256, "heads": 4, "ctx": 64, "layers": 12},
    "torch-pre-L12-nobias": {"arch": "torch-encoder", "width": 256, "heads": 4, "ctx": 64,
                             "layers": 12, "bias": False},
    "torch-post-L12": {"arch": "torch-encoder", "width": 256, "heads": 4, "ctx": 64,
                       "layers": 12, "norm_first": False},
    "bert-L12": {"arch": "bert", "width": 256, "heads": 4, "ctx": 64, "layers": 12},
    "bert-L24": {"arch": "bert", "width": 256, "heads": 4, "ctx": 64, "layers": 24},
    "bert-L48": {"arch": "bert", "width": 256, "heads": 4, "ctx": 64, "layers": 48},
    "vit-L12": {"arch": "vit", "width": 256, "heads": 4, "layers": 12},
    "gpt2-L12-nocentring": {**G, "layers": 12, "centring": False},
    "bert-L12-nocentring": {"arch": "bert", "width": 256, "heads": 4, "ctx": 64, "layers": 12,
                            "centring": False},
    "gpt2-L12-noqk": {**G, "layers": 12, "qk": False},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    ap.add_argument("--inits", type=int, default=32)
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sde-steps", type=int, default=128)
    ap.add_argument("--sde-runs", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(CASES):
        t0 = time.perf_counter()
        spec = RealSpec(**CASES[name])
        images = load_dataset("fashion-mnist").x_test if spec.arch == "vit" else None
        run = run_real(spec, args.inits, args.inputs, args.seed, sde_steps=args.sde_steps,
                       sde_runs=args.sde_runs, images=images)
        save_run(run, args.out / f"{name}.parquet")
        c = run.table[(run.table.stat == "cos_mean")]
        last = {s: float(c[c.side == s]["mean"].iloc[-1]) for s in c.side.unique()}
        line = {"case": name, **run.agreement, "final_cos": last, "has_limit": run.mapping.has_limit,
                "wall_s": run.meta["wall_s"], "total_s": round(time.perf_counter() - t0, 1)}
        print(json.dumps(line), flush=True)
        with open(args.out / "summary.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
