"""The `tokensde` command line: each sub-module registers its commands on one Typer app.

A thin shell over the library: `app` (the Typer application) and `main` (the console script)
are its only public names. Importing it loads no numpy, torch, pandas or matplotlib: each command
imports what it needs when its work starts, so `--help` and the theory commands start at once."""

from __future__ import annotations

import importlib

import typer

from .._version import __version__
from ._applies import enforce
from ._help import attach

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Token dynamics of deep Transformers at random initialisation: simulate, measure, show.",
)

# Sub-modules of tokensde.cli, each defining `register(app)`.
_COMMAND_MODULES = ("simulate", "two_token", "sweep", "vit", "real", "meanfield", "figure",
                   "reproduce", "token_noise")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tokensde {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the package version and exit."),
) -> None:
    """Token dynamics of deep Transformers at random initialisation."""


for _name in _COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_name}").register(app)
attach(app)  # an Examples section on every help page
enforce(app)  # an option typed outside its modes is refused (_applies.COMMANDS)


def main() -> None:
    """Console-script entry point.

    Returns:
        Nothing; the process exits with the command's status.
    """
    app()


__all__ = ["app", "main"]
