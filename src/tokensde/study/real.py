"""Figure `real`: a GPT-2 built from its configuration at random init, measured at every layer over
independent inits, against tokensde's discrete network at the same depth and its depth limit
(docs/real.md). Needs the `[real]` extra; without it the section says so and is skipped."""

from __future__ import annotations

from typing import Any

from ..io.report import Image, Section, Table, _interval
from .context import Context, FigureSpec, _saved_or

# (width, heads, ctx, layers, inits, inputs) per report size
_REAL_SIZES: dict[str, tuple[int, int, int, int, int, int]] = {
    "tiny": (32, 4, 16, 4, 8, 2), "quick": (64, 4, 32, 8, 16, 2), "full": (256, 4, 64, 12, 32, 2)}


def _real_data(ctx: Context) -> tuple[Any, bool]:
    """`(table, header)` of `run_real` for GPT-2 at the size of `ctx`, or None without the extra."""
    from ..io.store import read_parquet
    from ..real.models import has_transformers

    if not has_transformers():
        return None, False
    from ..real.experiment import KIND, run_real, save_run
    from ..real.models import RealSpec

    width, heads, n, layers, inits, inputs = _REAL_SIZES[ctx.size]
    spec = RealSpec(arch="gpt2", width=width, heads=heads, ctx=n, layers=layers, vocab=4096)

    def load(path: Any) -> tuple[Any, dict[str, Any]]:
        table, meta = read_parquet(path, KIND)
        return table.to_pandas(), meta

    def make() -> Any:
        return run_real(spec, inits, inputs, ctx.seed, sde_steps=4 * layers, sde_runs=inits)

    def save(run: Any, path: Any) -> None:
        save_run(run, path)

    def fresh(saved: tuple[Any, dict[str, Any]]) -> bool:
        meta = saved[1]
        return bool(meta.get("spec") == spec.to_dict() and meta.get("inits") == inits
                    and meta.get("seed") == ctx.seed)

    result, reused = _saved_or(ctx.data_path("real", ".parquet"), load, make, save, ctx, fresh)
    if not isinstance(result, tuple):  # just computed: read back what was saved
        result = load(ctx.data_path("real", ".parquet"))
    return result, reused


def _draw_real(ctx: Context, spec: FigureSpec, result: Any, reused: bool) -> Section:
    """Per-layer mean token cosine, real against predicted, with the agreement count."""
    if result is None:
        return Section(spec.name, spec.title, spec.claim, status="missing",
                       note='skipped: transformers not installed (pip install "tokensde[real]")')
    from ..plots.real import _plot_real

    table, meta = result
    a = meta["agreement"]
    png = _plot_real(table, ctx.figures / f"{spec.name}.png")
    c = table[table.stat == "cos_mean"]
    real = c[c.side == "real"].set_index("layer")
    net = c[c.side == "network"].set_index("layer")
    rows: list[list[Any]] = []
    for k in real.index:
        r, p = real.loc[k], net.loc[k]
        diff = float(r["mean"] - p["mean"])
        rows.append([int(k), float(r["mean"]), _interval(r["lo"], r["hi"]), float(p["mean"]),
                     _interval(p["lo"], p["hi"]), diff])
    s = meta["spec"]
    if "agrees" in a:  # the layer-adjusted verdict (Sidak threshold for the number of layers)
        ok = bool(a["agrees"])
        verdict = (f"largest |z| {a['max_abs_z']:.2f} at layer {a['at_layer_z']} against the "
                   f"Sidak threshold {a['threshold']:.2f} for {a['layers']} layers: "
                   + ("agrees" if ok else "disagrees"))
    else:  # a result saved before the verdict existed
        ok = a["fraction_within"] >= 0.95
        verdict = (f"{a['within']} of {a['layers']} layers within 3 combined standard errors "
                   "(saved before the layer-adjusted verdict)")
    note = (f"GPT-2 from GPT2Config (d = {s['width']}, {s['heads']} heads, {s['ctx']} tokens, "
            f"L = {s['layers']}), {meta['inits']} inits x {meta['inputs']} inputs (the init is "
            f"the unit): {verdict}; largest difference {a['max_abs_diff']:.4f} at layer "
            f"{a['at_layer']}. Approximated pieces: {', '.join(meta['approximated'])}.")
    return Section(spec.name, spec.title, spec.claim, status="ok" if ok else "disagrees",
                   note=note,
                   tables=[Table("real", "Mean token cosine per layer (95 % t over inits / runs)",
                                 ["layer", "real", "95%", "tokensde network", "95%",
                                  "real - tokensde"], rows)],
                   images=[Image(png, "Real GPT-2 at init against tokensde, against depth "
                                      "fraction.")],
                   provenance={"reused": reused, "seeds": meta["seeds"],
                               "params": meta["params"],
                               "wall_s": round(sum(meta["wall_s"].values()), 2),
                               "wall_s_parts": meta["wall_s"],
                               "command": f"tokensde figure real{ctx.size_flag} --out {ctx.out}"})
