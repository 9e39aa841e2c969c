"""GPT-2 at init approaching its depth limit: the error against L with a fitted order (docs/real.md).

    python diagnostics/real_depth_order.py --cache /tmp/real_order real   # resumable, per init
    python diagnostics/real_depth_order.py --cache /tmp/real_order sde    # resumable, per block
    python diagnostics/real_depth_order.py --cache /tmp/real_order fit --figure docs/real_order.png

GPT-2 at width 768 / 12 heads / 64 tokens (the size where L = 12 is visibly short of the limit),
L = 12, 24, 48, 96, S inits x B inputs each; init s of depth L is built under
`derive_seed(seed, 1, L, s)` (independent across L, so the fitted points are independent) and reads
inputs drawn under `derive_seed(seed, 2, L, s)`. Each init's mean token cosine at every layer goes to
CACHE/real_L<L>_s<s>.npz with its embeddings. The depth limit: tokensde's SDE of the mapped model
(its parameters do not depend on L) on `steps` Euler steps, from the cached embeddings, in blocks
of runs cached as CACHE/sde_<steps>_b<block>.npz.

`fit`: at the common fractions f = k/12 (k = 1..12), per depth L the error
`E(L) = mean_f [SDE(f) - real_L(f)]` (signed; its standard error from the per-init spread and the
SDE runs' spread, the two independent), also at f = 1 and the sup over f; then
(1) `E = C L^-p`: weighted least squares of log E on log L (weights (E / se)^2) with a t interval
on p, and a bootstrap interval (Poisson weights over inits and SDE runs, `fit_order`);
(2) `m(L) = m_inf - C L^-p` on the real side alone (no reference: a floor, e.g. the reference's
own Euler bias, cannot bias p), by weighted nonlinear least squares with its covariance;
(3) the reference's own discretisation error, SDE(steps/2) - SDE(steps).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from scipy import optimize
from scipy import stats as st

from tokensde.analysis.convergence import fit_order, poisson_weights
from tokensde.real import RealSpec, build, hidden_states, make_inputs, map_network
from tokensde.real.measure import directions_gram, gram_stats
from tokensde.real.predict import predict
from tokensde.sim.rng import derive_seed

FRACTIONS = 12  # common fractions k/12 of every depth


def spec_of(args: argparse.Namespace, layers: int) -> RealSpec:
    """The GPT-2 of the experiment at depth `layers`."""
    return RealSpec(arch="gpt2", layers=layers, width=args.width, heads=args.heads, ctx=args.ctx)


def run_real_side(args: argparse.Namespace) -> None:
    """Every missing (L, init): build, run the inputs, cache cos_mean per layer + embeddings."""
    for s in range(args.inits):  # init-major: every depth grows together when interrupted
        for L in args.depths:
            path = args.cache / f"real_L{L}_s{s}.npz"
            if path.exists():
                continue
            t0 = time.perf_counter()
            spec = spec_of(args, L)
            net = build(spec, derive_seed(args.seed, 1, L, s))
            h = hidden_states(net, make_inputs(spec, args.inputs, derive_seed(args.seed, 2, L, s)))
            cos = gram_stats(directions_gram(h))["cos_mean"].mean(0)  # (L + 1,)
            np.savez(path, cos=cos, x0=h[:, 0].numpy(), seconds=time.perf_counter() - t0)
            print(f"L={L} init {s}: {time.perf_counter() - t0:.1f} s, cos(1) = {cos[-1]:.4f}",
                  flush=True)
            del net, h


def embeddings(args: argparse.Namespace, runs: int) -> torch.Tensor:
    """The first `runs` cached embeddings `(runs, n, d)`, float64 (init-major, depth order)."""
    out: list[torch.Tensor] = []
    for s in range(args.inits):
        for L in args.depths:
            path = args.cache / f"real_L{L}_s{s}.npz"
            if path.exists():
                out.append(torch.from_numpy(np.load(path)["x0"]).to(torch.float64))
            if sum(len(x) for x in out) >= runs:
                return torch.cat(out)[:runs]
    raise SystemExit(f"only {sum(len(x) for x in out)} cached embeddings; run `real` first")


def run_sde_side(args: argparse.Namespace) -> None:
    """The depth limit on each of `args.steps` Euler grids, `sde_runs` runs in cached blocks."""
    m = map_network(build(spec_of(args, args.depths[0]), 0))
    assert m.has_limit, "the mapped GPT-2 must have a depth limit"
    x0 = embeddings(args, args.sde_runs)
    for steps in args.steps:
        for b, start in enumerate(range(0, args.sde_runs, args.block)):
            path = args.cache / f"sde_{steps}_b{b}.npz"
            if path.exists():
                continue
            t0 = time.perf_counter()
            _, out = predict(m, x0[start:start + args.block], derive_seed(args.seed, 4, steps, b),
                             "sde", steps=steps)
            np.savez(path, cos=out["cos_mean"], seconds=time.perf_counter() - t0)
            print(f"SDE {steps} steps, block {b}: {time.perf_counter() - t0:.1f} s", flush=True)


def load_real(args: argparse.Namespace) -> dict[int, np.ndarray]:
    """Per depth, `(inits, FRACTIONS)` cos_mean at the common fractions (complete inits only)."""
    out = {}
    for L in args.depths:
        rows = [np.load(p)["cos"] for p in sorted(args.cache.glob(f"real_L{L}_s*.npz"))]
        if rows:
            out[L] = np.stack(rows)[:, np.arange(1, FRACTIONS + 1) * (L // FRACTIONS)]
    return out


def load_sde(args: argparse.Namespace, steps: int) -> np.ndarray:
    """`(runs, FRACTIONS)` of the SDE on `steps` steps at the common fractions."""
    parts = [np.load(p)["cos"] for p in sorted(args.cache.glob(f"sde_{steps}_b*.npz"))]
    if not parts:
        raise SystemExit(f"no SDE blocks for {steps} steps; run `sde` first")
    return np.concatenate(parts)[:, np.arange(1, FRACTIONS + 1) * (steps // FRACTIONS)]


def wls_power(L: np.ndarray, e: np.ndarray, se: np.ndarray, level: float = 0.95
              ) -> tuple[float, float, float, float]:
    """`e ~ C L^-p` by weighted least squares of log e on log L (weights (e / se)^2): p, its
    standard error (scaled by the residual variance when that exceeds 1, dof = len - 2), interval."""
    x, y, w = np.log(L), np.log(e), (e / se) ** 2
    A = np.stack([np.ones_like(x), x], 1)
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    beta = cov @ A.T @ (w * y)
    dof = len(L) - 2
    chi2 = float(w @ (y - A @ beta) ** 2)
    scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
    sp = math.sqrt(cov[1, 1] * scale)
    half = float(st.t.ppf(0.5 + level / 2, max(dof, 1))) * sp
    return -float(beta[1]), sp, -float(beta[1]) - half, -float(beta[1]) + half


def fit(args: argparse.Namespace) -> dict:
    """Errors against L and the fitted orders (module docstring), printed and returned."""
    real = load_real(args)
    steps = max(args.steps)
    sde = load_sde(args, steps)
    depths = np.array(sorted(real), dtype=float)
    rows = []
    lim, lim_se = sde.mean(0), sde.std(0, ddof=1) / math.sqrt(len(sde))
    for L in sorted(real):
        r = real[L]
        gap = lim - r.mean(0)
        se_avg = math.hypot(r.mean(1).std(ddof=1) / math.sqrt(len(r)),
                            sde.mean(1).std(ddof=1) / math.sqrt(len(sde)))
        se_1 = math.hypot(r[:, -1].std(ddof=1) / math.sqrt(len(r)), lim_se[-1])
        rows.append({"L": L, "inits": len(r), "E_avg": float(gap.mean()), "se_avg": se_avg,
                     "E_1": float(gap[-1]), "se_1": se_1, "sup": float(np.abs(gap).max()),
                     "real_1": float(r[:, -1].mean()), "real_avg": float(r.mean()),
                     "se_real_avg": float(r.mean(1).std(ddof=1) / math.sqrt(len(r)))})
    out: dict = {"width": args.width, "heads": args.heads, "ctx": args.ctx, "sde_steps": steps,
                 "sde_runs": len(sde), "sde_1": float(lim[-1]), "sde_avg": float(lim.mean()),
                 "sde_se_avg": float(sde.mean(1).std(ddof=1) / math.sqrt(len(sde))),
                 "rows": rows}
    e = np.array([r["E_avg"] for r in rows])
    se = np.array([r["se_avg"] for r in rows])
    if len(rows) >= 3 and np.all(e > 0):
        p, sp, lo, hi = wls_power(depths, e, se)
        rng = np.random.default_rng(args.seed)
        reps = []
        for _ in range(400):  # Poisson bootstrap over inits (per depth) and SDE runs
            w_sde = poisson_weights(len(sde), 1, int(rng.integers(2**31)))[0]
            ref = (w_sde @ sde.mean(1)) / w_sde.sum()
            rep = []
            for L in sorted(real):
                w = poisson_weights(len(real[L]), 1, int(rng.integers(2**31)))[0]
                rep.append(ref - (w @ real[L].mean(1)) / w.sum())
            reps.append(rep)
        boot = fit_order(depths, e, np.array(reps))
        out["fit_power"] = {"p": p, "se": sp, "lo": lo, "hi": hi, "ols_p": boot.order,
                            "boot_lo": boot.boot_lo, "boot_hi": boot.boot_hi}
    m = np.array([r["real_avg"] for r in rows])
    sm = np.array([r["se_real_avg"] for r in rows])
    if len(rows) >= 4:
        try:
            popt, pcov = optimize.curve_fit(lambda x, a, c, q: a - c * x ** (-q), depths, m,
                                            p0=(m[-1], 1.0, 1.0), sigma=sm, absolute_sigma=True,
                                            maxfev=20000)
            perr = np.sqrt(np.diag(pcov))
            out["fit_floor"] = {"m_inf": float(popt[0]), "m_inf_se": float(perr[0]),
                                "p": float(popt[2]), "p_se": float(perr[2])}
        except RuntimeError as err:
            out["fit_floor"] = {"error": str(err)}
    if len(args.steps) > 1:
        lo_steps = min(args.steps)
        coarse = load_sde(args, lo_steps)
        out["reference_bias"] = {
            "steps": [lo_steps, steps],
            "diff_avg": float(coarse.mean() - sde.mean()),
            "se": math.hypot(coarse.mean(1).std(ddof=1) / math.sqrt(len(coarse)),
                             out["sde_se_avg"])}
    print(json.dumps(out, indent=1))
    (args.cache / "fit.json").write_text(json.dumps(out, indent=1))
    if args.figure is not None:
        figure(args, real, sde, out)
    return out


def figure(args: argparse.Namespace, real: dict[int, np.ndarray], sde: np.ndarray, out: dict
           ) -> None:
    """Left: mean cosine against depth fraction for each L and the SDE; right: the cosine averaged
    over the common fractions against L (real) and the SDE's steps N, with the real-side fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = np.arange(1, FRACTIONS + 1) / FRACTIONS
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for L, r in sorted(real.items()):
        a.errorbar(f, r.mean(0), 2 * r.std(0, ddof=1) / math.sqrt(len(r)), marker="o", ms=3,
                   capsize=2, label=f"GPT-2 L = {L} ({len(r)} inits)")
    lim, lse = sde.mean(0), sde.std(0, ddof=1) / math.sqrt(len(sde))
    a.fill_between(f, lim - 2 * lse, lim + 2 * lse, color="k", alpha=0.2)
    a.plot(f, lim, "k--",
           label=f"tokensde SDE (Euler, {out['sde_steps']} steps, {len(sde)} runs)")
    a.set(xlabel="depth fraction k / L", ylabel="mean token cosine",
          title=f"GPT-2 at init, d = {args.width}, {args.heads} heads, {args.ctx} tokens")
    a.legend(fontsize=7)
    rows = out["rows"]
    L = np.array([r["L"] for r in rows], dtype=float)
    m = np.array([r["real_avg"] for r in rows])
    sm = np.array([r["se_real_avg"] for r in rows])
    b.errorbar(L, m, 2 * sm, marker="o", capsize=3, label="GPT-2 at L layers")
    steps = sorted(args.steps)
    sde_avg = [load_sde(args, n).mean(1) for n in steps]
    b.errorbar(steps, [v.mean() for v in sde_avg],
               [2 * v.std(ddof=1) / math.sqrt(len(v)) for v in sde_avg], marker="s", ls="--",
               color="k", capsize=3, label="tokensde SDE, Euler on N steps (x = N)")
    if "fit_floor" in out and "p" in out["fit_floor"]:
        ff = out["fit_floor"]
        grid = np.geomspace(L[0], 4 * L[-1], 50)
        c = float(np.average((ff["m_inf"] - m) * L ** ff["p"], weights=sm ** -2))
        b.plot(grid, ff["m_inf"] - c * grid ** (-ff["p"]), ":", color="C0",
               label=f"fit m_inf - C L^-p: p = {ff['p']:.2f} +- {ff['p_se']:.2f}")
        b.axhspan(ff["m_inf"] - ff["m_inf_se"], ff["m_inf"] + ff["m_inf_se"], color="C0",
                  alpha=0.1, label=f"m_inf = {ff['m_inf']:.3f} +- {ff['m_inf_se']:.3f}")
    b.set(xscale="log", xlabel="layers L (real) or Euler steps N (SDE)",
          ylabel="mean token cosine, averaged over f = k/12",
          title="resolution in depth: neither has converged (bars: 2 SE)")
    b.set_xticks([12, 24, 48, 96, 192, 384], ["12", "24", "48", "96", "192", "384"])
    b.minorticks_off()
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.figure, dpi=110)
    print(f"wrote {args.figure}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("phase", choices=("real", "sde", "fit"))
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--depths", type=int, nargs="+", default=[12, 24, 48, 96])
    ap.add_argument("--inits", type=int, default=32)
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--steps", type=int, nargs="+", default=[96],
                    help="SDE Euler steps (multiples of 12); the largest is the reference")
    ap.add_argument("--sde-runs", type=int, default=128)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure", type=Path, default=None)
    args = ap.parse_args()
    if any(L % FRACTIONS for L in args.depths) or any(s % FRACTIONS for s in args.steps):
        ap.error(f"--depths and --steps must be multiples of {FRACTIONS}")
    torch.set_num_threads(1)
    args.cache.mkdir(parents=True, exist_ok=True)
    {"real": run_real_side, "sde": run_sde_side, "fit": fit}[args.phase](args)


if __name__ == "__main__":
    main()
