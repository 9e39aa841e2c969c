"""Sweeps: a kind over a parameter grid, run cell by cell on a local pool or Ray.

A sweep is a TOML file naming a registered kind (`kind_names()`); `run_sweep` runs or resumes it
into a directory, `sweep_status` and `load_table` read it back. Loaded on first use. Names not
in `__all__` are internal.

Modules: `config` (the TOML file, cell ids and seeds), `backends` (one cell; a local pool or
Ray), `store` (the sweep directory and its tables), `engine` (running or resuming a sweep),
`kinds` (the registry of kinds), `two_token` (the two-token kind).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .config import SweepConfig, SweepError
    from .engine import run_sweep, sweep_status
    from .kinds import ExperimentKind, experiment, get_kind, kind_names, register
    from .store import export_table, load_table, read_table
    from .two_token import grid_config

__all__ = [
    "ExperimentKind",
    "SweepConfig",
    "SweepError",
    "experiment",
    "export_table",
    "get_kind",
    "grid_config",
    "kind_names",
    "load_table",
    "read_table",
    "register",
    "run_sweep",
    "sweep_status",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
