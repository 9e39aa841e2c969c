"""Sweeps: one experiment kind over a parameter grid, run cell by cell, never losing a result.

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
`derive_seed(seed, *four 32-bit words of the hash)`. Nothing else enters a cell's numbers, so a
table does not depend on worker count, order or backend (cells run with one torch thread).

Layout of an output directory (the unit of atomicity is one cell)::

    DIR/sweep.json              manifest: config, every cell's id, parameters and seed
    DIR/cells/<id>.parquet      one row per finished cell (ok or error), written atomically
    DIR/table.parquet           consolidated table, rebuilt from cells/ after `run` and by `table`
    DIR/.lock                   flock held by the running sweep

A SIGKILL therefore loses at most the cells in flight. `run` on an existing DIR checks that it
holds the same sweep and skips finished cells (failed cells are retried). A truncated, foreign or
unexpected file stops the sweep with an error naming it; nothing is overwritten silently.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import itertools
import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import tomllib
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..io.store import StoreError, atomic_write, check_meta, check_output, header, read_parquet, write_parquet
from ..model.params import ParameterError, check_choice, check_int
from ..sim.budget import (
    GIB,
    WARN_HOURS,
    Budget,
    BudgetError,
    BudgetWarning,
    available_memory,
    check_budget,
    cpu_rate,
)
from ..sim.rng import derive_seed

KIND_SWEEP = "tokensde.sweep"
KIND_CELL = "tokensde.sweep-cell"
KIND_TABLE = "tokensde.sweep-table"
MANIFEST, CELLS, TABLE, LOCK = "sweep.json", "cells", "table.parquet", ".lock"
TOP_KEYS = ("name", "description", "kind", "module", "runs", "T", "seed", "params", "grid")
BACKENDS = ("local", "ray")
HEAD_COLUMNS = ("cell", "index")
TAIL_COLUMNS = ("status", "error", "seed", "version", "wall_s")
# Columns that legitimately differ between two runs of the same sweep.
TIMING_COLUMNS = ("wall_s",)
PRELOAD = ["tokensde.sweep.engine", "tokensde.sweep.kinds"]
WATCH_S = 0.5  # how often a pool worker checks that the sweep process still runs

Row = dict[str, Any]
OnCell = Callable[[Row, dict[str, int]], None]


class SweepError(ValueError):
    """A sweep config or output directory that cannot be used; the message says why."""


class ManifestReadError(StoreError):
    """DIR/sweep.json exists but is not JSON (truncated or corrupt)."""


REBUILD = ("its finished cells in cells/ are kept: run `tokensde sweep run CONFIG --out {dir}` "
           "with the sweep's TOML file to rebuild the manifest (the cells are checked against "
           "it and skipped)")
TABLE_REMEDY = ("delete it: `tokensde sweep table {dir}` rebuilds it from the cells (cells/), "
                "which are kept")


# ----------------------------------------------------------------------------- config and cells

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


def canonical(kind: str, params: Mapping[str, Any]) -> str:
    """The canonical JSON string of a normalised cell (sorted keys, shortest float repr)."""
    try:
        return json.dumps({"kind": kind, "params": dict(params)}, sort_keys=True,
                          separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"cell parameters must be finite numbers, strings or booleans: "
                             f"{err}") from err


def cell_seed(root: int, digest: str) -> int:
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
        extra = sorted(set(data) - set(TOP_KEYS))
        if extra:
            raise SweepError(f"{where}: unknown key(s) {', '.join(extra)} (allowed: "
                             f"{', '.join(TOP_KEYS)})")
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
        return cls(kind=str(data["kind"]), seed=check_int("seed", data["seed"], 0), grids=grids,
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
                text = canonical(self.kind, norm)
                digest = hashlib.sha256(text.encode()).hexdigest()
                if digest[:16] not in seen:
                    seen[digest[:16]] = Cell(len(seen), digest[:16], norm,
                                             cell_seed(self.seed, digest))
        return list(seen.values())


def fingerprint(config: SweepConfig, cells: list[Cell]) -> str:
    """Identity of a sweep: hash of its kind, root seed and the ordered cell ids."""
    text = json.dumps({"kind": config.kind, "seed": config.seed, "cells": [c.id for c in cells]})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- running one cell

@contextmanager
def _one_thread() -> Iterator[None]:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"statistic of type {type(value).__name__} (allowed: numbers, strings, "
                    "booleans and lists of them)")


def _base_row(cell: Mapping[str, Any]) -> Row:
    return {"cell": cell["id"], "index": cell["index"], **cell["params"]}


def _tail(cell: Mapping[str, Any], status: str, error: str, wall: float) -> Row:
    return {"status": status, "error": error, "seed": cell["seed"], "version": __version__,
            "wall_s": wall}


def error_row(cell: Mapping[str, Any], message: str, wall: float = 0.0) -> Row:
    """The row of a cell that failed with `message`."""
    return {**_base_row(cell), **_tail(cell, "error", message, wall)}


def execute_cell(task: Mapping[str, Any]) -> Row:
    """Run one cell (`task`: kind, module, id, index, params, seed) and return its table row.

    Never raises for a failing experiment: the row then has status 'error' and the message.
    """
    t0 = time.perf_counter()
    try:
        from .kinds import get_kind

        kind = get_kind(task["kind"], task.get("module"))
        with _one_thread():
            stats = kind.run(dict(task["params"]), int(task["seed"]))
        reserved = set(_base_row(task)) | set(TAIL_COLUMNS)
        clash = sorted(set(stats) & reserved)
        if clash:
            raise ValueError(f"statistics {clash} clash with parameter or table column names")
        stats = {str(k): _plain(v) for k, v in stats.items()}
    except Exception as err:
        return error_row(task, f"{type(err).__name__}: {err}", time.perf_counter() - t0)
    return {**_base_row(task), **stats, **_tail(task, "ok", "", time.perf_counter() - t0)}


# ----------------------------------------------------------------------------- backends

def _window(workers: int) -> int:
    return 2 * workers


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


def _worker_init(parent: int) -> None:
    """In each pool worker: leave SIGINT to the parent, and exit as soon as the parent is gone
    (SIGKILL, or SIGTERM from `timeout` or a batch scheduler), so no worker, forkserver or
    resource tracker outlives the sweep. The worker's own parent is the forkserver, so
    PR_SET_PDEATHSIG would not fire; a daemon thread polls the sweep process instead."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while _alive(parent):
            time.sleep(WATCH_S)
        os._exit(1)

    threading.Thread(target=watch, name="tokensde-parent-watch", daemon=True).start()


