"""`tokensde reproduce`: every figure of the study, then one self-contained HTML report (a shell
over `tokensde.study.reproduce`).

    tokensde reproduce --quick --out results/quick     # 2 to 3 min on 2 cores (README main job)
    tokensde reproduce --full  --out results/full      # the publication size (see docs/report.md)
"""

from __future__ import annotations

from pathlib import Path

import typer

from ._common import JSON, SEED, WORKERS, YES, emit_json, user_errors
from ._options import size_option


def _reproduce_cmd(
    out: Path = typer.Option(..., "--out", help="Results directory; DIR/report.html is written."),
    quick: bool = typer.Option(False, "--quick", help="Quick size (the default): 2 to 3 min "
                               "on 2 cores; the estimate is printed first."),
    full: bool = typer.Option(False, "--full", help="Full size: about 48 min on 2 cores with "
                              "--skip vit,vit-depth (see docs/report.md)."),
    size: str = size_option("--quick / --full", "quick"),
    seed: int = SEED,
    workers: int = WORKERS,
    only: str = typer.Option(None, "--only", show_default="all",
                             help="Comma-separated figures."),
    skip: str = typer.Option(None, "--skip", help="Comma-separated figures to leave out (e.g. "
                             "vit,vit-depth, which are sized separately)."),
    force: bool = typer.Option(False, "--force", help="Replace a DIR/report.html that tokensde "
                               "did not write, and saved results made with other settings "
                               "(another --seed)."),
    json_out: bool = JSON,
    yes: bool = YES,
) -> None:
    """Run every figure (reusing saved results) and write DIR/report.html; exit 1 when a section
    failed (each failure is listed with what to do)."""
    from ..model.checks import ParameterError
    from ..study import STUDY_SIZES, reproduce

    with user_errors():
        if quick and full:
            raise ParameterError("choose one of --quick and --full")
        chosen = size or ("full" if full else "quick")
        if chosen not in STUDY_SIZES:
            raise ParameterError(f"size must be one of {', '.join(STUDY_SIZES)}; got {chosen!r}")
        from ..io.report import _check_report_path
        from ..io.store import check_output

        check_output(out, "--out", directory=True)
        _check_report_path(out / "report.html", "--out", force)
        names = _figures("--only", only)
        left_out = _figures("--skip", skip)
        path, sections, record = reproduce(out, chosen, seed, workers, names,
                                           log=lambda s: typer.echo(s, err=True), skip=left_out,
                                           force=force, yes=yes)
    failed = record["failed"]
    if json_out:
        emit_json({**record, "report": str(path)})
    else:
        width = max(len(s.key) for s in sections)
        for s in sections:
            typer.echo(f"{s.key:<{width}}  {s.status:<8} {s.provenance.get('wall_s', 0):7.1f} s"
                       + (f"  {s.note}" if s.status not in ("ok", "failed") else ""))
        typer.echo(f"report: {path}  ({record['wall_s'] / 60:.1f} min)")
    if failed:
        for key, note in failed.items():
            typer.echo(f"error: section {key} failed: {note}", err=True)
        typer.echo(f"error: {len(failed)} of {len(sections)} sections failed (the report marks "
                   "them)", err=True)
        raise typer.Exit(1)


def _figures(option: str, text: str | None) -> list[str] | None:
    """The comma-separated names of `option`; None when not given; an empty list is refused."""
    from ..model.checks import ParameterError

    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ParameterError(f"{option} must name at least one figure (leave the option out "
                             f"for all); got {text!r}")
    return names


def register(app: typer.Typer) -> None:
    """Add `tokensde reproduce` to `app`."""
    app.command("reproduce")(_reproduce_cmd)
