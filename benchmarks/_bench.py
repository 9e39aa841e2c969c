"""Shared pieces of the benchmark scripts: argument floors and the machine banner."""

from __future__ import annotations

import argparse
import os
import platform

import torch

import tokensde


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