def _forkserver() -> Any:
    """The forkserver context, its server started with SIGINT ignored, so that it and every
    worker it forks leave Ctrl-C to the sweep process (no KeyboardInterrupt tracebacks from
    workers starting up)."""
    from multiprocessing import forkserver

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        forkserver.ensure_running()
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
    return ctx


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (a worker half started when the pool is
    stopped would print a traceback), then deliver them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old = {s: signal.signal(s, lambda n, _: held.append(n)) for s in (signal.SIGINT,
                                                                      signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for n in held:
            signal.raise_signal(n)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Kill the workers of `pool` at once (their cells in flight are dropped and rerun later)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def run_local(tasks: list[Row], workers: int) -> Generator[Row, None, None]:
    """Rows as cells finish, on a process pool of `workers` (in this process when 1).

    A worker that dies fails the cells in flight (recorded as errors) and the pool is restarted.
    Closed early (an interrupt, an error in the caller), it kills the workers at once; workers
    also exit by themselves when this process dies.
    """
    if workers == 1:
        yield from map(execute_cell, tasks)
        return
    ctx = _forkserver()
    pending = list(reversed(tasks))
    while pending:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(),))
        inflight: dict[Any, Row] = {}
        broken = False
        try:
            while pending or inflight:
                while pending and not broken and len(inflight) < _window(workers):
                    task = pending.pop()
                    with _signals_held():  # submit may start a worker
                        inflight[pool.submit(execute_cell, task)] = task
                if not inflight:
                    break
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    task = inflight.pop(fut)
                    try:
                        yield fut.result()
                    except BrokenProcessPool as err:
                        broken = True
                        yield error_row(task, f"worker process died with this cell in flight: "
                                              f"{err}")
        except BaseException:
            _stop(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


RAY_RETRIES = 3  # reruns of a cell whose worker process or node died


def run_ray(tasks: list[Row], workers: int, address: str | None = None
            ) -> Generator[Row, None, None]:
    """Rows as cells finish, on Ray: a local instance with `workers` CPUs, or the cluster at
    `address` (or the one this process is already connected to). A cell in flight on a node
    that dies is rerun on the nodes left (up to RAY_RETRIES times; then it is a failed row,
    rerun by the next `run`); each cell gives exactly one row. A Ray instance started here is
    shut down at the end (a cluster is only disconnected from)."""
    try:
        import ray
    except ImportError as err:
        raise SweepError("backend 'ray' needs Ray: pip install 'tokensde[ray]'") from err
    started = not ray.is_initialized()
    if started:
        opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            ray.init(address=address, **opts)
        else:
            ray.init(num_cpus=workers, **opts)
    try:
        # a cell never raises (its errors become rows), so a retry only follows a lost worker
        # or node: Ray runs it again elsewhere, and the same seed gives the same row
        remote = ray.remote(num_cpus=1, max_retries=RAY_RETRIES, retry_exceptions=False)(
            execute_cell)
        width = _window(int(ray.cluster_resources().get("CPU", workers)) if address else workers)
        pending = list(reversed(tasks))
        inflight: dict[Any, Row] = {}
        while pending or inflight:
            while pending and len(inflight) < width:
                task = pending.pop()
                inflight[remote.remote(task)] = task
            (ref,), _ = ray.wait(list(inflight), num_returns=1)
            task = inflight.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as err:
                yield error_row(task, f"Ray task failed: {type(err).__name__}: {err}")
    finally:
        if started:
            ray.shutdown()


# ----------------------------------------------------------------------------- the directory

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


class SweepDir:
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
        return "; " + REBUILD.format(dir=self.path) if self._has_cells() else ""

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
            raise ManifestReadError(f"{self.manifest_path} is not a readable sweep manifest "
                                     f"(truncated or corrupt?): {err}{self._hint()}") from err
        meta = check_meta(meta, KIND_SWEEP, str(self.manifest_path))
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
                _, head = read_parquet(p, KIND_CELL)
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
        fp = fingerprint(config, cells)
        self.check_foreign(fp)
        meta = None
        if self.exists():
            try:
                meta = self.manifest()
            except ManifestReadError:
                if not self.orphans_of(fp):
                    raise
        if meta is not None:
            if meta["fingerprint"] != fp:
                raise SweepError(
                    f"{self.path} holds a different sweep (kind {meta.get('config', {}).get('kind')!r},"
                    f" {len(meta['cells'])} cells, fingerprint {meta['fingerprint']}; this config: "
                    f"kind {config.kind!r}, {len(cells)} cells, fingerprint {fp}); choose another "
                    "--out or delete that directory")
            return meta
        meta = header(KIND_SWEEP, fingerprint=fp, config=config.to_dict(),
                      cells=[c.to_dict() for c in cells])
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.manifest_path, lambda tmp: tmp.write_text(json.dumps(meta, indent=1)))
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
            table, head = read_parquet(p, KIND_CELL)
        except StoreError as err:
            raise StoreError(f"{err}; delete {p} to recompute that cell") from err
        if head.get("fingerprint") != meta["fingerprint"] or head.get("cell") != p.stem:
            raise StoreError(f"{p} belongs to another sweep or cell (fingerprint "
                             f"{head.get('fingerprint')}, cell {head.get('cell')}); delete it")
        if table.num_rows != 1:
            raise StoreError(f"{p} holds {table.num_rows} rows, expected 1; delete it")
        return table

    def write_row(self, row: Row, meta: dict[str, Any]) -> Path:
        """Write one finished cell atomically."""
        import pyarrow as pa

        head = header(KIND_CELL, fingerprint=meta["fingerprint"], cell=row["cell"])
        return write_parquet(pa.Table.from_pylist([row]), self.part_path(row["cell"]), head)

    def consolidate(self, meta: dict[str, Any], parts: dict[str, Any] | None = None) -> Any:
        """All finished rows as one pyarrow Table in grid order."""
        import pyarrow as pa

        parts = self.parts(meta) if parts is None else parts
        order = [c["id"] for c in meta["cells"] if c["id"] in parts]
        if not order:
            return pa.table({c: pa.array([], pa.string()) for c in (*HEAD_COLUMNS, "status")})
        table = _concat([parts[i] for i in order])
        grid = [k for b in meta["config"]["grid"] for k in b]
        params = list(dict.fromkeys([*grid, *(k for c in meta["cells"] for k in c["params"])]))
        head = [*HEAD_COLUMNS, *params]
        stats = [n for n in table.column_names if n not in head and n not in TAIL_COLUMNS]
        return table.select([*head, *stats, *TAIL_COLUMNS])

    def read_table(self) -> tuple[Any, dict[str, Any]]:
        """DIR/table.parquet and its header; StoreError naming the file and the remedy."""
        try:
            return read_parquet(self.table_path, KIND_TABLE)
        except StoreError as err:
            raise StoreError(f"{err}; {TABLE_REMEDY.format(dir=self.path)}") from err

    def write_table(self, meta: dict[str, Any], parts: dict[str, Any] | None = None) -> Path:
        """Rebuild DIR/table.parquet from the parts (refusing to replace a foreign file there)."""
        if self.table_path.exists():
            self.read_table()
        table = self.consolidate(meta, parts)
        head = header(KIND_TABLE, fingerprint=meta["fingerprint"], config=meta["config"],
                      cells=len(meta["cells"]), rows=table.num_rows)
        return write_parquet(table, self.table_path, head)


