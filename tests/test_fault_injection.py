"""Fault injection: each long command, at its smallest size, runs in a forked process that is
killed with SIGKILL at a random point (three seeds of the kill time), or meets a full disk at a
random write, then is resumed with the same command; its final results must equal those of one
uninterrupted run.

Equal means byte for byte, except for the fields that hold a wall time by design (`TIMED`, in the
Parquet rows and JSON documents): those are compared by name and type only. Parquet files are
compared through their schema, header and rows (their bytes embed the timed columns).

`reproduce` runs at its smallest size and one section (`--size tiny --only token-noise`, about
4 s of CPU: every figure at once would not fit this file's budget); its sweep and its figure are
compared, not its report page, which records wall times and the date.
"""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokensde.cli import app

pytestmark = pytest.mark.slow

TIMED = frozenset({"wall_s", "train_s", "sim_wall_s"})  # wall times: by name and type only
KILL_SEEDS = (0, 1, 2)
DISK_SEEDS = (0, 1)
SWEEPS = Path(__file__).resolve().parents[1] / "src" / "tokensde" / "study" / "sweeps"
VIT_TOML = """kind = "vit_depth"
seed = 1
[params]
block = "attention-only"
dataset = "digits"
dim = 16
train_subset = 256
test_subset = 64
batch_size = 32
probe_images = 8
epochs = 1
[grid]
arm = ["default", "noise:0"]
depth = [2, 4]
train_seed = [0]
"""


@dataclass(frozen=True)
class Command:
    """A long command at its smallest size: its arguments given the folder it runs in, and the
    results it leaves there (paths relative to that folder)."""

    name: str
    args: Callable[[Path], list[str]]
    results: tuple[str, ...]


COMMANDS = [
    Command("sweep run", lambda w: ["sweep", "run", str(SWEEPS / "smoke.toml"), "--out",
                                    str(w / "out"), "--quiet"], ("out",)),
    Command("meanfield table", lambda w: [
        "meanfield", "table", "--start", "iid", "--beta", "3", "--beta", "0.5", "--n", "8",
        "--n", "12", "--K", "16", "--runs", "3", "--time", "20", "--dt", "0.05", "--out",
        str(w / "out")], ("out",)),
    Command("two-token grid", lambda w: [
        "two-token", "grid", "--out", str(w / "out"), "--figure", str(w / "grid.png"), "--betas",
        "0.5,2", "--ds", "3,4", "--runs", "6", "--time", "4", "--no-progress"],
        ("out", "grid.png")),
    Command("token-noise order", lambda w: [
        "token-noise", "order", "--n", "64", "--runs", "2", "--time", "30", "--burn", "10",
        "--out", str(w / "order.json")], ("order.json",)),
    Command("reproduce", lambda w: ["reproduce", "--size", "tiny", "--only", "token-noise",
                                    "--workers", "1", "--out", str(w / "out")],
            ("out/sweeps", "out/figures")),
    Command("vit depth", lambda w: ["vit", "depth", "--size", str(w.parent / "vit.toml"),
                                    "--workers", "1", "--quiet", "--out", str(w / "out")],
            ("out",)),
]
IDS = [c.name.replace(" ", "-") for c in COMMANDS]


