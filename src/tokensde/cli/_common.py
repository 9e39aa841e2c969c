"""Shared pieces of the command line: common options, JSON output, error reporting.

Nothing here imports numpy, torch or pandas at module level: `tokensde --help`, option parsing
and the theory commands start without them (tests/test_cli_startup.py), and each command
imports what it needs when its work starts."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer

if TYPE_CHECKING:
    from ..sim.budget import Budget, TimeModel

__all__ = ["JSON", "SEED", "WORKERS", "YES", "announce", "check_estimate", "check_output",
           "check_run", "emit_json", "fail", "flag", "progress_bar", "user_errors"]

# options that several commands declare alike
JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
SEED = typer.Option(0, "--seed", help="Root seed (>= 0).")
WORKERS = typer.Option(2, "--workers", help="Processes for the heavy parts.")
YES = typer.Option(False, "--yes", help="Run even when the time estimate exceeds "
                   "TOKENSDE_MAX_HOURS (24 h when unset).")

def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout."""
    from ..io.store import _to_jsonable

    typer.echo(json.dumps(_to_jsonable(obj), indent=2))


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "") -> Any:
    """`io.progress.progress_bar` (a context manager yielding `update(k)`), imported when a
    command starts its work."""
    from ..io.progress import progress_bar as bar

    return bar(total, desc, enabled, unit)


def check_output(path: Any, name: str, directory: bool = False) -> Any:
    """`io.store.check_output`: `path` can be written (a folder when `directory`), else
    ParameterError naming option `name`."""
    from ..io.store import check_output as check

    return check(path, name, directory=directory)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def flag(name: str) -> str:
    """The option that sets parameter `name`: 'runs' -> '--runs', 'mlp_width' -> '--mlp-width'."""
    return "--" + name.replace("_", "-")


def check_run(budget: Budget, device: str = "cpu", flags: dict[str, str] | None = None,
              yes: bool = False, model: TimeModel | None = None,
              announce_s: float | None = None) -> float:
    """Before any work: refuse (exit 2 under `user_errors`) a run whose memory exceeds what is
    available now or, unless `yes` (--yes), whose bounded time estimate exceeds
    TOKENSDE_MAX_HOURS (`sim.budget.check_budget` with `model`, default this machine's
    `io.calibration.time_model`), and print the estimate on stderr from `announce_s` seconds
    (default `sim.budget.ANNOUNCE_S`); `flags` spells the parameters that are not `--name`.
    Returns the seconds estimated."""
    from ..io.calibration import time_model
    from ..sim.budget import check_budget

    spell = flags or {}
    model = time_model(device) if model is None else model
    seconds = check_budget(budget, flag=lambda k: spell.get(k) or flag(k), model=model,
                           warn=False, yes=yes)
    announce(seconds, model.source, bound=not budget.bounded, least=announce_s)
    return seconds


def check_estimate(estimate: tuple[Budget, TimeModel] | None, yes: bool = False) -> float:
    """`check_run` of a `(budget, model)` pair timed by the command itself (the ViT commands,
    `tokensde.vit.estimate`), the estimate always printed; None (not estimated): nothing."""
    if estimate is None:
        return 0.0
    return check_run(estimate[0], yes=yes, model=estimate[1], announce_s=0.0)


def announce(seconds: float, source: str, bound: bool = False,
             least: float | None = None) -> None:
    """Print `estimate: about 3.2 min (source; ...)` on stderr when `seconds` >= `least`
    (default `sim.budget.ANNOUNCE_S`); `bound`: the runs may stop early, the estimate is an
    upper bound."""
    from ..sim.budget import ANNOUNCE_S, estimate_line

    if seconds >= (ANNOUNCE_S if least is None else least):
        typer.echo(estimate_line(seconds, source, bound), err=True)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None) -> None:
    typer.echo(f"warning: {message}", err=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn ParameterError / ValueError / OSError (a path that cannot be read or written) and
    allocation failures into a one-line error and exit 2; warnings are printed as one line,
    `warning: ...`, on stderr as they come."""
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        with _errors():
            yield


@contextmanager
def _errors() -> Iterator[None]:
    from ..model.checks import ParameterError

    try:
        yield
    except typer.Exit:
        raise
    except (ParameterError, ValueError, OSError, FloatingPointError) as err:
        fail(str(err))
    except (MemoryError, RuntimeError) as err:
        # torch reports a failed allocation as a RuntimeError (CPU) or OutOfMemoryError (CUDA)
        if not isinstance(err, MemoryError) and "memory" not in str(err).lower():
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        fail(f"out of memory: {first}; lower runs, n or d")


def depth_grid(time: float, dt: float) -> Any:
    """The `TimeGrid` of `--time` and `--dt` (a whole number of steps), every error naming the
    options as typed."""
    from ..model.checks import _check_real
    from ..model.params import _MAX_LAYERS, ParameterError, TimeGrid

    t = _check_real("--time", time, 0.0, strict=True)
    h = _check_real("--dt", dt, 0.0, strict=True)
    if h > t:
        raise ParameterError(f"--dt must be <= --time = {t:g}; got {h:g}")
    if t / h > _MAX_LAYERS:
        raise ParameterError(f"--time / --dt must be at most {_MAX_LAYERS} layers; got "
                             f"{t:g} / {h:g}")
    return TimeGrid.make(T=t, dt=h, exact=True)


def comma_numbers(name: str, text: str, kind: type[float] | type[int] = float) -> list[Any]:
    """The comma-separated numbers (or integers) of option `name`; ParameterError naming it when
    one does not parse or there are none.

    Args:
        name: the option, as typed (e.g. '--betas').
        text: its value.
        kind: float or int.

    Returns:
        The values, in order.
    """
    from ..model.checks import ParameterError

    what = "integers" if kind is int else "numbers"
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ParameterError(f"{name} must be comma-separated {what}; got {text!r}") from None
    if not values:
        raise ParameterError(f"{name} must name at least one value (comma-separated {what}); "
                             f"got {text!r}")
    return values