# ----------------------------------------------------------------------------- the engine

def _tasks(config: SweepConfig, cells: Iterable[Cell]) -> list[Row]:
    return [{"kind": config.kind, "module": config.module, "id": c.id, "index": c.index,
             "params": c.params, "seed": c.seed} for c in cells]


def check_backend(backend: str, address: str | None) -> str:
    """`backend` if it can run here: one of BACKENDS, an address only with 'ray', and Ray
    installed for 'ray'."""
    backend = check_choice("backend", backend, BACKENDS)
    if address and backend != "ray":
        raise ParameterError(f"address is only used with backend='ray'; got backend={backend!r}")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise SweepError("backend 'ray' needs Ray, which is not installed: pip install "
                         "'tokensde[ray]'")
    return backend


def worker_bounds(workers: int, cells: int, backend: str = "local", address: str | None = None,
                  cell_bytes: int = 0, have: int | None = None) -> dict[str, int]:
    """What bounds the workers of a sweep: `asked`, the `cells` left to run and, on this machine
    (local pool, or a Ray instance started here), its `cpus` and the `memory` available (`have`
    bytes, default `budget.available_memory()`) over `cell_bytes`, the most one cell needs (0:
    not known). A Ray cluster at `address` is sized by its own CPUs and memory."""
    bounds = {"asked": workers, "cells": cells}
    if backend == "local" or not address:
        bounds["cpus"] = os.cpu_count() or 1
        if cell_bytes > 0:
            bounds["memory"] = (available_memory() if have is None else have) // cell_bytes
    return bounds


