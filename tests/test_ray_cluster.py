"""The Ray backend on a two-node cluster started with `ray start` on this machine (the recipe of
docs/ray.md): the worker node is killed in the middle of a sweep; the cells lost with it are run
again on the head, each cell gives one row, and the table equals the local backend's.

Every process of the cluster is started in a session of its own and ended by its process group
when the test ends, pass or fail (never `ray stop`, which would end every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

import tokensde
from tokensde.sweep.config import _TIMING_COLUMNS
from tokensde.sweep.engine import run_sweep
from tokensde.sweep.store import load_table

pytestmark = pytest.mark.ray

CONFIG = """
kind = "multi_token"
runs = 300
T = 3.0
seed = 11
[params]
dt = 0.01
n = 8
[grid]
beta = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
d = [3]
"""
START_S = 60  # the two nodes must be up within this


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """`ray start ... --block` in a session of its own (so its whole group can be ended)."""
    return subprocess.Popen(["ray", "start", *args, "--block"], stdout=log.open("w"),
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _end(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """End the process group of `proc` (the raylet, its workers, the head's GCS)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@pytest.fixture
def cluster():
    """A head (1 CPU) and a worker node (1 CPU): yields (address, worker process)."""
    ray = pytest.importorskip("ray")
    if shutil.which("ray") is None:
        pytest.skip("the `ray` command is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="tsr", dir="/tmp"))  # short: Ray's socket paths
    src = str(Path(tokensde.__file__).resolve().parents[1])
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs = []
    old = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    try:
        procs.append(_start(["--head", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false", f"--temp-dir={tmp}"],
                            tmp / "head.log", env))
        deadline = time.monotonic() + START_S
        while True:  # the head's GCS accepts the worker once it listens
            time.sleep(1)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
                break
            except (ConnectionError, RuntimeError):
                if time.monotonic() > deadline or procs[0].poll() is not None:
                    pytest.fail("the Ray head did not start:\n" + (tmp / "head.log").read_text())
        procs.append(_start([f"--address={address}", "--num-cpus=1"], tmp / "worker.log", env))
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            if time.monotonic() > deadline or procs[1].poll() is not None:
                pytest.fail("the worker node did not join:\n" + (tmp / "worker.log").read_text())
            time.sleep(0.5)
        yield address, procs[1]
    finally:
        ray.shutdown()
        for p in reversed(procs):
            _end(p)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_killed_worker_node_loses_no_cell_and_duplicates_none(cluster, tmp_path):
    address, worker = cluster
    cfg = tmp_path / "s.toml"
    cfg.write_text(CONFIG)
    local = run_sweep(cfg, tmp_path / "local")
    rows, killed = [], []

    def on_cell(row, counts):
        rows.append(row["cell"])
        if not killed:  # the first cell is back: the worker node holds cells in flight
            killed.append(time.monotonic())
            _end(worker)

    summary = run_sweep(cfg, tmp_path / "ray", backend="ray", address=address, workers=2,
                        on_cell=on_cell)
    assert killed and worker.poll() is not None  # the node really died mid-sweep
    assert summary["failed"] == 0 and summary["rows"] == summary["total"] == 6
    assert sorted(rows) == sorted(set(rows)) and len(rows) == 6  # one row per cell
    ours = load_table(tmp_path / "ray").drop(columns=list(_TIMING_COLUMNS))
    ref = load_table(tmp_path / "local").drop(columns=list(_TIMING_COLUMNS))
    assert local["failed"] == 0
    pd.testing.assert_frame_equal(ours, ref)
