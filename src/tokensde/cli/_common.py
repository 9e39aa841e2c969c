"""Shared pieces of the command line: common options, JSON output, error reporting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer

from ..io.progress import progress_bar
from ..io.store import to_jsonable
from ..model.params import ParameterError

__all__ = ["JSON", "SEED", "SIZE", "WORKERS", "emit_json", "fail", "progress_bar", "to_jsonable",
           "user_errors"]

# options that several commands declare alike
JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
SEED = typer.Option(0, "--seed", help="Root seed (>= 0).")
SIZE = typer.Option(None, "--size", help="tiny | quick | full (overrides --quick / --full).")
WORKERS = typer.Option(2, "--workers", help="Processes for the heavy parts.")


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout."""
    typer.echo(json.dumps(to_jsonable(obj), indent=2))


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn ParameterError / ValueError / OSError (a path that cannot be read or written) and
    allocation failures into a one-line error and exit 2."""
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