def worker_cap(workers: int, cells: int, backend: str = "local", address: str | None = None,
               cell_bytes: int = 0, have: int | None = None) -> int:
    """The workers a sweep starts: the least of `worker_bounds`, and at least 1."""
    return max(1, min(worker_bounds(workers, cells, backend, address, cell_bytes, have).values()))


def cell_budgets(config: SweepConfig, cells: Iterable[Cell]) -> list[tuple[Cell, Budget]]:
    """The memory and work of each cell whose kind estimates them (`ExperimentKind.budget`); a
    cell whose estimate fails is left out (it fails with its message when it runs)."""
    from .kinds import get_kind

    estimate = get_kind(config.kind, config.module).budget
    out = []
    if estimate is not None:
        for c in cells:
            try:
                out.append((c, estimate(dict(c.params))))
            except (ParameterError, ValueError):
                continue
    return out


def check_cells(budgets: list[tuple[Cell, Budget]], workers: int, have: int | None = None,
                warn: bool = True) -> None:
    """Before any cell runs: refuse (BudgetError) a sweep one of whose cells cannot fit in the
    memory available or, run to its horizon, needs more than TOKENSDE_MAX_HOURS on one core; with
    `warn`, a BudgetWarning when the cells need more than WARN_HOURS on `workers` cores at the
    fast rate. `have`: bytes available to one cell (default `budget.available_memory()`)."""
    have = available_memory() if have is None else have
    one = cpu_rate(1)
    for c, b in budgets:
        try:
            check_budget(b, have, rate=one, warn=False)
        except BudgetError as err:
            raise BudgetError(f"cell {c.index} ({c.id}, {c.params}): {err}") from None
    work = sum(b.work for _, b in budgets)
    if warn and work / (one * workers) > 3600 * WARN_HOURS:
        warnings.warn(f"the {len(budgets)} cells left need about "
                      f"{work / (one * workers) / 60:.3g} min on {workers} worker"
                      f"{'s' * (workers > 1)} ({work:.3g} flop-ish units at {one:.3g}/s a "
                      "worker, a fast rate; runs that stop once decided take less)",
                      BudgetWarning,
                      stacklevel=3)


