"""Independent token noise beside common noise: the two phase diagrams on one figure
(docs/token-noise.md).

Left and middle: the uniform state of `M = I` under independent token noise `tau` against the
attention strength `beta`, the theory's linear threshold `tau_c(beta)`
(`tokensde.theory.token_noise`), the end `tau_s(beta)` of the limit's ordered branch where it
lies beyond `tau_c` (`beta > beta_*`: both branches stable on `(tau_c, tau_s)`), and measured
points with their intervals. Right: two tokens under common noise, where antipodal pairs attract
with positive probability iff `cosh 2 beta > d - 2` (`tokensde.theory.two_tokens.beta_c`). The
functions only draw what they are given and evaluate closed forms; `tau_s` is passed in (it is a
fixed-point computation, `tokensde.study.noise_threshold.ordered_branch_end`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..theory import token_noise as tn
from ..theory import two_tokens as tt
from .style import _COLORS, _TOKEN_COLORS, _new_figure, _save, _styled

__all__ = ["plot_token_noise_phase"]


def _tau_c(beta: float, d: int, attention: str) -> float:
    return 1.0 / math.sqrt(tn.critical_coupling(beta, d, attention))


def plot_token_noise_phase(path: str | Path, *, d: int = 2, attention: str = "usa",
                           branch_end: Sequence[tuple[float, float]] = (),
                           thresholds: Sequence[dict[str, Any]] = (),
                           hysteresis: Sequence[dict[str, Any]] = (),
                           step_curve: Sequence[tuple[float, float]] = (),
                           step_label: str = "", beta_max: float = 6.5,
                           d_max: int = 12) -> Path:
    """Draw the figure and write it to `path`.

    Args:
        path: where the figure goes (format from the suffix).
        d: dimension of the token-noise panels.
        attention: 'usa' or 'softmax' (token-noise panels).
        branch_end: `(beta, tau_s / tau_c)` pairs, the end of the limit's ordered branch (1 where
            the transition is continuous).
        thresholds: measured thresholds, dicts with `beta`, `tau` (estimate), `low`, `high` (an
            interval), `label` (the reading and its interval, for the legend) and optional
            `marker` / `color`.
        hysteresis: per-ratio outcomes of a two-start scan, dicts with `beta`, `ratio`
            (`tau / tau_c`), `apart` (True where the ordered and uniform starts differ beyond
            their interval) and `confirmed` (True where they still differ over a longer horizon
            in a run whose step moves the threshold by less than 1 %). `hysteresis_kind`
            sorts them: bistability only inside the limit's window and confirmed.
        step_curve: `(beta, tau_c(dt) / tau_c)`, the threshold of the scheme and step of the
            measured points (`theory.token_noise.step_threshold`), drawn in the middle panel.
        step_label: its legend entry.
        beta_max: right end of the `beta` axis.
        d_max: top of the `d` axis (common-noise panel).

    Returns:
        The path written.
    """
    bstar = tn.beta_star(d)
    betas = np.linspace(0.05, beta_max, 300)
    tau_c = np.array([_tau_c(b, d, attention) for b in betas])
    ends = sorted(branch_end)
    with _styled():
        fig = _new_figure(13.0, 4.4)
        ax0, ax1, ax2 = fig.subplots(1, 3, width_ratios=[1.0, 1.0, 0.85])
        # left: (beta, tau), log tau
        ax0.plot(betas, tau_c, color=_COLORS["theory"], lw=1.5,
                 label=r"$\tau_c(\beta)$: uniform state loses stability")
        top = tau_c.max() * 1.6
        ax0.fill_between(betas, tau_c, top, color="#dddddd", alpha=0.6, lw=0)
        ax0.fill_between(betas, 0.3, tau_c, color="#cde3f2", alpha=0.6, lw=0)
        if ends:
            be = np.array([b for b, _ in ends])
            te = np.array([q * _tau_c(b, d, attention) for b, q in ends])
            ax0.fill_between(be, [_tau_c(b, d, attention) for b in be], te, color="#f2c6a0",
                             lw=0, label=r"both branches stable (limit)")
            ax0.plot(be, te, color=_TOKEN_COLORS[1], lw=1.2, ls="--",
                     label=r"$\tau_s(\beta)$: ordered branch ends")
        ax0.axvline(bstar, color="black", lw=0.8, ls=":",
                    label=rf"$\beta_* = {bstar:.3f}$")
        seen: set[str] = set()
        for m in thresholds:
            lab = m.get("label", "measured")
            ax0.errorbar([m["beta"]], [m["tau"]], yerr=[[m["tau"] - m["low"]],
                         [m["high"] - m["tau"]]], fmt=m.get("marker", "o"), ms=3, capsize=2,
                         lw=1, color=m.get("color", _TOKEN_COLORS[0]),
                         label=None if lab in seen else lab)
            seen.add(lab)
        ax0.text(0.3, 0.45, "ordered", fontsize=8)
        ax0.text(0.3, tau_c[0] * 1.5 if tau_c[0] * 1.5 < top else top * 0.8, "disordered",
                 fontsize=8)
        ax0.set_yscale("log")
        ticks = [t for t in (0.5, 1, 2, 3, 5, 10, 20) if t < top]
        ax0.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax0.set_yticks([], minor=True)
        ax0.set(ylim=(0.3, top), xlim=(0, beta_max), xlabel=r"$\beta$",
                ylabel=r"token noise $\tau$ (log)",
                title=f"independent noise, {attention.upper() if attention == 'usa' else attention}"
                      f", d = {d}, M = I")
        ax0.legend(fontsize=6.5, loc="upper left")
        # middle: tau / tau_c(beta), where the intervals can be seen
        ax1.axhline(1.0, color=_COLORS["theory"], lw=1.5, label=r"$\tau_c$ (theory)")
        if ends:
            be = np.array([b for b, _ in ends])
            qe = np.array([q for _, q in ends])
            ax1.fill_between(be, 1.0, qe, color="#f2c6a0", lw=0,
                             label="both branches stable (limit)")
            ax1.plot(be, qe, color=_TOKEN_COLORS[1], lw=1.2, ls="--", label=r"$\tau_s / \tau_c$")
        ax1.axvline(bstar, color="black", lw=0.8, ls=":")
        if step_curve:
            ax1.plot([b for b, _ in step_curve], [q for _, q in step_curve], color="#7f8c8d",
                     lw=1.0, ls="-.", label=step_label or "threshold of the scheme at its step")
        seen = set()
        for m in thresholds:
            tc = _tau_c(m["beta"], d, attention)
            lab = m.get("label", "measured")
            ax1.errorbar([m["beta"]], [m["tau"] / tc], yerr=[[(m["tau"] - m["low"]) / tc],
                         [(m["high"] - m["tau"]) / tc]], fmt=m.get("marker", "o"), ms=3,
                         capsize=2, lw=1, color=m.get("color", _TOKEN_COLORS[0]),
                         label=None if lab in seen else lab)
            seen.add(lab)
        styles = {
            "bistable": dict(marker="s", s=26, color="#c0392b",
                             label="bistable: starts differ at two horizons, step < 1 %"),
            "unconfirmed": dict(marker="s", s=22, facecolors="none", edgecolors="#c0392b",
                                label="starts differ, one horizon (not confirmed)"),
            "slow": dict(marker="v", s=24, color="#8e44ad",
                         label="starts differ below tau_c: slow relaxation"),
            "outside": dict(marker="x", s=24, color="#d35400",
                            label="starts differ beyond the limit's window: not relaxed"),
            "agree": dict(marker="s", s=22, facecolors="none", edgecolors="#555555",
                          label="starts agree"),
        }
        kinds = [_hysteresis_kind(h, ends) for h in hysteresis]
        for kind, style in styles.items():
            pts = [h for h, k in zip(hysteresis, kinds, strict=True) if k == kind]
            if pts:
                ax1.scatter([h["beta"] for h in pts], [h["ratio"] for h in pts], **style)
        ax1.set(xlim=(0, beta_max), ylim=(0.93, 1.2), xlabel=r"$\beta$",
                ylabel=r"$\tau / \tau_c(\beta)$",
                title="the same, relative to the theory's threshold")
        ax1.legend(fontsize=5.5, loc="upper left")
        # right: common noise, two tokens
        ds = np.linspace(2, d_max, 300)
        bc = tt.beta_c(ds)
        ax2.plot(bc, ds, color=_COLORS["theory"], lw=1.5, label=r"$\cosh 2\beta = d - 2$")
        ax2.fill_betweenx(ds, bc, beta_max, color="#cde3f2", alpha=0.6, lw=0)
        ax2.fill_betweenx(ds, 0, bc, color="#dddddd", alpha=0.6, lw=0)
        ax2.text(0.15, d_max * 0.8, "pairs merge\nalmost surely", fontsize=8)
        ax2.text(beta_max * 0.45, 3.0, "antipodal pairs\nattract with\npositive probability",
                 fontsize=8)
        ax2.set(xlim=(0, beta_max), ylim=(2, d_max), xlabel=r"$\beta$", ylabel="d",
                title="common noise, two tokens, softmax")
        ax2.legend(fontsize=6.5, loc="lower right")
    return _save(fig, path)


def _plot_order_scan(path: str | Path, rows: Sequence[dict[str, Any]], *,
                    limit: Sequence[tuple[float, float]] = (), title: str = "") -> Path:
    """The stationary order parameter against `tau / tau_c`: left `r = |(1/n) sum_i x_i|` with
    95 % t bars per (n, start) (`t95 * se`; 2 standard errors where a row has no `t95`), the
    many-token limit's `r`, the theory's threshold `tau / tau_c = 1` and, where the rows carry
    `step`, the scheme's threshold at its step `1 + step`; right `n E r^2`, with the
    linear-fluctuation law `1 / (1 - (tau_c / tau)^2)` of the disordered side (log scale).

    Args:
        path: where the figure goes (format from the suffix).
        rows: dicts with `ratio` (`tau / tau_c`), `r`, `se`, `n_r2` (`n E r^2`), `n`, `start`
            and optional `t95` (the t quantile of the row's runs) and `step` (the step's
            relative shift of the threshold).
        limit: `(ratio, r)` points of the limit's ordered law (`mean_field_order`).
        title: the left panel's title.

    Returns:
        The path written.
    """
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((int(r["n"]), str(r["start"])), []).append(r)
    with _styled():
        fig = _new_figure(10.0, 4.0)
        ax0, ax1 = fig.subplots(1, 2)
        if limit:
            lq, lr = zip(*sorted(limit), strict=True)
            ax0.plot(lq, lr, color=_COLORS["theory"], lw=1.2, label="many-token limit")
        steps = sorted({round(float(r["step"]), 6) for r in rows if "step" in r})
        for ax in (ax0, ax1):
            ax.axvline(1.0, color=_COLORS["accent"], lw=1.0, ls="--",
                       label=r"theory: $\tau_c$" if ax is ax0 else None)
            for k, st in enumerate(steps):
                ax.axvline(1.0 + st, color="#7f8c8d", lw=0.8, ls="-.",
                           label="the scheme's threshold at its step" if ax is ax0 and k == 0
                           else None)
        for k, ((n, start), g) in enumerate(sorted(groups.items())):
            g = sorted(g, key=lambda r: r["ratio"])
            q = np.array([r["ratio"] for r in g])
            color = _TOKEN_COLORS[k % len(_TOKEN_COLORS)]
            marker = "o" if start == "uniform" else "s"
            bar = "95 % t" if all("t95" in r for r in g) else "2 SE"
            ax0.errorbar(q, [r["r"] for r in g], yerr=[r.get("t95", 2.0) * r["se"] for r in g],
                         fmt=marker, ms=4, capsize=2, lw=1, color=color,
                         mfc="none" if start != "uniform" else color,
                         label=f"n = {n}, {start} start ({bar})")
            ax1.plot(q, [r["n_r2"] for r in g], marker=marker, ms=4, lw=1, color=color,
                     mfc="none" if start != "uniform" else color, label=f"n = {n}, {start}")
            ax0.axhline(n ** -0.5, color=color, lw=0.6, ls=":")
        qs = np.linspace(1.02, max([1.6, *(r["ratio"] for r in rows)]), 100)
        ax1.plot(qs, 1 / (1 - qs**-2), color=_COLORS["theory"], lw=1.0, ls="-.",
                 label=r"linear fluctuations $1/(1 - \tau_c^2/\tau^2)$")
        ax0.set(xlabel=r"$\tau / \tau_c$", ylabel=r"$r = |\frac{1}{n}\sum_i x_i|$",
                ylim=(0, 1.02), title=title or "stationary order parameter")
        ax1.set(xlabel=r"$\tau / \tau_c$", ylabel=r"$n\,E r^2$", yscale="log",
                title="fluctuations (dotted left: $1/\\sqrt{n}$)")
        ax0.legend(fontsize=6.5, loc="upper right")
        ax1.legend(fontsize=6.5, loc="upper right")
    return _save(fig, path)


def _hysteresis_kind(point: dict[str, Any], branch_end: Sequence[tuple[float, float]]) -> str:
    """What a two-start outcome shows: 'agree'; 'slow' (the starts differ at or below `tau_c`,
    where the uniform state is unstable and the uniform start has only not ordered yet);
    'bistable' (they differ inside the limit's window `(1, tau_s / tau_c)` and `confirmed`);
    'unconfirmed' (inside it, not confirmed); 'outside' (they differ above `tau_s`, where the
    limit has no ordered law: a run not relaxed, or the step's bias).

    Args:
        point: a dict with `beta`, `ratio`, `apart` and optional `confirmed`.
        branch_end: `(beta, tau_s / tau_c)` pairs (1 where the transition is continuous);
            `tau_s` at `beta` is their linear interpolation (1 below the first).

    Returns:
        The kind.
    """
    if not point["apart"]:
        return "agree"
    if point["ratio"] <= 1.0:
        return "slow"
    ends = sorted(branch_end)
    q = (float(np.interp(point["beta"], [b for b, _ in ends], [v for _, v in ends], left=1.0))
         if ends else 1.0)
    if point["ratio"] >= q:
        return "outside"
    return "bistable" if point.get("confirmed", False) else "unconfirmed"
