"""Shared pieces of the benchmark scripts: argument floors and the machine banner."""

from __future__ import annotations

import argparse
import os
import platform

import torch

import tokensde


def parser(doc: str, quick: str, n: int = 8, runs: int | None = None,
           rounds: int | None = None) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--n` tokens, `--threads` and `--quick` (`quick` says
    what the smoke run does), and `--runs` / `--rounds` when given a default; the description is
    the first line of `doc`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--n", type=int, default=n, help=f"tokens (default {n})")
    if runs is not None:
        ap.add_argument("--runs", type=int, default=runs, help=f"runs (default {runs})")
    if rounds is not None:
        ap.add_argument("--rounds", type=int, default=rounds,
                        help=f"interleaved rounds (default {rounds})")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--quick", action="store_true", help=f"a smoke run: {quick}")
    return ap


def check_common(ap: argparse.ArgumentParser, args: argparse.Namespace,
                 *checks: tuple[str, float, float]) -> None:
    """`require_at_least` for the options of `parser` that `args` has, and `checks`."""
    common = [(f"--{k}", getattr(args, k), 1) for k in ("n", "runs", "rounds", "threads")
              if hasattr(args, k)]
    require_at_least(ap, *common, *checks)


def require_at_least(ap: argparse.ArgumentParser, *checks: tuple[str, float, float]) -> None:
    """`ap.error` unless every `(option, value, least)` has `value >= least` (nan fails too)."""
    for name, value, least in checks:
        if not value >= least:
            ap.error(f"{name} must be >= {least}; got {value}")


def banner(threads: int, what: str) -> str:
    """Package and torch versions, processor, threads, `what`, and the load before the run."""
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    return (f"tokensde {tokensde.__version__}, torch {torch.__version__}, "
            f"{platform.processor() or platform.machine()}, threads {threads}, {what}; load "
            f"average before {load:.2f} (cores: {os.cpu_count()}), nice {os.nice(0)}\n")