def _ordered(todo: list[Cell], order: Callable[[list[Cell]], list[Cell]] | None) -> list[Cell]:
    if order is None:
        return todo
    new = list(order(list(todo)))
    if sorted(c.id for c in new) != sorted(c.id for c in todo):
        raise SweepError("a sweep order must return a permutation of the cells it is given")
    return new


def _rows(tasks: list[Row], workers: int, backend: str, address: str | None
          ) -> Generator[Row, None, None]:
    if backend == "ray":
        return run_ray(tasks, workers, address)
    return run_local(tasks, workers)


def run_sweep(config: SweepConfig | str | os.PathLike, out: str | os.PathLike, *,
              workers: int = 1, backend: str = "local", address: str | None = None,
              on_cell: OnCell | None = None, on_start: Callable[[dict[str, int]], None] | None
              = None, order: Callable[[list[Cell]], list[Cell]] | None = None
              ) -> dict[str, Any]:
    """Run (or resume) a sweep into directory `out`; return a summary.

    Each finished cell is written at once; `on_start(counts)` is called before the first cell and
    `on_cell(row, counts)` after each, with counts `total`, `done`, `failed`, `skipped`.
    `order(todo)` may reorder the cells still to run (a permutation of them): which cells finish
    first, never what they hold nor the table, which is in grid order.
    """
    cfg = config if isinstance(config, SweepConfig) else SweepConfig.load(config)
    workers = check_int("workers", workers, 1)
    backend = check_backend(backend, address)
    cells = cfg.cells()
    sd = SweepDir(out)
    sd.check_foreign(fingerprint(cfg, cells))
    t0 = time.perf_counter()
    budgets = cell_budgets(cfg, cells)
    # a Ray cluster at an address has memory of its own, not known here
    have = available_memory() if backend == "local" or not address else sys.maxsize
    if not sd.exists():  # refused before the directory is made, so a smaller sweep can use it
        check_cells(budgets, 1, have, warn=False)
    with sd.lock():
        meta = sd.prepare(cfg, cells)
        parts = sd.parts(meta)
        sd.clean()
        ok = {i for i, t in parts.items() if t.column("status")[0].as_py() == "ok"}
        todo = _ordered([c for c in cells if c.id not in ok], order)
        counts = {"total": len(cells), "done": len(ok), "failed": 0, "skipped": len(ok),
                  "ran": 0}
        if on_start is not None:
            on_start(dict(counts))
        budgets = [(c, b) for c, b in budgets if c.id not in ok]
        cell_bytes = max((b.memory for _, b in budgets), default=0)
        bounds = worker_bounds(workers, len(todo), backend, address, cell_bytes, have)
        used = max(1, min(bounds.values()))
        check_cells(budgets, used, have)
        if bounds.get("memory", used) < min(workers, len(todo), bounds.get("cpus", workers)):
            warnings.warn(f"{used} worker{'s' * (used > 1)} of {workers} asked: a cell needs up "
                          f"to {cell_bytes / GIB:.3g} GiB, {have / GIB:.3g} GiB available",
                          BudgetWarning, stacklevel=2)
        # closing: an interrupt stops the workers at once, not when the generator is collected
        with closing(_rows(_tasks(cfg, todo), used, backend, address)) as rows:
            for row in rows:
                sd.check_intact(meta, counts)
                sd.write_row(row, meta)
                counts["done"] += 1
                counts["ran"] += 1
                counts["failed"] += row["status"] != "ok"
                if on_cell is not None:
                    on_cell(row, dict(counts))
        sd.check_intact(meta, counts)
        parts = sd.parts(meta)
        if len(parts) != counts["done"]:
            raise SweepError(f"{sd.cells_dir} holds {len(parts)} finished cells, but this run "
                             f"counted {counts['done']}: cells were removed while the sweep "
                             "ran; run the same command again to recompute them")
        table = sd.write_table(meta, parts)
    return {**counts, "rows": len(parts), "dir": str(sd.path), "table": str(table),
            "backend": backend, "workers": used, "workers_asked": workers,
            "workers_bounds": bounds, "cell_memory_gib": cell_bytes / GIB,
            "wall_s": time.perf_counter() - t0}