def _strip(doc: Any) -> Any:
    """A JSON document with every `TIMED` value replaced by its type name."""
    if isinstance(doc, dict):
        return {k: type(v).__name__ if k in TIMED else _strip(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def _content(path: Path) -> Any:
    """What must be equal in a results file (see the module's docstring)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        meta = {k: _strip(json.loads(v)) if k == b"tokensde" else v
                for k, v in (t.schema.metadata or {}).items()}
        rows = [{k: type(v).__name__ if k in TIMED else v for k, v in r.items()}
                for r in t.to_pylist()]
        # as JSON text: floats by their exact repr, and nan equal to nan
        return str(t.schema.remove_metadata()), meta, json.dumps(rows, default=str)
    if path.suffix == ".json":
        return _strip(json.loads(path.read_text()))
    return path.read_bytes()


def results(where: Path, cmd: Command) -> dict[str, Any]:
    """The comparable content of every file of `cmd`'s results under `where` (lock files, which
    are empty and ours, and the hidden temporary file of a write killed before its rename, which
    no results reader opens, left out)."""
    out: dict[str, Any] = {}
    for name in cmd.results:
        root = where / name
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in files:
            if p.name == ".lock" or (p.name.startswith(".") and p.name.endswith(".tmp")):
                continue  # the lock, and a temporary file of a write that a SIGKILL cut short
            out[str(p.relative_to(where))] = _content(p)
    return out


def run_here(args: list[str]) -> Any:
    """The command run in this process (as `tokensde ...`)."""
    return CliRunner().invoke(app, args)


def _resume(args: list[str]) -> None:
    """Run the same command again: it finishes the work, or (a lone output file that the
    killed run had already written) refuses to replace it."""
    res = run_here(args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert res.exit_code == 0 or "exists; choose another" in res.output, res.output


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A folder with the tiny ViT sweep file; torch on one thread (so that the forked processes
    use no thread pool), and the commands' modules imported (the work is timed without them)."""
    import pyarrow.parquet  # noqa: F401
    import torch

    import tokensde.sim.simulate
    import tokensde.study
    import tokensde.sweep.engine
    import tokensde.vit  # noqa: F401

    root = tmp_path_factory.mktemp("faults")
    (root / "vit.toml").write_text(VIT_TOML)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield root
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reference(base) -> dict[str, tuple[dict[str, Any], float, int]]:
    """Per command: the results of an uninterrupted run, the wall time of its work, and the
    number of files it wrote (atomic renames). It runs twice, in two folders: the second run
    must give the same results, and is the one timed (the first one also fills the caches that
    a forked process inherits)."""
    refs = {}
    for cmd in COMMANDS:
        got = []
        for take in ("cold", "warm"):
            where = base / f"{take}-{cmd.name.replace(' ', '-')}"
            where.mkdir()
            count = _Writes()
            t0 = time.perf_counter()
            with count:
                res = run_here(cmd.args(where))
            assert res.exit_code == 0, res.output
            got.append((results(where, cmd), time.perf_counter() - t0, count.calls))
        assert got[1][0] == got[0][0], f"two uninterrupted runs of {cmd.name} differ"
        refs[cmd.name] = got[1]
    return refs


class _Writes:
    """Counts atomic renames (`os.replace`, the last step of every results write) and, from the
    `fail_at`-th on, fails them as a full disk would: the temporary file is cut to half its
    length and OSError(ENOSPC) raised."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls, self.fail_at, self.failed = 0, fail_at, 0
        self._replace = os.replace

    def replace(self, src: Any, dst: Any, **kw: Any) -> None:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            self.failed += 1
            data = Path(src).read_bytes()
            Path(src).write_bytes(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        self._replace(src, dst, **kw)

    def __enter__(self) -> _Writes:
        self._mp = pytest.MonkeyPatch()
        self._mp.setattr(os, "replace", self.replace)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mp.undo()


def _child(args: list[str]) -> None:
    """The forked process: the command, then an exit that runs no handler of the parent's."""
    res = run_here(args)
    os._exit(res.exit_code)


def _kill_at_random(args: list[str], seed: int, work_s: float) -> bool:
    """Run the command in a forked process, SIGKILL it at a time drawn (seeded) uniformly over
    5 to 95 % of its work (`work_s`, measured in this process); True when it was still running.

    Forked from this process, the child starts with every module imported, so the kill lands
    in the command's work, and no interpreter start is paid."""
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child, args=(args,))
    proc.start()
    try:
        at = random.Random(seed).uniform(0.05, 0.95) * work_s
        time.sleep(at)
    finally:
        assert proc.pid is not None
        with contextlib.suppress(ProcessLookupError):  # it is gone once it has finished
            os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    assert proc.exitcode in (-signal.SIGKILL, 0)
    print(f"{args[:2]}: kill at {at:.2f} s of {work_s:.2f} s, "
          f"{'killed' if proc.exitcode else 'had finished'}")  # shown with pytest -s
    return proc.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("cmd", COMMANDS, ids=IDS)
def test_sigkill_at_random_points_then_resume_gives_the_same_results(base, reference, cmd):
    want, work_s, _ = reference[cmd.name]
    landed = 0
    for seed in KILL_SEEDS:
        where = base / f"kill{seed}-{cmd.name.replace(' ', '-')}"
        where.mkdir()
        landed += _kill_at_random(cmd.args(where), seed, work_s)
        _resume(cmd.args(where))
        got = results(where, cmd)
        assert sorted(got) == sorted(want), f"kill seed {seed}"
        for name in want:
            assert got[name] == want[name], f"kill seed {seed}: {name} differs"
    assert landed >= 1, "every kill came after the command had finished"


@pytest.mark.parametrize("seed", DISK_SEEDS)
@pytest.mark.parametrize("cmd", COMMANDS, ids=IDS)
def test_full_disk_at_a_random_write_then_resume_gives_the_same_results(base, reference, cmd,
                                                                          seed):
    want, _, writes = reference[cmd.name]
    fail_at = random.Random(f"{cmd.name} {seed}").randint(1, writes)
    where = base / f"full{seed}-{cmd.name.replace(' ', '-')}"
    where.mkdir()
    with _Writes(fail_at) as disk:
        res = run_here(cmd.args(where))
    assert disk.failed >= 1
    assert res.exit_code == 2, res.output
    last = [line for line in res.output.splitlines() if line.startswith("error: ")]
    assert last and "No space left on device" in last[-1], res.output
    assert "Traceback" not in res.output
    assert not [p for p in where.rglob("*.tmp")], "a temporary file was left behind"
    _resume(cmd.args(where))
    got = results(where, cmd)
    assert got == want, f"full disk at write {fail_at} of {writes}"
