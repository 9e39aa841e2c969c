"""The step-controlled threshold table of docs/token-noise.md ("With the step controlled"),
printed from the JSON files of `token_noise_phase.py --scheme sde`.

    python diagnostics/token_noise_step_table.py d3_b1.json d3_b2.json ... [--row 1.1]

Each file's rows are refitted with `study.noise_threshold.threshold_from_fluctuations` (the zero of
`1 / (n E r^2) = A + B / tau^2`, a 95 % t interval with the fit's degrees of freedom). Beside it:
`n E r^2` of the row at `--row` times `tau_c` (standard error
over runs), and the linear-fluctuation law `1 / (1 - (t / ratio)^2)` about the theory's `tau_c`
(`t = 1`) and about the network scheme's threshold at the same step (`t = 1 + shift`,
`study.noise_threshold.step_error`); a second table gives each fit's half-width, the SDE
scheme's own shift at its step, the rows and the simulations' wall time.
"""

from __future__ import annotations

import argparse
import json

from tokensde.study.noise_threshold import OrderEstimate, step_error, threshold_from_fluctuations


def law(ratio: float, t: float) -> float:
    """Linear fluctuations about a threshold at `t` tau_c: `n E r^2 = 1 / (1 - (t / ratio)^2)`."""
    return 1.0 / (1.0 - (t / ratio) ** 2)


def table_row(doc: dict, row_ratio: float) -> tuple[str, str]:
    """Two markdown rows from one `token_noise_phase.py` JSON document: the page's row (fit,
    ratio to the theory, the nearest row's `n E r^2` against both laws) and one with the
    interval's half-width, the SDE's own shift at the step, the rows and the wall time."""
    (th,) = doc["thresholds"]
    rows = [OrderEstimate(**{**e, "run_r": tuple(e["run_r"])}) for e in th["rows"]]
    est, lo, hi = threshold_from_fluctuations(rows)
    tau_c, b, d, att = th["tau_c"], th["beta"], rows[0].d, rows[0].attention
    near = min(rows, key=lambda e: abs(e.token_noise / tau_c - row_ratio))
    q = near.token_noise / tau_c
    net = step_error(b, d, near.dt, att, "network")
    net_law = f"{law(q, 1 + net):#.3g}" if q > 1 + net else "ordered"
    page = (f"| {d} | {b:g} | {tau_c:.4f} | {est:.3f} [{lo:.3f}, {hi:.3f}] | "
            f"{est / tau_c:.3f} [{lo / tau_c:.3f}, {hi / tau_c:.3f}] | "
            f"{near.n * near.r2:.2f} ± {near.n * near.r2_se:.2f} | {law(q, 1):.2f} | "
            f"{net_law} ({100 * net:+.1f} %) |")
    extra = (f"| {d} | {b:g} | {(hi - lo) / 2 / tau_c:.3f} | "
             f"{100 * step_error(b, d, near.dt, att, 'sde'):+.2f} % | "
             f"{', '.join(f'{e.token_noise / tau_c:g}' for e in rows)} | {rows[0].runs} | "
             f"{sum(e.wall_s for e in rows):.0f} |")
    return page, extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--row", type=float, default=1.1, help="ratio of the row read directly")
    a = ap.parse_args()
    out = []
    for fn in a.files:
        with open(fn) as f:
            out.append(table_row(json.load(f), a.row))
    print(f"| d | beta | theory tau_c | measured tau_c (95 % t) | / theory | n E r^2 at {a.row:g} "
          "tau_c | law about tau_c | law about the network's tau_c(dt) |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(p for p, _ in out))
    print("\n| d | beta | half-width / tau_c | sde shift at the step | rows (tau / tau_c) | runs | "
          "wall s |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(e for _, e in out))

if __name__ == "__main__":
    main()
