"""Sweep configuration and cell identity: the TOML file, its grid, each cell's id and seed.

A sweep is a TOML file::

    name = "smoke"              # optional label
    kind = "multi_token"        # a registered kind (tokensde.sweep.kinds)
    runs = 64                   # optional: passed to every cell
    T = 6.0                     # optional: the horizon, passed to every cell
    seed = 20240611             # root seed
    [params]                    # fixed parameters of every cell
    tol = 1e-3
    [grid]                      # lists; the cells are their Cartesian product
    n = [3, 8]
    # ...or several [[grid]] blocks: the union of their products (a repeated cell runs once)

Each cell is normalised by its kind (defaults filled in, values validated) and serialised to a
canonical JSON string; its id is the SHA-256 of that string and its seed is
`derive_seed(seed, *four 32-bit words of the hash)` of the same string without the parameters
its kind declares measurement-only (`ExperimentKind.seed_free`, e.g. `step_runs`: they add
columns, not other numbers). Nothing else enters a cell's numbers, so a table does not depend on
worker count, order or backend (cells run with one torch thread).

A cell's row in the table is `HEAD_COLUMNS`, the cell's parameters, its statistics, then
`TAIL_COLUMNS`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.params import ParameterError, _check_int
from ..sim.rng import derive_seed

__all__ = ["Cell", "SweepConfig", "SweepError"]

_TOP_KEYS = ("name", "description", "kind", "module", "runs", "T", "seed", "params", "grid")
_HEAD_COLUMNS = ("cell", "index")
_TAIL_COLUMNS = ("status", "error", "seed", "version", "wall_s")
# Columns that legitimately differ between two runs of the same sweep.
_TIMING_COLUMNS = ("wall_s",)

_Row = dict[str, Any]


class SweepError(ValueError):
    """A sweep config or output directory that cannot be used; the message says why."""


@dataclass(frozen=True)
class Cell:
    """One point of the grid: canonical parameters, id (hash) and derived seed."""

    index: int
    id: str
    params: dict[str, Any]
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as stored in the manifest."""
        return {"index": self.index, "id": self.id, "seed": self.seed, "params": self.params}


def _canonical(kind: str, params: Mapping[str, Any]) -> str:
    """The canonical JSON string of a normalised cell (sorted keys, shortest float repr)."""
    try:
        return json.dumps({"kind": kind, "params": dict(params)}, sort_keys=True,
                          separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"cell parameters must be finite numbers, strings or booleans: "
                             f"{err}") from err


def _cell_seed(root: int, digest: str) -> int:
    """`derive_seed(root, w0, w1, w2, w3)` with `w_k` the first four 32-bit words of `digest`."""
    return derive_seed(root, *(int(digest[i:i + 8], 16) for i in range(0, 32, 8)))


def _grid_blocks(grid: Any, where: str) -> tuple[dict[str, tuple[Any, ...]], ...]:
    blocks = grid if isinstance(grid, list) else [grid]
    if not blocks or not all(isinstance(b, dict) and b for b in blocks):
        raise SweepError(f"{where}: grid must be a non-empty table of lists ([grid]) or "
                         "non-empty [[grid]] tables")
    out = []
    for b in blocks:
        for k, v in b.items():
            if not isinstance(v, list) or not v:
                raise SweepError(f"{where}: grid.{k} must be a non-empty list; got {v!r}")
        out.append({k: tuple(v) for k, v in b.items()})
    return tuple(out)


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: experiment `kind`, fixed `params`, grid blocks and the root `seed`."""

    kind: str
    seed: int
    grids: tuple[dict[str, tuple[Any, ...]], ...]
    params: dict[str, Any] = field(default_factory=dict)
    module: str | None = None
    name: str = "sweep"
    description: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "sweep config") -> SweepConfig:
        """Build from parsed TOML; unknown or conflicting keys are an error."""
        extra = sorted(set(data) - set(_TOP_KEYS))
        if extra:
            raise SweepError(f"{where}: unknown key(s) {', '.join(extra)} (allowed: "
                             f"{', '.join(_TOP_KEYS)})")
        for key in ("kind", "seed", "grid"):
            if key not in data:
                raise SweepError(f"{where}: missing required key {key!r}")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise SweepError(f"{where}: params must be a table ([params]) of fixed parameters; "
                             f"got {params!r}")
        params = dict(params)
        for key in ("runs", "T"):
            if key in data:
                if key in params:
                    raise SweepError(f"{where}: {key} given both at top level and in [params]")
                params[key] = data[key]
        grids = _grid_blocks(data["grid"], where)
        for b in grids:
            both = sorted(set(b) & set(params))
            if both:
                raise SweepError(f"{where}: {', '.join(both)} given both in a grid and as a "
                                 "fixed parameter")
        return cls(kind=str(data["kind"]), seed=_check_int("seed", data["seed"], 0), grids=grids,
                   params=params, module=data.get("module"), name=str(data.get("name", "sweep")),
                   description=str(data.get("description", "")))

    @classmethod
    def load(cls, path: str | os.PathLike) -> SweepConfig:
        """Read a TOML sweep file."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"sweep config {path} does not exist")
        if not path.is_file():
            raise SweepError(f"sweep config {path} is a directory; give the sweep's TOML file "
                             "(to resume a sweep, pass its TOML and the directory as --out)")
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise SweepError(f"{path} is not valid TOML: {err}") from err
        return cls.from_dict(data, str(path))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (as stored in the manifest)."""
        return {"name": self.name, "description": self.description, "kind": self.kind,
                "module": self.module, "seed": self.seed, "params": self.params,
                "grid": [{k: list(v) for k, v in b.items()} for b in self.grids]}

    def cells(self) -> list[Cell]:
        """Every distinct cell, in grid order, normalised by its kind and seeded."""
        from .kinds import get_kind

        kind = get_kind(self.kind, self.module)
        seen: dict[str, Cell] = {}
        for block in self.grids:
            keys = list(block)
            for values in itertools.product(*(block[k] for k in keys)):
                point = dict(zip(keys, values, strict=True))
                try:
                    norm = kind.normalize({**self.params, **point})
                except ParameterError as err:
                    raise ParameterError(f"cell {point}: {err}") from err
                digest = _digest(self.kind, norm)
                if digest[:16] not in seen:
                    seed = _cell_seed(self.seed, _digest(self.kind, kind.seed_params(norm)))
                    seen[digest[:16]] = Cell(len(seen), digest[:16], norm, seed)
        return list(seen.values())


def _digest(kind: str, params: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON string of a normalised cell."""
    return hashlib.sha256(_canonical(kind, params).encode()).hexdigest()


def _fingerprint(config: SweepConfig, cells: list[Cell]) -> str:
    """Identity of a sweep: hash of its kind, root seed and the ordered cell ids."""
    text = json.dumps({"kind": config.kind, "seed": config.seed, "cells": [c.id for c in cells]})
    return hashlib.sha256(text.encode()).hexdigest()[:16]