def sweep_status(out: str | os.PathLike) -> dict[str, Any]:
    """Progress of the sweep in `out`: counts, failures, whether it is running now."""
    sd = SweepDir(out)
    meta = sd.manifest()
    parts = sd.parts(meta)
    failures = []
    for c in meta["cells"]:
        t = parts.get(c["id"])
        if t is not None and t.column("status")[0].as_py() != "ok":
            failures.append({"cell": c["id"], "index": c["index"], "params": c["params"],
                             "error": t.column("error")[0].as_py()})
    cfg = meta["config"]
    return {"dir": str(sd.path), "name": cfg.get("name"), "kind": cfg.get("kind"),
            "fingerprint": meta["fingerprint"], "version": meta.get("version"),
            "total": len(meta["cells"]), "done": len(parts), "failed": len(failures),
            "pending": len(meta["cells"]) - len(parts), "running": sd.running(),
            "failures": failures}


def load_table(out: str | os.PathLike) -> Any:
    """The finished rows of the sweep in `out` as a pandas DataFrame (from the cell parts)."""
    sd = SweepDir(out)
    return sd.consolidate(sd.manifest()).to_pandas()


def read_table(path: str | os.PathLike) -> Any:
    """A saved consolidated table (DIR or DIR/table.parquet) as a pandas DataFrame."""
    p = Path(path)
    if p.is_dir():
        return SweepDir(p).read_table()[0].to_pandas()
    try:
        table, _ = read_parquet(p, KIND_TABLE)
    except StoreError as err:
        raise StoreError(f"{err}; {TABLE_REMEDY.format(dir=p.parent)}") from err
    return table.to_pandas()


FORMATS = ("parquet", "csv", "json")


def render_table(out: str | os.PathLike, fmt: str) -> str:
    """The finished rows of the sweep in `out` as CSV or JSON text (records)."""
    fmt = check_choice("format (for text output)", fmt, ("csv", "json"))
    df = load_table(out)
    return df.to_csv(index=False) if fmt == "csv" else df.to_json(orient="records",
                                                                  indent=1) + "\n"


def export_table(out: str | os.PathLike, fmt: str = "parquet",
                 path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Rebuild DIR/table.parquet and, for csv/json or another `path`, write that file too
    (atomically); return where it went and how many cells it holds."""
    fmt = check_choice("format", fmt, FORMATS)
    if path is not None:
        check_output(path, "path")
    sd = SweepDir(out)
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
            text = render_table(out, fmt)
            atomic_write(target, lambda tmp: tmp.write_text(text))
    return {"path": str(target), "format": fmt, "rows": len(parts), "cells": len(meta["cells"]),
            "pending": len(meta["cells"]) - len(parts)}
