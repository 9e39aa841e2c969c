"""`tokensde sweep run|status|table|plot|kinds`: parameter sweeps that resume and never lose a cell."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from tqdm import tqdm

from ._common import YES, announce, emit_json, fail, user_errors

_sweep_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="Run TOML parameter sweeps (local process pool or Ray) into a "
                             "resumable Parquet table.")


class _Bar:
    """A tqdm bar of cells with the failure count; tqdm supplies the ETA."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: tqdm | None = None

    def start(self, counts: dict[str, int]) -> None:
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=counts["total"], initial=counts["skipped"], desc="cells",
                            unit="cell", file=sys.stderr, dynamic_ncols=True, disable=None)
            self.bar.set_postfix(failed=0)

    def cell(self, row: dict[str, Any], counts: dict[str, int]) -> None:
        if self.bar is not None:
            self.bar.set_postfix(failed=counts["failed"], refresh=False)
            self.bar.update(1)
            if row["status"] != "ok":
                self.bar.write(f"cell {row['index']} ({row['cell']}) failed: {row['error']}",
                               file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def _term_as_interrupt() -> Iterator[dict[str, Any]]:
    """Turn SIGTERM (from `timeout` or a batch scheduler) into KeyboardInterrupt while the sweep
    runs, so the pool is shut down and the workers stopped; yields which signal came."""
    got: dict[str, Any] = {"signal": "SIGINT", "number": signal.SIGINT}

    def on_term(signum: int, frame: Any) -> None:
        got.update(signal="SIGTERM", number=signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, old)


def _run_with_bar(start: Any, out: Path, table: str, unit: str, quiet: bool) -> None:
    """Run `start(bar)` (a sweep into `out` and its report) with a progress bar; on SIGINT or
    SIGTERM say what is saved and exit 128 + signal; print `out/table` and the summary."""
    from ..sweep.store import _SweepDir

    bar = _Bar(not quiet)
    with user_errors(), _term_as_interrupt() as got:
        try:
            summary = start(bar)
        except KeyboardInterrupt:
            bar.close()
            done = len(list(_SweepDir(out).cells_dir.glob("*.parquet")))
            fail(f"interrupted by {got['signal']}: {done} finished {unit} are saved in {out}; "
                 "run the same command again to resume", 128 + got["number"])
        finally:
            bar.close()
    typer.echo((out / table).read_text())
    typer.echo(f"{summary['ran']} {unit} trained, {summary['skipped']} reused, "
               f"{summary['failed']} failed in {summary['wall_s']:.0f} s; wrote "
               + ", ".join(summary["report"].values()))
    if summary["failed"]:
        raise typer.Exit(1)


def _run_resumable(config: Any, out: Path, workers: int = 1, backend: str = "local",
                  address: str | None = None, quiet: bool = False, resume: str | None = None,
                  on_cell: Callable[[dict[str, Any]], None] | None = None, yes: bool = False,
                  estimate: bool = True) -> dict[str, Any]:
    """`run_sweep` with a progress bar; an interrupt (SIGINT, SIGTERM) stops the cells in
    progress and exits with a one-line message that says how to resume: the command `resume`
    when given, else "run the same command again". `on_cell(row)` after each finished cell;
    `yes`: run cells estimated longer than TOKENSDE_MAX_HOURS; `estimate`: print the time
    estimate of the cells left on stderr (`announce`)."""
    from ..sweep.engine import run_sweep
    from ..sweep.store import _SweepDir

    bar = _Bar(not quiet)

    def each(row: dict[str, Any], counts: dict[str, int]) -> None:
        bar.cell(row, counts)
        if on_cell is not None:
            on_cell(row)

    with _term_as_interrupt() as got:
        try:
            return run_sweep(config, out, workers=workers, backend=backend, address=address,
                             on_start=bar.start, on_cell=each, yes=yes,
                             on_estimate=announce if estimate else None)
        except KeyboardInterrupt:
            bar.close()
            done = len(list(_SweepDir(out).cells_dir.glob("*.parquet")))  # counts may lag a write
            saved = "no cell had finished" if not done else f"{done} finished cells are saved"
            how = f"to resume, run: {resume}" if resume else "run the same command again to resume"
            fail(f"interrupted by {got['signal']}: {saved} in {out}; cells in progress were "
                 f"stopped: {how}", 128 + got["number"])
        finally:
            bar.close()


@_sweep_app.command("run")
def _run_cmd(
    config: Path = typer.Argument(..., help="TOML sweep file."),
    out: Path = typer.Option(..., "--out", help="Output directory (resumed if it exists)."),
    workers: int = typer.Option(1, "--workers", help="Parallel cells (1: in this process)."),
    backend: str = typer.Option("local", "--backend", help="local (process pool) or ray."),
    address: str = typer.Option(None, "--address", help="Ray cluster address (backend ray)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar nor time estimate."),
    yes: bool = YES,
) -> None:
    """Run or resume CONFIG into --out; print a JSON summary (exit 1 if some cells failed)."""
    with user_errors():
        summary = _run_resumable(config, out, workers, backend, address, quiet, yes=yes,
                                estimate=not quiet)
    emit_json(summary)
    if summary["failed"]:
        raise typer.Exit(1)


@_sweep_app.command("status")
def _status_cmd(out: Path = typer.Argument(..., help="Sweep output directory.")) -> None:
    """Cells done, failed and pending (JSON); checks every stored file."""
    from ..sweep.engine import sweep_status

    with user_errors():
        emit_json(sweep_status(out))


@_sweep_app.command("table")
def _table_cmd(
    out: Path = typer.Argument(..., help="Sweep output directory."),
    fmt: str = typer.Option("parquet", "--format", help="parquet, csv or json."),
    output: str = typer.Option(None, "--output", show_default="DIR/table.<format>",
                               help="Where to write ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --output file."),
) -> None:
    """Consolidate the finished cells into one table (one row per cell); print where it went."""
    from ..io.outputs import _guard_output
    from ..sweep.store import _render_table, export_table

    with user_errors():
        if output == "-":
            typer.echo(_render_table(out, fmt), nl=False)
            return
        if output is not None:
            _guard_output(output, "--output", force=force)
        emit_json(export_table(out, fmt, output))


@_sweep_app.command("plot")
def _plot_cmd(
    out: Path = typer.Argument(..., help="Sweep output directory (or its table file)."),
    out_dir: Path = typer.Argument(..., help="Where the figures go."),
    prefix: str = typer.Option(None, "--prefix", show_default="multi_token or phase, by kind",
                               help="File name prefix."),
) -> None:
    """Figures from a saved sweep (never simulates): for a multi_token sweep the multi-token
    figures and README tables, for a two_token sweep the phase diagram (or, with
    `beta_offset` cells, P_anti against beta - beta_c(d))."""
    from ..io.store import check_output
    from ..plots import multi, phase
    from ..sweep.store import _ok_rows

    with user_errors():
        check_output(out_dir, "OUT_DIR", directory=True)
        df = _ok_rows(out)
        if "p_anti" in df.columns:
            typer.echo(str(phase._plot_sweep(df, out_dir, prefix or "phase")))
            return
        for path in multi._make_all(df, out_dir, prefix or "multi_token"):
            typer.echo(str(path))
        typer.echo(multi._readme_tables(df), nl=False)


@_sweep_app.command("kinds")
def _kinds_cmd() -> None:
    """List every experiment kind that `sweep run` accepts, with its parameters (JSON)."""
    from ..sweep.kinds import _describe, kind_names

    with user_errors():
        emit_json([_describe(name) for name in kind_names()])


def register(app: typer.Typer) -> None:
    """Add the `sweep` command group to `app`."""
    app.add_typer(_sweep_app, name="sweep")
