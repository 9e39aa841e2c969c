"""Shared pieces of the command line: JSON output, error reporting, progress bars."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import typer
from tqdm import tqdm

from ..params import ParameterError

# options that several commands declare alike
JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
SEED = typer.Option(0, "--seed", help="Root seed (>= 0).")
SIZE = typer.Option(None, "--size", help="tiny | quick | full (overrides --quick / --full).")
WORKERS = typer.Option(2, "--workers", help="Processes for the heavy parts.")


def to_jsonable(obj: Any) -> Any:
    """Convert numpy / torch scalars and arrays (and nan) to plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout."""
    typer.echo(json.dumps(to_jsonable(obj), indent=2))


def fail(message: str, code: int = 2) -> None:
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


@contextmanager
def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = ""
                 ) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr (hidden when disabled or stderr is not a terminal); yields `update(k)`."""
    if not enabled:
        yield lambda k: None
        return
    bar = tqdm(total=total, desc=desc, file=sys.stderr, unit=unit, unit_scale=True, leave=False,
               mininterval=0.5, disable=None)
    try:
        yield bar.update
    finally:
        bar.close()
