"""`tokensde figure NAME`: one figure of the study from its saved result (a shell over
`tokensde.study`: the result is computed and saved under `OUT/data/` only when absent)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ._common import JSON, SEED, WORKERS, YES, emit_json, user_errors
from ._options import size_option

_DEFAULT_OUT = Path("results")


def _figure_cmd(
    name: str = typer.Argument(None, help="Figure name (see --list)."),
    out: Path = typer.Option(_DEFAULT_OUT, "--out", help="Results directory (data/ and figures/)."),
    quick: bool = typer.Option(False, "--quick", help="Quick size instead of the full one."),
    size: str = size_option("--quick", "full"),
    seed: int = SEED,
    workers: int = WORKERS,
    list_: bool = typer.Option(False, "--list", help="List the figures and exit."),
    force: bool = typer.Option(False, "--force", help="Replace a saved result made with other "
                               "settings (another --seed)."),
    json_out: bool = JSON,
    yes: bool = YES,
) -> None:
    """Draw one figure from its saved result (computing and saving the result if absent)."""
    from ..model.checks import ParameterError, _check_choice
    from ..study import FIGURES, Context

    if list_:
        _list(json_out)
        return
    with user_errors():
        if name is None:
            raise ParameterError("NAME is required: one of " + ", ".join(FIGURES))
        _check_choice("NAME", name, tuple(FIGURES))
        from ..io.store import check_output

        check_output(out, "--out", directory=True)
        ctx = Context(out, size or ("quick" if quick else "full"), seed, workers,
                      log=lambda s: typer.echo(s, err=True), yes=yes, force=force)
        t0 = time.perf_counter()
        sec = FIGURES[name].build(ctx)
    files = [str(i.path) for i in sec.images]
    result = {"figure": name, "size": ctx.size, "files": files,
              "tables": {t.key: len(t.rows) for t in sec.tables},
              "reused": sec.provenance.get("reused"), "wall_s": round(time.perf_counter() - t0,
                                                                      2)}
    if json_out:
        emit_json(result)
        return
    for f in files:
        typer.echo(f)
    if sec.note:
        typer.echo(sec.note)


def _list(json_out: bool) -> None:
    from ..study import FIGURES

    if json_out:
        emit_json({n: {"title": s.title, "claim": s.claim} for n, s in FIGURES.items()})
        return
    width = max(map(len, FIGURES))
    for n, s in FIGURES.items():
        typer.echo(f"{n:<{width}}  {s.title}")


def register(app: typer.Typer) -> None:
    """Add `tokensde figure` to `app`."""
    app.command("figure")(_figure_cmd)
