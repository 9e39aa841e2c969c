"""Sweep backends: running one cell, and running many on a local process pool or on Ray.

A cell runs with one torch thread and never raises: a failing experiment gives a row with status
'error'. The local pool is a forkserver pool whose workers leave Ctrl-C to the sweep process and
exit when it dies; Ray runs cells on a local instance or a cluster, rerunning a cell whose node
died. Both yield one row per cell, as cells finish.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from .._version import __version__
from ..model.params import ParameterError, _check_choice
from ..sim.budget import available_memory
from .config import _TAIL_COLUMNS, SweepError, _Row

_BACKENDS = ("local", "ray")
_PRELOAD = ["tokensde.sweep.backends", "tokensde.sweep.kinds"]
_WATCH_S = 0.5  # how often a pool worker checks that the sweep process still runs


# ----------------------------------------------------------------------------- running one cell

@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Torch on one thread inside the block (a pool's worker process), restored after."""
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


def _base_row(cell: Mapping[str, Any]) -> _Row:
    return {"cell": cell["id"], "index": cell["index"], **cell["params"]}


def _tail(cell: Mapping[str, Any], status: str, error: str, wall: float) -> _Row:
    return {"status": status, "error": error, "seed": cell["seed"], "version": __version__,
            "wall_s": wall}


def _error_row(cell: Mapping[str, Any], message: str, wall: float = 0.0) -> _Row:
    """The row of a cell that failed with `message`."""
    return {**_base_row(cell), **_tail(cell, "error", message, wall)}


def _execute_cell(task: Mapping[str, Any]) -> _Row:
    """Run one cell (`task`: kind, module, id, index, params, seed) and return its table row.

    Never raises for a failing experiment: the row then has status 'error' and the message.
    """
    t0 = time.perf_counter()
    try:
        from .kinds import get_kind

        kind = get_kind(task["kind"], task.get("module"))
        with _one_torch_thread():
            stats = kind.run(dict(task["params"]), int(task["seed"]))
        reserved = set(_base_row(task)) | set(_TAIL_COLUMNS)
        clash = sorted(set(stats) & reserved)
        if clash:
            raise ValueError(f"statistics {clash} clash with parameter or table column names")
        stats = {str(k): _plain(v) for k, v in stats.items()}
    except Exception as err:
        return _error_row(task, f"{type(err).__name__}: {err}", time.perf_counter() - t0)
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
            time.sleep(_WATCH_S)
        os._exit(1)

    threading.Thread(target=watch, name="tokensde-parent-watch", daemon=True).start()


def _forkserver() -> Any:
    """The forkserver context, its server started with SIGINT ignored, so that it and every
    worker it forks leave Ctrl-C to the sweep process (no KeyboardInterrupt tracebacks from
    workers starting up)."""
    from multiprocessing import forkserver

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
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


def _run_local(tasks: list[_Row], workers: int) -> Generator[_Row, None, None]:
    """Rows as cells finish, on a process pool of `workers` (in this process when 1).

    A worker that dies fails the cells in flight (recorded as errors) and the pool is restarted.
    Closed early (an interrupt, an error in the caller), it kills the workers at once; workers
    also exit by themselves when this process dies.
    """
    if workers == 1:
        yield from map(_execute_cell, tasks)
        return
    ctx = _forkserver()
    pending = list(reversed(tasks))
    while pending:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(),))
        inflight: dict[Any, _Row] = {}
        broken = False
        try:
            while pending or inflight:
                while pending and not broken and len(inflight) < _window(workers):
                    task = pending.pop()
                    with _signals_held():  # submit may start a worker
                        inflight[pool.submit(_execute_cell, task)] = task
                if not inflight:
                    break
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    task = inflight.pop(fut)
                    try:
                        yield fut.result()
                    except BrokenProcessPool as err:
                        broken = True
                        yield _error_row(task, f"worker process died with this cell in flight: "
                                              f"{err}")
        except BaseException:
            _stop(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


_RAY_RETRIES = 3  # reruns of a cell whose worker process or node died


def _run_ray(tasks: list[_Row], workers: int, address: str | None = None
            ) -> Generator[_Row, None, None]:
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
        remote = ray.remote(num_cpus=1, max_retries=_RAY_RETRIES, retry_exceptions=False)(
            _execute_cell)
        width = _window(int(ray.cluster_resources().get("CPU", workers)) if address else workers)
        pending = list(reversed(tasks))
        inflight: dict[Any, _Row] = {}
        while pending or inflight:
            while pending and len(inflight) < width:
                task = pending.pop()
                inflight[remote.remote(task)] = task
            (ref,), _ = ray.wait(list(inflight), num_returns=1)
            task = inflight.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as err:
                yield _error_row(task, f"Ray task failed: {type(err).__name__}: {err}")
    finally:
        if started:
            ray.shutdown()


# ----------------------------------------------------------------------------- choosing a backend

def _check_backend(backend: str, address: str | None) -> str:
    """`backend` if it can run here: one of BACKENDS, an address only with 'ray', and Ray
    installed for 'ray'."""
    backend = _check_choice("backend", backend, _BACKENDS)
    if address and backend != "ray":
        raise ParameterError(f"address is only used with backend='ray'; got backend={backend!r}")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise SweepError("backend 'ray' needs Ray, which is not installed: pip install "
                         "'tokensde[ray]'")
    return backend


def _worker_bounds(workers: int, cells: int, backend: str = "local", address: str | None = None,
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


def _worker_cap(workers: int, cells: int, backend: str = "local", address: str | None = None,
               cell_bytes: int = 0, have: int | None = None) -> int:
    """The workers a sweep starts: the least of `worker_bounds`, and at least 1."""
    return max(1, min(_worker_bounds(workers, cells, backend, address, cell_bytes, have).values()))
