"""Options that several commands declare alike, each command with its own default: the horizon
`--time`, the stopping rule `--until`, the decision tolerance `--tol` and the study's `--size`.
One declaration each, so they read the same in every command's help."""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["DECISION_TOL", "size_option", "time_option", "tol_option", "until_option"]

# The decision tolerance of every command that stops runs once decided, and of
# `sim.options.StoppingRule.decided` (tests/test_cli_options.py checks that they agree): a pair
# is decided when 1 - |<x_i, x_j>| < tol. Looser tolerances count formations that later
# dissolve (docs/absorption.md, "Which tolerance").
DECISION_TOL = 1e-8
TOL_REASON = ("One tolerance for every command that decides runs: a looser one counts "
              "formations that later dissolve (docs/absorption.md).")


def size_option(overrides: str, default: str) -> Any:
    """--size of the study commands; `overrides`: the flags it replaces (e.g. '--quick');
    `default`: the size when neither is given."""
    return typer.Option(None, "--size", show_default=default,
                        help=f"tiny | quick | full; overrides {overrides}.")


def time_option(default: float | None, show: str | None = None, always_decided: bool = False
                ) -> Any:
    """--time, the horizon T in depth time, read the same by every command that runs layers;
    `always_decided`: the command stops every run once decided (it has no --until)."""
    when = "each run stops earlier" if always_decided else "with --until decided a run stops earlier"
    return typer.Option(default, "--time", show_default=show if show is not None else True,
                        help=f"Horizon T in depth time: no run goes past it ({when}, once "
                             "decided).")


def until_option(default: str, choices: tuple[str, ...] = ("horizon", "decided")) -> Any:
    """--until, the stopping rule: every run to --time, or each run until it is decided."""
    words = {"horizon": "horizon (every run to --time)",
             "decided": "decided (each run stops once decided at --tol, at the latest at --time)"}
    return typer.Option(default, "--until", help=" | ".join(words[c] for c in choices) + ".")


def tol_option(default: float = DECISION_TOL, reason: str = TOL_REASON, extra: str = "") -> Any:
    """--tol, the decision tolerance, with the reason for its default."""
    return typer.Option(default, "--tol", help="Decided (merged or antipodal) when "
                        f"1 - |<x_i, x_j>| < tol{extra}. {reason}")
