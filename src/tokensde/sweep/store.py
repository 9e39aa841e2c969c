"""The sweep directory: manifest, one Parquet part per finished cell, consolidated table.

Layout of an output directory (the unit of atomicity is one cell)::

    DIR/sweep.json              manifest: config, every cell's id, parameters and seed
    DIR/cells/<id>.parquet      one row per finished cell (ok or error), written atomically
    DIR/table.parquet           consolidated table, rebuilt from cells/ after `run` and by `table`
    DIR/.lock                   flock held by the running sweep

A truncated, foreign or unexpected file is an error naming it and its remedy; nothing is
overwritten silently.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..io.store import (
    StoreError,
    _check_meta,
    atomic_write,
    check_output,
    header,
    read_parquet,
    write_parquet,
)
from ..model.params import _check_choice
from .config import _HEAD_COLUMNS, _TAIL_COLUMNS, Cell, SweepConfig, SweepError, _fingerprint, _Row

_KIND_SWEEP = "tokensde.sweep"
_KIND_CELL = "tokensde.sweep-cell"
_KIND_TABLE = "tokensde.sweep-table"
MANIFEST, CELLS, TABLE, LOCK = "sweep.json", "cells", "table.parquet", ".lock"
_FORMATS = ("parquet", "csv", "json")


class _ManifestReadError(StoreError):
    """DIR/sweep.json exists but is not JSON (truncated or corrupt)."""


_REBUILD = ("its finished cells in cells/ are kept: run `tokensde sweep run CONFIG --out {dir}` "
           "with the sweep's TOML file to rebuild the manifest (the cells are checked against "
           "it and skipped)")
_TABLE_REMEDY = ("delete it: `tokensde sweep table {dir}` rebuilds it from the cells (cells/), "
                "which are kept")


def _is_tmp(p: Path) -> bool:
    return p.name.startswith(".") and p.name.endswith(".tmp")


def _concat(tables: list[Any]) -> Any:
    """Concatenate one-row tables, promoting numeric types; a column whose type differs between
    cells in another way (a number in one, 'auto' in another) becomes text."""
    import pyarrow as pa

    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    types: dict[str, set[Any]] = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, set()).add(f.type)
    mixed = {k for k, v in types.items() if len(v - {pa.null()}) > 1}

    def text(col: Any) -> Any:
        return pa.array([v if isinstance(v, str) or v is None else json.dumps(v)
                         for v in col.to_pylist()], pa.string())

    fixed = [pa.table({n: text(t.column(n)) if n in mixed else t.column(n)
                       for n in t.column_names}) for t in tables]
    return pa.concat_tables(fixed, promote_options="permissive")


class _SweepDir:
    """An output directory: manifest, one Parquet part per finished cell, consolidated table."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.manifest_path = self.path / MANIFEST
        self.cells_dir = self.path / CELLS
        self.table_path = self.path / TABLE

    def exists(self) -> bool:
        """True when the directory holds a manifest."""
        return self.manifest_path.exists()

    def _has_cells(self) -> bool:
        return self.cells_dir.is_dir() and any(not _is_tmp(p) for p in self.cells_dir.iterdir())

    def _hint(self) -> str:
        return "; " + _REBUILD.format(dir=self.path) if self._has_cells() else ""

    def manifest(self) -> dict[str, Any]:
        """The manifest; StoreError if unreadable or foreign (saying how to rebuild it when
        finished cells are there)."""
        if not self.path.is_dir():
            raise FileNotFoundError(f"sweep directory {self.path} does not exist")
        if not self.exists():
            raise SweepError(f"{self.path} is not a sweep directory (no {MANIFEST})"
                             + self._hint())
        try:
            meta = json.loads(self.manifest_path.read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise _ManifestReadError(f"{self.manifest_path} is not a readable sweep manifest "
                                     f"(truncated or corrupt?): {err}{self._hint()}") from err
        meta = _check_meta(meta, _KIND_SWEEP, str(self.manifest_path))
        if not isinstance(meta.get("cells"), list) or "fingerprint" not in meta:
            raise StoreError(f"{self.manifest_path} lacks the cell list or fingerprint")
        return meta

    def check_intact(self, meta: dict[str, Any], counts: dict[str, int]) -> None:
        """SweepError when the directory, its manifest or cells/ vanished (or the manifest was
        replaced) while the sweep ran: its cells could not be saved, so it must not report
        success."""
        where = ("the directory" if not self.path.is_dir() else f"its {MANIFEST}"
                 if not self.manifest_path.is_file() else f"its {CELLS}/"
                 if not self.cells_dir.is_dir() else None)
        if where is None:
            try:
                same = json.loads(self.manifest_path.read_text()).get("fingerprint")
            except (OSError, ValueError, AttributeError):
                same = None
            if same != meta["fingerprint"]:
                where = f"its {MANIFEST} (replaced or damaged)"
        if where is not None:
            raise SweepError(f"sweep directory {self.path}: {where} vanished while the sweep ran "
                             f"({counts['ran']} cells of this run had been saved there); the "
                             "remaining cells were stopped. Run the same command again to "
                             "start over (cells still in cells/ are reused)")

    def orphans_of(self, fp: str) -> bool:
        """True when cells/ holds only finished cells of the sweep with fingerprint `fp` (so a
        lost manifest can be rebuilt from that sweep's config); an unreadable cell is an error
        naming it."""
        if not self.cells_dir.is_dir():
            return True
        for p in self.cells_dir.iterdir():
            if _is_tmp(p):
                continue
            if p.suffix != ".parquet":
                return False
            try:
                _, head = read_parquet(p, _KIND_CELL)
            except StoreError as err:
                raise StoreError(f"{err}; delete {p} to recompute that cell") from err
            if head.get("fingerprint") != fp or head.get("cell") != p.stem:
                return False
        return True

    def check_foreign(self, fp: str | None = None) -> None:
        """Refuse a non-empty directory that holds no manifest (files of interrupted writes of
        ours, `.*.tmp`, do not count), unless it holds only cells (and table) of the sweep with
        fingerprint `fp`, whose manifest was lost."""
        ours = {LOCK, CELLS}
        check_output(self.path, "--out", directory=True)
        if self.path.is_dir() and not self.exists():
            other = sorted(p.name for p in self.path.iterdir()
                           if p.name not in ours and not _is_tmp(p))
            ours_only = fp is not None and not set(other) - {TABLE}
            if ours_only and fp is not None and self.orphans_of(fp):
                return
            if other or self._has_cells():
                raise SweepError(f"{self.path} is not empty and is not a sweep directory (no "
                                 f"{MANIFEST}; found {', '.join(other) or CELLS + '/'}); "
                                 "refusing to write there: choose another --out"
                                 + (" (its cells/ are not all cells of this sweep)" if ours_only
                                    else ""))

    def prepare(self, config: SweepConfig, cells: list[Cell]) -> dict[str, Any]:
        """Create the manifest, or check that the existing one describes the same sweep."""
        meta = self.check_same(config, cells)
        if meta is not None:
            return meta
        meta = header(_KIND_SWEEP, fingerprint=_fingerprint(config, cells),
                      config=config.to_dict(), cells=[c.to_dict() for c in cells])
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.manifest_path, lambda tmp: tmp.write_text(json.dumps(meta, indent=1)))
        return meta

    def check_same(self, config: SweepConfig, cells: list[Cell]) -> dict[str, Any] | None:
        """The existing manifest if it describes this sweep, None when there is none (or only
        this sweep's cells, its manifest lost); SweepError, writing nothing, when the directory
        holds anything else."""
        fp = _fingerprint(config, cells)
        self.check_foreign(fp)
        meta = None
        if self.exists():
            try:
                meta = self.manifest()
            except _ManifestReadError:
                if not self.orphans_of(fp):
                    raise
        if meta is not None and meta["fingerprint"] != fp:
            raise SweepError(
                f"{self.path} holds a different sweep (kind {meta.get('config', {}).get('kind')!r},"
                f" {len(meta['cells'])} cells, fingerprint {meta['fingerprint']}; this config: "
                f"kind {config.kind!r}, {len(cells)} cells, fingerprint {fp}); choose another "
                "--out or delete that directory")
        return meta

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive flock on DIR/.lock (released by the kernel if the process dies)."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as err:
                raise SweepError(f"{self.path} is in use by another running sweep") from err
            yield
        finally:
            os.close(fd)

    def running(self) -> bool:
        """True when another process holds the lock."""
        if not (self.path / LOCK).exists():
            return False
        fd = os.open(self.path / LOCK, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def part_path(self, cell_id: str) -> Path:
        """Where a cell's row lives."""
        return self.cells_dir / f"{cell_id}.parquet"

    def clean(self) -> None:
        """Remove the temporary files of writes that a killed process left behind."""
        for d in (self.path, self.cells_dir):
            if d.is_dir():
                for p in d.iterdir():
                    if _is_tmp(p):
                        p.unlink(missing_ok=True)

    def parts(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Finished cells `{id: one-row pyarrow Table}`; temporary files of interrupted writes are
        ignored; any other file is an error naming it."""
        ids = {c["id"] for c in meta["cells"]}
        found: dict[str, Any] = {}
        if not self.cells_dir.is_dir():
            return found
        files = sorted(self.cells_dir.iterdir())
        for p in files:
            if not _is_tmp(p) and (p.suffix != ".parquet" or p.stem not in ids):
                raise SweepError(f"unexpected file {p} in the sweep directory (not a cell of this "
                                 "sweep); move it away")
        for p in files:
            if not _is_tmp(p):
                found[p.stem] = self._read_part(p, meta)
        return found

    def _read_part(self, p: Path, meta: dict[str, Any]) -> Any:
        try:
            table, head = read_parquet(p, _KIND_CELL)
        except StoreError as err:
            raise StoreError(f"{err}; delete {p} to recompute that cell") from err
        if head.get("fingerprint") != meta["fingerprint"] or head.get("cell") != p.stem:
            raise StoreError(f"{p} belongs to another sweep or cell (fingerprint "
                             f"{head.get('fingerprint')}, cell {head.get('cell')}); delete it")
        if table.num_rows != 1:
            raise StoreError(f"{p} holds {table.num_rows} rows, expected 1; delete it")
        return table

    def write_row(self, row: _Row, meta: dict[str, Any]) -> Path:
        """Write one finished cell atomically."""
        import pyarrow as pa

        head = header(_KIND_CELL, fingerprint=meta["fingerprint"], cell=row["cell"])
        return write_parquet(pa.Table.from_pylist([row]), self.part_path(row["cell"]), head)

    def consolidate(self, meta: dict[str, Any], parts: dict[str, Any] | None = None) -> Any:
        """All finished rows as one pyarrow Table in grid order."""
        import pyarrow as pa

        parts = self.parts(meta) if parts is None else parts
        order = [c["id"] for c in meta["cells"] if c["id"] in parts]
        if not order:
            return pa.table({c: pa.array([], pa.string()) for c in (*_HEAD_COLUMNS, "status")})
        table = _concat([parts[i] for i in order])
        grid = [k for b in meta["config"]["grid"] for k in b]
        params = list(dict.fromkeys([*grid, *(k for c in meta["cells"] for k in c["params"])]))
        head = [*_HEAD_COLUMNS, *params]
        stats = [n for n in table.column_names if n not in head and n not in _TAIL_COLUMNS]
        return table.select([*head, *stats, *_TAIL_COLUMNS])

    def read_table(self) -> tuple[Any, dict[str, Any]]:
        """DIR/table.parquet and its header; StoreError naming the file and the remedy."""
        try:
            return read_parquet(self.table_path, _KIND_TABLE)
        except StoreError as err:
            raise StoreError(f"{err}; {_TABLE_REMEDY.format(dir=self.path)}") from err

    def write_table(self, meta: dict[str, Any], parts: dict[str, Any] | None = None) -> Path:
        """Rebuild DIR/table.parquet from the parts (refusing to replace a foreign file there)."""
        if self.table_path.exists():
            self.read_table()
        table = self.consolidate(meta, parts)
        head = header(_KIND_TABLE, fingerprint=meta["fingerprint"], config=meta["config"],
                      cells=len(meta["cells"]), rows=table.num_rows)
        return write_parquet(table, self.table_path, head)


# ----------------------------------------------------------------------------- reading tables

def load_table(out: str | os.PathLike) -> Any:
    """The finished rows of the sweep in `out` as a pandas DataFrame (from the cell parts).

    Args:
        out: The sweep directory.

    Returns:
        A pandas DataFrame, one row per finished cell, in grid order.
    """
    sd = _SweepDir(out)
    return sd.consolidate(sd.manifest()).to_pandas()


def read_table(path: str | os.PathLike) -> Any:
    """A saved consolidated table (DIR or DIR/table.parquet) as a pandas DataFrame.

    Args:
        path: A sweep directory or its `table.parquet`.

    Returns:
        A pandas DataFrame.
    """
    p = Path(path)
    if p.is_dir():
        return _SweepDir(p).read_table()[0].to_pandas()
    try:
        table, _ = read_parquet(p, _KIND_TABLE)
    except StoreError as err:
        raise StoreError(f"{err}; {_TABLE_REMEDY.format(dir=p.parent)}") from err
    return table.to_pandas()


def _ok_rows(path: str | os.PathLike) -> Any:
    """The rows of status 'ok' of a saved consolidated table (`read_table`), as a pandas
    DataFrame: what the figures and the report read."""
    df = read_table(path)
    return df[df["status"] == "ok"].copy()


def _render_table(out: str | os.PathLike, fmt: str) -> str:
    """The finished rows of the sweep in `out` as CSV or JSON text (records)."""
    fmt = _check_choice("format (for text output)", fmt, ("csv", "json"))
    df = load_table(out)
    return df.to_csv(index=False) if fmt == "csv" else df.to_json(orient="records",
                                                                  indent=1) + "\n"


def export_table(out: str | os.PathLike, fmt: str = "parquet",
                 path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Rebuild DIR/table.parquet and, for csv/json or another `path`, write that file too
    (atomically); return where it went and how many cells it holds.

    Args:
        out: The sweep directory.
        fmt: 'parquet', 'csv' or 'json'.
        path: Where to write the table (default: inside `out`).

    Returns:
        `path`, `format`, `rows` and `cells` of the table written.
    """
    fmt = _check_choice("format", fmt, _FORMATS)
    if path is not None:
        check_output(path, "path")
    sd = _SweepDir(out)
    meta = sd.manifest()
    parts = sd.parts(meta)
    target = sd.write_table(meta, parts)
    if fmt != "parquet" or path is not None:
        target = Path(path) if path is not None else sd.path / f"table.{fmt}"
        if fmt == "parquet":
            if target.resolve() != sd.table_path.resolve():
                table, head = sd.read_table()
                write_parquet(table, target, head)
        else:
            text = _render_table(out, fmt)
            atomic_write(target, lambda tmp: tmp.write_text(text))
    return {"path": str(target), "format": fmt, "rows": len(parts), "cells": len(meta["cells"]),
            "pending": len(meta["cells"]) - len(parts)}
