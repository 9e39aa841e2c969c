"""Shared pieces of the benchmark scripts: argument floors and the machine banner."""

from __future__ import annotations

import argparse
import os
import platform

import torch

import tokensde


def parser(doc: str, quick: str, n: int = 8) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--n` tokens, `--threads` and `--quick` (`quick` says
    what the smoke run does); the description is the first line of `doc`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--n", type=int, default=n, help=f"tokens (default {n})")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--quick", action="store_true", help=f"a smoke run: {quick}")
    return ap


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
